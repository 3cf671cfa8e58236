"""MoE routing and expert placement: which experts each token picks, and which GPU hosts each expert.

The core API every model and testbench uses:

* ``uniform_topk(tokens, experts, k, rng)`` -> int array ``(tokens, k)`` of distinct expert ids per token.
* ``place_experts(experts, gpus, kind="contiguous", rng=None)`` -> int array ``(experts,)``: GPU of each
  expert (``contiguous``: experts ``[g*E/G, (g+1)*E/G)`` on GPU ``g``; ``random``: a random balanced
  permutation).
* ``destination_masks(routing, placement)`` -> int array ``(tokens,)``: bit ``g`` set when the token has an
  expert on GPU ``g`` (the ``dymultimem`` destination mask).
* ``dispatch_order(routing, placement, src_gpu)`` -> list of (token, mask): the order a dispatch kernel on
  ``src_gpu`` emits its tokens (token order, each token once with its mask).
* ``expected_distinct_gpus(experts, gpus, k)``: the closed form D = G (1 - C(E - E/G, k) / C(E, k)).

Added for the traffic models and the estimator:

* ``zipf_topk`` / ``sample_topk``: top-k without replacement under Zipf-skewed (or any) expert popularity.
* ``group_limited_topk``: DeepSeek group-limited routing (``n_group`` groups, keep ``topk_group``).
* ``load_trace`` / ``save_trace``: replay of a ``.npy`` routing trace (format in ``TRACE_FORMAT``).
* ``place_redundant`` -> :class:`ExpertPlacement`: replicated hot experts; ``gpu_of`` maps picks to GPUs.
* ``routing_from_spec("zipf:0.3", ...)``: the CLI's routing strings.

Seeds: every function takes a ``numpy.random.Generator``; pass ``numpy.random.default_rng(seed)``.
"""

import math

import numpy as np

__all__ = ["uniform_topk", "place_experts", "destination_masks", "dispatch_order", "expected_distinct_gpus",
           "zipf_weights", "sample_topk", "zipf_topk", "group_limited_topk", "TRACE_FORMAT", "save_trace",
           "load_trace", "ExpertPlacement", "place_redundant", "routing_from_spec"]


def _check(tokens, experts, k):
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    if not 1 <= k <= experts:
        raise ValueError(f"top-k must be in 1..experts ({experts}), got {k}")


