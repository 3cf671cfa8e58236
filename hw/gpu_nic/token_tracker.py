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

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["TileArrival", "TileCmdOp", "TileCommand", "TileReady", "TokenRelease", "TileState",
           "TrackerError", "TokenTracker", "COUNT_BITS"]

COUNT_BITS = 16     # width of token counts on the interfaces (totals up to 65535 tokens per expert)


class TileArrival(data.Struct):
    """One token has arrived for ``tile`` of local expert ``expert``."""
    expert: 8
    tile: 8


class TileCmdOp(enum.Enum, shape=2):
    EXPECT = 0   #: ``count`` = the expert's total tokens this layer (the count exchange result)
    DONE = 1     #: GEMM-2 of (``expert``, ``tile``) finished: release its tokens for combine
    RETIRE = 2   #: the tile's combine completed: the entry returns to ``FREE``
    CLEAR = 3    #: forget the expert's total (start of the next layer)


class TileCommand(data.Struct):
    op: TileCmdOp
    expert: 8
    tile: 8
    count: COUNT_BITS


class TileReady(data.Struct):
    """A tile ready for GEMM-1, with its token count (``tile_size`` except a partial last tile)."""
    expert: 8
    tile: 8
    count: COUNT_BITS


class TokenRelease(data.Struct):
    """Token ``slot`` of (``expert``, ``tile``) may be combined; ``last`` marks the tile's final token."""
    expert: 8
    tile: 8
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
_CMD_TO_OP = {TileCmdOp.EXPECT: _OP_EXPECT, TileCmdOp.DONE: _OP_DONE, TileCmdOp.RETIRE: _OP_RETIRE,
              TileCmdOp.CLEAR: _OP_CLEAR}


def _log2_exact(value, name, lo, hi):
    if not isinstance(value, int) or not lo <= value <= hi or value & (value - 1):
        raise ValueError(f"{name} must be a power of two in {lo}..{hi}, got {value!r}")
    return value.bit_length() - 1


