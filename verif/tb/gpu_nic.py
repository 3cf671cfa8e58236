"""cocotb testbench of the composed GPU NIC (:mod:`hw.gpu_nic.nic`) on its 2-VC DySHARP link.

The testbench plays the switch on both links (``tx``: the NIC's uplink, ``rx``: its downlink) through the
harness's VC-link agents (:class:`verif.harness.vc_link.VcLinkSink` on the uplink,
:class:`verif.harness.vc_link.VcLinkSource` on the downlink). Every uplink packet is checked to travel on
its opcode's VC, within that VC's credits.

Tests:

* ``test_loopback`` -- dispatch and combine end to end through a Python switch that also plays the other
  GPUs and the in-switch u32 reduction, dynamic and unicast: every uplink request packet equals, bit for
  bit and in order, what :func:`verif.models.gpu_nic.request_packets` builds for the descriptors; every
  token row lands in its window row; the token tracker emits exactly the expected tiles in fill order;
  ``ld_reduce`` round trips (``DYN_LD_REDUCE`` -> ``RED_READ`` on VC 0 answered from memory on VC 1 ->
  ``RED_RESP`` on VC 1 landing by tag) and the unicast ``READ`` baseline; exact dispatch flit counts; no
  error counter moves.
* ``test_serve`` -- the NIC as a switch's GPU under random traffic and random stalls on every interface,
  checked against :class:`verif.models.gpu_nic.NicModel`: requests on VC 0 (``WRITE``/``MM_ST``/``DYN_ST``
  committed, ``READ``/``RED_READ`` answered on VC 1 with memory data, bit for bit, ``TLB_FILL`` answered
  by the memory manager, its ``TLB_FILL_RESP`` bit for bit against
  :class:`verif.models.memory_manager.MemoryManagerSpec` including every error code), combine responses
  on VC 1 (``RED_RESP`` landing by tag, ``ERROR`` with random codes counted per code), wrong-class packets
  dropped and counted; the memory image, every counter and the manager's counters equal the model's.
* ``test_response_under_request_stall`` -- the no-shared-buffer property: the NIC's VC 1 uplink credits
  are held at 0 and a flood of ``READ``s fills its VC 0 receive buffer (the downlink's VC 0 credits reach 0
  and stay there); ``RED_RESP``s sent on VC 1 must still commit to memory and free their tags. Then the
  credits are released and every ``READ`` answer must come out intact.
* ``test_translated_dispatch`` -- the switch's dispatch as this GPU sees it: ``TLB_FILL`` per token answered
  with the window row the memory manager allocates, then the row as translated ``WRITE``s there; rows
  land intact and the tracker emits exactly the expected tiles.
"""

import collections

import cocotb

from hw.gpu_nic.memory_manager import MmCommand, MmCounter
from hw.gpu_nic.receive_path import N_REMOTE_CODES, RxConfig, RxError, pack_token_meta
from hw.gpu_nic.request_gen import DescError, DescOp, GenConfig
from hw.gpu_nic.token_tracker import TileCmdOp, TileCommand, TileReady, TrackerError
from hw.packet import EType, ErrorCode, Header, Opcode, Packet, RedOp

from verif.harness import tbenv
from verif.harness.cycler import Cycler
from verif.harness.gpu_memory import GpuMemory, MemReadPort, MemWritePort, default_word
from verif.harness.stream import StreamDriver, StreamMonitor
from verif.harness.structs import pack, unpack
from verif.harness.vc_link import VcLinkSink, VcLinkSource
from verif.models.gpu_nic import FLIT_BYTES, Desc, NicModel, RxConfigValues, request_packets
from verif.models.memory_manager import EPOCH_RESET, SET_GROUP, MemoryManagerSpec

PORT = 2
ROW_FLITS = 20
ROW_SHIFT = 9
WIN_BASE = 0x40_0000
SRC_BASE = 0x100_0000
OUT_BASE = 0x200_0000
OTHER = 0x10_0000_0000       # test_serve: plain writes and reads (request path only)
DYN_BASE = (WIN_BASE, 0x20_0000_0000, 0x30_0000_0000, 0x40_0000_0000)
MM_BASE = (0x50_0000_0000, 0x60_0000_0000)


def bits_of(packet_or_flits):
    flits = packet_or_flits.flits() if isinstance(packet_or_flits, Packet) else packet_or_flits
    return [(f.data, f.last, f.poison) for f in flits]


# ----------------------------------------------------------------------------------------------- env

