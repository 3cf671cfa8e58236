"""The estimator: properties, calibration, modes, CLI and sweep output."""

import json
import re

import numpy as np
import pytest

from dysharp.cli import main
from sim_models.calibration import FIGURES, load_calibration
from sim_models.estimator import BASELINES, FULL, SCHEMES, Params, estimate
from sim_models.moe_config import load_model
from sim_models.system_config import load_system
from sim_models.workload import build_workload

SEQUENTIAL = ("deepep", "nvls", "dysharp-basic")


@pytest.fixture(scope="module")
def small():
    """Qwen3-30B-A3B on 8 GPUs, 512 tokens per GPU: every engine in well under a second."""
    m, s = load_model("qwen3-30b-a3b"), load_system("hgx-h200")
    wl = build_workload(m.routed_experts, m.top_k, 8, 512, routing="uniform", seed=5)
    return m, s, wl


def _totals(m, s, wl, **kw):
    e = estimate(m, s, Params(tokens_per_gpu=512, routing="uniform", seed=5, **kw), workload=wl)
    return e, {n: r.total for n, r in e.results.items()}


def test_more_bandwidth_is_never_slower(small):
    m, s, wl = small
    prev = None
    for scale in (0.25, 0.5, 1.0, 2.0, 4.0):
        _, cur = _totals(m, s, wl, bandwidth_scale=scale)
        if prev:
            for n in cur:
                assert cur[n] <= prev[n] * (1 + 1e-9), (n, scale, prev[n], cur[n])
        prev = cur


def test_zero_communication_limit_is_compute_time(small):
    """Without communication, kernel overheads and the separate-kernel schemes' memory-bound kernels
    (``unfused_kernels``, tested below), every scheme's time is its GEMM time."""
    m, s, wl = small
    e, tot = _totals(m, s, wl, bandwidth_scale=1e7, latency_scale=0.0, unfused_kernels=False)
    for n in SEQUENTIAL:
        assert tot[n] == pytest.approx(e.compute_only, rel=1e-5)
    # The tile engines' floor: their tiles' compute on all SMs, fluid (a persistent kernel streams the blocks
    # of successive tiles, so it has no grouped launch's last-wave loss, which compute_only includes).
    from sim_models.estimator import _Context, _tile_weight_reads
    ctx = _Context(m, s, e.params, e.calibration, wl)
    c1, _, c2, _ = ctx.gemm.tile_work(np.where(wl.tile_inst >= 0, wl.tile_rows, 0), _tile_weight_reads(ctx))
    fluid = float(np.max((c1 + c2).sum(axis=1)))
    assert fluid <= e.compute_only
    for n, r in e.results.items():
        # every scheme's time shrinks to its own GEMM work (on the SMs it leaves to GEMMs, chunked GEMMs
        # included); the two-stage tile pipelines add their fill (stage 2 idles until the first GEMM-1 ends)
        tiled = SCHEMES[n].engine in ("comet", "fused")
        assert r.gemm >= (fluid if tiled else e.compute_only) * (1 - 1e-9), n
        assert r.gemm * (1 - 1e-9) <= tot[n] <= r.gemm * 1.08, n


def test_deterministic_for_a_seed(small):
    m, s, _ = small
    a = estimate(m, s, Params(tokens_per_gpu=256, seed=11))
    b = estimate(m, s, Params(tokens_per_gpu=256, seed=11))
    c = estimate(m, s, Params(tokens_per_gpu=256, seed=12))
    assert {n: r.total for n, r in a.results.items()} == {n: r.total for n, r in b.results.items()}
    assert a.results[FULL].total != c.results[FULL].total


