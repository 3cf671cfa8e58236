"""cocotb testbench of the reduction buffer (:mod:`hw.switch.reduction_buffer`).

The environment allocates reductions through ``alloc``/``grant``, plays the destinations: each one's
contribution packet comes back after a random latency and its flits are released with random jitter, so
contributions interleave across entries, flits and destinations and arrive reordered. The contribution
driver presents due flits with random ``valid`` gaps; ``grant`` and ``out`` see random ``ready`` stalls.
:class:`verif.models.reduction.ReductionBufferModel` is told of every accepted contribution in acceptance
order and predicts every output packet bit-exactly (results reduced in arrival order); a scoreboard keyed
by requester (src, tag) compares, and the status counters are checked against the model at the end.

Settings (``DYSHARP_ENV``): ``requests``, ``gap``, ``stall``, ``lat`` ([lo, hi] response latency),
``jitter`` (per-flit release jitter), ``max_fanout``.
"""

import collections
import heapq

import cocotb
import numpy as np
from amaranth.lib import data

from hw.packet import EType, ErrorCode, Opcode, Packet, RedOp, unpack_flit
from hw.switch.reduction_buffer import AllocRequest, contrib_layout

from verif.harness import tbenv
from verif.harness.cycler import Agent, Cycler
from verif.harness.gates import Gate
from verif.models.reduction import Contribution, ReductionBufferModel, random_lanes
from verif.harness.scoreboard import Scoreboard
from verif.harness.stream import StreamDriver, StreamMonitor, record_cycles


def pack(layout, **fields) -> int:
    layout = data.Layout.cast(layout)
    word = 0
    for k, v in fields.items():
        f = layout[k]
        v = int(getattr(v, "value", v))
        assert 0 <= v < (1 << f.width), (k, v)
        word |= v << f.offset
    return word


class ContribDriver(Agent):
    """Presents scheduled contribution flits on ``contrib`` once due (earliest first), with random gaps;
    holds ``valid``/``payload`` until accepted."""

    def __init__(self, dut, rng, *, gap=0.0, burst=1.0, on_accept=None, prefix="contrib"):
        self.valid = getattr(dut, f"{prefix}__valid")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.gate = Gate(rng, gap, burst)
        self.heap = []
        self.seq = 0
        self.current = None
        self.on_accept = on_accept
        self.accepted = 0
        self.not_ready_cycles = 0
        self.not_ready_at = []        # the cycles counted in not_ready_cycles
        self.valid.value = 0

    def schedule(self, release: int, word: int, item) -> None:
        heapq.heappush(self.heap, (release, self.seq, word, item))
        self.seq += 1

    @property
    def idle(self):
        return self.current is None and not self.heap

    def drive(self, cycle):
        if self.current is None and self.heap and self.heap[0][0] <= cycle and self.gate.open():
            _, _, word, item = heapq.heappop(self.heap)
            self.current = (word, item)
            self.payload.value = word
            self.valid.value = 1
        elif self.current is None:
            self.valid.value = 0

    def sample(self, cycle):
        if self.current is None:
            return
        if self.ready.value == 1:
            self.accepted += 1
            if self.on_accept:
                self.on_accept(self.current[1], cycle)
            self.current = None
        else:
            self.not_ready_cycles += 1
            self.not_ready_at.append(cycle)


class Request:
    def __init__(self, *, src, tag, etype, op, length, expected, contributions, latencies):
        self.src, self.tag = src, tag
        self.etype, self.op = EType(etype), RedOp(op)
        self.length, self.expected = length, expected
        self.contributions = contributions     # [destination][flit] -> int
        self.latencies = latencies
        self.rtag = None
        self.grant_cycle = None
        # Fault injection, applied when the contributions are scheduled.
        self.withhold = set()                  # destinations that never answer
        self.bad = None                        # (destination, flit, field overrides) for a mismatch
        self.abort_code = None                 # send an abort at this destination's time instead
        self.expect_timeout = False


