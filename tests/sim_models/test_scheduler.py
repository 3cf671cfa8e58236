"""The reference token-centric scheduler (sim_models/scheduler.py): pure-Python checks."""

import numpy as np
import pytest

from sim_models import moe_config, routing
from sim_models import scheduler as S


def _layer(tokens_per_gpu=64, gpus=8, seed=1, model="deepseek-v3"):
    cfg = moe_config.load_model(model)
    rng = np.random.default_rng(seed)
    rt = routing.uniform_topk(tokens_per_gpu * gpus, cfg.routed_experts, cfg.top_k, rng)
    pl = routing.place_experts(cfg.routed_experts, gpus)
    return cfg, rt, pl


FAST = dict(tile_size=8, row_flits=2, rx_latency=3, gemm1_tile_cycles=60, gemm2_tile_cycles=30,
            dispatch_sms=2, combine_sms=1, sms_per_tile=1)


def test_codes_match_rtl():
    from hw.gpu_nic.token_tracker import TileCmdOp, TileState, TrackerError
    assert [s.value for s in TileState] == list(range(5))
    assert tuple(s.name for s in TileState) == S.STATE_NAMES
    assert (TileCmdOp.EXPECT.value, TileCmdOp.DONE.value, TileCmdOp.RETIRE.value, TileCmdOp.CLEAR.value) == \
        (S.EXPECT, S.DONE, S.RETIRE, S.CLEAR)
    assert tuple(e.name for e in TrackerError) == S.TRACKER_ERRORS


def test_schedule_invariants():
    cfg, rt, pl = _layer()
    sch = S.schedule(rt, pl, 8, S.SchedulerParams(**FAST))
    p = sch.params
    assert not sch.table_errors
    # Every (token, local expert) pair is in exactly one tile; tiles hold tile_size tokens except the last.
    pairs = sum(len(a) for a in sch.arrivals)
    assert pairs == rt.shape[0] * cfg.top_k
    assert sum(r.tokens for r in sch.tiles) == pairs
    per_expert = {}
    for r in sch.tiles:
        per_expert.setdefault((r.gpu, r.expert), []).append(r)
    for rs in per_expert.values():
        rs.sort(key=lambda r: r.tile)
        assert [r.tile for r in rs] == list(range(len(rs)))
        assert all(r.tokens == p.tile_size for r in rs[:-1]) and 1 <= rs[-1].tokens <= p.tile_size
    last_gemm1 = {g: max(r.gemm1[1] for r in sch.tiles if r.gpu == g) for g in range(8)}
    for r in sch.tiles:
        g_arr = [a.time for a in sch.arrivals[r.gpu] if a.expert == r.expert and a.tile == r.tile]
        assert r.ready >= max(g_arr) + 2            # table latency: accepted at t -> ready leaves at t+2
        assert r.gemm1[0] >= r.ready and r.gemm1[1] - r.gemm1[0] == p.gemm1_tile_cycles
        # GEMM-2 on the combine side; from the GPU's last GEMM-1 end on, the dispatch-side SMs help.
        joined = r.gemm2[0] >= last_gemm1[r.gpu]
        assert r.gemm2[0] >= r.gemm1[1]
        assert r.gemm2[1] - r.gemm2[0] == (p.gemm2_joined_cycles if joined else p.gemm2_tile_cycles)
        assert r.done >= r.gemm2[1] and r.release_first == r.done + 2
        assert r.release_last - r.release_first >= r.tokens - 1
    # GEMM-1 never runs on more than dispatch_workers tiles at once (per GPU).
    for g in range(8):
        ev = sorted([(r.gemm1[0], 1) for r in sch.tiles if r.gpu == g] +
                    [(r.gemm1[1], -1) for r in sch.tiles if r.gpu == g])
        level = 0
        for _, d in ev:
            level += d
            assert level <= p.dispatch_workers
    # Combine issues after all of the token's partial results were released.
    assert (sch.combine_issue >= sch.combine_ready).all() and (sch.combine_ready > 0).all()
    s = sch.summary()
    assert s["first_ready"] < s["dispatch_end"] < s["makespan"]


def test_fusion_overlaps_dispatch():
    """Token-centric: the first tiles finish GEMM-2 and start combining long before dispatch ends."""
    cfg, rt, pl = _layer(tokens_per_gpu=256)
    sch = S.schedule(rt, pl, 8, S.SchedulerParams(**dict(FAST, tile_size=16, gemm1_tile_cycles=40,
                                                         gemm2_tile_cycles=20, combine_sms=2)))
    assert sch.summary()["first_combine_issue"] < 0.5 * sch.dispatch_end


