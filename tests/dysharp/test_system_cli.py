"""``dysharp system``: bad arguments are refused with the valid values (no simulation starts); the
estimator's prediction of the scaled configuration and its full-size figure (``--predict-only``); the
calibration figures a run hands the estimator."""

import json

import pytest

from dysharp.cli import main
from sim_models.calibration import load_calibration
from verif.bench.system import calibration_figures
from verif.models.moe_layer import build_layer


@pytest.mark.parametrize("argv, message", [
    (["--model", "gpt-5"], "--model 'gpt-5' is unknown; valid: dbrx, deepseek-v2, deepseek-v3"),
    (["--gpus", "6"], "--gpus 6: deepseek-v3 needs G in 4..128 dividing its 256 experts; valid: 4, 8, 16, 32, "
                      "64, 128; or, at G = 6, --redundant-experts 2, 8, 14"),
    (["--model", "mixtral-8x7b", "--gpus", "16"], "mixtral-8x7b needs G in 4..128 dividing its 8 experts; valid: 4, 8; "
                                                  "or, at G = 16, --redundant-experts 8"),
    (["--gpus", "72"], "--gpus 72: deepseek-v3 needs G in 4..128 dividing its 256 experts; valid: 4, 8, 16, 32, 64, "
                       "128; or, at G = 72, --redundant-experts 32, 104"),
    (["--gpus", "72", "--redundant-experts", "8"], "dividing its 256 experts + 8 redundant (264); valid: 4, 6, 8, 11"),
    (["--gpus", "130"], "--gpus 130: must be in 4..128 (one switch port each; the widest header's mask"),
    (["--redundant-experts", "-1"], "--redundant-experts -1: must be in 0..256"),
    (["--system", "dgx-a100"], "--system 'dgx-a100' is unknown; valid: gh200-nvl32, hgx-h100"),
    (["--gpus", "72", "--redundant-experts", "32", "--system", "gh200-nvl32"],
     "--system gh200-nvl32 (128-bit flits) at --gpus 72: 72 ports need the wide header"),
    (["--gpus", "72", "--redundant-experts", "32", "--tokens", "14564"],
     "--tokens 14564: must be in 1..14563 per GPU (G x tokens <= 2^20, the algebraic index of the wide header)"),
    (["--tokens", "0"], "--tokens 0: must be in 1..32768"),
    (["--gpus", "64", "--tokens", "5000"], "--tokens 5000: must be in 1..4096"),
    (["--hidden", "100"], "--hidden 100: must be a multiple of 16 in 16..7168"),
    (["--hidden", "8192"], "--hidden 8192"),
    (["--scheme", "nvlink"], "valid: deepep, fused-unicast, nvls, dysharp-basic, dysharp or all"),
    (["--seed", "-1"], "--seed -1: must be >= 0"),
    (["--gemm", "5"], "--gemm '5': must be two positive cycle counts"),
    (["--silent-gpu", "8"], "--silent-gpu 8: must be a GPU in 0..7"),
    (["--sim", "vcs"], "--sim 'vcs': valid: icarus, verilator"),
    (["--harness", "pyverilator"], "--harness 'pyverilator': valid: fast, cocotb"),
    (["--sim", "icarus"], "--harness fast runs on Verilator only, not 'icarus'; use --harness cocotb --sim icarus"),
    (["--feeder", "eager"], "--feeder 'eager': valid: plain, tags"),
    (["--design", "tags=64"], "--design 'tags=64': expected BLOCK.PARAM=VALUE with BLOCK one of nic, switch"),
    (["--design", "nic.ports=4"], "--design 'nic.ports=4': nic has no settable parameter 'ports'; valid: fetch_depth"),
    (["--design", "switch.resp_iterations=four"], "the value must be an integer or true/false"),
    (["--design", "switch.fill_bypass=2"],
     "--design switch.fill_bypass=2: fill_bypass must be True or False (true/false with --design), got 2"),
    # the blocks' own range checks, before the build (and before --predict-only's table)
    (["--design", "switch.resp_credits=2048", "--predict-only"],
     "--design switch.resp_credits=2048: the response network (resp_credits=2048, resp_iterations=1): credits "
     "must be an integer in 4..1024, got 2048"),
    (["--design", "nic.fill_queue=65", "--predict-only"], "--design nic.fill_queue=65: "),
    # refused before the build: the rows do not fit the testbench's address map
    (["--gpus", "4", "--tokens", "1025", "--hidden", "7168", "--scheme", "dysharp"],
     "dysharp: 4100 rows of 16384 B from WIN_BASE = 0x4000000 run past 0x8000000"),
])
def test_bad_arguments(argv, message, capsys):
    assert main(["system", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err, err


def test_prediction_of_the_scaled_configuration():
    """The estimator on the RTL run's configuration: the fused pipeline is predicted faster than both
    sequential schemes, and the sequential totals are at least their phases' sum of bulk times."""
    from sim_models.rtl_scale import predict_cycles
    L = build_layer(model="deepseek-v3", gpus=4, tokens=16, hidden=128, seed=1, gemm_cycles=(64, 32))
    p = predict_cycles(L, ["deepep", "nvls", "dysharp-basic", "dysharp"])
    assert p["dysharp"]["total"] < min(p["deepep"]["total"], p["dysharp-basic"]["total"])
    for s in ("deepep", "nvls", "dysharp-basic"):
        assert p[s]["total"] >= p[s]["dispatch"] + p[s]["combine"]
    # nvls gathers every token to every GPU, the issuer included (the RTL's static group), and reads every
    # GPU's partial: its phases are the slowest of the sequential schemes'
    assert p["nvls"]["dispatch"] > p["deepep"]["dispatch"] and p["nvls"]["combine"] > p["deepep"]["combine"]


@pytest.mark.parametrize("dtype, hidden", [("fp8", 128), ("bf16", 128), ("fp8", 7168)])
def test_prediction_charges_the_rtl_rows(dtype, hidden):
    """The estimator's dispatched row under rtl_scale is the RTL's (hidden vector, gate flit, metadata flit):
    with one flit per cycle per link and no link latency, each sequential scheme's dispatch alone is the
    busiest link direction's flits as the layer counts them (``MoeLayer.predicted_flits``, the flits every
    run checks on the links) plus the switch's latency, exactly."""
    from sim_models.rtl_scale import predict_cycles
    from sim_models.traffic import dispatch_row_bytes
    L = build_layer(model="deepseek-v3", gpus=4, tokens=16, hidden=hidden, seed=1, dtype=dtype, gemm_cycles=(64, 32))
    assert dispatch_row_bytes(hidden, dtype, L.row_meta_bytes) == L.row_flits * 16
    p = predict_cycles(L, ["deepep", "nvls"])
    for s in ("deepep", "nvls"):
        f = L.predicted_flits(s)["dispatch"]
        assert p[s]["dispatch"] == pytest.approx(max(max(f["up"]), max(f["down"])) + L.p.switch_latency, abs=1e-6)


def test_prediction_runs_the_tiles_the_rtl_computes(monkeypatch):
    """The scaled prediction times the GEMM tiles the RTL's work lists give its GPUs' GEMM workers: per GPU
    and expert, its own tokens' tiles (``MoeLayer.local_tiles``, ready at cycle 0: progress 0) and the tiles
    its Tile Status Table fills from the rows that arrive (``tracked_counts``, ``tile_size`` rows each),
    so the estimator's engines pad the same tiles; nvls, whose own rows come back through the switch, has
    none of its own. The full-size figure keeps the estimator's own schedule (local and remote rows share
    tiles)."""
    import collections

    import numpy as np

    import sim_models.rtl_scale as rs
    from verif.models.moe_layer import SCHEMES
    L = build_layer(model="deepseek-v3", gpus=4, tokens=64, hidden=128, seed=1, gemm_cycles=(64, 32))
    ts = L.p.tile_size
    seen, real = {}, rs.estimate

    def spy(*a, schemes, workload, **k):
        for s in schemes:
            seen[s] = workload
        return real(*a, schemes=schemes, workload=workload, **k)

    monkeypatch.setattr(rs, "estimate", spy)
    rs.predict_cycles(L, list(SCHEMES))
    inst_expert = np.concatenate([np.nonzero(L.placement == g)[0] for g in range(L.G)])   # instance -> expert
    shared = lambda wl: int(np.sum(-(-wl.inst_rows // ts)))      # tiles with local and remote rows together
    for scheme in SCHEMES:
        wl = seen[rs.ESTIMATOR_SCHEME.get(scheme, scheme)]
        for g in range(L.G):
            rtl = collections.Counter(e for e, _ in L.local_tiles(g, scheme))
            lo = L.local_expert_range(g)[0]
            for e, n in enumerate(L.tracked_counts(g, scheme)):
                rtl[lo + e] += -(-n // ts)
            row = wl.tile_inst[g][wl.tile_inst[g] >= 0]
            assert collections.Counter(inst_expert[row].tolist()) == +rtl, (scheme, g)
            local = sum(len(toks) for _, toks in L.local_tiles(g, scheme))
            assert wl.tile_rows[g][wl.tile_ready_p[g] == 0].sum() == local, (scheme, g)
    assert (seen["dysharp"].tile_inst >= 0).sum() > shared(seen["dysharp"])     # the layer has local tiles
    assert (seen["nvls"].tile_inst >= 0).sum() == shared(seen["nvls"])
    seen.clear()
    rs.full_size(L, ["dysharp"])
    assert (seen["dysharp"].tile_inst >= 0).sum() == shared(seen["dysharp"])


def test_push_combine_on_the_switch_buffers():
    """deepep's combine pushes on the switch's finite buffers (rtl_scale.push_combine_cycles): with unbounded
    buffers the model gives the busiest link's flits, the estimator's bulk term; with the RTL's, rows of one
    packet still run at line rate while DeepSeek-V3's real 952-flit rows stall their uplinks when two GPUs
    push to one home (46,716 cycles against 37,128 on the busiest link); the buffer is the RTL's."""
    import inspect
    from hw.switch.dysharp_switch import DySharpSwitch
    from hw.switch.nvswitch import NVSwitch
    from sim_models.rtl_scale import SWITCH_INPUT_CELLS, predict_cycles, push_combine_cycles
    assert inspect.signature(DySharpSwitch.__init__).parameters["credits"].default == SWITCH_INPUT_CELLS
    assert NVSwitch(ports=4, max_payload=16).egress_depth == 2 * (16 + 1)
    for hidden, bounded in ((128, 663), (7168, 46_716)):
        L = build_layer(model="deepseek-v3", gpus=4, tokens=16, hidden=hidden, seed=1, gemm_cycles=(64, 32))
        f = L.predicted_flits("deepep")["combine"]
        busiest = max(max(f["up"]), max(f["down"]))
        assert push_combine_cycles(L, None) == busiest
        assert push_combine_cycles(L) == bounded
        p = predict_cycles(L, ["deepep"])["deepep"]
        assert p["total"] >= p["dispatch"] + p["combine"]
    assert busiest == 37_128
    assert p["combine"] == pytest.approx(46_716 + L.p.switch_latency, abs=1e-6)


def test_fused_push_on_the_switch_buffers():
    """fused-unicast's pushes and dispatch rows on the switch's finite buffers (rtl_scale.fused_push_cycles,
    the closed loop of NIC order, tiles, GEMMs and releases): rows of one packet never fill an input, so the
    RTL's buffers and unbounded ones give the same time; DeepSeek-V3's real rows (464-flit dispatch rows,
    952-flit pushes) fill the inputs and stall the uplinks, 14,920 cycles over unbounded buffers, which the
    prediction adds to the estimator's fused engine (69,738 cycles there, 84,658 with them; the RTL
    measures 83,080). The NIC's lookahead is the request generator's."""
    import inspect
    from hw.gpu_nic.packet_builder import PacketBuilder
    from sim_models.rtl_scale import NIC_LOOKAHEAD_PACKETS, fused_push_cycles, predict_cycles
    assert inspect.signature(PacketBuilder.__init__).parameters["cmd_depth"].default == NIC_LOOKAHEAD_PACKETS
    for hidden, bounded, unbounded, total in ((128, 2_766, 2_766, 2_771), (7168, 80_082, 65_162, 84_658)):
        L = build_layer(model="deepseek-v3", gpus=4, tokens=16, hidden=hidden, seed=1, gemm_cycles=(64, 32))
        assert fused_push_cycles(L) == bounded
        assert fused_push_cycles(L, None) == unbounded
        assert round(predict_cycles(L, ["fused-unicast"])["fused-unicast"]["total"]) == total
    assert fused_push_cycles(L, push_first=False) == 75_194         # dispatch rows first: 6.5% less here


def test_full_size_figure():
    """The estimator's full-size figure of a scaled run: the real model on the smallest real system with G
    GPUs, the run's tokens and routing, the estimator's defaults otherwise (what ``dysharp estimate`` runs)."""
    from sim_models.estimator import Params, estimate
    from sim_models.moe_config import load_model
    from sim_models.rtl_scale import full_size, full_size_system
    from sim_models.system_config import load_system
    from sim_models.workload import workload_from_routing
    assert [full_size_system(g) for g in (4, 8, 16, 32, 64)] == ["hgx-h100", "hgx-h100", "gh200-nvl32",
                                                               "gh200-nvl32", "nvl72"]
    with pytest.raises(ValueError, match="has 128 GPUs"):
        full_size_system(128)
    L = build_layer(model="deepseek-v3", gpus=8, tokens=64, hidden=128, seed=3)
    fs = full_size(L, ["deepep", "fused-unicast", "dysharp"])
    assert (fs["system"], fs["gpus"], fs["tokens_per_gpu"], fs["mode"]) == ("hgx-h100", 8, 64, "prefill")
    e = estimate(load_model("deepseek-v3"), load_system("hgx-h100"), Params(tokens_per_gpu=64, gpus=8, seed=3),
                 schemes=["deepep", "ccfuser"], workload=workload_from_routing(L.routing, L.placement, 8))
    assert fs["us"] == pytest.approx({"deepep": e.results["deepep"].total * 1e6,
                                      "fused-unicast": e.results["ccfuser"].total * 1e6,
                                      "dysharp": e.results["dysharp"].total * 1e6})
    assert fs["speedup"]["deepep"] == pytest.approx(e.speedup("deepep")) and fs["speedup"]["dysharp"] == 1.0


def test_predict_only_builds_nothing(tmp_path, capsys, monkeypatch):
    """``--predict-only`` prints the prediction and the full-size figure and returns before any build."""
    import verif.harness.fastsim.system as fastsim

    def no_build(*a, **k):
        raise AssertionError("--predict-only built the RTL")
    monkeypatch.setattr(fastsim, "build_system", no_build)
    out = tmp_path / "out"
    assert main(["system", "--gpus", "4", "--tokens", "16", "--gemm", "64,32", "--predict-only",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "11 flits per dispatched row" in text
    for s in ("deepep", "fused-unicast", "nvls", "dysharp-basic", "dysharp"):
        assert f"| {s} " in text
    assert "estimator at full size (deepseek-v3 on hgx-h100, G = 4, 16 tokens per GPU, prefill" in text
    assert not out.exists()
    # the same argument checks as a run
    assert main(["system", "--gpus", "6", "--predict-only"]) == 2


def test_calibration_figures_reach_the_estimator(tmp_path):
    figs = {"dysharp": {"tlb": {"misses": 30}, "predicted": {"fills": {"down": [10, 20]}},
                        "tile_ready_latency": {"mean": 6.5}},
            "deepep": {"tlb": {"misses": 0}, "predicted": {"fills": {"down": [0, 0]}},
                       "tile_ready_latency": {"mean": 1.0}}}
    cal = calibration_figures(figs)
    assert cal == {"tlb_misses_per_key": 1.0, "tracker_ready_latency_cycles": 6.5}
    (tmp_path / "system.json").write_text(json.dumps({"calibration": cal}))
    c = load_calibration(tmp_path)
    assert c.get("tlb_misses_per_key") == 1.0 and c.get("tracker_ready_latency_cycles") == 6.5
    assert c.sources["tracker_ready_latency_cycles"].endswith("system.json")
    assert load_calibration(tmp_path, exclude=("system",)).get("tlb_misses_per_key") is None


def test_design_overrides_reach_the_system_top():
    """``--design`` sets the NICs' and the switch's parameters of the build on top of the layer's own, and
    names the run apart."""
    from verif.bench.system import check_point
    p = check_point("qwen3-235b-a22b", 8, 64, 128, 1, None, feeder="tags",
                    design="nic.any_tag=true,nic.read_queue=0x10,switch.resp_iterations=4")
    params = p.system_params(("dysharp",))
    assert params["nic"]["any_tag"] is True and params["nic"]["read_queue"] == 16
    assert params["nic"]["experts"] == 16 and params["switch"] == {"resp_iterations": 4}
    assert p.slug.endswith("_tags_nic.any_tag1_nic.read_queue16_switch.resp_iterations4")
