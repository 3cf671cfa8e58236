"""The estimator's prediction of an RTL system run (``dysharp system``), in port-clock cycles.

An RTL run is a scaled layer (:mod:`verif.models.moe_layer`): hidden size ``H`` instead of the model's
(``hidden_factor = model.hidden / H``), one switch port per GPU instead of ``links_per_gpu`` links, and
GEMM times that are the real model's divided by ``hidden_factor`` and multiplied by
``links_per_gpu / rtl_links``, so that compute and communication keep the real ratio. :func:`scaled_configs`
states the same configuration to the estimator:

* the model with ``hidden = H`` for the wire bytes (linear in it);
* a system of ``gpus`` GPUs with ``rtl_links`` links of exactly one switch port (``port_bytes_per_cycle``
  at ``switch_clock_ghz``; link efficiency = the unicast payload efficiency, so the estimator's wire rate
  is one flit per cycle, as in the RTL);
* the expert GEMMs timed on the real model's shapes with the GPU's FLOP/s and HBM bandwidth multiplied by
  ``hidden_factor x rtl_links / links_per_gpu`` (:func:`gemm_configs`): every roofline term of the real
  GEMM scaled by the GEMM-time rule above, exactly as ``MoeLayer`` derives its tile cycles. Timing the
  GEMMs on the scaled shapes instead would not scale linearly: the intermediate activations (``2 x ffn``
  bytes per row) do not shrink with ``H``, so at ``H = 128`` the scaled GEMMs turn memory-bound (at
  DeepSeek-V3, G = 8, 4096 tokens per GPU: 3.45 M cycles of GEMM against 1.32 M scaled linearly);
* a run whose GEMM times are overridden (``gemm_cycles``) scales both rates once more, by the ratio of
  the overridden to the derived per-tile time;
* the RTL's dispatched row: the hidden vector padded to whole flits, then its gate flit and its metadata
  flit (``Params.row_meta_bytes`` = the layer's ``row_meta_bytes``; :func:`sim_models.traffic.dispatch_row_bytes`
  sizes the row for both, and the layer's flit count is :func:`sim_models.traffic.account`'s with it);
* no link latency and no kernel overhead (the RTL links are wires and the testbench launches no kernels),
  the switch latency of the DySHARP switch (``switch_latency`` cycles, docs/architecture.md);
* no communication SMs (``Params.comm_sms=0``): the RTL NICs issue every transfer from descriptors, so
  the GEMMs keep every SM, as the RTL's GEMM stand-in (:class:`sim_models.gemm_engine.GemmEngine`) has them;
* ``nvls`` over a static group of all G GPUs, the issuer included (``Params.nvls_issuer_in_group``): the
  RTL switch multicasts an ``MM_ST`` to every member of the group and an ``MM_LD_REDUCE`` reads every
  member, so each GPU's own rows cross its link too;
* none of the separate-kernel baselines' permutation, activation and unpermutation kernels
  (``Params.unfused_kernels=False``: the RTL GPUs run GEMM tiles only, so a scheme's time there is its
  transfers and tiles), and one GEMM efficiency for FP8 and BF16 (``bf16_gemm_efficiency`` = FP8's), as
  ``MoeLayer``'s derived tile cycles use;

and :func:`predict_cycles` runs :func:`sim_models.estimator.estimate` on the RTL run's own routing and
placement (:func:`sim_models.workload.workload_from_routing`), converting seconds to cycles.

One RTL mechanism the estimator's bulk terms do not have is added to ``deepep``'s combine: its pushes
(:func:`push_combine_cycles`). Each NIC sends its partial rows in its work list's order, one row after the
other on its uplink, and the switch holds only :data:`SWITCH_INPUT_CELLS` flits per input plus one
output's egress queue. When two GPUs push to one home at once, each gets half of that home's downlink;
a row of one packet fits in the buffer and the uplink goes on to its next row, but a row of many packets
(DeepSeek-V3's real 14 KB combine row is 56 packets, 952 flits) fills the buffer within a few hundred
cycles and then stalls its uplink until the home's downlink drains it. The flit-level model of that
gives the combine phase; with unbounded buffers it is the busiest link's flits, the estimator's term.

:func:`full_size` is the estimator's figure for the same layer unscaled: the real model on a real system of
at least G GPUs (:func:`full_size_system`: the layer's own system when it has enough, else the first of
:data:`FULL_SIZE_SYSTEMS` that does), G GPUs, the run's tokens and routing, and every other input at the
estimator's defaults (prefill: the baselines' unfused kernels, DeepEP's copy protocol, communication SMs):
what the scaled run stands for.
"""

