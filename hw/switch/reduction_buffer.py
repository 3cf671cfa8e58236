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
and destinations; each flit is reduced in the order its contributions arrive. ``contrib.ready`` is low
in the cycle after a timeout was held up (below) and while a contribution waits for its row (below):
one flit per cycle otherwise.

Pipeline (cycle a: accept; b = a + 1 or later; ALU latency ``L = acc_stages + 1``)::

    a      read partial/meta/progress rows (the partial and progress reads see a same-cycle write);
           compare the row with the operations ahead (the match flip-flops of :class:`RowTracker`);
           widen the data to the ALU's fp32 operands (by the contribution's own type, which b checks
           against the entry's), so that the ALU's first accumulate cut starts from a flip-flop
    b      wait while the row's newest operation is in the first ``acc_stages - 1`` accumulate stages;
           then check the entry (active, generation, type, length); operand selection and forwarding;
           ALU input; progress update (write in b); completion/error event -> completion FIFO
    b+1..  ALU accumulate stages (``acc_stages``: 1, or 3 for the 640 ps port clock), then the
           conversion to the element type
    b+L    ALU output -> partial row write

The partial read at ``a`` misses the writes of the operations ahead of it; the newest one to the same
row is *forwarded*: from the last accumulate stage through the ALU's ``chain`` operand, or from the ALU
output (the write data). An operation still in an earlier accumulate stage has no partial yet, so the
contribution waits at b (``contrib.ready`` low, the row reads held by their enables) until that
operation reaches the last accumulate stage: with ``acc_stages=3`` a contribution 1 (2) cycles behind
another to its row waits 2 (1) cycles. It then takes ``chain`` (its row's newest operation is in the last
accumulate stage exactly when it leaves b), so the held partial read is never used. The rows of one
response packet are distinct, so whole packets of 3 or more flits back to back go at one flit per cycle;
single-flit (two-flit) responses to the same row back to back go one per 3 cycles (two flits per 3
cycles). The summation order is the arrival order in every case. The per-flit count is forwarded the same way. The first contribution of a flit (touched bit
clear) uses the op's identity, so rows never need clearing; ``progress`` is cleared at allocation. When a
flit's count reaches ``expected`` the row is written with the *result* (the partial rounded to the
element type, :class:`ReduceALU`'s ``result``); when all ``length`` flits are final the entry completes.
``acc_stages=1`` is the earlier one-cycle loop (no wait; misses the 640 ps clock).

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
or another generation), or marked ``stale`` by its sender, changes nothing and increments ``stale`` (once
per flit). ``stale``, ``mismatches``,
``aborts`` and ``timeouts`` count an event one cycle after it (it is registered before the add, for the
640 ps clock). ``alloc.ready`` is low while no entry is free (or ``outstanding`` entries are in use):
requests wait, they are never dropped.

Latency: last contribution accepted at cycle a -> its result header valid on ``out`` at a + 7
(``LAST_TO_RESULT_CYCLES``, whatever ``acc_stages``: the drain reads the first result row 5 cycles after
the completion event, after the last row write, ``L <= 4`` cycles after it), plus the cycles that
contribution waits for its row (2 when it is right behind another to its row: a + 9); then one result
flit per cycle (measured by the testbench). Parameter ``outstanding=1`` admits one reduction at a
time: the one-at-a-time baseline (like the open tiny-switch).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import first_set
from ..packet import (DEFAULT_FLIT_WIDTH, LENGTH_BITS, MAX_LENGTH, PORT_BITS, TAG_BITS, EType, ErrorCode, HeaderLayout,
                      Opcode, RedOp, flit_layout, header_format, wide_tag, wide_tag_fields, widened)
from .reduce_alu import ReduceALU, alu_operands
from .timeouts import MAX_DERIVED_TIMEOUT

__all__ = ["ReductionBuffer", "AllocRequest", "RTAG_BITS", "COUNT_BITS", "contrib_layout",
           "rtag_to_header", "rtag_from_header", "LAST_TO_RESULT_CYCLES", "BUFFER_COUNTERS", "status_members",
           "ACC_STAGES", "DEFAULT_ACC_STAGES", "RowTracker", "EntryAllocator", "ResultDrain",
           "ContribAccept", "EntryEvents", "ProgressUpdate", "alloc_request_layout"]


# The status outputs of the buffer, re-exported unchanged by the engine and the ld_reduce unit (which add
# their own counters): one list, so the three signatures and the forwarding loops cannot drift apart.
BUFFER_COUNTERS = ("stale", "mismatches", "aborts", "timeouts", "completed")


def status_members(entries: int, counters) -> dict:
    """Signature members: ``in_use`` (entries held) and a 32-bit output per counter name."""
    return {"in_use": Out(range(entries + 1)), **{name: Out(32) for name in counters}}

RTAG_BITS = 16
COUNT_BITS = 7          # contributions per flit: up to 64 destinations
LAST_TO_RESULT_CYCLES = 7
ACC_STAGES = (1, 3)     # the ReduceALU's accumulate stages the buffer supports
DEFAULT_ACC_STAGES = 3  # meets the 640 ps port clock (docs/timing.md)