def test_unicast_dispatch_takes_longer():
    cfg, rt, pl = _layer()
    dyn = S.dispatch_arrivals(rt, pl, 8, tile_size=8, row_flits=32)
    uni = S.dispatch_arrivals(rt, pl, 8, tile_size=8, row_flits=32, mode="unicast")
    assert sum(map(len, dyn)) == sum(map(len, uni))
    # The same pairs arrive, later: the source uplink carries one copy per destination GPU.
    assert max(a[-1].time for a in uni) > max(a[-1].time for a in dyn)


def test_more_gemm_workers_finish_sooner():
    cfg, rt, pl = _layer()
    one = S.schedule(rt, pl, 8, S.SchedulerParams(**dict(FAST, gemm1_tile_cycles=400)))
    two = S.schedule(rt, pl, 8, S.SchedulerParams(**dict(FAST, gemm1_tile_cycles=400, dispatch_sms=4)))
    assert two.summary()["last_gemm2_end"] < one.summary()["last_gemm2_end"]


def test_late_expect_holds_partial_tiles():
    cfg, rt, pl = _layer()
    late = 100000
    sch = S.schedule(rt, pl, 8, S.SchedulerParams(**dict(FAST, expect_cycle=late)))
    partial = [r for r in sch.tiles if r.tokens < 8]
    assert partial and all(r.ready >= late + 2 for r in partial)
    assert any(r.ready < late for r in sch.tiles if r.tokens == 8)


def test_gemm_cycles_and_row_flits():
    cfg = moe_config.load_model("deepseek-v3")
    g1, g2 = S.tile_gemm_cycles(cfg.hidden, cfg.expert_ffn, 128, 132, efficiency=1.0)
    # 2*128*7168*4096 FLOP at 989 TFLOP/s = 7.6 us = 11.9k cycles at 1.5625 GHz; GEMM-2 half of it.
    assert 11800 < g1 < 12000 and abs(g2 * 2 - g1) <= 1
    assert S.token_row_flits(7168) == (7168 + 224) // 16 + 1


@pytest.mark.parametrize("kw, msg", [({"tile_size": 96}, "tile_size"), ({"mode": "x"}, "mode"),
                                     ({"dispatch_sms": 10, "sms_per_tile": 20}, "dispatch_sms"),
                                     ({"gemm1_tile_cycles": 0}, "gemm1_tile_cycles")])
def test_bad_params(kw, msg):
    with pytest.raises(ValueError, match=msg):
        S.SchedulerParams(**kw)


def test_model_basic_pipeline():
    """The table model alone: 4 arrivals -> ready two cycles after the last; DONE -> 4 releases."""
    m = S.TileTableModel(experts=2, tiles=2, tile_size=4)
    ready = []
    for c in range(4):
        r = m.step(arrival=(1, 0))
        assert r.arrival_taken
    for c in range(4, 8):
        r = m.step()
        if r.ready_taken:
            ready.append((c, r.ready))
    assert ready == [(5, (1, 0, 4))]
    rel = []
    r = m.step(cmd=(S.DONE, 1, 0, 0))
    for c in range(9, 16):
        r = m.step()
        if r.release_taken:
            rel.append((c, r.release))
    assert rel == [(10 + i, (1, 0, i, i == 3)) for i in range(4)]
    assert m.state[1 * 2 + 0] == S.COMBINE_ISSUED and not m.errors


