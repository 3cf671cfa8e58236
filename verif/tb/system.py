"""cocotb testbench of a whole MoE layer on the system top (:mod:`hw.system`: G GPU NICs on one DySHARP
switch), checked against numpy.

The layer, its data and the work lists come from :mod:`verif.models.moe_layer` (settings ``model``,
``tokens``, ``hidden``, ``seed``, ``scheme``, ``gemm`` = GEMM-1/GEMM-2 cycles per tile overriding the
derived ones; ``sabotage=partial`` makes one expert output wrong on purpose, so the run must fail;
``skip=False`` steps every cycle, ``drop=False`` clocks the DUT through every skipped cycle:
:meth:`SystemEnv.skip`). The testbench plays everything outside the NICs:

* **GPU memory** (:class:`verif.harness.gpu_memory.GpuMemory`) behind each NIC's ``mem_wr``, ``mem_rd_tx``
  and ``mem_rd_rx`` (latency ``lat``), preloaded with the GPU's own token rows.
* **The SMs' descriptors**: the scheme's work lists driven into ``desc[g]``. ``dysharp-basic``/``deepep``:
  all dispatch descriptors, then at the barrier (every GEMM-2 of every GPU done) all combine descriptors
  (``deepep``: the expert GPUs' partial pushes). ``dysharp``: dispatch in token order, and each token's
  ``ld_reduce`` as soon as all its remote (GPU, expert) pairs have been released by the GPUs' Tile Status
  Tables (+ ``notify_cycles``), ahead of dispatch descriptors not yet taken, ties in the reference
  scheduler's planned order. ``fused-unicast``: ``deepep``'s descriptors, and each expert GPU's push of a
  token's partial as soon as that GPU's own pairs of the token have been released (+ ``notify_cycles``),
  ahead of dispatch descriptors not yet taken, ties in ``deepep``'s interleaved order. ``nvls``: as
  ``dysharp-basic``, with the request generators in static mode over the switch's static groups (an
  AllGather of every token, then a ReduceScatter; its own tokens reach each GPU's Tile Status Table too).
* **The GEMM stand-in** per GPU: the Tile Status Table's ready tiles (plus the GPU's local tiles, ready at
  cycle 0) run on the estimator's GEMM mechanism, :class:`sim_models.gemm_engine.GemmEngine`, with the
  layer's work (:meth:`MoeLayer.gemm_parts`): the fused schemes on one pool of every SM (GEMM-1 and GEMM-2
  sharing the SMs in proportion to their work and HBM while both run, the token-centric order, every SM on
  GEMM-2 once GEMM-1 is done), the sequential schemes as grouped launches once the GPU's dispatch has
  arrived (all its tiles ready: GEMM-1 over its experts on every SM, then GEMM-2); at a tile's GEMM-2 end
  (rounded up to a cycle) the stand-in reads each token row of the
  tile from the GPU's memory (the window rows the receive path reported, reconstructed from the metadata
  flits written into the window, in write order), computes ``g_k E_k(x)`` with numpy from the row's own
  contents (x, gate weights, expert ids), adds it into the token's expert-output row (a GPU holding two of
  the token's experts pre-sums them there), writes the row into memory and sends ``DONE`` (local tiles:
  the home's local partial row instead). ``EXPECT`` totals go in at cycle 0 (the count exchange).
* **Sum at home**: when a token's ``ld_reduce`` result (dynamic) or all its pushed partials (unicast schemes)
  have landed in the home's memory, its output is that plus the home's local partial (``nvls``: the static
  ``ld_reduce``'s result alone, which read every GPU's partial row, the zero rows preloaded where a GPU
  hosts none of the token's experts included).

Checks: every home GPU's output rows equal :meth:`MoeLayer.reference` **bit for bit** (the data make every
sum exact in BF16, so any reduction order gives the same bits); no error counter of any NIC or of the
switch moved; each memory manager allocated exactly the rows routed to its GPU; the flits counted on each
GPU's link, per direction, equal :meth:`MoeLayer.predicted_flits` (``sim_models.traffic`` plus the AL-TLB
fills), per phase where the phases are in sequence. Figures (cycles per phase, flits, AL-TLB hit rate,
tile ready cycles) go to the JSON file named by the ``out`` setting.
"""

import collections
import heapq
import inspect
import json
import math
import time

import cocotb
import numpy as np
from amaranth.lib import data

from hw.gpu_nic.memory_manager import MmCommand, MmCounter
from hw.gpu_nic.receive_path import N_REMOTE_CODES, RxError, rx_config_layout, unpack_token_meta
from hw.gpu_nic.request_gen import DescError, DescOp, GenStall, gen_config_layout
from hw.gpu_nic.token_tracker import TileCmdOp, TileCommand, TileReady, TokenRelease, TrackerError
from hw.packet import Header, Opcode
from hw.switch.al_tlb import TlbCounter
from hw.switch.dysharp_switch import DySharpSwitch, errors_in, port_status_layout, status_layout, switch_config_layout
from hw.switch.egress_translator import EgressCounter
from hw.system import NIC_CFG, LinkProbe, nic_cfg_layout
from sim_models.gemm_engine import GemmEngine

from verif.harness import tbenv
from verif.harness.cycler import Agent, Cycler
from verif.harness.gpu_memory import GpuMemory, MemReadPort, MemWritePort
from verif.harness.stream import StreamDriver, StreamMonitor
from verif.harness.structs import Port, fields, pack, read_status, unpack, width
from verif.models import moe_layer as ml

_RED_ENTRIES = inspect.signature(DySharpSwitch).parameters["red_entries"].default


class LayerMemory(GpuMemory):
    """A GPU memory that tells the testbench about every write (to follow the window and the results)."""

    def __init__(self, on_write, flit_width=128):
        super().__init__(flit_width)
        self.on_write = on_write

    def write(self, addr, data):
        super().write(addr, data)
        self.on_write(int(addr), int(data))


