"""Formal proofs of the reduction buffer (``dysharp formal reduction_buffer``, :mod:`verif.formal.reduction`):
a fast subset of the properties holds and is covered; an ALU that ignores its ``chain`` operand (a
contribution right behind another to the same flit loses the first) must fail "exactly the expected
contributions"; the whole block (every property, depth 18) is a slow test."""

import pytest

from dysharp.cli import main
from verif.formal.reduction import IntAddALU, ReductionBufferHarness, SmallReductionBuffer
from verif.formal.runner import run_formal


class NoChainALU(IntAddALU):
    """Mutant: the stage-1 forwarding (``chain``) is ignored."""

    def __init__(self, **params):
        super().__init__(use_chain=False, **params)


def test_stale_timeout_and_error_causes_hold_and_are_covered(tmp_path):
    h = ReductionBufferHarness(only=("cause", "timeout", "stale"))
    res, _ = run_formal("rb_fast", h, h.props, depth=12, cover_depth=12, workdir=tmp_path)
    assert len(res) == 3
    for r in res:
        assert r.ok and r.proof == "bounded: holds to depth 12 (bounded model check)", r
        assert r.engine == "smtbmc yices"


def test_an_alu_without_forwarding_loses_a_contribution(tmp_path):
    h = ReductionBufferHarness(alu=NoChainALU, only=("exact",))
    res, _ = run_formal("rb_nochain", h, h.props, depth=13, cover_depth=1, workdir=tmp_path)
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


@pytest.mark.slow
def test_reduction_buffer_block_holds_and_every_property_is_covered(tmp_path, capsys):
    assert main(["formal", "reduction_buffer", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("holds to depth 18 (bounded model check)") == 7
    assert out.count("reached at step") == 7 and "NOT REACHED" not in out and "FAILS" not in out
