"""Validation of the estimator against the figures each baseline publishes for its own setup.

Every published setup is data (:data:`SETUPS`: system, model shape, tokens, what is measured, the published
value, its unit and its source). :func:`validate` runs the estimator's own quantity for each one and returns
rows ``(setup, published, source, estimate, error %)``; a setup whose published quantity has no counterpart
in the estimator keeps its row, with the reason instead of an estimate, so the table says what was *not*
checked as well as what was.

The estimator quantities come from the estimator's functions only (no second model): the workload
(:func:`workload.build_workload`), the traffic accounting (:func:`traffic.account`), the bulk phase times of
a traffic pattern (``estimator._standalone``: busiest link direction + one traversal's latency), the
kernel overhead of one phase (``kernel_overhead_us``), the link rate (``estimator._Context.rate``) and the
GEMM model (:func:`gemm.deepgemm_validation`); a speedup or layer time of a scheme comes from
:func:`estimator.estimate` itself (one call per setup, shared by the setup's rows).
"""

import dataclasses

import numpy as np

from hw.packet import payload_efficiency

from .calibration import Calibration, load_calibration
from . import deepep
from . import published_comet as comet_fig
from .estimator import MAX_PAYLOAD, Params, _Context, _standalone, estimate
from .gemm import DEEPGEMM_H800, deepgemm_validation
from .moe_config import ModelConfig, load_model
from .system_config import load_system
from .traffic import account, payload_bytes, wire_costs
from .workload import build_workload

__all__ = ["Setup", "SETUPS", "KINDS", "TOLERANCE", "STATUSES", "FAILING", "run_setup", "validate", "error_pct",
           "status", "failures", "markdown", "summary"]

DEEPEP_V1 = ("github.com/deepseek-ai/DeepEP, docs/legacy.md (V1 README), \"Performance\", table \"Normal kernels "
             "with NVLink and RDMA forwarding\"")
DEEPEP_V1_LL = ("github.com/deepseek-ai/DeepEP, docs/legacy.md (V1 README), \"Performance\", table \"Low-latency "
                "kernels with pure RDMA\", EP 8 row")
DEEPEP_V2 = "github.com/deepseek-ai/DeepEP, README.md (V2), \"Performance\" table, SM100 / N/A / EP 8 rows"
MISSION = "MISSION.md, \"Public facts\" (NVLink4 / NCCL)"
NCCL_212 = ("github.com/NVIDIA/nccl-tests issue #212, comment by NCCL maintainer sjeaugey (2024-05-06): "
            "\"effective NVLink bandwidth of 370GB/s ... BusBw when running non-allreduce operations\", "
            "\"On 8 GPUs ... peak busBw of ~480GB/s\" (also MISSION.md, \"Public facts\")")
DEEPGEMM = ("github.com/deepseek-ai/DeepGEMM README.md at {commit}, \"Performance\", table \"Grouped GEMMs for MoE "
            "models ({layout} layout)\" (H800 SXM5)")
# DeepGEMM's re-measured contiguous-layout figures (README "Update performance", 2025-03-25): same shapes.
DEEPGEMM_H800_2025_03 = [("contiguous", 4, 8192, 4096, 7168, 1346), ("contiguous", 4, 8192, 7168, 2048, 1214),
                         ("contiguous", 8, 4096, 4096, 7168, 1346), ("contiguous", 8, 4096, 7168, 2048, 1214)]

# Why a row stays outside its tolerance: the mechanism the estimator lacks (docs/estimator_validation.md).
WHY_DEEPEP_COPY = ("DeepEP's remote traffic moves at 0.67-0.69 of raw NVLink on H800 (the README's own maximum is "
                   "~160 of 200 GB/s, 0.80), the estimator's unicast at NCCL's bulk 0.822. DeepEP V1's copy "
                   "protocol is built (sim_models/deepep.py): its separate stores of scales, source index and "
                   "top-k indices and weights add 2.2% (dispatch) and 0.5% (combine) of wire bytes, and its copy "
                   "loop on 24 SMs (12 sender SMs of 8 flows, a chunk of 6 or 4 tokens per two NVLink round "
                   "trips, DeepEP's 50 GB/s of writes per SM) sustains 582-594 GB/s, 3x what the links carry, so "
                   "the links bind. Missing: what the links lose on DeepEP's all-to-all against NCCL's ring "
                   "(0.67-0.69 of raw against 0.822), which no published figure isolates")
WHY_DEEPEP_24SM = ("the 24-SM kernel is 11% (dispatch) and 9% (combine) slower than the 64-SM one on the same "
                   "links. DeepEP V2's copy loop is built (sim_models/deepep.py: each warp one token in flight "
                   "until its stores complete, one NVLink round trip per token, as many warps as shared memory "
                   "holds token buffers, DeepEP's 50 GB/s of writes per SM): on 24 SMs it sustains 1,200 GB/s, "
                   "above the links' 826-832, so it does not bind. The published 643 and 675 GB/s are 26.8 and "
                   "28.1 GB/s per SM, about half DeepEP's own per-SM write figure (deep_ep/buffers/elastic.py "
                   "sm_write_gbs = 50, \"TODO: use different values for other architectures\"). Missing: the "
                   "per-SM NVLink write rate on Blackwell and the SMs' local load latencies per token (TMA load, "
                   "top-k loads, slot atomic), which no published figure gives")
WHY_NVLS_B300 = ("NCCL's NVLS all-reduce, pipelined as NCCL runs it (both link directions busy), gives 1.40x "
                 "NVLink5's payload rate (1,022 of 732 GB/s); on 8x B300 the same report's NVLS is 1.22x its ring "
                 "all-reduce (845 / 695 GB/s), on 8x H100 1.30x (480 / 370). Missing: what caps NVLS below the "
                 "full-duplex pipeline on NVLink5 (the NVLink5 switch's multicast and reduction rate, NCCL's 24 "
                 "NVLS channels' loads in flight); no published figure isolates it")
