"""The DySHARP switch's timeouts sized from its parameters (``hw/switch/timeouts.py``, ``docs/timeouts.md``).

* the bound against a hand computation at the smallest-buffer point;
* every registry standard point builds with derived timeouts at or above the bound (and MARGIN x it);
* a timeout below the bound is refused by the constructor and the registry, naming the bound and its terms;
  ``allow_short_timeouts`` forces it; bad ``gpu_latency`` and out-of-range derived values are refused;
* the soak refuses the same points and GPUs slower than the contract;
* ``slow``: the smallest-buffer soak on the fast path, 10^5 cycles, with 0 timeouts at the derived defaults.
"""

import gc

import pytest

from hw import registry
from hw.switch.dysharp_switch import DySharpSwitch, switch_timeouts
from hw.switch.timeouts import MARGIN, timeout_bounds

# The smallest legal buffers of the integrated switch (the stress point of docs/timeouts.md; credits must
# hold a whole packet).
STRESS = {"credits": 17, "resp_credits": 8, "link_credits": 2, "gpu_credits": 2, "red_entries": 16,
          "tlb_entries": 16, "tlb_mshrs": 2, "egress_slots": 2}
SIZES = ("credits", "resp_credits", "link_credits", "gpu_credits", "red_entries", "tlb_mshrs", "egress_slots")


def test_bound_by_hand_at_the_stress_point():
    b = timeout_bounds(ports=8, max_payload=16, gpu_latency=1000, **{k: STRESS[k] for k in SIZES})
    D = 17                               # longest packet: header + 16 payload flits
    ahead = 17 + 2 * (8 + 1)             # 35 packets leave the requester's input first
    served = (ahead + 1) * 2 * 8         # 576 packets at the destinations' outputs
    rounds = 576 // 2                    # misses two at a time (2 egress slots, 2 MSHRs): 288 round trips
    fill_out = D + 2                     # 19: the packet on the link and the fills queued ahead
    owed = 8 * 16 * D                    # 2176 answer flits a GPU can owe
    backlog = owed + 2 + 8 * 8 + 2 + 2   # 2246
    assert (ahead, served, rounds, backlog) == (35, 576, 288, 2246)
    assert b.tlb_terms == {"fill to the GPU": 19, "gpu_latency": 1000, "answers ahead": 6738, "pipeline": 16}
    assert b.tlb == 7773
    assert b.red_terms == {"engine and merge": 10 * 18, "packets served ahead": 576 * D,
                           "fill round trips": 288 * (19 + 1000 + 16), "gpu_latency": 1000,
                           "answers ahead at the GPU": 3 * (2246 + 576 * D), "answers ahead at the requester": 6528,
                           "pipeline": 64}
    assert b.red == 180 + 9792 + 298080 + 1000 + 36114 + 6528 + 64 == 351758
    # The defaults: MARGIN x the bound, rounded up to a multiple of 1024.
    assert switch_timeouts(ports=8, **STRESS)[:2] == (16384, 704512)


def test_bound_grows_with_every_buffer():
    base = dict(ports=8, max_payload=16, **{k: STRESS[k] for k in SIZES})
    b0 = timeout_bounds(**base)
    for k in ("credits", "resp_credits", "link_credits", "gpu_credits", "red_entries"):
        b = timeout_bounds(**{**base, k: base[k] * 2})
        assert b.red > b0.red, k
    assert timeout_bounds(**{**base, "gpu_latency": 2000}).tlb == b0.tlb + 1000
    # More misses in flight shorten the chain of fill round trips.
    assert timeout_bounds(**{**base, "tlb_mshrs": 4, "egress_slots": 4}).red < b0.red


@pytest.mark.parametrize("module", ["dysharp_switch", "system"])
def test_standard_points_have_derived_timeouts_above_the_bound(module):
    spec = registry.get(module)
    for point in spec.points:
        full = spec.resolve(point)
        if module == "system":
            sw = {"ports": full["gpus"], "link_credits": full["link_credits"], "gpu_credits": full["gpu_credits"],
                  "max_payload": full["max_payload"], **(full["switch"] or {})}
        else:
            sw = {k: v for k, v in full.items()}
        tlb, red, bound = switch_timeouts(**sw)
        assert tlb >= MARGIN * bound.tlb and red >= MARGIN * bound.red, point
        assert tlb % 1024 == 0 and red % 1024 == 0


