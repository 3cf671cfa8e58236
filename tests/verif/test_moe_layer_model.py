"""The MoE-layer reference and run plan (verif/models/moe_layer.py), independent of the RTL."""

import collections
import math

import numpy as np
import pytest

from hw.gpu_nic.request_gen import DescOp
from hw.packet import Opcode
from sim_models import routing as routing_mod
from sim_models.traffic import payload_bytes
from verif.harness.gpu_memory import GpuMemory
from verif.models.gpu_nic import desc_error, request_packets
from verif.models.memory_manager import MemoryManagerSpec
from verif.models import moe_layer as ml

MODELS = ("deepseek-v3", "qwen3-30b-a3b")


@pytest.fixture(scope="module", params=MODELS)
def layer(request):
    return ml.build_layer(model=request.param, gpus=4, tokens=48, hidden=128, seed=3)


def direct_reference(L):
    """The MoE layer written out token by token, pick by pick (no shared code with MoeLayer.reference)."""
    out = np.zeros((L.N, L.hidden))
    for t in range(L.N):
        for j in range(L.k):
            wg, wu, wd = L.weights[int(L.routing[t, j])]
            a = np.maximum(wg @ L.x[t], 0) * (wu @ L.x[t])
            out[t] += L.gates[t, j] * (wd @ a)
    return out


def test_routing_is_the_models(layer):
    L = layer
    assert L.routing.shape == (L.N, L.k)
    assert L.k == 8 and L.E == {"deepseek-v3": 256, "qwen3-30b-a3b": 128}[L.cfg.name]
    assert np.all(np.sort(L.routing, axis=1)[:, 1:] != np.sort(L.routing, axis=1)[:, :-1])   # distinct picks
    assert np.array_equal(L.placement, routing_mod.place_experts(L.E, L.G))
    if L.cfg.n_group:
        # group-limited: every token's picks lie in at most topk_group of the n_group groups
        groups = L.routing // (L.E // L.cfg.n_group)
        assert max(len(set(r)) for r in groups.tolist()) <= L.cfg.topk_group
    else:
        groups = L.routing // (L.E // 8)
        assert max(len(set(r)) for r in groups.tolist()) > 4      # no limit: some token spans > 4 of 8 blocks


def test_reference_equals_direct_numpy(layer):
    ref = layer.reference()
    assert np.array_equal(ref, direct_reference(layer))
    assert np.any(ref != 0)


def test_partials_sum_to_reference_exactly_in_bf16(layer):
    L = layer
    ref = L.reference()
    parts = L.partials()
    by_token = collections.defaultdict(list)
    for (g, t), v in parts.items():
        by_token[t].append((g, v))
    for t in range(L.N):
        gpus = sorted(g for g, _ in by_token[t])
        assert gpus == sorted(set(L.expert_gpu[t].tolist()))
        # every order of summing the partials, in BF16 steps, gives the reference bit for bit
        vs = [v for _, v in sorted(by_token[t], key=lambda gv: gv[0])]
        for order in (vs, vs[::-1]):
            acc = np.zeros(L.hidden, dtype=np.float32)
            for v in order:
                ml.bf16_bits(v)                                   # each partial is exact in BF16
                acc = ml.bf16_values(ml.bf16_bits(acc + v.astype(np.float32)))
            assert np.array_equal(acc.astype(np.float64), ref[t])
    # pair outputs pre-summed per GPU: a GPU that holds two of a token's experts gives one partial
    two = [(t, g) for t in range(L.N) for g in set(L.expert_gpu[t].tolist())
           if np.count_nonzero(L.expert_gpu[t] == g) >= 2]
    assert two, "the routing should put two experts of some token on one GPU"
    t, g = two[0]
    js = np.nonzero(L.expert_gpu[t] == g)[0]
    assert np.array_equal(parts[(g, t)], sum(L.pair_output(t, j) for j in js))


