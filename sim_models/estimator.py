"""End-to-end MoE layer-time estimator: DySHARP against DeepEP, NVLS, Tutel, FasterMoE, COMET, CCFuser and
DualPipe, plus the DySHARP ablations.

``estimate(model, system, Params(...))`` draws a routing (seeded), builds the layer's tile structure
(:mod:`workload`), accounts the traffic of each scheme (:mod:`traffic`) and times each scheme with its
engine:

===================  ==========  ==================================================================
scheme               traffic     engine (overlap policy)
===================  ==========  ==================================================================
deepep               unicast     sequential: dispatch, then all GEMMs, then combine (3 kernels), plus
                                 the permute / activation / unpermute kernels (``UNFUSED_KERNELS``)
nvls                 nvls        sequential AllGather + GEMMs + ReduceScatter over static groups
tutel                unicast     token chunks pipelined (comm of one chunk under GEMMs of another);
                                 the best degree of ``tutel_degrees`` (Tutel's adaptive pipelining)
fastermoe            unicast     FasterMoE's pairwise exchange: local tokens first, then the remote peers
                                 in offset order batched into 1, 2, 4 or 8 chunks (the best)
comet                unicast     tile-level: dispatch || GEMM-1, then GEMM-2 || combine (2 kernels)
ccfuser              unicast     tile-level fused dispatch-GEMM-combine (one kernel), SM-driven comm
dualpipe             unicast     two micro-batches, comm of one under the GEMMs of the other
                                 (training: a forward and a backward chunk overlapped)
dysharp-basic        dynamic     sequential, dynamic multimem (no fusion)
dysharp-comet        dynamic     COMET-style tile-level overlap with dynamic multimem
dysharp-explicit     explicit    DySHARP-full with explicit per-destination addresses
dysharp              dynamic     token-centric fused pipeline (:func:`pipeline.run_pipeline`), with the
                                 faster of its pull (ld_reduce) and push combines (``Params.combine``)
===================  ==========  ==================================================================

Every figure comes from the model and system configs, the calibration figures and the ``Params``;
``docs/estimator.md`` lists each assumption with its source. Nothing is fitted to a published speedup. The
separate-kernel schemes (deepep, nvls, tutel, fastermoe, dualpipe, dysharp-basic) also run the memory-bound
kernels around their grouped GEMMs (:data:`UNFUSED_KERNELS`); the tile-level ones fold them into the GEMMs.
"""

import collections
import dataclasses
import math

import numpy as np

from hw.packet import payload_efficiency, wire_flits

from . import deepep, impl_costs
from .calibration import Calibration, load_calibration
from .gemm import GemmModel, dtype_efficiency
from .moe_config import ModelConfig
from .pipeline import PipelineInputs, run_pipeline
from .routing import expected_distinct_gpus
from .schedule import list_schedule
from .system_config import SystemConfig
from .traffic import DTYPES, SchemeTraffic, TokenDestinations, account, dispatch_row_bytes, payload_bytes
from .workload import Workload, build_workload

__all__ = ["MODES", "COMBINES", "SCHEMES", "BASELINES", "ABLATIONS", "FULL", "UNFUSED_KERNELS", "Params", "SchemeResult", "Estimate",
           "estimate", "DEFAULT_TOKENS"]

MODES = ("prefill", "decode", "training")
# Prefill/training: DeepEP README's normal-kernel setting (4096 tokens per batch, DeepSeek-V3/R1 pretraining);
# decode 64: assumption (DeepEP's low-latency tests use 128 per batch); --sensitivity 512..16384 and 1..256.
DEFAULT_TOKENS = {"prefill": 4096, "training": 4096, "decode": 64}
WEIGHT_REUSE = ("l2", "expert")
# DySHARP-full's combine (``Params.combine``): "pull" = dymultimem.ld_reduce (the home requests, the switch
# reads and reduces the partials: one result per token on the home's downlink), "push" = the expert GPUs
# store their partials at the home (d partials on its downlink; the home sums them, as CCFuser's does),
# "auto" = the faster of the two for the layer (a runtime that can issue either picks per layer shape).
COMBINES = ("auto", "pull", "push")
HBM_SPLITS = ("sms", "equal")
MAX_PAYLOAD = 256          # bytes of payload per packet (hw.packet's default max_payload_bytes)
# The schemes that run DeepEP's kernels (its copy protocol: sim_models.deepep). Megatron's MoE layer in the COMET
# validation rows (its all-gather token dispatcher) is timed as the nvls scheme (sim_models.published_comet).
DEEPEP_SCHEMES = ("deepep",)


@dataclasses.dataclass(frozen=True)
class SchemeSpec:
    name: str
    label: str
    traffic: str
    engine: str


SCHEMES = {s.name: s for s in [
    SchemeSpec("deepep", "DeepEP (sequential)", "unicast", "sequential"),
    SchemeSpec("nvls", "NVLS static (AG+RS)", "nvls", "sequential"),
    SchemeSpec("tutel", "Tutel (chunked)", "unicast", "tutel"),
    SchemeSpec("fastermoe", "FasterMoE (per-peer)", "unicast", "fastermoe"),
    SchemeSpec("comet", "COMET (tile overlap)", "unicast", "comet"),
    SchemeSpec("ccfuser", "CCFuser (fused)", "unicast", "fused"),
    SchemeSpec("dualpipe", "DualPipe (2 micro-batches)", "unicast", "dualpipe"),
    SchemeSpec("dysharp-basic", "DySHARP-Basic", "dynamic", "sequential"),
    SchemeSpec("dysharp-comet", "DySHARP-COMET", "dynamic", "comet"),
    SchemeSpec("dysharp-explicit", "DySHARP explicit addr.", "explicit", "fused"),
    SchemeSpec("dysharp", "DySHARP (full)", "dynamic", "fused"),
]}
BASELINES = ("deepep", "nvls", "tutel", "fastermoe", "comet", "ccfuser", "dualpipe")
ABLATIONS = ("dysharp-basic", "dysharp-comet", "dysharp-explicit")
FULL = "dysharp"


