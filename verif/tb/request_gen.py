"""cocotb testbench of the dymultimem request generator (:mod:`hw.gpu_nic.request_gen`).

A scoreboard checks that every descriptor yields exactly the packets :func:`verif.models.gpu_nic.
request_packets` builds with :class:`hw.packet.Header`/``Packet`` (payload read from the memory model),
in order, that merged ``aux`` packets arrive intact and unsplit, that tag bindings match, and that bad
descriptors are counted per kind. Random stalls everywhere: descriptor gaps, memory request stalls and
response gaps with latency, uplink credit stalls, ``aux`` gaps, ``tag_issue`` stalls and tags held busy.

Settings: ``descs``, ``unicast``, ``static`` (static multimem mode, NVLS's ``MM_ST``/``MM_LD_REDUCE``),
``latency``, ``stall`` (fraction on every interface), ``bad_frac``, ``hold`` (max cycles a tag stays busy),
``max_len``.
"""

import collections
import dataclasses

import cocotb

from hw.gpu_nic.request_gen import DescError, DescOp, GenConfig, GenStall, TagIssue
from hw.packet import EType, Header, Opcode, Packet, RedOp, pack_flit

from verif.harness import tbenv
from verif.harness.credit import CreditSink
from verif.harness.cycler import Agent, Cycler
from verif.harness.gates import Gate
from verif.harness.gpu_memory import GpuMemory, MemReadPort
from verif.models.gpu_nic import Desc, desc_error, request_packets
from verif.harness.scoreboard import Scoreboard
from verif.harness.stream import StreamDriver, StreamMonitor
from verif.harness.structs import pack, unpack

RBASE = [0x1000_0000, 0x2000_0000, 0x3000_0000, 0x4000_0000]
_TAGGED = (Opcode.DYN_LD_REDUCE.value, Opcode.MM_LD_REDUCE.value, Opcode.READ.value)


class TagHolder(Agent):
    """Stand-in for the receive path's tag table: takes bindings (random stalls), keeps each tag busy for
    a random time, drives ``tag_busy``."""

    def __init__(self, dut, rng, *, stall, hold, tags, on_binding):
        self.dut = dut
        self.rng = rng
        self.hold = hold
        self.busy_until = {}
        self.on_binding = on_binding
        self.mon = StreamMonitor(dut, "tag_issue", rng, stall=stall, on_item=self._item)
        self.reuse_waits = 0
        dut.tag_busy.value = 0

    def _item(self, payload, cycle):
        f = unpack(TagIssue, payload)
        if f["tag"] in self.busy_until:
            raise AssertionError(f"cycle {cycle}: tag {f['tag']} bound again while still busy")
        self.busy_until[f["tag"]] = cycle + 1 + self.rng.randrange(self.hold)
        self.on_binding((f["tag"], f["addr"]), cycle)

    def drive(self, cycle):
        self.mon.drive(cycle)
        for t in [t for t, c in self.busy_until.items() if c <= cycle]:
            del self.busy_until[t]
        self.dut.tag_busy.value = sum(1 << t for t in self.busy_until)

    def sample(self, cycle):
        self.mon.sample(cycle)


def random_desc(rng, *, ports, groups, max_len, bad_frac, unicast):
    d = Desc(op=rng.choice((DescOp.STORE.value, DescOp.STORE.value, DescOp.LD_REDUCE.value)),
             mask=rng.randrange(1, 1 << ports), index=rng.getrandbits(18), group=rng.randrange(groups),
             addr=rng.getrandbits(40) << 4, length=rng.randint(1, max_len))
    if rng.random() < 0.3:
        d.mask = 1 << rng.randrange(ports)
    if d.op == DescOp.LD_REDUCE.value:
        d.etype = rng.choice(list(EType)).value
        d.redop = rng.choice(list(RedOp)).value
    if rng.random() < bad_frac:
        kind = rng.choice(["mask0", "mask_hi", "len0", "len_hi", "type", "group"])
        if kind == "mask0":
            d.mask = 0
        elif kind == "mask_hi" and ports < 64:
            d.mask |= 1 << rng.randrange(ports, 64)
        elif kind == "len0":
            d.length = 0
        elif kind == "len_hi":
            d.length = rng.randint(1025, 2047)
        elif kind == "type":
            d.op = DescOp.LD_REDUCE.value
            d.etype, d.redop = (7, 0) if rng.random() < 0.5 else (0, 3)
        elif kind == "group":
            d.group = rng.randrange(groups, 256)
    return d


