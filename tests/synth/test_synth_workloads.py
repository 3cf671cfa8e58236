"""The integrated switch's power workload (synth/workloads/dysharp_switch.py): its traffic, and a short run
whose flit counts are checked against the traffic it sent."""

import json

import pytest

from hw import registry
from hw.packet import EType
from synth import workloads
from synth.workloads import dysharp_switch as wl

# A small point of the integrated switch (one Icarus build): shallow buffers and few entries, so a short
# warm-up saturates it and the drain is short.
TINY = {"ports": 4, "credits": 32, "resp_credits": 32, "red_entries": 16, "tlb_entries": 16}


def test_registered():
    w = workloads.get("dysharp_switch")
    assert w is not None and w.test_module == "synth.workloads.dysharp_switch" and w.testcase == "moe_layer"


def test_layer_traffic_is_dispatch_and_combine_of_the_same_tokens():
    """Each token's 28 FP8 store packets (7168 B) and 56 BF16 combine requests (14336 B) to the same
    DeepSeek-V3 mask, interleaved so that both streams of a token end together."""
    n = 4
    traffic = wl.layer_traffic(n, 84 * 2, seed=3)
    assert [len(q) for q in traffic] == [168] * n
    for q in traffic:
        for t in (0, 1):
            st = [x for x in q if x[0] == "st" and x[1] == t]
            red = [x for x in q if x[0] == "red" and x[1] == t]
            assert len(st) == 28 and len(red) == 56
            assert sum(x[4] for x in st) == 7168 // 16 and sum(x[4] for x in red) == 2 * 7168 // 16
            assert {x[2] for x in st} == {x[2] for x in red} and len({x[2] for x in st}) == 1
            assert [x[3] for x in red] == list(range(0, 896, 16))
            assert all(x[5] == EType.BF16 for x in red)      # at most 4 contributors at 4 ports
        pos = [i for i, x in enumerate(q[:84]) if x[0] == "st"]
        assert pos[0] <= 2 and max(b - a for a, b in zip(pos, pos[1:])) == 3     # st, red, red, ...
    tot = wl.traffic_totals(traffic)
    assert tot["store_flits_sent"] == n * 2 * 28 * 17 and tot["reductions"] == n * 2 * 56
    assert tot["reduced_flits"] == n * 2 * 896
    # Masks are DeepSeek-V3's: a token reaches 3.6 of 4 GPUs on average (none of 8 experts on a GPU: 10%).
    many = wl.traffic_totals(wl.layer_traffic(n, 84 * 200, seed=4))
    assert 3.4 < many["store_flits_delivered"] / many["store_flits_sent"] < 3.8


def test_layer_traffic_refuses_bad_input():
    with pytest.raises(ValueError, match="requests must be >= 1"):
        wl.layer_traffic(4, 0, seed=1)


def test_requests_cover_the_window():
    assert wl.requests_needed(4, 2000) > wl.requests_needed(4, 1000) > 8
    assert wl.requests_needed(4, 1000, buffered=96) > wl.requests_needed(4, 1000) + 96


@pytest.mark.slow
def test_moe_layer_counts_match_the_traffic(seed, tmp_path):
    """A short run at a small point (30 s with its Icarus build cached, 60 s cold, on a loaded machine):
    the run's totals, counted at the links, equal what the traffic generator sent (store flits in, store
    copies out, results and their payload), the window counts are consistent with them, and the reference
    model checked every delivery (the workload asserts it; a failure raises here)."""
    from verif.harness.runner import run_cocotb
    out = tmp_path / "wl.json"
    requests = 24
    run_cocotb("dysharp_switch", TINY, test_module="synth.workloads.dysharp_switch", testcase="moe_layer",
               sim="icarus", seed=seed, quiet=True,
               env={"warmup": 120, "cycles": 60, "requests": requests, "out": str(out)})
    r = json.loads(out.read_text())
    want = wl.traffic_totals(wl.layer_traffic(4, requests, seed))
    assert r["totals"] == want
    assert r["requests_per_gpu"] == requests
    assert r["window_ps"][1] - r["window_ps"][0] == 60 * 2000
    # The window saw traffic of both kinds, no more than the run sent, and about one store copy per
    # destination of what came in (flits in flight at the window's edges aside).
    assert 0 < r["dispatched_flits"] <= want["store_flits_sent"]
    assert 0 <= r["reduced_flits"] <= want["reduced_flits"]
    assert r["ld_reduce_requests"] > 0 and r["events"]["gpu_answer_flit"] > 0
    fanout = want["store_flits_delivered"] / want["store_flits_sent"]
    assert r["events"]["store_flit_delivered"] <= fanout * r["dispatched_flits"] + 4 * 4 * 17
    assert sum(r["tlb_fills"]) > 0