def test_row_encoding_round_trips(layer):
    L = layer
    for t in (0, L.N // 2, L.N - 1):
        flits = L.row(t)
        assert len(flits) == L.row_flits and L.meta_flit == L.row_flits - 1
        x, g, e = ml.decode_row(flits, L.hidden, L.p.dtype)
        assert np.array_equal(x, L.x[t]) and np.array_equal(g, L.gates[t]) and e == L.routing[t].tolist()
        v = L.reference()[t]
        assert np.array_equal(ml.decode_bf16_row(ml.encode_bf16_row(v), L.hidden), v)
    with pytest.raises(ValueError, match="BF16"):
        ml.bf16_bits([1.0 + 2 ** -10])


def test_bf16_dispatch_rows():
    L = ml.build_layer(model="qwen3-30b-a3b", gpus=4, tokens=8, hidden=64, dtype="bf16")
    assert L.row_flits == 64 * 2 // 16 + 2
    x, g, e = ml.decode_row(L.row(5), 64, "bf16")
    assert np.array_equal(x, L.x[5]) and e == L.routing[5].tolist()


@pytest.mark.parametrize("dtype", ["fp8", "bf16"])
def test_rows_decoded_and_encoded_at_once_equal_one_by_one(dtype):
    """The testbench's per-tile forms (:func:`decode_rows_bytes`, :func:`encode_bf16_rows_bytes`) give what
    the one-row forms give row by row; FP8 bytes of a value outside the layer's data are refused."""
    L = ml.build_layer(model="qwen3-30b-a3b", gpus=4, tokens=8, hidden=64, dtype=dtype)
    fb = L.flit_bytes
    rows = [ml._from_flits(L.row(t), fb) for t in (3, 0, 17, 31)]
    x, g, e = ml.decode_rows_bytes(b"".join(rows), len(rows), L.hidden, dtype, fb)
    for k, raw in enumerate(rows):
        x1, g1, e1 = ml.decode_row_bytes(raw, L.hidden, dtype, fb)
        assert np.array_equal(x[k], x1) and np.array_equal(g[k], g1) and e[k] == e1
    assert np.array_equal(x, L.x[[3, 0, 17, 31]]) and e == [L.routing[t].tolist() for t in (3, 0, 17, 31)]
    v = L.reference()[[3, 0, 17]]
    assert ml.encode_bf16_rows_bytes(v, fb) == b"".join(ml.encode_bf16_bytes(r, fb) for r in v)
    raw = ml.encode_bf16_rows_bytes(v, fb)
    n = len(raw) // len(v)
    for k, r in enumerate(v):       # each row reads back as its BF16 rounding
        back = ml.decode_bf16_row(ml._to_flits(raw[k * n:(k + 1) * n], n // fb, fb), L.hidden, fb)
        assert np.array_equal(back, ml.bf16_values(ml.bf16_bits(r)).astype(np.float64))
    assert ml.fp8_bytes([2.0, -1, 0]) == bytes([0x40, 0xB8, 0x00])
    with pytest.raises(ValueError, match="no FP8 byte"):
        ml.fp8_bytes([1, 3])


@pytest.mark.parametrize("kw", [dict(dtype="fp8"), dict(dtype="bf16"), dict(dtype="bf16", system="nvl72", hidden=80),
                                dict(dtype="fp8", system="nvl72", hidden=48)])
def test_rows_encoded_at_once_equal_one_by_one(kw):
    """:attr:`MoeLayer.rows_bytes` (every row encoded at once) is :func:`encode_row` of each token, 16- and
    32-byte flits, FP8 and BF16; the per-token helpers read Python lists with numpy's values."""
    L = ml.build_layer(model="qwen3-30b-a3b", gpus=4, tokens=8, **kw)
    fb = L.flit_bytes
    for t in range(L.N):
        flits = ml.encode_row(L.x[t], L.gates[t], [int(e) for e in L.routing[t]], L.p.dtype, fb)
        assert L.row(t) == flits and L.row_raw(t) == ml._from_flits(flits, fb)
        home = int(L.home[t])
        gpus = [int(g) for g in L.expert_gpu[t]]
        assert L.remote_mask(t) == sum(1 << g for g in set(gpus) if g != home)
        assert L.remote_pairs(t) == [(g, int(e)) for g, e in zip(gpus, L.routing[t]) if g != home]
        assert L.tracked_pairs(t, "nvls") == [(g, int(e)) for g, e in zip(gpus, L.routing[t])]


def pair_set(L):
    return collections.Counter((t, int(e)) for t in range(L.N) for e in L.routing[t])


def experts_on(L, t, g):
    return [int(e) for e in L.routing[t] if L.placement[e] == g]


@pytest.mark.parametrize("scheme", ml.SCHEMES)
def test_work_lists_cover_every_pair_once(layer, scheme):
    L = layer
    work = L.work(scheme)
    unicast = scheme in ml.UNICAST_SCHEMES
    static = scheme in ml.STATIC_SCHEMES
    group = {h["handle"]: h["mask"] for h in L.static_groups(scheme)}
    dispatched, combined = collections.Counter(), collections.Counter()
    for w in work:
        for e, toks in w.local_tiles:
            assert len(toks) <= L.p.tile_size and L.placement[e] == w.gpu
            for t in toks:
                assert L.home[t] == w.gpu
                dispatched[(t, e)] += 1
                combined[(t, e)] += 1           # local partial: added at home
        if static:     # an AllGather: every home token, to the static group of every GPU (the issuer too)
            assert not w.local_tiles and [d.index for d in w.dispatch] == w.home_tokens
        for d in w.dispatch:
            assert desc_error(d, ports=L.G, groups=4, unicast=unicast, static=static) is None
            assert d.op == DescOp.STORE.value and L.home[d.index] == w.gpu
            assert static or not d.mask >> w.gpu & 1
            assert d.addr == ml.X_BASE + ((d.index - w.gpu * L.T) << L.row_shift) and d.length == L.row_flits
            members = group[d.group] if static else d.mask
            for g in range(L.G):
                if static and members >> g & 1:
                    for e in experts_on(L, d.index, g):
                        dispatched[(d.index, e)] += 1
                elif members >> g & 1:
                    es = experts_on(L, d.index, g)
                    assert es, "a mask bit for a GPU without an expert of the token"
                    for e in es:
                        dispatched[(d.index, e)] += 1
        for c in w.combine:
            assert L.home[c.token] == w.gpu
            if c.desc is None:
                assert not c.pairs
                continue
            d = c.desc
            assert desc_error(d, ports=L.G, groups=4, unicast=False, static=static) is None
            assert d.op == DescOp.LD_REDUCE.value and d.index == c.token and d.length == L.comb_flits
            members = group[d.group] if static else d.mask
            got = sorted((g, e) for g in range(L.G) if members >> g & 1 for e in experts_on(L, c.token, g))
            assert got == sorted(c.pairs)
            for _, e in c.pairs:
                combined[(c.token, e)] += 1
        for r in w.returns:
            d = r.desc
            assert unicast and desc_error(d, ports=L.G, groups=4, unicast=True) is None
            assert d.mask == 1 << int(L.home[r.token]) and r.gpu == w.gpu != L.home[r.token]
            assert d.index == r.token and r.row == w.gpu * L.N + r.token
            assert d.addr == ml.COMB_BASE + (r.token << L.row_shift)
            assert sorted(r.pairs) == sorted((w.gpu, e) for e in experts_on(L, r.token, w.gpu))
            for _, e in r.pairs:
                combined[(r.token, e)] += 1
        if unicast:
            assert not w.combine
        else:
            assert not w.returns and sorted(c.token for c in w.combine) == w.home_tokens
    assert dispatched == pair_set(L)
    assert combined == pair_set(L)


def test_fused_combine_order_is_the_schedulers(layer):
    L = layer
    sch = L.schedule()
    assert not sch.table_errors
    for w in L.work("dysharp"):
        planned = [c.planned for c in w.combine]
        assert planned == sorted(planned) and min(planned) >= 0
        assert planned == sorted(int(sch.combine_issue[t]) for t in w.home_tokens)
    basic = L.work("dysharp-basic")
    assert all(c.planned == -1 for w in basic for c in w.combine)
    assert [[c.token for c in w.combine] for w in basic] == [w.home_tokens for w in basic]


def rtl_flits(L, scheme):
    """Flits per GPU per direction derived from the work lists: the requester's uplink packets from the
    request generator's reference model, the switch's deliveries by opcode semantics."""
    mp = L.p.max_payload
    G = L.G
    up = {ph: [0] * G for ph in ("dispatch", "combine", "fills")}
    down = {ph: [0] * G for ph in ("dispatch", "combine", "fills")}
    mem = GpuMemory()
    unicast = scheme in ml.UNICAST_SCHEMES
    static = scheme in ml.STATIC_SCHEMES
    group = {h["handle"]: h["mask"] for h in L.static_groups(scheme)}     # the switch's static group table

    def rbase(g):
        rb = L.gen_config(g, scheme)["rbase"]
        return [rb.get(i, 0) for i in range(max(rb) + 1)]

    def uplink(g, d):
        pk, _, _ = request_packets(d, port=g, unicast=unicast, row_shift=L.row_shift, rbase=rbase(g),
                                   max_payload=mp, memory=mem, tags=32, next_tag=0, static=static)
        return pk
    for w in L.work(scheme):
        g = w.gpu
        for d in w.dispatch:
            for p in uplink(g, d):
                n = 1 + len(p.payload)
                up["dispatch"][g] += n
                members = group[p.header.group] if static else d.mask
                dests = [p.header.dst] if unicast else [x for x in range(G) if members >> x & 1]
                for x in dests:
                    down["dispatch"][x] += n
                    if not unicast and not static and p.header.offset == 0:
                        down["fills"][x] += 1              # TLB_FILL for the row's key
                        up["fills"][x] += 1                # TLB_FILL_RESP
        for r in w.returns:
            for p in uplink(g, r.desc):
                assert p.header.opcode == Opcode.WRITE.value
                up["combine"][g] += 1 + len(p.payload)
                down["combine"][p.header.dst] += 1 + len(p.payload)
        for c in w.combine:
            if c.desc is None:
                continue
            for p in uplink(g, c.desc):
                op = Opcode.MM_LD_REDUCE if static else Opcode.DYN_LD_REDUCE
                assert p.header.opcode == op.value and not p.payload
                up["combine"][g] += 1                      # the request
                down["combine"][g] += 1 + p.header.length  # the reduced result
                members = group[p.header.group] if static else c.desc.mask
                for x in range(G):
                    if members >> x & 1:
                        down["combine"][x] += 1            # RED_READ
                        up["combine"][x] += 1 + p.header.length   # RED_READ_RESP
                        if not static and p.header.offset == 0:
                            down["fills"][x] += 1
                            up["fills"][x] += 1
    return up, down


@pytest.mark.parametrize("scheme", ml.SCHEMES)
def test_flits_equal_traffic_accounting(layer, scheme):
    L = layer
    pred = L.predicted_flits(scheme)
    up, down = rtl_flits(L, scheme)
    for ph in ("dispatch", "combine", "fills"):
        assert pred[ph]["up"] == up[ph], ph
        assert pred[ph]["down"] == down[ph], ph
    assert pred["total"]["up"] == [sum(up[ph][g] for ph in up) for g in range(L.G)]


def test_flit_prediction_figures():
    """Hand-checked figures: DeepSeek-V3 row = 132 B FP8 (9 flits) + gates + metadata = 11 flits, one packet
    of 12 wire flits; every token has a remote expert here, so each dynamic uplink carries T x 12."""
    L = ml.build_layer(model="deepseek-v3", gpus=4, tokens=64, hidden=128, seed=1)
    assert (L.row_flits, L.comb_flits, L.row_shift) == (11, 16, 8)
    p = L.predicted_flits("dysharp")
    d_remote = L.dest.d_remote.reshape(4, 64)
    assert p["dispatch"]["up"] == [int(np.count_nonzero(d_remote[g])) * 12 for g in range(4)] == [768] * 4
    u = L.predicted_flits("deepep")
    assert u["dispatch"]["up"] == [int(d_remote[g].sum()) * 12 for g in range(4)]
    assert u["fills"]["up"] == [0] * 4
    # the fused and the basic scheme move the same flits
    assert p == L.predicted_flits("dysharp-basic")


def test_memory_manager_and_tlb_configuration(layer):
    """The commands make the dispatch group allocate rows in arrival order at the window and the combine
    group find the same slot at the expert-output rows (the reference memory manager)."""
    L = layer
    mm = MemoryManagerSpec(groups=16, layouts=4, index_bits=max(4, (L.N - 1).bit_length()), slots=L.N)
    for c in L.mm_commands():
        legal, _ = mm.command(**c)
        assert legal
    order = [(t, int(L.home[t])) for t in (5, 1, L.N - 1)]
    for slot, (t, src) in enumerate(order):
        addr, code = mm.serve(ml.G_DISP, t, src)
        assert (addr, code) == (ml.WIN_BASE + slot * L.row_bytes, 0)
    for slot, (t, src) in reversed(list(enumerate(order))):
        assert mm.serve(ml.G_COMB, t, src) == (ml.COMB_BASE + slot * L.row_bytes, 0)
        assert mm.serve(ml.G_DISP, t, src) == (ml.WIN_BASE + slot * L.row_bytes, 0)   # found, not re-allocated
    assert mm.serve(ml.G_COMB, 7, int(L.home[7]))[1] != 0      # never dispatched: lookup-only group faults
    cfg = L.tlb_config()
    assert {c["group"] for c in cfg} == {ml.G_DISP, ml.G_COMB}
    assert all(c["mask"] == (1 << L.G) - 1 and c["rows"] == L.N for c in cfg)
    rx = L.rx_config(2, "dysharp")
    assert rx["meta_flit"] == L.row_flits - 1 and rx["expert_base"] == 2 * L.experts_per_gpu
    assert L.gen_config(1, "deepep")["unicast"] == 1 and L.gen_config(1, "dysharp")["unicast"] == 0
    experts, tiles = L.tracker_shape()
    assert experts >= L.experts_per_gpu and experts & (experts - 1) == 0 and tiles >= 1


def test_gemm_time_scales_with_hidden_and_links():
    a = ml.build_layer(model="deepseek-v3", gpus=4, tokens=8, hidden=128)
    b = ml.build_layer(model="deepseek-v3", gpus=4, tokens=8, hidden=256)
    c = ml.build_layer(model="deepseek-v3", gpus=4, tokens=8, hidden=128, rtl_links=18)
    (a1, a2), (b1, b2), (c1, _) = a.gemm_tile_cycles(), b.gemm_tile_cycles(), c.gemm_tile_cycles()
    assert a.hidden_factor == 56 and b.hidden_factor == 28
    assert abs(b1 / a1 - 2) < 1e-3 and abs(b2 / a2 - 2) < 1e-3
    assert abs(a1 / c1 - 18) < 0.05 and a1 > a2 > 0      # ceil to whole cycles
    # compute-to-communication ratio kept: GEMM-1 cycles per dispatched payload byte do not depend on hidden
    ra = a1 / payload_bytes(a.hidden, "fp8")
    rb = b1 / payload_bytes(b.hidden, "fp8")
    assert abs(ra / rb - 1) < 1e-3
    o = ml.build_layer(model="deepseek-v3", gpus=4, tokens=8, gemm_cycles=(300, 150))
    assert o.gemm_tile_cycles() == (300, 150) and o.describe()["gemm_overridden"]
    # The stand-in's work: one full tile on sms_per_tile SMs of 132 is the tile cycles (compute-bound there),
    # and an override scales every part by its ratio to the derived cycles.
    c1, m1, c2, m2 = a.gemm_parts(128)
    assert abs(c1 * 4 - a1) <= 1 and abs(c2 * 4 - a2) <= 1 and m1 < a1 and m2 < a2
    assert all(abs(x * (300 + 150) / (a1 + a2) - y) < 1e-6 * y for x, y in zip(a.gemm_parts(128), o.gemm_parts(128)))
    assert 0.5 < a.gemm_share() < 0.7          # GEMM-1 is twice GEMM-2's compute, less than twice its memory


@pytest.mark.parametrize("kw, msg", [
    (dict(model="gpt-5"), "unknown model 'gpt-5'; valid: .*deepseek-v3"),
    (dict(gpus=3), "gpus=3: must be in 4..128"),
    (dict(gpus=129), "gpus=129: must be in 4..128"),
    (dict(tokens=0), "tokens=0: must be a positive integer"),
    (dict(dtype="fp4"), "dtype='fp4': valid: fp8, bf16"),
    (dict(hidden=100), "hidden=100 must be a multiple of 16 in 16..7168"),
    (dict(hidden=8192), "hidden=8192 must be a multiple of 16 in 16..7168"),
    (dict(gpus=48), "256 experts do not split over 48 GPUs; valid GPU counts: 4, 8, 16, 32, 64, 128; or, at "
                     "G = 48, redundant_experts 32, 80, 128"),
    (dict(gpus=72, redundant_experts=4), "256 experts \\+ 4 redundant = 260 do not split over 72 GPUs"),
    (dict(gpus=8, redundant_experts=300), "redundant_experts=300: at most 256"),
    (dict(gpus=72, redundant_experts=32, system="hgx-h100"),
     "system 'hgx-h100' \\(128-bit flits\\): 72 ports need the wide header"),
    (dict(tile_size=100), "tile_size=100: must be a power of two"),
])
def test_bad_parameters(kw, msg):
    with pytest.raises(ValueError, match=msg):
        ml.build_layer(**kw)


def test_bad_scheme():
    L = ml.build_layer(gpus=4, tokens=4)
    with pytest.raises(ValueError, match="unknown scheme 'nccl'; valid: deepep, fused-unicast, nvls, dysharp-basic, dysharp"):
        L.work("nccl")
    with pytest.raises(ValueError, match="unknown scheme"):
        L.predicted_flits("nccl")


def test_deterministic_from_seed():
    a = ml.build_layer(gpus=4, tokens=16, seed=7)
    b = ml.build_layer(gpus=4, tokens=16, seed=7)
    c = ml.build_layer(gpus=4, tokens=16, seed=8)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.routing, b.routing)
    assert np.array_equal(a.reference(), b.reference())
    assert not np.array_equal(a.routing, c.routing)
    assert math.isclose(a.hidden_factor, 56.0)


def test_points_past_the_address_map_are_refused():
    """A layer whose rows do not fit a region of the address map is refused naming the region; deepep's
    pushed partials index by token id within the source GPU's stripe, so G^2 x tokens past the 18-bit
    index is representable."""
    ml.build_layer(model="deepseek-v3", gpus=8, tokens=4097, hidden=16).check_scheme("deepep")
    big = ml.build_layer(model="deepseek-v3", gpus=4, tokens=1025, hidden=7168)
    with pytest.raises(ValueError, match=r"4100 rows of 16384 B from WIN_BASE = 0x4000000 run past 0x8000000"):
        big.check_scheme("dysharp")
    with pytest.raises(ValueError, match=r"nvls: 4100 rows of 16384 B from WIN_BASE"):
        big.check_scheme("nvls")
    with pytest.raises(ValueError, match="unknown scheme 'nccl'"):
        big.check_scheme("nccl")


def test_system_params_name_one_gpus_share_of_experts():
    """Kimi-K2 on 8 GPUs hosts 48 experts per GPU: the NIC is built for exactly 48 (a GPU's receive path
    counts a token's listed experts base .. base + 47 as its own; rounded up to 64 it would also count
    the next GPU's first 16, whose tiles it would then report ready), its Tile Status Table for 64."""
    from hw.gpu_nic.nic import GpuNic
    L = ml.build_layer(model="kimi-k2", gpus=8, tokens=4, hidden=128)
    nic = L.system_params()["nic"]
    assert L.experts_per_gpu == 48 and nic["experts"] == 48
    assert L.tracker_shape()[0] == 64
    n = GpuNic(ports=8, experts=nic["experts"], tiles=nic["tiles"], tile_size=nic["tile_size"])
    assert (n.rxq.experts, n.rxr.experts, n.tracker.experts) == (48, 48, 64)
    assert ml.build_layer(model="deepseek-v3", gpus=8, tokens=4, hidden=128).system_params()["nic"]["experts"] == 32
