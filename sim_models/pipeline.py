"""The tile-level pipeline model: dispatch, GEMM-1, GEMM-2 and combine of one MoE layer on G GPUs, with
link contention between dispatch and combine. This is the timing core of DySHARP-full (token-centric
fusion); the same engine, with other traffic and a phase barrier, times CCFuser-, COMET- and
DySHARP-COMET-like schemes.

:func:`run_pipeline` (a :class:`PipelineInputs` in, a :class:`PipelineResult` out) is the DySHARP-full
timing core. It models the links (when each tile's last row arrives, when each partial and result moves);
when each ready tile's GEMM-1 and GEMM-2 run, and so when its tokens are released for combine, is the
reference token-centric scheduler's policy, :class:`sim_models.scheduler.TilePolicy`, used here with one
worker per SM pool. That class is the only definition of the policy: the scheduler's closed loop
with the Tile Status Table (and so the RTL testbench) runs the same code.

Model (a fluid simulation in fixed time slots of ``dt``):

* **Links.** Each GPU has an uplink and a downlink with a rate in wire bytes/s. Dispatch and combine
  share them; when both have backlog, each gets at least half of a link (``combine_share`` for combine) and
  takes what the other leaves
  (max-min fair sharing, work conserving). The switch is a non-blocking single-level fabric (VOQ), so only
  the GPU links constrain.
* **Dispatch** is lock-step: every source sends its tokens in index order and all sources progress
  together through token index ``p`` (an all-to-all with random destinations is paced by its busiest link).
  The cumulative wire bytes each link carries up to progress ``p`` are piecewise linear between knots.
* **Tiles.** On each GPU, the rows for one expert fill tiles of ``tile`` tokens in arrival order; a tile
  is ready (the token tracker's event) when its last row has arrived, plus the dispatch latency (which
  includes the tracker's ready latency); a tile of ready progress 0 (the GPU's own tokens in tiles of their
  own) is ready at time 0. The scheduler's policy then runs the tiles in ready order through
  GEMM-1 on the stage-1 SMs and GEMM-2 on the stage-2 SMs, one tile at a time per stage (``w1``/``w2``:
  per-tile times on the SMs each stage has); once a GPU has no GEMM-1 left (all its tiles ready and the
  last GEMM-1 ended), its GEMM-2 tiles that start from then run at ``w2_tail`` (the stage-1 SMs join
  stage 2). With ``barrier`` (COMET-like phases), no GEMM-2 starts on a GPU before its whole dispatch and
  all its GEMM-1 tiles are done, and the stages never join (``w2_tail`` unused).
* **Combine.** When a tile's GEMM-2 ends, its partials (one per (token, GPU) pair whose last row is in
  that tile) join the GPU's uplink queue; a pair's partial has left when the queue has drained past it.
  Unicast: each partial then loads the home GPU's downlink. In-switch reduction (``reduced``): a token's
  single result loads the home downlink when all its partials have left, limited also by the home ports'
  reduction engines (``reduce_rate``), and its ld_reduce request loads the home's uplink.
"""

import copy
import dataclasses
import math

import numpy as np

from .scheduler import TilePolicy

__all__ = ["PipelineInputs", "PipelineResult", "run_pipeline", "SharedHbmGemm"]