def test_pool_join():
    """Once a GPU has no GEMM-1 left, its dispatch-side SMs join GEMM-2 (work conserving); with
    join_pools=False the split stays fixed. Ready and GEMM-1 times do not depend on it."""
    cfg, rt, pl = _layer()
    kw = dict(FAST, gemm1_tile_cycles=20, gemm2_tile_cycles=90)      # GEMM-2 bound: a backlog at the end
    fixed = S.schedule(rt, pl, 8, S.SchedulerParams(**kw, join_pools=False))
    join = S.schedule(rt, pl, 8, S.SchedulerParams(**kw))
    assert join.params.gemm2_joined_cycles == 30                     # 90 cycles x 1 of 3 workers' SMs
    key = lambda r: (r.gpu, r.expert, r.tile)
    a, b = sorted(fixed.tiles, key=key), sorted(join.tiles, key=key)
    assert [(r.ready, r.gemm1) for r in a] == [(r.ready, r.gemm1) for r in b]
    assert all(r.gemm2[1] - r.gemm2[0] == 90 for r in a)
    n_joined = 0
    for g in range(8):
        mine = [r for r in b if r.gpu == g]
        last1 = max(r.gemm1[1] for r in mine)
        for r in mine:
            assert r.gemm2[1] - r.gemm2[0] == (30 if r.gemm2[0] >= last1 else 90)
            n_joined += r.gemm2[0] >= last1
        assert max(r.gemm2[1] for r in mine) < max(r.gemm2[1] for r in a if r.gpu == g)
    assert n_joined > 8
    assert join.makespan < fixed.makespan and not join.table_errors


# ---------------------------------------------------------------------------------------------------------
# The GEMM policy (tile_gemm_times) against a cycle-stepped reference written from its contract

def _policy_reference(ready, w1, w2, w2j, k1, k2, n_tiles, join_not_before, not_before):
    """One GPU, integer cycles, stepped one cycle at a time: free workers take the head of their queue."""
    nt = len(ready)
    known = [i for i in range(nt) if ready[i] is not None]
    f1, f2, s2, joined = {}, {}, {}, {}
    busy1, busy2 = [0] * k1, [0] * k2          # cycle each worker becomes free
    q1 = list(known)                           # GEMM-1 queue: ready order
    started1 = set()
    q2 = []
    t = 0
    join_at = None
    while len(f2) < len(known):
        for i in list(q1):
            if ready[i] > t:
                break
            w = next((w for w in range(k1) if busy1[w] <= t), None)
            if w is None:
                break
            busy1[w] = t + w1[i]
            f1[i] = t + w1[i]
            started1.add(i)
            q1.remove(i)
        if join_at is None and w2j is not None and n_tiles is not None and len(known) >= n_tiles \
                and len(f1) == len(known):
            join_at = max(max(f1.values(), default=0), join_not_before)
        # GEMM-2 queue: tiles whose GEMM-1 has ended, in (GEMM-1 end, ready position) order
        for i in sorted((i for i in f1 if f1[i] <= t and i not in q2 and i not in f2), key=lambda i: (f1[i], i)):
            q2.append(i)
        while q2 and t >= not_before:
            w = next((w for w in range(k2) if busy2[w] <= t), None)
            if w is None:
                break
            i = q2.pop(0)
            j = join_at is not None and t >= join_at
            busy2[w] = t + (w2j[i] if j else w2[i])
            s2[i], f2[i], joined[i] = t, busy2[w], j
        t += 1
        assert t < 100000
    return f1, s2, f2, joined


