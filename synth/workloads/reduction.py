"""Power workloads of the in-switch reduction: MoE combine (``dymultimem.ld_reduce``) at saturation.

A DeepSeek-V3 combine request reduces one 256-B chunk of a token's BF16 output row (16 flits: a 14336-B
row is 56 such requests) over the GPUs that host the token's experts: ``d`` = the popcount of the
token's destination mask under uniform top-8 routing over 256 experts, contiguous placement, ``gpus``
GPUs (the engine's ports; 64 for the buffer alone), mean 7.68 at 64 GPUs. Every destination answers
``latency`` cycles after its read (1000: the NVLink + HBM round trip the AL-TLB study assumes) and all
answers share one response link, one flit per cycle: the engine's contribution port runs at its line
rate (one contribution flit per cycle) once the first answers are back, which the registration's
warm-up covers. BF16 add, accumulated in fp32 (``docs/reduction.md``).

* ``moe_combine_engine`` drives :class:`hw.switch.reduction_engine.ReductionEngine` (or the
  :class:`~hw.switch.ld_reduce_unit.LdReduceUnit`) through its testbench environment
  (:class:`verif.tb.reduction_engine.EngineEnv`): requests on ``req``, a Python AL-TLB on ``translate``
  answering after 3 cycles (the AL-TLB's hit latency), destinations answering every ``RED_READ`` from a
  memory model; every ``RED_RESP`` is checked bit-exactly by the reference model.
* ``moe_combine_buffer`` drives :class:`hw.switch.reduction_buffer.ReductionBuffer` alone through
  :class:`verif.tb.reduction_buffer.BufferEnv`: allocations on ``alloc``, the contributions of each
  request's ``d`` destinations on ``contrib``, one destination's answer after another as on the
  engine's response link, results checked the same way.

All requests are queued at the start, so the buffer has work throughout; after the window the run
drains and the scoreboard must be empty. The JSON gives ``window_ps``, ``reduced_flits`` (result payload
flits sent to the requesters in the window: each replaces ``d`` downlink copies), contribution flits and
completed requests (``events``).

Settings (``DYSHARP_ENV``): ``model``, ``gpus``, ``length``, ``latency``, ``warmup``, ``cycles``, ``out``.
"""

import json

import cocotb
import numpy as np
from cocotb.utils import get_sim_time

from hw.packet import EType, RedOp

from verif.harness import tbenv


def fanouts(model: str, gpus: int, n: int, seed: int) -> list[int]:
    """Destinations per combine request: popcounts of ``n`` tokens' DeepSeek-V3 destination masks."""
    from sim_models.moe_config import load_model
    from sim_models.routing import destination_masks, place_experts, uniform_topk
    cfg = load_model(model)
    rt = uniform_topk(n, cfg.routed_experts, cfg.top_k, np.random.default_rng(seed))
    masks = destination_masks(rt, place_experts(cfg.routed_experts, gpus))
    return [bin(int(m)).count("1") for m in masks]


