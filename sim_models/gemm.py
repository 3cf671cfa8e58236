"""Expert GEMM time: a roofline with efficiency parameters, at tile granularity.

An expert FFN is GEMM-1 (gate and up projections, ``hidden x 2*ffn``; ``hidden x ffn`` for a non-gated
expert, ``gated=False``) then GEMM-2 (down projection, ``ffn x hidden``). For ``rows`` tokens on one expert with ``tile`` rows per tile, both GEMMs run on
``ceil(rows / tile) * tile`` rows (a partial tile costs a full one on the tensor cores) and take

    time = max(flops / (peak * gemm_efficiency * sm_fraction), bytes / (hbm * mem_efficiency))

with bytes = the expert's weights (read ``weight_reads`` times) + the activations in and out. The
compute dtype is the dispatch dtype (FP8 GEMMs when dispatch is FP8, as in DeepSeek-V3; BF16 otherwise);
outputs and the intermediate activation are BF16.

**Tile-aware model** (``block_m`` set; what the estimator uses): a GEMM runs as CTA blocks of
``block_m x block_n`` outputs, each looping over K.

* *Tensor-core tile quantisation*: a GEMM of M rows costs ``ceil(M / block_m) * block_m`` rows of MMA work
  (a Hopper ``wgmma`` is 64 rows per warpgroup; DeepGEMM's contiguous layout aligns each expert's segment
  to its M block), not a multiple of the scheduler's tile.
* *Wave quantisation* (:meth:`launch_times`): a grouped launch's blocks (summed over its experts) run in
  ``ceil(blocks / SMs)`` waves of one block time each (``2 block_m block_n K / (peak / SMs * efficiency)`` + the
  epilogue) after the prologue;
  a persistent fused kernel instead streams blocks of successive tiles, so :meth:`tile_work` is fluid.
* *Pipeline fixed costs* (:meth:`epilogue`, :meth:`prologue`; the constants below): each block ends with an
  epilogue its SM's MMAs do not overlap (part of the block time, and of the fluid compute of :meth:`parts`),
  and a launch starts with a prologue before its first MMA; ``pipeline_costs=False`` drops both.
* *Weight traffic*: a grouped launch reads each expert's weights once (its M-blocks run together and share
  them through L2); a tile of a tile-level scheme reads its expert's weights again unless they are still in
  L2 (``weight_reads`` per tile, decided by the caller from the tile order): the roofline of M.

Without ``block_m`` the model is the earlier one (rows padded to ``tile``, no waves), which the RTL-scaled
layer model (``verif.models.moe_layer``) still uses.
"""

import dataclasses
import math

import numpy as np

__all__ = ["GemmModel", "FP8_OVER_BF16", "dtype_efficiency", "SM_CLOCK_HZ", "SMEM_BYTES_PER_CLK", "L2_HIT_CLK",
           "HBM_CLK", "BLOCK_K"]

# The pipeline's fixed costs (DeepGEMM's FP8 kernel, ``deep_gemm/include/deep_gemm/fp8_gemm.cuh`` at a6d97a1, the
# release the validation tables come from): a persistent kernel whose TMA warp runs ``kNumStages`` stages of
# ``BLOCK_K`` = 128 ahead of the math warpgroups, across blocks, so a block's first loads overlap the previous
# block's last MMAs; what does not overlap:
# * per block, the epilogue: the math warpgroups write the block's BF16 output tile into shared memory (STSM), one
#   thread TMA-stores it and waits until the TMA has read it (``tma_store_wait<0>``), then they load the next
#   block's B scales from global memory (``__ldg``) and meet at a named barrier before the next MMA: the tile
#   twice through shared memory at SMEM_BYTES_PER_CLK, and one L2 round trip (the scales of an N-block are read by
#   all its M-blocks);
# * per launch, the prologue: no MMA before an SM's first stage (its A and B tiles, BLOCK_K deep) arrives, and
#   every SM asks for its first stages at once: an HBM round trip plus all SMs' first stages at the HBM rate.
# Hopper's SM clock: the FP8 peak over 8,192 dense FP8 FLOP per clock per SM (A100's SM: 1,024 dense FP16 FMA per
# clock, NVIDIA A100 whitepaper, 312 TFLOPS at 1,410 MHz on 108 SMs; H100's SM doubles it per clock and FP8
# doubles FP16, NVIDIA H100 whitepaper): 1,979 TFLOPS / 132 / 8,192 = 1.83 GHz. The latencies: GH200's (the
# headline system's GPU; H100 SXM measures 291 and 700 clocks in the same table). Blackwell: Hopper's figures (an
# assumption; B200 measures 295 and 860 clocks there).
SM_CLOCK_HZ = 1.83e9
SMEM_BYTES_PER_CLK = 128      # shared memory: 32 banks x 4 B per clock (CUDA C++ Programming Guide)
L2_HIT_CLK = 281              # GH200 (Hopper): L2 hit 281 clocks, main memory 690 (github.com/markdewing/AI_kernels,
HBM_CLK = 690                 # latency/README.md at 0d701ad, pointer-chasing measurements in clock cycles)
BLOCK_K = 128                 # DeepGEMM's K per pipeline stage (one FP8 scale per 128 channels)