class BufferEnv:
    def __init__(self, dut, *, gap=0.0, stall=0.0, burst=1.5, jitter=3):
        self.dut = dut
        self.p = p = tbenv.params()
        self.W = p["flit_width"]
        self.entries = p["entries"]
        self.rng = np.random.default_rng(tbenv.seed())
        self.cycler = Cycler(dut)
        self.model = ReductionBufferModel(self.W)
        self.sb = Scoreboard("reduction_buffer")
        self.jitter = jitter
        self.alloc = StreamDriver(dut, "alloc", tbenv.rng("alloc"), gap=gap, burst=burst)
        self.grants = StreamMonitor(dut, "grant", tbenv.rng("grant"), stall=stall, burst=burst,
                                    on_item=self._on_grant)
        self.contrib = ContribDriver(dut, tbenv.rng("contrib"), gap=gap, burst=burst,
                                     on_accept=self._on_contrib)
        self.out = StreamMonitor(dut, "out", tbenv.rng("out"), stall=stall, burst=burst, on_item=self._on_flit)
        self.cycler.add(self.alloc, self.grants, self.contrib, self.out)
        self.pending = collections.deque()
        self.by_key = {}
        self.partial = []
        self.last_contrib_cycle = {}
        self.accepted_log = []        # (cycle, rtag, flit) of every accepted contribution, in order
        self.latencies = []           # (last contribution accepted -> result header) per RED_RESP
        self.error_times = {}         # (src, tag) -> cycle of the ERROR header
        self.packets = 0
        self.max_in_use = 0
        self.in_flight_key = set()
        self.cycler.watchers.append(self._watch)
        self.clayout = contrib_layout(self.W)

    def _watch(self, cycle):
        self.max_in_use = max(self.max_in_use, int(self.dut.in_use.value))

    async def start(self):
        await self.cycler.start()

    # -- stimulus
    def new_request(self, *, etype=None, op=None, length=None, expected=None, lat=(5, 60), max_fanout=8,
                    max_length=None):
        rng = self.rng
        etype = EType(int(rng.integers(0, 5))) if etype is None else EType(etype)
        op = RedOp(int(rng.integers(0, 3))) if op is None else RedOp(op)
        max_length = max_length or self.p["max_length"]
        length = int(rng.integers(1, max_length + 1)) if length is None else length
        expected = int(rng.integers(1, max_fanout + 1)) if expected is None else expected
        key = None
        while key is None or key in self.in_flight_key:
            key = (int(rng.integers(0, 64)), int(rng.integers(0, 256)))
        self.in_flight_key.add(key)
        contribs = [[random_lanes(rng, etype, self.W) for _ in range(length)] for _ in range(expected)]
        lats = [int(rng.integers(lat[0], lat[1] + 1)) for _ in range(expected)]
        return Request(src=key[0], tag=key[1], etype=etype, op=op, length=length, expected=expected,
                       contributions=contribs, latencies=lats)

    def submit(self, req: Request) -> None:
        self.pending.append(req)
        self.by_key[(req.src, req.tag)] = req
        self.alloc.send(pack(AllocRequest, src=req.src, tag=req.tag, etype=req.etype, op=req.op,
                             length=req.length, expected=req.expected))

    def _on_grant(self, word, cycle):
        req = self.pending.popleft()
        req.rtag = word & 0xFFFF
        req.grant_cycle = cycle
        self.model.allocate(req.rtag, src=req.src, tag=req.tag, etype=req.etype, op=req.op, length=req.length,
                            expected=req.expected)
        if req.expect_timeout:
            self.sb.expect((req.src, req.tag), "TIMEOUT")
        self._schedule(req, cycle + 1)

    def _schedule(self, req: Request, t0: int) -> None:
        for d in range(req.expected):
            if d in req.withhold:
                continue
            base = t0 + req.latencies[d]
            if req.abort_code is not None and d == 0:
                self.schedule_flit(base, Contribution(req.rtag, 0, 0, 0, abort=True, code=req.abort_code))
                continue
            order = list(range(req.length))
            for k in order:
                c = Contribution(req.rtag, k, req.length, req.etype.value, req.contributions[d][k])
                if req.bad is not None and req.bad[0] == d and req.bad[1] == k:
                    for name, v in req.bad[2].items():
                        setattr(c, name, v)
                self.schedule_flit(base + k + int(self.rng.integers(0, self.jitter + 1)), c)

    def schedule_flit(self, release: int, c: Contribution) -> None:
        word = pack(self.clayout, rtag=c.rtag, flit=c.flit, length=c.length, etype=c.etype, abort=int(c.abort),
                    code=c.code, data=c.data)
        self.contrib.schedule(release, word, c)

    def _on_contrib(self, c: Contribution, cycle: int) -> None:
        self.last_contrib_cycle[c.rtag] = cycle
        self.accepted_log.append((cycle, c.rtag, c.flit))
        pkt = self.model.contribute(c)
        if pkt is not None:
            self.sb.expect((pkt.header.dst, pkt.header.tag), pkt)

    def _on_flit(self, word, cycle):
        f = unpack_flit(word, self.W)
        self.partial.append((f, cycle))
        if not f.last:
            return
        flits, self.partial = self.partial, []
        pkt = Packet.from_flits([x[0] for x in flits])
        h = pkt.header
        key = (h.dst, h.tag)
        head_cycle = flits[0][1]
        req = self.by_key.get(key)
        self.packets += 1
        if h.opcode == Opcode.ERROR.value and h.code == ErrorCode.TIMEOUT.value and req is not None \
                and req.expect_timeout:
            self.model.time_out(req.rtag)
            self.error_times[key] = head_cycle - req.grant_cycle
            self.sb.observe(key, "TIMEOUT", cycle=cycle)
        else:
            self.sb.observe(key, pkt, cycle=cycle)
            if h.opcode == Opcode.RED_RESP.value and req is not None:
                self.latencies.append(head_cycle - self.last_contrib_cycle[req.rtag])
            elif h.opcode == Opcode.ERROR.value and req is not None:
                self.error_times[key] = head_cycle - req.grant_cycle
        self.in_flight_key.discard(key)

    # -- checks
    def counters(self) -> dict:
        return {n: int(getattr(self.dut, n).value) for n in ("stale", "mismatches", "aborts", "timeouts",
                                                             "completed")}

    async def drain(self, timeout=100000):
        await self.cycler.until(lambda: not self.pending and self.contrib.idle and self.sb.outstanding == 0,
                                timeout=timeout, what=f"all results ({self.sb.outstanding} outstanding, "
                                                      f"{len(self.pending)} waiting for a grant)")
        await self.cycler.cycles(30)
        self.sb.finish()
        assert not self.partial, "a packet was left unterminated on out"
        got = self.counters()
        want = {"stale": self.model.stale, "mismatches": self.model.mismatches, "aborts": self.model.aborts,
                "timeouts": self.model.timeouts, "completed": self.model.completed}
        assert got == want, f"status counters {got}, model expects {want}"
        assert int(self.dut.in_use.value) == 0, f"in_use = {int(self.dut.in_use.value)} after draining"