@dataclasses.dataclass(frozen=True)
class Params:
    """The estimate's inputs. Each default's source, or the word *assumption* with the range the tornado
    (``sim_models.sensitivity.ASSUMPTIONS``, ``dysharp estimate --tornado``) moves it over; the table is
    docs/estimator.md, "Assumptions and their sources"."""
    mode: str = "prefill"
    tokens_per_gpu: int | None = None        # None: DEFAULT_TOKENS[mode]
    routing: str = "auto"                    # group-limited where the model has a limit (MISSION.md's table),
    #                                          else uniform; skew: tornado 0..1, --sensitivity 0..1
    placement: str = "contiguous"
    dtype: str = "fp8"                       # dispatch and GEMM dtype (combine is always BF16): DeepSeek-V3
    #                                          (MISSION.md); --sensitivity compares bf16
    tile: int = 128                          # MISSION.md: the token tracker's 128-token tile; --sensitivity 32..512
    gemm_efficiency: float = 0.6             # FP8 GEMMs: DeepGEMM README: 1,093-1,297 of 1,979 TFLOPS (0.55-0.66);
    #                                          tornado 0.45..0.75
    bf16_gemm_efficiency: float | None = None  # BF16 GEMMs; None: gemm_efficiency x 2 / 1.75 (cuBLAS 12.9: block-
    #                                          scaled FP8 1.75x BF16 on large matmuls; gemm.dtype_efficiency)
    mem_efficiency: float = 0.75             # DeepGEMM README: memory-bound 2.2-2.6 of 3.35 TB/s, L2-warm; tornado 0.6..0.9
    comm_sms: int = 24                       # SMs a DeepEP-like kernel needs to keep the links busy: DeepEP
    #                                          README (24 of 132 on H800; MISSION.md 20-24); tornado 0..48
    deepep_sms: int = 24                     # SMs the deepep scheme's DeepEP kernels run on (sim_models.deepep):
    #                                          DeepEP V1's intranode benchmark (tests/legacy/test_intranode.py)
    #                                          and V2's "Min #SM" row (README); not varied (its copy loop does
    #                                          not bind above 12 SMs on these systems: docs/estimator.md)
    deepep_protocol: bool = True             # the deepep scheme runs DeepEP's copy protocol (its stores per token,
    #                                          its SMs' copy loop: sim_models.deepep); False: plain unicast copies
    #                                          of the rows at the link rate (the RTL's deepep scheme, which is not
    #                                          DeepEP's kernels: sim_models.rtl_scale should pass False)
    dualpipe_sms: int = 20                   # DeepSeek-V3's communication SMs under DualPipe (technical report);
    #                                          tornado 10..32
    explicit_sm_fraction: float = 0.15       # SMs lost to address computation with explicit addressing:
    #                                          MISSION.md 10-20%; tornado 0.10..0.20
    per_tile_weights: bool = False           # tile-level schemes re-read expert weights per tile, no L2 reuse
    weight_reuse: str = "expert"             # tile-level schemes' weight traffic: "expert" (once per expert,
                                             # its tiles scheduled as one grouped GEMM's M-blocks) or "l2" (tiles
                                             # in ready order, each re-reads its expert's weights unless L2 holds them)
                                             # assumption; the tornado's other end is "l2"
    block_m: int | None = 64                 # tensor-core M block (rows): Hopper wgmma is 64 rows per warpgroup;
    #                                          None: the earlier model (rows padded to the tile, no waves)
    block_n: int = 128                       # CTA block N (DeepGEMM's usual BLOCK_N)
    gemm_pipeline_costs: bool = True         # each GEMM block's epilogue and each launch's prologue (DeepGEMM's
    #                                          kernel: gemm.GemmModel.epilogue, prologue); tornado: off
    bandwidth_scale: float = 1.0             # scales links, switch datapath and reduction engines (a knob, 1 = as given)
    latency_scale: float = 1.0               # scales every latency and kernel overhead (a knob, 1 = as given)
    row_meta_bytes: int = 0                  # per-token metadata (gate weights, expert ids) each dispatched row
    #                                          carries in flits of its own after the hidden vector
    #                                          (traffic.dispatch_row_bytes); 0: the hidden vector alone (the
    #                                          deepep scheme's DeepEP layout has its own: sim_models.deepep).
    #                                          sim_models.rtl_scale passes the RTL row's gate + metadata flits
    nvls_issuer_in_group: bool = False       # nvls: the static group includes the issuing GPU, so its own rows
    #                                          cross the switch too and its own partial is read through it
    #                                          (traffic.account; the RTL switch's group table does this:
    #                                          sim_models.rtl_scale passes True); False: own rows kept local
    unfused_kernels: bool = True             # the separate-kernel schemes' permutation, activation and
    #                                          unpermutation kernels (UNFUSED_KERNELS); False: the GEMMs alone
    #                                          (the RTL-scaled layer, which has no such kernels)
    gpus: int | None = None                  # override the system's GPU count; --sensitivity 8..72
    seed: int = 0
    slots: int = 300                         # time resolution of the tile-level engine (numerical: 300 vs 1000
    #                                          slots within 1.1%, docs/estimator.md)
    tutel_degrees: tuple = (1, 2, 4, 8)      # chunk counts tried (best taken): assumption, the search space of
    #                                          Tutel's adaptive pipelining degree and of FasterMoE's peer batching
    combine: str = "auto"                    # DySHARP-full's combine (COMBINES): pull (ld_reduce), push (partials
    #                                          stored at the home) or auto (the faster per layer: docs/estimator.md);
    #                                          tornado: pull / push
    combine_window: int | None = None        # ld_reduce requests (packets) a home GPU keeps in flight in a pull
    #                                          combine (pull_window_rate): None, unbounded (full size: the
    #                                          issuing SMs' loads, docs/estimator_engines.md); the RTL-scaled
    #                                          prediction passes the NIC's tags (sim_models.rtl_scale)
    read_latency_ns: float = 0.0             # an expert GPU's read of its partial before its answer leaves; enters
    #                                          only the window's round trip (the RTL's memory model: 10 cycles)
    combine_link_share: float = 0.5          # the least share of a link the tile engines give the combine while
    #                                          dispatch has backlog (0.5: max-min fair); assumption, tornado 0.25..0.75
    hbm_split: str = "sms"                   # fused stages' HBM split when both saturate: "sms" (by SM count, each
    #                                          SM a bounded number of loads in flight) or "equal"; assumption, tornado
    comm_sm_duty: bool = True                # overlapped schemes reserve ceil(pool x phi) comm SMs (COMET-style
    #                                          adaptive sizing); False: the whole pool; assumption, tornado
    allgather_dispatch: tuple = ()           # unicast schemes whose dispatch is an all-gather: every token to
    #                                          every other GPU, whatever its experts (flux's AllGather+scatter
    #                                          as COMET's artifact runs it); their combine still sends one
    #                                          partial per (token, GPU) pair. (): every scheme sends each token
    #                                          only to the GPUs of its experts. Not varied (a workload fact)
    impl_costs: tuple = ()                   # schemes charged their reference code's own costs as COMET's
    #                                          artifact runs it (sim_models.impl_costs: Tutel's FP32 encode/
    #                                          decode, slots on the links, layout copies and bias additions;
    #                                          FastMoE's plain sequential layer, host syncs, a GEMM launch and an
    #                                          NCCL group per expert). (): the optimised schedules. Not varied
    #                                          (a workload fact of the validation rows)

    def validate(self):
        def bad(field, what):
            raise ValueError(f"{field}={getattr(self, field)!r}: {what}")
        if self.mode not in MODES:
            bad("mode", f"valid: {', '.join(MODES)}")
        if self.dtype not in DTYPES:
            bad("dtype", f"valid: {', '.join(DTYPES)}")
        if self.tokens_per_gpu is not None and not (isinstance(self.tokens_per_gpu, int) and self.tokens_per_gpu >= 1):
            bad("tokens_per_gpu", "must be an integer >= 1")
        if not (isinstance(self.tile, int) and 1 <= self.tile <= 4096):
            bad("tile", "must be an integer in 1..4096")
        for f in ("gemm_efficiency", "mem_efficiency"):
            if not 0 < getattr(self, f) <= 1:
                bad(f, "must be in (0, 1]")
        if self.bf16_gemm_efficiency is not None and not 0 < self.bf16_gemm_efficiency <= 1:
            bad("bf16_gemm_efficiency", "must be in (0, 1], or None (derived from gemm_efficiency)")
        if self.combine_window is not None and not (isinstance(self.combine_window, int)
                                                    and not isinstance(self.combine_window, bool)
                                                    and self.combine_window >= 1):
            bad("combine_window", "must be an integer >= 1 (ld_reduce requests in flight per GPU), or None "
                "(unbounded)")
        if not (isinstance(self.read_latency_ns, (int, float)) and self.read_latency_ns >= 0):
            bad("read_latency_ns", "must be a number >= 0")
        if not 0 < self.combine_link_share < 1:
            bad("combine_link_share", "must be in (0, 1)")
        if self.hbm_split not in HBM_SPLITS:
            bad("hbm_split", f"valid: {', '.join(HBM_SPLITS)}")
        if self.combine not in COMBINES:
            bad("combine", f"valid: {', '.join(COMBINES)}")
        if self.weight_reuse not in WEIGHT_REUSE:
            bad("weight_reuse", f"valid: {', '.join(WEIGHT_REUSE)}")
        if self.block_m is not None and not (isinstance(self.block_m, int) and 1 <= self.block_m <= 1024):
            bad("block_m", "must be an integer in 1..1024, or None (the earlier GEMM model)")
        if not (isinstance(self.block_n, int) and 1 <= self.block_n <= 1024):
            bad("block_n", "must be an integer in 1..1024")
        if not isinstance(self.gemm_pipeline_costs, bool):
            bad("gemm_pipeline_costs", "must be True or False")
        if not (isinstance(self.deepep_sms, int) and self.deepep_sms >= 2 and self.deepep_sms % 2 == 0):
            bad("deepep_sms", "must be an even integer >= 2 (DeepEP pairs its SMs)")
        if not (isinstance(self.row_meta_bytes, int) and self.row_meta_bytes >= 0):
            bad("row_meta_bytes", "must be an integer >= 0")
        if not 0 <= self.explicit_sm_fraction < 1:
            bad("explicit_sm_fraction", "must be in [0, 1)")
        if self.bandwidth_scale <= 0:
            bad("bandwidth_scale", "must be > 0")
        if self.latency_scale < 0:
            bad("latency_scale", "must be >= 0")
        if self.gpus is not None and not (isinstance(self.gpus, int) and self.gpus >= 2):
            bad("gpus", "must be an integer >= 2")
        if self.slots < 20:
            bad("slots", "must be >= 20")
        if not self.tutel_degrees or any(d < 1 for d in self.tutel_degrees):
            bad("tutel_degrees", "must be positive integers")
        for n in self.allgather_dispatch:
            if n not in SCHEMES or SCHEMES[n].traffic != "unicast" or SCHEMES[n].engine not in ("comet", "fused"):
                bad("allgather_dispatch", f"{n!r} is not a tile-level unicast scheme; valid: "
                    f"{', '.join(k for k, v in SCHEMES.items() if v.traffic == 'unicast' and v.engine in ('comet', 'fused'))}")
        for n in self.impl_costs:
            if n not in impl_costs.IMPL_SCHEMES:
                bad("impl_costs", f"{n!r} has no reference-code model; valid: {', '.join(impl_costs.IMPL_SCHEMES)}")
        if self.impl_costs and self.dtype != "bf16":
            bad("impl_costs", f"models the reference code's BF16 layers (as COMET's artifact runs them); needs "
                f"dtype='bf16', not {self.dtype!r}")

    def gemm_efficiency_of(self, dtype: str, system) -> float:
        """The GEMM efficiency of ``dtype`` on ``system`` (:func:`gemm.dtype_efficiency`)."""
        return dtype_efficiency(dtype, self.gemm_efficiency, system.fp8_tflops, system.bf16_tflops,
                                self.bf16_gemm_efficiency)

    @property
    def tokens(self) -> int:
        return self.tokens_per_gpu if self.tokens_per_gpu is not None else DEFAULT_TOKENS[self.mode]


