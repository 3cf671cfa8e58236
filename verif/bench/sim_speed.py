"""``dysharp bench sim_speed``: simulated cycles per second of the N-port switch under full load, for
three harnesses side by side in one run, on the same traffic:

* ``cocotb_flat``: the cocotb agents (:mod:`verif.bench.switch` ``bench_switch``) on cocotb's Verilator build
  with ``--public-flat-rw`` (every internal signal visible; the old harness's build);
* ``cocotb_ports``: the same agents on a build where only the top-level ports are public (the runner's
  ``public="ports"``);
* ``fast``: the compiled Verilator main of :mod:`verif.harness.fastsim`;
* ``fast_latched_rst``: the same main over the Verilog with its reset latched
  (:func:`verif.harness.fastsim.registered_reset`); its log must equal the fast path's (``equal_to_fast``).

``--dysharp-ports`` compares the integrated DySHARP switch's two-VC fast path built as generated
(``direct``), with its reset latched (``latched_rst``), with every input latched on the falling edge
(``latched_inputs``, :func:`verif.harness.fastsim.registered_inputs`) and with every input registered at
the rising edge, the main driving each cycle's inputs before it (``inputs_at_rise``), all four without a
profile and with the repeated blocks kept apart; ``inlined`` is ``inputs_at_rise`` with every block inlined
into one model; ``pgo`` is the default build (inputs at the rising edge, every block inlined,
profile-guided: :func:`verif.harness.fastsim.build_vc` ``pgo`` and ``inline``), ``pgo_apart`` the same with
the repeated blocks kept apart, and ``pgo_o2``, ``pgo_native``, ``pgo_threads2`` add g++ ``-O2``,
``-march=native`` or Verilator's ``--threads 2`` to the default. The profile-guided builds keep the
conditions of combinational processes (:data:`verif.harness.fastsim.build.KEEP_CONDITIONS`) but
``pgo_dfg_all`` and ``pgo_apart_dfg_all``, ``pgo`` and ``pgo_apart`` with all of Verilator's data-flow
rewrites; ``inputs_at_rise_keep`` is ``inputs_at_rise`` with the conditions kept. All run under the dispatch bench's full-load traffic
(fanout 4, warm AL-TLB); every log must equal the first build's.

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

HARNESSES = ("cocotb_flat", "cocotb_ports", "fast", "fast_latched_rst")


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


def _fastest(run, repeat: int):
    """The log of the fastest of ``repeat`` runs (``run()`` returns a log with ``loop_ns``): the figure
    least disturbed by other work on the machine."""
    return min((run() for _ in range(max(1, repeat))), key=lambda log: log.loop_ns)


def measure(ports: int, *, fast_cycles: int, cocotb_cycles: int, seed: int = 1, harnesses=HARNESSES,
            build_root: str = "build", repeat: int = 1) -> dict:
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
    fast_full = None            # the fast path's log of the whole traffic, once run
    for h in harnesses:
        r = {"harness": h}
        t0 = time.perf_counter()
        if h == "fast":
            log = fast_full = _fastest(lambda: fs.run(traffic, tag=f"speed{ports}"), repeat)
        elif h == "fast_latched_rst":
            latched = build("switch", params, build_root=build_root, latch_reset=True)
            t0 = time.perf_counter()
            log = _fastest(lambda: latched.run(traffic, tag=f"speed{ports}-latched"), repeat)
        else:
            public = h.split("_", 1)[1]
            _prebuild(params, public, build_root)
            t0 = time.perf_counter()
            log = simulate(short, "switch", params, harness="cocotb", sim="verilator", public=public,
                           build_root=build_root, tag=f"speed{ports}-{h}")
        wall = time.perf_counter() - t0
        check_delivery(traffic if h.startswith("fast") else short, log)
        r.update(available=True, sim_cycles=log.run_cycles, loop_s=log.loop_ns * 1e-9,
                 loop_cpu_s=log.loop_cpu_ns * 1e-9, cycles_per_s=log.cycles_per_s,
                 cycles_per_cpu_s=log.cycles_per_cpu_s, wall_s=wall, flits_delivered=int(log.delivered.sum()))
        if h == "fast_latched_rst":
            r["equal_to_fast"] = same_log(log, fast_full or fs.run(traffic, tag=f"speed{ports}-check"))
        elif h != "fast":
            r["equal_to_fast"] = same_log(log, fast_short)
        out["harnesses"][h] = r
        print(f"  N={ports} {h}: {r['cycles_per_s']:,.0f} simulated cycles/s, {r['cycles_per_cpu_s']:,.0f} per "
              f"CPU second ({log.run_cycles} cycles)"
              + (f", log equal to the fast path's: {r['equal_to_fast']}" if h != "fast" else ""), flush=True)
    hs = out["harnesses"]
    for key, metric in (("ratios", "cycles_per_s"), ("ratios_cpu", "cycles_per_cpu_s")):
        speed = {h: hs[h][metric] for h in hs if hs[h].get("available")}
        out[key] = {f"{a}/{b}": speed[a] / speed[b] for a, b in
                    (("fast", "cocotb_flat"), ("fast", "cocotb_ports"), ("cocotb_ports", "cocotb_flat"),
                     ("fast_latched_rst", "fast"))
                    if a in speed and b in speed}
    return out


#: The integrated switch's two-VC fast-path builds compared (:func:`measure_dysharp`): name -> build_vc options.
DYSHARP_HARNESSES = {
    # without a profile: the Verilog as generated, the reset latched (registered_reset), every input
    # latched at the falling edge, registered at the rising edge
    "direct": {"latch_reset": False, "latch_inputs": False, "inputs_at_rise": False, "pgo": False},
    "latched_rst": {"latch_reset": True, "latch_inputs": False, "inputs_at_rise": False, "pgo": False},
    "latched_inputs": {"latch_reset": True, "latch_inputs": True, "inputs_at_rise": False, "pgo": False},
    "inputs_at_rise": {"latch_reset": True, "latch_inputs": True, "inputs_at_rise": True, "pgo": False},
    "inlined": {"pgo": False, "inline": True},                         # no profile, every block inlined
    "pgo": {},                                     # the default: profile-guided, every block inlined, g++ -O1
    "pgo_apart": {"inline": False},                                    # profile-guided, repeated blocks apart
    "pgo_o2": {"opt": "-O2"},                                          # profile-guided, g++ -O2
    "pgo_native": {"cflags": ["-march=native"]},                       # profile-guided, -march=native
    "pgo_threads2": {"more": ["--threads", "2", "--threads-dpi", "none"]},  # profile-guided, 2 threads
    "pgo_dfg_all": {"keep_conditions": False},      # profile-guided, every rewrite of Verilator's DFG pass
    "pgo_apart_dfg_all": {"inline": False, "keep_conditions": False},  # pgo_apart, every DFG rewrite
    # without a profile, the conditions kept (KEEP_CONDITIONS)
    "inputs_at_rise_keep": {"latch_reset": True, "latch_inputs": True, "inputs_at_rise": True, "pgo": False,
                            "keep_conditions": True},
}


def _build_dysharp(ports: int, build_root, opt: str | None = None, cflags=(), more=(), **kw):
    """``build_vc`` of the bench's integrated switch with the variant's extra options."""
    from verif.bench import dysharp_switch as ds
    from verif.harness.fastsim.build import VERILATOR_FLAGS, build_vc

    flags = list(VERILATOR_FLAGS)
    if opt:
        flags[flags.index("OPT_FAST=-O1")] = f"OPT_FAST={opt}"
    for c in cflags:
        flags += ["-CFLAGS", c]
    flags += list(more)
    return build_vc(ds.design_point(ports), build_root=build_root, flags=flags, **kw)


def measure_dysharp(ports: int, *, cycles: int, seed: int = 1, build_root: str = "build", repeat: int = 1,
                    harnesses=tuple(DYSHARP_HARNESSES)) -> dict:
    """The integrated switch's two-VC fast path built each way of :data:`DYSHARP_HARNESSES`, on the same
    full-load dispatch traffic: cycles/s of each (the fastest of ``repeat`` runs, the builds alternating),
    its build time and whether every logged array equals the first harness's."""
    from verif.bench import dysharp_switch as ds

    rng = np.random.default_rng([seed, ports, 4, 1])
    pkts = ds.dispatch_packets(ports, 4, "hit", load=1.0, arrival_cycles=cycles, rng=rng)
    vt, _ = ds.assemble(ports, pkts, cycles, rng, seed=seed)
    out = {"module": ds.MODULE, "ports": ports, "traffic": "dispatch, fanout 4, warm AL-TLB, load 1.0",
           "harnesses": {}}
    sims = {h: _build_dysharp(ports, build_root, **DYSHARP_HARNESSES[h]) for h in harnesses}
    logs = {}
    for _ in range(max(1, repeat)):
        for h, sim in sims.items():
            log = sim.run(vt, tag=f"speed-dysharp{ports}-{h}")
            if h not in logs or log.loop_ns < logs[h].loop_ns:
                logs[h] = log
    ref = vars(logs[harnesses[0]])
    for h, log in logs.items():
        a = vars(log)
        out["harnesses"][h] = {"sim_cycles": log.run_cycles, "loop_s": log.loop_ns * 1e-9,
                               "cycles_per_s": log.cycles_per_s, "cycles_per_cpu_s": log.cycles_per_cpu_s,
                               "build_s": sims[h].build_s,
                               "equal": all(np.array_equal(a[k], ref[k]) for k in a if isinstance(a[k], np.ndarray))}
        print(f"  {ds.MODULE} N={ports} {h}: {out['harnesses'][h]['cycles_per_s']:,.0f} simulated cycles/s",
              flush=True)
    out["logs_equal"] = all(r["equal"] for r in out["harnesses"].values())
    return out


