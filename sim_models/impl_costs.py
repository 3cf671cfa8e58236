"""The costs of Tutel's and FastMoE's own code, as COMET's artifact runs them (``Params.impl_costs``).

The estimator's tutel and fastermoe schemes are the schedules of those systems on optimised kernels. COMET's
artifact (github.com/ZSL98/Megatron-LM at fd11ea94, ``MoELayer_tutel``, ``MoELayer_fastermoe``) runs the
systems' own Python layers, whose code adds costs of its own. With a scheme named in ``Params.impl_costs``
the estimator charges them; each is read off the code, each constant has a published source:

Tutel (ZSL98/tutel ``tutel/impls/moe_layer.py``, ``fast_dispatch.py``; microsoft/tutel ``tutel/impls/
communicate.py``, ``tutel/experts/ffn.py``), all-to-all, experts, all-to-all in sequence (degree 1):

* *FP32 encode and decode*: ``TutelMoeFastDispatcher`` runs in FP32 for any input but FP16 (``if
  IS_HIP_EXTENSION or dispatch_dtype != torch.float16: self.dtype = torch.float32``). Encode: the BF16
  tokens cast to FP32 (read 2, write 4 bytes per element), a zero-filled FP32 buffer of E x capacity slots,
  one encode kernel per top-k pick (each reads the T FP32 tokens and writes T FP32 slots), the buffer cast to
  BF16 (read 4, write 2). Decode: the received BF16 slots cast to FP32, one decode kernel per pick (reads T
  FP32 slots, writes T FP32 rows), k - 1 additions of those rows, the sum cast to BF16. Bytes per GPU, T
  tokens, S = E x capacity slots, H hidden: encode H (6 T + 4 S + 8 k T + 6 S), decode H (6 S + 8 k T +
  12 (k - 1) T + 6 T); capacity = k ceil(T / E) (capacity factor 1, the artifact sets no ``CAP_FACTOR``).
  They replace the scheme's permute and unpermute kernels.
* *slots, not tokens, on the links*: the all-to-all sends the whole (E, capacity, H) buffer: (E - E/G)
  capacity rows out of each GPU and (G - 1) (E/G) capacity rows into it, one row per (token, expert) slot,
  where the optimised scheme sends one row per (token, GPU).
* *layout copies*: with more than one local expert, the received buffer is permuted to expert-major order
  (``PrimAllToAll.transform``: ``.contiguous()``) and the experts' output back to GPU-major before the
  second all-to-all: two BF16 copies of the S slots (read 2, write 2 bytes per element).
* *bias additions*: the ``ffn`` experts have fc1 and fc2 biases (``has_fc1_bias``/``has_fc2_bias`` default
  True), each a separate ``torch.add`` over the GEMM's output (read 2, write 2): 4 n (f + H) bytes.

FastMoE (ZSL98/fastmoe ``fmoe/layers.py``; laekov/fastmoe ``fmoe/functions.py``, ``fmoe/transformer.py``,
``fmoe/linear.py``, ``cuda/global_exchange.h``, ``cuda/parallel_linear.cu[h]``, ``cuda/stream_manager.cpp``),
its plain schedule (the artifact sets no ``FMOE_FASTER_SCHEDULE_ENABLE``: no smart schedule, no overlap):

* *sequential*: count, scatter, the experts one by one, gather, all on one stream, one after the other.
* *host synchronisations*: ``prepare_forward``: ``lec_cum[-1].item()``, ``fwd_expert_count.sum().item()``
  and three ``.cpu()`` copies (5); per expert (``FMoETransformerMLP``'s experts are separate one-expert
  ``_Expert`` modules, called one by one from Python in ``FMoE.expert_fn``), each of its two ``FMoELinear``
  calls: the bias ``repeat_interleave`` over a device count (its output size read back to the host),
  ``smgr->syncTorch()`` and ``smgr->sync(1)`` (``cudaStreamSynchronize``): 3 per call, 6 per expert. After
  each the GPU sits idle until the host has issued the next kernel: :data:`HOST_SYNC_US` each.
* *one GEMM launch per expert* (``cublasSgemmEx``: BF16 inputs and output, FP32 compute type; the published
  Mixtral layer, 1.92 TFLOP of expert GEMMs in 5.81 ms, puts them on the tensor cores): each expert's GEMMs are
  their own launch, with their own waves and prologue, at the BF16 GEMM efficiency of the other schemes.
* *per-expert exchanges*: ``global_scatter`` / ``global_gather`` issue one NCCL group (``ncclGroupStart``
  .. ``ncclGroupEnd``: a send and a receive per peer) per local expert, one after the other, each with a
  launch and one traversal of latency; the counts are exchanged first by one more NCCL group.
* *rows per (token, expert)*: ``_local_scatter`` copies each token once per pick (``index_select``), and the
  exchanges carry those rows: k rows per token, not one per (token, GPU).
* *bias broadcasts*: ``FMoELinear`` writes the bias into every output row (``repeat_interleave``) and the GEMM
  reads it back (beta = 1): 4 n (f + H) bytes.
* *gather*: ``_local_gather`` zero-fills T k rows and ``index_add_``\\s the received rows into them (read 2,
  read-modify-write 4 bytes per element), then ``torch.bmm`` weighs the k rows of each token by its gate
  scores (read T k rows, write T): H (2 T k + 6 T k + 2 T k + 2 T) bytes; ``torch.cat`` joins the experts'
  outputs (read 2, write 2 per element of the n rows), and GELU runs between the two linears (n f, read 2,
  write 2).

Host synchronisation cost: NVIDIA, "Getting Started with CUDA Graphs" (developer.nvidia.com/blog/cuda-graphs,
2019): a 2.9 us kernel takes 9.6 us per kernel when the host synchronises after each one and 3.8 us when
the kernels are launched back to back: a synchronisation adds 9.6 - 3.8 = 5.8 us beyond a back-to-back
launch (the estimator's ``kernel_overhead_us`` is that launch). The figure is a V100 with the CUDA 10
driver; no H100/H800 figure of the same experiment was found.
"""

