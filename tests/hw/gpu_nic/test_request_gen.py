"""dymultimem request generator: packets against the packet-format reference, in each mode (dynamic,
unicast, static multimem), under stalls (see verif/tb/request_gen.py)."""

import pytest

from verif.harness.runner import run_cocotb

TB = "verif.tb.request_gen"


TRAFFIC = {"ports": 8, "tags": 4, "fetch_depth": 24}


# The tests of one design point share one simulator run (tests/conftest.py: shared_run), each a scenario
# from reset with its own seed and result.
def at(params, testcase, env=None):
    return pytest.mark.shared_run("request_gen", params, TB, testcase, env=env)


@pytest.mark.parametrize("unicast", [0, 1])
@at(TRAFFIC, "test_traffic", env=lambda unicast: {"unicast": unicast, "descs": 40})
def test_traffic(unicast, shared_run):
    shared_run()


def test_traffic_small_packets(seed, sim):
    run_cocotb("request_gen", {"ports": 4, "max_payload": 3, "tags": 8, "credits": 3, "fetch_depth": 3},
               test_module=TB, testcase="test_traffic", seed=seed, sim=sim,
               env={"unicast": 1, "descs": 30, "max_len": 10, "latency": 3})


@pytest.mark.parametrize("unicast", [0, 1])
@at({"ports": 8}, "test_line_rate", env=lambda unicast: {"unicast": unicast, "descs": 4})
def test_line_rate(unicast, shared_run):
    shared_run()


@pytest.mark.parametrize("unicast", [0, 1])
@at({"ports": 8}, "test_bad_descriptors", env=lambda unicast: {"unicast": unicast})
def test_bad_descriptors(unicast, shared_run):
    shared_run()


@at(TRAFFIC, "test_traffic", env={"unicast": 0, "static": 1, "descs": 40})
def test_static_traffic(shared_run):
    """Static multimem (NVLS): MM_ST / MM_LD_REDUCE at the symmetric address under the group handle, random
    stalls and tag reuse, bad descriptors (BAD_GROUP, BAD_LENGTH, BAD_TYPE) dropped and counted."""
    shared_run()


@at({"ports": 8}, "test_line_rate", env={"unicast": 0, "static": 1, "descs": 4})
def test_static_line_rate(shared_run):
    shared_run()


@at({"ports": 8}, "test_bad_descriptors", env={"unicast": 0, "static": 1})
def test_static_bad_descriptors(shared_run):
    shared_run()


def test_tag_wait(seed, sim):
    """A reduction load waiting for its tag holds the store behind it; the stall counters and the
    ``tag_ready`` hint count and show it cycle for cycle."""
    run_cocotb("request_gen", {"ports": 8, "tags": 4}, test_module=TB, testcase="test_tag_wait", seed=seed,
               sim=sim, env={"hold": 60})


@pytest.mark.parametrize("unicast", [0, 1])
@at({**TRAFFIC, "any_tag": True}, "test_traffic", env=lambda unicast: {"unicast": unicast, "descs": 40})
def test_traffic_any_tag(unicast, shared_run):
    """``any_tag``: a reduction load takes the lowest free tag (not the next in turn); never one still busy,
    the loads' tags in order are the bound ones, everything else as in ``test_traffic``."""
    shared_run()
