"""The token tracker: a Tile Status Table with one entry per (local expert, tile).

What it is for
--------------
Token-centric kernel fusion starts an expert's GEMM on a tile of ``tile_size`` tokens as soon as those
tokens have arrived, instead of after the whole dispatch. The receive path reports every arrived
(token, local expert) pair as an arrival ``(expert, tile)``; this table counts them and emits the tile on
the ``ready`` stream (the GEMM-1 trigger) the cycle its last token lands. When the GEMM-2 of a tile
finishes (``DONE`` command) the tile's tokens leave one per cycle on the ``release`` stream, which is what
the combine side issues ``dymultimem.ld_reduce`` requests from.

Entry life cycle (``TileState``)::

    FREE --arrival--> FILLING --last arrival / EXPECT--> READY --DONE--> GEMM2_DONE
         --all tokens released--> COMBINE_ISSUED --RETIRE--> FREE

Expected counts
---------------
Every tile holds ``tile_size`` tokens except an expert's last one. An expert's total token count is only
known after the count exchange, so it comes late, as an ``EXPECT(expert, total)`` command; until then a
tile is ready when it is full. When the total arrives, the expert's last tile ``(total-1) // tile_size``
expects ``total - last*tile_size`` tokens: if they are already there it becomes ready at that moment (the
partial-last-tile case), otherwise it becomes ready with its last arrival. ``CLEAR(expert)`` forgets the
total (the next layer). Tiles fill in whatever order arrivals name them; the receive path assigns slots in
arrival order, so an expert's tiles fill one after the other.

Contract
--------
* ``arrival`` (stream of :class:`TileArrival`) and ``cmd`` (stream of :class:`TileCommand`) share one
  table access per cycle. Priority: the internal "combine issued" update (one cycle after a tile's last
  release), then ``cmd``, then ``arrival``. With no commands an arrival is accepted every cycle,
  including back-to-back arrivals to the same entry (the read-modify-write pipeline forwards the value
  written in the previous cycle, so no increment is lost). ``arrival.ready`` is low in a cycle where a
  command is accepted.
* ``ready`` (stream of :class:`TileReady`): tiles in the order they became ready (at most one per cycle);
  a tile made ready by an arrival accepted in cycle t is valid at cycle t+2.
* ``release`` (stream of :class:`TokenRelease`): after ``DONE(e, t)`` accepted in cycle t, the tile's
  tokens ``slot = 0 .. count-1`` from cycle t+2, one per cycle while ``release.ready``, ``last`` on the
  final one; tiles in ``DONE`` order.
* Backpressure: an operation is only accepted when the queue it may push to (``ready`` for arrivals and
  ``EXPECT``, ``release`` for ``DONE``; depths ``ready_depth``/``release_depth``) has room for it and for
  what the operation before it may push there. A stalled ``ready`` consumer stalls arrivals; a slow
  ``release`` consumer only stalls ``DONE`` commands, never arrivals. Nothing is ever lost.
* Bad input, each counted in ``err_count[TrackerError.X]`` and changing nothing else:
  ``UNKNOWN_TILE`` (expert >= ``experts``, tile >= ``tiles``, a tile past the expert's known total, an
  ``EXPECT`` beyond the table), ``OVERFLOW`` (an arrival to a tile that already has its expected count, or
  an ``EXPECT`` below the arrivals already counted in the last tile), ``DOUBLE_DONE`` (``DONE`` twice),
  ``NOT_READY`` (``DONE`` for a tile that is not ready), ``BAD_RETIRE`` (``RETIRE`` before combine
  issue), ``BAD_EXPECT`` (a different total for an expert whose total is already known).
* Storage: the table and the per-expert totals are ``lib.memory`` arrays with one synchronous read and
  one write port (SRAM-like); ``rst`` does not clear them (entries return to ``FREE`` through
  ``RETIRE``, totals through ``CLEAR``).

Depth is ``experts * tiles`` entries; ``experts``, ``tiles`` and ``tile_size`` are powers of two so an
entry's index is the concatenation ``{expert, tile}``.

The cycle-exact Python twin is :class:`sim_models.scheduler.TileTableModel`.
"""

