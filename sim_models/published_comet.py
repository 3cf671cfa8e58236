"""COMET's published end-to-end forward latencies on one 8-GPU node, read off its figure (data, with provenance).

Source: github.com/bytedance/flux, ``docs/performance.md`` "Figure 1. End-to-end MoE model forward latency"
(``docs/assets/e2e_latency.png``), the Megatron-LM end-to-end comparison of COMET (MLSys 2025, arXiv
2502.19811) against Megatron-TE, Megatron-Cutlass, FasterMoE and Tutel. The figure names no GPU; the Doubao
team's announcement of COMET (as reported at wuwenjie.xyz/wordpress/archives/120816) places the end-to-end
forward-latency evaluation of Mixtral-8x7B and Qwen2-MoE on an 8-GPU H800 cluster. Only the panels with
(TP, EP) = (1, 8) are kept: pure expert parallelism over the node, the one the estimator represents (the other
panels split every expert by tensor parallelism). M is the tokens per GPU (flux docs: "the input token number
on each GPU is M/TP").

Each bar was read from the image's pixels (:func:`read_figure`, :mod:`bar_reader`; ``python -m
sim_models.published_comet e2e_latency.png`` reads the image and compares with :data:`READINGS`): the bar's
top (its fill colour) and the hatched "Attention" bar (the same model with its MoE layers skipped) against
the y-axis ticks. Resolution: one pixel is 1.2 ms in the M = 4,096 panel and 2.2 ms in the M = 8,192 panel. The MoE layers' share of a run is its bar less the
attention bar; divided by the model's MoE layers it is the mean MoE layer time.

Models as COMET's artifact runs them (github.com/ZSL98/Megatron-LM at fd11ea94, the Megatron-LM fork that
flux ``docs/mlsys_comet_ae.md`` names: ``launch_mixtral.sh``, ``launch_qwen2.sh``, ``launch_phi.sh``; BF16,
sequence 4,096 or 8,192, micro-batch 1, no shared experts).
"""

import sys

import numpy as np

from .bar_reader import find_frames, load_rgb, read_panel

__all__ = ["SOURCE", "MODELS", "SYSTEMS", "PARAMS", "READINGS", "COLOURS", "PANELS", "moe_ms", "layer_ms", "speedup",
           "read_figure"]

SOURCE = "github.com/bytedance/flux docs/performance.md, Figure 1, panel M={m} (TP,EP)=(1,8), read off the bars"

# The models' MoE layers as the artifact's launch scripts configure them (hidden, experts, top-k, expert FFN,
# layers): Mixtral-8x7B's shape is models.toml's entry; the other two are benchmark shapes, not added to
# models.toml. Every expert is a plain two-GEMM MLP, not gated (``gated=False``): the launch scripts pass no
# ``--swiglu`` (Megatron's TransformerConfig.gated_linear_unit defaults to False, activation GeLU), COMET's flux
# layer holds one ``(experts, ffn, hidden)`` GEMM-1 weight and applies the activation between its two ops
# (megatron/core/transformer/moe/moe_layer.py, MoELayer_flux_uniform_distribution), Tutel's experts are its
# ``'type': 'ffn'`` (fc1, activation, fc2) and FastMoE's FMoETransformerMLP experts htoh4, activation, h4toh.
# Validation times the MoE layer only; ModelConfig also asks for the attention fields, given here from the
# models' public config.json (Qwen1.5-MoE-A2.7B, Phi-3.5-MoE-instruct) and not used by these rows.
GQA_NO_EXTRAS = dict(attention="gqa", q_lora_rank=0, kv_lora_rank=0, qk_nope_head_dim=0, qk_rope_head_dim=0,
                     v_head_dim=0, local_window=0, local_kind="none", local_layers=0, dense_ffn=0, shared_ffn=0)
MODELS = {
    "Mixtral": dict(name="comet-mixtral", hidden=4096, routed_experts=8, top_k=2, expert_ffn=14336, shared=0,
                    moe_layers=32, layers=32, heads=32, kv_heads=8, head_dim=128, vocab=32000, gated=False,
                    **GQA_NO_EXTRAS),
    "Qwen2-MoE": dict(name="comet-qwen2-moe", hidden=2048, routed_experts=64, top_k=4, expert_ffn=1408,
                      shared=0, moe_layers=24, layers=24, heads=16, kv_heads=16, head_dim=128, vocab=151936,
                      gated=False, **GQA_NO_EXTRAS),
    "Phi-3.5-MoE": dict(name="comet-phi-3.5-moe", hidden=4096, routed_experts=16, top_k=2, expert_ffn=6400,
                        shared=0, moe_layers=32, layers=32, heads=32, kv_heads=8, head_dim=128, vocab=32064,
                        gated=False, **GQA_NO_EXTRAS),
}
MOE_LAYERS = {"Mixtral": 32, "Qwen2-MoE": 24, "Phi-3.5-MoE": 32}