WHY_DEEPGEMM = ("the model's HBM rate, 0.75 of 3.35 TB/s, comes from DeepGEMM's memory-bound dense M = 64 and 128 "
                "rows, run by a benchmark (tests/test_core.py at a6d97a1) that rebuilt its inputs before every run "
                "without flushing L2, which \"effectively put them in the L2\" (DeepGEMM commit 6cbff57, merged pull "
                "request #68): those rows and the 1- and 2-group launches read the weights built last (15-29 MB) "
                "partly from L2, while a 4-group launch streams its other three groups (57 MB at N = 7,168, K = "
                "2,048; 100 MB at N = 4,096, K = 7,168: weights, activations, outputs) through the 50 MB L2 before "
                "and while it reads them. These two are the table's only memory-heavy launches on cold weights, and "
                "reach 2.05-2.06 TB/s (0.61-0.62 of HBM): the published 64.5 and 36.9 us against the model's memory "
                "term of 53.0 and 30.0 us. Not the cause: DeepGEMM launches them as its 2 x 512 rows (+5%, +10% "
                "here): 128 x 128 blocks at N = 4,096 and 128 x 112 at N = 7,168, 256 and 512 blocks in 2 and 4 waves"
                " on 132 SMs, no TMA multicast (it multicasts only single-group launches of M >= 1,024), every "
                "group's mask at its full 256 rows; only the bytes differ (133 against 74 MB, 75 against 46 MB). "
                "Missing: an HBM efficiency for a cold weight stream from a source other than these rows (a later "
                "release with L2 flushed measures 1,569-1,665 GB/s for the dense M = 128 rows on an H800, 25-31% "
                "below the first release's: github.com/deepseek-ai/DeepGEMM pull request #168)")


# NCCL's NVLS all-reduce on one node (github.com/NVIDIA/nccl, src/device/all_reduce.h,
# RunWorkColl<ncclFuncAllReduce, NVLS, SIMPLE>, the oneNode branch; src/transport/nvls.cc). Per channel, a loop
# of nHeads (= G) chunks: the head rank's reduce warps multimem.ld_reduce its chunk from every rank's buffer
# (its own included: the multicast address goes through the switch) and multimem.st the sum to every rank (its
# own included); the scatter and gather warps copy between the user buffers and the rank's own NVLS buffer
# (local, no link). All channels and all chunks run at once (NCCL_STEPS slots per channel), so both link
# directions carry traffic together; only the first loop's reads and the last loop's stores are not overlapped.
NVLS_CHUNK_BYTES = 128 * 1024   # NCCL_NVLS_CHUNKSIZE's default, src/transport/nvls.cc (NvlsChunkSize)
NVLS_CHANNELS_SM90 = 16         # NVLS_NCHANNELS_SM90, src/transport/nvls.cc (H100/H200)
NVLS_CHANNELS_SM100 = 24        # NVLS_NCHANNELS_SM100_NVL, src/transport/nvls.cc (Blackwell, one NVLink domain)


def nvls_allreduce_time(ctx: _Context, hidden: int, tokens: int, channels: int) -> tuple[float, int, dict]:
    """(seconds, S bytes, detail) of NCCL's single-node NVLS all-reduce of ``G x tokens`` BF16 rows of
    ``hidden`` channels: each GPU heads 1/G of S. Per GPU, its uplink carries the read answers for every row of
    S (the switch reads every rank's copy for every head's ld_reduce, the GPU's own included), its ld_reduce
    requests and its own reduced rows stored by multimem.st; its downlink carries its reduced rows, the read
    requests for every row and every head's stored rows (S). Both directions run at once; the time is the
    busier direction (or the switch's reduction engines), plus the fill and drain of one loop of chunks
    (``channels`` x G x ``NVLS_CHUNK_BYTES``: the first loop's reads precede any store, the last loop's stores
    follow every read), one ld_reduce and one store latency and one kernel overhead."""
    G = ctx.G
    s = payload_bytes(hidden, "bf16")
    S = G * tokens * s
    c = wire_costs("nvls", s, s, ctx.flit, MAX_PAYLOAD)
    T = float(tokens)
    up = G * T * c.comb_copy + T * c.comb_request + T * c.disp_copy
    down = T * c.comb_copy + G * T * c.comb_request + G * T * c.disp_copy
    reduce_in = G * T * c.comb_copy
    steady = max(up / ctx.rate, down / ctx.rate, reduce_in / ctx.reduce_rate if ctx.reduce_rate > 0 else 0.0)
    loop = min(float(S), float(channels * G * NVLS_CHUNK_BYTES))      # one loop of every channel, payload bytes
    fill = loop / s * c.disp_copy / ctx.rate
    ld, lc = ctx.latencies("nvls", tiled=False)
    t = steady + fill + ld + lc + ctx.ko
    return t, S, {"steady_us": steady * 1e6, "fill_drain_us": fill * 1e6}


# The largest absolute error (percent) a validation row accepts unless its setup states another.
TOLERANCE = 15.0

# A row's status (:func:`status`): the first two pass, the last two fail `dysharp estimate --validate`.
STATUSES = ("within", "outside, reason stated", "no counterpart", "no figure", "OUTSIDE, no reason",
            "within, stale reason")
FAILING = ("OUTSIDE, no reason", "within, stale reason")


@dataclasses.dataclass(frozen=True)
class Setup:
    """One published figure and how to reproduce its quantity with the estimator.

    ``kind`` names the estimator quantity (:data:`KINDS`); ``None`` means no counterpart and ``note`` says
    why. ``model`` is a model name from ``models.toml`` or a dict of :class:`ModelConfig` fields for a
    benchmark shape that is not a model. ``tolerance`` is the largest absolute error (percent) the row
    accepts; a row outside it must carry a ``reason`` naming the mechanism the estimator lacks, and a row
    inside it must not (a stale reason would hide a fix or a regression): :func:`failures`."""
    key: str
    baseline: str
    setup: str
    quantity: str
    published: float | None
    unit: str
    source: str
    kind: str | None = None
    system: str = "hgx-h100"
    model: str | dict | None = None
    tokens: int = 4096
    gpus: int | None = None
    routing: str = "uniform"
    dtype: str = "fp8"
    extra: dict = dataclasses.field(default_factory=dict)
    params: dict = dataclasses.field(default_factory=dict)    # estimate()'s Params beyond tokens, dtype, routing
    note: str = ""
    tolerance: float = TOLERANCE
    reason: str = ""


# A benchmark shape times one MoE layer alone: ModelConfig's attention fields are placeholders, never read.
_NO_ATTENTION = dict(comet_fig.GQA_NO_EXTRAS, heads=1, kv_heads=1, head_dim=1, vocab=1)


def _shape(name, hidden, experts, k, ffn=2048):
    return dict(name=name, hidden=hidden, routed_experts=experts, top_k=k, expert_ffn=ffn, shared=0,
                moe_layers=1, layers=1, **_NO_ATTENTION)


