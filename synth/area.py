"""The area of one design synthesized flat, and the grids of the area study (:func:`parse_grid`,
:func:`grid_points`; :mod:`synth.area_study` runs them, a large switch costed from its parts by
:mod:`synth.hierarchical`).

For one (module, point), :func:`flat_area_point`

1. generates the Verilog through :mod:`hw.registry` (cached);
2. synthesizes it with every ``lib.memory`` array as a black box (:mod:`synth.yosys_flow`): cell area
   split into sequential and logic, transistor count, and the arrays' geometry;
3. times the mapped netlist with OpenSTA when it is installed (register-to-register critical path with
   clock-to-Q and setup; the arrays are black boxes, so paths through them are cut);
4. costs every array twice: with CACTI 7 (an SRAM macro) and synthesized alone as flip-flops (the upper
   bound). The array is counted at the smaller of the two: CACTI's periphery dominates tiny arrays and
   CACTI finds no organisation for many-ported ones (the reason is recorded), where flip-flops win.
   Macros (:mod:`synth.macros`: CAMs written as registers and comparators) are black boxes too and are
   costed the same way, CACTI's fully associative array plus their synthesized control logic against
   the macro synthesized alone as flip-flops (:func:`cost_macro`).

Nothing is silently zero: a point whose synthesis yields no cells, or an array neither CACTI nor the
flip-flop synthesis can cost, is an error. Results (a point's synthesis, the flip-flop arrays, the macros)
are cached by :mod:`infra.engine` (``build/cache/synth``) under the content hash of the Verilog, the flow
version, the liberty checksum, the yosys command and the clock, so a re-run only synthesizes what changed;
the JSON files of earlier versions (``build/synth/area/`` etc.) are read once when present.
"""

import dataclasses
import hashlib
import itertools
import json
import re
import time
from pathlib import Path

from infra.procs import run_bounded
from hw import registry

from infra import engine

from . import cacti, liberty, macros, tools, yosys_flow

__all__ = ["AreaPoint", "grid_points", "pin_items", "rerun_hint", "parse_grid", "flat_area_point", "file_sha", "yosys_id",
           "strip_array_params", "run_sta", "sta_slack_ps", "sta_timing", "cost_array", "cost_macro", "BUILD",
           "DEFAULT_PERIOD_PS", "CLOCK_GHZ"]

CLOCK_GHZ = 1.5625
STA_VERSION = 2      # bump when the timing step changes (re-times cached points; v2: no cell of the
                     # rewritten OpenSTA netlist is deleted, see synth.yosys_flow.sta_netlist)
DEFAULT_PERIOD_PS = 1000.0 / CLOCK_GHZ
BUILD = Path("build/synth")


@dataclasses.dataclass
class AreaPoint:
    """The area of one :class:`hw.registry.DesignPoint`: its figures, or why it was skipped."""
    design: registry.DesignPoint
    result: dict | None    # figures, or None when skipped
    skipped: str = ""      # why it was skipped

    @property
    def module(self) -> str:
        return self.design.name

    @property
    def point(self) -> dict:
        """The parameters that differ from the module's defaults (:attr:`hw.registry.DesignPoint.overrides`)."""
        return self.design.overrides

    @property
    def params(self) -> dict:
        return self.design.params

    def as_dict(self):
        """``module``, ``point`` (the overrides), ``params`` (every parameter), ``result``, ``skipped``."""
        return {"module": self.module, "point": self.point, "params": dict(self.params),
                "result": self.result, "skipped": self.skipped}


# ---------------------------------------------------------------------------------------------------------
# Grid selection

def parse_grid(items: list[str], modules: list[str]) -> dict[str, dict[str, list]]:
    """``--grid module.param=v1,v2`` items -> {module: {param: [values]}} (validated)."""
    out: dict[str, dict[str, list]] = {}
    for item in items:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ValueError(f"--grid expects MODULE.PARAM=V1,V2,..., got {item!r}")
        key, values = item.split("=", 1)
        mod, param = key.split(".", 1)
        spec = registry.get(mod)
        if mod not in modules:
            raise ValueError(f"--grid names module {mod!r}, which is not selected (selected: "
                             f"{', '.join(modules)})")
        params = spec.params()
        if param not in params:
            raise ValueError(f"module {mod!r} has no parameter {param!r}; valid parameters: "
                             f"{', '.join(sorted(params))}")
        vals = []
        for v in values.split(","):
            if not v.strip():
                continue
            parsed = registry.parse_assignments([f"{mod}.{param}={v.strip()}"], [mod])[mod][param]
            vals.append(parsed)
        if not vals:
            raise ValueError(f"--grid {item!r} lists no values")
        out.setdefault(mod, {})[param] = vals
    return out


