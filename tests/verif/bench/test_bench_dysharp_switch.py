"""The two-VC fast path (``verif/harness/fastsim/vc_main.cpp``) and ``dysharp bench dysharp_switch``.

* The harness on a loopback stand-in (link ``i`` feeds GPU ``i + 1`` through one register each way): the
  GPU models' credits, round robin, responder (TLB fills with the first-touch layout, RED_READ/READ data)
  and logs, against values computed here.
* A tiny bench point (N = 4) on the DySHARP switch: the scoreboard passes, fanout-1 dispatch throughput
  equals the plain switch's on the same traffic at a 100% hit rate, and cycle counts repeat for a seed.
"""

import importlib

import numpy as np
import pytest
from amaranth.back import verilog as amaranth_verilog
from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.credit import CREDIT_RETURN_BITS
from hw.packet import ErrorCode, Header, Opcode, Packet, flit_layout
from verif.harness.runner import SIMULATORS

from verif.harness.fastsim.files import (RECV_VC0, RECV_VC1, SENT_VC0, SENT_VC1, GpuGroup, VcTraffic, pack_packets,
                                         vc_word, words_to_int)

fsbuild = importlib.import_module("verif.harness.fastsim.build")

pytestmark = pytest.mark.skipif("verilator" not in SIMULATORS, reason="the fast path needs Verilator")


def _link():
    return wiring.Signature({"valid": Out(1), "vc": Out(1), "flit": Out(flit_layout(128)),
                             "credit": In(data.ArrayLayout(CREDIT_RETURN_BITS, 2))})


class VcLoop(wiring.Component):
    """Stand-in DUT: what GPU i sends reaches GPU i + 1 a cycle later; credits go back the same way.
    ``status`` = number of cfg writes (low 32 bits) and the last payload's low 32 bits."""

    def __init__(self, ports):
        self.ports = ports
        super().__init__({"rx": In(_link()).array(ports), "tx": Out(_link()).array(ports),
                          "cfg": In(stream.Signature(40)), "status": Out(64)})

    def elaborate(self, platform):
        m = Module()
        n = self.ports
        for i in range(n):
            j = (i + 1) % n
            m.d.sync += [self.tx[j].valid.eq(self.rx[i].valid), self.tx[j].vc.eq(self.rx[i].vc),
                         self.tx[j].flit.eq(self.rx[i].flit), self.rx[i].credit.eq(self.tx[j].credit)]
        m.d.comb += self.cfg.ready.eq(1)
        with m.If(self.cfg.valid):
            m.d.sync += [self.status[0:32].eq(self.status[0:32] + 1), self.status[32:64].eq(self.cfg.payload[0:32])]
        return m


@pytest.fixture(scope="module")
def loop_sim(tmp_path_factory):
    root = tmp_path_factory.mktemp("vcloop")
    v = root / "vc_loop.v"
    v.write_text(amaranth_verilog.convert(VcLoop(4), name="vc_loop", emit_src=False))
    return fsbuild.build_vc("vc_loop", {"ports": 4}, build_root=root, verilog=v, link_credits=4, gpu_credits=4)


def _traffic(items, run, **kw):
    items = sorted(items, key=lambda x: x[0])
    first, nflits, flits = pack_packets([p for _, _, _, p in items])
    return VcTraffic(4, flits.shape[1], np.array([a for a, *_ in items], np.int64),
                     np.array([s for _, s, _, _ in items], np.int32), np.array([v for _, _, v, _ in items], np.int32),
                     first, nflits, flits, run, **kw)


def _rx(log, port, vc):
    out = []
    for r, rec in enumerate(log.rx):
        if rec["port"] == port and rec["vc"] == vc:
            fl = log.packet(r)
            out.append((rec, Header.decode(words_to_int(fl[0][:4])), [words_to_int(f[:4]) for f in fl[1:]]))
    return out


