"""Traffic accounting (hand-computed small cases), workload structure and the pipeline core."""

import numpy as np
import pytest

from sim_models import routing as rt
from sim_models.pipeline import PipelineInputs, run_pipeline
from sim_models.schedule import list_schedule
from sim_models.scheduler import maxplus_scan
from sim_models.traffic import SCHEMES, TokenDestinations, account, dispatch_row_bytes, payload_bytes
from sim_models.workload import build_workload, workload_from_routing

# Wire sizes with 16-B flits and 256-B packet payloads (hw.packet.wire_flits): a 100-B payload is
# 7 data flits + 1 header = 128 B; 200 B is 13 + 1 = 224 B; a request is the header only, 16 B; an
# explicitly addressed 100-B store to 1 destination carries one 8-B address in an extra header flit: 144 B.
D_W, C_W, REQ = 128, 224, 16


def _two_gpus():
    # 2 GPUs x 2 tokens, 4 experts: experts 0,1 on GPU 0 and 2,3 on GPU 1.
    # t0 (GPU 0) -> {0,1}: local only. t1 (GPU 0) -> {0,2}: GPU 1 remote. t2 (GPU 1) -> {1,3}: GPU 0 remote.
    # t3 (GPU 1) -> {2,3}: local only.
    ids = np.array([[0, 1], [0, 2], [1, 3], [2, 3]])
    return TokenDestinations.from_routing(ids, rt.place_experts(4, 2), 2)


def test_hand_computed_two_gpus_four_experts():
    d = _two_gpus()
    assert d.d_remote.tolist() == [0, 1, 1, 0] and d.d_all.tolist() == [1, 2, 2, 1]
    exp = {  # scheme: (dispatch up, down, up_wire, down_wire), (combine up, down, up_wire, down_wire, reduce_in)
        "unicast": ((100, 100, D_W, D_W), (200, 200, C_W, C_W, 0)),
        # AllGather: both own tokens up once, the other GPU's 2 tokens down. ReduceScatter: partials of the
        # other GPU's 2 tokens up (+ 2 own requests), own 2 results down (+ 2 read requests); the switch
        # reduces G-1 = 1 partial per own token.
        "nvls": ((200, 200, 2 * D_W, 2 * D_W), (400, 400, 2 * C_W + 2 * REQ, 2 * C_W + 2 * REQ, 2 * C_W)),
        # one copy (same as unicast with a single remote GPU); combine adds one request each way.
        "dynamic": ((100, 100, D_W, D_W), (200, 200, C_W + REQ, C_W + REQ, C_W)),
        "explicit": ((100, 100, 144, D_W), (200, 200, C_W + 2 * REQ, C_W + REQ, C_W)),
    }
    for scheme, (dp, cp) in exp.items():
        tr = account(d, scheme, 100, 200)
        for g in range(2):
            assert (tr.dispatch.up[g], tr.dispatch.down[g], tr.dispatch.up_wire[g], tr.dispatch.down_wire[g]) == dp, scheme
            assert (tr.combine.up[g], tr.combine.down[g], tr.combine.up_wire[g], tr.combine.down_wire[g],
                    tr.combine.reduce_in[g]) == cp, scheme


def test_hand_computed_multicast_four_gpus():
    # 4 GPUs x 1 token, 8 experts (2 per GPU), top-2. t0 -> {2,4}: GPUs 1 and 2; the others stay local.
    ids = np.array([[2, 4], [2, 3], [4, 5], [6, 7]])
    d = TokenDestinations.from_routing(ids, rt.place_experts(8, 4), 4)
    uni, dyn = account(d, "unicast", 100, 200), account(d, "dynamic", 100, 200)
    assert uni.dispatch.up_wire.tolist() == [2 * D_W, 0, 0, 0]       # two copies up
    assert dyn.dispatch.up_wire.tolist() == [D_W, 0, 0, 0]           # one copy up, the switch replicates
    assert uni.dispatch.down_wire.tolist() == dyn.dispatch.down_wire.tolist() == [0, D_W, D_W, 0]
    assert uni.combine.up_wire.tolist() == [0, C_W, C_W, 0]
    assert dyn.combine.up_wire.tolist() == [REQ, C_W, C_W, 0]        # the home's ld_reduce request
    assert uni.combine.down_wire.tolist() == [2 * C_W, 0, 0, 0]      # two partials down
    assert dyn.combine.down_wire.tolist() == [C_W, REQ, REQ, 0]      # one reduced result; read requests
    assert dyn.combine.reduce_in.tolist() == [2 * C_W, 0, 0, 0]