@dataclasses.dataclass
class SchemeResult:
    name: str
    total: float           # layer time, seconds (training: forward + backward)
    dispatch: float        # this scheme's dispatch alone (bulk, busiest link) + its latency
    gemm: float            # GEMM busy time on the SMs the scheme leaves to GEMMs (busiest GPU)
    combine: float         # combine alone
    exposed: float         # total - gemm: time not covered by GEMMs
    comm_sms: int          # SMs reserved for communication while GEMMs run (0: not overlapped)
    detail: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Estimate:
    model: ModelConfig
    system: SystemConfig
    params: Params
    gpus: int
    tokens_per_gpu: int
    routing: str
    measured_d: float
    closed_form_d: float
    results: dict
    traffic: dict          # traffic kind -> forward SchemeTraffic
    calibration: Calibration
    compute_only: float    # all GEMMs on all SMs, no communication (the zero-communication limit)

    def speedup(self, baseline: str, over: str = FULL) -> float:
        return self.results[baseline].total / self.results[over].total


# ---------------------------------------------------------------------------------------------------------

class _Context:
    """Rates, latencies and GEMM models for one (model, system, params, calibration)."""

    def __init__(self, model, system, params: Params, cal: Calibration, wl: Workload, gemm_on=None):
        self.m, self.s, self.p, self.cal, self.wl = model, system, params, cal, wl
        s, p = system, params
        self.G = wl.gpus
        self.flit = s.port_bytes_per_cycle
        self.clock = s.switch_clock_ghz * 1e9
        pe_ref = payload_efficiency(MAX_PAYLOAD, scheme="unicast", flit_bytes=self.flit,
                                    max_payload_bytes=MAX_PAYLOAD)
        sat = min(1.0, cal.get("switch_saturation_throughput"))
        # Wire bytes/s per GPU per direction: bulk unicast with full packets reaches link_efficiency of raw.
        self.rate = s.gpu_link_bytes_per_s * s.link_efficiency / pe_ref * sat * p.bandwidth_scale
        self.reduce_rate = (cal.get("reduce_flits_per_cycle") * s.port_bytes_per_s * s.links_per_gpu
                            * p.bandwidth_scale)
        self.packet_flits = wire_flits(MAX_PAYLOAD, scheme="dynamic", flit_bytes=self.flit,
                                       max_payload_bytes=MAX_PAYLOAD)
        self.tlb_tpc = cal.get("tlb_translations_per_cycle")
        tracker_rate = cal.get("tracker_updates_per_cycle") * self.clock * s.links_per_gpu   # updates/s
        packet_rate = self.rate / (self.packet_flits * self.flit)                              # packets/s
        self.tracker_mult = max(1.0, packet_rate / tracker_rate) if tracker_rate > 0 else math.inf
        ls = p.latency_scale
        sw_cycles = cal.get("switch_zero_load_latency_cycles", s.switch_latency_ns * 1e-9 * self.clock)
        self.l_trav = (2 * s.link_latency_ns * 1e-9 + sw_cycles / self.clock) * ls
        hr = cal.get("tlb_hit_rate")
        mpk = cal.get("tlb_misses_per_key")
        if mpk is not None:   # the whole system's misses per key, at this model's packets per row
            row_packets = math.ceil(payload_bytes(model.hidden, p.dtype) / MAX_PAYLOAD) + 1   # + metadata
            hr = max(0.0, 1.0 - mpk / row_packets)
        self.l_tlb = (cal.get("tlb_hit_latency_cycles") + (1 - hr) * cal.get("tlb_miss_penalty_cycles")) \
            / self.clock * ls
        self.l_red = cal.get("reduce_last_to_result_cycles") / self.clock * ls
        # An ld_reduce's time in the reduction engine beyond the two network traversals: request in -> reads
        # out and last answer -> result out (the RTL's ld_reduce unit at zero load, `dysharp bench reduction`).
        self.l_rq = cal.get("reduce_request_overhead_cycles") / self.clock * ls
        self.l_trk = cal.get("tracker_ready_latency_cycles") / self.clock * ls
        self.ko = s.kernel_overhead_us * 1e-6 * ls
        gm, gs = gemm_on or (model, s)
        self.gemm = GemmModel.for_model(gm, gs, p.dtype, gemm_efficiency=p.gemm_efficiency_of(p.dtype, gs),
                                        mem_efficiency=p.mem_efficiency, tile=p.tile, block_m=p.block_m,
                                        block_n=p.block_n, sms=gs.sms, pipeline_costs=p.gemm_pipeline_costs)
        # Per-GPU GEMM time on all SMs (forward): one grouped launch per GEMM over the GPU's experts
        # (tile and wave quantisation, each expert's weights once); the totals of each stage.
        t1, t2 = self.gemm.times(wl.inst_rows)
        self.inst_t1, self.inst_t2 = t1, t2
        self.gpu_gemm = np.add(*self.gemm.launch_times(wl.inst_rows, wl.inst_gpu, self.G))
        self.w1_total, self.w2_total = float(t1.sum()), float(t2.sum())

    def latencies(self, kind: str, tiled: bool) -> tuple[float, float]:
        """(dispatch, combine) latency of one traversal pattern for a traffic kind (``push``: dynamic
        dispatch, partials pushed to the home; see :meth:`combine_latency`)."""
        if kind == "unicast":
            return self.l_trav, self.l_trav
        if kind == "nvls":
            return self.l_trav, 2 * self.l_trav + self.l_red
        tlb = self.l_tlb if kind in ("dynamic", "push") else 0.0
        return self.l_trav + tlb + (self.l_trk if tiled else 0.0), self.combine_latency(kind, tiled)

    def combine_latency(self, kind: str, tiled: bool) -> float:
        """From the last partial computed to the result at the home, at zero load.

        Push (``unicast``, ``push``): the partial is a plain store to the home, its completion flag behind
        it on the same path: one traversal. Pull (``dynamic``, ``explicit``: ``ld_reduce``): the request
        goes home -> switch -> expert GPUs as ``RED_READ``s and the answers come back through the switch's
        reduction engine: two traversals, the AL-TLB lookup (dynamic) and the engine's own request -> result
        time (``reduce_request_overhead_cycles``, RTL); and in a tile pipeline (``tiled``) the home can only
        issue it once it knows that the expert GPUs released the token: a flag from the expert GPU, one more
        traversal (a sequential scheme's kernel boundary gives that knowledge; its overhead is charged)."""
        if kind in ("unicast", "push"):
            return self.l_trav
        tlb = self.l_tlb if kind == "dynamic" else 0.0
        return 2 * self.l_trav + tlb + self.l_rq + (self.l_trav if tiled else 0.0)

    def tlb_mult(self, kind: str, d: np.ndarray) -> np.ndarray:
        """Uplink slow-down of a dynamic packet that needs ``d`` AL-TLB translations at the ingress port."""
        if kind not in ("dynamic", "push"):
            return np.ones(np.shape(d))
        return np.maximum(1.0, np.asarray(d) / (self.tlb_tpc * self.packet_flits))


