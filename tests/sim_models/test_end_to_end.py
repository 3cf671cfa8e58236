"""The end-to-end step model (``sim_models/end_to_end.py``, ``dysharp estimate --end-to-end``): attention FLOPs
and KV traffic by hand, the step as the sum of its parts, Amdahl, shared-expert overlap, config validation
and CLI errors."""

import dataclasses
import json

import pytest

from dysharp.cli import main
from sim_models.end_to_end import (E2EParams, attention_parts, decode_keys, end_to_end, mean_keys,
                                   shared_excess)
from sim_models.estimator import BASELINES, FULL, Params, estimate
from sim_models.moe_config import ModelConfig, load_model
from sim_models.system_config import load_system

H200 = load_system("hgx-h200")
GQA = dict(attention="gqa", heads=4, kv_heads=2, head_dim=64, q_lora_rank=0, kv_lora_rank=0,
           qk_nope_head_dim=0, qk_rope_head_dim=0, v_head_dim=0, local_window=0, local_kind="none",
           local_layers=0, dense_ffn=0, shared_ffn=0, vocab=1000)
SMALL = dict(name="small", hidden=256, routed_experts=8, top_k=2, expert_ffn=512, shared=0, moe_layers=2, layers=2)


def small(**kw):
    return ModelConfig(**{**SMALL, **GQA, **kw})


def test_prefill_attention_flops_by_hand():
    # One causal sequence of 8 tokens: query i sees i + 1 keys, 1 + 2 + ... + 8 = 36 (query, key) pairs.
    # Per pair and head: QK^T 2 x 64 FLOPs + PV 2 x 64 FLOPs = 256; 4 heads: 1024 per pair.
    _, _, flops, kv, _ = attention_parts(small(), H200, Params(), E2EParams(), "prefill", tokens=8, context=8)
    assert flops == 36 * 1024
    assert kv == 0
    # Two sequences of 4 (8 tokens, context 4): 2 x (1 + 2 + 3 + 4) = 20 pairs.
    assert attention_parts(small(), H200, Params(), E2EParams(), "prefill", 8, 4)[2] == 20 * 1024


def test_mla_decode_flops_and_kv_bytes_by_hand():
    mla = small(attention="mla", heads=2, kv_heads=2, head_dim=0, q_lora_rank=32, kv_lora_rank=16,
                qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8)
    # 3 sequences, 10 cached positions each: latent attention, K = 16 + 4 = 20 dims, V = 16 dims, 2 heads.
    _, _, flops, kv, kernels = attention_parts(mla, H200, Params(mode="decode"), E2EParams(), "decode", 3, 10)
    assert flops == 3 * 10 * 2 * 2 * (20 + 16)
    assert kv == 3 * 10 * 20 * 2                     # one BF16 latent of 20 elements per position
    assert kernels == 7


def test_local_windows_by_hand():
    assert mean_keys(10) == 5.5
    assert mean_keys(10, 4, "sliding") == (1 + 2 + 3 + 4 + 4 * 6) / 10
    assert mean_keys(10, 4, "chunked") == ((1 + 2 + 3 + 4) * 2 + 1 + 2) / 10
    assert mean_keys(3, 4, "sliding") == mean_keys(3)  # window longer than the sequence: full causal
    assert (decode_keys(100), decode_keys(100, 16, "sliding"), decode_keys(100, 16, "chunked")) == (100, 16, 4)
    # half the layers sliding (window 2) over a 4-token sequence: mean of 2.5 and 1.75 keys per query
    m = small(local_window=2, local_kind="sliding", local_layers=1)
    assert attention_parts(m, H200, Params(), E2EParams(), "prefill", 4, 4)[2] == 4 * (2.5 + 1.75) / 2 * 1024
    with pytest.raises(ValueError, match="local attention kind"):
        mean_keys(4, 2, "ring")


