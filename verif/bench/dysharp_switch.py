"""``dysharp bench dysharp_switch``: the integrated DySHARP switch on the fast simulation path.

Every point is an independent run from reset of the compiled two-VC harness
(:func:`verif.harness.fastsim.build_vc`, ``vc_main.cpp``): per port a model of the GPU side of the link
sends the point's traffic (requests on VC 0) within its per-VC credits, returns credits, and answers
``TLB_FILL`` (after ``--fill-latency`` cycles, with the row of its first-touch layout) and ``RED_READ``
(after the read latency, data = :func:`~verif.harness.fastsim.files.vc_word` of GPU and address). After
the run :func:`verif.harness.fastsim.check_vc` checks every packet each GPU received: each
``dymultimem.st`` landed once at every destination's row + offset, intact, and nowhere else; each
``ld_reduce`` result equals the int32 sum of its contributions (:mod:`verif.models.reduce_ref`). The
figures come from the per-cycle link activity of the log in a measurement window after a warm-up.

Points (N = ``--ports``; 256-B packets, i.e. 16 payload flits):

* **Dispatch**: every GPU offers 1 flit/cycle of ``dymultimem.st`` at fanout f (saturating). Two
  translation regimes: *hit*, a warm AL-TLB (each source cycles through ``tlb_entries / (2 f)`` rows whose
  first packets, sent in the warm-up, miss; the window sees hits only; masks balanced over destinations);
  *miss*, DeepSeek-V3-like rows of 29 packets (7168 B + metadata), every row new, random masks: one
  compulsory miss per row and destination, hit rate 28/29 = 0.966, the rate ``dysharp bench al_tlb``
  measures for DeepSeek-V3 dispatch with 1024 entries. The plain ``switch`` (NVSwitch, credit-link fast
  path) runs the same packets at the same cycles: delivered flits/cycle per egress and injected per
  ingress side by side.
* **Combine**: every GPU issues ``dymultimem.ld_reduce`` (int32 add, 16 flits) to ``d`` random
  contributors at 1.1x the uplink bound ``1 / (1 + d * 17)`` requests/cycle. The window opens
  ``SETTLE`` cycles after every engine first had all its entries busy (the saturated steady state; until
  then the engines admit work faster than it drains, the response network's input buffers fill with
  contributions for busy requesters and block the uplinks, and the early window measured that transient:
  0.924 instead of 0.974 at N = 8, d = 4), within ten times the other points' warm-up; ``saturated`` and
  ``window`` in the JSON say where it opened. The window is ``COMBINE_WINDOW_FACTOR`` times ``--cycles``
  long: one uplink carries a 17-flit contribution about every 17 cycles, so a 4,000-cycle window holds
  about 230 per uplink, and the minimum over uplinks then mostly measures which GPUs the random
  destinations favoured in that stretch. Per read latency: results
  per cycle per requester, contribution flits per cycle per uplink (VC 1), buffer occupancy (``status``:
  each engine's ``in_use``, sampled every 16 cycles) and the entries Little's law asks for.
* **Fused**: dispatch (fanout 4, hit regime) and combine (d = 4) at once, offered at the mix that fills
  both link directions exactly in the fluid limit (:func:`fused_loads`: 0.188 store flits/cycle and 0.81x
  the combine bound per GPU): the utilization of both directions per VC.
* **Zero load**: a translated store that hits (and the miss before it) against the plain switch, and a
  warm ``ld_reduce`` (d = 2) broken down by stage.
"""

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from hw.packet import HEADER_BITS, EType, Header, Opcode, RedOp, flit_layout

from verif.bench.common import finish, study_run, table
from verif.harness.fastsim.files import (RECV_VC0, RECV_VC1, SENT_VC0, SENT_VC1, GpuGroup, Traffic, VcTraffic,
                                         flag_bits, flit_to_words, flit_words)
from infra import engine

MODULE = "dysharp_switch"
PAYLOAD = 16                 # flits per packet (256 B)
ROW_FLITS = 1024             # the 10-bit dyn offset: 16-KB rows
STRIDE = ROW_FLITS           # row pitch in 16-B units
G_DISPATCH, G_COMBINE = 1, 2
COMBINE_BASE = 1 << 17       # combine rows' indices (apart from the dispatch rows')
ROW_BASE = 0x10_0000_0000
DEEPSEEK_ROW_PACKETS = 29    # a 7168-B FP8 token in 256-B packets plus its metadata packet
STATUS_PERIOD = 16
ZERO_GAP = 600


# ---------------------------------------------------------------------------------------------------------
# Traffic

def _mask(dests) -> int:
    return sum(1 << int(d) for d in dests)


def _bernoulli(rng, cycles: int, prob: float) -> np.ndarray:
    return (np.flatnonzero(rng.random(cycles) < prob) + 1).astype(np.int64)