class GenEnv:
    def __init__(self, dut, *, unicast, latency, stall, hold, static=False):
        self.dut = dut
        self.p = p = tbenv.params()
        self.unicast = unicast
        self.static = static
        self.port = 5
        self.row_shift = 12
        self.cycler = Cycler(dut)
        self.memory = GpuMemory(p["flit_width"])
        self.sb = Scoreboard("request_gen")
        self.next_tag = 0
        self.expected_errors = collections.Counter()
        self.tx_flits = 0
        self.tx_cycles = []
        self.descs = StreamDriver(dut, "desc", tbenv.rng("desc"), gap=stall)
        self.mem = MemReadPort(dut, "mem_rd", self.memory, tbenv.rng("mem"), latency=latency, stall=stall,
                               gap=stall)
        self.sink = CreditSink(dut, "tx", tbenv.rng("tx"), credits=p["credits"], stall=stall,
                               on_packet=self._on_packet, on_flit=self._on_flit)
        self.aux = StreamDriver(dut, "aux", tbenv.rng("aux"), gap=stall)
        self.any_tag = bool(p.get("any_tag", False))
        self.packet_tags, self.bound_tags = [], []

        def bound(b, c):
            self.bound_tags.append(b[0])
            self.sb.observe("tag", (0, b[1]) if self.any_tag else b, cycle=c)
        self.tags = TagHolder(dut, tbenv.rng("tags"), stall=stall, hold=hold, tags=p["tags"], on_binding=bound)
        self.cycler.add(self.descs, self.mem, self.sink, self.aux, self.tags)
        dut.cfg.value = pack(GenConfig, port=self.port, unicast=int(unicast), row_shift=self.row_shift,
                             static=int(static))
        dut.rbase.value = sum(b << (48 * i) for i, b in enumerate(RBASE[:p["groups"]]))

    async def start(self):
        await self.cycler.start()

    def send(self, d: Desc):
        p = self.p
        err = desc_error(d, ports=p["ports"], groups=p["groups"], unicast=self.unicast, static=self.static)
        if err:
            self.expected_errors[err] += 1
        else:
            pkts, binds, self.next_tag = request_packets(
                d, port=self.port, unicast=self.unicast, row_shift=self.row_shift, rbase=RBASE,
                max_payload=p["max_payload"], memory=self.memory, tags=p["tags"], next_tag=self.next_tag,
                static=self.static)
            for pk in pkts:
                self.sb.expect("gen", self._untagged(pk))
            for b in binds:
                self.sb.expect("tag", (0, b[1]) if self.any_tag else b)
        self.descs.send(d.pack())

    def _untagged(self, pk):
        """With ``any_tag`` the tag a reduction load takes depends on which tags are busy when it leaves:
        packets and bindings are compared without it, and the tags of the loads, in order, must be those
        bound, in order (:meth:`check_tags`; the tag holder refuses a tag bound while busy)."""
        if not self.any_tag or getattr(pk.header.opcode, "value", pk.header.opcode) not in _TAGGED:
            return pk
        h = dataclasses.replace(pk.header, tag=0)
        return Packet(h, pk.payload)

    def check_tags(self):
        if self.any_tag:
            assert self.packet_tags == self.bound_tags, \
                f"load tags {self.packet_tags[:8]}... differ from the bound tags {self.bound_tags[:8]}..."
            n = self.p["tags"]
            out_of_turn = sum(t != k % n for k, t in enumerate(self.packet_tags))
            self.dut._log.info(f"any_tag: {out_of_turn} of {len(self.packet_tags)} loads took a tag out of turn")
            assert out_of_turn or len(self.packet_tags) <= n, "every load took the next tag in turn"

    def send_aux(self, pkt: Packet):
        self.sb.expect("aux", pkt)
        for f in pkt.flits(self.p["flit_width"]):
            self.aux.send(pack_flit(f, self.p["flit_width"]))

    def _on_flit(self, f, cycle):
        self.tx_flits += 1
        self.tx_cycles.append(cycle)

    def _on_packet(self, flits, cycle):
        pkt = Packet.from_flits(flits)
        assert not flits[-1].poison, f"cycle {cycle}: the generator sent a poisoned packet"
        key = "aux" if pkt.header.opcode in (Opcode.READ_RESP.value, Opcode.RED_READ_RESP.value) else "gen"
        if key == "gen" and pkt.header.opcode in _TAGGED:
            self.packet_tags.append(pkt.header.tag)
        self.sb.observe(key, self._untagged(pkt) if key == "gen" else pkt, cycle=cycle)

    def errors(self):
        bits = int(self.dut.err_count.value)
        return {e.name: (bits >> (32 * e.value)) & 0xFFFFFFFF for e in DescError}

    async def drain(self, timeout):
        await self.cycler.until(lambda: self.descs.idle and self.aux.idle and self.sb.outstanding == 0,
                                timeout=timeout, what=f"all packets ({self.sb.outstanding} outstanding)")
        await self.cycler.cycles(30)
        self.sb.finish()
        self.check_tags()
        got = self.errors()
        want = {e.name: self.expected_errors.get(e.name, 0) for e in DescError}
        assert got == want, f"err_count {got}, expected {want}"


