"""Whole-step time of an MoE model: attention, shared experts, dense layers and the routed MoE layer per scheme.

``end_to_end(model, system, Params(...), E2EParams(...))`` times, per GPU, one step of the whole model and
reports, for each scheme of :func:`estimator.estimate`, the step time, the MoE share and DySHARP's whole-step
speedup next to its MoE-layer speedup.

**Layout (stated, simple).** Attention, the dense layers' FFN, the shared experts, the router and the LM head
are data-parallel: every GPU runs them on its own ``tokens_per_gpu`` tokens with a full copy of their
weights (DeepSeek-V3's deployment: data-parallel attention, expert-parallel MoE). The routed experts are
expert-parallel over the NVLink domain, timed by ``estimate()`` exactly as without ``--end-to-end``.

**Step** (one GPU's tokens through the model)::

    step = dense_layers x (attention + dense FFN)
         + moe_layers   x (attention + router + MoE block(scheme))
         + LM head

*MoE block*: the routed MoE layer (``estimate()``) with the shared expert. ``shared_overlap`` (default):
the shared expert runs on the SMs the routed path leaves idle, i.e. inside the scheme's *exposed* time
(layer - routed GEMM busy time), on the SMs a communication kernel does not hold:
``moe + max(0, shared - exposed x (SMs - comm SMs) / SMs)`` (its work done in the exposed time at the rate of
the SMs communication leaves free, the rest on all SMs). Off: ``moe + shared``. DualPipe
(``dualpipe_overlap``, default): its two micro-batches hide the exposed communication of one under the
attention and shared expert of the other (DeepSeek-V3 report, DualPipe and the inference section):
``attention + shared + moe - min(exposed, attention + shared)`` per MoE layer.

**Modes.** ``prefill``: each GPU's tokens are sequences of ``context`` tokens (default: all its tokens one
sequence; a context longer than the GPU's tokens prices them as part of such sequences), causal; the LM head runs on each sequence's last token. ``decode``: ``tokens_per_gpu``
sequences, one new token each, attending to ``context`` cached positions (default 4096); the LM head on
every token. ``training``: the prefill forward with the LM head on every token, plus the backward: GEMMs 2x
their forward time (data and weight gradients), the attention core 2.5x its forward FLOPs (FlashAttention's
convention: recomputation in the backward), at the same efficiencies.

**Attention.** Projections are GEMMs through :class:`gemm.GemmModel` (the tile-aware roofline of the expert
GEMMs: 64-row blocks, waves, weights once per launch; a launch that leaves SMs idle may split K, the fastest
split count taken) in the dispatch dtype (FP8 by default: DeepSeek-V3
runs its linear layers in FP8); the LM head and the router in BF16 (DeepSeek-V3 keeps the output head and
the gating in BF16). The core: prefill and training at ``attention_efficiency`` of the BF16 peak
(FlashAttention-3 on H100, forward, head dim 128, 4k tokens: 638 TFLOPS = 0.645 of the BF16 peak; its
best, 740 TFLOPS = 75%, needs longer sequences), against its HBM traffic; decode is bound by reading the KV cache at ``decode_mem_efficiency`` of HBM (FlashMLA: 3,000 of
H800's 3,350 GB/s) against its FLOPs at ``decode_compute_efficiency`` (FlashMLA: 580 TFLOPS of 989). MLA
in prefill decompresses K and V (``kv_b`` GEMM; head dims qk = nope + rope, v); in decode it attends in the
latent space (weights absorbed: per head ``q_nope x W_UK`` and ``W_UV`` as grouped GEMMs; one shared latent
KV of ``kv_lora_rank + qk_rope_head_dim`` per position, BF16). GQA reads ``2 x kv_heads x head_dim`` per
position. Local windows: sliding (last W positions) or chunked (Llama 4: blocks of W) on ``local_layers``
of the layers.

Every non-MoE kernel pays the system's ``kernel_overhead_us`` (as the MoE kernels do). Not modelled:
norms, RoPE, residuals and activations (fused or small), the embedding lookup, data-parallel gradient
all-reduce and the optimizer (per iteration, not per micro-batch), activation recomputation, pipeline
parallelism. Constants and sources: ``docs/estimator_end_to_end.md``.
"""

import dataclasses
import math

from .estimator import BASELINES, FULL, SCHEMES, Estimate, Params, estimate
from .gemm import GemmModel
from .moe_config import ModelConfig
from .system_config import SystemConfig

__all__ = ["E2EParams", "LayerParts", "SchemeStep", "EndToEnd", "end_to_end", "mean_keys", "decode_keys",
           "attention_parts", "DEFAULT_DECODE_CONTEXT"]

