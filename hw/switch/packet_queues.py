"""The packet queues of a switch input: linked lists of packets in its cell buffer (see
:mod:`hw.switch.input_unit`)."""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import or_reduce
from .head_order import HeadOrder

__all__ = ["PacketQueues"]


class PacketQueues(wiring.Component):
    """``n_uc`` unicast queues (virtual output queues; none in ``fifo`` mode) and one mask queue (index
    ``n_uc``) of packets, each packet named by its header cell, chained by a next-packet table.

    ``enq``: the packet whose header is in ``enq_cell`` joins queue ``enq_q``, with its destination set
    ``enq_mask``. ``deq``: each set bit's queue gives up its head (one queue per cycle; a queue may enqueue
    and dequeue in the same cycle). ``count``/``head``: each queue's length and head cell. ``sel``: a
    queue, whose ``sel_head`` is read combinationally, and with it the next packet's ``next_mask`` (the
    destination set of the packet behind ``sel``'s head).

    ``enq_rc``: the arriving packet's *read-cycle count* (the cycles the input reads it in once it is
    written, 1..``max_rc``; 0: it is always read as a held transfer, see :mod:`hw.switch.input_unit`).
    ``head_rc[q]``/``next_rc[q]``: the counts of queue ``q``'s head and of the packet behind it (in
    registers; ``next_rc`` is meaningful while the queue holds two packets or more), so that an input can
    ask for the packet behind a head it is giving up in the same cycle. ``sel_rc``: ``sel``'s head's.

    Each packet gets an arrival number at its enqueue. ``older[j]`` (:class:`HeadOrder`, registered): VOQ
    ``j``'s head arrived before the mask queue's head, so that packets of one (source, destination) pair
    never overtake each other across the two kinds of queue. The numbers are ``seq_bits`` wide (four bits
    wider than a cell index) and compared modulo ``2**seq_bits``, exact while every queued packet is less than
    ``2**(seq_bits - 1)`` arrivals old. A queue head can wait any number of arrivals (its output stalled while
    other queues flow), so ``near_lap`` (registered) rises while some head is ``lap_threshold`` arrivals old
    or older, and the unit's contract is that at most ``lap_margin`` packets (default ``n_cells``: the credits
    a sender can hold) are enqueued while it is high: the input withholds its credit returns then. The
    threshold leaves the margin and the register's cycle below ``2**(seq_bits - 1)``, about ``7 * n_cells``
    arrivals, so the hold costs nothing unless an output stalls that long.
    """

    def __init__(self, *, n_uc: int, n_cells: int, ports: int, max_rc: int = 1, lap_margin: int | None = None):
        self.n_uc, self.n_cells, self.ports, self.max_rc = n_uc, n_cells, ports, max_rc
        n_q, C = n_uc + 1, n_cells
        cell_shape = unsigned(max(1, (C - 1).bit_length()))
        self.seq_bits = cell_shape.width + 4
        self.lap_margin = C if lap_margin is None else lap_margin
        # The oldest head is T + 1 arrivals old when near_lap rises (one more enqueue in the cycle it is
        # registered), then at most lap_margin more: T + 1 + lap_margin <= 2**(seq_bits - 1) - 1.
        self.lap_threshold = 2 ** (self.seq_bits - 1) - 2 - self.lap_margin
        if not 1 <= self.lap_threshold:
            raise ValueError(f"lap_margin {self.lap_margin} leaves no room below 2**(seq_bits - 1) = "
                             f"{2 ** (self.seq_bits - 1)} arrivals at {n_cells} cells")
        super().__init__({
            "enq": In(1),
            "enq_q": In(range(max(2, n_q))),
            "enq_cell": In(cell_shape),
            "enq_mask": In(ports),
            "enq_rc": In(range(max_rc + 1)),
            "deq": In(n_q),
            "count": Out(range(C + 1)).array(n_q),
            "head": Out(cell_shape).array(n_q),
            "sel": In(range(max(2, n_q))),
            "sel_head": Out(cell_shape),
            "next_mask": Out(ports),
            "head_rc": Out(range(max_rc + 1)).array(n_q),
            "next_rc": Out(range(max_rc + 1)).array(n_q),
            "sel_rc": Out(range(max_rc + 1)),
            "older": Out(max(1, n_uc)),
            "near_lap": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        C, S, n_q = self.n_cells, self.seq_bits, self.n_uc + 1
        m.submodules.pnext = pnext = memory.Memory(shape=len(self.enq_cell), depth=C, init=[])
        m.submodules.pmask = pmask = memory.Memory(shape=self.ports, depth=C, init=[])
        m.submodules.pseq = pseq = memory.Memory(shape=S, depth=C, init=[])
        pnext_w, pnext_r = pnext.write_port(), pnext.read_port(domain="comb")
        pmask_w, pmask_r = pmask.write_port(), pmask.read_port(domain="comb")
        pseq_w, pseq_r = pseq.write_port(), pseq.read_port(domain="comb")
        # prc[c]: the read-cycle count of the packet queued behind the one whose header is in cell c
        # (written beside pnext).
        m.submodules.prc = prc = memory.Memory(shape=len(self.enq_rc), depth=C, init=[])
        prc_w, prc_r = prc.write_port(), prc.read_port(domain="comb")
        q_tail = [Signal(len(self.enq_cell), name=f"q{q}_tail") for q in range(n_q)]
        q_hseq = [Signal(S, name=f"q{q}_hseq") for q in range(n_q)]   # arrival number of each head
        aseq = Signal(S)                                                # arrival number of the next packet

        m.d.comb += [
            self.sel_head.eq(or_reduce([Mux(self.sel == q, self.head[q], 0) for q in range(n_q)])),
            self.sel_rc.eq(or_reduce([Mux(self.sel == q, self.head_rc[q], 0) for q in range(n_q)])),
            pnext_r.addr.eq(self.sel_head),
            pmask_r.addr.eq(pnext_r.data),
            pseq_r.addr.eq(pnext_r.data),
            self.next_mask.eq(pmask_r.data),
            pmask_w.addr.eq(self.enq_cell),
            pmask_w.data.eq(self.enq_mask),
            pmask_w.en.eq(self.enq),
            pseq_w.addr.eq(self.enq_cell),
            pseq_w.data.eq(aseq),
            pseq_w.en.eq(self.enq),
            pnext_w.addr.eq(q_tail[0]),
            pnext_w.data.eq(self.enq_cell),
            prc_w.addr.eq(pnext_w.addr),
            prc_w.data.eq(self.enq_rc),
            prc_w.en.eq(pnext_w.en),
            prc_r.addr.eq(pnext_r.data),
        ]
        with m.If(self.enq):
            m.d.sync += aseq.eq(aseq + 1)
        # Enqueue at the tail, dequeue at the head; both may hit one queue in a cycle.
        for q in range(n_q):
            e = self.enq & (self.enq_q == q)
            d = self.deq[q]
            m.d.sync += self.count[q].eq(self.count[q] + e - d)
            remaining = self.count[q] - d
            # A dequeue moves the second packet's count to the head and reads the third's (prc at the new head).
            with m.If(e):
                m.d.sync += q_tail[q].eq(self.enq_cell)
                with m.If(self.count[q] != 0):
                    m.d.comb += [pnext_w.addr.eq(q_tail[q]), pnext_w.en.eq(1)]
                with m.If(remaining == 0):
                    m.d.sync += [self.head[q].eq(self.enq_cell), q_hseq[q].eq(aseq),
                                 self.head_rc[q].eq(self.enq_rc)]
                with m.Elif(d):
                    m.d.sync += [self.head[q].eq(pnext_r.data), q_hseq[q].eq(pseq_r.data),
                                 self.head_rc[q].eq(self.next_rc[q])]
                with m.If(remaining == 1):
                    m.d.sync += self.next_rc[q].eq(self.enq_rc)
                with m.Elif(d):
                    m.d.sync += self.next_rc[q].eq(prc_r.data)
            with m.Elif(d):
                m.d.sync += [self.head[q].eq(pnext_r.data), q_hseq[q].eq(pseq_r.data),
                             self.head_rc[q].eq(self.next_rc[q]), self.next_rc[q].eq(prc_r.data)]

        # Head order, kept in registers so that no sequence-number arithmetic feeds the requests (the age
        # subtractions and comparisons of 65 queues were a 3.5 ns path into a 64-port allocator).
        if self.n_uc:
            m.submodules.head_order = head_order = HeadOrder(n_voq=self.n_uc, seq_bits=S)
            m.d.comb += [
                head_order.takes_new.eq(Cat(self.enq & (self.enq_q == q) & (self.count[q] - self.deq[q] == 0)
                                            for q in range(n_q))),
                head_order.deq.eq(self.deq),
                head_order.next_seq.eq(pseq_r.data),
                self.older.eq(head_order.older),
            ]
            m.d.comb += [head_order.head_seq[q].eq(q_hseq[q]) for q in range(n_q)]
            # The oldest queued packet is some queue's head; an empty queue's head number is stale.
            m.d.sync += self.near_lap.eq(Cat((self.count[q] != 0) & ((aseq - q_hseq[q])[:S] >= self.lap_threshold)
                                             for q in range(n_q)).any())
        return m
