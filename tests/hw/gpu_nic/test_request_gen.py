"""dymultimem request generator: packets against the packet-format reference, in each mode (dynamic,
unicast, static multimem), under stalls (see verif/tb/request_gen.py)."""

import pytest

from verif.harness.runner import run_cocotb

TB = "verif.tb.request_gen"


@pytest.mark.parametrize("unicast", [0, 1])
def test_traffic(unicast, seed, sim):
    run_cocotb("request_gen", {"ports": 8, "tags": 4, "fetch_depth": 24}, test_module=TB,
               testcase="test_traffic", seed=seed, sim=sim, env={"unicast": unicast, "descs": 40})


def test_traffic_small_packets(seed, sim):
    run_cocotb("request_gen", {"ports": 4, "max_payload": 3, "tags": 8, "credits": 3, "fetch_depth": 3},
               test_module=TB, testcase="test_traffic", seed=seed, sim=sim,
               env={"unicast": 1, "descs": 30, "max_len": 10, "latency": 3})


@pytest.mark.parametrize("unicast", [0, 1])
def test_line_rate(unicast, seed, sim):
    run_cocotb("request_gen", {"ports": 8}, test_module=TB, testcase="test_line_rate", seed=seed, sim=sim,
               env={"unicast": unicast, "descs": 4})


@pytest.mark.parametrize("unicast", [0, 1])
def test_bad_descriptors(unicast, seed, sim):
    run_cocotb("request_gen", {"ports": 8}, test_module=TB, testcase="test_bad_descriptors", seed=seed,
               sim=sim, env={"unicast": unicast})


def test_static_traffic(seed, sim):
    """Static multimem (NVLS): MM_ST / MM_LD_REDUCE at the symmetric address under the group handle, random
    stalls and tag reuse, bad descriptors (BAD_GROUP, BAD_LENGTH, BAD_TYPE) dropped and counted."""
    run_cocotb("request_gen", {"ports": 8, "tags": 4, "fetch_depth": 24}, test_module=TB,
               testcase="test_traffic", seed=seed, sim=sim, env={"unicast": 0, "static": 1, "descs": 40})


def test_static_line_rate_and_bad_descriptors(seed, sim):
    run_cocotb("request_gen", {"ports": 8}, test_module=TB, testcase="test_line_rate", seed=seed, sim=sim,
               env={"unicast": 0, "static": 1, "descs": 4})
    run_cocotb("request_gen", {"ports": 8}, test_module=TB, testcase="test_bad_descriptors", seed=seed,
               sim=sim, env={"unicast": 0, "static": 1})


def test_tag_wait(seed, sim):
    """A reduction load waiting for its tag holds the store behind it; the stall counters and the
    ``tag_ready`` hint count and show it cycle for cycle."""
    run_cocotb("request_gen", {"ports": 8, "tags": 4}, test_module=TB, testcase="test_tag_wait", seed=seed,
               sim=sim, env={"hold": 60})


@pytest.mark.parametrize("unicast", [0, 1])
def test_traffic_any_tag(unicast, seed, sim):
    """``any_tag``: a reduction load takes the lowest free tag (not the next in turn); never one still busy,
    the loads' tags in order are the bound ones, everything else as in ``test_traffic``."""
    run_cocotb("request_gen", {"ports": 8, "tags": 4, "fetch_depth": 24, "any_tag": True}, test_module=TB,
               testcase="test_traffic", seed=seed, sim=sim, env={"unicast": unicast, "descs": 40})