SETUPS: list[Setup] = [
    Setup("h800-nvlink", "DeepEP", "8x H800, NVLink", "achievable NVLink bandwidth per GPU per direction",
          160.0, "GB/s", "github.com/deepseek-ai/DeepEP, docs/legacy.md (V1 README), \"Performance\", the paragraph "
          "above the normal-kernel table: \"H800 (~160 GB/s NVLink maximum bandwidth)\"",
          kind="link_rate", system="hgx-h800",
          note="the estimator's bulk unicast payload rate (raw x link_efficiency, set from NCCL on H100)"),
    Setup("deepep-v1-dispatch", "DeepEP normal", "H800 EP8 intranode, 4096 tokens/GPU, hidden 7168, "
          "top-8 of 256, FP8", "dispatch bottleneck bandwidth", 153.0, "GB/s", DEEPEP_V1 + ", Intranode row",
          kind="deepep_dispatch_bw", system="hgx-h800", model=_shape("deepep-bench", 7168, 256, 8),
          extra=dict(version="v1", sms=24),
          note="DeepEP's tests/legacy/test_intranode.py: received bytes (rows incl. the GPU's own tokens) / "
               "kernel time, uniform random top-8",
          reason=WHY_DEEPEP_COPY),
    Setup("deepep-v1-combine", "DeepEP normal", "H800 EP8 intranode, 4096 tokens/GPU, hidden 7168, "
          "top-8 of 256, BF16", "combine bottleneck bandwidth", 158.0, "GB/s", DEEPEP_V1 + ", Intranode row",
          kind="deepep_combine_bw", system="hgx-h800", model=_shape("deepep-bench", 7168, 256, 8),
          extra=dict(version="v1", sms=24),
          note="sent BF16 bytes (= the dispatch's received rows) / kernel time",
          reason=WHY_DEEPEP_COPY),
    Setup("deepep-v2-dispatch", "DeepEP normal (V2)", "SM100 (B200) EP8 NVLink, 8192 tokens/GPU, hidden "
          "7168, top-8 of 256, FP8", "dispatch bottleneck bandwidth (64 SMs)", 726.0, "GB/s", DEEPEP_V2,
          kind="deepep_dispatch_bw", system="nvl72", gpus=8, tokens=8192,
          model=_shape("deepep-bench", 7168, 256, 8), extra=dict(version="v2", sms=64),
          note="nvl72's NVLink5 GPU (18 x 50 GB/s) on 8 GPUs; V2 counts local-rank traffic (\"logical "
               "bandwidth\") and the received top-k indices and weights (96 B per row, tests/elastic/test_ep.py "
               "count_bytes), as the estimate does"),
    Setup("deepep-v2-combine", "DeepEP normal (V2)", "SM100 (B200) EP8 NVLink, 8192 tokens/GPU, hidden "
          "7168, top-8 of 256, BF16", "combine bottleneck bandwidth (64 SMs)", 740.0, "GB/s", DEEPEP_V2,
          kind="deepep_combine_bw", system="nvl72", gpus=8, tokens=8192,
          model=_shape("deepep-bench", 7168, 256, 8), extra=dict(version="v2", sms=64)),
    Setup("deepep-v2-dispatch-24sm", "DeepEP normal (V2)", "SM100 (B200) EP8 NVLink, 8192 tokens/GPU, "
          "hidden 7168, top-8 of 256, FP8", "dispatch bottleneck bandwidth (24 SMs)", 643.0, "GB/s", DEEPEP_V2,
          kind="deepep_dispatch_bw", system="nvl72", gpus=8, tokens=8192,
          model=_shape("deepep-bench", 7168, 256, 8), extra=dict(version="v2", sms=24),
          note="DeepEP V2's copy loop on 24 SMs (sim_models/deepep.py): each warp a token in flight, a round "
               "trip per token, DeepEP's 50 GB/s of writes per SM",
          reason=WHY_DEEPEP_24SM),
    Setup("deepep-v2-combine-24sm", "DeepEP normal (V2)", "SM100 (B200) EP8 NVLink, 8192 tokens/GPU, "
          "hidden 7168, top-8 of 256, BF16", "combine bottleneck bandwidth (24 SMs)", 675.0, "GB/s", DEEPEP_V2,
          kind="deepep_combine_bw", system="nvl72", gpus=8, tokens=8192,
          model=_shape("deepep-bench", 7168, 256, 8), extra=dict(version="v2", sms=24),
          reason=WHY_DEEPEP_24SM),
    Setup("deepep-ll-ep8", "DeepEP low-latency", "H800 EP8, 128 tokens, hidden 7168, top-8, FP8 dispatch",
          "dispatch latency", 77.0, "us", DEEPEP_V1_LL,
          note="pure RDMA (CX7 400 Gb/s, ~50 GB/s) kernels; the estimator models one "
               "NVLink domain, and the published 98 GB/s exceeds one NIC, so it counts traffic that does "
               "not cross the NIC"),
    Setup("deepep-ll-ep8-combine", "DeepEP low-latency", "H800 EP8, 128 tokens, hidden 7168, top-8, BF16 "
          "combine", "combine latency", 114.0, "us", DEEPEP_V1_LL, note="as for the low-latency dispatch"),
    Setup("deepep-internode-ep16", "DeepEP normal", "H800 EP16 (2 nodes), 4096 tokens/GPU, hidden 7168, top-8",
          "dispatch / combine bottleneck bandwidth (RDMA)", 43.0, "GB/s", DEEPEP_V1 + " (Internode rows; "
          "EP32 58/57, EP64 51/50 GB/s)",
          note="cross-node (NVLink forwarding to CX7 RDMA, ~50 GB/s per GPU): the estimator models one NVLink "
               "domain"),
    Setup("nccl-bulk", "NCCL", "8x H100, NVLink4 (18 x 25 GB/s)", "non-allreduce bandwidth per direction",
          370.0, "GB/s", NCCL_212, kind="allgather_busbw", system="hgx-h100",
          model=_shape("allgather-probe", 7168, 8, 8), tokens=2048, dtype="bf16",
          note="calibration point, not independent: link_efficiency = 370/450 comes from this figure. "
               "Estimate: an all-gather (every token to all 7 peers, unicast), busbw = S/t x (G-1)/G "
               "(nccl-tests doc/PERFORMANCE.md)"),
    Setup("nccl-nvls-allreduce", "NVLS (NCCL)", "8x H100, NVLink4 + NVSwitch SHARP, large messages",
          "allreduce busbw", 480.0, "GB/s", NCCL_212, kind="nvls_allreduce_busbw", system="hgx-h100",
          model=_shape("allreduce-probe", 7168, 8, 1), tokens=8192, dtype="bf16",
          note="NCCL's single-node NVLS all-reduce (github.com/NVIDIA/nccl src/device/all_reduce.h, "
               "src/transport/nvls.cc): per 128 KiB chunk, multimem.ld_reduce from every GPU then multimem.st to "
               "every GPU, 16 channels of chunks in flight, so both link directions carry traffic at once; each "
               "GPU's own rows also cross the switch; plus the fill and drain of one loop of chunks. The MoE "
               "baseline's nvls phases stay sequential (GEMMs between them). busbw = S/t x 2(G-1)/G "
               "(github.com/NVIDIA/nccl-tests doc/PERFORMANCE.md)"),
    Setup("nccl-nvls-allreduce-h200", "NVLS (NCCL)", "8x H200, NVLink4 + NVSwitch SHARP, 64 KB to 4 GB (NCCL 2.20.3)",
          "allreduce busbw (peak)", 475.0, "GB/s",
          "github.com/NVIDIA/nccl-tests issue #272 (2024-11-27), all_reduce_perf output in the report (a user's "
          "measurement; NVLS is NCCL's default all-reduce on one NVLink4 node, and 475 GB/s is above the 370 "
          "GB/s a ring reaches)",
          kind="nvls_allreduce_busbw", system="hgx-h200", model=_shape("allreduce-probe", 7168, 8, 1),
          tokens=8192, dtype="bf16", note="as for 8x H100: H200 has H100's NVLink4 and NVSwitch"),
    Setup("nccl-nvls-allreduce-h800", "NVLS (NCCL)", "8x H800, NVLink4 (8 x 25 GB/s) + NVSwitch SHARP",
          "allreduce busbw", 215.0, "GB/s",
          "github.com/NVIDIA/nccl issue #1374 (2024-07-24), the reporter's comment: \"a test on H800 * 8 node, ... "
          "the reported allreduce busBW is 215 GB/s, which is bigger than unidirectional peak BW 200GB/s\" (a "
          "user's measurement; NVLS is NCCL's default all-reduce on one NVLink4 node)",
          kind="nvls_allreduce_busbw", system="hgx-h800", model=_shape("allreduce-probe", 7168, 8, 1),
          tokens=8192, dtype="bf16", note="as for 8x H100, on H800's 8 NVLink4 links (200 GB/s per direction): "
          "the system of the COMET rows"),
    Setup("nccl-nvls-allgather", "NVLS (NCCL)", "8 NVLink4 GPUs (the same report's NVLS all-reduce: 470 GB/s), "
          "1 GB, NCCL_ALGO=NVLS", "allgather busbw", 300.0, "GB/s",
          "github.com/NVIDIA/nccl issue #1506 (2024-11-07), the report's figures (a user's measurement; ring "
          "all-gather 350 GB/s in the same run); the maintainer's reply: NVLS all-gather \"will transmit size in "
          "one direction and 1/N*size in the other\"",
          kind="nvls_allgather_busbw", system="hgx-h100", model=_shape("allgather-probe", 7168, 8, 1),
          tokens=8192, dtype="bf16",
          note="the nvls scheme's AllGather (one multimem.st per token) with NCCL's multicast to the whole group: "
               "each GPU's own rows also cross the switch to its downlink (the maintainer's \"size in one "
               "direction\"; the MoE baseline's nvls AllGather writes them locally); busbw = S/t x (G-1)/G"),
    Setup("nccl-b300-ring-allreduce", "NCCL", "8x B300, NVLink5 (18 x 50 GB/s), NVLS off (NCCL 2.30.4)",
          "allreduce busbw without NVLS", 695.0, "GB/s",
          "github.com/NVIDIA/nccl issue #2140 (2026-04-28), \"8x B300 (NVLS off vs on)\" (a user's measurement)",
          kind="allgather_busbw", system="nvl72", gpus=8, model=_shape("allgather-probe", 7168, 8, 8),
          tokens=2048, dtype="bf16",
          note="a check of the NVLink5 link efficiency, which systems.toml assumes equal to NVLink4's 0.822: a "
               "non-NVLS all-reduce's busbw is, by nccl-tests' definition, the per-direction payload rate, as an "
               "all-gather's is; estimate: the all-gather probe on nvl72's NVLink5 GPU, 8 GPUs"),
    Setup("nccl-b300-nvls-allreduce", "NVLS (NCCL)", "8x B300, NVLink5 + NVSwitch SHARP (NCCL 2.30.4)",
          "allreduce busbw", 845.0, "GB/s",
          "github.com/NVIDIA/nccl issue #2140 (2026-04-28), \"8x B300 (NVLS off vs on)\" (a user's measurement)",
          kind="nvls_allreduce_busbw", system="nvl72", gpus=8, model=_shape("allreduce-probe", 7168, 8, 1),
          tokens=8192, dtype="bf16", extra=dict(nvls_channels=NVLS_CHANNELS_SM100),
          note="as for 8x H100, on nvl72's NVLink5 GPU, 8 GPUs, with NCCL's 24 NVLS channels on Blackwell",
          reason=WHY_NVLS_B300),
    Setup("tutel-16", "Tutel", "16 A100 (2 nodes), single MoE layer", "speedup over Fairseq MoE", 4.96, "x",
          "Tutel, MLSys 2023 (arXiv 2206.03382), abstract",
          note="cross-node A100 + InfiniBand (2DH all-to-all, kernel and encode/decode "
               "gains over Fairseq's implementation); the estimator models one NVLink domain and no Fairseq"),
    Setup("tutel-8", "Tutel", "8x A100 80 GB (one Azure NDm A100 v4 node), single MoE layer",
          "speedup over fairseq's MoE", 8.49, "x",
          "Microsoft Research blog, \"Tutel: An efficient mixture-of-experts implementation for large DNN model "
          "training\" (2021-11), first section",
          note="one NVLink node, but the speedup is over fairseq's implementation (Tutel's encode/decode kernels "
               "and all-to-all against fairseq's); the estimator's baselines are optimised implementations of "
               "each schedule and it has no fairseq, so no counterpart"),
    Setup("tutel-2048", "Tutel", "2,048 A100, single MoE layer", "speedup over Fairseq MoE", 5.75, "x",
          "Tutel, MLSys 2023 (arXiv 2206.03382), abstract", note="as for 16 GPUs"),
    Setup("fastermoe", "FasterMoE", "-", "-", None, "-",
          "not found: github.com/laekov/fastmoe doc/fastermoe/README.md describes smart scheduling, "
          "shadowing and the topology-aware gate without figures; the artifact (github.com/laekov/fastermoe-ae, "
          "plotting/fig10.py) plots end-to-end speedups over DeepSpeed from logs the repository does not hold",
          note="no published figure of FasterMoE's own found; FasterMoE on one 8-GPU node: the COMET rows "
               "(COMET's speedup over FasterMoE)"),
    Setup("comet-layer", "COMET", "8-GPU H800/H100 server, Megatron-LM, single MoE layer",
          "speedup over the baselines (up to)", 1.96, "x",
          "COMET, MLSys 2025 (arXiv 2502.19811), abstract; Doubao team blog 2025-03-10",
          note="the figure aggregates models, parallel configurations and baselines "
               "(Megatron-Cutlass/TE, FasterMoE, Tutel); the single-layer figures' per-setup values were not in "
               "the sources found (the stored paper text ends before its evaluation). Its end-to-end figure's "
               "expert-parallel panels are the COMET rows below"),
    Setup("comet-flux-h800", "COMET (Flux kernels)", "8x H800, TP=8 EP=1, 32 experts top-4, M=8192, K=N=8192",
          "MoE layer0 (AllGather+scatter+GEMM) time", 1.146, "ms",
          "github.com/bytedance/flux docs/performance.md, \"MoE MLP\" table",
          note="tensor-parallel experts (every GPU holds a slice of every expert); the "
               "estimator models expert parallelism"),
    Setup("ccfuser", "CCFuser", "-", "-", None, "-", "not found (searched the docs, pages and code corpora)",
          note="no published figure found"),
    Setup("dualpipe", "DualPipe", "-", "pipeline bubble", None, "-",
          "github.com/deepseek-ai/DualPipe README.md: bubble (PP/2-1)(F&B+B-3W), formulas only; "
          "github.com/deepseek-ai/profile-data README.md: traces of DualPipe's chunk overlap at EP64",
          note="no measured figure: the README gives the bubble formula; the profile-data traces (a forward and "
               "a backward chunk of 4 MoE layers, EP64 TP1, 4K sequence) are cross-node (RDMA all-to-all) and "
               "give no single figure; the estimator models DualPipe's overlap of two micro-batches within a "
               "layer in one NVLink domain, not pipeline bubbles"),
]


