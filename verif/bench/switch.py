"""``dysharp bench switch``: the NVSwitch RTL under uniform random traffic.

Every point (port count, queueing variant, offered load) is an independent simulation from reset:
:func:`measure_point` is a pure function of its arguments. Its traffic is generated once in Python
(:func:`switch_traffic`): every source injects Bernoulli arrivals (a new packet with probability
load / mean packet flits each cycle, into an unbounded source queue) with uniformly random unicast
destinations, or, for multicast points, ``dymultimem.st`` packets to a random mask of ``fanout`` ports.
After a warm-up, a measurement window counts delivered flits (accepted throughput per port) and the
header-in to header-out latency of every packet whose header entered during it; a drain follows (no new
arrivals) so that window packets still in flight can arrive. A lone packet per port pair gives the
zero-load latency (:func:`measure_zero_load`).

Two harnesses run the same traffic file and write the same delivery log
(:mod:`verif.harness.fastsim.files`): the fast path (``harness="fast"``, a compiled Verilator main,
:mod:`verif.harness.fastsim`) and the cocotb bench (``harness="cocotb"``, the ``bench_switch`` test below,
driving :class:`~verif.harness.credit.CreditSource`/:class:`~verif.harness.credit.CreditSink`). The
figures come from the log by one function (:func:`figures`), after the scoreboard
(:func:`verif.harness.fastsim.check_delivery`) has checked every delivery against the reference model.
"""

import json
import os
import statistics
import time
from pathlib import Path

import cocotb
import numpy as np

from hw.packet import HEADER_BITS, ErrorCode, Header, Opcode, check_header, flit_layout
from infra import engine

from verif.harness import tbenv
from verif.harness.fastsim.files import (SimLog, Traffic, flag_bits, flit_to_words, flit_words, fnv_words,
                                         read_traffic, record_dtype, words_to_int, write_log)

HARNESSES = ("fast", "cocotb")
ZERO_LOAD_GAP = 100   # cycles between the lone packets: each is alone in the switch


def zero_load_pairs(n: int) -> tuple[tuple[int, int], ...]:
    """(src, dst) of the lone packets that measure the zero-load latency."""
    return (0, n - 1), (n - 1, 0), (1, 1)


# ---------------------------------------------------------------------------------------------------------
# Traffic (generated once per point; both harnesses read the same file)


def _payload_lengths(spec: str) -> tuple[int, int]:
    try:
        lo, _, hi = spec.partition("-")
        lo, hi = int(lo), int(hi or lo)
    except ValueError:
        raise ValueError(f"payload must be N or LO-HI payload flits, got {spec!r}") from None
    if not 1 <= lo <= hi:
        raise ValueError(f"payload range must satisfy 1 <= LO <= HI, got {spec!r}")
    return lo, hi


