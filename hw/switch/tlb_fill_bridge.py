"""The AL-TLB's miss path over its GPU's link: backing reads out as ``TLB_FILL`` packets, ``TLB_FILL_RESP``
packets back in as backing responses.

Each DySHARP switch port has an AL-TLB that caches its own GPU's layout; that GPU's memory manager owns
the backing table. The bridge connects the AL-TLB's ``mem`` port (:func:`~hw.switch.backing_if.backing_signature`)
to the port's link: ``tx`` joins the request VC toward GPU ``port``, ``rx`` takes the ``TLB_FILL_RESP``
packets split off the response VC from GPU ``port``.
"""

from amaranth.hdl import Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import DEFAULT_FLIT_WIDTH, MAX_SWITCH_PORTS, Opcode, flit_layout, header_format
from .backing_if import BackingResponse, backing_signature

__all__ = ["TlbFillBridge"]


class TlbFillBridge(wiring.Component):
    """Parameters: ``port`` (this switch port, the GPU whose table is read; None makes it a ``port`` strap
    input, ``In(range(ports))``, that the switch ties to a constant, so that its N bridges are one Verilog
    module), ``ports`` (switch ports, 1..128: past 64 the wide header, which needs ``flit_width`` >= 256),
    ``flit_width``.

    Ports: ``mem`` (the AL-TLB's ``mem`` connects here), ``tx`` (``TLB_FILL`` packets out), ``rx``
    (``TLB_FILL_RESP`` packets in), ``bad`` (32-bit count of dropped response packets).

    * Requests: each ``mem.req`` becomes one header-only packet ``TLB_FILL{src=req.src, tag=req.tag,
      route.dyn: group=req.group, index=req.index, mask=1<<req.dst}`` (``last=1``, other bits 0).
      Latency 0, one per cycle; ``mem.req.ready = tx.ready`` (no path from ready to valid).
    * Responses: a header-only ``TLB_FILL_RESP`` becomes ``BackingResponse{addr=route.uni.addr,
      code=route.uni.code, tag=tag}`` on ``mem.resp`` one cycle later, from a one-entry buffer:
      ``mem.resp.valid`` is a register, and ``rx.ready`` is low only while that buffer is full and
      ``mem.resp.ready`` is low, so a one-cycle ``mem.resp.ready`` drop loses nothing and full rate
      holds otherwise. ``route.uni.dst`` is not checked (the packet came in on this port's own link).
    * Bad input: a response packet that is not a header-only ``TLB_FILL_RESP`` (another opcode, a head
      flit without ``last``, or ``poison``) is consumed whole, not forwarded, and counted once in ``bad``.
    """

    def __init__(self, *, port: int | None = 0, ports: int = 8, flit_width: int = DEFAULT_FLIT_WIDTH):
        if not isinstance(ports, int) or not 1 <= ports <= MAX_SWITCH_PORTS:
            raise ValueError(f"ports must be an integer in 1..{MAX_SWITCH_PORTS}, got {ports!r}")
        if port is not None and not (isinstance(port, int) and 0 <= port < ports):
            raise ValueError(f"port must be None (a strap input) or an integer in 0..{ports - 1}, got {port!r}")
        if port is not None:
            self.port = port
        self.ports = ports
        self.flit_width = flit_width
        layout = flit_layout(flit_width)
        self.fmt = header_format(ports, flit_width)
        super().__init__({
            **({"port": In(range(ports))} if port is None else {}),
            "mem": In(backing_signature(ports)),
            "tx": Out(stream.Signature(layout)),
            "rx": In(stream.Signature(layout)),
            "bad": Out(32),
        })

    def elaborate(self, platform):
        m = Module()

        # ---- requests: mem.req -> TLB_FILL ---------------------------------------------------------
        req = self.mem.req.payload
        fmt = self.fmt
        h = Signal(fmt.layout, name="fill_header")
        m.d.comb += [
            h.opcode.eq(Opcode.TLB_FILL),
            h.src.eq(req.src),
            h.tag.eq(req.tag),
            h.route.dyn.group.eq(req.group),
            h.route.dyn.index.eq(req.index),
            h.route.dyn.mask.eq(Const(1, fmt.max_ports) << req.dst),
            self.tx.valid.eq(self.mem.req.valid),
            self.tx.payload.data.eq(h.as_value()),
            self.tx.payload.last.eq(1),
            self.tx.payload.poison.eq(0),
            self.mem.req.ready.eq(self.tx.ready),
        ]

        # ---- responses: TLB_FILL_RESP -> mem.resp (one-entry buffer) ------------------------------
        rx = self.rx
        rh = data.View(fmt.layout, rx.payload.data[:fmt.bits])
        full = Signal()
        buf = Signal(BackingResponse, name="resp_buf")
        dropping = Signal()      # inside a bad packet whose head has gone
        m.d.comb += [
            self.mem.resp.valid.eq(full),
            self.mem.resp.payload.eq(buf),
            rx.ready.eq(dropping | ~full | self.mem.resp.ready),
        ]
        take = Signal()
        m.d.comb += take.eq(rx.valid & rx.ready)
        good = Signal()
        m.d.comb += good.eq(~dropping & (rh.opcode == Opcode.TLB_FILL_RESP) & rx.payload.last &
                            ~rx.payload.poison)
        with m.If(self.mem.resp.ready):
            m.d.sync += full.eq(0)
        with m.If(take):
            with m.If(good):
                m.d.sync += [
                    full.eq(1),
                    buf.addr.eq(rh.route.uni.addr),
                    buf.code.eq(rh.route.uni.code),
                    buf.tag.eq(rh.tag),
                ]
            with m.Elif(~dropping):      # a bad packet's head: count it once, drop to its end
                m.d.sync += [self.bad.eq(self.bad + 1), dropping.eq(~rx.payload.last)]
            with m.Else():
                m.d.sync += dropping.eq(~rx.payload.last)
        return m