# COMET's artifact (github.com/ZSL98/Megatron-LM at fd11ea94), as its (TP, EP) = (1, 8) runs use it
# (published_comet.SYSTEMS, .PARAMS): every MoE layer routes synthetic tokens by generate_scatter_index
# (megatron/test_forward/utils.py: each token takes the k experts with the most quota left, so every expert gets
# G M k / E rows; the forks of Tutel and FastMoE the artifact installs use the same indices), its experts are
# plain two-GEMM MLPs, Megatron all-gathers every token and reduce-scatters the whole output, flux's COMET
# fetches every other GPU's whole token shard under its GEMM-1, Tutel runs all-to-all, experts, all-to-all one
# after the other. The figure's Qwen2-MoE bars agree with the fork's e2e_timing_results.csv (its EP 8, TP 1
# rows, recorded after --swiglu left the launch scripts) within 1 ms at M = 4,096 and 2 ms at 8,192 (a pixel is
# 1.2 and 2.2 ms): the figure is that code's measurement.
WHY_MIXTRAL = ("Mixtral (one 4,096 x 14,336 expert per GPU): the published layer times do not fit the artifact's "
               "traffic at H800's link rate with one GEMM efficiency: Megatron's all-gather and reduce-scatter of "
               "every token (2 x 1.43 ms at 4,096 tokens/GPU, 164 GB/s) and its separate kernels (0.38 ms) leave "
               "its GEMMs 2.2 ms of the published 5.47 ms, 0.88 of BF16 peak, while COMET's 4.08 ms (GEMM-bound, "
               "its all-gather under GEMM-1) puts the same GEMMs at 0.5 or less. Missing: the machine's link rate "
               "(the figure names no GPU; the H800 is the team's announcement's, flux's artifact guide names 8x "
               "H100 and 8x L20) and the BF16 efficiency of flux's grouped GEMM on gathered rows against the "
               "grouped_gemm library's; no published figure isolates either")
