"""The read side of the ``ld_reduce`` engine (see :mod:`hw.switch.reduction_engine`, flow steps 2 and 3):
a good request's fan-out, one destination per cycle, and the ``RED_READ`` each destination gets, translated
by the AL-TLB (:class:`TranslatedReads`) or left to the destination's egress (:class:`DeferredReads`)."""

from amaranth.hdl import Const, Module, Mux, Shape, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import first_set
from ..packet import (DynamicRoute, EType, ErrorCode, HeaderLayout, Opcode, RedOp, StaticRoute, flit_layout,
                      header_format)
from .reduction_buffer import RTAG_BITS
from .translate_if import TranslateResponse, translate_signature

__all__ = ["FanOut", "TranslatedReads", "DeferredReads", "read_info_layout", "read_dest_layout",
           "fanout_start_signature", "ABORT_LAYOUT"]

# Widths every header format shares; the port ids and the index are the format's (``header_format(ports)``).
_HDR = data.Layout.cast(HeaderLayout)
_DYN = data.Layout.cast(DynamicRoute)
_LEN = _HDR["length"].shape
_GROUP, _OFFSET = _DYN["group"].shape, _DYN["offset"].shape
_ADDR = data.Layout.cast(StaticRoute)["addr"].shape
_CODE = data.Layout.cast(TranslateResponse)["code"].shape

#: A translation that failed: abort entry ``rtag`` with ``code``.
ABORT_LAYOUT = data.StructLayout({"rtag": RTAG_BITS, "code": _CODE})


def read_info_layout(ports: int) -> data.StructLayout:
    """What a good request's reads need: its destination ``mask``, whether it is ``static`` (read at
    ``addr``) or ``dymultimem`` (``group``, ``index``, ``offset``), and the requester's ``src``, ``length``,
    ``etype`` and ``op``."""
    fmt = header_format(ports)
    return data.StructLayout({"mask": ports, "static": 1, "group": _GROUP, "index": fmt.index_bits,
                              "offset": _OFFSET, "addr": _ADDR, "src": fmt.port_bits, "length": _LEN,
                              "etype": EType, "op": RedOp})


def read_dest_layout(ports: int | None = None) -> data.StructLayout:
    """One read of the fan-out: the entry's ``rtag``, the destination ``dst`` and the request's fields
    (the widths of a ``ports``-port switch's header format)."""
    fmt = header_format(ports)
    return data.StructLayout({"rtag": RTAG_BITS, "dst": fmt.port_bits, "static": 1, "group": _GROUP,
                              "index": fmt.index_bits, "offset": _OFFSET, "addr": _ADDR, "src": fmt.port_bits,
                              "length": _LEN, "etype": EType, "op": RedOp})


def fanout_start_signature(ports: int) -> wiring.Signature:
    """An event, no handshake: in a cycle with ``valid`` an entry's fan-out starts (``payload``: its
    ``rtag`` and whole destination ``mask``)."""
    return wiring.Signature({"valid": Out(1), "payload": Out(data.StructLayout({"rtag": RTAG_BITS, "mask": ports}))})


def _red_read(m, flit_width, opcode, rtag, dst, src, length, etype, op, addr, fmt):
    """The header-only flit (header format ``fmt``) of a read to ``dst`` for entry ``rtag`` (its low and
    high byte in ``tag`` and ``xtag``)."""
    hdr = Signal(fmt.layout)
    m.d.comb += [hdr.opcode.as_value().eq(opcode), hdr.src.eq(src), hdr.tag.eq(rtag[0:8]),
                 hdr.length.eq(length), hdr.etype.eq(etype), hdr.redop.eq(op),
                 hdr.route.uni.dst.eq(dst), hdr.route.uni.xtag.eq(rtag[8:16]),
                 hdr.route.uni.addr.eq(addr)]
    f = Signal(flit_layout(flit_width))
    m.d.comb += [f.data.eq(hdr.as_value()), f.last.eq(1)]
    return f


