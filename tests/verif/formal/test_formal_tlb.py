"""Formal proofs of the CAM, the Tile Status Table and the AL-TLB (``dysharp formal cam token_tracker
al_tlb``): every property holds (k-induction where it closes, else bounded) and is covered; a mutant of
each block fails the property it breaks (the proofs can fail)."""

import pytest
from amaranth.hdl import Mux

from dysharp.cli import main
from hw.gpu_nic.token_tracker import TokenTracker
from hw.switch.cam import Cam
from verif.formal.al_tlb import AlTlbHarness
from verif.formal.cam import CamHarness
from verif.formal.runner import run_formal
from verif.formal.token_tracker import TokenTrackerHarness


def _ok(out: str, n: int):
    assert out.count("holds to depth") + out.count("proven (k-induction") == n, out
    assert out.count("reached at step") == n and "NOT REACHED" not in out and "FAILS" not in out, out


def test_cam_holds_and_every_property_is_covered(tmp_path, capsys):
    assert main(["formal", "cam", "--out", str(tmp_path)]) == 0
    _ok(capsys.readouterr().out, 2)


def test_token_tracker_holds_and_every_property_is_covered(tmp_path, capsys):
    assert main(["formal", "token_tracker", "--out", str(tmp_path)]) == 0
    _ok(capsys.readouterr().out, 2)
    # The proof on z3, the covers on Yices (the harness's cover_engine).
    sby = (tmp_path / "token_tracker" / "token_tracker.sby").read_text()
    assert "prove: smtbmc z3\ncover: smtbmc yices\n" in sby


class OrValuesCam(Cam):
    """A broken CAM: a hit returns the OR of every entry's value, not the matching entry's."""

    @staticmethod
    def _and_or(m, onehot, values):
        out = values[0]
        for v in values[1:]:
            out = out | v
        return Mux(onehot.any(), out, 0)


def test_a_cam_that_mixes_values_fails(tmp_path):
    h = CamHarness(cam=OrValuesCam(entries=16, key_width=5, value_width=4))
    # a wrong value needs two keys inserted and a lookup answered: 5 cycles from reset
    res, _ = run_formal("cam_mutant", h, h.props, depth=6, cover_depth=None, workdir=tmp_path)
    by = {r.name: r for r in res}
    assert by["a hit returns the last value filled for that key"].proof.startswith("FAILS"), res
    # Only the proof is claimed (cover_depth=None): sby ran no cover task and no cover is claimed.
    assert all(r.cover == "not checked (proof only)" and not r.ok for r in res), res
    assert not (tmp_path / "cam_mutant" / "cam_mutant_cover").exists()


class NoForwardTracker(TokenTracker):
    """A broken table: the read-modify-write does not forward the previous cycle's write, so a
    back-to-back arrival to the same tile reads the stale count."""
    _forward = False


def test_a_tracker_without_forwarding_loses_increments(tmp_path):
    h = TokenTrackerHarness(tracker=NoForwardTracker(experts=2, tiles=2, tile_size=4, ready_depth=2,
                                                     release_depth=2))
    # Only the proof is claimed, so no cover task runs: the covers, 16 steps deep, cost 36 of its 38 CPU-s
    # (the base case fails at 4).
    res, _ = run_formal("tt_mutant", h, h.props, depth=4, cover_depth=None, workdir=tmp_path)
    by = {r.name: r for r in res}
    assert by["no lost increment under back-to-back arrivals"].proof.startswith("FAILS"), res


def test_al_tlb_hit_path_holds_and_is_covered(tmp_path, capsys):
    assert main(["formal", "al_tlb", "--out", str(tmp_path)]) == 0
    _ok(capsys.readouterr().out, 1)


@pytest.mark.slow
def test_al_tlb_mshrs_are_answered_in_time(tmp_path, capsys):
    """k-induction in under a minute; the cover (an MSHR answered by its timeout, 20 cycles deep) takes
    minutes."""
    assert main(["formal", "al_tlb_mshr", "--out", str(tmp_path)]) == 0
    _ok(capsys.readouterr().out, 1)


@pytest.mark.slow
def test_a_tighter_mshr_bound_fails(tmp_path):
    """The answer bound is a real claim: an MSHR is not always answered within 2 cycles (a miss waits for
    its backing read), and the base case finds it (slow, with the bound's proof above: about 13 s)."""
    h = AlTlbHarness(check="mshr", bound=2)
    res, _ = run_formal("tlb_bound", h, h.props, depth=8, cover_depth=None, workdir=tmp_path)
    assert res[0].proof.startswith("FAILS"), res