import math

import numpy as np

__all__ = ["IMPL_SCHEMES", "HOST_SYNC_US", "FASTMOE_LAYER_SYNCS", "FASTMOE_EXPERT_SYNCS", "FASTMOE_LAYER_KERNELS",
           "FASTMOE_EXPERT_KERNELS", "tutel_slots", "tutel_kernel_bytes", "tutel_kernels", "tutel_exchange",
           "fastmoe_layer"]

IMPL_SCHEMES = ("tutel", "fastermoe")
HOST_SYNC_US = 5.8              # 9.6 - 3.8 us per kernel (NVIDIA, "Getting Started with CUDA Graphs")
FASTMOE_LAYER_SYNCS = 5         # prepare_forward: two .item(), three .cpu()
FASTMOE_EXPERT_SYNCS = 6        # per expert: two FMoELinear calls x (repeat_interleave, syncTorch, sync)
# Kernels besides the NCCL groups: per layer, counting (zero fill, expert_count, cast, cumsum, cast,
# assign_pos, two sums), scatter (div, index_select), gather (zero fill, index_add_, bmm), torch.cat: 14; per
# expert, each FMoELinear's count copy to the GPU, repeat_interleave (two kernels) and GEMM, and GELU: 9.
FASTMOE_LAYER_KERNELS = 14
FASTMOE_EXPERT_KERNELS = 9


def tutel_slots(tokens: int, experts: int, k: int) -> int:
    """Tutel's E x capacity slots per GPU at capacity factor 1: capacity = k ceil(T / E)
    (``extract_critical``)."""
    return experts * k * math.ceil(tokens / experts)


def tutel_kernel_bytes(tokens: int, experts: int, local_experts: int, k: int, hidden: int, ffn: int,
                       rows: float) -> dict:
    """Bytes per GPU of Tutel's memory-bound kernels for one layer (module docstring): ``rows`` = the rows its
    experts compute. Returns the parts (encode, decode, layout, bias; the activation is the scheme's own)."""
    t, s, h = float(tokens), float(tutel_slots(tokens, experts, k)), float(hidden)
    return {"encode": h * (6 * t + 4 * s + 8 * k * t + 6 * s),
            "decode": h * (6 * s + 8 * k * t + 12 * (k - 1) * t + 6 * t),
            "layout": 2 * 4 * s * h if local_experts > 1 else 0.0,
            "bias": 4.0 * rows * (ffn + hidden)}


