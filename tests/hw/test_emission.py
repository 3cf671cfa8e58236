"""Deduplicated Verilog (hw/emission.py): one module per distinct sub-block, the same behaviour as the flat
emission -- the same traffic through both files gives the same log, cycle for cycle and bit for bit."""

import dataclasses
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


def _same_log(a, b):
    for f in dataclasses.fields(a):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if f.name.startswith("loop_"):
            continue            # wall-clock time of the run
        if isinstance(va, np.ndarray):
            np.testing.assert_array_equal(va, vb, err_msg=f.name)
        else:
            assert va == vb, f.name


@needs_verilator
def test_switch_dedup_equals_flat():
    """The plain 4-port switch, multicast traffic with few downstream credits: every header-in, header-out
    and last-flit cycle and every delivered packet's hash equal."""
    from verif.bench.switch import switch_traffic
    from verif.harness.fastsim import build, check_delivery
    from verif.harness.fastsim.build import VERILATOR_FLAGS

    params = {"ports": 4, "out_credits": 3}
    traffic = switch_traffic(4, 0.6, fanout=2, arrival_cycles=300, drain=300, seed=7)
    # The flat build is the one the 4-port fast-path tests share; the dedup build is this test's alone, so its
    # C++ compiles at -O0 (the Verilog, and so every compared cycle, is the same).
    dedup_flags = [f.replace("OPT_FAST=-O1", "OPT_FAST=-O0") for f in VERILATOR_FLAGS]
    logs = [build("switch", params, emission=e, flags=dedup_flags if e == "dedup" else None)
            .run(traffic, tag=f"emission-{e}") for e in ("flat", "dedup")]
    check_delivery(traffic, logs[1], complete=True)
    assert len(logs[1].records) > 100
    _same_log(*logs)


@needs_verilator
def test_dysharp_switch_dedup_equals_flat():
    """The integrated 4-port switch: dynamic multicast stores that miss (TLB fills over the links, egress
    translation) and ld_reduce combines (engines, reads, contributions), under the GPU models' random
    stalls. Every log field equal: what each GPU received (flits and cycles), what it sent and when, the
    activity of every link in every cycle, and the status counters sampled through the run. The traffic
    reaches every port's strapped blocks (each port's ingress check stamps ``src``, each egress writes
    ``dst``): a strap tied to the wrong index would change the flits."""
    from verif.bench import dysharp_switch as b
    from verif.harness.fastsim import build_vc, check_vc
    from verif.harness.fastsim.build import VERILATOR_FLAGS

    n = 4
    rng = np.random.default_rng(11)
    rows = b.combine_rows(n)
    pkts = (b.dispatch_packets(n, 2, "miss", load=0.5, arrival_cycles=500, rng=rng)
            + b.combine_packets(n, 2, load=0.6, arrival_cycles=500, rng=rng, rows=rows))
    vt, _ = b.assemble(n, pkts, 2500, rng, fill_latency=40, read_latency=60, preloads=b.combine_preloads(n, rows),
                       seed=3)
    # The flat build serves this comparison alone (the dedup one is the benches' and the soak's): its C++ at
    # -O0 and without a profile compiles in 59 instead of 77 CPU-s and runs these 2,500 cycles in 0.2 s. It
    # compiles as one translation unit (VM_PARALLEL_BUILDS=0): the model's header is parsed once, with no
    # precompiled header built for the split files (its make: 27.9 instead of 33.1 CPU-s).
    flat = [f.replace("OPT_FAST=-O1", "OPT_FAST=-O0") for f in VERILATOR_FLAGS] + ["-MAKEFLAGS",
                                                                                  "VM_PARALLEL_BUILDS=0"]
    logs = [build_vc("dysharp_switch", {"ports": n}, emission=e, flags=flat if e == "flat" else None,
                     pgo=e != "flat").run(vt, tag=f"emission-{e}") for e in ("flat", "dedup")]
    rep = check_vc(vt, logs[1])
    assert rep.stores > 50 and rep.results > 10 and sum(rep.fills) > 10, (rep.stores, rep.results, rep.fills)
    # Every port received translated stores (dst = its own strap) and reduction results.
    assert set(logs[1].rx["port"]) == set(range(n))
    _same_log(*logs)


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
