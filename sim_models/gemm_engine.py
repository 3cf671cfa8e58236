"""One GPU's expert GEMMs in a closed loop: the estimator's GEMM mechanism, fed tile by tile.

The estimator times a layer's expert GEMMs two ways (``docs/estimator.md``), and :class:`GemmEngine` runs
the same two on tiles handed to it as they become ready (the RTL system testbench's GEMM stand-in, which
learns of a tile when the GPU's Tile Status Table reports it ready):

* **pool** (fused, token-centric schemes: a persistent kernel on every SM): the SMs split between GEMM-1
  and GEMM-2 in proportion to their work (``share1``); GEMM-1 takes the tiles in ready order, GEMM-2 in
  GEMM-1 completion order, one tile at a time per stage on all of its SMs; once the GPU has no GEMM-1 left
  (all its tiles ready and the last GEMM-1 ended) a GEMM-2 that starts runs on every SM; the two stages
  share HBM while both run. This is :class:`sim_models.pipeline.SharedHbmGemm` (the estimator's engine
  for its fused schemes), itself the token-centric order of :class:`sim_models.scheduler.TilePolicy`.
* **phases** (sequential schemes, DeepEP-like: dispatch, then grouped GEMMs, then combine): once all the
  GPU's tiles are ready (its dispatch has been received), one grouped GEMM-1 launch over its experts on
  every SM, then one GEMM-2 launch; each launch takes the sum of its experts' rooflines over the expert's
  rows together (:meth:`sim_models.gemm.GemmModel.launch_times` without ``block_m``, the estimator's
  sequential GEMM). Every tile's GEMM-1 (GEMM-2) ends with its launch.

Work comes from a ``parts(rows, weight_reads) -> (c1, m1, c2, m2)`` function (compute with all SMs and
memory with all of HBM, per GEMM, in the caller's time unit: :meth:`sim_models.gemm.GemmModel.parts`
scaled). In the pool a tile's rows are padded by ``parts`` as one GEMM and it reads ``1 / tiles`` of its
expert's weights (the estimator's default ``weight_reuse="expert"``: an expert's weights streamed once
for all its tiles); the expert's tile count is known up front (the count exchange).

In a closed loop (a caller that learns of tiles as they become ready and acts on each GEMM-2 end):
:meth:`add` a tile when it is ready (ready times must not decrease), ask :meth:`next_done` for the next
GEMM-2 end given the tiles known so far, and :meth:`pop_done` it once the loop has reached that time. Both
are causal: a tile added later changes no time before its ready time, so an end the loop has reached is
final (:meth:`add` commits every event before the new tile's ready time, :meth:`pop_done` every event up
to the end it pops). Each query simulates only up to the next GEMM-2 end, so a layer costs time linear in
its tiles. :attr:`gemm1_end` / :attr:`gemm2_end`: the committed ends (``inf``: not yet reached).
"""

import numpy as np

from .pipeline import SharedHbmGemm

__all__ = ["GemmEngine", "MODES"]

MODES = ("pool", "phases")