def switch_traffic(ports: int, load: float, *, fanout: int | None = None, payload: str = "1-16",
                   arrival_cycles: int, drain: int, seed: int, max_payload: int = 16,
                   zero_load: bool = False) -> Traffic:
    """The traffic of one point as a :class:`Traffic` (with the reference model's destination masks).

    Arrivals happen in cycles 1..``arrival_cycles``; the run lasts ``arrival_cycles + drain`` cycles.
    The generator is seeded by (seed, ports, load, fanout), not by the queueing variant, so VOQ and FIFO
    see identical traffic. ``zero_load`` replaces the Bernoulli arrivals by one packet per
    :func:`zero_load_pairs` pair, :data:`ZERO_LOAD_GAP` cycles apart.
    """
    from verif.models.switch import SwitchModel

    lo, hi = _payload_lengths(payload)
    if hi > max_payload:
        raise ValueError(f"payload up to {hi} flits exceeds the switch's max_payload {max_payload}")
    if fanout is not None and not 1 <= fanout <= ports:
        raise ValueError(f"fanout must be in 1..{ports}, got {fanout}")
    rng = np.random.default_rng([seed, ports, int(round(load * 1e6)), fanout or 0, int(zero_load)])
    if zero_load:
        pairs = zero_load_pairs(ports)
        arrival = np.array([1 + ZERO_LOAD_GAP * k for k in range(len(pairs))], np.int64)
        src = np.array([s for s, _ in pairs], np.int32)
        dst = np.array([d for _, d in pairs], np.int64)
        run_cycles = int(arrival[-1]) + ZERO_LOAD_GAP
    else:
        prob = min(1.0, load / (1 + (lo + hi) / 2))
        t, src = np.nonzero(rng.random((arrival_cycles, ports)) < prob)   # row-major: sorted by cycle
        arrival = (t + 1).astype(np.int64)
        src = src.astype(np.int32)
        dst = rng.integers(0, ports, len(arrival))
        run_cycles = arrival_cycles + drain
    P = len(arrival)
    length = rng.integers(lo, hi + 1, P).astype(np.int32)
    if fanout is not None:
        # A random fanout-subset of the ports per packet: the first `fanout` of a random permutation.
        order = np.argsort(rng.random((P, ports)), axis=1)[:, :fanout]
        masks = np.bitwise_or.reduce(np.left_shift(np.uint64(1), order.astype(np.uint64)), axis=1)
    words = flit_words(128)
    layout = flit_layout(128)
    if layout["data"].offset != 0:
        raise ValueError("the traffic writer assumes flit data at bit 0 of the flit layout")
    data_words = HEADER_BITS // 32
    nflits = length + 1
    first = np.zeros(P, np.int64)
    if P:
        first[1:] = np.cumsum(nflits)[:-1]
    F = int(nflits.sum())
    flits = np.zeros((F, words), np.uint32)
    flits[:, :data_words] = rng.integers(0, 1 << 32, (F, data_words), dtype=np.uint64).astype(np.uint32)
    model = SwitchModel(ports, max_payload)
    dests = np.zeros(P, np.uint64)
    heads = np.zeros((P, data_words), np.uint32)
    for k in range(P):
        seq = k + 1
        if fanout is None:
            h = Header(opcode=Opcode.WRITE, src=int(src[k]), tag=seq & 0xFF, length=int(length[k]),
                       dst=int(dst[k]), addr=seq << 4)
        else:
            if seq >= 1 << 18:
                raise ValueError("too many multicast packets for unique 18-bit indices: shorten the run")
            h = Header(opcode=Opcode.DYN_ST, src=int(src[k]), tag=seq & 0xFF, length=int(length[k]),
                       mask=int(masks[k]), index=seq)
        if check_header(h, ports=ports, max_payload=max_payload) != ErrorCode.NONE:
            raise ValueError(f"generated a header the switch rejects: {h}")
        dests[k] = sum(1 << d for d in model.destinations(h))
        heads[k] = flit_to_words(h.encode(), data_words)
    flits[first, :data_words] = heads
    lw, lb = flag_bits(128)["last"]
    flits[first + nflits - 1, lw] |= np.uint32(1 << lb)
    return Traffic(ports, words, arrival, src, first, nflits.astype(np.int32), flits, run_cycles, dests=dests)


# ---------------------------------------------------------------------------------------------------------
# Simulation side (cocotb harness): the same traffic file in, the same log format out


class _PatternGate:
    """A sink's stall gate read from the traffic's stall pattern (same pattern as the fast path)."""

    def __init__(self, column, clock):
        self.column = column
        self.clock = clock

    def open(self) -> bool:
        return not self.column[self.clock[0] % len(self.column)]


