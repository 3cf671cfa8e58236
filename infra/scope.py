"""The study's scope: ``quick`` (smoke run), ``default`` (architecture points) or ``full`` (exhaustive
grids), as ``dysharp study --quick/--full`` sets it. A study step in any package sizes its sweeps by it."""

__all__ = ["SCOPES", "scope_of"]

SCOPES = {
    "quick": "smoke run: small sweeps, small points",
    "default": "architecture points: every step, each benchmark's headline figures",
    "full": "exhaustive grids: every bench point, the area grids",
}


def scope_of(args) -> str:
    """``"quick"``, ``"default"`` or ``"full"`` from ``args.quick`` / ``args.full`` (either may be absent)."""
    return "quick" if getattr(args, "quick", False) else "full" if getattr(args, "full", False) else "default"
