"""The DySHARP switch's first look at a packet from a GPU, per port and virtual channel.

Contract
--------
* ``i`` (flit stream, one virtual channel of link ``port``) -> ``o``: the packet unchanged except that the
  header's ``src`` is set to ``port``. The switch's isolation checks, the reduction engines' duplicate
  detection and every response's routing rely on ``src``; a GPU cannot claim another port's.
* A packet whose (known) opcode does not belong on this virtual channel (``OPCODES[op].vclass``), or that a
  GPU may not send (``origin`` ``switch``/``internal``: ``RED_READ``, ``RED_RESP``, ``TLB_FILL``,
  ``DYN_RED_READ``), is dropped whole and answered with a header-only ``ERROR{dst = src = port, tag,
  code = UNKNOWN_OPCODE}`` on ``err``; ``refused`` counts it. Unknown opcode values pass: the network's
  input unit answers them (``UNKNOWN_OPCODE``), as a plain NVSwitch does.
* Zero latency, one flit per cycle; ``i.ready`` follows ``o.ready`` (or ``err.ready`` for a refused header,
  1 for its trailing flits). No combinational path from a ``ready`` to a ``valid``.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import DEFAULT_FLIT_WIDTH, N_VCS, OPCODES, ErrorCode, Opcode, flit_layout, header_format

__all__ = ["IngressCheck"]


class IngressCheck(wiring.Component):
    """Parameters: ``port`` (this link's port; None makes it a ``port`` strap input, ``In(range(64))`` (or
    ``range(128)`` past 64 ports), that the switch ties to a constant, so that its N checks are one Verilog
    module), ``vc`` (0 requests, 1 responses), ``flit_width``, ``ports`` (the switch's ports, which choose
    the header format, :func:`hw.packet.header_format`; None: up to 64)."""

    def __init__(self, *, port: int | None, vc: int, flit_width: int = DEFAULT_FLIT_WIDTH, ports: int | None = None):
        if not isinstance(vc, int) or not 0 <= vc < N_VCS:
            raise ValueError(f"vc must be 0 (requests) or 1 (responses), got {vc!r}")
        self.fmt = fmt = header_format(ports, flit_width)
        if port is not None and not (isinstance(port, int) and 0 <= port < fmt.max_ports):
            raise ValueError(f"port must be None (a strap input) or an integer in 0..{fmt.max_ports - 1}, got {port!r}")
        if port is not None:
            self.port = port
        self.vc = vc
        self.flit_width = flit_width
        fl = flit_layout(flit_width)
        super().__init__({
            **({"port": In(range(fmt.max_ports))} if port is None else {}),
            "i": In(stream.Signature(fl)),
            "o": Out(stream.Signature(fl)),
            "err": Out(stream.Signature(fl)),
            "refused": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cls = "resp" if self.vc else "req"
        i = self.i
        fmt = self.fmt
        h = Signal(fmt.layout)
        m.d.comb += h.eq(i.payload.data[0:fmt.bits])
        wrong = 0
        for op, info in OPCODES.items():
            if info.vclass != cls or info.origin != "gpu":
                wrong = wrong | (h.opcode == op)

        in_pkt = Signal()      # inside a packet (past its head flit)
        drop = Signal()        # ... that was refused
        head = ~in_pkt
        refuse = head & wrong

        stamped = Signal(fmt.layout)
        m.d.comb += [stamped.eq(h), stamped.src.eq(self.port)]
        m.d.comb += [
            self.o.payload.eq(i.payload),
            self.o.valid.eq(i.valid & ~refuse & ~(in_pkt & drop)),
        ]
        with m.If(head):
            m.d.comb += self.o.payload.data[0:fmt.bits].eq(stamped)

        eh = Signal(fmt.layout)
        m.d.comb += [eh.opcode.eq(Opcode.ERROR), eh.src.eq(self.port), eh.tag.eq(h.tag),
                     eh.route.uni.dst.eq(self.port), eh.route.uni.code.eq(ErrorCode.UNKNOWN_OPCODE)]
        m.d.comb += [
            self.err.valid.eq(i.valid & refuse),
            self.err.payload.data.eq(eh.as_value()),
            self.err.payload.last.eq(1),
        ]
        m.d.comb += i.ready.eq(Mux(refuse, self.err.ready, Mux(in_pkt & drop, 1, self.o.ready)))
        with m.If(i.valid & i.ready):
            m.d.sync += in_pkt.eq(~i.payload.last)
            with m.If(head):
                m.d.sync += drop.eq(refuse)
            with m.If(refuse):
                m.d.sync += self.refused.eq(self.refused + 1)
        return m