@pytest.mark.parametrize("k1, k2", [(1, 1), (2, 1), (1, 3), (3, 2)])
def test_gemm_policy_matches_reference(k1, k2):
    rng = np.random.default_rng(k1 * 10 + k2)
    for case in range(40):
        nt = int(rng.integers(1, 12))
        ready = np.sort(rng.integers(0, 60, nt))
        w1 = rng.integers(1, 15, nt)
        w2 = rng.integers(1, 25, nt)
        w2j = np.maximum(1, w2 // 2)
        cut = int(rng.integers(0, nt + 1)) if case % 3 == 0 else nt          # tiles not ready yet
        n_tiles = None if case % 5 == 0 else nt
        jnb = int(rng.integers(0, 80)) if case % 4 == 0 else 0
        nb = int(rng.integers(0, 100)) if case % 7 == 0 else 0
        r = np.where(np.arange(nt) < cut, ready, np.inf)
        got = S.tile_gemm_times(r, w1, w2, w2j, workers1=k1, workers2=k2, n_tiles=n_tiles,
                                join_not_before=jnb, gemm2_not_before=np.array([nb]) if nb else None)
        f1, s2, f2, joined = _policy_reference([int(x) if i < cut else None for i, x in enumerate(ready)],
                                              w1, w2, w2j, k1, k2, n_tiles, jnb, nb)
        for i in range(nt):
            if i < cut:
                assert got.gemm1_end[0, i] == f1[i] and got.gemm1_start[0, i] == f1[i] - w1[i]
                assert (got.gemm2_start[0, i], got.gemm2_end[0, i], got.joined[0, i]) == (s2[i], f2[i], joined[i]), \
                    (case, i)
            else:
                assert np.isinf(got.gemm1_end[0, i]) and np.isinf(got.gemm2_end[0, i])


@pytest.mark.parametrize("k1, k2", [(1, 1), (2, 2)])
def test_gemm_policy_is_causal(k1, k2):
    """What the closed loop and the estimator rely on: times already in the past never change when more
    tiles become ready (the join included)."""
    rng = np.random.default_rng(7)
    G, NT = 4, 30
    ready = np.sort(rng.uniform(0, 500, (G, NT)), axis=1)
    w1, w2 = rng.uniform(5, 30, (G, NT)), rng.uniform(5, 60, (G, NT))
    full = S.tile_gemm_times(ready, w1, w2, w2 / 3, workers1=k1, workers2=k2, n_tiles=NT)
    assert full.joined.any()
    for c in (50.0, 200.0, 420.0):
        part = S.tile_gemm_times(np.where(ready <= c, ready, np.inf), w1, w2, w2 / 3, workers1=k1, workers2=k2,
                                 n_tiles=NT)
        past = full.gemm2_end <= c
        assert past.any()
        assert np.array_equal(part.gemm2_end[past], full.gemm2_end[past])
        assert np.array_equal(part.gemm1_end[ready <= c], full.gemm1_end[ready <= c])


def test_gemm_policy_reused_equals_one_shot():
    """A TilePolicy called again as tiles become ready (as the estimator does; it keeps running sums)
    gives what a fresh one-shot call gives."""
    rng = np.random.default_rng(3)
    G, NT = 3, 20
    ready = np.sort(rng.uniform(0, 300, (G, NT)), axis=1)
    w1, w2 = rng.uniform(5, 20, (G, NT)), rng.uniform(5, 40, (G, NT))
    pol = S.TilePolicy(w1, w2, w2 / 2)
    for c in (40.0, 150.0, 1e9):
        r = np.where(ready <= c, ready, np.inf)
        for kw in ({"n_tiles": NT}, {"gemm2_not_before": np.array([0.0, 200.0, np.inf])}):
            a, b = pol(r, **kw), S.tile_gemm_times(r, w1, w2, w2 / 2, **kw)
            for f in ("gemm1_start", "gemm1_end", "gemm2_start", "gemm2_end", "joined"):
                assert np.array_equal(getattr(a, f), getattr(b, f)), f


def test_gemm_policy_bad_workers():
    with pytest.raises(ValueError, match="workers2"):
        S.tile_gemm_times(np.zeros((1, 2)), 1.0, 1.0, workers2=0)
    with pytest.raises(ValueError, match="workers1"):
        S.TilePolicy(1.0, 1.0, workers1=True)


def _records(sch):
    return (sch.combine_issue.tolist(), sch.combine_ready.tolist(), sch.tiles, sch.arrivals, dict(sch.table_errors),
            [(e.released, e.accepted, e.done_at, e.ready_at, e.gemm1, e.gemm2, dict(e.errors))
             for e in sch.environments])


@pytest.mark.parametrize("kw", [
    FAST,
    dict(FAST, gemm1_tile_cycles=7, gemm2_tile_cycles=3, release_depth=1, ready_depth=1),
    dict(FAST, tile_size=4, dispatch_sms=3, combine_sms=2, scale_partial_tiles=True, gemm1_tile_cycles=5,
         gemm2_tile_cycles=9),
    dict(FAST, tile_size=16, mode="unicast", join_pools=False, release_depth=2, expect_cycle=400),
    dict(FAST, tile_size=2, gemm1_tile_cycles=1, gemm2_tile_cycles=1, dispatch_sms=4, combine_sms=4, links=2),
])
def test_skipped_stretches_equal_stepping(kw, monkeypatch):
    """The closed loop's shortcuts (a stretch of releases alone applied at once; the GEMM policy re-run only
    when the next command could differ) give the records of stepping every cycle with the policy re-run after
    every ready tile."""
    cfg, rt, pl = _layer(tokens_per_gpu=48, seed=3)
    p = S.SchedulerParams(**kw)
    fast = _records(S.schedule(rt, pl, 8, p))
    monkeypatch.setattr(S, "_release_run", lambda *a: 0)
    monkeypatch.setattr(S.TrackerEnvironment, "_current", lambda self, cycle: self._update())
    assert fast == _records(S.schedule(rt, pl, 8, p))
