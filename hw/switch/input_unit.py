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
mid-packet, instead of leaving it unterminated.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import decode, decode_split, first_set, join_split, onehot_to_index, or_reduce
from ..credit import CREDIT_RETURN_MAX, credit_link_signature
from ..packet import (DEFAULT_FLIT_WIDTH, HEADER_BITS, MAX_PORTS, ErrorCode, HeaderLayout, Opcode, OPCODES,
                      flit_layout, rtl_header_error, rtl_payload_flits)
from .head_order import HeadOrder

__all__ = ["InputUnit", "REQ_UC", "REQ_MASK", "REQ_ERR", "REQ_MASK_ALL"]

# Request classes an input presents to the allocator (bit 0 set = the mask queue).
REQ_UC = 0        # unicast VOQ heads: the allocator accepts one grant
REQ_MASK = 1      # mask-queue head: the allocator accepts every grant (fanout splitting)
REQ_ERR = 2       # an error response to this port
REQ_MASK_ALL = 3  # mask-queue head still arriving: all requested outputs at once, or none


class ErrorEntry(data.Struct):
    tag: 8
    code: ErrorCode


class InputUnit(wiring.Component):
    """Input ``port`` of an ``n_ports`` switch.

    ``port``: this input's index as an integer, or None for a ``port`` strap input (``In(range(n_ports))``)
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
    ``dests``/``releasing``: outputs held by the transfer in progress and whether its last flit is read
    this cycle. ``space``: per output, the egress can take ``lanes`` more flits. ``out_valid[k]``/
    ``out_flit[k]``/``out_dests``: crossbar input, ``lanes`` flits per cycle (lane 0 first), one cycle
    after the read. ``err_valid``/``err_code``: one error event
    per cycle for the status counters.

    Timing: header arrives in cycle t; it can be requested and matched in t+1, granted (dequeued) in
    t+2, read in t+3 and be at the crossbar output in t+4. One flit per cycle in and out; between two
    transfers of one input the reader idles two cycles (request, grant), hidden by the ``lanes`` = 2
    speedup.
    """

    def __init__(self, *, port: int | None, n_ports: int, credits: int, flit_width: int = DEFAULT_FLIT_WIDTH,
                 max_payload: int = 16, queueing: str = "voq", lanes: int = 1, grant_delay: int = 1):
        if queueing not in ("voq", "fifo"):
            raise ValueError(f"queueing must be 'voq' or 'fifo', got {queueing!r}")
        if lanes not in (1, 2):
            raise ValueError(f"lanes (internal speedup) must be 1 or 2, got {lanes!r}")
        if port is not None and not (isinstance(port, int) and 0 <= port < n_ports):
            raise ValueError(f"port must be None (a strap input) or an integer in 0..{n_ports - 1}, got {port!r}")
        if grant_delay not in (1, 2):
            raise ValueError(f"grant_delay must be 1 or 2, got {grant_delay!r}")
        self.grant_delay = grant_delay
        self.lanes = lanes
        if port is not None:
            self.port = port
        self.n_ports = n_ports
        self.credits = credits
        self.flit_width = flit_width
        self.max_payload = max_payload
        self.queueing = queueing
        self.n_cells = credits + 1
        flit = flit_layout(flit_width)
        super().__init__({
            **({"port": In(range(n_ports))} if port is None else {}),
            "rx": In(credit_link_signature(flit_width)),
            "group_handle": Out(8),
            "group_mask": In(n_ports),
            "req": Out(n_ports),
            "req_class": Out(2),
            "grant": In(n_ports),
            "dests": Out(n_ports),
            "releasing": Out(1),
            "space": In(n_ports),
            "out_valid": Out(lanes),
            "out_flit": Out(flit).array(lanes),
            "out_dests": Out(n_ports),
            "err_valid": Out(1),
            "err_code": Out(8),
        })

    def elaborate(self, platform):
        m = Module()
        N = self.n_ports
        C = self.n_cells
        cell_shape = unsigned(max(1, (C - 1).bit_length()))
        flit = flit_layout(self.flit_width)
        n_uc = N if self.queueing == "voq" else 0
        MQ = n_uc          # index of the mask queue
        n_q = n_uc + 1

        # ---------------------------------------------------------------- storage
        m.submodules.cells = cells = memory.Memory(shape=flit, depth=C, init=[])
        m.submodules.cnext = cnext = memory.Memory(shape=cell_shape, depth=C, init=[])
        m.submodules.pnext = pnext = memory.Memory(shape=cell_shape, depth=C, init=[])
        m.submodules.pmask = pmask = memory.Memory(shape=N, depth=C, init=[])
        m.submodules.errq = errq = memory.Memory(shape=ErrorEntry, depth=C, init=[])
        # Arrival sequence number of each packet (at its header cell): orders unicast VOQ heads against the
        # mask queue so that packets of one (source, destination) pair never overtake each other. At most
        # C packets are alive, so S bits of modular age never wrap.
        S = cell_shape.width + 2
        m.submodules.pseq = pseq = memory.Memory(shape=S, depth=C, init=[])
        cells_w = cells.write_port()
        cells_r = cells.read_port()                       # synchronous: data one cycle after addr
        cnext_w = cnext.write_port()
        cnext_r = cnext.read_port(domain="comb")
        pnext_w = pnext.write_port()
        pnext_r = pnext.read_port(domain="comb")
        pmask_w = pmask.write_port()
        pmask_r = pmask.read_port(domain="comb")
        errq_w = errq.write_port()
        errq_r = errq.read_port(domain="comb")
        pseq_w = pseq.write_port()
        pseq_r = pseq.read_port(domain="comb")

        free = Signal(C, init=(1 << C) - 2)   # 1 = cell free (cell 0 starts as the next-write cell)
        used = Signal(range(C + 1))
        clast = Signal(C)                     # cell holds the last flit of its packet
        written = Signal(C)                   # cell holds a flit (readable)

        q_count = [Signal(range(C + 1), name=f"q{q}_count") for q in range(n_q)]
        q_head = [Signal(cell_shape, name=f"q{q}_head") for q in range(n_q)]
        q_tail = [Signal(cell_shape, name=f"q{q}_tail") for q in range(n_q)]
        q_hseq = [Signal(S, name=f"q{q}_hseq") for q in range(n_q)]   # arrival number of each head
        aseq = Signal(S)                      # arrival number of the next packet
        mc_res = Signal(N)                    # remaining destinations of the mask-queue head
        mc_pend = [Signal(range(C + 1), name=f"mc_pend{j}") for j in range(N)]  # mask packets for j

        eq_rd = Signal(range(C))
        eq_wr = Signal(range(C))
        eq_count = Signal(range(C + 1))
        # Signed credit balance: + freed cells, discarded flits and departed errors; - queued errors.
        pending = Signal(range(-2 * C - 4, 2 * C + 4))

        # ---------------------------------------------------------------- ingress
        rx = self.rx
        hdr = HeaderLayout(rx.flit.data[:HEADER_BITS])
        in_pkt = Signal()       # receiving the payload of a stored packet
        dropping = Signal()     # discarding flits until `last`
        cur_left = Signal(range(32))          # payload flits still expected
        cur_hdr = Signal(cell_shape)          # header cell of the packet being received
        cur_q = Signal(range(max(2, n_uc + 1)))   # its queue (never zero-width)
        cur_written = Signal(range(C + 1))    # its flits written so far
        cur_poison = Signal()                 # a flit of it arrived poisoned: poison its last flit

        new_cell = Signal(cell_shape)        # the next-write cell: this cycle's flit goes here
        new_ok = Signal(init=1)
        alloc = Signal(cell_shape)           # a free cell, to become the next-write cell
        _, first_free = first_set(m, free, name="ffree")
        m.d.comb += alloc.eq(first_free)
        # Credits the switch holds (cells in use, queued errors, credits owed). The invariant is
        # sender_credits + held == credits, so a flit arriving while held == credits had no credit.
        held = Signal(range(-4 * C, 4 * C))
        m.d.comb += held.eq(used + eq_count + pending)
        # Without a protocol violation a next-write cell always exists when a flit arrives (at most
        # credits - 1 cells hold flits then, out of credits + 1); ~new_ok is handled like an overflow.
        full = (held >= self.credits) | ~new_ok

        m.d.comb += self.group_handle.eq(hdr.route.mm.group)
        hdr_err = Signal(8)
        m.d.comb += hdr_err.eq(rtl_header_error(hdr, n_ports=N, max_payload=self.max_payload,
                                                group_mask=self.group_mask))
        exp = Signal(range(32))
        m.d.comb += exp.eq(rtl_payload_flits(hdr))

        routing_dst = Signal()
        routing_group = Signal()
        m.d.comb += [
            routing_dst.eq(Cat(hdr.opcode == op for op, i in OPCODES.items() if i.routing == "dst").any()),
            routing_group.eq(Cat(hdr.opcode == op for op, i in OPCODES.items() if i.routing == "group").any()),
        ]
        hdr_mask = Signal(N)
        with m.If(routing_dst):
            m.d.comb += hdr_mask.eq(decode(m, hdr.route.uni.dst, N, name="dst_dec"))
        with m.Elif(routing_group):
            m.d.comb += hdr_mask.eq(self.group_mask)
        with m.Else():
            m.d.comb += hdr_mask.eq(hdr.route.dyn.mask[:N])
        target_q = Signal(range(max(2, n_q)))
        if n_uc:
            m.d.comb += target_q.eq(Mux(routing_dst, hdr.route.uni.dst, MQ))
        else:
            m.d.comb += target_q.eq(MQ)

        # Per-cycle ingress decisions.
        write = Signal()          # write rx.flit (or a terminator) into new_cell, link it to alloc
        w_last = Signal()
        w_poison = Signal()
        w_data = Signal(self.flit_width)
        enq = Signal()            # the written flit is a header: queue it
        discard = Signal()        # flit dropped, its credit returned
        err_push = Signal()
        err_code = Signal(8)
        overflow = Signal()
        terminate = Signal()      # the write is a poisoned terminator (holds no sender credit)

        is_hdr = ~in_pkt & ~dropping
        m.d.comb += w_data.eq(rx.flit.data)
        with m.If(rx.valid):
            with m.If(full):
                # The sender had no credit for this flit: count it and drop it. A packet in progress is
                # terminated with a poisoned flit in a spare cell, so its reader never waits forever.
                m.d.comb += overflow.eq(1)
                with m.If(in_pkt & new_ok):
                    m.d.comb += [write.eq(1), w_last.eq(1), w_poison.eq(1), w_data.eq(0), terminate.eq(1)]
                m.d.sync += [in_pkt.eq(0), dropping.eq(~rx.flit.last)]
            with m.Elif(dropping):
                m.d.comb += discard.eq(1)
                with m.If(rx.flit.last):
                    m.d.sync += dropping.eq(0)
            with m.Elif(is_hdr):
                with m.If(hdr_err != ErrorCode.NONE.value):
                    m.d.comb += [discard.eq(1), err_push.eq(1), err_code.eq(hdr_err)]
                    m.d.sync += dropping.eq(~rx.flit.last)
                with m.Else():
                    mismatch = rx.flit.last != (exp == 0)
                    m.d.comb += [write.eq(1), enq.eq(1),
                                 w_last.eq(rx.flit.last | (exp == 0)), w_poison.eq(mismatch | rx.flit.poison)]
                    m.d.sync += cur_poison.eq(rx.flit.poison)
                    with m.If(mismatch):
                        m.d.comb += [err_push.eq(1), err_code.eq(ErrorCode.LENGTH_MISMATCH.value)]
                        m.d.sync += dropping.eq(~rx.flit.last)
                    with m.Else():
                        m.d.sync += [in_pkt.eq(~rx.flit.last), cur_left.eq(exp)]
                    m.d.sync += [cur_hdr.eq(new_cell), cur_q.eq(target_q), cur_written.eq(1)]
            with m.Else():   # payload flit of a stored packet
                final = cur_left == 1
                mismatch = rx.flit.last != final
                m.d.comb += [write.eq(1), w_last.eq(rx.flit.last | final),
                             w_poison.eq(mismatch | rx.flit.poison | ((rx.flit.last | final) & cur_poison))]
                m.d.sync += [cur_left.eq(cur_left - 1), cur_written.eq(cur_written + 1),
                             cur_poison.eq(cur_poison | rx.flit.poison)]
                with m.If(rx.flit.last | final):
                    m.d.sync += in_pkt.eq(0)
                with m.If(mismatch):
                    m.d.comb += [err_push.eq(1), err_code.eq(ErrorCode.LENGTH_MISMATCH.value)]
                    m.d.sync += dropping.eq(~rx.flit.last)

        with m.If(overflow):
            m.d.comb += [self.err_valid.eq(1), self.err_code.eq(ErrorCode.CREDIT_OVERFLOW.value)]
        with m.Elif(err_push):
            m.d.comb += [self.err_valid.eq(1), self.err_code.eq(err_code)]

        m.d.comb += [
            cells_w.addr.eq(new_cell),
            cells_w.en.eq(write),
            cells_w.data.data.eq(w_data),
            cells_w.data.last.eq(w_last),
            cells_w.data.poison.eq(w_poison),
            cnext_w.addr.eq(new_cell),
            cnext_w.data.eq(alloc),
            cnext_w.en.eq(write & ~w_last),
            pmask_w.addr.eq(new_cell),
            pmask_w.data.eq(hdr_mask),
            pmask_w.en.eq(write & enq),
            pseq_w.addr.eq(new_cell),
            pseq_w.data.eq(aseq),
            pseq_w.en.eq(write & enq),
        ]
        with m.If(write & enq):
            m.d.sync += aseq.eq(aseq + 1)

        # Error queue.
        eq_pop = Signal()
        m.d.comb += [
            errq_w.addr.eq(eq_wr),
            errq_w.data.tag.eq(hdr.tag),
            errq_w.data.code.eq(err_code),
            errq_w.en.eq(err_push),
            errq_r.addr.eq(eq_rd),
        ]
        with m.If(err_push):
            m.d.sync += eq_wr.eq(Mux(eq_wr == C - 1, 0, eq_wr + 1))
        with m.If(eq_pop):
            m.d.sync += eq_rd.eq(Mux(eq_rd == C - 1, 0, eq_rd + 1))
        m.d.sync += eq_count.eq(eq_count + err_push - eq_pop)
        # The error entry's tag comes from the header of the packet in error; for a payload-time
        # (length) error that header is gone, so remember it.
        cur_tag = Signal(8)
        with m.If(rx.valid & is_hdr):
            m.d.sync += cur_tag.eq(hdr.tag)
        with m.If(rx.valid & ~is_hdr):
            m.d.comb += errq_w.data.tag.eq(cur_tag)

        # ---------------------------------------------------------------- reader
        # The reader follows the packet's cell chain, ``lanes`` cells per cycle (internal speedup): lane k
        # reads cell c_k, where c_0 = rd_cell and c_{k+1} = cnext[c_k], as long as each cell is written,
        # the lanes before it did not hit the packet's last cell, and every destination has room.
        L = self.lanes
        rd_active = Signal()
        rd_err = Signal()          # the transfer is an error response
        rd_cell = Signal(cell_shape)
        rd_free = Signal()         # free cells as they are read (last pass of the packet)
        rd_dests = Signal(N)
        release = Signal()

        # Each lane's cell is also held as a split one-hot (:func:`~hw.arbiter.decode_split`, the decodes of
        # its low 5 bits and of the rest, ANDed per cell into ``lane_hot``): lane 0's in registers kept beside
        # ``rd_cell`` (``rd_lo``, ``rd_hi``: 41 bits for 257 cells), lane k's decoded from lane k-1's
        # ``cnext`` read. A lane's ``written``/``clast`` bits and its free bit are read through it. Indexed
        # by ``rd_cell``, those selects and the free decoder put ~330 loads on each bit of that one register
        # (2.0 ns on its flip-flop alone in the flat integrated switch); an ``rd_lo``/``rd_hi`` bit drives
        # about 30.
        space_ok = (self.space & rd_dests) == rd_dests
        lane_cell = [rd_cell] + [Signal(cell_shape, name=f"lane{k}_cell") for k in range(1, L)]
        lane_next = [Signal(cell_shape, name=f"lane{k}_next") for k in range(L)]
        next_split = [decode_split(m, lane_next[k], C, name=f"next_dec{k}") for k in range(L)]
        rd_lo = Signal(len(next_split[0][0]), init=1)
        rd_hi = Signal(len(next_split[0][1]), init=1)
        lane_hot = [Signal(C, name=f"lane{k}_hot") for k in range(L)]
        m.d.comb += [hot.eq(join_split(lo, hi, C))
                     for hot, (lo, hi) in zip(lane_hot, [(rd_lo, rd_hi)] + next_split[:-1])]
        lane_issue = [Signal(name=f"lane{k}_issue") for k in range(L)]
        lane_last = [Signal(name=f"lane{k}_last") for k in range(L)]
        for k in range(L):
            rp = cnext_r if k == 0 else cnext.read_port(domain="comb")
            m.d.comb += [rp.addr.eq(lane_cell[k]), lane_next[k].eq(rp.data),
                         lane_last[k].eq((clast & lane_hot[k]).any())]
            if k + 1 < L:
                m.d.comb += lane_cell[k + 1].eq(lane_next[k])
            ok = (written & lane_hot[k]).any()
            if k == 0:
                m.d.comb += lane_issue[0].eq(rd_active & ~rd_err & space_ok & ok)
            else:
                m.d.comb += lane_issue[k].eq(lane_issue[k - 1] & ~lane_last[k - 1] & ok)
        err_issue = Signal()
        m.d.comb += err_issue.eq(rd_active & rd_err & space_ok)
        data_release = or_reduce([lane_issue[k] & lane_last[k] for k in range(L)])
        m.d.comb += [
            release.eq(err_issue | data_release),
            self.dests.eq(rd_dests),
            self.releasing.eq(release),
            eq_pop.eq(err_issue),
        ]
        lane_data = []
        for k in range(L):
            rp = cells_r if k == 0 else cells.read_port()
            m.d.comb += [rp.addr.eq(lane_cell[k]), rp.en.eq(lane_issue[k])]
            lane_data.append(rp.data)
        # The next cell to read: one past the last lane that issued.
        nxt, nxt_lo, nxt_hi = rd_cell, rd_lo, rd_hi
        for k in range(L):
            lo, hi = next_split[k]
            nxt, nxt_lo, nxt_hi = (Mux(lane_issue[k], a, b) for a, b in ((lane_next[k], nxt), (lo, nxt_lo),
                                                                         (hi, nxt_hi)))
        m.d.sync += [rd_cell.eq(nxt), rd_lo.eq(nxt_lo), rd_hi.eq(nxt_hi)]
        freed = [Signal(name=f"lane{k}_freed") for k in range(L)]
        for k in range(L):
            m.d.comb += freed[k].eq(lane_issue[k] & rd_free)
        # Cells freed by the reads, counted in ``used`` and returned as credits one cycle later: the
        # count moves from one to the other in the same cycle (``held`` stays exact), and the reader's
        # issue logic then feeds no adder.
        n_freed = Signal(range(L + 1))
        m.d.sync += n_freed.eq(sum(freed))

        # Crossbar-side pipeline register (aligned with the synchronous cell read).
        o_valid = Signal(L)
        o_err = Signal()
        o_dests = Signal(N)
        err_flit = Signal(self.flit_width)
        err_hdr = HeaderLayout(err_flit[:HEADER_BITS])
        m.d.sync += [o_valid.eq(Cat(lane_issue) | err_issue), o_err.eq(err_issue), o_dests.eq(rd_dests)]
        with m.If(err_issue):
            m.d.sync += [
                err_flit.eq(0),
                err_hdr.opcode.eq(Opcode.ERROR),
                err_hdr.src.eq(self.port),
                err_hdr.tag.eq(errq_r.data.tag),
                err_hdr.route.uni.dst.eq(self.port),
                err_hdr.route.uni.code.eq(errq_r.data.code),
            ]
        m.d.comb += [
            self.out_valid.eq(o_valid),
            self.out_dests.eq(o_dests),
        ]
        for k in range(L):
            if k == 0:
                with m.If(o_err):
                    m.d.comb += [self.out_flit[0].data.eq(err_flit), self.out_flit[0].last.eq(1)]
                with m.Else():
                    m.d.comb += self.out_flit[0].eq(lane_data[0])
            else:
                m.d.comb += self.out_flit[k].eq(lane_data[k])

        # ---------------------------------------------------------------- allocator requests
        mq_has = q_count[MQ] != 0
        # older[j]: VOQ j's head arrived before the mask-queue head (registered; see the queue bookkeeping).
        if n_uc:
            m.submodules.head_order = head_order = HeadOrder(n_voq=n_uc, seq_bits=S)
            older = head_order.older
        # Virtual cut-through: a packet still arriving may start only if its sender holds the credits to
        # send the rest back to back, or if nothing else is in the buffer (a packet longer than the buffer
        # must stream through it). Otherwise, with the buffer full, it would trickle in at one flit per
        # credit round trip while holding its outputs idle.
        cut_ok = Signal()
        m.d.comb += cut_ok.eq((self.credits - held >= cur_left) | (used == cur_written))
        uc_vec = Signal(N)
        mc_block = Signal(N)
        for j in range(n_uc):
            # A VOQ head younger than the mask-queue head waits while the mask queue holds a packet for
            # the same output (conservative: the holder may be younger than the VOQ head). A mask-queue
            # head waits, per output, for an older VOQ head to that output.
            has = q_count[j] != 0
            arriving = in_pkt & (cur_q == j) & (q_count[j] == 1)   # the head is the packet arriving
            m.d.comb += [
                uc_vec[j].eq(has & ~(arriving & ~cut_ok) &
                             ~(mq_has & (mc_pend[j] != 0) & ~older[j])),
                mc_block[j].eq(has & older[j]),
            ]
        mc_arriving = Signal()   # the mask-queue head is the packet still being received
        m.d.comb += mc_arriving.eq(in_pkt & (cur_hdr == q_head[MQ]))
        mc_vec = Signal(N)
        m.d.comb += mc_vec.eq(Mux(mq_has & ~(mc_arriving & ((mc_res & mc_block).any() | ~cut_ok)),
                                  mc_res & ~mc_block, 0))
        prefer_mask = Signal()
        # Requests come from registers only: an input asks again the cycle after its last read (not in
        # it) and not while its registered match is starting, so no reader logic feeds the allocator.
        avail = ~rd_active & ~self.grant.any()
        cls = Signal(2)
        with m.If(eq_count != 0):               # nothing leaves the error queue while avail
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

        # The grant answers the request of ``grant_delay`` cycles ago, whose class is kept here; the queues
        # it names cannot have changed meanwhile (only a start dequeues, enqueues only append, and the
        # switch drops the requests made while a grant is on its way). A grant starts a transfer next cycle.
        req_cls = Signal(2)
        if self.grant_delay == 1:
            m.d.sync += req_cls.eq(cls)
        else:
            cls_d = Signal(2)
            m.d.sync += [cls_d.eq(cls), req_cls.eq(cls_d)]
        start = Signal()
        m.d.comb += start.eq(self.grant.any())
        with m.If(start):
            m.d.sync += [rd_active.eq(1), rd_dests.eq(self.grant), rd_err.eq(req_cls == REQ_ERR)]
            with m.If(req_cls != REQ_ERR):
                m.d.sync += prefer_mask.eq(req_cls == REQ_UC)
        with m.Elif(release):
            m.d.sync += rd_active.eq(0)
        is_mask = req_cls[0]

        # Dequeue at the grant: a unicast packet always; the mask-queue head on its last fanout round.
        deq = Signal(n_q)
        start_q = Signal(range(max(2, n_q)))
        mc_final = (mc_res & ~self.grant) == 0
        with m.If(start & (req_cls == REQ_UC)):
            m.d.comb += start_q.eq(onehot_to_index(self.grant))
            m.d.comb += deq.eq(1 << start_q)
        with m.Elif(start & is_mask):
            m.d.comb += start_q.eq(MQ)
            with m.If(mc_final):
                m.d.comb += deq.eq(1 << MQ)
        head_sel = Signal(cell_shape)
        m.d.comb += head_sel.eq(or_reduce([Mux(start_q == q, q_head[q], 0) for q in range(n_q)]))
        head_lo, head_hi = decode_split(m, head_sel, C, name="head_dec")
        with m.If(start & (req_cls != REQ_ERR)):
            m.d.sync += [rd_cell.eq(head_sel), rd_lo.eq(head_lo), rd_hi.eq(head_hi),
                         rd_free.eq((req_cls == REQ_UC) | mc_final)]
        m.d.comb += pnext_r.addr.eq(head_sel)
        m.d.comb += pmask_r.addr.eq(pnext_r.data)
        m.d.comb += pseq_r.addr.eq(pnext_r.data)

        # Queue bookkeeping (enqueue at the header, dequeue at the grant; both may hit one queue).
        m.d.comb += [pnext_w.addr.eq(q_tail[0]), pnext_w.data.eq(new_cell)]
        for q in range(n_q):
            e = enq & (target_q == q)
            d = deq[q]
            m.d.sync += q_count[q].eq(q_count[q] + e - d)
            remaining = q_count[q] - d
            with m.If(e):
                m.d.sync += q_tail[q].eq(new_cell)
                with m.If(q_count[q] != 0):
                    m.d.comb += [pnext_w.addr.eq(q_tail[q]), pnext_w.en.eq(1)]
                with m.If(remaining == 0):
                    m.d.sync += [q_head[q].eq(new_cell), q_hseq[q].eq(aseq)]
                with m.Elif(d):
                    m.d.sync += [q_head[q].eq(pnext_r.data), q_hseq[q].eq(pseq_r.data)]
            with m.Elif(d):
                m.d.sync += [q_head[q].eq(pnext_r.data), q_hseq[q].eq(pseq_r.data)]
        # Head order, kept in registers so that no sequence-number arithmetic feeds the requests (the age
        # subtractions and comparisons of 65 queues were a 3.5 ns path into a 64-port allocator).
        if n_uc:
            m.d.comb += [
                head_order.takes_new.eq(Cat(enq & (target_q == q) & (q_count[q] - deq[q] == 0)
                                            for q in range(n_q))),
                head_order.deq.eq(deq),
                head_order.next_seq.eq(pseq_r.data),
            ]
            m.d.comb += [head_order.head_seq[q].eq(q_hseq[q]) for q in range(n_q)]

        # Remaining destinations of the mask-queue head.
        e_mq = enq & (target_q == MQ)
        with m.If(deq[MQ]):
            with m.If(q_count[MQ] > 1):
                m.d.sync += mc_res.eq(pmask_r.data)
            with m.Elif(e_mq):
                m.d.sync += mc_res.eq(hdr_mask)
        with m.Elif(start & is_mask):
            m.d.sync += mc_res.eq(mc_res & ~self.grant)
        with m.Elif(e_mq & (q_count[MQ] == 0)):
            m.d.sync += mc_res.eq(hdr_mask)
        mc_granted = Mux(start & is_mask, self.grant, 0)
        for j in range(N):
            m.d.sync += mc_pend[j].eq(mc_pend[j] + (e_mq & hdr_mask[j]) - mc_granted[j])

        # ---------------------------------------------------------------- cell bookkeeping
        # A write consumes the next-write cell; a new one is allocated in the same cycle.
        refill = write | ~new_ok
        can_alloc = free.any()
        with m.If(refill):
            m.d.sync += [new_cell.eq(alloc), new_ok.eq(can_alloc)]
        alloc_bit = Mux(refill & can_alloc, decode(m, alloc, C, name="alloc_dec"), 0)
        write_bit = Mux(write, decode(m, new_cell, C, name="write_dec"), 0)
        free_bits = or_reduce([Mux(freed[k], lane_hot[k], 0) for k in range(L)])
        m.d.sync += [
            free.eq((free & ~alloc_bit) | free_bits),
            used.eq(used + write - n_freed),
            clast.eq((clast & ~write_bit) | Mux(w_last, write_bit, 0)),
            written.eq((written & ~alloc_bit) | write_bit),
        ]

        # ---------------------------------------------------------------- credit return
        gain = Signal(range(L + 3))
        m.d.comb += gain.eq(n_freed + discard + eq_pop)
        send_credit = Signal(range(CREDIT_RETURN_MAX + 1))
        with m.If(pending >= CREDIT_RETURN_MAX):
            m.d.comb += send_credit.eq(CREDIT_RETURN_MAX)
        with m.Elif(pending > 0):
            m.d.comb += send_credit.eq(pending)
        m.d.comb += rx.credit.eq(send_credit)
        m.d.sync += pending.eq(pending + gain - err_push - terminate - send_credit)
        return m