def test_decode_attention_is_hbm_bound_and_scales_with_context():
    m = load_model("qwen3-235b-a22b")     # 64 query heads on 4 KV heads: 16 FLOP per KV byte, below the ridge
    e2e = E2EParams()
    t = {c: attention_parts(m, H200, Params(mode="decode"), e2e, "decode", 64, c) for c in (1024, 2048, 8192)}
    for c, (_, core, flops, kv, _) in t.items():
        assert kv == 64 * c * 2 * 4 * 128 * 2     # K and V, 4 heads x 128, BF16, per position
        assert core == pytest.approx(kv / (H200.hbm_tbps * 1e12 * e2e.decode_mem_efficiency))
    assert t[2048][1] == pytest.approx(2 * t[1024][1])
    assert t[8192][1] == pytest.approx(8 * t[1024][1])
    # a sliding window caps the KV read: gpt-oss-120b's 18 sliding layers read 128 positions whatever the context
    g = load_model("gpt-oss-120b")
    kv1, kv2 = (attention_parts(g, H200, Params(mode="decode"), e2e, "decode", 64, c)[3] for c in (4096, 8192))
    per_pos = 2 * 8 * 64 * 2
    assert kv1 == 64 * per_pos * (4096 + 128) / 2
    assert kv2 - kv1 == 64 * per_pos * 4096 / 2


@pytest.fixture(scope="module")
def dsv3():
    """DeepSeek-V3 on 8 GPUs, 256 tokens/GPU, three schemes: the routed-MoE estimate once."""
    m = load_model("deepseek-v3")
    p = Params(tokens_per_gpu=256)
    return m, p, estimate(m, H200, p, schemes=["deepep", "ccfuser", "dualpipe"])


def test_step_is_the_sum_of_its_parts(dsv3):
    m, p, est = dsv3
    e = end_to_end(m, H200, p, E2EParams(shared_overlap=False, dualpipe_overlap=False), estimate_result=est)
    pt = e.parts
    assert (e.dense_layers, e.moe_layers) == (3, 58)
    assert pt.shared > 0 and pt.dense_ffn > 0 and pt.attention > 0 and pt.head > 0
    for n, r in e.schemes.items():
        want = 3 * (pt.attention + pt.dense_ffn) + 58 * (pt.attention + pt.router + pt.shared
                                                          + est.results[n].total) + pt.head
        assert r.step == pytest.approx(want, rel=1e-12)
        assert r.moe_share == pytest.approx(58 * est.results[n].total / r.step)
        assert r.layer_speedup == pytest.approx(est.speedup(n))


def test_amdahl_whole_step_speedup_is_closer_to_one(dsv3):
    m, p, est = dsv3
    e = end_to_end(m, H200, p, E2EParams(shared_overlap=False, dualpipe_overlap=False), estimate_result=est)
    for n, r in e.schemes.items():
        if n == FULL:
            continue
        assert r.layer_speedup != pytest.approx(1.0)
        assert abs(r.step_speedup - 1) < abs(r.layer_speedup - 1), n
        assert (r.step_speedup - 1) * (r.layer_speedup - 1) > 0, n          # same side of 1


def test_shared_expert_overlap_and_dualpipe(dsv3):
    m, p, est = dsv3
    on = end_to_end(m, H200, p, E2EParams(), estimate_result=est)
    off = end_to_end(m, H200, p, E2EParams(shared_overlap=False, dualpipe_overlap=False), estimate_result=est)
    sh, attn = on.parts.shared, on.parts.attention
    for n in ("deepep", "ccfuser", FULL):
        r = est.results[n]
        # never slower than running the shared expert after the routed path, never faster than hiding it
        assert r.total <= on.schemes[n].moe_block <= off.schemes[n].moe_block == pytest.approx(r.total + sh)
    # DeepEP (sequential) waits on 24 communication SMs: its shared expert runs on the other 108 meanwhile
    r = est.results["deepep"]
    assert on.schemes["deepep"].moe_block == pytest.approx(r.total + max(0.0, sh - r.exposed * 108 / 132))
    r = est.results["dualpipe"]
    assert on.schemes["dualpipe"].moe_block == pytest.approx(r.total + sh - min(r.exposed, attn + sh))
    # by hand: 10 us of shared work, 6 us exposed on 132 SMs of which 33 communicate: 4.5 us done, 5.5 left
    assert shared_excess(10.0, 6.0, 33, 132) == pytest.approx(5.5)
    assert shared_excess(10.0, 20.0, 0, 132) == 0.0
    assert shared_excess(0.0, 1.0, 0, 132) == 0.0