import collections
import dataclasses

from hw.packet import payload_efficiency

from .estimator import MAX_PAYLOAD, Params, estimate
from .moe_config import load_model
from .system_config import load_system
from .workload import workload_from_routing

__all__ = ["scaled_configs", "gemm_configs", "predict_cycles", "push_combine_cycles", "full_size", "full_size_system",
           "ESTIMATOR_SCHEME", "FULL_SIZE_SYSTEMS", "SWITCH_INPUT_CELLS"]


def scaled_configs(model: str, gpus: int, hidden: int, system: str = "hgx-h100", rtl_links: int = 1,
                   switch_latency: int = 11, gemm_scale: float = 1.0):
    """(ModelConfig, SystemConfig) of the RTL run's scaled configuration (module docstring); ``gemm_scale``
    further divides the GEMM rates (a run whose GEMM times are overridden: override / derived)."""
    m = load_model(model)
    s = load_system(system)
    k = rtl_links / s.links_per_gpu / gemm_scale
    pe = payload_efficiency(MAX_PAYLOAD, scheme="unicast", flit_bytes=s.port_bytes_per_cycle,
                            max_payload_bytes=MAX_PAYLOAD)
    ms = dataclasses.replace(m, hidden=hidden)
    ss = dataclasses.replace(s, name=f"{s.name}-rtl", gpus=gpus, links_per_gpu=rtl_links,
                             link_gbps=s.port_bytes_per_cycle * s.switch_clock_ghz, link_efficiency=pe,
                             bf16_tflops=s.bf16_tflops * k, fp8_tflops=s.fp8_tflops * k, hbm_tbps=s.hbm_tbps * k,
                             switch_latency_ns=switch_latency / s.switch_clock_ghz, link_latency_ns=0.0,
                             kernel_overhead_us=0.0)
    return ms, ss


def gemm_configs(model: str, hidden: int, system: str = "hgx-h100", rtl_links: int = 1, gemm_scale: float = 1.0):
    """(ModelConfig, SystemConfig) the scaled run's expert GEMMs are timed on: the real model, and the real
    GPU with its FLOP/s and HBM bandwidth x ``hidden_factor x rtl_links / links_per_gpu / gemm_scale``, so
    that each GEMM takes the real time x ``links_per_gpu / rtl_links / hidden_factor`` (x ``gemm_scale``)."""
    m = load_model(model)
    s = load_system(system)
    r = (m.hidden / hidden) * rtl_links / s.links_per_gpu / gemm_scale
    return m, dataclasses.replace(s, name=f"{s.name}-rtl-gemm", bf16_tflops=s.bf16_tflops * r,
                                  fp8_tflops=s.fp8_tflops * r, hbm_tbps=s.hbm_tbps * r)


# The estimator's scheme for each RTL scheme whose name differs: the token-centric fusion over unicast is
# the estimator's CCFuser (fused pipeline, unicast traffic).
ESTIMATOR_SCHEME = {"fused-unicast": "ccfuser"}


