"""What the benchmarks share: their Markdown tables and how they end (JSON written, summary printed)."""

import json
from pathlib import Path

from tabulate import tabulate

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
