"""Timing at the N5 port clock: each block's 45 nm critical path scaled to N5, against 0.64 ns.

Input: the area flow's ``area_summary.csv`` (OpenSTA's register-to-register critical path in Nangate45,
column ``critical_path_ps``). Output: ``timing_summary.csv`` beside it, with per (module, point) the
45 nm path, the path scaled by :func:`synth.scaling.delay_to_n5`, the slack against the 1.5625 GHz port
clock (640 ps) and whether it meets it, and the same table in Markdown. :func:`synth.report.write_reports`
(``dysharp area``, ``dysharp study``) calls :func:`write_timing` after it writes ``area_summary.csv``;
``dysharp timing`` regenerates the table from the committed CSV without synthesizing anything.
"""

import csv
from pathlib import Path

from tabulate import tabulate

from hw import registry

from . import scaling
from .summary_csv import point_label

__all__ = ["REQUIRED", "COLUMNS", "MISS_NOTES", "FLAT_CHECKS", "read_area_summary", "read_flat_checks", "timing_rows",
           "markdown", "write_timing"]

REQUIRED = ("module", "point", "status", "critical_path_ps")
COLUMNS = ["module", "point", "critical_path_ps_45", "critical_path_ps_n5", "slack_ps", "meets", "note"]


# Why a point misses the port clock and what would close it, by (module, point label): the timing table's note.
MISS_NOTES = {
    **{("reduce_alu", point_label(registry.point("reduce_alu", {"flit_width": w}))):
       "the one-cycle accumulate, an option: every block uses acc_stages=3 (the acc_stages=3 row)"
       for w in (128, 256, 512)},
    ("switch", "ports=16"): "the input-to-allocator request path in one cycle, kept at 16 ports so that the "
                            "8- and 16-port benchmarks keep their latency, bounded by the sum of its halves; a "
                            "flat synthesis times it (dysharp area --flat-check switch:ports=16); "
                            "req_stage=True registers it (one more cycle per traversal), the default from 32 ports",
}

# Beside area_summary.csv: points costed from their parts, synthesized flat for their real critical path
# (synth.hierarchical.write_flat_checks). A check is used while the area row's path is the one it was made
# against; after the row changes (new RTL or flow) it is stale and the table says so.
FLAT_CHECKS = "flat_check_summary.csv"


def read_area_summary(path) -> list[dict]:
    """The rows of an ``area_summary.csv``; ValueError naming the file when it lacks a needed column."""
    path = Path(path)
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            columns = reader.fieldnames or []
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file (run `dysharp area` to write it)") from None
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (has: {', '.join(columns) or 'none'}); "
                         f"expected the area_summary.csv that `dysharp area` writes")
    return rows


def read_flat_checks(path) -> dict[tuple[str, str], dict]:
    """``flat_check_summary.csv`` by (module, point); empty when the file does not exist."""
    path = Path(path)
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        return {(r["module"], r["point"]): r for r in csv.DictReader(f)}


def _flat(r: dict, flat: dict, ps45: float) -> tuple[float, str]:
    """The path to use for an area row and the note that says where it comes from."""
    chk = flat.get((r["module"], r["point"]))
    if not chk or not (r.get("timing") or "").startswith("max of parts"):
        return ps45, ""
    if abs(float(chk["parts_critical_path_ps"]) - ps45) > 0.05:
        return ps45, (f"flat check stale (made against {float(chk['parts_critical_path_ps']):,.1f} ps from parts): "
                      f"dysharp area --flat-check {r['module']}:{r['point'].replace(', ', ',')}")
    return float(chk["flat_critical_path_ps"]), (f"synthesized flat ({FLAT_CHECKS}); from its parts "
                                                 f"{ps45:,.1f} ps, a bound")