def test_nvls_sends_g_minus_one_copies_down_per_token(seed):
    rng = np.random.default_rng(seed)
    for g in (4, 8, 16):
        ids = rt.sample_topk(g * 64, np.ones(64), 4, rng)
        tr = account(TokenDestinations.from_routing(ids, rt.place_experts(64, g), g), "nvls", 1000, 2000)
        assert np.all(tr.dispatch.down == (g - 1) * 64 * 1000)       # every other GPU's 64 tokens
        assert np.all(tr.dispatch.up == 64 * 1000)
        assert np.all(tr.combine.down == 64 * 2000)


def test_dysharp_fused_directions_balanced(seed):
    """Fused, each direction carries ~(1 + D) copies per token: uplink = 1 dispatch + D partials, downlink =
    D dispatch copies + 1 result. With BF16 both ways the payloads balance; on the wire the ld_reduce read
    requests (one header per 256-B packet, D of them down, 1 up) tilt the downlink by a few percent."""
    rng = np.random.default_rng(seed)
    g = 8
    ids = rt.sample_topk(g * 4096, np.ones(256), 8, rng)
    d = TokenDestinations.from_routing(ids, rt.place_experts(256, g), g)
    s = payload_bytes(7168, "bf16")
    tr = account(d, "dynamic", s, s)
    up = tr.dispatch.up + tr.combine.up
    down = tr.dispatch.down + tr.combine.down
    assert np.allclose(up, down, rtol=0.01)
    dyn, uni = tr.totals(), account(d, "unicast", s, s).totals()
    assert np.allclose(dyn["up_wire"], dyn["down_wire"], rtol=0.05)
    # and the fused total per direction is ~ (1 + D_r) / (2 D_r) of unicast's
    dr = d.d_remote[d.d_remote > 0].mean()
    frac = (dyn["up_wire"] / uni["up_wire"]).mean()
    assert frac == pytest.approx((1 + dr) / (2 * dr), rel=0.03)


def test_payload_sizes():
    assert payload_bytes(7168, "bf16") == 14336
    assert payload_bytes(7168, "fp8") == 7168 + 56 * 4                # one FP32 scale per 128 channels
    with pytest.raises(ValueError, match="valid: bf16, fp8"):
        payload_bytes(10, "fp4")
    with pytest.raises(ValueError, match="valid: unicast"):
        account(_two_gpus(), "mesh", 1, 1)
    assert set(SCHEMES) == {"unicast", "nvls", "dynamic", "explicit"}


def test_dispatch_row_bytes():
    """A row without metadata is the hidden vector alone; with metadata the vector is padded to whole flits
    and the metadata takes flits of its own (the RTL's row: hidden 128 FP8 is 132 B = 9 flits, then its gate
    and metadata flits)."""
    assert dispatch_row_bytes(7168, "fp8") == payload_bytes(7168, "fp8")
    assert dispatch_row_bytes(128, "fp8", 32) == (9 + 2) * 16
    assert dispatch_row_bytes(128, "bf16", 32) == (16 + 2) * 16
    assert dispatch_row_bytes(7168, "fp8", 17) == (462 + 2) * 16
    assert dispatch_row_bytes(128, "fp8", 32, flit_bytes=32) == (5 + 1) * 32
    with pytest.raises(ValueError, match="meta_bytes=-1"):
        dispatch_row_bytes(128, "fp8", -1)