def pull_window_rate(window: int, latency, answer, fanout) -> np.ndarray:
    """Requests per second a home GPU completes with at most ``window`` ``ld_reduce`` requests in flight,
    every home alike (Little's law on a closed loop; arrays broadcast, one entry per home).

    A request's round trip at zero load is ``latency + answer`` seconds: ``latency`` is the path's fixed
    latencies and every serialization on it but its answers'; ``answer`` is one answer's serialization on
    its destination's uplink (its ``fanout`` = d answers go up d uplinks in parallel). Under load an answer
    also waits behind the answers its uplink owes: with every home keeping ``n`` requests in flight, each
    uplink serves ``X d`` answers per second per home and holds ``Q = X d R`` of them (Little), ``R`` being
    an answer's time there. Mean-value analysis (an arriving answer finds the queue of one request fewer in
    flight): ``R(n) = answer (1 + Q(n-1))``, ``X(n) = n / (latency + R(n))``, ``Q(n) = X(n) d R(n)``, from
    ``Q(0) = 0``. So ``X(1)`` is one request per zero-load round trip, ``X(n)`` never exceeds ``n`` per
    zero-load round trip, and it is capped at ``1 / (d answer)``, the rate at which the uplinks carry the
    answers: the window binds only where ``window / round trip`` is below that. (The max over the d
    branches' waits is not modelled; one branch's mean wait stands for it.)"""
    latency, answer, fanout = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64)
                                                    for a in (latency, answer, fanout)))
    q = np.zeros(latency.shape)
    x = np.zeros(latency.shape)
    for n in range(1, int(window) + 1):
        r = answer * (1 + q)
        x = n / (latency + r)
        q = x * fanout * r
    with np.errstate(divide="ignore"):
        bound = np.where(fanout * answer > 0, 1.0 / (fanout * answer), np.inf)
    return np.minimum(x, bound)


@dataclasses.dataclass
class _Pass:
    name: str
    s_d: int               # bytes of one dispatched row (traffic.dispatch_row_bytes)
    s_c: int               # bytes of one combined row (BF16)
    gemm_factor: float
    dtype: str = "fp8"     # the dispatched rows' dtype


def _push(dyn: SchemeTraffic, uni: SchemeTraffic) -> SchemeTraffic:
    """DySHARP with a push combine: the dynamic (multicast) dispatch, the unicast combine (each expert GPU
    stores its pre-summed partial at the home; the home sums the d partials)."""
    return SchemeTraffic("push", dyn.dispatch, uni.combine, dataclasses.replace(
        dyn.costs, comb_copy=uni.costs.comb_copy, comb_request=0))


def _pull_window(ctx: _Context, tr: SchemeTraffic, kind: str):
    """The ``ld_reduce`` window of a pull combine (``Params.combine_window``): None when the combine is not a
    pull or the window is unbounded, else ``(rate, burst, alone)``, arrays of G:

    * ``rate``, ``burst``: the tile pipeline's bound on each home's results, in result wire bytes: at most
      ``window`` requests per zero-load round trip (Little's law with the shortest round trip: no request
      completes sooner), at most ``window`` requests' results at once. The queueing under load is the
      pipeline's own: its links carry the answers and the results.
    * ``alone``: seconds each home's requests take when every home pulls at once (a sequential combine), at
      :func:`pull_window_rate`'s mean-value rate (the round trip plus the answers' queueing on the uplinks).

    A home issues one request per packet of a combined row (``MAX_PAYLOAD`` bytes each) for every token it
    pulls (``dynamic``, ``explicit``: the tokens with a remote expert, from their d remote GPUs; ``nvls``:
    every token, from the static group); each request costs its request packet up the home's uplink, a
    ``RED_READ`` down each destination's downlink, one answer up each destination's uplink and the result
    down the home's downlink, at the link rate, plus the pull's latency (:meth:`_Context.latencies`) and the
    destination's read of its partial (``Params.read_latency_ns``)."""
    W = ctx.p.combine_window
    if W is None or kind not in ("dynamic", "explicit", "nvls"):
        return None
    c, wl, G = tr.costs, ctx.wl, ctx.G
    packets = max(1, math.ceil(c.comb_payload / c.max_payload_bytes))
    result = float(c.comb_copy) / packets                              # one answer (or result) packet, bytes
    per = result / ctx.rate
    if kind == "nvls":
        fan = float(G if ctx.p.nvls_issuer_in_group else G - 1)
        toks = np.full(G, float(wl.tokens_per_gpu))
        d_mean = np.full(G, fan)
        req_up = np.full(G, float(c.comb_request))
    else:
        d = wl.dest.d_remote
        pulled = d > 0
        toks = np.bincount(wl.dest.src, weights=pulled.astype(float), minlength=G)
        with np.errstate(invalid="ignore", divide="ignore"):
            d_mean = np.bincount(wl.dest.src, weights=np.where(pulled, d, 0).astype(float), minlength=G) / toks
            req_up = np.bincount(wl.dest.src, weights=c.comb_request_up(d).astype(float), minlength=G) / toks
        d_mean = np.nan_to_num(d_mean)
        req_up = np.nan_to_num(req_up)
    red_read = float(c.comb_request) / packets / ctx.rate              # one RED_READ down a destination
    latency = (ctx.latencies(kind, tiled=False)[1] + ctx.p.read_latency_ns * 1e-9 * ctx.p.latency_scale
               + req_up / packets / ctx.rate + red_read + per)          # all but the answer: the result's
    x = pull_window_rate(W, latency, per, d_mean)                      # requests/s per home, all pulling
    n = toks * packets
    with np.errstate(divide="ignore", invalid="ignore"):
        alone = np.where(n > 0, n / x, 0.0)
    return W / (latency + per) * result, np.full(G, W * result), alone


def _standalone(ctx: _Context, tr: SchemeTraffic, kind: str) -> tuple[float, float]:
    """Bulk dispatch and combine times of a traffic pattern: the busiest link direction (and, for in-switch
    reduction, the busiest home's reduction engines) plus the latency of one traversal."""
    ld, lc = ctx.latencies(kind, tiled=False)
    wl = ctx.wl
    up_d = tr.dispatch.up_wire
    if kind in ("dynamic", "push"):
        mult = ctx.tlb_mult(kind, wl.dest.d_remote)
        per_tok = tr.costs.disp_up(wl.dest.d_remote) * mult
        up_d = np.bincount(wl.dest.src, weights=per_tok, minlength=ctx.G)
    disp = max(float(np.max(up_d)), float(np.max(tr.dispatch.down_wire))) / ctx.rate + ld
    win = _pull_window(ctx, tr, kind)
    comb = max(float(np.max(tr.combine.up_wire)) / ctx.rate, float(np.max(tr.combine.down_wire)) / ctx.rate,
               float(np.max(tr.combine.reduce_in)) / ctx.reduce_rate if ctx.reduce_rate > 0 else 0.0,
               float(np.max(win[2])) if win is not None else 0.0) + lc
    return disp, comb


