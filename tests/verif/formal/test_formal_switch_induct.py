"""The whole switch with its composed invariant (``dysharp formal switch_induct``,
:mod:`verif.formal.switch_induct`): the switch harness's four properties on the real NVSwitch at 2 ports
and 3 credits, each asserted with the invariant the part proofs state (the packet store's, the allocation's,
the output queues') and what only the composition has, proven by k-induction (the step in parts) with
every cover reached, and at 2 credits and 1 downstream credit (``switch_induct_small``); queues that leave
a dequeued packet at their head fail them."""

import pytest

import hw.switch.input_unit as input_unit
from dysharp.cli import main
from verif.formal.runner import run_formal
from verif.formal.switch_induct import SwitchInductHarness
from verif.mutants import RepeatingQueues


@pytest.mark.slow
def test_switch_induct_invariant_holds(tmp_path):
    """The four properties with the composed invariant hold from reset to depth 5 (25 s; the registered
    block's depth is 8)."""
    h = SwitchInductHarness()
    res, _ = run_formal("si", h, h.props, depth=5, cover_depth=None, workdir=tmp_path, **h.formal_options)
    assert len(res) == 4
    assert all(r.proof == "bounded: holds to depth 5 (bounded model check)" for r in res), res


@pytest.mark.slow
def test_switch_induct_with_queues_that_repeat_a_packet_fails(tmp_path, monkeypatch):
    """Queues whose dequeue of VOQ 0 leaves its head in place (the packet would be read again) break the
    composed invariant, and so each property, within 5 cycles of reset (22 s)."""
    monkeypatch.setattr(input_unit, "PacketQueues", RepeatingQueues)
    h = SwitchInductHarness()
    res, _ = run_formal("si_mutant_q", h, h.props, depth=5, cover_depth=None, workdir=tmp_path, **h.formal_options)
    assert len(res) == 4 and all(r.proof.startswith("FAILS") for r in res), res


@pytest.mark.slow
def test_switch_induct_cli_table(tmp_path, capsys):
    """The registered block: the four properties proven by k-induction (the base case to depth 6, the step
    in 22 parts), every cover reached (about 12 minutes at a load average of 2 to 3)."""
    assert main(["formal", "switch_induct", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("proven (k-induction, k = 1; the step in 22 parts; base case to depth 6)") == 4, out
    assert out.count("reached at step") == 4, out
    assert "NOT REACHED" not in out and "FAILS" not in out, out


@pytest.mark.slow
def test_switch_induct_small_cli_table(tmp_path, capsys):
    """The registered block at 2 credits and 1 downstream credit: the four properties proven by k-induction
    (the base case to depth 6, the step in 4 parts), every cover reached (3.5 minutes at a load average of
    about 2, 7 at 4 to 5)."""
    assert main(["formal", "switch_induct_small", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("proven (k-induction, k = 1; the step in 4 parts; base case to depth 6)") == 4, out
    assert out.count("reached at step") == 4 and "NOT REACHED" not in out, out


def test_switch_induct_small_properties_follow_from_the_invariant(tmp_path):
    """The default suite's part of the whole-switch proof: the induction step's last part at 2 credits (the
    four properties in a successor state, from the composed invariant in the state before and every other
    part's terms in the successor; 13 s). The whole proof, with its base case, is the slow CLI test above."""
    h = SwitchInductHarness(credits=2, out_credits=1, part=3)
    res, _ = run_formal("si_small_props", h, h.props, depth=1, cover_depth=None, workdir=tmp_path,
                        **h.formal_options)
    assert len(res) == 1 and res[0].proof == "proven (k-induction, k = 1)", res


@pytest.mark.slow
def test_switch_induct_small_step_needs_the_next_cell_bound(tmp_path, monkeypatch):
    """At 3 cells (not a power of two) the induction step's first part fails without the next-cell table's
    bound: a reader that follows its packet's last link to cell 3 (so the parts' assumptions are not
    contradictory, and the bound is a term the proof needs)."""
    monkeypatch.setattr(SwitchInductHarness, "next_cell_bound", False)
    h = SwitchInductHarness(credits=2, out_credits=1, part=0)
    res, _ = run_formal("si_small_part1", h, h.props, depth=1, cover_depth=None, workdir=tmp_path,
                        **h.formal_options)
    assert len(res) == 1 and res[0].proof == "bounded: holds to depth 1 (induction did not close)", res


@pytest.mark.slow
def test_switch_induct_small_with_queues_that_repeat_a_packet_fails(tmp_path, monkeypatch):
    """The stepped proof's base case fails on the queues that repeat a packet (the step is then not tried)."""
    monkeypatch.setattr(input_unit, "PacketQueues", RepeatingQueues)
    h = SwitchInductHarness(credits=2, out_credits=1, stepped=True)
    res, _ = h.prove("si_small_mutant_q", depth=5, cover_depth=None, workdir=tmp_path)
    assert len(res) == 4 and all(r.proof.startswith("FAILS") for r in res), res
