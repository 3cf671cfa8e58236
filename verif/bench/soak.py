"""``dysharp bench soak``: one long run of mixed dispatch and combine MoE traffic on the DySHARP switch.

The run is ONE simulation from reset of the two-VC fast path (:func:`verif.harness.fastsim.build_vc`,
``vc_main.cpp``) for ``--cycles`` cycles (default 10^6): the traffic is generated up front by the
``dysharp bench dysharp_switch`` generators and written as one traffic file (at 10^6 cycles it is a few
tens of MB), so the scoreboard (:func:`verif.harness.fastsim.check_vc`) checks every delivery of the whole
run exactly against the reference models. Arrivals stop ``--drain`` cycles before the end, so that
everything can finish.

Traffic (per GPU, open loop, ``--load`` x the fused mix of ``dysharp bench dysharp_switch`` that fills both
link directions at fanout 4 and d = 4, :func:`~verif.bench.dysharp_switch.fused_loads`):

* dispatch: ``dymultimem.st`` in the *miss* regime (:func:`~verif.bench.dysharp_switch.dispatch_packets`):
  DeepSeek-V3-like rows of 29 packets, every row new, random masks, one stream per fanout in ``--fanouts``
  (their rows relocated to disjoint indices). Every row misses once at each destination's AL-TLB and then
  hits 28 times, so misses and hits are mixed over the whole run;
* combine: ``dymultimem.ld_reduce`` (int32 add, 16 flits) to ``d`` random GPUs (random sets, not the
  bench's balanced ones: transient hot spots are part of the soak), one stream per ``d`` in
  ``--contributors`` (:func:`~verif.bench.dysharp_switch.combine_packets`), over a pool of
  ``--combine-rows`` preloaded rows per requester: with the default 16, each port's AL-TLB sees 128
  combine keys for its 64 entries (plus the dispatch rows), so combine lookups miss throughout too. Tags
  are renumbered per requester in send order (the scoreboard matches results by tag, oldest first).

The default load, 0.4 x that mix, keeps every queue bounded; at 0.5, with these stalls and latencies, the
miss-regime rows (each a 493-flit burst to one destination set, every row waiting for its fills at each
destination) overload some egresses and the GPUs' send queues grow through the run (an open-loop overload:
the links keep moving, but nothing drains within the drain window, so the soak reports it as unfinished).

Faults of timing on every link: each GPU withholds a credit return per VC per cycle with probability
``--stall`` (switch -> GPU) and idles its sender per cycle with probability ``--send-stall`` (GPU ->
switch; default: ``--stall``); each GPU response (TLB fill, RED_READ, READ) takes a latency drawn uniformly
from [base, base + ``--jitter``], so GPUs answer out of order. The switch relies on per-(source,
destination) order of requests only (``hw/switch/dysharp_switch.py``, "Ordering guarantee"); responses are
matched by tag (AL-TLB MSHRs, reduction entries), so a GPU may answer different requests in any order.

Switch parameters: ``--set PARAM=V`` (repeatable) sets any :class:`~hw.switch.dysharp_switch.DySharpSwitch`
parameter but ``ports``, checked by the switch's constructor before anything is built: e.g. the smallest
buffers (``--set credits=17 --set resp_credits=8 --set link_credits=2 --set gpu_credits=2 --set
red_entries=16 --set tlb_entries=16 --set tlb_mshrs=2 --set egress_slots=2``). The timeouts are then
derived from those buffers (:mod:`hw.switch.timeouts`); a timeout below its bound is refused, unless
``--set allow_short_timeouts=1`` forces it (the run then reports how many answered requests timed out).
The soak's GPUs answer within ``max(--read-latency, --fill-latency) + --jitter`` cycles, which must not
exceed the switch's ``gpu_latency`` (the bound's assumption).

Verdict: the run FAILS (exit 1) on any lost, duplicated or mismatched delivery (the scoreboard's counts,
with ``complete=True``: every store delivered at every destination, every request answered, each GPU's
RED_READs equal to the requests naming it), or on a deadlock: anything unfinished at the end (a traffic
packet never sent, a GPU response still waiting, a reduction entry still in use, link activity in the
last cycles, or a missing delivery), named with the first ones.
"""

import dataclasses
import json
import statistics
import time
from pathlib import Path

