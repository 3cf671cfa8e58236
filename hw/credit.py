"""Credit-based link flow control, shared by the switch ports and the GPU-side NIC.

A link carries at most one flit per cycle from sender to receiver. The receiver owns a buffer of
``credits`` flits and the sender starts with that many credits: it may assert ``valid`` only while it holds
a credit, spends one per flit, and gets back ``credit`` credits each cycle (a count, 0..3: the number of
buffer entries freed). A count rather than a one-bit pulse because a receiver with internal speedup frees
entries in bursts of two per cycle; returning one per cycle would leave part of its buffer idle as credits
owed. There is no ``ready``: a flit sent with a credit is always accepted,
so backpressure never drops a flit; a receiver that sees a flit without credit counts a
``CREDIT_OVERFLOW`` error.
"""

from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .packet import DEFAULT_FLIT_WIDTH, flit_layout

__all__ = ["credit_link_signature", "CreditSender", "CREDIT_RETURN_BITS", "CREDIT_RETURN_MAX"]

CREDIT_RETURN_BITS = 2
CREDIT_RETURN_MAX = (1 << CREDIT_RETURN_BITS) - 1


def credit_link_signature(flit_width: int = DEFAULT_FLIT_WIDTH) -> wiring.Signature:
    """Signature of a credit link, seen from its sender: ``valid``/``flit`` out, ``credit`` in."""
    return wiring.Signature({
        "valid": Out(1),
        "flit": Out(flit_layout(flit_width)),
        "credit": In(CREDIT_RETURN_BITS),
    })


class CreditSender(wiring.Component):
    """Turns a ``lib.stream`` of flits into a credit link.

    Ports: ``i`` (stream in), ``link`` (credit link out), ``credits_left`` (status).
    Latency 0 (``link.valid`` is combinational from ``i.valid`` and the credit count); throughput one flit
    per cycle while credits last. Without a credit ``i.ready`` is low and the flit waits.
    """

    def __init__(self, *, credits: int, flit_width: int = DEFAULT_FLIT_WIDTH):
        if not 1 <= credits <= 4096:
            raise ValueError(f"credits must be in 1..4096, got {credits!r}")
        self.credits = credits
        self.flit_width = flit_width
        super().__init__({
            "i": In(stream.Signature(flit_layout(flit_width))),
            "link": Out(credit_link_signature(flit_width)),
            "credits_left": Out(range(credits + CREDIT_RETURN_MAX + 1), init=credits),
        })

    def elaborate(self, platform):
        m = Module()
        have = self.credits_left != 0
        send = Signal()
        m.d.comb += [
            send.eq(self.i.valid & have),
            self.i.ready.eq(have),
            self.link.valid.eq(send),
            self.link.flit.eq(self.i.payload),
        ]
        m.d.sync += self.credits_left.eq(self.credits_left - send + self.link.credit)
        return m
