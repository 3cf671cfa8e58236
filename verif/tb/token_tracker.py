"""cocotb testbench of the Tile Status Table (:mod:`hw.gpu_nic.token_tracker`).

The DUT runs in lockstep with its cycle-exact twin :class:`sim_models.scheduler.TileTableModel`: every
cycle the testbench presents the same inputs to both and compares every output (``arrival.ready``,
``cmd.ready``, the ``ready`` and ``release`` streams' valid and payload). The counters ``err_count`` must
equal the model's at the end.

Tests:

* ``test_random``: random arrivals and commands (with out-of-range and ill-timed ones), random valid gaps
  and random ready stalls on both output streams; checks coverage of every state, error and stall kind.
* ``test_directed``: one scripted scenario per bad-input kind (``DYSHARP_ENV`` ``kind``), with its exact
  expected error count, ready tiles and released tokens.
* ``test_line_rate``: arrivals every cycle, back-to-back to the same entry: one accepted per cycle and
  the tile ready two cycles after its last token.
* ``test_moe``: the closed loop of :func:`sim_models.scheduler.schedule` for one GPU of a DeepSeek-V3
  layer (routing from :mod:`sim_models.routing`) with the RTL in place of the model: every tile's ready
  cycle, GEMM times and every token's release cycle must equal the scheduler's.
"""

import collections

import cocotb

from hw.gpu_nic.token_tracker import TileArrival, TileCommand, TileReady, TokenRelease, TrackerError
from sim_models import scheduler as S

from verif.harness import tbenv
from verif.harness.cycler import Agent, Cycler
from verif.harness.gates import Gate
from verif.harness.structs import pack, unpack


def read_errors(dut) -> dict:
    bits = int(dut.err_count.value)
    return {e.name: (bits >> (32 * e.value)) & 0xFFFFFFFF for e in TrackerError}


class Lockstep(Agent):
    """Drives the DUT from ``presenter(cycle) -> (arrival, cmd)`` (tuples or None; an item presented stays
    presented until taken, which the presenter must honour), steps the model with the same inputs and
    compares all outputs. ``on_step(cycle, result)`` sees each cycle's :class:`StepResult`."""

    def __init__(self, dut, model, presenter, *, ready_stall=0.0, release_stall=0.0, rng=None, on_step=None):
        self.dut = dut
        self.model = model
        self.presenter = presenter
        rng = rng or tbenv.rng("lockstep")
        self.ready_gate = Gate(rng, ready_stall, 2.0)
        self.release_gate = Gate(rng, release_stall, 2.0)
        self.on_step = on_step
        self.arr = self.cmd = None
        self.rr = self.lr = True
        self.cycles = 0
        self.stats = collections.Counter()
        self.last_arrival = None
        dut.arrival__valid.value = 0
        dut.cmd__valid.value = 0
        dut.cmd__payload.value = 0
        dut.arrival__payload.value = 0
        dut.ready__ready.value = 1
        dut.release__ready.value = 1

    def drive(self, cycle):
        d = self.dut
        if cycle == 0:
            # Called during reset; the cycle after reset is not sampled, so present nothing in it.
            return
        self.arr, self.cmd = self.presenter(self.cycles)
        d.arrival__valid.value = int(self.arr is not None)
        if self.arr is not None:
            d.arrival__payload.value = pack(TileArrival, expert=self.arr[0], tile=self.arr[1])
        d.cmd__valid.value = int(self.cmd is not None)
        if self.cmd is not None:
            op, e, t, n = self.cmd
            d.cmd__payload.value = pack(TileCommand, op=op, expert=e, tile=t, count=n)
        self.rr = self.ready_gate.open()
        self.lr = self.release_gate.open()
        d.ready__ready.value = int(self.rr)
        d.release__ready.value = int(self.lr)

    def _dut_outputs(self):
        d = self.dut
        ready = release = None
        if d.ready__valid.value == 1:
            f = unpack(TileReady, d.ready__payload.value)
            ready = (f["expert"], f["tile"], f["count"])
        if d.release__valid.value == 1:
            f = unpack(TokenRelease, d.release__payload.value)
            release = (f["expert"], f["tile"], f["slot"], bool(f["last"]))
        cmd_ready = int(d.cmd__ready.value) == 1 if self.cmd is not None else None
        return int(d.arrival__ready.value) == 1, cmd_ready, ready, release

    def sample(self, cycle):
        arr_ready, cmd_ready, ready, release = self._dut_outputs()
        r = self.model.step(self.arr, self.cmd, self.rr, self.lr)
        # cmd.ready depends on the command's op, so it is only defined while a command is presented.
        got = (arr_ready, cmd_ready, ready, release)
        want = (r.arrival_ready, r.cmd_ready if self.cmd is not None else None, r.ready, r.release)
        if got != want:
            names = ("arrival.ready", "cmd.ready", "ready", "release")
            diff = "; ".join(f"{n}: RTL {g!r}, model {w!r}" for n, g, w in zip(names, got, want) if g != w)
            raise AssertionError(f"cycle {self.cycles}: RTL and model disagree: {diff} "
                                 f"(inputs arrival={self.arr}, cmd={self.cmd}, ready.ready={self.rr}, "
                                 f"release.ready={self.lr})")
        if r.arrival_taken:
            self.stats["arrivals"] += 1
            if self.last_arrival == (self.cycles - 1, self.arr):
                self.stats["back_to_back_same_entry"] += 1
            self.last_arrival = (self.cycles, self.arr)
        elif self.arr is not None:
            self.stats["arrival_stalled"] += 1
        if self.cmd is not None and not r.cmd_taken:
            self.stats["cmd_stalled"] += 1
        if r.ready is not None and not r.ready_taken:
            self.stats["ready_stalled"] += 1
        if r.release is not None and not r.release_taken:
            self.stats["release_stalled"] += 1
        self.stats["ready"] += r.ready_taken
        self.stats["released"] += r.release_taken
        if self.on_step:
            self.on_step(self.cycles, r)
        self.cycles += 1


