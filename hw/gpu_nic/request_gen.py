"""The dymultimem request generator: descriptors in, packets on the GPU's uplink at line rate.

A descriptor names one token row and what to do with it (:class:`Descriptor`):

* ``STORE`` (dispatch, ``dymultimem.st``): send the ``length``-flit row at local byte address ``addr`` to
  every GPU in ``mask``, addressed by (``group``, algebraic ``index``);
* ``LD_REDUCE`` (combine, ``dymultimem.ld_reduce``): ask for the ``redop`` reduction over the GPUs in
  ``mask`` of their ``length``-flit rows at (``group``, ``index``), of element type ``etype``; the result
  lands at local byte address ``addr``.

A row longer than ``max_payload`` flits becomes several packets; each carries its flit ``offset`` in the
row (so rows up to 1024 flits, 16 KB at 16-B flits, are addressed without physical addresses).

Payload: fetched from GPU memory through the read port (the descriptor carries only the source address),
because that is what a NIC-side generator does: SMs write descriptors, the NIC streams the data. The
fetch runs ahead of the link (:class:`~hw.gpu_nic.packet_builder.PacketBuilder`) so packets leave without
gaps.

Modes (``cfg.unicast``, ``cfg.static``), the same descriptors in each:

* dynamic (both 0): one ``DYN_ST`` packet per row chunk with the mask; one header-only ``DYN_LD_REDUCE``.
* static (``static`` 1, ``unicast`` 0), NVLS's ``multimem.*`` over a group the switch's static group table
  configures: one ``MM_ST`` per row chunk (the switch writes it to every member of group ``group``) or one
  header-only ``MM_LD_REDUCE`` (the switch reads every member's row and reduces), each addressed by the
  group handle ``group`` and the byte address ``rbase[group] + (index << cfg.row_shift) + offset *
  flit_bytes``, the same on every member (a symmetric buffer); ``mask`` is not used (the group's members
  are the switch's). The result of a ``LD_REDUCE`` lands at ``addr``, as in dynamic mode.
* unicast (1), the explicit-addressing / DeepEP-like baseline: for each destination in ``mask``, lowest
  first, every chunk as a ``WRITE`` to that GPU (``STORE``; the payload is fetched again per copy) or a
  ``READ`` of that GPU's partial row (``LD_REDUCE``; the requester then reduces the copies, which land at
  ``addr + k * length`` flits for the k-th destination). The destination address is
  ``rbase[group] + (index << cfg.row_shift) + offset * flit_bytes``: a symmetric buffer layout, which is
  what explicit addressing needs the SMs to compute. ``unicast`` wins over ``static`` when both are set.

Combine tags: every ``LD_REDUCE``/``READ`` packet takes a tag, allocated round-robin over ``tags`` and
bound to its landing address through ``tag_issue`` (to the receive path, which owns the tag table and
reports outstanding tags on ``tag_busy``). A busy tag stalls the generator until its response lands.

Contract
--------
* Ports: ``desc`` (stream in), ``cfg``/``rbase`` (configuration, static while busy), ``mem_rd``,
  ``aux`` (packets to merge onto the uplink, e.g. the receive path's read responses), ``tx`` (credit
  link to the switch; with ``link="stream"`` a plain flit stream instead, for a caller that puts it on a
  VC link's request channel), ``tag_issue`` (stream out), ``tag_busy`` (in), ``err_count`` (per
  :class:`DescError`), ``stalls`` (cycles waiting on tags, per :class:`GenStall`: a reduction load whose
  tag is busy holds the one descriptor stream, so the descriptors behind it, stores included, wait too).
* Throughput: one packet command per cycle from the descriptor walker (descriptors back to back, no
  bubble), one flit per cycle on ``tx`` while credits last. ``aux`` and generated packets share the
  uplink packet by packet, round-robin.
* Bad descriptors are dropped whole and counted: zero mask or bits for ports that do not exist
  (``BAD_MASK``; not in static mode, which has no mask), length 0 or above 1024 (``BAD_LENGTH``), an
  undefined ``etype``/``redop`` on ``LD_REDUCE`` (``BAD_TYPE``), a ``group`` without an ``rbase`` entry in
  unicast or static mode (``BAD_GROUP``).
"""

