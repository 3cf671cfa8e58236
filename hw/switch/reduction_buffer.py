"""The reduction buffer: many ``ld_reduce`` reductions in flight, partial sums in SRAM, one contribution
flit absorbed per cycle, completed results streamed back as ``RED_RESP`` packets.

Entries and tags
----------------
An *entry* holds one outstanding reduction. ``alloc`` takes a request (requester ``src``/``tag``, element
type, op, payload ``length`` in flits, ``expected`` = popcount of the destination mask) and ``grant``
answers with the entry's 16-bit *reduction tag* ``rtag = gen << entry_bits | entry``: ``gen`` is a
per-entry generation that increments on every allocation, so a late response for an entry that has been
freed and reused does not match (it would alias only after ``2**(16 - entry_bits)`` reuses of one entry).
On the wire the ``RED_READ``/``RED_READ_RESP`` header carries ``rtag`` in ``tag`` (low 8 bits) and
``route.uni.xtag`` (high 8 bits), the packet format's wide tag (:func:`hw.packet.wide_tag_fields`).

Per entry the buffer keeps, in ``lib.memory`` arrays (SRAM-like: no reset, one row per access):

* ``partial``: one row per payload flit (``entries * 2**ceil(log2(max_length))`` rows) of
  ``2*flit_width`` bits of fp32/int32 partials (see :mod:`hw.switch.reduce_alu`) plus the flit's received
  count (7 bits). 2 read ports (contributions, drain) and 1 write port;
* ``meta``: generation, element type, op, length, expected count, requester ``src``/``tag``;
* ``progress``: one *touched* bit per flit (this flit has had a contribution in this use of the entry)
  and the number of flits whose count has reached ``expected``;
* ``start``: the allocation time, for the timeout.

and in flip-flops one ``busy`` (allocated) and one ``active`` (accepting contributions) bit per entry.

Contributions
-------------
``contrib`` carries one payload flit of one destination's ``RED_READ_RESP`` (``rtag``, flit index,
the packet's ``length`` and ``etype``, data), or an ``abort`` of the entry with an error ``code`` (the
engine's translation failures). Contributions may arrive in any order, interleaved across entries, flits
and destinations; each flit is reduced in the order its contributions arrive. ``contrib.ready`` is high
every cycle except the cycle after a timeout was held up (below): one flit per cycle, including back to
back to the same row.

Pipeline (cycle a: accept; b = a + 1; ALU latency 2)::

    a    read partial/meta/progress rows (the partial and progress reads see a same-cycle write)
    b    check the entry (active, generation, type, length); operand selection and forwarding; ALU
         input; progress update (write in b); completion/error event -> completion FIFO
    b+1  ALU stage 1 (the fp32 accumulate)
    b+2  ALU output -> partial row write

The partial read at ``a`` misses the writes of the two operations ahead of it; they are *forwarded*: the
one in ALU stage 1 through the ALU's ``chain`` operand, the one at the ALU output from the write data.
The per-flit count is forwarded the same way. Nothing stalls. The first contribution of a flit (touched
bit clear) uses the op's identity, so rows never need clearing; ``progress`` is cleared at allocation.
When a flit's count reaches ``expected`` the row is written with the *result* (the partial rounded to the
element type, :class:`ReduceALU`'s ``result``); when all ``length`` flits are final the entry completes.

Completion and errors
---------------------
A completing entry leaves ``active`` at once (later contributions for it are *stale*) and queues a
completion event; the drain reads ``meta`` and the result rows and sends ``RED_RESP`` (``dst`` = ``src`` =
the requester, requester's ``tag``, ``length`` result flits) on ``out``, then frees the entry. Errors
complete the entry the same way but send a header-only ``ERROR`` with the code:

* a contribution whose ``etype`` or ``length`` differs from the entry's, or whose flit index is not below
  the length: ``TYPE_MISMATCH`` (``mismatches`` counts them);
* an ``abort``: the abort's code (``aborts``);
* no completion within ``timeout`` cycles of allocation: ``TIMEOUT`` (``timeouts``). A scanner checks one
  entry per cycle, so the error goes out between ``timeout`` and about ``timeout + entries`` cycles after
  allocation. If a completion event takes the event slot when the scanner fires, ``contrib.ready`` drops
  for one cycle so that the timeout gets through.

A contribution or abort for an entry that is not in flight (index out of range, free, completed, errored,
or another generation) changes nothing and increments ``stale`` (once per flit). ``stale``, ``mismatches``,
``aborts`` and ``timeouts`` count an event one cycle after it (it is registered before the add, for the
640 ps clock). ``alloc.ready`` is low while no entry is free (or ``outstanding`` entries are in use):
requests wait, they are never dropped.

Latency: last contribution accepted at cycle a -> its result header valid on ``out`` at a + 7 (measured
by the testbench); then one result flit per cycle. Parameter ``outstanding=1`` admits one reduction at a
time: the one-at-a-time baseline (like the open tiny-switch).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import first_set
from ..packet import (DEFAULT_FLIT_WIDTH, MAX_LENGTH, EType, ErrorCode, HeaderLayout, Opcode, RedOp,
                      flit_layout, wide_tag, wide_tag_fields)
from .reduce_alu import ReduceALU

__all__ = ["ReductionBuffer", "AllocRequest", "RTAG_BITS", "COUNT_BITS", "contrib_layout",
           "rtag_to_header", "rtag_from_header", "LAST_TO_RESULT_CYCLES", "BUFFER_COUNTERS", "status_members"]


# The status outputs of the buffer, re-exported unchanged by the engine and the ld_reduce unit (which add
# their own counters): one list, so the three signatures and the forwarding loops cannot drift apart.
BUFFER_COUNTERS = ("stale", "mismatches", "aborts", "timeouts", "completed")


def status_members(entries: int, counters) -> dict:
    """Signature members: ``in_use`` (entries held) and a 32-bit output per counter name."""
    return {"in_use": Out(range(entries + 1)), **{name: Out(32) for name in counters}}

RTAG_BITS = 16
COUNT_BITS = 7          # contributions per flit: up to 64 destinations
LAST_TO_RESULT_CYCLES = 7


def _bits(n: int) -> int:
    """Bits to index ``n`` things (at least 1)."""
    return max(1, (n - 1).bit_length())


# A reduction tag travels as the packet format's 16-bit wide tag (``tag`` + ``xtag``).
rtag_to_header = wide_tag_fields
rtag_from_header = wide_tag


class AllocRequest(data.Struct):
    src: 6
    tag: 8
    etype: EType
    op: RedOp
    length: 5
    expected: COUNT_BITS


def contrib_layout(flit_width: int) -> data.StructLayout:
    return data.StructLayout({
        "rtag": RTAG_BITS,
        "flit": 5,           # payload flit index within the packet
        "length": 5,         # the contribution packet's length field
        "etype": 3,          # raw: undefined encodings are a mismatch
        "abort": 1,          # complete the entry with ERROR(code) instead
        "code": 8,
        "data": flit_width,
    })


class ReductionBuffer(wiring.Component):
    """Reduction buffer (see the module docstring for the full contract).

    Parameters: ``entries`` (16..512 outstanding reductions), ``max_length`` (payload flits per
    reduction, 1..31), ``flit_width`` (128/256/512), ``timeout`` (cycles from allocation to a ``TIMEOUT``
    error, 64..2**20), ``outstanding`` (allocation limit, 1..entries; default ``entries``).

    Ports: ``alloc`` (in) / ``grant`` (out, ``rtag`` in allocation order), ``contrib`` (in), ``out``
    (result/error packets, flit stream), ``in_use`` and the 32-bit counters ``stale``, ``mismatches``,
    ``aborts``, ``timeouts``, ``completed`` (``RED_RESP`` sent).
    """

    @staticmethod
    def check_params(*, entries, max_length, flit_width, timeout, outstanding) -> int:
        """Validate the parameters (``ValueError`` saying what is wrong); returns ``outstanding``."""
        if not isinstance(entries, int) or not 16 <= entries <= 512:
            raise ValueError(f"entries must be an integer in 16..512, got {entries!r}")
        if not isinstance(max_length, int) or not 1 <= max_length <= MAX_LENGTH:
            raise ValueError(f"max_length must be an integer in 1..{MAX_LENGTH}, got {max_length!r}")
        if not isinstance(timeout, int) or not 64 <= timeout <= 1 << 20:
            raise ValueError(f"timeout must be an integer in 64..{1 << 20} cycles, got {timeout!r}")
        if outstanding is None:
            outstanding = entries
        if not isinstance(outstanding, int) or not 1 <= outstanding <= entries:
            raise ValueError(f"outstanding must be an integer in 1..entries ({entries}), got {outstanding!r}")
        flit_layout(flit_width)
        return outstanding

    def __init__(self, *, entries: int = 64, max_length: int = 16, flit_width: int = DEFAULT_FLIT_WIDTH,
                 timeout: int = 8192, outstanding: int | None = None):
        outstanding = self.check_params(entries=entries, max_length=max_length, flit_width=flit_width,
                                        timeout=timeout, outstanding=outstanding)
        self.entries = entries
        self.max_length = max_length
        self.flit_width = flit_width
        self.timeout = timeout
        self.outstanding = outstanding
        self.entry_bits = _bits(entries)
        self.gen_bits = RTAG_BITS - self.entry_bits
        self.slot_bits = _bits(max_length)
        self.timer_bits = max(timeout, entries).bit_length() + 2
        super().__init__({
            "alloc": In(stream.Signature(AllocRequest)),
            "grant": Out(stream.Signature(data.StructLayout({"rtag": RTAG_BITS}))),
            "contrib": In(stream.Signature(contrib_layout(flit_width))),
            "out": Out(stream.Signature(flit_layout(flit_width))),
            **status_members(entries, BUFFER_COUNTERS),
        })

    def elaborate(self, platform):
        m = Module()
        N, W = self.entries, self.flit_width
        EB, GB, SB, TB = self.entry_bits, self.gen_bits, self.slot_bits, self.timer_bits
        ML = self.max_length
        addr_bits = EB + SB

        meta_layout = data.StructLayout({"gen": GB, "etype": EType, "op": RedOp, "length": 5,
                                         "expected": COUNT_BITS, "src": 6, "tag": 8})
        row_layout = data.StructLayout({"acc": 2 * W, "count": COUNT_BITS})
        prog_layout = data.StructLayout({"touched": ML, "finals": 5})

        m.submodules.partial = partial = memory.Memory(shape=row_layout, depth=N << SB, init=[])
        m.submodules.meta = meta = memory.Memory(shape=meta_layout, depth=N, init=[])
        m.submodules.progress = progress = memory.Memory(shape=prog_layout, depth=N, init=[])
        m.submodules.start = start = memory.Memory(shape=TB, depth=N, init=[])
        part_w = partial.write_port()
        part_rc = partial.read_port(transparent_for=(part_w,))
        part_rd = partial.read_port()
        meta_w = meta.write_port()
        meta_rc = meta.read_port()
        meta_ra = meta.read_port()
        meta_rd = meta.read_port()
        prog_w = progress.write_port()
        prog_rc = progress.read_port(transparent_for=(prog_w,))
        start_w = start.write_port()
        start_rs = start.read_port()

        m.submodules.alu = alu = ReduceALU(flit_width=W, user_width=1)
        m.submodules.events = events = fifo.SyncFIFOBuffered(width=EB + 8, depth=N)

        busy = Signal(N)
        active = Signal(N)
        now = Signal(TB)
        m.d.sync += now.eq(now + 1)
        set_busy = Signal(N)
        clr_busy = Signal(N)
        set_active = Signal(N)
        clr_active = Signal(N)
        m.d.sync += [busy.eq((busy | set_busy) & ~clr_busy), active.eq((active | set_active) & ~clr_active)]
        inc_use = Signal()
        dec_use = Signal()
        m.d.sync += self.in_use.eq(self.in_use + inc_use - dec_use)

        # ---- Stage a: accept a contribution, read its rows.
        c = self.contrib.payload
        scan_stall = Signal()
        m.d.comb += self.contrib.ready.eq(~scan_stall)
        take = self.contrib.valid & self.contrib.ready
        c_entry = c.rtag[0:EB]
        m.d.comb += [
            part_rc.addr.eq(Cat(c.flit[0:SB], c_entry)),
            meta_rc.addr.eq(c_entry),
            prog_rc.addr.eq(c_entry),
        ]
        b_valid = Signal()
        b = Signal(contrib_layout(W))
        m.d.sync += b_valid.eq(take)
        with m.If(take):
            m.d.sync += b.eq(c)

        # ---- Stage b: check, forward, accumulate.
        b_entry = Signal(EB)
        b_gen = Signal(GB)
        b_addr = Signal(addr_bits)
        m.d.comb += [b_entry.eq(b.rtag[0:EB]), b_gen.eq(b.rtag[EB:RTAG_BITS]),
                     b_addr.eq(Cat(b.flit[0:SB], b_entry))]
        md = meta_rc.data
        pr = prog_rc.data
        row = part_rc.data
        in_range = Const(1) if N == 1 << EB else (b_entry < N)
        b_active = Signal()
        m.d.comb += b_active.eq(active.bit_select(b_entry, 1) & in_range)
        live = b_valid & b_active & (md.gen == b_gen)
        mismatch = Signal()
        m.d.comb += mismatch.eq((b.etype != md.etype.as_value()) | (b.length != md.length) |
                                (b.flit >= md.length))
        op_valid = Signal()
        m.d.comb += op_valid.eq(live & ~b.abort & ~mismatch)

        # Shadows of the ALU's stages (it never stalls here): row address, new count, final flag.
        s1 = Signal(data.StructLayout({"valid": 1, "addr": addr_bits, "count": COUNT_BITS, "final": 1}))
        s2 = Signal.like(s1)
        touched = Signal()
        m.d.comb += touched.eq(pr.touched.bit_select(b.flit, 1) if ML > 1 else pr.touched[0])
        fwd1 = Signal()
        fwd2 = Signal()
        m.d.comb += [fwd1.eq(s1.valid & (s1.addr == b_addr)), fwd2.eq(s2.valid & (s2.addr == b_addr))]
        w_row = Signal(row_layout)      # the row written this cycle (op two ahead)
        count_in = Mux(fwd1, s1.count, Mux(fwd2, w_row.count, row.count))
        new_count = Signal(COUNT_BITS)
        m.d.comb += new_count.eq(Mux(touched, count_in, 0) + 1)
        final = Signal()
        m.d.comb += final.eq(new_count == md.expected)
        m.d.comb += [
            alu.i.valid.eq(op_valid),
            alu.i.payload.acc.eq(Mux(fwd2 & ~fwd1, w_row.acc, row.acc)),
            alu.i.payload.data.eq(b.data),
            alu.i.payload.etype.eq(md.etype),
            alu.i.payload.op.eq(md.op),
            alu.i.payload.first.eq(~touched),
            alu.i.payload.chain.eq(fwd1),
            alu.i.payload.user.eq(0),
            alu.o.ready.eq(1),
        ]
        m.d.sync += [s1.valid.eq(op_valid), s1.addr.eq(b_addr), s1.count.eq(new_count), s1.final.eq(final),
                     s2.eq(s1)]
        # Row write from the ALU output: the result once the flit is final, else the partial.
        m.d.comb += [
            w_row.acc.eq(Mux(s2.final, alu.o.payload.result, alu.o.payload.acc)),
            w_row.count.eq(s2.count),
            part_w.addr.eq(s2.addr),
            part_w.data.eq(w_row),
            part_w.en.eq(alu.o.valid),
        ]

        # Progress: touched bits and final-flit count (write in b; the next read sees it).
        finals = Signal(5)
        m.d.comb += finals.eq(pr.finals + final)
        complete = Signal()
        m.d.comb += complete.eq(op_valid & final & (finals == md.length))
        prog_b_we = Signal()
        m.d.comb += prog_b_we.eq(op_valid & (~touched | final))
        flit_bit = (Const(1, ML) << b.flit)[0:ML] if ML > 1 else Const(1, 1)

        # Events (completion or error) go to the completion FIFO, which has room for every entry and so
        # never refuses. The drain reads an entry's first result row at least 5 cycles after its event,
        # after the last row write (2 cycles after the event) has landed.
        ev0 = Signal(data.StructLayout({"valid": 1, "entry": EB, "code": 8}))
        m.d.comb += [events.w_en.eq(ev0.valid), events.w_data.eq(Cat(ev0.entry, ev0.code))]
        b_event = Signal()
        b_code = Signal(8)
        with m.If(live & b.abort):
            m.d.comb += [b_event.eq(1), b_code.eq(b.code)]
        with m.Elif(live & mismatch):
            m.d.comb += [b_event.eq(1), b_code.eq(ErrorCode.TYPE_MISMATCH.value)]
        with m.Elif(complete):
            m.d.comb += [b_event.eq(1), b_code.eq(ErrorCode.NONE.value)]

        # ---- Timeout scanner: one entry per cycle.
        scan_cur = Signal(EB)
        expired = Signal()
        m.d.comb += expired.eq(active.bit_select(scan_cur, 1) & ((now - start_rs.data)[0:TB] >= self.timeout))
        scan_fire = Signal()
        scan_hold = Signal()
        m.d.comb += [scan_fire.eq(expired & ~b_event), scan_hold.eq(expired & b_event)]
        scan_next = Mux(scan_hold, scan_cur, Mux(scan_cur == N - 1, 0, scan_cur + 1))
        m.d.comb += start_rs.addr.eq(scan_next)
        m.d.sync += [scan_cur.eq(scan_next), scan_stall.eq(scan_hold)]

        with m.If(b_event):
            m.d.comb += [ev0.valid.eq(1), ev0.entry.eq(b_entry), ev0.code.eq(b_code),
                         clr_active.eq(Const(1, N) << b_entry)]
        with m.Elif(scan_fire):
            m.d.comb += [ev0.valid.eq(1), ev0.entry.eq(scan_cur), ev0.code.eq(ErrorCode.TIMEOUT.value),
                         clr_active.eq(Const(1, N) << scan_cur)]

        # The counters add a cycle later: the events are registered first, so that a counter's 32-bit carry
        # chain does not follow the entry check and the scanner in one cycle (the 640 ps port clock).
        counted = Signal(data.StructLayout({"stale": 1, "aborts": 1, "mismatches": 1, "timeouts": 1}))
        m.d.sync += [
            counted.stale.eq(b_valid & ~live),
            counted.aborts.eq(live & b.abort),
            counted.mismatches.eq(live & ~b.abort & mismatch),
            counted.timeouts.eq(scan_fire),
            self.stale.eq(self.stale + counted.stale),
            self.aborts.eq(self.aborts + counted.aborts),
            self.mismatches.eq(self.mismatches + counted.mismatches),
            self.timeouts.eq(self.timeouts + counted.timeouts),
        ]

        # ---- Allocation: pick a free entry (a), bump its generation and write its rows (b), activate
        # it and grant (c). Activation is a cycle after the row writes, so a contribution that sees the
        # entry active has read the new meta row.
        free = Signal(N)
        m.d.comb += free.eq(~busy)
        any_free, pick = first_set(m, free, name="alloc_pick")
        al1 = Signal(data.StructLayout({"valid": 1, "entry": EB, "req": AllocRequest}))
        al2 = Signal(data.StructLayout({"valid": 1, "entry": EB, "gen": GB}))
        al2_fresh = Signal()
        al1_go = Signal()
        grant_free = ~al2.valid | self.grant.ready
        m.d.comb += al1_go.eq(al1.valid & ~prog_b_we & grant_free)
        room = self.in_use < self.outstanding
        m.d.comb += self.alloc.ready.eq(any_free & room & (~al1.valid | al1_go))
        accept = self.alloc.valid & self.alloc.ready
        m.d.comb += [meta_ra.addr.eq(pick), meta_ra.en.eq(accept)]
        with m.If(accept):
            m.d.sync += [al1.valid.eq(1), al1.entry.eq(pick), al1.req.eq(self.alloc.payload)]
            m.d.comb += [set_busy.eq(Const(1, N) << pick), inc_use.eq(1)]
        with m.Elif(al1_go):
            m.d.sync += al1.valid.eq(0)
        new_gen = Signal(GB)
        m.d.comb += new_gen.eq(meta_ra.data.gen + 1)
        r = al1.req
        m.d.comb += [
            meta_w.addr.eq(al1.entry),
            meta_w.data.gen.eq(new_gen),
            meta_w.data.etype.eq(r.etype),
            meta_w.data.op.eq(r.op),
            meta_w.data.length.eq(r.length),
            meta_w.data.expected.eq(r.expected),
            meta_w.data.src.eq(r.src),
            meta_w.data.tag.eq(r.tag),
            meta_w.en.eq(al1_go),
            start_w.addr.eq(al1.entry),
            start_w.data.eq(now),
            start_w.en.eq(al1_go),
        ]
        with m.If(prog_b_we):
            m.d.comb += [prog_w.addr.eq(b_entry), prog_w.data.touched.eq(pr.touched | flit_bit),
                         prog_w.data.finals.eq(finals), prog_w.en.eq(1)]
        with m.Else():
            m.d.comb += [prog_w.addr.eq(al1.entry), prog_w.data.as_value().eq(0), prog_w.en.eq(al1_go)]
        m.d.sync += al2_fresh.eq(al1_go)
        with m.If(al1_go):
            m.d.sync += [al2.valid.eq(1), al2.entry.eq(al1.entry), al2.gen.eq(new_gen)]
        with m.Elif(self.grant.ready):
            m.d.sync += al2.valid.eq(0)
        with m.If(al2_fresh):
            m.d.comb += set_active.eq(Const(1, N) << al2.entry)
        m.d.comb += [self.grant.valid.eq(al2.valid), self.grant.payload.rtag.eq(Cat(al2.entry, al2.gen))]

        # ---- Drain: completion event -> meta read (prefetch) -> header, then one result row per cycle.
        pre = Signal(data.StructLayout({"valid": 1, "entry": EB, "code": 8}))
        cur = Signal(data.StructLayout({"valid": 1, "entry": EB, "code": 8, "src": 6, "tag": 8,
                                        "etype": EType, "op": RedOp, "length": 5, "k": 5, "hdr": 1}))
        m.submodules.outq = outq = fifo.SyncFIFO(width=len(self.out.payload.as_value()), depth=4)
        pend = Signal(data.StructLayout({"valid": 1, "header": 1, "last": 1}))
        hdr_word = Signal(HeaderLayout)
        pend_hdr = Signal(HeaderLayout)
        space = (outq.level + pend.valid) < 4
        cur_done = Signal()          # cur issues its last item this cycle
        issue = Signal()
        m.d.comb += issue.eq(cur.valid & space)
        load = Signal()
        m.d.comb += load.eq(pre.valid & (~cur.valid | cur_done))
        pop = Signal()
        m.d.comb += [pop.eq(events.r_rdy & (~pre.valid | load)), events.r_en.eq(pop),
                     meta_rd.addr.eq(events.r_data[0:EB]), meta_rd.en.eq(pop)]
        with m.If(pop):
            m.d.sync += [pre.valid.eq(1), pre.entry.eq(events.r_data[0:EB]), pre.code.eq(events.r_data[EB:])]
        with m.Elif(load):
            m.d.sync += pre.valid.eq(0)

        is_err = cur.code != 0
        m.d.comb += [
            hdr_word.opcode.eq(Mux(is_err, Opcode.ERROR, Opcode.RED_RESP)),
            hdr_word.src.eq(cur.src),
            hdr_word.tag.eq(cur.tag),
            hdr_word.length.eq(Mux(is_err, 0, cur.length)),
            hdr_word.etype.eq(Mux(is_err, 0, cur.etype.as_value())),
            hdr_word.redop.eq(Mux(is_err, 0, cur.op.as_value())),
            hdr_word.route.uni.dst.eq(cur.src),
            hdr_word.route.uni.code.as_value().eq(cur.code),
        ]
        m.d.comb += part_rd.addr.eq(Cat(cur.k[0:SB], cur.entry))
        with m.If(issue):
            with m.If(cur.hdr):
                m.d.sync += [cur.hdr.eq(0), pend_hdr.eq(hdr_word)]
                m.d.comb += cur_done.eq(is_err)
            with m.Else():
                m.d.comb += [part_rd.en.eq(1), cur_done.eq(cur.k == cur.length - 1)]
                m.d.sync += cur.k.eq(cur.k + 1)
        # Loading the next packet comes after the issue updates above: it overrides them.
        with m.If(load):
            md_d = meta_rd.data
            m.d.sync += [cur.valid.eq(1), cur.entry.eq(pre.entry), cur.code.eq(pre.code),
                         cur.src.eq(md_d.src), cur.tag.eq(md_d.tag), cur.etype.eq(md_d.etype),
                         cur.op.eq(md_d.op), cur.length.eq(md_d.length), cur.k.eq(0), cur.hdr.eq(1)]
        with m.Elif(cur_done):
            m.d.sync += cur.valid.eq(0)
        m.d.sync += [pend.valid.eq(issue), pend.header.eq(cur.hdr),
                     pend.last.eq(Mux(cur.hdr, is_err, cur.k == cur.length - 1))]
        with m.If(cur_done):
            m.d.comb += [clr_busy.eq(Const(1, N) << cur.entry), dec_use.eq(1)]
        m.d.sync += self.completed.eq(self.completed + (issue & cur.hdr & ~is_err))

        flit = Signal(flit_layout(W))
        m.d.comb += [
            flit.data.eq(Mux(pend.header, pend_hdr.as_value(), part_rd.data.acc[0:W])),
            flit.last.eq(pend.last),
            outq.w_en.eq(pend.valid),
            outq.w_data.eq(flit),
            self.out.valid.eq(outq.r_rdy),
            self.out.payload.eq(outq.r_data),
            outq.r_en.eq(self.out.ready),
        ]
        return m
