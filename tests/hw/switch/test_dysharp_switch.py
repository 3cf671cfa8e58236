"""The integrated DySHARP switch against its reference model (verif/tb/dysharp_switch.py), plus the pieces
of its environment on their own: the 2-VC link agents on a loopback, the GPU model and the reference
model in plain Python."""

import dataclasses
import os
import random

import pytest

from hw.packet import EType, ErrorCode, Header, Opcode, Packet, RedOp

from verif.harness.scoreboard import ScoreboardError
from verif.models.dysharp_gpu import DySharpGpu, GpuProtocolError
from verif.models.dysharp_switch import DySharpSwitchModel, reduce_candidates
from verif.models.memory_manager import SET_GROUP

TB = "verif.tb.dysharp_switch"

# One parameter point for the default suite (one Icarus build): small timeouts so that the timeout tests
# are short, far above what good traffic needs at these loads but below the worst-case bound
# (hw.switch.timeouts), hence allow_short_timeouts.
P4 = {"ports": 4, "tlb_timeout": 512, "red_timeout": 1024, "allow_short_timeouts": True}
# The 8-port runs use the derived timeouts: at 8 ports the deadlock test's full-rate load keeps entries
# waiting for the uplinks longer than 1024 cycles (a correct TIMEOUT, but not what that test is about).
P8 = {"ports": 8}


def _have_top() -> bool:
    try:
        from hw import registry
        registry.get("dysharp_switch")
        return True
    except (ImportError, ValueError, KeyError):
        return False


needs_top = pytest.mark.skipif(not _have_top(), reason="hw.switch.dysharp_switch is not registered yet")


def run(testcase, seed, sim, params=None, **env):
    from verif.harness.runner import run_cocotb
    return run_cocotb("dysharp_switch", params or P4, test_module=TB, testcase=testcase, seed=seed,
                      sim=sim, env=env)


# ---- the switch ---------------------------------------------------------------------------------------------

# The 4-port switch's tests below share one simulator run (tests/conftest.py: shared_run; each scenario a
# cocotb test of its own, from reset): the design's load and cocotb's start, 2.4 CPU-s of an Icarus run of
# this switch, are paid once; a failure names its test and scenario.
def at_p4(scenarios, fails=False):
    return pytest.mark.shared_run("dysharp_switch", P4, TB, scenarios, fails=fails)


@needs_top
@at_p4([("test_traffic", {"packets": 10}), ("test_reduce_types", {}), ("test_tlb", {"storm": 4}),
        ("test_fill_timeout", {"packets": 3, "reduce": False}), ("test_fill_timeout", {"packets": 2}),
        ("test_deadlock", {"reductions": 10})])
def test_traffic_reductions_fills_and_deadlock(shared_run):
    """Random traffic (stores, multicasts, ld_reduce) against the reference model; every reduction type; a
    storm of TLB misses that coalesce; stores whose translation needs the silent GPU's fill (TIMEOUT from
    its port; the rest flows), then ld_reduce reads that need it (the requester gets TIMEOUT: the
    destination's egress answers the read with an error-coded RED_READ_RESP; the other contributions are
    dropped); full-rate reductions that must not deadlock. Six scenarios."""
    shared_run()


@needs_top
@pytest.mark.slow
def test_traffic_8_ports(seed, sim):
    run("test_traffic", seed, sim, P8, packets=12)


BAD_KINDS = ["foreign", "bounds", "fault", "silent_red_read", "stale", "duplicate", "malformed_ld_reduce",
             "static_foreign"]
BAD_KINDS_LD_REDUCE = ["foreign", "bounds", "fault", "static_foreign"]


@needs_top
@at_p4([("test_bad_input", {"kind": k, "rounds": 2, "reduce": False}) for k in BAD_KINDS]
       + [("test_bad_input", {"kind": k, "rounds": 2}) for k in BAD_KINDS_LD_REDUCE])
