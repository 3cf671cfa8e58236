"""cocotb testbench of the GPU receive path (:mod:`hw.gpu_nic.receive_path`).

Every packet sent into ``rx`` is also applied to :class:`verif.models.gpu_nic.RxModel`. At the end the
memory the DUT wrote must equal the model's image flit for flit (every payload at the right address,
nothing else written), read responses and token arrivals must match in order (scoreboards), error counters
and outstanding tags must agree. Random stalls on every interface: ``rx`` valid gaps, memory write stalls,
read request stalls and response gaps (with latency), ``rsp`` and ``arrival`` ready stalls.
"""

import collections

import cocotb

from hw.gpu_nic.receive_path import RxConfig, RxError, TokenArrival, pack_token_meta
from hw.gpu_nic.request_gen import TagIssue
from hw.packet import EType, Flit, Header, Opcode, Packet, RedOp, unpack_flit

from verif.harness import tbenv
from verif.harness.credit import CreditSource
from verif.harness.cycler import Cycler
from verif.harness.gpu_memory import GpuMemory, MemReadPort, MemWritePort
from verif.models.gpu_nic import FLIT_BYTES, RxConfigValues, RxModel, row_packets
from verif.harness.scoreboard import Scoreboard
from verif.harness.stream import StreamDriver, StreamMonitor
from verif.harness.structs import pack, unpack

ROW_FLITS = 20           # a token row: 19 data flits + the metadata flit (cfg.meta_flit = 19)
OTHER = 0x10_0000_0000   # plain writes and reads go here, far from the token window


class RxEnv:
    def __init__(self, dut, *, gap, stall, latency, burst=1.0):
        self.dut = dut
        self.p = p = tbenv.params()
        self.cfg = RxConfigValues(meta_flit=ROW_FLITS - 1, dyn_base=(0x40_0000, 0x80_0000, 0xC0_0000, 0x100_0000))
        self.cycler = Cycler(dut)
        self.dut_mem = GpuMemory(p["flit_width"])
        self.model = RxModel(self.cfg, memory=GpuMemory(p["flit_width"]), experts=p["experts"],
                             tile_size=p["tile_size"], max_slots=p["max_slots"], groups=p["groups"],
                             tags=p["tags"], max_payload=p["max_payload"])
        self.sb = Scoreboard("receive_path")
        self.src = CreditSource(dut, "rx", tbenv.rng("rx"), credits=p["credits"], gap=gap, burst=burst)
        self.wr = MemWritePort(dut, "mem_wr", self.dut_mem, tbenv.rng("wr"), stall=stall, burst=burst)
        self.rd = MemReadPort(dut, "mem_rd", self.dut_mem, tbenv.rng("rd"), latency=latency, stall=stall,
                              gap=gap, burst=burst)
        self.partial = []
        self.rsp = StreamMonitor(dut, "rsp", tbenv.rng("rsp"), stall=stall, burst=burst, on_item=self._rsp_flit)
        self.arr = StreamMonitor(dut, "arrival", tbenv.rng("arr"), stall=stall, burst=burst, on_item=self._arrival)
        self.tag_drv = StreamDriver(dut, "tag_issue", tbenv.rng("tag"), gap=gap)
        self.cycler.add(self.src, self.wr, self.rd, self.rsp, self.arr, self.tag_drv)
        c = self.cfg
        dut.cfg.value = pack(RxConfig, port=c.port, row_shift=c.row_shift, win_base=c.win_base,
                                    win_rows=c.win_rows, meta_flit=c.meta_flit, expert_base=c.expert_base)
        dut.dyn_base.value = sum(b << (48 * i) for i, b in enumerate(c.dyn_base[:p["groups"]]))
        dut.clear.value = 0
        self.sent = collections.Counter()
        self.n_resp = self.n_arr = 0

    async def start(self):
        await self.cycler.start()

    # -- stimulus
    def send(self, packet, kind="packet"):
        flits = packet.flits(self.p["flit_width"]) if isinstance(packet, Packet) else list(packet)
        self.model.receive(flits)
        for pk in self.model.responses[self.n_resp:]:
            self.sb.expect("rsp", pk)
        self.n_resp = len(self.model.responses)
        for a in self.model.arrivals[self.n_arr:]:
            self.sb.expect("arrival", a)
        self.n_arr = len(self.model.arrivals)
        self.sent[kind] += 1
        self.src.send(flits)

    def bind(self, tag, byte_addr):
        self.model.bind(tag, byte_addr)
        self.tag_drv.send(pack(TagIssue, tag=tag, addr=byte_addr))

    # -- observation
    def _rsp_flit(self, bits, cycle):
        f = unpack_flit(bits, self.p["flit_width"])
        self.partial.append(f)
        if f.last:
            flits, self.partial = self.partial, []
            assert not flits[-1].poison
            self.sb.observe("rsp", Packet.from_flits(flits), cycle=cycle)

    def _arrival(self, bits, cycle):
        f = unpack(TokenArrival, bits)
        self.sb.observe("arrival", (f["expert"], f["tile"], f["slot"], f["row"]), cycle=cycle)

    def errors(self):
        bits = int(self.dut.err_count.value)
        return {e.name: (bits >> (32 * e.value)) & 0xFFFFFFFF for e in RxError}

    async def drain(self, timeout=100000):
        await self.cycler.until(lambda: self.src.idle and self.tag_drv.idle and self.sb.outstanding == 0 and
                                self.rd.idle and len(self.wr.writes) >= self.model.writes, timeout=timeout,
                                what=f"everything delivered ({self.sb.outstanding} outstanding)")
        await self.cycler.cycles(20)
        self.check()

    def check(self):
        self.sb.finish()
        assert self.dut_mem.words == self.model.memory.words, self._mem_diff()
        assert len(self.wr.writes) == self.model.writes, \
            f"{len(self.wr.writes)} memory writes, expected {self.model.writes}"
        want = {e.name: self.model.errors.get(e.name, 0) for e in RxError}
        got = self.errors()
        assert got == want, f"err_count {got}, expected {want}"
        busy = int(self.dut.tag_busy.value)
        assert busy == sum(1 << t for t in self.model.bound), \
            f"tag_busy {busy:#x}, expected tags {sorted(self.model.bound)}"

    def _mem_diff(self):
        a, b = self.dut_mem.words, self.model.memory.words
        wrong = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        k = wrong[0]
        return (f"{len(wrong)} flit(s) differ; first at flit address {k:#x}: DUT wrote "
                f"{a.get(k, 'nothing')!r}, expected {b.get(k, 'nothing')!r}")


