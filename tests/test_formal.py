"""Formal proofs (``dysharp formal``): the credit link's properties hold (bounded to depth 8, k-induction
where it closes) and every one has a reached ``Cover``; a sender that ignores its credits must fail them
(the proof can fail)."""

from amaranth.hdl import Module
from amaranth.lib import wiring

from dysharp.cli import main
from hw.credit import CreditSender
from verif.formal.credit_link import CreditLinkHarness
from verif.formal.runner import run_formal


class GreedySender(CreditSender):
    """A broken sender: it sends whenever offered a flit, credit or not."""

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.i.ready.eq(1), self.link.valid.eq(self.i.valid), self.link.flit.eq(self.i.payload)]
        m.d.sync += self.credits_left.eq(self.credits_left - self.link.valid + self.link.credit)
        return m


def test_credit_link_holds_and_every_property_is_covered(tmp_path, capsys):
    assert main(["formal", "credit_link", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("holds to depth 8") + out.count("proven (k-induction") == 4
    assert out.count("reached at step") == 4 and "NOT REACHED" not in out and "FAILS" not in out


def test_a_sender_that_ignores_credits_fails(tmp_path):
    h = CreditLinkHarness(4, sender=GreedySender(credits=4))
    res, _ = run_formal("greedy", h, h.props, depth=8, cover_depth=12, workdir=tmp_path)
    by = {r.name: r for r in res}
    assert by["nothing is sent without a credit"].proof.startswith("FAILS")
    # the base case stops at the first failing step: the rest are not claimed
    assert all(r.proof.startswith(("FAILS", "not proven")) for r in res) and not any(r.ok for r in res)


def test_unknown_block_is_named(capsys):
    assert main(["formal", "nope"]) == 2
    assert "unknown block nope; valid: credit_link" in capsys.readouterr().err
