"""The ld_reduce flow: engine (Python AL-TLB model) and unit (RTL stand-in translator), see
verif/tb/reduction_engine.py."""

import pytest

from verif.harness.runner import run_cocotb

TB = "verif.tb.reduction_engine"


def _run(module, testcase, params, seed, sim, **env):
    run_cocotb(module, params, test_module=TB, testcase=testcase, seed=seed, sim=sim, env=env)


def test_traffic_engine(seed, sim):
    _run("reduction_engine", "test_traffic", {"ports": 8, "entries": 32}, seed, sim, requests=30)


def test_traffic_unit(seed, sim):
    _run("ld_reduce_unit", "test_traffic", {"ports": 4, "entries": 16, "rows": 4096}, seed, sim, requests=30)


def test_errors_engine(seed, sim):
    _run("reduction_engine", "test_errors", {"ports": 8, "entries": 32}, seed, sim)


def test_errors_unit(seed, sim):
    _run("ld_reduce_unit", "test_errors", {"ports": 4, "entries": 16, "rows": 4096}, seed, sim, rounds=1)


def test_timeout(seed, sim):
    _run("reduction_engine", "test_timeout", {"ports": 8, "entries": 16, "timeout": 400}, seed, sim)


@pytest.mark.parametrize("params", [{"entries": 16}, {"entries": 16, "outstanding": 1}],
                         ids=["full16", "one-at-a-time"])
def test_full(params, seed, sim):
    _run("ld_reduce_unit", "test_full", dict(params, ports=4, rows=4096), seed, sim,
         extra=8 if params.get("outstanding") != 1 else 3)
