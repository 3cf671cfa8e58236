"""The CSV files of ``synth_reports/`` (the committed summaries): the one writer, the keyed merge that keeps
the rows a partial run did not recompute, and how a point is written in them. Every synth module that writes
a summary uses these, so the files share one format."""

import csv
from pathlib import Path

__all__ = ["point_text", "write_csv", "merge_csv"]


def point_text(point: dict) -> str:
    """A point as the summaries write it: ``k=v, ...``, or ``defaults``."""
    return ", ".join(f"{k}={v}" for k, v in point.items()) or "defaults"


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


def merge_csv(path: Path, rows: list[dict], key: tuple[str, ...], *, sort=None, place_new=None) -> list[dict]:
    """Write ``rows`` into the CSV at ``path``, keyed by the columns ``key``: the file's rows with a key
    that ``rows`` has are replaced, where the first of them stood, by the new rows with that key; every
    other row of the file stays (a run over some modules or points must not drop the others' figures).
    New keys go where ``place_new(kept_rows)`` says (an index), else at the end. Columns follow ``rows``;
    ``sort`` orders the result. Returns the rows written."""
    old = []
    if path.is_file():
        with open(path, newline="") as f:
            old = [dict(r) for r in csv.DictReader(f)]

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
