"""Routing generators, placement, configs: sim_models.routing / moe_config / system_config."""

import numpy as np
import pytest

from sim_models import routing as rt
from sim_models.moe_config import load_model, model_names
from sim_models.system_config import load_system, system_names


def _distinct_rows(a):
    s = np.sort(a, axis=1)
    return not np.any(s[:, 1:] == s[:, :-1])


def test_closed_form_matches_mission_values():
    # MISSION.md: DeepSeek-V3 (E=256, k=8): D ~ 5.30 (G=8), 6.52 (16), 7.27 (32), 7.68 (64).
    for g, d in ((8, 5.30), (16, 6.52), (32, 7.27), (64, 7.68)):
        assert rt.expected_distinct_gpus(256, g, 8) == pytest.approx(d, abs=0.006)


@pytest.mark.parametrize("g", [8, 16, 32, 64])
def test_measured_redundancy_matches_closed_form(seed, g):
    """Uniform top-k + contiguous placement: mean distinct GPUs per token within 1% of the closed form."""
    from sim_models.traffic import TokenDestinations
    rng = np.random.default_rng(seed)
    ids = rt.sample_topk(g * 2048, np.ones(256), 8, rng)
    d = TokenDestinations.from_routing(ids, rt.place_experts(256, g), g)
    assert d.mean_distinct_gpus() == pytest.approx(rt.expected_distinct_gpus(256, g, 8), rel=0.01)
    # the old argpartition sampler and the new one agree in distribution
    ids2 = rt.uniform_topk(g * 2048, 256, 8, rng)
    d2 = TokenDestinations.from_routing(ids2, rt.place_experts(256, g), g)
    assert d2.mean_distinct_gpus() == pytest.approx(d.mean_distinct_gpus(), rel=0.01)


def test_sample_topk_is_without_replacement_and_weighted(seed):
    rng = np.random.default_rng(seed)
    w = rt.zipf_weights(16, 1.0)
    ids = rt.sample_topk(100_000, w, 4, rng)
    assert ids.shape == (100_000, 4) and _distinct_rows(ids)
    # the first pick is drawn from w itself
    first = np.bincount(ids[:, 0], minlength=16) / 100_000
    assert np.allclose(first, w, atol=0.006)
    with pytest.raises(ValueError, match="fewer than top-k"):
        rt.sample_topk(4, np.array([1.0, 0, 0, 1.0]), 3, rng)


def test_zipf_skew_grows_with_exponent(seed):
    rng = np.random.default_rng(seed)
    top = []
    for s in (0.0, 0.3, 0.6, 1.0):
        ids = rt.zipf_topk(20_000, 64, 4, s, rng)
        assert _distinct_rows(ids)
        top.append(np.bincount(ids.ravel(), minlength=64).max() / ids.size)
    assert top == sorted(top) and top[0] < 1.3 / 64 * 1.0 + 0.01
    with pytest.raises(ValueError, match="zipf exponent"):
        rt.zipf_weights(8, -1)


def test_group_limited_routing(seed):
    rng = np.random.default_rng(seed)
    ids = rt.group_limited_topk(20_000, 256, 8, 8, 4, rng)
    assert _distinct_rows(ids)
    groups = ids // 32
    assert max(len(set(r)) for r in groups.tolist()) <= 4
    # with one group the limit is void: the marginals are the weights (weighted top-k without replacement)
    w = rt.zipf_weights(16, 1.0)
    a = rt.group_limited_topk(100_000, 16, 2, 1, 1, rng, weights=w)
    b = rt.sample_topk(100_000, w, 2, rng)
    assert np.allclose(np.bincount(a.ravel(), minlength=16) / a.size, np.bincount(b.ravel(), minlength=16) / b.size,
                       atol=0.006)
    with pytest.raises(ValueError, match="does not fit"):
        rt.group_limited_topk(10, 16, 5, 4, 1, rng)


