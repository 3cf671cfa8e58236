"""``dysharp faults [--classes a,b] [--seed N] [--out build/faults]``: the fault-injection campaign on the
4-port DySHARP switch (:mod:`verif.faults`). One row per fault class: the design's guarantee, injected,
detected, recovered, lost data, hangs, result; the figures also go to ``<out>/faults.json``. Exits 1 if
any guarantee failed."""

import json
from pathlib import Path


def add_arguments(p) -> None:
    from verif.faults.campaign import CLASSES
    p.add_argument("--classes", default=None, metavar="A,B",
                   help=f"fault classes to run (default: all); valid: {', '.join(CLASSES)}")
    p.add_argument("--seed", type=int, default=1, help="seed of the traffic and the injections (default: 1)")
    p.add_argument("--out", default="build/faults", help="folder for the JSON figures (default: build/faults)")
    p.add_argument("--sim", default=None, help="cocotb simulator: icarus (default, or $SIM) or verilator")
    p.add_argument("--fast", action="store_true", help="only the classes of the default test suite")


def run(args) -> int:
    import textwrap

    from tabulate import tabulate
    from tqdm import tqdm

    from verif.faults.campaign import PARAMS, run_class, select
    from verif.harness.runner import SIMULATORS
    if args.sim is not None and args.sim not in SIMULATORS:
        raise ValueError(f"unknown simulator {args.sim!r}; valid: {', '.join(SIMULATORS)}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    classes = select(args.classes)
    if args.fast:
        classes = [c for c in classes if c.fast]
    results = []
    bar = tqdm(classes, desc="faults", unit="class")
    for c in bar:
        bar.set_postfix_str(c.name)
        results.append(run_class(c, seed=args.seed, out=args.out, sim=args.sim))
    rows = []
    for r in results:
        d = r.row()
        rows.append([d["class"], textwrap.fill(d["guarantee"], 60), d["injected"], d["detected"], d["recovered"],
                     d["lost"], d["hangs"], d["result"]])
    print(tabulate(rows, headers=["class", "guarantee", "injected", "detected", "recovered", "lost data", "hangs",
                                  "result"], tablefmt="grid"))
    for r in results:
        for p in r.problems:
            print(f"{r.cls.name}: {p}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"switch": PARAMS, "seed": args.seed, "classes": [r.row() for r in results]}
    (out / "faults.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"figures: {out / 'faults.json'}")
    return 0 if all(r.ok is not False for r in results) else 1
