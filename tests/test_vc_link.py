"""Credit-link receiver and two-VC link: cocotb against link-partner models (verif/tb/vc_link.py)."""

import gc

import pytest

from hw.credit import CreditReceiver
from hw.vc_link import VcReceiver, VcSender
from verif.harness.runner import run_cocotb

TB = "verif.tb.vc_link"


@pytest.mark.parametrize("module,params", [("credit_receiver", {"depth": 2}), ("credit_receiver", {}),
                                           ("vc_receiver", {}), ("vc_receiver", {"credits": [2, 3]})])
@pytest.mark.parametrize("case", ["test_receiver_random", "test_receiver_overflow", "test_receiver_full_rate"])
def test_receiver(module, params, case, seed, sim):
    run_cocotb(module, params, test_module=TB, testcase=case, seed=seed, sim=sim)


@pytest.mark.parametrize("params", [{}, {"credits": [2, 3]}])
@pytest.mark.parametrize("case", ["test_sender_random", "test_sender_full_rate", "test_sender_vc_independence"])
def test_vc_sender(params, case, seed, sim):
    run_cocotb("vc_sender", params, test_module=TB, testcase=case, seed=seed, sim=sim)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("make", [
    lambda: CreditReceiver(depth=0), lambda: CreditReceiver(depth=8, flit_width=64),
    lambda: VcSender(credits=(8,)), lambda: VcSender(credits=(0, 8)), lambda: VcReceiver(credits=8),
    lambda: VcReceiver(credits=(8, 5000)),
])
def test_bad_parameters(make):
    with pytest.raises(ValueError):
        make()
    gc.collect()
