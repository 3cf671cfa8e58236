"""cocotb testbench of the AL-TLB (:mod:`hw.switch.al_tlb`).

Two independent checks run on every test:

* **Lockstep** (:class:`TlbLockstep`): each cycle the inputs the DUT actually saw (every valid, ready and
  payload) are fed to :class:`verif.models.al_tlb.AlTlbModel`, and every output (``tr.req.ready``, the
  ``tr.resp`` and ``mem.req`` heads, ``mem.resp.ready``, ``cfg.ready``, all counters) must equal the
  model's in that same cycle: the hit/miss sequence, MSHR use, replacement and answer order are
  cycle-exact.
* **Functional scoreboard** (:class:`TlbEnv`): every accepted request gets exactly one answer, matched by
  tag, equal to the contract (:func:`verif.models.al_tlb.functional_check` against the group configuration
  in force when it was accepted, then the backing table's value or error), whatever the timing. A
  ``TIMEOUT`` answer is accepted only for a legal request whose key had a backing read withheld or
  delayed by the backing agent (or that the test marked in ``timeout_keys``); how many and which requests
  time out exactly is the lockstep's and the directed tests' business.

Stalls: random ``valid`` gaps on ``tr.req`` and ``cfg``, random ``ready`` stalls on ``tr.resp`` and
``mem.req``, random backing latency jitter (out-of-order fills) and ``mem.resp`` held until taken.

Settings (``DYSHARP_ENV``): ``requests``, ``latency``, ``jitter``, ``gap``, ``stall``, ``hostile``
(fraction of hostile requests), ``keys`` (distinct legal keys), ``cfg_every`` (mean cycles between
configuration writes, 0 = none), ``bogus`` (rate of bogus backing responses), ``drop`` / ``late`` (rates
of backing reads never answered / answered ``late_by`` cycles late: they time out).
"""

import collections

import cocotb

from hw.packet import ErrorCode
from hw.switch.backing_if import BackingRequest, BackingResponse
from hw.switch.al_tlb import INDEX_BITS, TlbConfig, TlbCounter
from hw.switch.translate_if import TranslateRequest, TranslateResponse

from verif.harness import tbenv
from verif.models.al_tlb import FLUSH, SET, AlTlbModel, Req, TlbInputs, TlbOutputs, functional_check
from verif.harness.backing_agent import BackingResponder
from verif.harness.cycler import Agent, Cycler
from verif.harness.stream import StreamDriver, StreamMonitor
from verif.harness.structs import pack, unpack

N_COUNTERS = len(TlbCounter)
ISOLATION, OUT_OF_BOUNDS = ErrorCode.ISOLATION.value, ErrorCode.OUT_OF_BOUNDS.value


def pack_req(r: Req) -> int:
    return pack(TranslateRequest, group=r.group, index=r.index, dst=r.dst, src=r.src, tag=r.tag)


def unpack_req(bits) -> Req:
    d = unpack(TranslateRequest, bits)
    return Req(d["group"], d["index"], d["dst"], d["src"], d["tag"])


def pack_cfg(op, group, mask=0, rows=0) -> int:
    return pack(TlbConfig, op=op, group=group, mask=mask, rows=rows)


def unpack_resp(bits) -> tuple:
    d = unpack(TranslateResponse, bits)
    return d["addr"], d["code"], d["tag"]


def read_counters(dut) -> list[int]:
    bits = int(dut.counters.value)
    return [(bits >> (32 * c)) & 0xFFFFFFFF for c in range(N_COUNTERS)]


def table_backing(r: dict):
    """A fixed backing table: address from a hash of the key; a few keys fault or are full."""
    h = (r["group"] * 0x9E3779B1 + r["index"] * 0x85EBCA77 + r["dst"] * 0xC2B2AE3D) & 0xFFFFFFFF
    if h % 23 == 0:
        return 0, ErrorCode.TLB_FAULT
    if h % 29 == 0:
        return 0, ErrorCode.BUFFER_FULL
    return (h << 8) & ((1 << 48) - 1), ErrorCode.NONE


