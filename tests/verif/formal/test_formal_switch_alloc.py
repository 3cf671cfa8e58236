"""Formal proof of the switch's output allocation (``dysharp formal switch_alloc``, ``switch_alloc_req_stage``):
each input's request, grant start and reader with the iSLIP allocator and the switch's output-busy,
match and read-ahead registers, proven by k-induction against the packet store's and the output queue's
contracts (``verif/formal/switch_alloc.py``), each property with a reached ``Cover``; an allocator that
grants a busy output, a reader that reports its release early or never, an input that asks while its
reader holds an output, a busy flag never cleared or never set, an admission blind to the flits in
flight, and a grant start that forgets a multicast's served outputs, does not count its grants or frees a
multicast's cells on a partial round must fail them, so the proof can fail."""

import pytest
from amaranth.hdl import Mux, Signal

from dysharp.cli import main
from hw.switch.alloc_request import AllocRequest
from hw.switch.allocator import ISlipAllocator
from hw.switch.cell_reader import CellReader
from hw.switch.grant_start import GrantStart
from verif.formal.observe import driven
from verif.formal.runner import run_formal
from verif.formal.switch_alloc import AHEAD, BUSY, MC, ONE, PASS, PEND, ROOM, SwitchAllocHarness

PROPS = [ONE, BUSY, AHEAD, ROOM, MC, PEND, PASS]


class BusyGrantingAllocator(ISlipAllocator):
    """A broken allocator: output 0 always looks free to it, busy or not."""

    def elaborate(self, platform):
        real = self.out_free
        self.out_free = real | 1
        try:
            return super().elaborate(platform)
        finally:
            self.out_free = real


class _ReleaseReporter(CellReader):
    """A reader whose transfer runs as the real one's, but whose ``release`` port reports ``reported(m)``."""

    def elaborate(self, platform):
        port, inner = self.release, Signal(name="true_release")
        self.release = inner
        try:
            m = super().elaborate(platform)
        finally:
            self.release = port
        m.d.comb += port.eq(self.reported(m, inner))
        return m


class EarlyReleaseReader(_ReleaseReporter):
    """A broken reader: it reports its release at every read, so a held packet's outputs at its first."""

    def reported(self, m, inner):
        return inner | driven(m, "lane0_issue")


class SilentReader(_ReleaseReporter):
    """A broken reader: it never reports a packet's release (an error response's it does)."""

    def reported(self, m, inner):
        return inner & driven(m, "rd_err")


class EagerRequest(AllocRequest):
    """A broken request: it asks while its reader still holds its outputs."""

    def elaborate(self, platform):
        real = self.rd_active
        self.rd_active = Signal()
        try:
            return super().elaborate(platform)
        finally:
            self.rd_active = real


class EarlyCountedRequest(AllocRequest):
    """A broken request: a counted transfer of three read cycles releases its outputs at its grant, as one of
    two does, a cycle early (the next transfer's first read then meets its last)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        grant_cd = driven(m, "grant_cd")
        m.d.comb += self.release.eq(Mux(self.grant.any() & grant_cd & (self.grant_rc >= 2), self.grant, 0))
        return m


class ForgetfulStart(GrantStart):
    """A broken grant start: a multicast round that is not the last leaves the head's remaining destinations
    as they were, so the outputs it served are asked for again."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        with m.If(self.grant.any() & self.grant_class[0] & ~self.deq[self.n_uc]):
            m.d.sync += self.mc_res.eq(self.mc_res)
        return m


class UncountingStart(GrantStart):
    """A broken grant start: its per-output counts of pending multicast packets ignore the grants."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        e_mq = self.enq & (self.enq_q == self.n_uc)
        for j in range(self.ports):
            cnt = driven(m, f"mc_pend{j}")
            m.d.sync += cnt.eq(cnt + (e_mq & self.enq_mask[j]))
        return m


class FreeingStart(GrantStart):
    """A broken grant start: every multicast round frees the packet's cells, the partial ones too."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.start.free.eq(1)
        return m


def assert_proven(h, name, cover_depth, tmp_path):
    """Every property of ``h`` proven by k-induction at k = 2, every cover reached within ``cover_depth``."""
    res, _ = run_formal(name, h, h.props, depth=2, cover_depth=cover_depth, workdir=tmp_path, **h.formal_options)
    assert [r.name for r in res] == PROPS
    assert all(r.ok and r.proof == "proven (k-induction, k = 2)" for r in res), res


def test_switch_alloc_is_proven(tmp_path):
    """3 ports, 3 cells (the harness's default): the seven properties by k-induction, every cover reached
    (about 5 s)."""
    h = SwitchAllocHarness()
    assert_proven(h, "sa3", 14, tmp_path)


