"""What the benchmarks share: their Markdown tables and how they end (JSON written, summary printed)."""

import json
from pathlib import Path

from tabulate import tabulate
from infra.scope import scope_of

__all__ = ["table", "finish"]


def table(rows, headers) -> str:
    """A GitHub Markdown table; cells are kept as given (no reformatting of numbers such as ``0.000``)."""
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def finish(out: Path, report: dict, summary: str) -> int:
    """Write ``report`` as JSON to ``out``, print ``summary`` and where it went; the bench's exit status."""
    out.write_text(json.dumps(report, indent=1))
    print(summary)
    print(f"wrote {out}")
    return 0


def study_run(bench, args, out_dir, name: str) -> str:
    """A ``dysharp study`` step for the bench module ``bench``: run it with ``bench.STUDY_ARGS[scope]``,
    write ``<out_dir>/<name>.json`` and return its Markdown, naming the tables the scope leaves out
    (``bench.FULL_ONLY``)."""
    import argparse


    scope = scope_of(args)
    out = Path(out_dir) / f"{name}.json"
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    bench.run(p.parse_args(["--out", str(out)] + bench.STUDY_ARGS[scope]))
    text = bench.markdown(json.loads(out.read_text()))
    if scope in bench.FULL_ONLY:
        text += f"\n\n*`--full` only*: {bench.FULL_ONLY[scope]}.\n"
    return text
