"""``dysharp bench reduction``: the in-switch reduction RTL, measured.

Each figure comes from a cocotb simulation whose results are still checked bit-exactly by the
testbenches' reference models:

1. **ALU conformance** (``reduce_alu``, ``flit_width=512``): ``--alu-pairs`` random operand pairs per
   element type on Verilator when installed (else Icarus); the pipeline latency is the documented one,
   asserted by the unit tests.
2. **Buffer absorption** (``reduction_buffer``): contribution flits of many outstanding reductions
   presented every cycle, half of them back-to-back runs into one partial-sum row (single-flit
   reductions with all destinations answering at once); flits absorbed per cycle, and the latency from
   the last contribution to the result header.
3. **Flow** (``ld_reduce_unit``: engine + stand-in translator): a saturating stream of
   ``dymultimem.ld_reduce`` requests (``--fanout`` destinations, ``--length`` flits, fp32 add), each
   destination answering exactly ``L`` cycles after its ``RED_READ`` (``--latencies``), all answers
   sharing one response link. Per buffer size (``--entries``) and latency: requests completed per cycle
   in a measurement window, mean entries in use and mean request latency (Little's law: in use =
   throughput x latency), plus zero-load latencies. ``outstanding=1`` gives the one-reduction-at-a-time
   design (like the open tiny-switch) for contrast.

Writes ``build/bench/reduction.json`` with the ``calibration`` dict the estimator reads.
"""

import json
import sys
import time
from pathlib import Path

import cocotb
import numpy as np
from tqdm import tqdm

from hw.packet import Opcode

from verif.harness import tbenv
from verif.harness.stream import record_cycles
from verif.bench.common import finish, study_run, table

# ---------------------------------------------------------------------------------------------------------
# Simulation side


@cocotb.test()
async def bench_buffer(dut):
    """Absorption with contributions offered back to back, and the last-contribution -> result latency.

    ``whole_packets`` (setting): each destination's response arrives whole, one after another, as the
    switch's packet-atomic response network delivers them to an engine; otherwise every destination answers
    in the same cycle and the contributions interleave flit by flit, so each lands right behind another to
    its row (the buffer's worst case: one per 3 cycles into a row with the three-stage accumulate)."""
    from verif.tb.reduction_buffer import BufferEnv
    s = tbenv.settings()
    whole = bool(s.get("whole_packets", False))
    env = BufferEnv(dut, gap=0.0, stall=0.0, jitter=0)
    await env.start()
    accepted = record_cycles(env.contrib)
    for i in range(s.get("requests", 48)):
        length = 1 if i % 2 == 0 else env.p["max_length"]
        r = env.new_request(length=length, expected=int(env.rng.integers(4, 17)), lat=(60, 60))
        r.latencies = [60 + (d * length if whole else 0) for d in range(r.expected)]
        env.submit(r)
    await env.drain()
    span = accepted[-1] - accepted[0] + 1
    flits = len(accepted)
    env.latencies.clear()
    env.submit(env.new_request(length=4, expected=3, lat=(10, 10)))
    await env.drain()
    Path(s["out"]).write_text(json.dumps({
        "contribution_flits": flits, "cycles": span, "flits_per_cycle": flits / span,
        "ready_low_cycles": env.contrib.not_ready_cycles, "reductions": env.model.completed,
        "last_to_result_cycles": env.latencies[0],
    }))


