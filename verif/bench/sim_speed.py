"""``dysharp bench sim_speed``: simulated cycles per second of the N-port switch under full load, for
three harnesses side by side in one run, on the same traffic:

* ``cocotb_flat``: the cocotb agents (:mod:`verif.bench.switch` ``bench_switch``) on cocotb's Verilator build
  with ``--public-flat-rw`` (every internal signal visible; the old harness's build);
* ``cocotb_ports``: the same agents on a build where only the top-level ports are public (the runner's
  ``public="ports"``);
* ``fast``: the compiled Verilator main of :mod:`verif.harness.fastsim`.

Full load is uniform unicast at 1.0 flits/cycle/port (1..16-flit payloads). The cocotb runs simulate the
first ``--cocotb-cycles`` cycles of the fast path's traffic; the fast path also runs that prefix, and its
log must equal each cocotb log cycle for cycle (``equal_to_fast``). Speeds are the harness's own
cycle-loop time (reset, build and process start excluded); ``wall_s`` includes them (not the build).
Writes ``build/bench/sim_speed.json``.
"""

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

HARNESSES = ("cocotb_flat", "cocotb_ports", "fast")


def prefix(traffic, cycles: int):
    """The packets of ``traffic`` arriving in the first ``cycles`` cycles, as a run of that length."""
    keep = traffic.arrival <= cycles
    P = int(keep.sum())
    F = int(traffic.first[P - 1] + traffic.nflits[P - 1]) if P else 0
    return dataclasses.replace(traffic, arrival=traffic.arrival[:P], src=traffic.src[:P], first=traffic.first[:P],
                               nflits=traffic.nflits[:P], flits=traffic.flits[:F], run_cycles=cycles,
                               dests=traffic.dests[:P])


def same_log(a, b) -> bool:
    return (np.array_equal(a.sent, b.sent) and np.array_equal(a.delivered, b.delivered)
            and np.array_equal(a.records, b.records))


def _prebuild(params: dict, public: str, build_root) -> None:
    """Build the cocotb Verilator variant before timing (the build is not part of the speed)."""
    from verif.harness.runner import sim_build

    sim_build("switch", params, sim="verilator", build_root=build_root, public=public)


def measure(ports: int, *, fast_cycles: int, cocotb_cycles: int, seed: int = 1, harnesses=HARNESSES,
            build_root: str = "build") -> dict:
    """Speeds of the harnesses on the ``ports``-port switch (one dict per harness under ``harnesses``)."""
    from verif.bench.switch import simulate, switch_traffic
    from verif.harness.fastsim import build, check_delivery

    traffic = switch_traffic(ports, 1.0, arrival_cycles=fast_cycles, drain=0, seed=seed)
    short = prefix(traffic, cocotb_cycles)
    params = {"ports": ports}
    out = {"ports": ports, "load": 1.0, "harnesses": {}}
    t0 = time.perf_counter()
    fs = build("switch", params, build_root=build_root)
    out["fast_build_s"] = time.perf_counter() - t0
    fast_short = fs.run(short, tag=f"speed{ports}-short")
    for h in harnesses:
        r = {"harness": h}
        t0 = time.perf_counter()
        if h == "fast":
            log = fs.run(traffic, tag=f"speed{ports}")
        else:
            public = h.split("_", 1)[1]
            _prebuild(params, public, build_root)
            t0 = time.perf_counter()
            log = simulate(short, "switch", params, harness="cocotb", sim="verilator", public=public,
                           build_root=build_root, tag=f"speed{ports}-{h}")
        wall = time.perf_counter() - t0
        check_delivery(traffic if h == "fast" else short, log)
        r.update(available=True, sim_cycles=log.run_cycles, loop_s=log.loop_ns * 1e-9,
                 loop_cpu_s=log.loop_cpu_ns * 1e-9, cycles_per_s=log.cycles_per_s,
                 cycles_per_cpu_s=log.cycles_per_cpu_s, wall_s=wall, flits_delivered=int(log.delivered.sum()))
        if h != "fast":
            r["equal_to_fast"] = same_log(log, fast_short)
        out["harnesses"][h] = r
        print(f"  N={ports} {h}: {r['cycles_per_s']:,.0f} simulated cycles/s, {r['cycles_per_cpu_s']:,.0f} per "
              f"CPU second ({log.run_cycles} cycles)"
              + (f", log equal to the fast path's: {r['equal_to_fast']}" if h != "fast" else ""), flush=True)
    hs = out["harnesses"]
    for key, metric in (("ratios", "cycles_per_s"), ("ratios_cpu", "cycles_per_cpu_s")):
        speed = {h: hs[h][metric] for h in hs if hs[h].get("available")}
        out[key] = {f"{a}/{b}": speed[a] / speed[b] for a, b in
                    (("fast", "cocotb_flat"), ("fast", "cocotb_ports"), ("cocotb_ports", "cocotb_flat"))
                    if a in speed and b in speed}
    return out


