"""cocotb testbench of the composed GPU NIC (:mod:`hw.gpu_nic.nic`) in loopback through a small Python
switch: dispatch and combine end to end, in dynamic and unicast modes.

The testbench's switch delivers to this GPU (port ``PORT``) whatever is addressed to it (``DYN_ST`` with
its mask bit, ``WRITE``/``READ``/responses with ``dst`` = ``PORT``) and plays the other GPUs and the
in-switch reduction: a ``DYN_LD_REDUCE`` becomes a ``RED_READ`` to this GPU (at the row of ``index``,
the symmetric layout) plus made-up contributions from the other GPUs in the mask, summed as u32 lanes into
a ``RED_RESP``; a ``READ`` to another GPU is answered with that GPU's made-up row.

Checks: every dispatched token this GPU hosts lands in its token-window row intact (metadata flit
included); the token tracker, fed by the receive path's arrivals, emits exactly the expected tiles (full
ones, and each expert's partial last tile after ``EXPECT``), each expert's tiles in fill order; every
combine result lands at its address with the expected value; the dynamic dispatch uses fewer uplink
flits than the unicast one; no error counter moves. Random stalls on the links and memory ports.
"""

import collections

import cocotb

from hw.gpu_nic.receive_path import RxConfig, pack_token_meta
from hw.gpu_nic.request_gen import DescOp, GenConfig
from hw.gpu_nic.token_tracker import TileCommand, TileCmdOp, TileReady
from hw.packet import EType, Header, Opcode, Packet, RedOp

from verif.harness import tbenv
from verif.harness.credit import CreditSink, CreditSource
from verif.harness.cycler import Cycler
from verif.harness.gpu_memory import GpuMemory, MemReadPort, MemWritePort, default_word
from verif.models.gpu_nic import FLIT_BYTES, Desc
from verif.harness.stream import StreamDriver, StreamMonitor
from verif.harness.structs import pack, unpack

PORT = 2
ROW_FLITS = 20
ROW_SHIFT = 9
WIN_BASE = 0x40_0000
SRC_BASE = 0x100_0000
OUT_BASE = 0x200_0000
EXPERT_BASE = 16


def remote_word(gpu, flit_addr):
    return default_word((gpu << 40) ^ flit_addr)


def add_u32(words):
    out = 0
    for lane in range(4):
        s = sum((w >> (32 * lane)) & 0xFFFFFFFF for w in words) & 0xFFFFFFFF
        out |= s << (32 * lane)
    return out


class LoopSwitch:
    """The testbench's switch: see the module docstring."""

    def __init__(self, env):
        self.env = env
        self.entries = {}
        self.next_entry = 0
        self.dispatch_flits = 0

    def on_packet(self, flits, cycle):
        env = self.env
        h = Header.decode(flits[0].data)
        op = h.opcode
        if op in (Opcode.DYN_ST.value, Opcode.WRITE.value):
            self.dispatch_flits += len(flits)
        if op == Opcode.DYN_ST.value:
            if h.mask >> PORT & 1:
                env.deliver(flits)
        elif op in (Opcode.WRITE.value, Opcode.READ_RESP.value):
            if h.dst == PORT:
                env.deliver(flits)
        elif op == Opcode.READ.value:
            if h.dst == PORT:
                env.deliver(flits)
            else:
                base = h.addr // FLIT_BYTES
                data = [remote_word(h.dst, base + i) for i in range(h.length)]
                env.deliver(Packet(Header(opcode=Opcode.READ_RESP, src=h.dst, tag=h.tag, length=h.length, dst=PORT),
                                   data).flits())
        elif op == Opcode.DYN_LD_REDUCE.value:
            entry = self.next_entry
            self.next_entry = (self.next_entry + 1) & 0xFF
            base = (WIN_BASE + (h.index << ROW_SHIFT)) // FLIT_BYTES + h.offset
            contrib = [[remote_word(g, base + i) for i in range(h.length)]
                       for g in range(8) if h.mask >> g & 1 and g != PORT]
            self.entries[entry] = (h, contrib)
            assert h.mask >> PORT & 1, "the test always includes the requester"
            env.deliver(Packet(Header(opcode=Opcode.RED_READ, src=PORT, tag=entry, length=h.length,
                                      etype=h.etype, redop=h.redop, dst=PORT, addr=base * FLIT_BYTES), []).flits())
        elif op == Opcode.RED_READ_RESP.value:
            req, contrib = self.entries.pop(h.tag)
            own = [f.data for f in flits[1:]]
            result = [add_u32([own[i]] + [c[i] for c in contrib]) for i in range(req.length)]
            env.deliver(Packet(Header(opcode=Opcode.RED_RESP, src=PORT, tag=req.tag, length=req.length,
                                      etype=req.etype, redop=req.redop, dst=PORT), result).flits())
        else:
            raise AssertionError(f"cycle {cycle}: unexpected packet on the uplink: {h}")


