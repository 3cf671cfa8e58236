"""DeepEP's copy protocol (sim_models/deepep.py) and the deepep scheme that runs it."""

import numpy as np
import pytest

from sim_models import deepep
from sim_models.estimator import Params, estimate
from sim_models.moe_config import load_model
from sim_models.system_config import load_system


def test_stores_per_token_copy_follow_deepeps_layouts():
    # V1: hidden, scales in 128-B lane groups (56 FP32 scales), source index, int64 top-k indices, weights.
    assert deepep.stores("v1", "dispatch", 7168, "fp8", 8) == [7168, 128, 96, 4, 64, 32]
    assert deepep.stores("v1", "combine", 7168, "fp8", 8) == [14336, 4, 32]
    assert deepep.stores("v1", "dispatch", 7168, "bf16", 8) == [14336, 4, 64, 32]
    # V2: one bulk store of TokenLayout: 7,168 + 224 (-> 224) + 8 x 8 + 9 x 4 = 100 (-> 112).
    assert deepep.stores("v2", "dispatch", 7168, "fp8", 8) == [7504]
    assert deepep.stores("v2", "combine", 7168, "bf16", 8) == [14336 + 64]
    # What the benchmarks count per row: V1 the hidden vector and scales, V2 also the top-k idx and weights.
    assert deepep.counted_bytes("v1", "dispatch", 7168, "fp8", 8) == 7392
    assert deepep.counted_bytes("v2", "dispatch", 7168, "fp8", 8) == 7392 + 96
    assert deepep.counted_bytes("v2", "combine", 7168, "bf16", 8) == 14336 + 32
    with pytest.raises(ValueError, match="unknown DeepEP version 'v3'"):
        deepep.stores("v3", "dispatch", 7168, "fp8", 8)
    with pytest.raises(ValueError, match="unknown phase"):
        deepep.counted_bytes("v1", "gather", 7168, "fp8", 8)


def test_wire_bytes_by_hand():
    # A 16-B header flit per packet of at most 256 B, payload rounded up to flits: the V1 FP8 dispatch's six
    # stores are 476 + 9 + 7 + 2 + 5 + 3 flits.
    assert deepep.wire_bytes([7168, 128, 96, 4, 64, 32], 16, 256) == 16 * (476 + 9 + 7 + 2 + 5 + 3) == 8032
    assert deepep.wire_bytes([7504], 16, 256) == 16 * (30 + 469)


def test_copy_loop_is_mean_value_analysis_of_a_closed_network():
    one = deepep._mva(1, demand=1.0, think=3.0)
    assert one == pytest.approx(1 / 4.0)                        # one customer: one cycle per demand + think
    many = deepep._mva(64, demand=1.0, think=3.0)
    assert many == pytest.approx(1.0, rel=1e-6)                 # saturated: the queue's rate
    xs = [deepep._mva(n, 1.0, 3.0) for n in range(1, 10)]
    assert all(a < b for a, b in zip(xs, xs[1:])) and xs[-1] <= 1.0


def test_issue_rate_of_the_two_versions():
    rtt = 1.8e-6
    # V2 on 24 SMs: 28 warps per SM each with ~5 copies of a 7,504-B token in flight: the SMs' issue saturates.
    v2 = deepep.issue_rate("v2", "dispatch", 24, 8, 7504, 5.25, rtt)
    assert v2["flows_per_sm"] == 28 and v2["rate"] == pytest.approx(24 * deepep.SM_WRITE_BYTES_PER_S, rel=1e-3)
    assert deepep.issue_rate("v2", "combine", 24, 8, 14400, 1.0, rtt)["flows_per_sm"] == 16
    # V1 on 24 SMs: 12 sender SMs, 8 flows each, chunks of 6 tokens per two round trips: below the issue cap,
    # above the latency bound of the flows alone.
    v1 = deepep.issue_rate("v1", "dispatch", 24, 8, 7492, 1.0, rtt)
    chunk = 6 * 7492
    assert v1["issuing_sms"] == 12 and v1["bytes_per_cycle"] == chunk
    assert 12 * 8 * chunk / (2 * rtt + 8 * chunk / deepep.SM_WRITE_BYTES_PER_S) < v1["rate"] < 12 * 50e9
    # Longer round trips lower the rate; more SMs raise it.
    assert deepep.issue_rate("v1", "dispatch", 24, 8, 7492, 1.0, 10 * rtt)["rate"] < v1["rate"]
    assert deepep.issue_rate("v1", "dispatch", 48, 8, 7492, 1.0, rtt)["rate"] > v1["rate"]
    with pytest.raises(ValueError, match="even number of SMs"):
        deepep.issue_rate("v2", "dispatch", 23, 8, 7504, 5.0, rtt)
    with pytest.raises(ValueError, match="at most 8 ranks"):
        deepep.issue_rate("v1", "dispatch", 24, 16, 7492, 1.0, rtt)


def _deepep(system="gh200-nvl32", **kw):
    e = estimate(load_model("deepseek-v3"), load_system(system), Params(**kw), schemes=["deepep"])
    return e, e.results["deepep"]


def test_deepep_scheme_carries_deepeps_bytes_and_is_link_bound_at_24_sms():
    e_off, off = _deepep(deepep_protocol=False)
    e_on, on = _deepep()
    d = on.detail["deepep"]
    assert d["version"] == "v2" and d["sms"] == 24
    assert d["dispatch"]["bound"] == "links" and d["combine"]["bound"] == "links"
    # Link-bound: the phases scale with DeepEP's wire bytes per copy over the rows'.
    fwd_off, fwd_on = e_off.traffic["unicast"], e_on.traffic["deepep"]
    ratio = fwd_on.costs.disp_copy / fwd_off.costs.disp_copy
    assert 1.0 < ratio < 1.03
    lat = d["rtt_us"] / 2 * 1e-6                                    # one traversal: link, switch, link
    assert (on.dispatch - lat) == pytest.approx((off.dispatch - lat) * ratio, rel=1e-9)
    assert on.total > off.total and on.gemm == off.gemm
    assert "deepep" not in off.detail


def test_few_sms_make_the_copy_loop_bind():
    e, r = _deepep(deepep_sms=2)
    d = r.detail["deepep"]
    assert d["dispatch"]["bound"] == "issue" and d["combine"]["bound"] == "issue"
    # Issue-bound: the busiest GPU's copies (every token once per destination GPU, its own included) at the
    # loop's rate, plus one traversal.
    _, full = _deepep()
    assert r.dispatch > full.dispatch and r.combine > full.combine
    rate = d["dispatch"]["issue_rate_gbs"] * 1e9
    assert rate == pytest.approx(2 * deepep.SM_WRITE_BYTES_PER_S, rel=2e-3)
    traversal = d["rtt_us"] / 2 * 1e-6                              # the round trip is two traversals
    assert d["dispatch"]["issue_us"] == pytest.approx((r.dispatch - traversal) * 1e6, rel=1e-9)
    with pytest.raises(ValueError, match="deepep_sms=3"):
        _deepep(deepep_sms=3)


def test_other_schemes_do_not_change():
    m, s = load_model("deepseek-v3"), load_system("hgx-h100")
    a = estimate(m, s, Params(), schemes=["deepep", "comet", "tutel"])
    b = estimate(m, s, Params(deepep_protocol=False), schemes=["deepep", "comet", "tutel"])
    for n in ("comet", "tutel", "dysharp"):
        assert a.results[n].total == b.results[n].total, n
    assert a.results["deepep"].total > b.results["deepep"].total
    assert np.isclose(a.speedup("deepep") / b.speedup("deepep"), a.results["deepep"].total / b.results["deepep"].total)
