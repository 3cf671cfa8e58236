"""The derived tables of ``dysharp area`` (each option writes one summary under ``--out`` and prints it):

* ``--overhead``: the integrated design's addition at 64 ports, restated at N5 (``integrated_overhead_summary.csv``
  and its row of ``overhead_summary.csv``; :func:`synth.integrated.write_overhead`);
* ``--integrated PORTS``: the integrated top against the plain switch at PORTS ports, 45 nm
  (``integrated_summary.csv``);
* ``--system-top``: the system top (``--gpus`` NICs on one switch) chip by chip, from the committed
  summaries, nothing synthesized (``system_summary.csv``; :mod:`synth.system_top`);
* ``--crosscheck``: every counted array costed by CACTI at 45 and at 22 nm (``array_crosscheck_summary.csv``;
  :mod:`synth.array_crosscheck`);
* ``--flat-check MODULE:PARAM=VALUE,...``: a point costed from its parts, synthesized flat for its real
  critical path (``flat_check_summary.csv``, then ``timing_summary.csv``; :func:`synth.hierarchical.write_flat_checks`);
* ``--check-slices PORTS,...``: the crossbar costed from its column slices against the whole one
  (``build/synth/hierarchical_checks.json``);
* ``--check-tools``: which synthesis tools are installed (:mod:`synth.tools`).
"""

import json
from pathlib import Path

SLICES_JSON = Path("build/synth/hierarchical_checks.json")


def add_arguments(p) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--overhead", action="store_true",
                      help="instead of a grid: the integrated design's addition at 64 ports, at N5 "
                           "(integrated_overhead_summary.csv; synthesizes what is not cached)")
    mode.add_argument("--integrated", type=int, default=None, metavar="PORTS",
                      help="instead of a grid: the integrated switch against the plain one at PORTS ports "
                           "(integrated_summary.csv)")
    mode.add_argument("--system-top", action="store_true",
                      help="instead of a grid: the system top chip by chip from the committed summaries "
                           "(system_summary.csv; see --gpus)")
    mode.add_argument("--crosscheck", action="store_true",
                      help="instead of a grid: the counted arrays costed by CACTI at 45 and 22 nm "
                           "(array_crosscheck_summary.csv; see --blocks)")
    mode.add_argument("--flat-check", action="append", default=None, metavar="MODULE:PARAM=VALUE,...",
                      help="instead of a grid: synthesize this parts-costed point of area_summary.csv flat and record "
                           "its critical path (flat_check_summary.csv, then timing_summary.csv); repeatable. "
                           "E.g. switch:ports=16")
    mode.add_argument("--check-slices", default=None, metavar="PORTS,...",
                      help="instead of a grid: the crossbar costed from its 2- and 4-column slices against the "
                           f"whole one at these port counts, e.g. 8,16 ({SLICES_JSON})")
    mode.add_argument("--check-tools", action="store_true", help="print which synthesis tools are installed")
    p.add_argument("--gpus", type=int, default=8, help="with --system-top: GPUs on the switch (default 8)")
    p.add_argument("--blocks", action="store_true",
                   help="with --crosscheck: also the sum-of-blocks table's switch-side blocks")


def run(args) -> int | None:
    """Run the table the arguments ask for; None when they ask for none (the grid, ``dysharp area``'s default)."""
    if args.check_tools:
        from synth import tools
        return tools.main(["check"])
    if args.overhead:
        from synth import integrated
        print(integrated.write_overhead(args.out))
    elif args.integrated is not None:
        from synth import integrated
        if not 4 <= args.integrated <= 64:
            raise ValueError(f"--integrated takes a port count in 4..64 (the integrated switch's range), got {args.integrated}")
        print(integrated.write_integrated(args.out, args.integrated))
    elif args.system_top:
        from synth import system_top
        try:
            print(system_top.write_system(args.out, args.gpus))
        except FileNotFoundError as e:
            raise ValueError(str(e)) from None
    elif args.crosscheck:
        from synth import array_crosscheck
        print(array_crosscheck.write_all(args.out, args.blocks))
    elif args.flat_check:
        from synth import hierarchical, timing
        for r in hierarchical.write_flat_checks(args.flat_check, args.out, quiet=False):
            print(f"{r['module']} {r['point']}: flat {r['flat_critical_path_ps']:,.1f} ps (from parts "
                  f"{r['parts_critical_path_ps']:,.1f}), {r['flat_area_um2']:,.0f} um^2 flat against "
                  f"{r['parts_area_um2']:,.0f} from parts")
        print(f"wrote {Path(args.out) / timing.FLAT_CHECKS} and timing_summary.csv")
    elif args.check_slices is not None:
        from synth import hierarchical
        try:
            ports = [int(x) for x in args.check_slices.split(",")]
        except ValueError:
            raise ValueError(f"--check-slices takes comma-separated port counts, got {args.check_slices!r}") from None
        if not ports or any(n < 2 for n in ports):
            raise ValueError(f"--check-slices: port counts must be >= 2, got {args.check_slices!r}")
        rows = [hierarchical.check_slices(n, quiet=True) for n in ports]
        for r in rows:
            print(f"{r['part']} at {r['ports']} ports: whole {r['whole_um2']:,.0f} um^2, from slices "
                  f"{r['sliced_um2']:,.0f} um^2 ({100 * r['rel_diff']:+.2f}%); critical path "
                  f"{r['whole_critical_path_ps']} / {r['sliced_critical_path_ps']} ps")
        SLICES_JSON.parent.mkdir(parents=True, exist_ok=True)
        SLICES_JSON.write_text(json.dumps(rows, indent=1))
        print(f"wrote {SLICES_JSON}")
    else:
        return None
    return 0