def _refused(match, **kw):
    with pytest.raises(ValueError, match=match):
        DySharpSwitch(**kw)
    gc.collect()


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_short_timeouts_refused_with_the_bound_and_its_terms():
    with pytest.raises(ValueError) as e:
        DySharpSwitch(ports=8, red_timeout=8192, **STRESS)
    msg = str(e.value)
    assert msg.startswith("red_timeout 8,192 is below 351,758 cycles")
    for term in ("engine and merge 180", "packets served ahead 9,792", "fill round trips 298,080",
                 "gpu_latency 1,000", "answers ahead at the GPU 36,114", "answers ahead at the requester 6,528",
                 "pipeline 64", "allow_short_timeouts=True"):
        assert term in msg, term
    _refused(r"tlb_timeout 4,096 is below 17,313 cycles, .*fill to the GPU 25 \+ gpu_latency 1,000",
             ports=4, tlb_timeout=4096)
    # The registry builds through the constructor: the same refusal.
    with pytest.raises(ValueError, match="red_timeout 1,024 is below"):
        registry.get("dysharp_switch").build(ports=4, red_timeout=1024)
    with pytest.raises(ValueError, match="red_timeout 1,024 is below"):
        registry.get("system").build(gpus=4, switch={"red_timeout": 1024})
    gc.collect()


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_forced_short_timeouts_and_bad_values():
    sw = DySharpSwitch(ports=4, tlb_timeout=512, red_timeout=1024, allow_short_timeouts=True)
    assert (sw.tlb_timeout, sw.red_timeout) == (512, 1024)
    assert sw.tlbs[0].timeout == 512 and sw.engines[0].buffer_params["timeout"] == 1024
    sw = DySharpSwitch(ports=4)
    assert (sw.tlb_timeout, sw.red_timeout) == switch_timeouts(ports=4)[:2]
    assert sw.engines[3].buffer_params["timeout"] == sw.red_timeout
    _refused(r"gpu_latency must be an integer in 1\.\.1048576 cycles, got 0", ports=4, gpu_latency=0)
    _refused("allow_short_timeouts must be a bool", ports=4, allow_short_timeouts=1)
    _refused(r"red_timeout must be an integer number of cycles or None \(derived\), got 1.5", ports=4,
             red_timeout=1.5)
    _refused(r"the derived red_timeout .* is above 67,108,864 cycles", ports=64, credits=1024, tlb_mshrs=1)
    _refused("credits must be a positive integer, got 0", ports=4, credits=0)
    _refused(r"credits must be at least max_payload \+ 1 = 17 \(a multicast packet must fit whole", ports=8,
             credits=16)
    _refused(r"credits must be at least max_payload \+ 1 = 5 ", ports=8, credits=4, max_payload=4)
    DySharpSwitch(ports=8, credits=5, max_payload=4)
    gc.collect()


def test_response_network_values_are_refused_by_their_own_names():
    with pytest.raises(ValueError, match=r"response network \(resp_credits=2048, resp_iterations=1\): "
                                         r"credits must be an integer in 4\.\.1024, got 2048"):
        DySharpSwitch(ports=4, resp_credits=2048)


def test_soak_refuses_short_timeouts_and_slow_gpus():
    from verif.bench.soak import SoakConfig

    with pytest.raises(ValueError, match="red_timeout 8,192 is below 351,758"):
        SoakConfig(cycles=100_000, switch={**STRESS, "red_timeout": 8192}).validate()
    SoakConfig(cycles=100_000, switch={**STRESS, "red_timeout": 8192, "allow_short_timeouts": True}).validate()
    with pytest.raises(ValueError, match=r"answer within 1150 cycles .* above the switch's gpu_latency 1000"):
        SoakConfig(jitter=1000).validate()
    SoakConfig(jitter=1000, switch={"gpu_latency": 1150}).validate()
    with pytest.raises(ValueError, match="credits must be at least max_payload"):
        SoakConfig(switch={**STRESS, "credits": 8}).validate()
    with pytest.raises(ValueError, match="use --ports"):
        SoakConfig(switch={"ports": 4}).validate()


@pytest.mark.slow
def test_stress_soak_has_no_timeouts():
    """The smallest buffers under the soak's traffic at 0.1x its mix (the load they sustain) for 10^5 cycles:
    every ld_reduce answered bit-exact, no timeout, every error counter zero (a Verilator build of the point,
    about 4 minutes, plus 15 s of simulation and checks)."""
    from verif.harness.runner import SIMULATORS
    if "verilator" not in SIMULATORS:
        pytest.skip("the fast path needs Verilator")
    from verif.bench.soak import SoakConfig, run_soak

    r = run_soak(SoakConfig(cycles=100_000, load=0.1, switch=dict(STRESS)).validate())
    assert r["ok"], (r["scoreboard_error"], r["unfinished"], r["errors"])
    assert r["timeouts"]["ld_reduce_timeouts"] == r["timeouts"]["tlb_read_timeouts"] == 0
    assert r["timeouts"]["stale_contributions"] == 0
    assert r["checked"]["ld_reduce_results"] == r["traffic"]["ld_reduce"] > 0
    assert r["longest_wait"]["ld_reduce_result"] < r["timeouts"]["red_bound"]
