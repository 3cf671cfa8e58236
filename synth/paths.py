"""The worst register-to-register paths of a synthesized point, by endpoint, with register names.

``dysharp area`` keeps each point's mapped netlist and OpenSTA's worst path (``timing.txt``) in
``build/synth/work/<point>/``; the cells there are numbered (``_12345_``), not named. This re-runs
OpenSTA on the same netlist (the rewritten ``sta/netlist.v`` when the area flow needed one) at a given
clock and prints the worst endpoints (one line each) and the worst paths with net names, every flip-flop
labelled with the register it holds (its ``Q`` net in the mapped netlist)::

    dysharp timing --paths build/synth/work/reduction_buffer__entries64 [--ps 2841] [--endpoints 40]

The default clock, 2,841 ps, is the 640 ps port clock before the 45 nm -> N5 delay scaling
(:mod:`synth.scaling`).
"""

import re
import sys
from pathlib import Path

from . import scaling, tools
from .area import run_sta

__all__ = ["register_names", "sta_inputs", "report"]


def register_names(netlist_text: str) -> dict[str, str]:
    """Flip-flop instance -> the net on its ``Q`` pin (the register's name), from a mapped netlist."""
    out = {}
    for m in re.finditer(r"\b(DFF\w*)\s+(\S+)\s*\((.*?)\);", netlist_text, re.S):
        q = re.search(r"\.Q\(([^)]*)\)", m.group(3))
        if q and q.group(1).strip():
            out[m.group(2)] = q.group(1).strip()
    return out


def sta_inputs(workdir: Path) -> tuple[Path | None, str | None]:
    """(netlist OpenSTA reads, top module) of a synthesized point's work folder: the rewritten
    ``sta/netlist.v`` when the flow needed one, else ``netlist.v``; the top from its ``timing.tcl``. None
    for what is missing."""
    netlist = next((p for p in (workdir / "sta" / "netlist.v", workdir / "netlist.v") if p.is_file()), None)
    tcl = workdir / "timing.tcl"
    m = re.search(r"link_design\s+(\S+)", tcl.read_text()) if tcl.is_file() else None
    return netlist, m.group(1) if m else None


def report(workdir, top: str | None = None, period_ps: float | None = None, endpoints: int = 40,
           paths: int = 3) -> str:
    """OpenSTA's endpoint summary and worst ``paths`` paths of the point in ``workdir``, registers named."""
    workdir = Path(workdir)
    period_ps = period_ps or scaling.PORT_PERIOD_PS / scaling.DELAY
    if period_ps <= 0:
        raise ValueError(f"the clock period must be positive, got {period_ps} ps")
    netlist, found_top = sta_inputs(workdir)
    if netlist is None:
        raise ValueError(f"{workdir}: no netlist.v (synthesize the point with `dysharp area` first)")
    top = top or found_top
    if top is None:
        raise ValueError(f"{workdir}: no timing.tcl to take the top module from; pass --top")
    sta = tools.opensta_binary()
    out = run_sta(sta, tools.liberty_path(), netlist, top, period_ps,
                  [f"report_checks -path_delay max -group_count {endpoints} -endpoint_count 1 -format end",
                   f"report_checks -path_delay max -group_count {paths} -endpoint_count 1 -fields {{net}} -digits 3"],
                  workdir / "paths.tcl")
    names = register_names((workdir / "netlist.v").read_text())

    def label(match):
        inst = match.group(1)
        return f"{inst}[{names[inst]}]{match.group(2)}" if inst in names else match.group(0)
    lines = [re.sub(r"(_\d+_)(/\w+)", label, ln) for ln in out.splitlines() if not ln.startswith("Warning")]
    return "\n".join(lines)