class TlbLockstep(Agent):
    """Steps the cycle model with the DUT's inputs and compares all outputs every cycle."""

    def __init__(self, dut, model: AlTlbModel):
        self.dut = dut
        self.model = model
        self.history = collections.deque(maxlen=6)
        self.checked = 0
        self.enabled = True

    def sample(self, cycle):
        if not self.enabled:
            return
        d = self.dut
        i = TlbInputs(
            req_valid=int(d.tr__req__valid.value), resp_ready=int(d.tr__resp__ready.value),
            mem_req_ready=int(d.mem__req__ready.value), mem_resp_valid=int(d.mem__resp__valid.value),
            cfg_valid=int(d.cfg__valid.value))
        if i.req_valid:
            i.req = unpack_req(d.tr__req__payload.value)
        if i.mem_resp_valid:
            r = unpack(BackingResponse, d.mem__resp__payload.value)
            i.mem_resp = (r["addr"], r["code"], r["tag"])
        if i.cfg_valid:
            c = unpack(TlbConfig, d.cfg__payload.value)
            i.cfg = (c["op"], c["group"], c["mask"], c["rows"])
        got = TlbOutputs(
            req_ready=int(d.tr__req__ready.value), resp_valid=int(d.tr__resp__valid.value), resp=None,
            mem_req_valid=int(d.mem__req__valid.value), mem_req=None,
            mem_resp_ready=int(d.mem__resp__ready.value), cfg_ready=int(d.cfg__ready.value),
            counters=read_counters(d))
        if got.resp_valid:
            got.resp = unpack_resp(d.tr__resp__payload.value)
        if got.mem_req_valid:
            r = unpack(BackingRequest, d.mem__req__payload.value)
            got.mem_req = (r["group"], r["index"], r["dst"], r["src"], r["tag"])
        exp = self.model.step(i)
        self.history.append((cycle, i, got))
        if got != exp:
            diffs = []
            for f in ("req_ready", "resp_valid", "resp", "mem_req_valid", "mem_req", "mem_resp_ready",
                      "cfg_ready"):
                if getattr(got, f) != getattr(exp, f):
                    diffs.append(f"{f}: expected {getattr(exp, f)} got {getattr(got, f)}")
            for c in TlbCounter:
                if got.counters[c] != exp.counters[c]:
                    diffs.append(f"counter {c.name}: expected {exp.counters[c]} got {got.counters[c]}")
            ctx = "\n".join(f"  cycle {c}: {inp}\n     -> {o}" for c, inp, o in self.history)
            raise AssertionError(f"AL-TLB differs from the cycle model at cycle {cycle}: "
                                 f"{'; '.join(diffs)}\nrecent cycles:\n{ctx}")
        self.checked += 1