def _settings_env(dut, **defaults):
    s = dict(defaults)
    s.update(tbenv.settings())
    env = BufferEnv(dut, gap=s["gap"], stall=s["stall"], jitter=s.get("jitter", 3))
    return env, s


@cocotb.test()
async def test_traffic(dut):
    """Many reductions in flight: random types/ops/lengths/fan-outs, reordered interleaved contributions,
    stalls everywhere; every result bit-exact in arrival order."""
    env, s = _settings_env(dut, gap=0.2, stall=0.2)
    await env.start()
    lat = tuple(s.get("lat", [5, 80]))
    for _ in range(s.get("requests", 60)):
        env.submit(env.new_request(lat=lat, max_fanout=s.get("max_fanout", 8)))
    await env.drain()
    dut._log.info(f"{env.model.completed} reductions, max {env.max_in_use} entries in use, "
                  f"{env.contrib.accepted} contribution flits")
    assert env.max_in_use > 4, f"only {env.max_in_use} reductions were in flight at once"


def same_row_waits(accepted_log, acc_stages: int) -> set:
    """The cycles in which ``contrib.ready`` is low because the contribution at stage b waits for an
    operation to its row in the first ``acc_stages - 1`` accumulate stages (the buffer's hazard rule):
    a contribution accepted at ``a`` issues at ``max(a + 1, previous issue to its row + acc_stages)`` and
    holds ``ready`` low from ``a + 1`` until then. Every accepted contribution here is a valid operation."""
    issued = {}
    waits = set()
    for cycle, rtag, flit in accepted_log:
        t = max(cycle + 1, issued.get((rtag, flit), -10) + acc_stages)
        waits.update(range(cycle + 1, t))
        issued[(rtag, flit)] = t
    return waits


@cocotb.test()
async def test_back_to_back(dut):
    """Contributions to the same row on consecutive cycles (single-flit reductions with a wide fan-out,
    all released at once) and to consecutive rows, bit-exact. With ``acc_stages=1`` nothing stalls; with
    3, ``contrib.ready`` drops only in cycles the same-row rule predicts (a contribution to a row whose
    previous operation is 1 or 2 cycles ahead waits), and whole packets of 3 or more flits back to back
    (``min_length=3``: each destination's packet right after the previous one's) never stall."""
    env, s = _settings_env(dut, gap=0.0, stall=0.0, jitter=0)
    stages = env.p.get("acc_stages", 3)
    await env.start()
    lo = s.get("min_length", 1)
    for i in range(s.get("requests", 24)):
        length = lo if i % 2 == 0 else int(env.rng.integers(max(lo, 2), env.p["max_length"] + 1))
        r = env.new_request(length=length, expected=int(env.rng.integers(2, 17)), lat=(40, 40))
        if lo >= 3:     # whole packets back to back: a destination's flits follow the previous one's
            r.latencies = [40 + d * length for d in range(r.expected)]
        else:           # all destinations at once: the same row back to back
            r.latencies = [40] * r.expected
        env.submit(r)
    await env.drain()
    flits = env.contrib.accepted
    predicted = same_row_waits(env.accepted_log, stages)
    stalls = env.contrib.not_ready_at
    assert set(stalls) <= predicted, \
        f"ready dropped outside the same-row rule at {sorted(set(stalls) - predicted)}"
    if stages == 1 or lo >= 3:
        assert not stalls, f"contrib.ready dropped {len(stalls)} times"
    else:
        assert stalls, "no same-row wait: the test did not exercise the hazard"
    dut._log.info(f"{flits} contribution flits, ready low {len(stalls)} cycles")