@cocotb.test()
async def bench_switch(dut):
    import random

    from hw.packet import pack_flit, unpack_flit

    from verif.harness.credit import CreditSink, CreditSource
    from verif.harness.cycler import Agent, Cycler

    s = tbenv.settings()
    p = tbenv.params()
    n = p["ports"]
    traffic = read_traffic(s["traffic"])
    if traffic.ports != n:
        raise ValueError(f"traffic for {traffic.ports} ports on a {n}-port switch")
    W = traffic.words
    run = traffic.run_cycles
    rng = random.Random(0)   # unused: no gaps or random stalls (the gates never draw)
    sent = np.full(traffic.packets, -1, np.int64)
    delivered = np.zeros((run, n), np.uint8)
    records = []
    clock = [0]
    cur = [None] * n
    wall = {}

    def on_sent(pid, cycle):
        if cycle <= run:
            sent[pid] = cycle

    def on_flit(j, f, cycle):
        if cycle > run:
            return
        delivered[cycle - 1, j] = 1
        ws = flit_to_words(pack_flit(f), W)
        if cur[j] is None:
            cur[j] = [cycle, ws, fnv_words(ws), 1, int(f.poison)]
        else:
            r = cur[j]
            r[2] = fnv_words(ws, r[2])
            r[3] += 1
            r[4] |= int(f.poison)
        if f.last:
            first, head, h, nfl, poison = cur[j]
            records.append((first, cycle, j, nfl, poison, 0, h, head))
            cur[j] = None

    sources = [CreditSource(dut, f"rx__{i}", rng, credits=p["credits"], on_sent=on_sent) for i in range(n)]
    sinks = [CreditSink(dut, f"tx__{j}", rng, credits=p["out_credits"] or p["credits"],
                        on_flit=lambda f, c, j=j: on_flit(j, f, c)) for j in range(n)]
    if traffic.stall is not None:
        for j, sink in enumerate(sinks):
            sink.gate = _PatternGate(traffic.stall[:, j], clock)

    class Feeder(Agent):
        """Packets join their source queue in their arrival cycle, before the sources drive."""
        next = 0

        def drive(self, cycle):
            clock[0] = cycle
            if cycle == 1:
                wall["t0"] = time.perf_counter()
                wall["c0"] = time.process_time()
            while self.next < traffic.packets and traffic.arrival[self.next] <= cycle:
                k = self.next
                fl = [unpack_flit(words_to_int(w)) for w in traffic.packet_words(k)]
                sources[traffic.src[k]].send(fl, packet_id=k)
                self.next += 1

    cycler = Cycler(dut)
    cycler.add(Feeder(), *sources, *sinks)
    done = cocotb.triggers.Event()

    def watch(cycle):
        if cycle == run:
            wall["t1"] = time.perf_counter()
            wall["c1"] = time.process_time()
            done.set()
    cycler.watchers.append(watch)
    await cycler.start()
    await done.wait()
    rec = np.array([(a, b, c, d, e, f, g, tuple(h)) for a, b, c, d, e, f, g, h in records], record_dtype(W))
    loop_ns = int((wall["t1"] - wall["t0"]) * 1e9)
    cpu_ns = int((wall["c1"] - wall["c0"]) * 1e9)   # the simulator and Python share this process
    write_log(SimLog(n, W, run, loop_ns, sent, delivered, rec, cpu_ns), s["log"])


# ---------------------------------------------------------------------------------------------------------
# Points


def design_point(ports, queueing, credits=None, iterations=None):
    """The :class:`~hw.registry.DesignPoint` of the bench's switch: ``switch`` (VOQ) or ``switch_fifo``."""
    from hw import registry

    if queueing not in ("voq", "fifo"):
        raise ValueError(f"unknown queueing variant {queueing!r}; valid: voq, fifo")
    params = {"ports": ports}
    if credits:
        params["credits"] = credits
    if iterations:
        params["iterations"] = iterations
    return registry.point("switch" if queueing == "voq" else "switch_fifo", params)