def _bits(n: int) -> int:
    """Bits to index ``n`` things (at least 1)."""
    return max(1, (n - 1).bit_length())


# A reduction tag travels as the packet format's 16-bit wide tag (``tag`` + ``xtag``).
rtag_to_header = wide_tag_fields
rtag_from_header = wide_tag


class AllocRequest(data.Struct):
    src: PORT_BITS
    tag: TAG_BITS
    etype: EType
    op: RedOp
    length: LENGTH_BITS
    expected: COUNT_BITS


def contrib_layout(flit_width: int) -> data.StructLayout:
    return data.StructLayout({
        "rtag": RTAG_BITS,
        "flit": LENGTH_BITS,  # payload flit index within the packet
        "length": LENGTH_BITS,  # the contribution packet's length field
        "etype": 3,          # raw: undefined encodings are a mismatch
        "abort": 1,          # complete the entry with ERROR(code) instead
        "stale": 1,          # known stale by the sender (the engine: an answer it did not ask for yet)
        "code": ErrorCode,
        "data": flit_width,
    })


def _equal_copy(x, y, j: int):
    """``x == y`` written in the ``j``-th of several equivalent forms (bit rotation, then reversed bit
    order: ``2 * len(x)`` distinct comparators; then an XOR-reduce, which yosys may fold back into a
    comparator), so that the flip-flops it feeds are distinct cells: yosys merges flip-flops with the
    same input, and a duplicated select is only useful if its copies survive."""
    n = len(x)
    r, rev, form = j % n, (j // n) % 2, (j // (2 * n)) % 2
    xs, ys = Cat(x[r:], x[:r]), Cat(y[r:], y[:r])
    if rev:
        xs, ys = Cat(*[xs[i] for i in reversed(range(n))]), Cat(*[ys[i] for i in reversed(range(n))])
    return (xs == ys) if form == 0 else ~(xs ^ ys).any()


class RowTracker(wiring.Component):
    """Row tracking of the accumulate pipeline: the buffer's hazard and forwarding control.

    The contribution at stage b either becomes an ALU operation (``op``: row ``b_addr``, new ``count``,
    final when ``count == expected``) or not. The tracker shadows the ALU's ``acc_stages + 1`` stages with
    each operation's row, count and final flag, and keeps for the contribution at b one *match*
    flip-flop per stage (its row is that operation's row). They are computed a cycle early, when the
    contribution enters b (``take``, row ``c_addr``), against the operation leaving b and the shadows,
    and shift with the shadows while b waits: every select the datapath sees is a flip-flop, in
    ``copies`` distinct copies (each drives ``1/copies`` of the lanes), for the 640 ps clock.

    Outputs for the contribution at b: ``hold`` (its row's newest operation is in one of the first
    ``acc_stages - 1`` accumulate stages: wait), ``chain`` (it is leaving the last accumulate stage: the
    ALU's ``chain`` operand) with ``chain_count``, ``fwd`` (it is the row written this cycle) with
    ``fwd_count``; ``chain`` has priority over ``fwd``, and both over the row read. The row write (the
    shadow of the ALU output): ``w_valid``, ``w_addr``, ``w_count``, ``w_final`` (``copies`` copies).
    """

    def __init__(self, *, addr_bits: int, acc_stages: int, copies: int = 1):
        self.addr_bits = addr_bits
        self.acc_stages = acc_stages
        self.copies = copies
        super().__init__({
            "c_addr": In(addr_bits), "take": In(1),
            "b_addr": In(addr_bits), "op": In(1), "count": In(COUNT_BITS), "expected": In(COUNT_BITS),
            "hold": Out(1), "chain": Out(copies), "chain_count": Out(COUNT_BITS),
            "fwd": Out(copies), "fwd_count": Out(COUNT_BITS),
            "w_valid": Out(1), "w_addr": Out(addr_bits), "w_count": Out(COUNT_BITS), "w_final": Out(copies),
        })

    def elaborate(self, platform):
        m = Module()
        S, C = self.acc_stages, self.copies
        L = S + 1
        shadow = data.StructLayout({"valid": 1, "addr": self.addr_bits, "count": COUNT_BITS, "final": C})
        sh = [None] + [Signal(shadow, name=f"sh{k}") for k in range(1, L + 1)]
        self.sh = sh        # named by the formal harness
        # match[k][j]: copy j of "the row at b is the row of the operation in stage k".
        match = [None] + [[Signal(name=f"match{k}_{j}") for j in range(C)] for k in range(1, L + 1)]
        m.d.sync += [sh[1].valid.eq(self.op), sh[1].addr.eq(self.b_addr), sh[1].count.eq(self.count),
                     sh[1].final.eq(Cat(*[_equal_copy(self.count, self.expected, j) for j in range(C)]))]
        m.d.sync += [sh[k].eq(sh[k - 1]) for k in range(2, L + 1)]
        for j in range(C):
            with m.If(self.take):
                m.d.sync += match[1][j].eq(self.op & _equal_copy(self.b_addr, self.c_addr, j))
                m.d.sync += [match[k][j].eq(sh[k - 1].valid & _equal_copy(sh[k - 1].addr, self.c_addr, j))
                             for k in range(2, L + 1)]
            with m.Else():      # b waits (nothing issues) or is empty: the matches move on with the shadows
                m.d.sync += [match[1][j].eq(0)] + [match[k][j].eq(match[k - 1][j]) for k in range(2, L + 1)]
        m.d.comb += [
            self.hold.eq(Cat(*[match[k][0] for k in range(1, S)]).any() if S > 1 else 0),
            self.chain.eq(Cat(*match[S])), self.chain_count.eq(sh[S].count),
            self.fwd.eq(Cat(*match[L])), self.fwd_count.eq(sh[L].count),
            self.w_valid.eq(sh[L].valid), self.w_addr.eq(sh[L].addr), self.w_count.eq(sh[L].count),
            self.w_final.eq(sh[L].final),
        ]
        return m


_LENGTH = HeaderLayout.as_shape()["length"].shape     # a packet's length field, and a flit index below it


def _progress_layout(max_length: int) -> data.StructLayout:
    return data.StructLayout({"touched": max_length, "finals": LENGTH_BITS})


def alloc_request_layout(ports: int | None = None):
    """:class:`AllocRequest` in the header format of a ``ports``-port switch (:func:`hw.packet.widened`)."""
    return widened(AllocRequest, ports, src="port_bits")


def _meta_layout(gen_bits: int, ports: int | None = None) -> data.StructLayout:
    return data.StructLayout({"gen": gen_bits, "etype": EType, "op": RedOp, "length": LENGTH_BITS,
                              "expected": COUNT_BITS, "src": header_format(ports).port_bits, "tag": TAG_BITS})


class EntryAllocator(wiring.Component):
    """Allocation: pick a free entry (a), bump its generation and write its rows (b), activate it and
    grant (c). Activation is a cycle after the row writes, so a contribution that sees the entry active
    has read the new meta row.

    Ports: ``alloc``/``grant`` (the buffer's); ``free`` (entries not busy), ``room`` (fewer than
    ``outstanding`` in use), ``wait`` (the progress write port is taken this cycle); ``picked`` (one-hot:
    the entry taken this cycle), ``meta_rd`` (the picked entry's meta row, for its generation), the row
    writes ``w_en``/``w_entry``/``w_meta`` (meta, start time and progress clear), ``activate`` (one-hot).
    """

    def __init__(self, *, entries: int, entry_bits: int, gen_bits: int, ports: int | None = None):
        self.entries, self.entry_bits, self.gen_bits, self.ports = entries, entry_bits, gen_bits, ports
        ml = _meta_layout(gen_bits, ports)
        super().__init__({
            "alloc": In(stream.Signature(alloc_request_layout(ports))),
            "grant": Out(stream.Signature(data.StructLayout({"rtag": RTAG_BITS}))),
            "free": In(entries), "room": In(1), "wait": In(1),
            "picked": Out(entries),
            "meta_rd": In(memory.ReadPort.Signature(addr_width=entry_bits, shape=ml)),
            "w_en": Out(1), "w_entry": Out(entry_bits), "w_meta": Out(ml),
            "activate": Out(entries),
        })

    def elaborate(self, platform):
        m = Module()
        N, EB, GB = self.entries, self.entry_bits, self.gen_bits
        any_free, pick = first_set(m, self.free, name="alloc_pick")
        al1 = Signal(data.StructLayout({"valid": 1, "entry": EB, "req": alloc_request_layout(self.ports)}))
        al2 = Signal(data.StructLayout({"valid": 1, "entry": EB, "gen": GB}))
        al2_fresh = Signal()
        self.al1, self.al2, self.al2_fresh = al1, al2, al2_fresh      # named by the formal harness
        go = Signal()
        m.d.comb += go.eq(al1.valid & ~self.wait & (~al2.valid | self.grant.ready))
        m.d.comb += self.alloc.ready.eq(any_free & self.room & (~al1.valid | go))
        accept = self.alloc.valid & self.alloc.ready
        m.d.comb += [self.meta_rd.addr.eq(pick), self.meta_rd.en.eq(accept)]
        with m.If(accept):
            m.d.sync += [al1.valid.eq(1), al1.entry.eq(pick), al1.req.eq(self.alloc.payload)]
            m.d.comb += self.picked.eq(Const(1, N) << pick)
        with m.Elif(go):
            m.d.sync += al1.valid.eq(0)
        new_gen = Signal(GB)
        m.d.comb += new_gen.eq(self.meta_rd.data.gen + 1)
        r = al1.req
        m.d.comb += [self.w_en.eq(go), self.w_entry.eq(al1.entry), self.w_meta.gen.eq(new_gen)]
        m.d.comb += [getattr(self.w_meta, f).eq(getattr(r, f))
                     for f in ("etype", "op", "length", "expected", "src", "tag")]
        m.d.sync += al2_fresh.eq(go)
        with m.If(go):
            m.d.sync += [al2.valid.eq(1), al2.entry.eq(al1.entry), al2.gen.eq(new_gen)]
        with m.Elif(self.grant.ready):
            m.d.sync += al2.valid.eq(0)
        with m.If(al2_fresh):
            m.d.comb += self.activate.eq(Const(1, N) << al2.entry)
        m.d.comb += [self.grant.valid.eq(al2.valid), self.grant.payload.rtag.eq(Cat(al2.entry, al2.gen))]
        return m


class ResultDrain(wiring.Component):
    """Drain: completion event -> meta read (prefetch) -> header, then one result row per cycle into a
    4-deep output FIFO. The first result row is read 5 cycles after the event was written (so the row
    writes of ALU latency up to 4 have landed).

    Ports: ``events`` (entry, error code; 0 = a result), ``meta_rd``, ``part_rd`` (the result rows),
    ``out`` (packets), ``freed`` (one-hot: the entry whose packet's last item is issued this cycle),
    ``completed`` (``RED_RESP`` headers sent).
    """

    def __init__(self, *, entries: int, entry_bits: int, slot_bits: int, gen_bits: int, flit_width: int,
                 row_shape, ports: int | None = None):
        self.entries, self.entry_bits, self.slot_bits = entries, entry_bits, slot_bits
        self.flit_width, self.ports = flit_width, ports
        super().__init__({
            "events": In(stream.Signature(entry_bits + 8)),
            "meta_rd": In(memory.ReadPort.Signature(addr_width=entry_bits, shape=_meta_layout(gen_bits, ports))),
            "part_rd": In(memory.ReadPort.Signature(addr_width=entry_bits + slot_bits, shape=row_shape)),
            "out": Out(stream.Signature(flit_layout(flit_width))),
            "freed": Out(entries),
            "completed": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        N, EB, SB, W = self.entries, self.entry_bits, self.slot_bits, self.flit_width
        pre = Signal(data.StructLayout({"valid": 1, "entry": EB, "code": ErrorCode}))
        fmt = header_format(self.ports)
        cur = Signal(data.StructLayout({"valid": 1, "entry": EB, "code": ErrorCode, "src": fmt.port_bits,
                                        "tag": TAG_BITS, "etype": EType, "op": RedOp, "length": LENGTH_BITS,
                                        "k": LENGTH_BITS, "hdr": 1}))
        m.submodules.outq = outq = fifo.SyncFIFO(width=len(self.out.payload.as_value()), depth=4)
        pend = Signal(data.StructLayout({"valid": 1, "header": 1, "last": 1}))
        self.pre, self.cur, self.pend = pre, cur, pend      # named by the formal harness
        hdr_word = Signal(fmt.layout)
        pend_hdr = Signal(fmt.layout)
        self.pend_hdr = pend_hdr        # named by the formal harness
        space = (outq.level + pend.valid) < 4
        cur_done = Signal()          # cur issues its last item this cycle
        issue = Signal()
        m.d.comb += issue.eq(cur.valid & space)
        load = Signal()
        m.d.comb += load.eq(pre.valid & (~cur.valid | cur_done))
        pop = self.events.valid & self.events.ready
        ev = self.events.payload
        m.d.comb += [self.events.ready.eq(~pre.valid | load), self.meta_rd.addr.eq(ev[0:EB]),
                     self.meta_rd.en.eq(pop)]
        with m.If(pop):
            m.d.sync += [pre.valid.eq(1), pre.entry.eq(ev[0:EB]), pre.code.eq(ev[EB:])]
        with m.Elif(load):
            m.d.sync += pre.valid.eq(0)

        is_err = cur.code != ErrorCode.NONE
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
        # The row is read only when it is issued (a read port's enable defaults to 1: the partial-sum
        # SRAM would then read every cycle, about 38% of the integrated switch's power under MoE traffic).
        m.d.comb += [self.part_rd.addr.eq(Cat(cur.k[0:SB], cur.entry)), self.part_rd.en.eq(0)]
        with m.If(issue):
            with m.If(cur.hdr):
                m.d.sync += [cur.hdr.eq(0), pend_hdr.eq(hdr_word)]
                m.d.comb += cur_done.eq(is_err)
            with m.Else():
                m.d.comb += [self.part_rd.en.eq(1), cur_done.eq(cur.k == cur.length - 1)]
                m.d.sync += cur.k.eq(cur.k + 1)
        # Loading the next packet comes after the issue updates above: it overrides them.
        with m.If(load):
            md_d = self.meta_rd.data
            m.d.sync += [cur.valid.eq(1), cur.entry.eq(pre.entry), cur.code.eq(pre.code),
                         cur.src.eq(md_d.src), cur.tag.eq(md_d.tag), cur.etype.eq(md_d.etype),
                         cur.op.eq(md_d.op), cur.length.eq(md_d.length), cur.k.eq(0), cur.hdr.eq(1)]
        with m.Elif(cur_done):
            m.d.sync += cur.valid.eq(0)
        m.d.sync += [pend.valid.eq(issue), pend.header.eq(cur.hdr),
                     pend.last.eq(Mux(cur.hdr, is_err, cur.k == cur.length - 1))]
        with m.If(cur_done):
            m.d.comb += self.freed.eq(Const(1, N) << cur.entry)
        m.d.sync += self.completed.eq(self.completed + (issue & cur.hdr & ~is_err))

        flit = Signal(flit_layout(W))
        m.d.comb += [
            flit.data.eq(Mux(pend.header, pend_hdr.as_value(), self.part_rd.data.acc[0:W])),
            flit.last.eq(pend.last),
            outq.w_en.eq(pend.valid),
            outq.w_data.eq(flit),
            self.out.valid.eq(outq.r_rdy),
            self.out.payload.eq(outq.r_data),
            outq.r_en.eq(self.out.ready),
        ]
        return m


class ProgressUpdate(wiring.Component):
    """Stage b's progress row: one *touched* bit per flit and the count of final flits of b's entry.

    ``row``: the entry's progress row, read at a (transparent to ``prog_w``). ``touched``: b's ``flit`` has
    had a contribution in this use of the entry. For an operation (``op``) whose flit becomes ``final``,
    the count goes up and the entry is ``complete`` when all ``length`` flits are final. The row is written
    in b (``prog_w``; the next read sees it) when the flit is first touched or becomes final (``busy``);
    otherwise the allocator's ``clear`` of entry ``clear_entry`` uses the port.
    """

    def __init__(self, *, entry_bits: int, max_length: int):
        self.entry_bits, self.max_length = entry_bits, max_length
        layout = _progress_layout(max_length)
        super().__init__({
            "row": In(layout), "flit": In(_LENGTH), "entry": In(entry_bits), "op": In(1), "final": In(1),
            "length": In(_LENGTH), "clear": In(1), "clear_entry": In(entry_bits),
            "touched": Out(1), "complete": Out(1), "busy": Out(1),
            "prog_w": In(memory.WritePort.Signature(addr_width=entry_bits, shape=layout)),
        })

    def elaborate(self, platform):
        m = Module()
        ML, pr, w = self.max_length, self.row, self.prog_w
        m.d.comb += self.touched.eq(pr.touched.bit_select(self.flit, 1) if ML > 1 else pr.touched[0])
        finals = Signal(LENGTH_BITS)
        m.d.comb += finals.eq(pr.finals + self.final)
        m.d.comb += self.complete.eq(self.op & self.final & (finals == self.length))
        m.d.comb += self.busy.eq(self.op & (~self.touched | self.final))
        flit_bit = (Const(1, ML) << self.flit)[0:ML] if ML > 1 else Const(1, 1)
        with m.If(self.busy):
            m.d.comb += [w.addr.eq(self.entry), w.data.touched.eq(pr.touched | flit_bit),
                         w.data.finals.eq(finals), w.en.eq(1)]
        with m.Else():
            m.d.comb += [w.addr.eq(self.clear_entry), w.data.as_value().eq(0), w.en.eq(self.clear)]
        return m


class ContribAccept(wiring.Component):
    """Stage a: accept a contribution and hold it in stage b's register.

    ``contrib`` (the buffer's) is taken unless ``stall`` (the timeout scanner's) or b waits (``b_wait``:
    ``b_valid`` and the row tracker's ``hold``). ``take``: a contribution is accepted this cycle; its row
    ``addr`` (entry ``entry``) is read when ``rd_en`` (held while b waits). Stage b's register: ``b`` and,
    widened at a by the contribution's own type, the ALU operands ``b_operands``; ``b_flit[j]``, one copy of
    b's flit index per 16-bit lane for the ALU's ``first`` select, holds ``(flit - j) mod 2**slot_bits``
    (the lane's touched bits are rotated by j), so that the copies are distinct flip-flops and mux trees.
    """

    def __init__(self, *, entry_bits: int, slot_bits: int, flit_width: int):
        self.entry_bits, self.slot_bits, self.flit_width = entry_bits, slot_bits, flit_width
        super().__init__({
            "contrib": In(stream.Signature(contrib_layout(flit_width))),
            "stall": In(1), "hold": In(1),
            "take": Out(1), "entry": Out(entry_bits), "addr": Out(entry_bits + slot_bits), "rd_en": Out(1),
            "b_valid": Out(1), "b_wait": Out(1), "b": Out(contrib_layout(flit_width)),
            "b_operands": Out(2 * flit_width), "b_flit": Out(slot_bits).array(flit_width // 16),
        })

    def elaborate(self, platform):
        m = Module()
        EB, SB, W = self.entry_bits, self.slot_bits, self.flit_width
        c = self.contrib.payload
        m.d.comb += [self.b_wait.eq(self.b_valid & self.hold), self.contrib.ready.eq(~self.stall & ~self.b_wait)]
        m.d.comb += [self.take.eq(self.contrib.valid & self.contrib.ready), self.entry.eq(c.rtag[0:EB]),
                     self.addr.eq(Cat(c.flit[0:SB], c.rtag[0:EB])), self.rd_en.eq(~self.b_wait & self.contrib.valid)]
        with m.If(~self.b_wait):
            m.d.sync += self.b_valid.eq(self.take)
        a_operands = alu_operands(m, c.data, c.etype, W, "a_opnd")
        with m.If(self.take):
            m.d.sync += [self.b.eq(c), self.b_operands.eq(a_operands)]
            m.d.sync += [self.b_flit[j].eq(c.flit[0:SB] - (j % (1 << SB))) for j in range(W // 16)]
        return m


class EntryEvents(wiring.Component):
    """What ends an entry: completion and error events, the timeout scanner, the error counters.

    Stage b's contribution, examined this cycle (``seen``), is ``live`` (its entry is in flight) or stale;
    a live one is an ``abort`` (with ``code``), a ``mismatch``, or ``complete``s its entry ``entry``. Each
    gives an ``event`` (entry, error code; 0 = a result) to the completion FIFO, which has room for every
    entry and so never refuses. The scanner checks one ``active`` entry per cycle against its allocation
    time (``start_rd``; ``now``: the time) and sends its ``TIMEOUT``; if b's event takes the slot, the
    scanner holds its entry and ``stall``s the next contribution for a cycle. ``clear``: the entry (one-hot)
    leaving ``active``. The counters add a cycle after their event (see the module docstring).
    """

    def __init__(self, *, entries: int, entry_bits: int, timer_bits: int, timeout: int):
        self.entries, self.entry_bits, self.timer_bits, self.timeout = entries, entry_bits, timer_bits, timeout
        super().__init__({
            "active": In(entries),
            "start_rd": In(memory.ReadPort.Signature(addr_width=entry_bits, shape=timer_bits)),
            "now": Out(timer_bits),
            "seen": In(1), "live": In(1), "abort": In(1), "mismatch": In(1), "complete": In(1),
            "code": In(ErrorCode), "entry": In(entry_bits),
            "stall": Out(1),
            "event": Out(stream.Signature(entry_bits + 8)),
            "clear": Out(entries),
            **{name: Out(32) for name in ("stale", "aborts", "mismatches", "timeouts")},
        })

    def elaborate(self, platform):
        m = Module()
        N, EB, TB = self.entries, self.entry_bits, self.timer_bits
        m.d.sync += self.now.eq(self.now + 1)
        b_event = Signal()
        b_code = Signal(ErrorCode)
        with m.If(self.live & self.abort):
            m.d.comb += [b_event.eq(1), b_code.eq(self.code)]
        with m.Elif(self.live & self.mismatch):
            m.d.comb += [b_event.eq(1), b_code.eq(ErrorCode.TYPE_MISMATCH.value)]
        with m.Elif(self.complete):
            m.d.comb += [b_event.eq(1), b_code.eq(ErrorCode.NONE.value)]
        scan_cur = Signal(EB)
        expired = Signal()
        m.d.comb += expired.eq(self.active.bit_select(scan_cur, 1) &
                               ((self.now - self.start_rd.data)[0:TB] >= self.timeout))
        scan_fire = Signal()
        scan_hold = Signal()
        m.d.comb += [scan_fire.eq(expired & ~b_event), scan_hold.eq(expired & b_event)]
        scan_next = Mux(scan_hold, scan_cur, Mux(scan_cur == N - 1, 0, scan_cur + 1))
        m.d.comb += self.start_rd.addr.eq(scan_next)
        m.d.sync += [scan_cur.eq(scan_next), self.stall.eq(scan_hold)]
        ev_entry = Mux(b_event, self.entry, scan_cur)
        m.d.comb += [self.event.valid.eq(b_event | scan_fire),
                     self.event.payload.eq(Cat(ev_entry, Mux(b_event, b_code, ErrorCode.TIMEOUT.value))),
                     self.clear.eq(Mux(b_event | scan_fire, Const(1, N) << ev_entry, 0))]

        # The counters add a cycle later: the events are registered first, so that a counter's 32-bit carry
        # chain does not follow the entry check and the scanner in one cycle (the 640 ps port clock).
        counted = Signal(data.StructLayout({"stale": 1, "aborts": 1, "mismatches": 1, "timeouts": 1}))
        m.d.sync += [
            counted.stale.eq(self.seen & ~self.live),
            counted.aborts.eq(self.live & self.abort),
            counted.mismatches.eq(self.live & ~self.abort & self.mismatch),
            counted.timeouts.eq(scan_fire),
        ]
        m.d.sync += [getattr(self, k).eq(getattr(self, k) + getattr(counted, k))
                     for k in ("stale", "aborts", "mismatches", "timeouts")]
        return m


class ReductionBuffer(wiring.Component):
    """Reduction buffer (see the module docstring for the full contract).

    Parameters: ``entries`` (16..512 outstanding reductions), ``max_length`` (payload flits per
    reduction, 1..31), ``flit_width`` (128/256/512), ``timeout`` (cycles from allocation to a ``TIMEOUT``
    error, 64..2**26; the DySHARP switch sizes it, :mod:`hw.switch.timeouts`), ``outstanding`` (allocation limit, 1..entries; default ``entries``),
    ``acc_stages`` (the ALU's accumulate stages, 3 (default: meets the 640 ps clock) or 1 (the earlier
    one-cycle loop: no same-row wait, misses it)), ``ports`` (the switch's ports, which choose the header
    format of its requesters' port ids, :func:`hw.packet.header_format`; None: up to 64).

    Ports: ``alloc`` (in) / ``grant`` (out, ``rtag`` in allocation order), ``contrib`` (in), ``out``
    (result/error packets, flit stream), ``in_use`` and the 32-bit counters ``stale``, ``mismatches``,
    ``aborts``, ``timeouts``, ``completed`` (``RED_RESP`` sent).
    """

    @staticmethod
    def check_params(*, entries, max_length, flit_width, timeout, outstanding,
                     acc_stages=DEFAULT_ACC_STAGES, ports=None) -> int:
        """Validate the parameters (``ValueError`` saying what is wrong); returns ``outstanding``."""
        if not isinstance(entries, int) or not 16 <= entries <= 512:
            raise ValueError(f"entries must be an integer in 16..512, got {entries!r}")
        if not isinstance(max_length, int) or not 1 <= max_length <= MAX_LENGTH:
            raise ValueError(f"max_length must be an integer in 1..{MAX_LENGTH}, got {max_length!r}")
        if not isinstance(timeout, int) or not 64 <= timeout <= MAX_DERIVED_TIMEOUT:
            raise ValueError(f"timeout must be an integer in 64..{MAX_DERIVED_TIMEOUT} cycles, got {timeout!r}")
        if acc_stages not in ACC_STAGES:
            raise ValueError(f"acc_stages must be 1 or 3, got {acc_stages!r}")
        if outstanding is None:
            outstanding = entries
        if not isinstance(outstanding, int) or not 1 <= outstanding <= entries:
            raise ValueError(f"outstanding must be an integer in 1..entries ({entries}), got {outstanding!r}")
        flit_layout(flit_width)
        header_format(ports, flit_width)
        return outstanding

    def __init__(self, *, entries: int = 64, max_length: int = 16, flit_width: int = DEFAULT_FLIT_WIDTH,
                 timeout: int = 8192, outstanding: int | None = None,
                 acc_stages: int = DEFAULT_ACC_STAGES, ports: int | None = None):
        outstanding = self.check_params(entries=entries, max_length=max_length, flit_width=flit_width,
                                        timeout=timeout, outstanding=outstanding, acc_stages=acc_stages,
                                        ports=ports)
        self.ports = ports
        self.entries = entries
        self.max_length = max_length
        self.flit_width = flit_width
        self.timeout = timeout
        self.outstanding = outstanding
        self.acc_stages = acc_stages
        self.entry_bits = _bits(entries)
        self.gen_bits = RTAG_BITS - self.entry_bits
        self.slot_bits = _bits(max_length)
        self.timer_bits = max(timeout, entries).bit_length() + 2
        super().__init__({
            "alloc": In(stream.Signature(alloc_request_layout(ports))),
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
        row_layout = data.StructLayout({"acc": 2 * W, "count": COUNT_BITS})

        m.submodules.partial = partial = memory.Memory(shape=row_layout, depth=N << SB, init=[])
        m.submodules.meta = meta = memory.Memory(shape=_meta_layout(GB, self.ports), depth=N, init=[])
        m.submodules.progress = progress = memory.Memory(shape=_progress_layout(ML), depth=N, init=[])
        m.submodules.start = start = memory.Memory(shape=TB, depth=N, init=[])
        part_w = partial.write_port()
        part_rc = partial.read_port(transparent_for=(part_w,))
        meta_w = meta.write_port()
        meta_rc = meta.read_port()
        prog_w = progress.write_port()
        prog_rc = progress.read_port(transparent_for=(prog_w,))
        start_w = start.write_port()

        L16, L32 = W // 16, W // 32
        m.submodules.alu = alu = ReduceALU(flit_width=W, user_width=1, acc_stages=self.acc_stages,
                                           chain_hold=False, chain_copies=L16, wide_data=True)
        assert alu.latency <= 4, "the drain reads a result row 5 cycles after the event (ResultDrain)"
        # One copy of each operand select per 32-bit lane (RowTracker).
        m.submodules.rows = rows = RowTracker(addr_bits=EB + SB, acc_stages=self.acc_stages, copies=L16)
        m.submodules.events = events = fifo.SyncFIFOBuffered(width=EB + 8, depth=N)
        m.submodules.allocator = al = EntryAllocator(entries=N, entry_bits=EB, gen_bits=GB, ports=self.ports)
        m.submodules.drain = dr = ResultDrain(entries=N, entry_bits=EB, slot_bits=SB, gen_bits=GB,
                                              flit_width=W, row_shape=row_layout, ports=self.ports)
        m.submodules.accept = ac = ContribAccept(entry_bits=EB, slot_bits=SB, flit_width=W)
        m.submodules.ends = ev = EntryEvents(entries=N, entry_bits=EB, timer_bits=TB, timeout=self.timeout)
        m.submodules.progress_update = pu = ProgressUpdate(entry_bits=EB, max_length=ML)
        wiring.connect(m, wiring.flipped(self.alloc), al.alloc)
        wiring.connect(m, al.grant, wiring.flipped(self.grant))
        wiring.connect(m, al.meta_rd, meta.read_port())
        wiring.connect(m, dr.meta_rd, meta.read_port())
        wiring.connect(m, dr.part_rd, partial.read_port())
        wiring.connect(m, dr.out, wiring.flipped(self.out))
        wiring.connect(m, wiring.flipped(self.contrib), ac.contrib)
        wiring.connect(m, ev.start_rd, start.read_port())
        wiring.connect(m, ev.event, events.w_stream)
        wiring.connect(m, events.r_stream, dr.events)
        wiring.connect(m, pu.prog_w, prog_w)
        m.d.comb += [getattr(self, k).eq(getattr(src, k)) for src, names in
                     ((ev, ("stale", "aborts", "mismatches", "timeouts")), (dr, ("completed",))) for k in names]

        # Entry state in flip-flops: busy (allocated), active (accepting contributions), the count in use.
        busy, active = Signal(N), Signal(N)
        self.busy, self.active = busy, active       # named by the formal harness
        m.d.sync += [busy.eq((busy | al.picked) & ~dr.freed), active.eq((active | al.activate) & ~ev.clear),
                     self.in_use.eq(self.in_use + al.picked.any() - dr.freed.any())]
        m.d.comb += [al.free.eq(~busy), al.room.eq(self.in_use < self.outstanding), ev.active.eq(active)]

        # ---- Stage a (ContribAccept): accept a contribution, read its rows (held while b waits).
        m.d.comb += [ac.stall.eq(ev.stall), ac.hold.eq(rows.hold), rows.c_addr.eq(ac.addr), rows.take.eq(ac.take),
                     part_rc.addr.eq(ac.addr), meta_rc.addr.eq(ac.entry), prog_rc.addr.eq(ac.entry),
                     part_rc.en.eq(ac.rd_en), meta_rc.en.eq(ac.rd_en), prog_rc.en.eq(ac.rd_en)]

        # ---- Stage b: check the entry, select the operand, accumulate; progress and events.
        b = ac.b
        b_entry = b.rtag[0:EB]
        md, pr, row = meta_rc.data, prog_rc.data, part_rc.data
        in_range = Const(1) if N == 1 << EB else (b_entry < N)
        live = Signal()
        m.d.comb += live.eq(ac.b_valid & ~ac.b_wait & active.bit_select(b_entry, 1) & in_range &
                            (md.gen == b.rtag[EB:RTAG_BITS]) & ~b.stale)
        mismatch = Signal()
        m.d.comb += mismatch.eq((b.etype != md.etype.as_value()) | (b.length != md.length) |
                                (b.flit >= md.length))
        op_valid = Signal()
        m.d.comb += op_valid.eq(live & ~b.abort & ~mismatch)
        # touched[flit] for op_valid contributions (flit < length <= ML), one copy per lane (ContribAccept).
        P = 1 << SB
        padded = Cat(pr.touched, Const(0, P - ML))
        first = Signal(L16)
        for j in range(L16):
            r = j % P
            m.d.comb += first[j].eq(~Cat(padded[r:], padded[:r]).bit_select(ac.b_flit[j], 1))
        count_in = Mux(rows.chain[0], rows.chain_count, Mux(rows.fwd[0], rows.fwd_count, row.count))
        new_count = Signal(COUNT_BITS)
        m.d.comb += new_count.eq(Mux(pu.touched, count_in, 0) + 1)
        final = Signal()
        m.d.comb += final.eq(new_count == md.expected)
        # The row written this cycle (the result once the flit is final, else the partial), lane by lane
        # with the lane's copy of the final flag; forwarded as the operand with the lane's copy of `fwd`.
        w_row = Signal(row_layout)
        o = alu.o.payload
        for i in range(L16):
            lane = slice(32 * i, 32 * i + 32)
            res = o.result[lane] if i < L32 else Const(0, 32)
            m.d.comb += [w_row.acc[lane].eq(Mux(rows.w_final[i], res, o.acc[lane])),
                         alu.i.payload.acc[lane].eq(Mux(rows.fwd[i], w_row.acc[lane], row.acc[lane]))]
        m.d.comb += [
            rows.b_addr.eq(Cat(b.flit[0:SB], b_entry)), rows.op.eq(op_valid), rows.count.eq(new_count),
            rows.expected.eq(md.expected),
            alu.i.valid.eq(op_valid), alu.i.payload.data.eq(ac.b_operands), alu.i.payload.etype.eq(md.etype),
            alu.i.payload.op.eq(md.op), alu.i.payload.first.eq(first), alu.i.payload.chain.eq(rows.chain),
            alu.i.payload.user.eq(0), alu.o.ready.eq(1),
            w_row.count.eq(rows.w_count),
            part_w.addr.eq(rows.w_addr), part_w.data.eq(w_row), part_w.en.eq(alu.o.valid),
        ]

        # Progress (ProgressUpdate), written in b; the allocator writes a new entry's rows (its progress row
        # cleared when b leaves the port free).
        m.d.comb += [pu.row.eq(pr), pu.flit.eq(b.flit), pu.entry.eq(b_entry), pu.op.eq(op_valid), pu.final.eq(final),
                     pu.length.eq(md.length), pu.clear.eq(al.w_en), pu.clear_entry.eq(al.w_entry), al.wait.eq(pu.busy),
                     meta_w.addr.eq(al.w_entry), meta_w.data.eq(al.w_meta), meta_w.en.eq(al.w_en),
                     start_w.addr.eq(al.w_entry), start_w.data.eq(ev.now), start_w.en.eq(al.w_en)]

        # Events (EntryEvents): completion or error of b's entry, timeouts, the counters.
        m.d.comb += [ev.seen.eq(ac.b_valid & ~ac.b_wait), ev.live.eq(live), ev.abort.eq(b.abort),
                     ev.mismatch.eq(mismatch), ev.complete.eq(pu.complete), ev.code.eq(b.code), ev.entry.eq(b_entry)]
        return m