# ---------------------------------------------------------------------------------------------------------
# Packet makers

def token_experts(rng, env, local_share=0.6):
    """Up to 8 distinct global experts, some hosted here."""
    p, c = env.p, env.cfg
    out = set()
    for _ in range(rng.randint(1, 8)):
        if rng.random() < local_share:
            out.add(c.expert_base + rng.randrange(p["experts"]))
        else:
            out.add(rng.choice([rng.randrange(0, c.expert_base), rng.randrange(c.expert_base + p["experts"], 4096)]))
    return sorted(out)


def good_packet(rng, env, kind, free_tags):
    p, c = env.p, env.cfg
    P = p["max_payload"]
    src = rng.randrange(8)
    if kind == "token_dyn":
        return row_packets(opcode=Opcode.DYN_ST, src=src, row=rng.randrange(c.win_rows), row_flits=ROW_FLITS,
                           meta_experts=token_experts(rng, env), max_payload=P, rng=rng, group=0,
                           row_shift=c.row_shift)
    if kind == "token_write":
        return row_packets(opcode=Opcode.WRITE, src=src, row=rng.randrange(c.win_rows), row_flits=ROW_FLITS,
                           meta_experts=token_experts(rng, env), max_payload=P, rng=rng, win_base=c.win_base,
                           row_shift=c.row_shift)
    n = rng.randint(0, P)
    data = [rng.getrandbits(p["flit_width"]) for _ in range(n)]
    addr = OTHER + (rng.getrandbits(20) << 4)
    if kind == "write":
        return [Packet(Header(opcode=Opcode.WRITE, src=src, tag=rng.getrandbits(8), length=n, dst=c.port,
                              addr=addr), data)]
    if kind == "mm_st":
        return [Packet(Header(opcode=Opcode.MM_ST, src=src, length=n, group=rng.randrange(4), addr=addr), data)]
    if kind == "dyn_other":
        g = rng.randrange(1, p["groups"])
        return [Packet(Header(opcode=Opcode.DYN_ST, src=src, length=n, group=g, mask=1 << c.port,
                              index=rng.getrandbits(10), offset=rng.getrandbits(6)), data)]
    if kind in ("read", "red_read"):
        op = Opcode.READ if kind == "read" else Opcode.RED_READ
        h = Header(opcode=op, src=src, tag=rng.getrandbits(8), xtag=rng.getrandbits(8), length=n, dst=c.port,
                   addr=addr)
        if op == Opcode.RED_READ:
            h.etype, h.redop = rng.choice(list(EType)).value, rng.choice(list(RedOp)).value
        return [Packet(h, [])]
    if kind == "resp" and free_tags:
        tag = free_tags.pop()
        op = rng.choice((Opcode.RED_RESP, Opcode.READ_RESP))
        return [Packet(Header(opcode=op, src=src, tag=tag, length=n, dst=c.port), data)]
    if kind == "error" and free_tags:
        tag = free_tags.pop()
        return [Packet(Header(opcode=Opcode.ERROR, src=src, tag=tag, dst=c.port, code=11), [])]
    return good_packet(rng, env, "write", free_tags)


