"""``dysharp timing``: timing at the N5 port clock, from what the area flow already synthesized.

Without options: the timing table (``timing_summary.csv`` beside the area summary, and its Markdown) from
the committed ``area_summary.csv``, nothing synthesized (:mod:`synth.timing`). ``--paths WORKDIR``: the worst
register-to-register paths of one synthesized point, registers named (:mod:`synth.paths`). ``--fill-pair``:
synthesizes the AL-TLB with its fill bridge, composed as the integrated switch composes them, and times the
path that crosses the two (:mod:`synth.fill_pair`).
"""

import json
from pathlib import Path


def add_arguments(p) -> None:
    from synth import scaling

    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--paths", metavar="WORKDIR", default=None,
                      help="instead: the worst paths of a synthesized point's work folder, build/synth/work/<point>")
    mode.add_argument("--fill-pair", action="store_true",
                      help="instead: synthesize the AL-TLB and its fill bridge together and time the path between "
                           "them (writes build/synth/fill_pair.json)")
    p.add_argument("--area-csv", default="synth_reports/area_summary.csv",
                   help="area summary to read (default: synth_reports/area_summary.csv)")
    p.add_argument("--out", default=None,
                   help="folder for timing_summary.csv (default: beside --area-csv); with --fill-pair the JSON file "
                        "(default: build/synth/fill_pair.json)")
    p.add_argument("--clock-ghz", type=float, default=scaling.PORT_CLOCK_GHZ,
                   help=f"clock to meet (default: {scaling.PORT_CLOCK_GHZ}, the NVLink4 port clock)")
    p.add_argument("--top", default=None, help="with --paths: top module (default: the one in the folder's timing.tcl)")
    p.add_argument("--ps", type=float, default=None,
                   help=f"with --paths: clock period at 45 nm (default: "
                        f"{scaling.PORT_PERIOD_PS / scaling.DELAY:.0f}, the port clock before scaling)")
    p.add_argument("--endpoints", type=int, default=40, help="with --paths: endpoints listed (default: 40)")
    p.add_argument("--ports", type=int, default=4,
                   help="with --fill-pair: switch ports, 4..64 (default: 4, the flat point)")


def run(args) -> int:
    from synth import tools

    if args.paths is not None:
        from synth import paths

        if args.endpoints < 1:
            raise ValueError(f"--endpoints must be >= 1, got {args.endpoints}")
        try:
            print(paths.report(args.paths, args.top, args.ps, args.endpoints))
        except tools.ToolError as e:
            raise ValueError(str(e)) from None
        return 0
    if args.fill_pair:
        from synth import fill_pair

        r = fill_pair.pair_timing(args.ports)
        out = Path(args.out or "build/synth/fill_pair.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(r, indent=1) + "\n")
        print(json.dumps(r, indent=1))
        return 0
    from synth import timing

    if args.clock_ghz <= 0:
        raise ValueError(f"--clock-ghz must be positive, got {args.clock_ghz}")
    print(timing.write_timing(args.area_csv, args.out, 1000 / args.clock_ghz))
    print(f"wrote {Path(args.out or Path(args.area_csv).parent) / 'timing_summary.csv'}")
    return 0
