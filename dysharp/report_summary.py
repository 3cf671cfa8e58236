"""The study report's first screen: the answer before the detail.

:func:`summary` reads what the study's steps wrote under the report folder (falling back to the committed
``synth_reports/`` for the overhead table) and states, in one short section:

* the area and power the DySHARP addition costs an NVSwitch and a GPU (``overhead_summary.csv``: the sum of
  blocks, and the integrated design's headline when that table has it);
* the MoE layer speedups measured on the RTL (``system/<point>.json``) and estimated at full scale
  (``estimate/sweep.csv``, DeepSeek-V3 on the sweep's systems);
* what was verified: each step's status, the layer's checks.

A figure whose source a step did not write (a failed step, ``--only``) is named as missing, never guessed.
"""

import csv
import json
from pathlib import Path

__all__ = ["summary"]

SUMMARY_BASELINES = ("deepep", "nvls", "ccfuser", "comet")


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def overhead_lines(out: Path) -> list[str]:
    """The switch-side and GPU-side totals of the overhead table (area at N5, power at N5), each named by its
    route: the sum of blocks (each block synthesized alone, x 64) and, when the table has it, the integrated
    design (the headline, ``dysharp area --overhead``), which also counts the response network, the VC link
    ends and the plumbing. A table without the integrated row says so, since the sum of blocks alone is the
    lower figure."""
    from synth.integrated import HEADLINE_ROLE
    from synth.report import BLOCKS_ROLE

    for path in (out / "synth_reports" / "overhead_summary.csv", Path("synth_reports/overhead_summary.csv")):
        if path.exists():
            break
    else:
        return ["- Area and power: no overhead table (the `area_power` step did not write one)."]
    rows = {r["role"]: r for r in _rows(path) if r.get("status") == "total"}
    lines = []
    for role, r in rows.items():
        area = f"{float(r['area_mm2_n5']):.4g} mm^2" if r.get("area_mm2_n5") else "-"
        power = (f", {float(r['power_mw_n5']) / 1000:.2f} W ({float(r['power_gated_mw_n5']) / 1000:.2f} W "
                 f"with ideal clock gating)" if r.get("power_mw_n5") else "")
        if r["side"] == "gpu" and r.get("power_mw_n5"):
            power = f", {float(r['power_mw_n5']):.1f} mW ({float(r['power_gated_mw_n5']):.1f} mW gated)"
        note = r.get("note", "").split(";")[0]
        name = role.removeprefix("TOTAL ")
        lines.append(f"- {name[0].upper()}{name[1:]}, at N5: {area}{power}" + (f"; {note}" if note else "") + "."
                     + (" The headline." if role == HEADLINE_ROLE else ""))
    if BLOCKS_ROLE in rows and HEADLINE_ROLE not in rows:
        lines.append("- Switch side, integrated design (the headline): not in this table; `dysharp area --overhead` "
                     "costs it from the 64-port integrated switch's parts (on a cold cache, with the blocks' own "
                     "area run, about 17 CPU-min of synthesis). The sum of blocks above leaves out the response "
                     "network, the VC link ends and the plumbing, so it is the lower figure "
                     "(`docs/integrated_ppa.md`).")
    return lines + [f"  (`{path}`; `docs/area_power.md`, `docs/integrated_ppa.md`)"]


def speedup_lines(out: Path) -> list[str]:
    """Measured speedups of ``dysharp`` over the other schemes of the study's layer, with the estimator's
    prediction of the same scaled layer and its figure for that layer at full size (same G, tokens and
    routing), and the estimator's full-scale figure for DeepSeek-V3."""
    lines = []
    runs = sorted((out / "system").glob("*.json")) if (out / "system").exists() else []
    runs = [p for p in runs if p.name.count(".") == 1]          # the point's report, not a scheme's file
    if not runs:
        lines.append("- RTL-measured speedup: no layer run (the `system` step did not write one).")
    for p in runs:
        r = json.loads(p.read_text())
        figs, pred, pt = r["schemes"], r["predicted"], r["point"]
        if "dysharp" not in figs:
            lines.append(f"- RTL layer `{p.name}`: the dysharp scheme did not complete.")
            continue
        d = figs["dysharp"]["cycles"]["total"]
        full = r.get("full_size")
        parts = [f"{figs[s]['cycles']['total'] / d:.3f}x over {s} (predicted "
                 f"{pred[s]['total'] / pred['dysharp']['total']:.3f}x"
                 + (f", full size {full['speedup'][s]:.3f}x" if full and s in full["speedup"] else "") + ")"
                 for s in figs if s != "dysharp"]
        lines.append(f"- RTL-measured, {r['layer']['model']}, G = {pt['gpus']}, {pt['tokens']} tokens per GPU, "
                     f"hidden {pt['hidden']}: dysharp {', '.join(parts)}.")
        if full:
            lines.append(f"  Full size: the estimator on {full['system']}, the real model at the same G, tokens and "
                         f"routing (`sim_models/rtl_scale.py`).")
        failed = r.get("failed") or {}
        if failed:
            lines.append(f"  Failed schemes: {', '.join(failed)}.")
    sweep = out / "estimate" / "sweep.csv"
    if sweep.exists():
        by_system = {}
        for x in _rows(sweep):
            if x["model"] == "deepseek-v3" and x["scheme"] in SUMMARY_BASELINES and x.get("dysharp_speedup"):
                by_system.setdefault(x["system"], {})[x["scheme"]] = float(x["dysharp_speedup"])
        for system, sp in by_system.items():
            vs = ", ".join(f"{sp[s]:.2f}x over {s}" for s in SUMMARY_BASELINES if s in sp)
            lines.append(f"- Estimated at full scale, DeepSeek-V3, {system}: dysharp {vs}.")
        lines.append("  (`estimate/sweep.csv`; `docs/estimator_results.md`)")
    else:
        lines.append("- Full-scale estimate: none (the `estimate` step did not write `estimate/sweep.csv`).")
    return lines


def verification_lines(timings: list[dict]) -> list[str]:
    ok = [t["step"] for t in timings if t["status"] == "ok"]
    bad = [f"{t['step']} ({t['status']})" for t in timings if t["status"] != "ok"]
    lines = [f"- Steps passed: {len(ok)} of {len(timings)}" + (f"; failed: {', '.join(bad)}" if bad else "") + "."]
    if "system" in ok:
        lines.append("- The MoE layer: every home GPU's outputs equal numpy bit for bit, every link's flits equal "
                     "the traffic model's, and every switch and NIC error counter read zero, for every scheme.")
    if "lint" in ok:
        lines.append("- Every standard point's Verilog passes `verilator --lint-only -Wall` (waivers in "
                     "`docs/performance.md`).")
    return lines


def summary(out: Path, timings: list[dict]) -> str:
    """The report's opening section (Markdown); ``timings`` are the steps' records."""
    out = Path(out)
    return "\n".join(["## Summary", "", "**Cost of the addition**", "", *overhead_lines(out), "",
                      "**Speedup**", "", *speedup_lines(out), "", "**Verified**", "", *verification_lines(timings),
                      "", "The sections below give each figure's detail and command; step times are last."])
