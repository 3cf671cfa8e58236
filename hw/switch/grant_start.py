"""What a grant starts at a switch input (see :mod:`hw.switch.input_unit`)."""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import onehot_to_index
from .alloc_request import REQ_ERR, REQ_UC
from .cell_reader import start_signature

__all__ = ["GrantStart"]


class GrantStart(wiring.Component):
    """The dequeue and the reader's transfer that a grant starts, and the mask-queue head's remaining
    destinations.

    ``grant``/``grant_class``: the outputs granted this cycle and the class of the request they answer
    (:class:`~hw.switch.alloc_request.AllocRequest`). A unicast grant dequeues its VOQ's head (``deq``,
    one-hot; ``sel``: the queue whose head ``head`` the transfer starts at); a mask-queue grant sends the
    mask-queue head to the granted subset of its remaining destinations ``mc_res`` and dequeues it on its
    last fanout round, the one that frees its cells. ``start``: the transfer, to the
    :class:`~hw.switch.cell_reader.CellReader`, in the grant cycle.

    ``enq``/``enq_q``/``enq_mask``: the packet queued this cycle (:class:`~hw.switch.packet_queues.
    PacketQueues`), ``mq_count``/``next_mask``: the mask queue's length and the destinations of the packet
    behind its head. ``mc_res`` (a register) follows the mask-queue head; ``mc_pend``: per output, the mask
    queue holds a packet that still has to go there.
    """

    def __init__(self, *, ports: int, n_uc: int, n_cells: int):
        self.ports, self.n_uc, self.n_cells = ports, n_uc, n_cells
        N, n_q, C = ports, n_uc + 1, n_cells
        super().__init__({
            "grant": In(N),
            "grant_class": In(2),
            "enq": In(1),
            "enq_q": In(range(max(2, n_q))),
            "enq_mask": In(N),
            "mq_count": In(range(C + 1)),
            "next_mask": In(N),
            "head": In(unsigned(max(1, (C - 1).bit_length()))),
            "deq": Out(n_q),
            "sel": Out(range(max(2, n_q))),
            "start": Out(start_signature(ports=N, n_cells=C)),
            "mc_res": Out(N),
            "mc_pend": Out(N),
        })

    def elaborate(self, platform):
        m = Module()
        N, C, MQ = self.ports, self.n_cells, self.n_uc     # the mask queue is the last queue
        grant, cls = self.grant, self.grant_class
        granted = Signal()
        m.d.comb += granted.eq(grant.any())
        is_mask = cls[0]
        mc_res = self.mc_res
        mc_final = (mc_res & ~grant) == 0
        with m.If(granted & (cls == REQ_UC)):
            m.d.comb += self.sel.eq(onehot_to_index(grant))
            m.d.comb += self.deq.eq(1 << self.sel)
        with m.Elif(granted & is_mask):
            m.d.comb += self.sel.eq(MQ)
            with m.If(mc_final):
                m.d.comb += self.deq.eq(1 << MQ)
        m.d.comb += [
            self.start.valid.eq(granted),
            self.start.err.eq(cls == REQ_ERR),
            self.start.cell.eq(self.head),
            self.start.free.eq((cls == REQ_UC) | mc_final),
            self.start.dests.eq(grant),
        ]

        # Remaining destinations of the mask-queue head, and the mask packets queued per output.
        e_mq = self.enq & (self.enq_q == MQ)
        with m.If(self.deq[MQ]):
            with m.If(self.mq_count > 1):
                m.d.sync += mc_res.eq(self.next_mask)
            with m.Elif(e_mq):
                m.d.sync += mc_res.eq(self.enq_mask)
        with m.Elif(granted & is_mask):
            m.d.sync += mc_res.eq(mc_res & ~grant)
        with m.Elif(e_mq & (self.mq_count == 0)):
            m.d.sync += mc_res.eq(self.enq_mask)
        mc_pend = [Signal(range(C + 1), name=f"mc_pend{j}") for j in range(N)]
        mc_granted = Mux(granted & is_mask, grant, 0)
        for j in range(N):
            m.d.sync += mc_pend[j].eq(mc_pend[j] + (e_mq & self.enq_mask[j]) - mc_granted[j])
        m.d.comb += self.mc_pend.eq(Cat(p != 0 for p in mc_pend))
        return m
