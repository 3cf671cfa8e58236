"""Expert GEMM time: a roofline with efficiency parameters, at tile granularity.

An expert FFN is GEMM-1 (gate and up projections, ``hidden x 2*ffn``) then GEMM-2 (down projection,
``ffn x hidden``). For ``rows`` tokens on one expert with ``tile`` rows per tile, both GEMMs run on
``ceil(rows / tile) * tile`` rows (a partial tile costs a full one on the tensor cores) and take

    time = max(flops / (peak * gemm_efficiency * sm_fraction), bytes / (hbm * mem_efficiency))

with bytes = the expert's weights (read ``weight_reads`` times) + the activations in and out. The
compute dtype is the dispatch dtype (FP8 GEMMs when dispatch is FP8, as in DeepSeek-V3; BF16 otherwise);
outputs and the intermediate activation are BF16.
"""

import dataclasses

import numpy as np

__all__ = ["GemmModel"]


@dataclasses.dataclass(frozen=True)
class GemmModel:
    hidden: int
    ffn: int
    peak_flops: float          # dense tensor-core FLOP/s of the compute dtype
    hbm_bytes_per_s: float
    weight_bytes: int          # bytes per weight element (1 for FP8, 2 for BF16)
    act_bytes: int             # bytes per input activation element
    gemm_efficiency: float = 0.6
    mem_efficiency: float = 0.75
    tile: int = 128

    def __post_init__(self):
        for f in ("gemm_efficiency", "mem_efficiency"):
            v = getattr(self, f)
            if not 0 < v <= 1:
                raise ValueError(f"{f} must be in (0, 1], got {v}")
        if self.tile < 1:
            raise ValueError(f"tile must be >= 1 token, got {self.tile}")

    def tiles(self, rows):
        return -(-np.asarray(rows) // self.tile)

    def parts(self, rows, weight_reads=1.0):
        """(compute GEMM-1, memory GEMM-1, compute GEMM-2, memory GEMM-2) seconds for ``rows`` tokens on one
        expert, with all SMs and all of HBM (the two roofline terms, before taking the max)."""
        rows = np.asarray(rows, dtype=np.float64)
        padded = self.tiles(rows) * self.tile
        h, f = self.hidden, self.ffn
        comp = self.peak_flops * self.gemm_efficiency
        mem = self.hbm_bytes_per_s * self.mem_efficiency
        wr = np.asarray(weight_reads, dtype=np.float64)
        busy = rows > 0
        c1 = np.where(busy, 2.0 * padded * h * 2 * f / comp, 0.0)
        m1 = np.where(busy, (wr * h * 2 * f * self.weight_bytes + rows * (h * self.act_bytes + f * 2)) / mem, 0.0)
        c2 = np.where(busy, 2.0 * padded * f * h / comp, 0.0)
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

    @classmethod
    def for_model(cls, model, system, dtype: str, **kw) -> "GemmModel":
        peak = (system.fp8_tflops if dtype == "fp8" else system.bf16_tflops) * 1e12
        wb = 1 if dtype == "fp8" else 2
        return cls(model.hidden, model.expert_ffn, peak, system.hbm_tbps * 1e12, wb, wb, **kw)