import enum as py_enum
from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..event_counters import EventCounters

__all__ = ["TileArrival", "TileCmdOp", "TileCommand", "TileReady", "TokenRelease", "TileState",
           "TrackerError", "TokenTracker", "COUNT_BITS", "EXPERT_BITS", "TILE_BITS"]

COUNT_BITS = 16     # width of token counts on the interfaces (totals up to 65535 tokens per expert)
EXPERT_BITS = 8     # a local expert on the interfaces (experts <= 256)
TILE_BITS = 8       # a tile of an expert on the interfaces (tiles <= 256)


class TileArrival(data.Struct):
    """One token has arrived for ``tile`` of local expert ``expert``."""
    expert: EXPERT_BITS
    tile: TILE_BITS


class TileCmdOp(enum.Enum, shape=2):
    EXPECT = 0   #: ``count`` = the expert's total tokens this layer (the count exchange result)
    DONE = 1     #: GEMM-2 of (``expert``, ``tile``) finished: release its tokens for combine
    RETIRE = 2   #: the tile's combine completed: the entry returns to ``FREE``
    CLEAR = 3    #: forget the expert's total (start of the next layer)


class TileCommand(data.Struct):
    op: TileCmdOp
    expert: EXPERT_BITS
    tile: TILE_BITS
    count: COUNT_BITS


class TileReady(data.Struct):
    """A tile ready for GEMM-1, with its token count (``tile_size`` except a partial last tile)."""
    expert: EXPERT_BITS
    tile: TILE_BITS
    count: COUNT_BITS


class TokenRelease(data.Struct):
    """Token ``slot`` of (``expert``, ``tile``) may be combined; ``last`` marks the tile's final token."""
    expert: EXPERT_BITS
    tile: TILE_BITS
    slot: COUNT_BITS
    last: 1


class TileState(enum.Enum, shape=3):
    FREE = 0
    FILLING = 1
    READY = 2
    GEMM2_DONE = 3
    COMBINE_ISSUED = 4


class TrackerError(py_enum.IntEnum):
    UNKNOWN_TILE = 0
    OVERFLOW = 1
    DOUBLE_DONE = 2
    NOT_READY = 3
    BAD_RETIRE = 4
    BAD_EXPECT = 5


# Internal operation codes of the table pipeline.
_OP_ARRIVE, _OP_EXPECT, _OP_DONE, _OP_RETIRE, _OP_CLEAR, _OP_ISSUED = range(6)
_OP_BITS = 3
_CMD_TO_OP = {TileCmdOp.EXPECT: _OP_EXPECT, TileCmdOp.DONE: _OP_DONE, TileCmdOp.RETIRE: _OP_RETIRE,
              TileCmdOp.CLEAR: _OP_CLEAR}

# A tile whose last token has been released (the release walker tells the table to mark it issued).
_Issued = data.StructLayout({"valid": 1, "expert": EXPERT_BITS, "tile": TILE_BITS})
# Per-expert total, stored once the count exchange gives it.
_Total = data.StructLayout({"known": 1, "total": COUNT_BITS})


def _log2_exact(value, name, lo, hi):
    if not isinstance(value, int) or not lo <= value <= hi or value & (value - 1):
        raise ValueError(f"{name} must be a power of two in {lo}..{hi}, got {value!r}")
    return value.bit_length() - 1


