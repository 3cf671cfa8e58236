"""The estimator against the baselines' published figures (sim_models/validation.py, `dysharp estimate --validate`)."""

import dataclasses
import json

import pytest

from dysharp.cli import main
from sim_models import published_comet as comet_fig
from sim_models.estimator import Params, estimate
from sim_models.moe_config import ModelConfig, load_model
from sim_models.system_config import load_system
from sim_models import validation
from sim_models.validation import (FAILING, SETUPS, TOLERANCE, Setup, error_pct, failures, markdown, run_setup, status,
                                   summary, validate)

BASELINES = ("DeepEP", "NVLS", "Tutel", "FasterMoE", "COMET", "CCFuser", "DualPipe")


@pytest.fixture(scope="module")
def rows(once):
    return once("validation", validate)


def test_table_builds_with_every_baseline_and_a_source_per_row(rows):
    assert len(rows) == len(SETUPS)
    for b in BASELINES:
        assert any(r["baseline"].startswith(b) for r in rows), b
    for r in rows:
        assert r["source"].strip(), r["key"]
        if r["estimate"] is None:           # no counterpart: the row says why
            assert r["note"].strip() and r["error_pct"] is None, r["key"]
    md = markdown(rows)
    table, notes, title, means = md.split("\n\n")
    assert table.count("\n") == len(rows) + 1 and "| published" in table
    # One numbered note per distinct note or reason text (rows that share one share its number).
    texts = {r["note"] for r in rows if r["note"]} | {r["reason"] for r in rows if r["reason"]}
    assert len(notes.splitlines()) == len(texts)
    assert title.startswith("Groups of rows") and means.count("\n") == len(summary(rows)) + 1
    assert sum(r["estimate"] is not None for r in rows) >= 40


def test_errors_are_signed_relative_errors(rows):
    assert error_pct(110.0, 100.0) == pytest.approx(10.0)
    assert error_pct(80.0, 160.0) == pytest.approx(-50.0)
    for r in rows:
        if r["estimate"] is not None:
            assert r["error_pct"] == pytest.approx(100 * (r["estimate"] - r["published"]) / r["published"])
    with pytest.raises(ValueError, match="positive"):
        error_pct(1.0, 0.0)


def _setup(key):
    return next(s for s in SETUPS if s.key == key)


def test_link_rate_is_raw_times_link_efficiency():
    h800 = load_system("hgx-h800")
    est = run_setup(_setup("h800-nvlink"))["estimate"]
    assert est == pytest.approx(h800.links_per_gpu * h800.link_gbps * h800.link_efficiency)   # 164.4 GB/s


def test_bulk_collectives_match_the_link_rate_by_hand():
    h100 = load_system("hgx-h100")
    payload_rate = h100.links_per_gpu * h100.link_gbps * h100.link_efficiency     # 369.9 GB/s
    # An all-gather moves (G-1)/G of S through each uplink: busbw = the payload rate, less latency and the
    # partial last packet of a 14,336-B row.
    ag = run_setup(_setup("nccl-bulk"))["estimate"]
    assert 0.98 * payload_rate < ag < payload_rate
    # NCCL's NVLS all-reduce runs its ld_reduce and multimem.st at once: each direction carries S (G+1)/G
    # (its own shard through the switch too), so busbw = 2(G-1)/(G+1) x the payload rate (575 GB/s), less the
    # read requests on the downlink (one header flit per 256-B packet), one loop's fill and drain and latency.
    ar = run_setup(_setup("nccl-nvls-allreduce"))
    full_duplex = 2 * 7 / 9 * payload_rate
    assert 0.92 * full_duplex < ar["estimate"] < full_duplex
    assert 0.01 < ar["fill_drain_us"] / ar["time_us"] < 0.02       # 16 ch x 8 x 128 KiB of 940 MB


