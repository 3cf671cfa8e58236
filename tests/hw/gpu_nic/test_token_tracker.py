"""Tile Status Table: lockstep against its cycle-exact model, bad input, line rate, and a DeepSeek-V3 layer
against the reference scheduler (see verif/tb/token_tracker.py)."""

import pytest

from verif.harness.runner import run_cocotb

TB = "verif.tb.token_tracker"
SMALL = {"experts": 4, "tiles": 4, "tile_size": 4, "ready_depth": 2, "release_depth": 2}


def test_random_lockstep(seed, sim):
    run_cocotb("token_tracker", SMALL, test_module=TB, testcase="test_random", seed=seed, sim=sim,
               env={"cycles": 3000})


def test_random_lockstep_no_stalls(seed, sim):
    run_cocotb("token_tracker", dict(SMALL, ready_depth=4, release_depth=4), test_module=TB,
               testcase="test_random", seed=seed, sim=sim, env={"cycles": 1500, "stall": 0.0, "cmd_rate": 0.3})


@pytest.mark.parametrize("kind", ["unknown_tile", "overflow", "double_done", "not_ready", "bad_retire_expect",
                                  "late_expect"])
def test_bad_input(kind, seed, sim):
    run_cocotb("token_tracker", SMALL, test_module=TB, testcase="test_directed", seed=seed, sim=sim,
               env={"kind": kind})


def test_line_rate(seed, sim):
    run_cocotb("token_tracker", {"experts": 4, "tiles": 2, "tile_size": 8}, test_module=TB,
               testcase="test_line_rate", seed=seed, sim=sim)


# One GPU of a DeepSeek-V3 layer over 8 GPUs (32 local experts), compressed timing so it runs in seconds.
MOE_SCHED = {"row_flits": 2, "rx_latency": 3, "gemm1_tile_cycles": 60, "gemm2_tile_cycles": 30,
             "dispatch_sms": 2, "combine_sms": 1, "sms_per_tile": 1, "expect_cycle": 150}


@pytest.mark.parametrize("gpu", [0, 5])
def test_moe_matches_scheduler(gpu, seed, sim):
    run_cocotb("token_tracker", {"experts": 32, "tiles": 4, "tile_size": 8}, test_module=TB,
               testcase="test_moe", seed=seed, sim=sim,
               env={"gpu": gpu, "gpus": 8, "tokens_per_gpu": 48, "sched": MOE_SCHED})
