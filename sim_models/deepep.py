"""DeepEP's copy protocol: the bytes its normal (high-throughput) kernels store per token, and the rate at which
its SMs can keep them moving.

Read from DeepEP's source (github.com/deepseek-ai/DeepEP):

* **V1** (``csrc/kernels/legacy/intranode.cu``, ``dispatch`` / ``combine``; ``deep_ep/buffers/legacy.py``):
  at most 8 ranks in one NVLink domain (``LEGACY_NUM_MAX_NVL_PEERS``). ``num_sms`` SMs form ``num_sms / 2``
  channels, an even SM sending and an odd one receiving; the sender SM's 768 threads are split over the ranks,
  each rank group a flow into a ring of ``num_max_nvl_chunked_recv_tokens`` slots in the receiver's memory.
  Per chunk of ``num_max_nvl_chunked_send_tokens`` tokens a flow reads the receiver's head index over NVLink
  (``ld_volatile_global``: one round trip), copies the chunk's tokens (``st_na_global``) and publishes its tail
  with a system-scope release (``st_release_sys_global``: its writes must be acknowledged first, one more round
  trip). Per token it stores the hidden vector, the FP8 scales (one 4-B store per lane), the source index,
  the top-k indices (``topk_idx_t``: int64) and weights as separate stores; the combine sends the hidden
  vector, the source index and the top-k weights.
* **V2** (``deep_ep/include/deep_ep/impls/dispatch.cuh``, ``combine.cuh``; ``csrc/kernels/elastic/``): every
  warp of every SM is a channel with one token buffer in shared memory (as many warps as the SM's shared
  memory holds token buffers, at most 32 less 4 notify warps): it TMA-loads a token, TMA-stores it (hidden,
  scales and metadata in one bulk store of ``layout::TokenLayout``) to each destination rank, and waits for
  those stores to complete (``cp.async.bulk.wait_group 0``: the remote writes acknowledged) before it loads
  the next token.

So each SM keeps a bounded number of bytes in flight and waits a round trip per chunk (V1) or per token (V2):
:func:`issue_rate` is that closed loop (mean-value analysis of a closed queueing network, Reiser and Lavenberg
1980: the SM's write issue at DeepEP's own per-SM rate as the queue, the round trips as the delay), and the
kernel moves its bytes at the lower of that rate and the links' (:func:`phase_times`). The round trip is two
of the estimator's traversals (``estimator._Context.l_trav``: link, switch, link), so it moves with the link-
and switch-latency rows of the tornado. The SMs' local loads (V2's TMA load, V1's ``__ldg``) are not charged a
latency (no published figure): the rate is an upper bound, the conservative side for DySHARP's speedups.
"""

import dataclasses
import math

import numpy as np

from hw.packet import wire_flits

from .traffic import SCALE_BYTES, SCALE_GROUP, SchemeTraffic

__all__ = ["VERSIONS", "CURRENT", "PHASES", "V1_MAX_RANKS", "SM_WRITE_BYTES_PER_S", "V1_CHUNK_TOKENS", "SMEM_BYTES",
           "stores", "counted_bytes", "wire_bytes", "issue_rate", "deepep_traffic", "phase_times"]

VERSIONS = ("v1", "v2")
CURRENT = "v2"                   # the kernels the deepep scheme runs: V2, DeepEP's current ones (README: "up to
#                                  1.3x peak performance" over V1, any NVLink domain size); V1 for its own rows
PHASES = ("dispatch", "combine")
V1_MAX_RANKS = 8                 # LEGACY_NUM_MAX_NVL_PEERS: V1's intranode kernels span at most 8 ranks
SM_WRITE_BYTES_PER_S = 50e9      # DeepEP V2 deep_ep/buffers/elastic.py, get_theoretical_num_sms: sm_write_gbs = 50
#                                  (the NVLink writes one SM issues; "TODO: use different values for other
#                                  architectures": the same figure on Hopper and Blackwell)
V1_THREADS = 768                 # intranode.cu: kNumThreads of the dispatch and combine kernels
# deep_ep/buffers/legacy.py, get_dispatch_config(8) / get_combine_config(8): num_max_nvl_chunked_send_tokens
V1_CHUNK_TOKENS = {"dispatch": 6, "combine": 4}
V1_TOPK_IDX_BYTES = 8            # topk_idx_t = int64 (deep_ep/include/deep_ep/common/compiled.cuh,
#                                  EP_NUM_TOPK_IDX_BITS = 64)
V2_NOTIFY_WARPS = 4              # csrc/kernels/elastic/dispatch.hpp: kNumNotifyWarps
V2_MAX_WARPS = 32                # warps per SM (1,024 threads)
TMA_ALIGN = 16                   # ptx::kNumTMAAlignBytes: each TokenLayout part is 16-B aligned
MBARRIER_BYTES = 16              # the token buffer's mbarrier in shared memory, aligned
SMEM_BYTES = 232_448             # sharedMemPerBlockOptin on Hopper and Blackwell (227 KB: CUDA C++ Programming
#                                  Guide, "Technical Specifications per Compute Capability", 9.0 and 10.0)


