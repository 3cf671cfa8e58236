"""One MoE layer's work on G GPUs, independent of the communication scheme: the routing, where each pick is
served, the expert tiles each GPU runs and in which order, and the (token, GPU) pairs combine moves.

:func:`build_workload` draws the routing (deterministically from ``seed``), resolves placement (including
replicated hot experts) and builds the tile structure the tile-level engines need:

* a *row* is one (token, top-k pick): it lands in one tile of the serving GPU's expert instance;
* on each GPU, an instance's rows fill tiles of ``tile`` rows in arrival order, arrival order being the
  source's token index (dispatch progresses in lock-step through token indices) then the source GPU;
* a tile is ready at progress ``p`` = (last row's token index + 1); each GPU runs its tiles in ready order;
* with ``local_apart`` (:func:`workload_from_routing`), an instance's rows of its own GPU's tokens fill tiles
  of their own, in token order, ready at progress 0 (they are on the GPU before dispatch starts), and its
  rows from other GPUs fill its other tiles in arrival order (as the RTL layer's GPUs compute their own
  tokens, ``verif.models.moe_layer.MoeLayer.local_tiles``);
* a *pair* is a (token, GPU) with at least one row: one dispatch copy in, one combine partial out. Its
  partial can leave after the GPU's last tile holding one of its rows.
"""

import dataclasses
import functools

import numpy as np

from . import routing as rt
from .traffic import TokenDestinations

__all__ = ["Workload", "build_workload", "workload_from_routing", "parse_placement"]


def parse_placement(spec: str) -> tuple[str, int]:
    """``contiguous`` | ``random`` | ``redundant:N`` (N replica slots per GPU, contiguous base)."""
    kind, _, arg = spec.partition(":")
    if kind in ("contiguous", "random") and not arg:
        return kind, 0
    if kind == "redundant":
        try:
            n = int(arg)
        except ValueError:
            n = -1
        if n >= 0:
            return kind, n
    raise ValueError(f"unknown placement {spec!r}; valid: contiguous, random, redundant:N (N replica slots per GPU)")


@dataclasses.dataclass
class Workload:
    gpus: int
    tokens_per_gpu: int
    tile: int
    routing: np.ndarray             # (N, k) expert ids
    placement: rt.ExpertPlacement
    dest: TokenDestinations
    # instances (an expert on one GPU; replicas are separate instances)
    inst_gpu: np.ndarray            # (I,)
    inst_rows: np.ndarray           # (I,) rows (tokens) each instance computes
    # rows
    row_inst: np.ndarray            # (N*k,)
    row_token: np.ndarray           # (N*k,)
    # tiles, per GPU in run order; -1 / inf padded to NT columns
    tile_inst: np.ndarray           # (G, NT)
    tile_ready_p: np.ndarray        # (G, NT)
    tile_rows: np.ndarray           # (G, NT) rows in the tile
    # pairs, sorted by (GPU, tile position of the pair's last row)
    pair_token: np.ndarray          # (P,)
    pair_gpu: np.ndarray            # (P,)
    pair_pos: np.ndarray            # (P,)
    pair_start: np.ndarray          # (G, NT+1)

    @property
    def n_tokens(self):
        return self.routing.shape[0]

    @property
    def token_home(self):
        return self.dest.src

    @functools.cached_property
    def token_index(self):
        return np.arange(self.n_tokens) % self.tokens_per_gpu

    @functools.cached_property
    def pair_home(self):
        return self.dest.src[self.pair_token]

    @functools.cached_property
    def pair_remote(self):
        return self.pair_gpu != self.pair_home

    # Aggregates the coarse engines slice by token index or by peer (computed once per workload).
    @functools.cached_property
    def remote_pairs_by_j(self) -> np.ndarray:
        """(G, T): remote (token, GPU) pairs landing on GPU h from tokens with index j."""
        r = self.pair_remote
        t = self.tokens_per_gpu
        return np.bincount(self.pair_gpu[r] * t + self.token_index[self.pair_token[r]],
                           minlength=self.gpus * t).reshape(self.gpus, t)

    @functools.cached_property
    def d_remote_by_j(self) -> np.ndarray:
        """(G, T): remote destination GPUs of token j of GPU g."""
        return self.dest.d_remote.reshape(self.gpus, self.tokens_per_gpu)

    @functools.cached_property
    def inst_rows_by_j(self) -> np.ndarray:
        """(I, T): rows each expert instance gets from tokens with index j."""
        t = self.tokens_per_gpu
        n = len(self.inst_gpu)
        return np.bincount(self.row_inst * t + self.token_index[self.row_token], minlength=n * t).reshape(n, t)

    @functools.cached_property
    def pair_matrix(self) -> np.ndarray:
        """(G, G): remote pairs from home GPU g to serving GPU h."""
        r = self.pair_remote
        g = self.gpus
        return np.bincount(self.pair_home[r] * g + self.pair_gpu[r], minlength=g * g).reshape(g, g)

    @functools.cached_property
    def inst_rows_by_offset(self) -> np.ndarray:
        """(I, G): rows each instance gets from the GPU ``offset`` places before it ((h - src) mod G)."""
        g = self.gpus
        n = len(self.inst_gpu)
        off = (self.inst_gpu[self.row_inst] - self.dest.src[self.row_token]) % g
        return np.bincount(self.row_inst * g + off, minlength=n * g).reshape(n, g)

    def mean_distinct_gpus(self) -> float:
        return self.dest.mean_distinct_gpus()


