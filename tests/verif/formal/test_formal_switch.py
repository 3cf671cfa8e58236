"""Formal proofs of the GPU receive path and the NVSwitch datapath (``dysharp formal receive_path``,
``dysharp formal switch``, ``switch_speedup2``, ``switch_fifo``, ``switch_errors``): the receive path's
properties are proven by k-induction, the switch's hold to their bounded depth, each with a reached
``Cover``; a mutant (the poison bit lost on the way into the receive path, a cut-through stager, a commit
stage that reports dropped flits; an output queue that repeats flits in the switch; an ingress that
forwards bad headers or drops the poison bit) must fail them, so the proofs can fail. The switch's output stage (``switch_egress``) is proven by k-induction, and a sender that
ignores its credits or a queue that repeats flits fails it."""

import pytest
from amaranth.hdl import Const

import hw.gpu_nic.receive_path as receive_path
import hw.switch.ingress as ingress
import hw.switch.input_unit as input_unit
import hw.switch.nvswitch as nvswitch
from dysharp.cli import main
from hw.packet import HEADER_BITS, ErrorCode, HeaderLayout, rtl_payload_flits
from verif.formal.receive_path import ReceivePathHarness
from verif.formal.runner import run_formal
from verif.formal.switch import SwitchHarness
from verif.formal.switch_egress import SwitchEgressHarness
from verif.mutants import GreedySender, StuckEgressQueue


def _assert_all_hold(out: str, n: int, depth: int):
    assert out.count(f"holds to depth {depth}") + out.count("proven (k-induction") == n, out
    assert out.count("reached at step") == n and "NOT REACHED" not in out and "FAILS" not in out, out


def _assert_bounded_holds(name, h, depth, cover_depth, workdir):
    """Every one of the harness's four properties holds to ``depth`` by a yices bounded check."""
    res, _ = run_formal(name, h, h.props, depth=depth, cover_depth=cover_depth, workdir=workdir,
                        **h.formal_options)
    assert len(res) == 4
    for r in res:
        assert r.ok, r
        assert r.proof == f"bounded: holds to depth {depth} (bounded model check)" and r.engine == "smtbmc yices"


