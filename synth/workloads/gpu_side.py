"""Power workloads of the GPU-side blocks under a DeepSeek-V3 MoE layer (uniform top-8 routing over 256
experts, contiguous placement, :mod:`sim_models.routing`), each through its own testbench environment
and checked by it (a power figure from a run that went wrong would be meaningless):

* ``tracker_dispatch`` (:class:`hw.gpu_nic.token_tracker.TokenTracker`): one GPU of an 8-GPU layer in
  the closed loop of :func:`sim_models.scheduler.schedule` (``links`` = 18 NVLink4 links per GPU,
  463-flit FP8 rows, GEMM tile times from the roofline): token arrivals at the rate the GPU's links
  deliver them, ``EXPECT`` totals, and ``DONE``/releases when the schedule has them; the RTL runs in
  lockstep with its cycle-exact twin :class:`sim_models.scheduler.TileTableModel`
  (:class:`verif.tb.token_tracker.Lockstep`), every output compared every cycle. The window falls in
  the layer's dispatch phase (GEMM tiles take ~10^4-10^5 cycles, so no tile finishes in it).
* ``reqgen_fused`` (:class:`hw.gpu_nic.request_gen.RequestGenerator`): the uplink of one GPU in the fused
  pipeline, one token after another: a ``dymultimem.st`` of the token's 463-flit FP8 row to its
  destination mask (the GPUs hosting its experts, the own one excluded), then a
  ``dymultimem.ld_reduce`` of a finished token's 896-flit BF16 output row (56 header-only requests);
  memory latency 20 cycles, no stalls, each tag freed ``hold`` = 200 cycles after issue. (A real combine
  round trip is ~1000 cycles; with the default 32 tags that would allow only 32 requests per 1000
  cycles and throttle the uplink: the tag count, not the workload, would then set the rate.)
  The scoreboard checks every packet (:class:`verif.tb.request_gen.GenEnv`).
* ``rx_dispatch`` (:class:`hw.gpu_nic.receive_path.ReceivePath`): one downlink at line rate carrying
  ``DYN_ST`` token rows of 463 flits (29 packets) whose metadata flit lists the token's 8 experts, for the
  tokens routed to this GPU (GPU 1 of 8: experts 32..63); every row committed to memory, arrivals
  reported; the memory image, arrivals and counters are checked (:class:`verif.tb.receive_path.RxEnv`).

``dispatched_flits`` is the uplink (request generator) or downlink (receive path) flits in the window;
``events`` counts arrivals, packets or rows.

Settings (``DYSHARP_ENV``): ``model``, ``gpus``, ``warmup``, ``cycles``, ``out`` (and ``hold``,
``latency``).
"""

import json

import cocotb
import numpy as np
from cocotb.utils import get_sim_time

from hw.packet import EType, RedOp

from verif.harness import tbenv

ROW_FLITS = 463          # FP8 row: 7168 B + 56 fp32 scales + one metadata flit (sim_models.scheduler.token_row_flits)
COMBINE_ROW_FLITS = 896  # BF16 output row: 14336 B


def moe_routing(model, gpus, tokens, seed):
    """(model config, routing, placement, destination masks) of ``tokens`` tokens of ``model`` over ``gpus``."""
    from sim_models.moe_config import load_model
    from sim_models.routing import destination_masks, place_experts, uniform_topk
    cfg = load_model(model)
    rt = uniform_topk(tokens, cfg.routed_experts, cfg.top_k, np.random.default_rng(seed))
    pl = place_experts(cfg.routed_experts, gpus)
    return cfg, rt, pl, destination_masks(rt, pl)


def write_result(s, t0, t1, **fields):
    """The workload's result (its measured window and ``fields``) written to ``s["out"]`` (JSON) and returned."""
    result = {"window_ps": [t0, t1], "cycles": s.get("cycles", 1000), **fields}
    with open(s["out"], "w") as f:
        json.dump(result, f)
    return result


@cocotb.test()
async def tracker_dispatch(dut):
    from sim_models import scheduler as S

    from verif.harness.cycler import Cycler
    from verif.tb.token_tracker import Lockstep, new_model, read_errors

    s = tbenv.settings()
    p = tbenv.params()
    gpus = s.get("gpus", 8)
    cfg, rt, pl, _ = moe_routing(s.get("model", "deepseek-v3"), gpus, s.get("tokens_per_gpu", 256) * gpus,
                                 tbenv.seed())
    assert cfg.routed_experts // gpus <= p["experts"], "the table has fewer experts than a GPU hosts"
    g1, g2 = S.tile_gemm_cycles(cfg.hidden, cfg.expert_ffn, p["tile_size"], sms=33)
    params = S.SchedulerParams(tile_size=p["tile_size"], tiles=p["tiles"], ready_depth=p["ready_depth"],
                               release_depth=p["release_depth"], row_flits=S.token_row_flits(cfg.hidden),
                               links=18, rx_latency=19, gemm1_tile_cycles=g1, gemm2_tile_cycles=g2,
                               dispatch_sms=66, combine_sms=66, sms_per_tile=33)
    sched = S.schedule(rt, pl, gpus, params)
    ref = sched.environments[s.get("gpu", 0)]
    env = S.TrackerEnvironment(ref.arrivals, ref.expects, sched.params)
    model = new_model(p)
    counts = {"arrival": 0, "ready": 0, "release": 0, "command": 0}
    window = {"open": False}

    def on_step(cycle, r):
        env.observe(cycle, r)
        if window["open"]:
            counts["arrival"] += r.arrival_taken
            counts["command"] += r.cmd_taken
            counts["ready"] += r.ready_taken
            counts["release"] += r.release_taken
    ls = Lockstep(dut, model, env.inputs, on_step=on_step)
    cyc = Cycler(dut)
    cyc.add(ls)
    await cyc.start()
    await cyc.cycles(s.get("warmup", 200))
    t0 = get_sim_time("ps")
    window["open"] = True
    await cyc.cycles(s.get("cycles", 1000))
    window["open"] = False
    t1 = get_sim_time("ps")
    await cyc.cycles(5)
    errors = read_errors(dut)
    assert not any(errors.values()), f"errors on a clean MoE layer: {errors}"
    assert counts["arrival"] > 0, "no token arrived in the window"
    r = write_result(s, t0, t1, events=counts, arrivals_per_cycle=counts["arrival"] / s.get("cycles", 1000),
                     gpus=gpus, lockstep_cycles=ls.cycles)
    dut._log.info(f"power workload: {r}")