def test_model_without_shared_experts_or_dense_layers():
    m = load_model("qwen3-30b-a3b")
    p = Params(tokens_per_gpu=128)
    e = end_to_end(m, H200, p, schemes=["deepep", "comet"])
    assert e.parts.shared == 0 and e.parts.dense_ffn == 0 and e.dense_layers == 0
    for n, r in e.schemes.items():
        if n != "dualpipe":
            assert r.moe_block == r.moe_layer


def test_training_multiplies_the_forward():
    m, p = small(), Params(mode="training", tokens_per_gpu=64)
    e2e = E2EParams(kernel_overhead=False, context=64)
    fwd = attention_parts(m, H200, p, e2e, "training", 64, 64)
    e = end_to_end(m, H200, p, e2e, schemes=["deepep"])
    assert e.parts.attention_core == pytest.approx(3.5 * fwd[1])   # FlashAttention: backward 2.5x forward
    assert e.parts.attention_proj == pytest.approx(3.0 * fwd[0])   # GEMMs: data + weight gradients


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="context"):
        E2EParams(context=0).validate()
    with pytest.raises(ValueError, match="attention_efficiency"):
        E2EParams(attention_efficiency=1.5).validate()
    with pytest.raises(ValueError, match="'q_lora_rank'.*must be 0 for GQA"):
        small(q_lora_rank=8)
    with pytest.raises(ValueError, match="'kv_heads'.*divide heads"):
        small(kv_heads=3)
    with pytest.raises(ValueError, match="'shared_ffn'"):
        small(shared=1)
    with pytest.raises(ValueError, match="'dense_ffn'"):
        small(layers=3)
    with pytest.raises(ValueError, match="'attention'"):
        small(attention="mha")


def test_config_file_missing_attention_field(tmp_path):
    fields = {**SMALL, **GQA}
    del fields["name"], fields["vocab"]
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in fields.items())
    (tmp_path / "m.toml").write_text(f"[small]\n{body}\n")
    with pytest.raises(ValueError, match="model 'small': missing field.*vocab"):
        load_model("small", tmp_path / "m.toml")
    (tmp_path / "m.toml").write_text(f"[small]\n{body}\nvocab = 10\nrope_theta = 1\n")
    with pytest.raises(ValueError, match="unknown field.*rope_theta"):
        load_model("small", tmp_path / "m.toml")


def test_every_model_loads_with_consistent_attention():
    from sim_models.moe_config import model_names
    for n in model_names():
        m = load_model(n)
        if m.attention == "gqa":
            assert m.heads % m.kv_heads == 0
        assert (m.layers > m.moe_layers) == (m.dense_ffn > 0)


def test_cli_end_to_end(tmp_path, capsys):
    argv = ["estimate", "--end-to-end", "--model", "qwen3-30b-a3b", "--system", "hgx-h200", "--tokens", "128",
            "--schemes", "deepep,ccfuser", "--out", str(tmp_path)]
    assert main(argv + ["--mode", "decode", "--context", "2048"]) == 0
    out = capsys.readouterr().out
    assert "whole-step speedup" in out and "| DeepEP (sequential)" in out
    data = json.loads((tmp_path / "end_to_end_qwen3-30b-a3b_hgx-h200_decode.json").read_text())
    assert data["context"] == 2048 and set(data["schemes"]) == {"deepep", "ccfuser", "dysharp"}
    d = data["schemes"]["deepep"]
    assert d["step_speedup"] == pytest.approx(d["step"] / data["schemes"]["dysharp"]["step"])
    for bad, msg in ((["--context", "0"], "--context must be >= 1"),
                     (["--mode", "inference"], "unknown mode")):
        assert main(argv + bad) == 2
        assert msg in capsys.readouterr().err
    assert main(["estimate", "--context", "64", "--out", str(tmp_path)]) == 2
    assert "--context applies only with --end-to-end" in capsys.readouterr().err
    assert main(["estimate", "--shared-serial", "--out", str(tmp_path)]) == 2
    assert "--shared-serial applies only with --end-to-end" in capsys.readouterr().err
    # the switches reach the model: shared experts after the routed path never make a step shorter
    m = ["estimate", "--end-to-end", "--model", "deepseek-v3", "--system", "hgx-h200", "--tokens", "128",
         "--schemes", "deepep", "--out", str(tmp_path)]
    steps = []
    for extra in ([], ["--shared-serial", "--no-dualpipe-overlap"]):
        assert main(m + extra) == 0
        capsys.readouterr()
        data = json.loads((tmp_path / "end_to_end_deepseek-v3_hgx-h200_prefill.json").read_text())
        assert data["e2e_params"]["shared_overlap"] == (not extra)
        steps.append(data["schemes"]["deepep"]["step"])
    assert steps[0] < steps[1]