class NicEnv:
    def __init__(self, dut, *, unicast=False, stall=0.2, on_uplink=None):
        self.dut = dut
        self.p = p = tbenv.params()
        self.unicast = unicast
        self.cycler = Cycler(dut)
        self.mem = GpuMemory(p["flit_width"])
        self.on_uplink = on_uplink
        self.desc = StreamDriver(dut, "desc", tbenv.rng("desc"), gap=stall)
        self.up = VcLinkSink(dut, "tx", tbenv.rng("tx"), credits=p["credits"], stall=stall, on_packet=self._uplink)
        self.down = VcLinkSource(dut, "rx", tbenv.rng("rx"), credits=p["rx_credits"], gap=stall)
        self.wr = MemWritePort(dut, "mem_wr", self.mem, tbenv.rng("wr"), stall=stall)
        self.rd_tx = MemReadPort(dut, "mem_rd_tx", self.mem, tbenv.rng("rdtx"), latency=12, stall=stall, gap=stall)
        self.rd_rx = MemReadPort(dut, "mem_rd_rx", self.mem, tbenv.rng("rdrx"), latency=12, stall=stall, gap=stall)
        self.cmd = StreamDriver(dut, "cmd", tbenv.rng("cmd"), gap=stall)
        self.mm_cfg = StreamDriver(dut, "mm_cfg", tbenv.rng("mmcfg"), gap=stall)
        self.ready = []
        self.ready_mon = StreamMonitor(dut, "ready", tbenv.rng("ready"), stall=stall,
                                       on_item=lambda b, c: self.ready.append(b))
        self.release_mon = StreamMonitor(dut, "release", tbenv.rng("rel"), stall=stall)
        self.cycler.add(self.desc, self.up, self.down, self.wr, self.rd_tx, self.rd_rx, self.cmd, self.mm_cfg,
                        self.ready_mon, self.release_mon)
        # The generator's packets, expected in order on VC 0 (request_packets), and its tag bindings.
        self.expect_req = collections.deque()
        self.bindings = collections.deque()
        self.next_tag = 0
        self.rbase = [WIN_BASE, 0, 0, 0][:p["groups"]]
        dut.gen_cfg.value = pack(GenConfig, port=PORT, unicast=int(unicast), row_shift=ROW_SHIFT)
        dut.rbase.value = WIN_BASE                                  # group 0: the symmetric token window
        self.rx_cfg = RxConfigValues(port=PORT, row_shift=ROW_SHIFT, win_base=WIN_BASE, win_rows=256,
                                     meta_flit=ROW_FLITS - 1, expert_base=16, dyn_base=DYN_BASE)
        c = self.rx_cfg
        dut.rx_cfg.value = pack(RxConfig, port=c.port, row_shift=c.row_shift, win_base=c.win_base,
                                win_rows=c.win_rows, meta_flit=c.meta_flit, expert_base=c.expert_base)
        dut.dyn_base.value = sum(b << (48 * i) for i, b in enumerate(DYN_BASE[:p["groups"]]))
        dut.clear.value = 0

    def post(self, d: Desc):
        """Queue a descriptor and its expected uplink packets."""
        pkts, binds, self.next_tag = request_packets(
            d, port=PORT, unicast=self.unicast, row_shift=ROW_SHIFT, rbase=self.rbase,
            max_payload=self.p["max_payload"], memory=self.mem, tags=self.p["tags"], next_tag=self.next_tag)
        self.expect_req.extend(pkts)
        self.bindings.extend(binds)
        self.desc.send(d.pack())

    def _uplink(self, vc, flits, cycle):
        if vc == 0:
            assert self.expect_req, f"cycle {cycle}: unexpected request on the uplink: {Header.decode(flits[0].data)}"
            want = self.expect_req.popleft()
            assert bits_of(flits) == bits_of(want), \
                f"cycle {cycle}: uplink request {Packet.from_flits(flits)} differs from the model's {want}"
        if self.on_uplink:
            self.on_uplink(vc, flits, cycle)

    def counters(self, name, n):
        bits = int(getattr(self.dut, name).value)
        return [(bits >> (32 * i)) & 0xFFFFFFFF for i in range(n)]

    def errors(self):
        return {"gen_errors": self.counters("gen_errors", len(DescError)),
                "rx_errors": self.counters("rx_errors", len(RxError)),
                "rsp_errors": self.counters("rsp_errors", len(RxError)),
                "remote_codes": self.counters("remote_codes", N_REMOTE_CODES),
                "tracker_errors": self.counters("tracker_errors", len(TrackerError))}


def remote_word(gpu, flit_addr):
    return default_word((gpu << 40) ^ flit_addr)


def add_u32(words):
    out = 0
    for lane in range(4):
        s = sum((w >> (32 * lane)) & 0xFFFFFFFF for w in words) & 0xFFFFFFFF
        out |= s << (32 * lane)
    return out


# ----------------------------------------------------------------------------------------------- loopback