class FanOut(wiring.Component):
    """One request's reads, one destination per cycle, lowest port first.

    A request's ``info`` (:func:`read_info_layout`) and its entry's ``grant`` (both in allocation order)
    are taken together when the fan-out is idle or its last destination is taken; ``start`` reports that
    cycle (the entry's ``rtag`` and whole ``mask``). ``dest`` offers the current destination
    (:func:`read_dest_layout`); a transfer is one read issued.
    """

    def __init__(self, *, ports: int):
        self.ports = ports
        super().__init__({
            "info": In(stream.Signature(read_info_layout(ports))),
            "grant": In(stream.Signature(data.StructLayout({"rtag": RTAG_BITS}))),
            "start": Out(fanout_start_signature(ports)),
            "dest": Out(stream.Signature(read_dest_layout(ports))),
        })

    def elaborate(self, platform):
        m = Module()
        P = self.ports
        fo_valid = Signal()
        fo = Signal(read_info_layout(P))
        fo_rtag = Signal(RTAG_BITS)
        self.fo_valid, self.fo, self.fo_rtag = fo_valid, fo, fo_rtag        # named by the formal harness
        _, dst = first_set(m, fo.mask, name="fo_dst")
        dst_bit = Signal(P)
        m.d.comb += dst_bit.eq(Const(1, P) << dst)
        last_dst = (fo.mask & ~dst_bit) == 0
        issued = self.dest.valid & self.dest.ready
        load = (~fo_valid | (issued & last_dst)) & self.grant.valid & self.info.valid
        m.d.comb += [self.grant.ready.eq(load), self.info.ready.eq(load),
                     self.start.valid.eq(load), self.start.payload.rtag.eq(self.grant.payload.rtag),
                     self.start.payload.mask.eq(self.info.payload.mask)]
        with m.If(load):
            m.d.sync += [fo_valid.eq(1), fo.eq(self.info.payload), fo_rtag.eq(self.grant.payload.rtag)]
        with m.Elif(issued):
            m.d.sync += fo.mask.eq(fo.mask & ~dst_bit)
            with m.If(last_dst):
                m.d.sync += fo_valid.eq(0)

        d = self.dest.payload
        m.d.comb += [self.dest.valid.eq(fo_valid), d.rtag.eq(fo_rtag), d.dst.eq(dst)]
        m.d.comb += [d[name].eq(fo[name]) for name in ("static", "group", "index", "offset", "addr", "src",
                                                       "length", "etype", "op")]
        return m


