"""End-to-end MoE test of the AL-TLB with the destinations' memory managers behind it.

DeepSeek-V3 routing (:mod:`verif.harness.moe_traffic`: ``uniform_topk`` over 256 experts, top-8, contiguous
placement on ``ports`` GPUs, ``dispatch_order`` tiles) drives one AL-TLB that serves every destination.
Each destination GPU's backing table is a :class:`verif.models.memory_manager.MemoryManagerSpec` (the
contract the RTL memory manager is verified against cycle by cycle in ``tb_memory_manager``): group 1 is
the dispatch group (allocates), group 2 the combine group on the same layout (lookup only, the
expert-output buffer).

The dispatch kernel's translations (one per packet per destination) go in tile by tile; as soon as every
translation of a tile has been answered, that tile's combine translations (``ld_reduce``, one per token
per destination) are interleaved with the dispatch of the later tiles, as token-centric fusion does.
Checked for every answer: a dispatch translation is exactly the row of the slot the destination's memory
manager assigned to that token, every packet of a token gets the same row, and combine finds the same
slot in the combine buffer. At the end every destination's slots are compact (0..n-1). The lockstep
cycle model runs throughout, with random stalls on every stream.

Settings: ``tokens`` (per GPU), ``tile``, ``packets`` (per row), ``latency``, ``jitter``, ``gap``,
``stall``.
"""

import collections

import cocotb

from hw.packet import ErrorCode

from verif.harness import tbenv
from verif.models.memory_manager import SET_GROUP, MemoryManagerSpec
from verif.harness.moe_traffic import dispatch_trace, row_bytes
from verif.tb.al_tlb import TlbEnv, unpack_resp

DISPATCH, COMBINE = 1, 2


