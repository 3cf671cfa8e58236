"""The CSV files of ``synth_reports/`` (the committed summaries): the one writer, the keyed merge that keeps
the rows a partial run did not recompute, and how a point is written in them. Every synth module that writes
a summary uses these, so the files share one format."""

import csv
from pathlib import Path

from hw import registry

__all__ = ["point_text", "point_label", "row_label", "relabel", "write_csv", "merge_csv"]


def point_text(point: dict) -> str:
    """Parameters as the summaries write them: ``k=v, ...``, or ``defaults``."""
    return ", ".join(f"{k}={v}" for k, v in point.items()) or "defaults"


def point_label(design: registry.DesignPoint) -> str:
    """A design point's label in the summaries: :func:`point_text` of its parameters that differ from the
    module's defaults, so that equal points have one label however they were asked for."""
    return point_text(design.overrides)


def row_label(module: str, point: dict) -> str:
    """The label of a result's point (``point``: overrides, or every parameter): :func:`point_label` for a
    registered module; :func:`point_text` of ``point`` as it is for another (a result made outside the
    registry)."""
    if module not in registry.MODULES:
        return point_text(point)
    return point_label(registry.point(module, point))


def relabel(row: dict) -> dict:
    """A summary ``row`` (``module``, ``point`` columns) with its point label rewritten by :func:`point_label`:
    a row written before labels came from the design point (``flit_width=128`` for a module's defaults)
    gets the label a new row of the same point has. A label that does not parse back (a module no longer
    registered, a value with a comma) is left as it is."""
    module, text = row.get("module", ""), row.get("point", "")
    if module not in registry.MODULES:
        return row
    try:
        items = [] if text == "defaults" else text.split(", ")
        point = registry.parse_assignments([f"{module}.{kv}" for kv in items], [module])[module]
        return {**row, "point": point_label(registry.point(module, point))}
    except ValueError:
        return row


def write_csv(path: Path, rows: list[dict]) -> None:
    """``rows`` as CSV at ``path`` (columns: the first row's keys; floats to 6 significant digits); no rows:
    no file."""
    if not rows:
        path.unlink(missing_ok=True)
        return
    keys = list(rows[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def merge_csv(path: Path, rows: list[dict], key: tuple[str, ...], *, sort=None, place_new=None,
              old_rows=None) -> list[dict]:
    """Write ``rows`` into the CSV at ``path``, keyed by the columns ``key``: the file's rows with a key
    that ``rows`` has are replaced, where the first of them stood, by the new rows with that key; every
    other row of the file stays (a run over some modules or points must not drop the others' figures).
    New keys go where ``place_new(kept_rows)`` says (an index), else at the end. Columns follow ``rows``;
    ``sort`` orders the result; ``old_rows`` (e.g. :func:`relabel`) maps each of the file's rows first.
    Returns the rows written."""
    old = []
    if path.is_file():
        with open(path, newline="") as f:
            old = [dict(r) if old_rows is None else old_rows(dict(r)) for r in csv.DictReader(f)]

    def k(r):
        return tuple(str(r.get(c, "")) for c in key)
    groups = {}
    for r in rows:
        groups.setdefault(k(r), []).append(r)
    merged, placed = [], set()
    for r in old:
        if k(r) not in groups:
            merged.append(r)
        elif k(r) not in placed:
            placed.add(k(r))
            merged += groups[k(r)]
    fresh = [r for r in rows if k(r) not in placed]
    at = place_new(merged) if place_new and fresh else len(merged)
    merged[at:at] = fresh
    cols = list(rows[0]) if rows else (list(old[0]) if old else [])
    merged = [{c: r.get(c, "") for c in cols} for r in merged]
    if sort:
        merged.sort(key=sort)
    write_csv(path, merged)
    return merged
