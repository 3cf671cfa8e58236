"""Formal harness of a credit link: a :class:`~hw.credit.CreditSender` wired to a
:class:`~hw.credit.CreditReceiver` of ``credits`` entries, the sender's input stream and the receiver's
``o.ready`` free (any traffic, any stalls). The sender numbers the flits it sends (payload = a send count),
so the receiver's output order proves that no flit is lost, duplicated or reordered.

Properties (each with a ``Cover`` that shows it is not vacuous), each proven by k-induction: every one is
stated together with the invariants it rests on, so that no state the link cannot reach satisfies them
all for k cycles and then breaks one:

* **nothing is sent without a credit**: ``link.valid`` implies ``credits_left > 0``;
* **a sender never exceeds its credits**: ``credits_left <= credits`` and the receiver never overflows;
* **credits are conserved**: ``credits_left + buffered flits == credits`` in every cycle, where the
  buffered flits are the receiver FIFO's ``level`` and the harness's own count of flits sent less flits
  delivered (the two are equal);
* **no flit lost or duplicated, in order**: every flit leaving the receiver is the next one sent, and
  ``sent - delivered == buffered`` (counts modulo 256); the FIFO's slots hold, from its read pointer on,
  the send counts of the flits not yet delivered, in order, and its write pointer is ``level`` slots past
  its read pointer.

The invariants name the receiver's FIFO (``amaranth.lib.fifo.SyncFIFO``): its ``level``, its read and
write pointers (the addresses of its memory's own ports) and its slots, read through one extra
asynchronous read port per slot that the harness adds to the FIFO's memory (the block's own ports and
logic are untouched). The receiver is elaborated by the harness for that.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, connect

from hw.credit import CreditReceiver, CreditSender
from hw.packet import flit_layout

from .observe import observe_queue
from .runner import Properties

__all__ = ["CreditLinkHarness"]

COUNT_BITS = 8


class CreditLinkHarness(wiring.Component):
    """Ports (free inputs of the proof): ``i_valid`` (the sender's input offers a flit), ``o_ready`` (the
    receiver's consumer takes one). ``sender`` and ``receiver`` may be replaced (mutants, to show the proof
    can fail); a receiver must keep its FIFO as the submodule ``fifo``."""

    #: The covers on yices (the same shortest covers as z3, in less CPU); the proof on z3.
    formal_options = {"cover_engine": "smtbmc yices"}

    def __init__(self, credits: int = 4, sender=None, receiver=None):
        self.credits = credits
        self.sender = sender if sender is not None else CreditSender(credits=credits)
        self.receiver = receiver if receiver is not None else CreditReceiver(depth=credits)
        self.props = Properties()
        super().__init__({"i_valid": In(1), "o_ready": In(1)})

    def elaborate(self, platform):
        m = Module()
        D = self.credits
        s, r = self.sender, self.receiver
        m.submodules.sender = s
        r._MustUse__silence = True      # elaborated below, not through m.submodules
        m.submodules.receiver = rm = r.elaborate(platform)    # here, so that its FIFO can be named
        q = rm.submodules.fifo
        consume, produce, slots = observe_queue(q, "storage", "fifo")
        connect(m, s.link, r.link)
        sent = Signal(COUNT_BITS)
        popped = Signal(COUNT_BITS)
        buffered = Signal(range(D + 2))
        m.d.comb += [s.i.valid.eq(self.i_valid), s.i.payload.data.eq(sent), r.o.ready.eq(self.o_ready)]
        send, pop = s.link.valid, r.o.valid & r.o.ready
        m.d.sync += [sent.eq(sent + send), popped.eq(popped + pop), buffered.eq(buffered + send - pop)]

        # The invariants. Counts: the FIFO's level is the harness's count of buffered flits, and every
        # credit is either with the sender or held by a buffered flit.
        level = q.level
        counts = (level == buffered) & (s.credits_left + level == D)
        # Pointers: the write pointer is `level` slots past the read pointer (full and empty alike).
        wrapped = consume + level
        pointers = produce == Mux(wrapped >= D, wrapped - D, wrapped)
        # Contents: the slot `k` places past the read pointer holds the send count of the k-th flit not
        # yet delivered, for every k below the level.
        contents = []
        for j, slot in enumerate(slots):
            k = Mux(consume <= j, j - consume, j + D - consume)
            count = data.View(flit_layout(r.flit_width), slot).data[:COUNT_BITS]
            contents.append((k >= level) | (count == (popped + k)[:COUNT_BITS]))
        order = (sent - popped)[:COUNT_BITS] == buffered
        in_order = order & pointers
        for c in contents:
            in_order = in_order & c

        # Each property carries the invariants about its own quantity (k-induction assumes them all).
        p = self.props
        p.check(m, "nothing is sent without a credit", ~send | (s.credits_left > 0),
                send & (s.credits_left == 1))
        p.check(m, "a sender never exceeds its credits (no receiver overflow)",
                (s.credits_left <= D) & (r.overflows == 0), s.credits_left == 0)
        p.check(m, "credits are conserved", (s.credits_left + buffered == D) & counts,
                send & r.link.credit.any() & (buffered == D - 1))
        p.check(m, "no flit lost or duplicated, in order",
                (~pop | (r.o.payload.data[:COUNT_BITS] == popped)) & in_order,
                pop & (popped == 2 * D))
        return m
