"""Reference token-centric scheduler: a golden model of DySHARP's fused dispatch-GEMM-combine pipeline.

Pure Python (numpy only), no RTL dependency. Given a routing, an expert placement, a tile size, dispatch
timing and GEMM tile times, it says when every tile becomes ready, when its GEMM-1 and GEMM-2 run (on
dispatch-side and combine-side SM pools whose split is a parameter), when each token is released for
combine and when each token's combine issues. All times are cycles of the switch clock (1.5625 GHz by
default: one 16-B flit per port per cycle).

API
---
``schedule(routing, placement, gpus, params) -> Schedule``
    The whole layer: ``routing`` is an int array (tokens, k) of expert ids (e.g.
    :func:`sim_models.routing.uniform_topk`), ``placement`` the GPU of each expert
    (:func:`sim_models.routing.place_experts`), token ``x`` lives on GPU ``x * gpus // tokens`` unless
    ``home`` is given. ``params`` is a :class:`SchedulerParams`. The result holds one :class:`TileRecord`
    per (GPU, local expert, tile), per-token combine-issue cycles (``Schedule.combine_issue``), the arrival
    stream of every GPU and summary figures (``Schedule.summary()``).

``dispatch_arrivals(routing, placement, gpus, ...) -> list[list[Arrival]]``
    The dispatch timing model alone: when each (token, local expert) pair reaches each GPU, with the slot
    and tile the receiver assigns (slots in arrival order per expert, like the receive path's bump
    pointers). Uplinks send tokens in token order, one copy per token (``dynamic``: ``dymultimem.st``
    multicast) or one per destination GPU (``unicast``: DeepEP-like); the switch adds a fixed latency and
    every downlink serves copies first come, first served.

``TileTableModel``
    The cycle-exact twin of the RTL Tile Status Table (:mod:`hw.gpu_nic.token_tracker`). ``step()``
    advances one clock with the interface inputs of that cycle and returns that cycle's outputs and
    transfers. The cocotb testbench runs it in lockstep with the RTL; the scheduler runs it (skipping idle
    cycles, and applying a stretch of releases alone at once: the same records as stepping it) for the
    tracker part of the pipeline, which is what makes the scheduler cycle-level there.

``TrackerEnvironment``
    Everything around one GPU's table: the arrival source, the command source (``EXPECT`` totals at the
    count exchange, ``DONE`` at GEMM-2 completion) and the GEMM engine. The scheduler and the cocotb
    testbench use the same object, so the RTL and the model see identical surroundings.

``TilePolicy(w1, w2, w2_joined, ...)(ready, ...) -> GemmTimes`` (one call: ``tile_gemm_times``)
    The token-centric policy itself, vectorised over GPUs: given when each tile became ready, when its
    GEMM-1 and GEMM-2 run and so when its tokens are released for combine. The GEMM engine of
    ``TrackerEnvironment`` calls it (with cycles and ``SchedulerParams``' workers) and so does the speedup
    estimator's tile engine, :func:`sim_models.pipeline.run_pipeline` (with seconds and one worker per SM
    pool): it is the only definition of the policy.

Pipeline rules (what "token-centric" means here)
------------------------------------------------
* A tile is ready when its last token arrives (or, for an expert's partial last tile, when the expected
  total arrives and the tokens are already there): exactly the RTL table's behaviour, cycle for cycle.
* The GEMM engine (:class:`TilePolicy`) takes ready tiles as they leave the table (the ``ready``
  stream, always accepted) and runs GEMM-1 on the first free *dispatch-side* worker (FIFO in ready order),
  then GEMM-2 on the first free *combine-side* worker (FIFO in GEMM-1 completion order). A worker is a
  group of ``sms_per_tile`` SMs working on one tile, so ``dispatch_sms // sms_per_tile`` tiles run GEMM-1
  at once. ``gemm1_tile_cycles``/``gemm2_tile_cycles`` are one worker's time for a full tile
  (:func:`tile_gemm_cycles` derives them from a model and a roofline); a partial tile takes the full time
  unless ``scale_partial_tiles``.
* Pool join (``join_pools``, default on): once a GPU has no GEMM-1 left (all its tiles, known from the
  ``EXPECT`` totals, are ready and the last GEMM-1 has ended), the dispatch-side SMs are shared out over
  the combine-side workers, so a GEMM-2 that starts from then takes ``gemm2_joined_cycles``. Without it
  those SMs would idle while GEMM-2 tiles wait.
* GEMM-2 completion is the ``DONE`` command into the table; the table then releases the tile's tokens one
  per cycle. A token's combine (its ``dymultimem.ld_reduce``) can issue once every one of its (GPU,
  expert) pairs has been released, plus ``notify_cycles``; its home GPU issues combines in that order,
  ``combine_issue_cycles`` apart.
"""

import collections
import dataclasses
import heapq
import math

import numpy as np

from .traffic import dispatch_row_bytes

__all__ = [
    "FREE", "FILLING", "READY", "GEMM2_DONE", "COMBINE_ISSUED", "STATE_NAMES",
    "EXPECT", "DONE", "RETIRE", "CLEAR", "TRACKER_ERRORS",
    "TileTableModel", "StepResult", "Arrival", "SchedulerParams", "TrackerEnvironment", "TileRecord",
    "Schedule", "dispatch_arrivals", "run_tracker", "schedule", "tile_gemm_cycles", "token_row_flits",
    "GemmTimes", "TilePolicy", "tile_gemm_times", "maxplus_scan",
]

# Tile states and command codes: the same numbers as hw.gpu_nic.token_tracker.TileState / TileCmdOp (a test
# checks they agree; this module does not import the RTL).
FREE, FILLING, READY, GEMM2_DONE, COMBINE_ISSUED = range(5)
STATE_NAMES = ("FREE", "FILLING", "READY", "GEMM2_DONE", "COMBINE_ISSUED")
EXPECT, DONE, RETIRE, CLEAR = range(4)
ISSUED = 4            # internal: the tile's last token was released
ARRIVE = 5            # internal: an arrival
TRACKER_ERRORS = ("UNKNOWN_TILE", "OVERFLOW", "DOUBLE_DONE", "NOT_READY", "BAD_RETIRE", "BAD_EXPECT")
COUNT_MASK = 0xFFFF


