"""The estimator against the baselines' published figures (sim_models/validation.py, `dysharp estimate --validate`)."""

import dataclasses
import json

import pytest

from dysharp.cli import main
from sim_models.system_config import load_system
from sim_models.validation import SETUPS, Setup, error_pct, markdown, run_setup, validate

BASELINES = ("DeepEP", "NVLS", "Tutel", "FasterMoE", "COMET", "CCFuser", "DualPipe")


@pytest.fixture(scope="module")
def rows():
    return validate()


def test_table_builds_with_every_baseline_and_a_source_per_row(rows):
    assert len(rows) == len(SETUPS)
    for b in BASELINES:
        assert any(r["baseline"].startswith(b) for r in rows), b
    for r in rows:
        assert r["source"].strip(), r["key"]
        if r["estimate"] is None:           # no counterpart: the row says why
            assert r["note"].strip() and r["error_pct"] is None, r["key"]
    md = markdown(rows)
    table, notes = md.split("\n\n")
    assert table.count("\n") == len(rows) + 1 and "| published" in table
    assert len(notes.splitlines()) == sum(bool(r["note"]) for r in rows)
    assert sum(r["estimate"] is not None for r in rows) >= 10


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
    # The estimator's NVLS phases (ReduceScatter, then AllGather) each move (G-1)/G of S one way: busbw is
    # the same payload rate (NCCL's NVLS overlaps both directions, hence the published 480).
    ar = run_setup(_setup("nccl-nvls-allreduce"))["estimate"]
    assert 0.97 * payload_rate < ar < payload_rate


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