def test_bad_input(shared_run):
    """Each bad input alone among good traffic on every port (foreign group, index out of bounds, TLB fault:
    on dymultimem.st; a RED_READ destination that never answers; a contribution for a freed entry; a
    duplicate contribution; ld_reduce requests poisoned, followed by a flit, or of length 0: each answered
    once, POISONED / LENGTH_MISMATCH / BAD_LENGTH, and counted in the engine's bad_requests; multimem.st to a
    static group the source is not a member of: ISOLATION, counted by the request network); then the same
    bad inputs on dymultimem.ld_reduce (static_foreign: multimem.ld_reduce over a group the source is not a
    member of, refused by its engine) as well: the requester gets the error. Twelve scenarios."""
    shared_run()


@needs_top
@pytest.mark.slow
def test_deadlock_8_ports(seed, sim):
    run("test_deadlock", seed, sim, P8, reductions=16)


@needs_top
@pytest.mark.parametrize("sabotage", ["row", pytest.param("data", marks=pytest.mark.slow)])
@pytest.mark.shared_run("dysharp_switch", P4, TB, "test_traffic",
                        env=lambda sabotage: {"packets": 4, "sabotage": sabotage}, fails=True)
def test_scoreboard_catches_a_wrong_reference(sabotage, shared_run):
    """The same traffic against a reference made wrong on purpose (translated rows one flit off; one bit of
    the GPUs' data flipped): the scoreboard must fail the run."""
    shared_run()


# ---- the link agents on a loopback --------------------------------------------------------------------------

def _loop(seed, env, tmp_name, rtl=None):
    """Build the loopback stand-in (verif.tb.dysharp_switch.vc_loop_component) with Icarus and run the
    agents' test on it; returns (tests, failed)."""
    import json
    import sys
    from pathlib import Path

    from amaranth.back import verilog
    from cocotb_tools.runner import get_results, get_runner

    from verif.harness.runner import REPO, icarus_source, require_simulator
    from verif.tb.dysharp_switch import vc_loop_component

    require_simulator("icarus")
    name = "vc_loop" if rtl is None else f"vc_loop_rtl_{rtl[0]}_{rtl[1]}"
    bdir = (REPO / "build" / "sim" / "icarus" / name).resolve()
    bdir.mkdir(parents=True, exist_ok=True)
    comp = vc_loop_component(rtl=rtl)
    vpath = bdir / "vc_loop.v"
    text = verilog.convert(comp, name="vc_loop", emit_src=False)
    if not vpath.exists() or vpath.read_text() != text:
        vpath.write_text(text)
    runner = get_runner("icarus")
    runner.build(sources=[icarus_source(vpath, bdir)], hdl_toplevel="vc_loop", build_dir=bdir,
                 timescale=("1ns", "1ps"))
    xml = bdir / f"results-{tmp_name}-{os.getpid()}.xml"
    try:
        runner.test(test_module=TB, hdl_toplevel="vc_loop", hdl_toplevel_lang="verilog",
                    testcase="test_vc_loopback", build_dir=bdir, test_dir=bdir, seed=seed, results_xml=str(xml),
                    timescale=("1ns", "1ps"),
                    extra_env={"DYSHARP_SEED": str(seed), "DYSHARP_ENV": json.dumps(env), "DYSHARP_PARAMS": "{}",
                               "PYTHONPATH": os.pathsep.join([str(REPO)] + sys.path)})
    except SystemExit:
        pass
    assert Path(xml).exists(), f"the loopback run produced no results; see {bdir}"
    return get_results(xml)


def test_vc_agents_loopback(seed):
    tests, failed = _loop(seed, {"packets": 80}, "ok")
    assert (tests, failed) == (1, 0)


@pytest.mark.parametrize("rx, tx", [(2, 3), (8, 32)])
def test_vc_agents_on_the_switch_link_ends(rx, tx, seed):
    """The agents against the RTL link ends the switch uses (VcReceiver -> VcSender)."""
    tests, failed = _loop(seed, {"packets": 80, "credits": rx, "out_credits": tx}, f"rtl{rx}", rtl=(rx, tx))
    assert (tests, failed) == (1, 0)


