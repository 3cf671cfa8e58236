"""The study's steps (see :mod:`dysharp.commands.study`). Each returns a Markdown section."""

import argparse
import json
from pathlib import Path

from tabulate import tabulate

from hw import registry
from infra import engine
from infra.scope import scope_of
from synth import report, scaling, workloads
from synth.study_points import EXTRA_POINTS, QUICK_AREA, architecture_points, grid_args
from verif import lint as verilator_lint
from verif.harness.runner import locked_verilog

from .commands import area as area_cmd
from .commands import power as power_cmd


def md_table(rows, headers) -> str:
    """A GitHub Markdown table; cells are written as given (no re-formatting of numbers)."""
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


JOBS = None     # worker processes of the Verilog and lint steps (None: the task engine's default)


def study_points(args) -> list[registry.DesignPoint]:
    """The points the Verilog and lint steps cover: ``--quick``, each module's first standard point;
    default, each module at its architecture point (the 64-port DySHARP addition, :mod:`synth.scaling`;
    the registry's defaults for a module outside it), the 64-port switch and the 64-port integrated switch
    (with its default table sizes: the 1024-entry AL-TLB is linted alone at its architecture point, since
    Verilator expands all 64 of them in the top); ``--full``, every standard point."""
    names = sorted(registry.MODULES)
    if getattr(args, "quick", False):
        return [registry.point(n, registry.get(n).points[0]) for n in names]
    if getattr(args, "full", False):
        return [registry.point(n, p) for n in names for p in registry.get(n).points]
    arch = {n: scaling.architecture_point(n) or {} for n in names}
    arch.update({n: p for n, p in EXTRA_POINTS.items() if n in arch})
    if "dysharp_switch" in arch:
        arch["dysharp_switch"] = {"ports": 64}
    return [registry.point(n, p) for n, p in arch.items()]


def point_size(design: registry.DesignPoint) -> float:
    """A rough size of a design point, to start the largest first: by GPUs, ports and table entries (a
    parameter left to its block, ``None``, counts 0)."""
    n = {k: design.params.get(k) or 0 for k in ("gpus", "ports", "entries")}
    return 16 * n["gpus"] + n["ports"] + n["entries"] / 16


def lint_points(args) -> list[tuple[registry.DesignPoint, bool]]:
    """(design point, whole) of the Verilog and lint steps: :func:`study_points`, plus, outside the quick
    scope, the first standard point of each module emitted deduplicated (the big tops) when its study
    point is another. ``whole``: lint the design in one Verilator run even when it is large (every module's
    first standard point), so that a combinational loop between two blocks is found there; a larger point
    is linted block by block (:func:`verif.lint.lint_file`)."""
    out = []
    for design in study_points(args):
        spec = design.spec
        first = registry.point(design.name, spec.points[0])
        out.append((design, design == first))
        if spec.dedup_from_ports is not None and design != first:
            out.append((first, True))
    return out


def _verilog_and_lint(item) -> dict:
    """One point: its Verilog (``auto`` emission), then, with ``lint``, ``verilator --lint-only -Wall`` on it
    (whole, or block by block when large and not ``whole``; a task of :func:`infra.engine.map_tasks`)."""
    import time

    design, whole, lint = item
    t0 = time.time()
    path = locked_verilog(design)
    row = {"path": str(path), "mb": path.stat().st_size / 1e6, "verilog_s": time.time() - t0}
    if lint:
        t0 = time.time()
        waived, problems, runs = verilator_lint.lint_file(path, design.name, whole=whole, with_runs=True)
        row.update(lint_s=time.time() - t0, problems=problems, waived=dict(waived), lint_runs=runs)
    return row


def verilog_points(args, lint: bool) -> list[dict]:
    """:func:`_verilog_and_lint` over :func:`lint_points` on the task engine, the largest points first (by
    GPUs, ports and table entries, a rough size order) so that the two workers end together."""
    points = lint_points(args)
    order = sorted(range(len(points)), key=lambda i: point_size(points[i][0]), reverse=True)
    rows = engine.map_tasks(_verilog_and_lint, [(*points[i], lint) for i in order],
                            desc="verilog + lint" if lint else "verilog", progress=True, jobs=JOBS,
                            labels=[" ".join([points[i][0].name] + [f"{k}={v}" for k, v in
                                                                     points[i][0].overrides.items()])
                                    for i in order])
    out = [None] * len(points)
    for i, r in zip(order, rows):
        out[i] = {"module": points[i][0].name, "params": points[i][0].overrides, **r}
    return out


def verilog_step(args, out: Path) -> str:
    """The study points' Verilog, two points at a time; the big switch points with one module per distinct
    sub-block (``auto``, :func:`hw.registry.emission_for`)."""
    rows = verilog_points(args, lint=False)
    (out / "verilog.json").write_text(json.dumps(rows, indent=1) + "\n")
    return "## Verilog\n\n" + md_table(
        [[r["module"], str(r["params"]), f"`{r['path']}`", f"{r['mb']:.2f}", f"{r['verilog_s']:.1f}"] for r in rows],
        ["module", "parameters", "file", "MB", "seconds"])


