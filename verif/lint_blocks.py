"""Lint of a large design one distinct block at a time (what :func:`verif.lint.lint_file` does for a large
file that repeats blocks).

Verilator's lint elaborates every instance, even of a deduplicated file (:mod:`hw.emission`) that writes
each distinct block once: the 64-port integrated switch (two 64-port networks, 64 AL-TLBs, 64 reduction
engines) took 594 s, the 64-port switch 173 s. Here a module whose elaborated size (its Verilog text, each
instance counted) is at most ``WHOLE_BYTES``, or that instantiates nothing twice, is linted whole with its
sub-modules. A larger one is linted with each sub-module replaced by a *stub* that keeps its port list
(names, directions, widths), and each distinct sub-module is then handled the same way. So:

* every module's own text is linted at least once, in a run that elaborates it (a warning in a block is
  reported once per module text either way: the 64-port designs give the same waived counts both ways);
* every instance's connections are checked against the real port list (missing or extra pins, widths);
* a combinational loop is found when it lies inside a module linted whole; one that runs through two
  sub-blocks of a stubbed module is not, since a stub has no path from its inputs to its outputs. The
  study therefore also lints such a design whole at its first standard point (the same composition
  code at fewer ports).

A stub's own warnings (undriven outputs, unused inputs) are switched off inside it.
``dysharp bench lint_blocks`` times both ways on the big tops.
"""

import re
from dataclasses import dataclass, field

__all__ = ["WHOLE_BYTES", "VerilogModule", "module_spans", "parse_modules", "stub", "LintRun", "plan", "run_text"]

WHOLE_BYTES = 4_000_000     # elaborated Verilog up to this is linted whole (the 64-port AL-TLB: 2.7 MB, 25 s)

_MODULE_RE = re.compile(r"^module\s+(\\?[\w$.]+)\s*\(", re.M)
_INSTANCE = re.compile(r"^\s+\\?([\w$.]+)\s+\\?[\w$.]+\s*\(", re.M)
_PORT = re.compile(r"^\s*(input|output|inout)\b[^;]*;", re.M)


@dataclass
class VerilogModule:
    name: str                   # as declared, an escaped name without its backslash (``top__Block.fifo``)
    text: str                   # from ``module`` to ``endmodule``, newline included
    children: dict = field(default_factory=dict)    # sub-module name -> instance count


def module_spans(text: str) -> dict[str, tuple[int, int]]:
    """Module name (an escaped name without its backslash) -> (start, end) offsets of its text, from
    ``module`` to ``endmodule``, in a Verilog file as yosys ``write_verilog`` (Amaranth's backend) writes it
    (one ``module`` keyword at the start of a line per module)."""
    out = {}
    for m in _MODULE_RE.finditer(text):
        end = text.find("endmodule", m.end())
        if end < 0:
            raise ValueError(f"module {m.group(1)} has no endmodule")
        out[m.group(1).lstrip("\\")] = (m.start(), end + len("endmodule"))
    return out


def parse_modules(text: str) -> dict[str, VerilogModule]:
    """The modules of a Verilog file as yosys ``write_verilog`` writes it (split by :func:`module_spans`),
    with their instances of each other."""
    mods = {name: VerilogModule(name, text[s:e] + "\n") for name, (s, e) in module_spans(text).items()}
    if not mods:
        raise ValueError("no Verilog module found")
    for mod in mods.values():
        body = mod.text.split(");\n", 1)[1]
        for inst in _INSTANCE.finditer(body):
            if inst.group(1) in mods:
                mod.children[inst.group(1)] = mod.children.get(inst.group(1), 0) + 1
    return mods


def stub(mod: VerilogModule) -> str:
    """``mod`` with its port list and port declarations only, its own lint warnings off."""
    header = mod.text.split(");\n", 1)[0] + ");\n"
    ports = "".join(f"  {p.group(0).strip()}\n" for p in _PORT.finditer(mod.text))
    return ("/* verilator lint_off UNDRIVEN */\n/* verilator lint_off UNUSEDSIGNAL */\n" + header + ports +
            "endmodule\n/* verilator lint_on UNUSEDSIGNAL */\n/* verilator lint_on UNDRIVEN */\n")


@dataclass(frozen=True)
class LintRun:
    top: str
    stubs: tuple = ()       # sub-modules of ``top`` replaced by stubs (empty: ``top`` linted whole)


def _elaborated(mods, name, memo) -> int:
    if name not in memo:
        m = mods[name]
        memo[name] = len(m.text) + sum(n * _elaborated(mods, c, memo) for c, n in m.children.items())
    return memo[name]


def plan(mods: dict[str, VerilogModule], top: str, whole_bytes: int | None = None) -> list[LintRun]:
    """The lint runs that cover ``top``'s design (see the module doc). A module is linted whole when its
    elaborated size is at most ``whole_bytes`` (default :data:`WHOLE_BYTES`) or when nothing in it is
    instantiated twice (a flat emission: block by block would lint the same text)."""
    if top not in mods:
        raise ValueError(f"module {top!r} is not in the file; modules: {', '.join(sorted(mods))}")
    limit = WHOLE_BYTES if whole_bytes is None else whole_bytes
    memo, runs, seen = {}, [], set()

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        size = _elaborated(mods, name, memo)
        distinct = sum(len(mods[n].text) for n in _subtree(mods, name, []))
        if size <= limit or size == distinct:
            runs.append(LintRun(name))
            return
        runs.append(LintRun(name, tuple(sorted(mods[name].children))))
        for child in sorted(mods[name].children):
            visit(child)
    visit(top)
    return runs


def _subtree(mods, name, out):
    if name not in out:
        out.append(name)
        for c in mods[name].children:
            _subtree(mods, c, out)
    return out


def run_text(mods: dict[str, VerilogModule], run: LintRun) -> str:
    """The Verilog of one run: its top with its whole subtree, or with its sub-modules as stubs."""
    if run.stubs:
        return mods[run.top].text + "".join(stub(mods[c]) for c in run.stubs)
    return "".join(mods[n].text for n in _subtree(mods, run.top, []))