def simulate(traffic: Traffic, module, params: dict | None = None, *, harness: str = "fast",
             sim: str = "verilator", public: str | None = None, build_root="build", tag: str = "point") -> SimLog:
    """Run ``traffic`` on a design point (``module``: a :class:`~hw.registry.DesignPoint`, or a registered
    module name with ``params``) with either harness and return the delivery log.

    ``public`` (cocotb only) picks the Verilator build's visibility (``"flat"`` or ``"ports"``); it needs a
    runner that takes the ``public=`` keyword, else a TypeError says it is not available.
    """
    from hw import registry
    from verif.harness.fastsim import build
    from verif.harness.fastsim.files import read_log, write_traffic
    from verif.harness.runner import run_cocotb

    point = registry.point(module, params)
    if harness == "fast":
        return build(point, build_root=build_root).run(traffic, Path(build_root) / "bench" / "fastsim",
                                                                tag=tag)
    if harness != "cocotb":
        raise ValueError(f"unknown harness {harness!r}; valid: {', '.join(HARNESSES)}")
    work = (Path(build_root) / "bench" / "cocotb_traffic").resolve()
    work.mkdir(parents=True, exist_ok=True)
    tpath = write_traffic(traffic, work / f"{tag}-{os.getpid()}.traffic")
    lpath = work / f"{tag}-{os.getpid()}.log.bin"
    kwargs = {} if public is None else {"public": public}
    run_cocotb(point, test_module="verif.bench.switch", testcase="bench_switch", sim=sim,
               env={"traffic": str(tpath), "log": str(lpath)}, build_root=build_root, quiet=True, **kwargs)
    log = read_log(lpath)
    tpath.unlink()
    lpath.unlink()
    return log


def figures(traffic: Traffic, log: SimLog, window_start: int, window: int) -> dict:
    """Throughput and latency over cycles [window_start, window_start + window) from a delivery log."""
    from verif.harness.fastsim import check_delivery

    report = check_delivery(traffic, log)
    n = traffic.ports
    w0, w1 = window_start, window_start + window
    delivered = int(log.delivered[w0 - 1:w1 - 1].sum())
    in_window = (traffic.arrival >= w0) & (traffic.arrival < w1)
    offered = int(traffic.nflits[in_window].sum())
    rec = log.records
    t_in = log.sent[report.packet_index]
    measured = (t_in >= w0) & (t_in < w1)
    lat = sorted(int(x) for x in (rec["first"] - t_in)[measured])
    return {
        "offered_measured": offered / (window * n),
        "throughput": delivered / (window * n),
        "latency_mean": statistics.fmean(lat) if lat else None,
        "latency_p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None,
        "packets_measured": len(lat),
        "packets_delivered_all": report.complete,
        "packets_injected": report.packets,
    }


def warmup_for(load: float, warmup: int, credits: int) -> int:
    # Near and past saturation the input buffers fill at (offered - accepted) flits per cycle; the window
    # must start once they are full, or it measures the filling transient (a few percent low).
    return warmup + (24 * credits if load >= 0.9 else 0)


def window_for(load: float, cycles: int) -> int:
    # Near saturation the accepted rate fluctuates more: measure three times as long.
    return cycles * (3 if load >= 0.9 else 1)


def measure_point(ports: int, queueing: str, load: float, *, fanout: int | None = None, payload: str = "1-16",
                  cycles: int = 2000, warmup: int = 1000, drain: int = 300, credits: int | None = None,
                  iterations: int | None = None, seed: int = 1, harness: str = "fast", sim: str = "verilator",
                  public: str | None = None, build_root: str = "build") -> dict:
    """One benchmark point from reset: its figures (the keys of ``loads``/``multicast`` entries in the
    JSON) plus ``sim_cycles``/``loop_s`` (simulated cycles and the harness's cycle-loop time)."""
    if not 0 < load <= 1.0:
        raise ValueError(f"load must be in (0, 1] flits/cycle/port, got {load}")
    point = design_point(ports, queueing, credits, iterations)
    full = point.params
    wu = warmup_for(load, warmup, full["credits"])
    win = window_for(load, cycles)
    traffic = switch_traffic(ports, load, fanout=fanout, payload=payload, arrival_cycles=wu + win, drain=drain,
                             seed=seed, max_payload=full["max_payload"])
    log = simulate(traffic, point, harness=harness, sim=sim, public=public, build_root=build_root,
                   tag=f"{point.name}-{ports}-{load}-{fanout or 0}")
    r = {"offered": load, **figures(traffic, log, 1 + wu, win)}
    if fanout is not None:
        r["fanout"] = fanout
        r["delivered_per_output"] = r.pop("throughput")
        # Each injected flit becomes `fanout` delivered flits: input-side rate = delivered / fanout.
        r["injected_per_input"] = r["delivered_per_output"] / fanout
    r["sim_cycles"] = log.run_cycles
    r["loop_s"] = log.loop_ns * 1e-9
    return r


