"""Deduplicated Verilog (hw/emission.py): one module per distinct sub-block, the same behaviour as the flat
emission -- the same traffic through both files gives the same log, cycle for cycle and bit for bit."""

import gc

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw import emission, registry
from hw.packet_stream import PacketSplit
from hw.switch.egress_translator import EgressTranslator
from hw.switch.ingress_check import IngressCheck
from hw.switch.input_unit import InputUnit
from hw.switch.tlb_fill_bridge import TlbFillBridge
from verif.harness.runner import SIMULATORS

needs_verilator = pytest.mark.skipif("verilator" not in SIMULATORS, reason="the fast path needs Verilator")


def _split(*ops):
    return PacketSplit(flit_width=128, n_out=2, select=lambda h: h.opcode == ops[0])


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_block_key_states_identity_or_nothing():
    iu = dict(ports=8, credits=16)
    # A strap input makes the copies one module; a baked-in index does not.
    assert emission.block_key(InputUnit(port=None, **iu)) == emission.block_key(InputUnit(port=None, **iu))
    assert emission.block_key(InputUnit(port=1, **iu)) != emission.block_key(InputUnit(port=2, **iu))
    assert emission.block_key(InputUnit(port=None, **iu)) != emission.block_key(InputUnit(port=None, ports=8,
                                                                                          credits=32))
    # Functions count by their code and closure values.
    assert emission.block_key(_split(3)) == emission.block_key(_split(3))
    assert emission.block_key(_split(3)) != emission.block_key(_split(4))

    class Holder(wiring.Component):      # a signal from outside: the key cannot be stated
        def __init__(self, s):
            self.s = s
            super().__init__({"o": Out(1)})

        def elaborate(self, platform):
            m = Module()
            m.d.comb += self.o.eq(self.s)
            return m
    assert emission.block_key(Holder(Signal())) is None
    gc.collect()


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("make", [
    lambda p: InputUnit(port=p, ports=8, credits=16), lambda p: IngressCheck(port=p, vc=0),
    lambda p: EgressTranslator(port=p, ports=8), lambda p: TlbFillBridge(port=p, ports=8)])
def test_strap_port(make):
    """``port=None`` adds the strap input; an index out of range is refused with a message."""
    assert "port" in make(None).signature.members
    assert "port" not in make(3).signature.members
    with pytest.raises(ValueError, match="port must be None"):
        make(70)
    with pytest.raises(ValueError, match="port must be None"):
        make("1")
    gc.collect()


def test_switch_writes_each_block_once():
    """A 4-port switch: one input-unit module instantiated 4 times; the top's ports are the flat file's."""
    from amaranth.back import verilog
    comp = registry.get("switch").build(ports=4, credits=8, max_payload=7)
    text, st = emission.convert(comp, "switch")
    assert st.modules["switch__InputUnit"] == 4 and "switch__InputUnit_1" not in st.modules
    assert st.modules["switch__EgressQueue"] == 4 and st.modules["switch__Crossbar"] == 1
    flat = verilog.convert(registry.get("switch").build(ports=4, credits=8, max_payload=7), name="switch",
                           emit_src=False)
    assert len(text) < len(flat) / 2

    def top_header(v):
        start = v.index("\nmodule switch(")
        return v[start:v.index(");", start)]
    assert top_header(text) == top_header(flat)


def test_emission_choice():
    assert registry.emission_for("switch", {"ports": 64}) == "dedup"
    assert registry.emission_for("switch", {"ports": 4}) == "flat"
    assert registry.emission_for("dysharp_switch", {"ports": 4}) == "dedup"     # its smallest point
    assert registry.emission_for("cam", {}) == "flat"
    assert registry.emission_for("system", {"gpus": 4}) == "dedup"     # counted by its ports_param, gpus
    assert registry.emission_for("switch", {"ports": 4}, "dedup") == "dedup"
    with pytest.raises(ValueError, match="unknown emission 'fast'"):
        registry.emission_for("switch", {"ports": 4}, "fast")


@needs_verilator
def test_switch_dedup_equals_flat(tmp_path):
    """The plain 4-port switch, multicast traffic with few downstream credits, through the flat model on the
    fast path; the deduplicated model, driven on Icarus with the inputs the fast path gave the flat one in
    every cycle, gives every output bit equal in every cycle (:mod:`verif.harness.fastsim.replay`): the
    same header-in, header-out and last-flit cycles and delivered packets."""
    from verif.bench.switch import switch_traffic
    from verif.harness.fastsim import build, check_delivery
    from verif.harness.fastsim.build import top_ports
    from verif.harness.fastsim.replay import replay_on_icarus
    from verif.harness.runner import locked_verilog

    params = {"ports": 4, "out_credits": 3}
    traffic = switch_traffic(4, 0.6, fanout=2, arrival_cycles=300, drain=300, seed=7)
    # The flat build is the one the 4-port fast-path tests share; the deduplicated model serves this
    # comparison alone, on Icarus instead of a Verilator build of its own.
    point = registry.point("switch", params)
    flat = locked_verilog(point, emission="flat")
    log = build(point, emission="flat").run(traffic, tag="emission-flat", trace=tmp_path / "trace.txt")
    check_delivery(traffic, log, complete=True)
    assert len(log.records) > 100
    replay = replay_on_icarus(locked_verilog(point, emission="dedup"), point.name,
                              top_ports(flat.read_text(), point.name), tmp_path / "trace.txt", tmp_path / "replay",
                              inputs_at_rise=False)
    assert replay.cycles == 3 + traffic.run_cycles
    assert replay.total == 0, "\n".join(replay.mismatches)
    # The comparison can fail: one output of one cycle changed in the trace is the one mismatch.
    lines = (tmp_path / "trace.txt").read_text().split("\n")
    out = lines[2 * 99 + 1].split()
    out[-1] = format(int(out[-1], 16) ^ 1, "x")
    lines[2 * 99 + 1] = " " + " ".join(out)
    (tmp_path / "bad.txt").write_text("\n".join(lines))
    bad = replay_on_icarus(flat, point.name, top_ports(flat.read_text(), point.name), tmp_path / "bad.txt",
                           tmp_path / "replay-bad", inputs_at_rise=False)
    assert bad.total == 1 and bad.mismatches[0].startswith("MISMATCH cycle 100 "), bad.mismatches