class NicEnv:
    def __init__(self, dut, *, unicast, stall):
        self.dut = dut
        self.p = p = tbenv.params()
        self.unicast = unicast
        self.cycler = Cycler(dut)
        self.mem = GpuMemory(p["flit_width"])
        self.switch = LoopSwitch(self)
        self.desc = StreamDriver(dut, "desc", tbenv.rng("desc"), gap=stall)
        self.tx = CreditSink(dut, "tx", tbenv.rng("tx"), credits=p["credits"], stall=stall,
                             on_packet=self.switch.on_packet)
        self.rx = CreditSource(dut, "rx", tbenv.rng("rx"), credits=p["rx_credits"], gap=stall)
        self.wr = MemWritePort(dut, "mem_wr", self.mem, tbenv.rng("wr"), stall=stall)
        self.rd_tx = MemReadPort(dut, "mem_rd_tx", self.mem, tbenv.rng("rdtx"), latency=12, stall=stall, gap=stall)
        self.rd_rx = MemReadPort(dut, "mem_rd_rx", self.mem, tbenv.rng("rdrx"), latency=12, stall=stall, gap=stall)
        self.cmd = StreamDriver(dut, "cmd", tbenv.rng("cmd"), gap=stall)
        self.ready = []
        self.ready_mon = StreamMonitor(dut, "ready", tbenv.rng("ready"), stall=stall,
                                       on_item=lambda b, c: self.ready.append(b))
        self.released = 0
        self.release_mon = StreamMonitor(dut, "release", tbenv.rng("rel"), stall=stall,
                                         on_item=lambda b, c: self._released())
        self.cycler.add(self.desc, self.tx, self.rx, self.wr, self.rd_tx, self.rd_rx, self.cmd, self.ready_mon,
                        self.release_mon)
        dut.gen_cfg.value = pack(GenConfig, port=PORT, unicast=int(unicast), row_shift=ROW_SHIFT)
        dut.rbase.value = WIN_BASE                                  # group 0: the symmetric token window
        dut.rx_cfg.value = pack(RxConfig, port=PORT, row_shift=ROW_SHIFT, win_base=WIN_BASE, win_rows=256,
                                       meta_flit=ROW_FLITS - 1, expert_base=EXPERT_BASE)
        dut.dyn_base.value = WIN_BASE
        dut.clear.value = 0

    def _released(self):
        self.released += 1

    def deliver(self, flits):
        self.rx.send(flits)

    def errors(self):
        out = {}
        for name, width in (("gen_errors", 4), ("rx_errors", 9), ("tracker_errors", 6)):
            bits = int(getattr(self.dut, name).value)
            out[name] = [(bits >> (32 * i)) & 0xFFFFFFFF for i in range(width)]
        return out


@cocotb.test()
async def test_loopback(dut):
    s = tbenv.settings()
    unicast = bool(s.get("unicast", 0))
    env = NicEnv(dut, unicast=unicast, stall=s.get("stall", 0.2))
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
            experts = sorted(set(experts[:3] + [EXPERT_BASE + rng.randrange(E)]))
        gpus = {e // 8 for e in experts}             # 8 experts per GPU, 8 GPUs: this GPU hosts 16..23
        mask = sum(1 << g for g in gpus)
        src = SRC_BASE + x * (1 << ROW_SHIFT)
        for i in range(ROW_FLITS - 1):
            env.mem.write(src // FLIT_BYTES + i, rng.getrandbits(128))
        env.mem.write(src // FLIT_BYTES + ROW_FLITS - 1, pack_token_meta(experts))
        tokens.append((x, experts, mask, src))
        env.desc.send(Desc(op=DescOp.STORE.value, mask=mask, index=x, group=0, addr=src, length=ROW_FLITS).pack())
    # Expected tiles: slots in arrival (= token) order per local expert; totals via EXPECT.
    slots = collections.Counter()
    for x, experts, mask, src in tokens:
        for e in experts:
            if EXPERT_BASE <= e < EXPERT_BASE + E:
                slots[e - EXPERT_BASE] += 1
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
        env.desc.send(Desc(op=DescOp.LD_REDUCE.value, mask=cmask, index=x, group=0, addr=out, length=length,
                           etype=EType.U32.value, redop=RedOp.ADD.value).pack())
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
    await env.cycler.until(lambda: landed() and env.desc.idle and env.rx.idle, timeout=60000,
                           what="combine results")
    await env.cycler.cycles(30)
    errors = env.errors()
    assert not any(any(v) for v in errors.values()), f"error counters moved: {errors}"
    # Uplink flits of the dispatch: one copy per token, or one per destination GPU.
    per_copy = ROW_FLITS + -(-ROW_FLITS // p["max_payload"])
    copies = sum(bin(mask).count("1") if unicast else 1 for _, _, mask, _ in tokens)
    assert env.switch.dispatch_flits == copies * per_copy, \
        f"{env.switch.dispatch_flits} dispatch flits on the uplink, expected {copies * per_copy}"
    dut._log.info(f"{'unicast' if unicast else 'dynamic'}: {n_tokens} tokens dispatched with "
                  f"{env.switch.dispatch_flits} uplink flits; {len(expected_tiles)} tiles ready; "
                  f"{len(checks)} combines landed")