def _comm_sms(ctx: _Context, tr: SchemeTraffic, kind: str, base: int) -> int:
    """SMs an overlapped scheme reserves for communication while GEMMs run.

    ``base`` SMs (DeepEP's 20-24) keep a GPU's links busy when the SMs issue every byte at line rate. A
    scheme needs that pool only for the share of the overlapped window during which its SMs must issue:
    ``phi = (time to issue its SM-issued bytes at line rate) / max(busiest link direction's time, GEMM
    time)``, so ``ceil(base * phi)`` SMs (COMET-style adaptive sizing, applied to every scheme alike).
    Unicast SMs issue every uplink byte; with dymultimem the SMs issue one store per token and the ld_reduce
    requests (the switch replicates, reads and reduces). Explicit addressing adds the SMs that compute
    addresses, a fixed ``explicit_sm_fraction`` of the GPU (the 10-20% MISSION.md quotes)."""
    up = tr.dispatch.up_wire + tr.combine.up_wire
    down = tr.dispatch.down_wire + tr.combine.down_wire
    if kind == "unicast":
        issued = up
    elif kind == "push":       # one store per token out, every partial pushed back by the SMs
        issued = tr.dispatch.up_wire + tr.combine.up_wire
    else:
        d = ctx.wl.dest.d_remote
        req = np.bincount(ctx.wl.dest.src, weights=tr.costs.comb_request_up(d).astype(float), minlength=ctx.G)
        issued = tr.dispatch.up_wire + req
    issue_time = float(np.max(issued)) / ctx.rate
    window = max(float(np.max(np.maximum(up, down))) / ctx.rate, float(np.max(ctx.gpu_gemm)))
    if issue_time <= 0 or window <= 0:
        return 0
    phi = min(1.0, issue_time / window) if ctx.p.comm_sm_duty else 1.0
    sms = math.ceil(base * phi - 1e-9)
    if kind == "explicit":     # the 10-20% of SMs explicit addressing costs (MISSION.md), not duty-scaled
        sms += math.ceil(ctx.p.explicit_sm_fraction * ctx.s.sms - 1e-9)
    return min(sms, ctx.s.sms - 1)


# The schemes built of separate kernels around their grouped GEMMs (the sequential, chunked and per-peer
# engines) and the memory-bound kernels each runs per layer on its compute stream: "permute" gathers the
# received rows into expert order (the grouped GEMM's contiguous layout), "act" is the gated activation
# between GEMM-1 and GEMM-2, "unpermute" sums each received (token, GPU) pair's expert outputs (weighted by
# the gate) into the row the combine sends. Megatron-LM's MoE layer (token_permutation / moe grouped GEMM /
# bias_act / token_unpermutation), DeepEP + DeepGEMM as deployed (a permute kernel into DeepGEMM's
# contiguous layout, an activation + quantisation kernel, the gather before the combine), Tutel's
# encode/decode and FastMoE's local scatter/gather kernels are such kernels. The tile-level schemes (COMET,
# CCFuser, DySHARP-COMET/-full) fuse them into the GEMM prologue/epilogue. Dynamic (DySHARP-Basic) rows land
# in their expert's slots (the GPU receive path's per-expert bump pointer, docs/gpu_side.md), so it has no
# permute; it keeps the activation and the unpermutation its separate grouped GEMMs need.
UNFUSED_KERNELS = {"deepep": ("permute", "act", "unpermute"), "nvls": ("permute", "act", "unpermute"),
                   "tutel": ("permute", "act", "unpermute"), "fastermoe": ("permute", "act", "unpermute"),
                   "dualpipe": ("permute", "act", "unpermute"), "dysharp-basic": ("act", "unpermute")}


