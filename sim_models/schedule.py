"""List scheduling of coarse operations on two resources, the network and the GPU's compute.

Used for the chunked baselines (Tutel/FasterMoE-style pipelining, DualPipe-like two-micro-batch overlap):
each *chain* is a sequence of operations (``("net", seconds)`` or ``("comp", seconds)``), each depending on
the previous one in its chain. A resource runs one operation at a time; whenever it is free it starts the
ready operation that became ready first (ties: the earlier chain, then the earlier operation). Collective
operations are global (an all-to-all is paced by its slowest GPU), so one network and one compute
resource stand for all GPUs.
"""

__all__ = ["list_schedule"]


def list_schedule(chains: list[list[tuple[str, float]]]) -> tuple[float, dict]:
    """Makespan of ``chains`` and per-resource busy time."""
    for c in chains:
        for kind, dur in c:
            if kind not in ("net", "comp"):
                raise ValueError(f"unknown resource {kind!r}; valid: net, comp")
            if dur < 0:
                raise ValueError("operation durations must be >= 0")
    free = {"net": 0.0, "comp": 0.0}
    busy = {"net": 0.0, "comp": 0.0}
    nxt = [0] * len(chains)          # next op index per chain
    ready = [0.0] * len(chains)      # when that op becomes ready
    end = 0.0
    remaining = sum(len(c) for c in chains)
    while remaining:
        best = None
        for i, c in enumerate(chains):
            if nxt[i] >= len(c):
                continue
            kind, dur = c[nxt[i]]
            start = max(free[kind], ready[i])
            key = (start, ready[i], i)
            if best is None or key < best[0]:
                best = (key, i, kind, dur, start)
        _, i, kind, dur, start = best
        finish = start + dur
        free[kind] = finish
        busy[kind] += dur
        ready[i] = finish
        nxt[i] += 1
        end = max(end, finish)
        remaining -= 1
    return end, busy
