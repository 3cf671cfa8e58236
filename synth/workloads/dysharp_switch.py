"""Power workload of the integrated DySHARP switch: one MoE layer's dispatch and combine at line rate.

Every switch port is one GPU of an expert-parallel group of ``ports`` GPUs, played by the switch
testbench's environment (:class:`verif.tb.dysharp_switch.DySharpEnv`: per port a 2-VC link source and
sink, a GPU model with its memory manager answering ``TLB_FILL`` and ``RED_READ``, the reference model
checking every delivery), configured as that testbench does (:meth:`DySharpEnv.setup`: dispatch group
``G_DISP`` and combine group ``G_COMB`` on every port's AL-TLB, all ports members, first-touch allocation).

Traffic of GPU ``s`` (:func:`layer_traffic`), DeepSeek-V3 routing (uniform top-8 of 256 experts,
contiguous placement, :mod:`sim_models.routing`), tokens in dispatch order:

* **dispatch**: token ``t``'s FP8 hidden vector (7168 B = 448 flits) leaves as ``dymultimem.st`` packets of
  ``max_payload`` flits at offsets 0, 16, ... of one fresh row index, with the token's destination mask;
* **combine**: the same token's BF16 output row (14336 B = 896 flits) is gathered back by
  ``dymultimem.ld_reduce`` requests (BF16 add, ``max_payload`` flits each) at offsets 0, 16, ... of one
  fresh combine row, reading the GPUs of the same mask (the GPUs that ran the token's experts). A request
  with more than 7 contributors (possible from 8 ports) adds S32 instead: the reference model tries every
  arrival order of an order-sensitive float sum, which stops being cheap past 7.

The two streams are interleaved evenly per GPU (a token's 28 store packets among its 56 combine requests),
as when one micro-batch's dispatch overlaps another's combine; ``requests`` (per GPU, default
:func:`requests_needed`: what the switch can hold plus what the window and warm-up can take at line
rate, 30% more) are queued at the start. Sources inject back-to-back within their credits, sinks never stall, GPUs answer after random
latencies bounded by ``lat`` (the testbench's draw): the switch runs at its throughput for this mix.

The measurement window opens ``warmup`` cycles after reset (the VCD of :mod:`synth.vcd_run` is timed from
reset) and lasts ``cycles``. In it are counted: ``dispatched_flits`` (``dymultimem.st`` flits, header
included, that entered the switch), ``reduced_flits`` (``RED_RESP`` payload flits delivered to the
requesters, each replacing ``d`` contributions), and as events the GPU answer flits on VC 1 (contributions
and TLB fill answers), the store flits delivered, and completed reductions. Every source must still have traffic queued when the
window closes (else the window was not at line rate and the run fails). The run then drains: the reference
model must have seen every store copy and every reduction result (bit-exact), the status counters must
match the model, and the flit totals over the run must equal what :func:`layer_traffic` sent.

Settings (``DYSHARP_ENV``): ``model``, ``warmup``, ``cycles``, ``lat``, ``requests``, ``timeout``, ``out``
(JSON path).
"""

import json

import cocotb
import numpy as np
from cocotb.utils import get_sim_time

from hw.packet import N_VCS, EType, Header, Opcode, Packet, RedOp

from verif.harness import tbenv

__all__ = ["layer_traffic", "moe_layer"]

MAX_ORDERED = 7        # most contributors of an order-sensitive (float) sum the reference model checks


