"""NVSwitch datapath: cocotb suites against the reference model (see verif/tb/switch.py)."""

import pytest

from verif.harness.runner import run_cocotb

TB = "verif.tb.switch"


# The tests of one design point share one simulator run (tests/conftest.py: shared_run), each a scenario
# from reset with its own seed and result.
def at(params, testcase, env=None):
    return pytest.mark.shared_run("switch", params, TB, testcase, env=env)


@pytest.mark.parametrize("ports", [4, 8, pytest.param(16, marks=pytest.mark.slow)])    # 16 ports: 9 s more
@at(lambda ports: {"ports": ports}, "test_traffic", env=lambda ports: {"packets": {4: 40, 8: 25, 16: 12}[ports]})
def test_traffic(ports, shared_run):
    shared_run()


# The registered-request form (the default from 32 ports) at small port counts: the same scoreboards, every
# input also ignored while its grant is on the way, and one more cycle of zero-load latency.
@pytest.mark.parametrize("ports,extra", [(4, {}), (8, {"mc_frac": 1.0, "gap": 0.0, "stall": 0.0})])
@at(lambda ports: {"ports": ports, "req_stage": True}, "test_traffic",
    env=lambda ports, extra: {"packets": 30 if ports == 4 else 20, **extra})
def test_traffic_registered_requests(ports, extra, shared_run):
    shared_run()


@at({"ports": 4, "req_stage": True}, "test_bad_input")
def test_bad_input_registered_requests(shared_run):
    shared_run()


@at({"ports": 4, "req_stage": True}, "test_zero_load_latency")
def test_zero_load_latency_registered_requests(shared_run):
    shared_run()


def test_traffic_fifo_variant(seed, sim):
    run_cocotb("switch_fifo", {"ports": 8}, test_module=TB, testcase="test_traffic", seed=seed, sim=sim,
               env={"packets": 20})


@at({"ports": 8}, "test_traffic", env={"packets": 20, "mc_frac": 1.0, "gap": 0.0, "stall": 0.0})
def test_traffic_no_stalls_all_multicast(shared_run):
    shared_run()


def test_traffic_small_credits(seed, sim):
    # The smallest input buffer that carries multicast: one whole packet (credits = max_payload + 1).
    run_cocotb("switch", {"ports": 4, "credits": 4, "max_payload": 3, "out_credits": 2}, test_module=TB,
               testcase="test_traffic", seed=seed, sim=sim, env={"packets": 30})


# Per-pair order across an input's two kinds of queue while input 0's unicasts P and Q wait for a stalled
# output A and its later packets to other outputs flow, then a multicast to A and B waits behind another
# multicast (verif.tb.switch.test_pair_order_lapped). A small input buffer (6 cells: 7-bit arrival numbers,
# lap_threshold 56) keeps the scenario short; it holds P, Q and three more packets, so both head-order
# updates (the mask queue's dequeue, then P's) compare P and Q with packets many arrivals newer.
LAP_POINT = {"ports": 4, "credits": 5, "max_payload": 3, "out_credits": 2}


def test_pair_order_within_arrival_window(seed, sim):
    """The multicast 54 arrivals after P (below lap_threshold, 56): every round flows; P, Q, then the
    multicast."""
    run_cocotb("switch", LAP_POINT, test_module=TB, testcase="test_pair_order_lapped", seed=seed, sim=sim,
               env={"rounds": 26})


def test_pair_order_past_arrival_window(seed, sim):
    """The multicast 66 arrivals after P (past 2**6, the arrival numbers' half range at 6 cells): the input
    holds its credits from lap_threshold arrivals on, until P leaves; then P, Q, the multicast, all
    delivered."""
    run_cocotb("switch", LAP_POINT, test_module=TB, testcase="test_pair_order_lapped", seed=seed, sim=sim)