def _kernel_passes(ctx: _Context, name: str, ps: "_Pass"):
    """The unfused kernels of scheme ``name`` (:data:`UNFUSED_KERNELS`) for one pass: a function of the rows
    per instance (all the layer's, or one chunk's) returning each GPU's seconds of HBM traffic at
    ``hbm x mem_efficiency`` (the kernels are copies: memory-bound) plus one kernel overhead per kernel; None
    when the scheme has none. Bytes per GPU, n = rows its experts compute, R = (token, GPU) pairs it
    receives (every token for nvls, whose ReduceScatter takes the whole zero-filled output): permute 2 n
    s_d (read + write a dispatched row); act n f (4 + 2 w): GEMM-1's 2f-wide BF16 output written, read back
    and written f wide in GEMM-2's input dtype (w bytes), which GEMM-2 reads, against the fused GEMM model's
    f-wide BF16 intermediate (a non-gated expert's GEMM-1 output is f wide: act n f 2 w); unpermute n s_c +
    R s_c (read each expert output row, write one partial per pair)."""
    names = UNFUSED_KERNELS.get(name, ()) if ctx.p.unfused_kernels else ()
    if not names:
        return None
    if name == "tutel" and "tutel" in ctx.p.impl_costs:
        return _tutel_kernel_passes(ctx)
    wl, G = ctx.wl, ctx.G
    f, w = ctx.m.expert_ffn, ctx.gemm.weight_bytes
    inst_total = np.bincount(wl.inst_gpu, weights=wl.inst_rows.astype(float), minlength=G)
    pairs = (np.full(G, float(G * wl.tokens_per_gpu)) if name == "nvls"
             else np.bincount(wl.pair_gpu, minlength=G).astype(float))
    rate = ctx.s.hbm_tbps * 1e12 * ctx.p.mem_efficiency
    act = f * (4.0 * (ctx.gemm.up // f - 1) + 2.0 * w)          # f (4 + 2w) gated, f 2w not
    per_row = (("permute" in names) * 2.0 * ps.s_d + ("act" in names) * act
               + ("unpermute" in names) * ps.s_c)

    def passes(rows):
        n = np.bincount(wl.inst_gpu, weights=np.asarray(rows, dtype=float), minlength=G)
        r = pairs * np.divide(n, inst_total, out=np.zeros(G), where=inst_total > 0)
        nbytes = n * per_row + ("unpermute" in names) * r * ps.s_c
        return np.where(n > 0, nbytes / rate + len(names) * ctx.ko, 0.0)
    return passes


def _tutel_kernel_passes(ctx: _Context):
    """Tutel's own kernels (``Params.impl_costs``, :mod:`impl_costs`): FP32 encode and decode, layout copies
    and bias additions, plus the activation (n f 2w bytes, the scheme's own), at ``hbm x mem_efficiency``,
    one kernel overhead each; a chunk's share in proportion to its rows."""
    wl, G, m = ctx.wl, ctx.G, ctx.m
    rate = ctx.s.hbm_tbps * 1e12 * ctx.p.mem_efficiency
    E, k = m.routed_experts, m.top_k
    el = max(1, E // G)
    inst_total = np.bincount(wl.inst_gpu, weights=wl.inst_rows.astype(float), minlength=G)
    act = m.expert_ffn * (4.0 * (ctx.gemm.up // m.expert_ffn - 1) + 2.0 * ctx.gemm.weight_bytes)
    full = np.array([sum(impl_costs.tutel_kernel_bytes(wl.tokens_per_gpu, E, el, k, m.hidden, m.expert_ffn,
                                                       r).values()) + r * act for r in inst_total])
    kernels = impl_costs.tutel_kernels(k, el) + 1

    def passes(rows):
        n = np.bincount(wl.inst_gpu, weights=np.asarray(rows, dtype=float), minlength=G)
        share = np.divide(n, inst_total, out=np.zeros(G), where=inst_total > 0)
        return np.where(n > 0, full * share / rate + kernels * ctx.ko, 0.0)
    return passes


def _bounds(T: int, n: int) -> np.ndarray:
    """Start token index of each of ``n`` chunks of ``T`` tokens (token j is in chunk j * n // T)."""
    return np.searchsorted(np.arange(T) * n // T, np.arange(n), side="left")


def _token_chunks(ctx: _Context, tr: SchemeTraffic, n: int, sm_fraction: float, factor: float, kern=None,
                  slots: bool = False):
    """Per-chunk (dispatch, GEMM, combine) times when every GPU splits its tokens into ``n`` index ranges
    (unicast traffic; each chunk's GEMMs are their own grouped GEMM, so weights are read per chunk).
    ``slots``: Tutel's all-to-all of its whole capacity-slot buffer (``Params.impl_costs``)."""
    wl, c = ctx.wl, tr.costs
    b = _bounds(wl.tokens_per_gpu, n)
    copies = np.add.reduceat(wl.d_remote_by_j, b, axis=1).astype(float)      # (G, n) copies sent by home g
    hosted = np.add.reduceat(wl.remote_pairs_by_j, b, axis=1).astype(float)  # (G, n) copies landing on h
    ld, lc = ctx.latencies("unicast", tiled=False)
    if slots:                             # Tutel's all-to-all: the whole slot buffer, split over the chunks
        out, inn = impl_costs.tutel_exchange(wl.tokens_per_gpu, ctx.m.routed_experts, ctx.G, ctx.m.top_k)
        copies = np.full((ctx.G, n), out / n)
        hosted = np.full((ctx.G, n), inn / n)
    disp = np.maximum(copies * c.disp_copy, hosted * c.disp_copy).max(axis=0) / ctx.rate + ld
    comb = np.maximum(hosted * c.comb_copy, copies * c.comb_copy).max(axis=0) / ctx.rate + lc
    rows = np.add.reduceat(wl.inst_rows_by_j, b, axis=1)
    return disp, _chunk_gemm(ctx, rows, sm_fraction, factor, kern), comb


def _peer_chunks(ctx: _Context, tr: SchemeTraffic, groups: int, sm_fraction: float, factor: float, kern=None):
    """FasterMoE-like pairwise schedule: the peer ``o`` places away ((h - g) mod G) is exchanged in step
    ``o``; chunk 0 is the local tokens (no communication, its GEMMs start at once) and the G-1 remote steps
    are batched into ``groups`` chunks of consecutive offsets."""
    wl, c, G = ctx.wl, tr.costs, ctx.G
    m = wl.pair_matrix.astype(float)                          # home g -> serving h
    g = np.arange(G)
    sent = np.stack([m[g, (g + o) % G] for o in range(G)], axis=1)       # (G, G): by home, offset
    recv = np.stack([m[(g - o) % G, g] for o in range(G)], axis=1)       # by serving GPU, offset
    chunk_of = np.concatenate([[0], 1 + (np.arange(G - 1) * groups) // max(G - 1, 1)])
    n = groups + 1
    sent_c = np.zeros((G, n))
    recv_c = np.zeros((G, n))
    np.add.at(sent_c.T, chunk_of, sent.T)
    np.add.at(recv_c.T, chunk_of, recv.T)
    rows = np.zeros((len(wl.inst_gpu), n))
    np.add.at(rows.T, chunk_of, wl.inst_rows_by_offset.T)
    ld, lc = ctx.latencies("unicast", tiled=False)
    busiest = np.maximum(sent_c, recv_c).max(axis=0)
    disp = busiest * c.disp_copy / ctx.rate + ld
    comb = busiest * c.comb_copy / ctx.rate + lc
    disp[0] = comb[0] = 0.0                                   # the local chunk moves nothing
    return disp, _chunk_gemm(ctx, rows, sm_fraction, factor, kern), comb


def _chunk_gemm(ctx: _Context, rows: np.ndarray, sm_fraction: float, factor: float, kern=None):
    """Per-chunk compute-stream time of the busiest GPU, from rows per (instance, chunk): each chunk is one
    grouped launch per GPU (its own waves; weights read once per expert per chunk), plus the chunk's unfused
    kernels (``kern``, :func:`_kernel_passes`). Returns (compute-stream time, GEMM time) per chunk."""
    out, gemm = np.zeros(rows.shape[1]), np.zeros(rows.shape[1])
    for c in range(rows.shape[1]):
        t1, t2 = ctx.gemm.launch_times(rows[:, c], ctx.wl.inst_gpu, ctx.G, sm_fraction)
        g = (t1 + t2) * factor
        gemm[c] = float(np.max(g))
        out[c] = float(np.max(g + kern(rows[:, c]))) if kern is not None else gemm[c]
    return out, gemm


def _tile_weight_reads(ctx: _Context) -> tuple[np.ndarray, np.ndarray]:
    """Fraction of its expert's GEMM-1 / GEMM-2 weights each tile reads from HBM, per (GPU, tile position).

    ``l2``: the GPU's L2 holds the weights of the experts its pools used last (LRU over whole
    experts, GEMM-1 and GEMM-2 weights together, ``l2_mb`` of the system): a tile whose expert is still
    resident reads nothing from HBM, any other tile reads its expert's weights again. The pools take tiles
    in ready order, so the reuse depends on how the tiles of the experts interleave. ``expert``: once per
    expert, spread over its tiles (default: the kernel co-schedules an expert's ready tiles like a grouped
    GEMM's M-blocks, so they share one stream of its weights).
    ``per_tile_weights``: every tile, no L2."""
    if getattr(ctx, "_weight_reads", None) is not None:      # one tile order per layer: computed once
        return ctx._weight_reads
    ctx._weight_reads = _weight_reads(ctx)
    return ctx._weight_reads


def _weight_reads(ctx: _Context) -> tuple[np.ndarray, np.ndarray]:
    wl, gm = ctx.wl, ctx.gemm
    inst = wl.tile_inst
    valid = inst >= 0
    if ctx.p.per_tile_weights:
        one = valid.astype(float)
        return one, one
    if ctx.p.weight_reuse == "expert":
        # the instance's tiles (ceil(rows / tile), or more when its own GPU's rows fill tiles apart)
        n = np.maximum(np.bincount(inst[valid], minlength=len(wl.inst_gpu)), 1)
        r = np.where(valid, 1.0 / n[np.maximum(inst, 0)], 0.0)
        return r, r
    wbytes = (gm.up + gm.ffn) * gm.hidden * gm.weight_bytes    # GEMM-1 (h x 2f, or h x f) + GEMM-2 (f x h)
    slots = int(ctx.s.l2_mb * 1e6 // wbytes)                    # whole experts L2 holds
    r = valid.astype(float)
    if slots >= 1:
        for g in range(inst.shape[0]):
            lru = collections.OrderedDict()
            row = inst[g]
            for k in range(int(valid[g].sum())):
                e = int(row[k])
                if e in lru:
                    r[g, k] = 0.0
                    lru.move_to_end(e)
                else:
                    lru[e] = None
                    if len(lru) > slots:
                        lru.popitem(last=False)
    return r, r


def _chains(disp, gemm, comb, ko):
    return [[("net", float(disp[i]) + ko), ("comp", float(gemm[i]) + ko), ("net", float(comb[i]) + ko)]
            for i in range(len(disp))]


def _pipeline_inputs(ctx: _Context, tr: SchemeTraffic, kind: str, ps: _Pass, f1: float, f2: float,
                     barrier: bool, allgather: bool = False) -> PipelineInputs:
    """The tile pipeline's inputs; ``allgather``: the dispatch sends every token to all G-1 other GPUs
    (``Params.allgather_dispatch``), the tiles and the combine's pairs stay the routing's."""
    wl, G, c = ctx.wl, ctx.G, tr.costs
    T = wl.tokens_per_gpu
    q = max(1, math.ceil(T / 256))
    knots = np.minimum(np.arange(0, T + q, q), T).astype(np.float64)
    knots = np.unique(knots)
    K = len(knots) - 1
    d = wl.dest.d_remote
    b = knots[:-1].astype(np.int64)                  # knot k covers token indices [knots[k], knots[k+1])
    dd = np.full_like(d, G - 1) if allgather else d  # dispatch copies per token
    up_tok = (c.disp_up(dd).astype(float) * ctx.tlb_mult(kind, dd)).reshape(G, T)
    up_cum = np.zeros((G, K + 1))
    up_cum[:, 1:] = np.cumsum(np.add.reduceat(up_tok, b, axis=1), axis=1)
    dn_mult = ctx.tracker_mult if kind != "unicast" else 1.0
    dn_cum = np.zeros((G, K + 1))
    landing = np.full((G, T), float(G - 1)) if allgather else wl.remote_pairs_by_j
    dn_cum[:, 1:] = np.cumsum(np.add.reduceat(landing, b, axis=1) * (float(c.disp_copy) * dn_mult), axis=1)
    rem = wl.pair_remote
    # Tiles: per-tile GEMM times on the SMs each stage has.
    inst = wl.tile_inst
    valid = inst >= 0
    c1, m1, c2, m2 = ctx.gemm.tile_work(np.where(valid, wl.tile_rows, 0), _tile_weight_reads(ctx))
    fx = ps.gemm_factor
    z = lambda a: np.where(valid, a * fx, 0.0)
    if barrier:
        # COMET-like phases: GEMM-1 and GEMM-2 never run together on a GPU, so each has all of HBM.
        w1, w2 = z(np.maximum(c1 / f1, m1)), z(np.maximum(c2 / f2, m2))
        w2_tail = w2
        hbm = {}
    else:
        # Fused stages: compute scales with each stage's SMs; HBM is shared only while both run
        # (pipeline.SharedHbmGemm: processor sharing, weighted by SMs; an idle stage's share goes to the other).
        both = f1 + f2
        w1, w2 = z(np.maximum(c1 / f1, m1)), z(np.maximum(c2 / f2, m2))      # durations without contention
        w2_tail = z(np.maximum(c2 / both, m2))
        hbm = dict(tile_c1=z(c1 / f1), tile_m1=z(m1), tile_c2=z(c2 / f2), tile_m2=z(m2),
                   tile_c2_tail=z(c2 / both), hbm_share1=f1 / both if ctx.p.hbm_split == "sms" else 0.5)
    reduced = kind not in ("unicast", "push")
    win = _pull_window(ctx, tr, kind)
    pr = rem.astype(float)
    ld, lc = ctx.latencies(kind, tiled=True)
    home = wl.dest.src
    return PipelineInputs(
        tokens_per_gpu=T, knots=knots, disp_up_cum=up_cum, disp_dn_cum=dn_cum,
        tile_ready_p=wl.tile_ready_p, tile_w1=w1, tile_w2=w2, tile_w2_tail=w2_tail, pair_start=wl.pair_start,
        pair_token=wl.pair_token, pair_home=wl.pair_home, pair_up=pr * c.comb_copy,
        pair_req_dn=pr * (c.comb_request if reduced else 0), pair_down=pr * (0 if reduced else c.comb_copy),
        token_pairs=wl.dest.d_all, token_home=home,
        token_result=np.where((d > 0) & reduced, float(c.comb_copy), 0.0),
        token_req_up=c.comb_request_up(d).astype(float) if reduced else np.zeros(len(d)),
        up_rate=np.full(G, ctx.rate), dn_rate=np.full(G, ctx.rate), reduce_rate=np.full(G, ctx.reduce_rate),
        result_rate=None if win is None else win[0], result_burst=None if win is None else win[1],
        reduced=reduced, barrier=barrier, latency_dispatch=ld, latency_combine=lc,
        start_overhead=ctx.ko * (2 if barrier else 1), slots=ctx.p.slots,
        combine_share=ctx.p.combine_link_share, **hbm)


def _run_pass(ctx: _Context, spec: SchemeSpec, ps: _Pass, tr: SchemeTraffic, sms: int,
              kind: str | None = None, allgather: bool = False) -> SchemeResult:
    kind, engine = kind or spec.traffic, spec.engine
    disp, comb = _standalone(ctx, tr, kind)
    extra = {}
    if spec.name in DEEPEP_SCHEMES and ctx.p.deepep_protocol:
        # DeepEP's copy protocol (sim_models.deepep): the links' time of its stores or its SMs' issue loop.
        lat = ctx.latencies(kind, tiled=False)
        disp, comb, extra = deepep.phase_times(ctx, tr, disp - lat[0], comb - lat[1], lat, ctx.p.deepep_sms,
                                               ps.dtype)
        extra = {"deepep": extra}
    S = ctx.s.sms
    full_gemm = float(np.max(ctx.gpu_gemm)) * ps.gemm_factor
    kern = _kernel_passes(ctx, spec.name, ps)
    if engine == "sequential":
        k = ctx.gpu_gemm * ps.gemm_factor + (kern(ctx.wl.inst_rows) if kern is not None else 0.0)
        total = disp + float(np.max(k)) + comb + 3 * ctx.ko
        return SchemeResult(spec.name, total, disp, full_gemm, comb, total - full_gemm, 0,
                            {"kernels": float(np.max(k)) - full_gemm, **extra})
    frac = (S - sms) / S
    if engine in ("tutel", "dualpipe"):
        degrees = ctx.p.tutel_degrees if engine == "tutel" else (2,)
        best = None
        for n in degrees:
            n = min(n, ctx.wl.tokens_per_gpu)
            f = frac if n > 1 else 1.0          # one chunk overlaps nothing: GEMMs keep every SM
            dch, (kch, gch), cch = _token_chunks(ctx, tr, n, f, ps.gemm_factor, kern,
                                                 slots=spec.name == "tutel" and "tutel" in ctx.p.impl_costs)
            total, busy = list_schedule(_chains(dch, kch, cch, ctx.ko))
            if best is None or total < best[0]:
                best = (total, float(gch.sum()), n)
        total, gemm, n = best
        return SchemeResult(spec.name, total, disp, gemm, comb, max(0.0, total - gemm), sms, {"chunks": n})
    if engine == "fastermoe" and "fastermoe" in ctx.p.impl_costs:
        # FastMoE's plain layer as the artifact runs it (impl_costs.fastmoe_layer): no overlap.
        x = impl_costs.fastmoe_layer(ctx, tr.costs, ctx.latencies(kind, tiled=False), ps.gemm_factor)
        total = x.pop("total")
        return SchemeResult(spec.name, total, x["dispatch"], x["gemm"], x["combine"], max(0.0, total - x["gemm"]),
                            0, {"chunks": 1, **x})
    if engine == "fastermoe":
        best = None
        for groups in sorted({min(d, ctx.G - 1) for d in ctx.p.tutel_degrees}):
            dch, (kch, gch), cch = _peer_chunks(ctx, tr, groups, frac, ps.gemm_factor, kern)
            total, _ = list_schedule(_chains(dch, kch, cch, ctx.ko))
            if best is None or total < best[0]:
                best = (total, float(gch.sum()), groups + 1)
        total, gemm, n = best
        return SchemeResult(spec.name, total, disp, gemm, comb, max(0.0, total - gemm), sms, {"chunks": n})
    # Tile-level engines.
    if engine == "comet":
        f1 = f2 = frac
        barrier = True
    else:
        share = ctx.w1_total / max(ctx.w1_total + ctx.w2_total, 1e-30)
        f1, f2 = frac * share, frac * (1 - share)
        barrier = False
    res = run_pipeline(_pipeline_inputs(ctx, tr, kind, ps, f1, f2, barrier, allgather))
    # GEMM busy time: the roofline of the tiles' total work on the SMs the scheme leaves to GEMMs (their
    # compute on those SMs, or their HBM traffic, whichever is longer; busiest GPU).
    valid = ctx.wl.tile_inst >= 0
    c1, m1, c2, m2 = ctx.gemm.tile_work(np.where(valid, ctx.wl.tile_rows, 0), _tile_weight_reads(ctx))
    gemm = float(np.max(np.maximum((c1 + c2).sum(axis=1) / frac, (m1 + m2).sum(axis=1)))) * ps.gemm_factor
    return SchemeResult(spec.name, res.total, disp, gemm, comb, max(0.0, res.total - gemm), sms,
                        {"dispatch_end": res.dispatch_end})


def _sum(results: list[SchemeResult]) -> SchemeResult:
    r0 = results[0]
    out = SchemeResult(r0.name, 0, 0, 0, 0, 0, r0.comm_sms, dict(r0.detail))
    for r in results:
        out.total += r.total
        out.dispatch += r.dispatch
        out.gemm += r.gemm
        out.combine += r.combine
        out.exposed += r.exposed
    return out


def estimate(model: ModelConfig, system: SystemConfig, params: Params = Params(),
             calibration: Calibration | None = None, schemes=None, workload: Workload | None = None,
             gemm_on=None) -> Estimate:
    """Layer time of every scheme (see the module docstring) for one model on one system. ``gemm_on``: the
    (model, system) whose shapes and rates the expert GEMMs are timed on, when they differ from the layer's
    (a scaled layer whose GEMM time is the real one's scaled linearly: :mod:`sim_models.rtl_scale`)."""
    params.validate()
    schemes = list(SCHEMES) if schemes is None else list(schemes)
    for s in schemes:
        if s not in SCHEMES:
            raise ValueError(f"unknown scheme {s!r}; valid: {', '.join(SCHEMES)}")
    if FULL not in schemes:
        schemes.append(FULL)
    cal = calibration if calibration is not None else load_calibration()
    gpus = params.gpus or system.gpus
    ep = min(gpus, model.routed_experts)     # fewer experts than GPUs: EP over E GPUs, DP across groups
    sysx = system if ep == system.gpus else system.replace(gpus=ep)
    routing = params.routing
    if routing == "auto":
        routing = "group" if model.n_group else "uniform"
    wl = workload or build_workload(model.routed_experts, model.top_k, ep, params.tokens, routing=routing,
                                    placement=params.placement, seed=params.seed, tile=params.tile,
                                    n_group=model.n_group, topk_group=model.topk_group)
    ctx = _Context(model, sysx, params, cal, wl, gemm_on=gemm_on)
    flit = sysx.port_bytes_per_cycle
    passes = [_Pass("forward", dispatch_row_bytes(model.hidden, params.dtype, params.row_meta_bytes, flit),
                    payload_bytes(model.hidden, "bf16"), 1.0, params.dtype)]
    if params.mode == "training":
        # Backward: the output gradient goes out like a dispatch (multicast to the same GPUs), the input
        # gradient comes back like a combine (summed); both BF16, no metadata (the forward pass carried it).
        # dgrad + wgrad = 2x the forward FLOPs.
        bf = payload_bytes(model.hidden, "bf16")
        passes.append(_Pass("backward", bf, bf, 2.0, "bf16"))
    kinds = {SCHEMES[s].traffic for s in schemes}
    if params.combine != "pull":
        kinds |= {"dynamic", "unicast"}        # DySHARP's push combine: dynamic dispatch, unicast partials
    traffic = {ps.name: {k: account(wl.dest, k, ps.s_d, ps.s_c, flit, MAX_PAYLOAD,
                                    issuer_in_group=params.nvls_issuer_in_group and k == "nvls") for k in kinds}
               for ps in passes}
    ag = set(params.allgather_dispatch) & set(schemes)
    if ag:
        n_tok = wl.gpus * wl.tokens_per_gpu
        every = TokenDestinations(wl.gpus, wl.tokens_per_gpu, np.tile(np.arange(wl.gpus), (n_tok, 1)))
        for ps in passes:
            full = account(every, "unicast", ps.s_d, ps.s_c, flit, MAX_PAYLOAD)
            traffic[ps.name]["unicast-ag"] = SchemeTraffic("unicast", full.dispatch,
                                                           traffic[ps.name]["unicast"].combine, full.costs)
    deepep_on = params.deepep_protocol and any(s in DEEPEP_SCHEMES for s in schemes)
    if deepep_on:
        for ps in passes:
            traffic[ps.name]["deepep"] = deepep.deepep_traffic(
                traffic[ps.name]["unicast"], deepep.CURRENT, model.hidden, ps.dtype, model.top_k, flit, MAX_PAYLOAD)
    results = {}
    for name in schemes:
        spec = SCHEMES[name]
        base = params.dualpipe_sms if spec.engine == "dualpipe" else params.comm_sms
        tkey = "deepep" if (deepep_on and name in DEEPEP_SCHEMES) else spec.traffic
        if name in ag:
            tkey = "unicast-ag"
        fwd_tr = traffic["forward"][tkey]
        sms = 0 if spec.engine == "sequential" else _comm_sms(ctx, fwd_tr, spec.traffic, base)
        if spec.engine == "dualpipe" and params.mode == "training":
            results[name] = _dualpipe_training(ctx, spec, passes, traffic, sms)
            continue
        if name == FULL:
            results[name] = _dysharp_full(ctx, spec, passes, traffic, sms, base)
            continue
        results[name] = _sum([_run_pass(ctx, spec, ps, traffic[ps.name][tkey], sms, kind=spec.traffic,
                                        allgather=name in ag) for ps in passes])
    compute_only = sum(float(np.max(ctx.gpu_gemm)) * ps.gemm_factor for ps in passes)
    k = model.top_k
    closed = expected_distinct_gpus(model.routed_experts, ep, k)
    return Estimate(model, sysx, params, ep, wl.tokens_per_gpu, routing, wl.mean_distinct_gpus(), closed,
                    results, traffic["forward"], cal, compute_only)


def _dysharp_full(ctx, spec, passes, traffic, sms_pull, base) -> SchemeResult:
    """DySHARP-full with the combine of ``Params.combine``: ``pull`` (ld_reduce), ``push`` (partials stored at
    the home), or ``auto``: both timed, the faster taken (the rule a runtime that can issue either would
    apply per layer shape; ties go to pull). ``detail``: the choice and both layer times."""
    mode = ctx.p.combine
    out = {}
    if mode in ("auto", "pull"):
        out["pull"] = _sum([_run_pass(ctx, spec, ps, traffic[ps.name]["dynamic"], sms_pull) for ps in passes])
    if mode in ("auto", "push"):
        trs = {ps.name: _push(traffic[ps.name]["dynamic"], traffic[ps.name]["unicast"]) for ps in passes}
        sms = _comm_sms(ctx, trs["forward"], "push", base)
        out["push"] = _sum([_run_pass(ctx, spec, ps, trs[ps.name], sms, kind="push") for ps in passes])
    choice = min(out, key=lambda k: (out[k].total, k != "pull"))
    r = out[choice]
    r.detail.update(combine=choice, **{f"{k}_total": v.total for k, v in out.items()})
    return r


def _dualpipe_training(ctx, spec, passes, traffic, sms) -> SchemeResult:
    """DualPipe-like: the forward chunk of one micro-batch overlaps the backward chunk of another; each
    chain is dispatch -> GEMMs -> combine, and the two share the network and the SMs."""
    frac = (ctx.s.sms - sms) / ctx.s.sms
    chains, gemm, disp_sum, comb_sum = [], 0.0, 0.0, 0.0
    for ps in passes:
        tr = traffic[ps.name][spec.traffic]
        d, c = _standalone(ctx, tr, spec.traffic)
        g = float(np.max(ctx.gpu_gemm)) * ps.gemm_factor / frac
        kern = _kernel_passes(ctx, spec.name, ps)
        k = float(np.max(ctx.gpu_gemm * ps.gemm_factor / frac + kern(ctx.wl.inst_rows))) if kern else g
        chains.append([("net", d + ctx.ko), ("comp", k + ctx.ko), ("net", c + ctx.ko)])
        gemm += g
        disp_sum += d
        comb_sum += c
    total, _ = list_schedule(chains)
    return SchemeResult(spec.name, total, disp_sum, gemm, comb_sum, max(0.0, total - gemm), sms, {"chunks": 2})