def _log2(v, name):
    if not isinstance(v, int) or v < 1 or v & (v - 1):
        raise ValueError(f"{name} must be a positive power of two, got {v!r}")
    return v.bit_length() - 1


# ---------------------------------------------------------------------------------------------------------
# The Tile Status Table, cycle for cycle

@dataclasses.dataclass
class StepResult:
    """One cycle of the table: the outputs it presented and what was transferred."""
    arrival_ready: bool
    cmd_ready: bool
    ready: tuple | None          # (expert, tile, count) presented on the ready stream
    release: tuple | None        # (expert, tile, slot, last) presented on the release stream
    arrival_taken: bool
    cmd_taken: bool
    ready_taken: bool
    release_taken: bool
    error: str | None            # error counted by the operation that completed this cycle


class TileTableModel:
    """Cycle-exact model of :class:`hw.gpu_nic.token_tracker.TokenTracker` (same parameters).

    Per cycle call :meth:`step` with the inputs of that cycle: ``arrival`` = ``(expert, tile)`` or None
    (valid low), ``cmd`` = ``(op, expert, tile, count)`` or None, and the consumers' ``ready_ready`` /
    ``release_ready``. The table pipeline has two stages (pick, then read-modify-write), like the RTL.
    """

    def __init__(self, *, experts: int, tiles: int, tile_size: int = 128, ready_depth: int = 4,
                 release_depth: int = 4):
        _log2(experts, "experts")
        _log2(tiles, "tiles")
        self.lb = _log2(tile_size, "tile_size")
        self.experts, self.tiles, self.tile_size = experts, tiles, tile_size
        self.ready_depth, self.release_depth = ready_depth, release_depth
        self.state = [FREE] * (experts * tiles)
        self.count = [0] * (experts * tiles)
        self.known = [False] * experts
        self.total = [0] * experts
        self.s1 = None               # (op, expert, tile, count, range_err) in the second stage
        self.readyq = collections.deque()
        self.relq = collections.deque()
        self.rel_slot = 0
        self.iss = None              # (expert, tile) whose last token was released last cycle
        self.errors = collections.Counter()

    def _idx(self, e, t):
        return (e & (self.experts - 1)) * self.tiles + (t & (self.tiles - 1))

    def quiescent(self) -> bool:
        """Nothing in flight: with no inputs, the next cycle changes nothing."""
        return self.s1 is None and not self.readyq and not self.relq and self.iss is None

    def outputs(self, cmd=None):
        s1_op = self.s1[0] if self.s1 is not None else None
        ready_room = len(self.readyq) + (s1_op in (ARRIVE, EXPECT)) < self.ready_depth
        rel_room = len(self.relq) + (s1_op == DONE) < self.release_depth
        op = cmd[0] if cmd is not None else None
        cmd_room = ready_room if op == EXPECT else rel_room if op == DONE else True
        cmd_ready = self.iss is None and cmd_room
        arrival_ready = self.iss is None and not (cmd is not None and cmd_room) and ready_room
        ready = self.readyq[0] if self.readyq else None
        release = None
        if self.relq:
            e, t, n = self.relq[0]
            release = (e, t, self.rel_slot, self.rel_slot == n - 1)
        return arrival_ready, cmd_ready, ready, release

    def step(self, arrival=None, cmd=None, ready_ready: bool = True, release_ready: bool = True) -> StepResult:
        arrival_ready, cmd_ready, ready_out, release_out = self.outputs(cmd)
        # Stage 0: choose this cycle's operation.
        new = None
        cmd_taken = arrival_taken = False
        if self.iss is not None:
            new = (ISSUED, self.iss[0], self.iss[1], 0)
        elif cmd is not None and cmd_ready:
            cmd_taken = True
            new = tuple(int(v) for v in cmd)
        elif arrival is not None and arrival_ready:
            arrival_taken = True
            new = (ARRIVE, int(arrival[0]), int(arrival[1]), 0)
        if new is not None:
            op, e, t, n = new
            if op == EXPECT:
                t = (((n - 1) & COUNT_MASK) >> self.lb) & 0xFF
                rerr = e >= self.experts or n > self.tiles * self.tile_size
            elif op == CLEAR:
                rerr = e >= self.experts
            else:
                rerr = e >= self.experts or t >= self.tiles
            new = (op, e, t, n, rerr)
        # Stage 1: read-modify-write of the operation picked last cycle.
        error = None
        push_ready = push_rel = None
        if self.s1 is not None:
            error, push_ready, push_rel = self._execute(*self.s1)
            if error:
                self.errors[error] += 1
        # Output transfers (the queues' heads were computed before this cycle's pushes).
        ready_taken = ready_out is not None and ready_ready
        release_taken = release_out is not None and release_ready
        if ready_taken:
            self.readyq.popleft()
        self.iss = None
        if release_taken:
            if release_out[3]:
                self.relq.popleft()
                self.rel_slot = 0
                self.iss = (release_out[0], release_out[1])
            else:
                self.rel_slot += 1
        if push_ready:
            self.readyq.append(push_ready)
        if push_rel:
            self.relq.append(push_rel)
        self.s1 = new
        return StepResult(arrival_ready, cmd_ready, ready_out, release_out, arrival_taken, cmd_taken,
                          ready_taken, release_taken, error)

    def _execute(self, op, e, t, n, rerr):
        """The second pipeline stage; returns (error, ready item, release job)."""
        L = self.tile_size
        known = self.known[e] if e < self.experts else False
        total = self.total[e] if e < self.experts else 0
        i = self._idx(e, t)
        state, count = self.state[i], self.count[i]
        last = ((total - 1) & COUNT_MASK) >> self.lb
        if op == ARRIVE:
            if rerr or (known and (total == 0 or t > last)):
                return "UNKNOWN_TILE", None, None
            expected = total - (last << self.lb) if (known and total != 0 and t == last) else L
            if state not in (FREE, FILLING) or count >= expected:
                return "OVERFLOW", None, None
            count += 1
            self.count[i] = count
            if count == expected:
                self.state[i] = READY
                return None, (e, t, count), None
            self.state[i] = FILLING
            return None, None, None
        if op == EXPECT:
            if rerr:
                return "UNKNOWN_TILE", None, None
            if known:
                return (None if total == n else "BAD_EXPECT"), None, None
            if n == 0:
                self.known[e], self.total[e] = True, 0
                return None, None, None
            x_last = ((n - 1) & COUNT_MASK) >> self.lb
            x_rem = n - (x_last << self.lb)
            if count > x_rem:
                return "OVERFLOW", None, None
            self.known[e], self.total[e] = True, n
            if count == x_rem and state == FILLING:
                self.state[i] = READY
                return None, (e, t, count), None
            return None, None, None
        if op == DONE:
            if rerr:
                return "UNKNOWN_TILE", None, None
            if state == READY:
                self.state[i] = GEMM2_DONE
                return None, None, (e, t, count)
            if state in (GEMM2_DONE, COMBINE_ISSUED):
                return "DOUBLE_DONE", None, None
            return "NOT_READY", None, None
        if op == ISSUED:
            if state == GEMM2_DONE:
                self.state[i] = COMBINE_ISSUED
            return None, None, None
        if op == RETIRE:
            if rerr:
                return "UNKNOWN_TILE", None, None
            if state == COMBINE_ISSUED:
                self.state[i], self.count[i] = FREE, 0
                return None, None, None
            return "BAD_RETIRE", None, None
        if op == CLEAR:
            if rerr:
                return "UNKNOWN_TILE", None, None
            self.known[e], self.total[e] = False, 0
            return None, None, None
        raise AssertionError(f"unknown table operation {op}")


