"""Power workload of the composed GPU NIC (:class:`hw.gpu_nic.nic.GpuNic`): one GPU of an 8-GPU
DeepSeek-V3 layer, dispatch and combine interleaved, as the integrated DySHARP switch shows them to it.

The testbench is the NIC's own (:class:`verif.tb.gpu_nic.ServeEnv`: 2-VC link agents, GPU memory ports,
the manager's command stream, the tracker's streams, and :class:`verif.models.gpu_nic.NicModel` checking
every answer). The far side plays the switch and the other GPUs. Tokens ``t`` of the layer (uniform top-8
of 256 experts, contiguous placement, :mod:`sim_models.routing`) come from GPU ``t % gpus`` in order; this
NIC is GPU 2 (the NIC testbench's port; experts 64..95 of 8 GPUs):

* **its own tokens** (dispatch): a ``STORE`` descriptor of the token's FP8 row (463 flits: 7168 B, 56
  fp32 scales and the metadata flit) to its destination mask without itself, leaving as ``DYN_ST`` on
  VC 0 (each packet bit for bit against :func:`verif.models.gpu_nic.request_packets`); (combine) an
  ``LD_REDUCE`` descriptor of its 896-flit BF16 output row over the same GPUs: 56 ``DYN_LD_REDUCE``
  requests, each answered ``hold`` cycles later by a ``RED_RESP`` of 16 flits on the downlink's VC 1 (a
  combine's round trip through the switch; the 32 combine tags then bound the rate, as in
  :mod:`synth.workloads.gpu_side`'s ``reqgen_fused``);
* **other GPUs' tokens routed here**: (dispatch) the AL-TLB's ``TLB_FILL`` for the token's index,
  which the memory manager answers with the row it allocates (first touch, group 0 over the token
  window), then the row as translated ``WRITE``s at that row, metadata flit last (token arrivals to
  the tracker); (combine) 56 ``RED_READ``s of 16 flits of the token's expert outputs (a region apart
  from the window, so no read races a write of the same run), answered on VC 1 from memory.

The downlink's VC 0 traffic is queued at the start in token order (enough that it is still queued when
the window closes: the run fails otherwise); both links then run as fast as the NIC and the credits
allow, the uplink carrying the row stores, the combine requests and the read and fill answers. Memory
answers after 20 cycles (``latency``), nothing stalls. After the window the run drains and
:meth:`ServeEnv.check_model` compares every read and fill answer, the memory image and every counter
with the model; every combine result must have landed.

In the window: ``dispatched_flits`` (``DYN_ST`` flits up plus ``TLB_FILL``/``WRITE`` flits down),
``reduced_flits`` (``RED_READ_RESP`` flits up plus ``RED_RESP`` flits down), and as events every link
flit by kind. Settings (``DYSHARP_ENV``): ``model``, ``gpus``, ``hold``, ``latency``, ``warmup``,
``cycles``, ``out``.
"""

import collections
import dataclasses

import cocotb
from cocotb.utils import get_sim_time

from hw.gpu_nic.receive_path import RxConfig, pack_token_meta
from hw.gpu_nic.request_gen import DescOp
from hw.packet import EType, Header, Opcode, Packet, RedOp

from verif.harness import tbenv
from verif.harness.cycler import Agent
from verif.harness.structs import pack
from verif.models.gpu_nic import Desc, NicModel
from verif.models.memory_manager import SET_GROUP
from verif.tb.gpu_nic import PORT, ServeEnv

from .gpu_side import COMBINE_ROW_FLITS, ROW_FLITS, moe_routing, write_result

__all__ = ["LayerEnv", "moe_layer"]

ROW_SHIFT = 13              # 8 KB token-window rows: a 463-flit row fits
SRC_BASE = 0x100_0000       # this GPU's own token rows (STORE sources), 8 KB apart
OUT_BASE = 0x800_0000       # its combine results, 16 KB apart
EXPERT_OUT = 0x2000_0000    # the expert outputs the switch reads for other GPUs' combines, 16 KB a token


class DownlinkLedger(Agent):
    """Counts, by kind, the flits the downlink source has sent: the source keeps only encoded flits, so
    each ``send`` records (VC, kind, flits) here and the flits that left a VC's queue since the last
    cycle are charged to its oldest records."""

    def __init__(self, source):
        self.source = source
        self.records = [collections.deque(), collections.deque()]
        self.queued = [0, 0]
        self.counting = False
        self.flits = collections.Counter()

    def add(self, vc, kind, n):
        self.records[vc].append([kind, n])
        self.queued[vc] += n

    def sample(self, cycle):
        for vc, q in enumerate(self.source.queues):
            left = self.queued[vc] - len(q)
            self.queued[vc] = len(q)
            while left:
                rec = self.records[vc][0]
                take = min(left, rec[1])
                if self.counting:
                    self.flits[rec[0]] += take
                rec[1] -= take
                left -= take
                if not rec[1]:
                    self.records[vc].popleft()