def test_receive_path_is_proven(tmp_path, capsys):
    assert main(["formal", "receive_path", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("proven (k-induction, k = 3)") == 4 and "holds to depth" not in out, out
    assert out.count("reached at step") == 4 and "NOT REACHED" not in out, out


@pytest.mark.slow
@pytest.mark.parametrize("params", [{"credits": 4}, {"max_payload": 3}])
def test_receive_path_is_proven_at_larger_sizes(params, tmp_path):
    """The invariant is not tied to the smallest instance: more credits than a packet needs (4 queued
    packets), and 4-flit packets."""
    h = ReceivePathHarness(**params)
    res, _ = run_formal("rp_larger", h, h.props, depth=3, cover_depth=8, workdir=tmp_path)
    assert len(res) == 4 and all(r.ok and r.proof == "proven (k-induction, k = 3)" for r in res), res


def _rp_mutant(h, name, tmp_path, depth=6):
    """A bounded check of the properties without their invariant (``h``: ``invariant=False``), so that what
    fails is a property itself."""
    assert not h.invariant
    res, _ = run_formal(name, h, h.props, depth=depth, cover_depth=None, workdir=tmp_path,
                        **{**h.formal_options, "induction": False})
    return res


def test_receive_path_that_loses_the_poison_bit_miscounts(tmp_path):
    prop = "every bad packet is counted once (POISONED/LENGTH_MISMATCH/BAD_LENGTH/UNKNOWN_OPCODE)"
    res = _rp_mutant(ReceivePathHarness(strip_poison=True, only="counted once", invariant=False), "rp_mutant",
                     tmp_path)
    assert [r.name for r in res] == [prop]
    assert res[0].proof.startswith("FAILS"), res


class CutThroughStager(receive_path._Stager):
    """A broken stager: it offers a packet to the commit stage as soon as its header is buffered, with the
    flit count its header announces (cut-through), instead of once its last flit is in."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        hdr = HeaderLayout(self.flit.payload[:HEADER_BITS])
        m.d.comb += [self.status.valid.eq(self.flit.valid),    # override the status queue's
                     self.status.payload.eq(0), self.status.payload.n.eq(rtl_payload_flits(hdr) + 1)]
        return m


class DroppedFlitsReportingCommit(receive_path._Commit):
    """A broken commit stage: it reports the flits of a packet it drops as written (to the token window)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        with m.If(self.dropping & self.flit.valid):
            m.d.comb += self.written.valid.eq(1)
        return m


@pytest.mark.slow
@pytest.mark.parametrize("name,mutant,prop", [
    ("_Stager", CutThroughStager, "a packet is committed only once it has fully arrived"),
    ("_Commit", DroppedFlitsReportingCommit, "a poisoned or misframed packet reports no token arrival")])
def test_receive_path_mutant_fails_its_property(name, mutant, prop, tmp_path, monkeypatch):
    monkeypatch.setattr(receive_path, name, mutant)
    res = _rp_mutant(ReceivePathHarness(only=prop, invariant=False), "rp_mutant_" + name, tmp_path, depth=9)
    assert [r.name for r in res] == [prop]
    assert res[0].proof.startswith("FAILS"), res


def test_switch_packets_atomic_and_conserved(tmp_path):
    _assert_bounded_holds("sw", SwitchHarness(), 7, 13, tmp_path)   # registered match: covers need 13


@pytest.mark.slow
def test_switch_cli_table(tmp_path, capsys):
    assert main(["formal", "switch", "--out", str(tmp_path)]) == 0
    _assert_all_hold(capsys.readouterr().out, 4, 9)


@pytest.mark.slow
def test_switch_with_an_output_queue_that_repeats_flits_fails(tmp_path, monkeypatch):
    """The whole switch's bounded check fails with an output queue that repeats its first flit (about 10 s;
    the same queue fails the output stage's proof, ``test_switch_egress_mutant_fails``, in the default
    suite)."""
    monkeypatch.setattr(nvswitch, "EgressQueue", StuckEgressQueue)
    h = SwitchHarness()
    # Depth 8: the first flit reaches an output queue a cycle later since the match is registered.
    res, _ = run_formal("sw_mutant", h, h.props, depth=8, cover_depth=None, workdir=tmp_path, **h.formal_options)
    assert any(r.proof.startswith("FAILS") for r in res), res
    assert not any(r.ok for r in res)


def test_receive_path_that_loses_the_poison_bit_commits_a_poisoned_packet(tmp_path):
    res = _rp_mutant(ReceivePathHarness(strip_poison=True, only="commits nothing to memory", invariant=False),
                     "rp_mutant_wr", tmp_path)
    assert [r.name for r in res] == ["a poisoned or misframed packet commits nothing to memory"]
    assert res[0].proof.startswith("FAILS"), res


@pytest.mark.slow
@pytest.mark.parametrize("block,n", [("switch_speedup2", 4), ("switch_fifo", 4), ("switch_errors", 6)])
def test_switch_modes_cli_table(block, n, tmp_path, capsys):
    assert main(["formal", block, "--out", str(tmp_path)]) == 0
    _assert_all_hold(capsys.readouterr().out, n, 9)


class PoisonDroppingIngress(ingress.Ingress):
    """A broken ingress: it never marks a written flit poisoned (a poisoned or misframed packet arrives
    looking good)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.w_poison.eq(0)     # overrides every assignment above
        return m


def _error_mutant_fails(prop, tmp_path):
    h = SwitchHarness(errors=True)
    res, _ = run_formal("sw_err_mutant", h, h.props, depth=7, cover_depth=None, workdir=tmp_path, **h.formal_options)
    by = {r.name: r for r in res}
    assert by[prop].proof.startswith("FAILS"), res
    assert not any(r.ok for r in res)


@pytest.mark.slow
def test_switch_that_forwards_bad_headers_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(ingress, "rtl_header_error", lambda hdr, **kw: Const(ErrorCode.NONE.value, 8))
    _error_mutant_fails("a bad header's packet is dropped whole; each error is counted once and answered to its "
                        "port", tmp_path)


@pytest.mark.slow
def test_switch_that_drops_the_poison_bit_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(input_unit, "Ingress", PoisonDroppingIngress)
    _error_mutant_fails("a misframed or poisoned packet arrives ending poisoned; nothing else is poisoned", tmp_path)


def test_switch_egress_is_proven(tmp_path, capsys):
    assert main(["formal", "switch_egress", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("proven (k-induction, k = 2)") == 2 and "holds to depth" not in out, out
    assert out.count("reached at step") == 2 and "NOT REACHED" not in out, out


@pytest.mark.slow
def test_switch_egress_one_lane_is_proven(tmp_path):
    h = SwitchEgressHarness(lanes=1)
    res, _ = run_formal("egress1", h, h.props, depth=2, cover_depth=10, workdir=tmp_path)
    assert all(r.ok and r.proof == "proven (k-induction, k = 2)" for r in res), res


@pytest.mark.parametrize("prop,lanes,queue,sender", [
    ("an output sends only with a downstream credit and never overruns its receiver", 2, None, GreedySender),
    ("the output queue delivers every flit written into it once, in order", 1, StuckEgressQueue, None)])
def test_switch_egress_mutant_fails(prop, lanes, queue, sender, tmp_path):
    from hw.packet import flit_layout
    width = flit_layout(128).size
    h = SwitchEgressHarness(lanes=lanes, queue=queue and queue(width=width, depth=4, lanes=lanes),
                            sender=sender and sender(credits=2, flit_width=128))
    res, _ = run_formal("egress_mutant", h, h.props, depth=8, cover_depth=None, workdir=tmp_path)
    by = {r.name: r for r in res}
    assert by[prop].proof.startswith("FAILS"), res
    assert not all(r.ok for r in res)