def timing_rows(area_rows: list[dict], period_ps: float = scaling.PORT_PERIOD_PS, source: str = "",
                flat: dict | None = None) -> list[dict]:
    """One row per area row: the 45 nm path, the N5 path, the slack against ``period_ps`` and whether it
    meets it (``yes``/``no``; ``n/a`` with the reason when the point has no timed path). ``flat``
    (:func:`read_flat_checks`) replaces a parts-costed point's path by its flat synthesis's."""
    if period_ps <= 0:
        raise ValueError(f"the clock period must be positive, got {period_ps} ps")
    out = []
    for i, r in enumerate(area_rows, start=2):   # line 1 is the header
        missing = [c for c in REQUIRED if c not in r]
        if missing:
            raise ValueError(f"{source or 'area summary'} line {i}: missing column(s) {', '.join(missing)}")
        row = {"module": r["module"], "point": r["point"], "critical_path_ps_45": "", "critical_path_ps_n5": "",
               "slack_ps": "", "meets": "n/a", "note": ""}
        text = (r["critical_path_ps"] or "").strip()
        if r["status"] != "ok":
            row["note"] = "not synthesized: " + r["status"].split(";")[0].removeprefix("skipped: ")
        elif not text:
            row["note"] = (f"no register-to-register path timed (timing: {r.get('timing') or 'none'}): "
                           "arrays only")
        else:
            try:
                ps45 = float(text)
            except ValueError:
                raise ValueError(f"{source or 'area summary'} line {i} ({r['module']} {r['point']}): "
                                 f"critical_path_ps is not a number: {text!r}") from None
            if ps45 <= 0:
                raise ValueError(f"{source or 'area summary'} line {i} ({r['module']} {r['point']}): "
                                 f"critical_path_ps must be positive, got {ps45}")
            ps45, how = _flat(r, flat or {}, ps45)
            ps5 = scaling.delay_to_n5(ps45)
            slack = period_ps - ps5
            row.update(critical_path_ps_45=ps45, critical_path_ps_n5=ps5, slack_ps=slack,
                       meets="yes" if slack >= 0 else "no")
            notes = [how] if how else []
            if slack < 0:
                notes.append(MISS_NOTES.get((r["module"], r["point"]), "misses: no reason recorded"))
            row["note"] = "; ".join(notes)
        out.append(row)
    return out


def markdown(rows: list[dict], period_ps: float = scaling.PORT_PERIOD_PS) -> str:
    """The timing table in Markdown, with the scaling it used."""
    def ps(x):
        return "-" if x == "" else f"{x:,.0f}"

    table = tabulate([[r["module"], r["point"], ps(r["critical_path_ps_45"]), ps(r["critical_path_ps_n5"]),
                       "-" if r["slack_ps"] == "" else f"{r['slack_ps']:+,.0f}", r["meets"], r["note"]]
                      for r in rows],
                     headers=["module", "point", "45 nm path ps", "N5 path ps", f"slack ps at {period_ps:.0f}",
                              "meets", "note"], tablefmt="github", disable_numparse=True)
    timed = [r for r in rows if r["meets"] in ("yes", "no")]
    misses = sorted({r["module"] for r in timed if r["meets"] == "no"})
    return "\n".join([
        f"### Timing at the N5 port clock ({1000 / period_ps:g} GHz, {period_ps:.0f} ps)", "",
        f"OpenSTA's 45 nm critical path (Nangate45, register to register incl. clock-to-Q and setup) scaled "
        f"by {scaling.DELAY_SOURCE}. Gate-delay factors: paths dominated by wires scale worse.", "",
        table, "",
        f"{len(timed) - sum(r['meets'] == 'no' for r in timed)} of {len(timed)} timed points meet "
        f"{period_ps:.0f} ps; modules with a point that misses: {', '.join(misses) or 'none'}.", ""])


def _csv_value(v):
    return f"{v:.1f}" if isinstance(v, float) else v


def write_timing(area_csv, out_dir=None, period_ps: float = scaling.PORT_PERIOD_PS) -> str:
    """Read ``area_csv``, write ``timing_summary.csv`` into ``out_dir`` (default: beside it), return the
    Markdown table."""
    area_csv = Path(area_csv)
    rows = timing_rows(read_area_summary(area_csv), period_ps, source=str(area_csv),
                       flat=read_flat_checks(area_csv.parent / FLAT_CHECKS))
    out_dir = Path(out_dir) if out_dir is not None else area_csv.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "timing_summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: _csv_value(r[k]) for k in COLUMNS})
    return markdown(rows, period_ps)
