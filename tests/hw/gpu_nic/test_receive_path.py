"""GPU receive path: memory image, read responses, token arrivals and errors against the reference model
(see verif/tb/receive_path.py)."""

import pytest

from verif.harness.runner import run_cocotb, run_scenarios

TB = "verif.tb.receive_path"
SMALL = {"experts": 8, "tile_size": 4, "max_slots": 64, "tags": 16}


def test_traffic(seed, sim):
    run_cocotb("receive_path", SMALL, test_module=TB, testcase="test_traffic", seed=seed, sim=sim,
               env={"phases": 3, "packets": 30})


def test_traffic_small_buffers(seed, sim):
    run_cocotb("receive_path", dict(SMALL, max_payload=4, credits=5, read_depth=4), test_module=TB,
               testcase="test_traffic", seed=seed, sim=sim, env={"phases": 2, "packets": 30, "latency": 3})


BAD_KINDS = ["POISONED", "LENGTH_MISMATCH", "BAD_LENGTH", "UNKNOWN_OPCODE", "BAD_GROUP", "UNKNOWN_TAG"]


def test_bad_input(seed, sim):
    """Each kind alone; the six share one simulator run (each a cocotb test of its own, from reset)."""
    failed = run_scenarios("receive_path", SMALL, test_module=TB, sim=sim,
                           scenarios=[("test_bad_input", {"kind": k}, seed) for k in BAD_KINDS])
    assert not failed, "\n".join(failed)


def test_slot_overflow(seed, sim):
    run_cocotb("receive_path", dict(SMALL, max_slots=8), test_module=TB, testcase="test_slot_overflow",
               seed=seed, sim=sim)


def test_credit_overflow(seed, sim):
    run_cocotb("receive_path", SMALL, test_module=TB, testcase="test_credit_overflow", seed=seed, sim=sim)


def test_line_rate(seed, sim):
    run_cocotb("receive_path", SMALL, test_module=TB, testcase="test_line_rate", seed=seed, sim=sim)


@pytest.mark.parametrize("read_queue", [0, 8])
def test_writes_pass_reads(read_queue, seed, sim):
    """Reads whose answers cannot leave hold the writes behind them without a read queue, not with one
    (``read_queue`` entries >= the reads); memory and answers equal the model's either way."""
    run_cocotb("receive_path", dict(SMALL, read_queue=read_queue), test_module=TB,
               testcase="test_writes_pass_reads", seed=seed, sim=sim, env={"reads": 6, "writes": 8})