# ---------------------------------------------------------------------------------------------------------
# Parameters and helpers

@dataclasses.dataclass
class SchedulerParams:
    """Knobs of the fused pipeline (cycles at the switch clock unless noted).

    Tracker: ``tile_size`` (power of two), ``tiles`` per expert in the table (``None``: the smallest power
    of two that holds the busiest expert), ``ready_depth``/``release_depth`` (the RTL queue depths).
    Dispatch: ``row_flits`` payload flits per token row, ``max_payload`` flits per packet, ``links`` (switch
    ports per GPU, striped: each moves one flit per cycle, so a row copy takes ``ceil(wire flits / links)``
    cycles; 18 for an NVLink4 GPU), ``switch_latency``, ``rx_latency`` (last flit of a row at the GPU -> arrival reported), ``mode``
    (``"dynamic"`` or ``"unicast"``), ``expect_cycle`` (when the count exchange delivers the per-expert
    totals; 0 = before dispatch).
    Compute: ``gemm1_tile_cycles``/``gemm2_tile_cycles`` (one worker, one full tile), ``dispatch_sms`` and
    ``combine_sms`` (the SM split), ``sms_per_tile`` (SMs in one worker), ``scale_partial_tiles``,
    ``join_pools`` (once a GPU has no GEMM-1 left, its dispatch-side SMs are shared out over the
    combine-side workers: a GEMM-2 starting from then takes :attr:`gemm2_joined_cycles`; False: the split
    stays fixed and those SMs idle).
    Combine: ``notify_cycles`` (release -> visible at the token's home GPU), ``combine_issue_cycles``
    (the home GPU's issue interval per token; default 56: a DeepSeek-V3 BF16 row of 14336 B is 56
    header-only ``ld_reduce`` packets of 256 B on one link).
    """
    tile_size: int = 128
    tiles: int | None = None
    ready_depth: int = 4
    release_depth: int = 4
    row_flits: int = 463
    max_payload: int = 16
    links: int = 1
    switch_latency: int = 5
    rx_latency: int = 20
    mode: str = "dynamic"
    expect_cycle: int = 0
    gemm1_tile_cycles: int = 20000
    gemm2_tile_cycles: int = 10000
    dispatch_sms: int = 66
    combine_sms: int = 66
    sms_per_tile: int = 66
    scale_partial_tiles: bool = False
    notify_cycles: int = 8
    combine_issue_cycles: int = 56
    join_pools: bool = True

    def __post_init__(self):
        _log2(self.tile_size, "tile_size")
        if self.tiles is not None:
            _log2(self.tiles, "tiles")
        if self.mode not in ("dynamic", "unicast"):
            raise ValueError(f"mode must be 'dynamic' or 'unicast', got {self.mode!r}")
        for f in ("row_flits", "max_payload", "links", "gemm1_tile_cycles", "gemm2_tile_cycles", "sms_per_tile",
                  "combine_issue_cycles", "ready_depth", "release_depth"):
            if not isinstance(getattr(self, f), int) or getattr(self, f) < 1:
                raise ValueError(f"{f} must be a positive integer, got {getattr(self, f)!r}")
        for f in ("switch_latency", "rx_latency", "expect_cycle", "notify_cycles"):
            if not isinstance(getattr(self, f), int) or getattr(self, f) < 0:
                raise ValueError(f"{f} must be a non-negative integer, got {getattr(self, f)!r}")
        if not isinstance(self.join_pools, bool):
            raise ValueError(f"join_pools must be True or False, got {self.join_pools!r}")
        for f in ("dispatch_sms", "combine_sms"):
            if getattr(self, f) < self.sms_per_tile:
                raise ValueError(f"{f} ({getattr(self, f)}) must be at least sms_per_tile "
                                 f"({self.sms_per_tile}): each pool needs one worker")

    @property
    def dispatch_workers(self) -> int:
        return self.dispatch_sms // self.sms_per_tile

    @property
    def combine_workers(self) -> int:
        return self.combine_sms // self.sms_per_tile

    @property
    def gemm2_joined_cycles(self) -> int:
        """One combine-side worker's GEMM-2 time for a full tile once the dispatch-side workers' SMs have
        joined it (``join_pools``): the SMs of ``dispatch_workers + combine_workers`` workers shared by the
        ``combine_workers`` workers."""
        k1, k2 = self.dispatch_workers, self.combine_workers
        return max(1, math.ceil(self.gemm2_tile_cycles * k2 / (k1 + k2)))

    @property
    def row_wire_flits(self) -> int:
        """Uplink/downlink flits of one token row: payload plus one header flit per packet."""
        return self.row_flits + math.ceil(self.row_flits / self.max_payload)

    @property
    def row_cycles(self) -> int:
        """Cycles one row copy occupies a GPU's links."""
        return math.ceil(self.row_wire_flits / self.links)


