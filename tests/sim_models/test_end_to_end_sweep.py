"""`dysharp estimate --sweep --end-to-end`: the whole-step sweep's CSV against end_to_end() called directly, its
plot and table, and its refusals of bad input."""

import csv

import pytest

from dysharp.cli import main
from sim_models.calibration import load_calibration
from sim_models.end_to_end import E2EParams, end_to_end
from sim_models.end_to_end_sweep import E2E_COLUMNS, E2E_MODES
from sim_models.estimator import SCHEMES, Params
from sim_models.moe_config import load_model
from sim_models.system_config import load_system


def test_sweep_csv_equals_end_to_end_per_cell(tmp_path, capsys):
    out, nobench = tmp_path / "out", tmp_path / "no-bench"       # uncalibrated, whatever build/ holds
    assert main(["estimate", "--sweep", "--end-to-end", "--models", "qwen3-30b-a3b,mixtral-8x7b",
                 "--systems", "hgx-h200", "--tokens", "128", "--context", "256", "--jobs", "1", "--no-cache",
                 "--bench-dir", str(nobench), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for title in ("**training** (128 tokens/GPU)", "**inference, prefill** (128 tokens/GPU)",
                  "**inference, decode** (128 tokens/GPU)"):
        assert title in printed
    assert "| mixtral-8x7b  | hgx-h200 |" in printed and "wrote " in printed
    assert (out / "end_to_end_speedup.png").read_bytes()[:4] == b"\x89PNG"
    with open(out / "end_to_end_sweep.csv") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == E2E_COLUMNS
        rows = list(reader)
    assert len(rows) == 2 * 1 * len(E2E_MODES) * len(SCHEMES)
    assert {(r["model"], r["system"], r["mode"]) for r in rows} == {
        (m, "hgx-h200", mode) for m in ("qwen3-30b-a3b", "mixtral-8x7b") for mode in E2E_MODES}
    assert {r["context"] for r in rows} == {"256"} and {r["tokens_per_gpu"] for r in rows} == {"128"}
    # One cell, recomputed directly: every scheme's figures match the CSV (written to 4 decimals).
    e = end_to_end(load_model("mixtral-8x7b"), load_system("hgx-h200"), Params(mode="training", tokens_per_gpu=128),
                   E2EParams(context=256), load_calibration(nobench))
    cell = {r["scheme"]: r for r in rows if r["model"] == "mixtral-8x7b" and r["mode"] == "training"}
    assert set(cell) == set(e.schemes) == set(SCHEMES)
    for name, s in e.schemes.items():
        r = cell[name]
        assert int(r["gpus"]) == e.estimate.gpus
        for col, value in (("moe_layer_us", s.moe_layer * 1e6), ("moe_block_us", s.moe_block * 1e6),
                           ("step_ms", s.step * 1e3), ("moe_share", s.moe_share),
                           ("layer_speedup", s.layer_speedup), ("step_speedup", s.step_speedup)):
            assert float(r[col]) == pytest.approx(value, abs=6e-5), (name, col)
    # the whole-step speedups are not all 1 (the cell compared is not a degenerate one)
    assert max(float(r["step_speedup"]) for r in cell.values()) > 1.05


def test_sweep_shared_serial_reaches_every_cell(tmp_path, capsys):
    """--shared-serial and --modes reach the sweep: serial shared experts never make a step shorter."""
    steps = []
    for extra in ([], ["--shared-serial"]):
        out = tmp_path / ("serial" if extra else "overlap")
        assert main(["estimate", "--sweep", "--end-to-end", "--models", "deepseek-v3", "--systems", "hgx-h200",
                     "--modes", "decode", "--schemes", "deepep", "--jobs", "1", "--no-cache",
                     "--bench-dir", str(tmp_path / "no-bench"), "--out", str(out)] + extra) == 0
        capsys.readouterr()
        with open(out / "end_to_end_sweep.csv") as f:
            rows = list(csv.DictReader(f))
        assert [(r["mode"], r["scheme"]) for r in rows] == [("decode", "deepep"), ("decode", "dysharp")]
        steps.append([float(r["step_ms"]) for r in rows])
    assert all(a < b for a, b in zip(*steps))


def test_a_cached_whole_step_sweep_serves_the_layer_sweep(tmp_path, monkeypatch):
    """With the cache, each step's routed MoE layer is stored as the layer sweep's estimate of that point, and
    equals what the layer sweep computes itself."""
    from infra import engine
    from sim_models.end_to_end_sweep import end_to_end_sweep
    from sim_models.sweep import estimate_key, main_sweep
    monkeypatch.setenv("DYSHARP_CACHE", str(tmp_path / "cache"))
    cal = load_calibration(tmp_path / "no-bench")
    params = Params(tokens_per_gpu=64)
    end_to_end_sweep(["mixtral-8x7b"], ("hgx-h200",), ("prefill",), params, cal=cal, cache=True)
    stored = engine.cache("estimate").get(estimate_key(("mixtral-8x7b", "hgx-h200", params, cal, {})))
    assert stored is not None and {r["scheme"] for r in stored} == set(SCHEMES)
    assert stored == main_sweep(["mixtral-8x7b"], ("hgx-h200",), params, cal, cache=False)
    # a subset of schemes is not the layer sweep's estimate: nothing stored for it
    end_to_end_sweep(["qwen3-30b-a3b"], ("hgx-h200",), ("prefill",), params, cal=cal, schemes=["deepep"], cache=True)
    assert engine.cache("estimate").get(estimate_key(("qwen3-30b-a3b", "hgx-h200", params, cal, {}))) is None


@pytest.mark.parametrize("argv, message", [
    (["--sweep", "--end-to-end", "--models", "gpt5"], "unknown model 'gpt5'; valid: dbrx, deepseek-v2"),
    (["--sweep", "--models", "deepseek-v3,gpt5"], "unknown model 'gpt5'; valid: dbrx"),
    (["--sweep", "--end-to-end", "--models", ","], "no model given; valid: dbrx"),
    (["--sweep", "--end-to-end", "--systems", "dgx"], "unknown system 'dgx'; valid: gh200-nvl32"),
    (["--sweep", "--end-to-end", "--modes", "inference"], "unknown mode 'inference'; valid: training, prefill, decode"),
    (["--sweep", "--end-to-end", "--mode", "decode"], "give --modes decode instead of --mode"),
    (["--end-to-end", "--modes", "decode"], "--modes applies only with --sweep --end-to-end (valid: training"),
    (["--sweep", "--modes", "decode"], "--modes applies only with --sweep --end-to-end"),
    (["--models", "dbrx"], "--models applies only with --sweep"),
    (["--end-to-end", "--systems", "nvl72"], "--systems applies only with --sweep"),
    (["--sweep", "--context", "64"], "--context applies only with --end-to-end"),
    (["--sweep", "--end-to-end", "--context", "0"], "--context must be >= 1"),
    (["--sweep", "--end-to-end", "--tokens", "0"], "--tokens must be >= 1"),
    (["--sweep", "--end-to-end", "--jobs", "0"], "--jobs must be >= 1"),
    (["--sweep", "--end-to-end", "--gpus", "1"], "--gpus must be >= 2"),
    (["--sweep", "--end-to-end", "--schemes", "deepep,foo"], "unknown scheme 'foo'; valid: deepep"),
    (["--sweep", "--end-to-end", "--tornado"], "--sweep --end-to-end and --tornado / --sensitivity are separate runs"),
])
def test_bad_sweep_input_is_refused(argv, message, tmp_path, capsys):
    assert main(["estimate", *argv, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