def _requests_needed(s, d_mean, length, entries):
    """Enough requests to keep the contribution link busy through warm-up and window."""
    busy = s.get("warmup", 200) + s.get("cycles", 1000)
    return int(busy / (d_mean * (length + 1))) + max(8, entries // 8)


class _Window:
    """Counts result payload flits, contribution payload flits and completed requests while open."""

    def __init__(self):
        self.open = False
        self.reduced = self.contributions = self.results = 0


def _write(s, window, t0, t1, extra):
    result = {"window_ps": [t0, t1], "cycles": s.get("cycles", 1000), "reduced_flits": window.reduced,
              "contribution_flits": window.contributions, "results": window.results,
              "events": {"reduced_flit": window.reduced, "contribution_flit": window.contributions,
                         "request": window.results}, **extra}
    with open(s["out"], "w") as f:
        json.dump(result, f)
    return result


async def _measure(env, s, w, what):
    """Warm up, count in a window of ``cycles``, drain; the link that feeds the buffer (``what``) must
    have been saturated in the window, or the figure would not be the line-rate one it claims."""
    await env.cycler.cycles(s.get("warmup", 200))
    t0 = get_sim_time("ps")
    w.open = True
    await env.cycler.cycles(s.get("cycles", 1000))
    w.open = False
    t1 = get_sim_time("ps")
    await env.drain(timeout=200000)
    assert w.contributions > 0.9 * s.get("cycles", 1000), \
        f"the {what} was not saturated in the window ({w.contributions} flits): more warm-up?"
    return t0, t1


@cocotb.test()
async def moe_combine_engine(dut):
    from verif.tb.reduction_engine import EngineEnv

    s = tbenv.settings()
    p = tbenv.params()
    length = min(s.get("length", 16), p["max_length"])
    lat = s.get("latency", 1000)
    env = EngineEnv(dut, gap=0.0, stall=0.0, lat=(lat, lat + 16), tlat=(3, 3))
    await env.start(static_groups=0)
    d = fanouts(s.get("model", "deepseek-v3"), p["ports"], 4096, tbenv.seed())
    n = _requests_needed(s, float(np.mean(d)), length, p["entries"])
    for k in range(n):
        env.inject(env.make_request(static=False, fanout=d[k % len(d)], length=length, etype=EType.BF16,
                                    op=RedOp.ADD))
    w = _Window()
    on_out, on_resp = env.out.on_item, env.resp.on_flit

    def count_out(word, cycle):
        if w.open:
            if env.partial:           # a flit after the header: a result payload flit
                w.reduced += 1
        on_out(word, cycle)
        if w.open and not env.partial:
            w.results += 1

    def count_resp(info, k, flit, cycle):
        if w.open and k > 0 and info[0] == "resp":
            w.contributions += 1
        on_resp(info, k, flit, cycle)
    env.out.on_item = count_out
    env.resp.on_flit = count_resp
    t0, t1 = await _measure(env, s, w, "contribution link")
    r = _write(s, w, t0, t1, {"requests": n, "mean_fanout": float(np.mean(d[:n])), "length": length,
                              "read_latency": lat, "max_in_use": env.max_in_use})
    dut._log.info(f"power workload: {r}")


@cocotb.test()
async def moe_combine_buffer(dut):
    from verif.tb.reduction_buffer import BufferEnv

    s = tbenv.settings()
    p = tbenv.params()
    length = min(s.get("length", 16), p["max_length"])
    lat = s.get("latency", 1000)
    env = BufferEnv(dut, gap=0.0, stall=0.0, jitter=2)
    await env.start()
    d = fanouts(s.get("model", "deepseek-v3"), s.get("gpus", 64), 4096, tbenv.seed())
    n = _requests_needed(s, float(np.mean(d)), length, p["entries"])
    link = 0     # the answers come one packet after another, as on the engine's response link
    for k in range(n):
        req = env.new_request(etype=EType.BF16, op=RedOp.ADD, length=length, expected=d[k % len(d)],
                              lat=(lat, lat))
        req.latencies = [lat + link + i * length for i in range(req.expected)]
        link += req.expected * length
        env.submit(req)
    w = _Window()
    on_flit, on_contrib = env.out.on_item, env.contrib.on_accept

    def count_out(word, cycle):
        if w.open and env.partial:
            w.reduced += 1
        on_flit(word, cycle)
        if w.open and not env.partial:
            w.results += 1

    def count_contrib(c, cycle):
        if w.open and not c.abort:
            w.contributions += 1
        on_contrib(c, cycle)
    env.out.on_item = count_out
    env.contrib.on_accept = count_contrib
    t0, t1 = await _measure(env, s, w, "contribution port")
    r = _write(s, w, t0, t1, {"requests": n, "mean_fanout": float(np.mean(d[:n])), "length": length,
                              "read_latency": lat, "gpus": s.get("gpus", 64), "max_in_use": env.max_in_use})
    dut._log.info(f"power workload: {r}")