def check_errors(dut, model):
    got = read_errors(dut)
    want = {name: model.errors.get(name, 0) for name in S.TRACKER_ERRORS}
    assert got == want, f"err_count {got}, model {want}"
    return got


def new_model(p):
    return S.TileTableModel(experts=p["experts"], tiles=p["tiles"], tile_size=p["tile_size"],
                            ready_depth=p["ready_depth"], release_depth=p["release_depth"])


# ---------------------------------------------------------------------------------------------------------

class RandomPresenter:
    """Random arrivals and commands, biased towards meaningful ones by peeking at the model's state."""

    def __init__(self, model, rng, *, arrival_rate, cmd_rate, bad_rate):
        self.m = model
        self.rng = rng
        self.arrival_rate, self.cmd_rate, self.bad_rate = arrival_rate, cmd_rate, bad_rate
        self.arr = self.cmd = None
        self.stop = False

    def _pick(self, states):
        m = self.m
        idx = [i for i, s in enumerate(m.state) if s in states]
        if not idx:
            return None
        i = self.rng.choice(idx)
        return i // m.tiles, i % m.tiles

    def _arrival(self):
        m, rng = self.m, self.rng
        if rng.random() < self.bad_rate:
            return (rng.randrange(m.experts, 256), 0) if rng.random() < 0.5 else \
                (rng.randrange(m.experts), rng.randrange(m.tiles, 256))
        # Mostly the lowest non-ready tile of an expert (tiles fill in order), sometimes anything.
        e = rng.randrange(m.experts)
        if rng.random() < 0.8:
            for t in range(m.tiles):
                if m.state[e * m.tiles + t] in (S.FREE, S.FILLING):
                    return e, t
        return e, rng.randrange(m.tiles)

    def _cmd(self):
        m, rng = self.m, self.rng
        r = rng.random()
        if r < 0.35:
            key = self._pick((S.READY,))
            if key:
                return (S.DONE, key[0], key[1], 0)
        elif r < 0.65:
            key = self._pick((S.COMBINE_ISSUED,))
            if key:
                return (S.RETIRE, key[0], key[1], 0)
        elif r < 0.8:
            e = rng.randrange(m.experts)
            return (S.EXPECT, e, 0, rng.randrange(0, m.tiles * m.tile_size + 2))
        elif r < 0.9:
            return (S.CLEAR, rng.randrange(m.experts + (rng.random() < self.bad_rate)), 0, 0)
        e = rng.randrange(m.experts + 1)
        t = rng.randrange(m.tiles + 1)
        return (rng.choice((S.DONE, S.RETIRE)), e, t, 0)

    def __call__(self, cycle):
        if self.arr is None and not self.stop and self.rng.random() < self.arrival_rate:
            self.arr = self._arrival()
        if self.cmd is None and not self.stop and self.rng.random() < self.cmd_rate:
            self.cmd = self._cmd()
        return self.arr, self.cmd

    def taken(self, cycle, r):
        if r.arrival_taken:
            self.arr = None
        if r.cmd_taken:
            self.cmd = None