class DeferredReads(wiring.Component):
    """Every read leaves as it comes on ``dest``: a static one as ``RED_READ`` at ``addr``, a ``dymultimem``
    one as ``DYN_RED_READ`` whose address is a :class:`~hw.packet.DeferredAddr` naming the row
    (``byte_offset = offset * flit_bytes``); the destination's egress translates it."""

    def __init__(self, *, flit_width: int, ports: int | None = None):
        self.flit_width, self.fmt = flit_width, header_format(ports, flit_width)
        super().__init__({
            "dest": In(stream.Signature(read_dest_layout(ports))),
            "rd": Out(stream.Signature(flit_layout(flit_width))),
        })

    def elaborate(self, platform):
        m = Module()
        d = self.dest.payload
        deferred = Signal(self.fmt.deferred)
        m.d.comb += [deferred.group.eq(d.group), deferred.index.eq(d.index),
                     deferred.byte_offset.eq(d.offset * (self.flit_width // 8))]
        flit = _red_read(m, self.flit_width, Mux(d.static, Opcode.RED_READ.value, Opcode.DYN_RED_READ.value),
                         d.rtag, d.dst, d.src, d.length, d.etype, d.op, Mux(d.static, d.addr, deferred.as_value()),
                         self.fmt)
        m.d.comb += [self.rd.valid.eq(self.dest.valid), self.rd.payload.eq(flit),
                     self.dest.ready.eq(self.rd.ready)]
        return m


class TranslatedReads(wiring.Component):
    """Reads translated by the AL-TLB. A ``dymultimem`` read on ``dest`` becomes a request on ``translate``
    (``tag`` = one of ``slots`` translation slots, reused in order; the slot's context says what its
    response is for); the response's ``addr + offset * flit_bytes`` is the ``RED_READ`` address. A
    translation error, or a read that does not fit in its row (``(offset + length) * flit_bytes >
    row_bytes``: ``OUT_OF_BOUNDS``, never a read of the next row), leaves on ``abort`` instead. A static
    read leaves at ``addr`` untranslated; on ``rd`` translated reads go first."""

    def __init__(self, *, slots: int, flit_width: int, row_bytes: int, ports: int | None = None):
        self.slots, self.flit_width, self.row_bytes = slots, flit_width, row_bytes
        self.fmt = header_format(ports, flit_width)
        super().__init__({
            "dest": In(stream.Signature(read_dest_layout(ports))),
            "translate": Out(translate_signature(ports)),
            "rd": Out(stream.Signature(flit_layout(flit_width))),
            "abort": Out(stream.Signature(ABORT_LAYOUT)),
        })

    def elaborate(self, platform):
        m = Module()
        S, W = self.slots, self.flit_width
        flit_bytes = W // 8
        d, dv = self.dest.payload, self.dest.valid
        fmt = self.fmt
        ctx_layout = data.StructLayout({"rtag": RTAG_BITS, "dst": fmt.port_bits, "src": fmt.port_bits, "length": _LEN,
                                        "etype": EType, "op": RedOp, "offset": _OFFSET})
        m.submodules.ctx = ctx = memory.Memory(shape=ctx_layout, depth=S, init=[])
        ctx_w = ctx.write_port()
        ctx_r = ctx.read_port(domain="comb")
        slot_busy = Signal(S)
        next_slot = Signal(range(S))
        tq = self.translate.req
        m.d.comb += [
            tq.valid.eq(dv & ~d.static & ~slot_busy.bit_select(next_slot, 1)),
            tq.payload.group.eq(d.group), tq.payload.index.eq(d.index), tq.payload.dst.eq(d.dst),
            tq.payload.src.eq(d.src), tq.payload.tag.eq(next_slot),
        ]
        t_issue = tq.valid & tq.ready
        m.d.comb += [ctx_w.addr.eq(next_slot), ctx_w.en.eq(t_issue)]
        m.d.comb += [ctx_w.data[name].eq(d[name]) for name in ("rtag", "dst", "src", "length", "etype", "op",
                                                               "offset")]
        with m.If(t_issue):
            m.d.sync += next_slot.eq(Mux(next_slot == S - 1, 0, next_slot + 1))
        static_flit = _red_read(m, W, Opcode.RED_READ.value, d.rtag, d.dst, d.src, d.length, d.etype, d.op, d.addr,
                                fmt)
        static_valid = dv & d.static

        # Translation responses -> RED_READ, or an abort of the entry.
        tr = self.translate.resp
        m.d.comb += ctx_r.addr.eq(tr.payload.tag)
        c = ctx_r.data
        oob = (c.offset + c.length) * flit_bytes > self.row_bytes
        tr_ok = (tr.payload.code == ErrorCode.NONE) & ~oob
        dyn_flit = _red_read(m, W, Opcode.RED_READ.value, c.rtag, c.dst, c.src, c.length, c.etype, c.op,
                             (tr.payload.addr + c.offset * flit_bytes)[0:Shape.cast(_ADDR).width], fmt)
        dyn_valid = tr.valid & tr_ok
        m.d.comb += [self.abort.valid.eq(tr.valid & ~tr_ok), self.abort.payload.rtag.eq(c.rtag),
                     self.abort.payload.code.eq(Mux(tr.payload.code == ErrorCode.NONE,
                                                    ErrorCode.OUT_OF_BOUNDS.value, tr.payload.code))]

        # RED_READ merge, translated first.
        rd = self.rd
        m.d.comb += [rd.valid.eq(dyn_valid | static_valid),
                     rd.payload.eq(Mux(dyn_valid, dyn_flit.as_value(), static_flit.as_value()))]
        static_issue = static_valid & ~dyn_valid & rd.ready
        m.d.comb += self.dest.ready.eq(t_issue | static_issue)
        tr_taken = Mux(tr_ok, rd.ready, self.abort.ready)
        m.d.comb += tr.ready.eq(tr_taken)
        set_busy = Mux(t_issue, Const(1, S) << next_slot, 0)
        clr_busy = Mux(tr.valid & tr_taken, Const(1, S) << tr.payload.tag, 0)
        m.d.sync += slot_busy.eq((slot_busy | set_busy) & ~clr_busy)
        return m