def build_workload(experts: int, k: int, gpus: int, tokens_per_gpu: int, *, routing: str = "uniform",
                   placement: str = "contiguous", seed: int = 0, tile: int = 128, n_group: int = 0,
                   topk_group: int = 0) -> Workload:
    """The workload of a routing drawn from ``seed`` (see the module docstring). A drawn routing depends on
    the arguments only, so the last few workloads are kept per process and returned again, read-only (a
    sweep or a tornado varies the system around the same workload); a trace's is built every time."""
    args = (experts, k, gpus, tokens_per_gpu, routing, placement, seed, tile, n_group, topk_group)
    if routing.startswith("trace:"):
        return _build_workload(*args)
    return _kept_workload(*args)


@functools.lru_cache(maxsize=8)
def _kept_workload(*args) -> Workload:
    wl = _build_workload(*args)
    for part in (wl, wl.dest, wl.placement):
        for v in vars(part).values():
            if isinstance(v, np.ndarray):
                v.flags.writeable = False
    return wl


def _build_workload(experts, k, gpus, tokens_per_gpu, routing, placement, seed, tile, n_group,
                    topk_group) -> Workload:
    if tokens_per_gpu < 1:
        raise ValueError(f"tokens per GPU must be >= 1, got {tokens_per_gpu}")
    if tile < 1:
        raise ValueError(f"tile must be >= 1 token, got {tile}")
    if gpus > experts:
        raise ValueError(f"{gpus} GPUs exceed the {experts} routed experts (expert parallelism needs >= 1 "
                         f"expert per GPU)")
    kind, slots = parse_placement(placement)
    rng = np.random.default_rng(seed)
    ids = rt.routing_from_spec(routing, gpus * tokens_per_gpu, experts, k, rng, n_group=n_group,
                               topk_group=topk_group)
    if routing.startswith("trace:"):
        t = ids.shape[0] // gpus
        if t < 1:
            raise ValueError(f"routing trace has {ids.shape[0]} tokens, fewer than {gpus} GPUs")
        tokens_per_gpu = t
        ids = ids[:gpus * t]
    prng = np.random.default_rng([seed, 1])
    if kind == "redundant":
        load = np.bincount(ids.ravel(), minlength=experts)
        pl = rt.place_redundant(experts, gpus, load, slots, rng=prng)
    else:
        pl = rt.ExpertPlacement(rt.place_experts(experts, gpus, kind, prng, uneven=True), gpus)
    dest = TokenDestinations.from_routing(ids, pl, gpus)
    return _structure(ids, pl, dest, gpus, tokens_per_gpu, tile)