def test_vc_sink_catches_credit_violation(seed):
    """A source that ignores its credits, into a slow sink: the sink must fail the test."""
    tests, failed = _loop(seed, {"packets": 40, "cheat": True, "stall": 0.8, "gap": 0.0}, "cheat")
    assert (tests, failed) == (1, 1)


# ---- the GPU model and the reference model in Python ----------------------------------------------------------

class FakeSource:
    def __init__(self):
        self.sent = []

    def send(self, packet, vc=None):
        self.sent.append(packet)

    @property
    def idle(self):
        return True


def _gpu(port, **kw):
    g = DySharpGpu(port, FakeSource(), random.Random(port), latency=(2, 5), **kw)
    g.mm.command(SET_GROUP, 1, valid=1, alloc=1, layout=0, base=(port + 1) << 32, stride=64 + 8 * port)
    g.mm.command(SET_GROUP, 2, valid=1, alloc=0, layout=1, base=(port + 1) << 33, stride=64)
    return g


def _deliver(g, packet, cycle=0):
    g.on_packet(packet.header.opcode in (Opcode.READ_RESP.value,) and 1 or 0, packet.flits(), cycle)


def _run(g, cycles=20):
    for c in range(cycles):
        g.drive(c)


def test_gpu_model_answers():
    g = _gpu(2)
    # TLB fill: allocation on first touch, asymmetric per GPU, echo tag, dst = own port.
    _deliver(g, Packet(Header(opcode=Opcode.TLB_FILL, src=1, tag=7, group=1, index=5, mask=1 << 2)))
    _deliver(g, Packet(Header(opcode=Opcode.TLB_FILL, src=3, tag=8, group=1, index=9, mask=1 << 2)))
    _deliver(g, Packet(Header(opcode=Opcode.TLB_FILL, src=3, tag=9, group=1, index=5, mask=1 << 2)))   # not 3's
    _deliver(g, Packet(Header(opcode=Opcode.TLB_FILL, src=3, tag=10, group=2, index=5, mask=1 << 2)))  # no alloc
    # RED_READ and READ
    _deliver(g, Packet(Header(opcode=Opcode.RED_READ, src=1, tag=0x34, xtag=0x12, length=2, etype=EType.FP32,
                              redop=RedOp.MIN, dst=2, addr=0x1000)))
    _deliver(g, Packet(Header(opcode=Opcode.READ, src=0, tag=3, length=1, dst=2, addr=0x2000)))
    _deliver(g, Packet(Header(opcode=Opcode.WRITE, src=0, tag=4, length=2, dst=2, addr=0x3000), [11, 12]))
    _run(g)
    got = {p.header.opcode: [] for p in g.source.sent}
    for p in g.source.sent:
        got[p.header.opcode].append(p)
    fills = got[Opcode.TLB_FILL_RESP.value]
    stride = (64 + 8 * 2) * 16
    assert [(p.header.tag, p.header.addr, p.header.code, p.header.dst) for p in sorted(fills, key=lambda p: p.header.tag)] == [
        (7, 3 << 32, 0, 2), (8, (3 << 32) + stride, 0, 2), (9, 0, ErrorCode.ISOLATION.value, 2),
        (10, 0, ErrorCode.TLB_FAULT.value, 2)]
    rr, = got[Opcode.RED_READ_RESP.value]
    assert (rr.header.dst, rr.header.src, rr.header.tag, rr.header.xtag, rr.header.length, rr.header.etype,
            rr.header.redop) == (1, 2, 0x34, 0x12, 2, EType.FP32.value, RedOp.MIN.value)
    assert rr.payload == g.data_at(0x1000, 2)
    resp, = got[Opcode.READ_RESP.value]
    assert resp.header.dst == 0 and resp.payload == g.data_at(0x2000, 1)
    assert g.data_at(0x3000, 2) == [11, 12] and len(g.writes) == 1
    assert g.row(1, 9) == (3 << 32) + stride and g.row(1, 77) is None


