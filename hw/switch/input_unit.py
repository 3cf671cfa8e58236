"""One switch input: credit-link ingress, shared cell buffer with virtual output queues, and the reader that
feeds the crossbar.

Buffer organisation (why)
-------------------------
Every arriving flit is written into one *cell* of a shared per-input buffer (``lib.memory``, one write and
one read port). Cells of a packet are chained by a next-cell table and packets of a queue by a
next-packet table, so any queue's head can leave while others wait: that is what removes head-of-line
blocking, at one buffer per input (N x N separate FIFOs would cost N times the storage).

Queues per input:

* ``voq`` mode: one virtual output queue per output for unicast packets, plus one *mask queue* for
  packets with a destination set (static ``multimem`` via the group table, ``dymultimem`` via the header
  mask). The mask-queue head is sent with fanout splitting: each allocation round sends it to the subset
  of its remaining destinations that were granted, and its cells are freed on the last round.
* ``fifo`` mode (the head-of-line-blocking baseline): every packet goes to the mask queue, so only the
  oldest packet of an input can compete for outputs.

Cut-through: a packet is queued as soon as its header arrives and the reader may follow the writer.
The ingress always holds one pre-allocated *next-write cell*; writing a flit links its cell to a freshly
allocated successor in the same cycle, so every written cell's link is known and any written cell can be
read and freed at once. That matters for deadlock freedom: a pass that frees cells as it reads always
lets the rest of its packet in (each read returns a credit), even when older packets fill the buffer. A
partial multicast pass does not free cells, so a mask-queue head that is still arriving is only sent to
all its remaining destinations at once (``REQ_MASK_ALL``). Header errors are known at the header and the packet is dropped whole. A length field that
disagrees with the ``last`` framing can only be seen at the packet's end, after forwarding may have begun:
the switch then ends the packet with ``last`` and ``poison`` set on that flit (the cut-through "stomp" of
InfiniBand/PCIe) and discards any further flits, and the receiver drops the packet. A flit that arrives
with ``poison`` already set (its sender, or a link before it, found it corrupt) is forwarded as usual and
the packet's last flit carries ``poison`` too, so the receiver drops that packet as well.

Every error also queues an ``ERROR`` response to this port. Each queued response holds back one link
credit until it departs, so the error queue (depth ``credits + 1``) can never overflow.

Credits: the upstream sender starts with ``credits`` credits. The buffer has ``credits + 1`` cells; the
spare cell lets the unit terminate (with poison) a packet whose sender broke the credit protocol
mid-packet, instead of leaving it unterminated. While a queue head has waited through about
``7 * (credits + 1)`` arrivals (:class:`~hw.switch.packet_queues.PacketQueues`' ``near_lap``) no credit is
returned, so the head-order flags' arrival numbers never lap a queued packet; the input then waits for that
head's output, as it would with its buffer full of packets behind it.

Blocks (each a component with its own contract): :class:`~hw.switch.ingress.Ingress` (framing, header
checks, routing, the write decision per flit), :class:`~hw.switch.cell_pool.CellPool` (free, written and
last cells; the next-write cell), :class:`~hw.switch.packet_queues.PacketQueues` (the VOQs and the mask
queue, with their heads' arrival order), :class:`~hw.switch.cell_reader.CellReader` (a granted transfer
into the crossbar), :class:`~hw.credit.CreditReturn` (credits owed upstream) and a ``lib.fifo`` error
queue, :class:`~hw.switch.alloc_request.AllocRequest` (the allocator requests: cut-through, ordering
against the mask queue, short transfers) and :class:`~hw.switch.grant_start.GrantStart` (what a grant
starts: the dequeue, the reader's transfer; the mask-queue head's remaining destinations). The unit joins
them and keeps the credit count.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import fifo, memory, wiring
from amaranth.lib.wiring import In, Out

from ..credit import CreditReturn, credit_link_signature
from ..packet import DEFAULT_FLIT_WIDTH, GROUP_BITS, ErrorCode, flit_layout
from .alloc_request import REQ_ERR, REQ_MASK, REQ_MASK_ALL, REQ_UC, AllocRequest
from .cell_pool import CellPool
from .cell_reader import CellReader, ErrorEntry
from .grant_start import GrantStart
from .ingress import Ingress
from .packet_queues import PacketQueues

__all__ = ["InputUnit", "REQ_UC", "REQ_MASK", "REQ_ERR", "REQ_MASK_ALL"]


class InputUnit(wiring.Component):
    """Input ``port`` of an ``ports`` switch.

    ``port``: this input's index as an integer, or None for a ``port`` strap input (``In(range(ports))``)
    that the switch ties to a constant, so that its N input units are one Verilog module
    (:mod:`hw.emission`).

    Ports
    -----
    ``rx``: credit link in. ``group_handle``/``group_mask``: lookup into the switch group table
    (combinational). ``req``/``req_class``: request vector to the allocator, from registers only (zero
    while busy, while a grant is starting, and in the cycle the last flit is read).
    ``grant``: the outputs accepted for the request of ``grant_delay`` cycles ago (1: the switch registers
    the allocator's match; 2: it registers the request too, and ignores the requests an input makes while
    its answer is on the way); a non-zero grant dequeues now and starts a transfer next cycle.
    ``release``: the outputs freed this cycle (a held transfer's in the cycle its last flit is read, a
    counted one's ahead of its end, see below). ``reads_next``: the outputs the counted transfer in
    progress reads to next cycle, for the switch's egress admission (``req_cd``: the requested outputs
    whose packet is counted; the switch registers its grants' first reads itself). ``space``: per output,
    the egress can take ``lanes`` more flits. ``out_valid[k]``/
    ``out_flit[k]``/``out_dests``: crossbar input, ``lanes`` flits per cycle (lane 0 first), one cycle
    after the read. ``err_valid``/``err_code``: one error event
    per cycle for the status counters.

    Timing: header arrives in cycle t; it can be requested and matched in t+1, granted (dequeued) in
    t+2, read in t+3 and be at the crossbar output in t+4. One flit per cycle in and out. A *held*
    transfer keeps its input and outputs until its last read, so between two of them the reader idles
    two cycles (request, grant).

    Counted transfers: a unicast packet whose last flit is written is read in exactly R =
    ceil(flits / ``lanes``) cycles from the cycle after its grant (its *read-cycle count*, kept per packet
    in :class:`~hw.switch.packet_queues.PacketQueues`), because the switch matches it only with egress room
    for all of it. Its end is therefore known at the grant: the input asks again R - 1 cycles after the
    grant and the transfer releases its output a cycle earlier (``release``), so the next transfer of the
    input and of the output is read right after its last read: back to back, one packet per R cycles.
    ``req_short`` marks the requested outputs whose packet is *short* (R = 1): the switch never holds
    those, and the input asks again while the short transfer is granted, for the packet behind it in the
    same VOQ too (one packet per cycle per input and per output). A packet still arriving (cut-through),
    a multicast pass and an error response are held. Not with ``grant_delay`` 2 (registered requests) nor
    in ``fifo`` mode; at ``lanes`` = 1 only R = 1 is counted (the switch admits a short transfer's room
    there, not a whole packet's).
        """

    def __init__(self, *, port: int | None, ports: int, credits: int, flit_width: int = DEFAULT_FLIT_WIDTH,
                 max_payload: int = 16, queueing: str = "voq", lanes: int = 1, grant_delay: int = 1,
                 isolate_static: bool = False, multicast: bool = True):
        if queueing not in ("voq", "fifo"):
            raise ValueError(f"queueing must be 'voq' or 'fifo', got {queueing!r}")
        if lanes not in (1, 2):
            raise ValueError(f"lanes (internal speedup) must be 1 or 2, got {lanes!r}")
        if port is not None and not (isinstance(port, int) and 0 <= port < ports):
            raise ValueError(f"port must be None (a strap input) or an integer in 0..{ports - 1}, got {port!r}")
        if grant_delay not in (1, 2):
            raise ValueError(f"grant_delay must be 1 or 2, got {grant_delay!r}")
        self.grant_delay = grant_delay
        self.isolate_static = isolate_static
        self.multicast = multicast
        self.lanes = lanes
        if port is not None:
            self.port = port
        self.ports = ports
        self.credits = credits
        self.flit_width = flit_width
        self.max_payload = max_payload
        self.queueing = queueing
        self.n_cells = credits + 1
        flit = flit_layout(flit_width)
        super().__init__({
            **({"port": In(range(ports))} if port is None else {}),
            "rx": In(credit_link_signature(flit_width)),
            "group_handle": Out(GROUP_BITS),
            "group_mask": In(ports),
            "req": Out(ports),
            "req_class": Out(2),
            "grant": In(ports),
            "release": Out(ports),
            "req_short": Out(ports),
            "req_cd": Out(ports),
            "reads_next": Out(ports),
            "space": In(ports),
            "out_valid": Out(lanes),
            "out_flit": Out(flit).array(lanes),
            "out_dests": Out(ports),
            "err_valid": Out(1),
            "err_code": Out(ErrorCode),
        })

    def elaborate(self, platform):
        m = Module()
        N, C, L = self.ports, self.n_cells, self.lanes
        cell_shape = unsigned(max(1, (C - 1).bit_length()))
        flit = flit_layout(self.flit_width)
        n_uc = N if self.queueing == "voq" else 0
        MQ = n_uc          # index of the mask queue
        n_q = n_uc + 1

        # ---------------------------------------------------------------- storage
        m.submodules.cells = cells = memory.Memory(shape=flit, depth=C, init=[])
        m.submodules.cnext = cnext = memory.Memory(shape=cell_shape, depth=C, init=[])
        # Error responses to send (never full: each queued response holds back one link credit).
        m.submodules.errq = errq = fifo.SyncFIFO(width=ErrorEntry.as_shape().size, depth=C)
        cells_w = cells.write_port()
        cnext_w = cnext.write_port()
        m.submodules.pool = pool = CellPool(n_cells=C, max_freed=L)
        # Counted transfers (see the class docstring): a packet's read cycles, ceil(flits / lanes); 0 where
        # it is always held (registered requests, fifo mode; at one lane every packet longer than a flit:
        # the switch admits only a short transfer's room there).
        short_ok = int(self.grant_delay == 1 and n_uc > 0)
        max_rc = -(-(self.max_payload + 1) // L) if L > 1 else 1
        m.submodules.queues = pq = PacketQueues(n_uc=n_uc, n_cells=C, ports=N, max_rc=max_rc)

        # ---------------------------------------------------------------- ingress
        m.submodules.ingress = ing = Ingress(ports=N, n_uc=n_uc, n_cells=C, flit_width=self.flit_width,
                                             max_payload=self.max_payload, isolate_static=self.isolate_static,
                                             multicast=self.multicast)
        if self.isolate_static:
            m.d.comb += ing.port.eq(self.port)
        m.submodules.credit = credit = CreditReturn(max_gain=L + 2, max_loss=2, bound=2 * C + 4)
        # Credits the switch holds (cells in use, queued errors, credits owed). The invariant is
        # sender_credits + held == credits, so a flit arriving while held == credits had no credit.
        held = Signal(range(-4 * C, 4 * C))
        m.d.comb += held.eq(pool.used + errq.level + credit.pending)
        # Without a protocol violation a next-write cell always exists when a flit arrives (at most
        # credits - 1 cells hold flits then, out of credits + 1); ~new_ok is handled like an overflow.
        m.d.comb += [ing.valid.eq(self.rx.valid), ing.flit.eq(self.rx.flit),
                     ing.full.eq((held >= self.credits) | ~pool.new_ok), ing.new_ok.eq(pool.new_ok),
                     ing.new_cell.eq(pool.new_cell), self.group_handle.eq(ing.group_handle),
                     ing.group_mask.eq(self.group_mask)]
        with m.If(ing.overflow):
            m.d.comb += [self.err_valid.eq(1), self.err_code.eq(ErrorCode.CREDIT_OVERFLOW.value)]
        with m.Elif(ing.err_push):
            m.d.comb += [self.err_valid.eq(1), self.err_code.eq(ing.err_code)]
        m.d.comb += [
            cells_w.addr.eq(pool.new_cell), cells_w.en.eq(ing.write), cells_w.data.data.eq(ing.w_data),
            cells_w.data.last.eq(ing.w_last), cells_w.data.poison.eq(ing.w_poison),
            cnext_w.addr.eq(pool.new_cell), cnext_w.data.eq(pool.next_cell), cnext_w.en.eq(ing.write & ~ing.w_last),
            pq.enq.eq(ing.enq), pq.enq_q.eq(ing.target_q), pq.enq_cell.eq(pool.new_cell), pq.enq_mask.eq(ing.mask),
            pq.enq_rc.eq(Mux(short_ok & (ing.payload < L * max_rc), (ing.payload + L) >> (L - 1), 0)),
            errq.w_data.eq(Cat(ing.err_tag, ing.err_code)), errq.w_en.eq(ing.err_push),
        ]

        # ---------------------------------------------------------------- reader
        m.submodules.reader = rd = CellReader(ports=N, n_cells=C, flit_width=self.flit_width, lanes=L)
        for k in range(L):
            rp = cnext.read_port(domain="comb")
            m.d.comb += [rp.addr.eq(rd.cnext_addr[k]), rd.cnext_data[k].eq(rp.data)]
            wiring.connect(m, rd.cell_rd[k], cells.read_port())
        m.d.comb += [rd.written.eq(pool.written), rd.clast.eq(pool.clast), rd.space.eq(self.space),
                     rd.port.eq(self.port), rd.err.eq(errq.r_data), errq.r_en.eq(rd.err_pop),
                     self.out_valid.eq(rd.out_valid), self.out_dests.eq(rd.out_dests)]
        m.d.comb += [self.out_flit[k].eq(rd.out_flit[k]) for k in range(L)]

        # ---------------------------------------------------------------- allocator requests and grants
        # Virtual cut-through: a packet still arriving may start only if its sender holds the credits to
        # send the rest back to back, or if nothing else is in the buffer (a packet longer than the buffer
        # must stream through it). Otherwise, with the buffer full, it would trickle in at one flit per
        # credit round trip while holding its outputs idle.
        fixed = isinstance(self.port, int)
        m.submodules.request = rq = AllocRequest(ports=N, n_uc=n_uc, n_cells=C, port=self.port if fixed else None,
                                                 grant_delay=self.grant_delay, short=bool(short_ok), max_rc=max_rc)
        m.submodules.start = gs = GrantStart(ports=N, n_uc=n_uc, n_cells=C)
        if not fixed:
            m.d.comb += rq.port.eq(self.port)
        for q in range(n_q):
            m.d.comb += [rq.count[q].eq(pq.count[q]), rq.head_rc[q].eq(pq.head_rc[q]),
                         rq.next_rc[q].eq(pq.next_rc[q])]
        m.d.comb += [
            rq.older.eq(pq.older), rq.mq_head.eq(pq.head[MQ]),
            rq.in_pkt.eq(ing.in_pkt), rq.cur_q.eq(ing.cur_q), rq.cur_hdr.eq(ing.cur_hdr),
            rq.cut_ok.eq((self.credits - held >= ing.cur_left) | (pool.used == ing.cur_written)),
            rq.mc_res.eq(gs.mc_res), rq.mc_pend.eq(gs.mc_pend),
            rq.err_rdy.eq(errq.r_rdy), rq.rd_active.eq(rd.active), rq.rd_dests.eq(rd.dests),
            rq.grant.eq(self.grant), rq.grant_rc.eq(pq.sel_rc),
            self.req.eq(rq.req), self.req_class.eq(rq.req_class), self.req_short.eq(rq.req_short),
            self.req_cd.eq(rq.req_cd), self.reads_next.eq(rq.reads_next),
            # A counted transfer's outputs are released ahead of its end (AllocRequest), a held one's here.
            self.release.eq(Mux(rd.release & ~rq.cur_cd, rd.dests, 0) | rq.release),
        ]
        # A grant dequeues (a unicast packet always; the mask-queue head on its last fanout round) and
        # starts the reader's transfer.
        m.d.comb += [
            gs.grant.eq(self.grant), gs.grant_class.eq(rq.grant_class),
            gs.enq.eq(ing.enq), gs.enq_q.eq(ing.target_q), gs.enq_mask.eq(ing.mask),
            gs.mq_count.eq(pq.count[MQ]), gs.next_mask.eq(pq.next_mask), gs.head.eq(pq.sel_head),
            pq.deq.eq(gs.deq), pq.sel.eq(gs.sel),
        ]
        wiring.connect(m, gs.start, rd.start)

        # ---------------------------------------------------------------- cell bookkeeping, credit return
        m.d.comb += [
            pool.write.eq(ing.write), pool.last.eq(ing.w_last),
            pool.free_bits.eq(rd.free_bits), pool.n_freed.eq(rd.n_freed),
            credit.gain.eq(rd.n_freed + ing.discard + rd.err_pop),
            credit.loss.eq(ing.err_push + ing.terminate),
            # A queue head about to be lapped by the arrival numbers stops the sender (PacketQueues' contract:
            # its credits, at most credits < n_cells packets, are all that arrive until the head leaves).
            credit.hold.eq(pq.near_lap),
            self.rx.credit.eq(credit.credit),
        ]
        return m