@cocotb.test()
async def reqgen_fused(dut):
    from hw.gpu_nic.request_gen import DescOp

    from verif.models.gpu_nic import Desc
    from verif.tb.request_gen import GenEnv

    s = tbenv.settings()
    p = tbenv.params()
    gpus = min(s.get("gpus", p["ports"]), p["ports"])
    env = GenEnv(dut, unicast=False, latency=s.get("latency", 20), stall=0.0, hold=1)
    env.tags.hold = s.get("hold", 200)
    env.tags.rng = _FixedHold()
    _, _, _, masks = moe_routing(s.get("model", "deepseek-v3"), gpus, 512, tbenv.seed())
    own = env.port
    warm, window = s.get("warmup", 200), s.get("cycles", 1000)
    need = (warm + window) // (ROW_FLITS + COMBINE_ROW_FLITS // 16) + 2
    await env.start()
    k = 0
    for m in (int(x) for x in masks):
        mask = m & ~(1 << own)
        if not mask:
            continue
        env.send(Desc(op=DescOp.STORE.value, mask=mask, index=k, group=1, addr=(0x100_0000 + k * 0x2000),
                      length=ROW_FLITS))
        env.send(Desc(op=DescOp.LD_REDUCE.value, mask=mask, index=k, group=2, addr=(0x800_0000 + k * 0x4000),
                      length=COMBINE_ROW_FLITS, etype=EType.BF16.value, redop=RedOp.ADD.value))
        k += 1
        if k >= need:
            break
    await env.cycler.cycles(warm)
    f0, packets0 = env.tx_flits, env.sb.count["gen"]
    t0 = get_sim_time("ps")
    await env.cycler.cycles(window)
    t1 = get_sim_time("ps")
    flits, packets = env.tx_flits - f0, env.sb.count["gen"] - packets0
    await env.drain(timeout=200000)
    assert flits > 0.5 * window, f"the uplink was mostly idle in the window ({flits} flits)"
    r = write_result(s, t0, t1, dispatched_flits=flits, events={"packet": packets}, tokens=k, gpus=gpus,
                     uplink_utilisation=flits / window)
    dut._log.info(f"power workload: {r}")


class _FixedHold:
    """A tag stays busy exactly ``hold`` cycles (the TagHolder draws ``randrange(hold)``)."""

    def randrange(self, n):
        return n - 1


@cocotb.test()
async def rx_dispatch(dut):
    from hw.packet import Opcode

    from verif.models.gpu_nic import row_packets
    from verif.harness.structs import pack
    from verif.tb.receive_path import RxConfig, RxEnv

    s = tbenv.settings()
    p = tbenv.params()
    gpus, me = s.get("gpus", 8), 1
    env = RxEnv(dut, gap=0.0, stall=0.0, latency=s.get("latency", 20))
    c = env.cfg
    c.row_shift, c.meta_flit, c.expert_base = 13, ROW_FLITS - 1, me * p["experts"]
    dut.cfg.value = pack(RxConfig, port=c.port, row_shift=c.row_shift, win_base=c.win_base, win_rows=c.win_rows,
                         meta_flit=c.meta_flit, expert_base=c.expert_base)
    cfg, rt, pl, masks = moe_routing(s.get("model", "deepseek-v3"), gpus, 512, tbenv.seed())
    assert cfg.routed_experts // gpus == p["experts"], "the receive path's experts must be one GPU's share"
    rng = tbenv.rng("rx")
    warm, window = s.get("warmup", 200), s.get("cycles", 1000)
    need = (warm + window) // ROW_FLITS + 2
    await env.start()
    rows = 0
    for t in range(len(masks)):
        if not (int(masks[t]) >> me) & 1:
            continue
        for pk in row_packets(opcode=Opcode.DYN_ST, src=rows % gpus, row=rows % c.win_rows, row_flits=ROW_FLITS,
                              meta_experts=[int(e) for e in rt[t]], max_payload=p["max_payload"], rng=rng,
                              group=0, row_shift=c.row_shift):
            env.send(pk, "token_dyn")
        rows += 1
        if rows >= need:
            break
    await env.cycler.cycles(warm)
    f0, a0 = env.src.flits_sent, env.sb.count["arrival"]
    t0 = get_sim_time("ps")
    await env.cycler.cycles(window)
    t1 = get_sim_time("ps")
    flits, arrivals = env.src.flits_sent - f0, env.sb.count["arrival"] - a0
    await env.drain()
    assert flits > 0.9 * window, f"the downlink was not busy in the window ({flits} flits)"
    r = write_result(s, t0, t1, dispatched_flits=flits, events={"arrival": arrivals}, rows=rows, gpus=gpus)
    dut._log.info(f"power workload: {r}")