def measure_zero_load(ports: int, queueing: str, *, payload: str = "1-16", credits: int | None = None,
                      iterations: int | None = None, seed: int = 1, harness: str = "fast", sim: str = "verilator",
                      public: str | None = None, build_root: str = "build") -> dict:
    """Header-in to header-out latency of lone packets (``zero_load_latency``, one per port pair)."""
    point = design_point(ports, queueing, credits, iterations)
    full = point.params
    traffic = switch_traffic(ports, 0.0, payload=payload, arrival_cycles=0, drain=0, seed=seed,
                             max_payload=full["max_payload"], zero_load=True)
    log = simulate(traffic, point, harness=harness, sim=sim, public=public, build_root=build_root,
                   tag=f"{point.name}-{ports}-zero")
    from verif.harness.fastsim import check_delivery
    rep = check_delivery(traffic, log, complete=True)
    lat = log.records["first"] - log.sent[rep.packet_index]
    return {"zero_load_latency": [int(x) for x in lat], "sim_cycles": log.run_cycles,
            "loop_s": log.loop_ns * 1e-9}


# ---------------------------------------------------------------------------------------------------------
# Host side: `dysharp bench switch`

DEFAULT_LOADS = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0"


def add_arguments(p) -> None:
    p.add_argument("--ports", default="8,16", help="comma-separated port counts (default: 8,16)")
    p.add_argument("--loads", default=DEFAULT_LOADS, help=f"offered loads, flits/cycle/port "
                                                          f"(default: {DEFAULT_LOADS})")
    p.add_argument("--payload", default="1-16", help="payload flits per packet, N or LO-HI uniform "
                                                     "(default: 1-16, i.e. 16..256 B)")
    p.add_argument("--credits", type=int, default=None, help="input buffer cells per port "
                                                              "(default: the module's default)")
    p.add_argument("--iterations", type=int, default=None, help="iSLIP iterations per cycle "
                                                                 "(default: the module's default)")
    p.add_argument("--cycles", type=int, default=2000, help="measured cycles per load (default: 2000; three "
                                                            "times that at loads >= 0.9)")
    p.add_argument("--warmup", type=int, default=1000,
                   help="warm-up cycles per load (default: 1000); loads >= 0.9 add 24 cycles per input cell "
                        "so that the buffers are full before measuring")
    p.add_argument("--drain", type=int, default=300, help="cycles after the arrivals stop (default: 300)")
    p.add_argument("--fanouts", default="2,4,8", help="multicast fanouts, run at the largest port count "
                                                      "(default: 2,4,8; empty to skip)")
    p.add_argument("--variants", default="voq,fifo", help="queueing variants (default: voq,fifo)")
    p.add_argument("--harness", default="fast", choices=HARNESSES,
                   help="fast: the compiled Verilator main (default); cocotb: the cocotb agents")
    p.add_argument("--sim", default="verilator", help="simulator of the cocotb harness: verilator (default) "
                                                      "or icarus")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=None,
                   help="worker processes for the independent points (default: 2, or the CPU count if less)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run the points on this Dask scheduler (default: $DYSHARP_SCHEDULER, else local processes)")
    p.add_argument("--out", default="build/bench/switch.json")


def _int_list(text, what):
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{what} expects comma-separated integers, got {text!r}") from None


def _build_task(item):
    """Engine task: build the fast-path binary of one (ports, variant)."""
    from verif.harness.fastsim import build

    build(design_point(*item))


def _point_task(item):
    """Engine task: one benchmark point (``zero_load``, ``load`` or ``multicast``)."""
    kind, n, variant, load, fanout, kw = item
    if kind == "zero_load":
        return measure_zero_load(n, variant, **kw)
    return measure_point(n, variant, load, fanout=fanout, **kw)