@cocotb.test()
async def test_traffic(dut):
    s = tbenv.settings()
    p = tbenv.params()
    env = GenEnv(dut, unicast=bool(s.get("unicast", 0)), latency=s.get("latency", 12),
                 stall=s.get("stall", 0.25), hold=s.get("hold", 40), static=bool(s.get("static", 0)))
    rng = tbenv.rng("traffic")
    await env.start()
    n = s.get("descs", 60)
    for k in range(n):
        env.send(random_desc(rng, ports=p["ports"], groups=p["groups"], max_len=s.get("max_len", 40),
                             bad_frac=s.get("bad_frac", 0.1), unicast=env.unicast))
        if k % 6 == 0:
            length = rng.randint(0, p["max_payload"])
            op = rng.choice((Opcode.READ_RESP, Opcode.RED_READ_RESP))
            h = Header(opcode=op, src=env.port, tag=rng.getrandbits(8), length=length, dst=rng.randrange(8))
            env.send_aux(Packet(h, [rng.getrandbits(p["flit_width"]) for _ in range(length)]))
    await env.drain(timeout=s.get("timeout", 200000))
    bindings = env.sb.count["tag"]
    dut._log.info(f"{n} descriptors, {env.sb.count['gen']} packets, {env.sb.count['aux']} aux packets, "
                  f"{bindings} tag bindings, {env.tx_flits} uplink flits, errors {env.errors()}")
    assert bindings > p["tags"], f"only {bindings} tag bindings: tag reuse not exercised"
    assert sum(env.expected_errors.values()) > 0, "no bad descriptor in the mix"


@cocotb.test()
async def test_line_rate(dut):
    """No stalls: store rows leave as one flit per cycle with no gap from first to last flit; header-only
    ld_reduce requests leave one per cycle."""
    s = tbenv.settings()
    p = tbenv.params()
    env = GenEnv(dut, unicast=bool(s.get("unicast", 0)), latency=s.get("latency", 8), stall=0.0, hold=1,
                 static=bool(s.get("static", 0)))
    rng = tbenv.rng("lr")
    await env.start()
    for op in (DescOp.STORE.value, DescOp.LD_REDUCE.value):
        env.tx_cycles.clear()
        before = env.tx_flits
        for _ in range(s.get("descs", 8) * (1 if op == DescOp.STORE.value else 4)):
            d = Desc(op=op, mask=0b1011, index=rng.getrandbits(18), group=1, addr=rng.getrandbits(40) << 4,
                     length=3 * p["max_payload"] if op == DescOp.STORE.value else p["max_payload"])
            if op == DescOp.LD_REDUCE.value:
                d.etype, d.redop = EType.BF16.value, RedOp.ADD.value
            env.send(d)
        await env.drain(timeout=20000)
        c = env.tx_cycles
        assert c == list(range(c[0], c[0] + len(c))), \
            f"{'store' if op == 0 else 'ld_reduce'}: uplink gaps: {env.tx_flits - before} flits over " \
            f"{c[-1] - c[0] + 1} cycles"
        dut._log.info(f"op {op}: {len(c)} flits in {c[-1] - c[0] + 1} cycles, first flit at +{c[0]}")


