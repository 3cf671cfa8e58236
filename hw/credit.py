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

from amaranth.hdl import Module, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .packet import DEFAULT_FLIT_WIDTH, flit_layout

__all__ = ["credit_link_signature", "CreditSender", "CreditReceiver", "CreditReturn", "CREDIT_RETURN_BITS",
           "CREDIT_RETURN_MAX"]

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


class CreditReceiver(wiring.Component):
    """The receiving end of a credit link: a ``depth``-flit FIFO turned back into a ``lib.stream``.

    Ports: ``link`` (credit link in), ``o`` (stream out), ``overflows`` (32-bit count of dropped flits).
    The upstream :class:`CreditSender` must be built with ``credits=depth``.

    * Latency 1 (a flit received in cycle t is on ``o`` in cycle t+1). Throughput one flit per cycle with
      ``depth >= 2`` (a credit spent in cycle t is usable again in t+2).
    * One credit is returned (``link.credit`` = 1, combinationally) in each cycle a flit leaves ``o``.
    * ``o.valid`` depends only on the FIFO's state, never on ``o.ready``.
    * Bad input: a flit that arrives while the FIFO is full (the sender had no credit) is dropped and
      counted in ``overflows``; the FIFO's contents are unaffected.
    """

    def __init__(self, *, depth: int, flit_width: int = DEFAULT_FLIT_WIDTH):
        if not isinstance(depth, int) or not 1 <= depth <= 4096:
            raise ValueError(f"depth must be an integer in 1..4096, got {depth!r}")
        self.depth = depth
        self.flit_width = flit_width
        layout = flit_layout(flit_width)   # validates flit_width
        self._width = layout.size
        super().__init__({
            "link": In(credit_link_signature(flit_width)),
            "o": Out(stream.Signature(layout)),
            "overflows": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = q = fifo.SyncFIFO(width=self._width, depth=self.depth)
        pop = Signal()
        m.d.comb += [
            q.w_en.eq(self.link.valid),
            q.w_data.eq(self.link.flit.as_value()),
            self.o.valid.eq(q.r_rdy),
            self.o.payload.eq(q.r_data),
            pop.eq(q.r_rdy & self.o.ready),
            q.r_en.eq(self.o.ready),
            self.link.credit.eq(pop),
        ]
        # w_rdy ignores a read in the same cycle; a sender that holds a credit never finds the FIFO full
        # at the start of a cycle, so this counts exactly the protocol violations.
        with m.If(self.link.valid & ~q.w_rdy):
            m.d.sync += self.overflows.eq(self.overflows + 1)
        return m


class CreditReturn(wiring.Component):
    """The credits a receiver owes its sender, returned ``CREDIT_RETURN_MAX`` at most per cycle.

    Ports: ``gain`` (credits freed this cycle), ``loss`` (credits taken back this cycle: buffer entries that
    hold no sender credit, e.g. a queued error response), ``hold`` (return nothing this cycle: the receiver
    stops its sender once the credits out run dry), ``credit`` (to the link, combinational from the register
    and ``hold`` only), ``pending`` (the signed balance still owed, for the receiver's own credit accounting).

    ``pending`` starts at zero and moves by ``gain - loss - credit`` each cycle. It may go negative (an
    entry taken back before a credit was freed); nothing is returned then. ``bound`` sizes the register:
    the balance must stay within ``-bound .. bound``.
    """

    def __init__(self, *, max_gain: int, max_loss: int, bound: int):
        for name, v in (("max_gain", max_gain), ("max_loss", max_loss), ("bound", bound)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.bound = bound
        super().__init__({
            "gain": In(range(max_gain + 1)),
            "loss": In(range(max_loss + 1)),
            "hold": In(1),
            "credit": Out(range(CREDIT_RETURN_MAX + 1)),
            "pending": Out(range(-bound, bound)),
        })

    def elaborate(self, platform):
        m = Module()
        with m.If(~self.hold):
            with m.If(self.pending >= CREDIT_RETURN_MAX):
                m.d.comb += self.credit.eq(CREDIT_RETURN_MAX)
            with m.Elif(self.pending > 0):
                m.d.comb += self.credit.eq(self.pending)
        m.d.sync += self.pending.eq(self.pending + self.gain - self.loss - self.credit)
        return m