WHY_MEGATRON = ("Megatron's costs on eight small (2,048 x 1,408) experts per GPU beyond those the nvls scheme "
                "charges (the all-gather and reduce-scatter at the link rate, one grouped GEMM per stage, the "
                "permutation, activation and unpermutation kernels at HBM speed): the router and its top-k, the "
                "host synchronisation on the token counts (token_dispatcher.py: tokens_per_expert.cpu()) and the "
                "grouped GEMM's per-expert costs; no published figure isolates them")
WHY_COMET_SMALL = ("COMET's costs on eight small (2,048 x 1,408) experts per GPU beyond those the comet scheme "
                   "charges (the all-gather of every token under GEMM-1, the partials under GEMM-2): flux's sort "
                   "and gather-index kernels and the host synchronisation on the split counts before its GEMM "
                   "(gemm_grouped_v3_ag_scatter.cc: stream_synchronize), the tiles' waits on the shards' flags and "
                   "the separate activation kernel between its two ops (moe_layer.py); no published figure "
                   "isolates them")
WHY_TUTEL = ("Tutel's costs beyond those the tutel scheme charges with its own code's (all-to-all, experts, "
             "all-to-all in sequence, the artifact's a2a_ffn_overlap_degree = 1; the FP32 encode and decode, the "
             "capacity slots on the links, the layout copies and bias additions: sim_models/impl_costs.py): the "
             "published Tutel layer is 0.6-1.7 ms longer than the estimate at 4,096 tokens/GPU (Mixtral 0.62, "
             "Phi-3.5-MoE 1.11, Qwen2-MoE 1.65 ms) and within 0.2 ms of it at 8,192 on Mixtral and Phi-3.5-MoE "
             "(Qwen2-MoE 1.0 ms): the published layer grows less than in proportion to the tokens, as a fixed cost "
             "per layer would make it. Missing: that fixed cost (Tutel's routing, some 10 k + 10 small kernels of "
             "gate, softmax, one-hot and cumsum, and the layer's Python on the host, which only hides behind "
             "kernels longer than its own time per operation); no published figure isolates it")
WHY_TUTEL_MIXTRAL = ("the Tutel layer's estimate is within 2% of the published one (9.34 against 9.14 ms); the "
                     "speedup inherits the COMET layer's estimate, 19% short on Mixtral: " + WHY_MIXTRAL)
WHY_FASTERMOE = ("FastMoE's costs beyond those the fastermoe scheme charges with its own code's (its plain "
                 "sequential layer, the per-pick rows on the links, a GEMM launch and an NCCL group per expert, the "
                 "bias broadcasts, the local scatter, gather and gate-weighting kernels, and 5 + 6 per local expert "
                 "host synchronisations at 5.8 us: sim_models/impl_costs.py): the published FasterMoE layer is "
                 "1.3-1.8 ms (Mixtral, Phi-3.5-MoE) and 5.2-6.1 ms (Qwen2-MoE, eight local experts) longer than the "
                 "estimate, about as much at 8,192 tokens/GPU as at 4,096: some 0.6 ms per local expert, not per "
                 "byte. Missing: the time per expert beyond the synchronisations' own (the host's Python and "
                 "PyTorch dispatch after each synchronisation, while the GPU idles: FMoE.expert_fn's loop, an "
                 "autograd Function and three tensor operations per FMoELinear call; cublasSgemmEx's kernel on "
                 "these BF16 shapes); no published figure isolates them")