def test_switch_alloc_req_stage_is_proven(tmp_path):
    """The same with registered requests (``RequestStage``; no transfer is short there)."""
    h = SwitchAllocHarness(req_stage=True)
    assert_proven(h, "sa3_rs", 14, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("block", ["switch_alloc", "switch_alloc_req_stage", "switch_alloc_fifo",
                                   "switch_alloc_speedup2"])
def test_switch_alloc_block_is_proven(block, tmp_path, capsys):
    """The registered blocks through the CLI (4 ports, 5 cells; the speedup-2 one at 3 ports): the seven
    properties by k-induction, every cover reached (about 10 s each, the speedup-2 one 35 s)."""
    assert main(["formal", block, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("proven (k-induction, k = 2)") == 7 and "holds to depth" not in out, out
    assert out.count("reached at step") == 7 and "NOT REACHED" not in out, out


@pytest.mark.slow
@pytest.mark.parametrize("req_stage", [False, True])
def test_switch_alloc_eight_ports_is_proven(req_stage, tmp_path):
    """8 ports, 9 cells (8 credits; about 80 s each)."""
    h = SwitchAllocHarness(ports=8, n_cells=9, req_stage=req_stage)
    assert_proven(h, "sa8", 14, tmp_path)


# One mutant per property in the default suite; the others are slow.
@pytest.mark.parametrize("key,prop,kw", [
    ("one", ONE, {"allocator": BusyGrantingAllocator}),
    ("busy", BUSY, {"reader": lambda i: EarlyReleaseReader(ports=3, n_cells=3)}),
    pytest.param("busy", BUSY, {"reader": lambda i: SilentReader(ports=3, n_cells=3)}, marks=pytest.mark.slow),
    pytest.param("busy", BUSY, {"request": lambda i: EagerRequest(ports=3, n_uc=3, n_cells=3, port=i, grant_delay=1,
                                                                  short=True)}, marks=pytest.mark.slow),
    pytest.param("busy", BUSY, {"glue": "busy_kept"}, marks=pytest.mark.slow),
    pytest.param("one", ONE, {"glue": "busy_dropped"}, marks=pytest.mark.slow),
    ("room", ROOM, {"glue": "admit_blind"}),
    ("ahead", AHEAD, {"glue": "admit_blind"}),
    ("mc", MC, {"start": lambda i: ForgetfulStart(ports=3, n_uc=3, n_cells=3)}),
    ("pend", PEND, {"start": lambda i: UncountingStart(ports=3, n_uc=3, n_cells=3)}),
    ("pass", PASS, {"start": lambda i: FreeingStart(ports=3, n_uc=3, n_cells=3)})])
def test_switch_alloc_mutant_fails(key, prop, kw, tmp_path):
    """The property alone (no invariant), bounded from reset: what fails is the property itself."""
    h = SwitchAllocHarness(invariant=False, only=(key,), **kw)
    res, _ = run_formal("sa_mutant", h, h.props, depth=10, cover_depth=None, workdir=tmp_path,
                        engine="smtbmc yices", induction=False, script_extra=h.formal_options["script_extra"])
    assert [r.name for r in res] == [prop] and res[0].proof.startswith("FAILS"), res


#: The speedup-2 instance of the default suite: 2 ports, up to 6-flit packets (three read cycles), 7 cells,
#: 16-flit output queues (so that a counted transfer's output can be handed over before its end).
S2 = dict(speedup=2, ports=2, n_cells=7, max_payload=5, egress_depth=16)


def test_switch_alloc_speedup2_is_proven(tmp_path):
    """Speedup 2 (two lanes, counted transfers of one to three read cycles released ahead of their end): the
    seven properties by k-induction, every cover reached (about 7 s)."""
    h = SwitchAllocHarness(**S2)
    assert_proven(h, "sa_s2", 16, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(ports=4, n_cells=5, iterations=2), dict(ports=4, n_cells=5, iterations=4),
                                {**S2, "ports": 3, "iterations": 2}])
def test_switch_alloc_iterations_are_proven(kw, tmp_path):
    """More iSLIP iterations per cycle (4 ports at speedup 1: about 10 s each; 3 ports at speedup 2: 30 s)."""
    h = SwitchAllocHarness(**kw)
    assert_proven(h, "sa_it", 16, tmp_path)


@pytest.mark.slow
def test_switch_alloc_speedup2_four_ports_is_proven(tmp_path):
    """Speedup 2 at 4 ports (about 105 s)."""
    h = SwitchAllocHarness(**{**S2, "ports": 4})
    assert_proven(h, "sa_s2_4", 16, tmp_path)


@pytest.mark.parametrize("key,prop,kw", [
    ("one", ONE, {"request": lambda i: EarlyCountedRequest(ports=2, n_uc=2, n_cells=7, port=i, grant_delay=1,
                                                           short=True, max_rc=3)}),
    ("ahead", AHEAD, {"glue": "admit_packet_blind", "egress_depth": 12})])
def test_switch_alloc_speedup2_mutant_fails(key, prop, kw, tmp_path):
    """As the mutants above, at speedup 2: an input that releases a counted transfer a cycle early, an admission
    that asks no room for the packet's flits (its reader then stalls; 14 cycles from reset, at the default
    12-flit output queues)."""
    h = SwitchAllocHarness(invariant=False, only=(key,), **{**S2, **kw})
    res, _ = run_formal("sa_s2_mutant", h, h.props, depth=14, cover_depth=None, workdir=tmp_path,
                        engine="smtbmc yices", induction=False, script_extra=h.formal_options["script_extra"])
    assert [r.name for r in res] == [prop] and res[0].proof.startswith("FAILS"), res


def test_switch_alloc_unbroken_holds_as_mutants_are_checked(tmp_path):
    """The real blocks, checked as the mutants are (each property alone, bounded from reset): they hold, so the
    mutants' failures come from what each breaks."""
    h = SwitchAllocHarness(invariant=False)
    res, _ = run_formal("sa_real", h, h.props, depth=10, cover_depth=None, workdir=tmp_path,
                        engine="smtbmc yices", induction=False, script_extra=h.formal_options["script_extra"])
    assert [r.name for r in res] == PROPS
    assert all(r.proof == "bounded: holds to depth 10 (bounded model check)" for r in res), res
