"""``DySharpSwitch(fill_bypass=True)``: a TLB fill answer overtakes a read answer that cannot enter the response
network (cocotb at the 4-port switch, verif/tb/fill_bypass.py), and the test fails without the bypass."""

import gc
from pathlib import Path

import pytest

from hw.switch.dysharp_switch import DySharpSwitch
from hw.switch.fill_bypass import FillBypassReceiver
from verif.harness.runner import run_scenarios

TB = "verif.tb.fill_bypass"
# Small response buffers: the read answers back up into port 1's receive FIFO after a few packets.
POINT = {"ports": 4, "credits": 17, "resp_credits": 4, "gpu_credits": 1}


def test_fill_overtakes_a_blocked_read_answer(seed, sim):
    failed = run_scenarios("dysharp_switch", {**POINT, "fill_bypass": True}, test_module=TB, sim=sim,
                           scenarios=[("test_fill_behind_blocked_read", {}, seed)])
    assert not failed, "\n".join(failed)


@pytest.mark.slow
def test_without_the_bypass_the_fill_waits(seed, sim):
    """The same scenario on the default switch: the fill answer waits behind the read answer (the test
    can fail; slow: a build of its own, about 9 s)."""
    failed = run_scenarios("dysharp_switch", POINT, test_module=TB, sim=sim,
                           scenarios=[("test_fill_behind_blocked_read", {}, seed)])
    assert len(failed) == 1, "the scenario passed without the bypass"
    log = Path(failed[0].rsplit("log: ", 1)[1]).read_text()
    assert "no WRITE at port 1 within 300 cycles of its fill answer leaving GPU 1: the fill waits behind a read " \
           "answer (0 of" in log, failed[0]


@pytest.mark.slow
def test_switch_traffic_with_the_bypass(seed, sim):
    """The integrated switch's own random scenarios against its reference model (verif/tb/dysharp_switch.py)
    with the bypass on: mixed traffic, a storm of TLB misses, fills from a silent GPU timing out, full-rate
    reductions that must not deadlock; fill answers that report a fault, and accesses out of bounds (slow:
    about 25 s; the bypass is off by default, and the two scenarios above run it in the default suite)."""
    failed = run_scenarios("dysharp_switch", {"ports": 4, "tlb_timeout": 512, "red_timeout": 1024,
                                              "allow_short_timeouts": True, "fill_bypass": True},
                           test_module="verif.tb.dysharp_switch", sim=sim, scenarios=[
        ("test_traffic", {"packets": 10}, seed), ("test_tlb", {"storm": 4}, seed),
        ("test_fill_timeout", {"packets": 2}, seed), ("test_deadlock", {"reductions": 10}, seed),
        ("test_bad_input", {"kind": "fault"}, seed), ("test_bad_input", {"kind": "bounds"}, seed)])
    assert not failed, "\n".join(failed)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_bad_fill_bypass(value):
    with pytest.raises(ValueError, match=r"fill_bypass must be True or False \(true/false with --design\), "
                                         rf"got {value!r}"):
        DySharpSwitch(ports=4, fill_bypass=value)
    gc.collect()


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("credits", [1, 257, True, (8, 8)])
def test_bad_receiver_credits(credits):
    with pytest.raises(ValueError, match="credits must be an integer in 2..256"):
        FillBypassReceiver(credits=credits)
    gc.collect()


@pytest.mark.parametrize("params", [{}, {"credits": 2}])
def test_receiver(params, seed, sim):
    """The receiver alone against its lane model (verif/tb/fill_bypass_receiver.py), its three cases in one
    simulator run."""
    failed = run_scenarios("fill_bypass_receiver", params, test_module="verif.tb.fill_bypass_receiver", sim=sim,
                           scenarios=[(c, {}, seed) for c in ("test_random", "test_overflow",
                                                              "test_fills_pass_a_stalled_lane")])
    assert not failed, "\n".join(failed)
