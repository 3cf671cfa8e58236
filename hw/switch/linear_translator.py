"""A stand-in address translator: ``addr = base[dst] + index * row_bytes``.

It serves the AL-TLB interface of :mod:`hw.switch.translate_if` (``wiring.flipped(translate_signature())``)
so the ``ld_reduce`` engine can be built and tested before the real AL-TLB exists; the AL-TLB plugs into
the same port. Every destination GPU lays its buffer out as one linear array of ``rows`` rows of
``row_bytes`` bytes starting at ``base[dst]``, the same for every group (``group`` is ignored).

Contract
--------
* ``cfg`` (always ready): ``{dst, base, valid}`` sets (``valid=1``) or clears a destination's base.
  Writes to ``dst >= ports`` are ignored and counted in ``cfg_errors``.
* ``client.req`` -> ``client.resp``: one translation per cycle, in order, latency 1 (response valid the
  cycle after the request transfer); a stalled response holds the request side. ``tag`` is returned
  unchanged. Codes: ``ISOLATION`` for a destination with no base (or ``dst >= ports``),
  ``OUT_OF_BOUNDS`` for ``index >= rows`` (address 0 with an error), else ``NONE`` with the address.
* Changing a base while translations for that destination are in flight is not defined (configuration
  is static while traffic runs).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import MAX_SWITCH_PORTS, PORT_BITS, ErrorCode, header_format, widened
from .translate_if import translate_request_layout, translate_signature

__all__ = ["LinearTranslator", "BaseWrite", "base_write_layout"]


class BaseWrite(data.Struct):
    dst: PORT_BITS
    base: 48
    valid: 1


def base_write_layout(ports: int | None = None):
    """:class:`BaseWrite` in the header format of a ``ports``-port switch (:func:`hw.packet.widened`)."""
    return widened(BaseWrite, ports, dst="port_bits")


class LinearTranslator(wiring.Component):
    """Parameters: ``ports`` (destinations, 1..128), ``row_bytes`` (1..2**24), ``rows`` (index bound,
    1..2**18, or 2**20 past 64 ports: the header format's index, :func:`hw.packet.header_format`)."""

    def __init__(self, *, ports: int = 8, row_bytes: int = 14336, rows: int = 1 << 18):
        if not isinstance(ports, int) or not 1 <= ports <= MAX_SWITCH_PORTS:
            raise ValueError(f"ports must be an integer in 1..{MAX_SWITCH_PORTS}, got {ports!r}")
        max_rows = 1 << header_format(ports).index_bits
        if not isinstance(row_bytes, int) or not 1 <= row_bytes <= 1 << 24:
            raise ValueError(f"row_bytes must be an integer in 1..{1 << 24}, got {row_bytes!r}")
        if not isinstance(rows, int) or not 1 <= rows <= max_rows:
            raise ValueError(f"rows must be an integer in 1..{max_rows}, got {rows!r}")
        self.ports = ports
        self.row_bytes = row_bytes
        self.rows = rows
        super().__init__({
            "client": In(translate_signature(ports)),
            "cfg": In(stream.Signature(base_write_layout(ports))),
            "cfg_errors": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        P = self.ports
        m.submodules.table = table = memory.Memory(shape=data.StructLayout({"base": 48, "valid": 1}),
                                                   depth=P, init=[])
        wp = table.write_port()
        rp = table.read_port()
        w = self.cfg.payload
        legal = w.dst < P
        m.d.comb += [self.cfg.ready.eq(1), wp.addr.eq(w.dst), wp.data.base.eq(w.base),
                     wp.data.valid.eq(w.valid), wp.en.eq(self.cfg.valid & legal)]
        with m.If(self.cfg.valid & ~legal):
            m.d.sync += self.cfg_errors.eq(self.cfg_errors + 1)

        req, resp = self.client.req, self.client.resp
        advance = ~resp.valid | resp.ready
        m.d.comb += [req.ready.eq(advance), rp.addr.eq(req.payload.dst), rp.en.eq(advance)]
        held = Signal(translate_request_layout(P))
        with m.If(advance):
            m.d.sync += [resp.valid.eq(req.valid), held.eq(req.payload)]
        code = Signal(ErrorCode)
        m.d.comb += code.eq(Mux((held.dst >= P) | ~rp.data.valid, ErrorCode.ISOLATION,
                   Mux(held.index >= self.rows, ErrorCode.OUT_OF_BOUNDS, ErrorCode.NONE)))
        m.d.comb += [
            resp.payload.addr.eq(Mux(code == ErrorCode.NONE, rp.data.base + held.index * self.row_bytes, 0)),
            resp.payload.code.eq(code),
            resp.payload.tag.eq(held.tag),
        ]
        return m
