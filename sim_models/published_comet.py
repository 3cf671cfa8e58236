"""COMET's published end-to-end forward latencies on one 8-GPU node, read off its figure (data, with provenance).

Source: github.com/bytedance/flux, ``docs/performance.md`` "Figure 1. End-to-end MoE model forward latency"
(``docs/assets/e2e_latency.png``), the Megatron-LM end-to-end comparison of COMET (MLSys 2025, arXiv
2502.19811) against Megatron-TE, Megatron-Cutlass, FasterMoE and Tutel. The figure names no GPU; the Doubao
team's announcement of COMET (as reported at wuwenjie.xyz/wordpress/archives/120816) places the end-to-end
forward-latency evaluation of Mixtral-8x7B and Qwen2-MoE on an 8-GPU H800 cluster. Only the panels with
(TP, EP) = (1, 8) are kept: pure expert parallelism over the node, the one the estimator represents (the other
panels split every expert by tensor parallelism). M is the tokens per GPU (flux docs: "the input token number
on each GPU is M/TP").

Each bar was read from the image's pixels: the bar's top (its fill colour) and the hatched "Attention" bar
(the same model with its MoE layers skipped) against the y-axis ticks. Resolution: one pixel is 1.2 ms in the
M = 4,096 panel and 2.2 ms in the M = 8,192 panel. The MoE layers' share of a run is its bar less the
attention bar; divided by the model's MoE layers it is the mean MoE layer time.

Models as COMET's artifact runs them (github.com/ZSL98/Megatron-LM at fd11ea94, the Megatron-LM fork that
flux ``docs/mlsys_comet_ae.md`` names: ``launch_mixtral.sh``, ``launch_qwen2.sh``, ``launch_phi.sh``; BF16,
sequence 4,096 or 8,192, micro-batch 1, no shared experts).
"""

__all__ = ["SOURCE", "MODELS", "SYSTEMS", "READINGS", "moe_ms", "layer_ms", "speedup"]

SOURCE = "github.com/bytedance/flux docs/performance.md, Figure 1, panel M={m} (TP,EP)=(1,8), read off the bars"

# The models' MoE layers as the artifact's launch scripts configure them (hidden, experts, top-k, expert FFN,
# layers). Mixtral-8x7B is models.toml's entry; the other two are benchmark shapes, not added to models.toml.
MODELS = {
    "Mixtral": "mixtral-8x7b",
    "Qwen2-MoE": dict(name="comet-qwen2-moe", hidden=2048, routed_experts=64, top_k=4, expert_ffn=1408,
                      shared=0, moe_layers=24, layers=24),
    "Phi-3.5-MoE": dict(name="comet-phi-3.5-moe", hidden=4096, routed_experts=16, top_k=2, expert_ffn=6400,
                        shared=0, moe_layers=32, layers=32),
}
MOE_LAYERS = {"Mixtral": 32, "Qwen2-MoE": 24, "Phi-3.5-MoE": 32}

# The systems of the figure and the estimator scheme each one's mechanism corresponds to.
SYSTEMS = {
    "Megatron-TE": "deepep",         # sequential: all-to-all, grouped GEMM (Transformer Engine), all-to-all
    "Megatron-Cutlass": "deepep",    # the same with CUTLASS grouped GEMM
    "FasterMoE": "fastermoe",
    "Tutel": "tutel",
    "COMET": "comet",
}

# Forward latency of the whole model, ms, per (model, M): each system's bar and the attention-only bar.
READINGS = {
    ("Mixtral", 4096): {"Megatron-TE": 226.5, "Megatron-Cutlass": 221.5, "FasterMoE": 232.6, "Tutel": 217.8,
                        "COMET": 177.2, "Attention": 45.5},
    ("Qwen2-MoE", 4096): {"Megatron-TE": 110.8, "Megatron-Cutlass": 99.7, "FasterMoE": 226.5, "Tutel": 118.2,
                          "COMET": 61.5, "Attention": 33.2},
    ("Phi-3.5-MoE", 4096): {"Megatron-TE": 184.6, "Megatron-Cutlass": 182.2, "FasterMoE": 188.3,
                            "Tutel": 174.8, "COMET": 113.2, "Attention": 41.8},
    ("Mixtral", 8192): {"Megatron-TE": 421.2, "Megatron-Cutlass": 418.9, "FasterMoE": 416.7, "Tutel": 376.6,
                        "COMET": 347.6, "Attention": 82.5},
    ("Qwen2-MoE", 8192): {"Megatron-TE": 144.8, "Megatron-Cutlass": 140.4, "FasterMoE": 240.7, "Tutel": 149.3,
                          "COMET": 98.1, "Attention": 33.4},
    ("Phi-3.5-MoE", 8192): {"Megatron-TE": 336.5, "Megatron-Cutlass": 334.3, "FasterMoE": 309.7,
                            "Tutel": 271.9, "COMET": 220.6, "Attention": 82.5},
}


def _reading(model: str, m: int) -> dict:
    try:
        return READINGS[(model, m)]
    except KeyError:
        raise ValueError(f"no COMET reading for model {model!r} at M={m}; "
                         f"have: {', '.join(f'{k[0]}/{k[1]}' for k in READINGS)}") from None


def moe_ms(model: str, m: int, system: str) -> float:
    """The MoE layers' share of the forward latency (ms): the system's bar less the attention-only bar."""
    r = _reading(model, m)
    if system not in r or system == "Attention":
        raise ValueError(f"unknown system {system!r}; valid: {', '.join(k for k in r if k != 'Attention')}")
    return r[system] - r["Attention"]


def layer_ms(model: str, m: int, system: str) -> float:
    """Mean time of one MoE layer (ms)."""
    return moe_ms(model, m, system) / MOE_LAYERS[model]


def speedup(model: str, m: int, system: str, over: str) -> float:
    """``system``'s speedup over ``over`` on the MoE layers (attention excluded)."""
    return moe_ms(model, m, over) / moe_ms(model, m, system)