class _Geometry:
    """The table's shape, derived once from the tracker's parameters and shared by its stages."""

    def __init__(self, experts, tiles, tile_size, ready_depth, release_depth):
        self.E, self.T, self.L = experts, tiles, tile_size
        self.eb = _log2_exact(experts, "experts", 1, 256)
        self.tb = _log2_exact(tiles, "tiles", 1, 256)
        self.lb = _log2_exact(tile_size, "tile_size", 1, 16384)
        self.ready_depth, self.release_depth = ready_depth, release_depth
        self.depth = experts * tiles
        self.idx_w = self.eb + self.tb                   # table address: {expert, tile}
        self.ex_aw = max(1, self.eb)                     # totals address (the array has >= 2 entries)
        self.entry = data.StructLayout({"state": TileState, "count": self.lb + 1})   # count 0..tile_size
        self.op = data.StructLayout({"valid": 1, "op": _OP_BITS, "expert": EXPERT_BITS, "tile": TILE_BITS,
                                     "count": COUNT_BITS, "idx": self.idx_w, "err": 1})

    def index(self, expert, tile):
        return Cat(*([tile[:self.tb]] if self.tb else []), *([expert[:self.eb]] if self.eb else []))

    def ex_index(self, expert):
        return expert[:self.ex_aw] if self.eb else 0


class _OpSelect(wiring.Component):
    """Stage 0: picks one table operation per cycle and registers it on ``op`` (stage 1).

    Priority: ``issued`` (a tile's last token released last cycle), then ``cmd``, then ``arrival``. An
    operation is taken only if the queue it may push to (levels ``ready_level``/``release_level``) has room
    for it and for what the operation now on ``op`` may push there. Drives the table's and the totals'
    read addresses (``tab_addr``, ``ex_addr``) in the cycle it takes the operation; ``op.err`` flags an
    operand out of range. ``EXPECT`` reads the expert's last tile, ``(count - 1) >> lb``."""

    def __init__(self, g: _Geometry):
        self.g = g
        super().__init__({
            "arrival": In(stream.Signature(TileArrival)),
            "cmd": In(stream.Signature(TileCommand)),
            "issued": In(_Issued),
            "ready_level": In(range(g.ready_depth + 1)),
            "release_level": In(range(g.release_depth + 1)),
            "tab_addr": Out(g.idx_w),
            "ex_addr": Out(g.ex_aw),
            "op": Out(g.op),
        })

    def elaborate(self, platform):
        m = Module()
        g, s1 = self.g, self.op
        ready_room = Signal()
        rel_room = Signal()
        m.d.comb += [
            ready_room.eq((self.ready_level + (s1.valid & ((s1.op == _OP_ARRIVE) | (s1.op == _OP_EXPECT))))
                          < g.ready_depth),
            rel_room.eq((self.release_level + (s1.valid & (s1.op == _OP_DONE))) < g.release_depth),
        ]
        cmd = self.cmd.payload
        cmd_room = Signal()
        m.d.comb += cmd_room.eq(Mux(cmd.op == TileCmdOp.EXPECT, ready_room,
                                    Mux(cmd.op == TileCmdOp.DONE, rel_room, 1)))
        m.d.comb += [
            self.cmd.ready.eq(~self.issued.valid & cmd_room),
            self.arrival.ready.eq(~self.issued.valid & ~(self.cmd.valid & cmd_room) & ready_room),
        ]
        take_cmd = Signal()
        take_arr = Signal()
        m.d.comb += [
            take_cmd.eq(self.cmd.valid & self.cmd.ready),
            take_arr.eq(self.arrival.valid & self.arrival.ready),
        ]

        op = Signal(_OP_BITS)
        op_expert = Signal(EXPERT_BITS)
        op_tile = Signal(TILE_BITS)
        op_count = Signal(COUNT_BITS)
        issue = Signal()
        with m.If(self.issued.valid):
            m.d.comb += [issue.eq(1), op.eq(_OP_ISSUED), op_expert.eq(self.issued.expert),
                         op_tile.eq(self.issued.tile)]
        with m.Elif(take_cmd):
            m.d.comb += [issue.eq(1), op_expert.eq(cmd.expert), op_tile.eq(cmd.tile), op_count.eq(cmd.count)]
            with m.Switch(cmd.op):
                for c, o in _CMD_TO_OP.items():
                    with m.Case(c):
                        m.d.comb += op.eq(o)
        with m.Elif(take_arr):
            m.d.comb += [issue.eq(1), op.eq(_OP_ARRIVE), op_expert.eq(self.arrival.payload.expert),
                         op_tile.eq(self.arrival.payload.tile)]

        exp_last = Signal(COUNT_BITS)
        m.d.comb += exp_last.eq((op_count - 1) >> g.lb)
        rd_tile = Signal(TILE_BITS)
        m.d.comb += rd_tile.eq(Mux(op == _OP_EXPECT, exp_last[:TILE_BITS], op_tile))
        bad_expert = op_expert >= g.E
        bad_tile = op_tile >= g.T
        range_err = Signal()
        m.d.comb += range_err.eq(Mux(op == _OP_EXPECT, bad_expert | (op_count > g.T * g.L),
                                     Mux(op == _OP_CLEAR, bad_expert, bad_expert | bad_tile)))
        m.d.comb += [
            self.tab_addr.eq(g.index(op_expert, rd_tile)),
            self.ex_addr.eq(g.ex_index(op_expert)),
        ]
        m.d.sync += [
            s1.valid.eq(issue),
            s1.op.eq(op),
            s1.expert.eq(op_expert),
            s1.tile.eq(rd_tile),
            s1.count.eq(op_count),
            s1.idx.eq(g.index(op_expert, rd_tile)),
            s1.err.eq(range_err),
        ]
        return m


