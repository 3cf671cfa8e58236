"""The PDR (IC3) engine of the formal runner (``engine="abc pdr"``: ABC's ``pdr`` through SymbiYosys):
it proves a block's properties for all time where they hold, finds the counterexample of a mutant and
names the property it breaks with its step, and refuses what it cannot do with a clear message. The default
suite runs the credit link's proof and mutant; the switch allocation's and the whole switch's are slow."""

import pytest

import verif.formal.runner as runner
from dysharp.cli import main
from verif.formal.credit_link import CreditLinkHarness
from verif.formal.runner import run_formal
from verif.formal.switch_alloc import SwitchAllocHarness
from verif.mutants import GreedySender


def test_pdr_proves_the_credit_link(tmp_path, capsys):
    """``dysharp formal credit_link --engine 'abc pdr'``: the credit link's four properties by PDR, unbounded
    (about 5 CPU-s), each cover reached by smtbmc."""
    assert main(["formal", "credit_link", "--engine", "abc pdr", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("proven (PDR, unbounded)") == 4 and out.count("| abc pdr ") == 4, out
    assert out.count("reached at step") == 4 and "NOT REACHED" not in out and "FAILS" not in out


def test_formal_rejects_an_unknown_engine(capsys):
    assert main(["formal", "credit_link", "--engine", "pdr"]) == 2
    assert "--engine 'pdr': valid: 'smtbmc z3', 'smtbmc yices', 'abc pdr'" in capsys.readouterr().err


def test_pdr_fails_a_mutant_and_names_its_property(tmp_path):
    """A sender that ignores its credits: ABC's counterexample, replayed by smtbmc, breaks "nothing is sent
    without a credit" (at step 5); the other properties are not claimed."""
    h = CreditLinkHarness(4, sender=GreedySender(credits=4))
    res, _ = run_formal("cl_pdr_mutant", h, h.props, depth=2, cover_depth=None, workdir=tmp_path, engine="abc pdr")
    by = {r.name: r for r in res}
    assert by["nothing is sent without a credit"].proof.startswith("FAILS (counterexample at step"), res
    assert all(r.proof.startswith(("FAILS", "not proven")) and not r.ok for r in res), res


@pytest.mark.slow
def test_pdr_proves_the_switch_allocation_without_its_invariant(tmp_path):
    """``switch_alloc``'s seven properties stated alone (``invariant=False``), where k-induction needs the
    invariant the harness states: PDR finds a strengthening itself (3 ports, about 7 CPU-s)."""
    h = SwitchAllocHarness(invariant=False)
    res, _ = run_formal("sa_pdr", h, h.props, depth=2, cover_depth=None, workdir=tmp_path, engine="abc pdr")
    assert len(res) == 7 and all(r.proof == "proven (PDR, unbounded)" for r in res), res


@pytest.mark.slow
def test_pdr_fails_the_switch_allocation_with_a_blind_admission(tmp_path):
    """The same, with an admission blind to the flits in flight: a counterexample from reset (PDR's is not
    always the shortest, nor always for the same property: the read-ahead one at step 7 in one run)."""
    h = SwitchAllocHarness(invariant=False, glue="admit_blind")
    res, _ = run_formal("sa_pdr_mutant", h, h.props, depth=2, cover_depth=None, workdir=tmp_path, engine="abc pdr")
    assert any(r.proof.startswith("FAILS (counterexample at step") for r in res), res
    assert all(r.proof.startswith(("FAILS", "not proven")) for r in res), res


def test_pdr_without_yosys_abc_names_the_tool(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "yosys_abc", lambda: None)
    with pytest.raises(RuntimeError, match="yosys-abc .* is not installed"):
        runner.tool_path(tmp_path, "abc pdr")


def test_pdr_is_not_a_cover_engine(tmp_path):
    h = CreditLinkHarness(4)
    with pytest.raises(ValueError, match="abc pdr proves, it does not cover"):
        run_formal("cl", h, h.props, depth=2, cover_depth=12, workdir=tmp_path, engine="abc pdr",
                   cover_engine="abc pdr")


@pytest.mark.slow
def test_pdr_fails_the_whole_switch_with_queues_that_repeat_a_packet(tmp_path, monkeypatch):
    """``switch_induct`` (the real NVSwitch at 2 ports, with its composed invariant) with queues whose
    dequeue of VOQ 0 leaves its head in place: PDR's counterexample breaks every property (step 4 or 5
    over runs), as the bounded check's does (about 30 CPU-s)."""
    import hw.switch.input_unit as input_unit
    from verif.formal.switch_induct import SwitchInductHarness
    from verif.mutants import RepeatingQueues
    monkeypatch.setattr(input_unit, "PacketQueues", RepeatingQueues)
    h = SwitchInductHarness()
    res, _ = run_formal("si_pdr_mutant", h, h.props, depth=8, cover_depth=None, workdir=tmp_path, engine="abc pdr")
    assert len(res) == 4 and all(r.proof.startswith("FAILS (counterexample at step") for r in res), res