@pytest.mark.parametrize("speedup", [1, 2])
def test_mask_past_stalled_unicast(speedup, seed, sim):
    """A multicast goes while the same input's unicast waits for a stalled output."""
    run_cocotb("switch", {**LAP_POINT, "speedup": speedup}, test_module=TB,
               testcase="test_mask_past_stalled_unicast", seed=seed, sim=sim)


# Every unicast packet short (at most 2 flits): inputs and outputs start a packet every cycle, each read
# in one cycle; heavy output stalls keep the output queues near their admission limit. A short transfer
# that stalled would be overrun by the next one and the scoreboard would see it lost or interleaved.
@pytest.mark.parametrize("speedup", [1, 2])
def test_traffic_short_packets(speedup, seed, sim):
    run_cocotb("switch", {"ports": 4, "max_payload": 1, "speedup": speedup}, test_module=TB,
               testcase="test_traffic", seed=seed, sim=sim,
               env={"packets": 60, "gap": 0.0, "stall": 0.5, "mc_frac": 0.1})


# Every unicast packet counted (1 to 5 flits, read in 1 to 3 cycles): an input and an output start their
# next transfer right after the last read of the current one, with heavy output stalls keeping the output
# queues near their admission limit. A counted transfer that stalled or ended late would be overrun by the
# next one and the scoreboard would see it lost, interleaved or out of order.
@pytest.mark.parametrize("max_payload", [2, 4])
def test_traffic_counted_transfers(max_payload, seed, sim):
    run_cocotb("switch", {"ports": 4, "max_payload": max_payload}, test_module=TB,
               testcase="test_traffic", seed=seed, sim=sim,
               env={"packets": 50, "gap": 0.0, "stall": 0.5, "mc_frac": 0.1})


@pytest.mark.parametrize("ports", [4, 8])
@at(lambda ports: {"ports": ports}, "test_bad_input")
def test_bad_input(ports, shared_run):
    shared_run()


# One scenario per kind of bad input (the names of verif.tb.switch.bad_packets), each alone among good
# traffic: the packet is dropped whole (or, for a length that disagrees with its flits, ended with a
# poisoned flit), the error response and the per-cause counter match the model, other traffic is intact.
BAD_KINDS = ["unknown opcode", "unknown opcode with payload", "too short", "too long",
             "header-only with trailing flits", "length above max", "zero mask", "mask beyond ports",
             "unconfigured group", "bad dst", "bad reduction type"]


@at({"ports": 4}, [("test_bad_input", {"kind": k, "rounds": 2}) for k in BAD_KINDS])
def test_bad_input_kind(shared_run):
    """The 11 kinds, each a scenario of the 4-port switch's shared run."""
    shared_run()


# 8 ports: a scenario of the 8-port traffic run; 16 (its own 16-port build, about 9 CPU-s) is slow.
@pytest.mark.parametrize("ports", [4, 8, pytest.param(16, marks=pytest.mark.slow)])
@at(lambda ports: {"ports": ports}, "test_zero_load_latency")
def test_zero_load_latency(ports, shared_run):
    shared_run()


def test_credit_overflow(seed, sim):
    run_cocotb("switch", {"ports": 4, "credits": 17, "out_credits": 2}, test_module=TB, testcase="test_credit_overflow",
               seed=seed, sim=sim)


def test_group_config(seed, sim):
    # A run of its own: the group table is a memory that reset does not clear, and this test reads it
    # from power-up.
    run_cocotb("switch", {"ports": 8}, test_module=TB, testcase="test_group_config", seed=seed, sim=sim)


def test_req_stage_is_set_by_port_count_or_by_hand():
    from hw import registry
    from hw.switch.nvswitch import REQ_STAGE_PORTS, NVSwitch, zero_load_latency
    assert registry.parse_assignments(["req_stage=true"], ["switch"]) == {"switch": {"req_stage": True}}
    assert registry.parse_assignments(["req_stage=0"], ["switch"]) == {"switch": {"req_stage": 0}}
    assert NVSwitch(ports=8).req_stage is False and NVSwitch(ports=REQ_STAGE_PORTS).req_stage is True
    assert NVSwitch(ports=4, req_stage=True).latency == zero_load_latency(4, True) == 6
    with pytest.raises(ValueError, match="req_stage must be a bool"):
        NVSwitch(ports=4, req_stage="maybe")
    from hw.switch.input_unit import InputUnit
    with pytest.raises(ValueError, match="grant_delay must be 1 or 2"):
        InputUnit(port=0, ports=4, credits=8, grant_delay=3)