def test_gpu_model_silent_and_malformed():
    g = _gpu(0, silent_red_read=True, silent_tlb_fill=True)
    _deliver(g, Packet(Header(opcode=Opcode.TLB_FILL, src=1, tag=7, group=1, index=5, mask=1)))
    _deliver(g, Packet(Header(opcode=Opcode.RED_READ, src=1, tag=1, length=1, dst=0, addr=0)))
    _run(g)
    assert g.source.sent == [] and len(g.fills) == 1 and len(g.red_reads) == 1
    with pytest.raises(GpuProtocolError):
        _deliver(g, Packet(Header(opcode=Opcode.TLB_FILL, src=1, tag=7, group=1, index=5, mask=2)))


def _model(n=4):
    gpus = [_gpu(p) for p in range(n)]
    m = DySharpSwitchModel(n, gpus)
    m.configure_tlb(None, 1, (1 << n) - 1, 64)
    m.configure_tlb(None, 3, 0b1110, 64)            # port 0 is foreign
    m.configure_static(0, 0b0110)
    return m, gpus


def _fill(gpus, d, src, group, index):
    gpus[d].mm.serve(group, index, src)


def test_model_dyn_store():
    m, gpus = _model()
    st = Packet(Header(opcode=Opcode.DYN_ST, src=0, tag=5, length=2, group=1, mask=0b0110, index=3, offset=4),
                [1, 2])
    m.inject(0, st)
    for d in (1, 2):
        _fill(gpus, d, 0, 1, 3)
    for d in (2, 1):
        row = gpus[d].row(1, 3)
        w = Packet(Header(opcode=Opcode.WRITE, src=0, dst=d, tag=5, length=2, addr=row + 64), [1, 2])
        m.deliver(d, 0, w, 10)
    m.finish()
    # Wrong address, wrong payload, twice, or nowhere expected: all refused.
    m.inject(0, st)
    bad = Packet(Header(opcode=Opcode.WRITE, src=0, dst=1, tag=5, length=2, addr=gpus[1].row(1, 3) + 48), [1, 2])
    with pytest.raises(ScoreboardError):
        m.deliver(1, 0, bad, 11)
    with pytest.raises(ScoreboardError):
        m.deliver(3, 0, Packet(bad.header, [1, 2]), 12)
    with pytest.raises(ScoreboardError):
        m.finish()


def test_model_malformed_ld_reduce():
    """The engine's answers to malformed ld_reduce requests (verif.models.reduction.engine_request_error):
    poison first, then the opcode/length/framing checks, then the header checks."""
    m, gpus = _model()
    h = Header(opcode=Opcode.DYN_LD_REDUCE, tag=1, length=2, etype=EType.S32, redop=RedOp.ADD, group=2,
               mask=0b0110, index=3)
    m.inject(0, Packet(h), poison=True)
    m.inject(0, Packet(dataclasses.replace(h, tag=2)), last=False)
    m.inject(0, Packet(dataclasses.replace(h, tag=3, length=0)))
    m.inject(0, Packet(dataclasses.replace(h, tag=4, length=0)), poison=True)     # poison first
    m.inject(1, Packet(dataclasses.replace(h, tag=5, mask=0)), last=False)       # framing before mask
    assert m.errors == {ErrorCode.POISONED: 2, ErrorCode.LENGTH_MISMATCH: 2, ErrorCode.BAD_LENGTH: 1}
    assert m.bad_requests == {0: 4, 1: 1} and not m.reductions
    with pytest.raises(ValueError, match="ld_reduce request only"):
        m.inject(0, Packet(Header(opcode=Opcode.WRITE, dst=1, tag=6, length=1), [5]), poison=True)
    for tag, code in ((1, ErrorCode.POISONED), (2, ErrorCode.LENGTH_MISMATCH), (3, ErrorCode.BAD_LENGTH),
                      (4, ErrorCode.POISONED)):
        m.deliver(0, 1, Packet(Header(opcode=Opcode.ERROR, src=0, dst=0, tag=tag, code=code)), tag)
    with pytest.raises(ScoreboardError):     # wrong code
        m.deliver(1, 1, Packet(Header(opcode=Opcode.ERROR, src=1, dst=1, tag=5, code=ErrorCode.BAD_MASK)), 9)
    m.deliver(1, 1, Packet(Header(opcode=Opcode.ERROR, src=1, dst=1, tag=5, code=ErrorCode.LENGTH_MISMATCH)), 9)
    m.finish()