class TlbEnv:
    def __init__(self, dut, *, serve=table_backing, latency=20, jitter=0, gap=0.0, stall=0.0,
                 bogus=0.0, lockstep=True, drop=0.0, late=0.0, late_by=0):
        self.dut = dut
        self.p = p = tbenv.params()
        self.cycler = Cycler(dut)
        self.model = AlTlbModel(**{k: p[k] for k in ("ports", "groups", "entries", "mshrs", "resp_depth",
                                                     "timeout")})
        self.cfg_log = []                     # (accept cycle, op, group, mask, rows)
        self.outstanding = {}                 # tag -> (Req, accept cycle)
        self.answers = collections.Counter()  # error code -> answers
        self.accept_cycle = {}
        self.latencies = []
        self.log = []                         # (answer cycle, Req, accept cycle, addr, code)
        self.timeout_keys = set()             # (group, index, dst) that may be answered TIMEOUT
        self.serve = serve
        self.req = StreamDriver(dut, "tr__req", tbenv.rng("req"), gap=gap, on_accept=self._on_req)
        self.resp = StreamMonitor(dut, "tr__resp", tbenv.rng("resp"), stall=stall, on_item=self._on_resp)
        self.cfg = StreamDriver(dut, "cfg", tbenv.rng("cfg"), gap=gap, on_accept=self._on_cfg)
        self.mem = BackingResponder(dut, tbenv.rng("mem"), serve, latency=latency, jitter=jitter,
                                    stall=stall, bogus=bogus, drop=drop, late=late, late_by=late_by)
        self.lockstep = TlbLockstep(dut, self.model)
        self.lockstep.enabled = lockstep
        self.cycler.add(self.req, self.resp, self.cfg, self.mem, self.lockstep)
        self.next_tag = 0

    async def start(self):
        await self.cycler.start()

    # -- stimulus
    def send(self, group, index, dst, src) -> int:
        """Queue a request; returns its tag (unique among outstanding requests)."""
        for _ in range(4096):
            tag = self.next_tag
            self.next_tag = (self.next_tag + 1) % 4096
            if tag not in self.outstanding:
                break
        else:
            raise RuntimeError("no free tag")
        self.req.send(pack_req(Req(group, index, dst, src, tag)))
        return tag

    def configure(self, group, mask, rows, op=SET):
        self.cfg.send(pack_cfg(op, group, mask, rows))

    # -- callbacks
    def _on_cfg(self, bits, cycle):
        c = unpack(TlbConfig, bits)
        self.cfg_log.append((cycle, c["op"], c["group"], c["mask"], c["rows"]))

    def _on_req(self, bits, cycle):
        r = unpack_req(bits)
        assert r.tag not in self.outstanding, f"testbench reused tag {r.tag}"
        self.outstanding[r.tag] = (r, cycle)

    def config_at(self, cycle) -> dict:
        cfg = {}
        for c, op, g, mask, rows in self.cfg_log:
            if c > cycle:
                break
            legal = g < self.p["groups"] and (op == FLUSH or ((mask >> self.p["ports"]) == 0 and
                                                             rows <= (1 << INDEX_BITS)))
            if legal and op == SET:
                cfg[g] = (mask, rows)
        return cfg

    def expected(self, r: Req, cycle: int) -> tuple:
        code = functional_check(self.config_at(cycle), self.p["ports"], self.p["groups"], r)
        if code != ErrorCode.NONE.value:
            return 0, code
        addr, code = self.serve({"group": r.group, "index": r.index, "dst": r.dst, "src": r.src, "tag": 0})
        code = ErrorCode(code).value if not isinstance(code, int) else code
        return (addr if code == ErrorCode.NONE.value else 0), code

    def _on_resp(self, bits, cycle):
        addr, code, tag = unpack_resp(bits)
        if tag not in self.outstanding:
            raise AssertionError(f"cycle {cycle}: answer for tag {tag} that has no outstanding request "
                                 f"(addr {addr:#x}, code {code})")
        r, c0 = self.outstanding.pop(tag)
        exp = self.expected(r, c0)
        key = (r.group, r.index, r.dst)
        if (code == ErrorCode.TIMEOUT.value and addr == 0 and exp[1] not in (ISOLATION, OUT_OF_BOUNDS)
                and (key in self.mem.withheld_keys or key in self.timeout_keys)):
            exp = (0, code)
        if (addr, code) != exp:
            raise AssertionError(f"cycle {cycle}: request {r} accepted at cycle {c0} answered "
                                 f"addr={addr:#x} code={ErrorCode(code).name}, expected addr={exp[0]:#x} "
                                 f"code={ErrorCode(exp[1]).name}")
        self.answers[code] += 1
        self.latencies.append(cycle - c0)
        self.log.append((cycle, r, c0, addr, code))

    async def drain(self, timeout=20000):
        await self.cycler.until(lambda: self.req.idle and self.cfg.idle and not self.outstanding,
                                timeout=timeout, what=f"answers to all requests ({len(self.outstanding)} "
                                                      f"outstanding, e.g. {next(iter(self.outstanding.values()), None)})")
        await self.cycler.cycles(10)

    def counters(self) -> dict:
        return {c.name: v for c, v in zip(TlbCounter, read_counters(self.dut))}