@cocotb.test()
async def test_same_row_hazard(dut):
    """Single-flit reductions whose destinations answer back to back (the same row 1 and 2 cycles apart)
    under random valid gaps and output stalls: every result bit-exact against the model in arrival order
    (a broken same-row wait or forwarding loses or misorders a contribution), and ``ready`` only drops
    where the same-row rule says."""
    env, s = _settings_env(dut, gap=0.3, stall=0.3, jitter=1)
    stages = env.p.get("acc_stages", 3)
    await env.start()
    for i in range(s.get("requests", 24)):
        r = env.new_request(length=1 if i % 3 else 2, expected=int(env.rng.integers(2, 9)), lat=(20, 22))
        env.submit(r)
    await env.drain()
    predicted = same_row_waits(env.accepted_log, stages)
    assert set(env.contrib.not_ready_at) <= predicted
    if stages > 1:
        assert env.contrib.not_ready_at, "no same-row wait: the test did not exercise the hazard"


@cocotb.test()
async def test_full(dut):
    """More requests than entries with slow responses: ``alloc`` is backpressured (never dropped), the
    buffer fills to ``outstanding`` and everything completes."""
    env, s = _settings_env(dut, gap=0.0, stall=0.1)
    await env.start()
    limit = env.p["outstanding"] or env.entries
    n = limit + s.get("extra", 20)
    for _ in range(n):
        env.submit(env.new_request(lat=(150, 300), max_fanout=4, max_length=2))
    refused = 0
    for _ in range(400):
        await env.cycler.cycles(1)
        if int(dut.alloc__valid.value) and not int(dut.alloc__ready.value):
            refused += 1
    await env.drain()
    assert env.max_in_use == limit, f"max entries in use {env.max_in_use}, expected {limit}"
    assert refused > 0, "alloc was never backpressured"
    assert env.model.completed == n


@cocotb.test()
async def test_stale(dut):
    """Contributions for entries not in flight (never allocated, already completed, another generation)
    are counted and change nothing: the reductions around them stay bit-exact."""
    env, s = _settings_env(dut, gap=0.1, stall=0.1)
    await env.start()
    done = []
    for _ in range(s.get("requests", 30)):
        r = env.new_request(lat=(5, 60), max_fanout=4, max_length=4)
        env.submit(r)
        done.append(r)
    await env.cycler.cycles(20)
    eb = max(1, (env.entries - 1).bit_length())
    for i in range(60):
        t = env.cycler.cycle + int(env.rng.integers(1, 200))
        kind = i % 3
        if kind == 0:        # an entry index that is free right now (or out of range), any generation
            rtag = int(env.rng.integers(0, 1 << 16))
        elif kind == 1:      # a live entry with the wrong generation
            live = [u.rtag for u in env.model.live.values()]
            if not live:
                continue
            x = live[int(env.rng.integers(0, len(live)))]
            rtag = x ^ (1 << (eb + int(env.rng.integers(0, 16 - eb))))
        else:                # an rtag that has completed already
            old = [r.rtag for r in done if r.rtag is not None and r.rtag not in env.model.live]
            if not old:
                continue
            rtag = old[int(env.rng.integers(0, len(old)))]
        c = Contribution(rtag, 0, 1, 2, int(env.rng.integers(0, 1 << 32)))
        if int(env.rng.integers(0, 4)) == 0:
            c = Contribution(rtag, 0, 0, 0, abort=True, code=ErrorCode.TLB_FAULT.value)
        env.schedule_flit(t, c)
    await env.drain()
    assert env.model.stale > 20, f"only {env.model.stale} stale contributions were exercised"


