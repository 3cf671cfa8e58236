"""Formal proofs of the reduction buffer (``dysharp formal reduction_buffer``/
``reduction_buffer_live``, :mod:`verif.formal.reduction`): the six safety properties are proved by
k-induction (the whole block is slow; "counted stale" and the framing are its fast form) and an allocator
that keeps the generation fails "counted stale"; a fast bounded form of the cause and timeout properties
(at a timeout of 8) holds and is covered; "at most once", "names its cause", the timeout and the framing
each fail on a mutant event block or drain (slow); an ALU that ignores
its ``chain`` operand (a contribution right behind another to the same flit loses the first) must fail
"exactly the expected contributions"; at 2 entries (below the product's floor) the completion FIFO
refuses an event and an allocation is never answered, while at 3 the liveness property is proved by
k-induction (slow) and its bound of 11 cycles of ``out.ready`` is tight (a simulated trace needs them all,
default suite); an answer that guesses an entry's tag before its
fan-out starts (outside the network's contract) is stale in the reduction engine and completes nothing,
and a filter that does not mark it completes the entry early; with resets free, an allocator whose
generations restart at a reset counts an answer to a fan-out from before it; the registered blocks are
slow tests."""

import pytest
from amaranth.hdl import Array, Cat, Const, Module, Signal
from amaranth.lib.wiring import connect, flipped

from dysharp.cli import main
from hw.packet import ErrorCode
from hw.switch.reduction_buffer import EntryAllocator, EntryEvents, ResultDrain
from hw.switch.reduction_responses import ResponseFilter
from verif.formal.reduction import IntAddALU, ReductionBufferHarness, ReductionEngineHarness, SmallReductionBuffer
from verif.formal.runner import run_formal

EXACT_ENGINE = "a RED_RESP only after every asked destination answered, one contribution each"


class NoChainALU(IntAddALU):
    """Mutant: the stage-1 forwarding (``chain``) is ignored."""

    def __init__(self, **params):
        super().__init__(use_chain=False, **params)


class NoGenBump(EntryAllocator):
    """Mutant: an allocation keeps its entry's generation (the real allocator around it reads the
    generation one lower), so every use of an entry has the same rtag and a late contribution for a freed
    entry's tag is taken by the entry's next allocation."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.real = real = EntryAllocator(entries=self.entries, entry_bits=self.entry_bits,
                                                  gen_bits=self.gen_bits)
        connect(m, flipped(self.alloc), real.alloc)
        connect(m, real.grant, flipped(self.grant))
        m.d.comb += [real.free.eq(self.free), real.room.eq(self.room), real.wait.eq(self.wait),
                     self.picked.eq(real.picked), self.meta_rd.addr.eq(real.meta_rd.addr),
                     self.meta_rd.en.eq(real.meta_rd.en), real.meta_rd.data.eq(self.meta_rd.data),
                     real.meta_rd.data.gen.eq(self.meta_rd.data.gen - 1),
                     self.w_en.eq(real.w_en), self.w_entry.eq(real.w_entry), self.w_meta.eq(real.w_meta),
                     self.activate.eq(real.activate)]
        return m


class GenInRegisters(EntryAllocator):
    """Mutant: the generations live in registers (one per entry, bumped at each allocation) instead of the
    ``meta`` rows, so a reset restarts them while the engine's ``asked``/``answered`` rows (memories, not
    reset) keep the old ones: after a reset the first allocation of an entry gets a tag its rows may
    already hold. Without a reset it behaves as the real allocator (rows and registers both start at 0)."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.real = real = EntryAllocator(entries=self.entries, entry_bits=self.entry_bits,
                                                  gen_bits=self.gen_bits, ports=self.ports)
        connect(m, flipped(self.alloc), real.alloc)
        connect(m, real.grant, flipped(self.grant))
        gens = [Signal(self.gen_bits, name=f"gen{j}") for j in range(self.entries)]
        held = Signal(self.gen_bits)         # the picked entry's register, read as the meta row would be
        with m.If(real.meta_rd.en):
            m.d.sync += held.eq(Array(gens)[real.meta_rd.addr])
        for j in range(self.entries):
            with m.If(real.w_en & (real.w_entry == j)):
                m.d.sync += gens[j].eq(gens[j] + 1)
        m.d.comb += [real.free.eq(self.free), real.room.eq(self.room), real.wait.eq(self.wait),
                     self.picked.eq(real.picked), self.meta_rd.addr.eq(real.meta_rd.addr),
                     self.meta_rd.en.eq(real.meta_rd.en), real.meta_rd.data.eq(self.meta_rd.data),
                     real.meta_rd.data.gen.eq(held),
                     self.w_en.eq(real.w_en), self.w_entry.eq(real.w_entry), self.w_meta.eq(real.w_meta),
                     self.activate.eq(real.activate)]
        return m


