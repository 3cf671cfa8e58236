"""CAM core: cycle-exact against the reference model (see verif/tb/cam.py)."""

import gc

import pytest

from hw.switch.cam import Cam
from verif.harness.runner import run_cocotb

TB = "verif.tb.cam"


@pytest.mark.parametrize("entries,cycles", [(16, 3000), (64, 1500)])
def test_random(entries, cycles, seed, sim):
    run_cocotb("cam", {"entries": entries, "key_width": 12, "value_width": 16}, test_module=TB,
               testcase="test_random", seed=seed, sim=sim, env={"cycles": cycles})


def test_directed(seed, sim):
    run_cocotb("cam", {"entries": 16, "key_width": 16, "value_width": 12}, test_module=TB,
               testcase="test_directed", seed=seed, sim=sim)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kwargs", [{"entries": 8}, {"entries": 2048}, {"entries": 48}, {"key_width": 0},
                                    {"value_width": 129}])
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        Cam(**kwargs)
    gc.collect()   # the refused object is reported as unused when collected: do it under the filter
