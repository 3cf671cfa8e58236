"""Fast hit-rate model of one AL-TLB on a translation stream, with the RTL's CAM policy.

:func:`port_hit_rate` replays the translations one egress port sees (:mod:`verif.moe_traffic`) through
:class:`verif.cam_model.CamCore` -- the same policy code (invalid-first, tree-PLRU victim, touch on hit
and on fill) that :class:`verif.cam_model.CamCycleModel` wraps and that is checked cycle by cycle against
the RTL. Time is explicit: translation ``j`` arrives at cycle ``j * spacing`` (the egress link serialises
packets: a 256-B packet is 17 flits); a miss is filled ``latency + 3`` cycles after it arrives (the RTL's
timing: backing read issued 3 cycles after acceptance); a request for a key whose fill is still pending
coalesces (it waits, without a second backing read). MSHRs are assumed sufficient (their number only
bounds the backing reads in flight: latency / spacing / translations-per-miss).
"""

import heapq

from .cam_model import CamCore

__all__ = ["port_hit_rate"]


def port_hit_rate(keys, *, entries: int, latency: int = 0, spacing: int = 1) -> dict:
    """Hits, misses (backing reads) and coalesced misses for the key sequence ``keys``."""
    cam = CamCore(entries)
    pending = {}
    fills = []
    hits = misses = coalesced = 0
    for j, key in enumerate(keys):
        t = j * spacing
        while fills and fills[0][0] <= t:
            _, k = heapq.heappop(fills)
            del pending[k]
            cam.insert(k, 1)
        if cam.lookup(key) is not None:
            hits += 1
        elif key in pending:
            coalesced += 1
        else:
            misses += 1
            pending[key] = t + latency + 3
            heapq.heappush(fills, (pending[key], key))
    n = hits + misses + coalesced
    return {"translations": n, "hits": hits, "misses": misses, "coalesced": coalesced,
            "hit_rate": hits / n if n else 0.0}