class _TableUpdate(wiring.Component):
    """Stage 1: the read-modify-write of the operation on ``op``.

    ``entry``/``total`` are the table's and the totals' read data for ``op`` (synchronous reads addressed
    by stage 0); a write made in the previous cycle to the same entry (or expert) overrides them (the
    read did not see it), unless ``forward`` is off (a formal mutant). Writes go out on ``tab_w``/``ex_w``;
    a tile made ready is pushed on ``ready_push``, a ``DONE`` tile on ``release_push`` (stage 0's room
    check guarantees space, so their ``ready`` is not looked at). Each refused operation counts once in
    ``err_count`` and writes nothing.

    ``te`` (the entry as seen), ``err`` and the forwarding register ``tw_*`` are named in ``__init__`` for
    formal harnesses."""

    def __init__(self, g: _Geometry, *, forward: bool = True):
        self.g = g
        self.forward = forward
        super().__init__({
            "op": In(g.op),
            "entry": In(g.entry),
            "total": In(_Total),
            "tab_w": In(memory.WritePort.Signature(addr_width=g.idx_w, shape=g.entry)),
            "ex_w": In(memory.WritePort.Signature(addr_width=g.ex_aw, shape=_Total)),
            "ready_push": Out(stream.Signature(TileReady)),
            "release_push": Out(stream.Signature(TileReady)),
            "err_count": Out(data.ArrayLayout(32, len(TrackerError))),
        })
        self.te = Signal(g.entry)
        self.err = Signal()
        self.tw_valid = Signal()
        self.tw_idx = Signal(g.idx_w)
        self.tw_data = Signal(g.entry)

    def elaborate(self, platform):
        m = Module()
        g, s1, te = self.g, self.op, self.te
        ew_valid = Signal()
        ew_idx = Signal(EXPERT_BITS)
        ew_data = Signal(_Total)
        ev = Signal(_Total)
        m.d.comb += [
            te.eq(Mux(self.forward & self.tw_valid & (self.tw_idx == s1.idx), self.tw_data, self.entry)),
            ev.eq(Mux(ew_valid & (ew_idx == s1.expert), ew_data, self.total)),
        ]
        t_we, t_wd = self.tab_w.en, self.tab_w.data
        e_we, e_wd = self.ex_w.en, self.ex_w.data
        push_ready, push_rel = self.ready_push.valid, self.release_push.valid
        err = self.err
        err_code = Signal(range(len(TrackerError)))

        def fail(code):
            return [err.eq(1), err_code.eq(code)]

        total = ev.total
        last = Signal(COUNT_BITS)
        rem = Signal(COUNT_BITS)
        m.d.comb += [last.eq((total - 1) >> g.lb), rem.eq(total - (last << g.lb))]
        state, count = te.state, te.count
        is_last = ev.known & (total != 0) & (s1.tile == last)
        expected = Signal(COUNT_BITS)
        m.d.comb += expected.eq(Mux(is_last, rem, g.L))
        new_count = Signal(g.lb + 2)
        m.d.comb += new_count.eq(count + 1)
        # EXPECT's own view of the last tile (from the command's count, not the stored total).
        x_last = Signal(COUNT_BITS)
        x_rem = Signal(COUNT_BITS)
        m.d.comb += [x_last.eq((s1.count - 1) >> g.lb), x_rem.eq(s1.count - (x_last << g.lb))]

        with m.If(s1.valid):
            with m.If(s1.op == _OP_ARRIVE):
                with m.If(s1.err | (ev.known & ((total == 0) | (s1.tile > last)))):
                    m.d.comb += fail(TrackerError.UNKNOWN_TILE)
                with m.Elif(((state != TileState.FREE) & (state != TileState.FILLING)) |
                            (count >= expected)):
                    m.d.comb += fail(TrackerError.OVERFLOW)
                with m.Else():
                    done = new_count == expected
                    m.d.comb += [
                        t_we.eq(1),
                        t_wd.state.eq(Mux(done, TileState.READY, TileState.FILLING)),
                        t_wd.count.eq(new_count),
                        push_ready.eq(done),
                    ]
            with m.Elif(s1.op == _OP_EXPECT):
                with m.If(s1.err):
                    m.d.comb += fail(TrackerError.UNKNOWN_TILE)
                with m.Elif(ev.known):
                    with m.If(total != s1.count):
                        m.d.comb += fail(TrackerError.BAD_EXPECT)
                with m.Elif(s1.count == 0):
                    m.d.comb += [e_we.eq(1), e_wd.known.eq(1), e_wd.total.eq(0)]
                with m.Elif(count > x_rem):
                    m.d.comb += fail(TrackerError.OVERFLOW)
                with m.Else():
                    m.d.comb += [e_we.eq(1), e_wd.known.eq(1), e_wd.total.eq(s1.count)]
                    with m.If((count == x_rem) & (state == TileState.FILLING)):
                        m.d.comb += [t_we.eq(1), t_wd.state.eq(TileState.READY), t_wd.count.eq(count),
                                     push_ready.eq(1)]
            with m.Elif(s1.op == _OP_DONE):
                with m.If(s1.err):
                    m.d.comb += fail(TrackerError.UNKNOWN_TILE)
                with m.Elif(state == TileState.READY):
                    m.d.comb += [t_we.eq(1), t_wd.state.eq(TileState.GEMM2_DONE), t_wd.count.eq(count),
                                 push_rel.eq(1)]
                with m.Elif((state == TileState.GEMM2_DONE) | (state == TileState.COMBINE_ISSUED)):
                    m.d.comb += fail(TrackerError.DOUBLE_DONE)
                with m.Else():
                    m.d.comb += fail(TrackerError.NOT_READY)
            with m.Elif(s1.op == _OP_ISSUED):
                with m.If(state == TileState.GEMM2_DONE):
                    m.d.comb += [t_we.eq(1), t_wd.state.eq(TileState.COMBINE_ISSUED), t_wd.count.eq(count)]
            with m.Elif(s1.op == _OP_RETIRE):
                with m.If(s1.err):
                    m.d.comb += fail(TrackerError.UNKNOWN_TILE)
                with m.Elif(state == TileState.COMBINE_ISSUED):
                    m.d.comb += [t_we.eq(1), t_wd.state.eq(TileState.FREE), t_wd.count.eq(0)]
                with m.Else():
                    m.d.comb += fail(TrackerError.BAD_RETIRE)
            with m.Elif(s1.op == _OP_CLEAR):
                with m.If(s1.err):
                    m.d.comb += fail(TrackerError.UNKNOWN_TILE)
                with m.Else():
                    m.d.comb += [e_we.eq(1), e_wd.known.eq(0), e_wd.total.eq(0)]

        m.d.comb += [self.tab_w.addr.eq(s1.idx), self.ex_w.addr.eq(g.ex_index(s1.expert))]
        m.d.sync += [
            self.tw_valid.eq(t_we), self.tw_idx.eq(s1.idx), self.tw_data.eq(t_wd),
            ew_valid.eq(e_we), ew_idx.eq(s1.expert), ew_data.eq(e_wd),
        ]
        m.submodules.errors = errors = EventCounters(len(TrackerError))
        m.d.comb += [errors.strobe[code].eq(err & (err_code == code)) for code in TrackerError]
        m.d.comb += self.err_count.eq(errors.count)
        # The tile pushed to either queue: its count is the one written, else the one read.
        for push in (self.ready_push, self.release_push):
            m.d.comb += [push.payload.expert.eq(s1.expert), push.payload.tile.eq(s1.tile),
                         push.payload.count.eq(Mux(t_we, t_wd.count, count))]
        return m


