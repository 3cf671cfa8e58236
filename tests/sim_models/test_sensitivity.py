"""The tornado and the one-at-a-time sensitivity (``sim_models/sensitivity.py``, ``dysharp estimate --tornado
/ --sensitivity``): base point = a plain estimate, the identities the model guarantees at the ends of each
range, files written, bad input rejected."""

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from dysharp.cli import main
from sim_models.calibration import load_calibration
from sim_models.estimator import SCHEMES, Params, estimate
from sim_models.moe_config import load_model
from sim_models.sensitivity import (ASSUMPTIONS, QUICK_FIGURES_GRID, TORNADO_BASELINES, sensitivity, skew_spec,
                                    tornado)
from sim_models.system_config import load_system

MODEL, SYSTEM = "qwen3-30b-a3b", "hgx-h200"
PARAMS = Params(tokens_per_gpu=16, routing="uniform", seed=3)
BY_KEY = {a.key: a for a in ASSUMPTIONS}
APPLY = [a for a in ASSUMPTIONS if a.applies(PARAMS.mode)]       # the rows of a prefill tornado


@pytest.fixture(scope="module")
def cal():
    return load_calibration(None)        # documented defaults, whatever build/bench holds


@pytest.fixture(scope="module")
def result(cal, once):
    return once("tornado", lambda: tornado(MODEL, SYSTEM, PARAMS, cal,
                                           baselines=TORNADO_BASELINES + ("dysharp-explicit",)))


def _at(key, end, cal):
    """The estimate with assumption ``key`` at its ``end`` ("low"/"high"), computed directly."""
    m, s = load_model(MODEL), load_system(SYSTEM)
    a = BY_KEY[key]
    sx, px, cx = a.apply(m, s, PARAMS, cal, a.low if end == "low" else a.high)
    return estimate(m, sx, px, cx)


def test_base_is_a_plain_estimate(result, cal):
    e = estimate(load_model(MODEL), load_system(SYSTEM), PARAMS, cal)
    for b in result["baselines"]:
        assert result["base"][b] == e.speedup(b)
    assert result["point"]["dysharp_us"] == pytest.approx(e.results["dysharp"].total * 1e6)
    rows = result["rows"]
    assert len(rows) == len(APPLY) * len(result["baselines"])
    for r in rows:
        assert r["speedup_base"] == result["base"][r["baseline"]]
        assert r["swing"] == pytest.approx(r["speedup_high"] - r["speedup_low"])
        assert r["source"] and r["why"]
    base = {r["assumption"]: r["base_value"] for r in rows}
    s = load_system(SYSTEM)
    assert base["comm_sms"] == 24 and base["gemm_efficiency"] == 0.6 and base["skew"] == 0.0
    assert base["link_efficiency"] == s.link_efficiency and base["kernel_overhead_us"] == s.kernel_overhead_us


def test_ends_match_direct_estimates(result, cal):
    """Each row's ends are the estimates with that one assumption moved (the task engine changes nothing)."""
    by = {(r["assumption"], r["baseline"]): r for r in result["rows"]}
    for key in ("comm_sms", "link_efficiency", "switch_latency_ns", "skew"):
        for end in ("low", "high"):
            e = _at(key, end, cal)
            for b in TORNADO_BASELINES:
                assert by[(key, b)][f"speedup_{end}"] == e.speedup(b), (key, end, b)


def test_sequential_baseline_identities(cal):
    """DeepEP is dispatch + GEMMs + combine + 3 kernel overheads, plus its permutation, activation and
    unpermutation kernels (3 more overheads; every GPU runs them, so the busiest GPU's share moves by all
    three), each phase one traversal (2 link crossings + the switch): its time moves exactly by those terms
    and not at all with the SMs overlapped schemes reserve."""
    base = estimate(load_model(MODEL), load_system(SYSTEM), PARAMS, cal).results
    t = lambda key, end: _at(key, end, cal).results          # noqa: E731
    ko = BY_KEY["kernel_overhead_us"]
    assert t("kernel_overhead_us", "high")["deepep"].total - t("kernel_overhead_us", "low")["deepep"].total == \
        pytest.approx(6 * (ko.high - ko.low) * 1e-6, rel=1e-9)
    ll = BY_KEY["link_latency_ns"]
    assert t("link_latency_ns", "high")["deepep"].total - t("link_latency_ns", "low")["deepep"].total == \
        pytest.approx(2 * 2 * (ll.high - ll.low) * 1e-9, rel=1e-6)
    sw = BY_KEY["switch_latency_ns"]
    assert t("switch_latency_ns", "high")["deepep"].total - t("switch_latency_ns", "low")["deepep"].total == \
        pytest.approx(2 * (sw.high - sw.low) * 1e-9, rel=1e-6)
    # Faster links and faster GEMMs never slow the sequential scheme; links strictly speed it up.
    lo, hi = t("link_efficiency", "low")["deepep"].total, t("link_efficiency", "high")["deepep"].total
    assert hi < base["deepep"].total < lo
    lo, hi = t("gemm_efficiency", "low")["deepep"].total, t("gemm_efficiency", "high")["deepep"].total
    assert hi <= base["deepep"].total <= lo
    for end in ("low", "high"):
        r = t("comm_sms", end)
        assert r["deepep"].total == base["deepep"].total and r["deepep"].comm_sms == 0
        assert r["dualpipe"].total == base["dualpipe"].total      # DualPipe has its own pool (dualpipe_sms)
    zero = t("comm_sms", "low")                                   # comm_sms = 0: nothing reserved
    for n in ("tutel", "comet", "ccfuser", "dysharp"):
        assert zero[n].comm_sms == 0, n