def add_arguments(p) -> None:
    p.add_argument("--ports", default="8,16", help="comma-separated port counts (default: 8,16)")
    p.add_argument("--fast-cycles", type=int, default=100_000, help="cycles of the fast-path run (default: 100000)")
    p.add_argument("--cocotb-cycles", type=int, default=3000, help="cycles of each cocotb run (default: 3000)")
    p.add_argument("--harnesses", default=",".join(HARNESSES), help=f"subset of {','.join(HARNESSES)}")
    p.add_argument("--dysharp-ports", default="8",
                   help="comma-separated port counts of the integrated switch's harness comparison "
                        "(default: 8; empty: none)")
    p.add_argument("--dysharp-harnesses", default="inputs_at_rise,pgo",
                   help=f"the integrated switch's builds compared, a subset of {','.join(DYSHARP_HARNESSES)} "
                        f"(default: inputs_at_rise,pgo)")
    p.add_argument("--dysharp-cycles", type=int, default=20_000,
                   help="cycles of each integrated-switch run (default: 20000)")
    p.add_argument("--repeat", type=int, default=3,
                   help="fast-path runs per harness; the fastest counts (default: 3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="build/bench/sim_speed.json")


def run(args) -> int:
    try:
        ports = [int(x) for x in args.ports.split(",") if x.strip()]
        dports = [int(x) for x in args.dysharp_ports.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--ports and --dysharp-ports expect comma-separated integers, got "
                         f"{args.ports!r} and {args.dysharp_ports!r}") from None
    if args.repeat < 1:
        raise ValueError(f"--repeat must be at least 1, got {args.repeat}")
    if args.dysharp_cycles < 1000:
        raise ValueError(f"--dysharp-cycles must be at least 1000, got {args.dysharp_cycles}")
    dharnesses = tuple(h for h in args.dysharp_harnesses.split(",") if h)
    for h in dharnesses:
        if h not in DYSHARP_HARNESSES:
            raise ValueError(f"unknown integrated-switch harness {h!r}; valid: {', '.join(DYSHARP_HARNESSES)}")
    if dports and not dharnesses:
        raise ValueError("--dysharp-harnesses names none")
    harnesses = [h for h in args.harnesses.split(",") if h]
    for h in harnesses:
        if h not in HARNESSES:
            raise ValueError(f"unknown harness {h!r}; valid: {', '.join(HARNESSES)}")
    if args.cocotb_cycles < 1 or args.fast_cycles < args.cocotb_cycles:
        raise ValueError("--cocotb-cycles must be >= 1 and at most --fast-cycles")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"command": f"dysharp bench sim_speed --ports={args.ports} --fast-cycles={args.fast_cycles} "
                         f"--cocotb-cycles={args.cocotb_cycles} --harnesses={','.join(harnesses)} "
                         f"--dysharp-ports={args.dysharp_ports} --dysharp-harnesses={','.join(dharnesses)} "
                         f"--dysharp-cycles={args.dysharp_cycles} "
                         f"--repeat={args.repeat} --seed={args.seed}",
              "runs": [], "dysharp": []}
    for n in ports:
        print(f"[bench sim_speed] N={n}, full load ...", flush=True)
        report["runs"].append(measure(n, fast_cycles=args.fast_cycles, cocotb_cycles=args.cocotb_cycles,
                                      seed=args.seed, harnesses=harnesses, repeat=args.repeat))
    for n in dports:
        print(f"[bench sim_speed] {n}-port integrated switch, {', '.join(dharnesses)} ...", flush=True)
        report["dysharp"].append(measure_dysharp(n, cycles=args.dysharp_cycles, seed=args.seed,
                                                 repeat=args.repeat, harnesses=dharnesses))
    out.write_text(json.dumps(report, indent=1))
    print(markdown(report))
    print(f"wrote {out}")
    return 0