@cocotb.test()
async def test_random(dut):
    s = tbenv.settings()
    p = tbenv.params()
    model = new_model(p)
    pres = RandomPresenter(model, tbenv.rng("stim"), arrival_rate=s.get("arrival_rate", 0.8),
                           cmd_rate=s.get("cmd_rate", 0.15), bad_rate=s.get("bad_rate", 0.03))
    ls = Lockstep(dut, model, pres, ready_stall=s.get("stall", 0.3), release_stall=s.get("stall", 0.3),
                  on_step=pres.taken)
    states_seen = set()

    def watch(cycle):
        states_seen.update(model.state)
    cyc = Cycler(dut)
    cyc.add(ls)
    cyc.watchers.append(watch)
    await cyc.start()
    await cyc.cycles(s.get("cycles", 3000))
    pres.stop = True
    await cyc.until(lambda: pres.arr is None and pres.cmd is None and model.quiescent(), timeout=500,
                    what="the table to drain")
    await cyc.cycles(3)
    errors = check_errors(dut, model)
    dut._log.info(f"stats {dict(ls.stats)}; errors {errors}; states {sorted(states_seen)}")
    assert states_seen >= set(range(5)), f"not every tile state was reached: {sorted(states_seen)}"
    missing = [k for k, v in errors.items() if v == 0]
    assert not missing, f"error kinds never exercised: {missing}"
    need = ["ready", "released", "arrival_stalled", "cmd_stalled", "back_to_back_same_entry"]
    if s.get("stall", 0.3):
        need += ["ready_stalled", "release_stalled"]
    for k in need:
        assert ls.stats[k] > 0, f"coverage: {k} never happened ({dict(ls.stats)})"


# ---------------------------------------------------------------------------------------------------------
# Directed scenarios: (steps, expected errors, expected ready tiles, expected released tiles).
# A step is ("arr", expert, tile) or ("cmd", op, expert, tile, count) and is presented once the previous
# step was taken. Parameters: experts=4, tiles=4, tile_size=4.

def _fill(e, t, n):
    return [("arr", e, t)] * n


def scenarios(E, T, L):
    A, C = "arr", "cmd"
    sc = {}
    # Arrivals/commands naming an expert or tile that does not exist, or a tile past the known total.
    sc["unknown_tile"] = (
        [(A, E, 0), (A, 0, T), (A, 255, 255), (C, S.EXPECT, 0, 0, T * L + 1), (C, S.DONE, E, 0, 0),
         (C, S.RETIRE, 0, T, 0), (C, S.CLEAR, E, 0, 0), (C, S.EXPECT, 0, 0, L + 1), (A, 0, 2)]
        + _fill(0, 0, L) + _fill(0, 1, 1),
        {"UNKNOWN_TILE": 8},
        [(0, 0, L), (0, 1, 1)], [])
    # More arrivals than a tile holds; an expected total below what already arrived.
    sc["overflow"] = (
        _fill(0, 0, L) + [(A, 0, 0)] + _fill(1, 0, 3) + [(C, S.EXPECT, 1, 0, 2), (A, 1, 0),
                                                           (C, S.EXPECT, 2, 0, L + 2)] + _fill(2, 1, 2)
        + [(A, 2, 1)],
        {"OVERFLOW": 3},
        [(0, 0, L), (1, 0, L), (2, 1, 2)], [])
    # GEMM-2 completion reported twice: while releasing, and after the combine was issued.
    sc["double_done"] = (
        _fill(0, 0, L) + [(C, S.DONE, 0, 0, 0), (C, S.DONE, 0, 0, 0), ("wait", 2 * L + 4),
                          (C, S.DONE, 0, 0, 0), (C, S.RETIRE, 0, 0, 0)] + _fill(0, 0, L)
        + [(C, S.DONE, 0, 0, 0)],
        {"DOUBLE_DONE": 2},
        [(0, 0, L), (0, 0, L)], [(0, 0, L), (0, 0, L)])
    # GEMM-2 completion for a free tile and for a filling one; the tile then completes normally.
    sc["not_ready"] = (
        [(C, S.DONE, 1, 2, 0)] + _fill(1, 2, L - 1) + [(C, S.DONE, 1, 2, 0), (A, 1, 2),
                                                         (C, S.DONE, 1, 2, 0)],
        {"NOT_READY": 2},
        [(1, 2, L)], [(1, 2, L)])
    # Retiring a tile before its combine was issued; a second, different total for an expert.
    sc["bad_retire_expect"] = (
        [(C, S.RETIRE, 3, 0, 0)] + _fill(3, 0, L) + [(C, S.RETIRE, 3, 0, 0), (C, S.EXPECT, 3, 0, L + 1),
                                                      (C, S.EXPECT, 3, 0, L + 1), (C, S.EXPECT, 3, 0, 7),
                                                      (C, S.CLEAR, 3, 0, 0), (C, S.EXPECT, 3, 0, L + 3)]
        + _fill(3, 1, 3),
        {"BAD_RETIRE": 2, "BAD_EXPECT": 1},
        [(3, 0, L), (3, 1, 3)], [])
    # The expected total arrives after the partial last tile's tokens: ready at EXPECT time.
    sc["late_expect"] = (
        _fill(2, 0, L) + _fill(2, 1, 2) + [("wait", 10), (C, S.EXPECT, 2, 0, L + 2), (C, S.EXPECT, 1, 0, 0),
                                           (A, 1, 0)],
        {"UNKNOWN_TILE": 1},
        [(2, 0, L), (2, 1, 2)], [])
    return sc