def test_dysharp_basic_alone_gives_no_speedup_and_fusion_does(small):
    """MISSION.md: the traffic saving alone is asymmetric (each phase stays bound by its unsaved direction);
    fusion turns it into time."""
    m, s, wl = small
    e, tot = _totals(m, s, wl)
    # the same kernels on both sides (DySHARP-Basic also has no permute kernel: its rows land in expert slots)
    _, bare = _totals(m, s, wl, unfused_kernels=False)
    assert bare["dysharp-basic"] == pytest.approx(bare["deepep"], rel=0.03)
    assert tot["dysharp-basic"] < tot["deepep"]
    assert e.speedup("deepep") > 1.3 and e.speedup("ccfuser") > 1.0
    # (Shared HBM, an idle stage's bandwidth going to the other, speeds up CCFuser's HBM-bound tiles more than
    # DySHARP's, whose ld_reduce combine tail stays: about 1.045 over CCFuser.)
    # With each tile re-reading its expert's weights (16 experts per GPU interleave, L2 holds 10) the fused
    # lead over DeepEP shrinks.
    e_l2, _ = _totals(m, s, wl, weight_reuse="l2")
    assert 1.1 < e_l2.speedup("deepep") < e.speedup("deepep")
    # the fused pipeline's busiest link direction carries ~(1 + D) / (2 D) of the sequential traffic
    fwd = e.traffic["dynamic"]
    assert np.all(fwd.totals()["up_wire"] < (fwd.dispatch.down_wire + fwd.combine.up_wire))


def test_modes_and_training_roles(small):
    m, s, wl = small
    _, pre = _totals(m, s, wl)
    tr, trn = _totals(m, s, wl, mode="training")
    for n in SCHEMES:
        assert trn[n] > 2.0 * pre[n] * 0.9         # backward = 2x GEMM + BF16 comm both ways
    dec = estimate(m, s, Params(mode="decode"))
    assert dec.tokens_per_gpu == 64
    r = dec.results["deepep"]
    # decode is latency/weight-read bound: fixed terms are a visible share of the dispatch
    assert r.dispatch > 2 * 1e-6 and r.total < 1e-3


def test_calibration_defaults_and_overrides(tmp_path, small):
    cal = load_calibration(tmp_path)
    assert set(cal.uncalibrated()) == set(FIGURES)
    (tmp_path / "switch.json").write_text(json.dumps({"calibration": {
        "switch_zero_load_latency_cycles": 3125, "switch_saturation_throughput": 0.5}}))
    (tmp_path / "reduction.json").write_text(json.dumps({"runs": []}))       # no calibration dict: defaults
    cal2 = load_calibration(tmp_path)
    assert cal2.calibrated("switch_saturation_throughput") and cal2.sources["switch_zero_load_latency_cycles"].endswith("switch.json")
    assert "reduce_flits_per_cycle" in cal2.uncalibrated()
    m, s, wl = small
    p = Params(tokens_per_gpu=512, routing="uniform", seed=5)
    base = estimate(m, s, p, cal, workload=wl)
    slow = estimate(m, s, p, cal2, workload=wl)
    # half the switch throughput doubles the transfer part; 3125 cycles at 1.5625 GHz = 2 us per traversal
    disp_xfer = base.results["deepep"].dispatch - (2 * s.link_latency_ns + s.switch_latency_ns) * 1e-9
    assert slow.results["deepep"].dispatch == pytest.approx(2 * disp_xfer + (2 * s.link_latency_ns) * 1e-9 + 2e-6)
    (tmp_path / "al_tlb.json").write_text("{not json")
    with pytest.raises(ValueError, match="al_tlb.json: not valid JSON"):
        load_calibration(tmp_path)
    (tmp_path / "al_tlb.json").write_text(json.dumps({"calibration": {"tlb_hit_rate": 2}}))
    with pytest.raises(ValueError, match="tlb_hit_rate"):
        load_calibration(tmp_path)


def test_params_validation():
    m, s = load_model("mixtral-8x7b"), load_system("hgx-h200")
    for kw, msg in ((dict(mode="serve"), "valid: prefill, decode, training"), (dict(dtype="fp4"), "valid: bf16, fp8"),
                    (dict(tile=0), "tile"), (dict(gpus=1), "gpus"), (dict(bandwidth_scale=0), "bandwidth_scale")):
        with pytest.raises(ValueError, match=msg):
            estimate(m, s, Params(**kw))
    with pytest.raises(ValueError, match="unknown scheme 'x'"):
        estimate(m, s, Params(tokens_per_gpu=64), schemes=["x"])
    with pytest.raises(ValueError, match="placement"):
        estimate(m, s, Params(tokens_per_gpu=64, placement="rr"))