@cocotb.test()
async def bench_flow(dut):
    """Zero-load latencies, then saturation throughput of the ld_reduce flow at one read latency."""
    from verif.tb.reduction_engine import EngineEnv
    s = tbenv.settings()
    lat, fanout, length = s["latency"], s["fanout"], s["length"]
    env = EngineEnv(dut, gap=0.0, stall=0.0, lat=(lat, lat))
    await env.start(static_groups=0)

    def make():
        return env.make_request(static=False, fanout=fanout, length=length, etype=2, op=0)
    wall0 = time.perf_counter()
    env.inject(make())
    await env.drain(timeout=20 * lat + 2000)
    _, _, head, request_latency = env.results[-1]
    zero = {"request_to_result": request_latency,
            "last_response_to_result": head - max(env.resp_last.values()),
            "read_latency": lat}
    # Under saturating load the buffer fills and requests queue for the response link; steady state
    # needs about two buffer turnovers at line rate.
    turnover = env.p["entries"] * fanout * (length + 1)
    # With a fixed read latency the requests of a full buffer move in convoys (all start together, all
    # finish together): the window spans at least 8 read latencies so the count is not quantised.
    warm = s.get("warmup", min(lat + 500 + 2 * turnover, 12000))
    window = max(s.get("window", 2000), 8 * lat)
    t0 = env.cycler.cycle
    start, end = t0 + warm, t0 + warm + window
    first = len(env.results)
    in_use = []
    while env.cycler.cycle < end:
        while len(env.src.queue) < 4:
            env.inject(make())
        if env.cycler.cycle >= start:
            in_use.append(int(dut.in_use.value))
        await env.cycler.cycles(1)
    await env.drain(timeout=40 * lat + 40000)
    done = [r for r in env.results[first:] if start <= r[2] < end and r[1] == Opcode.RED_RESP.value]
    lats = [r[3] for r in done if r[3] is not None]
    Path(s["out"]).write_text(json.dumps({
        "latency": lat, "fanout": fanout, "length": length,
        "throughput_req_per_cycle": len(done) / window,
        "response_link_flits_per_cycle": len(done) * fanout * (length + 1) / window,
        "mean_in_use": float(np.mean(in_use)), "max_in_use": int(max(in_use)),
        "mean_request_latency": float(np.mean(lats)) if lats else None,
        "zero_load": zero, "checked_reductions": env.model.completed,
        "sim_cycles": env.cycler.cycle, "wall_s": time.perf_counter() - wall0,
    }))


# ---------------------------------------------------------------------------------------------------------
# Host side: `dysharp bench reduction`

def add_arguments(p) -> None:
    p.add_argument("--entries", default="16,32,64,128,256",
                   help="buffer sizes for the throughput sweep (default: 16,32,64,128,256)")
    p.add_argument("--latencies", default="50,200,800", help="destination read latencies, cycles "
                                                             "(default: 50,200,800)")
    p.add_argument("--points", default=None, metavar="ENTRIES@LATENCY,...",
                   help="measure only these (buffer entries, read latency) points instead of the whole "
                        "--entries x --latencies grid, e.g. 16@50,64@800; the one-at-a-time design still "
                        "runs at every latency named")
    p.add_argument("--buffer-requests", type=int, default=48,
                   help="reductions presented in the buffer absorption run (default: 48)")
    p.add_argument("--fanout", type=int, default=4, help="destinations per request (default: 4)")
    p.add_argument("--length", type=int, default=2, help="payload flits per request (default: 2)")
    p.add_argument("--window", type=int, default=2000, help="measured cycles per point, at least 8 read "
                                                         "latencies (default: 2000)")
    p.add_argument("--alu-pairs", type=int, default=1_000_000,
                   help="random ALU operand pairs per element type (default: 1000000; 0 skips)")
    p.add_argument("--alu-sim", default="auto", help="simulator for the ALU run: auto (Verilator when "
                                                     "installed), icarus, verilator")
    p.add_argument("--sim", default="auto", help="simulator for the buffer and flow runs: auto (Verilator when "
                                                 "installed: the same cycles as Icarus, its runs about 50x "
                                                 "faster), icarus, verilator")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="build/bench/reduction.json")


def _ints(text, what):
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{what} expects comma-separated integers, got {text!r}") from None
    if not values:
        raise ValueError(f"--{what} is empty")
    return values


