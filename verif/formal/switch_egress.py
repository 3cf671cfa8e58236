"""Formal harness of a switch output: the NVSwitch's output queue (:class:`~hw.switch.egress_queue.EgressQueue`,
``lanes`` flits in per cycle from the crossbar) feeding its :class:`~hw.credit.CreditSender`, and the
downstream receiver's buffer of ``out_credits`` flits, wired as in :class:`~hw.switch.nvswitch.NVSwitch`.
The crossbar side writes any number of flits up to ``lanes`` per cycle within the queue's free space (the
switch's contract: it asks for room a cycle ahead), numbered in write order; the downstream receiver
drains whenever its free ``o_ready`` says so and returns one credit per flit drained.

Properties, each proven by k-induction with the invariants it rests on (as the credit link's):

* **an output sends only with a downstream credit and never overruns its receiver**: ``tx.valid``
  implies a credit, and the sender's credits plus the receiver's buffered flits equal ``out_credits``;
* **the output queue delivers every flit written into it once, in order**: each flit sent is the next
  one written; the queue's level is the flits written less the flits sent; its write pointer is
  ``level`` slots past its read pointer; and the slots from the read pointer on hold the write numbers of
  the flits not yet sent, in order (read through one added asynchronous read port per slot of the
  queue's memory; the block's own ports and logic are untouched).

This is the switch's output half of the invariant its end-to-end proof lacks (``docs/verification.md``):
what the crossbar writes into an output leaves on its link unchanged, in order, within credits.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.credit import CreditSender
from hw.packet import flit_layout
from hw.switch.egress_queue import EgressQueue

from .observe import observe_queue
from .runner import Properties

__all__ = ["SwitchEgressHarness", "egress_credit_ok", "egress_pointers_ok", "slot_position"]

COUNT_BITS = 8
WIDTH = 128


def egress_credit_ok(*, send, credits_left, dlevel, out_credits):
    """An output's credit invariant (the credit link's): it sends only with a credit, and its sender's
    credits plus the downstream receiver's buffered flits (``dlevel``) are ``out_credits``."""
    return (~send | (credits_left != 0)) & (credits_left + dlevel == out_credits)


def egress_pointers_ok(*, level, rptr, wptr, depth):
    """An output queue's pointers: its level within its depth, its write pointer ``level`` slots past its read
    pointer."""
    wrapped = rptr + level
    return (level <= depth) & (wptr == Mux(wrapped >= depth, wrapped - depth, wrapped))


def slot_position(j, rptr, depth):
    """How many slots from the read pointer memory slot ``j`` of a queue of ``depth`` slots is."""
    return Mux(rptr <= j, j - rptr, j + depth - rptr)


class SwitchEgressHarness(wiring.Component):
    """Free inputs: ``want`` (per lane, the crossbar offers a flit; lane k only with the lanes before it and
    within the free space), ``o_ready`` (the downstream receiver drains a flit). ``queue``/``sender`` may be
    replaced (mutants)."""

    #: The covers on yices (the same shortest covers as z3, in less CPU); the proof on z3.
    formal_options = {"cover_engine": "smtbmc yices"}

    def __init__(self, *, lanes: int = 2, depth: int = 4, out_credits: int = 2, queue=None, sender=None):
        self.lanes, self.depth, self.out_credits = lanes, depth, out_credits
        width = flit_layout(WIDTH).size
        self.queue = queue if queue is not None else EgressQueue(width=width, depth=depth, lanes=lanes)
        self.sender = sender if sender is not None else CreditSender(credits=out_credits, flit_width=WIDTH)
        self.props = Properties()
        super().__init__({"want": In(lanes), "o_ready": In(1)})

    def elaborate(self, platform):
        m = Module()
        D, L, K = self.depth, self.lanes, self.out_credits
        q, tx = self.queue, self.sender
        rptr, wptr, slots = observe_queue(q, "mem", "q")
        m.submodules.queue, m.submodules.sender = q, tx
        m.d.comb += [tx.i.valid.eq(q.r.valid), tx.i.payload.eq(q.r.payload), q.r.ready.eq(tx.i.ready)]

        written = Signal(COUNT_BITS)    # flits written into the queue
        sent = Signal(COUNT_BITS)       # flits sent on the link
        dlevel = Signal(range(K + 2))   # the downstream receiver's buffered flits
        # Lane k writes only with the lanes before it, and only into free space (the switch's contract).
        w = [Signal(name=f"w{k}") for k in range(L)]
        for k in range(L):
            m.d.comb += w[k].eq(self.want[k] & (q.level + k < D) & (w[k - 1] if k else 1))
            m.d.comb += [q.w_valid[k].eq(w[k]), q.w_data[k].eq((written + k)[:COUNT_BITS])]
        n_in = sum(w)
        both = Signal()                 # a cycle wrote on every lane (cover)
        m.d.sync += both.eq(both | Cat(w).all())
        send = tx.link.valid
        pop = self.o_ready & (dlevel != 0)
        m.d.comb += tx.link.credit.eq(pop)
        m.d.sync += [written.eq(written + n_in), sent.eq(sent + send), dlevel.eq(dlevel + send - pop)]

        # The invariants (k-induction assumes them all for k cycles).
        credit_ok = egress_credit_ok(send=send, credits_left=tx.credits_left, dlevel=dlevel, out_credits=K)
        level = q.level
        in_order = ((written - sent)[:COUNT_BITS] == level) & egress_pointers_ok(level=level, rptr=rptr, wptr=wptr,
                                                                                 depth=D)
        for j, slot in enumerate(slots):
            k = slot_position(j, rptr, D)
            in_order = in_order & ((k >= level) | (slot[:COUNT_BITS] == (sent + k)[:COUNT_BITS]))
        flit = tx.link.flit.as_value()
        in_order = in_order & (~send | (flit[:COUNT_BITS] == sent))

        p = self.props
        p.check(m, "an output sends only with a downstream credit and never overruns its receiver",
                credit_ok, send & (tx.credits_left == 1) & (dlevel == K - 1))
        p.check(m, "the output queue delivers every flit written into it once, in order",
                in_order, send & (level == D) & both)
        return m
