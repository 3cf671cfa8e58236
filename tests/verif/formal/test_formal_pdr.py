"""The PDR (IC3) engine of the formal runner (``engine="abc pdr"``: ABC's ``pdr`` through SymbiYosys):
it proves a block's properties for all time where they hold, finds the counterexample of a mutant and
names the property it breaks with its step, and refuses what it cannot do with a clear message."""

import pytest

import verif.formal.runner as runner
from verif.formal.credit_link import CreditLinkHarness
from verif.formal.runner import run_formal
from verif.mutants import GreedySender


def test_pdr_proves_the_credit_link(tmp_path):
    """The credit link's four properties by PDR, unbounded (about 5 CPU-s), the covers by smtbmc."""
    h = CreditLinkHarness(4)
    res, _ = run_formal("cl_pdr", h, h.props, depth=2, cover_depth=12, workdir=tmp_path, engine="abc pdr",
                        cover_engine="smtbmc yices")
    assert len(res) == 4
    assert all(r.proof == "proven (PDR, unbounded)" and r.ok and r.engine == "abc pdr" for r in res), res


def test_pdr_fails_a_mutant_and_names_its_property(tmp_path):
    """A sender that ignores its credits: ABC's counterexample, replayed by smtbmc, breaks "nothing is sent
    without a credit" at step 5; the other properties are not claimed."""
    h = CreditLinkHarness(4, sender=GreedySender(credits=4))
    res, _ = run_formal("cl_pdr_mutant", h, h.props, depth=2, cover_depth=None, workdir=tmp_path, engine="abc pdr")
    by = {r.name: r for r in res}
    assert by["nothing is sent without a credit"].proof == "FAILS (counterexample at step 5)", res
    assert all(r.proof.startswith(("FAILS", "not proven")) and not r.ok for r in res), res


def test_pdr_without_yosys_abc_names_the_tool(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "yosys_abc", lambda: None)
    with pytest.raises(RuntimeError, match="yosys-abc .* is not installed"):
        runner.tool_path(tmp_path, "abc pdr")


def test_pdr_is_not_a_cover_engine(tmp_path):
    h = CreditLinkHarness(4)
    with pytest.raises(ValueError, match="abc pdr proves, it does not cover"):
        run_formal("cl", h, h.props, depth=2, cover_depth=12, workdir=tmp_path, engine="abc pdr",
                   cover_engine="abc pdr")
