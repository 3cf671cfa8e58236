"""MoE dispatch traffic as the AL-TLB sees it, built from :mod:`sim_models.routing`.

Each of ``gpus`` source GPUs routes ``tokens`` tokens with uniform top-k over the model's experts
(:func:`~sim_models.routing.uniform_topk`, experts placed contiguously by
:func:`~sim_models.routing.place_experts`, destination masks from
:func:`~sim_models.routing.destination_masks`) and emits them in the order of
:func:`~sim_models.routing.dispatch_order`. A token's row is ``packets`` ``dymultimem.st`` packets (row
bytes / 256-B payloads); its algebraic index is ``src * tokens + t`` (its row in the logical dispatch
tensor, the same on every GPU).

The dispatch kernel works a *tile* of ``tile`` tokens at a time (the token tracker's tile):

* ``interleave="tile"``: all tokens of the tile are in flight together (one per warp) and their packets
  go out chunk by chunk: packet 0 of every token of the tile, then packet 1, ...;
* ``interleave="token"``: one token at a time, all its packets back to back.

Packets from all sources meet at each destination's egress port (where its AL-TLB sits), ordered by
their issue slot on the sources' uplinks and then by source; a destination does not translate its own
tokens (local experts are written without the switch).
"""

import dataclasses

import numpy as np

from sim_models.moe_config import load_model
from sim_models.routing import destination_masks, dispatch_order, place_experts, uniform_topk

__all__ = ["DispatchTrace", "dispatch_trace", "row_bytes", "PAYLOAD_BYTES"]

PAYLOAD_BYTES = 256


def row_bytes(hidden: int) -> int:
    """Bytes of one FP8 dispatch row: ``hidden`` FP8 values plus one FP32 scale per 128 channels."""
    return hidden + 4 * ((hidden + 127) // 128)


@dataclasses.dataclass
class DispatchTrace:
    model: str
    gpus: int
    tokens: int                  # per source GPU
    tile: int
    interleave: str
    packets: int                 # packets per row
    masks: list                  # masks[src][t] = destination mask of token t of src
    packet_stream: list          # per source: list of (index, packet number, mask) in issue order

    def port_translations(self, dst: int) -> np.ndarray:
        """(n, 2) int array of (algebraic index, source) of the translations at ``dst``'s egress, in order."""
        rows = []
        for src, stream in enumerate(self.packet_stream):
            if src == dst:
                continue
            for slot, (index, _, mask) in enumerate(stream):
                if (mask >> dst) & 1:
                    rows.append((slot, src, index))
        rows.sort()
        return np.array([(i, s) for _, s, i in rows], dtype=np.int64).reshape(-1, 2)

    def distinct_destinations(self) -> float:
        """Mean number of destination GPUs per token, the token's own GPU included (the D of MISSION.md)."""
        return float(np.mean([bin(m).count("1") for ms in self.masks for m in ms]))


def dispatch_trace(model: str = "deepseek-v3", *, gpus: int = 8, tokens: int = 256, tile: int = 128,
                   interleave: str = "tile", packets: int | None = None, seed: int = 1) -> DispatchTrace:
    cfg = load_model(model)
    if interleave not in ("tile", "token"):
        raise ValueError(f"interleave must be 'tile' or 'token', got {interleave!r}")
    if tile < 1 or tokens < 1:
        raise ValueError("tile and tokens must be positive")
    if packets is None:
        packets = -(-row_bytes(cfg.hidden) // PAYLOAD_BYTES)
    rng = np.random.default_rng(seed)
    placement = place_experts(cfg.routed_experts, gpus)
    masks, streams = [], []
    for src in range(gpus):
        routing = uniform_topk(tokens, cfg.routed_experts, cfg.top_k, rng)
        order = dispatch_order(routing, placement, src)
        expected = destination_masks(routing, placement)
        assert all(int(expected[t]) == mask for t, mask in order), "dispatch_order disagrees with destination_masks"
        masks.append([mask for _, mask in order])
        stream = []
        for start in range(0, len(order), tile):
            chunk = order[start:start + tile]
            if interleave == "tile":
                for p in range(packets):
                    stream.extend((src * tokens + t, p, mask) for t, mask in chunk)
            else:
                for t, mask in chunk:
                    stream.extend((src * tokens + t, p, mask) for p in range(packets))
        streams.append(stream)
    return DispatchTrace(cfg.name, gpus, tokens, tile, interleave, packets, masks, streams)