def test_nvls_allgather_and_nvlink5_rows_by_hand():
    """The NVLS all-gather is the nvls scheme's dispatch with NCCL's multicast to the whole group: all of S
    down each GPU's link (its own rows too), so busbw = rate x (G-1)/G; the B300 non-NVLS row is the
    all-gather probe on NVLink5."""
    h100 = load_system("hgx-h100")
    rate = h100.links_per_gpu * h100.link_gbps * h100.link_efficiency
    ag = run_setup(_setup("nccl-nvls-allgather"))
    assert 0.97 * rate * 7 / 8 < ag["estimate"] < rate * 7 / 8
    nvl = load_system("nvl72")
    rate5 = nvl.links_per_gpu * nvl.link_gbps * nvl.link_efficiency                # 739.8 GB/s
    assert 0.97 * rate5 < run_setup(_setup("nccl-b300-ring-allreduce"))["estimate"] < rate5
    # NVLink5 on 8 GPUs: the NVLS all-reduce row is the same pipelined accounting at twice the rate (24
    # channels; NVLink5's 32-B flits make the request headers a larger share).
    b300_ar = run_setup(_setup("nccl-b300-nvls-allreduce"))["estimate"]
    assert 0.88 * 2 * 7 / 9 * rate5 < b300_ar < 2 * 7 / 9 * rate5


def test_every_published_source_names_its_table_or_thread():
    for st in SETUPS:
        if st.baseline.startswith("DeepEP"):
            assert "DeepEP" in st.source and ("table" in st.source or "paragraph" in st.source), st.key
        if st.baseline == "DeepGEMM":
            assert "README.md at " in st.source and "layout)" in st.source, st.key
        if st.baseline.startswith(("NCCL", "NVLS")):
            assert "github.com/NVIDIA/nccl" in st.source and "issue #" in st.source, st.key


def test_deepep_bandwidth_counts_the_gpus_own_rows():
    """DeepEP's bytes include each GPU's own tokens (1/8 of its rows at EP8), which never cross a link: the
    estimate is the link payload rate x 8/7, less load imbalance, headers and latency."""
    h800 = load_system("hgx-h800")
    ideal = h800.links_per_gpu * h800.link_gbps * h800.link_efficiency * 8 / 7
    r = run_setup(_setup("deepep-v1-dispatch"))
    assert 0.95 * ideal < r["estimate"] < ideal
    c = run_setup(_setup("deepep-v1-combine"))
    assert 0.95 * ideal < c["estimate"] < ideal


def test_bad_setups_are_named():
    bad = dataclasses.replace(_setup("h800-nvlink"), kind="bogus")
    with pytest.raises(ValueError, match="bogus"):
        run_setup(bad)
    with pytest.raises(ValueError, match="no source"):
        validate([Setup("x", "DeepEP", "-", "-", 1.0, "GB/s", "")])
    probe = dataclasses.replace(_setup("nccl-bulk"), model=dict(_setup("nccl-bulk").model, top_k=4))
    with pytest.raises(ValueError, match="every token on every GPU"):
        run_setup(probe)


