"""Fast hit-rate model of one AL-TLB on a translation stream, with the RTL's CAM policy and timing.

:func:`port_hit_rate` replays the translations one egress port sees (:mod:`verif.harness.moe_traffic`) through
:class:`verif.models.cam.CamCore` -- the same policy code (invalid-first, tree-PLRU victim, touch on hit
and on fill, unique keys) that :class:`verif.models.cam.CamCycleModel` wraps and that is checked cycle by
cycle against the RTL. It also follows the RTL's timing exactly, so that with the same acceptance cycles
it predicts the RTL's hit, miss and coalesce counts exactly (``dysharp bench al_tlb`` checks this):

* a request accepted in cycle t is looked up as of cycle t+1 (the CAM forwards the writes of cycles t and
  t+1 into its 2-cycle pipeline), its hit touches the PLRU tree in cycle t+1 before any fill of that
  cycle does, and a fill in that cycle is seen (it hits) unless it evicts the request's entry;
* a miss is filled in cycle t + 3 + latency (backing read issued in cycle t+3); a request for a key
  whose fill is still pending coalesces (it waits, without a second backing read).

Arrival times are ``times`` (the cycles the RTL accepted the requests) or ``j * spacing`` (an egress link
serialises packets: a 256-B packet is 17 flits). MSHRs are assumed sufficient: in the RTL, running out of
them delays acceptance, which ``times`` would then show.
"""

import heapq

from verif.models.cam import CamCore

__all__ = ["port_hit_rate", "FILL_DELAY"]

FILL_DELAY = 3          # cycles from acceptance to the backing read, on top of the backing latency


def port_hit_rate(keys, *, entries: int, latency: int = 0, spacing: int = 1, times=None) -> dict:
    """Hits, misses (backing reads) and coalesced misses for the key sequence ``keys``."""
    cam = CamCore(entries)
    pending = {}
    fills = []                       # heap of (fill cycle, key)
    hits = misses = coalesced = 0

    def do_fill():
        _, k = heapq.heappop(fills)
        del pending[k]
        cam.insert(k, 1)

    for j, key in enumerate(keys):
        t = int(times[j]) if times is not None else j * spacing
        c = t + 1                    # the cycle whose CAM state the lookup sees
        while fills and fills[0][0] < c:
            do_fill()
        hit = False
        if fills and fills[0][0] == c:
            fk = fills[0][1]
            target, _, _ = cam.insert_target(fk)
            e = cam.find(key)
            if fk == key:
                hit = True                              # forwarded from the fill
            elif e is not None and e != target:
                hit = True
                cam.plru.touch(e)                       # the hit's touch comes before the fill's
            do_fill()
        else:
            hit = cam.lookup(key) is not None
        if hit:
            hits += 1
        elif key in pending:
            coalesced += 1
        else:
            misses += 1
            pending[key] = t + FILL_DELAY + latency
            heapq.heappush(fills, (pending[key], key))
    n = hits + misses + coalesced
    return {"translations": n, "hits": hits, "misses": misses, "coalesced": coalesced,
            "hit_rate": hits / n if n else 0.0}