import enum as py_enum

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.wiring import In, Out, connect

from ..arbiter import first_set
from ..credit import CreditSender, credit_link_signature
from ..event_counters import EventCounters
from ..packet import (DEFAULT_FLIT_WIDTH, GROUP_BITS, INDEX_BITS, MAX_LENGTH, MAX_PORTS, MAX_SWITCH_PORTS, PORT_BITS,
                      TAG_BITS, EType, HeaderLayout, Opcode, RedOp, flit_layout, header_format, widened)
from .memory_if import BYTE_ADDR_BITS, flit_shift, mem_read_signature
from .packet_builder import PacketBuilder, emit_layout, fetch_layout

__all__ = ["DescOp", "Descriptor", "GenConfig", "TagIssue", "DescError", "GenStall", "RequestGenerator",
           "MAX_ROW_FLITS", "descriptor_layout", "gen_config_layout"]

MAX_ROW_FLITS = 1024      # the header's 10-bit offset field


class DescOp(enum.Enum, shape=1):
    STORE = 0       #: dispatch: dymultimem.st
    LD_REDUCE = 1   #: combine: dymultimem.ld_reduce


class Descriptor(data.Struct):
    op: DescOp
    etype: EType
    redop: RedOp
    group: GROUP_BITS
    index: INDEX_BITS
    mask: MAX_PORTS
    addr: BYTE_ADDR_BITS    # local byte address: STORE source / LD_REDUCE result
    length: 11              # row length in flits, 1..1024


class GenConfig(data.Struct):
    port: PORT_BITS  # this GPU's switch port: the header's src
    unicast: 1       # 1: explicit-addressing baseline, one packet per destination
    row_shift: 6     # log2 of the destination row stride in bytes (unicast and static addresses)
    static: 1        # 1 (with unicast 0): static multimem (NVLS), MM_ST / MM_LD_REDUCE over group handles


def descriptor_layout(ports: int | None = None):
    """:class:`Descriptor` in the header format of a ``ports``-port switch (:func:`hw.packet.widened`)."""
    return widened(Descriptor, ports, index="index_bits", mask="max_ports")


def gen_config_layout(ports: int | None = None):
    """:class:`GenConfig` in the header format of a ``ports``-port switch (:func:`hw.packet.widened`)."""
    return widened(GenConfig, ports, port="port_bits")


class TagIssue(data.Struct):
    """Tag ``tag`` now belongs to a request whose response lands at byte address ``addr``."""
    tag: TAG_BITS
    addr: BYTE_ADDR_BITS


class DescError(py_enum.IntEnum):
    BAD_MASK = 0
    BAD_LENGTH = 1
    BAD_TYPE = 2
    BAD_GROUP = 3


class GenStall(py_enum.IntEnum):
    """Cycles the generator waits on its combine tags (``stalls``; performance, not errors)."""
    TAG_WAIT = 0        #: a reduction load waits for its tag (the next one, round robin) to be free
    TAG_BLOCKED = 1     #: ... while a further descriptor waits on ``desc`` behind it (head-of-line)
    TAG_WAIT_FREE = 2   #: ... a TAG_WAIT cycle in which some other tag is free


_OFF_BITS = data.Layout.cast(Descriptor)["length"].width     # a flit offset within a row
_N_BITS = data.Layout.cast(HeaderLayout)["length"].width      # flits in one packet


