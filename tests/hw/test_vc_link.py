"""Credit-link receiver and two-VC link: cocotb against link-partner models (verif/tb/vc_link.py)."""

import gc

import pytest

from hw.credit import CREDIT_RETURN_MAX, CreditReceiver, CreditReturn
from hw.vc_link import VcReceiver, VcSender
from verif.harness.runner import run_scenarios

TB = "verif.tb.vc_link"


# Each design point's three cases share one simulator run (each a cocotb test of its own, from reset).
def _cases(module, params, cases, seed, sim):
    failed = run_scenarios(module, params, test_module=TB, sim=sim, scenarios=[(c, {}, seed) for c in cases])
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("module,params", [("credit_receiver", {"depth": 2}), ("credit_receiver", {}),
                                           ("vc_receiver", {}), ("vc_receiver", {"credits": [2, 3]})])
def test_receiver(module, params, seed, sim):
    _cases(module, params, ["test_receiver_random", "test_receiver_overflow", "test_receiver_full_rate"], seed, sim)


@pytest.mark.parametrize("params", [{}, {"credits": [2, 3]}])
def test_vc_sender(params, seed, sim):
    _cases("vc_sender", params, ["test_sender_random", "test_sender_full_rate", "test_sender_vc_independence"],
           seed, sim)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("make", [
    lambda: CreditReceiver(depth=0), lambda: CreditReceiver(depth=8, flit_width=64),
    lambda: VcSender(credits=(8,)), lambda: VcSender(credits=(0, 8)), lambda: VcReceiver(credits=8),
    lambda: VcReceiver(credits=(8, 5000)),
    lambda: CreditReturn(max_gain=0, max_loss=2, bound=8), lambda: CreditReturn(max_gain=3, max_loss=2, bound=8.5),
])
def test_bad_parameters(make):
    with pytest.raises(ValueError):
        make()
    gc.collect()


def test_credit_return_matches_its_model():
    """Random gains, losses and holds: each cycle returns min(owed, CREDIT_RETURN_MAX) of the balance still
    owed (nothing while it is negative or ``hold`` is set), and ``pending`` is that balance; every gained
    credit is returned."""
    import random

    from amaranth.sim import Simulator

    dut = CreditReturn(max_gain=4, max_loss=2, bound=40)
    rng = random.Random(5)
    seen = {"max": 0, "neg": 0, "returned": 0, "gained": 0, "lost": 0, "held": 0}

    async def tb(ctx):
        pending = 0
        for cycle in range(3000):
            drain = cycle >= 2900
            gain = 0 if drain else rng.choice([0, 0, 1, 2, 3, 4])
            loss = 0 if drain else rng.choice([0, 0, 0, 1, 2])
            ctx.set(dut.gain, gain)
            hold = not drain and rng.random() < 0.2
            ctx.set(dut.loss, loss)
            ctx.set(dut.hold, hold)
            want = 0 if hold else min(max(pending, 0), CREDIT_RETURN_MAX)
            seen["held"] += hold and pending > 0
            assert ctx.get(dut.pending) == pending and ctx.get(dut.credit) == want, cycle
            seen["max"] += want == CREDIT_RETURN_MAX
            seen["neg"] += pending < 0
            seen["returned"] += want
            seen["gained"] += gain
            seen["lost"] += loss
            pending += gain - loss - want
            await ctx.tick()
        assert pending == 0
    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(tb)
    sim.run()
    # the clamp, the negative balance and a hold of credits owed were exercised
    assert seen["max"] > 100 and seen["neg"] > 10 and seen["held"] > 100
    assert seen["returned"] == seen["gained"] - seen["lost"]