def test_fewer_experts_than_gpus_uses_an_ep_group():
    e = estimate(load_model("mixtral-8x7b"), load_system("nvl72"), Params(tokens_per_gpu=128))
    assert e.gpus == 8 and e.measured_d == pytest.approx(2.0, abs=0.05)


def test_cli_table_and_errors(tmp_path, capsys):
    assert main(["estimate", "--model", "qwen3-30b-a3b", "--system", "hgx-h200", "--tokens", "256",
                 "--routing", "zipf:0.3", "--out", str(tmp_path),
                 "--bench-dir", str(tmp_path / "no-bench")]) == 0   # uncalibrated whatever build/ holds
    out = capsys.readouterr().out
    for n in SCHEMES:
        assert f"| {SCHEMES[n].label} |" in out
    assert "DySHARP (full) speedup: deepep" in out and "uncalibrated" in out
    data = json.loads((tmp_path / "qwen3-30b-a3b_hgx-h200_prefill.json").read_text())
    assert set(data["speedup"]) == set(SCHEMES)
    for argv, msg in ((["--model", "gpt5"], "valid: dbrx"), (["--system", "dgx"], "valid: gh200-nvl32"),
                      (["--mode", "x"], "valid: prefill"), (["--dtype", "x"], "valid: bf16"),
                      (["--routing", "pareto"], "valid: uniform"), (["--placement", "x"], "valid: contiguous"),
                      (["--tokens", "0"], "--tokens"), (["--schemes", "deepep,foo"], "valid: deepep")):
        assert main(["estimate", "--out", str(tmp_path)] + argv) == 2
        assert msg in capsys.readouterr().err


