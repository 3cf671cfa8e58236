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
    cycles) for the tracker part of the pipeline, which is what makes the scheduler cycle-level there.

``TrackerEnvironment``
    Everything around one GPU's table: the arrival source, the command source (``EXPECT`` totals at the
    count exchange, ``DONE`` at GEMM-2 completion) and the GEMM engine. The scheduler and the cocotb
    testbench use the same object, so the RTL and the model see identical surroundings.

Pipeline rules (what "token-centric" means here)
------------------------------------------------
* A tile is ready when its last token arrives (or, for an expert's partial last tile, when the expected
  total arrives and the tokens are already there): exactly the RTL table's behaviour, cycle for cycle.
* The GEMM engine takes ready tiles as they leave the table (the ``ready`` stream, always accepted) and
  runs GEMM-1 on the first free *dispatch-side* worker (FIFO in ready order), then GEMM-2 on the first
  free *combine-side* worker (FIFO in GEMM-1 completion order). A worker is a group of
  ``sms_per_tile`` SMs working on one tile, so ``dispatch_sms // sms_per_tile`` tiles run GEMM-1 at
  once. ``gemm1_tile_cycles``/``gemm2_tile_cycles`` are one worker's time for a full tile
  (:func:`tile_gemm_cycles` derives them from a model and a roofline); a partial tile takes the full time
  unless ``scale_partial_tiles``.
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

