"""Formal harnesses of the reduction buffer (:class:`~hw.switch.reduction_buffer.ReductionBuffer`, this
docstring) and of the reduction engine (:class:`ReductionEngineHarness`: duplicates never complete early).

The REAL buffer is instantiated through :class:`SmallReductionBuffer`, which only lowers the parameter
floor (``entries >= 2``, ``timeout >= 4``; the product floor of 16 entries and 64 cycles exists for the
silicon, not for the logic): 2 or 3 entries, ``max_length`` 2, 128-bit flits, a timeout of 4 cycles. Every
mechanism is present at that size: entry choice, generations, the 2-row partial memory per entry with both
forwarding paths, the per-flit counts and touched bits, the timeout scanner and its hold-up, the completion
FIFO and the drain; 3 entries (not a power of two) also exercise the out-of-range entry index. Nothing in
the control logic depends on the number of entries or flits beyond index widths, so the properties
generalise to the product sizes (every property is proven by k-induction, see "Proof" below; the bound
of the liveness property is stated for these sizes, from the output queue's depth, ``entries`` and
``max_length``). One exception, found by this harness: at 2 entries the completion FIFO
(``SyncFIFOBuffered`` of depth ``entries``: an inner FIFO of ``entries - 1`` rows and an output register)
refuses a second event written in the cycle after the first, and that entry is never answered
(``tests/verif/formal/test_formal_reduction.py`` shows it); from 3 entries on it has room, as the buffer's docstring
says, and the product's floor is 16. So the liveness block (``reduction_buffer_live``) runs at 3 entries;
the safety properties run at 2 (a third entry makes each step several times dearer for the solver), where
a lost event only leaves an allocation unanswered, which none of them excludes. The buffer's ALU
sub-block is :class:`IntAddALU` (the real ALU's int32-add datapath, same ports, pipeline and operand
selection; ``alu=None`` builds the real one, at a far higher solver cost).

Free inputs: ``alloc`` (valid, ``src``, ``length``, ``expected``, ``etype``), ``grant.ready``,
``contrib`` (valid, ``rtag``, ``flit``, ``length``, ``etype``, ``abort``, ``code``), ``out.ready`` and
``pick`` (below): any traffic, interleaving and stalls. The harness drives the rest: ``alloc.tag`` = 1 for
the chosen allocation and 0 for every other (so the chosen one's answer is the one answer with tag 1), op
``ADD``, and the contributions' data = 1 in int32
lane 0, so a result's lane 0 *counts* the contributions reduced into it (the control logic never looks at
data, so this loses no generality on loss/duplication; the float path is the ALU's own business).

Assumptions (the buffer's documented contract with the engine, nothing more):

* an allocation asks ``1 <= length <= max_length`` flits and an int32 type (the data check above);
* an ``abort`` carries a nonzero error ``code`` (the engine's aborts always do);
* representatives of the free values, to keep the solver's work small without losing a behaviour: a
  contribution's flit index at most ``max_length`` and its length at most ``max_length + 1`` (every
  larger value is a mismatch like these), ``expected`` at most 3 (its rtag, generation included, is
  free);
* the chosen allocation (below) gets at most ``expected`` well-formed contributions per flit while it is
  in flight: each destination contributes each flit once, which the engine enforces per destination
  (its ``asked``/``answered`` masks); the buffer itself has no source field to tell duplicates apart,
  and without this assumption a contribution to a flit that is already final, while another flit of the
  entry is pending, is reduced into the result (``flit_limit=False`` shows it).

Ghost state: one allocation ``k`` is chosen by the solver: the one accepted in the first cycle the free
input ``pick`` is high (a ghost flag ``picked`` is set then, so the proof covers every allocation, the
first or the millionth). Its grant is the one whose sequence number modulo 4 is k's (allocations are
granted in order, at most two wait for their grant), and its entry and generation are those of that
grant's rtag. A reference model of k (per-flit contribution counts, how and when it ended) is built from
the ports alone. Nothing in it depends on how many allocations came before k, so its statements are not
confined to a bound: a contribution with k's rtag that arrives after the entry's generation wrapped
(``2**15`` reuses of the entry at 2 entries) would alias k's, which is the design's limit, not the
harness's.

Properties (each with a ``Cover``):

* **answered at most once, and only after its grant**;
* **a RED_RESP reduces exactly the expected contributions of every flit** (none lost, none counted twice,
  none taken after the entry ended or before it was allocated);
* **an error answer names its cause** (the abort's code or ``TYPE_MISMATCH``);
* **a timeout answers only an entry still in flight after ``timeout`` cycles**;
* **a contribution for a tag not in flight is counted stale** (before its allocation, after its end);
* **every allocation is answered** (bounded liveness: once the timeout must have fired,
  ``liveness_slack`` cycles of ``out.ready`` bring its answer out; by default 4 + (``entries`` - 1) *
  (1 + ``max_length``) + 1 = 11 at 3 entries: the output queue's 4 flits, every other entry's answer,
  then its header; a simulated trace needs all 11, ``test_liveness_bound_is_tight``);
* **answers are well-formed packets** (``RED_RESP`` with ``length`` result flits, ``ERROR`` header-only).

Proof. The six safety properties are proven by k-induction (block ``reduction_buffer``: 2 entries,
``invariant=True``, k = 12, yices), and so is the liveness one (``reduction_buffer_live``: 3 entries, k =
12; parts 1-5 and 7 below, the per-flit counts (6) are written for 2 entries). With ``invariant=True``
each property is stated together with an invariant (:meth:`ReductionBufferHarness._invariant`), true in
every reachable state:

1. *entries*: every active entry is busy; an entry in the allocator's first stage, or in its second in
   the cycle it is written, is busy and not active, and the one just written has its granted generation
   and a cleared progress row; an entry whose event is queued (the completion FIFO's inner slot and output
   register) or in the drain (``pre``, ``cur``) is busy and not active; these places hold distinct
   entries; every request (k's, the allocator's, each written entry's ``meta`` row) is one the harness's
   assumptions allow;
2. *the timer*: an active entry was allocated at most ``timeout + entries + 3`` cycles ago (the
   free-running timer less its ``start`` row, modulo the timer's width);
3. *the allocator and the ghost*: the allocations waiting for their grant (accepted less granted, modulo
   4) are the allocator's two stages; k, chosen but not yet granted, is in one of them with its request
   (tag 1 included); k's grant, offered and not yet taken, is the second stage's; before its grant the
   reference model has no contribution, no end and age 0;
4. *k's entry*: while it holds k (active, k's generation) its ``meta`` row holds k's request and the
   reference model's age is the entry's less one cycle; three cycles after k ended by the reference model
   it no longer holds k;
5. *the answer path*: the drain's ``meta`` read is its ``pre`` entry's row; ``cur`` before its header
   has issued no row, after it is a result with rows left; the output queue, from its read pointer, holds
   the rest of the packet on ``out`` and then whole packets (``RED_RESP`` headers of 1..``max_length``
   flits not marked last, ``ERROR`` headers marked last, payload flits marked last exactly at their
   packet's end), continued by ``pend`` and by ``cur``'s packet; the answers to k still to come (its entry
   active, its event queued or in ``pre``, ``cur`` before its header, the header in ``pend`` or in the
   queue) plus those already out are at most one, none before k's grant, and each one's error code is one
   the reference model explains (k's abort code or ``TYPE_MISMATCH`` as it ended, or ``TIMEOUT`` once the
   timeout may have fired); a tag-1 request in the allocator is k's, before its grant;
6. *the per-flit counts* (stated when "exact" is checked, :meth:`ReductionBufferHarness._counts`): the
   ALU's stage registers mirror the row tracker's shadows and every operation's lane-0 sum is its count;
   a touched row of an entry in use with no operation in flight holds sum = count >= 1; an entry's
   operations are never in flight while it is in the allocator, nor once its answer has reached the
   drain's later stages (the completion FIFO's output register, ``pre``, ``cur``: the drain reads a row
   only after the last write to it); while k's entry holds it, each flit's newest count (the newest
   operation in flight, else the row if touched) plus the contribution at stage b that the reference
   model counted equals the reference model's count, and the ``progress`` row's final count is the
   number of flits at ``expected``; k's result still to come (event, ``pre``, ``cur``, ``pend``, the
   queue, the packet on ``out``) means the reference model ended k complete, its ``meta`` row k's request,
   its rows final in the partial memory, and its payload flits (in ``pend``'s read and in the queue) the
   expected count;
7. *the liveness measure* (stated when "answered" is checked, 3 entries or more,
   :meth:`ReductionBufferHarness._liveness`): once k's grant is known, its answer is out or exactly one is
   to come (its entry active, which then holds k, or its packet on the answer path); ``late_ready`` (the
   cycles of ``out.ready`` counted since k's timeout must have fired) counts only from then; and
   ``late_ready`` plus ``E``, the cycles k's header needs if ``out.ready`` stays high, is at most
   ``liveness_slack``: by the answer path in order, the output queue's flits one cycle each, then
   ``pend`` (2 cycles on at the earliest), ``cur``'s items left (3), ``pre``'s packet (4), the completion
   FIFO's output register (5) and inner rows (6, 7), each packet's first item at ``max(previous + 1, its
   latency)`` and the rest one per cycle; an entry still active once ``late_ready`` counts fires its
   timeout in that cycle (part 2), and its packet comes after every one on the path (7 at the earliest).
   Each cycle of ``out.ready`` lowers ``E`` by one, and no cycle raises it (the path only advances).

It names the allocator's ``al1``/``al2``/``al2_fresh``, the drain's ``pre``/``cur``/``pend``/``pend_hdr``,
the row tracker's shadows ``sh`` and the buffer's ``busy``/``active`` (attributes of those blocks, set in
their ``elaborate``; the generated Verilog is byte-equal with and without them), the completion FIFO's
output register and :class:`IntAddALU`'s stages, and reads the FIFO's inner rows (with its pointers at 3
entries), the output queue's
slots and pointers and every ``meta``, ``progress``, ``start`` and ``partial`` row through comb read
ports the harness adds. What it does not state (the contribution waiting at stage b with its held row
reads and row-tracker match flags) is left to the depth: it is rebuilt within a few cycles from states the
invariant pins down (at k = 11 the induction step fails).

Also assumed for the induction (``invariant=True`` only): k's entry is not granted with k's generation
again after k's grant (``2**15`` reuses of the entry at 2 entries, ``2**14`` at 3): a contribution with
that rtag is then the new allocation's, the design's documented aliasing limit. Mutant (``tests/verif/formal/
test_formal_reduction.py``): an allocator that does not bump the generation fails "counted stale" at step
16 (checked without the invariant, which names the real allocator's stages).
"""

import sys
from types import SimpleNamespace

from amaranth.hdl import Assume, Cat, Const, Module, Mux, ResetSignal, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In

from hw.packet import HEADER_BITS, PORT_BITS, EType, ErrorCode, HeaderLayout, Opcode, RedOp, flit_layout
from hw.switch import reduction_buffer as _rb
from hw.switch import reduction_engine as _re
from hw.switch.reduce_alu import ReduceALU
from hw.switch.reduction_buffer import COUNT_BITS, RTAG_BITS, ReductionBuffer
from hw.switch.reduction_engine import ReductionEngine
from hw.switch.reduction_reads import read_info_layout

from .observe import elaborate_now, observe_queue
from .runner import Properties

__all__ = ["IntAddALU", "SmallReductionBuffer", "ReductionBufferHarness", "BufferView", "SmallReductionEngine",
           "ReductionEngineHarness", "PROPERTY_KEYS", "SAFETY_KEYS",
           "LIVENESS_KEYS"]

PROPERTY_KEYS = ("once", "exact", "cause", "timeout", "stale", "answered", "framing")
SAFETY_KEYS = ("once", "exact", "cause", "timeout", "stale", "framing")     # proven by k-induction
LIVENESS_KEYS = ("answered",)      # needs 3 entries (at 2 the completion FIFO loses an event)
ENGINE_KEYS = ("exact", "once", "early")         # the engine harness's properties
ENGINE_INDUCTIVE_KEYS = ("once",)                # its invariant (invariant=True): these; all three to 2 requests
INDUCTIVE_KEYS = SAFETY_KEYS       # the invariant (invariant=True) is stated for these
SEQ_BITS = 8          # the engine harness's request sequence numbers (the requester tag field)


class IntAddALU(ReduceALU):
    """:class:`ReduceALU` reduced to its int32 ``ADD`` datapath, for the buffer's proofs: the same ports,
    pipeline (``acc_stages`` 1 or 3: latency 2 or 4; ``chain`` reads the stage-1 register, the partial of
    the operation that last left the accumulate stages), stall behaviour and ``first``/``chain`` operand
    selection, without the fp32 adders (which the solver would bit-blast at every step and which the
    buffer's control never looks at; the ALU's arithmetic has its own tests). Only int32 lane 0 is
    computed (the other lanes are 0): the lanes are independent copies of one another, and a 128-bit sum
    per step would dominate the solver's work. The buffer sets ``chain_hold=False``; this model never
    holds. ``use_chain=False`` is a mutant that ignores ``chain`` (a contribution right behind another to
    the same row then loses the first). Lane 0's int32 operand is ``data[0:32]`` in both ``data`` forms
    (``wide_data``)."""

    def __init__(self, *, flit_width: int, user_width: int, use_chain: bool = True, acc_stages: int = 1,
                 chain_hold: bool = False, chain_copies: int = 1, wide_data: bool = False):
        self.use_chain = use_chain
        super().__init__(flit_width=flit_width, user_width=user_width, acc_stages=acc_stages,
                         chain_hold=chain_hold, chain_copies=chain_copies, wide_data=wide_data)

    def elaborate(self, platform):
        m = Module()
        W = self.flit_width
        p = self.i.payload
        advance = Signal()
        m.d.comb += [advance.eq(~self.o.valid | self.o.ready), self.i.ready.eq(advance)]
        s1_valid = Signal()
        s1_acc = Signal(2 * W)
        s1_user = Signal(self.user_width)
        prev = p.acc[0:32]
        if self.use_chain:
            prev = Mux(p.chain[0], s1_acc[0:32], prev)      # lane 0's copy
        # The sum is formed from the operands at the input; the extra accumulate stages only delay it.
        valid, acc, user = self.i.valid, (Mux(p.first[0], 0, prev) + p.data[0:32])[0:32], p.user
        self.stages = []        # (valid, lane-0 sum) per stage after the input, for a harness's invariant
        for k in range(self.acc_stages - 1):
            v_k, a_k = Signal(name=f"acc_v{k}"), Signal(32, name=f"acc_a{k}")
            u_k = Signal.like(s1_user, name=f"acc_u{k}")
            with m.If(advance):
                m.d.sync += [v_k.eq(valid), a_k.eq(acc), u_k.eq(user)]
            valid, acc, user = v_k, a_k, u_k
            self.stages.append((v_k, a_k))
        self.stages += [(s1_valid, s1_acc[0:32]), (self.o.valid, self.o.payload.acc[0:32])]
        with m.If(advance):
            m.d.sync += s1_valid.eq(valid)
            with m.If(valid):
                m.d.sync += [s1_acc.eq(acc), s1_user.eq(user)]
            m.d.sync += self.o.valid.eq(s1_valid)
            with m.If(s1_valid):
                m.d.sync += [self.o.payload.acc.eq(s1_acc), self.o.payload.result.eq(s1_acc[0:W]),
                             self.o.payload.user.eq(s1_user)]
        return m


