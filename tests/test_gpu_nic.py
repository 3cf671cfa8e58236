"""The composed GPU NIC in loopback: dispatch -> arrivals -> ready tiles, and combine round trips, in both
modes (see verif/tb/gpu_nic.py)."""

import pytest

from verif.harness.runner import run_cocotb


@pytest.mark.parametrize("unicast", [0, 1])
def test_loopback(unicast, seed, sim):
    run_cocotb("gpu_nic", {"experts": 8, "tiles": 4, "tile_size": 4, "tags": 8}, test_module="verif.tb.gpu_nic",
               testcase="test_loopback", seed=seed, sim=sim, env={"unicast": unicast, "tokens": 24})