@dataclasses.dataclass
class PipelineInputs:
    tokens_per_gpu: int
    knots: np.ndarray            # (K+1,) token progress at the knots, 0 .. T
    disp_up_cum: np.ndarray      # (G, K+1) cumulative dispatch wire bytes on each uplink at the knots
    disp_dn_cum: np.ndarray      # (G, K+1) ... on each downlink
    tile_ready_p: np.ndarray     # (G, NT) progress at which each tile's last row has arrived, ascending; inf pad
    tile_w1: np.ndarray          # (G, NT) GEMM-1 seconds per tile on the SMs stage 1 has; 0 pad
    tile_w2: np.ndarray          # (G, NT) GEMM-2 seconds per tile on the SMs stage 2 has; 0 pad
    tile_w2_tail: np.ndarray     # (G, NT) GEMM-2 seconds per tile once GEMM-1 is done on that GPU and its
                                 # SMs join stage 2 (work conserving); = tile_w2 when stages do not split
    pair_start: np.ndarray       # (G, NT+1) offsets of each tile's pairs in the pair arrays
    pair_token: np.ndarray       # (P,) token of each (token, GPU) pair; pairs sorted by (GPU, tile position)
    pair_home: np.ndarray        # (P,) the token's home GPU
    pair_up: np.ndarray          # (P,) partial wire bytes on the member's uplink (0 for a local pair)
    pair_req_dn: np.ndarray      # (P,) read-request bytes on the member's downlink (ld_reduce schemes)
    pair_down: np.ndarray        # (P,) home-downlink bytes once the partial has left (unicast; else 0)
    token_pairs: np.ndarray      # (N,) pairs per token (a reduced result waits for all of them)
    token_home: np.ndarray       # (N,)
    token_result: np.ndarray     # (N,) home-downlink bytes of the reduced result (0 for unicast)
    token_req_up: np.ndarray     # (N,) home-uplink request bytes (0 for unicast)
    up_rate: np.ndarray          # (G,) wire bytes/s
    dn_rate: np.ndarray          # (G,)
    reduce_rate: np.ndarray      # (G,) partial bytes/s the home GPU's reduction engines absorb
    reduced: bool
    barrier: bool = False
    latency_dispatch: float = 0.0
    latency_combine: float = 0.0
    start_overhead: float = 0.0
    slots: int = 300             # time resolution (numerical: 300 vs 1000 slots within 1.1%)
    combine_share: float = 0.5   # the least share of a link combine gets while dispatch has backlog (0.5:
    #                              max-min fair between the two classes; an assumption, Params.combine_link_share)
    # Shared HBM (fused stages without a barrier; see SharedHbmGemm): per tile, the compute seconds on the
    # stage's SMs (c1, c2; c2_tail on both pools' SMs) and the memory seconds with all of HBM (m1, m2).
    # None: tile_w1 / tile_w2 / tile_w2_tail are fixed durations (TilePolicy), as for the barrier schemes.
    tile_c1: np.ndarray | None = None
    tile_m1: np.ndarray | None = None
    tile_c2: np.ndarray | None = None
    tile_m2: np.ndarray | None = None
    tile_c2_tail: np.ndarray | None = None
    hbm_share1: float = 0.5      # GEMM-1's weight in the HBM split while both stages want more than they get
    #                              (the estimator passes GEMM-1's SM share; 0.5 is only the bare default)
    result_rate: np.ndarray | None = None  # (G,) result bytes/s each home's ld_reduce window allows over
    #                              time, and result_burst (G,) the bytes it allows at once (None: unbounded;
    #                              estimator._pull_window)
    result_burst: np.ndarray | None = None


@dataclasses.dataclass
class PipelineResult:
    total: float                 # layer time, seconds
    dispatch_end: float          # when the last dispatch byte left (all GPUs)
    ready: np.ndarray            # (G, NT) tile ready times (inf pad)
    gemm1_end: np.ndarray        # (G, NT)
    gemm2_end: np.ndarray        # (G, NT)
    up_busy: np.ndarray          # (G,) seconds each uplink carried data
    dn_busy: np.ndarray          # (G,)
    slots_run: int


def _interp_rows(cum: np.ndarray, knots: np.ndarray, p: float) -> np.ndarray:
    """Each row's cumulative bytes at progress ``p`` (piecewise linear between knots)."""
    k = min(max(int(np.searchsorted(knots, p, side="right")) - 1, 0), len(knots) - 2)
    f = (p - knots[k]) / (knots[k + 1] - knots[k])
    return cum[:, k] + f * (cum[:, k + 1] - cum[:, k])


class _Inverse:
    """Largest progress per row whose cumulative bytes do not exceed a target (rows non-decreasing)."""

    def __init__(self, cum: np.ndarray, knots: np.ndarray):
        self.cum, self.knots = cum, knots
        big = float(cum.max(initial=0.0)) * 2 + 1.0
        self.off = np.arange(cum.shape[0]) * big
        self.flat = (cum + self.off[:, None]).ravel()
        self.k1 = len(knots)

    def __call__(self, target: np.ndarray) -> np.ndarray:
        cum, knots, k1 = self.cum, self.knots, self.k1
        idx = np.searchsorted(self.flat, target + self.off, side="right") - 1 - np.arange(cum.shape[0]) * k1
        idx = np.clip(idx, 0, k1 - 1)
        out = knots[idx].astype(np.float64)
        r = np.nonzero(idx < k1 - 1)[0]
        lo = cum[r, idx[r]]
        span = cum[r, idx[r] + 1] - lo
        frac = np.where(span > 0, (target[r] - lo) / np.where(span > 0, span, 1.0), 1.0)
        out[r] = knots[idx[r]] + np.clip(frac, 0, 1) * (knots[idx[r] + 1] - knots[idx[r]])
        return out