DEFAULT_DECODE_CONTEXT = 4096     # cached positions per sequence in decode (assumption: a 4k-token context)
MIN_SPLIT_K = 256                 # shallowest K slice of a split-K GEMM (assumption)


@dataclasses.dataclass(frozen=True)
class E2EParams:
    context: int | None = None            # prefill/training: sequence length (default tokens_per_gpu);
    #                                       decode: cached positions per sequence (default 4096)
    attention_efficiency: float = 0.645   # FlashAttention-3 forward, head dim 128, 4k tokens: 638 of 989 TFLOPS
    attention_backward_flops: float = 2.5  # backward / forward FLOPs of the attention core (FlashAttention)
    decode_mem_efficiency: float = 0.9    # FlashMLA: 3,000 GB/s of H800's 3,350 (memory-bound decode)
    decode_compute_efficiency: float = 0.59  # FlashMLA: 580 of 989 TFLOPS (compute-bound decode)
    kv_bytes: int = 2                     # KV-cache element: BF16 (FlashMLA's cache)
    shared_overlap: bool = True           # shared expert inside the routed path's exposed time
    dualpipe_overlap: bool = True         # DualPipe hides exposed comm under attention + shared expert
    kernel_overhead: bool = True          # every non-MoE kernel pays the system's kernel_overhead_us
    split_k: bool = True                  # dense GEMMs with fewer CTA blocks than SMs split K (cuBLAS/CUTLASS)

    def validate(self):
        def bad(field, what):
            raise ValueError(f"{field}={getattr(self, field)!r}: {what}")
        if self.context is not None and not (isinstance(self.context, int) and not isinstance(self.context, bool)
                                             and self.context >= 1):
            bad("context", "must be an integer >= 1 (positions per sequence)")
        for f in ("attention_efficiency", "decode_mem_efficiency", "decode_compute_efficiency"):
            if not 0 < getattr(self, f) <= 1:
                bad(f, "must be in (0, 1]")
        if self.attention_backward_flops < 0:
            bad("attention_backward_flops", "must be >= 0")
        if self.kv_bytes not in (1, 2, 4):
            bad("kv_bytes", "must be 1, 2 or 4 bytes")


@dataclasses.dataclass
class LayerParts:
    """Per-GPU seconds of one layer's non-MoE parts (attention: the mean over local and global layers)."""
    attention: float           # projections + core (+ their kernel overheads)
    attention_proj: float
    attention_core: float
    dense_ffn: float           # one dense layer's FFN
    shared: float              # one MoE layer's shared experts (0 without)
    router: float
    head: float                # LM head, once per step
    attention_flops: float     # attention core FLOPs per layer (forward; for checks)
    kv_bytes: float            # decode: KV-cache bytes read per layer (0 otherwise)


@dataclasses.dataclass
class SchemeStep:
    name: str
    moe_layer: float           # routed MoE layer (estimate())
    moe_block: float           # routed MoE layer with the shared expert (and DualPipe's overlap)
    step: float                # whole step, seconds
    moe_share: float           # moe_layers x moe_layer / step
    layer_speedup: float       # this scheme's MoE layer / DySHARP's
    step_speedup: float        # this scheme's step / DySHARP's


@dataclasses.dataclass
class EndToEnd:
    estimate: Estimate
    params: E2EParams
    context: int
    parts: LayerParts
    dense_layers: int
    moe_layers: int
    schemes: dict              # name -> SchemeStep


# --------------------------------------------------------------------------------------------------------
# Attention span

def mean_keys(seq: int, window: int = 0, kind: str = "none") -> float:
    """Mean keys a query attends to over a causal sequence of ``seq`` positions (query i sees i + 1 keys,
    at most ``window`` of them when sliding, the ones of its ``window``-block so far when chunked)."""
    if kind == "none" or not window:
        return (seq + 1) / 2
    if kind == "sliding":
        w = min(window, seq)
        return (w * (w + 1) / 2 + (seq - w) * w) / seq
    if kind == "chunked":
        full, rest = divmod(seq, window)
        return (full * window * (window + 1) / 2 + rest * (rest + 1) / 2) / seq
    raise ValueError(f"unknown local attention kind {kind!r}; valid: none, sliding, chunked")


def decode_keys(context: int, window: int = 0, kind: str = "none") -> int:
    """Keys the newest of ``context`` positions attends to."""
    if kind == "none" or not window:
        return context
    if kind == "sliding":
        return min(context, window)
    if kind == "chunked":
        return (context - 1) % window + 1
    raise ValueError(f"unknown local attention kind {kind!r}; valid: none, sliding, chunked")


# --------------------------------------------------------------------------------------------------------
# GEMMs

