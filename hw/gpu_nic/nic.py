"""The GPU's NVLink interface toward the DySHARP switch, composed: request generator, two receive paths
(one per virtual channel), memory manager and token tracker on one 2-VC link (:mod:`hw.vc_link`).

Wiring (everything else is a port)::

    desc -> RequestGenerator (link="stream") ----------------------------------> VcSender.i[0] --\\
    rx VC 0 -> ReceivePath(accept="req")  --rsp (READ_RESP, RED_READ_RESP)--> PacketMerge --> i[1] --> tx
                 |  fill (TLB_FILL)  --> MemoryManager.mem.req                      ^
                 |                      MemoryManager.mem.resp --> TLB_FILL_RESP ---/
                 |  arrival --> TokenTracker
    rx VC 1 -> ReceivePath(accept="resp") (READ_RESP / RED_RESP by tag, ERROR)
    both receive paths' mem_wr --> round-robin merge --> mem_wr

* Requests the generator makes (``DYN_ST``, ``DYN_LD_REDUCE``, unicast ``WRITE``/``READ``) go on VC 0;
  the GPU's responses (``READ_RESP``/``RED_READ_RESP`` from the request path, ``TLB_FILL_RESP`` from the
  memory manager) on VC 1, merged packet by packet (round robin).
* The VC link's two channels are demultiplexed straight into the two receive paths' credit links: each
  path's ingress buffer is that VC's receive buffer (``rx_credits`` flits each, the credits the switch's
  ``VcSender`` toward this GPU must hold: the switch's ``gpu_credits``), and its credit returns are that
  VC's. The uplink's ``VcSender`` holds ``credits`` per VC (the switch's ``link_credits``).
* Combine tags: ``gen.tag_issue`` binds to the response path, whose ``tag_busy`` stalls the generator.
* ``TLB_FILL{route.dyn.group, route.dyn.index, src, tag}`` becomes the backing request ``{group, index,
  dst = rx_cfg.port, src, tag}``; the manager's answer becomes the header-only
  ``TLB_FILL_RESP{dst = src = rx_cfg.port, tag, route.uni.addr, route.uni.code}`` (``last`` = 1, other bits 0).

Deadlock freedom (the switch's argument needs the GPU's response receive to consume unconditionally):
the two classes never share a buffer. The response path (VC 1) only writes memory and frees tags; it
emits nothing, so it waits on nothing but ``mem_wr``, which the merge serves round robin (a write of the
request path never holds it for more than a cycle at a time). The request path (VC 0) may wait for the
uplink's VC 1 (a ``READ``/``RED_READ`` answer, a ``TLB_FILL`` answer through the memory manager): a
request waits on a response resource, never the reverse, and the switch's response network always
drains. So a stalled VC 0 (its buffer full, its credits at 0) never stops a VC 1 response from
committing (tested: ``tests/hw/gpu_nic/test_gpu_nic.py::test_response_under_request_stall``).

Ports: ``desc`` (descriptors), ``gen_cfg``/``rbase``, ``rx_cfg``/``dyn_base`` (configuration; both
receive paths take ``rx_cfg``, the response path with no token window), ``mm_cfg`` (memory-manager
commands, :class:`~hw.gpu_nic.memory_manager.MmCommand`), ``clear`` (new layer: slot pointers),
``tx``/``rx`` (VC links to and from the switch), ``mem_wr``, ``mem_rd_tx`` (payload fetch), ``mem_rd_rx``
(read answers), ``cmd``/``ready``/``release`` (the tracker), ``gen_errors``, ``gen_stalls`` (the generator's
cycles waiting on combine tags, :class:`~hw.gpu_nic.request_gen.GenStall`), ``gen_tag_ready`` (a reduction-load
descriptor offered now would find its tag free: the SMs offer one only then while stores wait, since a load
waiting for its tag holds ``desc``), ``rx_read_waits`` (cycles a read request waited at the head of the
request path for room for its answer), ``rx_errors`` (request path),
``rsp_errors`` (response path), ``remote_codes`` (``ERROR`` packets received, per code), ``tracker_errors``,
``mm_counters``. Latencies and throughput are the blocks'; the glue adds none (the ``mem_wr`` merge and
the ``TLB_FILL_RESP`` former are combinational).
"""