# ---------------------------------------------------------------------------------------------------------

def legal_groups(p, rng, n=3):
    """A few configured groups: (handle, mask, rows)."""
    out = []
    for g in range(min(n, p["groups"])):
        mask = 0
        while bin(mask).count("1") < 2:
            mask = rng.getrandbits(p["ports"])
        out.append((g, mask, rng.randint(8, 64)))
    return out


def members(mask):
    return [i for i in range(mask.bit_length()) if (mask >> i) & 1]


def hostile_request(rng, p, groups):
    """One request that must be refused, and the reason."""
    kind = rng.choice(["foreign_group", "big_group", "src_not_member", "dst_not_member", "dst_beyond",
                       "index_oob"])
    g, mask, rows = rng.choice(groups)
    mem = members(mask)
    non = [i for i in range(p["ports"]) if not (mask >> i) & 1] or [p["ports"] - 1]
    if kind == "foreign_group":
        unused = [h for h in range(p["groups"]) if h not in {x[0] for x in groups}]
        return (rng.choice(unused) if unused else 255, rng.randrange(rows), rng.choice(mem),
                rng.choice(mem)), kind
    if kind == "big_group":
        return (rng.randint(p["groups"], 255) if p["groups"] < 256 else 0, 0, mem[0], mem[0]), kind
    if kind == "src_not_member":
        return (g, rng.randrange(rows), rng.choice(mem), rng.choice(non)), kind
    if kind == "dst_not_member":
        return (g, rng.randrange(rows), rng.choice(non), rng.choice(mem)), kind
    if kind == "dst_beyond":
        return (g, rng.randrange(rows), rng.randint(p["ports"], 63), rng.choice(mem)), kind
    return (g, rng.randint(rows, (1 << INDEX_BITS) - 1), rng.choice(mem), rng.choice(mem)), kind