# Slow: its flat Verilog and the replay cost about 30 CPU-s for this check alone. In the default suite the plain
# switch's check above covers the deduplicated emission, and the integrated switch's cocotb scoreboards run on
# its deduplicated Verilog, where a strap tied to the wrong port would change the flits they check.
@needs_verilator
@pytest.mark.slow
def test_dysharp_switch_dedup_equals_flat(tmp_path):
    """The integrated 4-port switch: dynamic multicast stores that miss (TLB fills over the links, egress
    translation) and ld_reduce combines (engines, reads, contributions), under the GPU models' random
    stalls, through the deduplicated model on the fast path; the flat model, driven on Icarus with the
    inputs the fast path gave the deduplicated one in every cycle (reset and configuration included), gives
    every output bit equal in every cycle (:mod:`verif.harness.fastsim.replay`). So the harness would have
    driven and logged the flat model the same: what each GPU received (flits and cycles), what it sent and
    when, the activity of every link, the status counters. The traffic reaches every port's strapped blocks
    (each port's ingress check stamps ``src``, each egress writes ``dst``): a strap tied to the wrong index
    would change the flits."""
    from verif.bench import dysharp_switch as b
    from verif.harness.fastsim import build_vc, check_vc
    from verif.harness.fastsim.build import top_ports
    from verif.harness.fastsim.replay import replay_on_icarus
    from verif.harness.runner import locked_verilog

    n = 4
    rng = np.random.default_rng(11)
    rows = b.combine_rows(n)
    pkts = (b.dispatch_packets(n, 2, "miss", load=0.5, arrival_cycles=300, rng=rng)
            + b.combine_packets(n, 2, load=0.6, arrival_cycles=300, rng=rng, rows=rows))
    # The last packet arrives by cycle 300 and the last flit reaches a GPU at cycle 754: 1,000 cycles leave a
    # margin, and ``complete`` below says that everything was delivered and answered within them.
    vt, _ = b.assemble(n, pkts, 1000, rng, fill_latency=40, read_latency=60, preloads=b.combine_preloads(n, rows),
                       seed=3)
    # The deduplicated build is the one the benches and the short soak share. The flat model serves this
    # comparison alone: on Icarus (its compile and these cycles about 11 s) instead of a Verilator build
    # of its own (about 56 CPU-s of Verilator and C++).
    point = registry.point("dysharp_switch", {"ports": n})
    dedup = locked_verilog(point, emission="dedup")
    log = build_vc(point, emission="dedup").run(vt, tag="emission-dedup", trace=tmp_path / "trace.txt")
    rep = check_vc(vt, log, complete=True)
    assert rep.stores > 30 and rep.results > 10 and sum(rep.fills) > 30, (rep.stores, rep.results, rep.fills)
    # Every port received translated stores (dst = its own strap) and reduction results.
    assert set(log.rx["port"]) == set(range(n))
    flat = locked_verilog(point, emission="flat")
    replay = replay_on_icarus(flat, point.name, top_ports(dedup.read_text(), point.name), tmp_path / "trace.txt",
                              tmp_path / "replay")
    assert replay.cycles == 3 + len(vt.cfg) + vt.run_cycles
    assert replay.total == 0, "\n".join(replay.mismatches)


def test_signed_ports_of_a_block_are_found():
    """Amaranth writes ``signed`` after a port's direction and index; such a port is still a port."""
    text = "\n".join(["module \\blk", "  wire width 3 input 0  \\gain", "  wire width 6 output 5  signed \\pending",
                      "  wire width 4 signed input 1 \\old_style", "  wire width 2 \\internal", "end"])
    assert emission._module_ports(text, "blk") == {"gain": ("input", 3), "pending": ("output", 6),
                                                   "old_style": ("input", 4)}


def test_parts_are_modules_kept_apart_only_when_repeated():
    """A block's parts (an input unit's reader) are modules of their own in the deduplicated Verilog; the
    two-VC fast path's Verilator config keeps apart the repeated blocks (the input units), not the parts,
    which are instantiated once in their block's module and inlined there."""
    from hw.switch.nvswitch import NVSwitch
    from verif.harness.fastsim.build import keep_apart_config

    text, stats = emission.convert(NVSwitch(ports=4, credits=8, max_payload=7), "sw")
    assert "module sw__CellReader(" in text and stats.modules["sw__CellReader"] == 1
    kept = keep_apart_config(text, "sw").splitlines()
    assert 'no_inline -module "sw__InputUnit"' in kept
    assert not any("CellReader" in k or "Ingress" in k for k in kept)
    gc.collect()