@cocotb.test()
async def test_bad_descriptors(dut):
    """One descriptor of every bad kind, each between good ones: each is dropped whole and counted under its
    own kind, and the good ones around it come out intact."""
    s = tbenv.settings()
    p = tbenv.params()
    unicast = bool(s.get("unicast", 1))
    static = bool(s.get("static", 0)) and not unicast
    env = GenEnv(dut, unicast=unicast, latency=5, stall=s.get("stall", 0.2), hold=5, static=static)
    rng = tbenv.rng("bad")
    await env.start()

    def good():
        return random_desc(rng, ports=p["ports"], groups=p["groups"], max_len=20, bad_frac=0, unicast=unicast)
    kinds = {"BAD_MASK": [dict(mask=0), dict(mask=1 << p["ports"])],
             "BAD_LENGTH": [dict(length=0), dict(length=1025)],
             "BAD_TYPE": [dict(op=DescOp.LD_REDUCE.value, etype=5), dict(op=DescOp.LD_REDUCE.value, redop=3)]}
    if static:          # static multimem has no mask: the switch's group names the members
        del kinds["BAD_MASK"]
    if unicast or static:
        kinds["BAD_GROUP"] = [dict(group=p["groups"]), dict(group=255)]
    for kind, variants in kinds.items():
        for v in variants:
            env.send(good())
            d = good()
            for k, x in v.items():
                setattr(d, k, x)
            assert desc_error(d, ports=p["ports"], groups=p["groups"], unicast=unicast, static=static) == kind
            env.send(d)
    if static:          # a mask of zero, or naming ports that do not exist, is not looked at
        for mask in (0, 1 << p["ports"]):
            d = good()
            d.mask = mask
            assert desc_error(d, ports=p["ports"], groups=p["groups"], unicast=unicast, static=static) is None
            env.send(d)
    env.send(good())
    await env.drain(timeout=50000)
    assert env.errors() == {e.name: (2 if e.name in kinds else 0) for e in DescError}


@cocotb.test()
async def test_tag_wait(dut):
    """A reduction load whose tag is busy holds ``desc``: the store offered behind it waits until the tag is
    free. ``stalls`` counts exactly the cycles the load waited (``TAG_WAIT``), those with a store waiting
    behind it (``TAG_BLOCKED``) and those with another tag free (``TAG_WAIT_FREE``), all known from the
    cycle the load was taken and the cycle its tag was freed; ``tag_ready`` (a load offered now would find
    its tag free) is low until the tag is free and high after, when the next tag is free."""
    p = tbenv.params()
    hold = tbenv.settings().get("hold", 50)
    env = GenEnv(dut, unicast=False, latency=4, stall=0.0, hold=1)
    accepted = []
    env.descs.on_accept = lambda payload, cycle: accepted.append(cycle)
    ready = []
    env.cycler.add(_Watch(lambda c: ready.append((c, int(dut.tag_ready.value)))))
    env.tags.busy_until[0] = hold        # tag 0, the first load's, busy until cycle `hold`
    rng = tbenv.rng("wait")
    await env.start()
    ld = Desc(op=DescOp.LD_REDUCE.value, mask=0b0110, index=7, group=1, addr=rng.getrandbits(40) << 4,
              length=p["max_payload"], etype=EType.BF16.value, redop=RedOp.ADD.value)
    st = Desc(op=DescOp.STORE.value, mask=0b0011, index=9, group=1, addr=rng.getrandbits(40) << 4, length=5)
    env.send(ld)
    env.send(st)
    await env.drain(timeout=20000)
    t_ld, t_st = accepted
    # The load is walked from the cycle after it was taken; it leaves in the first cycle its tag reads free.
    wait = hold - (t_ld + 1)
    assert wait > 10 and t_st == hold, f"load taken at {t_ld}, store at {t_st}, tag free at {hold}"
    bits = int(dut.stalls.value)
    got = {s.name: (bits >> (32 * s.value)) & 0xFFFFFFFF for s in GenStall}
    assert got == {"TAG_WAIT": wait, "TAG_BLOCKED": wait, "TAG_WAIT_FREE": wait}, \
        f"stalls {got}, expected {wait} each (load taken at {t_ld}, tag free at {hold})"
    low = [c for c, r in ready if not r]
    assert low and max(low) == hold - 1 and all(r for c, r in ready if c >= hold), \
        f"tag_ready low at cycles {low[:3]}..{low[-3:]}, expected up to {hold - 1} and high after"
    dut._log.info(f"load taken at {t_ld}, waited {wait} cycles for tag 0 (free at {hold}), store taken at {t_st}")


class _Watch(Agent):
    """Calls ``fn(cycle)`` at every sample."""

    def __init__(self, fn):
        self.fn = fn

    def sample(self, cycle):
        self.fn(cycle)