@cocotb.test()
async def test_random(dut):
    """Random legal + hostile traffic, reconfigurations, flushes and bogus backing answers, all stalls."""
    s = tbenv.settings()
    env = TlbEnv(dut, latency=s.get("latency", 30), jitter=s.get("jitter", 20), gap=s.get("gap", 0.2),
                 stall=s.get("stall", 0.25), bogus=s.get("bogus", 0.005), drop=s.get("drop", 0.0),
                 late=s.get("late", 0.0), late_by=s.get("late_by", 0))
    p = env.p
    if s.get("late"):
        assert s["late_by"] > p["timeout"], "late answers must come after the timeout"
    rng = tbenv.rng("traffic")
    await env.start()
    groups = legal_groups(p, rng)
    for g, mask, rows in groups:
        env.configure(g, mask, rows)
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="configuration")
    # A small pool of legal keys so that hits, misses, coalescing and evictions all happen.
    pool = []
    for _ in range(s.get("keys", 3 * p["entries"] // 2)):
        g, mask, rows = rng.choice(groups)
        mem = members(mask)
        pool.append((g, rng.randrange(rows), rng.choice(mem), rng.choice(mem)))
    hostile = s.get("hostile", 0.15)
    cfg_every = s.get("cfg_every", 400)
    sent = 0
    n = s.get("requests", 1500)
    while sent < n:
        if len(env.req.queue) < 8:
            for _ in range(4):
                if rng.random() < hostile:
                    req, _ = hostile_request(rng, p, groups)
                else:
                    # bursts on the same key make coalescing likely
                    req = pool[rng.randrange(len(pool))] if rng.random() < 0.8 else pool[sent % len(pool)]
                env.send(*req)
                sent += 1
        if cfg_every and rng.random() < 1.0 / cfg_every:
            g, mask, rows = rng.choice(groups)
            if rng.random() < 0.5:
                env.configure(g, 0, 0, op=FLUSH)
            else:
                env.configure(g, mask, rows)          # same config again: a flush with a SET
            if rng.random() < 0.2:
                env.configure(rng.randrange(p["groups"], 256) if p["groups"] < 256 else 0,
                              1, (1 << 19) - 1)       # refused
        await env.cycler.cycles(1)
    await env.drain(timeout=40000)
    env.mem.bogus = 0                          # no more injections: let the late answers arrive
    await env.cycler.until(lambda: env.mem.idle, timeout=s.get("late_by", 0) + 2000, what="late answers")
    await env.cycler.cycles(5)
    c = env.counters()
    dut._log.info(f"{env.lockstep.checked} cycles in lockstep; counters {c}; answers "
                  f"{ {ErrorCode(k).name: v for k, v in env.answers.items()} }")
    for name in ("HITS", "MISSES", "COALESCED", "FILLS", "REPLAYS", "ISOLATION", "OUT_OF_BOUNDS"):
        assert c[name] > 0, f"the random test never exercised {name}"
    if p["mshrs"] <= 4:
        assert c["RECIRCULATED"] > 0, "MSHRs never ran out: backpressure path not exercised"
    assert c["TLB_FAULT"] + c["BUFFER_FULL"] > 0
    assert c["BAD_RESPONSES"] == env.mem.bogus_sent
    # Every withheld or late read timed out (normal answers come well within the timeout), each late
    # answer was recognised as stale, and each TIMEOUT answer was counted.
    assert c["READ_TIMEOUTS"] == len(env.mem.withheld), (c, len(env.mem.withheld))
    assert c["STALE_RESPONSES"] == env.mem.late_sent, (c, env.mem.late_sent)
    assert c["TIMEOUT"] == env.answers[ErrorCode.TIMEOUT.value] >= c["READ_TIMEOUTS"]
    if s.get("drop") or s.get("late"):
        assert c["READ_TIMEOUTS"] > 0 and c["STALE_RESPONSES"] > 0, "no timeout or stale answer happened"


@cocotb.test()
async def test_hostile(dut):
    """Each kind of hostile request, interleaved with legal ones: the right error, its counter, no
    backing read, and legal requests for the same keys still translate."""
    env = TlbEnv(dut, latency=15, gap=0.1, stall=0.2)
    p = env.p
    rng = tbenv.rng("hostile")
    await env.start()
    groups = legal_groups(p, rng)
    for g, mask, rows in groups:
        env.configure(g, mask, rows)
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="configuration")
    kinds = collections.Counter()
    expected_codes = collections.Counter()
    legal = 0
    for _ in range(tbenv.settings().get("rounds", 60)):
        req, kind = hostile_request(rng, p, groups)
        kinds[kind] += 1
        env.send(*req)
        expected_codes["OUT_OF_BOUNDS" if kind == "index_oob" else "ISOLATION"] += 1
        g, mask, rows = rng.choice(groups)
        mem = members(mask)
        env.send(g, rng.randrange(rows), rng.choice(mem), rng.choice(mem))
        legal += 1
        await env.cycler.cycles(rng.randint(0, 3))
    await env.drain()
    c = env.counters()
    assert set(kinds) == {"foreign_group", "big_group", "src_not_member", "dst_not_member", "dst_beyond",
                          "index_oob"}, kinds
    assert c["ISOLATION"] == expected_codes["ISOLATION"], (c, expected_codes)
    assert c["OUT_OF_BOUNDS"] == expected_codes["OUT_OF_BOUNDS"], (c, expected_codes)
    # Refused requests never reach the backing tables.
    for _, r in env.mem.accepted:
        ok = functional_check(env.config_at(10 ** 9), p["ports"], p["groups"],
                              Req(r["group"], r["index"], r["dst"], r["src"], 0))
        assert ok == ErrorCode.NONE.value, f"a refused request caused a backing read: {r}"
    # Configuration errors: a group handle beyond the table, mask bits for absent ports, rows too big.
    before = c["CFG_ERRORS"]
    env.configure(p["groups"] if p["groups"] < 256 else 0, 3, 4)
    if p["ports"] < 64:
        env.configure(0, 1 << p["ports"], 4)
    env.configure(0, 3, (1 << INDEX_BITS) + 1)
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="configuration")
    await env.cycler.cycles(3)
    expect = (1 if p["groups"] < 256 else 0) + (1 if p["ports"] < 64 else 0) + 1
    assert env.counters()["CFG_ERRORS"] - before == expect
    dut._log.info(f"hostile kinds {dict(kinds)}; counters {env.counters()}")