def _ranges(start: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenated index ranges ``start[g, lo[g]] .. start[g, hi[g]]`` over rows g with hi > lo."""
    g = np.nonzero(hi > lo)[0]
    if not len(g):
        return np.zeros(0, dtype=np.int64)
    a = start[g, lo[g]]
    n = start[g, hi[g]] - a
    total = int(n.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    return np.repeat(a - (np.cumsum(n) - n), n) + np.arange(total)


def _per_tile_cum(start: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(G, NT+1) cumulative sums of per-pair ``values`` by tile position, from the pair offsets."""
    c = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
    return c[start] - c[start[:, :1]]


def run_pipeline(x: PipelineInputs) -> PipelineResult:
    """Time one layer through the pipeline model described in the module docstring."""
    G, NT = x.tile_ready_p.shape
    rows = np.arange(G)
    T = float(x.tokens_per_gpu)
    knots = np.asarray(x.knots, dtype=np.float64)
    ntiles = np.isfinite(x.tile_ready_p).sum(axis=1)
    w1 = np.asarray(x.tile_w1, dtype=np.float64)
    w2 = np.asarray(x.tile_w2, dtype=np.float64)
    up_cum = _per_tile_cum(x.pair_start, x.pair_up)
    req_dn_cum = _per_tile_cum(x.pair_start, x.pair_req_dn)
    big = float(up_cum.max(initial=0.0)) * 2 + 1.0
    up_off = rows * big
    up_flat = (up_cum + up_off[:, None]).ravel()
    inv_up = _Inverse(x.disp_up_cum, knots)
    inv_dn = _Inverse(x.disp_dn_cum, knots)

    # Slot length: the layer's own scale (the busiest direction's bytes or the busiest GPU's GEMM work).
    comb_up = up_cum[:, -1] + np.bincount(x.token_home, weights=x.token_req_up, minlength=G)
    comb_dn = (np.bincount(x.pair_home, weights=x.pair_down, minlength=G) + req_dn_cum[:, -1]
               + np.bincount(x.token_home, weights=x.token_result, minlength=G))
    comm = max(float(np.max((x.disp_up_cum[:, -1] + comb_up) / x.up_rate)),
               float(np.max((x.disp_dn_cum[:, -1] + comb_dn) / x.dn_rate)))
    win = x.reduced and x.result_rate is not None
    if win:
        # The ld_reduce window's bound on each home's results (estimator._pull_window) sets the scale too
        # when it is the longest.
        res_rate = np.asarray(x.result_rate, dtype=np.float64)
        res_burst = np.asarray(x.result_burst, dtype=np.float64)
        res_home = np.bincount(x.token_home, weights=x.token_result, minlength=G)
        comm = max(comm, float(np.max(np.where(res_home > 0, res_home / res_rate, 0.0))))
    comp = float(np.max(w1.sum(axis=1) + w2.sum(axis=1)))
    dt = max(comm, comp, 1e-12) / x.slots
    eps = dt * 1e-6            # time comparisons tolerate rounding (a jump lands exactly on a completion)

    # The home's reduction engines absorb partial bytes; a result moves down only as fast as its partials
    # can be reduced: result-byte rate = reduce_rate * (result bytes / partial bytes) for that home.
    red_cap = np.full(G, np.inf)
    if x.reduced:
        member = np.repeat(rows, np.diff(x.pair_start[:, [0, -1]], axis=1)[:, 0])
        part_home = np.bincount(x.pair_home, weights=np.where(member != x.pair_home, x.pair_up, 0.0), minlength=G)
        res_home = np.bincount(x.token_home, weights=x.token_result, minlength=G)
        with np.errstate(divide="ignore", invalid="ignore"):
            red_cap = np.where(part_home > 0, x.reduce_rate * dt * res_home / np.maximum(part_home, 1e-30), np.inf)
        red_cap = red_cap + req_dn_cum[:, -1] / x.slots      # read requests do not use the engines

    pad = np.arange(NT)[None, :] >= ntiles[:, None]
    ready = np.full((G, NT), np.inf)
    # A tile ready at progress 0 waits for no row (the GPU's own tokens: workload ``local_apart``).
    ready[x.tile_ready_p <= 0] = 0.0
    f1 = np.full((G, NT), np.inf)
    f2 = np.full((G, NT), np.inf)
    released = np.zeros(G, dtype=np.int64)
    upc = np.zeros(G, dtype=np.int64)
    up_served = np.zeros(G)
    req_q = np.zeros(G)
    dn_q = np.zeros(G)
    up_busy = np.zeros(G)
    dn_busy = np.zeros(G)
    cnt = np.asarray(x.token_pairs, dtype=np.int64).copy()
    done_tok = np.zeros(len(cnt), dtype=bool)
    mark = np.zeros(len(cnt), dtype=np.int64)
    barrier_at = np.full(G, np.inf)
    res_q = np.zeros(G)          # result bytes waiting for the home's downlink (the window's share of dn_q)
    budget = res_burst.copy() if win else None      # result bytes the window lets through now
    policy = TilePolicy(w1, w2, None if x.barrier else x.tile_w2_tail)
    hbm = None
    if x.tile_c1 is not None and not x.barrier:
        hbm = SharedHbmGemm(x.tile_c1, x.tile_m1, x.tile_c2, x.tile_m2, x.tile_c2_tail, ntiles, x.hbm_share1)
    hbm_done = False
    p, t = 0.0, 0.0
    dispatch_end = 0.0 if T == 0 else None
    last_activity = 0.0
    dirty = bool(np.any(ready == 0.0))
    slots_run = 0
    max_slots = 50 * x.slots + 1000
    cap_up = x.up_rate * dt
    cap_dn = x.dn_rate * dt
    while True:
        slots_run += 1
        if slots_run > max_slots:
            raise RuntimeError(f"pipeline model did not finish (internal error): progress {p}/{T}, "
                               f"tiles released {released.sum()}/{ntiles.sum()}")
        t_end = t + dt
        part_q = up_cum[rows, released] - up_served
        qu = part_q + req_q
        qd = dn_q.copy()
        if win:
            # At most ``window`` requests per zero-load round trip, ``window`` results at once: the RED_READs
            # in dn_q go on, the results only within the budget.
            budget = np.minimum(budget + res_rate * dt, np.maximum(res_burst, res_rate * dt))
            qd = np.maximum(qd - res_q, 0.0) + np.minimum(res_q, budget)
        if p < T:
            base_up = _interp_rows(x.disp_up_cum, knots, p)
            base_dn = _interp_rows(x.disp_dn_cum, knots, p)
            p_full = min(T, float(np.min(inv_up(base_up + cap_up))), float(np.min(inv_dn(base_dn + cap_dn))))
            use_up = _interp_rows(x.disp_up_cum, knots, p_full) - base_up
            use_dn = _interp_rows(x.disp_dn_cum, knots, p_full) - base_dn
            # Combine gets at least ``combine_share`` of a link while dispatch is active (half: max-min fair
            # arbitration between the two traffic classes, an assumption), and whatever dispatch leaves.
            cs = x.combine_share
            a_up = np.minimum(qu, np.maximum(cap_up * cs, cap_up - use_up))
            a_dn = np.minimum(np.minimum(qd, np.maximum(cap_dn * cs, cap_dn - use_dn)), red_cap)
            a_up_first, a_dn_first = a_up, a_dn
            p_new = min(T, float(np.min(inv_up(base_up + cap_up - a_up))),
                        float(np.min(inv_dn(base_dn + cap_dn - a_dn))))
            p_new = max(p_new, p)
            use_up = _interp_rows(x.disp_up_cum, knots, p_new) - base_up
            use_dn = _interp_rows(x.disp_dn_cum, knots, p_new) - base_dn
            a_up = np.minimum(qu, np.maximum(a_up, cap_up - use_up))
            a_dn = np.minimum(np.minimum(qd, np.maximum(a_dn, cap_dn - use_dn)), red_cap)
            up_busy += use_up / x.up_rate
            dn_busy += use_dn / x.dn_rate
            if p_new > p:
                span = dt                 # time the progress p -> p_new takes within this slot
                if p_new >= T - 1e-9:
                    # Dispatch ends inside the slot: at the busiest link's share of its allotment.
                    need_up = x.disp_up_cum[:, -1] - base_up
                    need_dn = x.disp_dn_cum[:, -1] - base_dn
                    with np.errstate(divide="ignore", invalid="ignore"):
                        f_up = np.where(need_up > 0, need_up / np.maximum(cap_up - a_up_first, 1e-30), 0.0)
                        f_dn = np.where(need_dn > 0, need_dn / np.maximum(cap_dn - a_dn_first, 1e-30), 0.0)
                    span = dt * min(1.0, max(float(np.max(f_up)), float(np.max(f_dn)), 0.0))
                    dispatch_end = t + span
                    last_activity = max(last_activity, dispatch_end)
                newly = (x.tile_ready_p > p) & (x.tile_ready_p <= p_new + 1e-9)
                if newly.any():
                    frac = np.clip((x.tile_ready_p[newly] - p) / (p_new - p), 0, 1)
                    ready[newly] = t + span * frac + x.latency_dispatch
                    dirty = True
                if p_new >= T - 1e-9:
                    p_new = T
                    dirty = True
            p = p_new
        else:
            a_up = np.minimum(qu, cap_up)
            a_dn = np.minimum(np.minimum(qd, cap_dn), red_cap)
        if hbm is not None:
            # Shared-HBM stages: commit the GEMM events up to the slot end (every tile that can be ready
            # before it is known by now); once dispatch has ended every ready time is known: run to the end.
            if not hbm_done:
                f1, f2 = hbm.advance(ready, t_end if p < T else np.inf)
                f2 = f2.copy()
                f2[pad] = np.inf
                hbm_done = p >= T
            dirty = False
        elif dirty:
            # The token-centric scheduler's policy on the tiles ready so far (causal: times already in the
            # past do not change as more tiles become ready).
            if x.barrier:
                if dispatch_end is not None:
                    # COMET-like phases: GEMM-2 waits for the GPU's whole dispatch and all its GEMM-1 tiles.
                    f1 = policy(ready).gemm1_end
                    done1 = np.isfinite(f1).sum(axis=1) >= ntiles
                    tail = np.max(np.where(np.isfinite(f1), f1, 0.0), axis=1, initial=0.0)
                    barrier_at = np.where(done1, np.maximum(tail, dispatch_end + x.latency_dispatch), np.inf)
                times = policy(ready, gemm2_not_before=barrier_at)
            else:
                times = policy(ready, n_tiles=ntiles)
            f1, f2 = times.gemm1_end, times.gemm2_end
            f2[pad] = np.inf
            dirty = bool(x.barrier and not np.all(np.isfinite(barrier_at)))
        # Serve combine with this slot's allocations (from the backlog at the slot start).
        served_part = np.minimum(a_up, part_q)
        up_served += served_part
        req_q -= np.minimum(a_up - served_part, req_q)
        if win:
            res_served = np.clip(a_dn - np.maximum(dn_q - res_q, 0.0), 0.0, res_q)
            res_q -= res_served
            budget -= res_served
        dn_q -= a_dn
        up_busy += a_up / x.up_rate
        dn_busy += a_dn / x.dn_rate
        if np.any(a_up > 0) or np.any(a_dn > 0):
            frac = max(float(np.max(a_up / cap_up)), float(np.max(a_dn / cap_dn)))
            if win:         # results the window let through take their share of its slot too
                frac = max(frac, float(np.max(res_served / (res_rate * dt))))
            last_activity = max(last_activity, t + dt * min(frac, 1.0))
        # Tiles whose GEMM-2 ended by the slot end release their combine.
        new_rel = np.minimum((f2 <= t_end + eps).sum(axis=1), ntiles)
        if np.any(new_rel > released):
            dn_q += req_dn_cum[rows, new_rel] - req_dn_cum[rows, released]
            last_activity = max(last_activity, float(np.max(np.where(
                np.arange(NT)[None, :] < new_rel[:, None], f2, 0.0))))
            released = new_rel
        # Tiles whose partials have all left the uplink.
        # (tile i has left when its cumulative bytes up_cum[g, i+1] <= served; a searchsorted per row.)
        done_tiles = np.searchsorted(up_flat, up_served + 1e-6 + up_off, side="right") - rows * (NT + 1) - 1
        new_upc = np.maximum(upc, np.minimum(done_tiles, released))
        idx = _ranges(x.pair_start, upc, new_upc)
        upc = new_upc
        if len(idx):
            if x.reduced:
                tok = x.pair_token[idx]
                np.subtract.at(cnt, tok, 1)
                fin = tok[cnt[tok] == 0]
                fin = fin[~done_tok[fin]]
                # de-duplicate without sorting: the last write of each token's position wins
                mark[fin] = np.arange(len(fin))
                fin = fin[mark[fin] == np.arange(len(fin))]
                done_tok[fin] = True
                home = x.token_home[fin]
                dn_q += np.bincount(home, weights=x.token_result[fin], minlength=G)
                if win:
                    res_q += np.bincount(home, weights=x.token_result[fin], minlength=G)
                req_q += np.bincount(home, weights=x.token_req_up[fin], minlength=G)
            else:
                dn_q += np.bincount(x.pair_home[idx], weights=x.pair_down[idx], minlength=G)
        t = t_end
        idle = (np.all(dn_q <= 1e-6) and np.all(req_q <= 1e-6)
                and np.all(up_cum[rows, released] - up_served <= 1e-6))
        if p >= T and idle and np.all(released == ntiles) and np.all(upc == ntiles):
            break
        if p >= T and idle and not dirty:
            # Nothing on the links: jump to the next GEMM-2 completion.
            nxt = f2[rows, np.minimum(released, NT - 1)][released < ntiles]
            if len(nxt) and np.isfinite(nxt.min()) and nxt.min() > t_end:
                t = float(nxt.min()) - dt
    total = x.start_overhead + last_activity + x.latency_combine
    return PipelineResult(total, dispatch_end or 0.0, ready, f1, f2, up_busy, dn_busy, slots_run)


def _div(a: float, b: float) -> float:
    """``a / b`` as numpy divides float64 (a division by zero gives an infinity or NaN)."""
    try:
        return a / b
    except ZeroDivisionError:
        return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)