def workload_from_routing(ids: np.ndarray, placement, gpus: int, tile: int = 128,
                          local_apart: bool = False) -> Workload:
    """The workload of a given routing (``ids``: (tokens, k) global expert ids, token ``t`` at home
    ``t // (tokens / gpus)``) under a given placement (an :class:`~sim_models.routing.ExpertPlacement` or
    the expert -> GPU array of a one-instance placement): what an RTL run drew, for the estimator.
    ``local_apart``: each instance's rows of its own GPU's tokens in tiles of their own, ready at progress 0
    (module docstring); otherwise they share tiles with the rows that arrive."""
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.shape[0] % gpus:
        raise ValueError(f"routing must be (tokens, k) with tokens a multiple of {gpus} GPUs, got {ids.shape}")
    pl = placement if isinstance(placement, rt.ExpertPlacement) else rt.ExpertPlacement(np.asarray(placement), gpus)
    dest = TokenDestinations.from_routing(ids, pl, gpus)
    return _structure(ids, pl, dest, gpus, ids.shape[0] // gpus, tile, local_apart)


def _structure(ids, pl, dest, gpus, tpg, tile, local_apart=False) -> Workload:
    n, k = ids.shape
    # Instances: (GPU, expert) -> id.
    inst_of = np.full((gpus, pl.experts), -1, dtype=np.int64)
    inst_gpu = []
    for g in range(gpus):
        for e in pl.slots[g]:
            inst_of[g, e] = len(inst_gpu)
            inst_gpu.append(g)
    inst_gpu = np.asarray(inst_gpu, dtype=np.int64)
    n_inst = len(inst_gpu)
    eg = dest.expert_gpu
    row_inst = inst_of[eg, ids].ravel()
    row_token = np.repeat(np.arange(n), k)
    j = row_token % tpg
    inst_rows = np.bincount(row_inst, minlength=n_inst)
    # Tile groups: an instance's rows fill its tiles, or with local_apart its own GPU's rows (group 2i) and
    # the arriving ones (2i + 1) fill tiles apart.
    if local_apart:
        local = inst_gpu[row_inst] == row_token // tpg
        row_grp, n_grp = 2 * row_inst + (~local), 2 * n_inst
    else:
        local, row_grp, n_grp = np.zeros(n * k, dtype=bool), row_inst, n_inst
    # Arrival order within a group: token index j, then source GPU. Visit the rows in (j, source)
    # order and sort stably by group alone (a radix sort on small integers).
    visit = (np.arange(tpg)[:, None] + np.arange(gpus)[None, :] * tpg).ravel()          # tokens by (j, src)
    rows_visit = (visit[:, None] * k + np.arange(k)[None, :]).ravel()
    order = rows_visit[np.argsort(_small(row_grp[rows_visit]), kind="stable")]
    s_grp = row_grp[order]
    grp_rows = np.bincount(row_grp, minlength=n_grp)
    grp_start = np.concatenate([[0], np.cumsum(grp_rows)])
    rank = np.arange(n * k) - grp_start[s_grp]
    grp_tiles = -(-grp_rows // tile)
    tile_off = np.concatenate([[0], np.cumsum(grp_tiles)])
    row_tile = np.empty(n * k, dtype=np.int64)
    row_tile[order] = tile_off[s_grp] + rank // tile
    n_tiles = int(tile_off[-1])
    # Tile ready progress = last row's token index + 1 (a local tile's rows: 0); rows per tile.
    t_p = np.zeros(n_tiles)
    np.maximum.at(t_p, row_tile, np.where(local, 0.0, (j + 1).astype(np.float64)))
    t_rows = np.bincount(row_tile, minlength=n_tiles)
    t_inst = np.repeat(np.arange(n_grp), grp_tiles) // (2 if local_apart else 1)
    t_gpu = inst_gpu[t_inst]
    # Per GPU run order: ready progress, then instance.
    t_order = np.lexsort((t_inst, t_p, t_gpu))
    per_gpu = np.bincount(t_gpu, minlength=gpus)
    nt = max(1, int(per_gpu.max(initial=0)))
    g_start = np.concatenate([[0], np.cumsum(per_gpu)])
    pos = np.empty(n_tiles, dtype=np.int64)
    pos[t_order] = np.arange(n_tiles) - g_start[t_gpu[t_order]]
    tile_inst = np.full((gpus, nt), -1, dtype=np.int64)
    tile_ready = np.full((gpus, nt), np.inf)
    tile_rows = np.zeros((gpus, nt), dtype=np.int64)
    tile_inst[t_gpu, pos] = t_inst
    tile_ready[t_gpu, pos] = t_p
    tile_rows[t_gpu, pos] = t_rows
    # Pairs: (token, GPU); position = the max over the token's rows on that GPU. Sort each token's k picks
    # by GPU; runs of one GPU are one pair.
    pos2 = pos[row_tile].reshape(n, k)
    by_gpu = np.argsort(eg, axis=1, kind="stable")
    g_sorted = np.take_along_axis(eg, by_gpu, axis=1)
    p_sorted = np.take_along_axis(pos2, by_gpu, axis=1)
    start = np.ones((n, k), dtype=bool)
    start[:, 1:] = g_sorted[:, 1:] != g_sorted[:, :-1]
    flat_start = np.nonzero(start.ravel())[0]
    p_pos = np.maximum.reduceat(p_sorted.ravel(), flat_start)
    p_gpu = g_sorted.ravel()[flat_start]
    p_tok = flat_start // k
    po = np.argsort(_small(p_gpu * (nt + 1) + p_pos), kind="stable")      # token order kept within a tile
    p_tok, p_gpu, p_pos = p_tok[po], p_gpu[po], p_pos[po]
    flat = p_gpu * (nt + 1) + p_pos
    bounds = (np.arange(gpus)[:, None] * (nt + 1) + np.arange(nt + 1)[None, :])
    pair_start = np.searchsorted(flat, bounds, side="left")
    return Workload(gpus, tpg, tile, ids, pl, dest, inst_gpu, inst_rows, row_inst, row_token,
                    tile_inst, tile_ready, tile_rows, p_tok, p_gpu, p_pos, pair_start)


def _small(a: np.ndarray) -> np.ndarray:
    """The narrowest integer dtype holding ``a``: numpy's stable sort is a radix sort for 8/16-bit keys."""
    hi = int(a.max(initial=0))
    return a.astype(np.uint16 if hi < 2**16 else np.int64)