@cocotb.test()
async def test_latency(dut):
    """No stalls: a hit answers 3 cycles after acceptance, a miss latency + 7 (penalty latency + 4)."""
    latency = tbenv.settings().get("latency", 40)
    env = TlbEnv(dut, latency=latency)
    p = env.p
    await env.start()
    env.configure(1, 0b11, 16)
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="configuration")
    await env.cycler.cycles(3)
    env.send(1, 5, 1, 0)
    await env.drain()
    miss = env.latencies[-1]
    env.send(1, 5, 1, 0)
    await env.drain()
    hit = env.latencies[-1]
    assert hit == 3, f"hit latency {hit}"
    assert miss == latency + 7, f"miss latency {miss} with backing latency {latency}"
    # Back-to-back hits: one answer per cycle.
    for _ in range(20):
        env.send(1, 5, 1, 0)
    await env.drain()
    assert len(env.latencies) == 22 and max(env.latencies[2:]) == 3, env.latencies
    dut._log.info(f"hit {hit} cycles, miss {miss} cycles at backing latency {latency}")


@cocotb.test()
async def test_flush(dut):
    """A FLUSH drops the group's cached translations (the next request reads the backing table again,
    which may have changed: an epoch reset) and leaves other groups cached."""
    epoch = {"n": 0}

    def serve(r):
        return (r["index"] << 8) + (epoch["n"] << 40) + r["group"], ErrorCode.NONE

    env = TlbEnv(dut, serve=serve, latency=10)
    env.expected = lambda r, c: ((r.index << 8) + (epoch["n"] << 40) + r.group, 0)
    await env.start()
    env.configure(1, 0b11, 16)
    env.configure(2, 0b11, 16)
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="configuration")
    for g in (1, 2):
        env.send(g, 3, 1, 0)
    await env.drain()
    assert len(env.mem.accepted) == 2
    env.configure(1, 0, 0, op=FLUSH)
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="flush")
    await env.cycler.cycles(2)
    epoch["n"] = 1
    env.send(1, 3, 1, 0)                      # must miss and see the new epoch's value
    await env.drain()
    assert len(env.mem.accepted) == 3
    epoch["n"] = 0
    env.send(2, 3, 1, 0)                      # group 2 still cached: old value, no backing read
    await env.drain()
    assert len(env.mem.accepted) == 3


def _key_is(index):
    return lambda r: r["index"] == index


