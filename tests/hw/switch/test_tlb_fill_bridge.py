"""TlbFillBridge: cocotb with a cycle model of its response buffer (verif/tb/tlb_fill_bridge.py)."""

import gc

import pytest

from hw.switch.tlb_fill_bridge import TlbFillBridge
from verif.harness.runner import run_scenarios

TB = "verif.tb.tlb_fill_bridge"


def test_bridge(seed, sim):
    """Both cases in one simulator run (each a cocotb test of its own, from reset)."""
    failed = run_scenarios("tlb_fill_bridge", {"port": 5}, test_module=TB, sim=sim,
                           scenarios=[(c, {}, seed) for c in ("test_random", "test_full_rate")])
    assert not failed, "\n".join(failed)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kwargs", [{"ports": 0}, {"ports": 65}, {"port": 8, "ports": 8}, {"port": -1},
                                    {"flit_width": 64}])
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        TlbFillBridge(**kwargs)
    gc.collect()
