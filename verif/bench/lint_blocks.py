"""Lint whole vs block by block (:mod:`verif.lint_blocks`): each point linted both ways, one after the other,
in this process; the wall time, runs, waived counts and unwaived warnings of each go to
``build/bench/lint_blocks.json``. ``dysharp bench lint_blocks`` (default: the 64-port switch and
integrated switch)."""

import json
import time
from pathlib import Path

from verif.harness.runner import locked_verilog
from verif.lint import lint_file


def compare(points: list[tuple[str, dict]], out="build/bench/lint_blocks.json") -> list[dict]:
    """Lint each (module, point) both ways, whole and block by block, in this process, one after the other:
    wall seconds, runs, waived counts and unwaived warnings of each, written to ``out`` (JSON)."""
    rows = []
    for name, params in points:
        path = locked_verilog(name, params)
        row = {"module": name, "params": params, "file": str(path), "mb": round(path.stat().st_size / 1e6, 2)}
        for how, whole in (("whole", True), ("blocks", False)):
            t0 = time.time()
            waived, problems, runs = lint_file(path, name, whole=whole, with_runs=True)
            row[how] = {"seconds": round(time.time() - t0, 1), "runs": runs, "waived": dict(sorted(waived.items())),
                        "problems": problems}
            print(f"{name} {params} {how}: {row[how]['seconds']} s, {runs} run(s), waived {row[how]['waived']}",
                  flush=True)
        rows.append(row)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def add_arguments(p) -> None:
    p.add_argument("points", nargs="*", default=["switch:ports=64", "dysharp_switch:ports=64"],
                   help="MODULE:k=v,... (default: switch:ports=64 dysharp_switch:ports=64)")
    p.add_argument("--out", default="build/bench/lint_blocks.json")


def parse_points(texts: list[str]) -> list[tuple[str, dict]]:
    """``MODULE:k=v,...`` -> (module, {k: int}); a malformed point is a ValueError naming it."""
    points = []
    for text in texts:
        name, _, kv = text.partition(":")
        try:
            params = {k: int(v) for k, v in (x.split("=", 1) for x in kv.split(",") if x)}
        except ValueError:
            raise ValueError(f"bad point {text!r}: expected MODULE:k=v,... with integer values") from None
        points.append((name, params))
    return points


def run(args) -> int:
    """``dysharp bench lint_blocks [MODULE:k=v,...] ...``: lint each point whole and block by block, one after
    the other, and write the times (default: the 64-port switch and integrated switch)."""
    compare(parse_points(args.points), args.out)
    return 0