def test_assumptions_that_move_one_scheme_only(result):
    """The explicit-address SMs move only the DySHARP explicit-address ablation, DualPipe's pool only
    DualPipe: those rows are flat for every other scheme."""
    for r in result["rows"]:
        if r["assumption"] == "explicit_sm_fraction" and r["baseline"] != "dysharp-explicit":
            assert r["speedup_low"] == r["speedup_base"] == r["speedup_high"], r["baseline"]
        if r["assumption"] == "dualpipe_sms" and r["baseline"] != "dualpipe":
            assert r["speedup_low"] == r["speedup_base"] == r["speedup_high"], r["baseline"]
        if r["assumption"] == "skew":        # the low end of the skew (Zipf 0) is the base routing itself
            assert r["speedup_low"] == r["speedup_base"]


def test_skew_spec_and_grid(cal):
    ds, qw = load_model("deepseek-v3"), load_model(MODEL)
    assert skew_spec(ds, 0) == "group" and skew_spec(ds, 0.5) == "group-zipf:0.5"
    assert skew_spec(ds, 0.5, grouped=False) == "zipf:0.5" and skew_spec(qw, 0) == "uniform"
    with pytest.raises(ValueError, match="Zipf exponent"):
        skew_spec(qw, -1)
    rows = sensitivity(MODEL, SYSTEM, PARAMS, cal, {"tile": [64, 128], "dtype": ["bf16"], "zipf_ungrouped": [1.0]})
    # zipf_ungrouped needs a group limit: Qwen3 has none, so it adds no point
    assert [(r["param"], r["value"]) for r in rows[::len(SCHEMES)]] == [("tile", 64), ("tile", 128), ("dtype", "bf16")]
    e = estimate(load_model(MODEL), load_system(SYSTEM), PARAMS, cal)
    at128 = {r["scheme"]: r["dysharp_speedup"] for r in rows if r["param"] == "tile" and r["value"] == 128}
    assert at128 == {n: e.speedup(n) for n in SCHEMES}                 # tile 128 is the base point