def test_split_k_for_launches_that_leave_sms_idle():
    from sim_models.end_to_end import MIN_SPLIT_K, _Gemms
    h100 = load_system("hgx-h100")
    on, off = _Gemms(h100, Params(), "bf16", True), _Gemms(h100, Params(), "bf16", False)
    gm = on.model
    # A router-like GEMM 64 x 256 x 7168 has 2 CTA blocks: without split-K one wave of a 7168-deep block;
    # with it up to min(132 // 2, 7168 // 256) = 28 splits of 256, in one wave, plus the FP32 partials.
    assert off(64, 256, 7168) == pytest.approx(gm.block_time(7168) + gm.prologue())
    assert 7168 // MIN_SPLIT_K == 28

    def by_hand(s):     # s splits of ceil(7168 / s), 2 s blocks in one wave, partials written and read in FP32
        mem = (256 * 7168 * 2 + 64 * (7168 * 2 + 256 * 2) + (s > 1) * s * 64 * 256 * 8) / (h100.hbm_tbps * 1e12 * 0.75)
        return max(gm.block_time(-(-7168 // s)) + gm.prologue(), mem)
    assert on(64, 256, 7168) == pytest.approx(min(by_hand(s) for s in range(1, 29)))
    assert on(64, 256, 7168) < by_hand(1) / 5
    # never slower than no split; DeepGEMM's memory-bound 64 x 4096 x 7168 FP8 shape (287 TFLOPS published): 32
    # blocks of 64 x 128 take 15.0 us with their epilogue and the launch's prologue, above the bytes' 12.1 us, so
    # two splits (13.8 us with the FP32 partials) give 273 TFLOPS (DeepGEMM fills the SMs with 64 x 32 blocks)
    for shape in ((64, 1536, 7168), (4096, 7168, 2048), (1, 129280, 7168), (64, 512, 128)):
        assert on(*shape) <= off(*shape)
    fp8 = _Gemms(h100, Params(), "fp8", True)
    assert 2 * 64 * 4096 * 7168 / fp8(64, 4096, 7168) / 1e12 == pytest.approx(273.39, abs=0.1)


def test_a_reused_estimate_must_match(dsv3):
    m, p, est = dsv3
    with pytest.raises(ValueError, match="estimate_result was computed for other params"):
        end_to_end(m, H200, dataclasses.replace(p, tokens_per_gpu=128), estimate_result=est)
    with pytest.raises(ValueError, match="another model"):
        end_to_end(load_model("kimi-k2"), H200, p, estimate_result=est)


def test_push_combine_holds_the_comm_pool_while_exposed():
    """While the routed path is exposed, a unicast scheme's SMs issue every byte (the whole comm pool);
    DySHARP with the pull issues one request per token (its reserved SMs), with the push its partials from
    SMs like a unicast kernel (the whole pool)."""
    from sim_models.end_to_end import comm_sms_while_exposed
    from sim_models.estimator import SchemeResult
    p = Params(comm_sms=24)
    r = lambda combine: SchemeResult(FULL, 1.0, 0, 0, 0, 0, 3, {"combine": combine})   # noqa: E731
    assert comm_sms_while_exposed(FULL, r("pull"), p) == 3
    assert comm_sms_while_exposed(FULL, r("push"), p) == 24
    assert comm_sms_while_exposed("ccfuser", SchemeResult("ccfuser", 1.0, 0, 0, 0, 0, 9), p) == 24
