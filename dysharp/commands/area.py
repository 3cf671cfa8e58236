"""``dysharp area``: synthesize registered modules over their area grid and regenerate ``synth_reports/``.

Each module is synthesized at every point of its ``area_grid`` (the registry's ``points`` when it has
none), or of the grid given with ``--grid MODULE.PARAM=V1,V2`` (several ``--grid`` for one module form
their cartesian product); ``--set`` fixes a parameter at every point. See :mod:`synth.area`. The options
of :mod:`dysharp.commands.area_tables` write one derived table instead (the 64-port overhead, the system
top, the array cross-check, flat checks).
"""

import json
import shlex
import sys

from hw import registry

from . import area_tables

ALL_MB = 3.0


def add_arguments(p) -> None:
    p.add_argument("--module", "-m", action="append", default=None, metavar="NAME",
                   help="module to include (repeatable; default: every registered module)")
    p.add_argument("--grid", action="append", default=[], metavar="MODULE.PARAM=V1,V2,...",
                   help="sweep these values instead of the module's area_grid (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="[MODULE.]PARAM=VALUE",
                   help="fix a parameter at every point (repeatable)")
    p.add_argument("--clock-ghz", type=float, default=1.5625,
                   help="target clock: ABC's delay target and OpenSTA's clock (default: 1.5625)")
    p.add_argument("--max-mb", type=float, default=ALL_MB,
                   help=f"skip points whose Verilog is larger (synthesis time grows with it; about a minute "
                        f"per 0.3 MB here) unless already cached; 0 = no limit (default: {ALL_MB})")
    p.add_argument("--no-cache", action="store_true", help="synthesize again even when a result is cached")
    add_engine_arguments(p, "points")
    p.add_argument("--out", default="synth_reports", help="report folder (default: synth_reports)")
    area_tables.add_arguments(p)


def add_engine_arguments(p, what: str) -> None:
    """``--jobs`` and ``--scheduler`` (see :mod:`infra.engine`); also used by ``dysharp power``."""
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help=f"{what} synthesized in parallel by N local processes (default: min(2, CPUs))")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help=f"run the {what} on the Dask cluster at ADDRESS (e.g. tcp://host:8786; the workers "
                        f"need this repository and its tools); default: $DYSHARP_SCHEDULER, else --jobs "
                        f"local processes")


def selection(args) -> dict[str, list[registry.DesignPoint]]:
    """{module: its design points} of the selected modules (``--module``, ``--grid``, ``--set``)."""
    from synth.area import grid_points, parse_grid

    modules = args.module or sorted(registry.MODULES)
    for m in modules:
        registry.get(m)
    fixed = registry.parse_assignments(args.set, modules)
    grids = parse_grid(args.grid, modules)
    return {m: grid_points(m, grids.get(m), fixed[m]) for m in modules}


def run(args) -> int:
    from synth import area_study, report, tools
    from synth.summary_csv import point_label

    done = area_tables.run(args)
    if done is not None:
        return done
    if args.clock_ghz <= 0:
        raise ValueError(f"--clock-ghz must be positive, got {args.clock_ghz}")
    sel = selection(args)
    try:
        tools.liberty_path()
        tools.cacti_binary()
    except tools.ToolError as e:
        raise RuntimeError(str(e)) from None
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    points = area_study.run_study(sel, period_ps=1000 / args.clock_ghz, max_mb=args.max_mb,
                                  cache=not args.no_cache, jobs=args.jobs, scheduler=args.scheduler)
    doc = {"command": "dysharp area " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if
           sys.argv[1:2] == ["area"] else "dysharp area", "points": [p.as_dict() for p in points]}
    report.AREA_JSON.parent.mkdir(parents=True, exist_ok=True)
    report.AREA_JSON.write_text(json.dumps(doc, indent=1))
    print(f"{'module':<14} {'point':<22} {'area um^2':>12} {'seq':>10} {'logic':>10} {'arrays':>10} "
          f"{'all-FF':>12} {'crit ps':>8}")
    for p in points:
        r = p.result
        pt = point_label(p.design)
        if r is None:
            print(f"{p.module:<14} {pt:<22} skipped: {p.skipped}")
            continue
        crit = f"{r['critical_path_ps']:.0f}" if r["critical_path_ps"] else "-"
        print(f"{p.module:<14} {pt:<22} {r['area_um2']:12,.0f} {r['area_seq_um2']:10,.0f} "
              f"{r['area_logic_um2']:10,.0f} {r['arrays_um2']:10,.0f} {r['area_all_ff_um2']:12,.0f} {crit:>8}")
    report.write_reports(args.out)
    print(f"wrote {report.AREA_JSON} and {args.out}/ (report.md, CSV, PNG)")
    return 0