# The COMET rows outside their tolerance and the mechanism each points to, by (model, M, quantity).
_COMET_WHY = {
    **{("Mixtral", m, q): WHY_MIXTRAL for m in (4096, 8192) for q in ("COMET", "over-Megatron-Cutlass")},
    ("Mixtral", 8192, "Megatron-Cutlass"): WHY_MIXTRAL,
    ("Qwen2-MoE", 4096, "Megatron-Cutlass"): WHY_MEGATRON, ("Qwen2-MoE", 4096, "over-Megatron-Cutlass"): WHY_MEGATRON,
    ("Qwen2-MoE", 8192, "COMET"): WHY_COMET_SMALL,
    **{(model, 4096, "over-Tutel"): WHY_TUTEL for model in ("Qwen2-MoE", "Phi-3.5-MoE")},
    ("Mixtral", 8192, "over-Tutel"): WHY_TUTEL_MIXTRAL,
    **{(model, m, "over-FasterMoE"): WHY_FASTERMOE for model in ("Qwen2-MoE", "Phi-3.5-MoE") for m in (4096, 8192)},
}


def _comet_setups() -> list[Setup]:
    """COMET's end-to-end figure, expert-parallel panels (:mod:`published_comet`): per model and M, the mean
    MoE layer time of Megatron-Cutlass and of COMET, and COMET's speedup over Megatron-Cutlass, Tutel and
    FasterMoE on the MoE layers; the estimator runs its own schemes for the same layer on ``hgx-h800``."""
    out = []
    for m in (4096, 8192):
        for model, spec in comet_fig.MODELS.items():
            where = f"8x H800 EP8, {model}, {m} tokens/GPU, BF16"
            src = comet_fig.SOURCE.format(m=m)
            common = dict(kind=None, system="hgx-h800", model=spec, tokens=m, dtype="bf16", params=comet_fig.PARAMS)
            first = not out
            for sysname in ("Megatron-Cutlass", "COMET"):
                out.append(Setup(
                    f"comet-e2e-{model}-{m}-{sysname}-layer", "COMET", where, f"{sysname} MoE layer time (mean)",
                    comet_fig.layer_ms(model, m, sysname), "ms", src,
                    **dict(common, kind="layer_time"), extra=dict(scheme=comet_fig.SYSTEMS[sysname]),
                    reason=_COMET_WHY.get((model, m, sysname), ""),
                    note=("(forward latency - attention-only latency) / MoE layers, bars read off the figure "
                          "(1 px = 1.2 ms at M=4096, 2.2 ms at M=8192); the artifact's shapes, non-gated experts "
                          "(published_comet.py). Estimate: the estimator's layer time of the scheme with the "
                          "artifact's schedule and traffic (published_comet.SYSTEMS, .PARAMS): Megatron-Cutlass: "
                          "nvls, the sequential all-gather of every token + grouped GEMM + reduce-scatter (Megatron's "
                          "allgather dispatcher); COMET: comet, its dispatch an all-gather of every token (flux's "
                          "AllGather+scatter)")
                    if first and sysname == "Megatron-Cutlass" else ""))
            for over in ("Megatron-Cutlass", "Tutel", "FasterMoE"):
                out.append(Setup(
                    f"comet-e2e-{model}-{m}-over-{over}", "COMET", where, f"speedup over {over} (MoE layers)",
                    comet_fig.speedup(model, m, "COMET", over), "x", src,
                    **dict(common, kind="speedup"),
                    extra=dict(scheme="comet", over=comet_fig.SYSTEMS[over]),
                    reason=_COMET_WHY.get((model, m, "over-" + over), ""),
                    note=("MoE-layer time of the baseline / COMET's (attention excluded). Estimate: the "
                          "ratio of the estimator's layer times, nvls / comet, tutel / comet, "
                          "fastermoe / comet (one estimate() per setup; tutel with one chunk, the artifact's "
                          "a2a_ffn_overlap_degree = 1; tutel and fastermoe with their own code's costs, "
                          "Params.impl_costs, sim_models/impl_costs.py: Tutel's FP32 encode/decode, capacity "
                          "slots on the links, layout copies and bias additions; FastMoE's plain sequential layer, "
                          "per-pick rows, a GEMM launch and an NCCL group per expert, its host synchronisations)") if first and over == "Megatron-Cutlass"
                    else ""))
    return out


SETUPS += _comet_setups()
# DeepGEMM's grouped FP8 GEMMs (the expert GEMM model's own validation, sim_models/gemm.py).
SETUPS += [
    Setup(f"deepgemm-{layout}-{g}x{m}-{n}x{k}{tag}", "DeepGEMM", f"H800, {layout} {g} x {m} rows, N={n}, K={k}",
          "grouped FP8 GEMM throughput", float(pub), "TFLOPS", DEEPGEMM.format(commit=commit, layout=layout),
          kind="deepgemm", system="hgx-h100", extra=dict(layout=layout, groups=g, m=m, n=n, k=k))
    for rows, commit, tag in ((DEEPGEMM_H800, "a6d97a1 (2025-02-25, first release)", ""),
                              (DEEPGEMM_H800_2025_03, "55ab91f (2025-03-25, \"Update performance\")", "-2025-03"))
    for layout, g, m, n, k, pub in rows
    if layout != "dense"
]
SETUPS = [dataclasses.replace(st, reason=WHY_DEEPGEMM) if st.key in (
    "deepgemm-masked-4x256-4096x7168", "deepgemm-masked-4x256-7168x2048") else st for st in SETUPS]

KINDS = ("link_rate", "deepep_dispatch_bw", "deepep_combine_bw", "allgather_busbw", "nvls_allreduce_busbw",
         "nvls_allgather_busbw",
         "deepgemm", "layer_time", "speedup")


def error_pct(estimate: float, published: float) -> float:
    """Signed error of the estimate relative to the published figure, in percent."""
    if not (isinstance(published, (int, float)) and published > 0):
        raise ValueError(f"published figure must be a positive number, got {published!r}")
    return 100.0 * (estimate - published) / published


def _model(spec) -> ModelConfig:
    return load_model(spec) if isinstance(spec, str) else ModelConfig(**spec)


