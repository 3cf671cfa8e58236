"""Zero-load latency of the integrated DySHARP switch, stage totals asserted cycle for cycle (Amaranth
simulator, 4 ports): the figures of docs/architecture.md; and the ingress check's refusals. Both scenarios run
on one compiled simulator, each from reset: compiling the 4-port switch for Amaranth's simulator costs about
8 CPU-s, more than both runs."""

from amaranth.sim import Simulator

from hw.packet import EType, Header, Opcode, Packet, RedOp
from hw.switch.dysharp_switch import CfgTarget, DySharpSwitch, IngressCounter

N, L, FILL = 4, 20, 0x1000


class _Bench:
    """The switch compiled once for Amaranth's simulator; :meth:`run` plays one scenario from reset (the
    testbench reads the scenario from ``self.scenario`` each time the simulator restarts it)."""

    def __init__(self):
        self.dut = DySharpSwitch(ports=N, credits=32, resp_credits=32)
        self.sim = Simulator(self.dut)
        self.sim.add_clock(1e-9)
        self.sim.add_testbench(self._tb)
        self.scenario = None
        self.ran = False

    def run(self, sends, cycles=400):
        """Drive ``sends`` [(cycle, port, vc, Packet)] into the switch; GPUs answer TLB_FILL and RED_READ
        after ``L`` cycles. Returns [(cycle, port, vc, Header)] of every packet header the switch sent, and
        the ingress counters per port."""
        out, ingress = [], []
        self.scenario = (sends, cycles, out, ingress)
        if self.ran:
            self.sim.reset()      # every signal and memory to its initial value, the testbench restarted
        self.ran = True
        self.sim.run()
        return out, ingress

    async def _tb(self, ctx):
        dut = self.dut
        sends, cycles, out, ingress = self.scenario
        ctx.set(dut.cfg.valid, 1)
        ctx.set(dut.cfg.payload, {"target": CfgTarget.TLB, "all": 1,
                                  "tlb": {"op": 0, "group": 1, "mask": (1 << N) - 1, "rows": 1024}})
        await ctx.tick()
        ctx.set(dut.cfg.payload, {"target": CfgTarget.GROUP, "group": {"handle": 2, "mask": 0b0010}})
        await ctx.tick()
        ctx.set(dut.cfg.valid, 0)
        queue = {i: [] for i in range(N)}
        for t, port, vc, p in sends:
            queue[port].append([t, vc, p.flits()])
        credits = [[8, 8] for _ in range(N)]
        head = [True] * N
        for cyc in range(cycles):
            for i in range(N):
                ctx.set(dut.rx[i].valid, 0)
                ctx.set(dut.tx[i].credit.as_value(), 0)
                queue[i].sort(key=lambda e: e[0])
                if queue[i] and queue[i][0][0] <= cyc and credits[i][queue[i][0][1]] > 0:
                    e = queue[i][0]
                    f = e[2].pop(0)
                    credits[i][e[1]] -= 1
                    if not e[2]:
                        queue[i].pop(0)
                    ctx.set(dut.rx[i].valid, 1)
                    ctx.set(dut.rx[i].vc, e[1])
                    ctx.set(dut.rx[i].flit, {"data": f.data, "last": f.last})
            for i in range(N):
                if ctx.get(dut.tx[i].valid):
                    vc, fd = ctx.get(dut.tx[i].vc), ctx.get(dut.tx[i].flit)
                    ctx.set(dut.tx[i].credit.as_value(), 1 << (2 * vc))
                    if head[i]:
                        h = Header.decode(fd.data)
                        out.append((cyc, i, vc, h))
                        if h.opcode == Opcode.TLB_FILL.value:
                            r = Header(opcode=Opcode.TLB_FILL_RESP, tag=h.tag, dst=i, addr=FILL)
                            queue[i].append([cyc + L, 1, Packet(r).flits()])
                        if h.opcode == Opcode.RED_READ.value:
                            r = Header(opcode=Opcode.RED_READ_RESP, dst=h.src, tag=h.tag, xtag=h.xtag,
                                       length=h.length, etype=h.etype, redop=h.redop)
                            queue[i].append([cyc + L, 1, Packet(r, [7] * h.length).flits()])
                    head[i] = bool(fd.last)
                cr = ctx.get(dut.rx[i].credit.as_value())
                credits[i][0] += cr & 3
                credits[i][1] += cr >> 2
            await ctx.tick()
        ingress.extend(list(ctx.get(dut.status.port[i].ingress)) for i in range(N))


