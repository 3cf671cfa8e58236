"""Formal harness of the Tile Status Table (:class:`~hw.gpu_nic.token_tracker.TokenTracker`): the real
block, every input free (any arrival, any command with any count, in any cycle, stalls on ``ready`` and
``release``), one table entry (expert, tile) chosen by the solver (``AnyConst``), read straight from the
table memory through an extra asynchronous read port the harness adds (the block's own ports are
untouched), and a ghost count of the arrivals for it.

Parameters: 2 experts x 2 tiles of 4 tokens (3-bit counts, so a tile fills over 4 back-to-back arrivals and
passes through ``FILLING`` twice), 2-entry ready and release queues (so both stall). The table logic is the
same for every entry and indexes by ``{expert, tile}``; larger tables only widen the index, larger tiles
the count.

Properties (each with a ``Cover`` that shows it is not vacuous):

* **no lost increment under back-to-back arrivals**: the chosen entry's count equals the arrivals for it
  that the port accepted since it was last freed, less those the table refused (``UNKNOWN_TILE``,
  ``OVERFLOW``); and the read-modify-write stage always sees the entry's current value (the forwarding
  of the previous cycle's write). Covered by the tile filling to ``tile_size`` from back-to-back arrivals.
* **no state skips**: every write of the chosen entry keeps its state or moves it to the next one --
  ``FREE -> FILLING -> READY -> GEMM2_DONE -> COMBINE_ISSUED -> FREE``, where ``FREE -> READY`` is allowed
  only for a one-token tile (its first arrival is its last, count 1) -- and the state is always one of
  the five, ``FREE`` with count 0 and the others with at least one token. Covered by the chosen tile
  going all the way round back to ``FREE``.

The environment contract is empty (bad input is counted, not assumed away), so no ``Assume``.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.hdl._ast import AnyConst     # public as amaranth.hdl.AnyConst in 0.4; still here in 0.5
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.gpu_nic.token_tracker import TileArrival, TileCommand, TileState, TokenTracker, _OP_ARRIVE

from .runner import Properties

__all__ = ["TokenTrackerHarness"]


class TokenTrackerHarness(wiring.Component):
    """Ports (free inputs of the proof): ``arrival_valid``/``arrival``, ``cmd_valid``/``cmd``,
    ``ready_ready``, ``release_ready``. ``tracker`` may be replaced (a mutant); it must expose ``state``
    (its read-modify-write stage) when elaborated."""

    #: The covers on yices (the same shortest covers as z3, in less CPU); the proof on z3.
    formal_options = {"cover_engine": "smtbmc yices"}

    def __init__(self, *, experts: int = 2, tiles: int = 2, tile_size: int = 4, depth: int = 2, tracker=None):
        self.tracker = tracker if tracker is not None else TokenTracker(
            experts=experts, tiles=tiles, tile_size=tile_size, ready_depth=depth, release_depth=depth)
        self.props = Properties()
        super().__init__({"arrival_valid": In(1), "arrival": In(TileArrival), "cmd_valid": In(1),
                          "cmd": In(TileCommand), "ready_ready": In(1), "release_ready": In(1),
                          "ready_valid": Out(1), "release_valid": Out(1)})

    def elaborate(self, platform):
        m = Module()
        t = self.tracker
        t._MustUse__silence = True      # elaborated below, not through m.submodules
        m.submodules.tracker = tm = t.elaborate(platform)     # here, so that its ``state`` can be named
        st = t.state
        m.d.comb += [t.arrival.valid.eq(self.arrival_valid), t.arrival.payload.eq(self.arrival),
                     t.cmd.valid.eq(self.cmd_valid), t.cmd.payload.eq(self.cmd),
                     t.ready.ready.eq(self.ready_ready), t.release.ready.eq(self.release_ready),
                     self.ready_valid.eq(t.ready.valid), self.release_valid.eq(t.release.valid)]
        eb, tb, L = t.eb, t.tb, t.tile_size
        entry = data.StructLayout({"state": TileState, "count": t.lb + 1})
        ce, ct = Signal(max(1, eb)), Signal(max(1, tb))
        m.d.comb += [ce.eq(AnyConst(max(1, eb)) if eb else 0), ct.eq(AnyConst(max(1, tb)) if tb else 0)]
        idx = Signal(len(st.s1_idx))
        parts = ([ct] if tb else []) + ([ce] if eb else [])
        m.d.comb += idx.eq(Cat(*parts))
        peek = tm.submodules.tab.read_port(domain="comb")     # the chosen entry as stored now
        mirror = Signal(entry)
        m.d.comb += [peek.addr.eq(idx), mirror.eq(peek.data)]
        wr = st.t_we & (st.s1_idx == idx)

        # Ghost: arrivals for the chosen entry accepted at the port, minus those the table refused.
        a = self.arrival
        mine = (a.expert == ce) & (a.tile == ct)
        took = Signal()                         # an arrival for the chosen entry was accepted last cycle
        m.d.sync += took.eq(t.arrival.valid & t.arrival.ready & mine)
        at_s1 = st.s1_valid & (st.s1_op == _OP_ARRIVE) & (st.s1_idx == idx)
        ghost = Signal(t.lb + 3, reset_less=True)     # rst does not clear the table either
        with m.If(wr & (st.t_wd.state == TileState.FREE)):
            m.d.sync += ghost.eq(0)
        with m.Elif(took & ~st.err):
            m.d.sync += ghost.eq(ghost + 1)
        # The read-modify-write stage sees the stored value (forwarded if written last cycle).
        sees = ~(st.s1_valid & (st.s1_idx == idx)) | (st.te.as_value() == mirror.as_value())
        fwd_ok = ~(st.tw_valid & (st.tw_idx == idx)) | (st.tw_data.as_value() == mirror.as_value())
        run = Signal(range(L + 1))              # back-to-back accepted arrivals for the chosen entry
        m.d.sync += run.eq(Mux(took, run + 1, 0))
        p = self.props
        p.check(m, "no lost increment under back-to-back arrivals",
                (mirror.count == ghost) & sees & fwd_ok & (~took | at_s1),
                (mirror.state == TileState.READY) & (mirror.count == L) & (run == L))

        s0, s1 = mirror.state, st.t_wd.state
        nxt = Mux(s0 == TileState.COMBINE_ISSUED, TileState.FREE, (s0.as_value() + 1)[:3])
        one_token = (s0 == TileState.FREE) & (s1 == TileState.READY) & (st.t_wd.count == 1)
        step_ok = ~wr | (s1 == s0) | (s1.as_value() == nxt) | one_token
        # What each state implies of the count (an induction strengthening): FREE holds none, the others
        # at least one token.
        shape_ok = Mux(s0 == TileState.FREE, mirror.count == 0, mirror.count != 0)
        went_round = Signal()
        with m.If(wr & (s0 == TileState.COMBINE_ISSUED) & (s1 == TileState.FREE)):
            m.d.sync += went_round.eq(1)
        p.check(m, "no state skips (FREE -> FILLING -> READY -> GEMM2_DONE -> COMBINE_ISSUED -> FREE)",
                step_ok & (s0.as_value() <= TileState.COMBINE_ISSUED.value) & shape_ok, went_round)
        return m