class LoopSwitch:
    """The loopback test's switch: delivers to this GPU (port ``PORT``) whatever is addressed to it, on its
    opcode's VC, and plays the other GPUs and the in-switch reduction (a ``DYN_LD_REDUCE`` becomes a
    ``RED_READ`` to this GPU plus made-up contributions of the others, summed as u32 lanes into a
    ``RED_RESP``; a ``READ`` of another GPU is answered with that GPU's made-up row)."""

    def __init__(self, env):
        self.env = env
        self.entries = {}
        self.next_entry = 0
        self.dispatch_flits = 0

    def deliver(self, flits):
        self.env.down.send(flits)

    def on_packet(self, vc, flits, cycle):
        h = Header.decode(flits[0].data)
        op = h.opcode
        if op in (Opcode.DYN_ST.value, Opcode.WRITE.value):
            self.dispatch_flits += len(flits)
        if op == Opcode.DYN_ST.value:
            if h.mask >> PORT & 1:
                self.deliver(flits)
        elif op in (Opcode.WRITE.value, Opcode.READ_RESP.value):
            if h.dst == PORT:
                self.deliver(flits)
        elif op == Opcode.READ.value:
            if h.dst == PORT:
                self.deliver(flits)
            else:
                base = h.addr // FLIT_BYTES
                data = [remote_word(h.dst, base + i) for i in range(h.length)]
                self.deliver(Packet(Header(opcode=Opcode.READ_RESP, src=h.dst, tag=h.tag, length=h.length, dst=PORT),
                                    data).flits())
        elif op == Opcode.DYN_LD_REDUCE.value:
            entry = self.next_entry
            self.next_entry = (self.next_entry + 1) & 0xFF
            base = (WIN_BASE + (h.index << ROW_SHIFT)) // FLIT_BYTES + h.offset
            contrib = [[remote_word(g, base + i) for i in range(h.length)]
                       for g in range(8) if h.mask >> g & 1 and g != PORT]
            self.entries[entry] = (h, contrib)
            assert h.mask >> PORT & 1, "the test always includes the requester"
            self.deliver(Packet(Header(opcode=Opcode.RED_READ, src=PORT, tag=entry, length=h.length,
                                       etype=h.etype, redop=h.redop, dst=PORT, addr=base * FLIT_BYTES), []).flits())
        elif op == Opcode.RED_READ_RESP.value:
            assert h.dst == PORT, f"RED_READ_RESP to {h.dst}, the RED_READ came from {PORT}"
            req, contrib = self.entries.pop(h.tag)
            own = [f.data for f in flits[1:]]
            result = [add_u32([own[i]] + [c[i] for c in contrib]) for i in range(req.length)]
            self.deliver(Packet(Header(opcode=Opcode.RED_RESP, src=PORT, tag=req.tag, length=req.length,
                                       etype=req.etype, redop=req.redop, dst=PORT), result).flits())
        else:
            raise AssertionError(f"cycle {cycle}: unexpected packet on the uplink: {h}")


