"""AL-TLB: cycle-exact lockstep with the reference model + functional scoreboard (verif/tb/al_tlb.py)."""

import gc

import pytest

from hw.switch.al_tlb import AlTlb
from verif.harness.runner import run_cocotb

TB = "verif.tb.al_tlb"
SMALL = {"entries": 16, "mshrs": 4, "ports": 8, "groups": 8}


# The tests of one design point share one simulator run (tests/conftest.py: shared_run), each a scenario
# from reset with its own seed and result.
def at(params, testcase, env=None):
    return pytest.mark.shared_run("al_tlb", params, TB, testcase, env=env)


@at(SMALL, "test_random", env={"requests": 1500})
def test_random_small(shared_run):
    """16-entry CAM, 4 MSHRs: evictions, coalescing, MSHR exhaustion (recirculation), flushes."""
    shared_run()


def test_random_more_mshrs(seed, sim):
    """8 MSHRs, 16 ports, 4-deep response FIFO, 300-cycle timeout, and 3 % of the backing reads never
    answered plus 3 % answered late: timeouts of coalesced waiters, stale responses, reused MSHRs."""
    run_cocotb("al_tlb", {"entries": 32, "mshrs": 8, "ports": 16, "groups": 16, "resp_depth": 4,
                          "timeout": 300},
               test_module=TB, testcase="test_random", seed=seed, sim=sim,
               env={"requests": 1000, "latency": 60, "jitter": 40, "drop": 0.03, "late": 0.03,
                    "late_by": 400})


@at(SMALL, "test_hostile")
def test_hostile(shared_run):
    shared_run()


@at(SMALL, "test_latency", env={"latency": 40})
def test_latency(shared_run):
    shared_run()


@at(SMALL, "test_flush")
def test_flush(shared_run):
    shared_run()


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kwargs", [{"ports": 1}, {"ports": 129}, {"groups": 0}, {"groups": 300},
                                    {"entries": 100}, {"mshrs": 0}, {"mshrs": 33}, {"resp_depth": 3},
                                    {"timeout": 15}, {"timeout": (1 << 26) + 1}, {"timeout": 0}])
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        AlTlb(**kwargs)
    gc.collect()   # the refused object is reported as unused when collected: do it under the filter


def test_mshr_file_refuses_a_tag_without_generation_bits():
    """The MSHR file alone: MSHR numbers that fill the whole backing tag leave no generation (the AL-TLB
    itself takes at most 32 MSHRs, so it never passes such a count)."""
    from hw.switch.backing_if import BACKING_TAG_BITS
    from hw.switch.mshr_file import MshrFile

    kw = dict(key_width=10, timeout=64, group_bits=4, group_shift=6)
    with pytest.raises(ValueError, match="leave no generation bits"):
        MshrFile(mshrs=1 << BACKING_TAG_BITS, **kw)
    assert MshrFile(mshrs=1 << (BACKING_TAG_BITS - 1), **kw).gen_bits == 1
    gc.collect()


def test_moe_deepseek_v3(seed, sim):
    """DeepSeek-V3 dispatch + fused combine through one AL-TLB and 8 destinations' memory managers."""
    run_cocotb("al_tlb", {"entries": 256, "mshrs": 16, "ports": 8, "groups": 4},
               test_module="verif.tb.al_tlb_moe", testcase="test_moe", seed=seed, sim=sim,
               env={"tokens": 16, "tile": 4, "packets": 4, "latency": 40, "jitter": 20})


TIMEOUT_SMALL = {**SMALL, "timeout": 64}


@at(TIMEOUT_SMALL, "test_timeout")
def test_timeout(shared_run):
    """A withheld backing response: TIMEOUT for all coalesced waiters, hit-under-miss continues; its late
    response is stale and does not confuse the MSHR's next read."""
    shared_run()


@at(TIMEOUT_SMALL, "test_stuck_backing")
def test_stuck_backing(shared_run):
    """mem.req never ready: reads time out from queueing, the full read queue backpressures new misses."""
    shared_run()