class _Gemms:
    """Dense GEMM times (forward) through the tile-aware GEMM model, and the kernel count."""

    def __init__(self, system: SystemConfig, params: Params, dtype: str, split_k: bool = True):
        self.split_k = split_k
        peak = (system.fp8_tflops if dtype == "fp8" else system.bf16_tflops) * 1e12
        wb = 1 if dtype == "fp8" else 2
        self.model = GemmModel(1, 1, peak, system.hbm_tbps * 1e12, wb, wb, params.gemm_efficiency_of(dtype, system),
                               params.mem_efficiency, params.tile, params.block_m or 64, params.block_n, system.sms,
                               params.gemm_pipeline_costs)

    def __call__(self, m: int, n: int, k: int, groups: int = 1) -> float:
        """Seconds of ``groups`` GEMMs ``m x n x k`` in one launch (weights ``n x k`` per group): the tile-aware
        launch roofline (waves of CTA blocks against the launch's bytes). With ``split_k``, a launch of fewer
        blocks than SMs may split K over the idle SMs (at least ``MIN_SPLIT_K`` deep per split), paying the
        FP32 partials' round trip through memory; the fastest split count is taken (1: no split)."""
        if m <= 0:
            return 0.0
        gm = self.model
        blocks = groups * int(gm.blocks(m, n))
        nbytes = groups * (n * k * gm.weight_bytes + m * (k * gm.act_bytes + n * 2))
        most = max(1, min(gm.sms // blocks, k // MIN_SPLIT_K)) if self.split_k else 1

        def time(splits):
            extra = groups * splits * m * n * 4 * 2 if splits > 1 else 0
            comp = math.ceil(blocks * splits / gm.sms) * gm.block_time(math.ceil(k / splits)) + gm.prologue()
            return max(comp, (nbytes + extra) / (gm.hbm_bytes_per_s * gm.mem_efficiency))
        return min(time(s) for s in range(1, most + 1))    # the kernel's heuristic picks the best split

    def ffn(self, m: int, h: int, f: int) -> float:
        """A SwiGLU FFN: gate and up (``h -> 2f``), then down (``f -> h``)."""
        return self(m, 2 * f, h) + self(m, h, f) if f else 0.0


def attention_parts(model: ModelConfig, system: SystemConfig, params: Params, e2e: E2EParams, mode: str,
                    tokens: int, context: int) -> tuple[float, float, float, float, int]:
    """(projection s, core s, core FLOPs, KV bytes read, kernels) of ONE attention layer per GPU, forward,
    averaged over the model's local and global layers."""
    g = _Gemms(system, params, params.dtype, e2e.split_k)
    m, h, H = model, model.hidden, model.heads
    bf16 = system.bf16_tflops * 1e12
    hbm = system.hbm_tbps * 1e12
    decode = mode == "decode"
    if m.attention == "mla":
        nope, rope, v, ql, kl = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.q_lora_rank, m.kv_lora_rank
        proj = g(tokens, ql, h) + g(tokens, H * (nope + rope), ql) + g(tokens, kl + rope, h) + g(tokens, h, H * v)
        if decode:   # latent attention: absorb W_UK into q and W_UV after the core (grouped over heads)
            proj += g(tokens, kl, nope, groups=H) + g(tokens, v, kl, groups=H)
            dqk, dv, kv_per_pos, kernels = kl + rope, kl, (kl + rope) * e2e.kv_bytes, 7
        else:        # decompress K and V for the whole sequence
            proj += g(tokens, H * (nope + v), kl)
            dqk, dv, kv_per_pos, kernels = nope + rope, v, 0, 6
        qkv_io = tokens * (H * dqk + H * (dqk + dv) + H * dv) * 2
    else:
        d, Hk = m.head_dim, m.kv_heads
        proj = g(tokens, (H + 2 * Hk) * d, h) + g(tokens, h, H * d)
        dqk = dv = d
        kv_per_pos, kernels = 2 * Hk * d * e2e.kv_bytes, 3
        qkv_io = tokens * (H * d + 2 * Hk * d + H * d) * 2
    local_frac = m.local_layers / m.layers
    if decode:
        keys = [(decode_keys(context), 1 - local_frac),
                (decode_keys(context, m.local_window, m.local_kind), local_frac)]
    else:
        keys = [(mean_keys(context), 1 - local_frac),
                (mean_keys(context, m.local_window, m.local_kind), local_frac)]
    flops = kv = core = 0.0
    for k_per_query, frac in keys:
        if frac == 0:
            continue
        f = tokens * k_per_query * 2 * H * (dqk + dv)
        if decode:
            b = tokens * k_per_query * kv_per_pos
            t = max(f / (bf16 * e2e.decode_compute_efficiency), b / (hbm * e2e.decode_mem_efficiency))
        else:
            b = 0.0
            t = max(f / (bf16 * e2e.attention_efficiency), qkv_io / (hbm * params.mem_efficiency))
        flops += frac * f
        kv += frac * b
        core += frac * t
    return proj, core, flops, kv, kernels


# --------------------------------------------------------------------------------------------------------

def end_to_end(model: ModelConfig, system: SystemConfig, params: Params = Params(), e2e: E2EParams = E2EParams(),
               calibration=None, schemes=None, estimate_result: Estimate | None = None) -> EndToEnd:
    """Whole-step time per scheme (see the module docstring). ``estimate_result``: reuse a routed-MoE estimate
    of the same model, system and params (else one is computed)."""
    e2e.validate()
    params.validate()
    est = estimate_result or estimate(model, system, params, calibration, schemes)
    if est.params != params or est.model != model:
        raise ValueError("estimate_result was computed for other params or another model than the ones given")
    mode, T = params.mode, params.tokens
    context = e2e.context or (DEFAULT_DECODE_CONTEXT if mode == "decode" else T)
    ko = system.kernel_overhead_us * 1e-6 * params.latency_scale if e2e.kernel_overhead else 0.0
    g, g16 = _Gemms(system, params, params.dtype, e2e.split_k), _Gemms(system, params, "bf16", e2e.split_k)
    h = model.hidden
    # Training: backward GEMMs = 2x forward (data + weight gradients), two kernels each.
    gemm_mult, kern_mult = (3.0, 3) if mode == "training" else (1.0, 1)

    proj, core, flops, kv, attn_kernels = attention_parts(model, system, params, e2e, mode, T, context)
    core_mult = 1.0 + (e2e.attention_backward_flops if mode == "training" else 0.0)
    attn_proj = proj * gemm_mult
    attn_core = core * core_mult
    n_gemm_kernels = attn_kernels - 1
    attention = attn_proj + attn_core + ko * (n_gemm_kernels * kern_mult + (2 if mode == "training" else 1))
    dense = g.ffn(T, h, model.dense_ffn) * gemm_mult + 2 * kern_mult * ko if model.dense_ffn else 0.0
    shared_f = model.shared * model.shared_ffn
    shared = g.ffn(T, h, shared_f) * gemm_mult + 2 * kern_mult * ko if shared_f else 0.0
    router = g16(T, model.routed_experts, h) * gemm_mult + kern_mult * ko
    head_rows = T if mode != "prefill" else max(1, math.ceil(T / context))
    head = g16(head_rows, model.vocab, h) * gemm_mult + kern_mult * ko
    parts = LayerParts(attention, attn_proj, attn_core, dense, shared, router, head, flops, kv)

    dense_layers, moe_layers = model.layers - model.moe_layers, model.moe_layers
    blocks = {}
    for name, r in est.results.items():
        if SCHEMES[name].engine == "dualpipe" and e2e.dualpipe_overlap:
            # per MoE layer without the attention (added below with every scheme's)
            blocks[name] = r.total + shared - min(r.exposed, attention + shared)
        elif e2e.shared_overlap:
            blocks[name] = r.total + shared_excess(shared, r.exposed, comm_sms_while_exposed(name, r, params),
                                                   system.sms)
        else:
            blocks[name] = r.total + shared
    non_moe = dense_layers * (attention + dense) + moe_layers * (attention + router) + head
    steps = {n: non_moe + moe_layers * b for n, b in blocks.items()}
    full_layer, full_step = est.results[FULL].total, steps[FULL]
    out = {n: SchemeStep(n, r.total, blocks[n], steps[n], moe_layers * r.total / steps[n],
                         r.total / full_layer, steps[n] / full_step) for n, r in est.results.items()}
    return EndToEnd(est, e2e, context, parts, dense_layers, moe_layers, out)


def comm_sms_while_exposed(name: str, r, params: Params) -> int:
    """SMs a scheme's communication holds while its GEMM SMs wait: a unicast (DeepEP-like) kernel issues
    every byte from ``comm_sms`` SMs; dymultimem and NVLS issue one store or request per token (the switch
    replicates and reduces), so only the SMs the estimator reserves for them (``r.comm_sms``). DySHARP with
    the push combine (``r.detail["combine"]``) issues its partials from SMs, as a unicast kernel does."""
    if SCHEMES[name].traffic == "unicast" or r.detail.get("combine") == "push":
        return params.comm_sms
    return r.comm_sms


def shared_excess(shared: float, exposed: float, comm_sms: int, sms: int) -> float:
    """Time the shared expert adds to a routed MoE layer when it runs in the layer's exposed time: there it
    progresses on the ``sms - comm_sms`` SMs communication leaves free; the rest runs on all SMs."""
    if shared <= 0:
        return 0.0
    free = max(0, sms - comm_sms) / sms
    return max(0.0, shared - exposed * free)


def baselines(e: EndToEnd) -> list[str]:
    return [b for b in BASELINES if b in e.schemes]