class TimeoutKeepsEntry(EntryEvents):
    """Mutant: a timeout answers its entry but leaves it active, so the scanner finds it expired again."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        with m.If(self.event.valid & (self.event.payload[self.entry_bits:] == ErrorCode.TIMEOUT.value)):
            m.d.comb += self.clear.eq(0)
        return m


class AbortAsMismatch(EntryEvents):
    """Mutant: an abort's answer carries ``TYPE_MISMATCH`` instead of the abort's own code."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        with m.If(self.live & self.abort):
            m.d.comb += self.event.payload.eq(Cat(self.entry, Const(ErrorCode.TYPE_MISMATCH.value, 8)))
        return m


class TimeoutAfterOneCycle(EntryEvents):
    """Mutant: the scanner's threshold is 1 cycle, whatever the buffer's ``timeout``."""

    def __init__(self, **params):
        super().__init__(**{**params, "timeout": 1})


class DrainWithoutLast(ResultDrain):
    """Mutant: the drain never marks a packet's last flit."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.out.payload.last.eq(0)
        return m


@pytest.mark.slow
@pytest.mark.parametrize("key, mutant", [("once", {"events": TimeoutKeepsEntry}),
                                         ("cause", {"events": AbortAsMismatch}),
                                         # At the harness's default timeout of 4 cycles the race window
                                         # (an entry ending as it expires) covers every age from 1 on.
                                         ("timeout", {"events": TimeoutAfterOneCycle, "timeout": 8}),
                                         ("framing", {"drain": DrainWithoutLast})])
def test_each_buffer_property_fails_its_mutant(key, mutant, tmp_path):
    """Each of these properties fails on a buffer with one sub-block broken its way (the other properties
    have their own mutants below): a bounded check finds the counterexample (about 6 CPU-s each: slow)."""
    h = ReductionBufferHarness(entries=2, only=(key,), **mutant)
    res, _ = run_formal(f"rb_mut_{key}", h, h.props, depth=14, cover_depth=None, workdir=tmp_path)
    assert len(res) == 1 and res[0].proof.startswith("FAILS") and not res[0].ok, res


def test_stale_is_proved_by_k_induction(tmp_path):
    """A fast form of the block ``reduction_buffer`` (the whole block is a slow test below): "a contribution
    for a tag not in flight is counted stale", stated with the invariant without its per-flit counts
    (``only`` leaves "exact" out), closes by k-induction at k = 12 and its cover is reached."""
    h = ReductionBufferHarness(entries=2, only=("stale", "framing"), invariant=True)
    res, _ = run_formal("rb_k_stale", h, h.props, depth=12, cover_depth=14, workdir=tmp_path)
    assert [r.proof for r in res] == ["proven (k-induction, k = 12)"] * 2 and all(r.ok for r in res), res


def test_invariant_is_only_stated_for_the_inductive_properties():
    with pytest.raises(ValueError, match="no invariant is stated for answered"):
        ReductionBufferHarness(entries=2, only=("answered",), invariant=True)      # 3 entries or more
    with pytest.raises(ValueError, match="per-flit count invariant .* is written for 2 entries, got 3"):
        ReductionBufferHarness(entries=3, only=("exact",), invariant=True)


def test_an_allocator_that_keeps_the_generation_counts_a_late_contribution(tmp_path):
    """Without the generation bump a contribution for k's tag after k ended is taken by the entry's next
    allocation instead of being counted stale (checked without the invariant, which the mutant breaks)."""
    h = ReductionBufferHarness(entries=2, only=("stale",), allocator=NoGenBump)
    res, _ = run_formal("rb_nogen", h, h.props, depth=17, cover_depth=None, workdir=tmp_path)
    assert res[0].proof.startswith("FAILS"), res


def test_timeout_and_error_causes_hold_and_are_covered(tmp_path):
    """At a timeout of 8 cycles, where a timeout answer before the entry expired is outside the race window
    (an entry that ends as it expires) and so fails (the mutant below); a timeout's answer is reached at
    step 11."""
    h = ReductionBufferHarness(only=("cause", "timeout"), timeout=8)
    res, _ = run_formal("rb_fast", h, h.props, depth=14, cover_depth=14, workdir=tmp_path)
    assert len(res) == 2
    for r in res:
        assert r.ok and r.proof == "bounded: holds to depth 14 (bounded model check)", r
        assert r.engine == "smtbmc yices" and r.cover.startswith("reached"), r


def test_an_alu_without_forwarding_loses_a_contribution(tmp_path):
    h = ReductionBufferHarness(alu=NoChainALU, only=("exact",))
    res, _ = run_formal("rb_nochain", h, h.props, depth=15, cover_depth=None, workdir=tmp_path)
    assert [r.name for r in res] == ["a RED_RESP reduces exactly the expected contributions of every flit"]
    assert res[0].proof.startswith("FAILS") and not res[0].ok


def test_small_parameters_are_checked():
    with pytest.raises(ValueError, match="entries must be an integer in 2..512, got 1"):
        SmallReductionBuffer(entries=1, max_length=2, flit_width=128, timeout=4)
    with pytest.raises(ValueError, match="timeout must be an integer in 4"):
        SmallReductionBuffer(entries=2, max_length=2, flit_width=128, timeout=3)
    with pytest.raises(ValueError, match="max_length"):
        SmallReductionBuffer(entries=2, max_length=0, flit_width=128, timeout=4)
    with pytest.raises(ValueError, match="outstanding must be an integer in 1..entries"):
        SmallReductionBuffer(entries=2, max_length=2, flit_width=128, timeout=4, outstanding=3)
    with pytest.raises(ValueError, match="unknown property nope; valid: once, exact"):
        ReductionBufferHarness(only=("nope",))


def _liveness_witness(slack: int):
    """Drive the liveness harness (3 entries, timeout 4, ``max_length`` 2) in simulation, its assumptions
    checked, into the state where k's answer waits longest: ``out.ready`` low, the output queue full with a
    3-flit ``RED_RESP`` and a 1-flit ``ERROR``, then two more 3-flit results and k's abort queued behind them.
    Once k's timeout must have fired, ``out.ready`` stays high. Returns (``late_ready`` in the cycle k's
    header leaves, whether an assertion failed)."""
    from amaranth.lib import data
    from amaranth.sim import Simulator
    from hw.packet import EType, HEADER_BITS, HeaderLayout
    from verif.formal.reduction import LIVENESS_KEYS
    h = ReductionBufferHarness(only=LIVENESS_KEYS, liveness_slack=slack)
    buf = h.buffer
    seen = {}

    async def tb(ctx):
        grants = []

        async def tick():
            if ctx.get(buf.grant.valid) and ctx.get(h.grant_ready):
                grants.append(ctx.get(buf.grant.payload.rtag))
            if ctx.get(buf.out.valid) and ctx.get(h.out_ready):
                hdr = data.Layout.cast(HeaderLayout).from_bits(ctx.get(buf.out.payload.data) & ((1 << HEADER_BITS) - 1))
                if hdr.tag == 1 and "k" not in seen:
                    seen["k"] = ctx.get(h._late_ready)
            await ctx.tick()

        async def take(valid, ready):
            ctx.set(valid, 1)
            while True:
                r = ctx.get(ready)
                await tick()
                if r:
                    break
            ctx.set(valid, 0)

        async def alloc(length, pick=0):
            ctx.set(h.alloc_length, length), ctx.set(h.alloc_expected, 1), ctx.set(h.alloc_etype, EType.S32)
            ctx.set(h.pick, pick)
            await take(h.alloc_valid, buf.alloc.ready)
            ctx.set(h.pick, 0)
            while len(grants) < n_alloc[0] + 1:
                await tick()
            n_alloc[0] += 1
            return grants[-1]

        async def contrib(rtag, flit, length, abort=0):
            ctx.set(h.c_rtag, rtag), ctx.set(h.c_flit, flit), ctx.set(h.c_length, length)
            ctx.set(h.c_etype, EType.S32), ctx.set(h.c_code, 5 if abort else 0), ctx.set(h.c_abort, abort)
            await take(h.c_valid, buf.contrib.ready)

        n_alloc = [0]
        ctx.set(h.grant_ready, 1)
        x = await alloc(2)                          # a RESP of 3 flits
        await contrib(x, 0, 2), await contrib(x, 1, 2)
        y = await alloc(1)                          # an ERROR of 1 flit
        await contrib(y, 0, 1, abort=1)
        while ctx.get(buf.in_use):                  # both in the output queue (4 flits), entries free
            await tick()
        for _ in range(2):                          # two more 3-flit results, in the drain
            e = await alloc(2)
            await contrib(e, 0, 2), await contrib(e, 1, 2)
        k = await alloc(1, pick=1)
        await contrib(k, 0, 1, abort=1)
        for _ in range(12):                         # past k's timeout: late_ready counts from here
            await tick()
        ctx.set(h.out_ready, 1)
        for _ in range(16):
            await tick()

    sim = Simulator(h)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    try:
        sim.run()
    except AssertionError as e:
        assert "Assertion violated" in str(e), e      # not an assumption: the stimulus is legal
        return seen.get("k"), True
    return seen.get("k"), False


def test_liveness_bound_is_tight():
    """The out.ready cycles an answer may need once its timeout must have fired: the output queue's 4
    flits, two other entries' 3-flit results, then its header: 11 (``liveness_slack``'s default at 3
    entries, the bound the k-induction proves). A simulated trace reaches it: at 10 the property fails
    (about 50 cycles from reset, past the bounded check's depth of 24), at 11 it holds."""
    assert ReductionBufferHarness(only=("answered",)).liveness_slack == 11
    assert _liveness_witness(10) == (10, True)      # the header is out on the 11th cycle: too late
    assert _liveness_witness(11) == (10, False)


def test_two_entries_lose_a_completion_event(tmp_path):
    """At 2 entries the completion FIFO (``SyncFIFOBuffered(depth=2)``: 1 inner row + an output register)
    refuses an event written in the cycle after another, so that allocation is never answered. From 3
    entries on it has room (the reduction_buffer_live block), and the product's floor is 16."""
    h = ReductionBufferHarness(entries=2, only=("answered",))
    res, _ = run_formal("rb_two", h, h.props, depth=22, cover_depth=None, workdir=tmp_path)
    assert res[0].proof.startswith("FAILS"), res


def test_buffer_relies_on_at_most_expected_contributions_per_flit(tmp_path):
    """Without the contract (each destination contributes each flit once), a contribution to a flit that
    has already reached ``expected`` while another flit of its entry is pending is still reduced, and the
    RED_RESP carries one contribution too many (the buffer has no source field to tell)."""
    # A timeout of 8 cycles: the extra contribution right behind the flit's last one waits 2 cycles for its
    # row (acc_stages=3), and with the harness's default 4 the entry would time out first.
    h = ReductionBufferHarness(entries=2, only=("exact",), flit_limit=False, timeout=8)
    res, _ = run_formal("rb_flit_limit", h, h.props, depth=16, cover_depth=None, workdir=tmp_path)
    assert res[0].proof.startswith("FAILS"), res


class EarlyAnswersCount(ResponseFilter):
    """Mutant: the real filter with the ``stale`` mark of its contributions cleared, so an answer for an
    entry whose fan-out has not started reaches the buffer as a contribution (the engine before the mark)."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.real = real = ResponseFilter(ports=self.ports, entries=self.entries, flit_width=self.flit_width,
                                                  aborts=self.aborts)
        connect(m, flipped(self.resp), real.resp)
        connect(m, flipped(self.start), real.start)
        connect(m, real.contrib, flipped(self.contrib))
        m.d.comb += [self.contrib.payload.stale.eq(0), self.bad_responses.eq(real.bad_responses),
                     self.duplicates.eq(real.duplicates)]
        return m


def test_engine_answer_before_its_fanout_changes_nothing(tmp_path):
    """Answers free after their reads and also before their entry's fan-out starts
    (``answers_after_reads=False``): an answer that guesses an allocated entry's tag early is marked stale
    by the response filter and counted by the buffer, and every property holds (fast depth here; the slow
    test below runs the block's depth, 20)."""
    h = ReductionEngineHarness(answers_after_reads=False)
    res, _ = run_formal("re_early", h, h.props, depth=12, cover_depth=None, workdir=tmp_path)
    assert len(res) == 3
    for r in res:
        assert r.proof == "bounded: holds to depth 12 (bounded model check)", r


def test_engine_that_counts_early_answers_completes_an_entry_early(tmp_path):
    """The mutant filter (no stale mark): the early answer is reduced and completes its entry before every
    asked destination answered."""
    h = ReductionEngineHarness(answers_after_reads=False, response_filter=EarlyAnswersCount)
    res, _ = run_formal("re_early_mutant", h, h.props, depth=12, cover_depth=None, workdir=tmp_path)
    assert res[0].name == EXACT_ENGINE and res[0].proof.startswith("FAILS"), res[0]


@pytest.mark.slow
def test_engine_whose_buffer_keeps_a_timed_out_entry_answers_twice(tmp_path):
    """The engine's "at most once" fails when its buffer's timeout leaves the entry active (the buffer's
    mutant :class:`TimeoutKeepsEntry`): its scanner finds the entry expired again and k's requester gets a
    second ``TIMEOUT`` (a bounded check at the proof's timeout of 4 finds it at step 17; about 8 CPU-s)."""
    h = ReductionEngineHarness(answers_after_reads=False, only=("once",), events=TimeoutKeepsEntry, timeout=4)
    res, _ = run_formal("re_once_mutant", h, h.props, depth=18, cover_depth=None, workdir=tmp_path)
    assert [r.name for r in res] == ["every request is answered at most once"]
    assert res[0].proof.startswith("FAILS"), res[0]


def test_engine_whose_generations_restart_at_reset_counts_an_old_answer(tmp_path):
    """Resets free (the ``reduction_engine`` block's harness, bounded here): an allocator that keeps the
    generations in registers (:class:`GenInRegisters`) gives the first allocation after a reset a tag the
    engine's ``asked`` row still holds from before it, and an answer to the earlier fan-out is taken as a
    contribution to the new entry (step 14: a reset, then the old tag's answer counted for a destination
    k did not ask). The real allocator takes the generation from the ``meta`` row, which a reset keeps, and
    the block proves all three properties (slow test above)."""
    h = ReductionEngineHarness(answers_after_reads=False, epochs=True, allocator=GenInRegisters)
    res, _ = run_formal("re_gen_regs", h, h.props, depth=15, cover_depth=None, workdir=tmp_path)
    assert res[0].name == EXACT_ENGINE and res[0].proof.startswith("FAILS"), res[0]


def test_engine_invariant_is_stated_for_every_property_up_to_two_requests():
    for requests in (1, 2):
        ReductionEngineHarness(invariant=True, requests=requests)
    with pytest.raises(ValueError, match="no invariant is stated for early, exact"):
        ReductionEngineHarness(invariant=True, requests=3)      # 3 requests: at most once only
    with pytest.raises(ValueError, match="unknown property nope"):
        ReductionEngineHarness(only=("nope",))
    with pytest.raises(ValueError, match="epochs=True is written for 2 requests and 2 entries"):
        ReductionEngineHarness(invariant=True, requests=1, epochs=True)


@pytest.mark.slow
@pytest.mark.parametrize("block,proof,n", [("reduction_buffer", "proven (k-induction, k = 12)", 6),
                                           ("reduction_buffer_timeout", "proven (k-induction, k = 16)", 2),
                                           ("reduction_buffer_live", "proven (k-induction, k = 12)", 1),
                                           ("reduction_engine", "proven (k-induction, k = 10)", 3),
                                           ("reduction_engine_once", "proven (k-induction, k = 10)", 1),
                                           ("reduction_engine_two", "proven (k-induction, k = 10)", 3),
                                           ("reduction_engine_one", "proven (k-induction, k = 12)", 3)])
def test_reduction_buffer_blocks_hold_and_every_property_is_covered(block, proof, n, tmp_path, capsys):
    assert main(["formal", block, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count(proof) == n
    assert out.count("reached at step") == n and "NOT REACHED" not in out and "FAILS" not in out


def test_reduction_tag_high_byte_is_documented_in_xtag():
    """Issue 16 defect 2: the reduction tag's high byte travels in ``route.uni.xtag`` (as the engine's RTL
    puts it), never in ``route.uni.code`` (the responder's error code). The behaviour is checked bit for
    bit by ``test_reduction_engine.py::test_full[one-at-a-time]`` (entry 0 is reused 19 times, so its
    tags pass 256 and every RED_READ header is compared with one built by ``rtag_to_header``)."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[3]
    doc = (root / "docs" / "reduction.md").read_text()
    assert "`route.uni.xtag` (high byte)" in doc
    # "high byte ... route.uni.code" within a sentence, or "route.uni.code (high ...)"
    wrong = re.compile(r"high (byte|8 bits)[^.]{0,80}UNI_CODE|UNI_CODE\W{0,3}\(high", re.IGNORECASE)
    for path in ("docs/reduction.md", "hw/switch/reduction_buffer.py", "hw/switch/reduction_engine.py"):
        text = (root / path).read_text().replace("route.uni.code", "UNI_CODE")
        assert not wrong.search(text), f"{path} says the tag's high byte is in route.uni.code"
