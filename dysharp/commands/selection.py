"""Shared ``--module``/``--set``/``--points`` options: which modules, at which parameter points."""

from hw import registry


def add_selection_arguments(p) -> None:
    p.add_argument("--module", "-m", action="append", default=None, metavar="NAME",
                   help="module to include (repeatable; default: every registered module)")
    p.add_argument("--set", action="append", default=[], metavar="[MODULE.]PARAM=VALUE",
                   help="override a parameter (repeatable); PARAM alone applies to every selected module "
                        "that has it")
    p.add_argument("--points", action="store_true",
                   help="use each module's standard parameter points (e.g. switch ports 4..64), "
                        "with --set applied on top")


def selected_points(args) -> list[registry.DesignPoint]:
    """The design points (:class:`~hw.registry.DesignPoint`) of the selection in ``args``; raises
    ValueError on bad input (an unknown module or parameter name)."""
    names = args.module or sorted(registry.MODULES)
    for n in names:
        registry.get(n)
    overrides = registry.parse_assignments(args.set, names)
    return [registry.point(n, {**pt, **overrides[n]})
            for n in names for pt in (registry.get(n).points if args.points else [{}])]
