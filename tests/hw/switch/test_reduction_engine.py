"""The ld_reduce flow: engine (Python AL-TLB model) and unit (RTL stand-in translator), see
verif/tb/reduction_engine.py."""

import pytest

from verif.harness.runner import run_cocotb

TB = "verif.tb.reduction_engine"


def _run(module, testcase, params, seed, sim, **env):
    run_cocotb(module, params, test_module=TB, testcase=testcase, seed=seed, sim=sim, env=env)


# The tests of one design point share one simulator run (tests/conftest.py: shared_run), each a scenario
# from reset with its own seed and result. The reduction tags' generations live in a memory that reset does
# not clear, so the tests that depend on the first tags after power-up (the early answers guess them; the
# unit's error rounds) have runs of their own.
def at(module, params, testcase, env=None):
    return pytest.mark.shared_run(module, params, TB, testcase, env=env)


ENGINE = {"ports": 8, "entries": 32}
UNIT = {"ports": 4, "entries": 16, "rows": 4096}


@at("reduction_engine", ENGINE, "test_traffic", env={"requests": 30})
def test_traffic_engine(shared_run):
    shared_run()


@at("ld_reduce_unit", UNIT, "test_traffic", env={"requests": 30})
def test_traffic_unit(shared_run):
    shared_run()


@at("reduction_engine", ENGINE, "test_errors")
def test_errors_engine(shared_run):
    shared_run()


def test_errors_unit(seed, sim):
    _run("ld_reduce_unit", "test_errors", UNIT, seed, sim, rounds=1)


def test_timeout(seed, sim):
    _run("reduction_engine", "test_timeout", {"ports": 8, "entries": 16, "timeout": 400}, seed, sim)


@pytest.mark.parametrize("params", [{"entries": 16}, {"entries": 16, "outstanding": 1}],
                         ids=["full16", "one-at-a-time"])
@at("ld_reduce_unit", lambda params: dict(params, ports=4, rows=4096), "test_full",
    env=lambda params: {"extra": 8 if params.get("outstanding") != 1 else 3})
def test_full(params, shared_run):
    shared_run()


DEFER = {"ports": 8, "entries": 32, "defer_translation": True}


@at("reduction_engine", DEFER, "test_traffic", env={"requests": 30})
def test_traffic_deferred(shared_run):
    """defer_translation: every read is a bit-checked DYN_RED_READ (or RED_READ for static groups), the
    translate port is never used, results bit-exact."""
    shared_run()


@at("reduction_engine", DEFER, "test_errors", env={"rounds": 1})
def test_errors_deferred(shared_run):
    """defer_translation: translation failures come back as error-coded RED_READ_RESPs from the
    destinations' egress."""
    shared_run()


@pytest.mark.parametrize("module,params", [("reduction_engine", ENGINE), ("reduction_engine", DEFER),
                                           ("ld_reduce_unit", UNIT)], ids=["engine", "deferred", "unit"])
@at(lambda module: module, lambda params: params, "test_bad_answers")
def test_bad_answers(module, params, shared_run):
    """Error-coded answers, duplicated answers, answers from ports that were not asked."""
    shared_run()


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_defer_translation_must_be_bool(value):
    from hw.switch.reduction_engine import ReductionEngine
    with pytest.raises(ValueError, match="defer_translation must be a bool"):
        ReductionEngine(defer_translation=value)


def test_duplicates_counter_exported():
    from hw.switch.ld_reduce_unit import LdReduceUnit
    from hw.switch.reduction_engine import ENGINE_COUNTERS, ReductionEngine
    assert ENGINE_COUNTERS[-1] == "duplicates"
    for dut in (ReductionEngine(), LdReduceUnit()):
        assert "duplicates" in dut.signature.members and "bad_responses" in dut.signature.members
        dut._MustUse__silence = True     # built only to look at its signature


@pytest.mark.parametrize("value", [0, -1, 1 << 25, 16.0, "16k"])
def test_row_bytes_must_be_a_positive_int(value):
    from hw.switch.dysharp_switch import DySharpSwitch
    from hw.switch.reduction_engine import ReductionEngine
    with pytest.raises(ValueError, match="row_bytes must be an integer in 1.."):
        ReductionEngine(row_bytes=value)
    with pytest.raises(ValueError, match="row_bytes must be an integer in 1.."):
        DySharpSwitch(ports=4, row_bytes=value)


@pytest.mark.parametrize("module,params", [("reduction_engine", ENGINE), ("reduction_engine", DEFER)],
                         ids=["engine", "deferred"])
def test_early_answers(module, params, seed, sim):
    """Answers that guess an allocated entry's tag before its fan-out: stale, the result bit-exact. The
    testbench takes the tag's entry and generation bits from ``entries``: it runs at the traffic tests' points."""
    _run(module, "test_early_answers", params, seed, sim)


def test_a_buffer_that_counts_every_contribution_stale_fails(seed, sim):
    """The engine testbench asserts every status counter at the end of a run: a mutant buffer that counts
    every contribution as stale (results still right) fails it."""
    from verif import mutants
    mutants.register()
    r = run_cocotb("reduction_engine_all_stale", {"ports": 8, "entries": 16, "defer_translation": True},
                   test_module=TB, testcase="test_traffic", seed=seed, sim=sim, env={"requests": 8}, check=False,
                   quiet=True)
    assert r.failed == 1
    assert "status counters" in r.log_file.read_text()