class LinkCounters(Agent):
    """Flits on both directions of every GPU's link, from the system top's ``probe`` (one read per cycle),
    split into AL-TLB fill traffic (``TLB_FILL``/``TLB_FILL_RESP``, told by a packet's head opcode) and the
    rest, in total and per ``bin`` cycles (the utilization plot). Keys are ``(g, "up" | "down")``."""

    FILLS = (Opcode.TLB_FILL.value, Opcode.TLB_FILL_RESP.value)

    def __init__(self, dut, gpus, bin_cycles=64):
        self.port = Port(dut.probe)
        self.G = gpus
        self.bin = bin_cycles
        self.fields = fields(LinkProbe)
        self.width = data.Layout.cast(LinkProbe).size
        self.links = [(g, d) for g in range(gpus) for d in ("up", "down")]
        self.head = {(k, v): True for k in self.links for v in range(2)}
        self.kind = {}
        self.counts = {k: collections.Counter() for k in self.links}
        self.series = {k: [] for k in self.links}       # flits per bin
        self.t0 = None
        self.valid_mask = sum(1 << (i * self.width + self.fields["valid"][0]) for i in range(len(self.links)))
        self.quiet = 0                                   # cycles since a flit was last on any link

    def start(self, cycle):
        self.t0 = cycle

    def sample(self, cycle):
        bits = self.port.read()
        if not bits & self.valid_mask:
            self.quiet += 1
            return
        self.quiet = 0
        w, (vo, _), (co, _), (lo, _), (oo, ow) = self.width, self.fields["valid"], self.fields["vc"], \
            self.fields["last"], self.fields["opcode"]
        b = None if self.t0 is None or cycle < self.t0 else (cycle - self.t0) // self.bin
        for i, k in enumerate(self.links):
            p = bits >> (i * w)
            if not (p >> vo) & 1:
                continue
            hv = (k, (p >> co) & 1)
            if self.head[hv]:
                self.kind[hv] = "fills" if ((p >> oo) & ((1 << ow) - 1)) in self.FILLS else "data"
            self.counts[k][self.kind[hv]] += 1
            self.head[hv] = bool((p >> lo) & 1)
            if b is not None:
                s = self.series[k]
                s.extend([0] * (b + 1 - len(s)))
                s[b] += 1


