"""The GPU's NVLink interface, composed: request generator + receive path + token tracker.

Wiring (everything else is a port):

* the receive path's read responses (``rsp``) share the uplink with generated packets (``gen.aux``);
* combine tags: ``gen.tag_issue -> rx.tag_issue`` and ``rx.tag_busy -> gen.tag_busy``;
* token arrivals: ``rx.arrival`` (local expert, tile) -> ``tracker.arrival``; the receive path's slots
  per expert are the tracker's capacity (``max_slots = tiles * tile_size``).

Ports: ``desc`` (descriptors), ``gen_cfg``/``rbase`` and ``rx_cfg``/``dyn_base`` (configuration), ``clear``
(new layer: the receive path's slot pointers), ``tx``/``rx`` (credit links to and from the switch),
``mem_wr``, ``mem_rd_tx`` (payload fetch), ``mem_rd_rx`` (read answers), ``cmd``/``ready``/``release``
(the tracker), ``gen_errors``/``rx_errors``/``tracker_errors``. Latencies and throughput are the blocks'
(see their modules); this adds no logic of its own.
"""

from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ..credit import credit_link_signature
from ..packet import DEFAULT_FLIT_WIDTH
from .memory_if import BYTE_ADDR_BITS, mem_read_signature, mem_write_signature
from .receive_path import ReceivePath, RxConfig, RxError
from .request_gen import DescError, Descriptor, GenConfig, RequestGenerator
from .token_tracker import TileCommand, TileReady, TokenRelease, TokenTracker, TrackerError

__all__ = ["GpuNic"]


class GpuNic(wiring.Component):
    """GPU NVLink interface: request generator, receive path and token tracker, wired together.

    Parameters: ``ports``, ``flit_width``, ``max_payload``, ``credits`` (uplink), ``rx_credits`` (downlink
    buffer), ``fetch_depth``, ``read_depth``, ``groups``, ``tags``, ``experts``, ``tiles``, ``tile_size``
    (validated by the blocks; ``tiles * tile_size`` <= 65536).
    """

    def __init__(self, *, ports: int = 8, flit_width: int = DEFAULT_FLIT_WIDTH, max_payload: int = 16,
                 credits: int = 32, rx_credits: int = 40, fetch_depth: int = 48, read_depth: int = 48,
                 groups: int = 4, tags: int = 32, experts: int = 32, tiles: int = 16, tile_size: int = 128):
        if not isinstance(tiles, int) or not isinstance(tile_size, int) or tiles * tile_size > 65536:
            raise ValueError(f"tiles * tile_size must be at most 65536 slots per expert, got {tiles} x {tile_size}")
        self.gen = RequestGenerator(ports=ports, flit_width=flit_width, max_payload=max_payload, credits=credits,
                                    fetch_depth=fetch_depth, groups=groups, tags=tags)
        self.rxp = ReceivePath(flit_width=flit_width, credits=rx_credits, max_payload=max_payload,
                               experts=experts, tile_size=tile_size, max_slots=tiles * tile_size, groups=groups,
                               tags=tags, read_depth=read_depth)
        self.tracker = TokenTracker(experts=experts, tiles=tiles, tile_size=tile_size)
        super().__init__({
            "desc": In(stream.Signature(Descriptor)),
            "gen_cfg": In(GenConfig),
            "rbase": In(data.ArrayLayout(BYTE_ADDR_BITS, groups)),
            "rx_cfg": In(RxConfig),
            "dyn_base": In(data.ArrayLayout(BYTE_ADDR_BITS, groups)),
            "clear": In(1),
            "tx": Out(credit_link_signature(flit_width)),
            "rx": In(credit_link_signature(flit_width)),
            "mem_wr": Out(mem_write_signature(flit_width)),
            "mem_rd_tx": Out(mem_read_signature(flit_width)),
            "mem_rd_rx": Out(mem_read_signature(flit_width)),
            "cmd": In(stream.Signature(TileCommand)),
            "ready": Out(stream.Signature(TileReady)),
            "release": Out(stream.Signature(TokenRelease)),
            "gen_errors": Out(data.ArrayLayout(32, len(DescError))),
            "rx_errors": Out(data.ArrayLayout(32, len(RxError))),
            "tracker_errors": Out(data.ArrayLayout(32, len(TrackerError))),
        })

    def elaborate(self, platform):
        m = Module()
        gen, rx, tr = self.gen, self.rxp, self.tracker
        m.submodules.gen = gen
        m.submodules.rx = rx
        m.submodules.tracker = tr
        connect(m, flipped(self.desc), gen.desc)
        connect(m, gen.tx, flipped(self.tx))
        connect(m, gen.mem_rd, flipped(self.mem_rd_tx))
        connect(m, flipped(self.rx), rx.rx)
        connect(m, rx.mem_wr, flipped(self.mem_wr))
        connect(m, rx.mem_rd, flipped(self.mem_rd_rx))
        connect(m, rx.rsp, gen.aux)
        connect(m, gen.tag_issue, rx.tag_issue)
        connect(m, flipped(self.cmd), tr.cmd)
        connect(m, tr.ready, flipped(self.ready))
        connect(m, tr.release, flipped(self.release))
        m.d.comb += [
            gen.cfg.eq(self.gen_cfg),
            gen.rbase.eq(self.rbase),
            gen.tag_busy.eq(rx.tag_busy),
            rx.cfg.eq(self.rx_cfg),
            rx.dyn_base.eq(self.dyn_base),
            rx.clear.eq(self.clear),
            tr.arrival.valid.eq(rx.arrival.valid),
            tr.arrival.payload.expert.eq(rx.arrival.payload.expert),
            tr.arrival.payload.tile.eq(rx.arrival.payload.tile),
            rx.arrival.ready.eq(tr.arrival.ready),
            self.gen_errors.eq(gen.err_count),
            self.rx_errors.eq(rx.err_count),
            self.tracker_errors.eq(tr.err_count),
        ]
        return m