def test_loopback_responder(loop_sim):
    groups = (GpuGroup(group=1, alloc=True, layout=0, base=0x100000, stride=64),
              GpuGroup(group=2, alloc=False, layout=0, base=0x100000, stride=64))
    fill = lambda idx, src, tag, g=1: Packet(Header(opcode=Opcode.TLB_FILL, src=src, tag=tag, group=g,
                                                    mask=1 << 1, index=idx))
    items = [
        (1, 0, 0, fill(7, 3, 1)),                        # GPU 1: slot 0 for index 7 (preload took none)
        (2, 0, 0, fill(9, 3, 2)),                        # slot 1
        (3, 0, 0, fill(7, 3, 3, g=2)),                   # lookup group, same layout: slot 0
        (4, 0, 0, fill(5, 3, 4, g=2)),                   # lookup of an untouched row: TLB_FAULT
        (5, 0, 0, fill(9, 2, 5)),                        # another source's row: ISOLATION
        (6, 0, 0, Packet(Header(opcode=Opcode.RED_READ, src=2, tag=9, xtag=3, length=3, etype=3, redop=0,
                                dst=1, addr=0x4000))),
        (6, 0, 1, Packet(Header(opcode=Opcode.RED_RESP, src=0, tag=1, length=1, dst=1), [0x1234])),
        (7, 0, 0, Packet(Header(opcode=Opcode.WRITE, src=0, tag=2, length=2, dst=1, addr=0x40), [5, 6])),
    ]
    log = loop_sim.run(_traffic(items, 400, groups=groups, fill_latency=20, read_latency=30,
                                preloads=np.array([[2, 1, 7, 0]], np.int64), cfg=np.array([[0xAB, 0], [0xCD, 0]],
                                                                                             np.uint32)))
    assert (log.sent >= 1).all() and log.unsent == 0
    got1 = _rx(log, 1, 0)
    assert [h.opcode for _, h, _ in got1] == [Opcode.TLB_FILL.value] * 5 + [Opcode.RED_READ.value, Opcode.WRITE.value]
    assert _rx(log, 1, 1)[0][2] == [0x1234]
    resp = _rx(log, 2, 1)           # GPU 1's answers reach GPU 2
    fills = [h for _, h, _ in resp if h.opcode == Opcode.TLB_FILL_RESP.value]
    assert [(h.tag, h.code, h.addr, h.dst) for h in fills] == [
        (1, 0, 0x100000, 1), (2, 0, 0x100000 + 64 * 16, 1), (3, 0, 0x100000, 1),
        (4, ErrorCode.TLB_FAULT.value, 0, 1), (5, ErrorCode.ISOLATION.value, 0, 1)]
    fill_rx = [rec for rec, h, _ in got1 if h.opcode == Opcode.TLB_FILL.value]
    fill_tx = [t for t in log.tx if t["port"] == 1 and Header.decode(words_to_int(t["head"][:4])).opcode == 11]
    # Ready exactly fill_latency after the request's last flit; sent in order.
    assert [int(t["ready"]) for t in fill_tx] == [int(r["last"]) + 20 for r in fill_rx]
    assert all(t["first"] >= t["ready"] for t in fill_tx)
    (rr,) = [(rec, h, pl) for rec, h, pl in resp if h.opcode == Opcode.RED_READ_RESP.value]
    assert (rr[1].dst, rr[1].tag, rr[1].xtag, rr[1].length, rr[1].etype, rr[1].code) == (2, 9, 3, 3, 3, 0)
    assert rr[2] == [vc_word(1, 0x4000 + 16 * k) for k in range(3)]
    # GPU 2 answers nothing of that (it is VC 1); a preload at GPU 2 does not touch GPU 1's layout.
    act = log.activity
    assert act[:, 0].tolist().count(SENT_VC0) + act[:, 0].tolist().count(SENT_VC1) == 5 + 1 + 3 + 2
    assert ((act[:, 1] & RECV_VC0) != 0).sum() == 5 + 1 + 3 and ((act[:, 1] & RECV_VC1) != 0).sum() == 2
    # cfg: two writes before cycle 1; status sampled at the end.
    assert log.status[-1].tolist() == [2, 0xCD]


def test_loopback_credits_and_backpressure(loop_sim):
    """Long packets on both VCs at once with random credit stalls: nothing lost, the VCs interleave per flit,
    and a seed repeats the run cycle for cycle."""
    items = []
    for k in range(40):
        items.append((1 + k, k % 4, 0, Packet(Header(opcode=Opcode.WRITE, src=k % 4, tag=k, length=8,
                                                     dst=(k + 1) % 4, addr=k << 8), list(range(k, k + 8)))))
        items.append((1 + k, k % 4, 1, Packet(Header(opcode=Opcode.READ_RESP, src=k % 4, tag=k, length=4,
                                                     dst=(k + 1) % 4), list(range(4)))))
    runs = [loop_sim.run(_traffic(items, 2000, stall=20000, seed=s)) for s in (5, 5, 6)]
    for log in runs:
        assert len(log.rx) == len(items) and log.unsent == 0
        for r in range(len(log.rx)):
            assert log.rx[r]["nflits"] in (9, 5)
    assert np.array_equal(runs[0].activity, runs[1].activity)
    assert not np.array_equal(runs[0].activity, runs[2].activity)
    both = (runs[0].activity[:, 0] & (SENT_VC0 | SENT_VC1))
    assert set(np.unique(both)) <= {0, SENT_VC0, SENT_VC1}     # one flit per cycle per link