def bad_packet(rng, env, kind):
    """Flits of one malformed packet of ``kind`` (an :class:`RxError` name)."""
    p, c = env.p, env.cfg
    P = p["max_payload"]
    good = good_packet(rng, env, "write", [])[0]
    while good.header.length < 2:
        good = good_packet(rng, env, "write", [])[0]
    fl = good.flits(p["flit_width"])
    if kind == "POISONED":
        return fl[:-1] + [Flit(fl[-1].data, last=True, poison=True)]
    if kind == "LENGTH_MISMATCH":
        return fl[:-2] + [Flit(fl[-2].data, last=True)] if rng.random() < 0.5 else \
            fl[:-1] + [Flit(fl[-1].data), Flit(7, last=True)]
    if kind == "BAD_LENGTH":
        n = rng.randint(P + 1, 31)
        return Packet(Header(opcode=Opcode.WRITE, src=1, length=n, dst=c.port, addr=OTHER),
                      [rng.getrandbits(128) for _ in range(n)]).flits()
    if kind == "UNKNOWN_OPCODE":
        op = rng.choice([Opcode.DYN_LD_REDUCE, Opcode.RED_READ_RESP, Opcode.MM_LD_REDUCE, 12])
        h = Header(opcode=op, src=1, tag=3, length=2, mask=1) if op in (Opcode.DYN_LD_REDUCE,) else \
            Header(opcode=op, src=1, tag=3, length=2, group=1) if op == Opcode.MM_LD_REDUCE else \
            Header(opcode=op, src=1, tag=3, length=2, dst=c.port)
        n = 2 if op == Opcode.RED_READ_RESP else 0
        return Packet(h, [5] * n).flits()
    if kind == "BAD_GROUP":
        return Packet(Header(opcode=Opcode.DYN_ST, src=1, length=1, group=rng.randrange(p["groups"], 256), mask=1,
                             index=3), [9]).flits()
    if kind == "UNKNOWN_TAG":
        tag = rng.randrange(p["tags"], 256) if rng.random() < 0.3 else \
            next(t for t in range(p["tags"]) if t not in env.model.bound)
        return Packet(Header(opcode=Opcode.RED_RESP, src=1, tag=tag, length=1, dst=c.port), [4]).flits()
    raise ValueError(kind)


GOOD_KINDS = ["token_dyn", "token_write", "write", "mm_st", "dyn_other", "read", "red_read", "resp", "error"]
BAD_KINDS = ["POISONED", "LENGTH_MISMATCH", "BAD_LENGTH", "UNKNOWN_OPCODE", "BAD_GROUP", "UNKNOWN_TAG"]


async def bind_tags(env, rng, count):
    free = [t for t in range(env.p["tags"]) if t not in env.model.bound]
    rng.shuffle(free)
    chosen = free[:count]
    for t in chosen:
        env.bind(t, OTHER + 0x800_0000 + (rng.getrandbits(16) << 4))
    await env.cycler.until(lambda: env.tag_drv.idle, timeout=1000, what="tag bindings")
    await env.cycler.cycles(2)
    return chosen


@cocotb.test()
async def test_traffic(dut):
    s = tbenv.settings()
    env = RxEnv(dut, gap=s.get("gap", 0.2), stall=s.get("stall", 0.25), latency=s.get("latency", 15),
                burst=s.get("burst", 1.5))
    rng = tbenv.rng("traffic")
    await env.start()
    for phase in range(s.get("phases", 3)):
        tags = await bind_tags(env, rng, s.get("tags_per_phase", 6))
        for _ in range(s.get("packets", 40)):
            if rng.random() < s.get("bad_frac", 0.1):
                kind = rng.choice(BAD_KINDS)
                env.send(bad_packet(rng, env, kind), kind)
            else:
                kind = rng.choices(GOOD_KINDS, weights=[4, 2, 2, 1, 1, 1, 1, 1, 0.3])[0]
                for pk in good_packet(rng, env, kind, tags):
                    env.send(pk, kind)
        await env.drain()
    dut._log.info(f"sent {dict(env.sent)}; writes {len(env.wr.writes)}; responses {env.sb.count['rsp']}; "
                  f"arrivals {env.sb.count['arrival']}; errors {env.errors()}")
    assert env.sb.count["arrival"] > 10 and env.sb.count["rsp"] > 0