@cocotb.test()
async def test_timeout(dut):
    """A backing read that is never answered: its primary and coalesced waiters are answered TIMEOUT
    exactly ``timeout + 7`` cycles after the primary was accepted, while hits and other misses go on; its
    late response is stale (counted, no fill, no answer) even when its MSHR already waits for another
    read; a second copy is a bad response; after a generation wrap the owed response is given up."""
    p = tbenv.params()
    T, L = p["timeout"], tbenv.settings().get("latency", 10)
    assert T > L + 20 and p["mshrs"] >= 4
    env = TlbEnv(dut, latency=L)
    ib = (p["mshrs"] - 1).bit_length() or 1
    await env.start()
    env.configure(1, 0b11, 16)
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="configuration")
    B, C, D = 6, 7, 8
    env.send(1, B, 1, 0)                       # warm B
    await env.drain()
    c0 = env.counters()

    # 1. A's read is withheld: three requests wait on it (one primary, two coalesced).
    env.mem.withhold = _key_is(5)
    a_tags = [env.send(1, 5, 1, 0) for _ in range(3)]
    b_tags = [env.send(1, B, 1, 0) for _ in range(20)]
    c_tag = env.send(1, C, 1, 0)
    await env.drain(timeout=T + 200)
    by_tag = {}
    for cyc, r, acc, addr, code in env.log:
        by_tag.setdefault(r.tag, (cyc, acc, addr, code))
    a_ans = sorted(by_tag[t] for t in a_tags)
    assert [x[3] for x in a_ans] == [ErrorCode.TIMEOUT.value] * 3, a_ans
    assert a_ans[0][0] - a_ans[0][1] == T + 7, f"primary answered {a_ans[0][0] - a_ans[0][1]} cycles " \
                                               f"after acceptance, expected timeout + 7 = {T + 7}"
    assert [x[0] for x in a_ans] == [a_ans[0][0] + k for k in range(3)], a_ans
    # hit-under-miss and miss-under-miss: B's hits and C's miss are answered before A's timeout
    assert max(by_tag[t][0] for t in b_tags + [c_tag]) < a_ans[0][0]
    assert by_tag[c_tag][3] == ErrorCode.NONE.value
    c1 = env.counters()
    d = {k: c1[k] - c0[k] for k in c1}
    assert d["READ_TIMEOUTS"] == 1 and d["TIMEOUT"] == 3 and d["COALESCED"] == 2, d
    assert d["MISSES"] == 2 and d["FILLS"] == 1 and d["HITS"] == 20, d
    assert d["STALE_RESPONSES"] == 0 and d["BAD_RESPONSES"] == 0, d
    assert len(env.mem.held) == 1
    a_req, a_bits = env.mem.held[0]
    a_mshr = a_req["tag"] & ((1 << ib) - 1)

    # 2. D misses and takes A's MSHR again, with a new generation; its read is withheld too.
    env.mem.withhold = _key_is(D)
    d_tag = env.send(1, D, 1, 0)
    await env.cycler.until(lambda: len(env.mem.held) == 2, timeout=100, what="D's backing read")
    d_req = env.mem.held[1][0]
    assert d_req["tag"] & ((1 << ib) - 1) == a_mshr, (a_req, d_req)
    assert d_req["tag"] == a_req["tag"] + (1 << ib), "the MSHR's generation did not advance"
    # 3. A's late response arrives while D waits on the same MSHR: stale, D not answered, no fill.
    env.mem.release(_key_is(5))
    await env.cycler.cycles(20)
    c2 = env.counters()
    assert c2["STALE_RESPONSES"] - c1["STALE_RESPONSES"] == 1, c2
    assert d_tag in env.outstanding, "D was answered by A's late response"
    assert all(c2[k] == c1[k] for k in ("FILLS", "REPLAYS", "BAD_RESPONSES", "HITS")), (c1, c2)
    # 4. D's own response answers D with D's translation (checked by the scoreboard).
    env.mem.release()
    env.mem.withhold = None
    await env.drain()
    # 5. A was not cached by its late response: a new request misses and reads again.
    env.send(1, 5, 1, 0)
    await env.drain()
    c3 = env.counters()
    assert c3["MISSES"] - c2["MISSES"] == 1 and env.mem.accepted[-1][1]["index"] == 5, (c2, c3)
    assert c3["FILLS"] - c2["FILLS"] == 2, (c2, c3)          # D's and A's new read
    assert env.log[-1][4] == ErrorCode.NONE.value
    # 6. A second copy of the late response is no longer owed: a bad response.
    env.mem.inject(a_bits)
    await env.cycler.cycles(10)
    c4 = env.counters()
    assert c4["BAD_RESPONSES"] - c3["BAD_RESPONSES"] == 1 and c4["STALE_RESPONSES"] == c3["STALE_RESPONSES"]
    assert c4["READ_TIMEOUTS"] == 1
    # 7. Generation wrap: E's reads are never answered. Its MSHR (the lowest free one) times out once per
    # generation, so every tag of that MSHR is owed; the next read takes the first tag again and gives
    # its owed response up: the first response with that tag fills it, a second copy is bad, the other
    # generations' responses are stale.
    E, gens = 9, 1 << (8 - ib)
    env.mem.withhold = _key_is(E)
    for _ in range(gens):
        env.send(1, E, 1, 0)
        await env.cycler.until(lambda: env.req.idle and not env.outstanding, timeout=T + 50,
                               what="E's timeout")
    tags = [r["tag"] for r, _ in env.mem.held]
    assert len(set(t & ((1 << ib) - 1) for t in tags)) == 1 and len(set(tags)) == gens, tags
    env.send(1, E, 1, 0)
    await env.cycler.until(lambda: len(env.mem.held) == gens + 1, timeout=50, what="E's read after the wrap")
    assert env.mem.held[-1][0]["tag"] == tags[0], (tags[0], env.mem.held[-1][0])
    c5 = env.counters()
    env.mem.withhold = None
    env.mem.release()
    await env.drain()
    await env.cycler.until(lambda: env.mem.idle, timeout=200, what="the released answers")
    await env.cycler.cycles(5)
    c6 = env.counters()
    d = {k: c6[k] - c5[k] for k in c6}
    assert d["FILLS"] == 1 and d["STALE_RESPONSES"] == gens - 1 and d["BAD_RESPONSES"] == 1, d
    assert c5["READ_TIMEOUTS"] - c4["READ_TIMEOUTS"] == gens and env.log[-1][4] == ErrorCode.NONE.value
    dut._log.info(f"timeout answers {a_ans}; counters {c6}")


