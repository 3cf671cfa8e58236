"""The closed-loop GEMM engine (sim_models/gemm_engine.py): the RTL layer's GEMM stand-in, the estimator's
mechanism fed tile by tile. Scoreboards: a brute-force time-stepped simulation of the pool's rules, the
token-centric TilePolicy without memory work, hand-computed grouped launches, and the estimator's own GEMM
time of a layer."""

import collections
import math
import random

import numpy as np
import pytest

from sim_models.gemm_engine import GemmEngine
from sim_models.pipeline import SharedHbmGemm
from sim_models.scheduler import tile_gemm_times


def _linear_parts(k1=3.0, k2=1.5, base1=2.0, base2=1.0, mem=1.0):
    """A toy roofline: compute linear in the padded rows (tiles of 4), memory = weights x reads + rows."""
    def parts(rows, reads):
        padded = -(-rows // 4) * 4
        return (k1 * padded / 4, mem * (base1 * 4 * reads + 0.1 * rows),
                k2 * padded / 4, mem * (base2 * 4 * reads + 0.1 * rows))
    return parts


def _loop(eng, tiles):
    """Drive ``eng`` as the closed loop does: tiles ``(ready, expert, rows)`` in ready order, each GEMM-2 end
    popped once the loop reaches it (before a tile ready later). Returns the popped ends in order."""
    out = []
    tiles = list(tiles)
    while tiles or eng.next_done() is not None:
        nxt = eng.next_done()
        if tiles and (nxt is None or tiles[0][0] < nxt[0]):
            eng.add(*tiles.pop(0))
        else:
            out.append(eng.pop_done())
    return out


def _brute_pool(ready, work, share1, dt):
    """Time-stepped reference of the pool: GEMM-1 in ready order, GEMM-2 in GEMM-1 order, one tile per stage,
    a GEMM-2 started with no GEMM-1 left runs on every SM, HBM split weighted max-min fair between active
    stages; each tile progresses at min(1/c, b/m) of itself per unit of time."""
    n = len(ready)
    f1, f2 = [math.inf] * n, [math.inf] * n
    i1 = i2 = 0
    a1 = a2 = j2 = False
    r1 = r2 = 0.0
    t = 0.0
    while i2 < n:
        if not a1 and i1 < n and ready[i1] <= t + 1e-12:
            a1, r1 = True, 1.0
        if not a2 and i2 < i1:
            a2, r2, j2 = True, 1.0, (i1 >= n)
        c1, m1 = (work[i1][0] / share1, work[i1][1]) if a1 else (0.0, 0.0)
        c2, m2 = ((work[i2][2] if j2 else work[i2][2] / (1 - share1)), work[i2][3]) if a2 else (0.0, 0.0)
        d1, d2 = (m1 / c1 if a1 else 0.0), (m2 / c2 if a2 else 0.0)
        b1 = b2 = 1.0
        if a1 and a2:
            w1, w2 = share1, 1 - share1
            if d1 + d2 <= 1:
                b1, b2 = d1, d2
            elif d1 <= w1:
                b1, b2 = d1, 1 - d1
            elif d2 <= w2:
                b1, b2 = 1 - d2, d2
            else:
                b1, b2 = w1, w2
        step = dt
        if not a1 and not a2:
            step = max(dt, ready[i1] - t)
        for stage in (1, 2):
            a, r, c, m, b = (a1, r1, c1, m1, b1) if stage == 1 else (a2, r2, c2, m2, b2)
            if not a:
                continue
            rate = 1.0 / max(c, m / b if m > 0 else 0.0)
            left = r - rate * step
            if left <= 1e-12:
                end = t + r / rate
                if stage == 1:
                    f1[i1], i1, a1 = end, i1 + 1, False
                else:
                    f2[i2], i2, a2 = end, i2 + 1, False
            elif stage == 1:
                r1 = left
            else:
                r2 = left
        t += step
    return f1, f2


@pytest.mark.parametrize("seed", range(6))
def test_pool_against_brute_force(seed):
    rng = random.Random(seed)
    parts = _linear_parts(mem=rng.choice((0.3, 1.0, 2.5)))
    experts = [rng.randrange(3) for _ in range(rng.randint(2, 6))]
    tiles = collections.Counter(experts)
    share1 = rng.choice((0.5, 0.6, 2 / 3))
    ready = sorted(rng.choice((0.0, rng.uniform(0, 30))) for _ in experts)
    rows = [rng.randint(1, 4) for _ in experts]
    eng = GemmEngine(parts, tiles, share1)
    _loop(eng, zip(ready, experts, rows))
    work = [parts(r, 1.0 / tiles[e]) for e, r in zip(experts, rows)]
    f1, f2 = _brute_pool(ready, work, share1, dt=1e-3)
    assert np.allclose(eng.gemm1_end, f1, atol=0.02), (eng.gemm1_end, f1)
    assert np.allclose(eng.gemm2_end, f2, atol=0.02), (eng.gemm2_end, f2)
    # The stages do overlap in some of these cases, so HBM sharing is exercised.
    assert np.all(np.isfinite(eng.gemm2_end)) and np.all(eng.gemm2_end >= eng.gemm1_end)


@pytest.mark.parametrize("seed", range(4))
def test_pool_in_a_closed_loop(seed):
    """Fed tile by tile, each GEMM-2 end acted on when reached (the RTL stand-in's use), the engine gives
    the estimator's engine run once on all the tiles, and an end once handed out never moves."""
    rng = random.Random(100 + seed)
    parts = _linear_parts()
    experts = [rng.randrange(4) for _ in range(12)]
    ready = sorted(rng.uniform(0, 120) for _ in experts)
    rows = [rng.randint(1, 4) for _ in experts]
    eng = GemmEngine(parts, collections.Counter(experts), 0.65)
    popped = _loop(eng, zip(ready, experts, rows))
    assert [i for _, i in popped] == list(range(len(ready)))
    assert np.array_equal([t for t, _ in popped], eng.gemm2_end)
    tiles = collections.Counter(experts)
    w = np.array([parts(r, 1.0 / tiles[e]) for e, r in zip(experts, rows)])
    one = SharedHbmGemm(w[None, :, 0] / 0.65, w[None, :, 1], w[None, :, 2] / 0.35, w[None, :, 3], w[None, :, 2],
                        [len(ready)], 0.65)
    f1, f2 = one.advance(np.array([ready]), np.inf)
    assert np.allclose(f2[0], eng.gemm2_end, rtol=1e-12) and np.allclose(f1[0], eng.gemm1_end, rtol=1e-12)
    # Some tile became ready while an earlier one was still in its GEMMs (the loop's ordering is exercised).
    assert any(ready[i + 1] < f2[0, i] for i in range(len(ready) - 1))


def test_pool_without_memory_is_the_token_centric_policy():
    """m = 0: the pool is TilePolicy with one worker per stage on its share of the SMs and the pool join."""
    parts = lambda rows, reads: (3.0 * rows, 0.0, 1.5 * rows, 0.0)
    experts = [0, 1, 0, 2, 1, 0, 2]
    rows = [4, 2, 4, 3, 1, 2, 4]
    ready = [0.0, 0.0, 5.0, 6.0, 20.0, 21.0, 40.0]
    s = 0.6
    eng = GemmEngine(parts, collections.Counter(experts), s)
    _loop(eng, zip(ready, experts, rows))
    w = np.array([parts(r, 1.0) for r in rows])
    ref = tile_gemm_times(np.array([ready]), w[None, :, 0] / s, w[None, :, 2] / (1 - s), w[None, :, 2],
                          n_tiles=len(rows))
    assert np.allclose(eng.gemm1_end, ref.gemm1_end[0]) and np.allclose(eng.gemm2_end, ref.gemm2_end[0])
    assert ref.joined[0].any()                 # the join is exercised


def test_phases_are_grouped_launches():
    """Sequential schemes: nothing before the GPU's last tile is ready; one GEMM-1 launch over the experts'
    rows together (each expert's roofline), then one GEMM-2 launch."""
    parts = _linear_parts()
    eng = GemmEngine(parts, {"a": 2, "b": 1}, 0.6, mode="phases")
    eng.add(0.0, "a", 1)
    assert eng.next_done() is None
    eng.add(3.0, "b", 4)
    assert eng.next_done() is None
    eng.add(7.0, "a", 2)
    # expert a: 3 rows (one padded GEMM of 4), b: 4 rows; each max(compute, memory) with weights read once
    a, b = parts(3, 1.0), parts(4, 1.0)
    t1 = max(a[0], a[1]) + max(b[0], b[1])
    t2 = max(a[2], a[3]) + max(b[2], b[3])
    assert np.allclose(eng.gemm1_end, 7.0 + t1) and np.allclose(eng.gemm2_end, 7.0 + t1 + t2)
    assert [i for _, i in _loop(eng, [])] == [0, 1, 2]


def test_stand_in_is_the_estimators_gemm():
    """On an RTL layer, the phases stand-in with every tile ready at 0 takes the estimator's sequential GEMM
    time of the busiest GPU (rtl_scale's prediction), and the pool is not faster than the whole GPU."""
    from sim_models.rtl_scale import predict_cycles
    from verif.models import moe_layer as ml
    L = ml.build_layer(model="deepseek-v3", gpus=4, tokens=64, hidden=128, seed=1, tile_size=128)
    worst = {}
    for mode in ("phases", "pool"):
        for g in range(L.G):
            lo, hi = L.local_expert_range(g)
            remote = (L.home != g)[:, None] & (L.routing >= lo) & (L.routing < hi)
            rc = np.bincount(L.routing[remote] - lo, minlength=hi - lo)
            tiles = collections.Counter(e for e, _ in L.local_tiles(g))
            for e, n in enumerate(rc):
                if n:
                    tiles[lo + e] += -(-n // 128)
            eng = GemmEngine(L.gemm_parts, tiles, L.gemm_share(), mode)
            _loop(eng, [(0, e, len(toks)) for e, toks in L.local_tiles(g)]
                  + [(0, lo + e, min(128, n - i)) for e, n in enumerate(rc) for i in range(0, n, 128)])
            worst[mode] = max(worst.get(mode, 0), float(eng.gemm2_end.max()))
    pred = predict_cycles(L, ["deepep"])["deepep"]["gemm"]
    assert worst["phases"] == pytest.approx(pred, rel=1e-9)
    assert worst["pool"] >= pred * (1 - 1e-9)


@pytest.mark.parametrize("kw, msg", [(dict(mode="fifo"), "mode"), (dict(share1=1.0), "share1"),
                                     (dict(expert_tiles={0: 0}), "expert_tiles")])
def test_bad_arguments(kw, msg):
    args = dict(parts=_linear_parts(), expert_tiles={0: 2}, share1=0.6)
    args.update(kw)
    with pytest.raises(ValueError, match=msg):
        GemmEngine(**args)


def test_bad_tiles():
    eng = GemmEngine(_linear_parts(), {0: 2}, 0.6)
    with pytest.raises(ValueError, match="not announced"):
        eng.add(0.0, 1, 4)
    with pytest.raises(ValueError, match="no GEMM-2 end"):
        eng.pop_done()
    eng.add(5.0, 0, 4)
    with pytest.raises(ValueError, match="must not decrease"):
        eng.add(4.0, 0, 4)
    t, _ = eng.pop_done()
    with pytest.raises(ValueError, match="must not decrease"):
        eng.add(t - 1, 0, 4)              # before an end already handed out
    eng.add(t, 0, 4)
    with pytest.raises(ValueError, match="more tiles"):
        eng.add(t + 1, 0, 4)


@pytest.mark.parametrize("seed", range(8))
def test_one_gpu_on_floats_equals_arrays(seed, monkeypatch):
    """One GPU's engine state run on Python floats gives the bits of the array code, tile by tile in a
    closed loop: every end, every event, compute-only and memory-only tiles and HBM shared both ways."""
    rng = random.Random(200 + seed)

    def parts(rows, reads):
        kind = rng.random()
        c = (0.0 if kind < 0.15 else rng.uniform(0.2, 3.0))
        m = (0.0 if 0.15 <= kind < 0.3 else rng.uniform(0.1, 8.0) * reads)
        return c, m, rng.choice((0.0, c / 2, c * 1.5)), rng.uniform(0.0, 8.0) * reads

    experts = [rng.randrange(4) for _ in range(rng.randint(3, 14))]
    ready = sorted(rng.choice((0.0, round(rng.uniform(0, 60)), rng.uniform(0, 60))) for _ in experts)
    rows = [rng.randint(1, 8) for _ in experts]
    work = [parts(r, 0.5) for r in rows]
    share1 = rng.choice((0.3, 0.5, 0.65))

    def run():
        it = iter(work)
        eng = GemmEngine(lambda rows, reads: next(it), collections.Counter(experts), share1)
        popped = _loop(eng, zip(ready, experts, rows))
        return popped, eng.gemm1_end.tolist(), eng.gemm2_end.tolist(), eng._hbm.events, eng._hbm.now.tolist()

    floats = run()
    monkeypatch.setattr(SharedHbmGemm, "advance", SharedHbmGemm._advance_arrays)
    assert floats == run()