def grid_points(module: str, grid: dict[str, list] | None = None,
                fixed: dict | None = None) -> list[registry.DesignPoint]:
    """The design points of ``module``: the cartesian product of ``grid`` if given, else the registry's
    ``area_grid`` (or ``points``); ``fixed`` overrides are applied to every point. Each point is resolved
    once (unknown names refused); equal points (say ``entries=64`` and the defaults, when 64 is the
    default) are one point."""
    spec = registry.get(module)
    if grid:
        names = list(grid)
        points = [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]
    else:
        points = [dict(p) for p in (spec.area_grid if spec.area_grid is not None else spec.points)]
    return list(dict.fromkeys(registry.point(module, {**p, **(fixed or {})}) for p in points))


def pin_items(design: registry.DesignPoint) -> list[tuple[str, object]]:
    """The (parameter, value) pairs that select ``design`` alone with ``dysharp area --grid``: its overrides;
    at its defaults, one scalar parameter at its default (a module's ``--grid`` replaces its area grid, and
    a ``--grid`` value list is comma-separated, so a tuple default cannot be one)."""
    items = list(design.overrides.items())
    if not items:
        items = [(k, v) for k, v in design.params.items() if isinstance(v, (bool, int, float, str))][:1]
        if not items:
            raise ValueError(f"{design.name}: no scalar parameter to pin its default point with --grid")
    return items


def rerun_hint(design: registry.DesignPoint) -> str:
    """The ``dysharp area`` command that synthesizes ``design`` alone, whatever its size."""
    grids = " ".join(f"--grid {design.name}.{k}={v}" for k, v in pin_items(design))
    return f"dysharp area -m {design.name} {grids} --max-mb 0"


# ---------------------------------------------------------------------------------------------------------
# One point

