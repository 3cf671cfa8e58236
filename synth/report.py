"""``synth_reports/``: the area and power report (Markdown), its CSV tables and PNG plots.

Inputs are the JSON results of the last ``dysharp area`` (``build/synth/area.json``) and ``dysharp power``
(``build/synth/power.json``) runs. Outputs (``synth_reports/``): ``report.md``, ``area.csv``,
``arrays.csv``, ``power.csv``, the plots, and the small committed summaries ``area_summary.csv``,
``power_summary.csv`` and ``overhead_summary.csv``.
"""

import csv
import json
from pathlib import Path

from tabulate import tabulate

from hw import registry

from . import area_study, integrated, scaling, timing, tools
from .summary_csv import merge_csv, point_label, relabel, row_label, write_csv

__all__ = ["write_reports", "overhead", "write_overhead_csv", "AREA_JSON", "POWER_JSON", "BLOCKS_ROLE"]

# False: the overhead table uses only the area points at hand and marks the others, instead of
# synthesizing every block at its architecture point (``dysharp study --quick`` sets it).
SYNTHESIZE_MISSING = True

AREA_JSON = Path("build/synth/area.json")
POWER_JSON = Path("build/synth/power.json")

# The switch-side total of the role rows: each block synthesized alone at its architecture point, times 64.
# It leaves out what only the composed design has (the response network, the VC link ends, the plumbing),
# so it is below the headline, the integrated design's row (synth.integrated.HEADLINE_ROLE).
BLOCKS_ROLE = "TOTAL switch side, sum of blocks (64 ports)"