def run(args) -> int:
    from hw.switch.reduce_alu import LATENCY
    from hw.switch.reduction_buffer import DEFAULT_ACC_STAGES, ReductionBuffer
    ALU_LATENCY = LATENCY + DEFAULT_ACC_STAGES - 1      # the ALU as the buffer builds it

    from verif.harness.runner import SIMULATORS, run_cocotb, verilator_env

    if args.points:
        grid = []
        for item in args.points.split(","):
            e, sep, lat = item.strip().partition("@")
            if not sep or not e.isdigit() or not lat.isdigit():
                raise ValueError(f"--points expects ENTRIES@LATENCY items such as 16@50, got {item!r}")
            grid.append((int(e), int(lat)))
        entries = list(dict.fromkeys(e for e, _ in grid))
        latencies = sorted(set(lat for _, lat in grid))
    else:
        entries = _ints(args.entries, "entries")
        latencies = _ints(args.latencies, "latencies")
        grid = [(e, lat) for e in entries for lat in latencies]
    for n in entries:
        ReductionBuffer.check_params(entries=n, max_length=16, flit_width=128, timeout=8192, outstanding=None)
    if any(x < 1 for x in latencies):
        raise ValueError("--latencies must be positive")
    if args.buffer_requests < 2:
        raise ValueError(f"--buffer-requests must be at least 2, got {args.buffer_requests}")
    if not 1 <= args.fanout <= 8:
        raise ValueError(f"--fanout must be in 1..8 (the unit is built with 8 ports), got {args.fanout}")
    if not 1 <= args.length <= 16:
        raise ValueError(f"--length must be in 1..16, got {args.length}")
    def pick(flag, sim):
        if sim == "auto":
            return "verilator" if verilator_env() else "icarus"
        if sim not in SIMULATORS:
            raise ValueError(f"unknown {flag} {sim!r}; valid: auto, {', '.join(SIMULATORS)}")
        return sim
    sim, alu_sim = pick("--sim", args.sim), pick("--alu-sim", args.alu_sim)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.parent / "reduction_raw"
    raw.mkdir(exist_ok=True)
    cmd = ("dysharp bench reduction " + (f"--points={args.points} " if args.points else
                                         f"--entries={args.entries} --latencies={args.latencies} ") +
           (f"--buffer-requests={args.buffer_requests} " if args.buffer_requests != 48 else "") +
           f"--fanout={args.fanout} --length={args.length} --window={args.window} "
           f"--alu-pairs={args.alu_pairs} --alu-sim={alu_sim} --sim={sim} --seed={args.seed}")
    report = {"command": cmd, "workload": {"fanout": args.fanout, "length": args.length,
                                           "etype": "FP32", "op": "ADD"}}
    t_all = time.time()
    points = [({"entries": e}, lat) for e, lat in grid] + [({"entries": 16, "outstanding": 1}, lat)
                                                            for lat in latencies]
    bar = tqdm(total=(args.alu_pairs > 0) + 2 + len(points), desc="reduction", unit="run", leave=False,
               dynamic_ncols=True)

    if args.alu_pairs > 0:
        bar.set_postfix_str(f"ALU on {alu_sim}")
        tqdm.write(f"[bench reduction] ALU: {args.alu_pairs} random pairs per type on {alu_sim} ...")
        t0 = time.time()
        path = raw / "alu.json"
        run_cocotb("reduce_alu", {"flit_width": 512}, test_module="verif.tb.reduce_alu", testcase="test_random",
                   sim=alu_sim, seed=args.seed, env={"pairs": args.alu_pairs, "gap": 0.0, "stall": 0.0,
                                                      "out": str(path.resolve())})
        alu = json.loads(path.read_text())
        alu.update(simulator=alu_sim, build_and_run_s=time.time() - t0)
        report["alu"] = alu
        tqdm.write(f"  {alu['pairs_per_type']} pairs per type, 0 mismatches "
                   f"({alu['cycles']} cycles, {alu['wall_s']:.0f} s)")
        bar.update()
    report["alu_latency_cycles"] = ALU_LATENCY

    # Two buffer runs: every destination answering at once (flits interleaved, the worst case), and whole
    # response packets one after another (what the switch delivers; the estimator's figure).
    for key, whole, what in (("buffer", False, "buffer absorption"),
                             ("buffer_whole", True, "buffer absorption, whole response packets")):
        bar.set_postfix_str(what)
        tqdm.write(f"[bench reduction] {what} ...")
        path = raw / f"{key}.json"
        # The longest timeout: all contributions are queued at once, and with the same-row wait (one flit
        # per 3 cycles into one row) the last reductions' flits wait longer than the default 8192 cycles.
        run_cocotb("reduction_buffer", {"entries": 64, "timeout": 1 << 20}, test_module="verif.bench.reduction",
                   testcase="bench_buffer", sim=sim, seed=args.seed,
                   env={"out": str(path.resolve()), "requests": args.buffer_requests, "whole_packets": whole})
        report[key] = r = json.loads(path.read_text())
        tqdm.write(f"  {r['contribution_flits']} contribution flits in {r['cycles']} cycles: "
                   f"{r['flits_per_cycle']:.3f} flits/cycle; last contribution -> result header "
                   f"{r['last_to_result_cycles']} cycles")
        bar.update()
    b, bw = report["buffer"], report["buffer_whole"]

    report["flow"] = []
    for params, lat in points:
        label = "one-at-a-time" if params.get("outstanding") == 1 else f"{params['entries']} entries"
        bar.set_postfix_str(f"{label}, latency {lat}")
        tqdm.write(f"[bench reduction] flow: {label}, read latency {lat} ...")
        path = raw / f"flow_{params['entries']}_{params.get('outstanding', 0)}_{lat}.json"
        run_cocotb("ld_reduce_unit", dict(params, rows=4096), test_module="verif.bench.reduction",
                   testcase="bench_flow", sim=sim, seed=args.seed,
                   env={"latency": lat, "fanout": args.fanout, "length": args.length,
                        "window": args.window, "out": str(path.resolve())})
        r = json.loads(path.read_text())
        r.update(entries=params["entries"], outstanding=params.get("outstanding", params["entries"]))
        report["flow"].append(r)
        tqdm.write(f"  {r['throughput_req_per_cycle']:.4f} requests/cycle, mean in use {r['mean_in_use']:.1f}, "
                   f"mean latency {r['mean_request_latency']:.0f} cycles ({r['wall_s']:.0f} s)")
        bar.update()
    bar.close()

    zero = [r for r in report["flow"] if r["outstanding"] != 1]
    z = zero[0]["zero_load"]
    report["calibration"] = {
        "reduce_alu_latency_cycles": ALU_LATENCY,
        # What an engine absorbs as the switch feeds it: whole response packets, one after another.
        "reduce_flits_per_cycle": round(bw["flits_per_cycle"], 4),
        "reduce_flits_per_cycle_interleaved": round(b["flits_per_cycle"], 4),
        "reduce_last_to_result_cycles": z["last_response_to_result"],
        "reduce_buffer_last_to_result_cycles": b["last_to_result_cycles"],
        "reduce_request_overhead_cycles": z["request_to_result"] - z["read_latency"],
    }
    report["wall_s"] = time.time() - t_all
    return finish(out, report, markdown(report))


