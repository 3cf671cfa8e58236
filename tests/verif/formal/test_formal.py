"""Formal proofs (``dysharp formal``): the credit link's four properties are proven by k-induction and every
one has a reached ``Cover``; a mutant of the sender or the receiver for each property must fail it (the
proof can fail)."""

import pytest
from amaranth.hdl import Module, Signal

from dysharp.cli import main
from hw.credit import CreditReceiver, CreditSender
from verif.formal.credit_link import CreditLinkHarness
from verif.formal.runner import run_formal
from verif.mutants import GreedySender


class LateFlitSender(CreditSender):
    """A broken sender: each flit carries the payload offered in the cycle before (a misplaced register)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        prev = Signal.like(self.i.payload)
        m.d.sync += prev.eq(self.i.payload)
        m.d.comb += self.link.flit.eq(prev)
        return m


class DoubleCreditReceiver(CreditReceiver):
    """A broken receiver: it returns two credits for each flit it delivers."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        q = m.submodules.fifo
        m.d.comb += self.link.credit.eq((q.r_rdy & self.o.ready) << 1)     # overrides the one credit
        return m


class LosingCreditReceiver(CreditReceiver):
    """A broken receiver: a flit delivered in a cycle a flit arrives returns no credit (the credit is lost;
    the FIFO and the data are untouched)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        q = m.submodules.fifo
        m.d.comb += self.link.credit.eq(q.r_rdy & self.o.ready & ~self.link.valid)
        return m


def test_credit_link_is_proven_and_every_property_is_covered(tmp_path, capsys):
    assert main(["formal", "credit_link", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("proven (k-induction, k = 2)") == 4 and "holds to depth" not in out
    assert out.count("reached at step") == 4 and "NOT REACHED" not in out and "FAILS" not in out


# Each mutant breaks the property named (the proof's base case finds it within 8 cycles of reset); the
# properties it leaves intact are not claimed once one fails.
MUTANTS = {
    "nothing is sent without a credit": (GreedySender, None),
    "a sender never exceeds its credits (no receiver overflow)": (None, DoubleCreditReceiver),
    "credits are conserved": (None, LosingCreditReceiver),
    "no flit lost or duplicated, in order": (LateFlitSender, None),
}


@pytest.mark.parametrize("prop", MUTANTS)
def test_a_mutant_fails_its_property(prop, tmp_path):
    sender, receiver = MUTANTS[prop]
    h = CreditLinkHarness(4, sender=sender and sender(credits=4), receiver=receiver and receiver(depth=4))
    res, _ = run_formal("mutant", h, h.props, depth=8, cover_depth=None, workdir=tmp_path)
    by = {r.name: r for r in res}
    assert by[prop].proof.startswith("FAILS"), by[prop]
    assert all(r.proof.startswith(("FAILS", "not proven")) for r in res) and not any(r.ok for r in res)


def test_unknown_block_is_named(capsys):
    assert main(["formal", "nope"]) == 2
    assert "unknown block nope; valid: credit_link" in capsys.readouterr().err
