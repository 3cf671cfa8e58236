"""The AL-TLB's three-stage lookup pipeline (see :mod:`hw.switch.al_tlb`), one item per cycle:

* :class:`TlbIssue` (stage A) picks what enters -- an MSHR's replay, a recirculated miss or a new request
  -- and starts a request's CAM lookup and group-table read;
* :class:`TlbCheck` (stage B) checks the request against its group (isolation, bounds);
* :class:`TlbResolve` (stage C) answers a replay, an error or a CAM hit, parks a miss in an MSHR (starting
  the backing read when it is the key's first), or recirculates it.

Each stage registers its item for the next (``next`` -> ``prev``, :func:`item_signature`,
:func:`checked_signature`), which the CAM's 2-cycle lookup meets in stage C.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import ErrorCode, header_format, widened
from .backing_if import backing_request_layout
from .mshr_file import MshrAnswer, alloc_signature, expiry_signature, fills_signature, flush_signature
from .translate_if import TranslateRequest, TranslateResponse, translate_request_layout

__all__ = ["TlbItem", "TlbIssue", "TlbCheck", "TlbResolve", "tlb_key_fields", "tlb_key", "group_entry_layout",
           "item_signature", "checked_signature", "tlb_item_layout"]

_ADDR = TranslateResponse.as_shape()["addr"].shape      # a row address, as the AL-TLB answers it
_CODE = ErrorCode.as_shape()


def _bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


def tlb_key_fields(ports: int, groups: int) -> tuple[int, int, int]:
    """(dst bits, group bits, key width) of the CAM key ``{group, dst, index}`` (index in the low bits: the
    header format's index, :func:`hw.packet.header_format`)."""
    db, gb = _bits(ports), _bits(groups)
    return db, gb, header_format(ports).index_bits + db + gb


def tlb_key(req, ports: int, groups: int):
    """The CAM key of :class:`TranslateRequest` ``req``."""
    db, gb, _ = tlb_key_fields(ports, groups)
    return Cat(req.index, req.dst[:db], req.group[:gb])


def group_entry_layout(ports: int) -> data.StructLayout:
    """A group-table entry: the member mask and the tensor bound (``rows`` valid indices)."""
    return data.StructLayout({"mask": ports, "rows": header_format(ports).index_bits + 1})


class TlbItem(data.Struct):
    """What moves down the pipeline: a request (``pre_err``: its group, ``src`` or ``dst`` is out of range),
    or a replay (``replay``: an MSHR's answer ``addr``/``code`` for the request tagged ``req.tag``)."""
    req: TranslateRequest
    replay: 1
    pre_err: 1
    addr: _ADDR
    code: _CODE


def tlb_item_layout(ports: int | None = None):
    """:class:`TlbItem` in the header format of a ``ports``-port switch."""
    return widened(TlbItem, ports, req=translate_request_layout(ports))


def item_signature(ports: int | None = None) -> wiring.Signature:
    """A stage's registered item (``valid``, ``item``), from the stage that drives it."""
    return wiring.Signature({"valid": Out(1), "item": Out(tlb_item_layout(ports))})


def checked_signature(ports: int | None = None) -> wiring.Signature:
    """An item with the check's verdict ``err`` (``NONE`` for a replay)."""
    return wiring.Signature({"valid": Out(1), "item": Out(tlb_item_layout(ports)), "err": Out(_CODE)})


class TlbIssue(wiring.Component):
    """Stage A. While ``room`` (the response FIFO can take everything in flight and one more), takes a
    ``replay`` first, else a ``recirc`` (a recirculated miss), else a new ``req``. A request starts its
    group-table read (``group``) and, unless ``pre_err``, its CAM lookup (``lookup_valid``,
    ``lookup_key``); the item reaches ``next`` a cycle later."""

    def __init__(self, *, ports: int, groups: int):
        self.ports, self.groups = ports, groups
        _, gb, kw = tlb_key_fields(ports, groups)
        super().__init__({
            "req": In(stream.Signature(translate_request_layout(ports))),
            "recirc": In(stream.Signature(translate_request_layout(ports))),
            "replay": In(stream.Signature(MshrAnswer)),
            "room": In(1),
            "lookup_valid": Out(1), "lookup_key": Out(kw), "group": Out(gb),
            "next": Out(item_signature(ports)),
        })

    def elaborate(self, platform):
        m = Module()
        replay, recirc, req = self.replay, self.recirc, self.req
        m.d.comb += [
            replay.ready.eq(self.room),
            recirc.ready.eq(self.room & ~replay.valid),
            req.ready.eq(self.room & ~replay.valid & ~recirc.valid),
        ]
        take_replay = replay.valid & replay.ready
        take_recirc = Signal(name="take_recirc")
        is_lookup = Signal(name="is_lookup")
        m.d.comb += [take_recirc.eq(recirc.valid & recirc.ready), is_lookup.eq(take_recirc | (req.valid & req.ready))]
        incoming = Signal(translate_request_layout(self.ports), name="incoming")
        m.d.comb += incoming.eq(Mux(take_recirc, recirc.payload, req.payload))
        pre_err = Signal(name="pre_err")
        m.d.comb += pre_err.eq((incoming.group >= self.groups) | (incoming.src >= self.ports) |
                               (incoming.dst >= self.ports))
        m.d.comb += [
            self.lookup_valid.eq(is_lookup & ~pre_err),
            self.lookup_key.eq(tlb_key(incoming, self.ports, self.groups)),
            self.group.eq(incoming.group[:len(self.group)]),
        ]
        item, ans = self.next.item, replay.payload
        m.d.sync += self.next.valid.eq(take_replay | is_lookup)
        with m.If(take_replay):
            m.d.sync += [item.replay.eq(1), item.pre_err.eq(0), item.req.eq(0), item.req.tag.eq(ans.tag),
                         item.addr.eq(ans.addr), item.code.eq(ans.code)]
        with m.Else():
            m.d.sync += [item.replay.eq(0), item.pre_err.eq(pre_err), item.req.eq(incoming), item.addr.eq(0),
                         item.code.eq(0)]
        return m


class TlbCheck(wiring.Component):
    """Stage B: a request's group entry (``entry``, read in stage A) must be configured (mask not 0) with
    ``src`` and ``dst`` members -- else ``ISOLATION``, also when ``pre_err`` -- and ``index`` below its
    ``rows`` -- else ``OUT_OF_BOUNDS``. The item and its ``err`` reach ``next`` a cycle later."""

    def __init__(self, *, ports: int, groups: int):
        self.ports, self.groups = ports, groups
        super().__init__({
            "prev": In(item_signature(ports)),
            "entry": In(group_entry_layout(ports)),
            "next": Out(checked_signature(ports)),
        })

    def elaborate(self, platform):
        m = Module()
        db, _, _ = tlb_key_fields(self.ports, self.groups)
        p, g = self.prev.item, self.entry
        member_src = Signal(name="member_src")
        member_dst = Signal(name="member_dst")
        m.d.comb += [
            member_src.eq(g.mask.bit_select(p.req.src[:db], 1)),
            member_dst.eq(g.mask.bit_select(p.req.dst[:db], 1)),
        ]
        isolated = p.pre_err | (g.mask == 0) | ~member_src | ~member_dst
        check = Mux(isolated, ErrorCode.ISOLATION.value,
                    Mux(p.req.index >= g.rows, ErrorCode.OUT_OF_BOUNDS.value, ErrorCode.NONE.value))
        m.d.sync += [self.next.valid.eq(self.prev.valid), self.next.item.eq(p),
                     self.next.err.eq(Mux(p.replay, 0, check))]
        return m


class TlbResolve(wiring.Component):
    """Stage C. Answers on ``resp`` a replay, a failed check or a CAM hit (``hit``: ``cam_hit`` for a checked
    request, with ``cam_value``). A miss takes an MSHR (``alloc``): answered already if its key's fill
    (``fills``) or timeout (``expiry``) happens in this very cycle, else coalesced onto the key's
    outstanding read (``alloc.pending``), else the primary of a new backing read (``read``), which needs
    room in the read queue. A miss that finds no MSHR or no room goes to ``recirc``. ``flush``: the group
    flushed in this cycle (an MSHR allocated for it answers but does not cache).

    ``resp`` and ``recirc`` are pushed without waiting for ``ready``: the issue stage admits an item only
    when the response FIFO has room, and the 3-deep recirculation FIFO holds every item in flight; ``read``
    is pushed only when ready."""

    def __init__(self, *, ports: int, groups: int):
        self.ports, self.groups = ports, groups
        _, gb, kw = tlb_key_fields(ports, groups)
        super().__init__({
            "prev": In(checked_signature(ports)),
            "cam_hit": In(1), "cam_value": In(_ADDR),
            "fills": In(fills_signature(kw)), "expiry": In(expiry_signature(kw)), "flush": In(flush_signature(gb)),
            "alloc": Out(alloc_signature(kw)),
            "resp": Out(stream.Signature(TranslateResponse)),
            "recirc": Out(stream.Signature(translate_request_layout(ports))),
            "read": Out(stream.Signature(backing_request_layout(ports))),
            "hit": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        _, gb, kw = tlb_key_fields(self.ports, self.groups)
        p, req, a = self.prev, self.prev.item.req, self.alloc
        key = Signal(kw, name="key")
        m.d.comb += key.eq(tlb_key(req, self.ports, self.groups))
        lookup = p.valid & ~p.item.replay
        ok, miss = Signal(name="ok"), Signal(name="miss")
        m.d.comb += [ok.eq(lookup & (p.err == ErrorCode.NONE.value)), self.hit.eq(ok & self.cam_hit),
                     miss.eq(ok & ~self.cam_hit)]

        # A miss: answered by this cycle's fill or timeout of its key, coalesced, or a new read.
        same_fill, same_tmo, needs_read = Signal(name="same_fill"), Signal(name="same_tmo"), Signal(name="needs_read")
        m.d.comb += [
            same_fill.eq(self.fills.valid & (self.fills.key == key)),
            same_tmo.eq(self.expiry.valid & (self.expiry.key == key)),
            needs_read.eq(~same_fill & ~same_tmo & ~a.pending),
        ]
        m.d.comb += [
            a.key.eq(key),
            a.valid.eq(miss & a.free_any & (~needs_read | self.read.ready)),
            a.primary.eq(a.valid & needs_read),
            a.filled.eq(a.valid & (same_fill | same_tmo)),
            a.flushed.eq(self.flush.valid & (req.group[:gb] == self.flush.group)),
            a.tag.eq(req.tag),
            a.addr.eq(Mux(same_fill, self.fills.addr, 0)),
            a.code.eq(Mux(same_fill, self.fills.code, Mux(same_tmo, ErrorCode.TIMEOUT.value, 0))),
            self.recirc.valid.eq(miss & ~a.valid),
            self.recirc.payload.eq(req),
            self.read.valid.eq(a.primary),
            self.read.payload.group.eq(req.group),
            self.read.payload.index.eq(req.index),
            self.read.payload.dst.eq(req.dst),
            self.read.payload.src.eq(req.src),
            self.read.payload.tag.eq(a.new_tag),
        ]

        # An answer: a replay's, a failed check's or a hit's.
        out = self.resp.payload
        m.d.comb += [
            self.resp.valid.eq((p.valid & p.item.replay) | (lookup & ~ok) | self.hit),
            out.code.as_value().eq(Mux(p.item.replay, p.item.code, p.err)),
            out.addr.eq(Mux(p.item.replay, p.item.addr, Mux(self.hit, self.cam_value, 0))),
            out.tag.eq(req.tag),
        ]
        return m