class ScriptPresenter:
    def __init__(self, steps):
        self.steps = list(steps)
        self.i = 0
        self.wait_until = None
        self.arr = self.cmd = None

    @property
    def finished(self):
        return self.i >= len(self.steps) and self.arr is None and self.cmd is None

    def __call__(self, cycle):
        if self.arr is None and self.cmd is None and self.i < len(self.steps):
            step = self.steps[self.i]
            if step[0] == "wait":
                if self.wait_until is None:
                    self.wait_until = cycle + step[1]
                if cycle >= self.wait_until:
                    self.wait_until = None
                    self.i += 1
                return None, None
            self.i += 1
            if step[0] == "arr":
                self.arr = step[1:]
            else:
                self.cmd = step[1:]
        return self.arr, self.cmd

    def taken(self, cycle, r):
        if r.arrival_taken:
            self.arr = None
        if r.cmd_taken:
            self.cmd = None


@cocotb.test()
async def test_directed(dut):
    s = tbenv.settings()
    p = tbenv.params()
    steps, errors, readies, releases = scenarios(p["experts"], p["tiles"], p["tile_size"])[s["kind"]]
    model = new_model(p)
    pres = ScriptPresenter(steps)
    got_ready, got_rel = [], collections.defaultdict(list)

    def on_step(cycle, r):
        pres.taken(cycle, r)
        if r.ready_taken:
            got_ready.append(r.ready)
        if r.release_taken:
            got_rel[(r.release[0], r.release[1])].append(r.release)
    ls = Lockstep(dut, model, pres, ready_stall=s.get("stall", 0.3), release_stall=s.get("stall", 0.3),
                  on_step=on_step)
    cyc = Cycler(dut)
    cyc.add(ls)
    await cyc.start()
    await cyc.until(lambda: pres.finished and model.quiescent(), timeout=2000, what="the script")
    await cyc.cycles(5)
    got = read_errors(dut)
    want = {e.name: errors.get(e.name, 0) for e in TrackerError}
    assert got == want, f"{s['kind']}: err_count {got}, expected {want}"
    check_errors(dut, model)
    assert got_ready == readies, f"ready tiles {got_ready}, expected {readies}"
    # Each release group: slots 0..n-1 in order, last on the final one.
    flat = []
    for (e, t), items in got_rel.items():
        k = 0
        while k < len(items):
            n = next(j for j in range(k, len(items)) if items[j][3]) - k + 1
            assert [x[2] for x in items[k:k + n]] == list(range(n)), f"release slots of {(e, t)}: {items}"
            flat.append((e, t, n))
            k += n
    assert sorted(flat) == sorted(releases), f"released tiles {flat}, expected {releases}"