def uniform_topk(tokens: int, experts: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Each token picks ``k`` distinct experts uniformly at random."""
    _check(tokens, experts, k)
    # argpartition of i.i.d. uniforms gives a uniformly random k-subset per row, vectorised.
    keys = rng.random((tokens, experts))
    return np.argpartition(keys, k - 1, axis=1)[:, :k].astype(np.int64)


def place_experts(experts: int, gpus: int, kind: str = "contiguous", rng: np.random.Generator | None = None,
                  uneven: bool = False) -> np.ndarray:
    """GPU of each expert. ``uneven=True`` allows ``experts`` that are not a multiple of ``gpus``: GPU ``g``
    then holds the balanced block ``[floor(g E / G), floor((g+1) E / G))`` (sizes differ by at most 1)."""
    if gpus < 1 or (experts % gpus and not uneven) or experts < gpus:
        raise ValueError(f"experts ({experts}) must be a positive multiple of gpus ({gpus})"
                         + ("" if not uneven else " or at least gpus with uneven=True"))
    base = (np.arange(experts) * gpus) // experts
    if kind == "contiguous":
        return base
    if kind == "random":
        if rng is None:
            raise ValueError("random placement needs an rng")
        return rng.permutation(base)
    raise ValueError(f"unknown placement {kind!r}; valid: contiguous, random")


def destination_masks(routing: np.ndarray, placement: np.ndarray) -> np.ndarray:
    gpus = placement[routing]                      # (tokens, k)
    masks = np.zeros(routing.shape[0], dtype=np.uint64)
    for col in range(routing.shape[1]):
        masks |= np.left_shift(np.uint64(1), gpus[:, col].astype(np.uint64))
    return masks


def dispatch_order(routing: np.ndarray, placement: np.ndarray, src_gpu: int) -> list[tuple[int, int]]:
    """Tokens in the order a dispatch kernel emits them (token order), with their destination masks."""
    masks = destination_masks(routing, placement)
    return [(int(t), int(masks[t])) for t in range(routing.shape[0])]


def expected_distinct_gpus(experts: int, gpus: int, k: int) -> float:
    """Closed-form mean number of distinct GPUs a token's k experts land on under uniform top-k routing,
    ``sum_g 1 - C(E - n_g, k) / C(E, k)`` over the GPUs' expert counts ``n_g`` (the balanced blocks of
    :func:`place_experts`, which differ by at most one when ``gpus`` does not divide ``experts``)."""
    counts = np.bincount((np.arange(experts) * gpus) // experts, minlength=gpus)
    total = math.comb(experts, k)
    return float(sum(1.0 - math.comb(experts - int(n), k) / total for n in counts))


# ---------------------------------------------------------------------------------------------------------
# Skewed, group-limited and replayed routing. All return int64 ``(tokens, k)`` arrays of distinct expert ids.

def zipf_weights(experts: int, exponent: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """Expert popularity ``p_e ~ 1 / rank(e)^exponent``, normalised to sum 1.

    With an ``rng`` the ranks are a random permutation of the experts (hot experts are spread over the
    GPUs, as in a trained model); without one, expert 0 is the hottest (the worst case for contiguous
    placement). ``exponent = 0`` is uniform.
    """
    if experts < 1:
        raise ValueError(f"experts must be >= 1, got {experts}")
    if not exponent >= 0:
        raise ValueError(f"zipf exponent must be >= 0, got {exponent}")
    w = 1.0 / np.arange(1, experts + 1, dtype=np.float64) ** exponent
    if rng is not None:
        w = w[rng.permutation(experts)]
    return w / w.sum()


def sample_topk(tokens: int, weights: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` distinct experts per token, drawn without replacement with probabilities ``weights``.

    Successive sampling: pick 1 with probability ``w``, pick 2 with ``w`` renormalised over the rest, ...
    Drawing from the full distribution and redrawing only the rows that collide with an earlier pick is
    exactly that renormalised draw (rejection), and needs O(tokens * k) memory instead of O(tokens * E).
    """
    weights = np.asarray(weights, dtype=np.float64)
    experts = weights.shape[0]
    _check(tokens, experts, k)
    if np.any(weights < 0) or not weights.sum() > 0:
        raise ValueError("weights must be non-negative with a positive sum")
    if np.count_nonzero(weights) < k:
        raise ValueError(f"only {np.count_nonzero(weights)} experts have non-zero weight, fewer than top-k {k}")
    uniform = bool(np.all(weights == weights[0]))
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0

    def draw(n):
        if uniform:
            return rng.integers(0, experts, size=n)
        return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), experts - 1)

    out = np.empty((tokens, k), dtype=np.int64)
    for j in range(k):
        col = draw(tokens)
        rows = np.arange(tokens)
        while True:
            clash = np.zeros(len(rows), dtype=bool)
            for i in range(j):
                clash |= out[rows, i] == col
            if not clash.any():
                break
            out[rows[~clash], j] = col[~clash]
            rows = rows[clash]
            col = draw(len(rows))
        out[rows, j] = col
    return out


def zipf_topk(tokens: int, experts: int, k: int, exponent: float, rng: np.random.Generator,
              permute: bool = True) -> np.ndarray:
    """Top-k without replacement under Zipf(``exponent``) expert popularity (see :func:`zipf_weights`)."""
    w = zipf_weights(experts, exponent, rng if permute else None)
    return sample_topk(tokens, w, k, rng)


def group_limited_topk(tokens: int, experts: int, k: int, n_group: int, topk_group: int,
                       rng: np.random.Generator, weights: np.ndarray | None = None,
                       group_score: str = "top2", chunk: int = 8192) -> np.ndarray:
    """DeepSeek group-limited routing: experts form ``n_group`` contiguous groups; each token keeps its
    ``topk_group`` best groups and picks its top-k experts inside them.

    Affinities are Efraimidis-Spirakis keys ``u^(1/weight)`` (u uniform in [0, 1), like sigmoid gate
    scores), so without the group limit this is exactly top-k sampling without replacement with
    probabilities ``weights`` (uniform by default). A group's score is the sum of its two best affinities
    (``top2``, DeepSeek-V3) or its best one (``max``, DeepSeek-V2).
    """
    _check(tokens, experts, k)
    if n_group < 1 or experts % n_group:
        raise ValueError(f"n_group ({n_group}) must divide experts ({experts})")
    per = experts // n_group
    if not 1 <= topk_group <= n_group:
        raise ValueError(f"topk_group must be in 1..n_group ({n_group}), got {topk_group}")
    if k > topk_group * per:
        raise ValueError(f"top-k {k} does not fit in {topk_group} groups of {per} experts")
    if group_score not in ("top2", "max"):
        raise ValueError(f"unknown group_score {group_score!r}; valid: top2, max")
    inv_w = None
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)
        inv_w = (1.0 / np.maximum(w / w.max(), 1e-30)).astype(np.float32).reshape(n_group, per).T[:, None, :]
    out = np.empty((tokens, k), dtype=np.int64)
    for lo in range(0, tokens, chunk):
        n = min(chunk, tokens - lo)
        # Layout (expert-in-group, token, group): reductions over a group run along axis 0, which numpy does
        # as fast element-wise passes instead of slow short inner-axis reductions.
        g = rng.random((per, n, n_group), dtype=np.float32)
        if inv_w is not None:
            g **= inv_w                  # Efraimidis-Spirakis key u^(1/w)
        m1 = g.max(axis=0)
        if group_score == "top2" and per >= 2:
            gs = m1 + np.where(g == m1, np.float32(-1), g).max(axis=0)
        else:
            gs = m1
        keep = np.argpartition(-gs, topk_group - 1, axis=1)[:, :topk_group]          # (n, topk_group)
        cand_val = g[:, np.arange(n)[:, None], keep].transpose(1, 2, 0).reshape(n, -1)
        cand_id = (keep[:, :, None] * per + np.arange(per)).reshape(n, -1)
        pick = np.argpartition(-cand_val, k - 1, axis=1)[:, :k]
        out[lo:lo + n] = np.take_along_axis(cand_id, pick, axis=1)
    return out


