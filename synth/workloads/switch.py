"""Power workload of the NVSwitch datapath: MoE dispatch traffic with DeepSeek-V3 destination masks.

Every switch port is one GPU of an expert-parallel group of ``ports`` GPUs. Each GPU dispatches its
tokens in order (:func:`sim_models.routing.dispatch_order`): a token's hidden vector (FP8, ``hidden``
bytes) leaves as ``dymultimem.st`` packets of ``max_payload`` flits with the token's destination mask
(the GPUs that host its top-k experts, uniform routing, contiguous placement). Sources inject
back-to-back (credit-limited), sinks never stall: the switch runs at its dispatch throughput.

After ``warmup`` cycles, the ``cycles``-long measurement window records its simulation time span (the
VCD toggles are counted inside it by :mod:`synth.activity`) and the flits that entered (dispatched) and
left (delivered) the switch. The run then drains and checks that every destination received every flit
(a workload that silently lost traffic would give a wrong energy per flit).

Settings (``DYSHARP_ENV``): ``model``, ``warmup``, ``cycles``, ``seed``, ``out`` (JSON path).
"""

import json

import cocotb
import numpy as np
from cocotb.utils import get_sim_time

from hw.packet import Header, Opcode, Packet

from verif.harness import tbenv
from verif.harness.credit import CreditSink, CreditSource
from verif.harness.cycler import Cycler


def token_packets(src: int, token: int, mask: int, hidden_bytes: int, max_payload: int, rng):
    """The ``dymultimem.st`` packets that carry one token's hidden vector."""
    flits = -(-hidden_bytes // 16)
    out, offset = [], 0
    while flits > 0:
        n = min(flits, max_payload)
        h = Header(opcode=Opcode.DYN_ST, src=src, tag=(token + offset) & 0xFF, length=n, group=1, mask=mask,
                   index=token & 0x3FFFF, offset=offset & 0x3FF)
        out.append(Packet(h, [rng.getrandbits(128) for _ in range(n)]))
        flits -= n
        offset += n
    return out


@cocotb.test()
async def moe_dispatch(dut):
    from sim_models.moe_config import load_model
    from sim_models.routing import dispatch_order, place_experts, uniform_topk

    s = tbenv.settings()
    p = tbenv.params()
    n = p["ports"]
    model = load_model(s.get("model", "deepseek-v3"))
    rng = tbenv.rng("payload")
    cycler = Cycler(dut)
    stats = {"in": 0, "out": 0, "window": False}

    def on_flit(f, cycle):
        stats["out_total"] = stats.get("out_total", 0) + 1
        if stats["window"]:
            stats["out"] += 1

    sources = [CreditSource(dut, f"rx__{i}", tbenv.rng(f"src{i}"), credits=p["credits"]) for i in range(n)]
    sinks = [CreditSink(dut, f"tx__{j}", tbenv.rng(f"sink{j}"), credits=p["out_credits"] or p["credits"],
                        on_flit=on_flit) for j in range(n)]
    cycler.add(*sources, *sinks)
    await cycler.start()

    warmup, window = s.get("warmup", 200), s.get("cycles", 1000)
    experts = model.routed_experts
    placement = place_experts(experts, n) if experts % n == 0 else np.arange(experts) % n
    hidden_bytes = model.hidden          # FP8 dispatch: one byte per channel
    per_token_flits = -(-hidden_bytes // 16)
    tokens = -(-(warmup + window) * 2 // per_token_flits) + 2   # enough to keep every source busy
    expected_out = 0
    for src in range(n):
        routing = uniform_topk(tokens, experts, model.top_k, np.random.default_rng(tbenv.seed() * 1000 + src))
        for token, mask in dispatch_order(routing, placement, src):
            for pkt in token_packets(src, token, mask, hidden_bytes, p["max_payload"], rng):
                sources[src].send(pkt)
                expected_out += (1 + pkt.header.length) * bin(mask).count("1")

    await cycler.cycles(warmup)
    sent0 = sum(x.flits_sent for x in sources)
    t0 = get_sim_time("ps")
    stats["window"] = True
    await cycler.cycles(window)
    stats["window"] = False
    t1 = get_sim_time("ps")
    dispatched = sum(x.flits_sent for x in sources) - sent0
    await cycler.until(lambda: all(x.idle for x in sources) and stats.get("out_total", 0) >= expected_out,
                       timeout=200000, what="the dispatch to drain")
    await cycler.cycles(20)
    assert stats["out_total"] == expected_out, f"delivered {stats['out_total']} flits, expected {expected_out}"
    result = {"window_ps": [t0, t1], "cycles": window, "dispatched_flits": dispatched,
              "delivered_flits": stats["out"], "model": model.name, "ports": n,
              "mean_fanout": stats["out"] / max(1, dispatched)}
    dut._log.info(f"power workload: {result}")
    with open(s["out"], "w") as f:
        json.dump(result, f)