def test_cli_writes_files(tmp_path, capsys):
    argv = ["estimate", "--tornado", "--sensitivity", "--quick", "--model", MODEL, "--system", SYSTEM,
            "--tokens", "16", "--routing", "uniform", "--out", str(tmp_path), "--bench-dir", str(tmp_path / "none"),
            "--jobs", "1", "--no-cache"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| comm SMs" in out and "| base point" in out and "vs CCFuser" in out
    with open(tmp_path / "tornado.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(APPLY) * len(TORNADO_BASELINES)
    assert {r["assumption"] for r in rows} == {a.key for a in APPLY}
    data = json.loads((tmp_path / "tornado.json").read_text())
    assert data["point"]["tokens_per_gpu"] == 16 and set(data["base"]) == set(TORNADO_BASELINES)
    with open(tmp_path / "sensitivity_all.csv") as f:
        srows = list(csv.DictReader(f))
    points = sum(len(v) for k, v in QUICK_FIGURES_GRID.items() if k != "zipf_ungrouped")   # Qwen3: no group limit
    assert len(srows) == points * len(SCHEMES)
    for name in ("tornado", "sensitivity_all", "sensitivity_tile", "sensitivity_gpus", "sensitivity_tokens",
                 "sensitivity_skew", "sensitivity_dtype"):
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG", name


@pytest.mark.parametrize("extra, msg", [
    (["--tornado", "--sweep"], "--sweep and --tornado / --sensitivity are separate runs"),
    (["--tornado", "--schemes", "dysharp"], "DySHARP itself"),
    (["--sensitivity", "--schemes", "deepep,foo"], "valid: deepep"),
    (["--tornado", "--routing", "trace:x.npy"], "replayed trace"),
    (["--sensitivity", "--tokens", "0"], "--tokens"),
])
def test_cli_rejects_bad_input(tmp_path, capsys, extra, msg):
    assert main(["estimate", "--model", MODEL, "--system", SYSTEM, "--out", str(tmp_path)] + extra) == 2
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "tornado.csv").exists()


def test_api_rejects_bad_input(cal):
    with pytest.raises(ValueError, match="valid: deepep"):
        tornado(MODEL, SYSTEM, PARAMS, cal, baselines=("gshard",))
    with pytest.raises(ValueError, match="no baseline"):
        tornado(MODEL, SYSTEM, PARAMS, cal, baselines=())
    with pytest.raises(ValueError, match="unknown sensitivity input 'bogus'"):
        sensitivity(MODEL, SYSTEM, PARAMS, cal, {"bogus": [1]})
    with pytest.raises(ValueError, match="tile"):
        sensitivity(MODEL, SYSTEM, PARAMS, cal, {"tile": [0]})
    with pytest.raises(ValueError, match="link_efficiency"):
        BY_KEY["link_efficiency"].apply(load_model(MODEL), load_system(SYSTEM), PARAMS, cal, 1.5)


def test_switch_latency_row_overrides_the_rtl_figure(cal):
    """With the switch's zero-load latency calibrated from the RTL, the system's switch_latency_ns is not used;
    the tornado's row still moves the latency (it replaces the RTL figure), by 1 traversal per phase."""
    from sim_models.sensitivity import _with
    rtl = _with(cal, switch_zero_load_latency_cycles=50.0)
    m, s = load_model(MODEL), load_system(SYSTEM)
    a = BY_KEY["switch_latency_ns"]
    assert a.base(m, s, PARAMS, rtl) == pytest.approx(50.0 / s.switch_clock_ghz)
    t = {}
    for v in (a.low, a.high):
        sx, px, cx = a.apply(m, s, PARAMS, rtl, v)
        t[v] = estimate(m, sx, px, cx).results["deepep"].total
    assert t[a.high] - t[a.low] == pytest.approx(2 * (a.high - a.low) * 1e-9, rel=1e-6)


def test_each_distinct_estimate_runs_once(cal, monkeypatch):
    """Grid points at the base value (written explicitly or as the default) are one estimate."""
    from infra import engine
    seen = []
    real = engine.map_tasks

    def counting(fn, items, **kw):
        seen.append(len(items))
        return real(fn, items, **kw)
    monkeypatch.setattr(engine, "map_tasks", counting)
    base = Params(routing="uniform", seed=3)            # 4096 tokens: the prefill default
    rows = sensitivity(MODEL, SYSTEM, base, cal, {"tile": [128], "dtype": ["fp8"], "gpus": [8],
                                                  "tokens_per_gpu": [4096], "zipf": [0.0]})
    assert seen == [1] and len(rows) == 5 * len(SCHEMES)


def test_decode_only_rows_and_the_combine_row(cal):
    """The decode batch size enters only a decode tornado; the combine row's ends are DySHARP with one
    combine forced, and the base (auto) is never slower than either end."""
    assert not BY_KEY["decode_tokens"].applies("prefill") and BY_KEY["decode_tokens"].applies("decode")
    p = Params(mode="decode", tokens_per_gpu=16, routing="uniform", seed=3)
    res = tornado(MODEL, SYSTEM, p, cal, assumptions=[BY_KEY["combine"], BY_KEY["decode_tokens"]],
                  baselines=("ccfuser",))
    by = {r["assumption"]: r for r in res["rows"]}
    assert set(by) == {"combine", "decode_tokens"}
    r = by["combine"]
    assert r["speedup_base"] >= max(r["speedup_low"], r["speedup_high"])
    e = estimate(load_model(MODEL), load_system(SYSTEM), dataclasses.replace(p, combine="pull"), cal)
    assert r["speedup_low"] == e.speedup("ccfuser")


def test_every_assumption_of_the_parameter_table_has_a_tornado_row():
    """docs/estimator.md's parameter table: every row marked *assumption* names the tornado (or says why no
    tornado row can move it), and every Params field appears in the table."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "estimator.md").read_text()
    table = text.split("## Assumptions and their sources", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| constant")]
    assert len(rows) > 20
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "*assumption*" in cells[3]:
            assert "tornado" in cells[4] or "not an input" in cells[4], cells[0]
    for f in dataclasses.fields(Params):
        assert f"Params.{f.name}" in table or f"`{f.name}`" in table, f"Params.{f.name} missing from the table"
    for a in ASSUMPTIONS:                  # and the tornado's rows are named in the table
        assert a.label in table or a.key in table, a.key
