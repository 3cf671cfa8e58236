"""The hardware memory manager of one GPU: its compact receive layout and the backing translation table.

Why here (the GPU's NVLink interface, not the switch): the layout is per GPU and asymmetric, so each
GPU's own manager owns it; the table it fills and the buffer it carves live in that GPU's memory, so
allocating and recording a slot are local writes with no fabric round trip; and whatever number of switch
chips (or AL-TLB instances) carries a GPU's traffic, they all ask the same single authority, so they can
never disagree about where a token lives. The switch's AL-TLB only *caches* what this block decides; its
misses arrive here as backing reads (:mod:`hw.switch.backing_if`). See ``docs/al_tlb.md``.

Layout
------
A *layout* is one receive buffer with its slot table (one per concurrently live dispatch tensor). Slots
are handed out by a bump pointer in arrival order, so the buffer is compact: only tokens routed to this
GPU take space, and slot ``s`` is row ``s``; 128 consecutive slots are the token tracker's tile. Each
multimem group handle is bound to a layout with a base address, a row stride and a mode:

* ``alloc`` (the dispatch group, ``dymultimem.st``): the first read of (layout, index) allocates the next
  slot and records {epoch, source GPU, slot} in the table at ``index``; later reads return the same slot;
* lookup-only (the combine group, ``dymultimem.ld_reduce``): the read finds the recorded slot, or answers
  ``TLB_FAULT``. A combine group usually shares the dispatch group's layout with a different base (the
  expert-output buffer), so combine finds, row for row, the slot dispatch assigned.

The answer is ``base + slot * stride * 16`` (``stride`` in 16-byte units).

Contract
--------
* ``mem``: server side of :func:`~hw.switch.backing_if.backing_signature`; one request at a time, answered
  at the earliest 3 cycles after it is accepted (group-config read, table read, decide), the answer held
  until taken; the next request is accepted the cycle after. Throughput: one request per 4 cycles.
* Errors: unconfigured group (or handle >= ``groups``) or lookup of an unallocated index -> ``TLB_FAULT``;
  ``index >= 2**index_bits`` -> ``OUT_OF_BOUNDS``; a recorded slot read by another source GPU ->
  ``ISOLATION``; an allocation with no free slot -> ``BUFFER_FULL``. Nothing is overwritten: a slot of
  the current epoch is never reassigned and the bump pointer never passes ``slots``.
* ``cfg`` (:class:`MmCommand`), taken only between requests (priority over ``mem.req``):
  ``SET_GROUP`` binds a handle (``valid`` 0 unbinds); ``EPOCH_RESET`` releases a whole layout at the end
  of a layer in one cycle: the bump pointer returns to 0 and the layout's epoch advances, which retires
  every table entry (entries carry the epoch they were written in). Only when the epoch counter wraps
  does the manager clear the layout's table, one row per cycle (``2**index_bits`` cycles, requests
  backpressured), so a stale entry can never look current. Illegal commands change nothing and count
  ``CFG_ERRORS``.
* ``counters``: 32-bit event counters indexed by :class:`MmCounter`.
"""

import enum as py_enum

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import or_reduce
from ..event_counters import EventCounters
from ..packet import ErrorCode, header_format
from ..switch.backing_if import BackingRequest, BackingResponse, backing_request_layout, backing_signature

__all__ = ["MemoryManager", "MmCommand", "MmOp", "MmCounter"]


def _width(struct, field) -> int:
    return data.Layout.cast(struct)[field].width


class MmOp(enum.Enum, shape=1):
    SET_GROUP = 0
    EPOCH_RESET = 1


class MmCommand(data.Struct):
    op: MmOp
    group: _width(BackingRequest, "group")
    valid: 1          #: SET_GROUP: bind (1) or unbind (0) the handle
    alloc: 1          #: SET_GROUP: allocate on first read (dispatch) or lookup only (combine)
    layout: 4
    base: _width(BackingResponse, "addr")   #: byte address of slot 0
    stride: 12        #: row stride in 16-byte units (1..4095)


class MmCounter(py_enum.IntEnum):
    ALLOCATED = 0      #: slots handed out
    FOUND = 1          #: reads answered from the table
    BUFFER_FULL = 2
    TLB_FAULT = 3
    ISOLATION = 4
    OUT_OF_BOUNDS = 5
    EPOCH_RESETS = 6
    SWEEPS = 7         #: table clears after an epoch wrap
    CFG_ERRORS = 8


N_MM_COUNTERS = len(MmCounter)


def _bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


def _group_layout(layouts):
    """A group handle's binding, as stored (one entry per handle)."""
    return data.StructLayout({"valid": 1, "alloc": 1, "layout": _bits(layouts), "base": _width(MmCommand, "base"),
                              "stride": _width(MmCommand, "stride")})


