"""The study's steps (see :mod:`dysharp.commands.study`). Each returns a Markdown section."""

import argparse
import json
import shutil
from pathlib import Path

from hw import registry


def verilog_step(args, out: Path) -> str:
    from dysharp.commands.verilog import generate
    points = [(n, p) for n in sorted(registry.MODULES) for p in registry.get(n).points]
    if args.quick:
        points = [(n, p) for n, p in points if p.get("ports", 8) <= 16]
    paths = generate(points, "build/verilog", quiet=True)
    rows = [f"| {n} | {p} | `{path}` | {path.stat().st_size / 1e6:.2f} |" for (n, p), path in zip(points, paths)]
    return ("## Verilog\n\n| module | parameters | file | MB |\n|---|---|---|---|\n" + "\n".join(rows))


def lint_step(args, out: Path) -> str:
    from dysharp.commands.lint import lint_file
    points = [(n, p) for n in sorted(registry.MODULES) for p in registry.get(n).points]
    if args.quick:
        points = [(n, p) for n, p in points if p.get("ports", 8) <= 16]
    rows = []
    for n, p in points:
        path = registry.generate_verilog(n, p, "build/verilog")
        waived, problems = lint_file(path, n)
        rows.append(f"| {n} | {p} | {'clean' if not problems else f'{len(problems)} warnings'} | "
                    f"{', '.join(f'{k} {v}' for k, v in sorted(waived.items()))} |")
    return ("## Lint (`verilator --lint-only -Wall`)\n\n| module | parameters | result | waived categories |\n"
            "|---|---|---|---|\n" + "\n".join(rows))


def switch_bench_step(args, out: Path) -> str:
    from verif.bench import switch as bench_switch
    p = argparse.ArgumentParser()
    bench_switch.add_arguments(p)
    bargs = p.parse_args(["--out", str(out / "switch.json")] + (["--ports", "8", "--cycles", "800",
                                                                  "--loads", "0.2,0.6,1.0"] if args.quick else []))
    bench_switch.run(bargs)
    return bench_switch.markdown(json.loads((out / "switch.json").read_text()))
