"""Power workload of the AL-TLB: one egress port's translations under MoE dispatch (DeepSeek-V3).

The AL-TLB sits at a switch egress port and translates one ``dymultimem.st`` packet header per packet for
its destination GPU (``docs/al_tlb.md``). The stream is that of :func:`verif.harness.moe_traffic.dispatch_trace`
at egress port 0 of a ``gpus``-GPU domain (``gpus`` = the DUT's ports by default): uniform top-8 routing
over 256 experts, contiguous placement, every source's tokens in tile order (packet 0 of each token of a
tile, then packet 1, ...), 29 packets of 256 B per 7392-B FP8 row. One translation is presented every
``spacing`` cycles (17 = one 16-flit packet plus its header per cycle at the egress: the port's line
rate); the backing table answers ``latency`` cycles after a read (1000: the NVLink + HBM round trip that
``docs/al_tlb.md`` assumes).

Each source starts at a random point of its first tile, so the sources are not in step and the misses
spread over time (in step, every source starts a tile at once and the misses come in bursts). Tiles are
``tile`` tokens (16 by default, not 128) so that the steady state arrives within a short simulation: a key returns after about ``(G - 1) x tile x D / G`` other keys, which fits the CAM, so after
the first round every packet but a token's first hits, one backing read per 29 translations: the same
mix as 128-token tiles at 1024 entries (hit rate 0.965), reached after ~2k instead of ~16k cycles. The
workload's registration asks for enough warm-up (:mod:`synth.workloads`).

Checks (a power figure from a run that went wrong would be meaningless): every translation is answered
with the backing table's address (the AL-TLB testbench's functional scoreboard, :class:`verif.tb.al_tlb.TlbEnv`).
The hit rate in the window is reported: 0.97 at the architecture point (1024 entries, 64 ports); a CAM
smaller than the reuse distance thrashes, which is a property of the size, not of the run.

Settings (``DYSHARP_ENV``): ``model``, ``gpus``, ``tile``, ``spacing``, ``latency``, ``warmup``,
``cycles``, ``out``. The JSON gives ``window_ps``, the translations, hits and misses in the window, and
``dispatched_flits`` = translations x 17 (each translation serves one 16-flit packet plus its header
leaving through this egress port).
"""

import json

import cocotb
from cocotb.utils import get_sim_time

from hw.packet import ErrorCode

from verif.harness import tbenv
from verif.harness.moe_traffic import dispatch_trace
from verif.harness.stream import record_cycles

PACKET_FLITS = 17      # one 256-B packet: header + 16 payload flits


def trace_requests(model: str, gpus: int, tile: int, needed: int, seed: int) -> list[tuple[int, int]]:
    """(algebraic index, source) of at least ``needed`` translations at egress port 0.

    The sources are not in step: each starts at a random point of its first tile's packet sequence (the
    packets before it are not sent), so their tile boundaries, and with them the misses, spread over
    time instead of arriving in bursts every time all sources start a tile together."""
    import numpy as np
    rng = np.random.default_rng(seed)
    tokens = 2 * tile
    while True:
        t = dispatch_trace(model, gpus=gpus, tokens=tokens, tile=tile, interleave="tile", seed=seed)
        rows = []
        for src, stream in enumerate(t.packet_stream):
            if src == 0:
                continue                      # a GPU's own tokens do not go through the switch
            skip = int(rng.integers(0, tile * t.packets))
            for slot, (index, _, mask) in enumerate(stream[skip:]):
                if mask & 1:
                    rows.append((slot, src, int(index)))
        rows.sort()
        if len(rows) >= needed or tokens >= 1 << 14:
            return [(i, s) for _, s, i in rows]
        tokens *= 2


@cocotb.test()
async def moe_translate(dut):
    from verif.tb.al_tlb import TlbEnv

    s = tbenv.settings()
    p = tbenv.params()
    warmup, window = s.get("warmup", 200), s.get("cycles", 1000)
    spacing, latency = s.get("spacing", PACKET_FLITS), s.get("latency", 1000)

    def serve(r):
        return ((r["index"] << 8) | (r["dst"] << 2)) & ((1 << 48) - 1), ErrorCode.NONE

    env = TlbEnv(dut, serve=serve, latency=latency, lockstep=False)
    needed = (warmup + window) // spacing + 8
    reqs = trace_requests(s.get("model", "deepseek-v3"), s.get("gpus", p["ports"]), s.get("tile", 16),
                          needed, tbenv.seed())
    await env.start()
    env.configure(1, (1 << p["ports"]) - 1, 1 << 18)
    start = env.cycler.cycle
    state = {"next": 0}

    def feed(cycle):
        # One translation every ``spacing`` cycles (queued: backpressure, e.g. MSHRs exhausted by the
        # compulsory misses at the start, delays them).
        while state["next"] < len(reqs) and cycle >= start + state["next"] * spacing:
            index, src = reqs[state["next"]]
            env.send(1, index, 0, src)
            state["next"] += 1
    env.cycler.watchers.append(feed)
    accepted = record_cycles(env.req)

    await env.cycler.cycles(warmup)
    c0 = env.counters()
    n0 = len(accepted)
    t0 = get_sim_time("ps")
    await env.cycler.cycles(window)
    t1 = get_sim_time("ps")
    c1 = env.counters()
    translations = len(accepted) - n0
    env.cycler.watchers.remove(feed)
    await env.drain(timeout=latency * 4 + 20000)
    hits = c1["HITS"] - c0["HITS"]
    misses = c1["MISSES"] - c0["MISSES"]
    coalesced = c1["COALESCED"] - c0["COALESCED"]
    assert translations > 0, "no translation in the measurement window"
    assert not any(code != ErrorCode.NONE.value for code in env.answers), f"error answers {dict(env.answers)}"
    result = {"window_ps": [t0, t1], "cycles": window, "translations": translations, "hits": hits,
              "misses": misses, "coalesced": coalesced, "hit_rate": hits / translations,
              "dispatched_flits": translations * PACKET_FLITS, "events": {"translation": translations},
              "gpus": s.get("gpus", p["ports"]), "tile": s.get("tile", 16), "spacing": spacing,
              "backing_latency": latency}
    dut._log.info(f"power workload: {result}")
    with open(s["out"], "w") as f:
        json.dump(result, f)