def add_arguments(p) -> None:
    p.add_argument("--ports", default="8,16", help="comma-separated port counts (default: 8,16)")
    p.add_argument("--fast-cycles", type=int, default=100_000, help="cycles of the fast-path run (default: 100000)")
    p.add_argument("--cocotb-cycles", type=int, default=3000, help="cycles of each cocotb run (default: 3000)")
    p.add_argument("--harnesses", default=",".join(HARNESSES), help=f"subset of {','.join(HARNESSES)}")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="build/bench/sim_speed.json")


def run(args) -> int:
    try:
        ports = [int(x) for x in args.ports.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--ports expects comma-separated integers, got {args.ports!r}") from None
    harnesses = [h for h in args.harnesses.split(",") if h]
    for h in harnesses:
        if h not in HARNESSES:
            raise ValueError(f"unknown harness {h!r}; valid: {', '.join(HARNESSES)}")
    if args.cocotb_cycles < 1 or args.fast_cycles < args.cocotb_cycles:
        raise ValueError("--cocotb-cycles must be >= 1 and at most --fast-cycles")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"command": f"dysharp bench sim_speed --ports={args.ports} --fast-cycles={args.fast_cycles} "
                         f"--cocotb-cycles={args.cocotb_cycles} --harnesses={','.join(harnesses)} --seed={args.seed}",
              "runs": []}
    for n in ports:
        print(f"[bench sim_speed] N={n}, full load ...", flush=True)
        report["runs"].append(measure(n, fast_cycles=args.fast_cycles, cocotb_cycles=args.cocotb_cycles,
                                      seed=args.seed, harnesses=harnesses))
    out.write_text(json.dumps(report, indent=1))
    print(markdown(report))
    print(f"wrote {out}")
    return 0


def markdown(report: dict) -> str:
    from tabulate import tabulate

    rows = []
    for r in report["runs"]:
        hs = r["harnesses"]
        row = [r["ports"]]
        for h in HARNESSES:
            x = hs.get(h)
            row.append("not run" if x is None else ("not available" if not x["available"]
                                                     else f"{x['cycles_per_s']:,.0f} ({x['cycles_per_cpu_s']:,.0f})"))
        row += [f"{r['ratios'][k]:.1f}x ({r['ratios_cpu'][k]:.1f}x)" if k in r["ratios"] else "-"
                for k in ("fast/cocotb_flat", "fast/cocotb_ports")]
        eq = [hs[h]["equal_to_fast"] for h in hs if hs[h].get("available") and "equal_to_fast" in hs[h]]
        row.append("-" if not eq else ("yes" if all(eq) else "NO"))
        rows.append(row)
    table = tabulate(rows, headers=["ports", "cocotb, flat build", "cocotb, ports only", "fast path",
                                    "fast / flat", "fast / ports", "logs equal"],
                     tablefmt="github", disable_numparse=True)
    return (f"Simulated cycles per second of wall time (in brackets: per second of process CPU time), full load "
            f"(`{report['command']}`):\n\n{table}\n")