class _ReleaseWalker(wiring.Component):
    """Walks the head ``jobs`` tile's slots ``0 .. count-1`` onto ``release``, one token per cycle, ``last``
    on the final one, and takes the job then. The cycle after a tile's last token leaves, ``issued`` names
    it for one cycle (the table marks it ``COMBINE_ISSUED``)."""

    def __init__(self):
        super().__init__({
            "jobs": In(stream.Signature(TileReady)),
            "release": Out(stream.Signature(TokenRelease)),
            "issued": Out(_Issued),
        })

    def elaborate(self, platform):
        m = Module()
        job = self.jobs.payload
        slot = Signal(COUNT_BITS)
        final = Signal()
        m.d.comb += [
            final.eq(slot == job.count - 1),
            self.release.valid.eq(self.jobs.valid),
            self.release.payload.expert.eq(job.expert),
            self.release.payload.tile.eq(job.tile),
            self.release.payload.slot.eq(slot),
            self.release.payload.last.eq(final),
        ]
        sent = self.release.valid & self.release.ready
        m.d.comb += self.jobs.ready.eq(sent & final)
        m.d.sync += self.issued.valid.eq(sent & final)
        with m.If(sent):
            m.d.sync += slot.eq(Mux(final, 0, slot + 1))
        with m.If(sent & final):
            m.d.sync += [self.issued.expert.eq(job.expert), self.issued.tile.eq(job.tile)]
        return m