@pytest.mark.parametrize("value", [1, None, "yes"])
def test_isolate_static_must_be_bool(value):
    from hw.switch.nvswitch import NVSwitch
    with pytest.raises(ValueError, match="isolate_static must be a bool"):
        NVSwitch(ports=4, isolate_static=value)


def test_multicast_needs_a_whole_packet_of_credits():
    """A switch that carries multicast refuses an input buffer smaller than one packet (a crossed-multicast
    deadlock below it, docs/timeouts.md), naming the minimum; a unicast-only one does not need it."""
    from hw.switch.nvswitch import NVSwitch
    with pytest.raises(ValueError, match=r"credits must be at least max_payload \+ 1 = 17 for a switch that "
                                         r"carries multicast .* got 16; multicast=False"):
        NVSwitch(ports=4, credits=16)
    with pytest.raises(ValueError, match=r"at least max_payload \+ 1 = 5 .* got 4"):
        NVSwitch(ports=4, credits=4, max_payload=4, queueing="fifo", speedup=1)
    assert NVSwitch(ports=4, credits=17).credits == 17
    assert NVSwitch(ports=4, credits=4, max_payload=3).credits == 4
    assert NVSwitch(ports=4, credits=8, multicast=False).multicast is False
    with pytest.raises(ValueError, match="multicast must be a bool"):
        NVSwitch(ports=4, multicast=1)
    # The DySHARP switch's response network routes by dst only: its credits may be below a packet.
    from hw.switch.dysharp_switch import DySharpSwitch
    sw = DySharpSwitch(ports=4, credits=17, resp_credits=8)
    assert sw.respnet.multicast is False and sw.reqnet.multicast is True


@pytest.mark.parametrize("multicast", [True, False])
def test_unicast_only_ingress_refuses_multicast(multicast):
    """With ``multicast=False`` a static or dynamic ``multimem`` header is dropped whole and answered
    ``UNKNOWN_OPCODE`` (no mask-queue entry, so no multicast head can wait); unicast is written as usual.
    With ``multicast=True`` the same headers are queued to the mask queue."""
    from amaranth.sim import Simulator
    from hw.packet import ErrorCode, Header, Opcode
    from hw.switch.ingress import Ingress
    N = 4
    dut = Ingress(ports=N, n_uc=N, n_cells=8, max_payload=3, multicast=multicast)
    cases = [(Header(opcode=Opcode.WRITE, dst=2, length=0, tag=1), False),
             (Header(opcode=Opcode.DYN_ST, mask=0b0110, length=0, tag=2), True),
             (Header(opcode=Opcode.MM_ST, group=1, length=0, tag=3), True),
             (Header(opcode=Opcode.READ, dst=1, length=1, tag=4), False)]
    seen = []

    async def bench(ctx):
        ctx.set(dut.group_mask, 0b0011)       # group 1 is configured
        for h, mc in cases:
            ctx.set(dut.valid, 1)
            ctx.set(dut.flit, {"data": h.encode(), "last": 1, "poison": 0})
            seen.append((ctx.get(dut.enq), ctx.get(dut.err_push), ctx.get(dut.err_code), ctx.get(dut.err_tag),
                         ctx.get(dut.target_q)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    for (h, mc), (enq, err, code, tag, q) in zip(cases, seen):
        if mc and not multicast:
            assert (enq, err, code, tag) == (0, 1, ErrorCode.UNKNOWN_OPCODE, h.tag), h
        else:
            assert (enq, err) == (1, 0) and q == (N if mc else h.dst), h