class _Planner(wiring.Component):
    """The descriptor walker: takes a descriptor (checked at intake; a bad one is dropped and counted in
    ``err_count``) and cuts its row into packets of at most ``max_payload`` flits, one packet command per
    cycle: a header on ``emit``, for a store the payload read on ``fetch``, for a reduction load the tag
    binding on ``bind`` (it waits for a free tag, ``tag_busy``). Unicast mode (``cfg.unicast``) repeats
    the row for each destination in the mask, lowest first; static mode (``cfg.static``) addresses the
    row as unicast does, once, under its group handle. A new descriptor may load in the cycle the previous
    one finishes."""

    def __init__(self, *, ports, flit_width, max_payload, groups, tags, any_tag=False):
        self.ports, self.flit_width, self.max_payload, self.groups, self.tags = (
            ports, flit_width, max_payload, groups, tags)
        self.any_tag = any_tag
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(ports))),
            "cfg": In(gen_config_layout(ports)),
            "rbase": In(data.ArrayLayout(BYTE_ADDR_BITS, groups)),
            "tag_busy": In(tags),
            "emit": Out(stream.Signature(emit_layout(ports))),
            "fetch": Out(stream.Signature(fetch_layout(flit_width))),
            "bind": Out(stream.Signature(TagIssue)),
            "err_count": Out(data.ArrayLayout(32, len(DescError))),
            "stalls": Out(data.ArrayLayout(32, len(GenStall))),
            "tag_ready": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        fsh = flit_shift(self.flit_width)
        P = self.max_payload
        busy = Signal()
        d = Signal(descriptor_layout(self.ports))   # the descriptor being walked
        rem = Signal(self.ports)            # destinations still to do (unicast)
        off = Signal(_OFF_BITS)             # flit offset of the next packet in the row
        copy_base = Signal(BYTE_ADDR_BITS)  # unicast LD_REDUCE: landing address of this copy
        next_tag = Signal(range(self.tags))
        unicast = self.cfg.unicast
        static = Signal()
        m.d.comb += static.eq(self.cfg.static & ~unicast)

        left = Signal(_OFF_BITS)
        n = Signal(_N_BITS)
        m.d.comb += [
            left.eq(d.length - off),
            n.eq(Mux(left > P, P, left)),
        ]
        _, dst = first_set(m, rem, name="dst")
        dst_bit = Signal(self.ports)
        m.d.comb += dst_bit.eq(Const(1, self.ports) << dst)
        is_st = d.op == DescOp.STORE
        row_done = (off + n) >= d.length
        final = row_done & (~unicast | ((rem & ~dst_bit) == 0))

        # Addresses.
        rbase = Signal(BYTE_ADDR_BITS)
        m.d.comb += rbase.eq(self.rbase[d.group])
        remote = Signal(BYTE_ADDR_BITS)
        m.d.comb += remote.eq(rbase + (d.index << self.cfg.row_shift) + (off << fsh))
        land = Signal(BYTE_ADDR_BITS)
        m.d.comb += land.eq(Mux(unicast, copy_base, d.addr) + (off << fsh))

        hdr = self._header(m, d, n=n, off=off, dst=dst, remote=remote, tag=next_tag, static=static)

        # One packet command per cycle when everything it needs has room.
        if self.any_tag:
            # The lowest free tag; a tag bound but not yet busy in tag_busy (the binding queue's cycles) is
            # claimed until tag_busy shows it.
            claimed = Signal(self.tags)
            free = Signal(self.tags)
            m.d.comb += free.eq(~self.tag_busy & ~claimed)
            tag_free, low = first_set(m, free, name="free")
            m.d.comb += next_tag.eq(low)
            free2 = Signal()
            m.d.comb += free2.eq((free & ~(Const(1, self.tags) << low)) != 0)
        else:
            tag_free = ~self.tag_busy.bit_select(next_tag, 1)
        can = Signal()
        m.d.comb += can.eq(busy & self.emit.ready &
                           Mux(is_st, self.fetch.ready, tag_free & self.bind.ready))
        m.d.comb += [
            self.emit.valid.eq(can),
            self.emit.payload.header.eq(hdr),
            self.emit.payload.n.eq(Mux(is_st, n, 0)),
            self.fetch.valid.eq(can & is_st),
            self.fetch.payload.addr.eq((d.addr >> fsh) + off),
            self.fetch.payload.n.eq(n),
            self.bind.valid.eq(can & ~is_st),
            self.bind.payload.tag.eq(next_tag),
            self.bind.payload.addr.eq(land),
        ]
        if self.any_tag:
            m.d.sync += claimed.eq((claimed | Mux(can & ~is_st, Const(1, self.tags) << next_tag, 0)) &
                                   ~self.tag_busy)
        with m.If(can):
            if not self.any_tag:
                with m.If(~is_st):
                    m.d.sync += next_tag.eq(next_tag + 1)
            with m.If(row_done):
                m.d.sync += [off.eq(0), rem.eq(rem & ~dst_bit),
                             copy_base.eq(copy_base + (d.length << fsh))]
            with m.Else():
                m.d.sync += off.eq(off + n)
            with m.If(final):
                m.d.sync += busy.eq(0)

        # Descriptor intake.
        nd = self.desc.payload
        m.d.comb += self.desc.ready.eq(~busy | (can & final))
        take = self.desc.valid & self.desc.ready
        ok = self._check_descriptor(m, nd, take, static)
        tag_wait = busy & ~is_st & ~tag_free
        # The tag the next reduction-load descriptor will take first: next_tag, or the one after it while the
        # descriptor being walked is a reduction load whose tag is not bound yet.
        if self.any_tag:
            m.d.comb += self.tag_ready.eq(~tag_wait & Mux(busy & ~is_st, free2, tag_free))
        else:
            upcoming = Signal.like(next_tag)
            m.d.comb += [upcoming.eq(next_tag + (busy & ~is_st)),
                         self.tag_ready.eq(~tag_wait & ~self.tag_busy.bit_select(upcoming, 1))]
        m.submodules.stall_counters = stalls = EventCounters(len(GenStall))
        m.d.comb += [stalls.strobe[GenStall.TAG_WAIT].eq(tag_wait),
                     stalls.strobe[GenStall.TAG_BLOCKED].eq(tag_wait & self.desc.valid),
                     stalls.strobe[GenStall.TAG_WAIT_FREE].eq(tag_wait & ~self.tag_busy.all()),
                     self.stalls.eq(stalls.count)]
        with m.If(take & ok):
            m.d.sync += [busy.eq(1), d.eq(nd), rem.eq(nd.mask[:self.ports]), off.eq(0), copy_base.eq(nd.addr)]
        return m

    def _header(self, m, d, *, n, off, dst, remote, tag, static):
        """The header of the next packet of descriptor ``d``: ``n`` flits at row offset ``off``, to ``dst``
        (unicast) at ``remote``; a reduction load's carries ``tag``."""
        is_st = d.op == DescOp.STORE
        hdr = Signal(header_format(self.ports).layout)
        m.d.comb += [hdr.src.eq(self.cfg.port), hdr.length.eq(n)]
        with m.If(self.cfg.unicast):
            m.d.comb += [
                hdr.opcode.eq(Mux(is_st, Opcode.WRITE, Opcode.READ)),
                hdr.route.uni.dst.eq(dst),
                hdr.route.uni.addr.eq(remote),
                hdr.tag.eq(Mux(is_st, 0, tag)),
            ]
        with m.Elif(static):
            m.d.comb += [
                hdr.opcode.eq(Mux(is_st, Opcode.MM_ST, Opcode.MM_LD_REDUCE)),
                hdr.route.mm.group.eq(d.group),
                hdr.route.mm.addr.eq(remote),
            ]
            with m.If(~is_st):
                m.d.comb += [hdr.tag.eq(tag), hdr.etype.eq(d.etype), hdr.redop.eq(d.redop)]
        with m.Else():
            m.d.comb += [
                hdr.opcode.eq(Mux(is_st, Opcode.DYN_ST, Opcode.DYN_LD_REDUCE)),
                hdr.route.dyn.group.eq(d.group),
                hdr.route.dyn.mask.eq(d.mask),
                hdr.route.dyn.index.eq(d.index),
                hdr.route.dyn.offset.eq(off),
            ]
            with m.If(~is_st):
                m.d.comb += [hdr.tag.eq(tag), hdr.etype.eq(d.etype), hdr.redop.eq(d.redop)]
        return hdr

    def _check_descriptor(self, m, nd, take, static):
        """Whether the offered descriptor ``nd`` is well-formed; each refused one (``take``) is counted in
        ``err_count`` under its first error, in :class:`DescError` order."""
        bad_mask = ~static & ((nd.mask == 0) | ((nd.mask >> self.ports) != 0))
        bad_len = (nd.length == 0) | (nd.length > MAX_ROW_FLITS)
        bad_type = (nd.op == DescOp.LD_REDUCE) & (
            (nd.etype.as_value() > max(e.value for e in EType)) | (nd.redop.as_value() > max(r.value for r in RedOp)))
        bad_group = (self.cfg.unicast | static) & (nd.group >= self.groups)
        errs = {DescError.BAD_MASK: bad_mask, DescError.BAD_LENGTH: ~bad_mask & bad_len,
                DescError.BAD_TYPE: ~bad_mask & ~bad_len & bad_type,
                DescError.BAD_GROUP: ~bad_mask & ~bad_len & ~bad_type & bad_group}
        m.submodules.errors = errors = EventCounters(len(DescError))
        m.d.comb += [errors.strobe[code].eq(take & cond) for code, cond in errs.items()]
        m.d.comb += self.err_count.eq(errors.count)
        return ~(bad_mask | bad_len | bad_type | bad_group)