class Occupancy(Agent):
    """Reduction-buffer entries in use over the whole switch (``switch_status.total.engine.in_use``),
    sampled at the first stepped cycle of every ``bin`` cycles from ``start`` (skipped quiet stretches have
    nothing in flight): ``[cycle from start, entries]`` pairs and their maximum."""

    def __init__(self, dut, bin_cycles):
        self.port = Port(dut.switch_status__total)
        self.off, w = fields(port_status_layout())["engine.in_use"]
        self.mask = (1 << w) - 1
        self.bin = bin_cycles
        self.series = []
        self.t0 = None

    def start(self, cycle):
        self.t0 = self.next = cycle

    def in_use(self) -> int:
        return (self.port.read() >> self.off) & self.mask

    def sample(self, cycle):
        if self.t0 is not None and cycle >= self.next:
            self.series.append([cycle - self.t0, self.in_use()])
            self.next = self.t0 + ((cycle - self.t0) // self.bin + 1) * self.bin


_LD_REDUCE = DescOp.LD_REDUCE.value
#: How the SMs offer a ready reduction load (:class:`Feeder`): ``plain`` (the default), always first;
#: ``tags``, only while the NIC's next combine tag is free (``gen_tag_ready``) when other descriptors wait.
FEEDERS = ("plain", "tags")


class Feeder(Agent):
    """Keeps one descriptor offered on ``desc[g]``: a ready combine first, else the next queued one.

    With ``tag_ready`` (the NIC's ``gen_tag_ready[g]``, sampled each cycle) a ready reduction load goes
    first only while the NIC can take it at once: a load waiting for its tag holds ``desc``, and every
    descriptor behind it, the dispatch's stores included, would wait for a combine answer. So while the
    NIC has no tag free, the next queued descriptor goes instead (the load still goes when nothing else
    is queued). The hint sampled while a load was offered told of that load's tag: the feeder then waits a
    cycle for a fresh one before it chooses between a load and a store."""

    def __init__(self, driver, ports=None, tag_ready=None):
        self.driver, self.ports, self.tag_ready = driver, ports, tag_ready
        self.queue = collections.deque()      # dispatch / phase descriptors, in order
        self.ready = []                       # heap of (ready cycle, planned, token, Desc)
        self.issued = 0
        self.tags = False                     # the NIC's hint, as sampled last cycle
        self.stale = False                    # ... when a load was offered then (the hint told of its tag)
        self.offered_red = False              # the descriptor offered is a reduction load

    def drive(self, cycle):
        if not self.driver.idle:
            return
        gated = self.tag_ready is not None and self.queue and self.ready and self.ready[0][3].op == _LD_REDUCE
        if gated and self.stale:
            return                            # wait a cycle for the hint of the load just taken
        if self.ready and self.ready[0][0] <= cycle and not (gated and not self.tags):
            d = heapq.heappop(self.ready)[3]
        elif self.queue:
            d = self.queue.popleft()
        else:
            return
        self.driver.send(d.pack(self.ports))
        self.offered_red = d.op == _LD_REDUCE
        self.issued += 1

    def sample(self, cycle):
        if self.tag_ready is not None:
            self.stale = self.offered_red and self.driver.current is not None
            self.tags = self.tag_ready.high()

    def push_ready(self, entry):
        """A descriptor that may go from ``entry[0]`` on: (ready cycle, planned, token, Desc)."""
        heapq.heappush(self.ready, entry)

    @property
    def idle(self):
        return self.driver.idle and not self.queue and not self.ready


class GpuSide(Agent):
    """Memory, descriptors, tracker commands and the GEMM stand-in of one GPU."""

    def __init__(self, env, g):
        self.env, self.g = env, g
        L = env.L
        self.L = L
        self._connect(env, g)
        rs, F = L.row_shift, L.flit_bytes
        self.win0 = ml.WIN_BASE // F
        self.out0 = ml.OUT_BASE // F
        self.part0 = ml.PART_BASE // F
        self.stride = 1 << (rs - L.flit_shift)
        # Where rows land, each region by its own size (results: one row per home token; partials: one per
        # source and token), so that a partial is never taken for a result once G x N rows reach past the
        # result region: (base flit, size in flits). The compiled harness's watcher takes the same sizes.
        self.landing = ((self.out0, L.T * self.stride), (self.part0, L.G * L.N * self.stride))
        self.lo, self.hi = L.local_expert_range(g)
        self.slot_rows = collections.defaultdict(list)        # local expert -> window rows, arrival order
        self.landed = collections.Counter()                   # result / partial row -> flits written
        self.arrived = {}                                     # window row -> cycle its metadata flit landed
        self.acc = {}                                         # flit address of a row -> float64 partial
        # own rows, the dispatch source
        for i, t in enumerate(range(g * L.T, (g + 1) * L.T)):
            self.preload_bytes(ml.X_BASE // F + i * self.stride, L.row_raw(t))
        # tiles: local ones ready at cycle 0, the table's as they come
        self.tiles = []           # dicts: kind, expert (global), rows / tokens, ready, key
        self.done = 0
        self.due = []             # [(cycle, index)]: the next tile's DONE (GEMM-2 end)
        self.remote_counts = L.tracked_counts(g, env.scheme)     # rows through the Tile Status Table per expert
        ts = L.p.tile_size
        expert_tiles = collections.Counter(e for e, _ in L.local_tiles(g, env.scheme))
        for e, n in enumerate(self.remote_counts):
            if n:
                expert_tiles[self.lo + e] += -(-n // ts)
        self.n_tiles = sum(expert_tiles.values())
        self.gemm = GemmEngine(L.gemm_parts, expert_tiles, env.gemm_share,
                               "pool" if env.scheme in ml.FUSED_SCHEMES else "phases")
        for e, toks in L.local_tiles(g, env.scheme):
            self._add_tile(dict(kind="local", expert=e, tokens=toks, ready=0, key=None))
        zero = [0] * L.comb_flits          # nvls: the zero-filled partial rows a static ld_reduce reads
        for t in L.zero_partials(g, env.scheme):
            self.preload(ml.COMB_BASE // F + t * self.stride, zero)

    def _connect(self, env, g):
        """The DUT side: memory ports, stream drivers and monitors (the compiled harness has its own)."""
        dut = env.dut
        rng = tbenv.rng(f"gpu{g}")
        self.mem = LayerMemory(self._on_write, env.L.flit_width)
        stall = env.s.get("stall", 0.0)
        lat = env.s.get("lat", 10)
        self.wr = MemWritePort(dut, f"mem_wr__{g}", self.mem, rng, stall=stall)
        self.rd_tx = MemReadPort(dut, f"mem_rd_tx__{g}", self.mem, rng, latency=lat, stall=stall)
        self.rd_rx = MemReadPort(dut, f"mem_rd_rx__{g}", self.mem, rng, latency=lat, stall=stall)
        self.desc = StreamDriver(dut, f"desc__{g}", rng)
        self.feeder = Feeder(self.desc, env.L.G,
                             Port(getattr(dut, f"gen_tag_ready__{g}")) if env.tag_gate else None)
        self.cmd = StreamDriver(dut, f"cmd__{g}", rng)
        self.mm_cfg = StreamDriver(dut, f"mm_cfg__{g}", rng)
        self.ready_mon = StreamMonitor(dut, f"ready__{g}", rng, on_item=self._on_ready)
        self.release_mon = StreamMonitor(dut, f"release__{g}", rng, on_item=self._on_release)
        self.agents = [self.wr, self.rd_tx, self.rd_rx, self.feeder, self.desc, self.cmd, self.mm_cfg,
                       self.ready_mon, self.release_mon, self]

    def preload(self, flit_addr, words):
        """Memory contents before the layer (not a write the testbench follows)."""
        for i, w in enumerate(words):
            self.mem.words[flit_addr + i] = w

    def preload_bytes(self, flit_addr, raw: bytes):
        """:meth:`preload` of the flits of ``raw`` (little-endian bytes)."""
        self.preload(flit_addr, self.flits_of(raw))

    def flits_of(self, raw: bytes) -> list[int]:
        """The flits of ``raw`` (little-endian bytes), one after the other."""
        fb = self.L.flit_bytes
        return [int.from_bytes(raw[fb * i:fb * (i + 1)], "little") for i in range(len(raw) // fb)]

    # ---------------------------------------------------------------------------- memory observation
    def _on_write(self, addr, data):
        L = self.L
        rel = addr - self.win0
        if 0 <= rel < L.N * self.stride:
            row, within = divmod(rel, self.stride)
            if within == L.meta_flit:
                self.arrived[row] = self.env.cycler.cycle
                for e in unpack_token_meta(data):
                    if self.lo <= e < self.hi:
                        self.slot_rows[e - self.lo].append(row)
            return
        for base, size in self.landing:
            rel = addr - base
            if 0 <= rel < size:
                self.landed[(base, rel // self.stride)] += 1
                return

    def watches(self, flit_addr, n) -> bool:
        """Whether :meth:`_on_write` follows any of the ``n`` flits from ``flit_addr`` (a window row, a
        landing region); it ignores the others."""
        regions = ((self.win0, self.L.N * self.stride),) + self.landing
        return any(base < flit_addr + n and flit_addr < base + size for base, size in regions)

    def row_flits(self, flit_addr, n):
        return [self.mem.read(flit_addr + i) for i in range(n)]

    def row_bytes(self, flit_addr, n) -> bytes:
        """:meth:`row_flits` as little-endian bytes (the compiled harness reads them at once)."""
        fb = self.L.flit_bytes
        return b"".join(f.to_bytes(fb, "little") for f in self.row_flits(flit_addr, n))

    def rows_bytes(self, flit_addrs, n) -> bytes:
        """:meth:`row_bytes` of ``n`` flits from each of ``flit_addrs``, laid end to end."""
        return b"".join(self.row_bytes(a, n) for a in flit_addrs)

    def write_rows_bytes(self, flit_addrs, raw: bytes) -> None:
        """:meth:`write_row_bytes` of each of ``raw``'s equal rows at the matching flit address."""
        n = len(raw) // len(flit_addrs) if flit_addrs else 0
        for k, a in enumerate(flit_addrs):
            self.write_row_bytes(a, raw[k * n:(k + 1) * n])

    def write_row_bytes(self, flit_addr, raw: bytes) -> None:
        """The flits of ``raw`` (little-endian bytes) written from ``flit_addr`` on, one after the other."""
        for i, word in enumerate(self.flits_of(raw)):
            self.mem.write(flit_addr + i, word)

    def add_partials(self, flit_addrs, vs):
        """Add each row of ``vs`` into the partial row at the matching flit address (float64, in ``acc``)
        and write the sums into memory as BF16 rows."""
        sums = np.array(vs, dtype=np.float64)
        for k, a in enumerate(flit_addrs):
            acc = self.acc.get(a)
            if acc is not None:
                sums[k] += acc
            self.acc[a] = sums[k]
        self.write_rows_bytes(flit_addrs, ml.encode_bf16_rows_bytes(sums, self.L.flit_bytes))

    # ---------------------------------------------------------------------------- tracker and GEMM
    def _add_tile(self, tile):
        self.tiles.append(tile)
        rows = tile["tokens"] if tile["kind"] == "local" else tile["rows"]
        self.gemm.add(tile["ready"], tile["expert"], len(rows))
        self._next_due()

    def _next_due(self):
        """``due``: the next GEMM-2 end, its DONE at the first cycle at or after it (the engine's times are
        exact; a tile that becomes ready before it is due may move it)."""
        nxt = self.gemm.next_done()
        self.due = [] if nxt is None else [(math.ceil(nxt[0] - 1e-6), nxt[1])]

    def _on_ready(self, payload, cycle):
        r = unpack(TileReady, payload)
        e, t, n = r["expert"], r["tile"], r["count"]
        ts = self.L.p.tile_size
        rows, arrived = self.tile_rows(e, t * ts, n)
        assert len(rows) == n, f"GPU {self.g}: tile ({e}, {t}) ready with {n} tokens, {len(rows)} rows seen"
        self._add_tile(dict(kind="rtl", expert=self.lo + e, rows=rows, ready=cycle, key=(e, t)))
        self.env.ready_cycles.append((self.g, e, t, n, cycle, cycle - max(arrived)))

    def tile_rows(self, e, start, n):
        """The window rows of local expert ``e``'s slots ``start`` .. ``start + n - 1`` (fewer where fewer
        have arrived), in arrival order, and the cycles their metadata flits landed."""
        rows = self.slot_rows[e][start:start + n]
        return rows, [self.arrived[r] for r in rows]

    def _on_release(self, payload, cycle):
        r = unpack(TokenRelease, payload)
        slot = r["tile"] * self.L.p.tile_size + r["slot"]
        row = self.slot_rows[r["expert"]][slot]
        t = self.env.token_of_row(self.row_bytes(self.win0 + row * self.stride, self.L.row_flits))
        self.env.released(self.g, self.lo + r["expert"], t, cycle)

    def silence(self):
        """Fault: from now on this GPU's memory accepts read requests and never answers them."""
        for port in (self.rd_tx, self.rd_rx):
            port.latency = 1 << 62
            port.pending = collections.deque((1 << 62, d) for _, d in port.pending)

    def drive(self, cycle):
        if self.env.silent and self.env.silent[0] == self.g and cycle == self.env.silent[1]:
            self.silence()
        while self.due and self.due[0][0] <= cycle:
            _, i = self.gemm.pop_done()
            self._finish(self.tiles[i], cycle)
            self._next_due()

    def _finish(self, tile, cycle):
        L, F, st = self.L, self.L.flit_bytes, self.stride
        e = tile["expert"]
        # the tile's rows (local: the GPU's own token rows; else the window rows), decoded and run through the
        # expert together, each output written back where it is summed
        if tile["kind"] == "local":
            rows = [t - self.g * L.T for t in tile["tokens"]]
            src, dst = ml.X_BASE // F, ml.LOCAL_BASE // F
        else:
            rows = tile["rows"]
            src, dst = self.win0, ml.COMB_BASE // F
        if rows:
            raw = self.rows_bytes([src + r * st for r in rows], L.row_flits)
            x, gates, ids = ml.decode_rows_bytes(raw, len(rows), L.hidden, L.p.dtype, F)
            v = np.array([g[i.index(e)] for g, i in zip(gates, ids)])[:, None] * L.expert_out(e, x)
            if tile["kind"] != "local" and self.env.sabotage:   # test the test: one wrong expert output, the
                self.env.sabotage = False                        # run must fail
                v[0, 0] += 0.25
            self.add_partials([dst + r * st for r in rows], v)
        if tile["kind"] != "local":
            le, t = tile["key"]
            self.cmd.send(pack(TileCommand, op=TileCmdOp.DONE, expert=le, tile=t))
        tile["done"] = cycle
        self.done += 1

    @property
    def gemm_done(self):
        return self.done == self.n_tiles


class SystemEnv:
    """The layer's testbench state. ``params``/``settings`` default to the cocotb run's (:mod:`tbenv`); the
    compiled harness (:mod:`verif.tb.system_fast`) passes its own, and its own ``dut`` and agents
    (:meth:`_connect`, :attr:`gpu_class`)."""

    gpu_class = GpuSide

    def __init__(self, dut, params=None, settings=None):
        self.dut = dut
        self.p = p = tbenv.params() if params is None else params
        self.s = s = tbenv.settings() if settings is None else settings
        self.scheme = s.get("scheme", "dysharp-basic")
        self.sabotage = s.get("sabotage") == "partial"
        self.silent = s.get("silent")          # [GPU, cycle]: that GPU stops answering reads (fault)
        gemm = s.get("gemm")
        self.L = L = ml.build_layer(model=s.get("model", "deepseek-v3"), gpus=p["gpus"], tokens=s.get("tokens", 16),
                                    hidden=s.get("hidden", 128), seed=s.get("seed", tbenv.seed()),
                                    tile_size=p["nic"].get("tile_size", 128),
                                    gemm_cycles=tuple(gemm) if gemm else None,
                                    redundant_experts=s.get("redundant_experts", 0), system=s.get("system"))
        assert p.get("flit_width", 128) == L.flit_width, \
            f"the system top has {p.get('flit_width', 128)}-bit flits, the layer {L.flit_width}-bit ones"
        self.sp = L.scheduler_params()
        self.work = L.work(self.scheme)
        self.gemm_share = L.gemm_share()
        feeder = s.get("feeder", "plain")
        if feeder not in FEEDERS:
            raise ValueError(f"feeder must be one of {', '.join(FEEDERS)}, got {feeder!r}")
        self.tag_gate = feeder == "tags"
        self.cycler = self._cycler(dut)
        self.gpus = [self.gpu_class(self, g) for g in range(L.G)]
        self._connect(dut)
        self.rows = {}
        for t in range(L.N):
            key = L.row_raw(t)
            assert key not in self.rows, f"tokens {self.rows[key]} and {t} have the same row"
            self.rows[key] = t
        self.pending = {t: collections.Counter(L.tracked_pairs(t, self.scheme)) for t in range(L.N)}
        self.left = sum(1 for t in range(L.N) if self.pending[t])
        # fused-unicast: an expert GPU's push of a token waits for its own pairs of that token only
        self.push_items = {(r.gpu, r.token): (i, r) for w in self.work for i, r in enumerate(w.returns)} \
            if self.scheme in ml.FUSED_SCHEMES else {}
        self.push_pending = {k: collections.Counter(r.pairs) for k, (_, r) in self.push_items.items()}
        self.released_at = {}
        self.ready_cycles = []
        self.phase = {}
        self.combine_items = {c.token: c for w in self.work for c in w.combine}
        self.snap = None
        self.skip_interrupted = 0
        self.quiet = 0
        self._results, self._done = None, 0
        # Quiet cycles are dropped in whole rounds of a reduction buffer's timeout scanner (see skip).
        red_entries = (p.get("switch") or {}).get("red_entries", _RED_ENTRIES)
        self.drop_k = red_entries if s.get("drop", True) else None
        if s.get("skip", True):
            self.cycler.skipper = self.skip
            self.cycler.on_resume = self.resumed

    def _cycler(self, dut):
        return Cycler(dut)

    def _connect(self, dut):
        """The link counters, the occupancy sampler and the switch's configuration driver, all stepped."""
        s = self.s
        self.links = LinkCounters(dut, self.L.G, s.get("bin", 64))
        self.occupancy = Occupancy(dut, s.get("bin", 64))
        self.switch_cfg = StreamDriver(dut, "switch_cfg", tbenv.rng("swcfg"))
        # the NICs' configuration registers, where the top writes them through one stream (hw.system)
        self.nic_cfg = StreamDriver(dut, "nic_cfg", tbenv.rng("niccfg")) if hasattr(dut, "nic_cfg__valid") else None
        for gs in self.gpus:
            self.cycler.add(*gs.agents)
        self.cycler.add(self.switch_cfg, *([self.nic_cfg] if self.nic_cfg else []), self.links, self.occupancy)

    QUIET = 64        # fully quiet cycles before a skip (longer than any work inside the DUT takes to show)

    def skip(self, cycle) -> int:
        """Cycles the DUT may be left alone: none until the whole system has been quiet for ``QUIET``
        cycles (no flit on any link, no descriptor, command or memory read pending, no DUT output valid, no
        reduction-buffer entry in use: the quiet stretch covers the latency of any other work still inside
        the DUT); then until one cycle before the next testbench event (a GEMM end, a combine becoming
        ready). A skip that finds the DUT busy afterwards fails the run (:meth:`resumed`).

        Most of such a stretch is not simulated (``drop``, default on: :attr:`Cycler.drop_period`). Exact,
        because no reduction-buffer entry is in use (``switch_status.total.engine.in_use``) and the
        RTL's only free-running registers are each reduction buffer's (``hw/switch/reduction_buffer.py``;
        every other counter and timer in ``hw/`` moves on a transfer or while a request it started is
        pending, and quiet that long none is): the time counter ``now``, which only enters as an entry's
        age (``now`` minus its allocation time), so an offset changes nothing with no entry in use, and the
        timeout scanner (with its read of the entry it checks), which steps round the ``red_entries``
        entries and so ends where it would have when the dropped cycles are whole rounds.
        ``tests/verif/test_system.py`` runs a layer both ways and compares every figure; so was the study's
        layer, every scheme (docs/system.md)."""
        if not self._quiet_now():
            self.quiet = 0
            return 0
        self.quiet += 1
        if self.quiet < self.QUIET:
            return 0
        nxt = None
        for gs in self.gpus:
            f = gs.feeder
            for t in ([gs.due[0][0]] if gs.due else []) + ([f.ready[0][0]] if f.ready else []):
                nxt = t if nxt is None else min(nxt, t)
        n = 0 if nxt is None else max(0, nxt - cycle - 2)
        if n:
            self.cycler.drop_period = self.drop_k
        return n

    def _quiet_now(self) -> bool:
        if self.links.quiet == 0 or not self.switch_cfg.idle or self.nic_cfg and not self.nic_cfg.idle:
            return False
        for gs in self.gpus:
            f = gs.feeder
            if f.queue or not f.driver.idle or not gs.cmd.idle or not gs.mm_cfg.idle or not gs.rd_tx.idle \
                    or not gs.rd_rx.idle or any(m.seen_valid for m in self._outputs(gs)):
                return False
            if f.ready and f.ready[0][0] <= self.cycler.cycle:
                return False
        # A reduction can stay inside the switch for longer than QUIET after the last flit on any link (85
        # cycles seen at G = 16: its entry is held until the result has left), so no entry may be in use.
        return not self.occupancy.in_use()

    @staticmethod
    def _outputs(gs):
        """The monitors of a GPU's DUT outputs: a valid one means work inside the DUT."""
        return gs.wr.mon, gs.rd_tx.req, gs.rd_rx.req, gs.ready_mon, gs.release_mon

    def resumed(self):
        """After a skip: a DUT output already valid means the DUT was not idle (counted, reported)."""
        gs_valid = any(m.valid.high() for gs in self.gpus for m in self._outputs(gs))
        if gs_valid or self.links.port.read() & self.links.valid_mask:
            self.skip_interrupted += 1

    def token_of_row(self, raw: bytes) -> int:
        """The token whose dispatched row is ``raw`` (its flits as little-endian bytes)."""
        return self.rows[raw]

    def released(self, g, e, t, cycle):
        pend = self.pending[t]
        assert pend[(g, e)] == 1, f"release of ({g}, {e}) for token {t}, which is not pending"
        pend[(g, e)] -= 1
        if not +pend:
            self.left -= 1
            self.released_at[t] = cycle
            if self.scheme == "dysharp":
                c = self.combine_items[t]
                self.gpus[int(self.L.home[t])].feeder.push_ready((cycle + self.sp.notify_cycles, c.planned, t,
                                                                  c.desc))
        push = self.push_pending.get((g, t))
        if push is not None:
            push[(g, e)] -= 1
            if not +push:
                i, r = self.push_items[(g, t)]
                self.gpus[g].feeder.push_ready((cycle + self.sp.notify_cycles, i, t, r.desc))

    def configure(self):
        dut, L = self.dut, self.L
        # the configuration layouts of a G-port system (past 64 ports: the wide format's widths)
        GenConfig, RxConfig, SwitchConfig = gen_config_layout(L.G), rx_config_layout(L.G), switch_config_layout(L.G)
        groups = self.p["nic"].get("groups", 4)
        if self.nic_cfg:
            nic_cfg = nic_cfg_layout(L.G, max(48 * groups, *(width(x) for x in (GenConfig, RxConfig))))
        for g in range(L.G):
            gc = L.gen_config(g, self.scheme)
            regs = {"gen_cfg": pack(GenConfig, port=g, unicast=gc["unicast"], row_shift=gc["row_shift"],
                                    static=gc["static"]),
                    "rbase": sum(gc["rbase"].get(i, 0) << (48 * i) for i in range(groups)),
                    "rx_cfg": pack(RxConfig, **L.rx_config(g, self.scheme)), "dyn_base": 0}
            for name, v in regs.items():
                if self.nic_cfg:
                    self.nic_cfg.send(pack(nic_cfg, gpu=g, reg=NIC_CFG.index(name), data=v))
                else:
                    getattr(dut, f"{name}__{g}").value = v
            getattr(dut, f"clear__{g}").value = 0
            for c in L.mm_commands():
                self.gpus[g].mm_cfg.send(pack(MmCommand, **c))
            for e, n in enumerate(self.gpus[g].remote_counts):
                self.gpus[g].cmd.send(pack(TileCommand, op=TileCmdOp.EXPECT, expert=e, count=n))
        for c in L.tlb_config():
            self.switch_cfg.send(pack(SwitchConfig, target=1, port=0, all=1, tlb__op=c["op"], tlb__group=c["group"],
                                      tlb__mask=c["mask"], tlb__rows=c["rows"]))
        for c in L.static_groups(self.scheme):
            self.switch_cfg.send(pack(SwitchConfig, target=0, group__handle=c["handle"], group__mask=c["mask"]))

    def flits(self):
        c = self.links.counts
        return {d: [c[(g, d)]["data"] + c[(g, d)]["fills"] for g in range(self.L.G)] for d in ("up", "down")}, \
            {d: [c[(g, d)]["fills"] for g in range(self.L.G)] for d in ("up", "down")}

    def counters(self, name, g, n):
        bits = int(getattr(self.dut, f"{name}__{g}").value)
        return [(bits >> (32 * i)) & 0xFFFFFFFF for i in range(n)]

    def unfinished(self) -> list[int]:
        """Tokens whose combine result (unicast schemes: one of whose pushed partials) has not fully landed."""
        L, F = self.L, self.L.flit_bytes
        if self.scheme in ml.UNICAST_SCHEMES:
            return sorted({r.token for w in self.work for r in w.returns
                           if self.gpus[int(L.home[r.token])].landed[(ml.PART_BASE // F, r.row)] != L.comb_flits})
        return sorted(c.token for w in self.work for c in w.combine if c.desc is not None
                      and self.gpus[w.gpu].landed[(ml.OUT_BASE // F, c.token - w.gpu * L.T)] != L.comb_flits)

    async def wait(self, predicate, timeout, phase, left):
        """Wait for ``predicate``; on timeout fail naming the phase and the unfinished tokens ``left()``."""
        try:
            await self.cycler.until(predicate, timeout=timeout, what=phase)
        except AssertionError as e:
            toks = left()
            silent = f" (GPU {self.silent[0]} stopped answering at cycle {self.silent[1]})" if self.silent else ""
            raise AssertionError(f"{e}{silent}: {len(toks)} unfinished tokens, first {toks[:20]}") from None

    def complete(self):
        """All results landed. Incremental: a landed row stays landed, so the scan resumes where it stopped
        (a full scan per cycle costs more than the rest of the testbench at 2,048 tokens)."""
        if self._results is None:
            L, F = self.L, self.L.flit_bytes
            if self.scheme in ml.UNICAST_SCHEMES:
                self._results = [(self.gpus[int(L.home[r.token])].landed, (ml.PART_BASE // F, r.row))
                                 for w in self.work for r in w.returns]
            else:
                self._results = [(self.gpus[w.gpu].landed, (ml.OUT_BASE // F, c.token - w.gpu * L.T))
                                 for w in self.work for c in w.combine if c.desc is not None]
        res, n = self._results, self.L.comb_flits
        while self._done < len(res) and res[self._done][0][res[self._done][1]] == n:
            self._done += 1
        return self._done == len(res)

    def outputs(self):
        """(N, hidden) outputs read from each home GPU's memory (+ its local partial)."""
        L, F = self.L, self.L.flit_bytes
        st = 1 << (L.row_shift - L.flit_shift)
        out = np.zeros((L.N, L.hidden))
        srcs = collections.defaultdict(list)
        for w in self.work:
            for r in w.returns:
                srcs[r.token].append(r.row)
        # each token's local partial (if any) and its rows to add, read from its home GPU's memory (a GPU's
        # rows at once) and decoded together; the local partial is the start of the sum (else zeros), the
        # rows are added in order
        local = [([], []) for _ in range(L.G)]          # per home GPU: tokens, flit addresses
        add = [([], []) for _ in range(L.G)]
        for t in range(L.N):
            h = int(L.home[t])
            gs = self.gpus[h]
            i = t - h * L.T
            if gs.acc.get(ml.LOCAL_BASE // F + i * st) is not None:
                local[h][0].append(t)
                local[h][1].append(ml.LOCAL_BASE // F + i * st)
            if self.scheme in ml.UNICAST_SCHEMES:
                addrs = [ml.PART_BASE // F + idx * st for idx in srcs[t]]
            elif self.combine_items[t].desc is not None:
                addrs = [ml.OUT_BASE // F + i * st]
            else:
                addrs = []
            add[h][0].extend([t] * len(addrs))
            add[h][1].extend(addrs)

        def decode(rows):
            toks = [t for h in range(L.G) for t in rows[h][0]]
            raw = b"".join(self.gpus[h].rows_bytes(rows[h][1], L.comb_flits) for h in range(L.G) if rows[h][0])
            a = np.frombuffer(raw, dtype=np.uint8).reshape(len(toks), -1)[:, :2 * L.hidden] if toks else None
            return toks, (ml.bf16_values(np.ascontiguousarray(a).view("<u2")).astype(np.float64) if toks else None)
        toks, v = decode(local)
        if toks:
            out[toks] = v
        toks, v = decode(add)
        if toks:
            np.add.at(out, toks, v)
        return out


def queue_dispatch(env) -> None:
    """Every GPU's dispatch descriptors into its feeder, in order (both harnesses)."""
    for w, gs in zip(env.work, env.gpus):
        gs.feeder.queue.extend(w.dispatch)


def start_combine(env) -> int:
    """A sequential scheme's combine phase: the flit counts snapshotted, then every GPU's combine and return
    descriptors into its feeder (both harnesses). Returns the phase's first cycle."""
    env.snap = env.flits()
    for w, gs in zip(env.work, env.gpus):
        gs.feeder.queue.extend(c.desc for c in w.combine if c.desc is not None)
        gs.feeder.queue.extend(r.desc for r in w.returns)
    return env.cycler.cycle


def layer_figures(env, t0: int, total: int, wall0: float) -> dict:
    """The end-of-run checks (numpy bit for bit, error counters, allocated rows, flits against the traffic
    model) and the run's figures, once the layer is done; ``t0`` is the cycle of the first dispatch
    descriptor, ``total`` the layer's cycles. Shared by both harnesses."""
    L = env.L
    assert env.skip_interrupted == 0, f"{env.skip_interrupted} skips of quiet cycles found the DUT busy " \
                                      f"afterwards (the cycle counts would be off): the skip condition is wrong"

    # ---- numerics: every home GPU's output rows equal the numpy layer, bit for bit
    ref = L.reference()
    out = env.outputs()
    bad = [t for t in range(L.N) if not np.array_equal(out[t], ref[t])]
    assert not bad, f"{len(bad)} tokens differ from the reference, first {bad[:5]}: " \
                    f"got {out[bad[0]][:8]}, want {ref[bad[0]][:8]}"

    # ---- no error anywhere; the memory managers allocated exactly the routed rows
    for g in range(L.G):
        for name, n in (("gen_errors", len(DescError)), ("rx_errors", len(RxError)), ("rsp_errors", len(RxError)),
                        ("tracker_errors", len(TrackerError))):
            assert not any(env.counters(name, g, n)), f"GPU {g} {name}: {env.counters(name, g, n)}"
        codes = env.counters("remote_codes", g, N_REMOTE_CODES)
        assert not any(codes[1:]), f"GPU {g} remote error codes {codes}"
        mm = env.counters("mm_counters", g, len(MmCounter))
        routed = int(L.dest.remote[:, g].sum()) if ml.TRAFFIC_SCHEME[env.scheme] == "dynamic" else 0
        assert mm[MmCounter.ALLOCATED] == routed, f"GPU {g}: {mm[MmCounter.ALLOCATED]} rows allocated, {routed} routed"
        for c in (MmCounter.BUFFER_FULL, MmCounter.TLB_FAULT, MmCounter.ISOLATION, MmCounter.OUT_OF_BOUNDS,
                  MmCounter.CFG_ERRORS):
            assert mm[c] == 0, f"GPU {g} memory manager {c.name}: {mm[c]}"
    bits = read_status(env.dut, L.G, prefix="switch_status")
    st = {k: (bits >> off) & ((1 << w) - 1) for k, (off, w) in fields(status_layout(L.G)).items()}
    tlb = [st[f"total.tlb.{c.value}"] for c in TlbCounter]
    moved = errors_in(st)
    assert not moved, f"switch error counters moved (no fault was injected): {moved}"

    # ---- flits per GPU per direction equal the traffic model's
    pred = L.predicted_flits(env.scheme)
    total_f, fills = env.flits()
    assert fills == pred["fills"], f"AL-TLB fill flits {fills}, predicted {pred['fills']}"
    assert total_f == pred["total"], f"link flits {total_f}, predicted {pred['total']}"
    if env.snap is not None:
        disp, disp_fills = env.snap
        want = {d: [pred["dispatch"][d][g] + (pred["fills"][d][g] // 2) for g in range(L.G)] for d in ("up", "down")}
        assert disp == want, f"dispatch-phase flits {disp}, predicted {want}"

    hits, misses = tlb[TlbCounter.HITS], tlb[TlbCounter.MISSES]
    fig = {"scheme": env.scheme, "layer": L.describe(), "cycles": env.phase, "flits": total_f, "fills": fills,
           "predicted": pred, "tlb": {"hits": hits, "misses": misses,
                                      "hit_rate": hits / (hits + misses) if hits + misses else None,
                                      "recirculated": tlb[TlbCounter.RECIRCULATED],
                                      "coalesced": tlb[TlbCounter.COALESCED]},
           "egress_max_occupancy": [st[f"port.{g}.egress.{EgressCounter.MAX_OCCUPANCY.value}"] for g in range(L.G)],
           "engine": {k.split(".")[-1]: v for k, v in st.items() if k.startswith("total.engine.")},
           "red_buffer_in_use": {"bin": env.occupancy.bin, "series": env.occupancy.series,
                                 "max": max((v for _, v in env.occupancy.series), default=0)},
           "mm_allocated": [env.counters("mm_counters", g, len(MmCounter))[MmCounter.ALLOCATED] for g in range(L.G)],
           "gen_stalls": {c.name.lower(): [env.counters("gen_stalls", g, len(GenStall))[c] for g in range(L.G)]
                          for c in GenStall},
           "rx_read_waits": [env.counters("rx_read_waits", g, 1)[0] for g in range(L.G)],
           "utilization": {"bin": env.links.bin, **{d: [env.links.series[(g, d)] for g in range(L.G)]
                                                     for d in ("up", "down")}},
           "tiles_ready": len(env.ready_cycles), "ready_cycles": env.ready_cycles,
           "pipeline": {"fill": min((r[4] for r in env.ready_cycles), default=t0) - t0,
                        "last_gemm_done": max(t["done"] for gs in env.gpus for t in gs.tiles) - t0,
                        "drain": total - (max(t["done"] for gs in env.gpus for t in gs.tiles) - t0)},
           "first_ready": min((r[4] for r in env.ready_cycles), default=None),
           "last_ready": max((r[4] for r in env.ready_cycles), default=None),
           "tile_ready_latency": {"mean": float(np.mean([r[5] for r in env.ready_cycles])) if env.ready_cycles
                                  else None, "max": max((r[5] for r in env.ready_cycles), default=None)},
           "sim": {"cycles": env.cycler.cycle, "wall_s": time.perf_counter() - wall0,
                   "skipped": env.cycler.skipped, "dropped": env.cycler.dropped,
                   "skip_interrupted": env.skip_interrupted}}
    fig["sim"]["cycles_per_s"] = fig["sim"]["cycles"] / fig["sim"]["wall_s"]
    return fig


@cocotb.test()
async def test_layer(dut):
    wall0 = time.perf_counter()
    env = SystemEnv(dut)
    L, s = env.L, env.s
    timeout = s.get("timeout", 400_000)
    await env.cycler.start()
    env.configure()
    await env.cycler.until(lambda: all(g.mm_cfg.idle and g.cmd.idle for g in env.gpus) and env.switch_cfg.idle
                           and (env.nic_cfg is None or env.nic_cfg.idle), timeout=1000, what="configuration")
    await env.cycler.cycles(4)
    t0 = env.cycler.cycle
    env.links.start(t0)
    env.occupancy.start(t0)
    queue_dispatch(env)
    await env.wait(lambda: env.left == 0 and all(g.gemm_done for g in env.gpus), timeout, "dispatch and GEMMs",
                   lambda: [t for t in range(L.N) if +env.pending[t]])
    env.phase["dispatch_gemm"] = env.cycler.cycle - t0
    if env.scheme not in ml.FUSED_SCHEMES:
        t1 = start_combine(env)
    await env.wait(env.complete, timeout, "combine results", env.unfinished)
    total = env.cycler.cycle - t0
    if env.scheme not in ml.FUSED_SCHEMES:
        env.phase["combine"] = env.cycler.cycle - t1
    env.phase["total"] = total
    await env.cycler.cycles(50)          # let anything stray show up in the counters

    fig = layer_figures(env, t0, total, wall0)
    dut._log.info("system layer: %s", json.dumps({k: fig[k] for k in ("scheme", "cycles", "flits", "tlb")}))
    if s.get("out"):
        with open(s["out"], "w") as f:
            json.dump(fig, f, indent=1)