def predict_cycles(layer, schemes, calibration=None) -> dict:
    """``{scheme: {"total", "dispatch", "gemm", "combine"}}`` in cycles for a
    :class:`verif.models.moe_layer.MoeLayer` (its model, G, tokens, hidden, dtype, tile and routing), keyed
    by the RTL schemes' names (:data:`ESTIMATOR_SCHEME` maps them)."""
    p = layer.p
    scale = sum(layer.gemm_tile_cycles()) / sum(layer.derived_gemm_tile_cycles())
    ms, ss = scaled_configs(p.model, layer.G, layer.hidden, p.system, p.rtl_links, p.switch_latency, scale)
    wl = workload_from_routing(layer.routing, layer.placement, layer.G, tile=p.tile_size)
    # block_m=None: the GEMM model the RTL run's tile cycles come from (MoeLayer.derived_gemm_tile_cycles),
    # so that measured and predicted differ by the communication and the overlap, not by two GEMM models.
    # bf16_gemm_efficiency = the FP8 one: MoeLayer's tile cycles use one efficiency for either dtype. No
    # unfused kernels: the RTL layer's GPUs run GEMM tiles only (no permutation or activation kernels).
    # combine="pull": the RTL's dysharp combines with ld_reduce (its push is the fused-unicast scheme).
    # deepep_protocol=False: the RTL's deepep GPUs send rows as plain unicast packets, not DeepEP's kernels
    # (no per-token metadata stores, no SM-issued copy loop).
    # comm_sms=0: the RTL NICs issue every transfer from descriptors, so no SMs are kept from the GEMMs.
    # nvls_issuer_in_group: the RTL's static group holds every GPU, the issuer included.
    # row_meta_bytes: the RTL's dispatched row carries its gate and metadata flits after the hidden vector.
    est = estimate(ms, ss, Params(tokens_per_gpu=layer.T, dtype=p.dtype, tile=p.tile_size, gpus=layer.G,
                                  seed=p.seed, block_m=None, bf16_gemm_efficiency=Params.gemm_efficiency,
                                  unfused_kernels=False, combine="pull", comm_sms=0,
                                  deepep_protocol=False, nvls_issuer_in_group=True,
                                  row_meta_bytes=layer.row_meta_bytes),
                   calibration=calibration,
                   schemes=[ESTIMATOR_SCHEME.get(s, s) for s in schemes], workload=wl,
                   gemm_on=gemm_configs(p.model, layer.hidden, p.system, p.rtl_links, scale))
    f = ss.switch_clock_ghz * 1e9
    out = {s: {k: getattr(est.results[ESTIMATOR_SCHEME.get(s, s)], k) * f
               for k in ("total", "dispatch", "gemm", "combine")} for s in schemes}
    if "deepep" in out:
        # The pushes on the switch's finite buffers (module docstring) in place of the busiest link's flits.
        fl = layer.predicted_flits("deepep")["combine"]
        extra = push_combine_cycles(layer) - max(max(fl["up"]), max(fl["down"]))
        out["deepep"]["combine"] += extra
        out["deepep"]["total"] += extra
    return out


# The DySHARP switch's request network as the RTL system builds it (hw.switch.dysharp_switch.DySharpSwitch's
# ``credits`` default: input cells per port; the NVSwitch's egress queue at speedup 2 holds two maximal
# packets): tests/dysharp/test_system_cli.py checks both against the RTL's defaults.
SWITCH_INPUT_CELLS = 256