def run(args) -> int:
    from verif.harness.runner import SIMULATORS

    ports = _int_list(args.ports, "ports")
    fanouts = _int_list(args.fanouts, "fanouts")
    try:
        loads = [float(x) for x in args.loads.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--loads expects comma-separated numbers, got {args.loads!r}") from None
    if not loads or any(not 0 < x <= 1.0 for x in loads):
        raise ValueError("--loads must be in (0, 1] flits/cycle/port")
    _payload_lengths(args.payload)   # validates
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in ("voq", "fifo"):
            raise ValueError(f"unknown variant {v!r}; valid: voq, fifo")
    if args.harness not in HARNESSES:
        raise ValueError(f"unknown harness {args.harness!r}; valid: {', '.join(HARNESSES)}")
    if args.sim not in SIMULATORS:
        raise ValueError(f"unknown simulator {args.sim!r}; valid: {', '.join(SIMULATORS)}")
    if args.harness == "fast" and args.sim != "verilator":
        raise ValueError("--sim applies to --harness cocotb; the fast path is Verilator only")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"command": "dysharp bench switch " + " ".join(
        f"--{k}={v}" for k, v in (("ports", args.ports), ("loads", args.loads), ("payload", args.payload),
                                  ("cycles", args.cycles), ("warmup", args.warmup), ("drain", args.drain),
                                  ("fanouts", args.fanouts), ("variants", args.variants),
                                  ("harness", args.harness), ("sim", args.sim), ("seed", args.seed))),
              "runs": [], "probes": []}
    common = dict(payload=args.payload, credits=args.credits, iterations=args.iterations, seed=args.seed,
                  harness=args.harness, sim=args.sim)
    # Every (port count, variant) gives a zero-load task, one task per load and, for VOQ at the largest
    # port count, one per multicast fanout; all are independent runs from reset, so they go to the engine
    # (local processes or a Dask cluster). The designs are built first, one task each.
    combos = [(n, variant) for n in ports for variant in variants]
    point = dict(cycles=args.cycles, warmup=args.warmup, drain=args.drain, **common)
    t0 = time.time()
    if args.harness == "fast":
        engine.map_tasks(_build_task, [(n, v, args.credits, args.iterations) for n, v in combos],
                         jobs=args.jobs, scheduler=args.scheduler, desc="bench switch: builds",
                         labels=[f"N={n} {v}" for n, v in combos])
    tasks = []
    for n, variant in combos:
        tasks.append(("zero_load", n, variant, None, None, common))
        tasks += [("load", n, variant, load, None, point) for load in loads]
        if variant == "voq" and n == max(ports):
            tasks += [("multicast", n, variant, 1.0, f, point) for f in fanouts if f <= n]
    results = engine.map_tasks(_point_task, tasks, jobs=args.jobs, scheduler=args.scheduler,
                               desc="bench switch: points",
                               labels=[f"N={t[1]} {t[2]} {t[0]}" + ("" if t[3] is None else f" {t[3]:g}")
                                       + ("" if t[4] is None else f" fanout {t[4]}") for t in tasks])
    for n, variant in combos:
        point = design_point(n, variant, args.credits, args.iterations)
        mine = [(task, x) for task, x in zip(tasks, results) if task[1:3] == (n, variant)]
        zl = mine[0][1]
        sim_cycles, loop_s = zl["sim_cycles"], zl["loop_s"]
        r = {"ports": n, "queueing": variant, "credits": point.params["credits"],
             "payload": args.payload, "loads": [], "multicast": [],
             "zero_load_latency": zl["zero_load_latency"]}
        for task, x in mine[1:]:
            x = dict(x)
            sim_cycles += x.pop("sim_cycles")
            loop_s += x.pop("loop_s")
            r["loads" if task[0] == "load" else "multicast"].append(x)
        r["simulator"] = "verilator" if args.harness == "fast" else args.sim
        r["harness"] = args.harness
        r["sim_cycles"] = sim_cycles
        r["wall_s"] = loop_s
        r["cycles_per_s"] = sim_cycles / loop_s if loop_s else None
        report["runs"].append(r)
        _print_run(r)
    report["wall_s"] = time.time() - t0
    voq = [r for r in report["runs"] if r["queueing"] == "voq"]
    if voq:
        largest = max(voq, key=lambda r: r["ports"])
        report["calibration"] = {
            "switch_zero_load_latency_cycles": min(min(r["zero_load_latency"]) for r in voq),
            "switch_saturation_throughput": min(max(x["throughput"] for x in r["loads"]) for r in voq),
            "switch_ports_measured": largest["ports"],
        }
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")
    png = plot(report, out.with_suffix(".png"))
    if png:
        print(f"wrote {png}")
    return 0


