"""Formal harness of a credit link: a :class:`~hw.credit.CreditSender` wired to a
:class:`~hw.credit.CreditReceiver` of ``credits`` entries, the sender's input stream and the receiver's
``o.ready`` free (any traffic, any stalls). The sender numbers the flits it sends (payload = a send count),
so the receiver's output order proves that no flit is lost, duplicated or reordered.

Properties (each with a ``Cover`` that shows it is not vacuous):

* **nothing is sent without a credit**: ``link.valid`` implies ``credits_left > 0``;
* **a sender never exceeds its credits**: ``credits_left <= credits`` and the receiver never overflows;
* **credits are conserved**: ``credits_left + buffered flits == credits`` in every cycle;
* **no flit lost or duplicated, in order**: every flit leaving the receiver is the next one sent, and
  ``sent - delivered == buffered`` (counts modulo 256).
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, connect

from hw.credit import CreditReceiver, CreditSender

from .runner import Properties

__all__ = ["CreditLinkHarness"]

COUNT_BITS = 8


class CreditLinkHarness(wiring.Component):
    """Ports (free inputs of the proof): ``i_valid`` (the sender's input offers a flit), ``o_ready`` (the
    receiver's consumer takes one). ``sender`` may be replaced (a mutant, to show the proof can fail)."""

    def __init__(self, credits: int = 4, sender=None):
        self.credits = credits
        self.sender = sender if sender is not None else CreditSender(credits=credits)
        self.props = Properties()
        super().__init__({"i_valid": In(1), "o_ready": In(1)})

    def elaborate(self, platform):
        m = Module()
        D = self.credits
        m.submodules.sender = s = self.sender
        m.submodules.receiver = r = CreditReceiver(depth=D)
        connect(m, s.link, r.link)
        sent = Signal(COUNT_BITS)
        popped = Signal(COUNT_BITS)
        buffered = Signal(range(D + 2))
        m.d.comb += [s.i.valid.eq(self.i_valid), s.i.payload.data.eq(sent), r.o.ready.eq(self.o_ready)]
        send, pop = s.link.valid, r.o.valid & r.o.ready
        m.d.sync += [sent.eq(sent + send), popped.eq(popped + pop), buffered.eq(buffered + send - pop)]
        p = self.props
        p.check(m, "nothing is sent without a credit", ~send | (s.credits_left > 0),
                send & (s.credits_left == 1))
        p.check(m, "a sender never exceeds its credits (no receiver overflow)",
                (s.credits_left <= D) & (r.overflows == 0), s.credits_left == 0)
        p.check(m, "credits are conserved", s.credits_left + buffered == D,
                send & r.link.credit.any() & (buffered == D - 1))
        p.check(m, "no flit lost or duplicated, in order",
                (~pop | (r.o.payload.data[:COUNT_BITS] == popped)) & ((sent - popped)[:COUNT_BITS] == buffered),
                pop & (popped == 2 * D))
        return m