def test_cli_writes_the_table_and_rejects_bad_input(tmp_path, capsys):
    assert main(["estimate", "--validate", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "DeepEP normal" in out and "153 GB/s" in out
    data = json.loads((tmp_path / "validation.json").read_text())
    assert len(data) == len(SETUPS) and all(r["source"] for r in data)
    assert (tmp_path / "validation.md").read_text().startswith("| baseline")
    assert "no counterpart [" in out
    assert main(["estimate", "--validate", "--sweep", "--out", str(tmp_path)]) == 2
    assert "--validate and --sweep" in capsys.readouterr().err
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "switch.json").write_text("{not json")
    assert main(["estimate", "--validate", "--bench-dir", str(bench), "--out", str(tmp_path)]) == 2
    assert "switch.json" in capsys.readouterr().err


def test_deepep_bandwidth_does_not_depend_on_the_routing():
    """DeepEP's README names DeepSeek-V3's group-limited routing (top-4 of 8 groups), its test routes
    uniformly: fewer rows per GPU with groups, but the same share of them is the GPU's own, so the bandwidth
    is the same while the time is not."""
    st = _setup("deepep-v1-dispatch")
    grouped = dataclasses.replace(st, routing="group", model=dict(st.model, n_group=8, topk_group=4))
    a, b = run_setup(st), run_setup(grouped)
    assert b["time_us"] < 0.85 * a["time_us"]
    assert b["estimate"] == pytest.approx(a["estimate"], rel=0.01)


# ---- COMET's end-to-end figure (sim_models/published_comet.py) -------------------------------------------------

def _comet_rows(rows):
    return [r for r in rows if r["key"].startswith("comet-e2e-")]


def test_comet_rows_cover_every_reading_with_a_source(rows):
    cr = _comet_rows(rows)
    assert len(cr) == 5 * len(comet_fig.READINGS)           # 2 layer times + 3 speedups per (model, M)
    for r in cr:
        assert "flux" in r["source"] and "(TP,EP)=(1,8)" in r["source"] and r["estimate"] is not None
    # The published speedup is the baseline's MoE share over COMET's, each = its bar less the attention bar.
    x = comet_fig.READINGS[("Phi-3.5-MoE", 4096)]
    r = next(r for r in cr if r["key"] == "comet-e2e-Phi-3.5-MoE-4096-over-Tutel")
    assert r["published"] == pytest.approx((x["Tutel"] - x["Attention"]) / (x["COMET"] - x["Attention"]))
    r = next(r for r in cr if r["key"] == "comet-e2e-Mixtral-8192-COMET-layer")
    y = comet_fig.READINGS[("Mixtral", 8192)]
    assert r["published"] == pytest.approx((y["COMET"] - y["Attention"]) / 32)


def test_comet_estimates_are_the_estimators_own_ratios(rows):
    """A speedup row is the ratio of two layer times of one estimate() on the figure's setup (8x H800, EP8,
    BF16, the artifact's shape, M tokens per GPU); a layer-time row is one of them."""
    spec = comet_fig.MODELS["Qwen2-MoE"]
    e = estimate(ModelConfig(**spec), load_system("hgx-h800"),
                 Params(tokens_per_gpu=4096, dtype="bf16", **comet_fig.PARAMS),
                 schemes=["nvls", "tutel", "fastermoe", "comet"])
    got = {r["key"]: r["estimate"] for r in _comet_rows(rows)}
    t = {k: v.total for k, v in e.results.items()}
    assert got["comet-e2e-Qwen2-MoE-4096-over-Megatron-Cutlass"] == pytest.approx(t["nvls"] / t["comet"])
    assert got["comet-e2e-Qwen2-MoE-4096-over-Tutel"] == pytest.approx(t["tutel"] / t["comet"])
    assert got["comet-e2e-Qwen2-MoE-4096-over-FasterMoE"] == pytest.approx(t["fastermoe"] / t["comet"])
    assert got["comet-e2e-Qwen2-MoE-4096-COMET-layer"] == pytest.approx(t["comet"] * 1e3)
    assert got["comet-e2e-Qwen2-MoE-4096-Megatron-Cutlass-layer"] == pytest.approx(t["nvls"] * 1e3)
    # Mixtral is models.toml's shape, with the artifact's non-gated experts.
    mix, toml = ModelConfig(**comet_fig.MODELS["Mixtral"]), load_model("mixtral-8x7b")
    assert (mix.hidden, mix.routed_experts, mix.top_k, mix.expert_ffn, mix.moe_layers) == \
        (toml.hidden, toml.routed_experts, toml.top_k, toml.expert_ffn, toml.moe_layers) == (4096, 8, 2, 14336, 32)
    assert toml.gated and not any(ModelConfig(**m).gated for m in comet_fig.MODELS.values())


def test_summary_means():
    rows = [dict(baseline="B", quantity="q", unit="x", published=p, estimate=e, error_pct=error_pct(e, p))
            for p, e in ((2.0, 1.0), (8.0, 4.0))]
    rows.append(dict(baseline="B", quantity="alone", unit="x", published=1.0, estimate=1.0, error_pct=0.0))
    (g,) = summary(rows)                                     # a single-row group is not summarised
    assert g["rows"] == 2 and g["published_mean"] == pytest.approx(4.0) and g["estimate_mean"] == pytest.approx(2.0)
    assert g["mean_abs_error_pct"] == pytest.approx(50.0)


def test_comet_bad_input_is_named():
    with pytest.raises(ValueError, match="no COMET reading.*Grok"):
        comet_fig.speedup("Grok", 4096, "COMET", "Tutel")
    with pytest.raises(ValueError, match="unknown system 'Attention'"):
        comet_fig.moe_ms("Mixtral", 4096, "Attention")
    st = next(s for s in SETUPS if s.key == "comet-e2e-Mixtral-4096-over-Tutel")
    with pytest.raises(ValueError, match="extra\\['over'\\]='megablocks'"):
        run_setup(dataclasses.replace(st, extra=dict(scheme="comet", over="megablocks")))


# ---- tolerances and stated reasons (`--validate`'s exit status) ------------------------------------------------

def test_every_row_is_within_its_tolerance_or_states_why(rows):
    """Today's table passes: each estimated row is within its tolerance and states no reason, or is outside it
    and names the mechanism the estimator lacks."""
    assert not failures(rows), [(r["key"], r["error_pct"], r["status"]) for r in failures(rows)]
    for r in rows:
        if r["error_pct"] is None:
            assert r["status"] in ("no counterpart", "no figure") and not r["reason"], r["key"]
        elif abs(r["error_pct"]) > r["tolerance_pct"]:
            assert r["status"] == "outside, reason stated" and len(r["reason"]) > 40, r["key"]
        else:
            assert r["status"] == "within" and not r["reason"], r["key"]
    assert all(r["tolerance_pct"] == TOLERANCE for r in rows)


def test_status_of_a_row():
    row = lambda err, reason="", published=1.0: dict(error_pct=err, tolerance_pct=15.0, reason=reason,
                                                     published=published)
    assert status(row(15.0)) == "within" and status(row(-14.9)) == "within"
    assert status(row(15.1)) == "OUTSIDE, no reason" and status(row(-30.0)) == "OUTSIDE, no reason"
    assert status(row(-30.0, "a missing mechanism")) == "outside, reason stated"
    assert status(row(3.0, "a missing mechanism")) == "within, stale reason"
    assert status(row(None)) == "no counterpart" and status(row(None, published=None)) == "no figure"
    assert set(FAILING) == {"OUTSIDE, no reason", "within, stale reason"}
    with pytest.raises(ValueError, match="tolerance must be a positive"):
        validate([dataclasses.replace(_setup("h800-nvlink"), tolerance=0)])


@pytest.mark.parametrize("key, change, says", [
    ("nccl-b300-nvls-allreduce", dict(reason=""), "outside its tolerance and states no reason"),
    ("h800-nvlink", dict(reason="a mechanism already modelled"), "within its tolerance but still states a reason"),
    ("deepep-v2-combine", dict(tolerance=5.0), "outside its tolerance and states no reason"),
])
def test_cli_exits_nonzero_on_an_unexplained_or_stale_row(tmp_path, capsys, monkeypatch, key, change, says):
    setups = [dataclasses.replace(s, **change) if s.key == key else s
              for s in SETUPS if not s.key.startswith(("comet-e2e", "deepgemm"))]
    monkeypatch.setattr(validation, "SETUPS", setups)
    assert main(["estimate", "--validate", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"validation: {key}: error" in err and says in err and "validation failed: 1 of" in err
    data = json.loads((tmp_path / "validation.json").read_text())      # the table is written all the same
    assert [r["key"] for r in data if r["status"] in FAILING] == [key]