def dispatch_packets(n: int, fanout: int, regime: str, *, load: float, arrival_cycles: int, rng,
                     tlb_entries: int = 64, rows_share: float = 1.0) -> list:
    """``dymultimem.st`` packets ``(arrival, src, vc, Header)`` of every source (see the module docstring).

    ``hit``: source ``s`` cycles through ``m = tlb_entries * rows_share / (2 * fanout)`` rows, row ``j``
    to the ``fanout`` ports after ``s + j`` (each destination's AL-TLB then holds ``fanout * m`` keys, half
    its entries); ``miss``: new rows of :data:`DEEPSEEK_ROW_PACKETS` packets to random masks."""
    if not 1 <= fanout <= n:
        raise ValueError(f"fanout must be in 1..{n}, got {fanout}")
    if regime not in ("hit", "miss"):
        raise ValueError(f"unknown translation regime {regime!r}; valid: hit, miss")
    prob = min(1.0, load / (1 + PAYLOAD))
    per_row = ROW_FLITS // PAYLOAD
    out = []
    for s in range(n):
        t = _bernoulli(rng, arrival_cycles, prob)
        if regime == "hit":
            m = max(1, int(tlb_entries * rows_share) // (2 * fanout))
            t = t[:m * per_row]      # every (row, offset) once: the stores must land exactly once
            masks = [_mask((s + 1 + j + k) % n for k in range(fanout)) for j in range(m)]
            for k, c in enumerate(t):
                j, o = k % m, k // m
                out.append((int(c), s, 0, Header(opcode=Opcode.DYN_ST, src=s, tag=k & 0xFF, length=PAYLOAD,
                                                 group=G_DISPATCH, mask=masks[j], index=s + n * j,
                                                 offset=o * PAYLOAD)))
        else:
            rows = -(-len(t) // DEEPSEEK_ROW_PACKETS)
            masks = [_mask(rng.permutation(n)[:fanout]) for _ in range(rows)]
            for k, c in enumerate(t):
                j, o = divmod(k, DEEPSEEK_ROW_PACKETS)
                if s + n * j >= COMBINE_BASE:
                    raise ValueError("too many dispatch rows for the index space: shorten the run")
                out.append((int(c), s, 0, Header(opcode=Opcode.DYN_ST, src=s, tag=k & 0xFF, length=PAYLOAD,
                                                 group=G_DISPATCH, mask=masks[j], index=s + n * j,
                                                 offset=o * PAYLOAD)))
    return out


def combine_rows(n: int, tlb_entries: int = 64, share: float = 1.0) -> int:
    """Rows per requester in the combine pool: the AL-TLB of each port then holds at most half its
    entries of combine keys (``share`` of that in the fused mix)."""
    return max(1, int(tlb_entries * share) // (2 * n))


def combine_packets(n: int, d: int, *, load: float, arrival_cycles: int, rng, rows: int,
                    balanced: bool = True) -> list:
    """``dymultimem.ld_reduce`` requests ``(arrival, src, vc, Header)``: requester ``r`` reads one of its
    ``rows`` rows (index ``COMBINE_BASE + r + n * j``, preloaded at every GPU) at a random 16-flit offset
    from ``d`` GPUs, at ``load`` x the uplink bound.

    ``balanced`` (the default) draws the contributor sets balanced over the GPUs, as the dispatch masks
    are: requester ``r``'s ``k``-th request reads the ``d`` GPUs from ``(r + k d) mod n`` on, so every
    uplink is offered the same contribution load in any stretch of the run. With ``balanced=False`` the
    sets are random: an uplink's offered load in a window then varies by a few percent (about 30 of 900
    contributions in 16,000 cycles), and the minimum over uplinks measures that, not the switch."""
    if not 1 <= d <= n:
        raise ValueError(f"contributors must be in 1..{n}, got {d}")
    prob = min(1.0, load / (1 + d * (1 + PAYLOAD)))
    out = []
    for r in range(n):
        for k, c in enumerate(_bernoulli(rng, arrival_cycles, prob)):
            dests = [(r + k * d + i) % n for i in range(d)] if balanced else rng.permutation(n)[:d]
            out.append((int(c), r, 0, Header(
                opcode=Opcode.DYN_LD_REDUCE, src=r, tag=k & 0xFF, length=PAYLOAD, etype=EType.S32, redop=RedOp.ADD,
                group=G_COMBINE, mask=_mask(dests), index=COMBINE_BASE + r + n * int(rng.integers(rows)),
                offset=int(rng.integers(ROW_FLITS // PAYLOAD)) * PAYLOAD)))
    return out


def combine_preloads(n: int, rows: int) -> np.ndarray:
    """Every GPU's first touches of the combine rows (as dispatch would have made them), index order."""
    idx = [COMBINE_BASE + r + n * j for j in range(rows) for r in range(n)]
    return np.array([[p, G_DISPATCH, i, i % n] for p in range(n) for i in sorted(idx)], np.int64).reshape(-1, 4)


GROUPS = (GpuGroup(G_DISPATCH, alloc=True, layout=0, base=ROW_BASE, stride=STRIDE),
          GpuGroup(G_COMBINE, alloc=False, layout=0, base=ROW_BASE, stride=STRIDE))


def switch_cfg(n: int) -> np.ndarray:
    """The DySHARP switch's ``cfg`` words: both groups on every port's AL-TLB, all ports members."""
    from amaranth.lib import data

    from hw.switch.al_tlb import MAX_ROWS
    from hw.switch.dysharp_switch import CfgTarget, SwitchConfig

    layout = data.Layout.cast(SwitchConfig)
    words = -(-layout.size // 32)
    rows = []
    for g in (G_DISPATCH, G_COMBINE):
        bits = layout.const({"target": CfgTarget.TLB, "port": 0, "all": 1,
                             "tlb": {"op": 0, "group": g, "mask": (1 << n) - 1, "rows": MAX_ROWS}}).as_bits()
        rows.append(flit_to_words(bits, words))
    return np.array(rows, np.uint32)


def assemble(n: int, pkts: list, run_cycles: int, rng, **vc_kw) -> tuple[VcTraffic, Traffic | None]:
    """The :class:`VcTraffic` of ``pkts`` (random payload words), and the same packets as a plain-switch
    :class:`Traffic` when they are all VC-0 stores (else None)."""
    pkts = sorted(pkts, key=lambda p: p[0])   # stable: per source, generation order
    words = flit_words(128)
    if flit_layout(128)["data"].offset != 0:
        raise ValueError("the traffic writer assumes flit data at bit 0 of the flit layout")
    hw = HEADER_BITS // 32
    P = len(pkts)
    nflits = np.array([1 + (h.length if h.opcode in (Opcode.DYN_ST.value, Opcode.WRITE.value) else 0)
                       for _, _, _, h in pkts], np.int32)
    first = np.zeros(P, np.int64)
    if P:
        first[1:] = np.cumsum(nflits)[:-1]
    flits = np.zeros((int(nflits.sum()), words), np.uint32)
    flits[:, :hw] = rng.integers(0, 1 << 32, (len(flits), hw), dtype=np.uint64).astype(np.uint32)
    heads = np.array([flit_to_words(h.encode(), hw) for _, _, _, h in pkts], np.uint32).reshape(P, hw)
    flits[first, :hw] = heads
    lw, lb = flag_bits(128)["last"]
    flits[first + nflits - 1, lw] |= np.uint32(1 << lb)
    arrival = np.array([a for a, *_ in pkts], np.int64)
    src = np.array([s for _, s, _, _ in pkts], np.int32)
    vc = np.array([v for _, _, v, _ in pkts], np.int32)
    vt = VcTraffic(n, words, arrival, src, vc, first, nflits, flits, run_cycles, groups=GROUPS,
                   cfg=switch_cfg(n), status_period=STATUS_PERIOD, **vc_kw)
    plain = None
    if all(h.opcode == Opcode.DYN_ST.value and v == 0 for _, _, v, h in pkts):
        plain = Traffic(n, words, arrival, src, first, nflits, flits, run_cycles,
                        dests=np.array([h.mask for _, _, _, h in pkts], np.uint64))
    return vt, plain


def pgo_training(n: int, cycles: int = 3000, seed: int = 1) -> tuple[str, VcTraffic]:
    """The training workload of the integrated switch's profile-guided build (``build_vc(..., train=)``):
    ``(key, traffic)``, ``cycles`` cycles of the fused mix (dispatch at fanout ``min(4, n)`` with its AL-TLB
    misses and hits, and ``ld_reduce`` from ``min(4, n)`` contributors, both directions full) so that the
    store, translation and reduction paths are all in the profile; a drain of 1,000 cycles."""
    f = min(4, n)
    a, c = fused_loads(f, f) if f > 1 else (0.5, 0.5)
    rng = np.random.default_rng([seed, n, 5])
    rows = combine_rows(n, 64, 0.5)
    pkts = dispatch_packets(n, f, "hit", load=a, arrival_cycles=cycles, rng=rng, rows_share=0.5)
    pkts += combine_packets(n, f, load=c, arrival_cycles=cycles, rng=rng, rows=rows)
    vt, _ = assemble(n, pkts, cycles + 1000, rng, fill_latency=100, read_latency=150,
                     preloads=combine_preloads(n, rows), seed=seed)
    return f"fused-{n}-{cycles}-{seed}-v1", vt


# ---------------------------------------------------------------------------------------------------------
# Builds and runs

def design_point(n: int, red_entries: int | None = None):
    """The bench's integrated switch (:class:`~hw.registry.DesignPoint`): ``n`` ports, ``red_entries``
    reduction-buffer entries per port (the default when None)."""
    from hw import registry

    return registry.point(MODULE, {"ports": n, **({"red_entries": red_entries} if red_entries else {})})


def _sim(n, red_entries, build_root):
    from verif.harness.fastsim import build_vc

    return build_vc(design_point(n, red_entries), build_root=build_root)


def _plain(traffic: Traffic, n: int, build_root, tag):
    from verif.harness.fastsim import build, check_delivery

    log = build("switch", {"ports": n}, build_root=build_root).run(traffic, Path(build_root) / "bench" / "fastsim",
                                                                   tag=tag)
    check_delivery(traffic, log)
    return log


def _status_index(n: int):
    """``path -> 32-bit word index`` in the DySHARP switch's ``status`` (every field is 32-bit aligned)."""
    from amaranth.hdl import Shape
    from amaranth.lib import data

    from hw.switch.dysharp_switch import status_layout

    top = data.Layout.cast(status_layout(n))

    def size(shape):
        try:
            return data.Layout.cast(shape).size
        except TypeError:
            return Shape.cast(shape).width

    def index(*path):
        off, layout = 0, top
        for key in path:
            layout = data.Layout.cast(layout)
            if isinstance(layout, data.ArrayLayout):
                off += int(key) * size(layout.elem_shape)
                layout = layout.elem_shape
            else:
                f = layout[key]
                off += f.offset
                layout = f.shape
        if off % 32:
            raise ValueError(f"status field {path} is not 32-bit aligned")
        return off // 32
    return index


def switch_errors(log, n: int) -> dict:
    """{readable name: count} of the switch's error counters (:func:`hw.switch.dysharp_switch.error_fields`)
    that are not zero in the log's end state (its last ``status`` sample)."""
    from hw.switch.dysharp_switch import error_fields

    ix = _status_index(n)
    end = log.status[-1].astype(np.int64)
    return {name: v for f, name in error_fields().items() if (v := int(end[ix(*f.split("."))]))}


def check_switch_errors(log, n: int, what: str) -> None:
    """Every error counter of the switch reads zero at the end of a run that injects no fault; raises
    AssertionError naming the counters that moved."""
    errors = switch_errors(log, n)
    if errors:
        raise AssertionError(f"{what}: switch error counters moved (no fault was injected): {errors}")


def _tlb_counts(log, n, w0=None, w1=None) -> dict:
    """AL-TLB counters summed over ports: over the whole run, or between the ``status`` samples that bracket
    cycles [w0, w1)."""
    from hw.switch.al_tlb import TlbCounter

    ix = _status_index(n)
    end = log.status[-1].astype(np.int64)
    if w0 is not None:
        a = np.flatnonzero(log.status_cycles <= w0)
        b = np.flatnonzero(log.status_cycles >= w1)
        start = log.status[a[-1]].astype(np.int64) if len(a) else np.zeros_like(end)
        end = log.status[b[0]].astype(np.int64) - start if len(b) else end - start
    return {c.name.lower(): int(end[ix("total", "tlb", int(c))]) for c in
            (TlbCounter.HITS, TlbCounter.MISSES, TlbCounter.COALESCED, TlbCounter.FILLS)}


def _hit_rates(t: dict) -> tuple:
    """(hits / lookups, 1 - primary misses / lookups): a coalesced lookup waits for a fill like a miss but
    costs no read; the second figure is the one a CAM hit-rate model gives (the AL-TLB bench's)."""
    looked = t["hits"] + t["misses"] + t["coalesced"]
    return (t["hits"] / looked, 1 - t["misses"] / looked) if looked else (None, None)


def _rate(act, bit, per_port=False):
    x = ((act & bit) != 0).mean(axis=0)
    return [float(v) for v in x] if per_port else float(x.mean())


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def measure_dispatch(n: int, fanout: int, regime: str, *, cycles: int = 2000, warmup: int = 1000, drain: int = 500,
                     load: float = 1.0, fill_latency: int = 100, seed: int = 1, red_entries=None,
                     build_root: str = "build") -> dict:
    from verif.harness.fastsim import check_vc

    rng = np.random.default_rng([seed, n, fanout, 1 if regime == "hit" else 2])
    pkts = dispatch_packets(n, fanout, regime, load=load, arrival_cycles=warmup + cycles, rng=rng)
    vt, plain = assemble(n, pkts, warmup + cycles + drain, rng, fill_latency=fill_latency, seed=seed)
    tag = f"dysharp-{n}-d{fanout}-{regime}"
    log = _sim(n, red_entries, build_root).run(vt, Path(build_root) / "bench" / "fastsim", tag=tag)
    rep = check_vc(vt, log)
    check_switch_errors(log, n, tag)
    w0, w1 = warmup + 1, warmup + cycles + 1
    act = log.activity[w0 - 1:w1 - 1]
    plog = _plain(plain, n, build_root, tag + "-plain")
    pdel = plog.delivered[w0 - 1:w1 - 1]
    # Plain switch: injected = cycles in which a source sent a flit; from the sent cycles and lengths.
    inj = np.zeros(n)
    for k in np.flatnonzero((plog.sent >= w0) & (plog.sent < w1)):
        inj[plain.src[k]] += plain.nflits[k]
    lat = [x for k, _, x in rep.store_latency if w0 <= log.sent[k] < w1]
    tlb = _tlb_counts(log, n, w0, w1)
    strict, primary = _hit_rates(tlb)
    tlb_run = _tlb_counts(log, n)
    strict_run, primary_run = _hit_rates(tlb_run)
    return {
        "fanout": fanout, "regime": regime,
        "egress": _rate(act, RECV_VC0), "egress_min": min(_rate(act, RECV_VC0, True)),
        "ingress": _rate(act, SENT_VC0),
        "switch_egress": float(pdel.mean()), "switch_ingress": float(inj.sum() / (cycles * n)),
        "hit_rate": strict, "hit_rate_primary": primary, "tlb_window": tlb, "fills": sum(rep.fills),
        "hit_rate_run": strict_run, "hit_rate_primary_run": primary_run, "tlb_run": tlb_run,
        "latency_mean": statistics.fmean(lat) if lat else None, "latency_p99": _pct(lat, 0.99),
        "stores": rep.stores, "deliveries": rep.store_deliveries, "stores_complete": rep.stores_complete,
        "sim_cycles": log.run_cycles + plog.run_cycles, "loop_s": (log.loop_ns + plog.loop_ns) * 1e-9,
    }


COMBINE_WARMUP_FACTOR = 10   # combine's warm-up bound: --warmup x 10 (the window opens when saturated)
COMBINE_WINDOW_FACTOR = 4   # combine's window: --cycles x 4 (the minimum over uplinks needs long windows)
SETTLE = 2000      # cycles after every engine's entries are first all busy before a combine window opens


def _all_entries_busy(log, n, entries):
    """First status-sample cycle at which every port's reduction engine had all ``entries`` in use (each
    port's own first time; the latest of them), or None."""
    ix = _status_index(n)
    firsts = []
    for i in range(n):
        busy = np.nonzero(log.status[:, ix("port", i, "engine", "in_use")] >= entries)[0]
        if not busy.size:
            return None
        firsts.append(int(log.status_cycles[busy[0]]))
    return max(firsts)


def _occupancy(log, n, w0, w1):
    ix = _status_index(n)
    rows = (log.status_cycles >= w0) & (log.status_cycles < w1)
    occ = np.array([log.status[rows, ix("port", i, "engine", "in_use")] for i in range(n)], np.int64)
    return (float(occ.mean()) if occ.size else None, int(occ.max()) if occ.size else None)


def measure_combine(n: int, d: int, read_latency: int, *, cycles: int = 2000, warmup: int = 1000, drain: int | None = None,
                    load: float = 1.1, fill_latency: int = 100, seed: int = 1, red_entries=None,
                    tlb_entries: int = 64, build_root: str = "build") -> dict:
    from verif.harness.fastsim import check_vc

    rng = np.random.default_rng([seed, n, d, read_latency, 3])
    if drain is None:     # long enough for the window's requests to finish (their latencies are measured)
        drain = 3000 + 2 * read_latency
    rows = combine_rows(n, tlb_entries)
    pkts = combine_packets(n, d, load=load, arrival_cycles=warmup + cycles, rng=rng, rows=rows)
    vt, _ = assemble(n, pkts, warmup + cycles + drain, rng, fill_latency=fill_latency, read_latency=read_latency,
                     preloads=combine_preloads(n, rows), seed=seed)
    sim = _sim(n, red_entries, build_root)
    log = sim.run(vt, Path(build_root) / "bench" / "fastsim", tag=f"dysharp-{n}-c{d}-{read_latency}")
    rep = check_vc(vt, log)
    check_switch_errors(log, n, f"dysharp-{n}-c{d}-{read_latency}")
    entries = sim.params["red_entries"]
    full = _all_entries_busy(log, n, entries)
    # The window opens SETTLE cycles after every engine first had all its entries busy (the saturated
    # steady state of the open-loop overload; before it the engines admit work faster than it drains and
    # the response network's input buffers block the uplinks), and no later than the warm-up allows.
    saturated = full is not None and full + SETTLE <= warmup
    w0 = (full + SETTLE if saturated else warmup) + 1
    w1 = w0 + cycles
    act = log.activity[w0 - 1:w1 - 1]
    done = [k for k, r in rep.result_record.items() if w0 <= log.rx["first"][r] < w1]
    lat = [x for k, x in rep.result_latency if w0 <= log.sent[k] < w1]
    occ_mean, occ_max = _occupancy(log, n, w0, w1)
    per_req = len(done) / (cycles * n)
    return {
        "contributors": d, "read_latency": read_latency, "red_entries": entries,
        "window": [w0, w1], "entries_full_at": full, "saturated": saturated,
        "results_per_requester": per_req, "bound_results": 1 / (1 + d * (1 + PAYLOAD)),
        "contrib_per_uplink": _rate(act, SENT_VC1), "contrib_per_uplink_min": min(_rate(act, SENT_VC1, True)),
        "contrib_bound": d * (1 + PAYLOAD) / (1 + d * (1 + PAYLOAD)),
        "uplink_busy": _rate(act, SENT_VC0 | SENT_VC1),
        "uplink_busy_min": min(_rate(act, SENT_VC0 | SENT_VC1, True)),
        "downlink_vc0": _rate(act, RECV_VC0), "downlink_vc1": _rate(act, RECV_VC1),
        "occupancy_mean": occ_mean, "occupancy_max": occ_max,
        "latency_mean": statistics.fmean(lat) if lat else None, "latency_p99": _pct(lat, 0.99),
        "latency_min": min(lat) if lat else None,
        # Little's law: entries that sustain the uplink-bound result rate at the unqueued latency (the
        # window's fastest request; at saturation every entry is busy, so the mean latency says nothing).
        "entries_needed": (1 / (1 + d * (1 + PAYLOAD))) * min(lat) if lat else None,
        "results": rep.results, "requests": rep.reductions,
        "sim_cycles": log.run_cycles, "loop_s": log.loop_ns * 1e-9,
    }


def fused_loads(fanout: int, d: int) -> tuple[float, float]:
    """(dispatch flits/cycle per GPU, combine requests as a fraction of the uplink bound) at which both link
    directions are exactly full in the fluid limit: uplink ``a + c (1 + 17 d) = 1`` (stores, requests and
    contributions), downlink ``f a + c (17 + d) = 1`` (the stores' copies, results and RED_READs)."""
    per = 1 + PAYLOAD
    c = (fanout - 1) / (fanout * (1 + per * d) - per - d)
    a = 1 - c * (1 + per * d)
    if not (0 < a and 0 < c):
        raise ValueError(f"no mix of dispatch fanout {fanout} and combine d={d} fills both directions")
    return a, c * (1 + per * d)


def measure_fused(n: int, fanout: int = 4, d: int = 4, read_latency: int = 150, *, cycles: int = 2000,
                  warmup: int = 1000, drain: int = 0, dispatch_load: float | None = None,
                  combine_load: float | None = None, fill_latency: int = 100, seed: int = 1, red_entries=None,
                  tlb_entries: int = 64, build_root: str = "build") -> dict:
    from verif.harness.fastsim import check_vc

    a, c = fused_loads(fanout, d)
    dispatch_load = a if dispatch_load is None else dispatch_load
    combine_load = c if combine_load is None else combine_load
    rng = np.random.default_rng([seed, n, fanout, d, 4])
    rows = combine_rows(n, tlb_entries, 0.5)
    pkts = dispatch_packets(n, fanout, "hit", load=dispatch_load, arrival_cycles=warmup + cycles, rng=rng,
                            tlb_entries=tlb_entries, rows_share=0.5)
    pkts += combine_packets(n, d, load=combine_load, arrival_cycles=warmup + cycles, rng=rng, rows=rows)
    vt, _ = assemble(n, pkts, warmup + cycles + drain, rng, fill_latency=fill_latency, read_latency=read_latency,
                     preloads=combine_preloads(n, rows), seed=seed)
    log = _sim(n, red_entries, build_root).run(vt, Path(build_root) / "bench" / "fastsim", tag=f"dysharp-{n}-fused")
    rep = check_vc(vt, log)
    check_switch_errors(log, n, f"dysharp-{n}-fused")
    w0, w1 = warmup + 1, warmup + cycles + 1
    act = log.activity[w0 - 1:w1 - 1]
    done = [k for k, r in rep.result_record.items() if w0 <= log.rx["first"][r] < w1]
    stores_in = sum(1 for k, _, _ in rep.store_latency if w0 <= log.sent[k] < w1)
    return {
        "fanout": fanout, "contributors": d, "read_latency": read_latency, "dispatch_load": dispatch_load,
        "combine_load": combine_load,
        "uplink_vc0": _rate(act, SENT_VC0), "uplink_vc1": _rate(act, SENT_VC1),
        "uplink_busy": float(((act & (SENT_VC0 | SENT_VC1)) != 0).mean()),
        "downlink_vc0": _rate(act, RECV_VC0), "downlink_vc1": _rate(act, RECV_VC1),
        "downlink_busy": float(((act & (RECV_VC0 | RECV_VC1)) != 0).mean()),
        "results_per_requester": len(done) / (cycles * n), "store_deliveries_in_window": stores_in,
        "store_flits_per_egress": stores_in * (1 + PAYLOAD) / (cycles * n),
        "sim_cycles": log.run_cycles, "loop_s": log.loop_ns * 1e-9,
    }


def measure_zero_load(n: int, read_latency: int = 150, *, fill_latency: int = 100, seed: int = 1,
                      red_entries=None, build_root: str = "build") -> dict:
    """Lone packets: per pair (src, dst) a store that misses (first touch of its row) and, ZERO_GAP later,
    one that hits; then a cold and a warm ``ld_reduce`` (d = 2) from port 0. Stages of the warm one from the
    log: request sent -> its RED_READs at the contributors, the GPU read, contribution sent -> result at the
    requester."""
    from verif.harness.fastsim import check_vc

    rng = np.random.default_rng([seed, n, 5])
    pairs = ((0, n - 1), (n - 1, 0), (1, 1))
    pkts, t = [], 1
    for j, (s, dst) in enumerate(pairs):
        for o in range(2):
            pkts.append((t, s, 0, Header(opcode=Opcode.DYN_ST, src=s, tag=2 * j + o, length=PAYLOAD, group=G_DISPATCH,
                                         mask=1 << dst, index=s + n * j, offset=o * PAYLOAD)))
            t += ZERO_GAP
    contributors = (1, n - 1)
    red_t = []
    for k in range(2):
        red_t.append(t)
        pkts.append((t, 0, 0, Header(opcode=Opcode.DYN_LD_REDUCE, src=0, tag=k, length=PAYLOAD, etype=EType.S32,
                                     redop=RedOp.ADD, group=G_COMBINE, mask=_mask(contributors), index=COMBINE_BASE,
                                     offset=k * PAYLOAD)))
        t += 2 * (read_latency + fill_latency) + ZERO_GAP
    stores = [p for p in pkts if p[3].opcode == Opcode.DYN_ST.value]
    vt, _ = assemble(n, pkts, t, rng, fill_latency=fill_latency, read_latency=read_latency,
                     preloads=combine_preloads(n, 1), seed=seed)
    log = _sim(n, red_entries, build_root).run(vt, Path(build_root) / "bench" / "fastsim", tag=f"dysharp-{n}-zero")
    rep = check_vc(vt, log, complete=True)
    check_switch_errors(log, n, f"dysharp-{n}-zero")
    _, plain = assemble(n, stores, t, np.random.default_rng([seed, n, 5]))
    plog = _plain(plain, n, build_root, f"dysharp-{n}-zero-plain")
    from verif.harness.fastsim import check_delivery

    prep = check_delivery(plain, plog, complete=True)
    plain_lat = [int(x) for x in plog.records["first"] - plog.sent[prep.packet_index]]
    by_k = {k: x for k, _, x in rep.store_latency}
    order = np.argsort(vt.arrival, kind="stable")
    store_k = [int(k) for k in order if vt.nflits[k] > 1]
    miss = [by_k[k] for k in store_k[0::2]]
    hit = [by_k[k] for k in store_k[1::2]]
    # The warm ld_reduce, stage by stage.
    warm = int(order[-1])
    r_res = rep.result_record[warm]
    sent = int(log.sent[warm])
    reads = [r for r in range(len(log.rx)) if log.rx["vc"][r] == 0 and log.rx["port"][r] in contributors
             and log.rx["first"][r] > sent and log.rx["nflits"][r] == 1]
    reads = [r for r in reads if log.rx["first"][r] < log.rx["first"][r_res]]
    resp = [x for x in log.tx if x["port"] in contributors and x["first"] > sent and x["first"] < log.rx["first"][r_res]
            and x["nflits"] == 1 + PAYLOAD]
    t_reads = max(int(log.rx["last"][r]) for r in reads)
    t_resp = max(int(x["last"]) for x in resp)
    return {
        "store_hit": hit, "store_miss": miss, "plain_switch": plain_lat, "fill_latency": fill_latency,
        "read_latency": read_latency,
        "ld_reduce_cold": rep.result_latency[0][1], "ld_reduce_warm": dict(rep.result_latency)[warm],
        "ld_reduce_stages": {
            "request_to_reads": t_reads - sent,
            "gpu_read_and_send": t_resp - t_reads,
            "last_contribution_to_result": int(log.rx["first"][r_res]) - t_resp,
        },
        "sim_cycles": log.run_cycles + plog.run_cycles, "loop_s": (log.loop_ns + plog.loop_ns) * 1e-9,
    }


# ---------------------------------------------------------------------------------------------------------
# Host side: `dysharp bench dysharp_switch`

def add_arguments(p) -> None:
    p.add_argument("--ports", default="8,16", help="comma-separated port counts (default: 8,16)")
    p.add_argument("--fanouts", default="1,2,4,8", help="dispatch fanouts (default: 1,2,4,8)")
    p.add_argument("--contributors", default="1,2,4", help="ld_reduce contributors d (default: 1,2,4)")
    p.add_argument("--read-latencies", default="150,800", help="GPU read latencies, cycles (default: 150,800)")
    p.add_argument("--fill-latency", type=int, default=100,
                   help="cycles from a TLB_FILL's arrival at the GPU to its response (default: 100)")
    p.add_argument("--red-entries", type=int, default=None,
                   help="reduction buffer entries per port (default: the module's default)")
    p.add_argument("--cycles", type=int, default=4000, help="measured cycles per point (default: 4000)")
    p.add_argument("--warmup", type=int, default=3000,
                   help="warm-up cycles per point (default: 3000; twice that for combine)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--full", action="store_true", help="the bigger grid: 12000 measured cycles, d up to 8, "
                                                       "fused mix at every read latency")
    p.add_argument("--skip", default="", help="comma-separated parts to leave out: dispatch, combine, fused, zero")
    p.add_argument("--jobs", type=int, default=None,
                   help="worker processes for the independent points (default: 2, or the CPU count if less)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run the points on this Dask scheduler (default: $DYSHARP_SCHEDULER, else local processes)")
    p.add_argument("--out", default="build/bench/dysharp_switch.json")


def _ints(text, what):
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{what} expects comma-separated integers, got {text!r}") from None
    if not out:
        raise ValueError(f"--{what} is empty")
    return out


def _build_task(item):
    from verif.harness.fastsim import build

    n, red_entries = item
    _sim(n, red_entries, "build")
    build("switch", {"ports": n})


def _point_task(item):
    kind, n, args, kw = item
    return {"dispatch": measure_dispatch, "combine": measure_combine, "fused": measure_fused,
            "zero": measure_zero_load}[kind](n, *args, **kw)


def run(args) -> int:

    ports = _ints(args.ports, "ports")
    for n in ports:
        if not 4 <= n <= 64:
            raise ValueError(f"--ports must be in 4..64, got {n}")
    fanouts = _ints(args.fanouts, "fanouts")
    ds = _ints(args.contributors, "contributors")
    lats = _ints(args.read_latencies, "read-latencies")
    skip = {s for s in args.skip.split(",") if s}
    if skip - {"dispatch", "combine", "fused", "zero"}:
        raise ValueError(f"--skip takes dispatch, combine, fused, zero; got {sorted(skip)}")
    if any(x < 0 for x in lats) or args.fill_latency < 0:
        raise ValueError("latencies must be >= 0")
    if min(fanouts) < 1 or min(ds) < 1:
        raise ValueError("--fanouts and --contributors must be >= 1")
    if args.cycles < 100 or args.warmup < 0:
        raise ValueError("--cycles must be >= 100 and --warmup >= 0")
    cycles = 12000 if args.full and args.cycles == 4000 else args.cycles
    if args.full:
        ds = sorted(set(ds) | {8})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    common = dict(fill_latency=args.fill_latency, seed=args.seed, red_entries=args.red_entries)
    win = dict(cycles=cycles, warmup=args.warmup)
    tasks = []
    for n in ports:
        if "zero" not in skip:
            tasks += [("zero", n, (lat,), common) for lat in lats]
        if "dispatch" not in skip:
            tasks += [("dispatch", n, (f, regime), {**common, **win}) for f in fanouts if f <= n
                      for regime in ("hit", "miss")]
        if "combine" not in skip:
            # Combine settles slower (its window opens at saturation, within 10x the warm-up) and its
            # per-uplink minimum needs a longer window (COMBINE_WINDOW_FACTOR).
            tasks += [("combine", n, (d, lat), {**common, "cycles": COMBINE_WINDOW_FACTOR * cycles,
                                                "warmup": COMBINE_WARMUP_FACTOR * args.warmup})
                      for d in ds if d <= n
                      for lat in lats]
        if "fused" not in skip:
            tasks += [("fused", n, (4, 4, lat), {**common, **win}) for lat in (lats if args.full else lats[:1])]
    t0 = time.time()
    engine.map_tasks(_build_task, [(n, args.red_entries) for n in ports], jobs=args.jobs, scheduler=args.scheduler,
                     desc="bench dysharp_switch: builds", labels=[f"N={n}" for n in ports])
    results = engine.map_tasks(_point_task, tasks, jobs=args.jobs, scheduler=args.scheduler,
                               desc="bench dysharp_switch: points",
                               labels=[f"N={t[1]} {t[0]} {t[2]}" for t in tasks])
    report = {"command": "dysharp bench dysharp_switch " + " ".join(
        f"--{k}={v}" for k, v in (("ports", args.ports), ("fanouts", args.fanouts), ("contributors", args.contributors),
                                  ("read-latencies", args.read_latencies), ("fill-latency", args.fill_latency),
                                  ("cycles", cycles), ("warmup", args.warmup), ("seed", args.seed))
    ) + (" --full" if args.full else "") + (f" --red-entries={args.red_entries}" if args.red_entries else ""),
              "payload_flits": PAYLOAD, "runs": []}
    sim_cycles = loop_s = 0
    for n in ports:
        r = {"ports": n, "zero_load": [], "dispatch": [], "combine": [], "fused": []}
        for task, x in zip(tasks, results):
            if task[1] == n:
                x = {k: v for k, v in x.items() if not k.startswith("_")}
                sim_cycles += x.pop("sim_cycles")
                loop_s += x.pop("loop_s")
                r["zero_load" if task[0] == "zero" else task[0]].append(x)
        report["runs"].append(r)
    report["sim_cycles"] = sim_cycles
    report["cycles_per_s"] = sim_cycles / loop_s if loop_s else None
    report["wall_s"] = time.time() - t0
    return finish(out, report, markdown(report))


def _f(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def markdown(report: dict) -> str:
    lines = ["## DySHARP switch: dispatch, combine, fused mix, zero-load latency", "",
             f"Command: `{report['command']}` ({report['payload_flits']}-flit packets; the fast two-VC harness, "
             "every delivery and result checked by the scoreboard).", ""]
    for r in report["runs"]:
        n = r["ports"]
        if r["dispatch"]:
            lines += [f"**N={n}, dispatch** (`dymultimem.st`, every GPU offering 1 flit/cycle): flits/cycle per "
                      "egress and per ingress, DySHARP switch (VC 0, TLB fills included) against the plain NVSwitch "
                      "on the same packets; AL-TLB hit rate in the window and over the whole run (hits / lookups, and "
                      "1 - primary misses / lookups: coalesced lookups wait for a fill but read nothing):", ""]
            rows = [[x["fanout"], x["regime"], f"{_f(x['hit_rate'])}/{_f(x['hit_rate_primary'])}",
                     f"{_f(x['hit_rate_run'])}/{_f(x['hit_rate_primary_run'])}", _f(x["egress"]), _f(x["switch_egress"]),
                     _f(x["ingress"]), _f(x["switch_ingress"]), _f(x["latency_mean"], ".1f")] for x in r["dispatch"]]
            lines += [table(rows, ["fanout", "regime", "hit rate window", "hit rate run", "egress DySHARP", "egress NVSwitch",
                                   "ingress DySHARP", "ingress NVSwitch", "mean latency"]), ""]
        if r["combine"]:
            lines += [f"**N={n}, combine** (`ld_reduce`, int32 add, 1.1x the uplink bound offered): results/cycle "
                      f"per requester, contribution flits/cycle per uplink (mean, min over ports; bound "
                      f"d*17/(1+d*17)), uplink busy with requests and contributions (mean, min), in a "
                      f"{r['combine'][0]['window'][1] - r['combine'][0]['window'][0]}-cycle window opened at "
                      "saturation; engine entries in use (mean/max of per-port samples), request latency "
                      "(mean/min) and the entries Little's law needs at the bound (bound x min latency):", ""]
            rows = [[x["contributors"], x["read_latency"], _f(x["results_per_requester"], ".4f"),
                     _f(x["bound_results"], ".4f"), _f(x["contrib_per_uplink"]), _f(x["contrib_per_uplink_min"]),
                     _f(x["contrib_bound"]), f"{_f(x['uplink_busy'])}/{_f(x['uplink_busy_min'])}",
                     f"{_f(x['occupancy_mean'], '.1f')}/{x['occupancy_max']}",
                     x["red_entries"], f"{_f(x['latency_mean'], '.0f')}/{x['latency_min']}", _f(x["entries_needed"], ".1f")]
                    for x in r["combine"]]
            lines += [table(rows, ["d", "read lat.", "results/req", "bound", "contrib/uplink", "min", "bound",
                                   "uplink busy mean/min", "entries used", "entries", "latency mean/min", "Little"]), ""]
        if r["fused"]:
            x0 = r["fused"][0]
            lines += [f"**N={n}, fused mix** (dispatch fanout 4 at {x0['dispatch_load']:.3f} flits/cycle + combine "
                      f"d = 4 at {x0['combine_load']:.3f}x its bound, per GPU: the mix that fills both directions "
                      "in the fluid limit): link utilization per direction and VC (flits/cycle per port), results "
                      "per cycle per requester and stores delivered per cycle per egress:", ""]
            rows = [[x["read_latency"], _f(x["uplink_vc0"]), _f(x["uplink_vc1"]), _f(x["uplink_busy"]),
                     _f(x["downlink_vc0"]), _f(x["downlink_vc1"]), _f(x["downlink_busy"]),
                     _f(x["results_per_requester"], ".4f"), _f(x["store_flits_per_egress"])] for x in r["fused"]]
            lines += [table(rows, ["read lat.", "up VC0", "up VC1", "up total", "down VC0", "down VC1",
                                   "down total", "results/req", "store flits/egress"]), ""]
        for z in r["zero_load"]:
            st = z["ld_reduce_stages"]
            lines += [f"**N={n}, zero load** (read latency {z['read_latency']}, fill latency {z['fill_latency']}): "
                      f"translated store, header in to header out, hit {sorted(set(z['store_hit']))} cycles "
                      f"(plain NVSwitch {sorted(set(z['plain_switch']))}), miss {sorted(set(z['store_miss']))}; "
                      f"ld_reduce (d = 2) request to result header cold {z['ld_reduce_cold']}, warm "
                      f"{z['ld_reduce_warm']} = request to reads at the GPUs {st['request_to_reads']} + GPU read and "
                      f"send {st['gpu_read_and_send']} + last contribution to result {st['last_contribution_to_result']}.",
                      ""]
    return "\n".join(lines)


STUDY_ARGS = {"quick": ["--ports", "8", "--fanouts", "1,4", "--contributors", "2", "--read-latencies", "150",
                        "--cycles", "2000", "--warmup", "1500"],
              "default": ["--ports", "8"], "full": ["--full"]}
FULL_ONLY = {"quick": "N = 16, fanouts 2 and 8, d = 1 and 4, read latency 800",
             "default": "N = 16 (`dysharp bench dysharp_switch`, whose default is N = 8 and 16); 12000-cycle "
                        "windows, d = 8 and the fused mix at every read latency (`--full`)"}


def study(args, out_dir) -> str:
    """The ``dysharp_switch`` step of ``dysharp study``: the bench in the study's scope. Outside ``--full`` the
    fast path is built without the profile (``DYSHARP_PGO=0``, the same figures): at N = 8 the default
    scope's points simulate in about 35 CPU-s, and the profile-guided build (an instrumented compile, a
    training run, a second compile) cost 230 CPU-s against 82 without."""
    import os
    from unittest import mock

    from infra.scope import scope_of
    pgo = {} if scope_of(args) == "full" else {"DYSHARP_PGO": "0"}
    with mock.patch.dict(os.environ, pgo):
        return study_run(sys.modules[__name__], args, out_dir, "dysharp_switch")