# Trace replay --------------------------------------------------------------------------------------------
TRACE_FORMAT = """\
A routing trace is a NumPy ``.npy`` file holding one 2-D integer array of shape (tokens, k): row t is the
top-k expert ids of token t (any order, distinct within a row, each in [0, routed_experts)). Tokens are
assigned to GPUs in contiguous blocks: token t belongs to GPU t // (tokens // G); trailing tokens that do not
fill a block are dropped. Write one with ``numpy.save(path, ids)`` or ``sim_models.routing.save_trace``."""


def save_trace(path, routing: np.ndarray) -> None:
    routing = np.asarray(routing)
    _validate_trace(routing, None, str(path))
    np.save(path, routing.astype(np.int32 if routing.max(initial=0) < 2**31 else np.int64))


def load_trace(path, experts: int | None = None, k: int | None = None) -> np.ndarray:
    """Read a routing trace (format: :data:`TRACE_FORMAT`) and validate it against the model."""
    try:
        arr = np.load(path, allow_pickle=False)
    except OSError as e:
        raise ValueError(f"cannot read routing trace {str(path)!r}: {e}") from None
    except ValueError:    # not an .npy array (numpy then talks of pickled data)
        raise ValueError(f"routing trace {str(path)!r} is not a NumPy .npy array file. "
                         + TRACE_FORMAT.replace("``", "").replace("\n", " ")) from None
    _validate_trace(arr, experts, str(path), k)
    return arr.astype(np.int64)