@cocotb.test()
async def test_loopback(dut):
    s = tbenv.settings()
    unicast = bool(s.get("unicast", 0))
    env = NicEnv(dut, unicast=unicast, stall=s.get("stall", 0.2))
    switch = LoopSwitch(env)
    env.on_uplink = switch.on_packet
    p = env.p
    E, L = p["experts"], p["tile_size"]
    rng = tbenv.rng("loop")
    await env.cycler.start()

    # ---- dispatch: token rows (data + metadata flit) in memory, one STORE descriptor each.
    n_tokens = s.get("tokens", 24)
    tokens = []
    for x in range(n_tokens):
        experts = sorted(rng.sample(range(64), 4))
        if x % 3 == 0:
            experts = sorted(set(experts[:3] + [16 + rng.randrange(E)]))
        gpus = {e // 8 for e in experts}             # 8 experts per GPU, 8 GPUs: this GPU hosts 16..23
        mask = sum(1 << g for g in gpus)
        src = SRC_BASE + x * (1 << ROW_SHIFT)
        for i in range(ROW_FLITS - 1):
            env.mem.write(src // FLIT_BYTES + i, rng.getrandbits(128))
        env.mem.write(src // FLIT_BYTES + ROW_FLITS - 1, pack_token_meta(experts))
        tokens.append((x, experts, mask, src))
        env.post(Desc(op=DescOp.STORE.value, mask=mask, index=x, group=0, addr=src, length=ROW_FLITS))
    slots = collections.Counter()
    for x, experts, mask, src in tokens:
        for e in experts:
            if 16 <= e < 16 + E:
                slots[e - 16] += 1
    expected_tiles = set()
    for e, n in slots.items():
        for t in range(0, n, L):
            expected_tiles.add((e, t // L, min(L, n - t)))
    for e in range(E):
        env.cmd.send(pack(TileCommand, op=TileCmdOp.EXPECT, expert=e, count=slots[e]))
    await env.cycler.until(lambda: len(env.ready) == len(expected_tiles), timeout=60000,
                           what=f"{len(expected_tiles)} ready tiles")
    got = [unpack(TileReady, b) for b in env.ready]
    got_set = {(g["expert"], g["tile"], g["count"]) for g in got}
    assert got_set == expected_tiles, f"ready tiles {sorted(got_set)}, expected {sorted(expected_tiles)}"
    for e in range(E):
        order = [g["tile"] for g in got if g["expert"] == e]
        assert order == sorted(order), f"expert {e}'s tiles left out of fill order: {order}"
    for x, experts, mask, src in tokens:
        row = (WIN_BASE + (x << ROW_SHIFT)) // FLIT_BYTES
        want = [env.mem.read(src // FLIT_BYTES + i) for i in range(ROW_FLITS)]
        have = [env.mem.words.get(row + i) for i in range(ROW_FLITS)]
        if mask >> PORT & 1:
            assert have == want, f"token {x}'s row did not land intact in window row {x}"
        else:
            assert all(h is None for h in have), f"token {x} is not for this GPU but landed"

    # ---- combine: ld_reduce over this GPU and two others, results to OUT_BASE.
    checks = []
    for k, (x, experts, mask, src) in enumerate(tokens[:s.get("combines", 6)]):
        cmask = (1 << PORT) | (1 << (5 + k % 3))
        length = rng.randint(1, 2 * p["max_payload"])
        out = OUT_BASE + k * 0x1000
        env.post(Desc(op=DescOp.LD_REDUCE.value, mask=cmask, index=x, group=0, addr=out, length=length,
                      etype=EType.U32.value, redop=RedOp.ADD.value))
        checks.append((x, cmask, length, out))
    expected_words = {}
    for x, cmask, length, out in checks:
        base = (WIN_BASE + (x << ROW_SHIFT)) // FLIT_BYTES
        dests = [g for g in range(8) if cmask >> g & 1]
        for i in range(length):
            parts = [env.mem.read(base + i) if g == PORT else remote_word(g, base + i) for g in dests]
            if unicast:
                for k, part in enumerate(parts):
                    expected_words[out // FLIT_BYTES + k * length + i] = part
            else:
                expected_words[out // FLIT_BYTES + i] = add_u32(parts)

    def landed():
        return all(env.mem.words.get(a) == v for a, v in expected_words.items())
    await env.cycler.until(lambda: landed() and env.desc.idle and env.down.idle, timeout=60000,
                           what="combine results")
    await env.cycler.cycles(30)
    assert not env.expect_req, f"{len(env.expect_req)} expected request packets never left the uplink"
    errors = env.errors()
    assert not any(any(v) for v in errors.values()), f"error counters moved: {errors}"
    per_copy = ROW_FLITS + -(-ROW_FLITS // p["max_payload"])
    copies = sum(bin(mask).count("1") if unicast else 1 for _, _, mask, _ in tokens)
    assert switch.dispatch_flits == copies * per_copy, \
        f"{switch.dispatch_flits} dispatch flits on the uplink, expected {copies * per_copy}"
    dut._log.info(f"{'unicast' if unicast else 'dynamic'}: {n_tokens} tokens dispatched with "
                  f"{switch.dispatch_flits} uplink flits (VC 0 {env.up.flits[0]}, VC 1 {env.up.flits[1]}); "
                  f"{len(expected_tiles)} tiles ready; {len(checks)} combines landed")


# ----------------------------------------------------------------------------------------------- serve

class ServeEnv(NicEnv):
    """The NIC as the switch's GPU: downlink traffic of every kind, checked against :class:`NicModel`."""

    def __init__(self, dut, *, stall):
        super().__init__(dut, stall=stall, on_uplink=None)
        p = self.p
        self.on_uplink = self._on_uplink
        self.spec = MemoryManagerSpec(groups=p["mm_groups"], layouts=p["mm_layouts"], index_bits=p["mm_index_bits"],
                                      slots=p["mm_slots"], epoch_bits=p["mm_epoch_bits"])
        self.model = NicModel(self.rx_cfg, memory=GpuMemory(p["flit_width"]), mm=self.spec, experts=p["experts"],
                              tile_size=p["tile_size"], max_slots=p["tiles"] * p["tile_size"], groups=p["groups"],
                              tags=p["tags"], max_payload=p["max_payload"])
        self.rng = tbenv.rng("serve")
        self.read_resp = []           # observed VC 1 packets
        self.fill_resp = []
        self.combines = 0             # DYN_LD_REDUCE seen and answered
        self.sent = collections.Counter()

    def check_model(self) -> dict:
        """After the drain: every VC 1 answer bit for bit, the memory image, the write count, every error
        counter and the memory manager's counters equal the model's. Returns the error counters."""
        m = self.model
        for what, got, want in (("read response", self.read_resp, m.read_responses),
                                ("TLB_FILL_RESP", self.fill_resp, m.fill_responses)):
            assert len(got) == len(want), f"{len(got)} {what}s on VC 1, expected {len(want)}"
            for i, (g, w) in enumerate(zip(got, want)):
                assert bits_of(g) == bits_of(w), f"{what} {i}: {Packet.from_flits(g)} differs from the model's {w}"
        a, b = self.mem.words, m.req.memory.words
        wrong = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        assert not wrong, (f"{len(wrong)} memory flits differ from the model; first at flit {wrong[0]:#x}: DUT "
                           f"{a.get(wrong[0])!r}, model {b.get(wrong[0])!r}")
        assert len(self.wr.writes) == m.req.writes + m.rsp.writes, \
            f"{len(self.wr.writes)} memory writes, the model made {m.req.writes + m.rsp.writes}"
        errors = self.errors()
        for name, model in (("rx_errors", m.req), ("rsp_errors", m.rsp)):
            want = [model.errors.get(e.name, 0) for e in RxError]
            assert errors[name] == want, f"{name} {errors[name]}, expected {want}"
        assert errors["remote_codes"] == m.rsp.remote_codes, \
            f"remote_codes {errors['remote_codes']}, expected {m.rsp.remote_codes}"
        assert not any(errors["gen_errors"]) and not any(errors["tracker_errors"]), errors
        mm = self.counters("mm_counters", len(MmCounter))
        want = [self.spec.counters.get(c, 0) for c in MmCounter]
        assert mm == want, f"mm_counters {mm}, expected {want}"
        return errors

    def mm_command(self, op, **kw):
        self.spec.command(op, **kw)
        self.mm_cfg.send(pack(MmCommand, op=op, **kw))

    def send(self, vc, packet, kind):
        flits = packet.flits() if isinstance(packet, Packet) else list(packet)
        self.model.receive(vc, flits)
        self.down.send(flits, vc=vc)
        self.sent[kind] += 1

    def _on_uplink(self, vc, flits, cycle):
        h = Header.decode(flits[0].data)
        if vc == 1:
            (self.fill_resp if h.opcode == Opcode.TLB_FILL_RESP.value else self.read_resp).append(flits)
            return
        assert h.opcode == Opcode.DYN_LD_REDUCE.value
        tag, addr = self.bindings.popleft()
        self.model.bind(tag, addr)
        self.combines += 1
        # Answer as the switch would: the reduced row, or an ERROR (an aborted reduction) with a code.
        if self.rng.random() < 0.25:
            code = self.rng.choice([c.value for c in ErrorCode if c.value])
            self.send(1, Packet(Header(opcode=Opcode.ERROR, src=PORT, tag=h.tag, dst=PORT, code=code), []), "error")
        else:
            data = [self.rng.getrandbits(128) for _ in range(h.length)]
            self.send(1, Packet(Header(opcode=Opcode.RED_RESP, src=PORT, tag=h.tag, length=h.length, etype=h.etype,
                                       redop=h.redop, dst=PORT), data), "red_resp")


def serve_packet(env, kind):
    rng, p = env.rng, env.p
    P = p["max_payload"]
    n = rng.randint(0, P)
    data = [rng.getrandbits(128) for _ in range(n)]
    src = rng.randrange(8)
    addr = OTHER + (rng.getrandbits(14) << 4)
    if kind == "write":
        return 0, Packet(Header(opcode=Opcode.WRITE, src=src, tag=rng.getrandbits(8), length=n, dst=PORT, addr=addr),
                         data)
    if kind == "mm_st":
        return 0, Packet(Header(opcode=Opcode.MM_ST, src=src, length=n, group=rng.randrange(4), addr=addr), data)
    if kind == "dyn_st":
        return 0, Packet(Header(opcode=Opcode.DYN_ST, src=src, length=n, group=rng.randrange(1, p["groups"]),
                                mask=1 << PORT, index=rng.getrandbits(8), offset=rng.getrandbits(4)), data)
    if kind in ("read", "red_read"):
        red = kind == "red_read"
        h = Header(opcode=Opcode.RED_READ if red else Opcode.READ, src=src, tag=rng.getrandbits(8),
                   xtag=rng.getrandbits(8), length=n, dst=PORT, addr=addr)
        if red:
            h.etype, h.redop = rng.choice(list(EType)), rng.choice(list(RedOp))
        return 0, Packet(h, [])
    if kind == "tlb_fill":
        group = rng.choice([0, 0, 0, 1, 1, 2, 200])       # alloc, lookup, unconfigured, out of range
        index = rng.randrange(1 << p["mm_index_bits"]) if rng.random() < 0.1 else rng.randrange(24)
        if rng.random() < 0.05:
            index = (1 << p["mm_index_bits"]) + rng.randrange(100)      # OUT_OF_BOUNDS
        return 0, Packet(Header(opcode=Opcode.TLB_FILL, src=rng.choice([src, 1]), tag=rng.getrandbits(8), group=group,
                                mask=1 << PORT, index=index), [])
    if kind == "wrong_class":
        # A response-class packet on VC 0, or a request on VC 1: dropped and counted (UNKNOWN_OPCODE).
        if rng.random() < 0.5:
            return 0, Packet(Header(opcode=rng.choice([Opcode.ERROR, Opcode.TLB_FILL_RESP]), src=src, dst=PORT), [])
        return 1, Packet(Header(opcode=rng.choice([Opcode.READ, Opcode.RED_READ_RESP]), src=src, dst=PORT), [])
    raise ValueError(kind)


@cocotb.test()
async def test_serve(dut):
    s = tbenv.settings()
    env = ServeEnv(dut, stall=s.get("stall", 0.3))
    p = env.p
    await env.cycler.start()
    # The memory manager: group 0 allocates (dispatch), group 1 looks up the same layout (combine).
    env.mm_command(SET_GROUP, group=0, valid=1, alloc=1, layout=0, base=MM_BASE[0], stride=32)
    env.mm_command(SET_GROUP, group=1, valid=1, alloc=0, layout=0, base=MM_BASE[1], stride=32)
    await env.cycler.until(lambda: env.mm_cfg.idle, timeout=200, what="memory-manager configuration")
    kinds = ["write", "mm_st", "dyn_st", "read", "red_read", "tlb_fill", "tlb_fill", "wrong_class"]
    weights = [3, 1, 1, 3, 3, 4, 0, 1]
    n = s.get("packets", 160)
    rng = env.rng
    m = env.model
    combines = 0

    def all_answered():
        return (env.down.idle and env.desc.idle and env.combines == combines and
                len(env.read_resp) == len(m.read_responses) and len(env.fill_resp) == len(m.fill_responses) and
                len(env.wr.writes) >= m.req.writes + m.rsp.writes)
    for phase in range(2):
        if phase:
            # A new layer: the layout's slots retire. The manager takes commands between fills, so the model
            # applies it when everything before it has been answered.
            env.mm_command(EPOCH_RESET, layout=0)
            await env.cycler.until(lambda: env.mm_cfg.idle, timeout=200, what="the epoch reset")
        for k in range(phase * n // 2, (phase + 1) * n // 2):
            if rng.random() < 0.15:
                length = rng.randint(1, 2 * p["max_payload"])
                env.post(Desc(op=DescOp.LD_REDUCE.value, mask=(1 << PORT) | 1, index=k, group=0,
                              addr=OUT_BASE + k * 0x400, length=length, etype=EType.U32.value,
                              redop=RedOp.ADD.value))
                combines += -(-length // p["max_payload"])
            vc, pk = serve_packet(env, rng.choices(kinds, weights)[0])
            env.send(vc, pk, f"{Opcode(pk.header.opcode).name}@vc{vc}")
        await env.cycler.until(
            all_answered, timeout=80000,
            what=f"every answer ({len(env.read_resp)}/{len(m.read_responses)} read responses, {len(env.fill_resp)}/"
                 f"{len(m.fill_responses)} fill responses, {env.combines}/{combines} combines)")
    await env.cycler.cycles(40)
    errors = env.check_model()
    codes = collections.Counter(Header.decode(f[0].data).code for f in env.fill_resp)
    assert codes[ErrorCode.NONE.value] and codes[ErrorCode.TLB_FAULT.value], f"fill answers by code: {codes}"
    dut._log.info(f"served {sum(env.sent.values())} downlink packets {dict(env.sent)}; "
                  f"{len(env.read_resp)} read answers, {len(env.fill_resp)} fill answers by code {dict(codes)}; "
                  f"{combines} combines; rx_errors {errors['rx_errors']}, rsp_errors {errors['rsp_errors']}")


# ----------------------------------------------------------------------------------------------- VC independence

@cocotb.test()
async def test_response_under_request_stall(dut):
    env = ServeEnv(dut, stall=0.0)
    p = env.p
    rng = env.rng
    resp_up = []
    env.on_uplink = lambda vc, flits, cycle: resp_up.append(flits) if vc == 1 else None
    await env.cycler.start()
    # Combine tags in flight: K DYN_LD_REDUCE requests leave on VC 0 (their tags are bound).
    K = min(6, p["tags"])
    for k in range(K):
        env.post(Desc(op=DescOp.LD_REDUCE.value, mask=(1 << PORT) | 1, index=k, group=0, addr=OUT_BASE + k * 0x400,
                      length=4, etype=EType.U32.value, redop=RedOp.ADD.value))
    await env.cycler.until(lambda: not env.expect_req and env.desc.idle, timeout=2000, what="the combine requests")
    binds = list(env.bindings)
    # Hold the NIC's VC 1 uplink credits: once its few credits are spent, no response can leave.
    env.up.withhold(1)
    n_reads = p["rx_credits"] + 4 * p["credits"] + 16
    for i in range(n_reads):
        env.send(0, Packet(Header(opcode=Opcode.READ, src=5, tag=i & 0xFF, length=p["max_payload"], dst=PORT,
                                  addr=OTHER + i * 0x100), []), "read")
    # The VC 0 receive buffer fills: the downlink's VC 0 credits reach 0 and stay there.
    await env.cycler.until(lambda: env.down.credits[0] == 0 and not env.down.queues[1], timeout=5000,
                           what="the VC 0 downlink credits exhausted")
    await env.cycler.cycles(200)
    assert env.down.credits[0] == 0 and env.down.queues[0], "VC 0 drained although its answers cannot leave"
    stuck = env.up.flits[1]
    assert stuck <= p["credits"], f"{stuck} flits left on VC 1 with {p['credits']} credits"
    # Responses on VC 1 must still commit.
    expected = {}
    for tag, addr in binds:
        data = [rng.getrandbits(128) for _ in range(4)]
        env.model.bind(tag, addr)
        env.send(1, Packet(Header(opcode=Opcode.RED_RESP, src=PORT, tag=tag, length=4, etype=EType.U32.value,
                                  dst=PORT), data), "red_resp")
        for i, w in enumerate(data):
            expected[addr // FLIT_BYTES + i] = w
    t0 = env.cycler.cycle
    await env.cycler.until(lambda: all(env.mem.words.get(a) == w for a, w in expected.items()), timeout=2000,
                           what="the VC 1 responses committed while VC 0 is stalled")
    took = env.cycler.cycle - t0
    assert env.down.credits[0] == 0 and env.down.queues[0], "VC 0 was not stalled while the responses landed"
    assert env.up.flits[1] == stuck, "a response left on VC 1 without a credit"
    rsp = env.errors()["rsp_errors"]
    assert not any(rsp), f"response path errors {rsp}"
    dut._log.info(f"VC 0 stalled ({len(env.down.queues[0])} flits waiting, credits 0); {len(binds)} RED_RESPs "
                  f"committed in {took} cycles")
    # Release the VC 1 credits: every READ is answered, intact and in order.
    env.up.withhold(1, on=False)
    m = env.model
    await env.cycler.until(lambda: env.down.idle and len(resp_up) == len(m.read_responses), timeout=40000,
                           what=f"the READ answers ({len(resp_up)}/{len(m.read_responses)})")
    for i, (g, w) in enumerate(zip(resp_up, m.read_responses)):
        assert bits_of(g) == bits_of(w), f"READ answer {i}: {Packet.from_flits(g)} differs from {w}"


# ----------------------------------------------------------------------------------------------- translated dispatch

@cocotb.test()
async def test_translated_dispatch(dut):
    """The DySHARP switch's dispatch, as this GPU sees it: per token a ``TLB_FILL`` (the AL-TLB's miss for
    (dispatch group, token index) from the source GPU), answered by the memory manager with the row it
    allocates in the token window (layout base = ``win_base``, stride = one row), then the token row as
    translated ``WRITE``s at that address. Checks: every fill answer equals the spec's (bit for bit), a
    second fill of the same index answers the same row, every row lands intact there, and the tracker
    (fed by the metadata flits) emits exactly the expected tiles: every other token also lists the first
    expert past this GPU's share, which must not count here (with ``experts`` not a power of two, the
    Tile Status Table has entries for it)."""
    s = tbenv.settings()
    env = ServeEnv(dut, stall=s.get("stall", 0.2))
    p = env.p
    E, L, P = p["experts"], p["tile_size"], p["max_payload"]
    rng = tbenv.rng("xlate")
    await env.cycler.start()
    env.mm_command(SET_GROUP, group=0, valid=1, alloc=1, layout=0, base=WIN_BASE, stride=(1 << ROW_SHIFT) // 16)
    await env.cycler.until(lambda: env.mm_cfg.idle, timeout=200, what="memory-manager configuration")
    n_tokens = s.get("tokens", 20)
    slots = collections.Counter()
    rows = {}
    first = 0
    for t in range(n_tokens):
        index, src = rng.randrange(1 << p["mm_index_bits"]), rng.randrange(8)
        while index in rows:
            index = rng.randrange(1 << p["mm_index_bits"])
        experts = set([16 + rng.randrange(E)] + rng.sample(range(64), 3))
        if t % 2 == 0:
            experts.add(16 + E)        # the next GPU's first expert: not this GPU's, whatever E's round-up
        experts = sorted(experts)
        for e in experts:
            if 16 <= e < 16 + E:
                slots[e - 16] += 1
        for _ in range(2 if t % 4 == 0 else 1):      # every fourth index is looked up twice
            env.send(0, Packet(Header(opcode=Opcode.TLB_FILL, src=src, tag=t, group=0, mask=1 << PORT, index=index),
                               []), "tlb_fill")
        await env.cycler.until(lambda: len(env.fill_resp) == len(env.model.fill_responses), timeout=2000,
                               what=f"token {t}'s fill answer")
        for got, want in zip(env.fill_resp[first:], env.model.fill_responses[first:]):
            assert bits_of(got) == bits_of(want), f"fill answer {Packet.from_flits(got)} differs from {want}"
            h = Header.decode(got[0].data)
            assert h.code == ErrorCode.NONE.value and h.addr == WIN_BASE + t * (1 << ROW_SHIFT), h
        first = len(env.fill_resp)
        rows[index] = h.addr
        data = [rng.getrandbits(128) for _ in range(ROW_FLITS - 1)] + [pack_token_meta(experts)]
        for off in range(0, ROW_FLITS, P):
            n = min(P, ROW_FLITS - off)
            env.send(0, Packet(Header(opcode=Opcode.WRITE, src=src, length=n, dst=PORT, addr=h.addr + off * FLIT_BYTES),
                               data[off:off + n]), "write")
    expected_tiles = {(e, k // L, min(L, n - k)) for e, n in slots.items() for k in range(0, n, L)}
    for e in range(E):
        env.cmd.send(pack(TileCommand, op=TileCmdOp.EXPECT, expert=e, count=slots[e]))
    await env.cycler.until(lambda: len(env.ready) == len(expected_tiles) and env.down.idle, timeout=20000,
                           what=f"{len(expected_tiles)} ready tiles")
    await env.cycler.cycles(30)
    got_tiles = {(g["expert"], g["tile"], g["count"]) for g in (unpack(TileReady, b) for b in env.ready)}
    assert got_tiles == expected_tiles, f"ready tiles {sorted(got_tiles)}, expected {sorted(expected_tiles)}"
    assert env.mem.words == env.model.req.memory.words, "token rows did not land at their translated rows"
    mm = env.counters("mm_counters", len(MmCounter))
    assert mm[MmCounter.ALLOCATED] == n_tokens and mm[MmCounter.FOUND] == -(-n_tokens // 4), mm
    errors = env.errors()
    assert not any(any(v) for v in errors.values()), f"error counters moved: {errors}"
    dut._log.info(f"{n_tokens} tokens translated by the memory manager and landed; {len(expected_tiles)} tiles ready")


# ----------------------------------------------------------------------------------------------- fill answers first

@cocotb.test()
async def test_fill_answers_first(dut):
    """TLB fill answers against read answers on VC 1. Both wait while the NIC's VC 1 uplink credits are
    held: a first read answer spends them, then three ``RED_READ``s (their answers fill the read-answer
    buffer) and ``fills`` ``TLB_FILL``s arrive. Released, every answer is checked bit for bit against
    :class:`NicModel` and, with ``fill_queue`` >= ``fills``, every fill answer leaves before the three read
    answers (the manager answered them all into the queue meanwhile, and the queue goes first); without it
    (round robin, one answer held in the manager) the read answers and the fill answers alternate."""
    s = tbenv.settings()
    env = ServeEnv(dut, stall=0.0)
    p = env.p
    P = p["max_payload"]
    order = []
    on_up = env.on_uplink
    env.on_uplink = lambda vc, flits, cycle: (order.append(Header.decode(flits[0].data).opcode) if vc == 1
                                              else None, on_up(vc, flits, cycle))
    await env.cycler.start()
    env.mm_command(SET_GROUP, group=0, valid=1, alloc=1, layout=0, base=MM_BASE[0], stride=32)
    await env.cycler.until(lambda: env.mm_cfg.idle, timeout=200, what="memory-manager configuration")
    env.up.withhold(1)
    # A read answer of exactly the VC 1 credits spends them all.
    env.send(0, Packet(Header(opcode=Opcode.READ, src=5, tag=0, length=p["credits"] - 1, dst=PORT, addr=OTHER), []),
             "read")
    await env.cycler.until(lambda: env.up.flits[1] == p["credits"], timeout=500, what="the VC 1 credits spent")
    fills = s.get("fills", 6)
    for i in range(3):
        env.send(0, Packet(Header(opcode=Opcode.RED_READ, src=3, tag=i + 1, xtag=0, length=P, dst=PORT,
                                  addr=OTHER + (i + 1) * 0x400, etype=EType.BF16.value, redop=RedOp.ADD.value), []),
                 "red_read")
    for i in range(fills):
        env.send(0, Packet(Header(opcode=Opcode.TLB_FILL, src=1, tag=i, group=0, mask=1 << PORT, index=i), []),
                 "tlb_fill")
    await env.cycler.until(lambda: env.down.idle, timeout=500, what="the requests delivered")
    await env.cycler.cycles(40 * fills + 100)
    env.up.withhold(1, on=False)
    m = env.model
    await env.cycler.until(lambda: len(env.read_resp) == len(m.read_responses) and
                           len(env.fill_resp) == len(m.fill_responses), timeout=4000, what="every answer")
    await env.cycler.cycles(20)
    env.check_model()
    F, R = Opcode.TLB_FILL_RESP.value, Opcode.RED_READ_RESP.value
    got = "".join("F" if op == F else "R" if op == R else "-" for op in order)
    if p.get("fill_queue", 0) >= fills:
        assert got == "-" + "F" * fills + "RRR", f"VC 1 answers in the order {got}: a read answer went before a " \
            f"queued fill answer"
    dut._log.info(f"VC 1 answers in the order {got} (fill_queue {p.get('fill_queue', 0)})")