# Measured throughput of a block-scaled FP8 GEMM over a BF16 GEMM of the same large shape on Hopper: NVIDIA,
# "Boosting Matrix Multiplication Speed and Flexibility with NVIDIA cuBLAS 12.9" (developer blog, 2025):
# cuBLAS 12.9's channel- and block-scaled FP8 matmuls on Hopper reach "a 1.75x speedup for large matmuls" over
# the BF16 baseline. The tensor cores' peak ratio is 2 (1,979 / 989 TFLOPS), so BF16 keeps 2 / 1.75 = 1.14x the
# fraction of its peak that block-scaled FP8 keeps of its own (FP8's per-128-channel scale promotion costs
# CUDA-core work and registers that BF16 does not pay).
FP8_OVER_BF16 = 1.75


def dtype_efficiency(dtype: str, fp8_efficiency: float, fp8_tflops: float, bf16_tflops: float,
                     bf16_efficiency: float | None = None) -> float:
    """Fraction of the dtype's tensor-core peak a grouped GEMM reaches. ``fp8_efficiency`` is FP8's (set
    from DeepGEMM's block-scaled FP8 tables); BF16's is ``bf16_efficiency`` when given, else FP8's scaled by
    the measured FP8/BF16 throughput ratio (:data:`FP8_OVER_BF16`): ``fp8_eff x (fp8 peak / bf16 peak) /
    1.75`` (0.686 for 0.6 on H100 and B200), capped at 1."""
    if dtype == "fp8":
        return fp8_efficiency
    if bf16_efficiency is not None:
        return bf16_efficiency
    return min(1.0, fp8_efficiency * (fp8_tflops / bf16_tflops) / FP8_OVER_BF16)