def markdown(report: dict) -> str:
    """The reduction figures as a Markdown section (for docs/reduction.md and the study report)."""
    w = report["workload"]
    lines = ["## In-switch reduction", "", f"Command: `{report['command']}`", ""]
    if "alu" in report:
        a = report["alu"]
        lines.append(f"**ALU**: {', '.join(f'{k} {v:,}' for k, v in a['pairs_per_type'].items())} random "
                     f"operand pairs per element type bit-exact against numpy ({a['simulator']}, "
                     f"flit width {a['flit_width']}); pipeline latency {report['alu_latency_cycles']} cycles, "
                     "one flit per cycle.")
        lines.append("")
    b = report["buffer"]
    lines.append(f"**Reduction buffer**: {b['contribution_flits']} contribution flits absorbed in "
                 f"{b['cycles']} cycles = **{b['flits_per_cycle']:.3f} flits/cycle** with every destination "
                 f"answering in the same cycle (flits interleaved, each right behind another to its row; "
                 f"`ready` low {b['ready_low_cycles']} cycles); last contribution -> result header "
                 f"**{b['last_to_result_cycles']} cycles**.")
    if "buffer_whole" in report:
        bw = report["buffer_whole"]
        lines.append("")
        lines.append(f"With the responses arriving whole, one after another (as the switch's packet-atomic "
                     f"response network delivers them; the estimator's `reduce_flits_per_cycle`): "
                     f"{bw['contribution_flits']} flits in {bw['cycles']} cycles = "
                     f"**{bw['flits_per_cycle']:.3f} flits/cycle** (`ready` low {bw['ready_low_cycles']} "
                     f"cycles: single-flit responses to one row, one per 3 cycles).")
    lines.append("")
    c = report["calibration"]
    lines.append(f"**Flow** (engine + translator; {w['fanout']} destinations x {w['length']} flits per request, "
                 f"{w['etype']} {w['op']}, all responses on one link): last response flit -> result header "
                 f"{c['reduce_last_to_result_cycles']} cycles; request -> result at zero load = read latency + "
                 f"{c['reduce_request_overhead_cycles']} cycles. The response link carries "
                 f"{w['fanout']} x ({w['length']} + 1) flits per request, so line rate is "
                 f"{1 / (w['fanout'] * (w['length'] + 1)):.4f} requests/cycle.")
    lines.append("")
    lats = sorted({r["latency"] for r in report["flow"]})
    lines.append("Requests completed per cycle, measured (and Little's law: min(line rate, entries / "
                 "zero-load request latency)):")
    lines.append("")
    rows = {}
    rate = 1 / (w["fanout"] * (w["length"] + 1))
    for r in report["flow"]:
        label = "one at a time" if r["outstanding"] == 1 else f"{r['entries']} entries"
        rows.setdefault(label, {})[r["latency"]] = r
    grid = []
    for label, by_lat in rows.items():
        cells = []
        for x in lats:
            r = by_lat.get(x)
            if r is None:
                cells.append("-")
                continue
            little = min(rate, r["outstanding"] / r["zero_load"]["request_to_result"])
            cells.append(f"{r['throughput_req_per_cycle']:.4f} ({little:.4f})")
        grid.append([label] + cells)
    lines.append(table(grid, ["buffer"] + [f"read latency {x}" for x in lats]))
    if any("-" in row for row in grid):
        lines.append("")
        lines.append("-: not measured in this run (the full grid: `dysharp bench reduction`).")
    lines.append("")
    lines.append("At saturation the buffer stays full (mean entries in use = entries - 0.1): requests wait in "
                 "it for the response link, so the mean request latency is entries / throughput.")
    lines.append("")
    grid = []
    for x in lats:
        t = next(r["zero_load"]["request_to_result"] for r in report["flow"] if r["latency"] == x)
        grid.append([str(x), str(t), f"{rate * t:.1f}"])
    lines.append(table(grid, ["read latency", "request latency at zero load",
                                "entries for line rate (Little: rate x latency)"]))
    lines.append("")
    lines.append("Calibration (`build/bench/reduction.json`): " +
                 ", ".join(f"`{k}` = {v}" for k, v in c.items()))
    return "\n".join(lines)