class TokenTracker(wiring.Component):
    """Tile Status Table: ``experts`` local experts x ``tiles`` tiles of ``tile_size`` tokens.

    Parameters: ``experts`` (1..256, power of two), ``tiles`` (tiles per expert, 1..256, power of two;
    ``experts * tiles`` >= 2 is the table depth), ``tile_size`` (1..16384 tokens, power of two, default
    128), ``ready_depth`` and ``release_depth`` (output queue entries, 2..64).

    Ports: ``arrival``, ``cmd`` (streams in), ``ready``, ``release`` (streams out), ``err_count``
    (32-bit counter per :class:`TrackerError`). Latency: arrival accepted at t -> ``ready`` valid at t+2;
    ``DONE`` accepted at t -> first ``release`` at t+2. Throughput: one table operation per cycle.
    """

    _forward = True     # the read-modify-write forwarding (False only in a formal mutant)

    def __init__(self, *, experts: int = 32, tiles: int = 16, tile_size: int = 128, ready_depth: int = 4,
                 release_depth: int = 4):
        self.eb = _log2_exact(experts, "experts", 1, 256)
        self.tb = _log2_exact(tiles, "tiles", 1, 256)
        self.lb = _log2_exact(tile_size, "tile_size", 1, 16384)
        if experts * tiles < 2:
            raise ValueError(f"the table needs at least 2 entries (experts * tiles), got {experts * tiles}")
        for name, v in (("ready_depth", ready_depth), ("release_depth", release_depth)):
            if not isinstance(v, int) or not 2 <= v <= 64:
                raise ValueError(f"{name} must be an integer in 2..64, got {v!r}")
        self.experts = experts
        self.tiles = tiles
        self.tile_size = tile_size
        self.ready_depth = ready_depth
        self.release_depth = release_depth
        self.depth = experts * tiles
        super().__init__({
            "arrival": In(stream.Signature(TileArrival)),
            "cmd": In(stream.Signature(TileCommand)),
            "ready": Out(stream.Signature(TileReady)),
            "release": Out(stream.Signature(TokenRelease)),
            "err_count": Out(data.ArrayLayout(32, len(TrackerError))),
        })

    def elaborate(self, platform):
        m = Module()
        E, T, L = self.experts, self.tiles, self.tile_size
        eb, tb, lb = self.eb, self.tb, self.lb
        cbits = lb + 1                               # a tile count, 0..tile_size
        entry = data.StructLayout({"state": TileState, "count": cbits})
        total_l = data.StructLayout({"known": 1, "total": COUNT_BITS})
        idx_w = eb + tb

        m.submodules.tab = tab = memory.Memory(shape=entry, depth=self.depth, init=[])
        m.submodules.ex = ex = memory.Memory(shape=total_l, depth=max(2, E), init=[])
        tab_r = tab.read_port()          # synchronous: data the cycle after the address
        tab_w = tab.write_port()
        ex_r = ex.read_port()
        ex_w = ex.write_port()

        m.submodules.readyq = readyq = fifo.SyncFIFO(width=data.Layout.cast(TileReady).size,
                                                     depth=self.ready_depth)
        m.submodules.relq = relq = fifo.SyncFIFO(width=data.Layout.cast(TileReady).size,
                                                 depth=self.release_depth)

        def index(expert, tile):
            parts = []
            if tb:
                parts.append(tile[:tb])
            if eb:
                parts.append(expert[:eb])
            return Cat(*parts)

        # ------------------------------------------------------------ stage 0: pick one operation
        s1_valid = Signal()
        iss_pending = Signal()           # a tile's last token was released last cycle
        iss_expert = Signal(8)
        iss_tile = Signal(8)
        # Room: an operation is taken only if the queue it may push to has space for it and for what the
        # operation now in stage 1 may push there (arrivals and EXPECT push ready tiles, DONE release jobs).
        s1_op = Signal(3)
        ready_room = Signal()
        rel_room = Signal()
        m.d.comb += [
            ready_room.eq((readyq.level + (s1_valid & ((s1_op == _OP_ARRIVE) | (s1_op == _OP_EXPECT))))
                          < self.ready_depth),
            rel_room.eq((relq.level + (s1_valid & (s1_op == _OP_DONE))) < self.release_depth),
        ]
        cmd_room = Signal()
        m.d.comb += cmd_room.eq(Mux(self.cmd.payload.op == TileCmdOp.EXPECT, ready_room,
                                    Mux(self.cmd.payload.op == TileCmdOp.DONE, rel_room, 1)))
        m.d.comb += [
            self.cmd.ready.eq(~iss_pending & cmd_room),
            self.arrival.ready.eq(~iss_pending & ~(self.cmd.valid & cmd_room) & ready_room),
        ]
        take_cmd = Signal()
        take_arr = Signal()
        m.d.comb += [
            take_cmd.eq(self.cmd.valid & self.cmd.ready),
            take_arr.eq(self.arrival.valid & self.arrival.ready),
        ]

        op = Signal(3)
        op_expert = Signal(8)
        op_tile = Signal(8)
        op_count = Signal(COUNT_BITS)
        issue = Signal()
        cmd = self.cmd.payload
        with m.If(iss_pending):
            m.d.comb += [issue.eq(1), op.eq(_OP_ISSUED), op_expert.eq(iss_expert), op_tile.eq(iss_tile)]
        with m.Elif(take_cmd):
            m.d.comb += [issue.eq(1), op_expert.eq(cmd.expert), op_tile.eq(cmd.tile), op_count.eq(cmd.count)]
            with m.Switch(cmd.op):
                for c, o in _CMD_TO_OP.items():
                    with m.Case(c):
                        m.d.comb += op.eq(o)
        with m.Elif(take_arr):
            m.d.comb += [issue.eq(1), op.eq(_OP_ARRIVE), op_expert.eq(self.arrival.payload.expert),
                         op_tile.eq(self.arrival.payload.tile)]

        # EXPECT looks at the expert's last tile, (count - 1) >> lb.
        exp_last = Signal(COUNT_BITS)
        m.d.comb += exp_last.eq((op_count - 1) >> lb)
        rd_tile = Signal(8)
        m.d.comb += rd_tile.eq(Mux(op == _OP_EXPECT, exp_last[:8], op_tile))
        bad_expert = op_expert >= E
        bad_tile = op_tile >= T
        range_err = Signal()
        m.d.comb += range_err.eq(Mux(op == _OP_EXPECT, bad_expert | (op_count > T * L),
                                     Mux(op == _OP_CLEAR, bad_expert, bad_expert | bad_tile)))
        m.d.comb += [
            tab_r.addr.eq(index(op_expert, rd_tile)),
            ex_r.addr.eq(op_expert[:max(1, eb)] if eb else 0),
        ]

        s1_expert = Signal(8)
        s1_tile = Signal(8)
        s1_count = Signal(COUNT_BITS)
        s1_idx = Signal(max(1, idx_w))
        s1_err = Signal()
        m.d.sync += [
            s1_valid.eq(issue),
            s1_op.eq(op),
            s1_expert.eq(op_expert),
            s1_tile.eq(rd_tile),
            s1_count.eq(op_count),
            s1_idx.eq(index(op_expert, rd_tile)),
            s1_err.eq(range_err),
        ]

        # ------------------------------------------------------------ stage 1: read-modify-write
        # Forwarding: the read in stage 0 does not see the write made in the same cycle by the operation
        # then in stage 1, so that write is kept for one cycle and overrides a matching read.
        tw_valid = Signal()
        tw_idx = Signal(max(1, idx_w))
        tw_data = Signal(entry)
        ew_valid = Signal()
        ew_idx = Signal(8)
        ew_data = Signal(total_l)
        te = Signal(entry)
        ev = Signal(total_l)
        m.d.comb += [
            te.eq(Mux(self._forward & tw_valid & (tw_idx == s1_idx), tw_data, tab_r.data)),
            ev.eq(Mux(ew_valid & (ew_idx == s1_expert), ew_data, ex_r.data)),
        ]

        t_we = Signal()
        t_wd = Signal(entry)
        e_we = Signal()
        e_wd = Signal(total_l)
        push_ready = Signal()
        push_rel = Signal()
        err = Signal()
        err_code = Signal(range(len(TrackerError)))

        def fail(code):
            return [err.eq(1), err_code.eq(code)]

        total = ev.total
        last = Signal(COUNT_BITS)
        rem = Signal(COUNT_BITS)
        m.d.comb += [
            last.eq((total - 1) >> lb),
            rem.eq(total - (last << lb)),
        ]
        state = te.state
        count = te.count
        is_last = ev.known & (total != 0) & (s1_tile == last)
        expected = Signal(COUNT_BITS)
        m.d.comb += expected.eq(Mux(is_last, rem, L))
        new_count = Signal(cbits + 1)
        m.d.comb += new_count.eq(count + 1)
        # EXPECT's own view of the last tile (from the command's count, not the stored total).
        x_last = Signal(COUNT_BITS)
        x_rem = Signal(COUNT_BITS)
        m.d.comb += [
            x_last.eq((s1_count - 1) >> lb),
            x_rem.eq(s1_count - (x_last << lb)),
        ]

        with m.If(s1_valid):
            with m.If(s1_op == _OP_ARRIVE):
                with m.If(s1_err | (ev.known & ((total == 0) | (s1_tile > last)))):
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
            with m.Elif(s1_op == _OP_EXPECT):
                with m.If(s1_err):
                    m.d.comb += fail(TrackerError.UNKNOWN_TILE)
                with m.Elif(ev.known):
                    with m.If(total != s1_count):
                        m.d.comb += fail(TrackerError.BAD_EXPECT)
                with m.Elif(s1_count == 0):
                    m.d.comb += [e_we.eq(1), e_wd.known.eq(1), e_wd.total.eq(0)]
                with m.Elif(count > x_rem):
                    m.d.comb += fail(TrackerError.OVERFLOW)
                with m.Else():
                    m.d.comb += [e_we.eq(1), e_wd.known.eq(1), e_wd.total.eq(s1_count)]
                    with m.If((count == x_rem) & (state == TileState.FILLING)):
                        m.d.comb += [t_we.eq(1), t_wd.state.eq(TileState.READY), t_wd.count.eq(count),
                                     push_ready.eq(1)]
            with m.Elif(s1_op == _OP_DONE):
                with m.If(s1_err):
                    m.d.comb += fail(TrackerError.UNKNOWN_TILE)
                with m.Elif(state == TileState.READY):
                    m.d.comb += [t_we.eq(1), t_wd.state.eq(TileState.GEMM2_DONE), t_wd.count.eq(count),
                                 push_rel.eq(1)]
                with m.Elif((state == TileState.GEMM2_DONE) | (state == TileState.COMBINE_ISSUED)):
                    m.d.comb += fail(TrackerError.DOUBLE_DONE)
                with m.Else():
                    m.d.comb += fail(TrackerError.NOT_READY)
            with m.Elif(s1_op == _OP_ISSUED):
                with m.If(state == TileState.GEMM2_DONE):
                    m.d.comb += [t_we.eq(1), t_wd.state.eq(TileState.COMBINE_ISSUED),
                                 t_wd.count.eq(count)]
            with m.Elif(s1_op == _OP_RETIRE):
                with m.If(s1_err):
                    m.d.comb += fail(TrackerError.UNKNOWN_TILE)
                with m.Elif(state == TileState.COMBINE_ISSUED):
                    m.d.comb += [t_we.eq(1), t_wd.state.eq(TileState.FREE), t_wd.count.eq(0)]
                with m.Else():
                    m.d.comb += fail(TrackerError.BAD_RETIRE)
            with m.Elif(s1_op == _OP_CLEAR):
                with m.If(s1_err):
                    m.d.comb += fail(TrackerError.UNKNOWN_TILE)
                with m.Else():
                    m.d.comb += [e_we.eq(1), e_wd.known.eq(0), e_wd.total.eq(0)]

        # The table's read-modify-write stage, for formal harnesses (verif/formal/token_tracker.py).
        self.state = SimpleNamespace(s1_valid=s1_valid, s1_op=s1_op, s1_idx=s1_idx, te=te, t_we=t_we, t_wd=t_wd,
                                     err=err, tw_valid=tw_valid, tw_idx=tw_idx, tw_data=tw_data)
        m.d.comb += [
            tab_w.addr.eq(s1_idx),
            tab_w.data.eq(t_wd),
            tab_w.en.eq(t_we),
            ex_w.addr.eq(s1_expert[:max(1, eb)] if eb else 0),
            ex_w.data.eq(e_wd),
            ex_w.en.eq(e_we),
        ]
        m.d.sync += [
            tw_valid.eq(t_we), tw_idx.eq(s1_idx), tw_data.eq(t_wd),
            ew_valid.eq(e_we), ew_idx.eq(s1_expert), ew_data.eq(e_wd),
        ]
        for code in TrackerError:
            with m.If(err & (err_code == code)):
                m.d.sync += self.err_count[code].eq(self.err_count[code] + 1)

        # ------------------------------------------------------------ output queues
        item = Signal(TileReady)
        m.d.comb += [
            item.expert.eq(s1_expert),
            item.tile.eq(s1_tile),
            item.count.eq(Mux(t_we, t_wd.count, count)),
            readyq.w_data.eq(item),
            readyq.w_en.eq(push_ready),
            relq.w_data.eq(item),
            relq.w_en.eq(push_rel),
        ]
        head = TileReady(readyq.r_data)
        m.d.comb += [
            self.ready.valid.eq(readyq.r_rdy),
            self.ready.payload.eq(head),
            readyq.r_en.eq(self.ready.ready),
        ]

        # Release engine: walks the head job's slots, one token per cycle.
        job = TileReady(relq.r_data)
        slot = Signal(COUNT_BITS)
        final = Signal()
        m.d.comb += [
            final.eq(slot == job.count - 1),
            self.release.valid.eq(relq.r_rdy),
            self.release.payload.expert.eq(job.expert),
            self.release.payload.tile.eq(job.tile),
            self.release.payload.slot.eq(slot),
            self.release.payload.last.eq(final),
        ]
        sent = self.release.valid & self.release.ready
        m.d.comb += relq.r_en.eq(sent & final)
        m.d.sync += iss_pending.eq(sent & final)
        with m.If(sent):
            m.d.sync += slot.eq(Mux(final, 0, slot + 1))
        with m.If(sent & final):
            m.d.sync += [iss_expert.eq(job.expert), iss_tile.eq(job.tile)]
        return m