def test_inlined_build_simulates_the_same(loop_sim, tmp_path):
    """``build_vc(inline=True)`` (the profile-guided default) compiles every module into one model with
    Verilator's ``--inline-mult 0`` and no keep-apart config; a build without a profile keeps the repeated
    blocks apart by default. Both simulate the same traffic to the same log, array for array."""
    verilog = loop_sim.binary.parents[2] / "vc_loop.v"          # the fixture's build root holds the source
    inlined = fsbuild.build_vc("vc_loop", {"ports": 4}, build_root=tmp_path, verilog=verilog, link_credits=4,
                               gpu_credits=4, inline=True)
    assert inlined.binary != loop_sim.binary
    log_text = (inlined.binary.parent / "build.log").read_text()
    assert " ".join(fsbuild.INLINE_ALL) in log_text and not (inlined.binary.parent / "keep_apart.vlt").exists()
    assert " ".join(fsbuild.INLINE_ALL) not in (loop_sim.binary.parent / "build.log").read_text()
    items = [(1 + k, k % 4, k % 2, Packet(Header(opcode=Opcode.WRITE, src=k % 4, tag=k, length=4, dst=(k + 1) % 4,
                                                  addr=k << 8), list(range(k, k + 4)))) for k in range(24)]
    a, b = (sim.run(_traffic(items, 600, stall=10000, seed=3)) for sim in (loop_sim, inlined))
    arrays = [k for k, v in vars(a).items() if isinstance(v, np.ndarray)]
    assert arrays and all(np.array_equal(getattr(a, k), getattr(b, k)) for k in arrays)


# ---------------------------------------------------------------------------------------------------------
# The bench on the DySHARP switch (N = 4)

def _have_top():
    from hw import registry
    try:
        registry.get("dysharp_switch")
        return True
    except Exception:
        return False


needs_top = pytest.mark.skipif(not _have_top(), reason="dysharp_switch is not registered yet")


@needs_top
def test_bench_dispatch_n4_matches_plain_switch():
    from verif.bench import dysharp_switch as bench

    kw = dict(cycles=800, warmup=700, drain=400)
    a = bench.measure_dispatch(4, 1, "hit", **kw)          # the scoreboard runs inside
    b = bench.measure_dispatch(4, 1, "hit", **kw)
    a.pop("loop_s"), b.pop("loop_s")
    assert a == b                                          # a seed gives the same run, cycle for cycle
    assert a["deliveries"] > 0 and a["fills"] > 0
    # Warm AL-TLB (no miss in the window): translation costs no throughput against the NVSwitch on the
    # same packets (the DySHARP egress's slots even buffer a little more).
    assert a["hit_rate"] == 1.0 and a["tlb_window"]["misses"] == 0
    assert a["egress"] >= a["switch_egress"] - 0.01 and a["ingress"] >= a["switch_ingress"] - 0.01
    assert a["switch_egress"] > 0.9
    # DeepSeek-like rows of 29 packets, every row new: about one primary miss per row and destination.
    m = bench.measure_dispatch(4, 2, "miss", **kw)
    assert 0.9 < m["hit_rate_primary_run"] < 1.0 and m["hit_rate_run"] < m["hit_rate_primary_run"]
    assert m["stores"] > m["stores_complete"] > 0 and m["egress"] > 0.3


@needs_top
def test_bench_combine_and_zero_load_n4():
    from verif.bench import dysharp_switch as bench

    c = bench.measure_combine(4, 2, 150, cycles=800, warmup=700)
    assert c["results"] > 0 and 0 < c["results_per_requester"] <= c["bound_results"] * 1.05
    assert 0 < c["contrib_per_uplink"] <= c["contrib_bound"] + 1e-9
    assert 0 < c["occupancy_max"] <= c["red_entries"]
    z = bench.measure_zero_load(4, 150)
    st = z["ld_reduce_stages"]
    assert z["ld_reduce_warm"] == sum(st.values())
    assert st["gpu_read_and_send"] >= 150 + 16
    assert min(z["store_hit"]) >= min(z["plain_switch"])
    assert min(z["store_miss"]) > max(z["store_hit"]) + 100   # the fill latency shows on a miss


def test_combine_contributors_balanced_over_gpus():
    """Balanced contributor sets offer every uplink the same reads in any stretch of requests (within one
    request per requester); random sets do not."""
    import collections

    import numpy as np

    from verif.bench import dysharp_switch as bench

    def reads(balanced, first, last):
        pkts = bench.combine_packets(8, 2, load=1.0, arrival_cycles=20000, rng=np.random.default_rng(3), rows=4,
                                     balanced=balanced)
        per = collections.Counter(g for c, _, _, h in pkts if first <= c < last for g in range(8)
                                  if h.mask >> g & 1)
        return [per[g] for g in range(8)]

    for lo, hi in ((0, 20000), (5000, 9000)):
        b = reads(True, lo, hi)
        assert max(b) - min(b) <= 8 * 2, b
    r = reads(False, 0, 20000)
    assert max(r) - min(r) > 16, r


def test_bench_rejects_bad_arguments(capsys):
    from dysharp.cli import main

    assert main(["bench", "dysharp_switch", "--skip", "dispatch,bogus"]) == 2
    assert "--skip takes dispatch, combine, fused, zero" in capsys.readouterr().err
    assert main(["bench", "dysharp_switch", "--ports", "3"]) == 2
    assert "--ports must be in 4..64" in capsys.readouterr().err
    assert main(["bench", "dysharp_switch", "--fanouts", "1,x"]) == 2
    assert "--fanouts expects comma-separated integers" in capsys.readouterr().err
