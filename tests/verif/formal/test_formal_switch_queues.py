"""Formal proof of a switch input's packet store (``dysharp formal switch_queues``): the cell pool and the
packet queues of one input, proven by k-induction against their contract (``verif/formal/switch_queues.py``),
each property with a reached ``Cover``; a pool that shares a cell or counts a freed cell twice, queues that
repeat or lose a packet, head-order flags that miss the mask queue's dequeue and a lap guard that rises two
arrivals late must fail them, so the proof can fail."""

import pytest
from amaranth.hdl import Cat, Module

import hw.switch.packet_queues as packet_queues
from dysharp.cli import main
from hw.switch.cell_pool import CellPool
from hw.switch.head_order import HeadOrder
from hw.switch.packet_queues import PacketQueues
from verif.formal.observe import driven
from verif.formal.runner import run_formal
from verif.formal.switch_queues import SwitchQueuesHarness
from verif.mutants import RepeatingQueues

POOL = "the pool neither loses nor shares a cell"
READ = "every packet is read whole, in order per queue, framing kept"
ORDER = "the head-order flags give the heads' arrival order"
AGE = "no queued packet is 2^(seq_bits - 1) arrivals old"


class SharingPool(CellPool):
    """A broken pool: cell 1, once free, stays in the free set when it is taken as the next-write cell, so it
    can be handed out again while it holds a flit."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        free = driven(m, "free")
        m.d.sync += free[1].eq(free[1] | self.free_bits[1])
        return m


class DoubleCountingPool(CellPool):
    """A broken pool: its ``used`` count takes each freed cell off twice."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.sync += self.used.eq(self.used + self.write - 2 * self.n_freed)
        return m


class LosingQueues(PacketQueues):
    """Broken queues: an enqueue into a non-empty VOQ 0 leaves its tail in place, so the next enqueue links
    past the packet just queued and loses it."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        tail = driven(m, "q0_tail")
        with m.If(self.enq & (self.enq_q == 0) & (self.count[0] != 0)):
            m.d.sync += tail.eq(tail)
        return m


class BlindHeadOrder(HeadOrder):
    """Broken head-order flags: a mask-queue dequeue does not update them."""

    def elaborate(self, platform):
        m = Module()
        MQ = self.n_voq
        for j in range(self.n_voq):
            with m.If(self.takes_new[j]):
                m.d.sync += self.older[j].eq(0)
            with m.Elif(self.takes_new[MQ]):
                m.d.sync += self.older[j].eq(1)
            with m.Elif(self.deq[j]):
                d = (self.head_seq[MQ] - self.next_seq)[:self.seq_bits]
                m.d.sync += self.older[j].eq((d != 0) & ~d[self.seq_bits - 1])
        return m


class BlindOrderQueues(PacketQueues):
    """The real queues with :class:`BlindHeadOrder` as their head-order flags."""

    def elaborate(self, platform):
        saved = packet_queues.HeadOrder
        packet_queues.HeadOrder = BlindHeadOrder
        try:
            return super().elaborate(platform)
        finally:
            packet_queues.HeadOrder = saved


class NarrowQueues(PacketQueues):
    """The queues with arrival numbers one bit wider than a cell index (3 bits at 4 cells), ``lap_margin`` 1
    and so ``lap_threshold`` 1: a head is lapped four arrivals after its own, within a bounded check's reach
    (the real numbers, four bits wider, lap after 32)."""

    def __init__(self, **kwargs):
        super().__init__(lap_margin=1, **kwargs)
        self.seq_bits = len(self.enq_cell) + 1
        self.lap_threshold = 2 ** (self.seq_bits - 1) - 2 - self.lap_margin


class LateLapQueues(NarrowQueues):
    """Broken queues: :class:`NarrowQueues` whose ``near_lap`` rises two arrivals late (at ``lap_threshold + 2``)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        S, aseq, n_q = self.seq_bits, driven(m, "aseq"), self.n_uc + 1
        hseq = [driven(m, f"q{q}_hseq") for q in range(n_q)]
        m.d.sync += self.near_lap.eq(Cat((self.count[q] != 0) & ((aseq - hseq[q])[:S] >= self.lap_threshold + 2)
                                         for q in range(n_q)).any())
        return m


def test_switch_queues_one_voq_is_proven(tmp_path):
    """The smallest instance that reaches every cover (3 cells, so a two-cell packet and a header-only one
    fill it and the cell pointers wrap at a count that is not a power of two; 1 VOQ and the mask queue) at
    ``lap_margin`` 28 (``near_lap`` at 2 arrivals, so that its cover is reached): the four properties by
    k-induction (seconds; the 4-cell instance below takes about a minute)."""
    h = SwitchQueuesHarness(n_cells=3, n_uc=1, lap_margin=28)
    assert h.queues.lap_threshold == 2
    res, _ = run_formal("swq1", h, h.props, depth=2, cover_depth=14, workdir=tmp_path, **h.formal_options)
    assert [r.name for r in res] == [POOL, READ, ORDER, AGE]
    assert all(r.ok and r.proof == "proven (k-induction, k = 2)" for r in res), res


