"""Reduction buffer: cocotb suites against the reference model (see verif/tb/reduction_buffer.py)."""

import pytest

from verif.harness.runner import run_cocotb

TB = "verif.tb.reduction_buffer"


def _run(testcase, params, seed, sim, **env):
    run_cocotb("reduction_buffer", params, test_module=TB, testcase=testcase, seed=seed, sim=sim, env=env)


# The tests of one design point share one simulator run (tests/conftest.py: shared_run), each a scenario
# from reset with its own seed and result.
def at(params, testcase, env=None):
    return pytest.mark.shared_run("reduction_buffer", params, TB, testcase, env=env)


@pytest.mark.parametrize("params,requests", [({"entries": 32}, 32), ({"entries": 16, "max_length": 31}, 12),
                                             ({"entries": 48, "max_length": 5, "flit_width": 256}, 16)],
                         ids=["e32", "e16-len31", "e48-w256"])
@at(lambda params: params, "test_traffic", env=lambda requests: {"requests": requests, "max_fanout": 6})
def test_traffic(params, requests, shared_run):
    shared_run()


@pytest.mark.slow
def test_traffic_soak(seed, sim, request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow test: run with -m slow")
    _run("test_traffic", {"entries": 64}, seed, sim, requests=400, max_fanout=16, lat=[5, 400])


@pytest.mark.parametrize("params,min_length", [({"entries": 32}, 1), ({"entries": 32}, 3),
                                               ({"entries": 32, "acc_stages": 1}, 1)],
                         ids=["single-flit", "3-flit", "one-cycle-alu"])
@at(lambda params: params, "test_back_to_back", env=lambda min_length: {"requests": 8, "min_length": min_length})
def test_back_to_back(params, min_length, shared_run):
    shared_run()


# At the 32-entry points that the back-to-back and latency tests build.
@pytest.mark.parametrize("params", [{"entries": 32}, {"entries": 32, "acc_stages": 1}], ids=["acc3", "acc1"])
@at(lambda params: params, "test_same_row_hazard", env={"requests": 24})
def test_same_row_hazard(params, shared_run):
    shared_run()


@pytest.mark.parametrize("params", [{"entries": 16}, {"entries": 32, "outstanding": 1}],
                         ids=["full16", "one-at-a-time"])
@at(lambda params: params, "test_full", env=lambda params: {"extra": 12 if params.get("outstanding") != 1 else 3})
def test_full(params, shared_run):
    shared_run()


@at({"entries": 16}, "test_stale")
def test_stale(shared_run):
    shared_run()


@at({"entries": 32}, "test_mismatch")
def test_mismatch(shared_run):
    shared_run()


@at({"entries": 32}, "test_abort")
def test_abort(shared_run):
    shared_run()


def test_timeout(seed, sim):
    _run("test_timeout", {"entries": 32, "timeout": 300}, seed, sim, requests=10)


@pytest.mark.parametrize("params", [{"entries": 32}, {"entries": 32, "acc_stages": 1}], ids=["acc3", "acc1"])
@at(lambda params: params, "test_latency")
def test_latency(params, shared_run):
    shared_run()