def lint_step(args, out: Path) -> str:
    """``verilator --lint-only -Wall`` on the study points' Verilog, two files at a time. Fails (raises) when
    any file has an unwaived warning, after the table is written."""
    rows = verilog_points(args, lint=True)
    (out / "lint.json").write_text(json.dumps(rows, indent=1) + "\n")
    table = md_table([[r["module"], str(r["params"]),
                       "whole" if r["lint_runs"] == 1 else f"{r['lint_runs']} blocks",
                       "clean" if not r["problems"] else f"{len(r['problems'])} warnings",
                       ", ".join(f"{k} {v}" for k, v in sorted(r["waived"].items())), f"{r['lint_s']:.1f}"]
                      for r in rows], ["module", "parameters", "runs", "result", "waived categories", "seconds"])
    bad = [r for r in rows if r["problems"]]
    for r in bad:
        print(f"{r['path']}:\n" + "\n".join(f"    {line}" for line in r["problems"][:20]))
    if bad:
        raise RuntimeError(f"lint: {len(bad)} of {len(rows)} file(s) have unwaived warnings: "
                           f"{', '.join(r['path'] for r in bad)}")
    return ("## Lint (`verilator --lint-only -Wall`)\n\n" + table + "\n\n*runs*: *whole*, one Verilator run over "
            "the elaborated design; *N blocks*, a large design linted one distinct block at a time, each sub-block "
            "a stub with its port list (`verif/lint_blocks.py`: every module's text and every instance's "
            "connections are checked, combinational loops inside each block; those between blocks are checked "
            "at the module's first standard point, linted whole).")


def area_power_step(args, out: Path) -> str:
    """``dysharp area`` then ``dysharp power``, in the study's scope:

    * default: area and power of each block of the DySHARP addition at its architecture point (the
      report's overhead table), and the switch's area at 64 ports;
    * ``--full``: area over every registered module's grid, power of every module;
    * ``--quick``: area of the ``QUICK_AREA`` smallest modules (by Verilog) at their first standard point,
      power of the smallest module that has a workload.
    """
    scope = scope_of(args)
    modules = sorted(registry.MODULES)
    a = argparse.ArgumentParser()
    area_cmd.add_arguments(a)
    p = argparse.ArgumentParser()
    power_cmd.add_arguments(p)
    note = ""
    if scope == "quick":
        # A smoke run of the flow: the QUICK_AREA modules with the least Verilog at their first standard
        # point, and power of the smallest that has a workload. The sizes are the verilog step's files (the
        # `auto` emission, under the same per-point locks: whichever step comes first generates a file):
        # the flat form of the two big tops took 3 of this step's 4 CPU-minutes, only to rank them last.
        first = {m: registry.point(m, registry.get(m).points[0]) for m in modules}
        size = {m: locked_verilog(first[m]).stat().st_size for m in modules}
        small = sorted(modules, key=size.get)
        area_argv, power_argv = ["--max-mb", "0.5"], ["--cycles", "300", "--warmup", "100"]
        area_argv += [x for m in small[:QUICK_AREA] for x in grid_args(first[m])]
        powered = next((m for m in small if workloads.get(m)), small[0])
        # `dysharp power` starts from the architecture point (e.g. 64 ports): pin those parameters too.
        design = first[powered]
        pinned = [*(scaling.architecture_point(powered) or {}), *design.overrides]
        power_argv += ["-m", powered] + [f"--set={powered}.{k}={design.params[k]}" for k in dict.fromkeys(pinned)]
    elif scope == "default":
        arch = architecture_points()
        # Every architecture point is synthesized, whatever its Verilog size (the 64-port switch's allocator
        # part is 3.2 MB, past `dysharp area`'s default limit).
        area_argv = [x for m, pt in arch.items() for x in grid_args(m, pt)] + ["--max-mb", "0"]
        # Power defaults to each module's architecture point; the switch itself is not part of the addition.
        power_argv = [x for m in arch if m not in EXTRA_POINTS for x in ("-m", m)]
        note = ("\n\n*`--full` only*: the area grids (every module over its `area_grid`) and the power of "
                "modules outside the DySHARP addition (`dysharp area`, `dysharp power` or "
                "`dysharp study --full`).")
    else:
        area_argv, power_argv = [], []
    dest = out / "synth_reports"
    dest.mkdir(parents=True, exist_ok=True)
    if scope != "full":
        # Only --full covers every module's grid: the quick and default runs write their summaries beside
        # the report, so that their partial grids never replace the committed synth_reports/ ones.
        area_argv += ["--out", str(dest)]
        power_argv += ["--out", str(dest)]
    if scope == "quick":
        # A smoke run does not synthesize the architecture points for the overhead table (most of the time).
        report.SYNTHESIZE_MISSING = False
    try:
        area_cmd.run(a.parse_args(area_argv))
        power_cmd.run(p.parse_args(power_argv))
        md = report.write_reports(str(dest))
    finally:
        report.SYNTHESIZE_MISSING = True
    # --full: `dysharp area`/`power` also regenerated the committed synth_reports/ summaries.
    return md + note


def switch_bench_step(args, out: Path) -> str:
    from verif.bench import switch as bench_switch
    p = argparse.ArgumentParser()
    bench_switch.add_arguments(p)
    bargs = p.parse_args(["--out", str(out / "switch.json")] + (["--ports", "8", "--cycles", "800",
                                                                  "--loads", "0.2,0.6,1.0"] if args.quick else []))
    bench_switch.run(bargs)
    return bench_switch.markdown(json.loads((out / "switch.json").read_text()))
