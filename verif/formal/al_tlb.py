"""Formal harness of the AL-TLB (:class:`~hw.switch.al_tlb.AlTlb`): the real block with its CAM; the
translation requests, the backing table (``mem.req.ready``, any response with any tag at any time,
bogus and late ones included) and the configuration writes are free inputs; ghosts: the CAM lookup key
of the last two cycles, and every MSHR's age.

Parameters: 2 ports, 1 group, 16 CAM entries, 2 MSHRs, a 4-entry response FIFO and the shortest timeout
the block allows (16 cycles), so that the cover of a timed-out miss is reached in 20 cycles. Keys keep their full
width (18-bit index). The MSHR logic is the same per MSHR; more MSHRs lengthen the replay queue (the
bound grows by one cycle per MSHR, see below), a longer timeout shifts the bound by the same amount.

Environment contract: ``tr.resp.ready`` is always high (tied, so no ``Assume``) -- the translator side
always takes answers (the egress translator's ``tr.resp.ready`` is tied high). Nothing else is assumed:
backing responses may never come or come for any tag, configuration writes may come in every cycle (they
hold off fills).

Two checks (two ``dysharp formal`` blocks, so that the fast one is not held up by the long one):

``check="cam"`` (``al_tlb``), with a ``Cover`` that shows it is not vacuous:

* **never two valid entries for one key**: the AL-TLB's CAM is a :class:`~hw.switch.cam.Cam`, and the
  CAM harness proves this for every command sequence, so for the AL-TLB's too (proving it again in this
  harness does not finish here: z3 stalls on the induction step over the 16 x (20 + 48)-bit contents);
* **a hit returns the CAM's value for its own key**: a request answered as a hit is answered with the
  value and hit of the CAM lookup made for that very request (its key, two cycles earlier), with code
  ``NONE``, and whatever the CAM inserts is the backing response's address. The CAM harness
  (``dysharp formal cam``) proves for *every* command sequence that a CAM hit carries the last value
  inserted for its key, so together: **a hit returns the last value filled for that key** (again the
  whole chain in one harness does not finish). Covered by a hit after a fill.

``check="mshr"`` (``al_tlb_mshr``):

* **every MSHR is answered within T = timeout + mshrs cycles** (fill, error or timeout): an MSHR is busy
  for at most ``T + 1`` consecutive cycles (its ghost age, 0 in the first busy cycle, never exceeds
  ``T = 16 + 2 = 18`` while busy): a read times out ``timeout + 1`` cycles after it is queued, the
  coalesced misses waiting on it are answered in the same cycle, and the answered MSHRs replay one per
  cycle, lowest number first. Strengthened for k-induction with the invariants it rests on (a primary's
  timer equals its age; a coalesced miss waits on an older primary of its key; waiting primaries have
  distinct ages, so one timeout per cycle suffices; an answered MSHR's age plus the answered MSHRs ahead
  of it is at most ``T``; the response FIFO holds at most one answer). Covered by an MSHR answered by
  its timeout. The bound is stated for 1-2 MSHRs: with 3 or more, an MSHR answered in the same cycle
  as a fill may be re-allocated already answered (a miss joining that fill) and replay ahead of a
  higher-numbered one again; whether that can repeat is not proven here.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.switch.al_tlb import AlTlb, TlbConfig
from hw.switch.backing_if import BackingResponse
from hw.switch.cam import CamOp
from hw.switch.translate_if import TranslateRequest

from .runner import Properties

__all__ = ["AlTlbHarness"]


class AlTlbHarness(wiring.Component):
    """Ports (free inputs of the proof): the request stream in, the backing table's ready and responses,
    the configuration stream. ``check``: ``"cam"`` or ``"mshr"`` (the module docstring); ``bound``
    overrides the MSHR answer bound (a tighter one must fail); ``tlb`` may be replaced (a mutant); it
    must expose ``state`` once elaborated."""

    CHECKS = ("cam", "mshr")

    def __init__(self, *, check: str = "cam", ports: int = 2, groups: int = 1, entries: int = 16, mshrs: int = 2,
                 resp_depth: int = 4, timeout: int = 16, bound: int | None = None, tlb=None):
        if check not in self.CHECKS:
            raise ValueError(f"check must be one of {self.CHECKS}, got {check!r}")
        self.check = check
        if check == "cam":      # the covers on yices (the same shortest covers as z3, in less CPU)
            self.formal_options = {"cover_engine": "smtbmc yices"}
        self.tlb = tlb if tlb is not None else AlTlb(ports=ports, groups=groups, entries=entries, mshrs=mshrs,
                                                    resp_depth=resp_depth, timeout=timeout)
        self.bound = self.tlb.timeout + self.tlb.mshrs if bound is None else bound   # a smaller one must fail
        self.props = Properties()
        super().__init__({"req_valid": In(1), "req": In(TranslateRequest), "mem_req_ready": In(1),
                          "mem_resp_valid": In(1), "mem_resp": In(BackingResponse),
                          "cfg_valid": In(1), "cfg": In(TlbConfig)})

    def elaborate(self, platform):
        m = Module()
        t = self.tlb
        t._MustUse__silence = True      # elaborated here (so that its ``state`` can be named)
        m.submodules.tlb = tm = t.elaborate(platform)
        self.out_level = tm.submodules.out_fifo.level
        st = t.state
        cam = st.cam
        m.d.comb += [t.tr.req.valid.eq(self.req_valid), t.tr.req.payload.eq(self.req),
                     t.mem.req.ready.eq(self.mem_req_ready), t.mem.resp.valid.eq(self.mem_resp_valid),
                     t.mem.resp.payload.eq(self.mem_resp), t.cfg.valid.eq(self.cfg_valid),
                     t.cfg.payload.eq(self.cfg)]
        m.d.comb += t.tr.resp.ready.eq(1)           # the contract: the translator always takes answers
        p = self.props
        kw = cam.key_width

        if self.check == "mshr":
            return self._mshr(m, st)
        # A hit's answer is the CAM's answer to this request's own lookup (the CAM harness proves for any
        # command sequence that a CAM hit carries the last value inserted for its key; the AL-TLB inserts a
        # fill's address, so together: a hit returns the last value filled for that key).
        v1, k1, v2, k2 = Signal(), Signal(kw), Signal(), Signal(kw)
        m.d.sync += [v1.eq(cam.lookup_valid), k1.eq(cam.lookup_key), v2.eq(v1), k2.eq(k1)]
        out = st.out
        hit_ok = ~st.hit | (v2 & (k2 == st.key) & cam.result_hit & (out.addr == cam.result_value) &
                            (out.code.as_value() == 0))
        insert = cam.write_valid & (cam.write_op == CamOp.INSERT)
        fills_resp = ~insert | (cam.write_value == t.mem.resp.payload.addr)   # the CAM stores what was filled
        filled_before = Signal()              # a fill (CAM insert) happened earlier
        with m.If(insert):
            m.d.sync += filled_before.eq(1)
        p.check(m, "a hit returns the CAM's value for its own key (with the CAM proof: the last value filled)",
                hit_ok & fills_resp, st.hit & filled_before)
        return m

    def _mshr(self, m, st):
        t, p = self.tlb, self.props
        N, TO = t.mshrs, t.timeout
        ages = [Signal(range(self.bound + 2), name=f"ghost_age_{j}") for j in range(N)]
        for j, a in enumerate(ages):
            m.d.sync += a.eq(Mux(st.busy[j], Mux(a > self.bound, a, a + 1), 0))
        busy, filled, primary, mkey, mage = st.busy, st.filled, st.primary, st.mkey, st.mage
        waiting = [busy[j] & ~filled[j] for j in range(N)]
        inv = []
        for j in range(N):
            # A read's timer is the MSHR's age (both start at 0 in the first busy cycle), so it expires in time.
            inv.append(~(waiting[j] & primary[j]) | ((mage[j] == ages[j]) & (ages[j] <= TO)))
            # A coalesced miss waits on an older primary of the same key (answered together with it).
            inv.append(~(waiting[j] & ~primary[j]) | Cat(waiting[k] & primary[k] & (mkey[k] == mkey[j]) &
                                                           (ages[k] > ages[j]) for k in range(N) if k != j).any())
            # An answered MSHR replays after the answered MSHRs ahead of it (lower numbered), one per cycle.
            ahead = sum((busy[k] & filled[k] for k in range(j)), Const(0, range(N + 1)))
            inv.append(~(busy[j] & filled[j]) | (ages[j] + ahead <= self.bound))
            for k in range(j + 1, N):   # primaries start in distinct cycles: one timeout per cycle suffices
                inv.append(~(waiting[j] & primary[j] & waiting[k] & primary[k]) | (ages[j] != ages[k]))
        # The response FIFO never holds back a replay when tr.resp is always ready.
        inv.append(self.out_level <= 1)
        answered_late = Cat(st.take_replay & st.replay_oh[j] & (ages[j] >= TO) for j in range(N))
        p.check(m, f"every MSHR is answered within timeout + mshrs = {self.bound} cycles",
                Cat(~busy[j] | (ages[j] <= self.bound) for j in range(N)).all() & Cat(*inv).all(),
                answered_late.any())
        return m