def test_model_errors():
    m, gpus = _model()
    m.inject(0, Packet(Header(opcode=Opcode.DYN_ST, src=0, tag=6, length=1, group=3, mask=0b0110, index=1), [9]))
    m.inject(1, Packet(Header(opcode=Opcode.DYN_ST, src=1, tag=7, length=1, group=1, mask=0b0100, index=64), [9]))
    assert m.errors == {ErrorCode.ISOLATION: 2, ErrorCode.OUT_OF_BOUNDS: 1}
    for d in (1, 2):
        m.deliver(0, 1, Packet(Header(opcode=Opcode.ERROR, src=d, dst=0, tag=6, code=ErrorCode.ISOLATION)), 3)
    with pytest.raises(ScoreboardError):     # wrong code
        m.deliver(1, 1, Packet(Header(opcode=Opcode.ERROR, src=2, dst=1, tag=7, code=ErrorCode.ISOLATION)), 4)
    m.deliver(1, 1, Packet(Header(opcode=Opcode.ERROR, src=2, dst=1, tag=7, code=ErrorCode.OUT_OF_BOUNDS)), 4)
    m.finish()


@pytest.mark.parametrize("etype", list(EType))
@pytest.mark.parametrize("op", list(RedOp))
def test_model_ld_reduce(etype, op):
    from verif.models.reduction import random_lanes
    import numpy as np
    m, gpus = _model()
    nprng = np.random.default_rng(1)
    for g in gpus:
        g.init_word = lambda a, e: random_lanes(nprng, EType(e), 128)
    h = Header(opcode=Opcode.DYN_LD_REDUCE, src=3, tag=9, length=2, etype=etype, redop=op, group=1, mask=0b0111,
               index=4, offset=1)
    m.inject(3, Packet(h))
    for d in (0, 1, 2):
        _fill(gpus, d, 3, 1, 4)
        addr = gpus[d].row(1, 4) + 16
        rr = Packet(Header(opcode=Opcode.RED_READ, src=3, dst=d, tag=d, xtag=1, length=2, etype=etype, redop=op,
                           addr=addr))
        m.deliver(d, 0, rr, 5)
        gpus[d].on_packet(0, rr.flits(), 5)      # the GPU initialises and answers from memory
    contribs = {d: gpus[d].data_at(gpus[d].row(1, 4) + 16, 2) for d in (0, 1, 2)}
    order = (2, 0, 1)
    from verif.models.dysharp_switch import reduce_flits
    result = reduce_flits([contribs[d] for d in order], etype, op)
    resp = Packet(Header(opcode=Opcode.RED_RESP, src=3, dst=3, tag=9, length=2, etype=etype, redop=op), result)
    # A result from another order of float adds may differ; one flipped bit never matches.
    flipped = Packet(resp.header, [result[0] ^ 1, result[1]])
    with pytest.raises(ScoreboardError):
        m.deliver(3, 1, flipped, 9)
    m.deliver(3, 1, resp, 10)
    m.finish()
    r, = m.reductions
    assert r.done and reduce_flits([contribs[d] for d in r.order], etype, op) == result


def test_reduce_candidates_orders():
    words = {0: [0x3F800000], 1: [0x33800000], 2: [0x33800000]}   # 1 + 2^-24 + 2^-24: order matters
    results = {tuple(w) for _, w in reduce_candidates(words, EType.FP32, RedOp.ADD)}
    assert len(results) == 2
    assert len(list(reduce_candidates(words, EType.FP32, RedOp.MAX))) == 1