def tutel_kernels(k: int, local_experts: int) -> int:
    """Tutel's kernels per layer besides the GEMMs and the activation: encode (cast, zero fill, k encodes,
    cast), decode (cast, k decodes, k - 1 additions, cast), two layout copies (more than one local expert),
    two bias additions."""
    return (k + 3) + (2 * k + 1) + (2 if local_experts > 1 else 0) + 2


def tutel_exchange(tokens: int, experts: int, gpus: int, k: int) -> tuple[float, float]:
    """Rows one all-to-all sends out of and receives into each GPU: the slots of the other GPUs' experts."""
    s = tutel_slots(tokens, experts, k)
    el = experts // gpus
    cap = s // experts
    return float((experts - el) * cap), float((gpus - 1) * el * cap)


def _pick_rows(dest, gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """Remote (token, expert) rows each GPU sends and receives: one per pick."""
    remote = dest.expert_gpu != dest.src[:, None]
    sent = np.bincount(dest.src, weights=remote.sum(axis=1).astype(float), minlength=gpus)
    recv = np.bincount(dest.expert_gpu[remote], minlength=gpus).astype(float)
    return sent, recv


def fastmoe_layer(ctx, costs, lat: tuple[float, float], gemm_factor: float) -> dict:
    """FastMoE's plain layer (module docstring) on the busiest GPU, seconds: the parts and ``total``.

    ``ctx``: the estimator's context (link rate, GEMM model, workload, kernel overhead); ``costs``: the unicast
    wire costs of one row (:class:`traffic.WireCosts`); ``lat``: the (dispatch, combine) latency of one
    traversal."""
    wl, G, m = ctx.wl, ctx.G, ctx.m
    T, k, h, f = wl.tokens_per_gpu, m.top_k, m.hidden, m.expert_ffn
    ko = ctx.ko
    sync = HOST_SYNC_US * 1e-6 * ctx.p.latency_scale
    hbm = ctx.s.hbm_tbps * 1e12 * ctx.p.mem_efficiency
    n_inst = len(wl.inst_gpu)
    el = np.bincount(wl.inst_gpu, minlength=G)                        # local experts per GPU
    # Exchanges: one row per pick, one NCCL group per local expert (and one for the counts).
    sent, recv = _pick_rows(wl.dest, G)
    busiest = float(np.max(np.maximum(sent, recv)))                  # rows on the busiest GPU's link
    disp, comb = busiest * costs.disp_copy / ctx.rate, busiest * costs.comb_copy / ctx.rate
    groups = el.astype(float) * (ko + lat[0]) + el * (ko + lat[1]) + (ko + lat[0])
    # Experts: one GEMM launch per expert.
    t1, t2 = ctx.gemm.launch_times(wl.inst_rows, np.arange(n_inst), n_inst)
    gemm = np.bincount(wl.inst_gpu, weights=(t1 + t2) * gemm_factor, minlength=G)
    rows = np.bincount(wl.inst_gpu, weights=wl.inst_rows.astype(float), minlength=G)
    picks = float(T * k)
    home = h * (4.0 * picks + 2 * picks + 6 * picks + 2 * picks + 2 * T)   # scatter, zero fill, index_add, bmm
    expert = rows * (4.0 * (f + h) + 4.0 * f + 4.0 * h)                        # bias, GELU, cat
    kernels = FASTMOE_LAYER_KERNELS + FASTMOE_EXPERT_KERNELS * el
    mem = (home + expert) / hbm + kernels * ko
    syncs = FASTMOE_LAYER_SYNCS + FASTMOE_EXPERT_SYNCS * el
    host = syncs * sync
    per_gpu = gemm + mem + groups + host
    g = int(np.argmax(per_gpu))
    total = disp + comb + float(per_gpu[g])
    return {"total": total, "dispatch": disp + lat[0], "combine": comb + lat[1], "gemm": float(gemm[g]),
            "kernels": float(mem[g]), "exchange_groups": float(groups[g]), "host_syncs": int(syncs[g]),
            "host_sync_time": float(host[g])}