def _load(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def _fmt(x, spec=",.0f"):
    return "-" if x is None else format(x, spec)


def _table(rows, headers) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def _power_for(power: list | None, module: str, design: registry.DesignPoint | None = None):
    """The power result of ``module`` (at ``design`` when given: a figure at another size is not used)."""
    for p in power or []:
        if p.get("module") == module and "no_gating" in p and (
                design is None or registry.point(module, p.get("params", p.get("point"))) == design):
            return p
    return None


def overhead(area_points: list[dict], power: list | None) -> dict:
    """The DySHARP addition at 64 ports: per role (:data:`synth.scaling.ROLES`), its module(s) at the
    role's architecture point; per-port blocks x 64, GPU-side blocks per GPU."""

    registered = sorted(registry.MODULES)
    roles = scaling.resolve_roles(registered)
    at_hand = {}       # design point -> its area result (the first, when a point is there twice)
    for a in area_points:
        if a["result"] and a["module"] in registry.MODULES:
            at_hand.setdefault(registry.point(a["module"], a["point"]), a["result"])
    ports = scaling.NVSWITCH["ports"]
    rows = []
    for r in roles:
        if not r["modules"]:
            rows.append({"role": r["role"], "side": r["side"], "modules": "", "status": "not registered",
                         "note": r.get("absent", "")})
            continue
        logic = sram = transistors = pw = pw_gated = 0.0
        pw_known = True
        points, notes = [], []
        found, designs = {}, {}
        for m in r["modules"]:
            designs[m] = design = registry.point(m, r.get("points", {}).get(m, {}))
            found[m] = at_hand.get(design)
        if not SYNTHESIZE_MISSING and None in found.values():
            rows.append({"role": r["role"], "side": r["side"], "modules": "+".join(r["modules"]),
                         "status": "not synthesized",
                         "note": "not synthesized in this run (`dysharp area` at the architecture point)"})
            continue
        for m in r["modules"]:
            design = designs[m]
            res = found[m]
            if res is None:
                res = area_study.area_point(design, quiet=True).result
            off = [a for a in res["arrays"] if a["name"].split(".")[-1] in r.get("off_chip", ())]
            on = [a for a in res["arrays"] if a not in off]
            if off:
                notes.append(f"{m}: left out as off-chip: {', '.join(a['name'] + ' ' + a['geometry'] for a in off)}")
            logic += res["area_random_logic_um2"] + sum(a.get("logic_um2", a["area_um2"] if a["chosen"] == "ff" else 0)
                                                        for a in on)
            sram += sum(a.get("sram_um2", a["area_um2"] if a["chosen"] == "cacti" else 0) for a in on)
            transistors += res["transistors_logic"] + sum(
                a.get("transistors", (a["ff"].get("transistors") or 0) if a["chosen"] == "ff" else 6 * a["bits"])
                for a in on)
            points.append(f"{m} {point_label(design)}")
            p = _power_for(power, m, design)
            if p is None:
                pw_known = False
            else:
                # Off-chip arrays' power is left out too.
                off_mw = {g: sum(x["total_mw"] for x in p[g]["arrays"] if x["name"].split(".")[-1]
                                 in r.get("off_chip", ())) for g in ("no_gating", "clock_gated")}
                pw += p["no_gating"]["total_mw"] - off_mw["no_gating"]
                pw_gated += p["clock_gated"]["total_mw"] - off_mw["clock_gated"]
                if "vectorless" in p["activity_source"]:
                    notes.append(f"{m}: vectorless power estimate")
        n = ports if r["per"] == "port" else 1
        n5 = scaling.to_n5(logic * n, sram * n, pw * n)
        rows.append({"role": r["role"], "side": r["side"], "modules": "+".join(r["modules"]),
                     "status": "registered", "instances": n, "point": "; ".join(points),
                     "logic_um2_45": logic * n, "sram_um2_45": sram * n,
                     "transistors": transistors * n, "area_mm2_n5": n5["area_mm2"],
                     "logic_mm2_n5": n5["logic_mm2"], "sram_mm2_n5": n5["sram_mm2"],
                     "power_mw_45": pw * n if pw_known else None,
                     "power_mw_n5": n5["power_mw"] if pw_known else None,
                     "power_gated_mw_n5": pw_gated * n * scaling.ENERGY if pw_known else None,
                     "note": "; ".join(notes), "why": r.get("why", "")})
    sw = [r for r in rows if r["side"] == "switch" and r["status"] == "registered"]
    gpu = [r for r in rows if r["side"] == "gpu" and r["status"] == "registered"]

    def total(rs, ref):
        t = {"area_mm2_n5": sum(r["area_mm2_n5"] for r in rs), "transistors": sum(r["transistors"] for r in rs),
             "power_mw_n5": sum(r["power_mw_n5"] or 0 for r in rs),
             "power_gated_mw_n5": sum(r["power_gated_mw_n5"] or 0 for r in rs),
             "power_complete": all(r["power_mw_n5"] is not None for r in rs)}
        t["pct_area"] = 100 * t["area_mm2_n5"] / ref["area_mm2"]
        t["pct_transistors"] = 100 * t["transistors"] / ref["transistors"]
        return t
    return {"rows": rows, "switch_total": total(sw, scaling.NVSWITCH), "gpu_total": total(gpu, scaling.H100),
            "registered": registered}


def _plots(out: Path, area_points: list[dict], power: list | None) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    ok = [a for a in area_points if a["result"]]
    # Area against the swept parameter (entries, ports, ...), one line per module and parameter.
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lines = 0
    for m in sorted({a["module"] for a in ok}):
        pts = [a for a in ok if a["module"] == m]
        keys = sorted({k for a in pts for k in a["point"]})
        for k in keys:
            # Every parameter's value (``params``): a point at a parameter's default does not name it.
            xs = [(v, a["result"]["area_um2"], a["result"]["area_all_ff_um2"]) for a in pts
                  for v in [a.get("params", a["point"]).get(k)] if isinstance(v, (int, float))]
            if len(xs) < 2:
                continue
            xs.sort()
            ax.plot([x[0] for x in xs], [x[1] / 1e6 for x in xs], "o-", label=f"{m} ({k}), arrays as macros")
            ax.plot([x[0] for x in xs], [x[2] / 1e6 for x in xs], "x--", label=f"{m} ({k}), all flip-flops")
            lines += 1
    if lines:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("parameter value (entries / ports)")
        ax.set_ylabel("area, Nangate45 (mm$^2$)")
        ax.set_title("Area against size")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "area_vs_entries.png", dpi=110)
        made.append("area_vs_entries.png")
    plt.close(fig)
    # Area breakdown by block (each module at its largest synthesized point).
    if ok:
        best = {}
        for a in ok:
            if a["module"] not in best or a["result"]["area_um2"] > best[a["module"]]["result"]["area_um2"]:
                best[a["module"]] = a
        names = sorted(best)
        seq = [best[n]["result"]["area_seq_um2"] / 1e6 for n in names]
        comb = [best[n]["result"]["area_logic_um2"] / 1e6 for n in names]
        arr = [best[n]["result"]["arrays_um2"] / 1e6 for n in names]
        fig, ax = plt.subplots(figsize=(7, 4))
        labels = [f"{n}\n{best[n]['label']}" for n in names]
        ax.bar(labels, seq, label="sequential cells")
        ax.bar(labels, comb, bottom=seq, label="logic cells")
        ax.bar(labels, arr, bottom=[s + c for s, c in zip(seq, comb)], label="arrays (CACTI / flip-flops)")
        ax.set_ylabel("area, Nangate45 (mm$^2$)")
        ax.set_title("Area breakdown by block")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "area_breakdown.png", dpi=110)
        plt.close(fig)
        made.append("area_breakdown.png")
    pw = [p for p in (power or []) if "no_gating" in p]
    if pw:
        fig, ax = plt.subplots(figsize=(7, 4))
        labels, parts = [], {"internal": [], "switching": [], "leakage": [], "arrays": []}
        for p in pw:
            for g in ("no_gating", "clock_gated"):
                c = p[g]["cells"]
                gating = "no gating" if g == "no_gating" else "clock gated"
                labels.append(f"{p['module']} {p['label']}\n{gating}")
                parts["internal"].append(c["internal_mw"])
                parts["switching"].append(c["switching_mw"])
                parts["leakage"].append(c["leakage_mw"])
                parts["arrays"].append(p[g]["arrays_mw"])
        bottom = [0.0] * len(labels)
        for k, v in parts.items():
            ax.bar(labels, v, bottom=bottom, label=k)
            bottom = [b + x for b, x in zip(bottom, v)]
        ax.set_ylabel(f"power at {pw[0]['freq_ghz']} GHz, Nangate45 (mW)")
        ax.set_title("Power breakdown by block")
        ax.legend(fontsize=8)
        ax.tick_params(axis="x", labelsize=7, rotation=20)
        fig.tight_layout()
        fig.savefig(out / "power_breakdown.png", dpi=110)
        plt.close(fig)
        made.append("power_breakdown.png")
        fig, ax = plt.subplots(figsize=(7, 4))
        labels, vals, colors = [], [], []
        for p in pw:
            for kind, col in (("dispatched", "tab:blue"), ("reduced", "tab:orange")):
                for g in ("no_gating", "clock_gated"):
                    v = p[g].get(f"pj_per_{kind}_flit")
                    if v is not None:
                        labels.append(f"{p['module']}\n{kind}, {'ungated' if g == 'no_gating' else 'gated'}")
                        vals.append(v)
                        colors.append(col)
        if vals:
            ax.bar(labels, vals, color=colors)
            ax.set_ylabel("energy per flit, Nangate45 (pJ)")
            ax.set_title("Energy per dispatched (blue) and reduced (orange) flit")
            ax.tick_params(axis="x", labelsize=7)
            fig.tight_layout()
            fig.savefig(out / "energy_per_flit.png", dpi=110)
            made.append("energy_per_flit.png")
        plt.close(fig)
    return made