@cocotb.test()
async def test_stuck_backing(dut):
    """``mem.req`` stuck (never ready): reads time out from the cycle they were queued and answer
    TIMEOUT; hits keep flowing; once the read queue is full a new miss recirculates (no read, no MSHR)
    until the link moves again; then the dead reads go out, their answers are stale, and the waiting miss
    is served."""
    p = tbenv.params()
    T, N = p["timeout"], p["mshrs"]
    env = TlbEnv(dut, latency=10)
    await env.start()
    env.configure(1, 0b11, 64)
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="configuration")
    W = 40
    env.send(1, W, 1, 0)                       # warm W
    await env.drain()
    c0 = env.counters()
    env.mem.blocked = True
    for k in range(N):                         # N misses: N MSHRs, N queued reads
        env.timeout_keys.add((1, k, 1))
        env.send(1, k, 1, 0)
    w_tags = [env.send(1, W, 1, 0) for _ in range(10)]
    await env.drain(timeout=T + 100)
    c1 = env.counters()
    assert c1["READ_TIMEOUTS"] - c0["READ_TIMEOUTS"] == N and c1["TIMEOUT"] - c0["TIMEOUT"] == N, c1
    assert c1["HITS"] - c0["HITS"] == 10
    assert not env.mem.accepted[1:], "a read left although mem.req was never ready"
    first_tmo = min(cyc for cyc, r, acc, addr, code in env.log if code == ErrorCode.TIMEOUT.value)
    assert max(cyc for cyc, r, *_ in env.log if r.tag in w_tags) < first_tmo
    # The read queue is full of dead reads: a new miss recirculates until the link moves (hits still
    # enter between its retries).
    env.send(1, 50, 1, 0)
    for _ in range(5):
        env.send(1, W, 1, 0)
    await env.cycler.cycles(60)
    c2 = env.counters()
    assert [r.index for r, _ in env.outstanding.values()] == [50], env.outstanding
    assert c2["RECIRCULATED"] - c1["RECIRCULATED"] > 10, c2
    assert c2["HITS"] - c1["HITS"] == 5 and c2["MISSES"] == c1["MISSES"], (c1, c2)
    env.mem.blocked = False
    await env.drain()
    await env.cycler.until(lambda: env.mem.idle, timeout=200, what="the dead reads' answers")
    await env.cycler.cycles(5)
    c3 = env.counters()
    assert c3["STALE_RESPONSES"] - c0["STALE_RESPONSES"] == N, c3
    assert c3["BAD_RESPONSES"] == c0["BAD_RESPONSES"] and c3["READ_TIMEOUTS"] == c1["READ_TIMEOUTS"]
    assert env.log[-1][1].index == 50 and env.log[-1][4] == ErrorCode.NONE.value
    dut._log.info(f"counters {c3}")