def _validate_trace(arr, experts, where, k=None):
    if not isinstance(arr, np.ndarray) or arr.ndim != 2 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"routing trace {where!r} must be a 2-D integer array (tokens, k), "
                         f"got {getattr(arr, 'dtype', type(arr))} with shape {getattr(arr, 'shape', None)}")
    if k is not None and arr.shape[1] != k:
        raise ValueError(f"routing trace {where!r} has k={arr.shape[1]}, the model has top-k {k}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"routing trace {where!r} has negative expert ids")
    if experts is not None and arr.size and arr.max() >= experts:
        raise ValueError(f"routing trace {where!r} has expert id {int(arr.max())} >= routed_experts {experts}")
    if arr.shape[1] > 1:
        s = np.sort(arr, axis=1)
        if np.any(s[:, 1:] == s[:, :-1]):
            raise ValueError(f"routing trace {where!r} repeats an expert within a token's top-k")


# Redundant (replicated) hot experts ---------------------------------------------------------------------
class ExpertPlacement:
    """Expert instances on GPUs, with optional replicas of hot experts.

    ``replicas[e]`` lists the GPUs that hold expert ``e`` (the first is its home in the base placement).
    ``slots[g]`` lists the expert ids instantiated on GPU ``g`` (base experts first, then replicas).
    """

    def __init__(self, base: np.ndarray, gpus: int, extra: dict[int, list[int]] | None = None):
        self.base = np.asarray(base, dtype=np.int64)
        self.gpus = gpus
        self.experts = self.base.shape[0]
        self.replicas = [[int(self.base[e])] + list((extra or {}).get(e, [])) for e in range(self.experts)]
        self.slots = [[] for _ in range(gpus)]
        for e, gs in enumerate(self.replicas):
            for g in gs:
                self.slots[g].append(e)

    @property
    def redundant(self) -> int:
        return sum(len(r) - 1 for r in self.replicas)

    def gpu_of(self, routing: np.ndarray, src_gpu: np.ndarray) -> np.ndarray:
        """The GPU serving each (token, expert) pick, ``(tokens, k)``.

        A token uses a replica on its own GPU when there is one (no traffic), otherwise the replicas of an
        expert are used round-robin by token index (token t takes replica t mod n), which balances them.
        """
        out = self.base[routing]
        if not self.redundant:
            return out
        src = np.asarray(src_gpu)
        tok = np.arange(routing.shape[0])
        for e, gs in enumerate(self.replicas):
            if len(gs) == 1:
                continue
            rows, cols = np.nonzero(routing == e)
            choice = np.asarray(gs)[tok[rows] % len(gs)]
            local = np.isin(src[rows], gs)
            choice[local] = src[rows][local]
            out[rows, cols] = choice
        return out


def place_redundant(experts: int, gpus: int, load: np.ndarray, per_gpu: int, kind: str = "contiguous",
                    rng: np.random.Generator | None = None) -> ExpertPlacement:
    """Base placement (``kind``) plus ``per_gpu`` replica slots on every GPU for the hottest experts.

    Like DeepSeek's redundant-experts deployment (EPLB): the experts with the highest observed ``load``
    (tokens routed to each, e.g. ``np.bincount(routing.ravel())``) each get one extra replica, hottest first,
    placed greedily on the GPU with the least load so far that has a free slot and does not already hold
    that expert, until all ``per_gpu * gpus`` slots are used.
    """
    base = place_experts(experts, gpus, kind, rng, uneven=True)
    load = np.asarray(load, dtype=np.float64)
    if load.shape != (experts,):
        raise ValueError(f"load must have one entry per expert ({experts}), got shape {load.shape}")
    if per_gpu < 0 or per_gpu * gpus > experts:
        raise ValueError(f"redundant slots per GPU must be in 0..{experts // gpus}, got {per_gpu}")
    gpu_load = np.bincount(base, weights=load, minlength=gpus)
    free = np.full(gpus, per_gpu)
    extra: dict[int, list[int]] = {}
    for e in np.argsort(-load, kind="stable"):
        if not free.any():
            break
        e = int(e)
        share = load[e] / 2                       # two instances split the expert's tokens
        order = np.argsort(gpu_load, kind="stable")
        g = next((int(x) for x in order if free[x] > 0 and x != base[e]), None)
        if g is None:                             # only its own GPU has room left: try the next expert
            continue
        extra.setdefault(e, []).append(g)
        free[g] -= 1
        gpu_load[g] += share
        gpu_load[base[e]] -= share
    return ExpertPlacement(base, gpus, extra)


def routing_from_spec(spec: str, tokens: int, experts: int, k: int, rng: np.random.Generator, *,
                      n_group: int = 0, topk_group: int = 0) -> np.ndarray:
    """A routing from a short spec string, as the CLI takes it:

    * ``uniform`` -- :func:`uniform_topk` statistics (drawn with :func:`sample_topk`);
    * ``zipf:S`` -- Zipf exponent ``S`` (e.g. ``zipf:0.3``), hot experts randomly permuted;
    * ``group`` / ``group-zipf:S`` -- DeepSeek group-limited (needs the model's n_group/topk_group);
    * ``auto`` -- ``group`` when the model has a routing limit, else ``uniform``;
    * ``trace:PATH`` -- replay a ``.npy`` trace (format: :data:`TRACE_FORMAT`); ``tokens`` is ignored.
    """
    kind, _, arg = spec.partition(":")
    valid = "uniform, zipf:S, group, group-zipf:S, auto, trace:PATH"
    if kind == "auto":
        kind = "group" if n_group else "uniform"
    if kind == "uniform" and not arg:
        return sample_topk(tokens, np.ones(experts), k, rng)
    if kind in ("zipf", "group-zipf"):
        try:
            s = float(arg)
        except ValueError:
            raise ValueError(f"routing {spec!r}: the Zipf exponent must be a number, e.g. zipf:0.3") from None
        w = zipf_weights(experts, s, rng)
        if kind == "zipf":
            return sample_topk(tokens, w, k, rng)
        if not n_group:
            raise ValueError(f"routing {spec!r} needs a model with group-limited routing (n_group > 0)")
        return group_limited_topk(tokens, experts, k, n_group, topk_group, rng, weights=w)
    if kind == "group" and not arg:
        if not n_group:
            raise ValueError(f"routing {spec!r} needs a model with group-limited routing (n_group > 0)")
        return group_limited_topk(tokens, experts, k, n_group, topk_group, rng)
    if kind == "trace" and arg:
        return load_trace(arg, experts, k)
    raise ValueError(f"unknown routing {spec!r}; valid: {valid}")