class SmallReductionBuffer(ReductionBuffer):
    """The real :class:`ReductionBuffer`, with the parameter floor lowered for formal proofs (entries
    2..512, timeout 4..2**20); everything else is checked as in the product. ``alu``: a
    :class:`ReduceALU` subclass to build instead of the real ALU (``None``: the real one). ``allocator``,
    ``events``, ``drain``: classes built in place of its :class:`~hw.switch.reduction_buffer.EntryAllocator`,
    :class:`~hw.switch.reduction_buffer.EntryEvents` and :class:`~hw.switch.reduction_buffer.ResultDrain`
    (mutants), or None."""

    # The buffer builds these sub-blocks by their module-level names.
    _REPLACEABLE = ("ReduceALU", "EntryAllocator", "EntryEvents", "ResultDrain")

    def __init__(self, *, alu=None, allocator=None, events=None, drain=None, **params):
        self.replaced = {name: cls for name, cls in zip(self._REPLACEABLE, (alu, allocator, events, drain))
                         if cls is not None}
        super().__init__(**params)

    def elaborate(self, platform):
        saved = {name: getattr(_rb, name) for name in self.replaced}
        for name, cls in self.replaced.items():
            setattr(_rb, name, cls)
        try:
            return super().elaborate(platform)
        finally:
            for name, cls in saved.items():
                setattr(_rb, name, cls)

    @staticmethod
    def check_params(*, entries, max_length, flit_width, timeout, outstanding, acc_stages=3, ports=None) -> int:
        if not isinstance(entries, int) or not 2 <= entries <= 512:
            raise ValueError(f"entries must be an integer in 2..512, got {entries!r}")
        if not isinstance(timeout, int) or not 4 <= timeout <= 1 << 20:
            raise ValueError(f"timeout must be an integer in 4..{1 << 20} cycles, got {timeout!r}")
        # The rest as in the product (entries and timeout at the product floor for that call).
        ReductionBuffer.check_params(entries=max(entries, 16), max_length=max_length, flit_width=flit_width,
                                     timeout=max(timeout, 64), outstanding=None, acc_stages=acc_stages,
                                     ports=ports)
        if outstanding is None:
            return entries
        if not isinstance(outstanding, int) or not 1 <= outstanding <= entries:
            raise ValueError(f"outstanding must be an integer in 1..entries ({entries}), got {outstanding!r}")
        return outstanding


class _Lined(list):
    """A list of invariant terms that remembers the source line each was added at: the harnesses name each
    term's signal ``<prefix>_<index>_L<line>``, so that a failed induction step's trace says which one
    broke."""

    def __init__(self, items=()):
        super().__init__(items)
        self.lines = [sys._getframe(1).f_lineno] * len(self)

    def append(self, t):
        super().append(t)
        self.lines.append(sys._getframe(1).f_lineno)

    def __iadd__(self, ts):
        line = sys._getframe(1).f_lineno
        super().__iadd__(ts)
        self.lines += ts.lines if isinstance(ts, _Lined) else [line] * len(ts)
        return self


def _memory_rows(m, mem, name: str, plain: bool = False) -> list:
    """Every row of memory ``mem`` as a signal (``name`` + row index), read combinationally; ``plain``
    gives bare-width signals instead of signals of the memory's shape."""
    out = []
    for j in range(mem.depth):
        port = mem.read_port(domain="comb")
        sig = Signal(len(Value.cast(port.data)) if plain else mem.shape, name=f"{name}{j}")
        m.d.comb += [port.addr.eq(j), sig.eq(port.data)]
        out.append(sig)
    return out


def _select(values: list, idx, view: bool = False):
    """``values[idx]`` as a chain of muxes (the last row where ``idx`` is out of range: row 0); ``view``
    keeps a layout-shaped row's view."""
    out = Value.cast(values[0])
    for j in range(1, len(values)):
        out = Mux(idx == j, Value.cast(values[j]), out)
    shape = values[0].shape()
    return data.View(shape, out) if view and isinstance(shape, data.Layout) else out


def _queued_flit(slots, rptr, j: int, flit_width: int):
    """The flit ``j`` places after the read pointer ``rptr`` of a FIFO's ``slots`` (its storage, in write
    order, wrapping), and its header view: the harness reads the output queue in the order it will leave."""
    D = len(slots)
    sl = slots[0]
    for i in range(1, D):
        sl = Mux(Mux(rptr <= i, i - rptr, i + D - rptr) == j, slots[i], sl)
    fl = data.View(flit_layout(flit_width), sl)
    return fl, HeaderLayout(fl.data[0:HEADER_BITS])