class _UplinkMerge(wiring.Component):
    """Generated packets (``gen``) and ``aux`` packets onto ``o``, packet by packet, round-robin when both
    wait. The choice is held while its flit waits for ``o.ready`` and through the packet (gaps included)
    until its last flit has gone."""

    def __init__(self, *, flit_width):
        super().__init__({
            "gen": In(stream.Signature(flit_layout(flit_width))),
            "aux": In(stream.Signature(flit_layout(flit_width))),
            "o": Out(stream.Signature(flit_layout(flit_width))),
        })

    def elaborate(self, platform):
        m = Module()
        srcs, out = [self.gen, self.aux], self.o
        lock = Signal(2)          # 1 = generated packet, 2 = aux packet, 0 = choose at the next header
        prefer_aux = Signal()
        pick = Signal(2)
        with m.If(lock != 0):
            m.d.comb += pick.eq(lock)
        with m.Elif(srcs[0].valid & srcs[1].valid):
            m.d.comb += pick.eq(Mux(prefer_aux, 2, 1))
        with m.Elif(srcs[0].valid):
            m.d.comb += pick.eq(1)
        with m.Elif(srcs[1].valid):
            m.d.comb += pick.eq(2)
        for k, s in enumerate(srcs, start=1):
            with m.If(pick == k):
                m.d.comb += [out.valid.eq(s.valid), out.payload.eq(s.payload), s.ready.eq(out.ready)]
        moved = out.valid & out.ready
        with m.If(moved):
            m.d.sync += lock.eq(Mux(out.payload.last, 0, pick))
        with m.Elif(out.valid):
            m.d.sync += lock.eq(pick)
        with m.If(moved & out.payload.last):
            m.d.sync += prefer_aux.eq(pick == 1)
        return m