def _mn(a: float, b: float) -> float:
    """``np.minimum`` of two floats (NaN wins)."""
    return a if a <= b or a != a else b


def _mx(a: float, b: float) -> float:
    """``np.maximum`` of two floats (NaN wins)."""
    return a if a >= b or a != a else b


class SharedHbmGemm:
    """GEMM-1 and GEMM-2 of every GPU with the two SM pools sharing the GPU's HBM bandwidth.

    The order is the token-centric policy's (:class:`sim_models.scheduler.TilePolicy` with one worker per
    pool): GEMM-1 takes the tiles in ready order, GEMM-2 in GEMM-1 completion order, and once a GPU has no
    GEMM-1 left (all its ``n_tiles`` ready and the last GEMM-1 ended) a GEMM-2 that starts from then on runs
    on both pools' SMs (``c2_joined``). What differs is the duration: a tile is not a fixed time but work
    with a compute part ``c`` (seconds on its pool's SMs) and a memory part ``m`` (seconds with all of HBM),
    and it progresses at ``min(1/c, b/m)`` of itself per second, ``b`` being the fraction of HBM it gets.

    **HBM sharing** (processor sharing among the active stages, weighted max-min fair): a stage alone gets
    all of HBM. While both stages run, a stage that needs less than its weighted share (its demand at
    compute speed, ``m/c`` of HBM) gets its demand and the other takes the rest; when both need more, they
    split HBM by ``share1`` : ``1 - share1`` (their SM counts: each SM keeps a bounded number of loads in
    flight, so a saturated HBM serves the pools in proportion to the SMs issuing). An idle stage's share
    is never lost. With ``m = 0`` the times are exactly :class:`TilePolicy`'s with ``w = c``.

    :meth:`advance` is incremental and causal: it commits every event up to ``t_limit`` given the tiles
    known to be ready, which is exact as long as no tile becomes ready later with a ready time before
    ``t_limit`` (the pipeline calls it once per time slot, after the slot's new ready times are known).
    """

    def __init__(self, c1, m1, c2, m2, c2_joined, n_tiles, share1: float):
        self.c1, self.m1, self.c2, self.m2, self.c2j = (np.asarray(a, dtype=np.float64) for a in
                                                          (c1, m1, c2, m2, c2_joined))
        G, NT = self.c1.shape
        for name, a in (("m1", self.m1), ("c2", self.c2), ("m2", self.m2), ("c2_joined", self.c2j)):
            if a.shape != (G, NT):
                raise ValueError(f"{name} must have the shape of c1 {(G, NT)}, got {a.shape}")
        if not 0 < share1 < 1:
            raise ValueError(f"share1 must be in (0, 1), got {share1}")
        self.nt = np.asarray(n_tiles, dtype=np.int64).reshape(G)
        self.share1 = float(share1)
        self.now = np.zeros(G)
        self.i1 = np.zeros(G, dtype=np.int64)        # GEMM-1: tile in progress or next (all before are done)
        self.i2 = np.zeros(G, dtype=np.int64)
        self.a1 = np.zeros(G, dtype=bool)            # a tile is in progress
        self.a2 = np.zeros(G, dtype=bool)
        self.j2 = np.zeros(G, dtype=bool)            # the GEMM-2 in progress runs on the joined pools
        self.r1 = np.ones(G)                         # remaining fraction of the tile in progress
        self.r2 = np.ones(G)
        self.gemm1_end = np.full((G, NT), np.inf)
        self.gemm2_end = np.full((G, NT), np.inf)
        self.events = 0

    @staticmethod
    def allocate(d1, d2, act1, act2, share1):
        """HBM fractions (b1, b2) of two stages with demands ``d1``, ``d2`` (fractions of HBM at compute
        speed; ``inf`` for a memory-only tile), ``act``: the stage runs a tile."""
        w1, w2 = share1, 1.0 - share1
        both = act1 & act2
        fit = d1 + d2 <= 1.0
        b1 = np.where(both, np.where(fit, d1, np.where(d1 <= w1, d1, np.where(d2 <= w2, 1.0 - np.minimum(d2, 1.0), w1))), 1.0)
        b2 = np.where(both, np.where(fit, d2, np.where(d2 <= w2, d2, np.where(d1 <= w1, 1.0 - np.minimum(d1, 1.0), w2))), 1.0)
        return np.where(act1, b1, 0.0), np.where(act2, b2, 0.0)

    def clone(self) -> "SharedHbmGemm":
        """An independent copy (the state is arrays and numbers: each array copied)."""
        other = copy.copy(self)
        other.__dict__.update({k: v.copy() for k, v in vars(self).items() if isinstance(v, np.ndarray)})
        return other

    def advance(self, ready, t_limit: float, stop_at_gemm2: bool = False):
        """Commit every start and completion up to ``t_limit`` (``inf``: to the end of the known tiles);
        ``stop_at_gemm2``: stop right after the first GEMM-2 completion of any GPU (a closed loop that
        acts on each completion, :class:`sim_models.gemm_engine.GemmEngine`). One GPU's state is run on
        Python floats (:meth:`_advance_one`: the same operations, so the same bits, without numpy's cost per
        call on one-element arrays), several GPUs' on arrays (:meth:`_advance_arrays`)."""
        ready = np.asarray(ready, dtype=np.float64)
        if ready.shape[0] == 1:
            return self._advance_one(ready, t_limit, stop_at_gemm2)
        return self._advance_arrays(ready, t_limit, stop_at_gemm2)

    def _advance_one(self, ready, t_limit: float, stop_at_gemm2: bool):
        """:meth:`_advance_arrays` of one GPU, operation for operation on Python floats (IEEE doubles, as
        numpy's float64): a division by zero gives numpy's infinity or NaN, minima and maxima keep NaN."""
        rdy = ready[0]
        NT = len(rdy)
        t_limit = float(t_limit)
        nt = int(self.nt[0])
        known = int(np.isfinite(rdy).sum()) >= nt
        c1s, m1s, c2s, m2s, c2js = self.c1[0], self.m1[0], self.c2[0], self.m2[0], self.c2j[0]
        now, i1, i2 = float(self.now[0]), int(self.i1[0]), int(self.i2[0])
        a1, a2, j2 = bool(self.a1[0]), bool(self.a2[0]), bool(self.j2[0])
        r1, r2 = float(self.r1[0]), float(self.r2[0])
        w1, w2 = self.share1, 1.0 - self.share1
        g1e, g2e = self.gemm1_end[0], self.gemm2_end[0]
        inf = math.inf
        stopped = False
        while True:
            live = now < t_limit
            k1 = min(i1, NT - 1)
            ready1 = float(rdy[k1])
            if live and not a1 and i1 < nt and ready1 <= now:
                a1, r1 = True, 1.0
            if live and not a2 and i2 < i1:
                j2 = known and i1 >= nt and not a1
                a2, r2 = True, 1.0
            k2 = min(i2, NT - 1)
            c1, m1 = float(c1s[k1]), float(m1s[k1])
            c2 = float(c2js[k2] if j2 else c2s[k2])
            m2 = float(m2s[k2])
            d1 = m1 / c1 if c1 > 0 else (inf if m1 > 0 else 0.0)
            d2 = m2 / c2 if c2 > 0 else (inf if m2 > 0 else 0.0)
            if a1 and a2:
                if d1 + d2 <= 1.0:
                    b1, b2 = d1, d2
                else:
                    b1 = d1 if d1 <= w1 else (1.0 - _mn(d2, 1.0) if d2 <= w2 else w1)
                    b2 = d2 if d2 <= w2 else (1.0 - _mn(d1, 1.0) if d1 <= w1 else w2)
            else:
                b1 = b2 = 1.0
            if not a1:
                b1 = 0.0
            if not a2:
                b2 = 0.0
            rho1 = _div(1.0, _mx(c1, _div(m1, _mx(b1, 1e-300)) if m1 > 0 else 0.0))
            rho2 = _div(1.0, _mx(c2, _div(m2, _mx(b2, 1e-300)) if m2 > 0 else 0.0))
            dt1 = _div(r1, rho1) if a1 else inf
            dt2 = _div(r2, rho2) if a2 else inf
            wait1 = ready1 - now if (not a1 and i1 < nt) else inf
            step = _mn(_mn(dt1, dt2), _mn(wait1, t_limit - now))
            if not (live and math.isfinite(step)):
                break
            step = _mx(step, 0.0)
            self.events += 1
            new = now + step
            if wait1 <= step:
                new = _mx(new, ready1)
            if t_limit - now <= step:
                new = _mx(new, t_limit)
            now = new
            fin1 = a1 and dt1 <= step
            fin2 = a2 and dt2 <= step
            if a1:
                r1 = r1 - (rho1 if math.isfinite(rho1) else 0) * step
            if a2:
                r2 = r2 - (rho2 if math.isfinite(rho2) else 0) * step
            if fin1:
                g1e[i1] = now
                i1 += 1
                a1 = False
            if fin2:
                g2e[i2] = now
                i2 += 1
                a2 = False
            if stop_at_gemm2 and fin2:
                stopped = True
                break
        if not stopped and math.isfinite(t_limit):       # idle GPUs wait until the limit
            now = _mx(now, t_limit)
        self.now[0], self.i1[0], self.i2[0] = now, i1, i2
        self.a1[0], self.a2[0], self.j2[0], self.r1[0], self.r2[0] = a1, a2, j2, r1, r2
        return self.gemm1_end, self.gemm2_end

    def _advance_arrays(self, ready, t_limit: float, stop_at_gemm2: bool = False):
        """:meth:`advance` on arrays, every GPU at once."""
        G, NT = ready.shape
        g = np.arange(G)
        nt = self.nt
        known = np.isfinite(ready).sum(axis=1) >= nt
        with np.errstate(divide="ignore", invalid="ignore"):
            while True:
                live = self.now < t_limit
                # Starts at the current time of each GPU.
                k1 = np.minimum(self.i1, NT - 1)
                st1 = live & ~self.a1 & (self.i1 < nt) & (ready[g, k1] <= self.now)
                self.a1 |= st1
                self.r1[st1] = 1.0
                st2 = live & ~self.a2 & (self.i2 < self.i1)
                joined = known & (self.i1 >= nt) & ~self.a1
                self.j2 = np.where(st2, joined, self.j2)
                self.a2 |= st2
                self.r2[st2] = 1.0
                k1 = np.minimum(self.i1, NT - 1)
                k2 = np.minimum(self.i2, NT - 1)
                c1, m1 = self.c1[g, k1], self.m1[g, k1]
                c2 = np.where(self.j2, self.c2j[g, k2], self.c2[g, k2])
                m2 = self.m2[g, k2]
                d1 = np.where(c1 > 0, m1 / c1, np.where(m1 > 0, np.inf, 0.0))
                d2 = np.where(c2 > 0, m2 / c2, np.where(m2 > 0, np.inf, 0.0))
                b1, b2 = self.allocate(d1, d2, self.a1, self.a2, self.share1)
                # Progress rates (tile fractions per second): the roofline with the HBM fraction each has.
                rho1 = 1.0 / np.maximum(c1, np.where(m1 > 0, m1 / np.maximum(b1, 1e-300), 0.0))
                rho2 = 1.0 / np.maximum(c2, np.where(m2 > 0, m2 / np.maximum(b2, 1e-300), 0.0))
                dt1 = np.where(self.a1, self.r1 / rho1, np.inf)
                dt2 = np.where(self.a2, self.r2 / rho2, np.inf)
                wait1 = np.where(~self.a1 & (self.i1 < nt), ready[g, k1] - self.now, np.inf)
                step = np.minimum(np.minimum(dt1, dt2), np.minimum(wait1, t_limit - self.now))
                work = live & np.isfinite(step)
                if not work.any():
                    break
                step = np.where(work, np.maximum(step, 0.0), 0.0)
                self.events += 1
                new = self.now + step
                # Land exactly on a ready time or the limit (a step below the clock's resolution must not
                # leave the GPU just short of it forever).
                new = np.where(wait1 <= step, np.maximum(new, ready[g, k1]), new)
                new = np.where(t_limit - self.now <= step, np.maximum(new, t_limit), new)
                self.now = np.where(work, new, self.now)
                fin1 = work & self.a1 & (dt1 <= step)
                fin2 = work & self.a2 & (dt2 <= step)
                self.r1 = np.where(self.a1 & work, self.r1 - np.where(np.isfinite(rho1), rho1, 0) * step, self.r1)
                self.r2 = np.where(self.a2 & work, self.r2 - np.where(np.isfinite(rho2), rho2, 0) * step, self.r2)
                self.gemm1_end[g[fin1], self.i1[fin1]] = self.now[fin1]
                self.gemm2_end[g[fin2], self.i2[fin2]] = self.now[fin2]
                self.i1 += fin1
                self.i2 += fin2
                self.a1 &= ~fin1
                self.a2 &= ~fin2
                if stop_at_gemm2 and fin2.any():
                    return self.gemm1_end, self.gemm2_end
            if np.isfinite(t_limit):       # idle GPUs wait until the limit
                self.now = np.maximum(self.now, t_limit)
        return self.gemm1_end, self.gemm2_end