def markdown(report: dict) -> str:
    from tabulate import tabulate

    def speed(x):
        return "not run" if x is None else ("not available" if not x.get("available", True)
                                            else f"{x['cycles_per_s']:,.0f} ({x['cycles_per_cpu_s']:,.0f})")

    rows = []
    for r in report["runs"]:
        hs = r["harnesses"]
        row = [r["ports"]] + [speed(hs.get(h)) for h in HARNESSES]
        row += [f"{r['ratios'][k]:.2f}x ({r['ratios_cpu'][k]:.2f}x)" if k in r["ratios"] else "-"
                for k in ("fast/cocotb_flat", "fast/cocotb_ports", "fast_latched_rst/fast")]
        eq = [hs[h]["equal_to_fast"] for h in hs if hs[h].get("available") and "equal_to_fast" in hs[h]]
        row.append("-" if not eq else ("yes" if all(eq) else "NO"))
        rows.append(row)
    table = tabulate(rows, headers=["ports", "cocotb, flat build", "cocotb, ports only", "fast path",
                                    "fast path, reset latched", "fast / flat", "fast / ports",
                                    "latched / direct reset", "logs equal"],
                     tablefmt="github", disable_numparse=True)
    text = (f"Simulated cycles per second of wall time (in brackets: per second of process CPU time), full load "
            f"(`{report['command']}`):\n\n" + (f"{table}\n" if rows else ""))
    if report.get("dysharp"):
        names = list(report["dysharp"][0]["harnesses"])
        rows = [[r["ports"], r["traffic"]] + [speed(r["harnesses"].get(h)) for h in names]
                + ["yes" if r["logs_equal"] else "NO"] for r in report["dysharp"]]
        text += ("\nThe integrated DySHARP switch's two-VC fast path, built each way (same command):\n\n"
                 + tabulate(rows, headers=["ports", "traffic"] + names + ["logs equal"],
                            tablefmt="github", disable_numparse=True) + "\n")
    return text
