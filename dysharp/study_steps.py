"""The study's steps (see :mod:`dysharp.commands.study`). Each returns a Markdown section."""

import argparse
import json
from pathlib import Path

from tabulate import tabulate
from tqdm import tqdm

from hw import registry


def md_table(rows, headers) -> str:
    """A GitHub Markdown table; cells are written as given (no re-formatting of numbers)."""
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def study_points(args) -> list[tuple[str, dict]]:
    """Every module's standard points (the 64-port switch included); ``--quick``: each module's first."""
    if getattr(args, "quick", False):
        return [(n, registry.get(n).points[0]) for n in sorted(registry.MODULES)]
    return [(n, p) for n in sorted(registry.MODULES) for p in registry.get(n).points]


def verilog_step(args, out: Path) -> str:
    """Every point's Verilog; the big switch points with one module per distinct sub-block (``auto``,
    :func:`hw.registry.emission_for`)."""
    from dysharp.commands.verilog import generate
    points = study_points(args)
    paths = generate(points, "build/verilog", quiet=True, emission="auto")
    rows = [[n, str(p), f"`{path}`", f"{path.stat().st_size / 1e6:.2f}"] for (n, p), path in zip(points, paths)]
    return "## Verilog\n\n" + md_table(rows, ["module", "parameters", "file", "MB"])


def lint_step(args, out: Path) -> str:
    from dysharp.commands.lint import lint_file
    rows = []
    for n, p in tqdm(study_points(args), desc="lint", unit="file", leave=False, dynamic_ncols=True):
        path = registry.generate_verilog(n, p, "build/verilog", emission="auto")
        waived, problems = lint_file(path, n)
        rows.append([n, str(p), "clean" if not problems else f"{len(problems)} warnings",
                     ", ".join(f"{k} {v}" for k, v in sorted(waived.items()))])
    return ("## Lint (`verilator --lint-only -Wall`)\n\n" +
            md_table(rows, ["module", "parameters", "result", "waived categories"]))


def switch_bench_step(args, out: Path) -> str:
    from verif.bench import switch as bench_switch
    p = argparse.ArgumentParser()
    bench_switch.add_arguments(p)
    bargs = p.parse_args(["--out", str(out / "switch.json")] + (["--ports", "8", "--cycles", "800",
                                                                  "--loads", "0.2,0.6,1.0"] if args.quick else []))
    bench_switch.run(bargs)
    return bench_switch.markdown(json.loads((out / "switch.json").read_text()))