__all__ = [
    "FREE", "FILLING", "READY", "GEMM2_DONE", "COMBINE_ISSUED", "STATE_NAMES",
    "EXPECT", "DONE", "RETIRE", "CLEAR", "TRACKER_ERRORS",
    "TileTableModel", "StepResult", "Arrival", "SchedulerParams", "TrackerEnvironment", "TileRecord",
    "Schedule", "dispatch_arrivals", "run_tracker", "schedule", "tile_gemm_cycles", "token_row_flits",
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
    ``combine_sms`` (the SM split), ``sms_per_tile`` (SMs in one worker), ``scale_partial_tiles``.
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
    switch_latency: int = 4
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
    def row_wire_flits(self) -> int:
        """Uplink/downlink flits of one token row: payload plus one header flit per packet."""
        return self.row_flits + math.ceil(self.row_flits / self.max_payload)

    @property
    def row_cycles(self) -> int:
        """Cycles one row copy occupies a GPU's links."""
        return math.ceil(self.row_wire_flits / self.links)


def token_row_flits(hidden: int, *, dtype: str = "fp8", flit_bytes: int = 16, meta_flits: int = 1) -> int:
    """Flits of one dispatched token row: the hidden vector (FP8 adds one fp32 scale per 128 channels,
    as DeepSeek sends it; BF16 is 2 B per element) plus ``meta_flits`` of routing metadata."""
    if dtype == "fp8":
        nbytes = hidden + 4 * math.ceil(hidden / 128)
    elif dtype == "bf16":
        nbytes = 2 * hidden
    else:
        raise ValueError(f"dtype must be 'fp8' or 'bf16', got {dtype!r}")
    return math.ceil(nbytes / flit_bytes) + meta_flits


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
                      max_payload: int = 16, links: int = 1, switch_latency: int = 4, rx_latency: int = 20,
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
    for x in range(n_tokens):
        s = int(homes[x])
        dests = sorted({int(placement[e]) for e in routing[x]})
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
            for e in sorted({int(e) for e in routing[x] if int(placement[e]) == g}):
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
    Ready and release are always accepted. Records: ``ready_at``, ``gemm1``/``gemm2`` (start, end),
    ``done_at`` (DONE accepted), ``released`` ((expert, tile, slot) -> cycle), ``accepted`` (arrival i ->
    cycle), ``errors``.
    """

    def __init__(self, arrivals: list[Arrival], expects: list[tuple[int, int, int]], params: SchedulerParams):
        self.p = params
        self.arrivals = list(arrivals)
        self.next_arrival = 0
        self.expects = list(expects)
        self.cmds = []              # heap of (time, seq, cmd)
        self.seq = 0
        for t, e, n in self.expects:
            self._push_cmd(t, (EXPECT, e, 0, n))
        self.g2_jobs = []           # heap of (gemm1 end, seq, tile key, tokens)
        self.w1 = [0] * params.dispatch_workers
        self.w2 = [0] * params.combine_workers
        self.ready_at = {}
        self.tile_tokens = {}
        self.gemm1 = {}
        self.gemm2 = {}
        self.done_at = {}
        self.released = {}
        self.accepted = [None] * len(self.arrivals)
        self.errors = collections.Counter()
        self.current_cmd = None

    def _push_cmd(self, t, cmd):
        heapq.heappush(self.cmds, (t, self.seq, cmd))
        self.seq += 1

    def _tile_time(self, base, n):
        if self.p.scale_partial_tiles:
            return max(1, math.ceil(base * n / self.p.tile_size))
        return base

    def _schedule_gemm2(self, cycle):
        while self.g2_jobs and self.g2_jobs[0][0] <= cycle:
            g1_end, _, key, n = heapq.heappop(self.g2_jobs)
            w = min(range(len(self.w2)), key=lambda i: (self.w2[i], i))
            start = max(g1_end, self.w2[w])
            end = start + self._tile_time(self.p.gemm2_tile_cycles, n)
            self.w2[w] = end
            self.gemm2[key] = (start, end)
            self._push_cmd(end, (DONE, key[0], key[1], 0))

    def inputs(self, cycle):
        self._schedule_gemm2(cycle)
        arrival = None
        if self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival].time <= cycle:
            a = self.arrivals[self.next_arrival]
            arrival = (a.expert, a.tile)
        self.current_cmd = self.cmds[0][2] if self.cmds and self.cmds[0][0] <= cycle else None
        return arrival, self.current_cmd

    def observe(self, cycle, r: StepResult) -> None:
        if r.arrival_taken:
            self.accepted[self.next_arrival] = cycle
            self.next_arrival += 1
        if r.cmd_taken:
            _, _, cmd = heapq.heappop(self.cmds)
            if cmd[0] == DONE:
                self.done_at[(cmd[1], cmd[2])] = cycle
        if r.ready_taken:
            e, t, n = r.ready
            key = (e, t)
            self.ready_at[key] = cycle
            self.tile_tokens[key] = n
            w = min(range(len(self.w1)), key=lambda i: (self.w1[i], i))
            start = max(cycle, self.w1[w])
            end = start + self._tile_time(self.p.gemm1_tile_cycles, n)
            self.w1[w] = end
            self.gemm1[key] = (start, end)
            heapq.heappush(self.g2_jobs, (end, self.seq, key, n))
            self.seq += 1
        if r.release_taken:
            e, t, slot, _ = r.release
            self.released[(e, t, slot)] = cycle
        if r.error:
            self.errors[r.error] += 1

    def next_event(self):
        """Earliest future cycle at which the inputs can change (None: nothing left)."""
        times = []
        if self.next_arrival < len(self.arrivals):
            times.append(self.arrivals[self.next_arrival].time)
        if self.cmds:
            times.append(self.cmds[0][0])
        if self.g2_jobs:
            times.append(self.g2_jobs[0][0])
        return min(times) if times else None


def run_tracker(model: TileTableModel, env: TrackerEnvironment, *, max_cycles: int = 10 ** 10) -> int:
    """Run the closed loop until nothing is left; idle stretches are skipped. Returns the last cycle."""
    cycle = 0
    last = 0
    while cycle < max_cycles:
        arrival, cmd = env.inputs(cycle)
        if arrival is None and cmd is None and model.quiescent():
            nxt = env.next_event()
            if nxt is None:
                return last
            cycle = max(cycle + 1, nxt)
            continue
        env.observe(cycle, model.step(arrival, cmd))
        last = cycle
        cycle += 1
    raise RuntimeError(f"the tracker loop did not finish within {max_cycles} cycles")


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
        for key, ready in sorted(env.ready_at.items(), key=lambda kv: kv[1]):
            n = env.tile_tokens[key]
            rel = [env.released[(key[0], key[1], s)] for s in range(n)]
            records.append(TileRecord(g, key[0], key[1], n, ready, env.gemm1[key], env.gemm2[key],
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