@cocotb.test()
async def test_mismatch(dut):
    """A contribution with the wrong element type, the wrong length, or a flit index past the length
    completes its reduction with ERROR(TYPE_MISMATCH); its remaining contributions are stale."""
    env, s = _settings_env(dut, gap=0.1, stall=0.1)
    await env.start()
    for i in range(s.get("requests", 24)):
        r = env.new_request(lat=(5, 60), max_fanout=4, max_length=4)
        if i % 2 == 0:
            d = int(env.rng.integers(0, r.expected))
            k = int(env.rng.integers(0, r.length))
            kind = (i // 2) % 4
            if kind == 0:
                r.bad = (d, k, {"etype": (r.etype.value + 1) % 5})
            elif kind == 1:
                r.bad = (d, k, {"etype": 7})                         # undefined encoding
            elif kind == 2:
                r.bad = (d, k, {"length": r.length % env.p["max_length"] + 1})
            else:
                r.bad = (d, k, {"flit": r.length})                   # past the end
        env.submit(r)
    await env.drain()
    assert env.model.mismatches == s.get("requests", 24) // 2


@cocotb.test()
async def test_abort(dut):
    """An abort (the engine's translation failure) completes the entry with ERROR(code)."""
    env, s = _settings_env(dut, gap=0.1, stall=0.1)
    await env.start()
    codes = [ErrorCode.ISOLATION, ErrorCode.OUT_OF_BOUNDS, ErrorCode.TLB_FAULT]
    for i in range(s.get("requests", 18)):
        r = env.new_request(lat=(5, 60), max_fanout=4, max_length=3)
        if i % 2 == 0:
            r.abort_code = codes[(i // 2) % 3].value
        env.submit(r)
    await env.drain()
    assert env.model.aborts == s.get("requests", 18) // 2


@cocotb.test()
async def test_timeout(dut):
    """A destination that never answers: ERROR(TIMEOUT) between ``timeout`` and ``timeout + entries``
    (+ slack) cycles after the grant, never a hang; its late contributions are stale. Other reductions
    are unaffected."""
    env, s = _settings_env(dut, gap=0.1, stall=0.1)
    await env.start()
    timeout = env.p["timeout"]
    doomed = []
    for i in range(s.get("requests", 16)):
        r = env.new_request(lat=(5, 40), max_fanout=4, max_length=3)
        if i % 3 == 0:
            r.expected = max(2, r.expected)
            r.contributions += [[0] * r.length] * (r.expected - len(r.contributions))
            r.latencies += [10] * (r.expected - len(r.latencies))
            r.withhold = {r.expected - 1}
            r.expect_timeout = True
            doomed.append(r)
        env.submit(r)
    await env.cycler.until(lambda: not env.pending and env.sb.outstanding == 0, timeout=timeout * 3,
                           what="all reductions, timed-out ones included")
    for r in doomed:
        t = env.error_times[(r.src, r.tag)]
        assert timeout <= t <= timeout + env.entries + 40, \
            f"timeout reported {t} cycles after the grant (timeout {timeout}, entries {env.entries})"
    # The missing contributions turn up late: stale, nothing changes.
    for r in doomed:
        d = r.expected - 1
        for k in range(r.length):
            env.schedule_flit(env.cycler.cycle + 1 + k, Contribution(r.rtag, k, r.length, r.etype.value,
                                                                      r.contributions[d][k]))
    await env.drain()
    assert env.model.timeouts == len(doomed)


@cocotb.test()
async def test_latency(dut):
    """A lone reduction: the result header is valid a fixed number of cycles after its last contribution,
    then one result flit per cycle: ``LAST_TO_RESULT_CYCLES`` when the destinations answer one after the
    other (the last contribution does not wait), ``+ acc_stages - 1`` when they answer at once (the last
    contribution is right behind another to its row and waits)."""
    from hw.switch.reduction_buffer import LAST_TO_RESULT_CYCLES
    env, s = _settings_env(dut, gap=0.0, stall=0.0, jitter=0)
    stages = env.p.get("acc_stages", 3)
    await env.start()
    flit_cycles = record_cycles(env.out, "on_item")
    for together in (False, True):
        env.latencies.clear()
        for length in (1, 4, env.p["max_length"]):
            flit_cycles.clear()
            r = env.new_request(length=length, expected=3, lat=(10, 10))
            if not together:
                r.latencies = [10 + d * (length + 3) for d in range(r.expected)]
            env.submit(r)
            await env.drain()
            assert flit_cycles == list(range(flit_cycles[0], flit_cycles[0] + length + 1)), \
                f"result flits not back to back: {flit_cycles}"
        want = LAST_TO_RESULT_CYCLES + (stages - 1 if together else 0)
        assert set(env.latencies) == {want}, \
            f"last contribution -> result header {env.latencies}, documented {want} (together={together})"
