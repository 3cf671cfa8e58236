"""GPU receive path: memory image, read responses, token arrivals and errors against the reference model
(see verif/tb/receive_path.py)."""

import pytest

from verif.harness.runner import run_cocotb

TB = "verif.tb.receive_path"
SMALL = {"experts": 8, "tile_size": 4, "max_slots": 64, "tags": 16}


# The tests of one design point share one simulator run (tests/conftest.py: shared_run), each a scenario
# from reset with its own seed and result.
def at(params, testcase, env=None):
    return pytest.mark.shared_run("receive_path", params, TB, testcase, env=env)


@at(SMALL, "test_traffic", env={"phases": 3, "packets": 30})
def test_traffic(shared_run):
    shared_run()


def test_traffic_small_buffers(seed, sim):
    run_cocotb("receive_path", dict(SMALL, max_payload=4, credits=5, read_depth=4), test_module=TB,
               testcase="test_traffic", seed=seed, sim=sim, env={"phases": 2, "packets": 30, "latency": 3})


BAD_KINDS = ["POISONED", "LENGTH_MISMATCH", "BAD_LENGTH", "UNKNOWN_OPCODE", "BAD_GROUP", "UNKNOWN_TAG"]


@at(SMALL, [("test_bad_input", {"kind": k}) for k in BAD_KINDS])
def test_bad_input(shared_run):
    """Each kind alone, a scenario of its own."""
    shared_run()


def test_slot_overflow(seed, sim):
    run_cocotb("receive_path", dict(SMALL, max_slots=8), test_module=TB, testcase="test_slot_overflow",
               seed=seed, sim=sim)


@at(SMALL, "test_credit_overflow")
def test_credit_overflow(shared_run):
    shared_run()


@at(SMALL, "test_line_rate")
def test_line_rate(shared_run):
    shared_run()


@pytest.mark.parametrize("read_queue", [0, 8])
@at(lambda read_queue: dict(SMALL, read_queue=read_queue), "test_writes_pass_reads", env={"reads": 6, "writes": 8})
def test_writes_pass_reads(read_queue, shared_run):
    """Reads whose answers cannot leave hold the writes behind them without a read queue, not with one
    (``read_queue`` entries >= the reads); memory and answers equal the model's either way."""
    shared_run()
