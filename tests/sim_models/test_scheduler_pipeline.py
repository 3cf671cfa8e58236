"""The estimator's tile engine (sim_models.pipeline.run_pipeline) and the reference scheduler
(sim_models.scheduler.schedule) run one token-centric policy: on a layer where their dispatch models
coincide, they give the same tile ready times, the same GEMM-1 and GEMM-2 end times (so the same combine
releases), tile for tile."""

import numpy as np
import pytest

from sim_models import scheduler as S
from sim_models.pipeline import PipelineInputs, run_pipeline
from sim_models.routing import save_trace
from sim_models.workload import build_workload

# 2 GPUs x 2 experts, top-1. Every token goes to an expert on the other GPU, so each uplink and each
# downlink carries one row copy per token in token order: the scheduler's first-come-first-served links
# and the estimator's lock-step fluid dispatch then agree exactly. All cycle counts are multiples of the
# row's 6 link cycles, so a DONE command (and the table's internal combine-issued update after a tile's
# last release) never lands on an arrival's cycle: the table never delays an arrival.
T = 24                      # tokens per GPU; 12 per expert = 3 full tiles of 4
ROW = 6                     # link cycles of one row copy: 5 payload flits + 1 header flit


def _routing(seed):
    rng = np.random.default_rng(seed)
    picks = []
    for g in range(2):
        other = [2, 3] if g == 0 else [0, 1]
        picks.append(rng.permutation(np.repeat(other, T // 2)))
    return np.concatenate(picks)[:, None]


def _params(join_pools):
    return S.SchedulerParams(tile_size=4, row_flits=5, max_payload=16, links=1, switch_latency=4, rx_latency=3,
                             gemm1_tile_cycles=60, gemm2_tile_cycles=96, dispatch_sms=1, combine_sms=1,
                             sms_per_tile=1, expect_cycle=0, join_pools=join_pools)


def _pipeline(wl, p):
    """The layer as the estimator's engine sees it, in cycles (1 byte = 1 link cycle); no combine bytes."""
    G = wl.gpus
    knots = np.arange(T + 1, dtype=np.float64)
    cum = np.tile(knots * ROW, (G, 1))
    valid = wl.tile_inst >= 0
    w = lambda c: np.where(valid, float(c), 0.0)
    P, N = len(wl.pair_token), wl.n_tokens
    z = np.zeros
    x = PipelineInputs(
        tokens_per_gpu=T, knots=knots, disp_up_cum=cum, disp_dn_cum=cum, tile_ready_p=wl.tile_ready_p,
        tile_w1=w(p.gemm1_tile_cycles), tile_w2=w(p.gemm2_tile_cycles),
        tile_w2_tail=w(p.gemm2_joined_cycles if p.join_pools else p.gemm2_tile_cycles),
        pair_start=wl.pair_start, pair_token=wl.pair_token, pair_home=wl.pair_home, pair_up=z(P),
        pair_req_dn=z(P), pair_down=z(P), token_pairs=wl.dest.d_all, token_home=wl.dest.src,
        token_result=z(N), token_req_up=z(N), up_rate=np.ones(G), dn_rate=np.ones(G), reduce_rate=np.ones(G),
        reduced=True,
        # the scheduler's switch + receive-path latency, and the table's 2 cycles from arrival to ready
        latency_dispatch=p.switch_latency + p.rx_latency + 2)
    return run_pipeline(x)


@pytest.mark.parametrize("join_pools", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_pipeline_agrees_with_scheduler(tmp_path, seed, join_pools):
    routing = _routing(seed)
    trace = tmp_path / "trace.npy"
    save_trace(trace, routing)
    wl = build_workload(4, 1, 2, T, routing=f"trace:{trace}", tile=4)
    p = _params(join_pools)
    assert p.row_cycles == ROW and p.dispatch_workers == p.combine_workers == 1
    sch = S.schedule(routing, wl.placement.base, 2, p)
    assert not sch.table_errors
    res = _pipeline(wl, p)
    joined = 0
    for g in range(2):
        mine = sorted((r for r in sch.tiles if r.gpu == g), key=lambda r: r.ready)
        n = len(mine)
        assert n == 6 and np.isfinite(res.ready[g, :n]).all() and np.isinf(res.ready[g, n:]).all()
        # the same tiles in the same order: expert of each tile (the scheduler numbers local experts)
        experts = [wl.placement.slots[g][i] for i in range(2)]
        inst_expert = {k: e for k, e in zip(np.nonzero(wl.inst_gpu == g)[0], experts)}
        assert [inst_expert[i] for i in wl.tile_inst[g, :n]] == [experts[r.expert] for r in mine]
        for name, ours, theirs in (("ready", res.ready[g, :n], [r.ready for r in mine]),
                                   ("GEMM-1 end", res.gemm1_end[g, :n], [r.gemm1[1] for r in mine]),
                                   ("GEMM-2 end", res.gemm2_end[g, :n], [r.gemm2[1] for r in mine])):
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6, err_msg=f"GPU {g}: {name}")
        joined += sum(r.gemm2[1] - r.gemm2[0] == p.gemm2_joined_cycles for r in mine)
    # GEMM-2 bound (96 > 60 cycles per tile): a backlog is left when GEMM-1 ends, so the join matters
    assert (joined > 0) == join_pools
    # a tile's tokens are released at its GEMM-2 end; the last release ends the layer here (no combine bytes)
    assert res.total == pytest.approx(max(r.gemm2[1] for r in sch.tiles), abs=1e-6)
    assert max(sch.combine_ready) == max(r.release_last for r in sch.tiles) + p.notify_cycles