def write_reports(out="synth_reports", area_points=None, power=None, commands=None) -> str:
    """Regenerate ``synth_reports/`` from the last results; returns the report's Markdown."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    area_doc = _load(AREA_JSON) or {}
    power_doc = _load(POWER_JSON) or {}
    area_points = area_points if area_points is not None else area_doc.get("points", [])
    power = power if power is not None else power_doc.get("points", [])
    crosscheck = power_doc.get("crosscheck")
    commands = commands or [c.strip() for c in (area_doc.get("command"), power_doc.get("command")) if c]
    # Each point's label, once (summary_csv.row_label: from its design point).
    area_points = [{**a, "label": row_label(a["module"], a["point"])} for a in area_points]
    power = [{**p, "label": row_label(p["module"], p["point"])} if "no_gating" in p else p for p in power]
    # CSV tables.
    summary, arrays = [], []
    for a in area_points:
        r = a["result"]
        if not r:
            summary.append({"module": a["module"], "point": a["label"],
                            "status": "skipped: " + a["skipped"]})
            continue
        summary.append({
            "module": a["module"], "point": a["label"], "status": "ok",
            "area_um2": r["area_um2"], "seq_um2": r["area_seq_um2"], "logic_um2": r["area_logic_um2"],
            "arrays_um2": r["arrays_um2"], "all_ff_um2": r["area_all_ff_um2"], "array_bits": r["array_bits"],
            "cells": r["cell_count"], "transistors_logic": r["transistors_logic"],
            "transistors_all_ff": r["transistors_all_ff"], "critical_path_ps": r["critical_path_ps"],
            "timing": r["timing_source"], "verilog_mb": r["verilog_mb"], "synth_s": r["seconds"]})
        for x in r["arrays"]:
            arrays.append({"module": a["module"], "point": a["label"], "array": x["name"],
                           "kind": x.get("kind", "ram"), "geometry": x["geometry"], "bits": x["bits"],
                           "chosen": x["chosen"], "counted_um2": x["area_um2"], "ff_um2": x["ff"]["area_um2"],
                           "cacti_um2": x["cacti"].get("area_um2"),
                           "control_um2": (x.get("control") or {}).get("area_um2"),
                           "cacti_access_ns": x["cacti"].get("access_ns"),
                           "cacti_note": x["cacti"].get("error", "")})
    cols = ["module", "point", "status", "area_um2", "seq_um2", "logic_um2", "arrays_um2", "all_ff_um2",
            "array_bits", "cells", "transistors_logic", "transistors_all_ff", "critical_path_ps", "timing",
            "verilog_mb", "synth_s"]
    summary = [{k: s.get(k, "") for k in cols} for s in summary]
    # The committed summaries keep the figures of modules and points this run did not cover.
    if summary:
        merge_csv(out / "area_summary.csv", summary, ("module", "point"), old_rows=relabel)
    # The critical paths scaled to N5 against the port clock: timing_summary.csv (synth/timing.py).
    timing_md = timing.write_timing(out / "area_summary.csv", out) if summary else ""
    write_csv(out / "area.csv", summary)
    write_csv(out / "arrays.csv", arrays)
    prows = []
    for p in power:
        if "no_gating" not in p:
            continue
        for g in ("no_gating", "clock_gated"):
            c = p[g]["cells"]
            prows.append({"module": p["module"], "point": p["label"], "clock_gating": g,
                          "freq_ghz": p["freq_ghz"], "total_mw": p[g]["total_mw"], "internal_mw": c["internal_mw"],
                          "switching_mw": c["switching_mw"], "cell_leakage_mw": c["leakage_mw"],
                          "clock_pins_mw": c["clock_pin_mw"], "arrays_mw": p[g]["arrays_mw"],
                          "pj_per_dispatched_flit": p[g].get("pj_per_dispatched_flit"),
                          "pj_per_reduced_flit": p[g].get("pj_per_reduced_flit"),
                          "activity": p["activity_source"]})
    if prows:
        merge_csv(out / "power_summary.csv", prows, ("module", "point", "clock_gating"), old_rows=relabel)
    write_csv(out / "power.csv", prows)
    ov = overhead(area_points, power) if area_points else None
    if ov:
        t, g = ov["switch_total"], ov["gpu_total"]
        totals = [{"role": BLOCKS_ROLE, "side": "switch", "status": "total",
                   "transistors": t["transistors"], "area_mm2_n5": t["area_mm2_n5"],
                   "power_mw_n5": t["power_mw_n5"] if t["power_complete"] else None,
                   "power_gated_mw_n5": t["power_gated_mw_n5"] if t["power_complete"] else None,
                   "note": f"{t['pct_area']:.3f}% of the NVSwitch's estimated {scaling.NVSWITCH['area_mm2']:.0f} "
                           f"mm^2; {t['pct_transistors']:.3f}% of its 25.1 B transistors; each role's block "
                           f"synthesized alone, x 64: no response network, VC link ends or plumbing (the "
                           f"integrated design's row is the headline)"},
                  {"role": "TOTAL GPU side (per GPU)", "side": "gpu", "status": "total",
                   "transistors": g["transistors"], "area_mm2_n5": g["area_mm2_n5"],
                   "power_mw_n5": g["power_mw_n5"] if g["power_complete"] else None,
                   "power_gated_mw_n5": g["power_gated_mw_n5"] if g["power_complete"] else None,
                   "note": f"{g['pct_area']:.4f}% of an H100's 814 mm^2; {g['pct_transistors']:.4f}% of its 80 B "
                           f"transistors"}]
        # The restated headline (the integrated design at 64 ports), when it is already synthesized: an hour
        # of synthesis on a cold cache, so it is never started from here (`dysharp area
        # --overhead`); quick runs skip even the look-up (it generates the 64-port parts' Verilog).
        irows = integrated.overhead_rows(cached_only=True) if SYNTHESIZE_MISSING else None
        write_overhead_csv(out / "overhead_summary.csv", ov["rows"], totals,
                           integrated.summary_row(irows) if irows else None,
                           power_complete=t["power_complete"] and g["power_complete"])
    plots = _plots(out, area_points, power)
    md = _markdown(area_points, arrays, power, crosscheck, ov, plots, commands) + (
        "\n" + timing_md if timing_md else "")
    (out / "report.md").write_text(md)
    return md


_OVERHEAD_COLUMNS = ("role", "side", "modules", "status", "instances", "point", "logic_um2_45", "sram_um2_45",
                     "transistors", "logic_mm2_n5", "sram_mm2_n5", "area_mm2_n5", "power_mw_45", "power_mw_n5",
                     "power_gated_mw_n5", "note")


def write_overhead_csv(path: Path, rows: list[dict], totals: list[dict], headline: dict | None, *,
                       power_complete: bool) -> bool:
    """Write ``overhead_summary.csv`` (the role rows, the side totals and the integrated headline after
    the switch total) without losing what the file holds and this run lacks: a table without every role's
    power does not replace one that has it (``dysharp power`` writes it then), and the integrated headline,
    which only ``dysharp area --overhead`` computes, is carried over when this run has none.
    Returns whether the file was written; says why when it was kept."""
    old = []
    if path.is_file():
        with open(path, newline="") as f:
            old = list(csv.DictReader(f))
    if not power_complete and any(r.get("power_mw_n5") for r in old if r.get("status") == "total"):
        print(f"[report] {path} kept: this run's power results ({POWER_JSON}) do not cover every role of the "
              f"table; `dysharp power` over the architecture points rewrites it", flush=True)
        return False
    headline = headline or next((r for r in old if r.get("role") == integrated.HEADLINE_ROLE), None)
    totals = list(totals)
    if headline:
        totals.insert(1, headline)
    write_csv(path, [{k: r.get(k, "") for k in _OVERHEAD_COLUMNS} for r in rows + totals])
    return True


def _markdown(area_points, arrays, power, crosscheck, ov, plots, commands) -> str:
    L = ["## Area and power overhead (Nangate45, yosys, CACTI 7)", ""]
    L.append(f"Commands: {', '.join(f'`{c}`' for c in commands) or '-'}. Liberty: Nangate Open Cell Library "
             f"(FreePDK45, typical, 1.1 V) from the PyPI wheel `{tools.LIBERTY_WHEEL}`, sha256 "
             f"`{tools.LIBERTY_SHA256[:16]}...`; CACTI 7 from `{tools.CACTI_WHEEL}`. Method: "
             f"`docs/area_power.md`.")
    L.append("")
    L += ["### Area per module and point", "",
          "Logic = cells from synthesis with every array as a black box; arrays counted at the smaller of "
          "CACTI's SRAM macro and a flip-flop array; *all flip-flops* is the upper bound (arrays "
          "synthesized as flip-flops). Critical path: OpenSTA, register to register incl. clock-to-Q and "
          "setup.", ""]
    rows = []
    for a in area_points:
        r = a["result"]
        if not r:
            rows.append([a["module"], a["label"], f"skipped: {a['skipped']}"] + [""] * 8)
            continue
        rows.append([a["module"], a["label"], _fmt(r["area_um2"]), _fmt(r["area_seq_um2"]),
                     _fmt(r["area_logic_um2"]), _fmt(r["arrays_um2"]), _fmt(r["area_all_ff_um2"]),
                     _fmt(r["cell_count"]), _fmt(r["transistors_logic"]), _fmt(r["critical_path_ps"]),
                     _fmt(r["seconds"])])
    L.append(_table(rows, ["module", "point", "total um^2", "sequential", "logic", "arrays", "all flip-flops",
                           "cells", "transistors (logic)", "critical path ps", "flow time s"]))
    geoms = {}
    for x in arrays:
        geoms.setdefault(x["geometry"], x)
    if geoms:
        L += ["", "### Arrays and macros: CACTI against flip-flops (one row per geometry)", "",
              "RAM geometry: rows x bits, read ports r / of them synchronous s, write ports w. CAM macro "
              "geometry: cam<entries>x<key bits>+<value bits>, costed as CACTI's fully associative array "
              "(2 search ports, 1 write port) plus its control logic synthesized (`synth/macros.py`).", "",
              _table([[g, _fmt(x["ff_um2"]), _fmt(x["cacti_um2"]), _fmt(x["control_um2"]),
                       _fmt(x["cacti_access_ns"], ".2f"), x["chosen"], x["cacti_note"] or ""]
                      for g, x in sorted(geoms.items())],
                     ["geometry", "flip-flops um^2", "CACTI um^2", "control logic um^2", "CACTI access ns",
                      "counted as", "CACTI note"])]
    pw = [p for p in power if "no_gating" in p]
    if pw:
        L += ["", "### Power", "",
              "Activity from the named workload's VCD (registers and ports measured, other nets propagated); "
              "*clock gated* assumes ideal register-level clock gating (a register's clock runs only in "
              "cycles in which it changes); *no gating* is what this RTL synthesizes to. Clock tree not "
              "included.", ""]
        rows = []
        for p in pw:
            for g in ("no_gating", "clock_gated"):
                c = p[g]["cells"]
                rows.append([p["module"], p["label"], "none" if g == "no_gating" else "ideal",
                             f"{p[g]['total_mw']:.2f}", f"{c['internal_mw']:.2f}", f"{c['switching_mw']:.2f}",
                             f"{p[g]['leakage_mw']:.3f}", f"{c['clock_pin_mw']:.2f}", f"{p[g]['arrays_mw']:.2f}",
                             _fmt(p[g].get("pj_per_dispatched_flit"), ".1f"),
                             _fmt(p[g].get("pj_per_reduced_flit"), ".1f")])
        L.append(_table(rows, ["module", "point", "clock gating", "total mW", "internal", "switching", "leakage",
                               "clock pins", "arrays", "pJ / dispatched flit", "pJ / reduced flit"]))
        L.append("")
        for p in pw:
            L.append(f"- {p['module']} {p['label']} at {p['freq_ghz']} GHz: activity from "
                     f"{p['activity_source']}; {p['seeded_nets']} of {p['nets']} nets measured "
                     f"({p['ff_seeded']} of {p['ff_total']} flip-flops).")
    if crosscheck:
        c = crosscheck
        L += ["", "### Cross-check against OpenSTA `report_power`", "",
              f"{c['module']} {row_label(c['module'], c['point'])}, the same activity annotated on every net "
              f"({c['annotated_pins']} pins), cells only: OpenSTA {c['opensta']['total_mw']:.2f} mW "
              f"(internal {c['opensta']['internal_mw']:.2f}, switching {c['opensta']['switching_mw']:.2f}, "
              f"leakage {c['opensta']['leakage_mw']:.3f}); this flow {c['ours']['total_mw']:.2f} mW "
              f"(internal {c['ours']['internal_mw']:.2f}, switching {c['ours']['switching_mw']:.2f}, "
              f"leakage {c['ours']['leakage_mw']:.3f}): difference {c['difference_pct']:+.1f}%.", "",
              f"By group, OpenSTA / this flow: sequential {_fmt(c['opensta'].get('sequential_mw'), '.2f')} / "
              f"{c['ours']['sequential_mw']:.2f} mW, combinational "
              f"{_fmt(c['opensta'].get('combinational_mw'), '.2f')} / {c['ours']['combinational_mw']:.2f} mW. "
              "Leakage agrees to the last digit (same cells, same `cell_leakage_power`). The dynamic parts "
              "differ for two reasons found by comparing single instances: Debian's OpenSTA (2019) ignores "
              "activity annotated on combinational output pins and does not propagate the flip-flop "
              "annotations through the logic (its combinational nets stay near zero activity), and its "
              "flip-flop clock-pin internal power is twice the Liberty arithmetic (one rise plus one fall "
              "per cycle: 2.4-7.6 fJ per transition from the DFF_X1 tables, "
              f"{c['ours']['clock_pins_mw']:.1f} mW here)."]
    if ov:
        t, gt = ov["switch_total"], ov["gpu_total"]
        L += ["", "### The DySHARP addition at 64 ports, scaled to the NVSwitch's node", "",
              f"Scaling: logic area x{scaling.LOGIC_AREA:.4f} (45->7 nm Stillmaker & Baas 0.059, then N7->N5 "
              f"logic density 1.84x), SRAM area x{scaling.SRAM_AREA:.4f} (bit cell 0.346->0.027 um^2, then "
              f"N7->N5 1.3x; CACTI-costed arrays and CAM macros count as SRAM, their control logic and "
              f"flip-flop arrays as logic), power x{scaling.ENERGY:.4f} (45->7 nm energy, Stillmaker & Baas fits at nominal Vdd; no N7->N5 step). "
              f"NVSwitch: {scaling.NVSWITCH['source']}: {scaling.NVSWITCH['area_mm2']:.0f} mm^2. Each block at "
              f"its architecture point (`synth/scaling.py`, justified below); power from `dysharp power` at "
              f"1.5625 GHz, no clock gating / ideal clock gating.", ""]
        rows = []
        for r in ov["rows"]:
            if r["status"] != "registered":
                rows.append([r["role"], r["side"], r["status"], "", "", "", "", "", r.get("note", "")])
            else:
                pw = "-" if r["power_mw_n5"] is None else f"{r['power_mw_n5']:.2f} / {r['power_gated_mw_n5']:.2f}"
                rows.append([r["role"], r["side"], r["point"], str(r["instances"]), f"{r['logic_mm2_n5']:.4f}",
                             f"{r['sram_mm2_n5']:.4f}", f"{r['area_mm2_n5']:.4f}", f"{r['transistors']:.3g}", pw])
        L.append(_table(rows, ["block", "side", "module at point", "instances", "logic mm^2", "SRAM mm^2",
                               "area mm^2 (N5)", "transistors", "power mW (N5), no gating / gated"]))
        L.append("")
        skipped = [r["modules"] for r in ov["rows"] if r["status"] == "not synthesized"]
        if skipped:
            L.append(f"Totals: not computed in this run: {', '.join(skipped)} not synthesized at the "
                     "architecture point (`dysharp study` or `dysharp area` synthesizes them).")
        elif not any(r["status"] == "registered" and r["side"] == "switch" for r in ov["rows"]):
            L.append("Switch-side total: not available: none of the DySHARP switch blocks is registered in "
                     "`hw/registry.py` yet (re-run `dysharp area` and `dysharp power` once they are). "
                     f"Modules registered: {', '.join(ov['registered'])}.")
        else:
            def pw(x, what):
                if x["power_complete"]:
                    return f"{x['power_mw_n5']:.1f} mW without clock gating, {x['power_gated_mw_n5']:.1f} mW with"
                return "power not available (run `dysharp power` for: " + ", ".join(
                    r["modules"] for r in ov["rows"] if r["side"] == what and r["status"] == "registered"
                    and r["power_mw_n5"] is None) + ")"
            L.append(f"**Switch side, 64 ports:** {t['area_mm2_n5']:.3f} mm^2 = {t['pct_area']:.2f}% of the "
                     f"estimated {scaling.NVSWITCH['area_mm2']:.0f} mm^2 NVSwitch die; {t['transistors']:.3g} "
                     f"transistors = {t['pct_transistors']:.2f}% of 25.1 B; {pw(t, 'switch')} (NVIDIA publishes "
                     f"no NVSwitch chip power to normalise by).")
            L.append("")
            L.append(f"**GPU side, per GPU:** {gt['area_mm2_n5']:.4f} mm^2 = {gt['pct_area']:.4f}% of an H100 "
                     f"(814 mm^2); {gt['transistors']:.3g} transistors = {gt['pct_transistors']:.4f}% of 80 B; "
                     f"{pw(gt, 'gpu')}.")
            L += ["", "Sizes:"]
            for r in ov["rows"]:
                if r["status"] == "registered" and r.get("why"):
                    L.append(f"- {r['role']} ({r['point']}): {r['why']}" + (f" ({r['note']})" if r["note"] else ""))
            L.append(f"- Modules registered: {', '.join(ov['registered'])}.")
    if plots:
        L += ["", "Plots: " + ", ".join(f"`synth_reports/{p}`" for p in plots) + "."]
    return "\n".join(L) + "\n"
