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
* each NIC's combine tags as the ``ld_reduce`` window of every pull (``Params.combine_window``: the NIC's
  ``tags``, :func:`nic_tags`, or ``--design nic.tags=N``) and the testbench memory's read latency in its
  round trip (:data:`RTL_READ_LATENCY`);
* none of the separate-kernel baselines' permutation, activation and unpermutation kernels
  (``Params.unfused_kernels=False``: the RTL GPUs run GEMM tiles only, so a scheme's time there is its
  transfers and tiles), and one GEMM efficiency for FP8 and BF16 (``bf16_gemm_efficiency`` = FP8's), as
  ``MoeLayer``'s derived tile cycles use;

and :func:`predict_cycles` runs :func:`sim_models.estimator.estimate` on the RTL run's own routing and
placement (:func:`sim_models.workload.workload_from_routing`), converting seconds to cycles, with the tiles
the RTL's GEMM workers compute: under every scheme whose work lists give a GPU local tiles (all but
``nvls``), a GPU computes its own tokens in tiles of their own, per local expert, ready at cycle 0, and the
rows that arrive in the others (``local_apart``); each tile is padded to a full tile's compute, so the
fused engines pay for the extra partial tiles as the RTL's pool does (the sequential engines' grouped
GEMMs take each expert's rows together either way). The real DySHARP's schedule, the estimator's own and
:func:`full_size`'s, fills tiles with local and remote rows together: that is a choice of the RTL layer's
work lists (its own rows never reach its Tile Status Table), not of the design.

