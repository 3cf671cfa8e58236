import collections, random
import cocotb
from cocotb.triggers import ReadOnly, RisingEdge
from verif import tbenv
from verif.credit import CreditSink, CreditSource
from verif.cycler import Cycler
from verif.packet_gen import unicast_packet

@cocotb.test()
async def test_sat(dut):
    p = tbenv.params(); n = p["ports"]
    rng = random.Random(1)
    cyc = Cycler(dut)
    srcs = [CreditSource(dut, f"rx__{i}", rng, credits=p["credits"]) for i in range(n)]
    sinks = [CreditSink(dut, f"tx__{j}", rng, credits=p["credits"]) for j in range(n)]
    cyc.add(*srcs, *sinks)
    await cyc.start()
    stats = collections.Counter()
    ins = [getattr(dut, f"in{i}") for i in range(n)]
    def watch(c):
        for s in srcs:
            while len(s.queue) < 40:
                s.send(unicast_packet(rng, srcs.index(s), rng.randrange(n), rng.randint(1, 16)))
        if c < 1500: return
        busy = int(dut.out_busy.value)
        eg = [int(getattr(dut, f"egress{j}").level.value) for j in range(n)]
        avail = [int(u.rd_active.value) == 0 for u in ins]
        for j in range(n):
            txv = int(getattr(dut, f"tx__{j}__valid").value)
            stats["cycles"] += 1
            if txv: stats["tx"] += 1
            elif (busy >> j) & 1: stats["idle_busy"] += 1
            else:
                stats["idle_unmatched"] += 1
                nreq = sum(1 for u in ins if (int(u.req.value) >> j) & 1)
                stats[f"unmatched_req{min(nreq,3)}"] += 1
                if nreq == 0:
                    for i, u in enumerate(ins):
                        has = int(getattr(u, f"q{j}_count").value) > 0
                        act = int(u.rd_active.value)
                        if has and not act: stats["has_free_not_req"] += 1
                        if has and act: stats["has_busy"] += 1
                    stats["nohas"] += all(int(getattr(u, f"q{j}_count").value) == 0 for u in ins)
        stats["in_idle"] += sum(avail)
        stats["pending"] += sum(int(u.pending.value.to_signed()) for u in ins) / n
        stats["srccred"] += sum(s_.credits for s_ in srcs) / n
        stats["srcvalid"] += sum(int(getattr(dut, f"rx__{i}__valid").value) for i in range(n)) / n
        stats["used"] += sum(int(u.used.value) for u in ins) / n / n
        stats["in_cycles"] += n
    cyc.watchers.append(watch)
    await cyc.cycles(4500)
    dut._log.info(f"STATS {dict(stats)}")
    t = stats["cycles"]
    dut._log.info("RESULT " + ", ".join(f"{k}={v/t:.3f}" for k, v in stats.items() if k not in ("cycles","in_cycles","in_idle")) + f" in_idle={stats['in_idle']/stats['in_cycles']:.3f}")
