"""TlbFillBridge: cocotb with a cycle model of its response buffer (verif/tb/tlb_fill_bridge.py)."""

import gc

import pytest

from hw.switch.tlb_fill_bridge import TlbFillBridge
from verif.harness.runner import run_cocotb

TB = "verif.tb.tlb_fill_bridge"


@pytest.mark.parametrize("case", ["test_random", "test_full_rate"])
def test_bridge(case, seed, sim):
    run_cocotb("tlb_fill_bridge", {"port": 5}, test_module=TB, testcase=case, seed=seed, sim=sim)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kwargs", [{"ports": 0}, {"ports": 65}, {"port": 8, "ports": 8}, {"port": -1},
                                    {"flit_width": 64}])
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        TlbFillBridge(**kwargs)
    gc.collect()