# The systems of the figure and the estimator scheme each one's mechanism corresponds to, as the artifact runs
# them (megatron/core/transformer/moe/moe_layer.py):
# * Megatron (MoELayer_uniform_distribution): Megatron's default token dispatcher, "allgather" (the launch
#   scripts set none; TransformerConfig.moe_token_dispatcher_type): an all-gather of every GPU's tokens to
#   every GPU, the grouped GEMMs on the local experts' rows, the outputs scattered into a zero-filled buffer
#   of all G x M tokens and reduce-scattered. The estimator's nvls scheme has this schedule and these volumes
#   (every token to the G-1 other GPUs, the whole zero-filled output back; the busiest link direction carries
#   (G-1) M rows in each phase, as NCCL's all-gather and reduce-scatter do), and the same separate kernels.
# * COMET (MoELayer_flux_uniform_distribution): flux's GemmGroupedV3AGScatter fetches every other GPU's whole
#   token shard (all_gather_all2all, nvshmemx_getmem_on_stream per source rank) under the grouped GEMM, whose
#   tiles wait on each shard's flag; GemmGroupedV3GatherRS sums each token's rows and sends the partials home.
#   The estimator's comet scheme with Params.allgather_dispatch.
# * Tutel (MoELayer_tutel): tutel's MOELayer with its default a2a_ffn_overlap_degree = 1: all-to-all, the
#   experts, all-to-all, one after the other: the tutel scheme with one chunk (Params.tutel_degrees = (1,)).
# * FasterMoE (MoELayer_fastermoe): FastMoE's FMoETransformerMLP: the fastermoe scheme.
SYSTEMS = {
    "Megatron-TE": "nvls",           # sequential: all-gather, grouped GEMM (Transformer Engine), reduce-scatter
    "Megatron-Cutlass": "nvls",      # the same with the grouped_gemm library's CUTLASS grouped GEMM
    "FasterMoE": "fastermoe",
    "Tutel": "tutel",
    "COMET": "comet",
}
# The estimator's Params for the artifact's runs (see SYSTEMS).
PARAMS = dict(allgather_dispatch=("comet",), tutel_degrees=(1,), impl_costs=("tutel", "fastermoe"))

# Forward latency of the whole model, ms, per (model, M): each system's bar and the attention-only bar, as
# read_figure() reads them from the image (python -m sim_models.published_comet e2e_latency.png).
READINGS = {
    ("Mixtral", 4096): {"Megatron-TE": 226.8, "Megatron-Cutlass": 221.9, "FasterMoE": 233.0, "Tutel": 218.2,
                        "COMET": 177.6, "Attention": 47.0},
    ("Qwen2-MoE", 4096): {"Megatron-TE": 111.1, "Megatron-Cutlass": 100.0, "FasterMoE": 226.8, "Tutel": 118.5,
                          "COMET": 61.8, "Attention": 33.5},
    ("Phi-3.5-MoE", 4096): {"Megatron-TE": 185.0, "Megatron-Cutlass": 182.5, "FasterMoE": 188.7,
                            "Tutel": 175.1, "COMET": 113.5, "Attention": 43.4},
    ("Mixtral", 8192): {"Megatron-TE": 421.4, "Megatron-Cutlass": 419.2, "FasterMoE": 417.0, "Tutel": 376.8,
                        "COMET": 347.8, "Attention": 84.4},
    ("Qwen2-MoE", 8192): {"Megatron-TE": 144.6, "Megatron-Cutlass": 140.2, "FasterMoE": 240.6, "Tutel": 149.1,
                          "COMET": 97.8, "Attention": 35.3},
    ("Phi-3.5-MoE", 8192): {"Megatron-TE": 336.6, "Megatron-Cutlass": 334.4, "FasterMoE": 309.8,
                            "Tutel": 271.9, "COMET": 220.5, "Attention": 84.4},
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


# The figure's bar fills (RGB) and its two expert-parallel panels: the frame's index in reading order (the
# first of each row of four) and the y-tick labels, bottom to top.
COLOURS = {"Megatron-TE": (194, 164, 211), "Megatron-Cutlass": (166, 183, 222), "FasterMoE": (177, 208, 149),
           "Tutel": (211, 211, 211), "COMET": (245, 222, 179)}
PANELS = {4096: dict(frame=0, ticks=(0, 50, 100, 150, 200)), 8192: dict(frame=4, ticks=(0, 100, 200, 300, 400))}


def read_figure(path) -> dict:
    """:data:`READINGS` read from the figure's image: per (model, M), each system's bar and the attention bar
    (the median of the overlay tops of the model's bars), ms, rounded to 0.1."""
    img = load_rgb(path)
    frames = find_frames(img)
    out = {}
    for m, panel in PANELS.items():
        if panel["frame"] >= len(frames):
            raise ValueError(f"{path}: {len(frames)} axes frames found, panel M={m} is frame {panel['frame']}")
        bars = read_panel(img, frames[panel["frame"]], panel["ticks"], COLOURS)["bars"]
        per = len(COLOURS)
        if len(bars) != per * len(MODELS) or [b.name for b in bars[:per]] != list(COLOURS):
            raise ValueError(f"{path}: panel M={m}: expected {len(MODELS)} groups of the bars "
                             f"{', '.join(COLOURS)}, found {', '.join(b.name for b in bars)}")
        for g, model in enumerate(MODELS):
            group = bars[g * per:(g + 1) * per]
            r = {b.name: round(b.value, 1) for b in group}
            r["Attention"] = round(float(np.median([b.overlay for b in group if b.overlay is not None])), 1)
            out[(model, m)] = r
    return out


def main(argv=None) -> int:
    """Read the figure (path given) and print each reading next to :data:`READINGS`."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m sim_models.published_comet PATH/TO/e2e_latency.png", file=sys.stderr)
        return 2
    got = read_figure(argv[0])
    worst = 0.0
    for key, r in got.items():
        for name, v in r.items():
            ref = READINGS[key][name]
            worst = max(worst, abs(v - ref))
            print(f"{key[0]:12s} M={key[1]:5d} {name:17s} read {v:7.1f} ms   READINGS {ref:7.1f} ms")
    print(f"largest difference: {worst:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