@cocotb.test()
async def test_moe(dut):
    s = tbenv.settings()
    p = tbenv.params()
    G = p["ports"]
    T = s.get("tokens", 16)
    trace = dispatch_trace("deepseek-v3", gpus=G, tokens=T, tile=s.get("tile", 8), interleave="tile",
                           packets=s.get("packets", 3), seed=tbenv.seed())
    stride_d = -(-row_bytes(7168) // 16)          # FP8 row + scales, in 16-B units
    stride_c = 7168 * 2 // 16                     # BF16 expert output row
    base_d = {d: 0x1000_0000 * (d + 1) for d in range(G)}
    base_c = {d: 0x8000_0000 + 0x1000_0000 * d for d in range(G)}
    specs = {}
    for d in range(G):
        spec = MemoryManagerSpec(groups=4, layouts=1, index_bits=max(4, (G * T - 1).bit_length()),
                                 slots=G * T)
        spec.command(SET_GROUP, DISPATCH, 1, 1, 0, base_d[d], stride_d)
        spec.command(SET_GROUP, COMBINE, 1, 0, 0, base_c[d], stride_c)
        specs[d] = spec

    def serve(r):
        return specs[r["dst"]].serve(r["group"], r["index"], r["src"])

    env = TlbEnv(dut, serve=serve, latency=s.get("latency", 50), jitter=s.get("jitter", 30),
                 gap=s.get("gap", 0.15), stall=s.get("stall", 0.2))
    rows_seen = collections.defaultdict(set)          # (index, dst) -> dispatch rows answered

    def expected(r, cycle):
        slot = specs[r.dst].slot_of(0, r.index)
        assert slot is not None, f"{r}: no slot was assigned at destination {r.dst}"
        if r.group == DISPATCH:
            return base_d[r.dst] + slot * stride_d * 16, ErrorCode.NONE.value
        return base_c[r.dst] + slot * stride_c * 16, ErrorCode.NONE.value
    env.expected = expected

    # Requests per tile, in the order the egress sees them.
    per_tile = trace.tile * trace.packets
    dispatch_tiles = collections.defaultdict(list)
    for slot in range(max(len(st) for st in trace.packet_stream)):
        for src, stream in enumerate(trace.packet_stream):
            if slot < len(stream):
                index, _, mask = stream[slot]
                for d in range(G):
                    if d != src and (mask >> d) & 1:
                        dispatch_tiles[slot // per_tile].append((DISPATCH, index, d, src))
    combine_tiles = collections.defaultdict(list)
    for src in range(G):
        for t, mask in enumerate(trace.masks[src]):
            for d in range(G):
                if d != src and (mask >> d) & 1:
                    combine_tiles[t // trace.tile].append((COMBINE, src * T + t, d, src))
    n_tiles = len(dispatch_tiles)

    await env.start()
    env.configure(DISPATCH, (1 << G) - 1, G * T)
    env.configure(COMBINE, (1 << G) - 1, G * T)
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="configuration")

    tile_of_tag = {}
    open_dispatch = collections.Counter()
    dispatch_q = collections.deque()
    combine_q = collections.deque()
    done_tiles = set()
    for k in range(n_tiles):
        for req in dispatch_tiles[k]:
            dispatch_q.append((k, req))
    on_resp = env._on_resp

    def on_resp_tracked(bits, cycle):
        addr, code, tag = unpack_resp(bits)
        r = env.outstanding[tag][0]
        on_resp(bits, cycle)
        if r.group == DISPATCH:
            rows_seen[(r.index, r.dst)].add(addr)
            k = tile_of_tag.pop(tag)
            open_dispatch[k] -= 1
            if open_dispatch[k] == 0 and k not in done_tiles and sent_dispatch[k] == len(dispatch_tiles[k]):
                done_tiles.add(k)
                combine_q.extend(combine_tiles[k])        # the tile's tokens are all in: combine it
    env.resp.on_item = on_resp_tracked

    sent_dispatch = collections.Counter()
    turn = 0
    while dispatch_q or combine_q or env.outstanding or not env.req.idle:
        while len(env.req.queue) < 2 and (dispatch_q or combine_q):
            use_combine = combine_q and (not dispatch_q or turn % 2)
            turn += 1
            if use_combine:
                env.send(*combine_q.popleft())
            else:
                k, (g, index, d, src) = dispatch_q.popleft()
                tag = env.send(g, index, d, src)
                tile_of_tag[tag] = k
                open_dispatch[k] += 1
                sent_dispatch[k] += 1
        await env.cycler.cycles(1)
        if env.cycler.cycle > 200000:
            raise AssertionError("MoE run did not finish")
    await env.drain()

    total = sum(len(v) for v in dispatch_tiles.values()) + sum(len(v) for v in combine_tiles.values())
    assert sum(env.answers.values()) == total, (sum(env.answers.values()), total)
    assert set(env.answers) == {ErrorCode.NONE.value}, env.answers
    assert done_tiles == set(range(n_tiles)), f"combine ran for tiles {sorted(done_tiles)} of {n_tiles}"
    for key, rows in rows_seen.items():
        assert len(rows) == 1, f"token {key[0]} got several rows at destination {key[1]}: {rows}"
    for d in range(G):
        tokens_in = {i for st_src, st in enumerate(trace.masks) if st_src != d
                     for i in [st_src * T + t for t, m in enumerate(st) if (m >> d) & 1]}
        slots = sorted(specs[d].slot_of(0, i) for i in tokens_in)
        assert slots == list(range(len(tokens_in))), f"destination {d}: slots not compact: {slots[:10]}..."
    c = env.counters()
    # One backing read per missing key (dispatch and combine keys), more only after an eviction.
    assert len(env.mem.accepted) == c["MISSES"] >= 2 * len(rows_seen), (len(env.mem.accepted), c)
    dut._log.info(f"{total} translations ({len(rows_seen)} token-destination pairs, D={trace.distinct_destinations():.2f}"
                  f"), {env.lockstep.checked} cycles in lockstep; counters {c}")