class TokenTracker(wiring.Component):
    """Tile Status Table: ``experts`` local experts x ``tiles`` tiles of ``tile_size`` tokens.

    Parameters: ``experts`` (1..256, power of two), ``tiles`` (tiles per expert, 1..256, power of two;
    ``experts * tiles`` >= 2 is the table depth), ``tile_size`` (1..16384 tokens, power of two, default
    128), ``ready_depth`` and ``release_depth`` (output queue entries, 2..64).

    Ports: ``arrival``, ``cmd`` (streams in), ``ready``, ``release`` (streams out), ``err_count``
    (32-bit counter per :class:`TrackerError`). Latency: arrival accepted at t -> ``ready`` valid at t+2;
    ``DONE`` accepted at t -> first ``release`` at t+2. Throughput: one table operation per cycle.

    Structure: ``select`` (stage 0, :class:`_OpSelect`) -> the table and totals memories ->
    ``update`` (stage 1, :class:`_TableUpdate`) -> the ``readyq`` and ``relq`` FIFOs; ``relq`` feeds
    ``walker`` (:class:`_ReleaseWalker`), which reports each tile's last release back to ``select``.
    """

    _forward = True     # the read-modify-write forwarding (False only in a formal mutant)

    def __init__(self, *, experts: int = 32, tiles: int = 16, tile_size: int = 128, ready_depth: int = 4,
                 release_depth: int = 4):
        g = _Geometry(experts, tiles, tile_size, ready_depth, release_depth)
        if experts * tiles < 2:
            raise ValueError(f"the table needs at least 2 entries (experts * tiles), got {experts * tiles}")
        for name, v in (("ready_depth", ready_depth), ("release_depth", release_depth)):
            if not isinstance(v, int) or not 2 <= v <= 64:
                raise ValueError(f"{name} must be an integer in 2..64, got {v!r}")
        self.g = g
        self.eb, self.tb, self.lb = g.eb, g.tb, g.lb
        self.experts = experts
        self.tiles = tiles
        self.tile_size = tile_size
        self.ready_depth = ready_depth
        self.release_depth = release_depth
        self.depth = g.depth
        super().__init__({
            "arrival": In(stream.Signature(TileArrival)),
            "cmd": In(stream.Signature(TileCommand)),
            "ready": Out(stream.Signature(TileReady)),
            "release": Out(stream.Signature(TokenRelease)),
            "err_count": Out(data.ArrayLayout(32, len(TrackerError))),
        })

    def elaborate(self, platform):
        m = Module()
        g = self.g
        # Storage: synchronous reads (data the cycle after the address), so stage 0 addresses and stage 1
        # reads.
        m.submodules.tab = tab = memory.Memory(shape=g.entry, depth=g.depth, init=[])
        m.submodules.ex = ex = memory.Memory(shape=_Total, depth=max(2, g.E), init=[])
        tab_r = tab.read_port()
        ex_r = ex.read_port()
        item_w = data.Layout.cast(TileReady).size
        m.submodules.readyq = readyq = fifo.SyncFIFO(width=item_w, depth=g.ready_depth)
        m.submodules.relq = relq = fifo.SyncFIFO(width=item_w, depth=g.release_depth)

        m.submodules.select = select = _OpSelect(g)
        m.submodules.update = update = _TableUpdate(g, forward=self._forward)
        m.submodules.walker = walker = _ReleaseWalker()

        wiring.connect(m, wiring.flipped(self.arrival), select.arrival)
        wiring.connect(m, wiring.flipped(self.cmd), select.cmd)
        m.d.comb += [
            select.issued.eq(walker.issued),
            select.ready_level.eq(readyq.level),
            select.release_level.eq(relq.level),
            tab_r.addr.eq(select.tab_addr),
            ex_r.addr.eq(select.ex_addr),
            update.entry.eq(tab_r.data),
            update.total.eq(ex_r.data),
        ]
        m.d.comb += update.op.eq(select.op)
        wiring.connect(m, update.tab_w, tab.write_port())
        wiring.connect(m, update.ex_w, ex.write_port())
        wiring.connect(m, update.ready_push, readyq.w_stream)
        wiring.connect(m, update.release_push, relq.w_stream)
        wiring.connect(m, readyq.r_stream, wiring.flipped(self.ready))
        wiring.connect(m, relq.r_stream, walker.jobs)
        wiring.connect(m, walker.release, wiring.flipped(self.release))
        m.d.comb += self.err_count.eq(update.err_count)

        # The table's read-modify-write stage, for formal harnesses (verif/formal/token_tracker.py).
        op = select.op
        self.state = SimpleNamespace(s1_valid=op.valid, s1_op=op.op, s1_idx=op.idx, te=update.te,
                                     t_we=update.tab_w.en, t_wd=update.tab_w.data, err=update.err,
                                     tw_valid=update.tw_valid, tw_idx=update.tw_idx, tw_data=update.tw_data)
        return m
