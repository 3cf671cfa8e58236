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

Seeds: every function takes a ``numpy.random.Generator``; pass ``numpy.random.default_rng(seed)``.
"""

import math

import numpy as np

__all__ = ["uniform_topk", "place_experts", "destination_masks", "dispatch_order", "expected_distinct_gpus"]


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


def place_experts(experts: int, gpus: int, kind: str = "contiguous", rng: np.random.Generator | None = None
                  ) -> np.ndarray:
    if gpus < 1 or experts % gpus:
        raise ValueError(f"experts ({experts}) must be a positive multiple of gpus ({gpus})")
    per = experts // gpus
    base = np.repeat(np.arange(gpus), per)
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
    per = experts // gpus
    return gpus * (1.0 - math.comb(experts - per, k) / math.comb(experts, k))