@dataclasses.dataclass(frozen=True)
class GemmModel:
    hidden: int
    ffn: int
    peak_flops: float          # dense tensor-core FLOP/s of the compute dtype
    hbm_bytes_per_s: float
    weight_bytes: int          # bytes per weight element (1 for FP8, 2 for BF16)
    act_bytes: int             # bytes per input activation element
    gemm_efficiency: float = 0.6   # DeepGEMM README: 0.55-0.66 of FP8 peak on MoE shapes (Params; tornado 0.45..0.75)
    mem_efficiency: float = 0.75   # DeepGEMM README: 2.2-2.6 of 3.35 TB/s memory-bound, L2-warm (Params; tornado 0.6..0.9)
    tile: int = 128                # MISSION.md's 128-token tile
    block_m: int | None = None     # tensor-core M block (rows); None: pad to ``tile`` (the earlier model);
    #                                the estimator passes 64 (Hopper wgmma: 64 rows per warpgroup)
    block_n: int = 128             # CTA block N (output columns): DeepGEMM's usual BLOCK_N
    sms: int = 0                   # SMs of the GPU (wave quantisation of launches); 0: no waves
    pipeline_costs: bool = True    # the tile-aware model's per-block epilogue and per-launch prologue (above)
    gated: bool = True             # GEMM-1 is hidden x 2*ffn (gated: SwiGLU); False: hidden x ffn (plain MLP)

    @property
    def up(self) -> int:
        """GEMM-1's output columns: 2 x ffn (gate and up projections) for a gated expert, else ffn."""
        return 2 * self.ffn if self.gated else self.ffn

    def __post_init__(self):
        for f in ("gemm_efficiency", "mem_efficiency"):
            v = getattr(self, f)
            if not 0 < v <= 1:
                raise ValueError(f"{f} must be in (0, 1], got {v}")
        if self.tile < 1:
            raise ValueError(f"tile must be >= 1 token, got {self.tile}")
        if self.block_m is not None and self.block_m < 1:
            raise ValueError(f"block_m must be >= 1 row, got {self.block_m}")
        if self.block_n < 1 or self.sms < 0:
            raise ValueError(f"block_n must be >= 1 and sms >= 0, got {self.block_n}, {self.sms}")

    def padded(self, rows):
        """Rows of MMA work for a GEMM of ``rows`` rows: a multiple of ``block_m`` (else of ``tile``)."""
        q = self.block_m or self.tile
        return -(-np.asarray(rows) // q) * q

    def blocks(self, rows, n: int):
        """CTA blocks of a GEMM of ``rows`` rows and ``n`` output columns."""
        return -(-np.asarray(rows) // (self.block_m or self.tile)) * -(-n // self.block_n)

    def block_time(self, k: int) -> float:
        """Seconds of one CTA block (``block_m x block_n`` outputs, depth ``k``) on one SM: its K loop at
        ``gemm_efficiency`` of the SM's peak, then its epilogue (:meth:`epilogue`)."""
        return (2.0 * (self.block_m or self.tile) * self.block_n * k / (self.peak_flops / self.sms * self.gemm_efficiency)
                + self.epilogue())

    def epilogue(self) -> float:
        """Seconds of one block's epilogue on its SM, not overlapped with MMAs: the BF16 output tile written into
        shared memory and read out by the TMA store, then one L2 round trip for the next block's B scales. 0 without
        ``block_m`` or with ``pipeline_costs`` off."""
        if self.block_m is None or not self.pipeline_costs:
            return 0.0
        return (2 * self.block_m * self.block_n * 2 / SMEM_BYTES_PER_CLK + L2_HIT_CLK) / SM_CLOCK_HZ

    def _launch_sms(self, sm_fraction: float) -> int:
        """The whole SMs a launch on ``sm_fraction`` of the GPU's SMs gets (at least one)."""
        return max(1, int(math.floor(self.sms * sm_fraction + 1e-9)))

    def prologue(self, sm_fraction: float = 1.0) -> float:
        """Seconds from a launch's start to its first MMA: one HBM round trip, then the first stage (``block_m +
        block_n`` rows of ``BLOCK_K`` inputs) of every SM of the launch at the HBM rate. 0 without ``block_m``/``sms``
        or with ``pipeline_costs`` off."""
        if self.block_m is None or not self.sms or not self.pipeline_costs:
            return 0.0
        s = self._launch_sms(sm_fraction)
        stage = (self.block_m * self.act_bytes + self.block_n * self.weight_bytes) * BLOCK_K
        return HBM_CLK / SM_CLOCK_HZ + s * stage / (self.hbm_bytes_per_s * self.mem_efficiency)

    def tiles(self, rows):
        return -(-np.asarray(rows) // self.tile)

    def parts(self, rows, weight_reads=1.0):
        """(compute GEMM-1, memory GEMM-1, compute GEMM-2, memory GEMM-2) seconds for ``rows`` tokens on one
        expert, with all SMs and all of HBM (the two roofline terms, before taking the max)."""
        rows = np.asarray(rows, dtype=np.float64)
        padded = self.padded(rows)
        h, f, u = self.hidden, self.ffn, self.up
        comp = self.peak_flops * self.gemm_efficiency
        mem = self.hbm_bytes_per_s * self.mem_efficiency
        wr = np.asarray(weight_reads, dtype=np.float64)
        busy = rows > 0
        # Each block's epilogue on its SM, fluid over the SMs (0 without block_m / sms)
        epi = self.epilogue() / self.sms if self.sms else 0.0
        c1 = np.where(busy, 2.0 * padded * h * u / comp + self.blocks(rows, u) * epi, 0.0)
        m1 = np.where(busy, (wr * h * u * self.weight_bytes + rows * (h * self.act_bytes + f * 2)) / mem, 0.0)
        c2 = np.where(busy, 2.0 * padded * f * h / comp + self.blocks(rows, h) * epi, 0.0)
        m2 = np.where(busy, (wr * f * h * self.weight_bytes + rows * (f * 2 + h * 2)) / mem, 0.0)
        return c1, m1, c2, m2

    def times(self, rows, sm_fraction: float = 1.0, weight_reads=1.0):
        """(GEMM-1, GEMM-2) seconds for ``rows`` tokens on one expert when GEMMs get ``sm_fraction`` of the
        SMs (compute scales with it; HBM bandwidth stays whole: a memory-bound GEMM saturates HBM with a
        fraction of the SMs)."""
        c1, m1, c2, m2 = self.parts(rows, weight_reads)
        return np.maximum(c1 / sm_fraction, m1), np.maximum(c2 / sm_fraction, m2)

    def tile_parts(self, rows, per_tile_weights: bool = False):
        """:meth:`parts` for ONE tile of an expert that receives ``rows`` tokens in total.

        Default: the expert's weights are read once for all its tiles (grouped-GEMM reuse), so a tile costs
        its expert's time / its tile count. ``per_tile_weights``: every tile reads the weights again (a
        tile-at-a-time schedule without reuse)."""
        rows = np.asarray(rows, dtype=np.float64)
        n = np.maximum(self.tiles(rows), 1)
        if per_tile_weights:
            full = np.minimum(rows, self.tile)
            return self.parts(np.where(rows > 0, full, 0))
        return tuple(x / n for x in self.parts(rows))

    def tile_work(self, tile_rows, weight_reads):
        """(compute GEMM-1, memory GEMM-1, compute GEMM-2, memory GEMM-2) seconds of each tile of a
        tile-level scheme with all SMs and all of HBM: the tile's own rows, padded to ``block_m``, and
        ``weight_reads`` (per tile and stage: a pair ``(r1, r2)`` of arrays or scalars) of its expert's
        weights from HBM. Fluid over the SMs: a persistent kernel fills one tile's last wave with the next."""
        r1, r2 = weight_reads
        return self.parts_split(tile_rows, r1, r2)

    def parts_split(self, rows, reads1, reads2):
        """:meth:`parts` with separate weight reads for GEMM-1 and GEMM-2."""
        c1, m1, _, _ = self.parts(rows, reads1)
        _, _, c2, m2 = self.parts(rows, reads2)
        return c1, m1, c2, m2

    def launch_times(self, rows, group, n_groups: int, sm_fraction: float = 1.0):
        """(GEMM-1, GEMM-2) seconds of one grouped launch per group (a GPU, or one chunk of it) over the
        experts ``rows`` whose group is ``group``, on ``sm_fraction`` of the SMs: waves of CTA blocks
        against the launch's bytes (each expert's weights once, its activations in and out). Without
        ``block_m``/``sms``: the sum of the per-expert rooflines (:meth:`times`)."""
        rows = np.asarray(rows, dtype=np.float64)
        group = np.asarray(group)
        if self.block_m is None or not self.sms:
            t1, t2 = self.times(rows, sm_fraction)
            return (np.bincount(group, weights=t1, minlength=n_groups),
                    np.bincount(group, weights=t2, minlength=n_groups))
        h, f = self.hidden, self.ffn
        busy = rows > 0
        out = []
        for stage, (n, k) in enumerate(((self.up, h), (h, f))):
            blocks = np.bincount(group, weights=np.where(busy, self.blocks(rows, n), 0).astype(np.float64),
                                 minlength=n_groups)
            wts = np.bincount(group, weights=busy.astype(np.float64), minlength=n_groups)
            act = np.bincount(group, weights=rows, minlength=n_groups)
            in_b = self.act_bytes if stage == 0 else 2          # GEMM-2 reads the BF16 intermediate
            out.append(self._launch(blocks, wts * n * k * self.weight_bytes + act * (k * in_b + n * 2),
                                    k, sm_fraction))
        return out[0], out[1]

    def _launch(self, blocks, nbytes, k: int, sm_fraction: float = 1.0):
        """Seconds of a launch of ``blocks`` CTA blocks of depth ``k`` moving ``nbytes`` from/to HBM: its
        prologue, then waves of blocks (each with its epilogue), against the bytes at the HBM rate."""
        s = self._launch_sms(sm_fraction)
        blocks = np.asarray(blocks, dtype=np.float64)
        comp = np.where(blocks > 0, np.ceil(blocks / s - 1e-9) * self.block_time(k) + self.prologue(sm_fraction), 0.0)
        return np.maximum(comp, np.asarray(nbytes, dtype=np.float64) / (self.hbm_bytes_per_s * self.mem_efficiency))

    def grouped_gemm(self, groups: int, m: int, n: int, k: int, sm_fraction: float = 1.0) -> float:
        """Seconds of one grouped GEMM launch of ``groups`` problems ``m x n x k`` (weights ``n x k`` per
        group in the weight dtype, activations in, BF16 out): DeepGEMM's benchmark shapes."""
        if self.block_m is None or not self.sms:
            raise ValueError("grouped_gemm needs the tile-aware model (block_m and sms set)")
        blocks = groups * int(self.blocks(m, n))
        nbytes = groups * (n * k * self.weight_bytes + m * (k * self.act_bytes + n * 2))
        return float(self._launch(blocks, nbytes, k, sm_fraction))

    @classmethod
    def for_model(cls, model, system, dtype: str, **kw) -> "GemmModel":
        peak = (system.fp8_tflops if dtype == "fp8" else system.bf16_tflops) * 1e12
        wb = 1 if dtype == "fp8" else 2
        return cls(model.hidden, model.expert_ffn, peak, system.hbm_tbps * 1e12, wb, wb,
                   **dict(dict(gated=getattr(model, "gated", True)), **kw))




# DeepGEMM's README (github.com/deepseek-ai/DeepGEMM, the FP8 kernels' tables of early 2025, "tested on H800
# with NVCC 12.8"): (layout, groups, M per group, N, K, published TFLOPS). H800 = H100 SXM's tensor cores
# (1,979 dense FP8 TFLOPS, 132 SMs) and HBM (3.35 TB/s); the estimator's ``hgx-h100`` system.
DEEPGEMM_H800 = [
    ("dense", 1, 64, 4096, 7168, 287), ("dense", 1, 64, 7168, 2048, 295),
    ("dense", 1, 128, 4096, 7168, 533), ("dense", 1, 128, 7168, 2048, 510),
    ("dense", 1, 4096, 4096, 7168, 1304), ("dense", 1, 4096, 7168, 2048, 1025),
    ("contiguous", 4, 8192, 4096, 7168, 1297), ("contiguous", 4, 8192, 7168, 2048, 1099),
    ("contiguous", 8, 4096, 4096, 7168, 1288), ("contiguous", 8, 4096, 7168, 2048, 1093),
    ("masked", 1, 1024, 4096, 7168, 1233), ("masked", 1, 1024, 7168, 2048, 925),
    ("masked", 2, 512, 4096, 7168, 1040), ("masked", 2, 512, 7168, 2048, 916),
    ("masked", 4, 256, 4096, 7168, 932), ("masked", 4, 256, 7168, 2048, 815),
]


def deepgemm_validation(system, gemm_efficiency: float = 0.6, mem_efficiency: float = 0.75, block_m: int = 64,
                        block_n: int = 128) -> list[dict]:
    """The tile-aware model (and the earlier roofline: rows padded to 128, no waves) on DeepGEMM's published
    FP8 shapes: one row per shape with the published and estimated TFLOPS (useful FLOPs / launch time)."""
    peak, hbm = system.fp8_tflops * 1e12, system.hbm_tbps * 1e12
    new = GemmModel(1, 1, peak, hbm, 1, 1, gemm_efficiency, mem_efficiency, 128, block_m, block_n, system.sms)
    out = []
    for layout, g, m, n, k, pub in DEEPGEMM_H800:
        flops = 2.0 * g * m * n * k
        t_new = new.grouped_gemm(g, m, n, k)
        # The earlier model: per group max(compute on rows padded to 128, bytes), summed.
        padded = -(-m // 128) * 128
        t_old = g * max(2.0 * padded * n * k / (peak * gemm_efficiency),
                        (n * k + m * (k + 2 * n)) / (hbm * mem_efficiency))
        out.append({"layout": layout, "groups": g, "m": m, "n": n, "k": k, "published": pub,
                    "before": flops / t_old / 1e12, "estimate": flops / t_new / 1e12})
    return out