def test_integrated_power_refuses_a_point_too_large_to_flatten():
    """The flat power study goes up to FLAT_MAX_PORTS (8) ports; 16 is costed from parts (--overhead)."""
    from synth import integrated
    with pytest.raises(ValueError, match="flat synthesis takes at most 8 ports"):
        integrated.power_rows({"ports": 16})


@pytest.mark.parametrize("module, ports", [("dysharp_switch", 8), ("switch", 16)])
def test_flat_up_to_makes_a_switch_flat_only_inside(module, ports):
    from hw import registry
    from synth import hierarchical
    at = registry.get(module).resolve({"ports": ports})
    assert hierarchical.applies(module, at)
    with hierarchical.flat_up_to(ports):
        assert not hierarchical.applies(module, at)
        assert hierarchical.applies(module, registry.get(module).resolve({"ports": 2 * ports}))
        assert hierarchical.applies("switch", registry.get("switch").resolve({"ports": max(16, 2 * ports)}))
    assert hierarchical.applies(module, at)


def test_write_power_keeps_the_other_points_rows(monkeypatch, tmp_path):
    """integrated_power_summary.csv holds every point measured: writing 8 ports keeps the 4-port rows."""
    import csv

    from synth import integrated

    def rows(point, **kw):
        label = f"ports={point['ports']}"
        return [{"quantity": q, "point": label, "value": float(point["ports"]), "unit": "", "note": ""}
                for q in ("area, flat", "critical path")]
    monkeypatch.setattr(integrated, "power_rows", rows)
    integrated.write_power(tmp_path, {"ports": 8})
    integrated.write_power(tmp_path, {"ports": 4})
    integrated.write_power(tmp_path, {"ports": 8})
    with open(tmp_path / "integrated_power_summary.csv", newline="") as f:
        got = [(r["quantity"], r["point"]) for r in csv.DictReader(f)]
    assert got == [("area, flat", "ports=4"), ("critical path", "ports=4"),
                   ("area, flat", "ports=8"), ("critical path", "ports=8")]


def test_integrated_power_rows_name_their_point(monkeypatch):
    """Every row of the integrated power table carries the point it was measured at (an event's or an
    array group's name once leaked into the point column)."""
    from synth import area, area_study, integrated, power_study

    flat = {"area_um2": 3.0, "cell_count": 1, "verilog_mb": 0.1, "area_random_logic_um2": 1.0,
            "area_seq_um2": 0.5, "arrays_um2": 2.0, "arrays": [], "array_bits": 8, "transistors": 10,
            "critical_path_ps": 600.0, "timing_source": "OpenSTA"}
    monkeypatch.setattr(area_study, "area_point", lambda *a, **k: area.AreaPoint(registry.point("dysharp_switch"), flat))
    gated = {"total_mw": 2.0, "cells": {"total_mw": 1.0}, "arrays_mw": 1.0, "leakage_mw": 0.1,
             "pj_per_dispatched_flit": 5.0, "pj_per_reduced_flit": 6.0,
             "arrays": [{"name": "engine0.buf.partial", "total_mw": 1.0, "leakage_mw": 0.1}]}
    run = {"workload": {"cycles": 100, "dispatched_flits": 40, "reduced_flits": 20, "ld_reduce_requests": 4,
                        "events": {"gpu_answer_flit": 50, "reduction": 2}},
           "no_gating": gated, "clock_gated": gated, "seeded_nets": 3, "ff_seeded": 1, "ff_total": 1,
           "activity_source": "VCD"}
    monkeypatch.setattr(power_study, "power_points", lambda *a, **k: [run])
    rows = integrated.power_rows({"ports": 4}, hierarchical_sum=False)
    assert {r["point"] for r in rows} == {"ports=4"}
    assert any(r["quantity"] == "  arrays: reduction engines' partial-sum SRAMs, no clock gating" for r in rows)
