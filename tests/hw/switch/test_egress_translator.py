"""Egress translator: bit-exact scoreboard against a Python model, ordering, errors, line rate
(verif/tb/egress_translator.py)."""

import gc

import pytest

from hw.switch.egress_translator import EgressTranslator
from verif.harness.runner import run_cocotb

TB = "verif.tb.egress_translator"
PARAMS = {"port": 5, "ports": 8}


# The tests of one design point share one simulator run (tests/conftest.py: shared_run), each a scenario
# from reset with its own seed and result.
def at(params, testcase, env=None):
    return pytest.mark.shared_run("egress_translator", params, TB, testcase, env=env)


@at(PARAMS, "test_random", env={"packets": 400})
def test_random(shared_run):
    """Mixed traffic, 70 % hits / 30 % misses (20..200 cycles) out of order, 8 % errors, 5 % poisoned,
    stalls on every interface: every packet bit-exact, per-source order, nothing lost or duplicated."""
    shared_run()


def test_random_wide_small(seed, sim):
    """256-bit flits (the head flit's upper bits pass), 4 slots, 4-flit payloads, 64 ports, 8 sources."""
    run_cocotb("egress_translator", {"port": 63, "ports": 64, "flit_width": 256, "slots": 4, "max_payload": 4},
               test_module=TB, testcase="test_random", seed=seed, sim=sim,
               env={"packets": 250, "srcs": 8})


@pytest.mark.parametrize("kinds", [["rr"], ["st"], ["st", "rr"]], ids=["header_only", "dyn_st", "mixed"])
@at(PARAMS, "test_line_rate", env=lambda kinds: {"k": 64, "kinds": kinds})
def test_line_rate(kinds, shared_run):
    """All hits at 3 cycles, no stalls: one flit per cycle in and out, every header 5 cycles later."""
    shared_run()


@at(PARAMS, "test_oldest_first")
def test_oldest_first(shared_run):
    shared_run()


def test_line_rate_slots(seed, sim):
    """The slot count the contract gives for line rate: 5 slots hold it, 4 do not (the test must fail)."""
    env = {"k": 32, "kinds": ["rr"]}
    run_cocotb("egress_translator", {**PARAMS, "slots": 5}, test_module=TB, testcase="test_line_rate",
               seed=seed, sim=sim, env=env)
    r = run_cocotb("egress_translator", {**PARAMS, "slots": 4}, test_module=TB, testcase="test_line_rate",
                   seed=seed, sim=sim, env=env, check=False, quiet=True)
    assert (r.tests, r.failed) == (1, 1), r


def test_overflow(seed, sim):
    run_cocotb("egress_translator", {**PARAMS, "max_payload": 4}, test_module=TB, testcase="test_overflow",
               seed=seed, sim=sim)


@at(PARAMS, "test_hit_under_miss")
def test_hit_under_miss(shared_run):
    shared_run()


@at(PARAMS, "test_errors")
def test_errors(shared_run):
    shared_run()


@pytest.mark.parametrize("params", [PARAMS, {**PARAMS, "flit_width": 256, "row_bytes": 1000, "max_payload": 8}],
                         ids=["default_row", "short_row_wide"])
@at(lambda params: params, "test_row_bound")
def test_row_bound(params, shared_run):
    """Issue 16 defect 3: an access past ``row_bytes`` is OUT_OF_BOUNDS on ``err``, never a rewrite into
    the next row; one that ends at the row's end is translated (fails on a translator without the check)."""
    shared_run()


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kwargs", [{"ports": 1}, {"ports": 65}, {"port": 8}, {"port": -1},
                                    {"flit_width": 64}, {"max_payload": 0}, {"max_payload": 32},
                                    {"slots": 1}, {"slots": 65}, {"slots": "8"}, {"row_bytes": 0},
                                    {"row_bytes": (1 << 24) + 1}, {"row_bytes": 14336.0}])
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        EgressTranslator(**kwargs)
    gc.collect()
