"""``dysharp power``: activity-based power of registered modules and regenerate ``synth_reports/``.

Each selected module is powered at one parameter point (the size at which the DySHARP addition counts it,
:func:`synth.scaling.architecture_point`, else its defaults; ``--set`` applied on top), from the
switching activity of its workload in :mod:`synth.workloads` (a cocotb run with a VCD; vectorless when it
has none), at ``--clock-ghz``; one module is cross-checked against OpenSTA. See :mod:`synth.power`.
"""

import json
import shlex
import sys

from hw import registry


def add_arguments(p) -> None:
    p.add_argument("--module", "-m", action="append", default=None, metavar="NAME",
                   help="module to include (repeatable; default: every registered module)")
    p.add_argument("--set", action="append", default=[], metavar="[MODULE.]PARAM=VALUE",
                   help="parameter of the powered point (repeatable; default: the module's architecture "
                        "point in synth/scaling.py, else its defaults)")
    p.add_argument("--clock-ghz", type=float, default=1.5625, help="clock frequency (default: 1.5625)")
    p.add_argument("--cycles", type=int, default=1000, help="measured cycles per workload (default: 1000)")
    p.add_argument("--warmup", type=int, default=200, help="warm-up cycles before the window (default: 200)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--crosscheck", default="auto", metavar="MODULE",
                   help="module to cross-check against OpenSTA report_power ('auto': the first selected "
                        "module with a workload; 'none': skip)")
    p.add_argument("--no-cache", action="store_true",
                   help="compute every point again (default: reuse build/cache/power when unchanged)")
    from dysharp.commands.area import add_engine_arguments
    add_engine_arguments(p, "modules' points")
    p.add_argument("--out", default="synth_reports", help="report folder (default: synth_reports)")
    p.add_argument("--integrated", type=int, default=None, metavar="PORTS",
                   help="instead: the integrated switch synthesized flat at PORTS ports (4..8) with the registry's "
                        "defaults: flat area and timing, its sum of parts, and its power under MoE dispatch and "
                        "combine (integrated_power_summary.csv)")
    p.add_argument("--no-parts", action="store_true", help="with --integrated: skip the sum-of-parts comparison")


def run(args) -> int:
    from synth import power_study, report, tools, workloads

    if args.integrated is not None:
        from synth import integrated
        print(integrated.write_power(args.out, {"ports": args.integrated}, hierarchical_sum=not args.no_parts))
        return 0
    if args.clock_ghz <= 0:
        raise ValueError(f"--clock-ghz must be positive, got {args.clock_ghz}")
    if args.cycles < 10 or args.warmup < 10:
        raise ValueError("--cycles and --warmup must be at least 10")
    modules = args.module or sorted(registry.MODULES)
    for m in modules:
        registry.get(m)
    from synth import scaling
    fixed = registry.parse_assignments(args.set, modules)
    # Default: the architecture point of the modules that the 64-port addition counts.
    designs = {m: registry.point(m, {**(scaling.architecture_point(m) or {}), **fixed[m]}) for m in modules}
    xc = args.crosscheck
    if xc == "auto":
        xc = next((m for m in modules if workloads.get(m)), "none")
    elif xc != "none":
        registry.get(xc)
        if xc not in modules:
            raise ValueError(f"--crosscheck {xc!r} is not among the selected modules ({', '.join(modules)})")
    try:
        tools.liberty_path()
        tools.cacti_binary()
    except tools.ToolError as e:
        raise RuntimeError(str(e)) from None
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    print(f"[power] {len(modules)} points: " + ", ".join(f"{m} {designs[m].overrides or '(defaults)'}"
                                                         for m in modules), flush=True)
    points = power_study.power_points([designs[m] for m in modules], jobs=args.jobs, scheduler=args.scheduler,
                                      cache=not args.no_cache, freq_ghz=args.clock_ghz, cycles=args.cycles,
                                      warmup=args.warmup, seed=args.seed)
    for m, r in zip(modules, points):
        print(f"[power] {m} {designs[m].overrides or '(defaults)'}", flush=True)
        for g in ("no_gating", "clock_gated"):
            x = r[g]
            extra = "".join(f", {x[k]:.1f} pJ/{k[7:-5]} flit" for k in ("pj_per_dispatched_flit",
                                                                         "pj_per_reduced_flit") if k in x)
            print(f"  {g:<12} {x['total_mw']:8.2f} mW (cells {x['cells']['total_mw']:.2f}, arrays "
                  f"{x['arrays_mw']:.2f}, leakage {x['leakage_mw']:.3f}){extra}")
    cross = None
    if xc != "none":
        if not tools.opensta_binary(required=False):
            print("[power] OpenSTA not installed (apt-get install opensta): cross-check skipped")
        else:
            cross = power_study.opensta_crosscheck(designs[xc], freq_ghz=args.clock_ghz,
                                                   seed=args.seed, cycles=args.cycles, warmup=args.warmup)
            print(f"[power] cross-check {xc}: OpenSTA {cross['opensta']['total_mw']:.2f} mW, this flow "
                  f"{cross['ours']['total_mw']:.2f} mW ({cross['difference_pct']:+.1f}%)")
    cmd = "dysharp power " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["power"] \
        else "dysharp power"
    report.POWER_JSON.parent.mkdir(parents=True, exist_ok=True)
    report.POWER_JSON.write_text(json.dumps({"command": cmd, "points": points, "crosscheck": cross}, indent=1))
    report.write_reports(args.out)
    print(f"wrote {report.POWER_JSON} and {args.out}/")
    return 0