def token_row_flits(hidden: int, *, dtype: str = "fp8", flit_bytes: int = 16, meta_flits: int = 1) -> int:
    """Flits of one dispatched token row: the hidden vector (FP8 adds one fp32 scale per 128 channels,
    as DeepSeek sends it; BF16 is 2 B per element) plus ``meta_flits`` of routing metadata
    (:func:`sim_models.traffic.dispatch_row_bytes`)."""
    if dtype not in ("fp8", "bf16"):
        raise ValueError(f"dtype must be 'fp8' or 'bf16', got {dtype!r}")
    return math.ceil(dispatch_row_bytes(hidden, dtype, meta_flits * flit_bytes, flit_bytes) / flit_bytes)


def tile_gemm_cycles(hidden: int, expert_ffn: int, tile_size: int, sms: int, *, gpu_tflops: float = 989.0,
                     gpu_sms: int = 132, efficiency: float = 0.7, clock_ghz: float = 1.5625) -> tuple[int, int]:
    """(GEMM-1, GEMM-2) cycles for one tile on ``sms`` SMs by roofline: GEMM-1 is the gate and up
    projections (2 x tile x hidden x 2*ffn FLOPs), GEMM-2 the down projection (2 x tile x ffn x hidden),
    at ``efficiency`` of the GPU's dense peak scaled to ``sms`` SMs."""
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency}")
    flops_per_s = gpu_tflops * 1e12 * efficiency * sms / gpu_sms
    g1 = 2 * tile_size * hidden * 2 * expert_ffn / flops_per_s
    g2 = 2 * tile_size * expert_ffn * hidden / flops_per_s
    return max(1, round(g1 * clock_ghz * 1e9)), max(1, round(g2 * clock_ghz * 1e9))


# ---------------------------------------------------------------------------------------------------------
# The GEMM policy: tile ready -> GEMM-1 -> GEMM-2 (-> combine release at GEMM-2 end)
#
# The one definition of when a ready tile's GEMMs run. The closed loop below (TrackerEnvironment, hence
# schedule() and the RTL testbench) and the estimator's tile engine (sim_models.pipeline.run_pipeline) both
# call it; each maps its own resources (workers, per-tile times) onto it.