@cocotb.test()
async def test_bad_input(dut):
    """Many malformed packets of one kind (``kind`` setting) among good traffic: each dropped whole,
    counted exactly, and nothing else disturbed."""
    s = tbenv.settings()
    kind = s["kind"]
    env = RxEnv(dut, gap=0.2, stall=0.2, latency=8)
    rng = tbenv.rng(kind)
    await env.start()
    tags = await bind_tags(env, rng, 4)
    n_bad = 6
    for k in range(n_bad):
        for _ in range(2):
            for pk in good_packet(rng, env, rng.choice(["token_dyn", "write", "read", "resp"]), tags):
                env.send(pk)
        env.send(bad_packet(rng, env, kind), kind)
    for pk in good_packet(rng, env, "token_dyn", tags):
        env.send(pk)
    await env.drain()
    assert env.errors()[kind] == n_bad, env.errors()


@cocotb.test()
async def test_slot_overflow(dut):
    """More tokens for one local expert than it has slots: the extra ones are counted, not reported; after
    ``clear`` the slots start from 0 again."""
    env = RxEnv(dut, gap=0.1, stall=0.2, latency=4)
    rng = tbenv.rng("slots")
    p, c = env.p, env.cfg
    await env.start()
    e = c.expert_base + 1
    extra = 3
    for r in range(p["max_slots"] + extra):
        for pk in row_packets(opcode=Opcode.DYN_ST, src=2, row=r % c.win_rows, row_flits=ROW_FLITS,
                              meta_experts=[e, c.expert_base + 2], max_payload=p["max_payload"], rng=rng,
                              row_shift=c.row_shift):
            env.send(pk)
    await env.drain()
    assert env.errors()["SLOT_OVERFLOW"] == 2 * extra     # both listed experts overflow
    # A new layer: clear the bump pointers.
    env.dut.clear.value = 1
    await env.cycler.cycles(1)
    env.dut.clear.value = 0
    env.model.clear()
    for pk in row_packets(opcode=Opcode.DYN_ST, src=2, row=1, row_flits=ROW_FLITS, meta_experts=[e],
                          max_payload=p["max_payload"], rng=rng, row_shift=c.row_shift):
        env.send(pk)
    await env.drain()
    assert env.model.arrivals[-1] == (1, 0, 0, 1)


@cocotb.test()
async def test_credit_overflow(dut):
    """A sender that ignores credits: the flits without a credit are dropped and counted, their packets
    dropped whole; nothing hangs, and the link works again once the sender keeps to its credits."""
    env = RxEnv(dut, gap=0.0, stall=0.0, latency=4)
    rng = tbenv.rng("ovf")
    p = env.p
    await env.start()
    env.wr.mon.gate.closed = 0.999          # hold memory writes back so the buffer fills
    env.wr.mon.gate.p_close = 1.0
    env.wr.mon.gate.p_reopen = 0.0
    env.src.ignore_credits = True
    flood = []
    for k in range(6):
        n = p["max_payload"]
        flood.append(Packet(Header(opcode=Opcode.WRITE, src=1, length=n, dst=3, addr=OTHER + k * 0x1000),
                            [rng.getrandbits(128) for _ in range(n)]))
    for pk in flood:
        env.src.send(pk)
    await env.cycler.until(lambda: env.src.idle, timeout=2000, what="the flood")
    await env.cycler.cycles(5)
    dropped = env.errors()["CREDIT_OVERFLOW"]
    assert dropped > 0, "no CREDIT_OVERFLOW counted"
    # Let memory drain; every flood packet is either written intact or not at all.
    env.wr.mon.gate.p_reopen = 1.0
    env.wr.mon.gate.p_close = 0.0
    env.wr.mon.gate.state_closed = False
    await env.cycler.cycles(300)
    lost = 0
    for pk in flood:
        base = pk.header.addr // FLIT_BYTES
        got = [env.dut_mem.words.get(base + i) for i in range(pk.header.length)]
        assert got == pk.payload or all(g is None for g in got), f"packet at {pk.header.addr:#x} partly written"
        if got == pk.payload:
            env.model.receive(pk.flits())
        else:
            lost += 1
    # A damaged packet with at least one stored flit is dropped as POISONED; one with none leaves no trace
    # beyond its CREDIT_OVERFLOW flits.
    poisoned = env.errors()["POISONED"]
    assert 1 <= poisoned <= lost, f"{lost} flood packets lost, {poisoned} counted POISONED"
    env.model.errors["POISONED"] = poisoned
    env.model.errors["CREDIT_OVERFLOW"] = dropped
    # Back to a well-behaved sender (the receiver holds nothing now: all credits are the sender's).
    env.src.ignore_credits = False
    env.src.credits = p["credits"]
    for _ in range(5):
        for pk in good_packet(rng, env, "token_dyn", []):
            env.send(pk)
    await env.drain()


