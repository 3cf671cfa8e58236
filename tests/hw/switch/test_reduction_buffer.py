"""Reduction buffer: cocotb suites against the reference model (see verif/tb/reduction_buffer.py)."""

import pytest

from verif.harness.runner import run_cocotb

TB = "verif.tb.reduction_buffer"


def _run(testcase, params, seed, sim, **env):
    run_cocotb("reduction_buffer", params, test_module=TB, testcase=testcase, seed=seed, sim=sim, env=env)


@pytest.mark.parametrize("params,requests", [({"entries": 32}, 32), ({"entries": 16, "max_length": 31}, 12),
                                             ({"entries": 48, "max_length": 5, "flit_width": 256}, 16)],
                         ids=["e32", "e16-len31", "e48-w256"])
def test_traffic(params, requests, seed, sim):
    _run("test_traffic", params, seed, sim, requests=requests, max_fanout=6)


@pytest.mark.slow
def test_traffic_soak(seed, sim, request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow test: run with -m slow")
    _run("test_traffic", {"entries": 64}, seed, sim, requests=400, max_fanout=16, lat=[5, 400])


@pytest.mark.parametrize("params,min_length", [({"entries": 32}, 1), ({"entries": 32}, 3),
                                               ({"entries": 32, "acc_stages": 1}, 1)],
                         ids=["single-flit", "3-flit", "one-cycle-alu"])
def test_back_to_back(params, min_length, seed, sim):
    _run("test_back_to_back", params, seed, sim, requests=8, min_length=min_length)


# At the 32-entry points that the back-to-back and latency tests build.
@pytest.mark.parametrize("params", [{"entries": 32}, {"entries": 32, "acc_stages": 1}], ids=["acc3", "acc1"])
def test_same_row_hazard(params, seed, sim):
    _run("test_same_row_hazard", params, seed, sim, requests=24)


@pytest.mark.parametrize("params", [{"entries": 16}, {"entries": 32, "outstanding": 1}],
                         ids=["full16", "one-at-a-time"])
def test_full(params, seed, sim):
    _run("test_full", params, seed, sim, extra=12 if params.get("outstanding") != 1 else 3)


def test_stale(seed, sim):
    _run("test_stale", {"entries": 16}, seed, sim)


def test_mismatch(seed, sim):
    _run("test_mismatch", {"entries": 32}, seed, sim)


def test_abort(seed, sim):
    _run("test_abort", {"entries": 32}, seed, sim)


def test_timeout(seed, sim):
    _run("test_timeout", {"entries": 32, "timeout": 300}, seed, sim, requests=10)


@pytest.mark.parametrize("params", [{"entries": 32}, {"entries": 32, "acc_stages": 1}], ids=["acc3", "acc1"])
def test_latency(params, seed, sim):
    _run("test_latency", params, seed, sim)