def test_sweep_writes_csv_and_plots(tmp_path):
    from sim_models.full_sweep import run_sweep
    res = run_sweep(tmp_path, model="qwen3-30b-a3b", params=Params(tokens_per_gpu=128), jobs=1,
                    models=["qwen3-30b-a3b", "mixtral-8x7b"], systems=("hgx-h200",),
                    grid={"gpus": [4, 8], "tokens_per_gpu": [64, 128], "zipf": [0.0, 0.5], "tile": [64, 128]})
    rows = (tmp_path / "sweep.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * len(SCHEMES) and rows[0].startswith("model,system,gpus")
    assert len((tmp_path / "sensitivity.csv").read_text().splitlines()) == 1 + 8 * len(SCHEMES)
    for k in ("speedup_png", "breakdown_png", "sensitivity_png"):
        assert res["paths"][k].read_bytes()[:4] == b"\x89PNG"
    assert all(b in res["rows"][0] or True for b in BASELINES)


def test_trace_replay_through_the_cli(tmp_path, capsys):
    from sim_models.routing import sample_topk, save_trace
    ids = sample_topk(8 * 100 + 5, np.ones(128), 8, np.random.default_rng(0))     # 5 tokens left over
    save_trace(tmp_path / "t.npy", ids)
    assert main(["estimate", "--model", "qwen3-30b-a3b", "--system", "hgx-h200",
                 "--routing", f"trace:{tmp_path / 't.npy'}", "--out", str(tmp_path)]) == 0
    assert "100 tokens/GPU" in capsys.readouterr().out
    assert main(["estimate", "--model", "mixtral-8x7b", "--system", "hgx-h200",
                 "--routing", f"trace:{tmp_path / 't.npy'}", "--out", str(tmp_path)]) == 2
    assert "routing trace" in capsys.readouterr().err


def test_bench_estimate_small(tmp_path, capsys):
    out = tmp_path / "e.json"
    assert main(["bench", "estimate", "--no-sweep", "--model", "mixtral-8x7b", "--system", "hgx-h200",
                 "--gpus", "2", "--token-counts", "64", "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert [g["vary"] for g in rep["growth"]] == ["gpus", "tokens_per_gpu"] and rep["growth"][1]["tokens_per_gpu"] == 64
    from sim_models.bench_estimate import markdown
    assert re.search(r"\| tokens_per_gpu +\| 8 +\| 64 +\|", markdown(rep))
    for argv, msg in ((["--gpus", "x"], "comma-separated integers"), (["--tokens", "0"], "--tokens"),
                      (["--gpus", "1"], ">= 2")):
        assert main(["bench", "estimate", "--no-sweep"] + argv + ["--out", str(out)]) == 2
        assert msg in capsys.readouterr().err


@pytest.mark.slow
def test_study_step_and_cli_sweep(tmp_path, capsys, request):
    """The study's estimator section (quick) and `dysharp estimate --sweep --quick` end to end (~1-2 min)."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow: run with -m slow")    # the project marks slow tests but nothing deselects them
    import argparse
    from sim_models.study_step import estimate_step
    md = estimate_step(argparse.Namespace(quick=True), tmp_path)
    assert "![speedups](estimate/speedup.png)" in md and (tmp_path / "estimate" / "speedup.png").exists()
    assert re.search(r"\| deepseek-v3 +\| gh200-nvl32 +\|", md)
    for section in ("### Whole step", "#### Whole-step sweep: training and inference", "### Validation against",
                    "### What the conclusions hang on", "### Sensitivity"):
        assert section in md
    assert "![whole-step speedups](estimate/end_to_end_speedup.png)" in md
    assert (tmp_path / "estimate" / "end_to_end_speedup.png").exists()
    assert re.search(r"\*\*inference, decode\*\* \(64 tokens/GPU\)", md)
    assert len((tmp_path / "estimate" / "end_to_end_sweep.csv").read_text().splitlines()) == 1 + 3 * 3 * 3 * len(SCHEMES)
    assert "![tornado](estimate/tornado.png)" in md and (tmp_path / "estimate" / "tornado.png").exists()
    assert (tmp_path / "estimate" / "sensitivity_all.png").exists()
    assert json.loads((tmp_path / "estimate" / "validation.json").read_text())
    assert main(["estimate", "--sweep", "--quick", "--out", str(tmp_path / "cli")]) == 0
    assert "main sweep" in capsys.readouterr().out


def test_gpu_counts_it_cannot_take_as_given_get_a_notice(tmp_path, capsys):
    """More GPUs than the NVLink domain or the experts, or an uneven expert split: a printed notice, and the
    closed-form D for the uneven split (sum over the GPUs' own expert counts)."""
    from sim_models.routing import expected_distinct_gpus
    common = ["estimate", "--schemes", "deepep", "--tokens", "64", "--out", str(tmp_path), "--bench-dir", str(tmp_path)]
    assert main(common + ["--gpus", "512"]) == 0
    out = capsys.readouterr().out
    assert "--gpus 512 exceeds the 32 GPUs of gh200-nvl32" in out
    assert "expert parallelism is capped at deepseek-v3's 256 routed experts" in out and "256 GPUs" in out
    assert main(common + ["--gpus", "3"]) == 0
    out = capsys.readouterr().out
    assert "256 experts do not split evenly over 3 GPUs: 1 of them hold 86 experts and 2 hold 85" in out
    d3 = expected_distinct_gpus(256, 3, 8)
    assert f"closed form for uniform routing: {d3:.2f}" in out and 2.8 < d3 < 3.0
    # even split: the same as the textbook G (1 - C(E - E/G, k) / C(E, k))
    from math import comb
    assert expected_distinct_gpus(256, 8, 8) == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)))
    assert main(common + ["--gpus", "8"]) == 0
    assert "notice" not in capsys.readouterr().out


def test_bad_seed_and_a_text_file_as_trace_are_named(tmp_path, capsys):
    assert main(["estimate", "--seed", "-1", "--out", str(tmp_path)]) == 2
    assert "--seed must be >= 0" in capsys.readouterr().err
    trace = tmp_path / "trace.txt"
    trace.write_text("0 1 2 3 4 5 6 7\n")
    assert main(["estimate", "--routing", f"trace:{trace}", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is not a NumPy .npy array file" in err and "pickled" not in err and "numpy.save(path, ids)" in err


@pytest.mark.parametrize("flags, named", [
    (["--validate", "--end-to-end"], "--validate and --end-to-end are separate runs"),
    (["--sweep", "--end-to-end", "--validate"], "--validate and --sweep --end-to-end are separate runs"),
    (["--end-to-end", "--tornado"], "--end-to-end and --tornado / --sensitivity are separate runs"),
])
def test_run_modes_are_exclusive(flags, named, tmp_path, capsys):
    """--validate, --end-to-end, --sweep and --tornado/--sensitivity are separate runs: two of them is an
    error naming both, not one silently ignored."""
    assert main(["estimate", *flags, "--out", str(tmp_path)]) == 2
    assert named in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_unfused_kernels_by_hand(small):
    """The separate-kernel schemes' permutation, activation and unpermutation kernels (estimator.
    UNFUSED_KERNELS): per GPU, n rows its experts compute and R (token, GPU) pairs it receives move
    n (2 s_d + f (4 + 2 w)) + (n + R) s_c bytes at HBM x mem_efficiency, plus one kernel overhead each; the
    sequential deepep scheme adds the busiest GPU's GEMMs + kernels instead of its GEMMs alone. DySHARP-Basic's
    rows land in their experts' slots (no permute); the tile-level schemes fuse all three (unchanged)."""
    from sim_models.estimator import UNFUSED_KERNELS
    from sim_models.traffic import payload_bytes
    m, s, wl = small
    on, t_on = _totals(m, s, wl)
    off, t_off = _totals(m, s, wl, unfused_kernels=False)
    G = wl.gpus
    n = np.bincount(wl.inst_gpu, weights=wl.inst_rows.astype(float), minlength=G)
    R = np.bincount(wl.pair_gpu, minlength=G).astype(float)
    s_d, s_c, f, w = payload_bytes(m.hidden, "fp8"), payload_bytes(m.hidden, "bf16"), m.expert_ffn, 1
    rate = s.hbm_tbps * 1e12 * 0.75
    ko = s.kernel_overhead_us * 1e-6
    from sim_models.estimator import _Context
    gemm = _Context(m, s, on.params, on.calibration, wl).gpu_gemm
    for name, extra in (("deepep", n * (2 * s_d + f * (4 + 2 * w) + s_c) + R * s_c),
                        ("dysharp-basic", n * (f * (4 + 2 * w) + s_c) + R * s_c)):
        k = extra / rate + len(UNFUSED_KERNELS[name]) * ko
        assert t_on[name] - t_off[name] == pytest.approx(float(np.max(gemm + k) - np.max(gemm)), rel=1e-9)
        assert on.results[name].detail["kernels"] == pytest.approx(float(np.max(gemm + k) - np.max(gemm)))
    for name in ("comet", "ccfuser", "dysharp-comet", "dysharp"):
        assert t_on[name] == t_off[name]
    for name in ("tutel", "fastermoe", "dualpipe", "nvls"):
        assert t_on[name] > t_off[name]


def test_cli_combine(tmp_path, capsys):
    """--combine: a bad value is refused with the valid ones; a forced combine is the one printed."""
    assert main(["estimate", "--combine", "both", "--out", str(tmp_path)]) == 2
    assert "unknown --combine 'both'; valid: auto, pull, push" in capsys.readouterr().err
    assert main(["estimate", "--model", "qwen3-30b-a3b", "--system", "hgx-h100", "--mode", "decode", "--tokens", "4",
                 "--schemes", "ccfuser", "--combine", "push", "--bench-dir", str(tmp_path / "none"),
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "DySHARP (full) combine: push (push " in out and "pull " not in out.split("combine: push")[1].split(")")[0]