# ``dysharp study`` scopes: arguments on top of the bench's defaults (= ``--full``, the whole sweep).
# The full bench's time goes to the flow runs (18 Icarus runs of about 100 simulated cycles/s, each at least
# 8 read latencies long, so the 800-cycle column costs most) and the 10^6-pair ALU run (a one-time 5-minute
# Verilator build of the 512-bit ALU). The default keeps every headline figure: buffer absorption and
# latency, the zero-load request latency and the entries line rate needs at each read latency, the
# one-at-a-time contrast at each latency, and throughput below line rate at 16 entries (every latency) and
# near it at 64 (800 cycles), with 10^4 ALU pairs on Icarus (the unit tests check the ALU too).
STUDY_ARGS = {
    "quick": ["--points", "16@50", "--alu-pairs", "1000", "--alu-sim", "icarus", "--window", "1000",
              "--buffer-requests", "16"],
    "default": ["--points", "16@50,16@200,16@800,64@800", "--alu-pairs", "10000", "--alu-sim", "icarus"],
    "full": [],
}
FULL_ONLY = {"default": "ALU conformance on 10^6 random pairs per type (Verilator) and the cells marked - of "
                        "the throughput table (buffers of 32, 128 and 256 entries; `dysharp bench reduction` "
                        "or `dysharp study --full`)"}


def study_step(args, out_dir) -> str:
    """``dysharp study`` step: the benchmark in the study's scope (``STUDY_ARGS``); returns its Markdown."""
    return study_run(sys.modules[__name__], args, out_dir, "reduction")
