"""The whole switch with its composed invariant (``dysharp formal switch_induct``,
:mod:`verif.formal.switch_induct`): the switch harness's four properties on the real NVSwitch at 2 ports
and 3 credits, each asserted with the invariant the part proofs state (the packet store's, the allocation's,
the output queues') and what only the composition has, hold to their bounded depth with every cover
reached; queues that leave a dequeued packet at their head fail them."""

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
    """The registered block: depth 8 and the covers (about 10 minutes)."""
    assert main(["formal", "switch_induct", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("holds to depth 8") == 4 and out.count("reached at step") == 4, out
    assert "NOT REACHED" not in out and "FAILS" not in out, out
