"""Builds outgoing packets whose payload comes from GPU memory: a read-ahead fetcher plus a
store-and-forward packet emitter.

Used by the request generator (``dymultimem.st`` / unicast write payloads) and by the receive path (read
responses). Two command streams, consumed in order:

* ``fetch``: read ``n`` flits starting at flit address ``addr``;
* ``emit``: send ``header`` followed by the next ``n`` fetched flits (``n`` = 0: a header-only packet).

The i-th ``emit`` with ``n`` > 0 takes the data of the fetches in order, so a caller pushes the ``fetch``
for a packet no later than its ``emit``; both have a small input queue (``cmd_depth``).

Why store-and-forward: a packet starts only when all its payload is in the data buffer, so the link never
carries a gap inside a packet (an uplink is packet-atomic; a stalled packet would block every other
packet behind it). The fetcher runs ahead by up to ``depth`` flits (it reserves buffer space per read, so
memory responses are never refused); with ``depth`` >= ``max_payload`` + memory latency the output is one
flit per cycle.

Ports: ``fetch``, ``emit`` (streams in), ``mem_rd`` (memory read port), ``o`` (flit stream out).
Latency: a header-only packet leaves the cycle after its ``emit`` is accepted; a packet with payload leaves
the cycle after its last flit's data arrived. ``o.valid`` never depends on ``o.ready``.
"""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import DEFAULT_FLIT_WIDTH, MAX_LENGTH, flit_layout, header_format
from .memory_if import flit_addr_bits, mem_read_signature

__all__ = ["PacketBuilder", "fetch_layout", "emit_layout"]

_N_BITS = MAX_LENGTH.bit_length()


def fetch_layout(flit_width: int = DEFAULT_FLIT_WIDTH) -> data.StructLayout:
    return data.StructLayout({"addr": flit_addr_bits(flit_width), "n": _N_BITS})


def emit_layout(ports: int | None = None) -> data.StructLayout:
    """A packet command: its ``header`` (the header format of a ``ports``-port switch) and ``n`` payload flits."""
    return data.StructLayout({"header": header_format(ports).bits, "n": _N_BITS})


class PacketBuilder(wiring.Component):
    """Read-ahead payload fetcher plus store-and-forward packet emitter.

    Parameters: ``flit_width``, ``depth`` (payload buffer flits, 1..1024), ``cmd_depth`` (entries of
    each command queue, 2..64), ``ports`` (the switch's ports, which choose the header format,
    :func:`hw.packet.header_format`; None: up to 64). A command with ``n`` > ``depth`` would never start: callers keep ``n`` <=
    ``depth`` (both users validate ``depth`` >= their ``max_payload``)."""

    def __init__(self, *, flit_width: int = DEFAULT_FLIT_WIDTH, depth: int = 32, cmd_depth: int = 4,
                 ports: int | None = None):
        flit_layout(flit_width)
        header_format(ports, flit_width)
        self.ports = ports
        if not isinstance(depth, int) or not 2 <= depth <= 1024:
            raise ValueError(f"depth must be an integer in 2..1024, got {depth!r}")
        if not isinstance(cmd_depth, int) or not 2 <= cmd_depth <= 64:
            raise ValueError(f"cmd_depth must be an integer in 2..64, got {cmd_depth!r}")
        self.flit_width = flit_width
        self.depth = depth
        self.cmd_depth = cmd_depth
        super().__init__({
            "fetch": In(stream.Signature(fetch_layout(flit_width))),
            "emit": In(stream.Signature(emit_layout(ports))),
            "mem_rd": Out(mem_read_signature(flit_width)),
            "o": Out(stream.Signature(flit_layout(flit_width))),
        })

    def elaborate(self, platform):
        m = Module()
        fl = fetch_layout(self.flit_width)
        el = emit_layout(self.ports)
        m.submodules.fetchq = fetchq = fifo.SyncFIFO(width=fl.size, depth=self.cmd_depth)
        m.submodules.emitq = emitq = fifo.SyncFIFO(width=el.size, depth=self.cmd_depth)
        m.submodules.buf = buf = fifo.SyncFIFO(width=self.flit_width, depth=self.depth)
        m.d.comb += [
            fetchq.w_data.eq(self.fetch.payload),
            fetchq.w_en.eq(self.fetch.valid),
            self.fetch.ready.eq(fetchq.w_rdy),
            emitq.w_data.eq(self.emit.payload),
            emitq.w_en.eq(self.emit.valid),
            self.emit.ready.eq(emitq.w_rdy),
        ]

        # Fetcher: issues the head command's reads straight from the queue head (no bubble between
        # commands), one per cycle while buffer space is reserved for the data.
        head = data.View(fl, fetchq.r_data)
        issued = Signal(_N_BITS)
        space = Signal(range(self.depth + 1), init=self.depth)
        popped = Signal()
        req = self.mem_rd.req
        m.d.comb += [
            req.valid.eq(fetchq.r_rdy & (head.n != 0) & (space != 0)),
            req.payload.eq(head.addr + issued),
        ]
        sent = req.valid & req.ready
        with m.If(fetchq.r_rdy & (head.n == 0)):
            m.d.comb += fetchq.r_en.eq(1)
        with m.Elif(sent):
            with m.If(issued == head.n - 1):
                m.d.comb += fetchq.r_en.eq(1)
                m.d.sync += issued.eq(0)
            with m.Else():
                m.d.sync += issued.eq(issued + 1)
        m.d.sync += space.eq(space - sent + popped)

        resp = self.mem_rd.resp
        m.d.comb += [
            buf.w_data.eq(resp.payload),
            buf.w_en.eq(resp.valid),
            resp.ready.eq(buf.w_rdy),
        ]

        # Emitter: header, then the payload, only once the whole payload is buffered.
        cmd = data.View(el, emitq.r_data)
        active = Signal()
        left = Signal(_N_BITS)
        o = self.o
        out_data = Signal(self.flit_width)
        out_last = Signal()
        # Locally built packets are never poisoned (one assignment: a constant-driven port bit would
        # become an empty always block in the Verilog).
        m.d.comb += o.payload.eq(Cat(out_data, out_last, Const(0, 1)))
        with m.If(active):
            m.d.comb += [
                o.valid.eq(1),
                out_data.eq(buf.r_data),
                out_last.eq(left == 1),
            ]
            with m.If(o.ready):
                m.d.comb += [buf.r_en.eq(1), popped.eq(1)]
                m.d.sync += left.eq(left - 1)
                with m.If(left == 1):
                    m.d.sync += active.eq(0)
        with m.Else():
            m.d.comb += [
                o.valid.eq(emitq.r_rdy & (buf.level >= cmd.n)),
                out_data.eq(cmd.header),
                out_last.eq(cmd.n == 0),
            ]
            with m.If(o.valid & o.ready):
                m.d.comb += emitq.r_en.eq(1)
                m.d.sync += [active.eq(cmd.n != 0), left.eq(cmd.n)]
        return m