def _phases(st: Setup, kind: str, cal: Calibration, params: Params):
    """(workload, context, dispatch s, combine s) of one traffic kind: the estimator's bulk phase times
    (``_standalone``) plus one kernel overhead per phase, as its sequential engine charges them."""
    model, system = _model(st.model), load_system(st.system)
    gpus = st.gpus or system.gpus
    sysx = system if gpus == system.gpus else system.replace(gpus=gpus)
    wl = build_workload(model.routed_experts, model.top_k, gpus, st.tokens, routing=st.routing, seed=params.seed,
                        tile=params.tile, n_group=model.n_group, topk_group=model.topk_group)
    ctx = _Context(model, sysx, params, cal, wl)
    tr = account(wl.dest, kind, payload_bytes(model.hidden, st.dtype), payload_bytes(model.hidden, "bf16"),
                 sysx.port_bytes_per_cycle, MAX_PAYLOAD)
    disp, comb = _standalone(ctx, tr, kind)
    return model, wl, ctx, disp + ctx.ko, comb + ctx.ko


def _estimate(st: Setup, cal: Calibration, cache: dict | None):
    """``estimate()`` of the setup's layer (prefill, its tokens, dtype and routing), shared through ``cache``
    by the rows of one setup."""
    key = (repr(st.model), st.system, st.gpus, st.tokens, st.dtype, st.routing, repr(st.params))
    if cache is not None and key in cache:
        return cache[key]
    params = Params(tokens_per_gpu=st.tokens, dtype=st.dtype, routing=st.routing, gpus=st.gpus, **st.params)
    e = estimate(_model(st.model), load_system(st.system), params, calibration=cal,
                 schemes=["deepep", "nvls", "tutel", "fastermoe", "comet"])
    if cache is not None:
        cache[key] = e
    return e


def run_setup(st: Setup, cal: Calibration | None = None, params: Params | None = None,
              cache: dict | None = None) -> dict:
    """The estimator's value of ``st``'s quantity (in ``st.unit``) and how it was obtained. ``cache`` (a dict)
    shares one ``estimate()`` among the layer-time and speedup rows of a setup."""
    cal = cal if cal is not None else load_calibration()
    params = params or Params(dtype=st.dtype)
    if st.kind is None:
        return {"estimate": None, "how": st.note}
    if st.kind not in KINDS:
        raise ValueError(f"setup {st.key!r}: unknown kind {st.kind!r}; valid: {', '.join(KINDS)}")
    if st.kind in ("layer_time", "speedup"):
        e = _estimate(st, cal, cache)
        x = st.extra
        for f in ("scheme",) + (("over",) if st.kind == "speedup" else ()):
            if x.get(f) not in e.results:
                raise ValueError(f"setup {st.key!r}: extra[{f!r}]={x.get(f)!r} is not one of the estimated "
                                 f"schemes ({', '.join(e.results)})")
        t = e.results[x["scheme"]].total
        if st.kind == "layer_time":
            return {"estimate": t * 1e3, "time_us": t * 1e6,
                    "how": f"estimate(): the {x['scheme']} scheme's layer time"}
        return {"estimate": e.speedup(x["over"], over=x["scheme"]), "time_us": t * 1e6,
                "how": f"estimate(): {x['over']} layer time / {x['scheme']} layer time"}
    if st.kind == "deepgemm":
        x = st.extra
        rows = deepgemm_validation(load_system(st.system), params.gemm_efficiency, params.mem_efficiency)
        r = next(r for r in rows if (r["layout"], r["groups"], r["m"], r["n"], r["k"])
                 == (x["layout"], x["groups"], x["m"], x["n"], x["k"]))
        return {"estimate": r["estimate"], "how": "gemm.deepgemm_validation (useful FLOPs / launch time)"}
    if st.kind == "link_rate":
        model = _shape("probe", 7168, 8, 1)
        _, _, ctx, _, _ = _phases(dataclasses.replace(st, model=model, tokens=1), "unicast", cal, params)
        pe = payload_efficiency(MAX_PAYLOAD, scheme="unicast", flit_bytes=ctx.flit, max_payload_bytes=MAX_PAYLOAD)
        return {"estimate": ctx.rate * pe / 1e9, "how": "payload bytes/s of the estimator's link rate"}
    if st.kind in ("deepep_dispatch_bw", "deepep_combine_bw"):
        model, wl, ctx, _, _ = _phases(st, "unicast", cal, params)
        version, sms = st.extra.get("version", deepep.CURRENT), st.extra.get("sms", params.deepep_sms)
        uni = account(wl.dest, "unicast", payload_bytes(model.hidden, st.dtype), payload_bytes(model.hidden, "bf16"),
                      ctx.flit, MAX_PAYLOAD)
        tr = deepep.deepep_traffic(uni, version, model.hidden, st.dtype, model.top_k, ctx.flit, MAX_PAYLOAD)
        lat = ctx.latencies("unicast", tiled=False)
        bd, bc = (t - l for t, l in zip(_standalone(ctx, tr, "unicast"), lat))
        disp, comb, detail = deepep.phase_times(ctx, tr, bd, bc, lat, sms, st.dtype, version)
        rows = wl.dest.hit.sum(axis=0).astype(float)          # rows each GPU receives, its own tokens included
        phase = "dispatch" if st.kind == "deepep_dispatch_bw" else "combine"
        row_bytes = deepep.counted_bytes(version, phase, model.hidden, st.dtype, model.top_k)
        t = (disp if phase == "dispatch" else comb) + ctx.ko
        nbytes = float(rows.mean()) * row_bytes
        return {"estimate": nbytes / t / 1e9, "time_us": t * 1e6, "bytes": nbytes, "deepep": detail[phase],
                "how": f"DeepEP's counted bytes (mean rows received per GPU, own tokens included) / the deepep "
                       f"scheme's phase time with DeepEP {version.upper()}'s copy protocol on {sms} SMs"}
    if st.kind == "allgather_busbw":
        model, wl, ctx, disp, _ = _phases(st, "unicast", cal, params)
        G = wl.gpus
        if not np.all(wl.dest.d_all == G):
            raise ValueError(f"setup {st.key!r}: the all-gather probe needs every token on every GPU")
        S = G * st.tokens * payload_bytes(model.hidden, st.dtype)
        return {"estimate": S / disp * (G - 1) / G / 1e9, "time_us": disp * 1e6, "bytes": S,
                "how": "unicast dispatch with every token to all G-1 peers = an all-gather of S bytes"}
    if st.kind == "nvls_allgather_busbw":
        model, wl, ctx, disp, _ = _phases(st, "nvls", cal, params)
        G = wl.gpus
        S = G * st.tokens * payload_bytes(model.hidden, st.dtype)
        # NCCL's NVLS all-gather multicasts every chunk to the whole group, the sender included (the NCCL
        # maintainer, nccl issue #1506: it "will transmit size in one direction"): each GPU's downlink carries
        # its own rows too, G/(G-1) of the nvls AllGather's, which writes them locally.
        tr = account(wl.dest, "nvls", payload_bytes(model.hidden, st.dtype), payload_bytes(model.hidden, "bf16"),
                     ctx.flit, MAX_PAYLOAD)
        ld, _ = ctx.latencies("nvls", tiled=False)
        bulk = max(float(np.max(tr.dispatch.up_wire)), float(np.max(tr.dispatch.down_wire)) * G / (G - 1))
        t = bulk / ctx.rate + ld + ctx.ko
        return {"estimate": S / t * (G - 1) / G / 1e9, "time_us": t * 1e6, "bytes": S,
                "how": "the nvls scheme's AllGather (dispatch: multimem.st of every token) of S bytes, each "
                       "GPU's own rows also through the switch (NCCL's multicast to the whole group)"}
    # nvls_allreduce_busbw
    model, wl, ctx, _, _ = _phases(st, "nvls", cal, params)
    t, S, extra = nvls_allreduce_time(ctx, model.hidden, st.tokens, st.extra.get("nvls_channels",
                                                                                 NVLS_CHANNELS_SM90))
    G = wl.gpus
    return {"estimate": S / t * 2 * (G - 1) / G / 1e9, "time_us": t * 1e6, "bytes": S, **extra,
            "how": "NCCL's single-node NVLS all-reduce of S bytes: per chunk multimem.ld_reduce then multimem.st, "
                   "pipelined over chunks and channels (both link directions busy), plus one loop's fill/drain"}