def _dyn_st(offset):
    return Packet(Header(opcode=Opcode.DYN_ST, tag=offset, length=1, group=1, mask=0b0010, index=5,
                         offset=offset), [0xA0 + offset])


def _zero_load_latency(bench):
    sends = [(0, 0, 0, _dyn_st(0)),                        # cold: AL-TLB miss
             (60, 0, 0, _dyn_st(1)),                       # warm: hit
             (120, 0, 0, Packet(Header(opcode=Opcode.WRITE, tag=3, length=1, dst=1, addr=0x40), [0xC])),
             (180, 0, 0, Packet(Header(opcode=Opcode.DYN_LD_REDUCE, tag=4, length=1, group=1, mask=0b0010,
                                       index=5, etype=EType.S32, redop=RedOp.ADD))),
             # From GPU 1, the static group's member (the switch refuses a non-member: ISOLATION).
             (300, 1, 0, Packet(Header(opcode=Opcode.MM_LD_REDUCE, tag=5, length=1, group=2, addr=0x80,
                                       etype=EType.S32, redop=RedOp.ADD)))]
    out, _ = bench.run(sends)
    seen = [(c, port, vc, Opcode(h.opcode).name, h.tag if h.opcode != Opcode.RED_READ.value else None,
             h.addr if Opcode(h.opcode) in (Opcode.WRITE, Opcode.RED_READ) else None) for c, port, vc, h in out]
    assert seen == [
        # Every NVSwitch traversal takes 5 cycles (its allocator's match is registered; 4 before).
        (10, 1, 0, "TLB_FILL", 0, None),                 # miss: the fill leaves 10 cycles after the header
        (37, 1, 0, "WRITE", 0, FILL),                    # 7 cycles after the fill response went in (30)
        (71, 1, 0, "WRITE", 1, FILL + 16),               # hit: 11 cycles, row + offset x 16
        (128, 1, 0, "WRITE", 3, 0x40),                   # no translation: 8 cycles
        (195, 1, 0, "RED_READ", None, FILL),             # ld_reduce header in -> RED_READ out: 15
        (231, 0, 1, "RED_RESP", 4, None),                # RED_READ_RESP in (215) -> RED_RESP out: 16
        (312, 1, 0, "RED_READ", None, 0x80),             # static: no translation, 12
        (348, 1, 1, "RED_RESP", 5, None),
    ], seen


def _ingress_refuses_wrong_class_and_switch_only_opcodes(bench):
    """A GPU may not send a switch-only opcode (RED_READ, TLB_FILL, DYN_RED_READ), nor a request on the
    response channel or a response on the request channel: each is dropped whole and answered with an
    ERROR(UNKNOWN_OPCODE) on the sender's response channel, and counted; the good packet after it flows."""
    bad = [(0, 0, 0, Packet(Header(opcode=Opcode.RED_READ, tag=11, length=1, dst=1, addr=0x40))),
           (0, 1, 0, Packet(Header(opcode=Opcode.TLB_FILL, tag=12, group=1, index=3, mask=0b0100))),
           (0, 2, 1, Packet(Header(opcode=Opcode.WRITE, tag=13, length=2, dst=3, addr=0x80), [1, 2])),
           (0, 3, 0, Packet(Header(opcode=Opcode.READ_RESP, tag=14, length=1, dst=0), [5])),
           (20, 0, 0, Packet(Header(opcode=Opcode.WRITE, tag=15, length=1, dst=2, addr=0xC0), [9]))]
    out, ingress = bench.run(bad, cycles=80)
    got = sorted((port, vc, Opcode(h.opcode).name, h.tag, h.code, h.dst) for _, port, vc, h in out)
    unknown = 1   # ErrorCode.UNKNOWN_OPCODE
    assert got == [(0, 1, "ERROR", 11, unknown, 0), (1, 1, "ERROR", 12, unknown, 1),
                   (2, 0, "WRITE", 15, 0, 2),
                   (2, 1, "ERROR", 13, unknown, 2), (3, 1, "ERROR", 14, unknown, 3)], got
    assert [row[IngressCounter.REFUSED_REQ] for row in ingress] == [1, 1, 0, 1]
    assert [row[IngressCounter.REFUSED_RESP] for row in ingress] == [0, 0, 1, 0]


def test_zero_load_latency_and_ingress_refusals():
    """Both scenarios on one compiled switch, each from reset; a failure of either is reported."""
    bench, failures = _Bench(), []
    for check in (_zero_load_latency, _ingress_refuses_wrong_class_and_switch_only_opcodes):
        try:
            check(bench)
        except AssertionError as e:
            failures.append(f"{check.__name__.lstrip('_')}: {e}")
    assert not failures, "\n".join(failures)