@cocotb.test()
async def test_line_rate(dut):
    """Arrivals every cycle, back to back to the same entry: none refused, ready two cycles after the
    tile's last arrival."""
    p = tbenv.params()
    E, T, L = p["experts"], p["tiles"], p["tile_size"]
    model = new_model(p)
    order = [(e, t) for e in range(E) for t in range(T)][:8]
    seq = [key for key in order for _ in range(L)]
    state = {"i": 0}
    accepted, ready_cycle, all_accepts = {}, {}, []

    def present(cycle):
        return (seq[state["i"]] if state["i"] < len(seq) else None), None

    def on_step(cycle, r):
        if r.arrival_taken:
            accepted[seq[state["i"]]] = cycle
            all_accepts.append(cycle)
            state["i"] += 1
        elif state["i"] < len(seq):
            raise AssertionError(f"cycle {cycle}: arrival {seq[state['i']]} refused at line rate")
        if r.ready_taken:
            ready_cycle[r.ready[:2]] = cycle
    ls = Lockstep(dut, model, present, on_step=on_step)
    cyc = Cycler(dut)
    cyc.add(ls)
    await cyc.start()
    await cyc.until(lambda: len(ready_cycle) == len(order), timeout=len(seq) + 50, what="all tiles ready")
    lat = {k: ready_cycle[k] - accepted[k] for k in order}
    assert set(lat.values()) == {2}, f"last arrival -> ready latencies {lat}"
    assert all_accepts == list(range(all_accepts[0], all_accepts[0] + len(seq))), "arrivals not back to back"


# ---------------------------------------------------------------------------------------------------------

def moe_schedule(s, p):
    """The scheduler's run for the test's configuration (DeepSeek-V3 routing over ``gpus`` GPUs), with the
    table sized like the DUT."""
    import numpy as np

    from sim_models import moe_config, routing
    cfg = moe_config.load_model(s.get("model", "deepseek-v3"))
    gpus = s.get("gpus", 8)
    tokens = s.get("tokens_per_gpu", 64) * gpus
    rng = np.random.default_rng(tbenv.seed())
    rt = routing.uniform_topk(tokens, cfg.routed_experts, cfg.top_k, rng)
    pl = routing.place_experts(cfg.routed_experts, gpus)
    params = S.SchedulerParams(tile_size=p["tile_size"], tiles=p["tiles"], ready_depth=p["ready_depth"],
                               release_depth=p["release_depth"], **s["sched"])
    return S.schedule(rt, pl, gpus, params)


def _first_difference(a, b):
    keys = sorted(set(a) | set(b)) if isinstance(a, dict) else range(max(len(a), len(b)))
    for k in keys:
        x = a.get(k) if isinstance(a, dict) else (a[k] if k < len(a) else None)
        y = b.get(k) if isinstance(b, dict) else (b[k] if k < len(b) else None)
        if x != y:
            return k, x, y
    return None


@cocotb.test()
async def test_moe(dut):
    s = tbenv.settings()
    p = tbenv.params()
    sched = moe_schedule(s, p)
    g = s.get("gpu", 0)
    ref = sched.environments[g]
    env = S.TrackerEnvironment(ref.arrivals, ref.expects, sched.params)
    model = new_model(p)
    ls = Lockstep(dut, model, env.inputs, on_step=env.observe)
    cyc = Cycler(dut)
    cyc.add(ls)
    await cyc.start()
    n_tiles = len(ref.ready_at)
    await cyc.until(lambda: len(env.done_at) == n_tiles and model.quiescent() and env.next_event() is None,
                    timeout=s.get("timeout", 100000), what=f"GPU {g}'s layer")
    for name, a, b in (("ready", env.ready_at, ref.ready_at), ("gemm1", env.gemm1, ref.gemm1),
                       ("gemm2", env.gemm2, ref.gemm2), ("done", env.done_at, ref.done_at),
                       ("release", env.released, ref.released), ("arrival accepted", env.accepted,
                                                                 ref.accepted)):
        diff = _first_difference(a, b)
        if diff:
            raise AssertionError(f"GPU {g}: the RTL's {name} events differ from the scheduler's; first at "
                                 f"{diff[0]}: RTL {diff[1]}, scheduler {diff[2]} ({len(a)} vs {len(b)} events)")
    errors = read_errors(dut)
    assert not any(errors.values()), f"errors on a clean MoE layer: {errors}"
    partial = sum(n < sched.params.tile_size for n in env.tile_tokens.values())
    assert n_tiles > 0 and partial > 0, f"{n_tiles} tiles, {partial} partial: the test covers too little"
    dut._log.info(f"GPU {g}: {len(ref.arrivals)} arrivals, {n_tiles} tiles ({partial} partial), "
                  f"{len(env.released)} releases, last release at cycle {max(env.released.values())}: "
                  f"equal to the scheduler cycle for cycle")