def _entry_layout(epoch_bits, slots, ports=None):
    """A table row: the slot recorded for an index, the epoch it was written in and the GPU that asked."""
    return data.StructLayout({"valid": 1, "epoch": epoch_bits, "src": _width(backing_request_layout(ports), "src"),
                              "slot": _bits(slots)})


class _Layouts(wiring.Component):
    """Per layout: the bump pointer (next free slot, 0..``slots``) and the epoch. ``reset`` (an
    ``EPOCH_RESET`` of ``layout``) returns the bump pointer to 0 and advances the epoch; ``wraps`` says the
    epoch of ``reset.layout`` is at its last value (the reset wraps it). ``alloc`` advances the bump
    pointer of ``alloc.layout``. ``epoch``/``bump`` are those of layout ``sel``."""

    def __init__(self, *, layouts, slots, epoch_bits):
        self.layouts, self.slots, self.epoch_bits = layouts, slots, epoch_bits
        cmd = data.StructLayout({"valid": 1, "layout": _bits(layouts)})
        super().__init__({
            "reset": In(cmd), "alloc": In(cmd), "sel": In(_bits(layouts)),
            "wraps": Out(1), "epoch": Out(epoch_bits), "bump": Out(range(slots + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        L, eb = self.layouts, self.epoch_bits
        epoch = [Signal(eb, name=f"epoch_{i}") for i in range(L)]
        bump = [Signal(range(self.slots + 1), name=f"bump_{i}") for i in range(L)]
        # One top-level expression each (see MemoryManager.elaborate).
        m.d.comb += [
            self.epoch.eq(or_reduce([Mux(self.sel == i, epoch[i], 0) for i in range(L)])),
            self.bump.eq(or_reduce([Mux(self.sel == i, bump[i], 0) for i in range(L)])),
            self.wraps.eq(or_reduce([(self.reset.layout == i) & (epoch[i] == (1 << eb) - 1) for i in range(L)])),
        ]
        for i in range(L):
            with m.If(self.reset.valid & (self.reset.layout == i)):
                m.d.sync += [bump[i].eq(0), epoch[i].eq(epoch[i] + 1)]
            with m.If(self.alloc.valid & (self.alloc.layout == i)):
                m.d.sync += bump[i].eq(bump[i] + 1)
        return m


class _Decide(wiring.Component):
    """The answer to backing request ``req``, combinationally, from its group's binding ``group``, the
    table row ``entry`` at its index, and its layout's ``epoch`` and ``bump`` pointer: ``code`` (the first
    of unconfigured group, index out of bounds, recorded by another GPU, lookup-only miss, no free slot),
    the row's byte address ``addr`` (``base + slot * stride * 16``), ``found`` (a recorded slot of this
    GPU) and ``alloc`` (allocate the next slot, ``slot``)."""

    def __init__(self, *, groups, layouts, index_bits, slots, epoch_bits, ports=None):
        self.groups, self.index_bits, self.slots = groups, index_bits, slots
        super().__init__({
            "req": In(backing_request_layout(ports)), "group": In(_group_layout(layouts)),
            "entry": In(_entry_layout(epoch_bits, slots, ports)), "epoch": In(epoch_bits), "bump": In(range(slots + 1)),
            "code": Out(ErrorCode), "slot": Out(_bits(slots)), "addr": Out(_width(BackingResponse, "addr")),
            "found": Out(1), "alloc": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        req, g, e = self.req, self.group, self.entry
        configured = Signal(name="configured")
        in_bounds = Signal(name="in_bounds")
        current = Signal(name="current")
        own = Signal(name="own")
        room = Signal(name="room")
        # One top-level expression each (see MemoryManager.elaborate).
        m.d.comb += [
            configured.eq((req.group < self.groups) & g.valid),
            in_bounds.eq((req.index >> self.index_bits) == 0),
            current.eq(e.valid & (e.epoch == self.epoch)),
            own.eq(e.src == req.src),
            room.eq(self.bump < self.slots),
            self.slot.eq(Mux(current, e.slot, self.bump)),
            self.code.as_value().eq(
                Mux(~configured, ErrorCode.TLB_FAULT.value,
                    Mux(~in_bounds, ErrorCode.OUT_OF_BOUNDS.value,
                        Mux(current, Mux(own, ErrorCode.NONE.value, ErrorCode.ISOLATION.value),
                            Mux(~g.alloc, ErrorCode.TLB_FAULT.value,
                                Mux(room, ErrorCode.NONE.value, ErrorCode.BUFFER_FULL.value)))))),
            self.found.eq(configured & in_bounds & current & own),
            self.alloc.eq(configured & in_bounds & ~current & g.alloc & room),
            self.addr.eq(g.base + ((self.slot * g.stride) << 4)),
        ]
        return m


class MemoryManager(wiring.Component):

    """A GPU's memory manager: compact receive layout and backing translation table (serves AL-TLB misses).

    Parameters: ``groups`` (handles, 1..256), ``layouts`` (receive buffers, 1..16), ``index_bits``
    (table rows per layout = 2**index_bits, 4..18), ``slots`` (buffer rows per layout, 1..2**18),
    ``epoch_bits`` (1..16), ``ports`` (the switch's ports, which choose the header format,
    :func:`hw.packet.header_format`: past 64 ports the index bounds are 20 bits; None: up to 64)."""

    def __init__(self, *, groups: int = 16, layouts: int = 4, index_bits: int = 10, slots: int = 1024,
                 epoch_bits: int = 8, ports: int | None = None):
        max_index_bits = header_format(ports).index_bits
        self.ports = ports
        if not isinstance(groups, int) or not 1 <= groups <= 256:
            raise ValueError(f"groups must be an integer in 1..256, got {groups!r}")
        if not isinstance(layouts, int) or not 1 <= layouts <= 16:
            raise ValueError(f"layouts must be an integer in 1..16, got {layouts!r}")
        if not isinstance(index_bits, int) or not 4 <= index_bits <= max_index_bits:
            raise ValueError(f"index_bits must be an integer in 4..{max_index_bits}, got {index_bits!r}")
        if not isinstance(slots, int) or not 1 <= slots <= 1 << max_index_bits:
            raise ValueError(f"slots must be an integer in 1..{1 << max_index_bits}, got {slots!r}")
        if not isinstance(epoch_bits, int) or not 1 <= epoch_bits <= 16:
            raise ValueError(f"epoch_bits must be an integer in 1..16, got {epoch_bits!r}")
        self.groups = groups
        self.layouts = layouts
        self.index_bits = index_bits
        self.slots = slots
        self.epoch_bits = epoch_bits
        self.slot_bits = _bits(slots)
        super().__init__({
            "mem": In(backing_signature(ports)),
            "cfg": In(stream.Signature(MmCommand)),
            "counters": Out(data.ArrayLayout(32, N_MM_COUNTERS)),
        })

    def elaborate(self, platform):
        m = Module()
        L, ib = self.layouts, self.index_bits
        rows = 1 << ib
        group_l = _group_layout(L)
        m.submodules.gcfg = gcfg = memory.Memory(shape=group_l, depth=self.groups, init=[])
        gw = gcfg.write_port()
        gr = gcfg.read_port()
        m.submodules.table = table = memory.Memory(shape=_entry_layout(self.epoch_bits, self.slots, self.ports),
                                                   depth=L * rows, init=[])
        tw = table.write_port()
        tr = table.read_port()
        m.submodules.layouts = lay = _Layouts(layouts=L, slots=self.slots, epoch_bits=self.epoch_bits)
        m.submodules.decide = dec = _Decide(groups=self.groups, layouts=L, index_bits=ib, slots=self.slots,
                                            ports=self.ports,
                                            epoch_bits=self.epoch_bits)

        req = Signal(backing_request_layout(self.ports), name="cur")   # the request being served
        gcur = Signal(group_l, name="gcur")              # its group's configuration
        resp = Signal(BackingResponse, name="resp_reg")
        cfgp = self.cfg.payload
        sweep_layout = Signal(_bits(L), name="sweep_layout")
        sweep_ptr = Signal(ib, name="sweep_ptr")

        # Control: an explicit state register. Every combinational signal below is one top-level
        # expression (gated by the state), not an assignment inside an if-chain: Yosys turns the latter
        # into `always @*` blocks that Icarus never evaluates when their inputs do not change after time 0.
        IDLE, LOOK, DECIDE, RESP, SWEEP = range(5)
        state = Signal(range(5), name="state")
        idle, look, decide, respond, sweep = (Signal(name=n) for n in ("idle", "look", "decide", "respond",
                                                                        "sweep"))
        m.d.comb += [idle.eq(state == IDLE), look.eq(state == LOOK), decide.eq(state == DECIDE),
                     respond.eq(state == RESP), sweep.eq(state == SWEEP)]

        take_cfg = Signal(name="take_cfg")
        take_req = Signal(name="take_req")
        is_set = Signal(name="is_set")
        legal_set = Signal(name="legal_set")
        legal_reset = Signal(name="legal_reset")
        do_alloc = Signal(name="do_alloc")
        in_group = self.mem.req.payload.group
        m.d.comb += [
            self.cfg.ready.eq(idle),
            self.mem.req.ready.eq(idle & ~self.cfg.valid),
            self.mem.resp.valid.eq(respond),
            self.mem.resp.payload.eq(resp),
            take_cfg.eq(idle & self.cfg.valid),
            take_req.eq(idle & ~self.cfg.valid & self.mem.req.valid),
            is_set.eq(cfgp.op == MmOp.SET_GROUP),
            legal_set.eq((cfgp.group < self.groups) & (cfgp.layout < L) & (~cfgp.valid | (cfgp.stride != 0))),
            legal_reset.eq(cfgp.layout < L),
            gr.addr.eq(Mux(in_group < self.groups, in_group, 0)),
            gw.en.eq(take_cfg & is_set & legal_set),
            gw.addr.eq(cfgp.group),
            gw.data.valid.eq(cfgp.valid),
            gw.data.alloc.eq(cfgp.alloc),
            gw.data.layout.eq(cfgp.layout),
            gw.data.base.eq(cfgp.base),
            gw.data.stride.eq(cfgp.stride),
            lay.reset.valid.eq(take_cfg & ~is_set & legal_reset),
            lay.reset.layout.eq(cfgp.layout),
            # LOOK: the group's configuration arrived from the read started at acceptance; read the table.
            tr.addr.eq(Cat(req.index[:ib], gr.data.layout)),
            # DECIDE: the table entry is on tr.data.
            lay.sel.eq(gcur.layout),
            dec.req.eq(req),
            dec.group.eq(gcur),
            dec.entry.eq(tr.data),
            dec.epoch.eq(lay.epoch),
            dec.bump.eq(lay.bump),
            do_alloc.eq(decide & dec.alloc),
            lay.alloc.valid.eq(do_alloc),
            lay.alloc.layout.eq(gcur.layout),
            # table writes: the allocation (DECIDE) or the wrap-around clear (SWEEP)
            tw.addr.eq(Mux(sweep, Cat(sweep_ptr, sweep_layout), Cat(req.index[:ib], gcur.layout))),
            tw.en.eq(sweep | do_alloc),
            tw.data.valid.eq(~sweep),
            tw.data.epoch.eq(Mux(sweep, 0, lay.epoch)),
            tw.data.src.eq(Mux(sweep, 0, req.src)),
            tw.data.slot.eq(Mux(sweep, 0, lay.bump)),
        ]
        sweep_done = Signal(name="sweep_done")
        m.d.comb += sweep_done.eq(sweep & (sweep_ptr == rows - 1))

        inc = {c: Signal(name=f"inc_{c.name.lower()}") for c in MmCounter}
        m.d.comb += [
            inc[MmCounter.CFG_ERRORS].eq(take_cfg & Mux(is_set, ~legal_set, ~legal_reset)),
            inc[MmCounter.EPOCH_RESETS].eq(lay.reset.valid),
            inc[MmCounter.ALLOCATED].eq(do_alloc),
            inc[MmCounter.FOUND].eq(decide & dec.found),
            inc[MmCounter.SWEEPS].eq(sweep_done),
        ]
        for name in ("BUFFER_FULL", "TLB_FAULT", "ISOLATION", "OUT_OF_BOUNDS"):
            m.d.comb += inc[MmCounter[name]].eq(decide & (dec.code == ErrorCode[name]))

        # ---- state updates ----------------------------------------------------------------------------
        with m.If(lay.reset.valid & lay.wraps):
            m.d.sync += [sweep_layout.eq(cfgp.layout), sweep_ptr.eq(0), state.eq(SWEEP)]
        with m.If(take_req):
            m.d.sync += [req.eq(self.mem.req.payload), state.eq(LOOK)]
        with m.If(look):
            m.d.sync += [gcur.eq(gr.data), state.eq(DECIDE)]
        with m.If(decide):
            m.d.sync += [
                resp.addr.eq(Mux(dec.code == ErrorCode.NONE, dec.addr, 0)),
                resp.code.eq(dec.code),
                resp.tag.eq(req.tag),
                state.eq(RESP),
            ]
        with m.If(respond & self.mem.resp.ready):
            m.d.sync += state.eq(IDLE)
        with m.If(sweep):
            m.d.sync += sweep_ptr.eq(sweep_ptr + 1)
            with m.If(sweep_done):
                m.d.sync += state.eq(IDLE)

        m.submodules.counters = counters = EventCounters(len(MmCounter))
        m.d.comb += [counters.strobe[int(c)].eq(sig) for c, sig in inc.items()]
        m.d.comb += self.counters.eq(counters.count)
        return m