import numpy as np

from hw import packet as hwp
from hw.registry import point_slug
from hw.packet import Opcode

from verif.bench import dysharp_switch as dsw
from verif.bench.common import table
from verif.harness.fastsim.files import STALL_ONE

__all__ = ["SoakConfig", "soak_traffic", "simulate", "evaluate", "run_soak", "add_arguments", "run"]

MODULE = dsw.MODULE
QUIET = 256                # cycles at the end that must be free of link activity (the drained state)
STATUS_PERIOD = 1000       # status samples (AL-TLB and engine counters) every this many cycles
TENTHS = 10                # AL-TLB misses are reported per tenth of the run


@dataclasses.dataclass
class SoakConfig:
    """What one soak runs (the CLI's arguments, checked by :meth:`validate`)."""
    cycles: int = 1_000_000
    ports: int = 8
    seed: int = 1
    stall: float = 0.1          # credit-return stall probability per VC per cycle (switch -> GPU)
    send_stall: float = 0.1     # sender idle probability per cycle (GPU -> switch)
    jitter: int = 300           # extra response latency, uniform in [0, jitter] cycles
    read_latency: int = 150
    fill_latency: int = 100
    load: float = 0.4           # x the fused mix that fills both link directions (see the docstring)
    drain: int | None = None    # default: min(20000, cycles // 5)
    fanouts: tuple = (1, 2, 4, 8)
    contributors: tuple = (1, 2, 4, 8)
    combine_rows: int = 16
    switch: dict = dataclasses.field(default_factory=dict)   # further DySharpSwitch parameters (--set)

    @property
    def drain_cycles(self) -> int:
        return min(20000, self.cycles // 5) if self.drain is None else self.drain

    def validate(self) -> "SoakConfig":
        if not 4 <= self.ports <= 64:
            raise ValueError(f"--ports must be in 4..64, got {self.ports}")
        if self.cycles < 1000:
            raise ValueError(f"--cycles must be >= 1000, got {self.cycles}")
        if not 0 <= self.drain_cycles < self.cycles - QUIET:
            raise ValueError(f"--drain must be in 0..{self.cycles - QUIET - 1} (below --cycles), got {self.drain_cycles}")
        for name in ("stall", "send_stall"):
            v = getattr(self, name)
            if not 0 <= v < 1:
                raise ValueError(f"--{name.replace('_', '-')} is a probability in [0, 1), got {v}")
        if self.jitter < 0 or self.read_latency < 0 or self.fill_latency < 0:
            raise ValueError("--jitter, --read-latency and --fill-latency must be >= 0")
        if not 0 < self.load <= 2:
            raise ValueError(f"--load must be in (0, 2] (x the fused mix), got {self.load}")
        for name in ("fanouts", "contributors"):
            v = getattr(self, name)
            if not v or min(v) < 1 or max(v) > self.ports:
                raise ValueError(f"--{name} must be in 1..{self.ports} (the port count), got {list(v)}")
        if self.combine_rows < 1:
            raise ValueError(f"--combine-rows must be >= 1, got {self.combine_rows}")
        if "ports" in self.switch:
            raise ValueError("--set ports=...: use --ports")
        from hw.switch.dysharp_switch import switch_timeouts

        full = self.design_point().params                              # unknown names refused
        switch_timeouts(**full)                                        # timeouts below their bound refused
        worst = max(self.read_latency, self.fill_latency) + self.jitter
        if worst > full["gpu_latency"]:
            raise ValueError(f"the soak's GPUs answer within {worst} cycles (max(--read-latency, --fill-latency) "
                             f"+ --jitter), above the switch's gpu_latency {full['gpu_latency']}, the bound its "
                             f"timeouts are sized for: --set gpu_latency={worst} or lower the latencies")
        return self

    def design_point(self):
        """The soaked switch's :class:`~hw.registry.DesignPoint`."""
        from hw import registry

        return registry.point(MODULE, {"ports": self.ports, **self.switch})


# ---------------------------------------------------------------------------------------------------------
# Traffic

def _relocate(pkts: list, n: int, base_rows: int) -> tuple[list, int]:
    """``pkts`` of one dispatch stream with its rows ``j`` (index ``s + n * j``) moved to ``j + base_rows``;
    (packets, rows the stream used)."""
    rows = 0
    out = []
    for a, s, v, h in pkts:
        j = (h.index - s) // n
        rows = max(rows, j + 1)
        out.append((a, s, v, dataclasses.replace(h, index=s + n * (j + base_rows))))
    return out, rows


def soak_traffic(cfg: SoakConfig):
    """The soak's :class:`~verif.harness.fastsim.files.VcTraffic` (see the module docstring)."""
    n = cfg.ports
    rng = np.random.default_rng([cfg.seed, n, 16])
    arrivals = cfg.cycles - cfg.drain_cycles
    a, c = dsw.fused_loads(4, 4)
    pkts = []
    base = 0
    for f in cfg.fanouts:
        part = dsw.dispatch_packets(n, f, "miss", load=a * cfg.load / len(cfg.fanouts), arrival_cycles=arrivals,
                                    rng=rng)
        part, rows = _relocate(part, n, base)
        base += rows
        pkts += part
    if n * base > dsw.COMBINE_BASE:
        raise ValueError(f"{base} dispatch rows per GPU overflow the index space below the combine rows: "
                         "shorten --cycles or lower --load")
    reds = []
    for d in cfg.contributors:
        reds += dsw.combine_packets(n, d, load=c * cfg.load / len(cfg.contributors), arrival_cycles=arrivals,
                                    rng=rng, rows=cfg.combine_rows, balanced=False)   # random sets: hot spots
    # Unique tags among each requester's outstanding requests: renumber in send (arrival) order.
    reds.sort(key=lambda p: p[0])
    count = [0] * n
    for i, (t, s, v, h) in enumerate(reds):
        reds[i] = (t, s, v, dataclasses.replace(h, tag=count[s] & 0xFF))
        count[s] += 1
    pkts += reds
    vt, _ = dsw.assemble(n, pkts, cfg.cycles, rng, fill_latency=cfg.fill_latency, read_latency=cfg.read_latency,
                         preloads=dsw.combine_preloads(n, cfg.combine_rows), seed=cfg.seed,
                         stall=round(cfg.stall * STALL_ONE), send_stall=round(cfg.send_stall * STALL_ONE),
                         jitter=cfg.jitter)
    vt.status_period = STATUS_PERIOD
    return vt


# ---------------------------------------------------------------------------------------------------------
# Run and check

def simulate(cfg: SoakConfig, build_root: str = "build"):
    """(traffic, log, seconds to generate, seconds to simulate incl. file I/O) of one soak run."""
    t0 = time.perf_counter()
    vt = soak_traffic(cfg)
    t1 = time.perf_counter()
    from verif.harness.fastsim import build_vc
    sim = build_vc(cfg.design_point(), build_root=build_root)
    t2 = time.perf_counter()
    tag = f"soak-{cfg.ports}-{cfg.seed}" + ("" if not cfg.switch else "-" + point_slug(cfg.switch, {}))
    log = sim.run(vt, Path(build_root) / "bench" / "soak", tag=tag)
    return vt, log, t1 - t0, time.perf_counter() - t2


def _field(words: np.ndarray, off: int, width: int) -> np.ndarray:
    """Header field ``(off, width)`` (width <= 32) of every row of uint32 header words, vectorised."""
    w = words.astype(np.uint64)
    lo = w[:, off // 32]
    hi = w[:, off // 32 + 1] if off // 32 + 1 < w.shape[1] else np.zeros_like(lo)
    return (((hi << np.uint64(32)) | lo) >> np.uint64(off % 32)) & np.uint64((1 << width) - 1)


def _stats(xs) -> dict | None:
    xs = [int(x) for x in xs]
    if not xs:
        return None
    return {"count": len(xs), "mean": round(statistics.fmean(xs), 1), "p50": dsw._pct(xs, 0.5),
            "p99": dsw._pct(xs, 0.99), "max": max(xs)}


def _response_order(log) -> dict:
    """GPU responses that left ahead of the response to an earlier request at the same GPU (matched by
    opcode, tag and xtag, first in first out): the random latency reorders them. Also the range of the
    latency each response was given (request's last flit -> ready), per kind."""
    C, V = hwp._COMMON, hwp._VARIANT["uni"]
    rx_head = log.rxflits[log.rx["flit0"]]
    rop = _field(rx_head, *C["opcode"])
    resp_of = {Opcode.TLB_FILL.value: Opcode.TLB_FILL_RESP.value, Opcode.RED_READ.value: Opcode.RED_READ_RESP.value,
               Opcode.READ.value: Opcode.READ_RESP.value}
    req = np.flatnonzero((log.rx["vc"] == 0) & (log.rx["poison"] == 0) & np.isin(rop, list(resp_of)))
    rtag, rx_tag = _field(rx_head, *C["tag"]), _field(rx_head, *V["xtag"])
    top, ttag, txt = (_field(log.tx["head"], *C["opcode"]), _field(log.tx["head"], *C["tag"]),
                      _field(log.tx["head"], *V["xtag"]))
    fifo = {}
    for order, r in enumerate(req):       # completion order = the order the GPU model created the answers
        key = (int(log.rx["port"][r]), resp_of[int(rop[r])], int(rtag[r]), int(rx_tag[r]) if rop[r] != Opcode.TLB_FILL.value else 0)
        fifo.setdefault(key, []).append(order)
    last = {}
    overtaken = matched = 0
    lat = {"fill": [], "read": []}
    for t in range(len(log.tx)):          # send order
        key = (int(log.tx["port"][t]), int(top[t]), int(ttag[t]), int(txt[t]) if top[t] != Opcode.TLB_FILL_RESP.value else 0)
        q = fifo.get(key)
        if not q:
            continue
        order = q.pop(0)
        matched += 1
        lat["fill" if key[1] == Opcode.TLB_FILL_RESP.value else "read"].append(
            int(log.tx["ready"][t]) - int(log.rx["last"][req[order]]))
        port = key[0]
        if order < last.get(port, -1):
            overtaken += 1
        last[port] = max(order, last.get(port, -1))
    return {"responses": matched, "sent_ahead_of_an_earlier_request": overtaken,
            **{f"{k}_latency_range": [min(v), max(v)] if v else None for k, v in lat.items()}}


def evaluate(cfg: SoakConfig, vt, log, *, show: int = 5) -> dict:
    """The soak's report of ``log`` (a run of ``vt``): the scoreboard's verdict and counts, deadlock
    checks, every switch error counter (zero: the soak injects no fault), the longest waits, AL-TLB and stall
    figures. ``ok`` is False on any failure."""
    from hw.packet import Header
    from verif.harness.fastsim import ScoreboardError, check_vc
    from verif.harness.fastsim.files import words_to_int

    from hw.switch.al_tlb import TlbCounter
    from hw.switch.reduction_engine import ENGINE_COUNTERS

    n = cfg.ports
    t0 = time.perf_counter()
    error = None
    rep = None
    try:
        rep = check_vc(vt, log, complete=True, show=show)
        counts = dict(rep.counts)
    except ScoreboardError as e:
        error = str(e)
        counts = dict(getattr(e, "counts", {"lost": 0, "duplicated": 0, "mismatched": 0}))
        if not any(counts.values()):
            counts["mismatched"] = 1   # a failure the scoreboard did not classify
    check_s = time.perf_counter() - t0

    opc = _field(vt.flits[vt.first], *hwp._COMMON["opcode"]).astype(np.int64)
    is_st = opc == Opcode.DYN_ST.value
    is_red = opc == Opcode.DYN_LD_REDUCE.value
    # Deadlock: anything unfinished at the end, after the drain.
    never = np.flatnonzero(log.sent < 0)
    ix = dsw._status_index(n)
    end = log.status[-1].astype(np.int64)
    in_use = int(end[ix("total", "engine", "in_use")])
    active = np.flatnonzero((log.activity[-QUIET:] != 0).any(axis=1))
    unfinished = []
    for k in never[:show]:
        h = Header.decode(words_to_int(vt.flits[vt.first[k], :4]))
        unfinished.append(f"traffic packet #{k} ({Opcode(h.opcode).name} from GPU {h.src}, arrival cycle "
                          f"{vt.arrival[k]}) never left its GPU")
    if log.unsent:
        unfinished.append(f"{log.unsent} GPU responses still waiting to be sent")
    if in_use:
        unfinished.append(f"{in_use} reduction entries still in use")
    if len(active):
        unfinished.append(f"links still active {QUIET - int(active[0])} cycles before the end")
    if counts["lost"]:
        unfinished.append(f"{counts['lost']} deliveries, answers or RED_READs missing at the end (scoreboard)")
    deadlock = bool(len(never) or log.unsent or in_use or len(active) or counts["lost"])

    # Longest waits: queue at the source (arrival -> first flit sent), the switch (first flit sent ->
    # header received / result header received), and the GPU response queue (ready -> first flit sent).
    waits = {}
    if rep is not None:
        st_k = np.array([k for k, _, _ in rep.store_latency], np.int64)
        st_lat = [x for _, _, x in rep.store_latency]
        rd_k = np.array([k for k, _ in rep.result_latency], np.int64)
        rd_lat = [x for _, x in rep.result_latency]
        waits["store_delivery"] = _stats(st_lat)
        waits["store_end_to_end"] = _stats(np.array(st_lat, np.int64) + (log.sent[st_k] - vt.arrival[st_k]) if len(st_k) else [])
        waits["ld_reduce_result"] = _stats(rd_lat)
        waits["ld_reduce_end_to_end"] = _stats(np.array(rd_lat, np.int64) + (log.sent[rd_k] - vt.arrival[rd_k]) if len(rd_k) else [])
    sent = log.sent >= 0
    waits["store_source_queue"] = _stats((log.sent - vt.arrival)[is_st & sent])
    waits["ld_reduce_source_queue"] = _stats((log.sent - vt.arrival)[is_red & sent])
    top = _field(log.tx["head"], *hwp._COMMON["opcode"])
    for name, op in (("gpu_fill_response_queue", Opcode.TLB_FILL_RESP), ("gpu_read_response_queue", Opcode.RED_READ_RESP)):
        sel = top == op.value
        waits[name] = _stats((log.tx["first"] - log.tx["ready"])[sel])

    tlb = dsw._tlb_counts(log, n)
    tlb_all = {c.name.lower(): int(end[ix("total", "tlb", int(c))]) for c in TlbCounter}
    engine = {name: int(end[ix("total", "engine", name)]) for name in ENGINE_COUNTERS}
    # the soak injects no fault: every error counter of the switch must read zero at the end
    errors = dsw.switch_errors(log, n)
    step = cfg.cycles // TENTHS
    misses_by_tenth = [dsw._tlb_counts(log, n, k * step + 1, (k + 1) * step + 1)["misses"] for k in range(TENTHS)]
    hit_rate, hit_rate_primary = dsw._hit_rates(tlb)
    cr_draws, cr_stalled, s_draws, s_stalled = log.stalls
    contributions = 0
    if rep is not None:
        for k in rep.result_record:
            h = Header.decode(words_to_int(vt.flits[vt.first[k], :4]))
            contributions += bin(h.mask).count("1")
    from hw.switch.dysharp_switch import switch_timeouts
    tlb_timeout, red_timeout, bound = switch_timeouts(**cfg.design_point().params)
    timeouts = {"tlb_timeout": tlb_timeout, "red_timeout": red_timeout, "tlb_bound": bound.tlb,
                "red_bound": bound.red, "ld_reduce_timeouts": engine["timeouts"],
                "tlb_read_timeouts": tlb_all["read_timeouts"], "stale_contributions": engine["stale"]}
    failures = sum(counts.values())
    ok = error is None and failures == 0 and not deadlock and not errors
    return {
        "ok": ok,
        "cycles": int(log.run_cycles), "arrival_cycles": cfg.cycles - cfg.drain_cycles, "drain": cfg.drain_cycles,
        "ports": n, "seed": cfg.seed,
        "traffic": {"packets": int(vt.packets), "stores": int(is_st.sum()), "ld_reduce": int(is_red.sum()),
                    "flits": int(len(vt.flits))},
        "checked": None if rep is None else {
            "stores": rep.stores, "stores_complete": rep.stores_complete, "store_deliveries": rep.store_deliveries,
            "ld_reduce_results": rep.results, "contributions": contributions,
            "red_reads": int(sum(rep.red_reads)), "tlb_fills_at_gpus": int(sum(rep.fills)),
            "packets": rep.store_deliveries + rep.results},
        "lost": counts["lost"], "duplicated": counts["duplicated"], "mismatched": counts["mismatched"],
        "deadlock": deadlock, "unfinished": unfinished, "scoreboard_error": error,
        "longest_wait": {k: (v["max"] if v else None) for k, v in waits.items()}, "waits": waits,
        "tlb": {**tlb, "hit_rate": hit_rate, "hit_rate_primary": hit_rate_primary, "misses_by_tenth": misses_by_tenth,
                "read_timeouts": tlb_all["read_timeouts"], "timeout_answers": tlb_all["timeout"],
                "stale_responses": tlb_all["stale_responses"], "bad_responses": tlb_all["bad_responses"]},
        "engine": engine, "errors": errors, "timeouts": timeouts,
        "stalls": {"credit_return": cr_stalled / cr_draws if cr_draws else 0.0,
                   "sender": s_stalled / s_draws if s_draws else 0.0,
                   "credit_return_draws": cr_draws, "sender_draws": s_draws},
        "responses": _response_order(log),
        "config": {**dataclasses.asdict(cfg), "drain": cfg.drain_cycles},
        "sim_cycles_per_s": log.cycles_per_s, "sim_cycles_per_cpu_s": log.cycles_per_cpu_s,
        "loop_s": log.loop_ns * 1e-9, "check_s": check_s,
    }


def run_soak(cfg: SoakConfig, build_root: str = "build") -> dict:
    """Generate, simulate and check one soak; the :func:`evaluate` report with the wall times."""
    cfg.validate()
    t0 = time.perf_counter()
    vt, log, gen_s, sim_s = simulate(cfg, build_root)
    report = evaluate(cfg, vt, log)
    report.update(generate_s=gen_s, simulate_s=sim_s, wall_s=time.perf_counter() - t0)
    return report


# ---------------------------------------------------------------------------------------------------------
# Host side: `dysharp bench soak`

def _ints(text, what):
    return tuple(dsw._ints(text, what))


def add_arguments(p) -> None:
    p.add_argument("--cycles", type=int, default=1_000_000, help="simulated cycles of the one run (default: 1,000,000)")
    p.add_argument("--ports", type=int, default=8, help="switch ports (default: 8)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--stall", type=float, default=0.1,
                   help="probability that a GPU withholds a credit return on a VC in a cycle (default: 0.1)")
    p.add_argument("--send-stall", type=float, default=None,
                   help="probability that a GPU's sender idles in a cycle (default: --stall)")
    p.add_argument("--jitter", type=int, default=300,
                   help="GPU response latency jitter: uniform extra 0..JITTER cycles (default: 300)")
    p.add_argument("--read-latency", type=int, default=150, help="base GPU read latency, cycles (default: 150)")
    p.add_argument("--fill-latency", type=int, default=100, help="base GPU TLB-fill latency, cycles (default: 100)")
    p.add_argument("--load", type=float, default=0.4,
                   help="offered load, x the fused mix that fills both link directions (default: 0.4)")
    p.add_argument("--drain", type=int, default=None,
                   help="cycles at the end without new arrivals (default: min(20000, cycles / 5))")
    p.add_argument("--fanouts", default="1,2,4,8", help="dispatch fanouts, one stream each (default: 1,2,4,8)")
    p.add_argument("--contributors", default="1,2,4,8", help="ld_reduce contributors d, one stream each (default: 1,2,4,8)")
    p.add_argument("--combine-rows", type=int, default=16, help="combine rows per requester (default: 16)")
    p.add_argument("--set", action="append", default=[], metavar="PARAM=V",
                   help="a DySHARP switch parameter (repeatable; not ports), e.g. --set credits=32")
    p.add_argument("--out", default="build/bench/soak.json")


def config_from_args(args) -> SoakConfig:
    from hw.registry import parse_assignments

    switch = parse_assignments(list(getattr(args, "set", None) or []), [MODULE])[MODULE]
    return SoakConfig(cycles=args.cycles, ports=args.ports, seed=args.seed, stall=args.stall,
                      send_stall=args.stall if args.send_stall is None else args.send_stall, jitter=args.jitter,
                      read_latency=args.read_latency, fill_latency=args.fill_latency, load=args.load,
                      drain=args.drain, fanouts=_ints(args.fanouts, "fanouts"),
                      contributors=_ints(args.contributors, "contributors"),
                      combine_rows=args.combine_rows, switch=switch).validate()


def _f(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def summary(r: dict) -> str:
    c = r["checked"] or {}
    w = r["longest_wait"]
    verdict = "PASS" if r["ok"] else "FAIL"
    lines = [f"## Soak ({verdict}): {r['cycles']:,} cycles, N = {r['ports']}, seed {r['seed']}", "",
             table([
                 ["cycles simulated", f"{r['cycles']:,} (arrivals in the first {r['arrival_cycles']:,}, then a "
                                      f"{r['drain']:,}-cycle drain)"],
                 ["packets checked", f"{c.get('packets', 0):,} ({c.get('store_deliveries', 0):,} store deliveries of "
                                     f"{c.get('stores', 0):,} stores, each at its destination row; "
                                     f"{c.get('ld_reduce_results', 0):,} ld_reduce results bit-exact)"],
                 ["contributions checked", f"{c.get('contributions', 0):,} (RED_READs at the GPUs: {c.get('red_reads', 0):,})"],
                 ["lost / duplicated / mismatched", f"{r['lost']} / {r['duplicated']} / {r['mismatched']}"],
                 ["switch error counters", "all zero" if not r["errors"] else
                  ", ".join(f"{k} {v:,}" for k, v in r["errors"].items())],
                 ["timeouts: ld_reduce / TLB reads (red_timeout, tlb_timeout; their bounds)",
                  f"{r['timeouts']['ld_reduce_timeouts']:,} / {r['timeouts']['tlb_read_timeouts']:,} "
                  f"({r['timeouts']['red_timeout']:,}, {r['timeouts']['tlb_timeout']:,}; "
                  f"{r['timeouts']['red_bound']:,}, {r['timeouts']['tlb_bound']:,} cycles)"],
                 ["deadlock", "yes: " + "; ".join(r["unfinished"]) if r["deadlock"] else "no (all drained)"],
                 ["longest wait, store (sent -> delivered / arrival -> delivered)",
                  f"{w.get('store_delivery')} / {w.get('store_end_to_end')} cycles"],
                 ["longest wait, ld_reduce (sent -> result / arrival -> result)",
                  f"{w.get('ld_reduce_result')} / {w.get('ld_reduce_end_to_end')} cycles"],
                 ["longest wait at a GPU sender (store / ld_reduce / fill resp. / read resp.)",
                  f"{w['store_source_queue']} / {w['ld_reduce_source_queue']} / {w['gpu_fill_response_queue']} / "
                  f"{w['gpu_read_response_queue']} cycles"],
                 ["AL-TLB misses (hit rate)", f"{r['tlb']['misses']:,} ({_f(r['tlb']['hit_rate'])}); per tenth of the "
                                             f"run: {r['tlb']['misses_by_tenth']}"],
                 ["stall fraction (credit return / sender)",
                  f"{_f(r['stalls']['credit_return'], '.4f')} / {_f(r['stalls']['sender'], '.4f')}"],
                 ["GPU responses out of order", f"{r['responses']['sent_ahead_of_an_earlier_request']:,} of "
                                               f"{r['responses']['responses']:,}"],
                 ["simulated cycles/s (CPU)", f"{r['sim_cycles_per_s']:,.0f} ({r['sim_cycles_per_cpu_s']:,.0f})"],
                 ["wall time", f"{r['wall_s']:.1f} s (generate {r['generate_s']:.1f}, simulate {r['simulate_s']:.1f}, "
                               f"check {r['check_s']:.1f})"],
             ], ["figure", "value"])]
    if r["scoreboard_error"]:
        lines += ["", "scoreboard: " + r["scoreboard_error"]]
    return "\n".join(lines)


def run(args) -> int:
    cfg = config_from_args(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = run_soak(cfg)
    report["command"] = ("dysharp bench soak " + " ".join(
        f"--{k.replace('_', '-')}={v}" for k, v in (("cycles", cfg.cycles), ("ports", cfg.ports), ("seed", cfg.seed),
                                                   ("stall", cfg.stall), ("send_stall", cfg.send_stall),
                                                   ("jitter", cfg.jitter), ("load", cfg.load))) +
        "".join(f" --set {k}={v}" for k, v in cfg.switch.items()))
    out.write_text(json.dumps(report, indent=1))
    print(summary(report))
    print(f"wrote {out}")
    return 0 if report["ok"] else 1