class ReductionBufferHarness(wiring.Component):
    """Ports = the buffer's free inputs (see the module docstring). ``liveness_slack``: cycles of
    ``out.ready`` after which an expired entry's answer must be out (None: the bound, 4 + (``entries`` - 1)
    * (1 + ``max_length``) + 1). ``alu``: the ALU class the buffer
    builds (``None``: the real :class:`ReduceALU`, far slower). ``only``: a subset of
    :data:`PROPERTY_KEYS` to check. ``flit_limit=False`` drops the at-most-``expected``-per-flit
    assumption (to show that the buffer relies on it). ``allocator``, ``events``, ``drain``: mutant
    sub-blocks (:class:`SmallReductionBuffer`)."""

    # A bounded check with yices (induction cannot close without invariants on the SRAM contents).
    formal_options = {"engine": "smtbmc yices", "induction": False,
                      "script_extra": "memory_map\nopt -full\nopt_dff -sat\nopt_clean"}

    def __init__(self, entries: int = 3, max_length: int = 2, timeout: int = 4, liveness_slack: int | None = None,
                 alu=IntAddALU, only=None, flit_limit: bool = True, acc_stages: int = 3,
                 invariant: bool = False, allocator=None, events=None, drain=None):
        unknown = set(only or ()) - set(PROPERTY_KEYS)
        if unknown:
            raise ValueError(f"unknown property {', '.join(sorted(unknown))}; valid: {', '.join(PROPERTY_KEYS)}")
        inductive = INDUCTIVE_KEYS + (LIVENESS_KEYS if entries >= 3 else ())
        bad = set(only or PROPERTY_KEYS) - set(inductive) if invariant else set()
        if bad:
            raise ValueError(f"no invariant is stated for {', '.join(sorted(bad))}; "
                             f"invariant=True takes: {', '.join(inductive)}")
        self.invariant = invariant
        self.max_expected = 3       # the largest ``expected`` an allocation asks (the engine's: its ports)
        self.counts = invariant and "exact" in (only or PROPERTY_KEYS)     # part (6) of the invariant
        self.count_bound = False
        self.live = invariant and "answered" in (only or PROPERTY_KEYS)    # part (7)
        if self.counts and entries != 2:
            raise ValueError(f"the per-flit count invariant (\"exact\") is written for 2 entries, got {entries}")
        if liveness_slack is None:      # the out.ready cycles k's header may need (the measure's bound)
            liveness_slack = 4 + (entries - 1) * (1 + max_length) + 1
        if invariant:       # k-induction (the bounded check's options otherwise)
            self.formal_options = {**self.formal_options, "induction": True,
                                   "script_extra": "flatten\nmemory_map\nopt -full"}
        self.only = None if only is None else set(only)
        self.flit_limit = flit_limit
        self.entries, self.max_length, self.timeout = entries, max_length, timeout
        self.liveness_slack = liveness_slack
        self.buffer = SmallReductionBuffer(entries=entries, max_length=max_length, flit_width=128,
                                           timeout=timeout, alu=alu, acc_stages=acc_stages,
                                           allocator=allocator, events=events, drain=drain)
        self.props = Properties()
        super().__init__({
            "alloc_valid": In(1), "alloc_src": In(PORT_BITS), "alloc_length": In(5), "alloc_expected": In(COUNT_BITS),
            "alloc_etype": In(EType), "grant_ready": In(1),
            "c_valid": In(1), "c_rtag": In(RTAG_BITS), "c_flit": In(5), "c_length": In(5), "c_etype": In(3),
            "c_abort": In(1), "c_code": In(8), "out_ready": In(1), "pick": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        ML, T, N = self.max_length, self.timeout, self.entries
        m.submodules.buf = buf = self.buffer

        # ---- Drive the buffer. The chosen allocation k is the one taken while the free input ``pick`` is
        # first high (a ghost flag, ``picked``): its request carries tag 1, every other one tag 0, so its
        # answer is the one answer with tag 1, however many allocations come before or after it.
        picked = Signal()
        mark = self.pick & ~picked
        a = buf.alloc.payload
        m.d.comb += [buf.alloc.valid.eq(self.alloc_valid), a.src.eq(self.alloc_src), a.tag.eq(mark),
                     a.length.eq(self.alloc_length), a.expected.eq(self.alloc_expected),
                     a.etype.eq(self.alloc_etype), a.op.eq(RedOp.ADD), buf.grant.ready.eq(self.grant_ready)]
        m.d.comb += Assume(~self.alloc_valid | ((self.alloc_length >= 1) & (self.alloc_length <= ML) &
                                                ((self.alloc_etype == EType.S32) | (self.alloc_etype == EType.U32))))
        c = buf.contrib.payload
        m.d.comb += [buf.contrib.valid.eq(self.c_valid), c.rtag.eq(self.c_rtag), c.flit.eq(self.c_flit),
                     c.length.eq(self.c_length), c.etype.eq(self.c_etype), c.abort.eq(self.c_abort),
                     c.code.eq(self.c_code), c.data.eq(1),
                     buf.out.ready.eq(self.out_ready)]
        m.d.comb += Assume(~(self.c_valid & self.c_abort) | (self.c_code != 0))
        # Representatives only (see the module docstring): every flit index >= max_length or length outside
        # 1..max_length is a mismatch like ML/ML+1. Generations are free.
        m.d.comb += Assume((self.c_flit <= ML) & (self.c_length <= ML + 1) & (self.alloc_expected <= 3))
        g = self._observe(m, platform, buf, picked, mark,
                          (self.alloc_length, self.alloc_expected, self.alloc_etype))
        (inv, answers, hdr_k, known, is_resp, req_exp, ended, end_code, payload_k, lanes_ok, o_idx, req_len,
         stale_k_after, is_err, err_code, timed_out, cnt, known_now, rt, o, c_take, late_ready, is_hdr,
         in_pkt, o_len, hdr, o_take) = (getattr(g, n) for n in (
            "inv", "answers", "hdr_k", "known", "is_resp", "req_exp", "ended", "end_code", "payload_k", "lanes_ok",
            "o_idx", "req_len", "stale_k_after", "is_err", "err_code", "timed_out", "cnt", "known_now", "rt", "o",
            "c_take", "late_ready", "is_hdr", "in_pkt", "o_len", "hdr", "o_take"))
        p = self.props
        want = lambda key: self.only is None or key in self.only    # noqa: E731
        if want("once"):
            p.check(m, "answered at most once, and only after its grant",
                    (answers <= 1) & (~hdr_k | known) & inv,
                    hdr_k & is_resp & (req_exp == 2))
        if want("exact"):
            p.check(m, "a RED_RESP reduces exactly the expected contributions of every flit",
                    (~(hdr_k & is_resp) | (ended & (end_code == 0))) & (~payload_k | lanes_ok) & inv,
                    payload_k & (o_idx == req_len - 1) & (req_exp == 2) & stale_k_after)
        if want("cause"):
            p.check(m, "an error answer names its cause (abort code or TYPE_MISMATCH)",
                    (~(hdr_k & is_err) | (ended & (end_code != 0) & (err_code == end_code)) |
                     ((err_code == ErrorCode.TIMEOUT.value) & timed_out)) & inv,
                    hdr_k & is_err & (err_code == ErrorCode.TYPE_MISMATCH.value))
        if want("timeout"):
            p.check(m, "a timeout answers only an entry still in flight after `timeout` cycles",
                    (~(hdr_k & is_err & (err_code == ErrorCode.TIMEOUT.value)) | timed_out |
                     (ended & (end_code == ErrorCode.TIMEOUT.value))) & inv,
                    hdr_k & is_err & (err_code == ErrorCode.TIMEOUT.value) & (cnt[0] == 1))

        # Stale: a contribution taken for k's rtag before k's grant was offered or after k ended is
        # counted in ``stale`` three cycles later (checked once k's rtag is known): checked at stage b,
        # registered, then added (the buffer's counters lag their events by a cycle); plus up to
        # ``acc_stages - 1`` cycles when it waits at b behind an operation to its row (the buffer waits
        # on the row alone, before the entry check), so the count must rise within that window.
        wait = self.buffer.acc_stages - 1
        d_layout = data.StructLayout({"valid": 1, "rtag": RTAG_BITS, "out": 1, "pre": 1, "seen": 1})
        d = [Signal(d_layout, name=f"d{i}") for i in range(1, 4 + wait)]
        stale_prev = Signal(32)
        m.d.sync += stale_prev.eq(buf.stale)
        inc = buf.stale == (stale_prev + 1)[0:32]      # the counter wraps
        m.d.sync += [d[0].valid.eq(c_take), d[0].rtag.eq(c.rtag), d[0].out.eq(~known_now | ended),
                     d[0].pre.eq(~known_now), d[0].seen.eq(0)]
        for i in range(1, len(d)):
            m.d.sync += d[i].eq(d[i - 1])
            if i >= 3:      # d[2] is "d3", the first cycle the count may rise
                m.d.sync += d[i].seen.eq(d[i - 1].seen | inc)
        last = d[-1]
        last_stale_k = last.valid & last.out & known_now & (last.rtag == rt)
        if want("stale"):
            p.check(m, "a contribution for a tag not in flight is counted stale",
                    (~last_stale_k | last.seen | inc) & inv,
                    last_stale_k & last.pre)

        if want("answered"):
            p.check(m, f"every allocation is answered (within {self.liveness_slack} cycles of out.ready once "
                       "its timeout must have fired)",
                    ((late_ready != self.liveness_slack) | (answers != 0)) & inv,
                    (late_ready == self.liveness_slack) & (answers == 1))

        # Packet framing on ``out``.
        if want("framing"):
            p.check(m, "answers are well-formed packets (RED_RESP: length flits; ERROR: header only)",
                    (~is_hdr | ((is_resp | is_err) & (o.payload.last == is_err) & (~is_resp | (hdr.length != 0)))) &
                    (~(o_take & in_pkt) | (o.payload.last == (o_idx == o_len - 1))) & inv,
                    o_take & in_pkt & o.payload.last & (o_len == 2))
        return m

    def _observe(self, m, platform, buf, picked, mark, alloc_fields, stale_mark=False, assume_alias=True):
        """The ghost state of the chosen allocation k from ``buf``'s ports (its allocation: ``mark`` high
        as it is taken, its request's ``alloc_fields`` = length, expected, etype; ``picked`` is set then),
        the reference model and the view of ``out``, and (``invariant=True``) the invariant (``inv``): a
        namespace. ``stale_mark``: contributions marked ``stale`` by their sender are not k's (the engine's
        response filter marks some; the buffer harness never does)."""
        ML, T, N = self.max_length, self.timeout, self.entries
        c = buf.contrib.payload
        alloc_length, alloc_expected, alloc_etype = alloc_fields
        n_alloc = Signal(2)       # allocations accepted, modulo 4 (at most 2 wait for their grant)
        n_grant = Signal(2)       # grants taken, modulo 4
        alloc_take = buf.alloc.valid & buf.alloc.ready
        grant_take = buf.grant.valid & buf.grant.ready
        c_take = buf.contrib.valid & buf.contrib.ready
        m.d.sync += [n_alloc.eq(n_alloc + alloc_take), n_grant.eq(n_grant + grant_take)]

        # ---- The chosen allocation k: its request (recorded at its allocation, with its sequence number
        # modulo 4) and rtag (its entry and generation, from its grant, visible from the cycle the grant is
        # offered: the entry takes contributions from then on).
        k_seq = Signal(2)
        req_len = Signal(5)
        req_exp = Signal(COUNT_BITS)
        req_etype = Signal(3)
        with m.If(alloc_take & mark):
            m.d.sync += [picked.eq(1), k_seq.eq(n_alloc), req_len.eq(alloc_length),
                         req_exp.eq(alloc_expected), req_etype.eq(alloc_etype)]
        known = Signal()
        rt_reg = Signal(RTAG_BITS)
        offered_k = buf.grant.valid & picked & ~known & (n_grant == k_seq)
        known_now = known | offered_k
        rt = Mux(known, rt_reg, buf.grant.payload.rtag)
        with m.If(offered_k & ~known):
            m.d.sync += [known.eq(1), rt_reg.eq(buf.grant.payload.rtag)]
        k_taken = Signal()                 # k's grant has been taken
        with m.If(grant_take & known_now & (n_grant == k_seq)):
            m.d.sync += k_taken.eq(1)
        if self.invariant and assume_alias:
            # The claim is for k's rtag while it names k: until k's entry is granted with k's generation
            # again (``2**15`` reuses of the entry at 2 entries), when a contribution with that rtag is the
            # new allocation's. Within any bound a harness can check this never happens.
            m.d.comb += Assume(~(k_taken & buf.grant.valid & (buf.grant.payload.rtag == rt_reg)))
        age = Signal(6)                    # cycles since the grant was first offered (saturating)
        with m.If(known_now & (age != 63)):
            m.d.sync += age.eq(age + 1)

        # Reference model of k: per-flit counts, and how (code 0 = completed) and when it ended.
        cnt = [Signal(COUNT_BITS, name=f"cnt{f}") for f in range(ML)]
        ended = Signal()
        end_code = Signal(8)
        end_age = Signal(6)
        for_k = c_take & known_now & (c.rtag == rt)
        if stale_mark:
            for_k = for_k & ~c.stale
        live_c = for_k & ~ended
        mismatch = (c.etype != req_etype) | (c.length != req_len) | (c.flit >= req_len)
        good = live_c & ~c.abort & ~mismatch
        new_cnt = [Mux(good & (c.flit == f), cnt[f] + 1, cnt[f]) for f in range(ML)]
        all_final = Const(1)
        for f in range(ML):
            all_final = all_final & ((f >= req_len) | (new_cnt[f] == req_exp))
        # Contract: at most ``expected`` contributions per flit while in flight.
        for f in range(ML if self.flit_limit else 0):
            m.d.comb += Assume(~(good & (c.flit == f)) | (cnt[f] != req_exp))
        with m.If(good):
            m.d.sync += [cnt[f].eq(new_cnt[f]) for f in range(ML)]
        b_good = Signal()                  # the contribution in the buffer's stage b was counted in cnt
        with m.If(c_take):
            m.d.sync += b_good.eq(good)
        with m.If(live_c & (c.abort | mismatch | all_final)):
            m.d.sync += [ended.eq(1), end_age.eq(age),
                         end_code.eq(Mux(c.abort, c.code, Mux(mismatch, ErrorCode.TYPE_MISMATCH.value, 0)))]
        since = Signal(3)                  # cycles since k ended (saturating)
        with m.If(ended & (since != 7)):
            m.d.sync += since.eq(since + 1)
        stale_k_after = Signal()           # a contribution for k was taken after k ended
        with m.If(for_k & ended):
            m.d.sync += stale_k_after.eq(1)

        # ---- Watch the answers.
        o = buf.out
        o_take = o.valid & o.ready
        hdr = Signal(HeaderLayout)
        m.d.comb += hdr.eq(o.payload.data[0:HEADER_BITS])
        in_pkt = Signal()
        o_idx = Signal(5)
        o_len = Signal(5)
        o_is_k = Signal()
        with m.If(o_take):
            with m.If(~in_pkt):
                m.d.sync += [in_pkt.eq(~o.payload.last), o_idx.eq(0), o_len.eq(hdr.length),
                             o_is_k.eq(hdr.tag == 1)]
            with m.Else():
                m.d.sync += o_idx.eq(o_idx + 1)
                with m.If(o.payload.last):
                    m.d.sync += in_pkt.eq(0)
        is_hdr = o_take & ~in_pkt
        is_resp = hdr.opcode == Opcode.RED_RESP
        is_err = hdr.opcode == Opcode.ERROR
        hdr_k = is_hdr & (hdr.tag == 1)
        err_code = hdr.route.uni.code.as_value()
        answers = Signal(2)
        with m.If(hdr_k & (answers != 3)):
            m.d.sync += answers.eq(answers + 1)
        payload_k = o_take & in_pkt & o_is_k
        lanes_ok = o.payload.data[0:32] == req_exp
        # The RTL's timeout may have fired first: the ending contribution is examined a cycle after it is
        # taken, or up to ``acc_stages - 1`` cycles later when it waits behind an operation to its row (the
        # buffer waits on the row alone, before the entry check), and the entry may time out meanwhile.
        timed_out = ~ended | (end_age + (self.buffer.acc_stages - 1) >= T - 1)

        # Bounded liveness: once k must have timed out (age >= timeout + entries + 2), ``liveness_slack``
        # cycles of out.ready bring its answer out.
        late_ready = Signal(range(self.liveness_slack + 1))
        with m.If(known_now & (age >= T + N + 2) & o.ready & (late_ready != self.liveness_slack)):
            m.d.sync += late_ready.eq(late_ready + 1)
        self._late_ready = late_ready

        inv = Const(1)
        if self.invariant:
            inv = self._invariant(m, platform, picked=picked, known=known, k_taken=k_taken, k_seq=k_seq,
                                  n_alloc=n_alloc, n_grant=n_grant, rt=rt_reg, ended=ended, since=since,
                                  cnt=cnt, req=(req_len, req_exp, req_etype), stale_k_after=stale_k_after,
                                  answers=answers, in_pkt=in_pkt, o_idx=o_idx, o_len=o_len, age=age,
                                  b_good=b_good, o_is_k=o_is_k, end_code=end_code,
                                  code_ok=lambda err, c: (~err | (ended & (end_code != 0) & (c == end_code)) |
                                                          ((c == ErrorCode.TIMEOUT.value) & timed_out)))
        return SimpleNamespace(**locals())

    def _invariant(self, m, platform, *, picked, known, k_taken, k_seq, n_alloc, n_grant, rt, ended, since,
                   cnt, req, stale_k_after, answers, in_pkt, o_idx, o_len, age, code_ok, b_good, o_is_k,
                   end_code):
        """The invariant the inductive properties are stated with (see the module docstring): true in
        every reachable state, and strong enough that no state it admits breaks a property within the
        induction's depth. It names the allocator's two stages, the drain's ``pre``/``cur``, the buffer's
        ``busy``/``active`` (attributes of those blocks) and the completion FIFO's output register, and
        reads the FIFO's inner slot and every entry's ``meta``, ``progress`` and ``start`` rows through
        read ports it adds."""
        buf, N, T = self.buffer, self.entries, self.timeout
        EB, TB = buf.entry_bits, buf.timer_bits
        bm = elaborate_now(buf, platform)
        al = bm.submodules.allocator
        dr = bm.submodules.drain
        evq = bm.submodules.events
        ends = bm.submodules.ends
        elaborate_now(al, platform)
        dm = elaborate_now(dr, platform)
        qm = elaborate_now(evq, platform)
        outq = dm.submodules.outq
        o_rptr, o_wptr, o_slots = observe_queue(outq, "storage", "inv_outq")

        def at(values, idx):
            return _select(values, idx, view=True)

        meta, prog, start = (_memory_rows(m, getattr(bm.submodules, n), f"inv_{n}")
                             for n in ("meta", "progress", "start"))
        inner, inner_terms, slot = self._fifo_rows(m, evq, qm.submodules.storage, N - 1)
        self._inner = inner
        busy, active = buf.busy, buf.active
        al1, al2, fresh = al.al1, al.al2, al.al2_fresh
        bit = lambda v, i: v.bit_select(i, 1)        # noqa: E731
        req_len, req_exp, req_etype = req
        e_k, g_k = rt[0:EB], rt[EB:]

        def holds_req(md):
            return (md.length == req_len) & (md.expected == req_exp) & (md.etype.as_value() == req_etype)

        def legal(length, expected, etype):     # what the harness's assumptions let an allocation ask
            return ((length >= 1) & (length <= self.max_length) & (expected <= self.max_expected) &
                    ((etype == EType.S32.value) | (etype == EType.U32.value)))

        terms = _Lined([~picked | legal(req_len, req_exp, req_etype),
                        ~al1.valid | legal(al1.req.length, al1.req.expected, al1.req.etype.as_value())])
        for j in range(N):      # every entry past its row writes holds a legal request
            written = busy[j] & ~(al1.valid & (al1.entry == j))
            terms.append(~written | legal(meta[j].length, meta[j].expected, meta[j].etype.as_value()))
        # (1) Entries: active ones are busy; an entry in the allocator is busy and not active yet, the one
        # just written has its generation, a cleared progress row and (for k) k's request; an entry whose
        # event is queued (the FIFO's inner slot and output register) or in the drain is not active.
        terms += [(active & ~busy) == 0,
                  ~al1.valid | (bit(busy, al1.entry) & ~bit(active, al1.entry)),
                  ~fresh | (al2.valid & bit(busy, al2.entry) & ~bit(active, al2.entry) &
                            (at(meta, al2.entry).gen == al2.gen) & (at(prog, al2.entry).as_value() == 0)),
                  ~dr.pre.valid | (bit(busy, dr.pre.entry) & ~bit(active, dr.pre.entry)),
                  ~dr.cur.valid | (bit(busy, dr.cur.entry) & ~bit(active, dr.cur.entry)),
                  ~evq.r_rdy | (bit(busy, evq.r_data[0:EB]) & ~bit(active, evq.r_data[0:EB]))]
        terms += [~v | (bit(busy, row[0:EB]) & ~bit(active, row[0:EB])) for v, row in inner] + inner_terms
        places = [(al1.valid, al1.entry), (fresh, al2.entry), *((v, row[0:EB]) for v, row in inner),
                  (evq.r_rdy, evq.r_data[0:EB]), (dr.pre.valid, dr.pre.entry), (dr.cur.valid, dr.cur.entry)]
        if N != 1 << EB:        # entry indices in range (an index past the entries reads entry 0's rows here)
            terms += [~v | (e < N) for v, e in places] + [al1.entry < N, al2.entry < N]
        for i, (vi, ei) in enumerate(places):      # an entry is in one place at a time
            terms += [~(vi & vj & (ei == ej)) for vj, ej in places[i + 1:]]
        # (2) The timer: an active entry was allocated at most timeout + entries + 3 cycles ago.
        for j in range(N):
            terms.append(~active[j] | ((ends.now - start[j])[0:TB] <= T + N + 3))
        # (3) The ghost's view of the allocator: the allocations waiting for their grant are its stages;
        # k, picked but not yet granted, is in one of them with its request; k's grant, offered and not
        # taken, is the second stage's.
        pending = (n_alloc - n_grant)[0:2]
        k_at_al2 = (k_seq == n_grant) & al2.valid & fresh
        k_at_al1 = al1.valid & (((k_seq == n_grant) & ~al2.valid) | ((k_seq == (n_grant + 1)[0:2]) & al2.valid))
        terms += [pending == al1.valid + al2.valid,
                  ~fresh | al2.valid,
                  picked | (~known & ~k_taken),
                  known | (~ended & ~k_taken & ~stale_k_after & (Cat(*cnt) == 0)),
                  ~picked | known | k_at_al2 | k_at_al1,
                  ~(picked & ~known & k_at_al1) | ((al1.req.length == req_len) & (al1.req.expected == req_exp) &
                                                   (al1.req.etype.as_value() == req_etype) & (al1.req.tag == 1)),
                  ~(picked & ~known & k_at_al2) | (holds_req(at(meta, al2.entry)) & (at(meta, al2.entry).tag == 1)),
                  ~known | k_taken | (al2.valid & ~fresh & (n_grant == k_seq) & (Cat(al2.entry, al2.gen) == rt))]
        # (4) While k's entry holds k, its meta row holds k's request. Once k ended (by the reference model)
        # three cycles ago or more, its entry no longer holds it.
        holds_k = bit(active, e_k) & (at(meta, e_k).gen == g_k)
        terms.append(~(known & holds_k) | holds_req(at(meta, e_k)))
        terms.append(ended | (since == 0))
        terms.append(~(known & ended & (since >= 3)) | ~holds_k)
        # ... and the reference model's age is the entry's, less the cycle from its row writes to its grant.
        terms += [known | (age == 0), ~(known & holds_k) | (age == (ends.now - at(start, e_k))[0:TB] - 1)]
        self._o_len, self._o_idx = o_len, o_idx
        terms += self._answer_path(m, dr, evq, slot, meta, at, bit, busy, active, known, picked, answers,
                                   in_pkt, o_idx, o_len, outq, o_rptr, o_wptr, o_slots, al1, fresh, al2, code_ok)
        if self.counts:
            terms += self._counts(m, bm, dr, evq, slot, meta, prog, at, bit, active, known, holds_k, e_k, rt,
                                  cnt, req, b_good, ended, end_code, al1, fresh, al2, in_pkt, o_is_k, outq,
                                  o_rptr, o_slots, busy)
        if self.live:
            terms += self._liveness(dr, evq, meta, at, active, known, answers, holds_k, age, outq)
        sigs = []
        for i, t in enumerate(terms):
            sigs.append(Signal(name=f"inv_{i}_L{terms.lines[i]}"))
            m.d.comb += sigs[-1].eq(t)
        return Cat(*sigs).all()

    def _liveness(self, dr, evq, meta, at, active, known, answers, holds_k, age, outq):
        """(7) The liveness measure (3 entries or more): once k is known and not yet answered, its answer is
        to come (its entry active with tag 1, or its packet on the answer path), and ``late_ready`` plus
        the out.ready cycles k's header needs at most (``E``: its exit time if ``out.ready`` stayed high)
        is at most ``liveness_slack``. ``E`` by the answer path in order: the output queue's flits (one
        cycle each), then ``pend`` (ready 2 cycles on), ``cur``'s items left (3), ``pre``'s packet (4),
        the completion FIFO's output register (5) and inner rows (6, 7): each packet's first item leaves
        at ``max(previous + 1, its latency)`` and the rest one per cycle after it. An active k counts
        only once ``late_ready`` counts, when its timeout fires in that cycle (invariant (2)): its event
        then leaves after every packet on the path, 7 cycles on at the earliest."""
        T, N, S = self.timeout, self.entries, self.liveness_slack
        EB = self.buffer.entry_bits
        late_ready = self._late_ready
        pre, cur, pend, pend_hdr = dr.pre, dr.cur, dr.pend, dr.pend_hdr
        tag1 = lambda e: at(meta, e).tag == 1       # noqa: E731
        items = lambda code, length: 1 + Mux(code == 0, length, 0)      # noqa: E731
        t = (outq.level + Const(0, 6))[0:6]       # the exit time of the last item so far
        E = Const(0, 6)
        found = Const(0)
        for j, kh in enumerate(self._k_hdrs):
            E = Mux(~found & kh, j + 1, E)
            found = found | kh
        segments = [(pend.valid, pend.valid & pend.header & (pend_hdr.tag == 1), 1, 2),
                    (cur.valid, cur.valid & cur.hdr & (cur.tag == 1),
                     Mux(cur.hdr, items(cur.code.as_value(), cur.length), cur.length - cur.k), 3),
                    (pre.valid, pre.valid & tag1(pre.entry), items(pre.code.as_value(), at(meta, pre.entry).length), 4),
                    (evq.r_rdy, evq.r_rdy & tag1(evq.r_data[0:EB]),
                     items(evq.r_data[EB:EB + 8], at(meta, evq.r_data[0:EB]).length), 5)]
        segments += [(v, v & tag1(row[0:EB]), items(row[EB:EB + 8], at(meta, row[0:EB]).length), 6 + j)
                     for j, (v, row) in enumerate(self._inner)]
        for valid, is_k, n, lat in segments:
            first = Mux(t + 1 > lat, t + 1, lat)[0:6]
            E = Mux(~found & is_k, first, E)
            found = found | is_k
            t = Mux(valid, first + n - 1, t)[0:6]
        e_active = Mux(t + 1 > 7, t + 1, 7)[0:6]
        counting = known & (age >= T + N + 2)
        k_active = [active[j] & (meta[j].tag == 1) for j in range(N)]
        waiting = known & (answers == 0)
        return [~known | (answers + self._n_to_come == 1),
                ~(known & Cat(*k_active).any()) | holds_k,
                (late_ready == 0) | counting,
                ~(waiting & found) | (late_ready + E <= S),
                ~(waiting & ~found & counting) | (late_ready + e_active <= S)]

    @staticmethod
    def _fifo_rows(m, evq, ev_mem, n_inner):
        """The completion FIFO's ``n_inner`` inner rows (``entries - 1``), in the order they leave, read from
        its storage ``ev_mem``: ([(valid, row)], the terms tying its pointers to its level, row 0 of the
        storage)."""
        IN = n_inner
        inner_level = (evq.level - evq.r_rdy)[0:IN.bit_length()]
        raw = [Signal(len(evq.w_data), name=f"inv_evslot{j}" if j else "inv_evslot") for j in range(IN)]
        for j in range(IN):
            port = ev_mem.read_port(domain="comb")
            m.d.comb += [port.addr.eq(j), raw[j].eq(port.data)]
        if IN == 1:
            return [(evq.level > evq.r_rdy, raw[0])], [], raw[0]
        consume, produce = ev_mem.read_ports[0].addr, ev_mem.write_ports[0].addr
        inner = []
        for j in range(IN):
            row = raw[0]
            for i in range(1, IN):
                row = Mux(Mux(consume <= i, i - consume, i + IN - consume) == j, raw[i], row)
            inner.append((inner_level > j, row))
        wrapped = consume + inner_level
        terms = [(evq.level >= evq.r_rdy) & (inner_level <= IN) & (consume < IN) & (produce < IN) &
                 (produce == Mux(wrapped >= IN, wrapped - IN, wrapped)[0:len(produce)])]
        return inner, terms, raw[0]

    def _answer_path(self, m, dr, evq, slot, meta, at, bit, busy, active, known, picked, answers, in_pkt,
                     o_idx, o_len, outq, o_rptr, o_wptr, o_slots, al1, fresh, al2, code_ok):
        """(5) The answer path: the drain's meta read, the output queue's framing continued by ``pend`` and
        ``cur``, and the answers to k (tag 1) still to come plus those out at most one, none before k's
        grant."""
        EB, ML = self.buffer.entry_bits, self.max_length
        W = 128
        terms = _Lined()
        pre, cur, pend, pend_hdr = dr.pre, dr.cur, dr.pend, dr.pend_hdr
        # The drain read the meta row of the entry in pre (it does not change while the entry is busy).
        terms.append(~pre.valid | (dr.meta_rd.data.as_value() == at(meta, pre.entry).as_value()))
        # cur: a result packet's rows still to issue; an error is only ever at its header.
        terms += [~(cur.valid & ~cur.hdr) | ((cur.code.as_value() == 0) & (cur.k < cur.length)),
                  ~(cur.valid & cur.hdr) | (cur.k == 0),
                  ~cur.valid | ((cur.length >= 1) & (cur.length <= ML) & (cur.tag == at(meta, cur.entry).tag) &
                                (cur.length == at(meta, cur.entry).length)),
                  ~in_pkt | ((o_len >= 1) & (o_len <= ML) & (o_idx < o_len))]
        # The output queue from its read pointer: payload flits of the packet on `out` first, then whole
        # packets; then pend, then cur's packet.
        D = outq.depth
        level = outq.level
        wrapped = o_rptr + level
        terms += [(level <= D) & (o_rptr < D) & (o_wptr == Mux(wrapped >= D, wrapped - D, wrapped))]
        rem = Mux(in_pkt, o_len - o_idx, 0)[0:5]
        k_hdrs = []
        for j in range(D):
            fl, hd = _queued_flit(o_slots, o_rptr, j, W)
            live = level > j
            is_h = live & (rem == 0)
            resp, err = hd.opcode == Opcode.RED_RESP, hd.opcode == Opcode.ERROR
            terms += [~is_h | ((resp & ~fl.last & (hd.length >= 1) & (hd.length <= ML)) | (err & fl.last)),
                      ~(live & (rem != 0)) | (fl.last == (rem == 1))]
            k_hdrs.append(is_h & (hd.tag == 1))
            terms.append(~(is_h & (hd.tag == 1)) | code_ok(err, hd.route.uni.code.as_value()))
            rem = Mux(~live, rem, Mux(is_h, Mux(fl.last, 0, hd.length), rem - 1))[0:5]
        p_resp = pend_hdr.opcode == Opcode.RED_RESP
        p_err = pend_hdr.opcode == Opcode.ERROR
        terms += [~pend.valid | (pend.header == (rem == 0)),
                  ~(pend.valid & pend.header) | ((p_resp & ~pend.last & (pend_hdr.length >= 1) &
                                                  (pend_hdr.length <= ML)) | (p_err & pend.last)),
                  ~(pend.valid & ~pend.header) | (pend.last == (rem == 1))]
        rem = Mux(~pend.valid, rem, Mux(pend.header, Mux(pend.last, 0, pend_hdr.length), rem - 1))[0:5]
        terms.append(Mux(cur.valid & ~cur.hdr, rem == cur.length - cur.k, rem == 0))
        # The answers to k to come: its entry active, its event queued or in pre, cur before its header,
        # the header in pend or in the queue. With those out, at most one; none before k's grant.
        tag1 = lambda e: at(meta, e).tag == 1       # noqa: E731
        to_come = [active[j] & (meta[j].tag == 1) for j in range(len(meta))]
        N0 = len(to_come)
        inner = self._inner
        to_come += [evq.r_rdy & tag1(evq.r_data[0:EB]), *(v & tag1(row[0:EB]) for v, row in inner),
                    pre.valid & tag1(pre.entry), cur.valid & cur.hdr & (cur.tag == 1),
                    pend.valid & pend.header & (pend_hdr.tag == 1)] + k_hdrs
        # Each answer to k to come carries a code the reference model explains (see the properties).
        ev_code = lambda bits: bits[EB:EB + 8]      # noqa: E731
        codes = [ev_code(evq.r_data), *(ev_code(row) for _, row in inner), pre.code.as_value(),
                 cur.code.as_value()]
        terms += [~to_come[N0 + i] | code_ok(c != 0, c) for i, c in enumerate(codes)]
        terms.append(~to_come[N0 + len(codes)] | code_ok(p_err, pend_hdr.route.uni.code.as_value()))
        n = sum(to_come)
        self._k_hdrs, self._n_to_come = k_hdrs, n
        in_alloc = [al1.valid & (al1.req.tag == 1), fresh & tag1(al2.entry)]
        terms += [answers + n + sum(in_alloc) <= 1, known | ((answers == 0) & (n == 0))]
        # Only k's request carries tag 1: a tag-1 request in the allocator is k's, before its grant.
        terms += [~in_alloc[0] | (picked & ~known), ~in_alloc[1] | (picked & ~known)]
        for j in range(len(meta)):
            terms.append(picked | ~(busy[j] & ~(al1.valid & (al1.entry == j)) & (meta[j].tag == 1)))
        return terms

    def _counts(self, m, bm, dr, evq, slot, meta, prog, at, bit, active, known, holds_k, e_k, rt, cnt, req,
                b_good, ended, end_code, al1, fresh, al2, in_pkt, o_is_k, outq, o_rptr, o_slots, busy):
        """(6) The per-flit counts: the ALU's stages mirror the row tracker's shadows and each operation's
        lane-0 sum is its count; a touched row without an operation in flight holds sum = count; where an
        entry's operations may still be in flight; k's counts against the reference model's, less the
        contribution at stage b; k's result rows and payload flits on the answer path. With
        ``count_bound`` (the engine harness at two requests) every entry's counts too: at most its
        ``expected``, and while active at most its answered destinations (``count_limit``)."""
        buf, N, ML = self.buffer, self.entries, self.max_length
        EB, SB = buf.entry_bits, buf.slot_bits
        req_len, req_exp, req_etype = req
        rt_blk = elaborate_now(bm.submodules.rows, None) and bm.submodules.rows
        alu = bm.submodules.alu
        elaborate_now(alu, None)
        ac = bm.submodules.accept
        sh = rt_blk.sh
        L = len(sh) - 1
        pre, cur, pend = dr.pre, dr.cur, dr.pend
        terms = _Lined()
        for j in range(1, L + 1):
            v, a = alu.stages[j - 1]
            terms += [sh[j].valid == v, ~sh[j].valid | (a == sh[j].count)]
            e = sh[j].addr[SB:]
            terms.append(~sh[j].valid | ~((al1.valid & (al1.entry == e)) | (fresh & (al2.entry == e)) |
                                          (cur.valid & (cur.entry == e) & (~cur.hdr | (j < L))) |
                                          (pre.valid & (pre.entry == e) & (j < L - 1)) |
                                          (evq.r_rdy & (evq.r_data[0:EB] == e) & (j < L - 2))))
        partial = bm.submodules.partial
        prow = []
        for r in range(N << SB):
            port = partial.read_port(domain="comb")
            sig = Signal(partial.shape, name=f"inv_partial{r}")
            m.d.comb += [port.addr.eq(r), sig.eq(port.data)]
            prow.append(sig)

        def newest(e, f):
            """(an operation on row (e, f) is in flight, the newest count, the newest lane-0 sum, touched,
            the row's count, the row's sum)"""
            addr = Cat(Const(f, SB), e)
            count = Mux(e == 0, prow[f].count, prow[(1 << SB) + f].count) if N == 2 else None
            total = Mux(e == 0, prow[f].acc[0:32], prow[(1 << SB) + f].acc[0:32])
            touched = at(prog, e).touched[f]
            in_flight = Const(0)
            n_count, n_sum = Mux(touched, count, 0), Mux(touched, total, 0)
            for j in range(L, 0, -1):       # the newest (smallest stage) wins
                hit = sh[j].valid & (sh[j].addr == addr)
                in_flight = in_flight | hit
                n_count = Mux(hit, sh[j].count, n_count)
                n_sum = Mux(hit, alu.stages[j - 1][1], n_sum)
            return in_flight, n_count, n_sum, touched, count, total

        assert N == 2, "the count invariant is written for 2 entries"
        for e in range(N):      # (a reset clears the registers, not the rows: only rows of entries in use)
            written = bit(busy, e) & ~(al1.valid & (al1.entry == e))
            for f in range(ML):
                in_flight, n_count, n_sum, touched, count, total = newest(Const(e, EB), f)
                terms += [~written | ~in_flight | touched,
                          ~(written & touched & ~in_flight) | ((total == count) & (count != 0))]
                if self.count_bound:
                    # Every entry's count, with the contribution at stage b and the one its sender still
                    # holds, is at most its destinations that answered its generation (``count_limit``:
                    # the engine harness's signals per entry, that number and the one still to send).
                    w_pop, w_pend = self.count_limit
                    at_b = (ac.b_valid & (ac.b.rtag == Cat(Const(e, EB), meta[e].gen)) & ~ac.b.stale &
                            ~ac.b.abort & (ac.b.flit == f))
                    terms += [~written | (n_count <= meta[e].expected),
                              ~bit(active, e) | ((n_count + at_b + w_pend[e]) <= w_pop[e])]
        if self.count_bound:      # every entry (not only k's) gets at most expected contributions per flit
            for j in range(1, L + 1):
                terms.append(~sh[j].valid | (sh[j].count <= at(meta, sh[j].addr[SB:]).expected))
        # k's counts while its entry holds it: the reference model's, less the contribution at stage b.
        k_flit = []
        for f in range(ML):
            in_flight, n_count, n_sum, touched, count, total = newest(e_k, f)
            at_b = ac.b_valid & b_good & (ac.b.flit == f)
            terms += [~known | (f < req_len) | (cnt[f] == 0),
                      ~(known & holds_k) | ((n_count + at_b)[0:len(cnt[f])] == cnt[f])]
            k_flit.append((in_flight, n_count, n_sum, count, total))
        finals = sum(Mux((f < req_len) & (k_flit[f][1] == req_exp) & (req_exp != 0), 1, 0) for f in range(ML))
        terms.append(~(known & holds_k) | (at(prog, e_k).finals == finals))
        terms.append(~(ac.b_valid & b_good) | (known & (ac.b.rtag == rt) & ~ac.b.abort & (ac.b.flit < req_len) &
                                               (ac.b.length == req_len) & (ac.b.etype == req_etype)))
        # k's result on the answer path: ended by the reference model with code 0, and its rows final.
        tag1 = lambda e: at(meta, e).tag == 1       # noqa: E731
        done = ended & (end_code == 0)
        terms.append(~done | ((req_exp != 0) & Cat(*[(f >= req_len) | (cnt[f] == req_exp) for f in range(ML)]).all()))
        rows_final = Const(1)
        for f in range(ML):
            rows_final = rows_final & ((f >= req_len) | ((k_flit[f][1] == req_exp) & (k_flit[f][2] == req_exp)))
        places = [(evq.r_rdy, evq.r_data[0:EB], evq.r_data[EB:EB + 8]),
                  (evq.level > evq.r_rdy, slot[0:EB], slot[EB:EB + 8]),
                  (pre.valid, pre.entry, pre.code.as_value()),
                  (cur.valid & cur.hdr, cur.entry, cur.code.as_value())]
        for valid, e, code in places:
            md = at(meta, e)
            terms += [~(valid & tag1(e) & (code == 0)) | (done & (e == e_k) & rows_final),
                      ~(valid & tag1(e)) | ((md.length == req_len) & (md.expected == req_exp))]
        terms += [~(cur.valid & (cur.tag == 1)) | (cur.length == req_len),
                  ~(in_pkt & o_is_k) | (self._o_len == req_len)]
        # cur issuing k's result rows: the rows left are final in the partial memory.
        cur_k = cur.valid & ~cur.hdr & (cur.tag == 1)
        for f in range(ML):
            terms.append(~(cur_k & (cur.k <= f) & (f < cur.length)) |
                         (done & (cur.entry == e_k) & ~k_flit[f][0] & (k_flit[f][4] == req_exp)))
        terms.append(~cur_k | done)
        # The output queue, pend and the packet on out: k's result flits carry the expected count.
        W = 128
        D = outq.depth
        level = outq.level
        rem = Mux(in_pkt, 0, 0)[0:5]
        from_out = in_pkt & o_is_k
        terms.append(~from_out | done)
        rem = Mux(in_pkt, self._o_len - self._o_idx, 0)[0:5]
        in_k = from_out
        for j in range(D):
            fl, hd = _queued_flit(o_slots, o_rptr, j, W)
            live = level > j
            is_h = live & (rem == 0)
            resp = hd.opcode == Opcode.RED_RESP
            terms += [~(is_h & resp & (hd.tag == 1)) | (done & (hd.length == req_len)),
                      ~(live & (rem != 0) & in_k) | (fl.data[0:32] == req_exp)]
            in_k = Mux(is_h, resp & (hd.tag == 1), in_k)
            rem = Mux(~live, rem, Mux(is_h, Mux(fl.last, 0, hd.length), rem - 1))[0:5]
        p_resp = dr.pend_hdr.opcode == Opcode.RED_RESP
        terms += [~(pend.valid & pend.header & p_resp & (dr.pend_hdr.tag == 1)) |
                  (done & (dr.pend_hdr.length == req_len)),
                  ~(pend.valid & ~pend.header & in_k) | (dr.part_rd.data.acc[0:32] == req_exp)]
        # The packet still open after pend is cur's.
        in_k = Mux(pend.valid & pend.header, p_resp & (dr.pend_hdr.tag == 1), in_k)
        terms.append(~(cur.valid & ~cur.hdr) | (in_k == (cur.tag == 1)))
        return terms


class BufferView:
    """The buffer harness's ghost state and invariant (:meth:`ReductionBufferHarness._observe`) for a
    buffer inside another block (the engine): 2 or more entries, the safety parts of the invariant
    (``only``: keys of :data:`INDUCTIVE_KEYS`; the per-flit counts with ``"exact"``), no assumption made
    (the at-most-``expected``-per-flit contract and the aliasing limit are the caller's to prove)."""

    _observe = ReductionBufferHarness._observe
    _invariant = ReductionBufferHarness._invariant
    _answer_path = ReductionBufferHarness._answer_path
    _counts = ReductionBufferHarness._counts
    _fifo_rows = staticmethod(ReductionBufferHarness._fifo_rows)

    def __init__(self, buffer, *, entries: int, max_length: int, timeout: int, max_expected: int, only):
        bad = set(only) - set(INDUCTIVE_KEYS)
        if bad:
            raise ValueError(f"no invariant is stated for {', '.join(sorted(bad))}")
        self.buffer, self.entries, self.max_length, self.timeout = buffer, entries, max_length, timeout
        self.max_expected, self.invariant, self.flit_limit, self.live = max_expected, True, False, False
        self.counts = "exact" in only
        # Set by the engine harness with two requests: a count bound for every entry, against
        # ``count_limit`` (per entry: its destinations that answered its generation, a live answer to come).
        self.count_bound, self.count_limit = False, None
        self.liveness_slack = 4 + (entries - 1) * (1 + max_length) + 1      # (its counter is not checked)


# ---------------------------------------------------------------------------------------------------------
# The reduction engine: duplicates and unasked answers never complete an entry early.

class _SmallIntBuffer(SmallReductionBuffer):
    """The buffer the engine harness builds: lowered floor, int32-add ALU datapath."""

    def __init__(self, **params):
        super().__init__(alu=IntAddALU, **params)


class SmallReductionEngine(ReductionEngine):
    """The real :class:`ReductionEngine` building a :class:`SmallReductionBuffer` (int32-add datapath) in
    place of its buffer, so that it accepts 3 entries and a short timeout. ``response_filter``: a class
    built in place of its :class:`~hw.switch.reduction_responses.ResponseFilter` (a mutant), or None;
    ``events``, ``allocator``: the buffer's :class:`~hw.switch.reduction_buffer.EntryEvents` and
    :class:`~hw.switch.reduction_buffer.EntryAllocator` likewise."""

    def __init__(self, *, response_filter=None, events=None, allocator=None, **params):
        self.response_filter, self.events, self.allocator = response_filter, events, allocator
        # An entry's fan-out starting (FanOut's ``start`` event), for a harness to observe.
        self.start_valid, self.start_rtag = Signal(), Signal(RTAG_BITS)
        saved, _re.ReductionBuffer = _re.ReductionBuffer, _SmallIntBuffer   # checked and built by this name
        try:
            super().__init__(**params)
        finally:
            _re.ReductionBuffer = saved

    def elaborate(self, platform):
        saved = _re.ReductionBuffer, _re.ResponseFilter
        subs = {k: v for k, v in (("events", self.events), ("allocator", self.allocator)) if v is not None}
        _re.ReductionBuffer = (lambda **params: _SmallIntBuffer(**subs, **params)) if subs else _SmallIntBuffer
        _re.ResponseFilter = self.response_filter or saved[1]
        try:
            m = super().elaborate(platform)
        finally:
            _re.ReductionBuffer, _re.ResponseFilter = saved
        start = m.submodules.fanout.start
        m.d.comb += [self.start_valid.eq(start.valid), self.start_rtag.eq(start.payload.rtag)]
        return m


class ReductionEngineHarness(wiring.Component):
    """The real :class:`ReductionEngine` (4 ports, 2 entries, ``max_length`` 1, timeout 8,
    ``defer_translation``: no translation port to model; the buffer through :class:`SmallReductionEngine`)
    with free ``ld_reduce`` requests and free ``RED_READ_RESP`` traffic.

    Requests: up to ``requests`` header-only ``DYN_LD_REDUCE`` of 1 int32 flit, free destination mask; the
    harness sets ``src`` = the request's sequence number, so its ``RED_READ`` names it, and ``tag`` = 1 for
    the chosen request k (the sequence number ``chosen`` in the first cycle) and 0 for every other one, so
    k's answer is the one answer with tag 1 (the buffer harness's convention).
    Responses: packets of a free header (``src``, rtag, ``length``, ``etype``, error ``code``, ``last``)
    and payload flits carrying 1 in int32 lane 0, so a ``RED_RESP`` counts the contributions reduced.
    ``rd.ready`` and ``out.ready`` free.

    Assumption (the network's contract): an answer carries a tag only after a ``RED_READ`` with that tag
    has left (a destination answers a read it has received; duplicates, answers from destinations that
    were not asked, late answers for freed entries and error codes are free after that). With
    ``answers_after_reads=False`` (the registered block) an answer may also carry the tag of an entry
    whose fan-out has not started yet (in an earlier cycle; the engine's ``FanOut.start``, which
    :class:`SmallReductionEngine` exposes): an *early* answer, which only a misbehaving destination can
    send, guessing the tag; the response filter marks it stale. What stays assumed is the window between
    an entry's fan-out start and its reads leaving: there the engine's ``asked`` row already holds the
    whole mask, and an early answer from an asked destination is taken as its one answer (the solver
    finds that at step 13 when answers are left free in that window too).

    Properties: **a RED_RESP only after every asked destination answered, and it reduces exactly one
    contribution per destination** (a duplicate or unasked answer never completes an entry early nor
    counts twice); **every request is answered at most once**; with early answers, **an answer before its
    entry's fan-out starts changes nothing** (the entry that got one still reduces exactly its asked
    destinations' real answers; its Cover reaches such an entry's result). ``only``: a subset of
    :data:`ENGINE_KEYS` to check (``"exact"``, ``"once"``, ``"early"``). ``response_filter``: a mutant
    filter class; ``events``: a mutant of the buffer's :class:`~hw.switch.reduction_buffer.EntryEvents`
    (tests).

    Proof. "At most once" is proven by k-induction (block ``reduction_engine_once``: 2 requests, timeout 4,
    k = 10, yices) with ``invariant=True``, which states it together with :meth:`_invariant`: the buffer's
    invariant (parts 1 to 5 of the module docstring, stated around the buffer inside the engine, with a
    reference model of k built from the buffer's ports; contributions the response filter marks
    ``stale`` are not k's), the engine's from the request to ``out`` and the generations that keep k's
    rtag from being granted again (:meth:`_no_alias`: what the buffer harness assumes is proven here
    from the bounded number of requests). With the engine reset once, at the start, all three properties
    are proven: with one request (``requests=1``, block ``reduction_engine_one``: timeout 8, k = 12) the
    invariant adds the buffer's per-flit counts (part 6) and the engine's read side and response filter
    for k alone (:meth:`_counts`); with two (block ``reduction_engine_two``: timeout 8, k = 10) it states
    the rows of both requests' entries, a ghost of k's answered destinations, and the buffer's count bound
    for every entry (:meth:`_counts_two`). With resets free (``epochs=True``, block ``reduction_engine``:
    2 requests per reset, timeout 8, k = 10) the same invariant is stated with generations relative to the
    last reset (:meth:`_epoch`): a reset clears the registers and the harness's records, not the ``meta``,
    ``asked`` and ``answered`` rows; the harness's records are kept by a tag's generation relative to its
    entry's at the reset, answers with a tag outside this epoch's window (an earlier epoch's, in flight
    across the reset, or a guess) are free, and the aliasing limit is an assumption on ghost counters a
    reset does not clear (each row's allocations since it was written, below ``2**15 - 3``). ``allocator``:
    a mutant of the buffer's :class:`~hw.switch.reduction_buffer.EntryAllocator` (tests).
    """

    # A bounded check with yices; ``invariant=True``: k-induction.
    formal_options = {"engine": "smtbmc yices", "induction": False,
                      "script_extra": "memory_map\nopt -full\nopt_dff -sat\nopt_clean"}

    def __init__(self, ports: int = 4, entries: int = 2, timeout: int = 8, requests: int = 2,
                 answers_after_reads: bool = True, response_filter=None, only=None, invariant: bool = False,
                 events=None, epochs: bool = False, allocator=None):
        unknown = set(only or ()) - set(ENGINE_KEYS)
        if unknown:
            raise ValueError(f"unknown property {', '.join(sorted(unknown))}; valid: {', '.join(ENGINE_KEYS)}")
        if epochs and (requests != 2 or entries != 2):
            raise ValueError("epochs=True is written for 2 requests and 2 entries")
        self.epochs = epochs
        inductive = ENGINE_INDUCTIVE_KEYS + (("exact", "early") if requests <= 2 else ())
        bad = set(only or ENGINE_KEYS) - set(inductive) if invariant else set()
        if bad:
            raise ValueError(f"no invariant is stated for {', '.join(sorted(bad))}; "
                             f"invariant=True takes: {', '.join(inductive)}")
        self.only, self.invariant = None if only is None else set(only), invariant
        self.assume_alias = False
        if invariant:
            self.formal_options = {**self.formal_options, "induction": True,
                                   "script_extra": "flatten\nmemory_map\nopt -full"}
        self.entries, self.timeout = entries, timeout
        self.ports, self.requests, self.answers_after_reads = ports, requests, answers_after_reads
        self.engine = SmallReductionEngine(ports=ports, entries=entries, max_length=1, flit_width=128,
                                           timeout=timeout, groups=1, translate_slots=2,
                                           defer_translation=True, response_filter=response_filter,
                                           events=events, allocator=allocator)
        self.props = Properties()
        super().__init__({
            "req_valid": In(1), "req_mask": In(ports), "rd_ready": In(1), "out_ready": In(1),
            "r_valid": In(1), "r_src": In(3), "r_rtag": In(RTAG_BITS), "r_len": In(2), "r_code": In(2),
            "r_last": In(1), "chosen": In(SEQ_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        P = self.ports
        m.submodules.eng = e = self.engine
        EB = e.entry_bits

        # ---- Requests. The chosen request k (its sequence number ``chosen`` in the first cycle) carries
        # tag 1, every other one tag 0, so its answer is the one answer with tag 1 (the buffer harness's
        # convention); ``src`` is the sequence number, so k's RED_READs name it.
        n_req = Signal(SEQ_BITS)
        first = Signal(init=1)
        m.d.sync += first.eq(0)
        k, k_reg = Signal(SEQ_BITS), Signal(SEQ_BITS)
        m.d.comb += k.eq(Mux(first, self.chosen, k_reg) if self.requests > 1 else 0)    # one request: k is it
        m.d.sync += k_reg.eq(k)
        rq = Signal(HeaderLayout)
        m.d.comb += [rq.opcode.eq(Opcode.DYN_LD_REDUCE), rq.src.eq(n_req), rq.tag.eq(n_req == k), rq.length.eq(1),
                     rq.etype.eq(EType.S32), rq.redop.eq(RedOp.ADD), rq.route.dyn.mask.eq(self.req_mask),
                     e.req.valid.eq(self.req_valid), e.req.payload.data.eq(rq.as_value()),
                     e.req.payload.last.eq(1), e.rd.ready.eq(self.rd_ready), e.out.ready.eq(self.out_ready),
                     e.cfg.valid.eq(0)]
        req_take = e.req.valid & e.req.ready
        m.d.sync += n_req.eq(n_req + req_take)
        m.d.comb += Assume(~self.req_valid | (n_req < self.requests))
        mask_k = Signal(P)
        with m.If(req_take & (n_req == k)):
            m.d.sync += mask_k.eq(self.req_mask)

        # ---- Epochs (``epochs=True``): the tags are kept relative to each entry's generation at the last
        # reset (``base``), so a record slot is a tag of this epoch (relative generation 1 to 3) and any
        # other tag (an older epoch's, in flight across the reset) is free.
        ep = self._epoch(m, platform) if self.epochs else None
        self._ep = ep

        # ---- RED_READs: the tags that have been read (a destination answers only a read it received),
        # and request k's rtag (from its first read).
        rdh = Signal(HeaderLayout)
        m.d.comb += rdh.eq(e.rd.payload.data[0:HEADER_BITS])
        rd_take = e.rd.valid & e.rd.ready
        rd_rtag = Cat(rdh.tag, rdh.route.uni.xtag)
        rd_k = rd_take & (rdh.src == k)
        t = Signal(RTAG_BITS)
        with m.If(rd_k):
            m.d.sync += t.eq(rd_rtag)
        if ep is None:
            slot = lambda rtag: Cat(rtag[0:EB], rtag[EB:EB + 2])        # noqa: E731 (generation < 4)
        else:
            slot = lambda rtag: Cat(rtag[0:EB], ep.rel(rtag)[0:2])       # noqa: E731 (relative 1..3)
        read_tags = Signal(1 << (EB + 2))
        with m.If(rd_take):
            m.d.sync += read_tags.eq(read_tags | (Const(1, len(read_tags)) << slot(rd_rtag)))

        # ---- Responses: header, then payload flits until last.
        in_pkt = Signal()
        # A tag of this epoch: relative generation 1 to 3 (else free); without epochs, generation < 4.
        this_epoch = ep.in_ep(self.r_rtag) if ep is not None else Const(1)
        if ep is None:
            m.d.comb += Assume(self.r_rtag[EB:] < 4)
        rh = Signal(HeaderLayout)
        m.d.comb += [rh.opcode.eq(Opcode.RED_READ_RESP), rh.src.eq(self.r_src), rh.tag.eq(self.r_rtag[0:8]),
                     rh.route.uni.xtag.eq(self.r_rtag[8:16]), rh.length.eq(self.r_len),
                     rh.etype.eq(EType.S32), rh.route.uni.code.as_value().eq(self.r_code)]
        m.d.comb += [e.resp.valid.eq(self.r_valid), e.resp.payload.last.eq(self.r_last),
                     e.resp.payload.data.eq(Mux(in_pkt, 1, rh.as_value()))]
        resp_take = e.resp.valid & e.resp.ready
        with m.If(resp_take):
            m.d.sync += in_pkt.eq(~self.r_last)
        hdr_t = resp_take & ~in_pkt & (self.r_rtag == t) & (read_tags >> slot(t))[0]
        started = Signal(len(read_tags))       # the tags whose fan-out has started
        with m.If(e.start_valid):
            m.d.sync += started.eq(started | (Const(1, len(started)) << slot(e.start_rtag)))
        if self.answers_after_reads:
            m.d.comb += Assume(~(self.r_valid & ~in_pkt & this_epoch) | (read_tags >> slot(self.r_rtag))[0])
        else:
            # Early answers: a tag whose fan-out has not started yet (in an earlier cycle) is free too.
            m.d.comb += Assume(~(self.r_valid & ~in_pkt & this_epoch) | (read_tags >> slot(self.r_rtag))[0] |
                               ~(started >> slot(self.r_rtag))[0])
            early = Signal(len(read_tags))     # tags that got a good-looking answer before their fan-out
            with m.If(resp_take & ~in_pkt & this_epoch & (self.r_code == 0) &
                      ~(started >> slot(self.r_rtag))[0]):
                m.d.sync += early.eq(early | (Const(1, len(early)) << slot(self.r_rtag)))
        answered = Signal(P)           # destinations of k that sent a good answer (code 0) so far
        dup_seen = Signal()
        src_bit = Signal(P)
        m.d.comb += src_bit.eq(Mux(self.r_src < P, Const(1, P) << self.r_src[0:2], 0))
        with m.If(hdr_t & (self.r_code == 0)):
            m.d.sync += answered.eq(answered | src_bit)
            with m.If((answered & src_bit).any()):
                m.d.sync += dup_seen.eq(1)

        # ---- Answers on out.
        o = e.out
        o_take = o.valid & o.ready
        oh = Signal(HeaderLayout)
        m.d.comb += oh.eq(o.payload.data[0:HEADER_BITS])
        o_in = Signal()
        o_k = Signal()
        with m.If(o_take):
            m.d.sync += o_in.eq(~o.payload.last)
            with m.If(~o_in):
                m.d.sync += o_k.eq(oh.tag == 1)
        hdr_k = o_take & ~o_in & (oh.tag == 1)
        resp_k = hdr_k & (oh.opcode == Opcode.RED_RESP)
        pay_k = o_take & o_in & o_k
        n_ans = Signal(2)
        with m.If(hdr_k & (n_ans != 3)):
            m.d.sync += n_ans.eq(n_ans + 1)
        expected = sum(mask_k[i] for i in range(P))

        inv = Const(1)
        if self.invariant:
            inv = self._invariant(m, platform, n_req=n_req, k=k, o_in=o_in, n_ans=n_ans, o_k=o_k,
                                  ex=SimpleNamespace(mask_k=mask_k, t=t, read_tags=read_tags, in_pkt=in_pkt,
                                                     answered=answered, slot=slot,
                                                     started=started))
        p = self.props
        want = lambda key: self.only is None or key in self.only    # noqa: E731
        if want("exact"):
            p.check(m, "a RED_RESP only after every asked destination answered, one contribution each",
                    (~resp_k | ((mask_k & ~answered) == 0)) & (~pay_k | (o.payload.data[0:32] == expected)) & inv,
                    pay_k & (expected == 2) & dup_seen)
        once_cover = hdr_k & (expected == 2)
        if ep is not None:
            # With resets free the cover also has, in this epoch, an answer with an earlier epoch's tag that
            # the response filter tracked (its verdict found an old ``asked`` row of that generation, so a
            # fan-out started before a reset) and passed on unmarked: the buffer finds it stale.
            rs = elaborate_now(e, platform).submodules.responses
            elaborate_now(rs, platform)
            old_tracked = Signal()
            with m.If(rs.vcyc & (rs.ask_d.gen == rs.r_rtag[EB:]) & (rs.ask_d.mask != 0) & ~ep.in_ep(rs.r_rtag)):
                m.d.sync += old_tracked.eq(1)
            once_cover = once_cover & old_tracked
        if want("once"):
            p.check(m, "every request is answered at most once", (n_ans <= 1) & inv, once_cover)
        if want("early") and not self.answers_after_reads:
            early_k = (early >> slot(t))[0] & (read_tags >> slot(t))[0]
            p.check(m, "an answer before its entry's fan-out starts changes nothing (stale)",
                    ~early_k | ((~resp_k | ((mask_k & ~answered) == 0)) &
                                (~pay_k | (o.payload.data[0:32] == expected))) & inv,
                    pay_k & early_k & (expected == 2))
        return m

    def _epoch(self, m, platform):
        """The epoch view (``epochs=True``; resets free). A reset clears the registers and the harness's
        records, not the ``meta``, ``asked`` and ``answered`` rows: an epoch is the time since the last
        reset. ``wc[e]`` counts the allocator's writes to entry e in this epoch (at most the requests, 2),
        so ``base[e]`` = its ``meta`` generation less ``wc[e]`` is its generation at the epoch's start,
        constant through the epoch (each write bumps the row by one); a tag's *relative* generation is its
        generation less its entry's ``base``, and the tags of this epoch are those of relative generation
        1 to 3 (the epoch's allocations are 1 and 2; the window is the harness's generation < 4 of one
        epoch). A row or a tag outside the window is an older epoch's.

        The design's aliasing limit (``invariant=True``), stated with ghost counters that a reset does not
        clear: ``lag_a[e]``, ``lag_w[e]``, the allocations of entry e since its ``asked`` (``answered``) row
        was written, and ``lag_d``, those of the response filter's entry since its registered ``asked``
        read's row was written. The invariant says each row's generation plus its lag is the ``meta``
        row's (a row is written with a generation the entry was granted: ``asked`` at fan-out start, and
        ``answered`` with the registered ``asked`` read's); the harness assumes every lag below ``2**GB -
        3``: no entry is allocated ``2**15 - 3`` times without a fan-out (or a tracked answer) in between,
        after which the row would alias a new allocation's tag (the generation's wrap, the design's
        documented limit). So at a reset every row is outside the new epoch's window. An allocator that
        took its generation from anything but the ``meta`` row (a register a reset clears) breaks the
        invariant, not the assumption."""
        e = self.engine
        em = elaborate_now(e, platform)
        bm = elaborate_now(em.submodules.buf, platform)
        al = bm.submodules.allocator
        EB = e.entry_bits
        GB = RTAG_BITS - EB
        N = self.entries
        meta = [data.View(bm.submodules.meta.shape, v) for v in
                _memory_rows(m, bm.submodules.meta, "ep_meta", plain=True)]
        wc = [Signal(2, name=f"ep_wc{j}") for j in range(N)]
        for j in range(N):
            with m.If(al.w_en & (al.w_entry == j) & (wc[j] != 3)):
                m.d.sync += wc[j].eq(wc[j] + 1)
        base = [Signal(GB, name=f"ep_base{j}") for j in range(N)]
        m.d.comb += [base[j].eq(meta[j].gen - wc[j]) for j in range(N)]

        def rel_of(entry, gen):
            return (gen - _select(base, entry))[0:GB]

        def rel(rtag):
            return rel_of(rtag[0:EB], rtag[EB:])

        def window(r):
            return (r >= 1) & (r <= 3)

        lag_terms = []
        if self.invariant:
            rs = em.submodules.responses
            rm = elaborate_now(rs, platform)
            asked_mem, answered_mem = rm.submodules.asked, rm.submodules.answered
            rows = {name: _memory_rows(m, mem, f"ep_{name}", plain=True)
                    for mem, name in ((asked_mem, "asked"), (answered_mem, "answered"))}
            mw = [al.w_en & (al.w_entry == j) for j in range(N)]
            lag_a = [Signal(GB, name=f"ep_lag_a{j}", reset_less=True) for j in range(N)]
            lag_w = [Signal(GB, name=f"ep_lag_w{j}", reset_less=True) for j in range(N)]
            lag_d = Signal(GB, name="ep_lag_d", reset_less=True)
            a_w, w_w = asked_mem.write_ports[0], answered_mem.write_ports[0]
            a_r = asked_mem.read_ports[0]         # the filter's registered read at each response header
            for j in range(N):
                m.d.sync += [lag_a[j].eq(Mux(a_w.en & (a_w.addr == j), 0, lag_a[j]) + mw[j]),
                             lag_w[j].eq(Mux(w_w.en & (w_w.addr == j), lag_d, lag_w[j]) + mw[j])]
            r_e = rs.r_rtag[0:EB]
            m.d.sync += lag_d.eq(Mux(a_r.en, _select(lag_a, a_r.addr) + _select(mw, a_r.addr),
                                     lag_d + _select(mw, r_e)))
            limit = (1 << GB) - 4
            for j in range(N):
                m.d.comb += [Assume(lag_a[j] <= limit), Assume(lag_w[j] <= limit)]
                lag_terms += [(Value.cast(rows["asked"][j])[0:GB] + lag_a[j])[0:GB] == meta[j].gen,
                              (Value.cast(rows["answered"][j])[0:GB] + lag_w[j])[0:GB] == meta[j].gen]
            lag_terms.append(~rs.vcyc | ((rs.ask_d.gen + lag_d)[0:GB] == _select([v.gen for v in meta], r_e)))
        return SimpleNamespace(meta=meta, wc=wc, base=base, rel=rel, rel_of=rel_of, window=window,
                               in_ep=lambda rtag: window(rel(rtag)), lag_terms=lag_terms)

    def _invariant(self, m, platform, *, n_req, k, o_in, n_ans, o_k, ex):
        """The invariant "at most once" is stated with (``invariant=True``): the buffer's (its parts 1 to 5,
        :meth:`ReductionBufferHarness._invariant`, around the buffer inside the engine: k's allocation is
        the one with tag 1) and the engine's own on the way from the request to ``out``: the request check
        never drops a flit; the request-error FIFO holds header-only ``ERROR`` flits; the output queue,
        from its read pointer, continues the packet on ``out`` with whole packets and then the result
        merge's open packet (the buffer's); the answers to k on ``out``, in the output queue and in the
        error FIFO equal the buffer's answers to k plus k's request error (k's request went to one
        side, once)."""
        e, P, R = self.engine, self.ports, self.requests
        em = elaborate_now(e, platform)
        buf = em.submodules.buf
        reqs, merge = em.submodules.requests, em.submodules.results
        elaborate_now(reqs, platform)
        elaborate_now(merge, platform)
        errq, outq = em.submodules.errq, em.submodules.outq
        e_rptr, e_wptr, e_slots = observe_queue(errq, "storage", "inv_errq")
        q_rptr, q_wptr, q_slots = observe_queue(outq, "storage", "inv_outq")
        counts = self.only is None or bool({"exact", "early"} & self.only)
        view = BufferView(buf, entries=self.entries, max_length=1, timeout=self.timeout, max_expected=P,
                          only=("once", "exact") if counts else ("once",))
        view.count_bound = counts and R > 1
        w_pop = [Signal(3, name=f"ex_wpop{e}") for e in range(self.entries)]
        w_pend = [Signal(name=f"ex_wpend{e}") for e in range(self.entries)]
        view.count_limit = self._count_limit = (w_pop, w_pend)
        picked = Signal()
        a = buf.alloc.payload
        g = view._observe(m, platform, buf, picked, a.tag == 1, (a.length, a.expected, a.etype),
                          stale_mark=True, assume_alias=self.assume_alias)
        W = self.engine.flit_width
        terms = _Lined([n_req <= R, ~reqs.skip])
        # k's request error: the ERROR with tag 1 written into the error FIFO.
        bad_k = Signal()
        with m.If(errq.w_en & errq.w_rdy & (HeaderLayout(errq.w_data[0:HEADER_BITS]).tag == 1)):
            m.d.sync += bad_k.eq(1)
        terms += [~(bad_k & picked), (n_req > k) | (~bad_k & ~picked)]
        # The error FIFO: header-only ERROR flits.
        D = errq.depth
        terms.append((errq.level <= D) & ((e_rptr + errq.level)[0:len(e_wptr)] == e_wptr))
        err_k = []
        for j in range(D):
            fl, hd = _queued_flit(e_slots, e_rptr, j, W)
            live = errq.level > j
            terms.append(~live | ((hd.opcode == Opcode.ERROR) & fl.last))
            err_k.append(live & (hd.tag == 1))
        # The output queue: the rest of the packet on out, whole packets, then the merge's open packet.
        D = outq.depth
        terms.append((outq.level <= D) & ((q_rptr + outq.level)[0:len(q_wptr)] == q_wptr))
        rem = o_in
        q_k = []
        for j in range(D):
            fl, hd = _queued_flit(q_slots, q_rptr, j, W)
            live = outq.level > j
            is_h = live & ~rem
            terms += [~(live & rem) | fl.last,
                      ~is_h | ((hd.opcode == Opcode.RED_RESP) & ~fl.last & (hd.length == 1)) |
                              ((hd.opcode == Opcode.ERROR) & fl.last)]
            q_k.append(is_h & (hd.tag == 1))
            rem = Mux(live, is_h & ~fl.last, rem)
        terms += [rem == merge.in_pkt, merge.in_pkt == g.in_pkt]
        # The answers to k: on out, queued, in the error FIFO = the buffer's plus k's request error.
        terms.append((n_ans + sum(q_k) + sum(err_k))[0:3] == g.answers + bad_k)
        terms += self._no_alias(m, platform, buf, g, k, n_req)
        if counts:
            terms += self._counts(m, platform, em, g, k, o_in, o_k, ex, q_slots, q_rptr, outq, merge, n_req)
            if not self.epochs:
                # Reset once, at the start: a reset clears the registers, not the rows (see _counts).
                m.d.comb += Assume(~ResetSignal("sync"))
        # The buffer's contract: an abort carries a nonzero code.
        c = buf.contrib
        terms.append(~(c.valid & c.payload.abort) | (c.payload.code.as_value() != 0))
        terms.append(g.inv)
        sigs = []
        for i, t in enumerate(terms):
            sigs.append(Signal(name=f"einv_{i}_L{terms.lines[i]}"))
            m.d.comb += sigs[-1].eq(t)
        return Cat(*sigs).all()

    def _no_alias(self, m, platform, buf, g, k, n_req):
        """k's rtag is never granted again after k's grant (what the buffer harness assumes, the design's
        aliasing limit of ``2**15`` reuses of an entry): with at most ``requests`` requests, k's entry is
        written at most ``requests - 1 - k`` times after k's grant, each write bumping its generation from
        its ``meta`` row (which the allocator's stages agree with)."""
        bm = elaborate_now(buf, platform)
        al = bm.submodules.allocator
        al1, al2 = al.al1, al.al2
        N, EB = self.entries, buf.entry_bits
        meta = []
        for j in range(N):
            port = bm.submodules.meta.read_port(domain="comb")
            sig = Signal(port.data.shape(), name=f"alias_meta{j}")
            m.d.comb += [port.addr.eq(j), sig.eq(port.data)]
            meta.append(sig)

        def gen_of(e):
            out = meta[0].gen
            for j in range(1, N):
                out = Mux(e == j, meta[j].gen, out)
            return out

        rt = g.rt_reg
        e_k, g_k = rt[0:EB], rt[EB:]
        GB = len(g_k)
        k_taken_now = g.k_taken | (g.grant_take & g.known_now & (g.n_grant == g.k_seq))
        allocs_after = (g.n_alloc - g.k_seq - 1)[0:2]       # allocations accepted after k's (once picked)
        w_after = Signal(2)                # writes of k's entry after k's grant (saturating)
        with m.If(al.w_en & (al.w_entry == g.rt[0:EB]) & k_taken_now & (w_after != 3)):
            m.d.sync += w_after.eq(w_after + 1)
        al1_k = al1.valid & (al1.entry == e_k)
        self._w_after, self._gen_of = w_after, gen_of
        return [
            ~g.picked | ((allocs_after + k + 1) <= n_req),
            g.picked | ~g.k_taken,
            g.k_taken | (w_after == 0),
            ~g.k_taken | ((w_after + al1_k) <= allocs_after),
            ~al2.valid | (gen_of(al2.entry) == al2.gen),
            ~al1.valid | (al.meta_rd.data.gen == gen_of(al1.entry)),
            ~g.k_taken | (gen_of(e_k) == (g_k + w_after)[0:GB]),
            ~(g.k_taken & al2.valid & (al2.entry == e_k)) | (w_after != 0),
        ]

    def _observed_parts(self, m, platform, em):
        """The engine's sub-blocks the count invariants read, elaborated once, with the harness's views of
        them: (buf, responses, its module, fanout, info, rdq, the two queues' read pointers, write pointers
        and slots, the buffer's module, and the rows of the asked, answered and meta memories)."""
        buf = em.submodules.buf
        rs = em.submodules.responses
        rm = elaborate_now(rs, platform)
        fo = em.submodules.fanout
        elaborate_now(fo, platform)
        info, rdq = em.submodules.info, em.submodules.rdq
        i_rptr, i_wptr, i_slots = observe_queue(info, "storage", "inv_info")
        r_rptr, r_wptr, r_slots = observe_queue(rdq, "storage", "inv_rdq")
        bm = elaborate_now(buf, platform)
        asked, answered, meta = (_memory_rows(m, mem, f"ex_{name}", plain=True) for mem, name in
                                 ((rm.submodules.asked, "asked"), (rm.submodules.answered, "answered"),
                                  (bm.submodules.meta, "meta")))
        return (buf, rs, rm, fo, info, rdq, i_rptr, i_wptr, i_slots, r_rptr, r_wptr, r_slots, bm, asked,
                answered, meta)

    def _counts(self, m, platform, em, g, k, o_in, o_k, ex, q_slots, q_rptr, outq, merge, n_req):
        """The invariant of "one contribution each" and the early answer, with one request (k) and one
        reset (at the start: a reset clears the registers, not the ``meta``, ``asked`` and ``answered``
        rows, and across resets an entry's rows could alias once its generation wraps): every allocation
        is k's (the allocator's stages and busy entries hold tag 1); an entry's ``meta`` generation is 1
        once k's grant is offered there, else 0; its ``asked`` row is ``{1, k's mask}`` once k's fan-out
        started there, else empty; its ``answered`` row is empty, or of generation 1 within k's mask at
        k's entry; k's descriptor waits in the read-descriptor FIFO until its fan-out starts; the fan-out,
        the ``rd`` queue and the harness's read records (``t``, the read tags, the started fan-outs) name
        only k's rtag, after its start; the response filter's framing is the harness's, its registered
        row reads are the rows (or, for ``asked``, empty: the fan-out started in the header's cycle); a
        response past its verdict, neither dropped nor stale, is k's, from a destination in both the
        ``answered`` row and the harness's record of good answers; a verdict that tracks k's rtag comes
        after k's reads left; and the count: k's contributions so far (the buffer's reference model) plus
        the first payload flit still to come are at most the destinations in both records, which gives the
        buffer its contract (at most ``expected`` contributions, here proven, not assumed). On ``out``:
        k's result packets in the output queue and on ``out`` come from an entry the reference model
        ended complete, and their payload flits carry the expected count."""
        if self.requests > 1:
            return self._counts_two(m, platform, em, g, k, o_in, o_k, ex, q_slots, q_rptr, outq, merge, n_req)
        P, N = self.ports, self.entries
        (buf, rs, rm, fo, info, rdq, i_rptr, i_wptr, i_slots, r_rptr, r_wptr, r_slots, bm, asked, answered,
         meta) = self._observed_parts(m, platform, em)
        EB = buf.entry_bits

        at = _select
        popcount = lambda v: sum(v[i] for i in range(len(v)))       # noqa: E731
        mask_k, t, read_tags, h_ans = ex.mask_k, ex.t, ex.read_tags, ex.answered
        rt = g.rt_reg
        e_k = rt[0:EB]
        al = bm.submodules.allocator
        meta_v = [data.View(bm.submodules.meta.shape, v) for v in meta]
        tag_at = lambda e: at([v.tag for v in meta_v], e)         # noqa: E731
        terms = [~al.al1.valid | (g.picked & (al.al1.req.tag == 1)),
                 ~al.al2.valid | (g.picked & (tag_at(al.al2.entry) == 1)),
                 ~g.picked | ((popcount(mask_k) == g.req_exp) & (mask_k != 0)),
                 *[~buf.busy[j] | (g.picked & ((al.al1.valid & (al.al1.entry == j)) |
                                               (g.known_now & (g.rt[0:EB] == j) & (meta_v[j].tag == 1) &
                                                (meta_v[j].gen == g.rt[EB:]))))
                   for j in range(N)],
                 ~g.known_now | (g.rt[EB:] == 1)]
        one = Cat(Const(1, RTAG_BITS - EB))        # generation 1: the first use of an entry
        k_row = Cat(one, mask_k)
        for e in range(N):
            terms += [meta[e][0:RTAG_BITS - EB] == Mux(g.known_now & (g.rt[0:EB] == e), 1, 0),
                      asked[e] == Mux(g.k_taken & (e_k == e), k_row, 0),
                      Mux(g.k_taken & (e_k == e),
                          (answered[e] == 0) | ((answered[e][0:RTAG_BITS - EB] == 1) &
                                                ((answered[e][RTAG_BITS - EB:] & ~mask_k) == 0)),
                          answered[e] == 0)]
        # The read side: k's descriptor waits in the FIFO until its fan-out starts.
        terms += [(info.level <= info.depth) & ((i_rptr + info.level)[0:len(i_wptr)] == i_wptr),
                  info.level == (g.picked & ~g.k_taken)]
        i_head = data.View(read_info_layout(P), Mux(i_rptr == 0, i_slots[0], Mux(i_rptr == 1, i_slots[1],
                                                    Mux(i_rptr == 2, i_slots[2], i_slots[3]))))
        terms.append((info.level == 0) | ((i_head.mask == mask_k) & (i_head.src == k) & ~i_head.static &
                                          (i_head.length == 1)))
        terms += [~fo.fo_valid | (g.k_taken & (fo.fo_rtag == rt) & ((fo.fo.mask & ~mask_k) == 0) &
                                  (fo.fo.src == k) & ~fo.fo.static & (fo.fo.length == 1))]
        terms.append((rdq.level <= rdq.depth) & ((r_rptr + rdq.level)[0:len(r_wptr)] == r_wptr))
        for j in range(rdq.depth):
            fl, hd = _queued_flit(r_slots, r_rptr, j, self.engine.flit_width)
            terms.append(~(rdq.level > j) | (g.k_taken & (hd.src == k) & (Cat(hd.tag, hd.route.uni.xtag) == rt)))
        s_k = ex.slot(rt)
        terms += [Mux(read_tags != 0, g.k_taken & (t == rt) & (read_tags == (Const(1, len(read_tags)) << s_k)),
                      Const(1))]
        if not self.answers_after_reads:
            terms.append(ex.started == Mux(g.k_taken, Const(1, len(ex.started)) << s_k, 0))
        # The response filter: in step with the harness's framing; its registered rows are the rows.
        terms.append(ex.in_pkt == (rs.in_payload | rs.dropping))
        r_e = rs.r_rtag[0:EB]
        terms += [~rs.vcyc | (rs.ans_d.as_value() == at(answered, r_e)),
                  ~rs.vcyc | (rs.ask_d.as_value() == at(asked, r_e)) | (rs.ask_d.as_value() == 0),
                  ~rs.vcyc | ~rs.dropping]
        # A response past its verdict, neither dropped nor stale: k's, from a destination in both records.
        src_bit = Mux(rs.r_src < P, Const(1, P) << rs.r_src[0:2], 0)
        A = Signal(P, name="ex_A")
        m.d.comb += A.eq(Mux(g.k_taken, at(answered, e_k)[RTAG_BITS - EB:], 0))
        live_resp = rs.in_payload & ~rs.vcyc & ~rs.r_drop & ~rs.r_stale
        terms.append(~live_resp | (g.k_taken & (rs.r_rtag == rt) & ((A & h_ans & src_bit) != 0) &
                                   (rs.r_code == 0)))
        # The verdict's view of a tracked answer for k: asked after k's reads left.
        tracked_k = rs.vcyc & (rs.r_rtag == rt) & (rs.ask_d.as_value() != 0)
        terms.append(~tracked_k | (g.k_taken & (read_tags != 0)))
        pend = live_resp & (rs.r_k == 0)
        both = A & h_ans
        terms.append(~g.known | ((g.cnt[0] + (pend & ~g.ended)) <= popcount(both)))
        terms.append(g.known | ((g.cnt[0] == 0) & (both == 0)))
        # The buffer's contract, here the engine's: at most ``expected`` contributions to k's flit.
        terms.append(~(g.good & (g.c.flit == 0)) | (g.cnt[0] != g.req_exp))
        return terms + self._result_terms(g, o_in, o_k, q_slots, q_rptr, outq, merge)

    def _counts_two(self, m, platform, em, g, k, o_in, o_k, ex, q_slots, q_rptr, outq, merge, n_req):
        """The invariant of "one contribution each" and the early answer with two requests (k and another;
        reset once, at the start), stated for both requests' entries, not k's alone:

        * generations: each allocator write bumps its entry's, the ``meta`` rows' generations add up to the
          writes (at most the requests), the allocator's offered grant is of generation 1 or more; only
          k's ``meta`` row carries tag 1;
        * ``asked``: an entry's row is its latest started fan-out, the generation before its ``meta`` row's
          while the allocator still offers the grant (empty at generation 0), with as many destinations as
          the entry's ``expected``; the harness's record of started tags (``started``) agrees, and a tag
          was read (``read_tags``) only once started; k's row, while it has k's generation, is k's mask;
        * ``answered``: an entry's row is of an older generation than its ``asked`` row, or of the same one
          within its mask; for k a ghost ``A`` (the destinations marked with k's rtag) replaces the row,
          which equals it while it holds k's generation (the other request overwrites it once k's entry is
          reused);
        * the read side: the read-descriptor FIFO holds the descriptors of the allocations not yet granted,
          in the allocator's order (k's with k's mask, each with as many destinations as its allocation's
          ``expected``); the fan-out and the ``rd`` queue carry started tags, k's exactly when their source
          is k;
        * the response filter: its framing is the harness's; a verdict's registered ``answered`` read is the
          row, its ``asked`` read the row or an older one (then the ``answered`` row is no newer than it);
          a response past its verdict, neither dropped nor stale, carries a started tag, and k's comes from
          a destination in ``A`` and in the harness's record of good answers;
        * the count: k's contributions so far (the buffer's reference model) plus the first payload flit
          still to come are at most the destinations in both records; and for every entry (the buffer's
          ``count_bound``), its newest count plus the contribution at stage b and the live answer still to
          send its first payload flit are at most the destinations that answered its generation (the
          engine's rows give the buffer its contract for the other request too).

        On ``out``, as with one request (:meth:`_result_terms`).

        With resets free (``epochs=True``) the generations are relative to the entry's at the last reset
        (:meth:`_epoch`) and a row is ranked by them (1 to 3: written in this epoch; 0: an earlier epoch's):
        the ``meta`` rows' relative generations are the epoch's writes; an entry in use was allocated in
        this epoch; only rows written in this epoch are bound to carry tag 1 for k alone; an ``asked`` row
        of rank 0 is one no fan-out of this epoch wrote (its mask free), and the ``answered`` row's rank is
        at most the ``asked`` row's; the verdict's registered ``asked`` read is ranked likewise; a live answer
        with a tag of this epoch was started, one with an earlier epoch's tag is free (the buffer finds it
        stale: an active entry's generation is of this epoch); and each row's generation plus its ghost lag
        is its ``meta`` row's."""
        P, N, R = self.ports, self.entries, self.requests
        (buf, rs, rm, fo, info, rdq, i_rptr, i_wptr, i_slots, r_rptr, r_wptr, r_slots, bm, asked, answered,
         meta) = self._observed_parts(m, platform, em)
        EB = buf.entry_bits
        GB = RTAG_BITS - EB
        at = _select
        asked_mem, answered_mem = rm.submodules.asked, rm.submodules.answered
        popcount = lambda v: sum(v[i] for i in range(len(v)))       # noqa: E731
        gen = lambda row: Value.cast(row)[0:GB]                       # noqa: E731
        msk = lambda row: Value.cast(row)[GB:]                        # noqa: E731
        mask_k, t, read_tags, h_ans, started = ex.mask_k, ex.t, ex.read_tags, ex.answered, ex.started
        slot = ex.slot
        bit_at = lambda v, rtag: (v >> slot(rtag))[0]               # noqa: E731
        rt = g.rt_reg
        e_k, g_k = rt[0:EB], rt[EB:]
        al = bm.submodules.allocator
        al1, al2 = al.al1, al.al2
        meta_v = [data.View(bm.submodules.meta.shape, v) for v in meta]
        kt = g.k_taken
        ep = self._ep
        # Generations relative to the epoch (``epochs=True``, :meth:`_epoch`), else absolute (one reset, at
        # the start: the rows start at generation 0). ``rk``: a row's rank, its relative generation within
        # this epoch's window (1 to 3), else 0 (an older epoch's row, or generation 0 of one reset).
        if ep is None:
            rel_e = lambda e, gg: gg                                  # noqa: E731
            rk = lambda e, gg: gg                                     # noqa: E731
        else:
            rel_e = lambda e, gg: ep.rel_of(e, gg)                    # noqa: E731
            rk = lambda e, gg: Mux(ep.window(ep.rel_of(e, gg)), ep.rel_of(e, gg)[0:2], 0)   # noqa: E731
        terms = _Lined([~g.picked | ((popcount(mask_k) == g.req_exp) & (mask_k != 0))])
        # Generations: every allocator write bumps its entry's; the rows start at 0 (reset once).
        n_acc, n_w = Signal(2, name="ex_n_acc"), Signal(2, name="ex_n_w")
        with m.If(buf.alloc.valid & buf.alloc.ready & (n_acc != 3)):
            m.d.sync += n_acc.eq(n_acc + 1)
        with m.If(al.w_en & (n_w != 3)):
            m.d.sync += n_w.eq(n_w + 1)
        if ep is None:
            terms += [n_acc <= n_req, (n_w + al1.valid) == n_acc,
                      sum(meta_v[e].gen for e in range(N)) == n_w, g.picked | ~g.known_now,
                      ~al2.valid | (self._gen_of(al2.entry) >= 1)]
            terms += [~g.known | ((g_k >= 1) & (g_k <= R))]
        else:       # the epoch's writes per entry (its meta generation less the base, by definition)
            terms += [n_acc <= n_req, (n_w + al1.valid) == n_acc,
                      sum(ep.wc) == n_w, g.picked | ~g.known_now,
                      ~al2.valid | (_select(ep.wc, al2.entry) >= 1)]
            terms += [~g.known | ((rel_e(e_k, g_k) >= 1) & (rel_e(e_k, g_k) <= _select(ep.wc, e_k)))]
            # An entry in use was allocated in this epoch (a reset clears busy): written, or in the
            # allocator's first stage.
            terms += [~buf.busy[e] | (ep.wc[e] >= 1) | (al1.valid & (al1.entry == e)) for e in range(N)]
            terms += ep.lag_terms       # each row's generation and its ghost lag (the aliasing limit)
        # Only k's rows carry tag 1 (the harness tags k's request alone); with epochs, of the rows written
        # in this epoch (an older epoch's may carry its k's tag).
        terms += [((meta_v[e].tag == 1) == (g.known_now & (g.rt[0:EB] == e) & (meta_v[e].gen == g.rt[EB:]))) |
                  (Const(0) if ep is None else (ep.wc[e] == 0))
                  for e in range(N)]
        terms += [(meta_v[e].tag == 0) | (meta_v[e].tag == 1) for e in range(N)]
        # asked: an entry's row is its latest started fan-out (the generation before the meta row's while
        # the allocator still offers its grant); the harness's record of starts says the same.
        A = Signal(P, name="ex_A")       # k's destinations marked in answered with k's rtag (a ghost)
        aw = answered_mem.write_ports[0]
        aw_k = aw.en & kt & (aw.addr == e_k) & (gen(aw.data) == g_k)
        with m.If(aw_k):
            m.d.sync += A.eq(A | msk(aw.data))
        for e in range(N):
            pend_e = al2.valid & (al2.entry == e)
            ag, am = gen(asked[e]), msk(asked[e])
            wg, wm = gen(answered[e]), msk(answered[e])
            if ep is None:
                terms += [ag == (meta_v[e].gen - pend_e)[0:GB], (am == 0) == (ag == 0),
                          wg <= ag, (wm == 0) == (wg == 0), (wg != ag) | ((wm & ~am) == 0),
                          (ag != meta_v[e].gen) | (ag == 0) | (popcount(am) == meta_v[e].expected)]
            else:
                # The asked row is the epoch's latest started fan-out, or an older epoch's row while none
                # started in this one; the answered row is of this epoch only once asked is, and no newer.
                ra, rw = rk(e, ag), rk(e, wg)
                s_e = (ep.wc[e] - pend_e)[0:2]
                terms += [ra == s_e, (ra == 0) | (am != 0),
                          rw <= ra, (rw == 0) | (wm != 0), (rw == 0) | (rw != ra) | ((wm & ~am) == 0),
                          (ra == 0) | (ra != ep.wc[e]) | (popcount(am) == meta_v[e].expected)]
                ag = ra     # the records below are kept by relative generation
            for gg in range(4):
                terms.append(((started >> (e | (gg << EB)))[0]) == ((gg >= 1) & (ag >= gg)))
                terms.append(~(read_tags >> (e | (gg << EB)))[0] | ((started >> (e | (gg << EB)))[0]))
        ag_k, am_k = gen(at(asked, e_k)), msk(at(asked, e_k))
        wg_k, wm_k = gen(at(answered, e_k)), msk(at(answered, e_k))
        terms += [~(kt & (ag_k == g_k)) | (am_k == mask_k),
                  ~kt | (rk(e_k, ag_k) >= rel_e(e_k, g_k)),
                  ~(kt & (self._w_after == 0)) | (ag_k == g_k),
                  kt | (A == 0), (A & ~mask_k) == 0,
                  ~(kt & (wg_k == g_k)) | (wm_k == A),
                  ~(kt & (rk(e_k, wg_k) < rel_e(e_k, g_k))) | (A == 0),
                  ~(kt & bit_at(read_tags, rt)) | (t == rt)]
        # The read side: the descriptors of the allocations not yet granted wait in the FIFO, in order.
        terms.append((info.level <= info.depth) & ((i_rptr + info.level)[0:len(i_wptr)] == i_wptr))
        terms.append(info.level == (g.n_alloc - g.n_grant)[0:2])
        k_pos = (g.k_seq - g.n_grant)[0:2]
        exp_of = [Mux(al2.valid, data.View(bm.submodules.meta.shape, _select(meta, al2.entry)).expected,
                      al1.req.expected), al1.req.expected, 0, 0]       # the pending allocations', in order
        for j in range(info.depth):
            idx = (i_rptr + j)[0:len(i_rptr)]
            row = data.View(read_info_layout(P), _select(i_slots, idx))
            live = info.level > j
            is_k = g.picked & ~kt & (k_pos == j)
            terms.append(~live | (~row.static & (row.length == 1) & (row.src < n_req) & ((row.src == k) == is_k) &
                                  (row.mask != 0) & (popcount(row.mask) == exp_of[j]) &
                                  (~is_k | (row.mask == mask_k))))
        in_win = (lambda rtag: rtag[EB:] < 4) if ep is None else ep.in_ep      # noqa: E731
        terms.append(~fo.fo_valid | (bit_at(started, fo.fo_rtag) & in_win(fo.fo_rtag) & (fo.fo.src < n_req) &
                                     ~fo.fo.static &
                                     (fo.fo.mask != 0) &
                                     (fo.fo.length == 1) & ((fo.fo.src == k) == (kt & (fo.fo_rtag == rt))) &
                                     ((fo.fo.src != k) | ((fo.fo.mask & ~mask_k) == 0))))
        terms.append((rdq.level <= rdq.depth) & ((r_rptr + rdq.level)[0:len(r_wptr)] == r_wptr))
        for j in range(rdq.depth):
            fl, hd = _queued_flit(r_slots, r_rptr, j, self.engine.flit_width)
            q_rt = Cat(hd.tag, hd.route.uni.xtag)
            terms.append(~(rdq.level > j) | (bit_at(started, q_rt) & in_win(q_rt) & (hd.src < n_req) &
                                             ((hd.src == k) == (kt & (q_rt == rt)))))
        # The response filter: in step with the harness's framing; its registered rows.
        terms.append(ex.in_pkt == (rs.in_payload | rs.dropping))
        r_e = rs.r_rtag[0:EB]
        ask_d = rs.ask_d.as_value()
        dg, dm = gen(ask_d), msk(ask_d)
        if ep is None:
            terms += [~rs.vcyc | (dg <= gen(at(asked, r_e))),
                      ~rs.vcyc | ((dm == 0) == (dg == 0)),
                      ~rs.vcyc | (ask_d == at(asked, r_e)) | (dg < gen(at(asked, r_e))),
                      ~(rs.vcyc & (ask_d != at(asked, r_e))) | (gen(at(answered, r_e)) <= dg)]
        else:       # by rank: the registered asked read is the row or an older one (an older epoch's too)
            rd, ra_row = rk(r_e, dg), rk(r_e, gen(at(asked, r_e)))
            terms += [~rs.vcyc | (rd <= ra_row),
                      ~rs.vcyc | (rd == 0) | (dm != 0),
                      ~rs.vcyc | (ask_d == at(asked, r_e)) | (rd < ra_row),
                      ~(rs.vcyc & (ask_d != at(asked, r_e))) | (rk(r_e, gen(at(answered, r_e))) <= rd)]
        terms += [~rs.vcyc | (rs.ans_d.as_value() == at(answered, r_e)),
                  ~(rs.vcyc & kt & (r_e == e_k) & (dg == g_k)) | (dm == mask_k),
                  ~rs.vcyc | ~rs.dropping]
        src_bit = Mux(rs.r_src < P, Const(1, P) << rs.r_src[0:2], 0)
        live_resp = rs.in_payload & ~rs.vcyc & ~rs.r_drop & ~rs.r_stale
        live_k = live_resp & (rs.r_rtag == rt) & g.known
        # Each entry's destinations that answered its current generation, and a live answer to it whose
        # first payload flit is still to come (the buffer's count bound, ``count_limit``).
        w_pop, w_pend = self._count_limit
        for e in range(N):
            wg, wm = gen(answered[e]), msk(answered[e])
            m.d.comb += [w_pop[e].eq(Mux(wg == meta_v[e].gen, popcount(wm), 0)),
                         w_pend[e].eq(live_resp & (rs.r_k == 0) & (rs.r_rtag == Cat(Const(e, EB), meta_v[e].gen)))]
        if ep is None:
            terms += [rs.r_rtag[EB:] < 4, ~live_resp | bit_at(started, rs.r_rtag)]
        else:       # a live answer with a tag of this epoch was started; an older epoch's is free
            terms += [~live_resp | ~ep.in_ep(rs.r_rtag) | bit_at(started, rs.r_rtag)]
        terms.append(~live_k | (kt & ((A & h_ans & src_bit) != 0) & (rs.r_code == 0)))
        tracked_k = rs.vcyc & g.known & (rs.r_rtag == rt) & (dg == g_k) & (dm != 0)
        terms.append(~tracked_k | (kt & bit_at(read_tags, rt)))
        pend = live_k & (rs.r_k == 0)
        both = A & h_ans
        terms.append(~g.known | ((g.cnt[0] + (pend & ~g.ended)) <= popcount(both)))
        terms.append(g.known | ((g.cnt[0] == 0) & (A == 0)))
        terms.append(~(g.good & (g.c.flit == 0)) | (g.cnt[0] != g.req_exp))
        terms += self._result_terms(g, o_in, o_k, q_slots, q_rptr, outq, merge)
        return terms

    def _result_terms(self, g, o_in, o_k, q_slots, q_rptr, outq, merge):
        """k's result flits: the output queue's payload flits of k's packet carry the expected count, and
        k's packets there and on ``out`` come from an entry the reference model ended complete."""
        terms = []
        in_k = o_in & o_k
        rem = o_in
        for j in range(outq.depth):
            fl, hd = _queued_flit(q_slots, q_rptr, j, self.engine.flit_width)
            live = outq.level > j
            is_h = live & ~rem
            terms += [~(live & rem & in_k) | ((fl.data[0:32] == g.req_exp) & g.ended & (g.end_code == 0)),
                      ~(is_h & (hd.opcode == Opcode.RED_RESP) & (hd.tag == 1)) | (g.ended & (g.end_code == 0))]
            in_k = Mux(live, is_h & (hd.opcode == Opcode.RED_RESP) & (hd.tag == 1), in_k)
            rem = Mux(live, is_h & ~fl.last, rem)
        terms.append(~(rem & in_k) | (merge.in_pkt & g.o_is_k))
        terms.append(~(merge.in_pkt & g.o_is_k) | (rem & in_k))
        terms.append(~(o_in & o_k) | (g.ended & (g.end_code == 0)))
        return terms
