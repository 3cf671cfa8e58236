"""cocotb testbench of the egress translator (:mod:`hw.switch.egress_translator`).

The DUT's ``tr`` port is served by :class:`TranslatorModel`: each request is answered after a random
latency (a "hit" at 3 cycles, a "miss" at 20..200 cycles), so answers come back out of order. The answer
itself is a pure function of the key (:func:`answer`: an address, or now and then an error code), which
lets the scoreboard compute every expected output packet from the input packet alone
(:func:`expected_outcome`, an independent Python model of the rewrite rules), whatever the timing.

Checks: every packet on ``o`` and ``err`` is bit-exactly the expected one (all flits, ``last`` and
``poison`` included), in arrival order per source on each stream (the scoreboard keeps one queue per
source per stream), nothing lost or duplicated (all queues empty at the end, every packet matched), the
translation requests carry ``dst = port`` and a tag naming no other outstanding request, the stream rules
on every interface, and the counters. The line-rate test asserts exact simulated cycle counts.

Settings (``DYSHARP_ENV``): ``packets``, ``hit`` (fraction of answers at hit latency), ``errors`` (rate
of error answers), ``gap`` (input valid gaps), ``stall`` (ready stalls on ``o``, ``err`` and ``tr.req``),
``poison`` (rate of poisoned packets), ``srcs`` (number of sources).
"""

import collections
import heapq

import cocotb

from hw.packet import (ErrorCode, Flit, Header, Opcode, pack_deferred_addr, pack_flit, unpack_deferred_addr,
                       unpack_flit)
from hw.switch.egress_translator import HIT_LATENCY, EgressCounter
from hw.switch.translate_if import TranslateRequest, TranslateResponse

from verif.harness import tbenv
from verif.harness.cycler import Agent, Cycler
from verif.harness.stream import StreamDriver, StreamMonitor, record_cycles
from verif.harness.structs import Port, pack, unpack

M48 = (1 << 48) - 1
TLB_HIT_CYCLES = 3
ERROR_CODES = (ErrorCode.ISOLATION.value, ErrorCode.OUT_OF_BOUNDS.value, ErrorCode.TLB_FAULT.value,
               ErrorCode.TIMEOUT.value)