class GemmEngine:
    """The GEMMs of one GPU (module docstring). ``expert_tiles``: tiles per expert (any hashable key), all
    of them, known before the first tile; ``share1``: GEMM-1's share of the SMs (and of HBM when both
    stages want more than they get) in the pool; ``mode``: ``"pool"`` or ``"phases"``."""

    def __init__(self, parts, expert_tiles: dict, share1: float, mode: str = "pool"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not 0 < share1 < 1:
            raise ValueError(f"share1 must be in (0, 1), got {share1!r}")
        if any(not isinstance(n, (int, np.integer)) or n < 1 for n in expert_tiles.values()):
            raise ValueError(f"expert_tiles must count at least one tile per expert, got {expert_tiles!r}")
        self.parts, self.mode, self.share1 = parts, mode, float(share1)
        self.expert_tiles = dict(expert_tiles)
        self.n_tiles = int(sum(self.expert_tiles.values()))
        nt = max(1, self.n_tiles)
        self.ready = np.full((1, nt), np.inf)
        self.experts, self.rows = [], []
        self._hbm = SharedHbmGemm(*(np.zeros((1, nt)) for _ in range(5)), [self.n_tiles], self.share1) \
            if mode == "pool" else None         # the work of each tile is filled in as it is added
        self._phase = None           # phases: (GEMM-1 launch end, GEMM-2 launch end) once all tiles are ready
        self._trial = None           # pool: the committed state run on to the next GEMM-2 end
        self.popped = 0              # GEMM-2 ends handed out by pop_done (in GEMM-2 order = ready order)

    def add(self, ready: float, expert, rows: int) -> None:
        """Tile ``len(self.experts)`` (of ``expert``, ``rows`` tokens) became ready at ``ready``."""
        i = len(self.experts)
        if i >= self.n_tiles:
            raise ValueError(f"more tiles than the {self.n_tiles} announced")
        if expert not in self.expert_tiles:
            raise ValueError(f"expert {expert!r} was not announced (experts: {sorted(self.expert_tiles)})")
        last = max(self.ready[0, i - 1] if i else -np.inf, self._hbm.now[0] if self._hbm is not None else -np.inf)
        if ready < last - 1e-6:           # (slack: a caller on an integer clock rounds ends to the nearest)
            raise ValueError(f"ready times must not decrease: {ready} after {last}")
        self.experts.append(expert)
        self.rows.append(int(rows))
        self.ready[0, i] = ready
        if self.mode == "pool":
            c1, m1, c2, m2 = (float(v) for v in self.parts(rows, 1.0 / self.expert_tiles[expert]))
            s = self.share1
            # Per tile: compute on the stage's SMs (GEMM-2 joined: on every SM), memory with all of HBM.
            for k, v in (("c1", c1 / s), ("m1", m1), ("c2", c2 / (1 - s)), ("m2", m2), ("c2j", c2)):
                getattr(self._hbm, k)[0, i] = v
            self._hbm.advance(self.ready, float(ready))          # commit what happens before this tile
            self._trial = None
        elif i + 1 == self.n_tiles:
            # One grouped launch per GEMM over the experts, each expert's rows as one GEMM.
            rows_of = {}
            for e, r in zip(self.experts, self.rows):
                rows_of[e] = rows_of.get(e, 0) + r
            t1 = t2 = 0.0
            for r in rows_of.values():
                c1, m1, c2, m2 = (float(v) for v in self.parts(r, 1.0))
                t1 += max(c1, m1)
                t2 += max(c2, m2)
            self._phase = (float(ready) + t1, float(ready) + t1 + t2)

    def next_done(self):
        """``(time, tile)`` of the next GEMM-2 end with the tiles known so far, or None (none known yet)."""
        i = self.popped
        if i >= len(self.experts):
            return None
        if self.mode == "phases":
            return (self._phase[1], i) if self._phase is not None else None
        if np.isfinite(self._hbm.gemm2_end[0, i]):
            return float(self._hbm.gemm2_end[0, i]), i
        if self._trial is None:
            self._trial = self._hbm.clone()
            self._trial.advance(self.ready, np.inf, stop_at_gemm2=True)
        t = self._trial.gemm2_end[0, i]
        return (float(t), i) if np.isfinite(t) else None

    def pop_done(self):
        """Hand out the next GEMM-2 end (:meth:`next_done`); the loop has reached it, so it is final."""
        nxt = self.next_done()
        if nxt is None:
            raise ValueError("no GEMM-2 end is known")
        if self._trial is not None and not np.isfinite(self._hbm.gemm2_end[0, nxt[1]]):
            self._hbm, self._trial = self._trial, None          # the trial stopped right after this end
        self.popped += 1
        return nxt

    @property
    def gemm1_end(self) -> np.ndarray:
        n = len(self.experts)
        if self.mode == "phases":
            return np.full(n, self._phase[0] if self._phase is not None else np.inf)
        return self._hbm.gemm1_end[0, :n].copy()

    @property
    def gemm2_end(self) -> np.ndarray:
        n = len(self.experts)
        if self.mode == "phases":
            return np.full(n, self._phase[1] if self._phase is not None else np.inf)
        return self._hbm.gemm2_end[0, :n].copy()
