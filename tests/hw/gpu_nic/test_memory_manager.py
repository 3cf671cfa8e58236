"""Memory manager: lockstep with the cycle model + the layout contract (verif/tb/memory_manager.py)."""

import gc

import pytest

from hw.gpu_nic.memory_manager import MemoryManager
from verif.harness.runner import run_cocotb

TB = "verif.tb.memory_manager"
SMALL = {"groups": 8, "layouts": 2, "index_bits": 5, "slots": 12, "epoch_bits": 2}


def test_random(seed, sim):
    run_cocotb("memory_manager", SMALL, test_module=TB, testcase="test_random", seed=seed, sim=sim,
               env={"requests": 600})


def test_directed(seed, sim):
    run_cocotb("memory_manager", SMALL, test_module=TB, testcase="test_directed", seed=seed, sim=sim)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kwargs", [{"groups": 0}, {"layouts": 17}, {"index_bits": 3}, {"index_bits": 19},
                                    {"slots": 0}, {"epoch_bits": 0}])
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        MemoryManager(**kwargs)
    gc.collect()   # the refused object is reported as unused when collected: do it under the filter