def file_sha(path: Path) -> str:
    """The sha256 (hex) of a file's bytes (the liberty file's, in cache keys)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def yosys_id() -> str:
    """The yosys command the flow runs (its executables' names), part of every synthesis cache key."""
    return " ".join(Path(c).name for c in tools.yosys_command())


def _cached(parts: tuple, run, legacy: Path | None = None):
    """``run()``'s result, cached under the content key of ``parts`` (:func:`infra.engine.cached_call`);
    ``legacy``: the JSON cache file an earlier version wrote for it, taken when present."""

    def compute():
        if legacy is not None and legacy.is_file():
            try:
                return json.loads(legacy.read_text())
            except ValueError:
                pass
        return run()
    return engine.cached_call(engine.cache("synth"), engine.content_key(*parts), compute)


def strip_array_params(netlist_v: Path) -> None:
    """OpenSTA's Verilog reader takes no parameters: drop ``#(...)`` from the black-box instances, and
    give each instance its own (undefined) cell name, since OpenSTA sizes a black box's ports from the
    first instance it sees."""
    text = netlist_v.read_text()
    out, pos = [], 0
    for m in re.finditer(r"dysharp_array\s*#\(", text):
        if m.start() < pos:
            continue
        out.append(text[pos:m.start()] + "dysharp_array ")
        depth, i = 1, m.end()
        while depth:
            c = text[i]
            depth += (c == "(") - (c == ")")
            i += 1
        pos = i
    out.append(text[pos:])
    counter = iter(range(1 << 30))
    text = re.sub(r"\bdysharp_array\b(?!_)", lambda _m: f"dysharp_array_{next(counter)}", "".join(out))
    # Nor does it parse a concatenation as a port connection (yosys writes one where a black box's
    # multi-bit pin is fed by repeated or mixed nets). A black box has no timing arcs, so its pins end no
    # checked path: leaving them unconnected changes no reported path, as long as the logic that fed
    # them is kept (see yosys_flow.sta_netlist).
    text = re.sub(r"\.(\w+)\(\{[^(){}]*\}\)", r".\1()", text)
    netlist_v.write_text(text)


def run_sta(sta: str, liberty_path: Path, netlist_v: Path, top: str, period_ps: float, reports: list[str],
            tcl: Path) -> str:
    """Run OpenSTA on ``netlist_v`` with the flow's constraints (one clock ``clk`` at ``period_ps``, zero
    input and output delays) and the ``reports`` commands; the script is kept at ``tcl``. Returns its
    output (stdout + stderr)."""
    tcl.write_text("\n".join([
        f"read_liberty {Path(liberty_path).resolve()}", f"read_verilog {Path(netlist_v).resolve()}",
        f"link_design {top}",
        f"create_clock -name clk -period {period_ps / 1000:.6f} [get_ports clk]",
        "set_input_delay 0 -clock clk [delete_from_list [all_inputs] [get_ports clk]]",
        "set_output_delay 0 -clock clk [all_outputs]",
        *reports, "exit", ""]))
    r = run_bounded([sta, "-no_splash", "-exit", str(tcl)], capture_output=True, text=True, timeout=3600)
    return r.stdout + r.stderr


def _sta_report(sta: str, netlist_v: Path, top: str, liberty_path: Path, period_ps: float,
                workdir: Path) -> str:
    """OpenSTA's worst register-to-register path report (also kept in ``workdir/timing.txt``)."""
    out = run_sta(sta, liberty_path, netlist_v, top, period_ps, ["report_checks -path_delay max -digits 4"],
                  workdir / "timing.tcl")
    (workdir / "timing.txt").write_text(out)
    return out


_SLACK = re.compile(r"([-\d.]+)\s+slack")


def sta_slack_ps(report: str) -> float | None:
    """The worst slack, in ps, of an OpenSTA ``report_checks`` text (None when it reports no path)."""
    m = _SLACK.search(report)
    return float(m.group(1)) * 1000 if m else None


def sta_timing(netlist_v: Path, top: str, liberty_path: Path, period_ps: float, workdir: Path) -> dict | None:
    """Worst register-to-register path from OpenSTA (None when OpenSTA is not installed)."""
    sta = tools.opensta_binary(required=False)
    if not sta:
        return None
    strip_array_params(netlist_v)
    text = _sta_report(sta, netlist_v, top, liberty_path, period_ps, workdir)
    if "syntax error" in text:
        try:
            netlist_v = yosys_flow.sta_netlist(netlist_v, top, liberty_path, workdir / "sta")
        except yosys_flow.FlowError as e:
            # Said, not hidden: the point then reports ABC's path delay, labelled as such.
            print(f"[area] {top}: OpenSTA cannot read this netlist and yosys could not rewrite it ({e}); "
                  f"the critical path is ABC's estimate", flush=True)
            return None
        text = _sta_report(sta, netlist_v, top, liberty_path, period_ps, workdir)
    slack_ps = sta_slack_ps(text)
    if slack_ps is None or "syntax error" in text:
        raise yosys_flow.FlowError(f"OpenSTA found no timing path in {netlist_v} (see {workdir / 'timing.txt'})")
    return {"min_period_ps": period_ps - slack_ps, "slack_ps": slack_ps, "source": "OpenSTA"}


def cost_array(geom: dict, lib, liberty_path: Path, period_ps: float, node_nm: int = 45) -> dict:
    """CACTI and flip-flop figures of one array geometry, and which one is counted."""
    key = f"{geom['rows']}x{geom['width']}_r{geom['read_ports']}s{geom['sync_reads']}_w{geom['write_ports']}"
    out = {"geometry": key, "bits": geom["rows"] * geom["width"]}
    lib_sha = file_sha(liberty_path)
    out["ff"] = _cached(("ffarray", geom, yosys_flow.FLOW_VERSION, yosys_flow.FF_METHOD, lib_sha, yosys_id(),
                         period_ps),
                        lambda: yosys_flow.synthesize_ff_array(geom, lib, liberty_path, period_ps=period_ps,
                                                               workdir=BUILD / "ffarray" / key),
                        legacy=BUILD / "ffarray" / f"{key}-v{yosys_flow.FLOW_VERSION}-{lib_sha[:8]}.json")
    # Asynchronous read ports are modelled as SRAM read ports (CACTI has no other kind).
    arr = cacti.Array(rows=geom["rows"], width=geom["width"], read_ports=max(1, geom["read_ports"]),
                      write_ports=max(1, geom["write_ports"]), node_nm=node_nm)
    try:
        res = cacti.run(arr)
        out["cacti"] = res.as_dict()
    except cacti.CactiError as e:
        out["cacti"] = {"error": str(e).split(" (configuration")[0]}
    macro = out["cacti"].get("area_um2")
    if macro is not None and macro < out["ff"]["area_um2"]:
        out["chosen"], out["area_um2"] = "cacti", macro
    else:
        out["chosen"], out["area_um2"] = "ff", out["ff"]["area_um2"]
        out["why_ff"] = ("CACTI: " + out["cacti"]["error"]) if macro is None else \
            "flip-flops are smaller than CACTI's macro (periphery dominates)"
    return out


# A macro deeper than MACRO_FF_MAX_ENTRIES gets its flip-flop upper bound from its kind's RTL built at the
# MACRO_FF_SLICES depths (same key and value widths), on the line through the two: a CAM's storage,
# comparators, value read multiplexer and PLRU tree all grow by entry. Whole, the 1024-entry AL-TLB CAM
# took 18 minutes here. Measured on the AL-TLB's CAM (28-bit keys, 48-bit values): the 64/128-entry
# slices predict the design's own 256-entry macro within 0.04% and its 1024-entry macro +1.7% (the
# standalone block keeps every port, the design's macro has some pruned), so the figure stays an upper
# bound. ``tests/synth/test_synth.py`` checks the extrapolation on a point it can synthesize whole.
MACRO_FF_MAX_ENTRIES = 256
MACRO_FF_SLICES = (64, 128)


def _macro_ff(text: str, work: Path, lib, liberty_path: Path, period_ps: float, msg: str | None) -> dict:
    """A macro's Verilog ``text`` (top ``dysharp_macro``) synthesized alone as flip-flops in ``work``."""
    if msg:
        print(msg, flush=True)
    work.mkdir(parents=True, exist_ok=True)
    (work / "macro.v").write_text(text)
    r = yosys_flow.synthesize(work / "macro.v", "dysharp_macro", lib, liberty_path, period_ps=period_ps,
                              workdir=work)
    return {"area_um2": r["area_um2"], "area_seq_um2": r["area_seq_um2"], "transistors": r["transistors"],
            "yosys_s": r["yosys_s"]}


def _macro_ff_from_slices(kind, geom: dict, lib, liberty_path: Path, lib_sha: str, period_ps: float,
                          quiet: bool) -> dict:
    """The flip-flop figure of a macro of ``geom`` from its kind's RTL at the ``MACRO_FF_SLICES`` depths."""
    from amaranth.back import verilog
    figs = []
    for e in MACRO_FF_SLICES:
        g = {**geom, "entries": e}
        text = verilog.convert(kind.build(**g), name="dysharp_macro", emit_src=False)
        work = BUILD / "macro" / f"slice-{kind.name}{e}x{geom['key_width']}+{geom['value_width']}"

        msg = None if quiet else f"[area] macro {kind.name}: synthesizing a {e}-entry slice as flip-flops ..."
        figs.append(_cached(("macro-ff", hashlib.sha256(text.encode()).hexdigest(), yosys_flow.FLOW_VERSION,
                             lib_sha, yosys_id(), period_ps),
                            lambda text=text, work=work, msg=msg: _macro_ff(text, work, lib, liberty_path,
                                                                           period_ps, msg)))
    return ff_extrapolate(figs, MACRO_FF_SLICES, geom["entries"])


def ff_extrapolate(figs: list[dict], depths: tuple, entries: int) -> dict:
    """Flip-flop figures at ``entries`` on the line through those at the two ``depths``."""
    (e0, e1), (f0, f1) = depths, figs
    t = (entries - e0) / (e1 - e0)
    out = {k: f0[k] + t * (f1[k] - f0[k]) for k in ("area_um2", "area_seq_um2")}
    out["transistors"] = round(f0["transistors"] + t * (f1["transistors"] - f0["transistors"]))
    out["yosys_s"] = f0["yosys_s"] + f1["yosys_s"]
    out["extrapolated_from"] = list(depths)
    return out


def cost_macro(mac: dict, verilog_text: str, lib, liberty_path: Path, period_ps: float, node_nm: int = 45,
               quiet: bool = True) -> dict:
    """CACTI, control-logic and flip-flop figures of one macro (:mod:`synth.macros`), and which is
    counted: CACTI's array plus the synthesized control logic when that is below the flip-flop figure."""
    kind = macros.kind(mac["kind"])
    geom = {k: mac[k] for k in ("entries", "key_width", "value_width")}
    key = f"{kind.name}{geom['entries']}x{geom['key_width']}+{geom['value_width']}"
    lib_sha = file_sha(liberty_path)
    lib8 = lib_sha[:8]
    out = {"geometry": key, "kind": kind.name, **kind.bits(geom)}
    out["bits"] = out["cam_bits"] + out["sram_bits"]
    # The upper bound: the macro's own Verilog, renamed, synthesized alone (cached by its text).
    text = macros.module_text(verilog_text, mac["module"])
    text = re.sub(r"^module\s+\\?[\w$.]+", "module dysharp_macro", text, count=1, flags=re.M)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    work = BUILD / "macro" / f"{key}-{digest}"

    def ff_run():
        return _macro_ff(text, work, lib, liberty_path, period_ps, None if quiet else
                         f"[area] macro {key}: synthesizing it alone as flip-flops (the upper bound) ...")
    if geom["entries"] <= MACRO_FF_MAX_ENTRIES:
        out["ff"] = _cached(("macro-ff", hashlib.sha256(text.encode()).hexdigest(), yosys_flow.FLOW_VERSION,
                             lib_sha, yosys_id(), period_ps), ff_run,
                            legacy=BUILD / "macro" / f"{key}-{digest}-v{yosys_flow.FLOW_VERSION}-{lib8}.json")
    else:
        out["ff"] = _macro_ff_from_slices(kind, geom, lib, liberty_path, lib_sha, period_ps, quiet)
    # What CACTI's array lacks (valid bits, replacement, victim selection, forwarding): the same RTL with
    # 1-bit keys and values.
    from amaranth.back import verilog
    cparams = kind.control_params(geom)
    cslug = "_".join(f"{k}{v}" for k, v in sorted(cparams.items()))
    ctext = verilog.convert(kind.build(**cparams), name="dysharp_macro_control", emit_src=False)
    cdigest = hashlib.sha256(ctext.encode()).hexdigest()[:16]
    cwork = BUILD / "macro" / f"control-{kind.name}-{cslug}"

    def control_run():
        if not quiet:
            print(f"[area] macro {key}: synthesizing its control logic ({cparams}) ...", flush=True)
        cwork.mkdir(parents=True, exist_ok=True)
        (cwork / "control.v").write_text(ctext)
        r = yosys_flow.synthesize(cwork / "control.v", "dysharp_macro_control", lib, liberty_path,
                                  period_ps=period_ps, workdir=cwork)
        return {"area_um2": r["area_um2"], "area_seq_um2": r["area_seq_um2"], "transistors": r["transistors"],
                "cells": r["cells"], "flip_flops": sum(n for c, n in r["cells"].items()
                                                       if not c.startswith("$") and lib.cell(c)["sequential"]),
                "yosys_s": r["yosys_s"]}
    out["control"] = _cached(
        ("macro-control", hashlib.sha256(ctext.encode()).hexdigest(), yosys_flow.FLOW_VERSION, lib_sha,
         yosys_id(), period_ps), control_run,
        legacy=BUILD / "macro" / f"control-{kind.name}-{cslug}-{cdigest}-v{yosys_flow.FLOW_VERSION}-{lib8}.json")
    try:
        out["cacti"] = cacti.run(kind.cacti_array(geom)).as_dict()
    except cacti.CactiError as e:
        out["cacti"] = {"error": str(e).split(" (configuration")[0]}
    arr = out["cacti"].get("area_um2")
    macro = None if arr is None else arr + out["control"]["area_um2"]
    out["macro_um2"] = macro
    if macro is not None and macro < out["ff"]["area_um2"]:
        out["chosen"], out["area_um2"] = "cacti", macro
        out["sram_um2"], out["logic_um2"] = arr, out["control"]["area_um2"]
        # CAM cells ~10 transistors per bit (6T storage + 4T compare), SRAM 6 per bit, plus the control.
        out["transistors"] = 10 * out["cam_bits"] + 6 * out["sram_bits"] + out["control"]["transistors"]
    else:
        out["chosen"], out["area_um2"] = "ff", out["ff"]["area_um2"]
        out["sram_um2"], out["logic_um2"] = 0.0, out["ff"]["area_um2"]
        out["transistors"] = out["ff"]["transistors"]
        out["why_ff"] = ("CACTI: " + out["cacti"]["error"]) if arr is None else \
            "flip-flops are smaller than CACTI's array plus the control logic"
    return out


def flat_area_point(design: "registry.DesignPoint | str", point: dict | None = None, *,
                    period_ps: float = DEFAULT_PERIOD_PS, netlist: bool = True, max_mb: float = 0.0,
                    cache: bool = True, quiet: bool = False) -> AreaPoint:
    """Synthesize ``design`` (a :class:`hw.registry.DesignPoint`, or a module name and its overrides
    ``point``) as one design and cost its arrays (see the module docstring).
    :func:`synth.area_study.area_point` costs a large switch from its parts instead."""
    design = registry.point(design, point)
    module, point = design.name, design.overrides
    lp = tools.liberty_path()
    lib = liberty.load(lp)
    vpath = design.verilog("build/verilog")
    size_mb = vpath.stat().st_size / 1e6
    slug = vpath.stem
    vtext = vpath.read_text()
    macs = macros.find_macros(vtext)
    key = {"verilog": file_sha(vpath), "flow": yosys_flow.FLOW_VERSION, "liberty": tools.LIBERTY_SHA256,
           "yosys": yosys_id(), "period_ps": period_ps,
           "sta": STA_VERSION if tools.opensta_binary(required=False) else False}
    if macs:
        key["macros"] = [m["module"] for m in macs]
    store = engine.cache("synth")
    ckey = engine.content_key("area", key)
    work = BUILD / "work" / slug
    # One process at a time synthesizes into a work folder (two commands, or a report and a sweep, may
    # want the same point); the second then finds the first one's entry.
    with engine.key_lock(store, f"work-{slug}"):
        # The netlist files stay in the work folder (synth.power reads them): an entry without them is stale
        # when they are wanted.
        has_netlist = not netlist or (work / "netlist.json").is_file()
        cached = store.get(ckey, retry=True) if cache and has_netlist else None
        if cached is None and cache and has_netlist:
            cached = _legacy_area(BUILD / "area" / f"{slug}.json", key)
        if cached is None:
            if max_mb and size_mb > max_mb:
                return AreaPoint(design, None,
                                 skipped=f"Verilog is {size_mb:.1f} MB (> --max-mb {max_mb:g}); synthesis would "
                                         f"take long on this machine; run `{rerun_hint(design)}` to include it")
            if not quiet:
                print(f"[area] {module} {point or '(defaults)'}: synthesizing {size_mb:.2f} MB of Verilog ...",
                      flush=True)
            t0 = time.time()
            syn = yosys_flow.synthesize(vpath, module, lib, lp, period_ps=period_ps, workdir=work, netlist=netlist,
                                        macros=[m["module"] for m in macs])
            # A design that is one macro has no cells of its own, hence no register-to-register path.
            timing = sta_timing(work / "netlist.v", module, lp, period_ps, work) if syn["cell_count"] else None
            cached = {"key": key, "syn": syn, "timing": timing, "seconds": time.time() - t0}
            store.set(ckey, cached, retry=True)
    # The arrays are costed on every call (CACTI and flip-flop results have caches of their own), so a
    # change to the array costing never forces a re-synthesis.
    syn, timing = cached["syn"], cached["timing"]
    t1 = time.time()
    arrays = []
    by_geom = {}
    for mem in syn["memories"]:
        geom = {k: mem[k] for k in ("rows", "width", "read_ports", "write_ports", "sync_reads")}
        g = json.dumps(geom, sort_keys=True)
        if g not in by_geom:
            by_geom[g] = cost_array(geom, lib, lp, period_ps)
        arrays.append({"name": mem["name"], "kind": "ram", **geom, **by_geom[g]})
    for a in arrays:
        chosen_cacti = a["chosen"] == "cacti"
        a["macro_um2"] = a["cacti"].get("area_um2")
        a["sram_um2"], a["logic_um2"] = (a["area_um2"], 0.0) if chosen_cacti else (0.0, a["area_um2"])
        a["transistors"] = 6 * a["bits"] if chosen_cacti else (a["ff"].get("transistors") or 0)
    for i, mac in enumerate(macs):
        n = syn.get("macro_cells", {}).get(mac["module"], 1)
        c = cost_macro(mac, vtext, lib, lp, period_ps, quiet=quiet)
        for _ in range(n):
            arrays.append({"name": mac["module"], "cell_type": f"{macros.MACRO_PREFIX}{i}", "rows": mac["entries"],
                           "width": mac["value_width"], "key_width": mac["key_width"], "read_ports": 1,
                           "write_ports": 1, "sync_reads": 1, **c})
    logic = syn["area_um2"]
    arrays_chosen = sum(a["area_um2"] for a in arrays)
    arrays_ff = sum(a["ff"]["area_um2"] for a in arrays)
    arrays_cacti = sum(a["macro_um2"] if a["macro_um2"] is not None else a["ff"]["area_um2"] for a in arrays)
    result = {
        "verilog": str(vpath), "verilog_mb": size_mb,
        "cell_count": syn["cell_count"], "cells": syn["cells"],
        "area_seq_um2": syn["area_seq_um2"], "area_logic_um2": syn["area_logic_um2"],
        "area_random_logic_um2": logic,
        "arrays_um2": arrays_chosen, "arrays_cacti_um2": arrays_cacti, "arrays_ff_um2": arrays_ff,
        "area_um2": logic + arrays_chosen, "area_all_ff_um2": logic + arrays_ff,
        "array_bits": sum(a["bits"] for a in arrays),
        "transistors_logic": syn["transistors"],
        "transistors_all_ff": syn["transistors"] + sum((a["ff"].get("transistors") or 0) for a in arrays),
        "transistors": syn["transistors"] + sum(a["transistors"] for a in arrays),
        "arrays_sram_um2": sum(a["sram_um2"] for a in arrays),
        "arrays_logic_um2": sum(a["logic_um2"] for a in arrays),
        "critical_path_ps": (timing or {}).get("min_period_ps", syn["critical_path_ps"]),
        "timing_source": (timing or {}).get("source", "ABC stime" if syn["critical_path_ps"] else "none"),
        "period_ps": period_ps, "arrays": arrays, "seconds": cached["seconds"] + time.time() - t1,
        "yosys_s": syn["yosys_s"],
        # The yosys that ran (synth.tools.yosys_command), and the native one that re-ran the point after a
        # YoWASP trap (synth/yosys_flow.py), if one did.
        "yosys": key["yosys"],
        "yosys_fallback": syn.get("yosys_fallback"),
    }
    if result["area_um2"] <= 0:
        raise yosys_flow.FlowError(f"{module} {point}: zero area after synthesis; refusing it")
    if not quiet:
        print(f"[area] {module} {point or '(defaults)'}: {result['area_um2']:.0f} um^2 "
              f"({result['seconds']:.0f} s)", flush=True)
    return AreaPoint(design, result)


def _legacy_area(path: Path, key: dict) -> dict | None:
    """The entry an earlier version cached as JSON in ``path``, if its key matches."""
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text())
        if d.get("key") == key:
            return d if "syn" in d else _from_old_cache(d)
    except (ValueError, KeyError):
        pass
    return None


def _from_old_cache(d: dict) -> dict:
    """A cache entry written before synthesis and array costing were cached separately."""
    r = d["result"]
    syn = {"cells": r["cells"], "cell_count": r["cell_count"], "area_seq_um2": r["area_seq_um2"],
           "area_logic_um2": r["area_logic_um2"], "area_um2": r["area_random_logic_um2"],
           "critical_path_ps": None, "transistors": r["transistors_logic"], "yosys_s": r["yosys_s"],
           "memories": [{k: a[k] for k in ("name", "rows", "width", "read_ports", "write_ports", "sync_reads")}
                        for a in r["arrays"]]}
    timing = {"min_period_ps": r["critical_path_ps"], "source": r["timing_source"]} \
        if r["timing_source"] == "OpenSTA" else None
    return {"key": d["key"], "syn": syn, "timing": timing, "seconds": r["seconds"]}