@cocotb.test()
async def test_line_rate(dut):
    """No stalls: back-to-back packets are committed at one flit per cycle, so the sender never waits for
    a credit and the last write lands a fixed few cycles after the last flit arrives."""
    env = RxEnv(dut, gap=0.0, stall=0.0, latency=4)
    rng = tbenv.rng("lr")
    await env.start()
    sent_cycles = []
    env.src.on_sent = lambda pid, c: sent_cycles.append(c)
    total = 0
    lengths = []
    for _ in range(12):
        for pk in good_packet(rng, env, "token_dyn", []):
            env.send(pk)
            total += 1 + pk.header.length
            lengths.append(1 + pk.header.length)
    await env.drain()
    # The sender never waited: every packet started right after the previous one.
    gaps = [(b - a, n) for a, b, n in zip(sent_cycles, sent_cycles[1:], lengths) if b - a != n]
    assert not gaps, f"the sender stalled between packets (cycles between starts, packet length): {gaps[:5]}"
    first = sent_cycles[0]
    last_write = env.wr.writes[-1][2]
    span = last_write - first + 1
    # Store-and-forward: the first packet is staged whole, then commit runs at one flit per cycle.
    assert span <= total + lengths[0] + 3, f"{total} flits took {span} cycles from first flit to last write"
    dut._log.info(f"{total} flits: first flit in at {first}, last write at {last_write} ({span} cycles)")


class _Hold:
    """A gate closed while ``closed`` is set (the testbench holds ``rsp`` off)."""

    def __init__(self):
        self.closed = True

    def open(self) -> bool:
        return not self.closed


@cocotb.test()
async def test_writes_pass_reads(dut):
    """Reads whose answers cannot leave (``rsp`` held off: the uplink's response channel full) and writes
    behind them, to other addresses. With a read queue of at least as many entries as reads
    (``read_queue``), every write is committed while the answers still wait and ``read_waits`` stays 0;
    without one, the first read waits at the head once the response buffer is full and holds every write
    behind it (``read_waits`` counts its cycles). Either way, once ``rsp`` is released, memory and the
    answers equal the model's (reads answered in their order)."""
    s = tbenv.settings()
    p = tbenv.params()
    env = RxEnv(dut, gap=0.0, stall=0.0, latency=s.get("latency", 10))
    hold = _Hold()
    env.rsp.gate = hold
    rng = tbenv.rng("pass")
    await env.start()
    n_reads, n_writes, P = s.get("reads", 6), s.get("writes", 8), p["max_payload"]
    for k in range(n_reads):
        h = Header(opcode=Opcode.RED_READ, src=k % 8, tag=k, xtag=0, length=P, dst=env.cfg.port,
                   addr=OTHER + (k << 12), etype=EType.BF16.value, redop=RedOp.ADD.value)
        env.send(Packet(h, []), "read")
    for k in range(n_writes):
        data = [rng.getrandbits(p["flit_width"]) for _ in range(P)]
        env.send(Packet(Header(opcode=Opcode.WRITE, src=1, length=P, dst=env.cfg.port,
                               addr=OTHER + 0x100_0000 + (k << 12)), data), "write")
    waited = 0
    for _ in range(40 * (n_reads + n_writes) * (P + 1)):
        await env.cycler.cycles(1)
        waited += 1
        if len(env.wr.writes) == env.model.writes:
            break
    passed = len(env.wr.writes) == env.model.writes
    waits = int(dut.read_waits.value)
    queued = p.get("read_queue", 0) >= n_reads
    dut._log.info(f"read_queue {p.get('read_queue', 0)}: {len(env.wr.writes)} of {env.model.writes} write flits "
                  f"committed with rsp held off for {waited} cycles, read_waits {waits}")
    if queued:
        assert passed and waits == 0, \
            f"{len(env.wr.writes)} of {env.model.writes} write flits committed behind the held reads, read_waits {waits}"
    else:
        assert not passed and waits > 0, "the writes passed the reads with no read queue"
    hold.closed = False
    await env.drain()
