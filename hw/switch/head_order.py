"""Which of an input's virtual-output-queue heads arrived before its mask-queue head, in registers."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["HeadOrder"]


class HeadOrder(wiring.Component):
    """``older[j]``: VOQ ``j``'s head arrived before the mask-queue head (queue ``n_voq``); exact whenever
    both queues hold a packet, so that no sequence-number arithmetic feeds an input's requests.

    Heads change only by the events given each cycle: ``takes_new[q]`` (queue ``q``, empty or giving up its
    only packet, takes the arriving packet, the newest alive) and ``deq[q]`` (queue ``q`` takes its next
    packet, numbered ``next_seq``; one queue per cycle). ``head_seq[q]`` are the current heads' arrival
    numbers, ``seq_bits`` wide; live numbers are less than ``2**(seq_bits - 1)`` apart."""

    def __init__(self, *, n_voq: int, seq_bits: int):
        self.n_voq = n_voq
        self.seq_bits = seq_bits
        super().__init__({"takes_new": In(n_voq + 1), "deq": In(n_voq + 1), "next_seq": In(seq_bits),
                          "head_seq": In(seq_bits).array(n_voq + 1), "older": Out(n_voq)})

    def elaborate(self, platform):
        m = Module()
        S, MQ = self.seq_bits, self.n_voq

        def before(a, b):
            d = (b - a)[:S]
            return (d != 0) & ~d[S - 1]
        for j in range(self.n_voq):
            with m.If(self.takes_new[j]):
                m.d.sync += self.older[j].eq(0)
            with m.Elif(self.takes_new[MQ]):
                m.d.sync += self.older[j].eq(1)
            with m.Elif(self.deq[j]):
                m.d.sync += self.older[j].eq(before(self.next_seq, self.head_seq[MQ]))
            with m.Elif(self.deq[MQ]):
                m.d.sync += self.older[j].eq(before(self.head_seq[j], self.next_seq))
        return m