One RTL mechanism the estimator's bulk terms do not have is added to ``deepep``'s combine: its pushes
(:func:`push_combine_cycles`). Each NIC sends its partial rows in its work list's order, one row after the
other on its uplink, and the switch holds only :data:`SWITCH_INPUT_CELLS` flits per input plus one
output's egress queue. When two GPUs push to one home at once, each gets half of that home's downlink;
a row of one packet fits in the buffer and the uplink goes on to its next row, but a row of many packets
(DeepSeek-V3's real 14 KB combine row is 56 packets, 952 flits) fills the buffer within a few hundred
cycles and then stalls its uplink until the home's downlink drains it. The flit-level model of that
gives the combine phase; with unbounded buffers it is the busiest link's flits, the estimator's term.

The same buffers slow ``fused-unicast`` (the estimator's ``ccfuser``), whose pushes go up the links while
dispatch rows still do: a NIC takes a ready push ahead of its next dispatch row, and once the push has
filled its input the dispatch rows behind it wait too, so other GPUs' tiles, and their pushes, come later.
That order is a closed loop (a push waits for the tiles holding its token, which wait for dispatch rows),
so :func:`fused_push_cycles` runs the whole layer flit by flit: NIC order, switch, tiles, the GEMM
mechanism, the Tile Status Table's releases. What the RTL's buffers add over unbounded ones there is added
to the estimator's fused engine, whose links, like unbounded buffers, never stall.

:func:`full_size` is the estimator's figure for the same layer unscaled: the real model on a real system of
at least G GPUs (:func:`full_size_system`: the layer's own system when it has enough, else the first of
:data:`FULL_SIZE_SYSTEMS` that does), G GPUs, the run's tokens and routing, and every other input at the
estimator's defaults (prefill: the baselines' unfused kernels, DeepEP's copy protocol, communication SMs):
what the scaled run stands for.
"""

import collections
import dataclasses
import functools
import heapq
import math

from hw.packet import payload_efficiency

from .estimator import MAX_PAYLOAD, Params, estimate
from .moe_config import load_model
from .system_config import load_system
from .workload import workload_from_routing

__all__ = ["scaled_configs", "gemm_configs", "predict_cycles", "nic_tags", "RTL_READ_LATENCY", "push_combine_cycles",
           "fused_push_cycles", "full_size",
           "full_size_system", "ESTIMATOR_SCHEME", "FULL_SIZE_SYSTEMS", "SWITCH_INPUT_CELLS", "NIC_LOOKAHEAD_PACKETS"]


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


def nic_tags() -> int:
    """The system top's NICs' combine tags by default (:class:`hw.gpu_nic.nic.GpuNic`'s ``tags``): each
    ``ld_reduce`` request packet holds one until its result lands, so a GPU keeps at most this many in flight."""
    import inspect

    from hw.gpu_nic.nic import GpuNic
    return int(inspect.signature(GpuNic.__init__).parameters["tags"].default)


# The layer testbench's GPU memory read latency in cycles (verif.tb.system's ``lat`` default, the compiled
# harness's too): a RED_READ's partial is read this long before its answer leaves the expert GPU.
RTL_READ_LATENCY = 10


def predict_cycles(layer, schemes, calibration=None, tags: int | None = None) -> dict:
    """``{scheme: {"total", "dispatch", "gemm", "combine"}}`` in cycles for a
    :class:`verif.models.moe_layer.MoeLayer` (its model, G, tokens, hidden, dtype, tile and routing), keyed
    by the RTL schemes' names (:data:`ESTIMATOR_SCHEME` maps them). ``tags``: the NICs' combine tags, the
    ``ld_reduce`` window of every pull (``--design nic.tags=N``; None: the NIC's default, :func:`nic_tags`)."""
    # The tiles the RTL's GEMM workers compute: a GPU's own tokens in tiles of their own, ready at cycle 0,
    # under every scheme whose work lists give it local tiles (all but nvls, whose own rows come back through
    # the switch into its Tile Status Table), the arriving rows in the others. The full-size figure
    # (full_size) keeps the estimator's own schedule, local and remote rows sharing tiles (module docstring).
    apart = {s: _rtl_local_apart(layer, s) for s in schemes}
    out = {}
    for a in sorted(set(apart.values())):
        out.update(_estimate_cycles(layer, [s for s in schemes if apart[s] == a], a, calibration, tags))
    out = {s: out[s] for s in schemes}
    if "deepep" in out:
        # The pushes on the switch's finite buffers (module docstring) in place of the busiest link's flits.
        fl = layer.predicted_flits("deepep")["combine"]
        extra = push_combine_cycles(layer) - max(max(fl["up"]), max(fl["down"]))
        out["deepep"]["combine"] += extra
        out["deepep"]["total"] += extra
    if "fused-unicast" in out:
        # The same buffers under the fused pipeline (module docstring): what they add to the layer's time in
        # the flit-level model, on top of the estimator's engine (whose switch never fills). The second run
        # is needed only if an input was ever full: otherwise the two runs are the same.
        work = layer.work("fused-unicast")
        bounded, stalled = _fused_push(layer, SWITCH_INPUT_CELLS, work)
        out["fused-unicast"]["total"] += bounded - _fused_push(layer, None, work)[0] if stalled else 0
    return out


def _rtl_local_apart(layer, scheme: str) -> bool:
    """Whether the RTL's GPUs compute their own tokens in tiles of their own under ``scheme``: its work lists
    give some GPU local tiles (:meth:`verif.models.moe_layer.MoeLayer.local_tiles`)."""
    return any(layer.local_tiles(g, scheme) for g in range(layer.G))


def _estimate_cycles(layer, schemes, local_apart: bool, calibration, tags) -> dict:
    """The estimator's ``{scheme: {"total", "dispatch", "gemm", "combine"}}`` in cycles of the scaled run
    (:func:`predict_cycles`) on the workload of the run's routing, the GPUs' own tokens in tiles apart
    (``local_apart``) or sharing tiles with the arriving rows."""
    p = layer.p
    scale = sum(layer.gemm_tile_cycles()) / sum(layer.derived_gemm_tile_cycles())
    ms, ss = scaled_configs(p.model, layer.G, layer.hidden, p.system, p.rtl_links, p.switch_latency, scale)
    wl = workload_from_routing(layer.routing, layer.placement, layer.G, tile=p.tile_size, local_apart=local_apart)
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
    # combine_window: each NIC's tags bound its ld_reduce (and MM_LD_REDUCE) requests in flight; the
    # partial's read in GPU memory is the testbench memory's latency.
    est = estimate(ms, ss, Params(tokens_per_gpu=layer.T, dtype=p.dtype, tile=p.tile_size, gpus=layer.G,
                                  seed=p.seed, block_m=None, bf16_gemm_efficiency=Params.gemm_efficiency,
                                  unfused_kernels=False, combine="pull", comm_sms=0,
                                  deepep_protocol=False, nvls_issuer_in_group=True,
                                  row_meta_bytes=layer.row_meta_bytes,
                                  combine_window=nic_tags() if tags is None else tags,
                                  read_latency_ns=RTL_READ_LATENCY / ss.switch_clock_ghz),
                   calibration=calibration,
                   schemes=[ESTIMATOR_SCHEME.get(s, s) for s in schemes], workload=wl,
                   gemm_on=gemm_configs(p.model, layer.hidden, p.system, p.rtl_links, scale))
    f = ss.switch_clock_ghz * 1e9
    return {s: {k: getattr(est.results[ESTIMATOR_SCHEME.get(s, s)], k) * f
                for k in ("total", "dispatch", "gemm", "combine")} for s in schemes}


# The DySHARP switch's request network as the RTL system builds it (hw.switch.dysharp_switch.DySharpSwitch's
# ``credits`` default: input cells per port; the NVSwitch's egress queue at speedup 2 holds two maximal
# packets): tests/dysharp/test_system_cli.py checks both against the RTL's defaults.
SWITCH_INPUT_CELLS = 256


def _packets(flits: int, max_payload: int) -> list[int]:
    """Wire flits of each packet of a ``flits``-flit row: ``max_payload`` payload flits each and a header."""
    out, left = [], flits
    while left > 0:
        out.append(min(max_payload, left) + 1)
        left -= max_payload
    return out


class _Switch:
    """The request network of :func:`push_combine_cycles` and :func:`fused_push_cycles`: each input holds at
    most ``cap`` flits (``None``: unbounded), per output in arrival order; each output takes whole packets
    from the inputs in round-robin order, one flit per cycle, as soon as their flits arrive (cut-through)."""

    def __init__(self, G: int, cap: int | None):
        self.G, self.cap = G, float("inf") if cap is None else cap
        self.voq = [[collections.deque() for _ in range(G)] for _ in range(G)]    # [length, arrived, left, tag]
        self.held = [0] * G
        self.serving = [None] * G
        self.rr = [0] * G
        self.flits = 0                                  # in the switch
        self.queued = [0] * G                           # packets waiting for each output
        self.stalled = False                            # an input has been full

    def drain(self) -> list:
        """One cycle of the outputs: the tags of the packets whose last flit left."""
        G, voq, out = self.G, self.voq, []
        for o in range(G):
            if not self.queued[o]:
                continue
            if self.serving[o] is None:
                for j in range(G):
                    i = (self.rr[o] + j) % G
                    if voq[i][o] and voq[i][o][0][1]:
                        self.serving[o], self.rr[o] = i, (i + 1) % G
                        break
            i = self.serving[o]
            if i is not None:
                head = voq[i][o][0]
                if head[1] > head[2]:                 # an arrived flit not yet sent on
                    head[2] += 1
                    self.held[i] -= 1
                    self.flits -= 1
                    if head[2] == head[0]:
                        voq[i][o].popleft()
                        self.queued[o] -= 1
                        self.serving[o] = None
                        out.append(head[3])
        return out

    def room(self, g: int) -> bool:
        if self.held[g] < self.cap:
            return True
        self.stalled = True
        return False

    def send(self, g: int, packet, first: bool) -> None:
        """One flit from input ``g`` of ``packet`` = (output, length, tag), ``first``: its header."""
        d, n, tag = packet
        if first:
            self.voq[g][d].append([n, 0, 0, tag])
            self.queued[d] += 1
        self.voq[g][d][-1][1] += 1
        self.held[g] += 1
        self.flits += 1


def _send_head_flit(sw, queue, sent: list, g: int) -> None:
    """One flit of the head packet of GPU ``g``'s NIC ``queue`` (``(destination, flits, tag)`` packets)
    into the switch when its input has room; ``sent[g]`` counts the head packet's flits sent."""
    if queue and sw.room(g):
        sw.send(g, queue[0], sent[g] == 0)
        sent[g] += 1
        if sent[g] == queue[0][1]:
            queue.popleft()
            sent[g] = 0


def push_combine_cycles(layer, input_cells: int | None = SWITCH_INPUT_CELLS) -> int:
    """Cycles of ``deepep``'s combine pushes on the switch (module docstring): every NIC sends its
    :attr:`~verif.models.moe_layer.GpuWork.returns` in order, one flit per cycle while its input holds fewer
    than ``input_cells`` + one egress queue (``2 (max_payload + 1)``) flits; each output takes whole packets
    from the inputs in round-robin order, one flit per cycle, as soon as their flits arrive. All pushes are
    ready at cycle 0 (the combine barrier). ``input_cells=None``: unbounded buffers (the busiest link)."""
    mp = layer.p.max_payload
    work = layer.work("deepep")
    G = layer.G
    packets = _packets(layer.comb_flits, mp)
    sw = _Switch(G, None if input_cells is None else input_cells + 2 * (mp + 1))
    nic = [collections.deque((int(layer.home[r.token]), n, True) for r in w.returns for n in packets) for w in work]
    sent = [0] * G                                    # flits of its head packet a NIC has sent
    remaining = sum(len(q) for q in nic)
    t = last = 0
    while remaining:
        t += 1
        done = sw.drain()
        if done:
            remaining -= len(done)
            last = t
        for g in range(G):
            _send_head_flit(sw, nic[g], sent, g)
    return last - 1           # a flit enters in one cycle and leaves in the next: that cycle is the latency's


# The request generator's walker runs this many packets ahead of its uplink (its packet builder's command
# queues, hw.gpu_nic.packet_builder.PacketBuilder's ``cmd_depth`` default): it takes the next descriptor
# once it has queued the last packet of the current one. tests/dysharp/test_system_cli.py checks it.
NIC_LOOKAHEAD_PACKETS = 4


def fused_push_cycles(layer, input_cells: int | None = SWITCH_INPUT_CELLS, push_first: bool = True) -> int:
    """Cycles of ``fused-unicast``'s layer with its pushes and dispatch rows moved flit by flit on the switch
    (module docstring), from the first dispatch flit to the last push landed. Each NIC's descriptor stream
    offers one descriptor: a push whose ready cycle has come first, else its next dispatch row, chosen as
    soon as the request generator takes the one before (it takes the next once at most
    :data:`NIC_LOOKAHEAD_PACKETS` packets of the current one wait behind the one on the link); a dispatch
    row goes to each remote destination in turn, lowest first. A row lands ``rx_latency`` cycles after its
    last flit leaves the switch; each local expert's rows fill its tiles in arrival order, and a tile is
    ready with its last row; the GPU's tiles (its own tokens' ready at cycle 0) run on the testbench's GEMM
    mechanism (:class:`sim_models.gemm_engine.GemmEngine`, the pool); at a tile's GEMM-2 end its tokens are
    released one per cycle from two cycles on (the Tile Status Table), and a GPU's push of a token is ready
    ``notify_cycles`` after the release of its last pair of the token, ties in work-list order.
    ``input_cells=None``: unbounded buffers; ``push_first=False``: the next dispatch row before a ready push
    (a push once the GPU's dispatch rows are all taken), the other order, for comparison."""
    return _fused_push(layer, input_cells, push_first=push_first)[0]


def _fused_push(layer, input_cells: int | None = SWITCH_INPUT_CELLS, work=None,
                push_first: bool = True) -> tuple[int, bool]:
    """:func:`fused_push_cycles` and whether an input was ever full (if not, unbounded buffers give the same)."""
    from .gemm_engine import GemmEngine

    p = layer.p
    mp, G, ts, scheme = p.max_payload, layer.G, p.tile_size, "fused-unicast"
    row_packets, push_packets = _packets(layer.row_flits, mp), _packets(layer.comb_flits, mp)
    work = layer.work(scheme) if work is None else work
    sw = _Switch(G, None if input_cells is None else input_cells + 2 * (mp + 1))
    queue = [collections.deque(w.dispatch) for w in work]      # dispatch descriptors not yet offered
    ready = [[] for _ in range(G)]                              # heap of (ready cycle, work-list index, push)
    offered = [None] * G
    nic = [collections.deque() for _ in range(G)]               # packets taken: (output, flits, tag)
    sent = [0] * G
    lo = [layer.local_expert_range(g)[0] for g in range(G)]
    counts = [layer.tracked_counts(g, scheme) for g in range(G)]
    rows = [collections.defaultdict(list) for _ in range(G)]    # local expert -> tokens in arrival order
    engines, tiles, due = [], [], [None] * G
    parts = functools.lru_cache(maxsize=None)(layer.gemm_parts)      # a tile's work depends on its rows only
    share = layer.gemm_share()
    for g in range(G):
        local = work[g].local_tiles
        n_tiles = collections.Counter(e for e, _ in local)
        for e, n in enumerate(counts[g]):
            if n:
                n_tiles[lo[g] + e] += -(-n // ts)
        engines.append(GemmEngine(parts, n_tiles, share, "pool"))
        tiles.append([])
        for e, toks in local:
            engines[g].add(0, e, len(toks))
            tiles[g].append(None)                               # a local tile: nothing to push

    def next_due(g):
        n = engines[g].next_done()
        due[g] = None if n is None else math.ceil(n[0] - 1e-6)

    for g in range(G):
        next_due(g)
    items = {(r.gpu, r.token): (i, r) for w in work for i, r in enumerate(w.returns)}
    pending = {k: collections.Counter(r.pairs) for k, (_, r) in items.items()}
    release_free = [0] * G
    landings = []                                               # heap of (cycle, seq, tag)
    left, t, seq = len(items), 0, 0
    while left:
        t += 1
        if not sw.flits and not any(nic) and not any(queue) and all(o is None for o in offered):
            # nothing on the wires: on to the next landing, GEMM-2 end or push
            nxt = [landings[0][0]] if landings else []
            nxt += [d for d in due if d is not None] + [h[0][0] for h in ready if h]
            t = max(t, min(nxt))
        while landings and landings[0][0] <= t:
            _, _, (kind, d, tok) = heapq.heappop(landings)
            if kind == "push":
                left -= 1
                continue
            for e in layer.routing[tok]:
                e = int(e)
                if lo[d] <= e < lo[d] + len(counts[d]):
                    got = rows[d][e]
                    got.append(tok)
                    if len(got) % ts == 0 or len(got) == counts[d][e - lo[d]]:
                        engines[d].add(t, e, (len(got) - 1) % ts + 1)
                        tiles[d].append((e, got[(len(got) - 1) // ts * ts:]))
                        next_due(d)
        for g in range(G):
            while due[g] is not None and due[g] <= t:
                tile = tiles[g][engines[g].pop_done()[1]]
                if tile is not None:
                    e, toks = tile
                    r0 = max(t + 2, release_free[g])
                    for k, tok in enumerate(toks):
                        pend = pending[(g, tok)]
                        pend[(g, e)] -= 1
                        if not +pend:
                            i, r = items[(g, tok)]
                            heapq.heappush(ready[g], (r0 + k + p.notify_cycles, i, r))
                    release_free[g] = r0 + len(toks)
                next_due(g)
        for tag in sw.drain():
            if tag is not None:
                seq += 1
                heapq.heappush(landings, (t + p.rx_latency, seq, tag))
        for g in range(G):
            if offered[g] is None:
                if ready[g] and ready[g][0][0] <= t and (push_first or not queue[g]):
                    offered[g] = heapq.heappop(ready[g])[2]
                elif queue[g]:
                    offered[g] = queue[g].popleft()
            if offered[g] is not None and len(nic[g]) <= NIC_LOOKAHEAD_PACKETS:
                x, offered[g] = offered[g], None
                if hasattr(x, "desc"):                          # a push (ReturnItem)
                    h = int(layer.home[x.token])
                    nic[g].extend((h, n, None) for n in push_packets[:-1])
                    nic[g].append((h, push_packets[-1], ("push", h, x.token)))
                else:                                           # a dispatch row to each destination
                    for d in range(G):
                        if x.mask >> d & 1:
                            nic[g].extend((d, n, None) for n in row_packets[:-1])
                            nic[g].append((d, row_packets[-1], ("row", d, x.index)))
            _send_head_flit(sw, nic[g], sent, g)
    return t, sw.stalled


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
    # the estimator's own schedule: a GPU's own tokens share tiles with the rows that arrive (not local_apart)
    wl = workload_from_routing(layer.routing, layer.placement, layer.G, tile=p.tile_size)
    est = estimate(load_model(p.model), load_system(system),
                   Params(tokens_per_gpu=layer.T, dtype=p.dtype, tile=p.tile_size, gpus=layer.G, seed=p.seed),
                   calibration=calibration, schemes=[ESTIMATOR_SCHEME.get(s, s) for s in schemes], workload=wl)
    us = {s: est.results[ESTIMATOR_SCHEME.get(s, s)].total * 1e6 for s in schemes}
    full = est.results["dysharp"].total * 1e6
    return {"model": p.model, "system": system, "gpus": layer.G, "tokens_per_gpu": layer.T, "mode": est.params.mode,
            "dtype": p.dtype, "us": us, "speedup": {s: v / full for s, v in us.items()}}
