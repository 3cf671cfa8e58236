"""What a switch input asks the allocator for (see :mod:`hw.switch.input_unit`)."""

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import decode

__all__ = ["AllocRequest", "REQ_UC", "REQ_MASK", "REQ_ERR", "REQ_MASK_ALL"]

# Request classes an input presents to the allocator (bit 0 set = the mask queue).
REQ_UC = 0        # unicast VOQ heads: the allocator accepts one grant
REQ_MASK = 1      # mask-queue head: the allocator accepts every grant (fanout splitting)
REQ_ERR = 2       # an error response to this port
REQ_MASK_ALL = 3  # mask-queue head still arriving: all requested outputs at once, or none


class AllocRequest(wiring.Component):
    """An input's allocator request, from registers only, and the class of the request its grant answers.

    Queue state (``count``, ``older``, the read-cycle counts ``head_rc``/``next_rc`` and the mask-queue head
    ``mq_head`` of :class:`~hw.switch.packet_queues.PacketQueues`), the packet being received (``in_pkt``,
    ``cur_q``, ``cur_hdr``; ``cut_ok``: it may be cut through), the mask-queue head's remaining destinations
    ``mc_res`` and, per output, whether the mask queue holds a packet for it (``mc_pend``), a queued error
    response (``err_rdy``), the reader's ``rd_active`` and ``rd_dests``, this cycle's ``grant`` and the
    granted head's read-cycle count ``grant_rc``.

    ``req``/``req_class``/``req_short``: the request (zero while the input is busy), its class and its
    short outputs (see :class:`~hw.switch.input_unit.InputUnit`; zero unless ``short``). ``grant_class``/
    ``grant_short``: the class of the request ``grant`` answers (``grant_delay`` cycles old) and whether
    it was for a short transfer; ``cur_cd``: the reader's transfer is a counted one (it holds no output).
    ``req_cd``: the requested outputs whose packet is counted. ``release``: the outputs a counted transfer
    frees this cycle (they may be matched from the next); ``reads_next``: the outputs the counted transfer
    in progress reads to in the next cycle (a transfer granted this cycle is not in it: the switch knows
    those from its own registered match).

    Unicast heads go to the allocator unless ordered behind the mask-queue head; the mask-queue head goes
    with fanout splitting, all at once while it is still arriving; an error response goes first. Mask
    and unicast requests alternate when both can go, granted or not.
    """

    def __init__(self, *, ports: int, n_uc: int, n_cells: int, port: int | None, grant_delay: int,
                 short: bool, max_rc: int = 1):
        self.ports, self.n_uc, self.n_cells, self.max_rc = ports, n_uc, n_cells, max_rc
        self.grant_delay, self.short = grant_delay, short
        if port is not None:
            self.port = port
        N, n_q, C = ports, n_uc + 1, n_cells
        cell_shape = unsigned(max(1, (C - 1).bit_length()))
        super().__init__({
            **({"port": In(range(N))} if port is None else {}),
            "count": In(range(C + 1)).array(n_q),
            "older": In(max(1, n_uc)),
            "head_rc": In(range(max_rc + 1)).array(n_q),
            "next_rc": In(range(max_rc + 1)).array(n_q),
            "mq_head": In(cell_shape),
            "in_pkt": In(1),
            "cur_q": In(range(max(2, n_q))),
            "cur_hdr": In(cell_shape),
            "cut_ok": In(1),
            "mc_res": In(N),
            "mc_pend": In(N),
            "err_rdy": In(1),
            "rd_active": In(1),
            "rd_dests": In(N),
            "grant": In(N),
            "grant_rc": In(range(max_rc + 1)),
            "req": Out(N),
            "req_class": Out(2),
            "req_short": Out(N),
            "req_cd": Out(N),
            "grant_class": Out(2),
            "grant_short": Out(1),
            "cur_cd": Out(1),
            "release": Out(N),
            "reads_next": Out(N),
        })

    def elaborate(self, platform):
        m = Module()
        N, n_uc = self.ports, self.n_uc
        MQ = n_uc
        q_count, older, req_cls = self.count, self.older, self.grant_class
        mq_has = q_count[MQ] != 0
        uc_vec = Signal(N)
        short_vec = Signal(N)
        cd_vec = Signal(N)       # the head asked for is fully written and has a read-cycle count
        mc_block = Signal(N)
        # A short grant (unicast) dequeues its VOQ's head in the cycle the input asks again: that VOQ then
        # asks for the packet behind it (``next_rc``; the grant is a register).
        uc_grant = Signal(N)
        m.d.comb += uc_grant.eq(Mux(req_cls == REQ_UC, self.grant, 0))
        for j in range(n_uc):
            # A VOQ head younger than the mask-queue head waits while the mask queue holds a packet for
            # the same output (conservative: the holder may be younger than the VOQ head; and while the
            # head is dequeued, the order of the packet behind it is not known yet). A mask-queue head
            # waits, per output, for an older VOQ head to that output.
            gone = uc_grant[j]
            has = q_count[j] != 0
            asked = Mux(gone, q_count[j] > 1, has)
            # The packet asked for is the one arriving (its last flit not written yet).
            arriving = self.in_pkt & (self.cur_q == j) & (q_count[j] == Mux(gone, 2, 1))
            m.d.comb += [
                uc_vec[j].eq(asked & ~(arriving & ~self.cut_ok) &
                             ~(mq_has & self.mc_pend[j] & (~older[j] | gone))),
                short_vec[j].eq((Mux(gone, self.next_rc[j], self.head_rc[j]) == 1) & ~arriving),
                cd_vec[j].eq((Mux(gone, self.next_rc[j], self.head_rc[j]) != 0) & ~arriving),
                mc_block[j].eq(has & older[j]),
            ]
        mc_arriving = Signal()   # the mask-queue head is the packet still being received
        m.d.comb += mc_arriving.eq(self.in_pkt & (self.cur_hdr == self.mq_head))
        mc_vec = Signal(N)
        m.d.comb += mc_vec.eq(Mux(mq_has & ~(mc_arriving & ((self.mc_res & mc_block).any() | ~self.cut_ok)),
                                  self.mc_res & ~mc_block, 0))
        prefer_mask = Signal()
        # Requests come from registers only: an input asks again the cycle after its last read (not in
        # it) and not while its registered match is starting, so no reader logic feeds the allocator.
        # A *counted* transfer is the exception that makes every packet length line rate: a unicast packet
        # whose cells are all written and that the switch admitted with egress room for all of it is read
        # in exactly its read-cycle count R (``grant_rc``) from the cycle after its grant, so the input asks
        # again R - 1 cycles after the grant (the next grant lands in the last read cycle, the next read
        # follows it). R = 1 is a short transfer: the input asks again while it is granted.
        short_d = Signal(N)      # the short outputs of the request the grant answers
        cd_d = Signal(N)         # its counted outputs
        grant_cd = Signal()
        rleft = Signal(range(self.max_rc + 1))   # the counted transfer's reads from this cycle on
        m.d.comb += [self.grant_short.eq((self.grant & short_d).any()), grant_cd.eq((self.grant & cd_d).any())]
        avail = ~(self.rd_active & ~self.cur_cd) & ~(self.grant.any() & ~self.grant_short) & (rleft < 3)
        cls = Signal(2)
        with m.If(self.err_rdy):                # nothing leaves the error queue while avail
            m.d.comb += cls.eq(REQ_ERR)
        with m.Elif(mc_vec.any() & (prefer_mask | ~uc_vec.any())):
            m.d.comb += cls.eq(Mux(mc_arriving, REQ_MASK_ALL, REQ_MASK))
        with m.Else():
            m.d.comb += cls.eq(REQ_UC)
        vec = Signal(N)
        own = Const(1 << self.port, N) if isinstance(self.port, int) else decode(m, self.port, N, name="own_port")
        with m.Switch(cls):
            with m.Case(REQ_ERR):
                m.d.comb += vec.eq(own)
            with m.Case(REQ_MASK, REQ_MASK_ALL):
                m.d.comb += vec.eq(mc_vec)
            with m.Default():
                m.d.comb += vec.eq(uc_vec)
        m.d.comb += [self.req.eq(Mux(avail, vec, 0)), self.req_class.eq(cls)]
        if self.short:
            uc_req = Mux(avail & (cls == REQ_UC), vec, 0)
            m.d.comb += [self.req_short.eq(uc_req & short_vec), self.req_cd.eq(uc_req & cd_vec)]
            m.d.sync += [short_d.eq(self.req_short), cd_d.eq(self.req_cd)]

        # The grant answers the request of ``grant_delay`` cycles ago, whose class is kept here; the queues
        # it names cannot have changed meanwhile (only a start dequeues, enqueues only append, and the
        # switch drops the requests made while a grant is on its way). A grant starts a transfer next cycle.
        asked = Signal()         # the request ``grant`` answers was not empty
        if self.grant_delay == 1:
            m.d.sync += [req_cls.eq(cls), asked.eq(self.req.any())]
        else:
            cls_d, asked_d = Signal(2), Signal()
            m.d.sync += [cls_d.eq(cls), req_cls.eq(cls_d), asked_d.eq(self.req.any()), asked.eq(asked_d)]
        start = self.grant.any()
        with m.If(start):
            m.d.sync += self.cur_cd.eq(grant_cd)
        # The counted transfer reads in the R cycles after its grant; its outputs are free from the cycle
        # of its second-to-last read (their next transfer is read after its last), so they are released
        # in the cycle before: in the grant cycle for R = 2, with two reads left from R = 3.
        with m.If(start & grant_cd):
            m.d.sync += rleft.eq(self.grant_rc)
        with m.Elif(rleft != 0):
            m.d.sync += rleft.eq(rleft - 1)
        m.d.comb += [
            self.release.eq(Mux(start & grant_cd & (self.grant_rc == 2), self.grant, 0) |
                            Mux(rleft == 3, self.rd_dests, 0)),
            self.reads_next.eq(Mux(rleft >= 2, self.rd_dests, 0)),
        ]
        # Mask and unicast requests take turns whether or not they are granted: an input whose unicast heads
        # wait for stalled outputs still asks for its mask-queue head, and the other way round.
        with m.If(asked & (req_cls != REQ_ERR)):
            m.d.sync += prefer_mask.eq(req_cls == REQ_UC)
        return m