def layer_traffic(n: int, requests: int, seed: int, *, model: str = "deepseek-v3",
                  max_payload: int = 16) -> list[list[tuple]]:
    """Per GPU ``s``, its first ``requests`` requests in queue order: ``("st", token, mask, offset,
    length)`` and ``("red", token, mask, offset, length, etype)`` (see the module docstring).
    Deterministic in its arguments, so a test can recount what a run sent."""
    from sim_models.moe_config import load_model
    from sim_models.routing import dispatch_order, place_experts, uniform_topk

    if requests < 1:
        raise ValueError(f"requests must be >= 1, got {requests}")
    cfg = load_model(model)
    placement = place_experts(cfg.routed_experts, n, uneven=True)
    st_flits = -(-cfg.hidden // 16)            # FP8: one byte per channel
    red_flits = -(-2 * cfg.hidden // 16)       # BF16 output row
    per_token = -(-st_flits // max_payload) + -(-red_flits // max_payload)
    tokens = -(-requests // per_token)
    out = []
    for s in range(n):
        routing = uniform_topk(tokens, cfg.routed_experts, cfg.top_k, np.random.default_rng([seed, s]))
        q = []
        for t, mask in dispatch_order(routing, placement, s):
            st = [("st", t, mask, o, min(max_payload, st_flits - o)) for o in range(0, st_flits, max_payload)]
            et = EType.S32 if bin(mask).count("1") > MAX_ORDERED else EType.BF16
            red = [("red", t, mask, o, min(max_payload, red_flits - o), et) for o in range(0, red_flits, max_payload)]
            # Interleaved evenly: both streams of the token end together.
            q += [x for _, x in sorted([((i + 0.5) / len(st), x) for i, x in enumerate(st)] +
                                       [((i + 0.5) / len(red), x) for i, x in enumerate(red)], key=lambda k: k[0])]
        out.append(q[:requests])
    return out


def traffic_totals(traffic) -> dict:
    """What a run of ``traffic`` must deliver: store flits sent and delivered (copies), reduction results
    and their payload flits."""
    st = [x for q in traffic for x in q if x[0] == "st"]
    red = [x for q in traffic for x in q if x[0] == "red"]
    return {"store_flits_sent": sum(1 + x[4] for x in st),
            "store_flits_delivered": sum((1 + x[4]) * bin(x[2]).count("1") for x in st),
            "reductions": len(red), "reduced_flits": sum(x[4] for x in red)}


def requests_needed(n: int, cycles: int, *, model: str = "deepseek-v3", max_payload: int = 16,
                    buffered: int = 0, margin: float = 1.3) -> int:
    """Requests per GPU that last ``cycles`` at line rate, with ``margin``: the fluid bound of the
    busier link direction at the mean fanout (uplink: stores, requests and the contributions this GPU
    answers; downlink: store copies, reads and results), plus the ``buffered`` requests the switch can
    hold per port (input buffer, reduction entries) before it delivers anything."""
    from sim_models.moe_config import load_model
    from sim_models.routing import expected_distinct_gpus
    cfg = load_model(model)
    f = expected_distinct_gpus(cfg.routed_experts, n, cfg.top_k)
    st = -(-cfg.hidden // 16) / max_payload           # store packets per token
    red = -(-2 * cfg.hidden // 16) / max_payload      # combine requests per token
    up = st * (1 + max_payload) + red * (1 + f * (1 + max_payload))
    down = st * f * (1 + max_payload) + red * (f + 1 + max_payload)
    return int(margin * (cycles * (st + red) / max(up, down) + buffered)) + 8


class _Counts:
    """Flit counts of the window and of the whole run, from the link agents."""

    def __init__(self, env):
        self.env = env
        self.red_requests = [0] * env.n     # ld_reduce packets whose first flit left source s
        self.result_payload = 0             # RED_RESP payload flits delivered (whole run)
        self.results = 0
        self.store_delivered = 0            # WRITE flits delivered on VC 0 (translated stores, whole run)
        self._first = [[True] * N_VCS for _ in range(env.n)]
        self._op = [[None] * N_VCS for _ in range(env.n)]
        for d, sink in enumerate(env.sinks):
            sink.on_flit = lambda vc, f, cycle, d=d: self._flit(d, vc, f)
        for s, src in enumerate(env.sources):
            src.on_sent = lambda pid, cycle, s=s: self._sent(s, pid)

    def _sent(self, s, pid):
        if pid == "red":
            self.red_requests[s] += 1

    def _flit(self, d, vc, f):
        if self._first[d][vc]:
            self._op[d][vc] = Header.decode(f.data).opcode
            if self._op[d][vc] == Opcode.RED_RESP.value:
                self.results += 1
        elif self._op[d][vc] == Opcode.RED_RESP.value:
            self.result_payload += 1
        if self._op[d][vc] == Opcode.WRITE.value:
            self.store_delivered += 1
        self._first[d][vc] = f.last

    def snapshot(self) -> dict:
        src = self.env.sources
        return {"vc0_in": sum(x.flits_sent[0] for x in src), "vc1_in": sum(x.flits_sent[1] for x in src),
                "red_requests": sum(self.red_requests), "reduced": self.result_payload, "results": self.results,
                "store_delivered": self.store_delivered}


@cocotb.test()
async def moe_layer(dut):
    from verif.tb.dysharp_switch import G_COMB, G_DISP, DySharpEnv, check_counters

    s = tbenv.settings()
    p = tbenv.params()
    n, mp = p["ports"], p["max_payload"]
    warmup, window = s.get("warmup", 200), s.get("cycles", 1000)
    env = DySharpEnv(dut, gap=0.0, stall=0.0, burst=1.0, lat=s.get("lat", 40))
    await env.setup(static_groups=0)
    if env.cycler.cycle >= warmup:
        raise ValueError(f"warmup ({warmup}) must exceed the {env.cycler.cycle} cycles of configuration")
    model = s.get("model", "deepseek-v3")
    # What the switch holds of a GPU's queue when saturated: its request-network input buffer full of stores
    # (each with its two combine requests behind it in the queue), or its engine's entries all busy.
    buffered = max((p["credits"] + p["link_credits"]) // (1 + mp) * 3, p["red_entries"] * 3 // 2)
    requests = s.get("requests") or requests_needed(n, warmup + window, model=model, max_payload=mp,
                                                    buffered=buffered)
    traffic = layer_traffic(n, requests, tbenv.seed(), model=model, max_payload=mp)
    counts = _Counts(env)
    rows = {}
    for src, q in enumerate(traffic):
        for kind, t, mask, off, length, *rest in q:
            group = G_DISP if kind == "st" else G_COMB
            if (src, group, t) not in rows:
                rows[(src, group, t)] = env.index(src, group, fresh=True)
            idx = rows[(src, group, t)]
            if kind == "st":
                h = Header(opcode=Opcode.DYN_ST, src=src, tag=env.tag(src), length=length, group=group, mask=mask,
                           index=idx, offset=off)
                pkt = Packet(h, env.payload(length))
            else:
                h = Header(opcode=Opcode.DYN_LD_REDUCE, src=src, tag=env.tag(src), length=length, etype=rest[0],
                           redop=RedOp.ADD, group=group, mask=mask, index=idx, offset=off)
                pkt = Packet(h)
            env.sources[src].send(env.model.inject(src, pkt), packet_id=kind)
    await env.cycler.cycles(warmup - env.cycler.cycle)
    a, t0 = counts.snapshot(), get_sim_time("ps")
    await env.cycler.cycles(window)
    b, t1 = counts.snapshot(), get_sim_time("ps")
    starved = [i for i, x in enumerate(env.sources) if not x.pending(0)]
    assert not starved, f"sources {starved} ran out of traffic in the window: more requests"
    d = {k: b[k] - a[k] for k in a}
    await env.drain(timeout=s.get("timeout", 400000), what="the layer to drain")
    check_counters(env)
    end = counts.snapshot()
    want = traffic_totals(traffic)
    got = {"store_flits_sent": end["vc0_in"] - end["red_requests"], "store_flits_delivered": end["store_delivered"],
           "reductions": end["results"], "reduced_flits": end["reduced"]}
    assert got == want, f"run totals {got} differ from the traffic sent {want}"
    result = {"window_ps": [t0, t1], "cycles": window, "ports": n, "model": model,
              "requests_per_gpu": requests,
              "dispatched_flits": d["vc0_in"] - d["red_requests"], "reduced_flits": d["reduced"],
              "events": {"gpu_answer_flit": d["vc1_in"], "store_flit_delivered": d["store_delivered"],
                         "reduction": d["results"]},
              "ld_reduce_requests": d["red_requests"], "totals": got,
              "tlb_fills": [len(g.fills) for g in env.gpus]}
    dut._log.info(f"power workload: {result}")
    with open(s["out"], "w") as f:
        json.dump(result, f)