def _hash(*xs) -> int:
    h = 0x811C9DC5
    for x in xs:
        h = ((h ^ (x & 0xFFFFFFFFFFFF)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 29
    return h


def answer(group, index, src, dst, *, errors: float, salt: int = 0) -> tuple[int, int]:
    """The translator's answer for a key: (row address, code). Pure, so the scoreboard can use it."""
    h = _hash(group, index, src, dst, salt)
    if (h % 10007) < errors * 10007:
        return 0, ERROR_CODES[(h >> 20) % len(ERROR_CODES)]
    return (h >> 8) & M48, ErrorCode.NONE.value


def request_key(h: Header) -> tuple[int, int] | None:
    """(group, index) of a packet that needs a translation, None for a pass-through packet."""
    if h.opcode == Opcode.DYN_ST.value:
        return h.group, h.index
    if h.opcode == Opcode.DYN_RED_READ.value:
        g, i, _ = unpack_deferred_addr(h.addr)
        return g, i
    return None


def access_end(h: Header, flit_width: int) -> int:
    """The byte after the last one a translated packet touches in its row."""
    fb = flit_width // 8
    if h.opcode == Opcode.DYN_ST.value:
        return (h.offset + h.length) * fb
    return unpack_deferred_addr(h.addr)[2] + h.length * fb


def expected_outcome(flits: list[Flit], *, port: int, flit_width: int, capacity: int, answer_fn,
                     row_bytes: int) -> tuple[str, list[Flit]]:
    """What the egress must do with one input packet: ("o", flits), ("err", flits) or ("drop", []).

    A packet longer than ``capacity`` flits keeps its first ``capacity - 1`` and its last, poisoned. A
    translated access that runs past ``row_bytes`` is an ``OUT_OF_BOUNDS`` error (the translator's own
    error first)."""
    if len(flits) > capacity:
        flits = flits[:capacity - 1] + [Flit(flits[-1].data, True, True)]
    hbits = flits[0].data & ((1 << 128) - 1)
    upper = flits[0].data >> 128
    h = Header.decode(hbits)
    key = request_key(h)
    if key is None:
        return "o", list(flits)
    row, code = answer_fn(key[0], key[1], h.src, port)
    if code == ErrorCode.NONE.value and access_end(h, flit_width) > row_bytes:
        code = ErrorCode.OUT_OF_BOUNDS.value
    poisoned = flits[-1].poison
    is_st = h.opcode == Opcode.DYN_ST.value
    if code != ErrorCode.NONE.value:
        if poisoned:
            return "drop", []
        if is_st:
            e = Header(opcode=Opcode.ERROR, src=port, tag=h.tag, dst=h.src, code=code)
        else:
            e = Header(opcode=Opcode.RED_READ_RESP, src=port, tag=h.tag, xtag=h.xtag, length=0,
                       etype=h.etype, redop=h.redop, dst=h.src, code=code)
        return "err", [Flit(e.encode(), last=True)]
    if is_st:
        n = Header(opcode=Opcode.WRITE, src=h.src, tag=h.tag, length=h.length, dst=port,
                   addr=(row + h.offset * (flit_width // 8)) & M48)
    else:
        _, _, byte_offset = unpack_deferred_addr(h.addr)
        n = Header(opcode=Opcode.RED_READ, src=h.src, tag=h.tag, xtag=h.xtag, length=h.length,
                   etype=h.etype, redop=h.redop, dst=port, addr=(row + byte_offset) & M48)
    head = Flit(n.encode() | (upper << 128), flits[0].last, flits[0].poison)
    return "o", [head] + list(flits[1:])


class TranslatorModel(Agent):
    """Serves ``tr``: takes requests (``ready`` stalls), answers each after a random latency, out of order."""

    def __init__(self, dut, rng, *, port, slots, hit=0.7, miss=(20, 200), errors=0.05, stall=0.0,
                 latency_fn=None):
        self.rng = rng
        self.latency_fn = latency_fn     # latency_fn(request number) -> cycles, overrides hit/miss
        self.port, self.slots = port, slots
        self.hit, self.miss, self.errors = hit, miss, errors
        self.req = StreamMonitor(dut, "tr__req", rng, stall=stall, on_item=self._on_req)
        self.resp_valid = Port(dut.tr__resp__valid)
        self.resp_payload = Port(dut.tr__resp__payload)
        self.resp_ready = Port(dut.tr__resp__ready)
        self.resp_valid.write(0)
        self.heap = []                 # (due cycle, seq, payload)
        self.outstanding = set()       # tags requested and not yet answered
        self.seq = 0
        self.current = None
        self.requests = 0
        self.latencies = collections.Counter()

    @property
    def idle(self):
        return not self.heap and self.current is None

    def _on_req(self, bits, cycle):
        r = unpack(TranslateRequest, bits)
        if r["dst"] != self.port:
            raise AssertionError(f"cycle {cycle}: translation request {r} names dst {r['dst']}, not port "
                                 f"{self.port}")
        if not 0 <= r["tag"] < self.slots:
            raise AssertionError(f"cycle {cycle}: translation tag {r['tag']} is not a slot (slots={self.slots})")
        if r["tag"] in self.outstanding:
            raise AssertionError(f"cycle {cycle}: translation tag {r['tag']} reused while outstanding")
        self.outstanding.add(r["tag"])
        self.requests += 1
        if self.latency_fn is not None:
            lat = self.latency_fn(self.requests - 1)
        else:
            lat = TLB_HIT_CYCLES if self.rng.random() < self.hit else self.rng.randint(*self.miss)
        self.latencies["hit" if lat == TLB_HIT_CYCLES else "miss"] += 1
        addr, code = answer(r["group"], r["index"], r["src"], r["dst"], errors=self.errors)
        payload = pack(TranslateResponse, addr=addr, code=code, tag=r["tag"])
        heapq.heappush(self.heap, (cycle + lat, self.seq, payload, r["tag"]))
        self.seq += 1

    def drive(self, cycle):
        self.req.drive(cycle)
        if self.current is None and self.heap and self.heap[0][0] <= cycle:
            self.current = heapq.heappop(self.heap)
            self.resp_payload.write(self.current[2])
            self.resp_valid.write(1)
        elif self.current is None:
            self.resp_valid.write(0)

    def sample(self, cycle):
        self.req.sample(cycle)
        if self.current is not None and self.resp_ready.high():
            self.outstanding.discard(self.current[3])
            self.current = None


class PacketCollector:
    """Groups a stream monitor's flits into packets and hands them to ``on_packet(flits, cycle)``."""

    def __init__(self, flit_width, on_packet):
        self.flit_width = flit_width
        self.on_packet = on_packet
        self.flits = []
        self.head_cycles = []

    def __call__(self, bits, cycle):
        f = unpack_flit(bits, self.flit_width)
        if not self.flits:
            self.head_cycles.append(cycle)
        self.flits.append(f)
        if f.last:
            flits, self.flits = self.flits, []
            self.on_packet(flits, cycle)


class EgressEnv:
    def __init__(self, dut, *, hit=0.7, errors=0.05, gap=0.0, stall=0.0):
        self.dut = dut
        self.p = p = tbenv.params()
        self.port, self.fw = p["port"], p["flit_width"]
        self.cycler = Cycler(dut)
        self.tr = TranslatorModel(dut, tbenv.rng("tr"), port=self.port, slots=p["slots"], hit=hit,
                                  errors=errors, stall=stall)
        self.errors = errors
        self.inp = StreamDriver(dut, "i", tbenv.rng("i"), gap=gap, on_accept=PacketCollector(self.fw, self._on_in))
        self.o_col = PacketCollector(self.fw, self._on_o)
        self.e_col = PacketCollector(self.fw, self._on_err)
        self.o = StreamMonitor(dut, "o", tbenv.rng("o"), stall=stall, on_item=self.o_col)
        self.err = StreamMonitor(dut, "err", tbenv.rng("err"), stall=stall, on_item=self.e_col)
        self.cycler.add(self.inp, self.tr, self.o, self.err)
        self.exp = {"o": collections.defaultdict(collections.deque),
                    "err": collections.defaultdict(collections.deque)}
        self.stats = collections.Counter()
        self.sent = 0
        self.outcomes = 0
        self.in_heads = self.inp.on_accept.head_cycles

    async def start(self):
        await self.cycler.start()

    def send(self, flits: list[Flit]):
        for f in flits:
            self.inp.send(pack_flit(f, self.fw))
        self.sent += 1

    def _answer(self, g, i, s, d):
        return answer(g, i, s, d, errors=self.errors)

    def _on_in(self, flits, cycle):
        kind, out = expected_outcome(flits, port=self.port, flit_width=self.fw,
                                     capacity=self.p["max_payload"] + 1, answer_fn=self._answer,
                                     row_bytes=self.p["row_bytes"])
        h = Header.decode(flits[0].data & ((1 << 128) - 1))
        translated = request_key(h) is not None
        self.stats[kind if not (kind == "o" and translated) else "translated"] += 1
        if kind == "o" and not translated:
            self.stats["passed"] += 1
        if kind == "drop":
            self.outcomes += 1
            return
        self.exp[kind][h.src].append((out, h, cycle))

    def _match(self, stream, key, flits, cycle):
        q = self.exp[stream][key]
        if not q:
            raise AssertionError(f"cycle {cycle}: unexpected packet on {stream} (source {key}): "
                                 f"{Header.decode(flits[0].data & ((1 << 128) - 1))}, {len(flits)} flit(s)")
        want, h_in, c_in = q.popleft()
        if want != flits:
            got_h = Header.decode(flits[0].data & ((1 << 128) - 1))
            want_h = Header.decode(want[0].data & ((1 << 128) - 1))
            raise AssertionError(
                f"cycle {cycle}: packet on {stream} differs from the next expected one of source {key} "
                f"(input {h_in} accepted at cycle {c_in}):\n  got  {got_h}, {len(flits)} flits "
                f"{flits}\n  want {want_h}, {len(want)} flits {want}")
        self.outcomes += 1

    def _on_o(self, flits, cycle):
        self._match("o", Header.decode(flits[0].data & ((1 << 128) - 1)).src, flits, cycle)

    def _on_err(self, flits, cycle):
        self._match("err", Header.decode(flits[0].data & ((1 << 128) - 1)).dst, flits, cycle)

    def pending(self) -> int:
        return sum(len(q) for d in self.exp.values() for q in d.values())

    async def drain(self, timeout=50000):
        await self.cycler.until(lambda: self.inp.idle and self.outcomes == self.sent and self.tr.idle,
                                timeout=timeout,
                                what=f"all packets out ({self.sent - self.outcomes} missing, "
                                     f"{self.pending()} expected not seen)")
        await self.cycler.cycles(5)
        assert self.pending() == 0, "expected packets never seen"
        assert not self.o_col.flits and not self.e_col.flits, "a partial packet is left on an output"

    def counters(self) -> dict:
        bits = int(self.dut.counters.value)
        return {c.name: (bits >> (32 * c)) & 0xFFFFFFFF for c in EgressCounter}

    def check_counters(self):
        c = self.counters()
        assert c["TRANSLATED"] == self.stats["translated"], (c, self.stats)
        assert c["PASSED"] == self.stats["passed"], (c, self.stats)
        assert c["XLATE_ERRORS"] == self.stats["err"] + self.stats["drop"], (c, self.stats)
        assert 1 <= c["MAX_OCCUPANCY"] <= self.p["slots"], c
        return c


# ---------------------------------------------------------------------------------------------------------
# Stimulus

def _row_offset(rng, p, length, unit, inside) -> int:
    """An offset (in ``unit`` bytes) of a ``length``-flit access: inside the row with probability
    ``inside``, else any value of the field (``unit`` = flit bytes for DYN_ST's 10-bit field, 1 for the
    16-bit byte offset)."""
    fb = p["flit_width"] // 8
    top = (1 << 10) if unit > 1 else (1 << 16)
    fits = (p["row_bytes"] - length * fb) // unit + 1
    return rng.randrange(min(top, fits)) if fits > 0 and rng.random() < inside else rng.randrange(top)


def random_packet(rng, p, *, srcs, poison=0.0, kinds=None, inside=0.9) -> list[Flit]:
    """One packet as it leaves the request network toward ``p["port"]``; a translated one's access fits
    in its row with probability ``inside``."""
    port, mp = p["port"], p["max_payload"]
    fb = p["flit_width"] // 8
    kind = rng.choice(kinds or ["st", "st", "rr", "rr", "write", "read", "redread", "fill", "other"])
    src = rng.choice(srcs)
    tag = rng.randrange(256)
    payload = 0
    if kind == "st":
        length = rng.randint(0, mp)
        h = Header(opcode=Opcode.DYN_ST, src=src, tag=tag, length=length, group=rng.randrange(4),
                   mask=(1 << port) | rng.getrandbits(p["ports"]), index=rng.randrange(1 << 18),
                   offset=_row_offset(rng, p, length, fb, inside))
        payload = length
    elif kind == "rr":
        length = rng.randint(1, mp)
        h = Header(opcode=Opcode.DYN_RED_READ, src=src, tag=tag, xtag=rng.randrange(256),
                   length=length, etype=rng.randrange(5), redop=rng.randrange(3), dst=port,
                   addr=pack_deferred_addr(rng.randrange(256), rng.randrange(1 << 18),
                                           _row_offset(rng, p, length, 1, inside)))
    elif kind == "write":
        length = rng.randint(0, mp)
        h = Header(opcode=Opcode.WRITE, src=src, tag=tag, length=length, dst=port, addr=rng.getrandbits(48))
        payload = length
    elif kind == "read":
        h = Header(opcode=Opcode.READ, src=src, tag=tag, length=rng.randint(1, mp), dst=port,
                   addr=rng.getrandbits(48))
    elif kind == "redread":
        h = Header(opcode=Opcode.RED_READ, src=src, tag=tag, xtag=rng.randrange(256), length=rng.randint(1, mp),
                   etype=rng.randrange(5), redop=rng.randrange(3), dst=port, addr=rng.getrandbits(48))
    elif kind == "fill":
        h = Header(opcode=Opcode.TLB_FILL, src=src, tag=tag, group=rng.randrange(16), mask=1 << port,
                   index=rng.randrange(1 << 18))
    else:   # any other bit pattern: an unassigned opcode, random fields; passes unchanged
        h = Header.decode((rng.getrandbits(124) << 4) | rng.choice([12, 13]))
        h.src = src
    words = [h.encode() | (rng.getrandbits(p["flit_width"] - 128) << 128 if p["flit_width"] > 128 else 0)]
    words += [rng.getrandbits(p["flit_width"]) for _ in range(payload)]
    flits = [Flit(w, last=(k == len(words) - 1)) for k, w in enumerate(words)]
    if rng.random() < poison:
        flits[-1] = Flit(flits[-1].data, True, True)
    return flits


@cocotb.test()
async def test_random(dut):
    """Random mixed traffic, hits and misses answered out of order, errors, stalls everywhere."""
    s = tbenv.settings()
    env = EgressEnv(dut, hit=s.get("hit", 0.7), errors=s.get("errors", 0.08), gap=s.get("gap", 0.2),
                    stall=s.get("stall", 0.25))
    p = env.p
    rng = tbenv.rng("traffic")
    srcs = rng.sample(range(p["ports"]), min(p["ports"], s.get("srcs", 4)))
    await env.start()
    n = s.get("packets", 400)
    for _ in range(n):
        env.send(random_packet(rng, p, srcs=srcs, poison=s.get("poison", 0.05)))
    await env.drain()
    c = env.check_counters()
    dut._log.info(f"{n} packets, {env.cycler.cycle} cycles; outcomes {dict(env.stats)}; "
                  f"translations {dict(env.tr.latencies)}; counters {c}")
    assert env.stats["translated"] > 0 and env.stats["passed"] > 0 and env.stats["err"] > 0
    assert env.tr.latencies["miss"] > 0 and env.tr.latencies["hit"] > 0
    assert c["OVERTAKES"] > 0, "no packet ever overtook another source's (hit under miss not exercised)"
    assert c["MAX_OCCUPANCY"] == p["slots"], "the slots never filled up (backpressure not exercised)"


@cocotb.test()
async def test_line_rate(dut):
    """All hits at 3 cycles, no gaps or stalls: K back-to-back packets go in and out one flit per cycle,
    each header leaving HIT_LATENCY cycles after it came in."""
    s = tbenv.settings()
    env = EgressEnv(dut, hit=1.0, errors=0.0)
    p = env.p
    rng = tbenv.rng("line")
    await env.start()
    in_cycles = record_cycles(env.inp)
    out_cycles = record_cycles(env.o, "on_item")
    k = s.get("k", 64)
    kinds = s.get("kinds", ["rr"])
    flits = 0
    for _ in range(k):
        pkt = random_packet(rng, p, srcs=list(range(p["ports"])), kinds=kinds, inside=1.0)
        flits += len(pkt)
        env.send(pkt)
    await env.drain()
    env.check_counters()
    assert len(in_cycles) == len(out_cycles) == flits
    assert in_cycles == list(range(in_cycles[0], in_cycles[0] + flits)), "input not taken every cycle"
    assert out_cycles == list(range(out_cycles[0], out_cycles[0] + flits)), "output not one flit per cycle"
    heads_in, heads_out = env.in_heads, env.o_col.head_cycles
    assert [b - a for a, b in zip(heads_in, heads_out)] == [HIT_LATENCY] * k, \
        f"header latencies {[b - a for a, b in zip(heads_in, heads_out)]}"
    total = out_cycles[-1] - in_cycles[0] + 1
    assert total == flits + HIT_LATENCY, (total, flits)
    assert env.counters()["OVERTAKES"] == 0
    dut._log.info(f"line rate: {k} packets, {flits} flits in {total} cycles (first flit in to last flit out)")


@cocotb.test()
async def test_hit_under_miss(dut):
    """Source A misses (150 cycles); source B's hits leave first; A's later hit waits behind A's miss."""
    env = EgressEnv(dut, hit=1.0, errors=0.0)
    p = env.p
    await env.start()
    a, b = 1, 2
    env.tr.latency_fn = lambda n: 150 if n == 0 else TLB_HIT_CYCLES   # the first request misses
    order = []
    inner = env._on_o

    def on_o(flits, cycle):
        h = Header.decode(flits[0].data & ((1 << 128) - 1))
        order.append((h.src, h.tag, cycle))
        inner(flits, cycle)
    env.o_col.on_packet = on_o
    mk = lambda src, tag: [Flit(Header(opcode=Opcode.DYN_RED_READ, src=src, tag=tag, length=4, dst=p["port"],
                                       addr=pack_deferred_addr(1, tag, 0)).encode(), last=True)]
    env.send(mk(a, 0))
    for t in range(1, 4):
        env.send(mk(b, t))
    env.send(mk(a, 4))
    env.send(mk(b, 5))
    await env.drain()
    got = [(s_, t) for s_, t, _ in order]
    assert got == [(b, 1), (b, 2), (b, 3), (b, 5), (a, 0), (a, 4)], got
    c = env.check_counters()
    assert c["OVERTAKES"] == 4, c
    assert order[-2][2] - env.in_heads[0] >= 150


@cocotb.test()
async def test_errors(dut):
    """Every translation fails: DYN_ST dropped whole (payload included) with ERROR on err, DYN_RED_READ
    answered RED_READ_RESP on err; pass-through packets still flow; poisoned failures are dropped."""
    env = EgressEnv(dut, hit=0.5, errors=1.0, stall=0.3, gap=0.3)
    p = env.p
    rng = tbenv.rng("errors")
    await env.start()
    for _ in range(120):
        env.send(random_packet(rng, p, srcs=[0, 3, p["ports"] - 1], poison=0.1,
                               kinds=["st", "rr", "write", "read"]))
    await env.drain()
    c = env.check_counters()
    assert c["TRANSLATED"] == 0 and c["XLATE_ERRORS"] > 0 and env.stats["drop"] > 0, (c, env.stats)


class _Window:
    """A gate closed during cycles [start, stop) of the cycler (a controlled stall)."""

    def __init__(self, cycler, start, stop):
        self.cycler, self.start, self.stop = cycler, start, stop

    def open(self):
        return not self.start <= self.cycler.cycle < self.stop


@cocotb.test()
async def test_oldest_first(dut):
    """Two packets become ready while ``o`` is busy, the younger one in the lower slot: the older leaves
    first. F (slot 0, miss 8) leaves and frees slot 0; O (slot 1, miss 30) is older than Y (slot 0 again,
    miss 40); L (a long pass-through) holds ``o`` stalled while both get their answers."""
    env = EgressEnv(dut, hit=1.0, errors=0.0)
    p = env.p
    lat = [8, 30, 40]
    env.tr.latency_fn = lambda n: lat[n] if n < len(lat) else TLB_HIT_CYCLES
    order = []
    inner = env._on_o

    def on_o(flits, cycle):
        order.append(Header.decode(flits[0].data & ((1 << 128) - 1)).src)
        inner(flits, cycle)
    env.o_col.on_packet = on_o
    await env.start()
    rr = lambda src: [Flit(Header(opcode=Opcode.DYN_RED_READ, src=src, tag=src, length=2, dst=p["port"],
                                  addr=pack_deferred_addr(2, 100 + src, 0)).encode(), last=True)]
    F, O, Y, L = 0, 1, 2, 4
    env.send(rr(F))
    env.send(rr(O))
    await env.cycler.until(lambda: order == [F], timeout=100, what="F out")
    now = env.cycler.cycle
    env.o.gate = _Window(env.cycler, now + 4, now + 90)
    env.send(rr(Y))
    env.send([Flit(Header(opcode=Opcode.WRITE, src=L, length=p["max_payload"], dst=p["port"]).encode())] +
             [Flit(k, last=(k == p["max_payload"])) for k in range(1, p["max_payload"] + 1)])
    await env.drain()
    assert order == [F, L, O, Y], order


@cocotb.test()
async def test_overflow(dut):
    """Packets longer than a slot (never forwarded by the request network): the first ``max_payload``
    flits and the last one, poisoned; the slot is reused correctly afterwards."""
    env = EgressEnv(dut, hit=0.8, errors=0.0, stall=0.2)
    p = env.p
    rng = tbenv.rng("overflow")
    await env.start()
    for n in range(40):
        pkt = random_packet(rng, p, srcs=[1, 2, 3], kinds=["st", "write", "rr"])
        if n % 2 == 0:
            extra = rng.randint(1, 4) + p["max_payload"] + 1 - len(pkt)
            pkt = [Flit(f.data) for f in pkt] + [Flit(rng.getrandbits(p["flit_width"])) for _ in range(extra)]
            pkt[-1] = Flit(pkt[-1].data, True)
        env.send(pkt)
    await env.drain()
    env.check_counters()


@cocotb.test()
async def test_row_bound(dut):
    """Issue 16 defect 3: an access that runs past ``row_bytes`` is answered ``OUT_OF_BOUNDS`` (ERROR /
    RED_READ_RESP on ``err``, counted in ``XLATE_ERRORS``), never rewritten into the next row; one that
    ends exactly at the row's end is translated. Both kinds, at the bound, one flit past it, and at the
    largest offset the field holds."""
    env = EgressEnv(dut, hit=0.7, errors=0.0, stall=0.2)
    p = env.p
    fb, rb, port = p["flit_width"] // 8, p["row_bytes"], p["port"]
    await env.start()
    cases = []      # (packet, must fit)
    for n, length in enumerate((1, 4, p["max_payload"])):
        for off, fits in (((rb // fb) - length, True), ((rb // fb) - length + 1, False), ((1 << 10) - 1, False)):
            if off < 0 or off >= 1 << 10:
                continue
            h = Header(opcode=Opcode.DYN_ST, src=1, tag=n, length=length, group=1, mask=1 << port, index=7 + n,
                       offset=off)
            cases.append(([Flit(h.encode())] + [Flit(k + 1, last=(k == length - 1)) for k in range(length)],
                          fits))
        for boff, fits in ((rb - length * fb, True), (rb - length * fb + 1, False), ((1 << 16) - 1, False)):
            if not 0 <= boff < 1 << 16:
                continue
            h = Header(opcode=Opcode.DYN_RED_READ, src=2, tag=n, xtag=n, length=length, etype=1, redop=0,
                       dst=port, addr=pack_deferred_addr(1, 7 + n, boff))
            cases.append(([Flit(h.encode(), last=True)], fits))
    for pkt, fits in cases:
        h = Header.decode(pkt[0].data)
        assert (access_end(h, p["flit_width"]) <= rb) == fits, (h, rb)
        env.send(pkt)
    await env.drain()
    c = env.check_counters()
    n_bad = sum(not f for _, f in cases)
    assert n_bad > 0 and any(f for _, f in cases)
    assert c["XLATE_ERRORS"] == n_bad and c["TRANSLATED"] == len(cases) - n_bad, (c, len(cases), n_bad)