def test_workload_structure(seed):
    wl = build_workload(64, 4, 8, 300, routing="zipf:0.5", seed=seed, tile=32)
    n, k = wl.routing.shape
    assert n == 8 * 300
    valid = wl.tile_inst >= 0
    assert wl.tile_rows[valid].sum() == n * k and wl.tile_rows.max() <= 32
    for g in range(8):                       # each GPU runs its tiles in ready order
        assert np.all(np.diff(wl.tile_ready_p[g][valid[g]]) >= 0)
    assert len(wl.pair_token) == wl.dest.d_all.sum()
    assert wl.pair_start[:, -1].tolist() == np.cumsum(wl.dest.hit.sum(axis=0)).tolist()
    # same seed, same routing; another seed differs
    assert np.array_equal(build_workload(64, 4, 8, 300, routing="zipf:0.5", seed=seed, tile=32).routing, wl.routing)
    assert not np.array_equal(build_workload(64, 4, 8, 300, routing="zipf:0.5", seed=seed + 1, tile=32).routing,
                              wl.routing)


def test_maxplus_scan_and_list_schedule(seed):
    rng = np.random.default_rng(seed)
    r = np.sort(rng.random((3, 20)), axis=1) * 10
    w = rng.random((3, 20))
    f = maxplus_scan(r, w)
    for g in range(3):
        t = -np.inf
        for i in range(20):
            t = max(t, r[g, i]) + w[g, i]
            assert f[g, i] == pytest.approx(t)
    # two chains D->G->C: D1 [0,1] G1 [1,3] D2 [1,2] C1 [3,4] G2 [3,5] C2 [5,6]
    total, busy = list_schedule([[("net", 1), ("comp", 2), ("net", 1)]] * 2)
    assert total == 6 and busy == {"net": 4, "comp": 4}


def _inputs(**kw):
    """2 GPUs x 4 tokens; each uplink and downlink carries 400 B of dispatch at 100 B/s (4 s); one tile per
    GPU whose last row arrives at progress 4; GEMM-1 1 s, GEMM-2 2 s. GPU 0's tile serves token 4 (home
    GPU 1) and GPU 1's serves token 0 (home GPU 0)."""
    base = dict(tokens_per_gpu=4, knots=np.array([0.0, 4.0]), disp_up_cum=np.array([[0, 400.0]] * 2),
                disp_dn_cum=np.array([[0, 400.0]] * 2), tile_ready_p=np.array([[4.0], [4.0]]),
                tile_w1=np.ones((2, 1)), tile_w2=np.full((2, 1), 2.0), tile_w2_tail=np.full((2, 1), 2.0),
                pair_start=np.array([[0, 1], [1, 2]]), pair_token=np.array([4, 0]), pair_home=np.array([1, 0]),
                pair_up=np.zeros(2), pair_req_dn=np.zeros(2), pair_down=np.zeros(2),
                token_pairs=np.array([1, 0, 0, 0, 1, 0, 0, 0]), token_home=np.repeat([0, 1], 4),
                token_result=np.zeros(8), token_req_up=np.zeros(8), up_rate=np.full(2, 100.0),
                dn_rate=np.full(2, 100.0), reduce_rate=np.full(2, np.inf), reduced=False,
                latency_dispatch=0.5, latency_combine=0.25, start_overhead=0.1, slots=40)
    base.update(kw)
    return PipelineInputs(**base)


def test_pipeline_core_exact_without_combine():
    r = run_pipeline(_inputs())
    assert r.dispatch_end == pytest.approx(4.0)
    assert r.ready[:, 0].tolist() == pytest.approx([4.5, 4.5])
    assert r.gemm2_end[:, 0].tolist() == pytest.approx([7.5, 7.5])
    assert r.total == pytest.approx(0.1 + 7.5 + 0.25)
    # twice the bandwidth: dispatch halves
    r2 = run_pipeline(_inputs(up_rate=np.full(2, 200.0), dn_rate=np.full(2, 200.0)))
    assert r2.total == pytest.approx(r.total - 2.0)