def push_combine_cycles(layer, input_cells: int | None = SWITCH_INPUT_CELLS) -> int:
    """Cycles of ``deepep``'s combine pushes on the switch (module docstring): every NIC sends its
    :attr:`~verif.models.moe_layer.GpuWork.returns` in order, one flit per cycle while its input holds fewer
    than ``input_cells`` + one egress queue (``2 (max_payload + 1)``) flits; each output takes whole packets
    from the inputs in round-robin order, one flit per cycle, as soon as their flits arrive. All pushes are
    ready at cycle 0 (the combine barrier). ``input_cells=None``: unbounded buffers (the busiest link)."""
    mp = layer.p.max_payload
    work = layer.work("deepep")
    G = layer.G
    packets, left = [], layer.comb_flits
    while left > 0:
        packets.append(min(mp, left) + 1)
        left -= mp
    cap = float("inf") if input_cells is None else input_cells + 2 * (mp + 1)
    nic = [collections.deque((int(layer.home[r.token]), n) for r in w.returns for n in packets) for w in work]
    sent = [0] * G                                    # flits of its head packet a NIC has sent
    voq = [[collections.deque() for _ in range(G)] for _ in range(G)]    # [length, arrived, left] per packet
    held = [0] * G
    serving = [None] * G
    rr = [0] * G
    remaining = sum(len(q) for q in nic)
    t = last = 0
    while remaining:
        t += 1
        for o in range(G):
            if serving[o] is None:
                for j in range(G):
                    i = (rr[o] + j) % G
                    if voq[i][o] and voq[i][o][0][1]:
                        serving[o], rr[o] = i, (i + 1) % G
                        break
            i = serving[o]
            if i is not None:
                head = voq[i][o][0]
                if head[1] > head[2]:                 # an arrived flit not yet sent on
                    head[2] += 1
                    held[i] -= 1
                    if head[2] == head[0]:
                        voq[i][o].popleft()
                        serving[o] = None
                        remaining -= 1
                        last = t
        for g in range(G):
            if nic[g] and held[g] < cap:
                d, n = nic[g][0]
                if sent[g] == 0:
                    voq[g][d].append([n, 0, 0])
                voq[g][d][-1][1] += 1
                held[g] += 1
                sent[g] += 1
                if sent[g] == n:
                    nic[g].popleft()
                    sent[g] = 0
    return last - 1           # a flit enters in one cycle and leaves in the next: that cycle is the latency's


# Real systems for the full-size figure, smallest first: an 8-GPU HGX, one NVL32 plane, an NVL72 rack.
FULL_SIZE_SYSTEMS = ("hgx-h100", "gh200-nvl32", "nvl72")


def full_size_system(gpus: int, system: str = "hgx-h100") -> str:
    """The system the full-size figure of a G-GPU layer runs on: ``system`` (the layer's) when it has at least
    ``gpus`` GPUs, else the first of :data:`FULL_SIZE_SYSTEMS` that has."""
    for name in (system, *FULL_SIZE_SYSTEMS):
        if load_system(name).gpus >= gpus:
            return name
    raise ValueError(f"no system of {', '.join(FULL_SIZE_SYSTEMS)} has {gpus} GPUs")


def full_size(layer, schemes, calibration=None) -> dict:
    """The estimator's figure for ``layer`` (a :class:`verif.models.moe_layer.MoeLayer`) at full size (module
    docstring): ``{"model", "system", "gpus", "tokens_per_gpu", "mode", "dtype", "us": {scheme: layer time},
    "speedup": {scheme: its time / dysharp's}}``, keyed by the RTL schemes' names."""
    p = layer.p
    system = full_size_system(layer.G, p.system)
    wl = workload_from_routing(layer.routing, layer.placement, layer.G, tile=p.tile_size)
    est = estimate(load_model(p.model), load_system(system),
                   Params(tokens_per_gpu=layer.T, dtype=p.dtype, tile=p.tile_size, gpus=layer.G, seed=p.seed),
                   calibration=calibration, schemes=[ESTIMATOR_SCHEME.get(s, s) for s in schemes], workload=wl)
    us = {s: est.results[ESTIMATOR_SCHEME.get(s, s)].total * 1e6 for s in schemes}
    full = est.results["dysharp"].total * 1e6
    return {"model": p.model, "system": system, "gpus": layer.G, "tokens_per_gpu": layer.T, "mode": est.params.mode,
            "dtype": p.dtype, "us": us, "speedup": {s: v / full for s, v in us.items()}}