def test_routing_spec_and_trace_roundtrip(tmp_path, seed):
    rng = np.random.default_rng(seed)
    m = load_model("deepseek-v3")
    ids = rt.routing_from_spec("auto", 1000, m.routed_experts, m.top_k, rng, n_group=8, topk_group=4)
    assert (ids // 32 == ids[:, :1] // 32).shape == ids.shape
    path = tmp_path / "trace.npy"
    rt.save_trace(path, ids)
    back = rt.load_trace(path, 256, 8)
    assert np.array_equal(back, ids)
    assert np.array_equal(rt.routing_from_spec(f"trace:{path}", 5, 256, 8, rng), ids)
    for bad, msg in ((np.zeros((4, 8, 1), int), "2-D integer"), (np.full((2, 8), 300), "routed_experts 256"),
                     (np.zeros((2, 8), int), "repeats an expert"), (np.zeros((2, 4), int) + np.arange(4), "k=4")):
        np.save(tmp_path / "bad.npy", bad)
        with pytest.raises(ValueError, match=msg):
            rt.load_trace(tmp_path / "bad.npy", 256, 8)
    with pytest.raises(ValueError, match="cannot read"):
        rt.load_trace(tmp_path / "missing.npy")
    for spec in ("bogus", "zipf:x", "group"):
        with pytest.raises(ValueError, match="valid|number|n_group"):
            rt.routing_from_spec(spec, 10, 16, 2, rng)


def test_redundant_placement(seed):
    rng = np.random.default_rng(seed)
    ids = rt.zipf_topk(8 * 2048, 64, 4, 1.0, rng, permute=False)       # expert 0 hottest, all on GPU 0
    load = np.bincount(ids.ravel(), minlength=64)
    pl = rt.place_redundant(64, 8, load, 1)
    assert pl.redundant == 8
    hot = np.argsort(-load, kind="stable")[:7]     # experts 0-7 all live on GPU 0, whose own free slot
    for e in hot:                                  # cannot hold a second copy of them: 7 of them fit
        assert len(pl.replicas[e]) == 2 and pl.replicas[e][1] != pl.replicas[e][0]
    assert all(len(r) <= 2 for r in pl.replicas) and sum(len(s) for s in pl.slots) == 64 + 8
    src = np.arange(ids.shape[0]) // 2048
    eg = pl.gpu_of(ids, src)
    base = rt.place_experts(64, 8)[ids]
    # every pick lands on a GPU that holds the expert, and a local replica is always preferred
    for e in hot:
        rows, cols = np.nonzero(ids == e)
        assert set(eg[rows, cols].tolist()) <= set(pl.replicas[e])
        local = np.isin(src[rows], pl.replicas[e])
        assert np.all(eg[rows, cols][local] == src[rows][local])
    assert np.bincount(eg.ravel(), minlength=8).max() < np.bincount(base.ravel(), minlength=8).max()
    with pytest.raises(ValueError, match="redundant slots"):
        rt.place_redundant(16, 8, np.ones(16), 3)


def test_uneven_placement():
    assert rt.place_experts(10, 4, uneven=True).tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]
    with pytest.raises(ValueError, match="multiple"):
        rt.place_experts(10, 4)


def test_configs_load_and_validate(tmp_path):
    assert len(model_names()) >= 10 and {"gh200-nvl32", "hgx-h200", "nvl72"} <= set(system_names())
    s = load_system("nvl72")
    assert s.gpus == 72 and s.gpu_link_bytes_per_s == 900e9
    with pytest.raises(ValueError, match="unknown system 'x'; valid: .*gh200-nvl32"):
        load_system("x")
    good = (tmp_path / "s.toml")
    text = (load_system.__globals__["CONFIG_DIR"] / "systems.toml").read_text()
    good.write_text(text.replace("link_efficiency = 0.822", "link_efficiency = 1.5", 1))
    with pytest.raises(ValueError, match="'link_efficiency'=1.5 must be in"):
        load_system("hgx-h200", good)
    good.write_text(text.replace("sms = 132", "sms = 132\nbogus = 1", 1))
    with pytest.raises(ValueError, match="unknown field.*bogus"):
        load_system("hgx-h200", good)
    good.write_text(text.replace("link_gbps = 25.0", "link_gbps = 40.0", 1))
    with pytest.raises(ValueError, match="link_gbps.*exceeds one switch port"):
        load_system("hgx-h200", good)