def test_pipeline_tile_of_progress_zero_is_ready_at_once():
    """A tile of ready progress 0 (a GPU's own tokens in tiles apart: the workload's ``local_apart``) is ready at
    time 0 and runs during the dispatch, ahead of the arriving rows' tile; with shared HBM as without."""
    two = lambda a, b: np.array([[a, b]] * 2, dtype=float)
    kw = dict(tile_ready_p=two(0, 4), tile_w1=two(1, 1), tile_w2=two(2, 2), tile_w2_tail=two(2, 2),
              pair_start=np.array([[0, 0, 1], [1, 1, 2]]))
    hbm = dict(tile_c1=two(1, 1), tile_m1=two(0, 0), tile_c2=two(2, 2), tile_m2=two(0, 0), tile_c2_tail=two(2, 2))
    for extra in ({}, hbm):
        r = run_pipeline(_inputs(**kw, **extra))
        assert r.ready.ravel().tolist() == pytest.approx([0.0, 4.5] * 2)
        assert r.gemm2_end.ravel().tolist() == pytest.approx([3.0, 7.5] * 2)
        assert r.total == pytest.approx(0.1 + 7.5 + 0.25)


def test_workload_local_apart():
    """``local_apart``: an instance's rows of its own GPU's tokens fill tiles of their own, in token order, ready
    at progress 0 and first in the GPU's run order; the arriving rows fill the others as without it."""
    rng = np.random.default_rng(5)
    ids = np.stack([rng.permutation(16)[:4] for _ in range(4 * 40)])
    pl = rt.place_experts(16, 4)
    m = workload_from_routing(ids, pl, 4, tile=8)
    a = workload_from_routing(ids, pl, 4, tile=8, local_apart=True)
    assert np.array_equal(a.inst_rows, m.inst_rows) and len(a.pair_token) == len(m.pair_token)
    home = np.arange(len(ids)) // 40
    for g in range(4):
        va = a.tile_inst[g] >= 0
        for e in np.nonzero(pl == g)[0]:
            own = int(((ids == e) & (home == g)[:, None]).sum())
            rest = int(((ids == e) & (home != g)[:, None]).sum())
            i = a.tile_inst[g] == e
            assert sorted(a.tile_rows[g][i & (a.tile_ready_p[g] == 0)].tolist()) == \
                sorted([min(8, own - j) for j in range(0, own, 8)])
            assert sorted(a.tile_rows[g][i & (a.tile_ready_p[g] > 0)].tolist()) == \
                sorted([min(8, rest - j) for j in range(0, rest, 8)])
        assert np.all(np.diff(a.tile_ready_p[g][va]) >= 0)
    assert (a.tile_inst >= 0).sum() > (m.tile_inst >= 0).sum() == np.sum(-(-m.inst_rows // 8))
    assert not (m.tile_ready_p == 0).any()


def test_pipeline_core_combine_uses_links():
    # each GPU's tile sends a 100-B partial to the other GPU (unicast): 1 s up, then 1 s down.
    r = run_pipeline(_inputs(pair_up=np.full(2, 100.0), pair_down=np.full(2, 100.0)))
    dt = 7.0 / 40        # the engine's slot: the busiest GPU's work (7 s of GEMM) / slots
    assert 0.1 + 7.5 + 2.0 + 0.25 <= r.total <= 0.1 + 7.5 + 2.0 + 0.25 + 2 * dt + 1e-9
    assert r.up_busy.tolist() == pytest.approx([5.0, 5.0]) and r.dn_busy.tolist() == pytest.approx([5.0, 5.0])
    # in-switch reduction: the result waits for the token's partials; same bytes here, one result each
    rr = run_pipeline(_inputs(pair_up=np.full(2, 100.0), reduced=True, token_result=np.array([100.0, 0, 0, 0] * 2),
                              reduce_rate=np.full(2, 1e9)))
    assert rr.total == pytest.approx(r.total, abs=2 * dt)