def validate(setups=None, cal: Calibration | None = None) -> list[dict]:
    """One row per setup: what, published (with source), estimate, signed error %, how."""
    cal = cal if cal is not None else load_calibration()
    out, cache = [], {}
    for st in (SETUPS if setups is None else setups):
        if not st.source:
            raise ValueError(f"setup {st.key!r} has no source")
        r = run_setup(st, cal, cache=cache)
        est = r.get("estimate")
        err = error_pct(est, st.published) if est is not None and st.published else None
        if not (isinstance(st.tolerance, (int, float)) and st.tolerance > 0):
            raise ValueError(f"setup {st.key!r}: tolerance must be a positive percentage, got {st.tolerance!r}")
        row = {"key": st.key, "baseline": st.baseline, "setup": st.setup, "quantity": st.quantity,
               "published": st.published, "unit": st.unit, "source": st.source, "estimate": est,
               "error_pct": err, "note": st.note, "how": r.get("how", ""), "time_us": r.get("time_us"),
               "bytes": r.get("bytes"), "tolerance_pct": float(st.tolerance), "reason": st.reason}
        row["status"] = status(row)
        if "before" in r:
            row["before"] = r["before"]
            row["error_before_pct"] = error_pct(r["before"], st.published)
        out.append(row)
    return out


def status(row: dict) -> str:
    """One of :data:`STATUSES`: a row with an estimate is within its tolerance or outside it, with or without
    a stated reason; a row without one has no counterpart in the estimator, or no published figure."""
    if row["error_pct"] is None:
        return "no counterpart" if row["published"] is not None else "no figure"
    inside = abs(row["error_pct"]) <= row["tolerance_pct"]
    if inside:
        return "within, stale reason" if row["reason"].strip() else "within"
    return "outside, reason stated" if row["reason"].strip() else "OUTSIDE, no reason"


def failures(rows: list[dict]) -> list[dict]:
    """The rows that fail the validation: outside their tolerance with no stated reason, or inside it while
    still stating one."""
    return [r for r in rows if r["status"] in FAILING]


def _fmt(v, unit):
    if v is None:
        return "-"
    if unit == "x":
        return f"{v:.2f}"
    return f"{v:,.3g}" if unit == "ms" else f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}"


def summary(rows: list[dict]) -> list[dict]:
    """Per (baseline, quantity) with two or more estimated rows: the row count, the published and estimated
    means (geometric for speedups, arithmetic otherwise) and the mean absolute error."""
    groups = {}
    for r in rows:
        if r["estimate"] is not None:
            groups.setdefault((r["baseline"], r["quantity"], r["unit"]), []).append(r)
    out = []
    for (baseline, quantity, unit), rs in groups.items():
        if len(rs) < 2:
            continue
        pub = np.array([r["published"] for r in rs], float)
        est = np.array([r["estimate"] for r in rs], float)
        mean = (lambda a: float(np.exp(np.log(a).mean()))) if unit == "x" else (lambda a: float(a.mean()))
        out.append({"baseline": baseline, "quantity": quantity, "unit": unit, "rows": len(rs),
                    "published_mean": mean(pub), "estimate_mean": mean(est),
                    "mean_abs_error_pct": float(np.mean([abs(r["error_pct"]) for r in rs]))})
    return out


def markdown(rows: list[dict]) -> str:
    """The validation table (Markdown, via tabulate), the numbered notes its rows refer to, then the groups of
    rows that measure one quantity on several setups (:func:`summary`)."""
    from tabulate import tabulate
    table, notes = [], {}                    # note text -> its number (rows sharing a note share its number)

    def ref(text):
        return f" [{notes.setdefault(text, len(notes) + 1)}]" if text else ""
    for r in rows:
        ref_note = ref(r["note"])
        why = ref(r["reason"] and "outside the tolerance: " + r["reason"])
        if r["estimate"] is None:
            est, err, tol = "-", r["status"] + ref_note, "-"
        else:
            est, err = _fmt(r["estimate"], r["unit"]), f"{r['error_pct']:+.0f}%{ref_note}"
            tol = f"±{r['tolerance_pct']:.0f}%: {r['status']}{why}"
        pub = f"{_fmt(r['published'], r['unit'])} {r['unit']}" if r["published"] is not None else "not found"
        table.append([r["baseline"], r["setup"], r["quantity"], pub, r["source"], est, err, tol])
    out = tabulate(table, headers=["baseline", "setup", "quantity", "published", "source", "estimate", "error",
                                   "tolerance"], tablefmt="github")
    sums = [[g["baseline"], g["quantity"], g["rows"], f"{_fmt(g['published_mean'], g['unit'])} {g['unit']}",
             f"{_fmt(g['estimate_mean'], g['unit'])} {g['unit']}", f"{g['mean_abs_error_pct']:.0f}%"]
            for g in summary(rows)]
    means = tabulate(sums, headers=["baseline", "quantity", "rows", "published mean", "estimate mean",
                                    "mean abs. error"], tablefmt="github")
    return (out + "\n\n" + "\n".join(f"[{i}] {n}" for n, i in notes.items()) + "\n\n"
            + "Groups of rows (means: geometric for speedups, arithmetic otherwise):\n\n" + means)