def plot(report: dict, path: Path) -> Path | None:
    """Accepted throughput and mean latency against offered load, one line per port count and variant
    (None when matplotlib is missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(10, 4))
    for r in report["runs"]:
        label = f"N={r['ports']} {r['queueing'].upper()}"
        style = "-" if r["queueing"] == "voq" else "--"
        xs = [x["offered"] for x in r["loads"]]
        ax_t.plot(xs, [x["throughput"] for x in r["loads"]], style, marker="o", label=label)
        pts = [(x["offered"], x["latency_mean"]) for x in r["loads"] if x["latency_mean"] is not None]
        ax_l.plot([a for a, _ in pts], [b for _, b in pts], style, marker="o", label=label)
    ax_t.plot([0, 1], [0, 1], ":", color="grey", label="offered")
    ax_t.set(xlabel="offered load (flits/cycle/port)", ylabel="accepted (flits/cycle/port)",
             title="throughput, uniform unicast", xlim=(0, 1.02), ylim=(0, 1.02))
    ax_l.set(xlabel="offered load (flits/cycle/port)", ylabel="mean latency (cycles)", yscale="log",
             title="header-in to header-out latency")
    for ax in (ax_t, ax_l):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def _load_rows(r):
    return [[f"{x['offered']:.2f}", f"{x['throughput']:.3f}", _fmt(x["latency_mean"]),
             "-" if x["latency_p99"] is None else x["latency_p99"]] for x in r["loads"]]


def _multicast_rows(r):
    return [[x["fanout"], f"{x['delivered_per_output']:.3f}", f"{x['injected_per_input']:.3f}"]
            for x in r["multicast"]]


def _print_run(r):
    from tabulate import tabulate

    print(f"  N={r['ports']} {r['queueing']} ({r['harness']}): zero-load latency "
          f"{sorted(set(r['zero_load_latency']))} cycles; {r['sim_cycles']} cycles at "
          f"{r['cycles_per_s']:.0f} simulated cycles/s")
    print(tabulate(_load_rows(r), headers=["load", "throughput", "lat.mean", "lat.p99"], disable_numparse=True))
    if r["multicast"]:
        print(tabulate(_multicast_rows(r), headers=["fanout", "delivered/output", "injected/input"],
                       disable_numparse=True))


def markdown(report: dict) -> str:
    """The switch figures as a Markdown section (used by the study report; docs/switch.md)."""
    from tabulate import tabulate

    lines = ["## NVSwitch datapath: throughput and latency", "",
             f"Command: `{report['command']}`", "",
             "![throughput and latency against offered load](switch.png)", ""]
    for r in report["runs"]:
        lines.append(f"**N={r['ports']}, {r['queueing'].upper()}** ({r.get('harness', 'cocotb')} harness, "
                     f"{r['simulator']}, credits {r['credits']}, payload {r['payload']} flits): zero-load latency "
                     f"{'/'.join(str(x) for x in sorted(set(r['zero_load_latency'])))} cycles header-in to "
                     f"header-out; {r['cycles_per_s']:.0f} simulated cycles/s.")
        lines.append("")
        lines.append(tabulate(_load_rows(r), headers=["offered load", "accepted flits/cycle/port", "mean latency",
                                                      "p99 latency"], tablefmt="github", disable_numparse=True))
        if r["multicast"]:
            lines.append("")
            lines.append(tabulate(_multicast_rows(r), headers=["multicast fanout", "delivered flits/cycle/output",
                                                               "injected flits/cycle/input"],
                                  tablefmt="github", disable_numparse=True))
        lines.append("")
    return "\n".join(lines)
