"""The study's steps (see :mod:`dysharp.commands.study`). Each returns a Markdown section."""

import argparse
import json
from pathlib import Path

from tabulate import tabulate

from hw import registry
from infra import engine
from verif import lint as verilator_lint


def md_table(rows, headers) -> str:
    """A GitHub Markdown table; cells are written as given (no re-formatting of numbers)."""
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


JOBS = None     # worker processes of the Verilog and lint steps (None: the task engine's default)


def study_points(args) -> list[tuple[str, dict]]:
    """The points the Verilog and lint steps cover: ``--quick``, each module's first standard point;
    default, each module at its architecture point (the 64-port DySHARP addition, :mod:`synth.scaling`;
    the registry's defaults for a module outside it), the 64-port switch and the 64-port integrated switch
    (with its default table sizes: the 1024-entry AL-TLB is linted alone at its architecture point, since
    Verilator expands all 64 of them in the top); ``--full``, every standard point."""
    names = sorted(registry.MODULES)
    if getattr(args, "quick", False):
        return [(n, registry.get(n).points[0]) for n in names]
    if getattr(args, "full", False):
        return [(n, p) for n in names for p in registry.get(n).points]
    from synth import scaling
    from synth.study_step import EXTRA_POINTS
    arch = {n: scaling.architecture_point(n) or {} for n in names}
    arch.update({n: p for n, p in EXTRA_POINTS.items() if n in arch})
    if "dysharp_switch" in arch:
        arch["dysharp_switch"] = {"ports": 64}
    return list(arch.items())


def lint_points(args) -> list[tuple[str, dict, bool]]:
    """(module, point, whole) of the Verilog and lint steps: :func:`study_points`, plus, outside the quick
    scope, the first standard point of each module emitted deduplicated (the big tops) when its study
    point is another. ``whole``: lint the design in one Verilator run even when it is large (every module's
    first standard point), so that a combinational loop between two blocks is found there; a larger point
    is linted block by block (:func:`verif.lint.lint_file`)."""
    out = []
    for name, params in study_points(args):
        spec = registry.get(name)
        first = spec.resolve(spec.points[0])
        out.append((name, params, spec.resolve(params) == first))
        if spec.dedup_from_ports is not None and spec.resolve(params) != first:
            out.append((name, spec.points[0], True))
    return out


def _verilog_and_lint(item) -> dict:
    """One point: its Verilog (``auto`` emission), then, with ``lint``, ``verilator --lint-only -Wall`` on it
    (whole, or block by block when large and not ``whole``; a task of :func:`infra.engine.map_tasks`)."""
    import time

    from verif.harness.runner import locked_verilog
    name, params, whole, lint = item
    t0 = time.time()
    path = locked_verilog(name, params)
    row = {"path": str(path), "mb": path.stat().st_size / 1e6, "verilog_s": time.time() - t0}
    if lint:
        t0 = time.time()
        waived, problems, runs = verilator_lint.lint_file(path, name, whole=whole, with_runs=True)
        row.update(lint_s=time.time() - t0, problems=problems, waived=dict(waived), lint_runs=runs)
    return row


def verilog_points(args, lint: bool) -> list[dict]:
    """:func:`_verilog_and_lint` over :func:`lint_points` on the task engine, the largest points first (by
    GPUs, ports and table entries, a rough size order) so that the two workers end together."""
    points = lint_points(args)

    def size(point):
        p = registry.get(point[0]).resolve(point[1])
        return 16 * p.get("gpus", 0) + p.get("ports", 0) + p.get("entries", 0) / 16
    order = sorted(range(len(points)), key=lambda i: size(points[i]), reverse=True)
    rows = engine.map_tasks(_verilog_and_lint, [(*points[i], lint) for i in order],
                            desc="verilog + lint" if lint else "verilog", progress=True, jobs=JOBS,
                            labels=[" ".join([points[i][0]] + [f"{k}={v}" for k, v in points[i][1].items()])
                                    for i in order])
    out = [None] * len(points)
    for i, r in zip(order, rows):
        out[i] = {"module": points[i][0], "params": points[i][1], **r}
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


def switch_bench_step(args, out: Path) -> str:
    from verif.bench import switch as bench_switch
    p = argparse.ArgumentParser()
    bench_switch.add_arguments(p)
    bargs = p.parse_args(["--out", str(out / "switch.json")] + (["--ports", "8", "--cycles", "800",
                                                                  "--loads", "0.2,0.6,1.0"] if args.quick else []))
    bench_switch.run(bargs)
    return bench_switch.markdown(json.loads((out / "switch.json").read_text()))