def _check(version, phase, dtype):
    if version not in VERSIONS:
        raise ValueError(f"unknown DeepEP version {version!r}; valid: {', '.join(VERSIONS)}")
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; valid: {', '.join(PHASES)}")
    if dtype not in ("fp8", "bf16"):
        raise ValueError(f"unknown dtype {dtype!r}; valid: fp8, bf16")


def _align(n: int) -> int:
    return -(-n // TMA_ALIGN) * TMA_ALIGN


def stores(version: str, phase: str, hidden: int, dtype: str, top_k: int) -> list[int]:
    """Payload bytes of each separate store one token copy makes (the dispatch in ``dtype``, the combine BF16)."""
    _check(version, phase, dtype)
    x = hidden if (phase == "dispatch" and dtype == "fp8") else 2 * hidden
    scales = SCALE_BYTES * math.ceil(hidden / SCALE_GROUP) if (phase == "dispatch" and dtype == "fp8") else 0
    if version == "v1":
        if phase == "combine":
            return [x, 4, 4 * top_k]                                   # hidden, src index, top-k weights
        lane_groups = [min(32 * SCALE_BYTES, scales - i) for i in range(0, scales, 32 * SCALE_BYTES)]
        return [x, *lane_groups, 4, V1_TOPK_IDX_BYTES * top_k, 4 * top_k]   # + src index, top-k idx, weights
    # V2: one bulk store of layout::TokenLayout (hidden, scales, metadata; each part 16-B aligned). Metadata:
    # top-k indices (int32) and weights, plus the source index and the per-pick slots in the dispatch.
    meta = top_k * 8 + ((1 + top_k) * 4 if phase == "dispatch" else 0)
    return [_align(x) + (_align(scales) if scales else 0) + _align(meta)]


def counted_bytes(version: str, phase: str, hidden: int, dtype: str, top_k: int) -> int:
    """The bytes per received row DeepEP's benchmarks divide by the kernel time: V1 (tests/legacy/
    test_intranode.py) the hidden vector and its FP8 scales; V2 (tests/elastic/test_ep.py, ``count_bytes``)
    also the received top-k indices (int64) and weights (dispatch) or the top-k weights (combine)."""
    _check(version, phase, dtype)
    x = hidden if (phase == "dispatch" and dtype == "fp8") else 2 * hidden
    scales = SCALE_BYTES * math.ceil(hidden / SCALE_GROUP) if (phase == "dispatch" and dtype == "fp8") else 0
    if version == "v1":
        return x + scales
    return x + scales + (8 * top_k + 4 * top_k if phase == "dispatch" else 4 * top_k)


def wire_bytes(store_sizes: list[int], flit_bytes: int, max_payload_bytes: int) -> int:
    """Wire bytes of a token copy's stores: each its own packet stream (:func:`hw.packet.wire_flits`)."""
    return sum(wire_flits(s, scheme="dynamic", flit_bytes=flit_bytes, max_payload_bytes=max_payload_bytes)
               for s in store_sizes) * flit_bytes


def _mva(customers: int, demand: float, think: float) -> float:
    """Throughput (cycles/s) of a closed network of ``customers``, one FCFS queue of service ``demand`` s and a
    delay of ``think`` s (exact mean-value analysis)."""
    q = 0.0
    x = 0.0
    for n in range(1, customers + 1):
        r = demand * (1.0 + q)
        x = n / (think + r)
        q = x * r
    return x


def issue_rate(version: str, phase: str, sms: int, gpus: int, token_bytes: int, copies: float,
               rtt: float) -> dict:
    """Bytes/s of token copies (their stores' payload) one GPU's DeepEP kernel on ``sms`` SMs can keep moving,
    whatever the links: each SM's write issue (``SM_WRITE_BYTES_PER_S``) shared by its flows (V1: one per rank
    on each sender SM, a chunk per cycle, two round trips per chunk; V2: one per warp, ``copies`` stores of a
    token per cycle, one round trip per token). ``copies``: mean copies per token (V2's dispatch stores a token
    once per destination rank). Returns the rate and the loop's parameters."""
    if not (isinstance(sms, int) and sms >= 2 and sms % 2 == 0):
        raise ValueError(f"sms={sms!r}: DeepEP runs on an even number of SMs, at least 2")
    _check(version, phase, "bf16")
    if version == "v1" and gpus > V1_MAX_RANKS:
        raise ValueError(f"DeepEP V1's intranode kernels span at most {V1_MAX_RANKS} ranks, not {gpus}")
    r = SM_WRITE_BYTES_PER_S
    if version == "v1":
        k = V1_CHUNK_TOKENS[phase]
        per_cycle = k * token_bytes
        senders = sms // 2
        flows = gpus
        x = _mva(flows, per_cycle / r, 2 * rtt)
        # The receiver SMs copy every arrived token out of the ring (TMA load and store), one per channel,
        # at the same per-SM write rate: a second cap on the same bytes.
        return {"rate": min(senders * x * per_cycle, senders * r), "issuing_sms": senders, "flows_per_sm": flows,
                "bytes_per_cycle": per_cycle, "round_trips_per_cycle": 2}
    buf = token_bytes + MBARRIER_BYTES
    notify = V2_NOTIFY_WARPS if phase == "dispatch" else 0
    warps = max(1, min(SMEM_BYTES // buf, V2_MAX_WARPS - notify))
    per_cycle = copies * token_bytes
    x = _mva(warps, per_cycle / r, rtt)
    return {"rate": sms * x * per_cycle, "issuing_sms": sms, "flows_per_sm": warps, "bytes_per_cycle": per_cycle,
            "round_trips_per_cycle": 1}


def deepep_traffic(uni: SchemeTraffic, version: str, hidden: int, dtype: str, top_k: int, flit_bytes: int,
                   max_payload_bytes: int) -> SchemeTraffic:
    """The unicast traffic with DeepEP's stores per token copy: every wire array of the dispatch and the
    combine scaled by DeepEP's wire bytes per copy over the unicast copy's (the unicast arrays are copies x
    bytes per copy). ``dtype``: the pass's dispatch dtype (a training backward pass sends BF16 both ways)."""
    disp = wire_bytes(stores(version, "dispatch", hidden, dtype, top_k), flit_bytes, max_payload_bytes)
    comb = wire_bytes(stores(version, "combine", hidden, "bf16", top_k), flit_bytes, max_payload_bytes)
    fd, fc = disp / uni.costs.disp_copy, comb / uni.costs.comb_copy
    scale = lambda p, f: dataclasses.replace(p, up_wire=p.up_wire * f, down_wire=p.down_wire * f)  # noqa: E731
    costs = dataclasses.replace(uni.costs, disp_copy=disp, comb_copy=comb)
    return SchemeTraffic(uni.scheme, scale(uni.dispatch, fd), scale(uni.combine, fc), costs)


def phase_times(ctx, tr: SchemeTraffic, bulk_disp: float, bulk_comb: float, latency: tuple[float, float],
                sms: int, dtype: str, version: str = CURRENT) -> tuple[float, float, dict]:
    """DeepEP's dispatch and combine times on ``ctx`` (an ``estimator._Context``): the links' bulk time of its
    traffic (``bulk_*``, busiest direction) or the time its SMs need to keep the copies moving
    (:func:`issue_rate`, busiest GPU's copies, its own rows included), whichever is longer, plus one
    traversal's latency each. Returns (dispatch s, combine s, detail)."""
    wl, m = ctx.wl, ctx.m
    rtt = 2 * ctx.l_trav
    copies = np.bincount(wl.dest.src, weights=wl.dest.d_all.astype(float), minlength=ctx.G)   # per home GPU
    out, detail = [], {"version": version, "sms": sms, "rtt_us": rtt * 1e6}
    for phase, bulk, lat in (("dispatch", bulk_disp, latency[0]), ("combine", bulk_comb, latency[1])):
        tok = sum(stores(version, phase, m.hidden, dtype if phase == "dispatch" else "bf16", m.top_k))
        # Copies a GPU's SMs store: the dispatch sends each token once per destination GPU (its own included);
        # the combine sends back one partial per (token, GPU) pair it served.
        n = float(np.max(copies)) if phase == "dispatch" else float(np.max(np.bincount(
            wl.pair_gpu, minlength=ctx.G)))
        per_token = float(np.mean(wl.dest.d_all)) if (version == "v2" and phase == "dispatch") else 1.0
        iss = issue_rate(version, phase, sms, ctx.G, tok, per_token, rtt)
        rate = iss["rate"] * ctx.p.bandwidth_scale
        t_issue = n * tok / rate
        out.append(max(bulk, t_issue) + lat)
        detail[phase] = {"bulk_us": bulk * 1e6, "issue_us": t_issue * 1e6, "issue_rate_gbs": rate / 1e9,
                         "bound": "issue" if t_issue > bulk else "links", **{k: v for k, v in iss.items()
                                                                             if k != "rate"}}
    return out[0], out[1], detail