from amaranth.hdl import Module, Mux, Shape, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ..packet import DEFAULT_FLIT_WIDTH, N_VCS, Opcode, header_format
from ..packet_stream import PacketMerge
from ..vc_link import VcSender, vc_link_signature
from .memory_if import BYTE_ADDR_BITS, mem_read_signature, mem_write_signature
from .memory_manager import N_MM_COUNTERS, MemoryManager, MmCommand
from .receive_path import N_REMOTE_CODES, ReceivePath, RxError, header_value, rx_config_layout
from .request_gen import DescError, GenStall, RequestGenerator, descriptor_layout, gen_config_layout
from .token_tracker import TileCommand, TileReady, TokenRelease, TokenTracker, TrackerError

__all__ = ["GpuNic"]


class GpuNic(wiring.Component):
    """GPU NVLink interface for the DySHARP switch (see the module docstring).

    Parameters: ``ports``, ``flit_width``, ``max_payload``, ``credits`` (uplink credits per VC: the
    switch's ``link_credits``), ``rx_credits`` (receive buffer per VC, >= ``max_payload`` + 1: the switch's
    ``gpu_credits``), ``fetch_depth``, ``read_depth``, ``groups``, ``tags``, ``experts``, ``tiles``,
    ``tile_size`` (``tiles * tile_size`` <= 65536), and the memory manager's ``mm_groups``,
    ``mm_layouts``, ``mm_index_bits``, ``mm_slots``, ``mm_epoch_bits``, the request path's ``read_queue``
    (:class:`~hw.gpu_nic.receive_path.ReceivePath`), the generator's ``any_tag``
    (:class:`~hw.gpu_nic.request_gen.RequestGenerator`); validated by the blocks; and ``fill_queue``
    (0..64, default 0): TLB fill answers queued apart from the read answers and sent first on VC 1 (0: one
    answer held in the manager, the two taken in turn packet by packet).

    ``experts`` is the number of experts this GPU hosts (1..256, ``rx_cfg.expert_base`` .. ``+ experts -
    1``): the receive paths report arrivals for exactly those. It need not be a power of two (Kimi-K2 on 8
    GPUs: 48); the Tile Status Table, whose entry index is the concatenation ``{expert, tile}``, rounds its
    expert dimension up to the next power of two, and the entries past ``experts`` are never named.
    """

    def __init__(self, *, ports: int = 8, flit_width: int = DEFAULT_FLIT_WIDTH, max_payload: int = 16,
                 credits: int = 8, rx_credits: int = 32, fetch_depth: int = 48, read_depth: int = 48,
                 groups: int = 4, tags: int = 32, experts: int = 32, tiles: int = 16, tile_size: int = 128,
                 mm_groups: int = 16, mm_layouts: int = 4, mm_index_bits: int = 10, mm_slots: int = 1024,
                 mm_epoch_bits: int = 8, read_queue: int = 0, any_tag: bool = False, fill_queue: int = 0):
        if not isinstance(tiles, int) or not isinstance(tile_size, int) or tiles * tile_size > 65536:
            raise ValueError(f"tiles * tile_size must be at most 65536 slots per expert, got {tiles} x {tile_size}")
        if not isinstance(credits, int) or isinstance(credits, bool) or not 1 <= credits <= 4096:
            raise ValueError(f"credits (uplink credits per VC) must be an integer in 1..4096, got {credits!r}")
        if not isinstance(fill_queue, int) or isinstance(fill_queue, bool) or not 0 <= fill_queue <= 64:
            raise ValueError(f"fill_queue must be an integer in 0..64 (0: none), got {fill_queue!r}")
        self.fill_queue = fill_queue
        self.flit_width = flit_width
        self.credits = credits
        self.rx_credits = rx_credits
        self.gen = RequestGenerator(ports=ports, flit_width=flit_width, max_payload=max_payload, credits=credits,
                                    fetch_depth=fetch_depth, groups=groups, tags=tags, link="stream",
                                    any_tag=any_tag)
        rx_kw = dict(flit_width=flit_width, credits=rx_credits, max_payload=max_payload, experts=experts,
                     tile_size=tile_size, max_slots=tiles * tile_size, groups=groups, tags=tags,
                     read_depth=read_depth, ports=ports)
        self.rxq = ReceivePath(accept="req", read_queue=read_queue, **rx_kw)
        self.rxr = ReceivePath(accept="resp", **rx_kw)
        # The table's entry index is {expert, tile}: its expert dimension is the share rounded up to a power
        # of two. The receive paths' mask must be the share itself, or a neighbour's experts would count here.
        self.tracker = TokenTracker(experts=1 << (experts - 1).bit_length(), tiles=tiles, tile_size=tile_size)
        self.mm = MemoryManager(groups=mm_groups, layouts=mm_layouts, index_bits=mm_index_bits, slots=mm_slots,
                                epoch_bits=mm_epoch_bits, ports=ports)
        self.fmt = header_format(ports, flit_width)
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(ports))),
            "gen_cfg": In(gen_config_layout(ports)),
            "rbase": In(data.ArrayLayout(BYTE_ADDR_BITS, groups)),
            "rx_cfg": In(rx_config_layout(ports)),
            "dyn_base": In(data.ArrayLayout(BYTE_ADDR_BITS, groups)),
            "mm_cfg": In(stream.Signature(MmCommand)),
            "clear": In(1),
            "tx": Out(vc_link_signature(flit_width)),
            "rx": In(vc_link_signature(flit_width)),
            "mem_wr": Out(mem_write_signature(flit_width)),
            "mem_rd_tx": Out(mem_read_signature(flit_width)),
            "mem_rd_rx": Out(mem_read_signature(flit_width)),
            "cmd": In(stream.Signature(TileCommand)),
            "ready": Out(stream.Signature(TileReady)),
            "release": Out(stream.Signature(TokenRelease)),
            "gen_errors": Out(data.ArrayLayout(32, len(DescError))),
            "gen_stalls": Out(data.ArrayLayout(32, len(GenStall))),
            "gen_tag_ready": Out(1),
            "rx_read_waits": Out(32),
            "rx_errors": Out(data.ArrayLayout(32, len(RxError))),
            "rsp_errors": Out(data.ArrayLayout(32, len(RxError))),
            "remote_codes": Out(data.ArrayLayout(32, N_REMOTE_CODES)),
            "tracker_errors": Out(data.ArrayLayout(32, len(TrackerError))),
            "mm_counters": Out(data.ArrayLayout(32, N_MM_COUNTERS)),
        })

    def elaborate(self, platform):
        m = Module()
        gen, rq, rr, tr, mm = self.gen, self.rxq, self.rxr, self.tracker, self.mm
        m.submodules.gen = gen
        m.submodules.rx_req = rq
        m.submodules.rx_rsp = rr
        m.submodules.tracker = tr
        m.submodules.mm = mm
        m.submodules.sender = sender = VcSender(credits=(self.credits,) * N_VCS, flit_width=self.flit_width)
        fq = self.fill_queue
        m.submodules.rsp_merge = rsp_merge = PacketMerge(flit_width=self.flit_width, n_in=2, priority=bool(fq))
        # VC 1 merge inputs: read answers and TLB fill answers. With a fill queue the manager's answers queue
        # apart and go first (fixed priority): the manager keeps answering while a read answer is on the link.
        rd_in, fr = (rsp_merge.i[1], rsp_merge.i[0]) if fq else (rsp_merge.i[0], rsp_merge.i[1])

        # ---- uplink: requests on VC 0, responses (read answers, TLB fill answers) on VC 1
        connect(m, flipped(self.desc), gen.desc)
        connect(m, gen.mem_rd, flipped(self.mem_rd_tx))
        connect(m, gen.tx, sender.i[0])
        connect(m, rq.rsp, rd_in)
        connect(m, rsp_merge.o, sender.i[1])
        connect(m, sender.link, flipped(self.tx))

        # ---- TLB fills: request path -> memory manager -> header-only TLB_FILL_RESP
        connect(m, rq.fill, mm.mem.req)
        connect(m, flipped(self.mm_cfg), mm.cfg)
        answers, layout = mm.mem.resp, mm.mem.resp.payload.shape()
        if fq:
            m.submodules.fill_q = fill_q = fifo.SyncFIFOBuffered(width=Shape.cast(layout).width, depth=fq)
            connect(m, answers, fill_q.w_stream)
            answers = fill_q.r_stream
        ans = data.View(layout, answers.payload)
        port = self.rx_cfg.port
        m.d.comb += [
            fr.valid.eq(answers.valid),
            fr.payload.data.eq(header_value(self.fmt, opcode=Opcode.TLB_FILL_RESP.value, src=port, dst=port,
                                            tag=ans.tag, addr=ans.addr, code=ans.code.as_value())),
            fr.payload.last.eq(1),
            answers.ready.eq(fr.ready),
        ]

        # ---- downlink: each VC straight into its own receive path (its buffer, its credits)
        link = self.rx
        for v, path in enumerate((rq, rr)):
            m.d.comb += [
                path.rx.valid.eq(link.valid & (link.vc == v)),
                path.rx.flit.eq(link.flit),
                link.credit[v].eq(path.rx.credit),
            ]
        connect(m, rq.mem_rd, flipped(self.mem_rd_rx))
        connect(m, gen.tag_issue, rr.tag_issue)
        m.d.comb += [
            rq.cfg.eq(self.rx_cfg),
            rr.cfg.eq(self.rx_cfg),
            rr.cfg.win_rows.eq(0),           # responses never carry token rows
            rq.dyn_base.eq(self.dyn_base),
            rr.dyn_base.eq(self.dyn_base),
            rq.clear.eq(self.clear),
            rr.clear.eq(self.clear),
            rr.arrival.ready.eq(1),          # never valid (no token window)
        ]

        # ---- memory writes of both paths: round robin per flit, so neither waits behind the other. A
        # write offered and not taken keeps the output (stream rule: the payload may not change) even if
        # the other path turns valid meanwhile.
        mw = self.mem_wr
        last = Signal()                      # the path that wrote last (1 = response path)
        held = Signal()                      # the write offered last cycle was not taken
        owner = Signal()                     # ... and came from this path
        pick = Signal()
        m.d.comb += [
            pick.eq(Mux(held, owner, Mux(rq.mem_wr.valid & rr.mem_wr.valid, ~last, rr.mem_wr.valid))),
            mw.valid.eq(rq.mem_wr.valid | rr.mem_wr.valid),
            mw.payload.eq(Mux(pick, rr.mem_wr.payload, rq.mem_wr.payload)),
            rq.mem_wr.ready.eq(mw.ready & ~pick),
            rr.mem_wr.ready.eq(mw.ready & pick),
        ]
        m.d.sync += [held.eq(mw.valid & ~mw.ready), owner.eq(pick)]
        with m.If(mw.valid & mw.ready):
            m.d.sync += last.eq(pick)

        # ---- tracker and status
        connect(m, flipped(self.cmd), tr.cmd)
        connect(m, tr.ready, flipped(self.ready))
        connect(m, tr.release, flipped(self.release))
        m.d.comb += [
            gen.cfg.eq(self.gen_cfg),
            gen.rbase.eq(self.rbase),
            gen.tag_busy.eq(rr.tag_busy),
            tr.arrival.valid.eq(rq.arrival.valid),
            tr.arrival.payload.expert.eq(rq.arrival.payload.expert),
            tr.arrival.payload.tile.eq(rq.arrival.payload.tile),
            rq.arrival.ready.eq(tr.arrival.ready),
            self.gen_errors.eq(gen.err_count),
            self.gen_stalls.eq(gen.stalls),
            self.gen_tag_ready.eq(gen.tag_ready),
            self.rx_read_waits.eq(rq.read_waits),
            self.rx_errors.eq(rq.err_count),
            self.rsp_errors.eq(rr.err_count),
            self.remote_codes.eq(rr.remote_codes),
            self.tracker_errors.eq(tr.err_count),
            self.mm_counters.eq(mm.counters),
        ]
        return m