def maxplus_scan(ready: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Finish times of jobs run in order on one server per row: ``f[i] = max(ready[i], f[i-1]) + work[i]``,
    vectorised as ``W[i] + max_{j<=i}(ready[j] - W[j-1])`` with ``W`` the running sum of ``work``."""
    w = np.cumsum(work, axis=1)
    with np.errstate(invalid="ignore"):
        return w + np.maximum.accumulate(ready - (w - work), axis=1)


@dataclasses.dataclass
class GemmTimes:
    """Per tile, ``(G, NT)`` in the order the tiles became ready; ``inf`` where not (yet) known."""
    gemm1_start: np.ndarray
    gemm1_end: np.ndarray
    gemm2_start: np.ndarray
    gemm2_end: np.ndarray        # the DONE: the tile's tokens are released for combine
    joined: np.ndarray           # bool: GEMM-2 ran after the GPU's GEMM-1 pool had joined the GEMM-2 pool


def _fifo(avail, work, workers, join_at=None, work_joined=None, scan=maxplus_scan):
    """(end, joined) of jobs taken in row order by the first free of ``workers`` identical workers; a job
    that starts at or after its row's ``join_at`` takes ``work_joined`` instead of ``work``. ``scan``: the
    one-worker scan of ``work`` (the caller may have its running sums cached)."""
    G, NT = avail.shape
    joining = join_at is not None and work_joined is not None and bool(np.isfinite(join_at).any())
    if workers == 1:
        # One worker: starts never decrease along a row, so the jobs that start at or after join_at in the
        # schedule with ``work`` alone are exactly those that do with the switch (the jobs before the first
        # such one are unchanged, and every later one starts later still).
        end = scan(avail, work)
        joined = np.zeros((G, NT), dtype=bool)
        if joining:
            with np.errstate(invalid="ignore"):
                joined = ((end - work) >= join_at[:, None]) & np.isfinite(end)
            if joined.any():
                end = maxplus_scan(avail, np.where(joined, work_joined, work))
        return end, joined
    end = np.full((G, NT), np.inf)
    joined = np.zeros((G, NT), dtype=bool)
    for g in range(G):
        free = [-math.inf] * workers
        ja = float(join_at[g]) if joining else math.inf
        wk, wj = work[g].tolist(), (work_joined[g].tolist() if joining else None)
        ends, js = [], []
        for i, a in enumerate(avail[g].tolist()):
            if a == math.inf:
                break                       # not ready yet: neither is any job behind it (FIFO)
            start = max(a, heapq.heappop(free))
            j = start >= ja
            e = start + (wj[i] if j else wk[i])
            heapq.heappush(free, e)
            ends.append(e)
            js.append(j)
        end[g, :len(ends)] = ends
        joined[g, :len(js)] = js
    return end, joined


class TilePolicy:
    """The token-centric scheduler's GEMM policy for every GPU (one row per GPU), with the per-tile work
    fixed; call it with the tiles' ready times (again as more become ready) to get :class:`GemmTimes`.

    * ``ready`` ``(G, NT)``: each tile's ready time (the token tracker's ready event), ascending along a row
      (the order the tiles left the table), ``inf`` for tiles not ready yet (or padding), at the end.
    * **GEMM-1** runs on the dispatch-side pool, ``workers1`` workers, tiles first come first served in ready
      order, each on the first free worker for ``w1`` (per tile, broadcastable to ``ready``).
    * **GEMM-2** runs on the combine-side pool, ``workers2`` workers, first come first served in GEMM-1
      completion order (ties: ready order), ``w2`` per tile, never before ``gemm2_not_before`` (per GPU;
      a phase barrier such as COMET's; ``inf`` holds every GEMM-2 back).
    * **Pool join** (work conserving): once a GPU has no GEMM-1 left -- all its ``n_tiles`` tiles are ready
      and the last GEMM-1 has ended, and not before ``join_not_before`` (when the GPU learns its tile count,
      the count exchange) -- its GEMM-1 SMs join the GEMM-2 pool: a GEMM-2 that starts from then on takes
      ``w2_joined``. ``w2_joined=None`` or ``n_tiles=None``: the pools never join.
    * A tile's tokens are released for combine when its GEMM-2 ends (``gemm2_end``, the table's DONE).

    Times are in any unit (the closed loop uses cycles, the estimator seconds). The result is causal: a
    tile's times depend only on tiles that became ready before it, plus the join, which only changes tiles
    starting after the GPU's last ready, so times already in the past never change as more tiles become
    ready. With one worker per pool every step is a vectorised max-plus scan (the estimator's case; the
    running sums of the work are kept between calls); more workers take an exact loop per tile.
    """

    def __init__(self, w1, w2, w2_joined=None, *, workers1: int = 1, workers2: int = 1):
        for name, k in (("workers1", workers1), ("workers2", workers2)):
            if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
                raise ValueError(f"{name} must be a positive integer, got {k!r}")
        self.w1 = np.asarray(w1, dtype=np.float64)
        self.w2 = np.asarray(w2, dtype=np.float64)
        self.w2_joined = None if w2_joined is None else np.asarray(w2_joined, dtype=np.float64)
        self.workers1, self.workers2 = int(workers1), int(workers2)
        self._sums = {}

    def _scan(self, which):
        """maxplus_scan of the fixed work ``which`` with its running sums cached per shape."""
        def scan(avail, work):
            key = (which, avail.shape)
            if key not in self._sums:
                c = np.cumsum(work, axis=1)
                self._sums[key] = (c, c - work)
            c, c_prev = self._sums[key]
            with np.errstate(invalid="ignore"):
                return c + np.maximum.accumulate(avail - c_prev, axis=1)
        return scan

    def __call__(self, ready, *, n_tiles=None, join_not_before=0.0, gemm2_not_before=None) -> GemmTimes:
        r = np.atleast_2d(np.asarray(ready, dtype=np.float64))
        G, NT = r.shape
        a1 = np.broadcast_to(self.w1, r.shape)
        a2 = np.broadcast_to(self.w2, r.shape)
        f1, _ = _fifo(r, a1, self.workers1, scan=self._scan("w1"))
        # GEMM-2 takes tiles in GEMM-1 completion order; with one GEMM-1 worker that is the ready order.
        order = None
        scan2 = self._scan("w2")
        if self.workers1 > 1:
            order = np.argsort(f1, axis=1, kind="stable")
            avail = np.take_along_axis(f1, order, axis=1)
            a2 = np.take_along_axis(a2, order, axis=1)
            scan2 = maxplus_scan
        else:
            avail = f1
        if gemm2_not_before is not None:
            avail = np.maximum(avail, np.broadcast_to(np.asarray(gemm2_not_before, dtype=np.float64), (G,))[:, None])
        join_at = wj = None
        if self.w2_joined is not None and n_tiles is not None:
            wj = np.broadcast_to(self.w2_joined, r.shape)
            if order is not None:
                wj = np.take_along_axis(wj, order, axis=1)
            all_ready = np.isfinite(r).sum(axis=1) >= np.broadcast_to(np.asarray(n_tiles), (G,))
            if all_ready.any():
                f1_last = np.max(np.where(np.isfinite(f1), f1, -np.inf), axis=1, initial=-np.inf)
                join_at = np.where(all_ready, np.maximum(f1_last, np.broadcast_to(
                    np.asarray(join_not_before, dtype=np.float64), (G,))), np.inf)
        f2, joined = _fifo(avail, a2, self.workers2, join_at, wj, scan=scan2)
        s2 = f2 - np.where(joined, wj, a2) if join_at is not None else f2 - a2
        if order is not None:
            inv = np.argsort(order, axis=1)
            f2, joined, s2 = (np.take_along_axis(v, inv, axis=1) for v in (f2, joined, s2))
        return GemmTimes(f1 - a1, f1, s2, f2, joined)


def tile_gemm_times(ready, w1, w2, w2_joined=None, *, workers1: int = 1, workers2: int = 1, n_tiles=None,
                    join_not_before=0.0, gemm2_not_before=None) -> GemmTimes:
    """:class:`TilePolicy` in one call: ``TilePolicy(w1, w2, w2_joined, workers1=, workers2=)(ready, ...)``."""
    return TilePolicy(w1, w2, w2_joined, workers1=workers1, workers2=workers2)(
        ready, n_tiles=n_tiles, join_not_before=join_not_before, gemm2_not_before=gemm2_not_before)


# ---------------------------------------------------------------------------------------------------------
# Dispatch timing

@dataclasses.dataclass(frozen=True)
class Arrival:
    """(token, local expert) reaching a GPU: presented to the table at ``time``."""
    time: int
    token: int
    expert: int      # local expert index on this GPU
    slot: int        # position among the expert's tokens (arrival order)
    tile: int


def _homes(tokens, gpus, home):
    if home is None:
        return (np.arange(tokens) * gpus) // max(1, tokens)
    home = np.asarray(home)
    if home.shape != (tokens,):
        raise ValueError(f"home must have one GPU per token ({tokens}), got shape {home.shape}")
    return home


def local_experts(placement, gpus) -> list[list[int]]:
    """Global expert ids hosted by each GPU, ascending (local index = position in the list)."""
    placement = np.asarray(placement)
    return [sorted(int(e) for e in np.nonzero(placement == g)[0]) for g in range(gpus)]


def dispatch_arrivals(routing, placement, gpus: int, *, tile_size: int = 128, row_flits: int = 463,
                      max_payload: int = 16, links: int = 1, switch_latency: int = 5, rx_latency: int = 20,
                      mode: str = "dynamic", home=None) -> list[list[Arrival]]:
    """Arrivals at every GPU for one dispatch (see the module docstring for the timing rules)."""
    routing = np.asarray(routing)
    placement = np.asarray(placement)
    if mode not in ("dynamic", "unicast"):
        raise ValueError(f"mode must be 'dynamic' or 'unicast', got {mode!r}")
    n_tokens = routing.shape[0]
    homes = _homes(n_tokens, gpus, home)
    if links < 1:
        raise ValueError(f"links must be >= 1, got {links}")
    wire = math.ceil((row_flits + math.ceil(row_flits / max_payload)) / links)
    up_free = [0] * gpus
    copies = []                                    # (time at the switch output, token, destination)
    rows, where = routing.tolist(), placement.tolist()     # Python ints: the loops below read these
    homes = homes.tolist()
    for x in range(n_tokens):
        s = homes[x]
        dests = sorted({where[e] for e in rows[x]})
        if mode == "dynamic":
            up_free[s] += wire
            copies.extend((up_free[s] + switch_latency, x, g) for g in dests)
        else:
            for g in dests:
                up_free[s] += wire
                copies.append((up_free[s] + switch_latency, x, g))
    copies.sort()
    down_free = [0] * gpus
    landed = [[] for _ in range(gpus)]
    for t, x, g in copies:
        end = max(t, down_free[g] + wire)
        down_free[g] = end
        landed[g].append((end + rx_latency, x))
    lb = _log2(tile_size, "tile_size")
    local = local_experts(placement, gpus)
    out = []
    for g in range(gpus):
        rank = {e: i for i, e in enumerate(local[g])}
        slots = [0] * len(local[g])
        arrivals = []
        for t, x in sorted(landed[g]):
            for e in sorted({e for e in rows[x] if where[e] == g}):
                le = rank[e]
                arrivals.append(Arrival(t, x, le, slots[le], slots[le] >> lb))
                slots[le] += 1
        out.append(arrivals)
    return out


# ---------------------------------------------------------------------------------------------------------
# The surroundings of one GPU's table, and the closed loop

class TrackerEnvironment:
    """Arrival source, command source and GEMM engine around one table, cycle by cycle.

    Each cycle: :meth:`inputs` gives the (arrival, cmd) to present (None = valid low); after the cycle,
    :meth:`observe` takes the :class:`StepResult` (from the model, or built from the RTL's signals).
    Ready and release are always accepted. The GEMM engine is :func:`tile_gemm_times` on the tiles ready so
    far (recomputed after ready events, from the first cycle whose command they could change: :meth:`_current`;
    it is causal, so a DONE that is due never moves), with
    ``dispatch_workers``/``combine_workers`` workers and the pool join of :class:`SchedulerParams`. A tile's
    DONE is presented from its GEMM-2 end; commands due at once go earliest first, an ``EXPECT`` before a
    ``DONE``, DONEs in GEMM-2 order. Records: ``ready_at``, ``gemm1``/``gemm2`` (start, end), ``done_at``
    (DONE accepted), ``released`` ((expert, tile, slot) -> cycle), ``accepted`` (arrival i -> cycle),
    ``errors``.
    """

    def __init__(self, arrivals: list[Arrival], expects: list[tuple[int, int, int]], params: SchedulerParams):
        self.p = params
        self.arrivals = list(arrivals)
        self.next_arrival = 0
        self.expects = list(expects)
        self.cmds = []              # heap of (time, seq, cmd): the EXPECT commands
        for seq, (t, e, n) in enumerate(self.expects):
            heapq.heappush(self.cmds, (t, seq, (EXPECT, e, 0, n)))
        # The pool join needs the GPU's tile count, known from the count exchange (the EXPECT totals).
        self.n_tiles = sum(-(-n // params.tile_size) for _, _, n in self.expects) if self.expects else None
        self.totals_known_at = max((t for t, _, _ in self.expects), default=0)
        self.order = []             # tile keys in ready order
        self._ready = []
        self._w = []                # per tile (GEMM-1, GEMM-2, GEMM-2 joined) cycles
        self._times = None          # GemmTimes of the tiles ready so far
        self._dirty = False
        self._exact_before = None   # while dirty: the DONEs due before this cycle are the same as without the
        #                             tiles ready since the last update (:meth:`_current`)
        self._due = []              # DONEs not yet accepted: (GEMM-2 end, GEMM-1 end, ready position), sorted
        self._done = set()          # ready positions whose DONE was accepted
        self.ready_at = {}
        self.tile_tokens = {}
        self.done_at = {}
        self.released = {}
        self.accepted = [None] * len(self.arrivals)
        self.errors = collections.Counter()
        self.current_cmd = None
        self._cmd_is_done = False

    def _tile_time(self, base, n):
        if self.p.scale_partial_tiles:
            return max(1, math.ceil(base * n / self.p.tile_size))
        return base

    def _update(self):
        """Re-run the GEMM policy on the tiles ready so far."""
        if not self._dirty:
            return
        self._dirty = False
        self._exact_before = None
        p = self.p
        w = np.array(self._w, dtype=np.float64).reshape(-1, 3)
        self._times = tile_gemm_times(np.array(self._ready, dtype=np.float64)[None, :], w[None, :, 0],
                                      w[None, :, 1], w[None, :, 2] if p.join_pools else None,
                                      workers1=p.dispatch_workers, workers2=p.combine_workers,
                                      n_tiles=self.n_tiles, join_not_before=self.totals_known_at)
        f1, f2 = self._times.gemm1_end[0], self._times.gemm2_end[0]
        self._due = sorted((int(f2[i]), int(f1[i]), i) for i in range(len(self.order)) if i not in self._done)

    def _times_of(self, start, end):
        self._update()
        if self._times is None:
            return {}
        s, e = start(self._times)[0], end(self._times)[0]
        return {key: (int(s[i]), int(e[i])) for i, key in enumerate(self.order)}

    @property
    def gemm1(self) -> dict:
        """Tile key -> (GEMM-1 start, end) cycles."""
        return self._times_of(lambda t: t.gemm1_start, lambda t: t.gemm1_end)

    @property
    def gemm2(self) -> dict:
        """Tile key -> (GEMM-2 start, end) cycles; the end is when its DONE is due."""
        return self._times_of(lambda t: t.gemm2_start, lambda t: t.gemm2_end)

    def _current(self, cycle):
        """The GEMM policy brought up to date where cycle ``cycle``'s command could differ. A tile that became
        ready at ``r`` ends its GEMM-1 at ``r`` + its GEMM-1 time at the earliest; the policy being first come,
        first served, only DONEs after that end can differ (tiles behind it in GEMM-2 order start after it,
        the pool join comes after the last GEMM-1), so before it the DONEs due are the ones already known."""
        if self._dirty and cycle >= self._exact_before:
            self._update()

    def inputs(self, cycle):
        self._current(cycle)
        arrival = None
        if self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival].time <= cycle:
            a = self.arrivals[self.next_arrival]
            arrival = (a.expert, a.tile)
        expect = self.cmds[0] if self.cmds and self.cmds[0][0] <= cycle else None
        done = self._due[0] if self._due and self._due[0][0] <= cycle else None
        self._cmd_is_done = done is not None and (expect is None or done[0] < expect[0])
        if self._cmd_is_done:
            key = self.order[done[2]]
            self.current_cmd = (DONE, key[0], key[1], 0)
        else:
            self.current_cmd = expect[2] if expect is not None else None
        return arrival, self.current_cmd

    def observe(self, cycle, r: StepResult) -> None:
        if r.arrival_taken:
            self.accepted[self.next_arrival] = cycle
            self.next_arrival += 1
        if r.cmd_taken:
            if self._cmd_is_done:
                i = self._due.pop(0)[2]
                self._done.add(i)
                self.done_at[self.order[i]] = cycle
            else:
                heapq.heappop(self.cmds)
        if r.ready_taken:
            e, t, n = r.ready
            key = (e, t)
            self.ready_at[key] = cycle
            self.tile_tokens[key] = n
            p = self.p
            self.order.append(key)
            self._ready.append(cycle)
            w1 = self._tile_time(p.gemm1_tile_cycles, n)
            self._w.append((w1, self._tile_time(p.gemm2_tile_cycles, n), self._tile_time(p.gemm2_joined_cycles, n)))
            self._exact_before = cycle + w1 if self._exact_before is None else min(self._exact_before, cycle + w1)
            self._dirty = True
        if r.release_taken:
            e, t, slot, _ = r.release
            self.released[(e, t, slot)] = cycle
        if r.error:
            self.errors[r.error] += 1

    def next_event(self):
        """Earliest future cycle at which the inputs can change (None: nothing left); with tiles ready since
        the policy's last update, no later than the cycle from which it must be updated (:meth:`_current`)."""
        times = [self._exact_before] if self._dirty else []
        if self.next_arrival < len(self.arrivals):
            times.append(self.arrivals[self.next_arrival].time)
        if self.cmds:
            times.append(self.cmds[0][0])
        if self._due:
            times.append(self._due[0][0])
        return min(times) if times else None


def run_tracker(model: TileTableModel, env: TrackerEnvironment, *, max_cycles: int = 10 ** 10) -> int:
    """Run the closed loop until nothing is left; idle stretches are skipped, and so are stretches of
    releases alone (:func:`_release_run`, the same records as stepping them). Returns the last cycle."""
    cycle = 0
    last = 0
    while cycle < max_cycles:
        arrival, cmd = env.inputs(cycle)
        if arrival is None and cmd is None:
            if model.quiescent():
                nxt = env.next_event()
                if nxt is None:
                    return last
                cycle = max(cycle + 1, nxt)
                continue
            k = _release_run(model, env, cycle, max_cycles)
            if k:
                last = cycle + k - 1
                cycle += k
                continue
        env.observe(cycle, model.step(arrival, cmd))
        last = cycle
        cycle += 1
    raise RuntimeError(f"the tracker loop did not finish within {max_cycles} cycles")


def _release_run(model: TileTableModel, env: TrackerEnvironment, cycle: int, max_cycles: int) -> int:
    """Cycles from ``cycle`` (whose inputs are both invalid) in which the table does nothing but present its
    head release job's next slots, applied at once; 0 where the table does more. With nothing in its
    pipeline (no operation picked, no tile's last release just issued, no ready item queued) and no input
    until the environment's next event, each such cycle releases one slot (always accepted), changes
    nothing else in the table, and only adds that slot's cycle to the environment's ``released``; the run
    ends at the job's last slot (which issues the tile) or before the next event."""
    if model.s1 is not None or model.iss is not None or model.readyq or not model.relq:
        return 0
    e, t, n = model.relq[0]
    k = n - model.rel_slot
    nxt = env.next_event()
    if nxt is not None:
        k = min(k, nxt - cycle)
    k = min(k, max_cycles - cycle)
    if k <= 0:
        return 0
    s0 = model.rel_slot
    released = env.released
    for i in range(k):
        released[(e, t, s0 + i)] = cycle + i
    if s0 + k == n:
        model.relq.popleft()
        model.rel_slot = 0
        model.iss = (e, t)
    else:
        model.rel_slot = s0 + k
    return k


# ---------------------------------------------------------------------------------------------------------
# The whole layer

@dataclasses.dataclass
class TileRecord:
    gpu: int
    expert: int          # local expert index on ``gpu``
    tile: int
    tokens: int
    ready: int           # cycle the tile left the table (GEMM-1 trigger)
    gemm1: tuple[int, int]
    gemm2: tuple[int, int]
    done: int            # DONE accepted by the table
    release_first: int
    release_last: int


@dataclasses.dataclass
class Schedule:
    params: SchedulerParams
    gpus: int
    arrivals: list[list[Arrival]]
    tiles: list[TileRecord]
    combine_ready: np.ndarray        # per token: all its partial results released (+ notify), -1 if no experts
    combine_issue: np.ndarray        # per token: its combine issue cycle at its home GPU
    table_errors: collections.Counter
    environments: list[TrackerEnvironment]

    @property
    def dispatch_end(self) -> int:
        return max((a[-1].time for a in self.arrivals if a), default=0)

    @property
    def makespan(self) -> int:
        return int(self.combine_issue.max()) if self.combine_issue.size else 0

    def summary(self) -> dict:
        tiles = self.tiles
        return {
            "gpus": self.gpus,
            "tokens": int(self.combine_issue.size),
            "tiles": len(tiles),
            "partial_tiles": sum(r.tokens < self.params.tile_size for r in tiles),
            "dispatch_end": self.dispatch_end,
            "first_ready": min((r.ready for r in tiles), default=0),
            "last_ready": max((r.ready for r in tiles), default=0),
            "last_gemm2_end": max((r.gemm2[1] for r in tiles), default=0),
            "first_combine_issue": int(self.combine_issue.min()) if self.combine_issue.size else 0,
            "makespan": self.makespan,
            "table_errors": dict(self.table_errors),
        }


def expected_totals(arrivals: list[Arrival], experts: int) -> list[int]:
    totals = [0] * experts
    for a in arrivals:
        totals[a.expert] += 1
    return totals


def table_size(arrivals_per_gpu, local_counts, tile_size) -> tuple[int, int]:
    """(experts, tiles) of the smallest power-of-two table that holds every GPU's tiles."""
    experts = 1 << max(0, (max(local_counts) - 1).bit_length())
    most = max((a.tile for arr in arrivals_per_gpu for a in arr), default=0) + 1
    tiles = 1 << max(0, (most - 1).bit_length())
    if experts * tiles < 2:
        tiles = 2
    return experts, tiles


def schedule(routing, placement, gpus: int, params: SchedulerParams | None = None, *, home=None) -> Schedule:
    """Schedule one MoE layer's fused pipeline on every GPU (see the module docstring)."""
    p = params or SchedulerParams()
    routing = np.asarray(routing)
    placement = np.asarray(placement)
    if placement.ndim != 1 or routing.ndim != 2:
        raise ValueError("routing must be (tokens, k) and placement (experts,)")
    if routing.size and (routing.min() < 0 or routing.max() >= placement.size):
        raise ValueError(f"routing names experts outside 0..{placement.size - 1}")
    if placement.size and (placement.min() < 0 or placement.max() >= gpus):
        raise ValueError(f"placement names GPUs outside 0..{gpus - 1}")
    arrivals = dispatch_arrivals(routing, placement, gpus, tile_size=p.tile_size, row_flits=p.row_flits,
                                 max_payload=p.max_payload, links=p.links, switch_latency=p.switch_latency,
                                 rx_latency=p.rx_latency, mode=p.mode, home=home)
    local = local_experts(placement, gpus)
    experts, tiles = table_size(arrivals, [len(l) or 1 for l in local], p.tile_size)
    if p.tiles is not None:
        if p.tiles < tiles:
            raise ValueError(f"tiles={p.tiles} cannot hold the busiest expert's {tiles} tiles")
        tiles = p.tiles
    records = []
    envs = []
    errors = collections.Counter()
    release_time = collections.defaultdict(int)      # token -> latest release of its pairs
    for g in range(gpus):
        totals = expected_totals(arrivals[g], len(local[g]))
        env = TrackerEnvironment(arrivals[g], [(p.expect_cycle, e, n) for e, n in enumerate(totals)], p)
        model = TileTableModel(experts=experts, tiles=tiles, tile_size=p.tile_size, ready_depth=p.ready_depth,
                               release_depth=p.release_depth)
        run_tracker(model, env)
        envs.append(env)
        errors.update(model.errors)
        gemm1, gemm2 = env.gemm1, env.gemm2
        for key, ready in sorted(env.ready_at.items(), key=lambda kv: kv[1]):
            n = env.tile_tokens[key]
            rel = [env.released[(key[0], key[1], s)] for s in range(n)]
            records.append(TileRecord(g, key[0], key[1], n, ready, gemm1[key], gemm2[key],
                                      env.done_at[key], rel[0], rel[-1]))
        for a in arrivals[g]:
            t = env.released[(a.expert, a.tile, a.slot & (p.tile_size - 1))]
            release_time[a.token] = max(release_time[a.token], t)
    n_tokens = routing.shape[0]
    homes = _homes(n_tokens, gpus, home)
    combine_ready = np.full(n_tokens, -1, dtype=np.int64)
    combine_issue = np.full(n_tokens, -1, dtype=np.int64)
    for x, t in release_time.items():
        combine_ready[x] = t + p.notify_cycles
    for h in range(gpus):
        order = sorted((int(combine_ready[x]), x) for x in np.nonzero(homes == h)[0] if combine_ready[x] >= 0)
        free = 0
        for t, x in order:
            start = max(t, free)
            combine_issue[x] = start
            free = start + p.combine_issue_cycles
    return Schedule(p, gpus, arrivals, records, combine_ready, combine_issue, errors, envs)
