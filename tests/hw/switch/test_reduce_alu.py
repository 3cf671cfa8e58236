"""Reduction ALU: bit-exact against the numpy reference (see verif/tb/reduce_alu.py)."""

import pytest

from verif.harness.runner import run_cocotb, verilator_env

TB = "verif.tb.reduce_alu"


def skip_unless_slow_selected(request):
    """Slow tests run only under ``-m slow`` (the marker is declared as deselected by default)."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow test: run with -m slow")


# The tests of one parameter point share one simulator run (tests/conftest.py: shared_run), each a scenario
# from reset with its own seed and result.
def at(params, testcase, **env):
    return pytest.mark.shared_run("reduce_alu", params, TB, testcase, env=env)


@at({}, "test_special_matrix")
def test_special_matrix(shared_run):
    shared_run()


@at({}, "test_random", pairs=10000, gap=0.05, stall=0.05)
def test_random(shared_run):
    shared_run()


@at({}, "test_chain")
def test_chain(shared_run):
    shared_run()


@at({}, "test_latency")
def test_latency(shared_run):
    shared_run()


@pytest.mark.slow
def test_random_million(seed, request):
    """10^6 random operand pairs per element type, on Verilator (the widest ALU: 32 16-bit lanes)."""
    skip_unless_slow_selected(request)
    sim = "verilator" if verilator_env() else "icarus"
    run_cocotb("reduce_alu", {"flit_width": 512}, test_module=TB, testcase="test_random", seed=seed, sim=sim,
               env={"pairs": 1_000_000, "gap": 0.0, "stall": 0.0})


# The three-stage accumulate (acc_stages=3): the same checks, latency 4, chained inputs held back.
PIPELINED = {"acc_stages": 3}


@at(PIPELINED, "test_special_matrix")
def test_pipelined_special_matrix(shared_run):
    shared_run()


@at(PIPELINED, "test_random", pairs=4000, gap=0.05, stall=0.05)
def test_pipelined_random(shared_run):
    shared_run()


@at(PIPELINED, "test_chain")
def test_pipelined_chain(shared_run):
    shared_run()


@at(PIPELINED, "test_latency")
def test_pipelined_latency(shared_run):
    shared_run()


# The reduction buffer's form: the data operand given already widened to fp32 (alu_operands).
WIDE = {"acc_stages": 3, "wide_data": True}


@at(WIDE, "test_special_matrix")
def test_wide_data_special_matrix(shared_run):
    shared_run()


@at(WIDE, "test_random", pairs=4000, gap=0.05, stall=0.05)
def test_wide_data_random(shared_run):
    shared_run()


def test_bad_acc_stages():
    from hw.switch.reduce_alu import ReduceALU
    with pytest.raises(ValueError, match="acc_stages must be 1 or 3"):
        ReduceALU(acc_stages=2)