@pytest.mark.slow
def test_switch_queues_four_cells_is_proven(tmp_path):
    """The 4-cell instance (a power of two, 1 VOQ and the mask queue) at ``lap_margin`` 28: the four
    properties by k-induction, every cover reached (about 50 s)."""
    h = SwitchQueuesHarness(n_cells=4, n_uc=1, lap_margin=28)
    res, _ = run_formal("swq1c4", h, h.props, depth=2, cover_depth=12, workdir=tmp_path, **h.formal_options)
    assert [r.name for r in res] == [POOL, READ, ORDER, AGE]
    assert all(r.ok and r.proof == "proven (k-induction, k = 2)" for r in res), res


@pytest.mark.slow
def test_switch_queues_unit_margin_is_proven(tmp_path):
    """The same at the unit's own ``lap_margin`` (4, the cells; ``near_lap`` at 26 arrivals, past a cover's
    reach): the proof alone (about a minute)."""
    h = SwitchQueuesHarness(n_cells=4, n_uc=1)
    assert h.queues.lap_threshold == 26
    res, _ = run_formal("swq1u", h, h.props, depth=2, cover_depth=None, workdir=tmp_path, **h.formal_options)
    assert [r.name for r in res] == [POOL, READ, ORDER, AGE]
    assert all(r.proof == "proven (k-induction, k = 2)" for r in res), res


@pytest.mark.slow
def test_switch_queues_is_proven(tmp_path, capsys):
    """The registered block (2 VOQs, about 3.5 CPU-minutes)."""
    assert main(["formal", "switch_queues", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("proven (k-induction, k = 2)") == 4 and "holds to depth" not in out, out
    assert out.count("reached at step") == 4 and "NOT REACHED" not in out, out


@pytest.mark.parametrize("key,prop,pool,queues", [
    ("pool", POOL, SharingPool, None),
    ("pool", POOL, DoubleCountingPool, None),
    ("read", READ, None, RepeatingQueues),
    ("read", READ, None, LosingQueues),
    ("order", ORDER, None, BlindOrderQueues),
    ("age", AGE, None, LateLapQueues)])
def test_switch_queues_mutant_fails(key, prop, pool, queues, tmp_path):
    """The property alone (no invariant), bounded from reset: what fails is the property itself."""
    C, n_uc = 4, 1
    h = SwitchQueuesHarness(n_cells=C, n_uc=n_uc, pool=pool and pool(n_cells=C, max_freed=1),
                             queues=queues and queues(n_uc=n_uc, n_cells=C, ports=n_uc), invariant=False,
                             only=(key,))
    res, _ = run_formal("swin_mutant", h, h.props, depth=8, cover_depth=None, workdir=tmp_path,
                        engine="smtbmc yices", induction=False)
    assert [r.name for r in res] == [prop] and res[0].proof.startswith("FAILS"), res


def test_switch_queues_narrow_guard_holds(tmp_path):
    """:class:`NarrowQueues` unbroken, checked as its mutant is (bounded from reset, the property alone): the
    late guard's failure comes from its lateness, not from the narrow numbers."""
    C, n_uc = 4, 1
    h = SwitchQueuesHarness(n_cells=C, n_uc=n_uc, queues=NarrowQueues(n_uc=n_uc, n_cells=C, ports=n_uc),
                             invariant=False, only=("age",))
    res, _ = run_formal("swin_narrow", h, h.props, depth=8, cover_depth=None, workdir=tmp_path,
                        engine="smtbmc yices", induction=False)
    assert [r.name for r in res] == [AGE] and res[0].proof == "bounded: holds to depth 8 (bounded model check)", res


@pytest.mark.slow
def test_switch_queues_late_lap_breaks_order(tmp_path):
    """A guard two arrivals late lets a VOQ head be lapped: the head-order flags then go wrong (about a
    minute and a half)."""
    C, n_uc = 4, 1
    h = SwitchQueuesHarness(n_cells=C, n_uc=n_uc, queues=LateLapQueues(n_uc=n_uc, n_cells=C, ports=n_uc),
                             invariant=False, only=("order",))
    res, _ = run_formal("swin_late", h, h.props, depth=12, cover_depth=None, workdir=tmp_path,
                        engine="smtbmc yices", induction=False)
    assert [r.name for r in res] == [ORDER] and res[0].proof.startswith("FAILS"), res