class RequestGenerator(wiring.Component):
    """dymultimem request generator: descriptors to DYN_ST/DYN_LD_REDUCE (or unicast, or static multimem)
    packets on the uplink.

    Parameters: ``ports`` (switch ports, 2..128: the valid mask bits; past 64 the wide header format,
    :func:`hw.packet.header_format`, which needs ``flit_width`` >= 256), ``flit_width``, ``max_payload``
    (flits per packet, 1..31), ``credits`` (uplink credits, 1..1024), ``fetch_depth`` (payload read-ahead
    buffer, >= ``max_payload``), ``groups`` (``rbase`` entries, 1..256), ``tags`` (combine tags, a power of
    two in 4..256), ``link`` (``"credit"``: ``tx`` is a credit link with ``credits`` credits;
    ``"stream"``: ``tx`` is a flit stream, ``credits`` unused; packets are the same either way),
    ``any_tag`` (False: a reduction load takes the next tag in turn and waits for it, so the oldest
    outstanding load holds the next one; True: it takes the lowest free tag, a tag bound but not yet shown
    busy on ``tag_busy`` excluded, and waits only when every tag is busy).

    ``tag_ready`` (a hint for the descriptor source): a reduction-load descriptor offered now would find its
    tag free (none waits in the walker, and the tag it would take is free: the next in turn, or with
    ``any_tag`` a free one beside the one the load being walked takes).

    Latency: a descriptor accepted in cycle t has its first packet command at t+1; a header-only packet
    reaches ``tx`` at t+3 (planner, command queue, emitter), a payload packet once its data is fetched.
    """

    def __init__(self, *, ports: int = 8, flit_width: int = DEFAULT_FLIT_WIDTH, max_payload: int = 16,
                 credits: int = 32, fetch_depth: int = 48, groups: int = 4, tags: int = 32,
                 link: str = "credit", any_tag: bool = False):
        if link not in ("credit", "stream"):
            raise ValueError(f"link must be 'credit' or 'stream', got {link!r}")
        if not isinstance(ports, int) or not 2 <= ports <= MAX_SWITCH_PORTS:
            raise ValueError(f"ports must be an integer in 2..{MAX_SWITCH_PORTS}, got {ports!r}")
        flit_layout(flit_width)
        header_format(ports, flit_width)
        if not isinstance(max_payload, int) or not 1 <= max_payload <= MAX_LENGTH:
            raise ValueError(f"max_payload must be an integer in 1..{MAX_LENGTH}, got {max_payload!r}")
        if not isinstance(credits, int) or not 1 <= credits <= 1024:
            raise ValueError(f"credits must be an integer in 1..1024, got {credits!r}")
        if not isinstance(fetch_depth, int) or not max(2, max_payload) <= fetch_depth <= 1024:
            raise ValueError(f"fetch_depth must be an integer in max_payload..1024 "
                             f"({max(2, max_payload)}..1024), got {fetch_depth!r}")
        if not isinstance(groups, int) or not 1 <= groups <= 256:
            raise ValueError(f"groups must be an integer in 1..256, got {groups!r}")
        if not isinstance(tags, int) or not 4 <= tags <= 256 or tags & (tags - 1):
            raise ValueError(f"tags must be a power of two in 4..256, got {tags!r}")
        if not isinstance(any_tag, bool):
            raise ValueError(f"any_tag must be a bool, got {any_tag!r}")
        self.ports = ports
        self.flit_width = flit_width
        self.max_payload = max_payload
        self.credits = credits
        self.fetch_depth = fetch_depth
        self.groups = groups
        self.tags = tags
        self.link = link
        self.any_tag = any_tag
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(ports))),
            "cfg": In(gen_config_layout(ports)),
            "rbase": In(data.ArrayLayout(BYTE_ADDR_BITS, groups)),
            "mem_rd": Out(mem_read_signature(flit_width)),
            "aux": In(stream.Signature(flit_layout(flit_width))),
            "tx": Out(credit_link_signature(flit_width) if link == "credit"
                      else stream.Signature(flit_layout(flit_width))),
            "tag_issue": Out(stream.Signature(TagIssue)),
            "tag_busy": In(tags),
            "err_count": Out(data.ArrayLayout(32, len(DescError))),
            "stalls": Out(data.ArrayLayout(32, len(GenStall))),
            "tag_ready": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.planner = planner = _Planner(ports=self.ports, flit_width=self.flit_width,
                                                  max_payload=self.max_payload, groups=self.groups, tags=self.tags,
                                                  any_tag=self.any_tag)
        m.submodules.builder = builder = PacketBuilder(flit_width=self.flit_width, depth=self.fetch_depth,
                                                       ports=self.ports)
        m.submodules.tagq = tagq = fifo.SyncFIFO(width=data.Layout.cast(TagIssue).size, depth=2)
        m.submodules.merge = merge = _UplinkMerge(flit_width=self.flit_width)

        connect(m, wiring.flipped(self.desc), planner.desc)
        m.d.comb += [
            planner.cfg.eq(self.cfg),
            planner.rbase.eq(self.rbase),
            planner.tag_busy.eq(self.tag_busy),
            self.err_count.eq(planner.err_count),
            self.stalls.eq(planner.stalls),
            self.tag_ready.eq(planner.tag_ready),
        ]
        connect(m, planner.emit, builder.emit)
        connect(m, planner.fetch, builder.fetch)
        connect(m, planner.bind, tagq.w_stream)
        connect(m, tagq.r_stream, wiring.flipped(self.tag_issue))
        connect(m, builder.mem_rd, wiring.flipped(self.mem_rd))
        # Uplink: generated and aux packets merged, then (credit link) a credit sender.
        connect(m, builder.o, merge.gen)
        connect(m, wiring.flipped(self.aux), merge.aux)
        if self.link == "credit":
            m.submodules.sender = sender = CreditSender(credits=self.credits, flit_width=self.flit_width)
            connect(m, merge.o, sender.i)
            connect(m, sender.link, wiring.flipped(self.tx))
        else:
            connect(m, merge.o, wiring.flipped(self.tx))
        return m