class UplinkLedger(Agent):
    """Counts, by kind, the flits the uplink sink takes, flit by flit: a flit belongs to the packet in
    progress on its VC, or to the one it just completed (sampled after the sink)."""

    def __init__(self, sink):
        self.sink = sink
        self.seen = [0, 0]
        self.last_kind = [None, None]       # set by the sink's on_packet before this samples
        self.counting = False
        self.flits = collections.Counter()

    def sample(self, cycle):
        for vc in range(len(self.seen)):
            n, self.seen[vc] = self.sink.flits[vc] - self.seen[vc], self.sink.flits[vc]
            if n and self.counting:
                part = self.sink.partial[vc]
                kind = Opcode(Header.decode(part[0].data).opcode).name if part else self.last_kind[vc]
                self.flits[kind] += n


class Answers(Agent):
    """Sends each queued downlink packet once its cycle has come (the combine's round trip)."""

    def __init__(self, env):
        self.env = env
        self.due = collections.deque()

    def sample(self, cycle):
        while self.due and self.due[0][0] <= cycle:
            _, vc, packet, kind = self.due.popleft()
            self.env.send(vc, packet, kind)


class LayerEnv(ServeEnv):
    """The NIC testbench's environment as GPU ``PORT`` of the layer: the token window of 8 KB rows, this
    GPU's experts, the link ledgers, and combine requests answered ``hold`` cycles later."""

    def __init__(self, dut, *, hold: int):
        if not isinstance(hold, int) or hold < 1:
            raise ValueError(f"hold (a combine's round trip, cycles) must be an integer >= 1, got {hold!r}")
        super().__init__(dut, stall=0.0)
        p = self.p
        self.me = PORT                  # the testbench's port: the generator's source and the receive port
        self.rx_cfg = c = dataclasses.replace(self.rx_cfg, port=self.me, row_shift=ROW_SHIFT,
                                              meta_flit=ROW_FLITS - 1, expert_base=self.me * p["experts"])
        dut.rx_cfg.value = pack(RxConfig, port=c.port, row_shift=c.row_shift, win_base=c.win_base,
                                win_rows=c.win_rows, meta_flit=c.meta_flit, expert_base=c.expert_base)
        self.model = NicModel(c, memory=self.model.req.memory, mm=self.spec, experts=p["experts"],
                              tile_size=p["tile_size"], max_slots=p["tiles"] * p["tile_size"],
                              groups=p["groups"], tags=p["tags"], max_payload=p["max_payload"])
        self.ledger = DownlinkLedger(self.down)
        self.up_ledger = UplinkLedger(self.up)
        self.answers = Answers(self)
        self.cycler.add(self.ledger, self.up_ledger, self.answers)
        self.hold = hold
        self.requested = 0              # DYN_LD_REDUCE requests seen (each answered)

    async def start(self):
        await self.cycler.start()
        self.mm_command(SET_GROUP, group=0, valid=1, alloc=1, layout=0, base=self.rx_cfg.win_base,
                        stride=(1 << ROW_SHIFT) // 16)
        await self.cycler.until(lambda: self.mm_cfg.idle, timeout=200, what="memory-manager configuration")

    def send(self, vc, packet, kind):
        self.ledger.add(vc, kind, len(packet.flits()) if isinstance(packet, Packet) else len(packet))
        super().send(vc, packet, kind)

    def _on_uplink(self, vc, flits, cycle):
        h = Header.decode(flits[0].data)
        self.up_ledger.last_kind[vc] = Opcode(h.opcode).name
        if vc == 1:
            (self.fill_resp if h.opcode == Opcode.TLB_FILL_RESP.value else self.read_resp).append(flits)
            return
        if h.opcode == Opcode.DYN_ST.value:
            return                      # checked bit for bit against the request model by NicEnv
        assert h.opcode == Opcode.DYN_LD_REDUCE.value, f"cycle {cycle}: unexpected request {h}"
        tag, addr = self.bindings.popleft()
        self.model.bind(tag, addr)
        self.requested += 1
        data = [self.rng.getrandbits(128) for _ in range(h.length)]
        self.answers.due.append((cycle + self.hold, 1, Packet(Header(
            opcode=Opcode.RED_RESP, src=self.me, tag=h.tag, length=h.length, etype=h.etype, redop=h.redop,
            dst=self.me), data), "RED_RESP"))


def _queue_layer(env, s, need_flits, need_own):
    """Queue the layer's traffic (module docstring) until the downlink's VC 0 holds ``need_flits`` and
    this GPU has ``need_own`` tokens of its own."""
    p = env.p
    gpus, me, P = s.get("gpus", 8), env.me, p["max_payload"]
    _, rt, _, masks = moe_routing(s.get("model", "deepseek-v3"), gpus, 4096, tbenv.seed())
    rng = env.rng
    queued = own = rows = 0
    for t, mask in enumerate(int(m) for m in masks):
        src = t % gpus
        if src == me:
            if mask & ~(1 << me):
                env.post(Desc(op=DescOp.STORE.value, mask=mask & ~(1 << me), index=t, group=0,
                              addr=SRC_BASE + own * 0x2000, length=ROW_FLITS))
            env.post(Desc(op=DescOp.LD_REDUCE.value, mask=mask | (1 << me), index=t, group=1,
                          addr=OUT_BASE + own * 0x4000, length=COMBINE_ROW_FLITS, etype=EType.BF16.value,
                          redop=RedOp.ADD.value))
            own += 1
        elif mask >> me & 1:
            # Dispatch: the fill, then the row at the row the manager allocates (first touch: the next one).
            env.send(0, Packet(Header(opcode=Opcode.TLB_FILL, src=src, tag=t & 0xFF, group=0, mask=1 << me,
                                      index=rows), []), "TLB_FILL")
            addr = env.rx_cfg.win_base + (rows << ROW_SHIFT)
            data = [rng.getrandbits(128) for _ in range(ROW_FLITS - 1)] + [pack_token_meta(int(e) for e in rt[t])]
            for off in range(0, ROW_FLITS, P):
                n = min(P, ROW_FLITS - off)
                env.send(0, Packet(Header(opcode=Opcode.WRITE, src=src, length=n, dst=me, addr=addr + off * 16),
                                   data[off:off + n]), "WRITE")
            # Combine: the switch reads this GPU's share of the token's output row, 16 flits a request.
            for off in range(0, COMBINE_ROW_FLITS, P):
                env.send(0, Packet(Header(opcode=Opcode.RED_READ, src=src, tag=t & 0xFF, xtag=off // P,
                                          length=P, etype=EType.BF16.value, redop=RedOp.ADD.value, dst=me,
                                          addr=EXPERT_OUT + rows * 0x4000 + off * 16), []), "RED_READ")
            rows += 1
            if rows == min(1 << p["mm_index_bits"], env.rx_cfg.win_rows):
                raise ValueError(f"the token window holds {rows} rows; {need_flits} downlink flits need more")
            queued += 1 + ROW_FLITS + -(-ROW_FLITS // P) + COMBINE_ROW_FLITS // P
        if queued >= need_flits and own >= need_own:
            return own, rows
    raise ValueError(f"4096 tokens do not give {need_flits} downlink flits and {need_own} own tokens")


@cocotb.test()
async def moe_layer(dut):
    s = tbenv.settings()
    warm, window = s.get("warmup", 400), s.get("cycles", 1000)
    env = LayerEnv(dut, hold=s.get("hold", 200))
    await env.start()
    for port in (env.rd_tx, env.rd_rx):
        port.latency = s.get("latency", 20)
    # An own token's 56 combine requests need at least 56 / tags round trips of ``hold`` cycles.
    hold = s.get("hold", 200)
    own, rows = _queue_layer(env, s, need_flits=2 * (warm + window),
                             need_own=2 + (warm + window) // max(ROW_FLITS, hold * -(-56 // env.p["tags"])))
    await env.cycler.cycles(warm)
    env.up_ledger.counting = env.ledger.counting = True
    t0 = get_sim_time("ps")
    await env.cycler.cycles(window)
    t1 = get_sim_time("ps")
    env.up_ledger.counting = env.ledger.counting = False
    assert env.down.queues[0] and env.expect_req, \
        "the downlink's requests or this GPU's own requests ran out inside the window: not a line-rate window"
    up, down = dict(env.up_ledger.flits), dict(env.ledger.flits)
    m = env.model
    await env.cycler.until(
        lambda: (env.down.idle and env.desc.idle and not env.answers.due and not env.expect_req
                 and len(env.read_resp) == len(m.read_responses) and len(env.fill_resp) == len(m.fill_responses)
                 and len(env.wr.writes) >= m.req.writes + m.rsp.writes),
        timeout=400000, what="the layer's drain")
    await env.cycler.cycles(40)
    env.check_model()
    assert not env.bindings, f"{len(env.bindings)} combine requests never left the uplink"
    dispatched = up.get("DYN_ST", 0) + down.get("TLB_FILL", 0) + down.get("WRITE", 0)
    reduced = up.get("RED_READ_RESP", 0) + down.get("RED_RESP", 0)
    r = write_result(s, t0, t1, dispatched_flits=dispatched, reduced_flits=reduced,
                     events={**{f"up_{k}": v for k, v in up.items()}, **{f"down_{k}": v for k, v in down.items()}},
                     own_tokens=own, rows_received=rows, combine_requests=env.requested,
                     uplink_utilisation=sum(up.values()) / window,
                     downlink_utilisation=sum(down.values()) / window)
    dut._log.info(f"power workload: {r}")
