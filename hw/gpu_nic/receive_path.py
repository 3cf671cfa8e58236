"""The GPU's receive path: packets from the switch's downlink into GPU memory, read answers back out, and
token-arrival reports for the token tracker.

What arrives and what happens
-----------------------------
* ``WRITE`` (``addr``), ``MM_ST`` (static multimem: the same ``addr`` on every member), ``DYN_ST``
  (``dymultimem.st`` forwarded untranslated, as the plain switch does: it lands at
  ``dyn_base[group] + (index << cfg.row_shift) + offset * flit_bytes``, a receiver-side stand-in for the
  switch's AL-TLB, whose translated deliveries arrive as ``WRITE``): the payload is written to memory.
* ``READ`` and the switch's ``RED_READ`` (one contribution of an ``ld_reduce``): ``length`` flits are read
  from ``addr`` and sent back on ``rsp`` as ``READ_RESP`` / ``RED_READ_RESP`` to the requester (``dst`` =
  the request's ``src``, same ``tag`` and ``xtag`` (the packet format's wide tag); ``RED_READ_RESP``
  keeps ``etype``/``redop``). The latency is the
  memory's (the testbench memory model's ``latency``) plus the packet assembly.
* ``RED_RESP`` (a reduced combine result) and ``READ_RESP`` (the unicast baseline's partial rows): written
  at the address bound to their ``tag`` by the request generator (``tag_issue``); the tag is then free.
  An ``ERROR`` for an outstanding tag frees it and counts ``REMOTE_ERROR``.

Staging and poison: every packet is buffered until its last flit (the ``credits``-flit ingress buffer)
before any of it is committed, so a packet that ends with ``poison`` (the switch's cut-through stomp) or
with framing that disagrees with its ``length`` is dropped whole. Commit then runs at one flit per cycle
(header cycle included), so back-to-back packets keep line rate.

Token arrivals
--------------
Dispatched token rows land in the *token window*: ``cfg.win_rows`` rows of ``1 << cfg.row_shift`` bytes
from ``cfg.win_base``. Flit ``cfg.meta_flit`` of a row carries the token's routing metadata
(:func:`pack_token_meta`: up to 8 global expert ids); it is the row's last flit and a sender emits a row's
packets in order (the switch keeps per-pair order), so when it is written the whole token is in memory.
For each listed expert hosted here (``cfg.expert_base`` .. ``+ experts - 1``) the receive path assigns the
next slot of that expert (a bump pointer per local expert, in arrival order; ``clear`` resets them for
the next layer) and reports ``arrival`` = (local expert, tile = slot / ``tile_size``, slot, row): one per
cycle, the token tracker's input. A slot past ``max_slots`` is counted (``SLOT_OVERFLOW``), not reported.

Message classes (``accept``)
---------------------------
On a DySHARP (2-VC) link a GPU runs one receive path per virtual channel, so the two classes never share a
buffer (:class:`hw.gpu_nic.nic.GpuNic`). ``accept`` says which opcodes this instance takes; any other is
dropped and counted ``UNKNOWN_OPCODE``:

* ``"all"`` (default): every opcode above (a single-channel link);
* ``"req"`` (VC 0): ``WRITE``, ``MM_ST``, ``DYN_ST``, ``READ``, ``RED_READ``, and ``TLB_FILL`` (a header-only
  backing read from the switch's AL-TLB), which leaves on ``fill`` as a
  :class:`~hw.switch.backing_if.BackingRequest` ``{group = route.dyn.group, index = route.dyn.index,
  dst = cfg.port, src = src (the GPU whose request missed), tag}`` for the memory manager;
* ``"resp"`` (VC 1): ``READ_RESP``, ``RED_RESP``, ``ERROR``. This instance never emits anything (no
  ``rsp``, ``fill`` or memory reads), so it depends on nothing but ``mem_wr``.

Every ``ERROR`` taken is also counted by its code in ``remote_codes[code]``, one counter per
:class:`~hw.packet.ErrorCode` (entry 0: code ``NONE`` or an undefined code).

Contract
--------
* Ports: ``rx`` (credit link from the switch), ``cfg``/``dyn_base`` (configuration), ``mem_wr``,
  ``mem_rd``, ``rsp`` (flit stream: read responses, to the uplink), ``arrival`` (stream of
  :class:`TokenArrival`), ``tag_issue`` (stream in, always ready), ``tag_busy``, ``clear``, ``err_count``
  (per :class:`RxError`), ``fill`` (stream of ``BackingRequest``; ``accept="req"`` only),
  ``remote_codes`` (one counter per ``ErrorCode``).
* Credits: one per ingress-buffer flit, returned as flits leave the buffer. A flit sent without credit
  is dropped and counted (``CREDIT_OVERFLOW``) and its packet is dropped.
* Backpressure on ``mem_wr``, ``mem_rd``, ``rsp`` and ``arrival`` stalls the commit; nothing is lost.
* Bad input, dropped whole and counted: ``POISONED``, ``LENGTH_MISMATCH``, ``BAD_LENGTH`` (above
  ``max_payload``), ``UNKNOWN_OPCODE`` (not one a GPU accepts), ``UNKNOWN_TAG`` (a response for no
  outstanding tag), ``BAD_GROUP`` (a ``DYN_ST`` group without a ``dyn_base`` entry).
"""

import enum as py_enum

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out, connect

from ..arbiter import first_set
from ..credit import credit_link_signature
from ..event_counters import EventCounters
from ..packet import (DEFAULT_FLIT_WIDTH, INDEX_BITS, MAX_LENGTH, NARROW, PORT_BITS, ErrorCode, HeaderFormat,
                      HeaderLayout, Opcode, flit_layout, header_format, rtl_payload_flits, widened)
from ..switch.backing_if import backing_request_layout
from .memory_if import BYTE_ADDR_BITS, flit_addr_bits, flit_shift, mem_read_signature, mem_write_signature
from .packet_builder import PacketBuilder, emit_layout, fetch_layout
from .request_gen import TagIssue
from .token_tracker import COUNT_BITS, EXPERT_BITS, TILE_BITS

__all__ = ["RxConfig", "TokenArrival", "RxError", "ReceivePath", "META_ENTRIES", "META_EXPERT_BITS",
           "META_ENTRY_BITS", "N_REMOTE_CODES",
           "pack_token_meta", "unpack_token_meta", "header_value", "rx_config_layout"]

META_ENTRIES = 8           # experts listed in a token's metadata flit (top-k <= 8)
META_EXPERT_BITS = 15      # a metadata entry's global expert id (its bits 0-14)
META_ENTRY_BITS = META_EXPERT_BITS + 1     # an entry: the expert id, then its valid bit


class RxConfig(data.Struct):
    port: PORT_BITS     # this GPU's switch port (src of responses)
    row_shift: 6        # log2 of the row stride in bytes (token window and DYN_ST translation)
    win_base: BYTE_ADDR_BITS
    win_rows: INDEX_BITS   # rows in the token window (0: no arrival reports)
    meta_flit: 10       # flit of a row that holds the routing metadata
    expert_base: META_EXPERT_BITS


def rx_config_layout(ports: int | None = None):
    """:class:`RxConfig` in the header format of a ``ports``-port switch (:func:`hw.packet.widened`)."""
    return widened(RxConfig, ports, port="port_bits")


class TokenArrival(data.Struct):
    expert: EXPERT_BITS     # local expert
    tile: TILE_BITS
    slot: COUNT_BITS        # the token's position among the expert's tokens (arrival order)
    row: INDEX_BITS         # the token's row in the window (the GEMM's gather index)


class RxError(py_enum.IntEnum):
    POISONED = 0
    LENGTH_MISMATCH = 1
    BAD_LENGTH = 2
    UNKNOWN_OPCODE = 3
    UNKNOWN_TAG = 4
    REMOTE_ERROR = 5
    SLOT_OVERFLOW = 6
    CREDIT_OVERFLOW = 7
    BAD_GROUP = 8


def pack_token_meta(experts) -> int:
    """The metadata flit of a token routed to ``experts`` (global ids, at most :data:`META_ENTRIES`):
    :data:`META_ENTRY_BITS` per entry, the expert id in its low :data:`META_EXPERT_BITS` bits and ``valid``
    in its top bit."""
    experts = list(experts)
    if len(experts) > META_ENTRIES:
        raise ValueError(f"at most {META_ENTRIES} experts fit in a metadata flit, got {len(experts)}")
    bits = 0
    for i, e in enumerate(experts):
        if not 0 <= e < (1 << META_EXPERT_BITS):
            raise ValueError(f"expert id {e} does not fit in {META_EXPERT_BITS} bits")
        bits |= (e | (1 << META_EXPERT_BITS)) << (META_ENTRY_BITS * i)
    return bits


def unpack_token_meta(bits: int) -> list[int]:
    out = []
    for i in range(META_ENTRIES):
        entry = (int(bits) >> (META_ENTRY_BITS * i)) & ((1 << META_ENTRY_BITS) - 1)
        if entry >> META_EXPERT_BITS:
            out.append(entry & ((1 << META_EXPERT_BITS) - 1))
    return out


def header_value(fmt: HeaderFormat | None = None, **fields) -> Value:
    """A unicast-route header (format ``fmt``, default narrow) as one expression (``Cat`` in layout order,
    zeros elsewhere): field-wise assignments would leave the unused bits driven by a constant-only process,
    which Yosys writes as an empty ``always`` block (a lint failure). Fields: ``opcode``, ``src``, ``tag``,
    ``length``, ``etype``, ``redop`` and the unicast route's ``dst``, ``code``, ``addr``, ``xtag``; the
    ones not given are 0."""
    fmt = fmt or NARROW
    hl = data.Layout.cast(fmt.layout)
    uni = data.Layout.cast(fmt.unicast)
    where = {name: (hl[name].offset, hl[name].width) for name in ("opcode", "src", "tag", "length", "etype",
                                                                  "redop")}
    for name in ("dst", "code", "addr", "xtag"):
        where[name] = (hl["route"].offset + uni[name].offset, uni[name].width)
    unknown = set(fields) - set(where)
    if unknown:
        raise ValueError(f"header_value: no unicast header field {sorted(unknown)}")
    parts, pos = [], 0
    for name, (off, width) in sorted(where.items(), key=lambda kv: kv[1][0]):
        if name not in fields:
            continue
        if off > pos:
            parts.append(Const(0, off - pos))
        parts.append(Value.cast(fields[name])[:width])
        pos = off + width
    parts.append(Const(0, fmt.bits - pos))
    return Cat(*parts)


# Opcode classes at a GPU.
_LAND_ADDR = (Opcode.WRITE, Opcode.MM_ST, Opcode.DYN_ST)
_LAND_TAG = (Opcode.READ_RESP, Opcode.RED_RESP)
_READS = (Opcode.READ, Opcode.RED_READ)
_ACCEPT = {
    "all": frozenset(_LAND_ADDR + _LAND_TAG + _READS + (Opcode.ERROR,)),
    "req": frozenset(_LAND_ADDR + _READS + (Opcode.TLB_FILL,)),
    "resp": frozenset(_LAND_TAG + (Opcode.ERROR,)),
}
N_REMOTE_CODES = len(ErrorCode)   # every ErrorCode value is counted on its own in remote_codes
_META_DEPTH = 3            # metadata queue entries (token window -> arrival reports)


def _one_of(m, name, op, ops, accept) -> Signal:
    """1 when ``op`` is one of the ``ops`` this instance accepts (a named signal, for waveforms; left
    undriven, so 0, when none is accepted). Yosys folds such a 0, so the ``If`` chains below leave out the
    branches an instance cannot take (:func:`_chain`): a constant-0 branch would become a constant case
    pattern in the generated Verilog, which the linter flags."""
    sig = Signal(name=name)
    ops = [o for o in ops if o in accept]
    if ops:
        m.d.comb += sig.eq(Cat(*(op == o for o in ops)).any())
    return sig


def _chain(m, branches) -> None:
    """An ``If``/``Elif`` chain of ``(condition, body)``; a ``None`` condition leaves its branch out and
    ``True`` is the ``Else``."""
    first = True
    for cond, body in branches:
        if cond is None:
            continue
        if cond is True:
            ctx = m.Else() if not first else None
        else:
            ctx = m.If(cond) if first else m.Elif(cond)
        if ctx is None:
            body()
        else:
            with ctx:
                body()
        first = False


_TAG_BITS = data.Layout.cast(HeaderLayout)["tag"].width


def _status_layout(credits):
    """Per staged packet: its flits (``n``), ``bad`` (poisoned or a flit lost), ``long`` (truncated)."""
    return data.StructLayout({"bad": 1, "long": 1, "n": credits.bit_length()})


def _meta_layout():
    """A token's metadata as queued for the arrival side: its row and its listed experts made local (id -
    ``expert_base``), with a mask of the ones hosted here."""
    return data.StructLayout({"row": INDEX_BITS, "mask": META_ENTRIES,
                              "local": data.ArrayLayout(EXPERT_BITS, META_ENTRIES)})


def _written_layout(flit_width):
    """A flit written to memory this cycle: its flit address and its low bits (the metadata entries)."""
    return data.StructLayout({"valid": 1, "addr": flit_addr_bits(flit_width),
                              "meta": META_ENTRY_BITS * META_ENTRIES})


def _tag_lookup_signature(flit_width):
    """Seen from the asker: a tag out; its landing flit address and whether it is outstanding back."""
    return wiring.Signature({"tag": Out(_TAG_BITS), "addr": In(flit_addr_bits(flit_width)), "known": In(1)})


class _Stager(wiring.Component):
    """Ingress: stages whole packets from the credit link ``rx`` in a ``credits``-flit buffer.

    ``flit`` (the buffered flits) and ``status`` (one entry per packet that stored a flit) are streams
    out; the reader pops a packet's status with its header flit. Every legal packet fits in the buffer
    (``credits`` >= ``max_payload`` + 1). A packet still going at that length can never be staged whole:
    its stored part is queued for dropping at once, ``long`` (waiting for its end could deadlock: the
    buffer may be full), and the rest is discarded as it arrives; those flits had credits, which are owed
    back. One credit per cycle returns: for a flit leaving the buffer, else for a discarded one. A flit
    sent without credit is dropped (its packet ``bad``) and strobes ``credit_overflow``."""

    def __init__(self, *, flit_width, credits, max_payload):
        self.flit_width, self.credits, self.max_payload = flit_width, credits, max_payload
        super().__init__({
            "rx": In(credit_link_signature(flit_width)),
            "flit": Out(stream.Signature(flit_width)),
            "status": Out(stream.Signature(_status_layout(credits))),
            "credit_overflow": Out(1),
        })
        # The arriving packet's state, attributes so that a formal harness can state invariants on it.
        self.cnt = Signal(credits.bit_length())     # flits of the arriving packet stored so far
        self.spoiled = Signal()                     # a flit of the arriving packet was dropped
        self.truncating = Signal()                  # discarding the rest of an over-long packet
        self.owed = Signal(range(credits + 1))      # credits of discarded flits not yet returned

    def elaborate(self, platform):
        m = Module()
        status_l = _status_layout(self.credits)
        m.submodules.flits = flits = fifo.SyncFIFO(width=self.flit_width, depth=self.credits)
        m.submodules.status = status = fifo.SyncFIFO(width=status_l.size, depth=self.credits)
        connect(m, flits.r_stream, wiring.flipped(self.flit))
        connect(m, status.r_stream, wiring.flipped(self.status))
        fw, sw = flits.w_stream, status.w_stream
        rx = self.rx
        limit = self.max_payload + 1
        cnt, spoiled, truncating, owed = self.cnt, self.spoiled, self.truncating, self.owed
        popped = Signal()
        held = Signal(range(2 * self.credits + 2))
        m.d.comb += held.eq(flits.level + owed)
        no_credit = Signal()
        m.d.comb += no_credit.eq(rx.valid & (held >= self.credits))
        store = Signal()
        m.d.comb += store.eq(rx.valid & ~no_credit & ~truncating)
        discard = rx.valid & ~no_credit & truncating
        too_long = store & (cnt == limit - 1) & ~rx.flit.last
        m.d.comb += [fw.payload.eq(rx.flit.data), fw.valid.eq(store), self.credit_overflow.eq(no_credit)]
        st_in = Signal(status_l)
        with m.If(too_long):
            m.d.comb += [sw.valid.eq(1), st_in.bad.eq(1), st_in.long.eq(1), st_in.n.eq(limit)]
            m.d.sync += [cnt.eq(0), spoiled.eq(0), truncating.eq(1)]
        with m.Elif(truncating):
            with m.If(rx.valid & rx.flit.last):
                m.d.sync += truncating.eq(0)
        with m.Elif(rx.valid & rx.flit.last):
            # A packet none of whose flits was stored leaves nothing to drop: no status entry.
            m.d.comb += [st_in.bad.eq(spoiled | rx.flit.poison | no_credit), st_in.n.eq(cnt + store),
                         sw.valid.eq((cnt + store) != 0)]
            m.d.sync += [cnt.eq(0), spoiled.eq(0)]
        with m.Elif(rx.valid):
            m.d.sync += [cnt.eq(cnt + store), spoiled.eq(spoiled | no_credit)]
        m.d.comb += sw.payload.eq(st_in)
        m.d.comb += [popped.eq(self.flit.ready & self.flit.valid), rx.credit.eq(popped | (owed != 0))]
        m.d.sync += owed.eq(owed + discard - (~popped & (owed != 0)))
        return m


class _TagTable(wiring.Component):
    """Outstanding combine tags. ``issue`` (always ready) binds a tag to a landing byte address and marks
    it busy (``busy``); ``lookup`` answers a tag's flit address and whether it is busy, combinationally;
    ``free`` clears the busy bits set in it."""

    def __init__(self, *, flit_width, tags):
        self.flit_width, self.tags = flit_width, tags
        super().__init__({
            "issue": In(stream.Signature(TagIssue)),
            "busy": Out(tags),
            "free": In(tags),
            "lookup": In(_tag_lookup_signature(flit_width)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.tagmem = tagmem = memory.Memory(shape=flit_addr_bits(self.flit_width), depth=self.tags,
                                                      init=[])
        tag_w = tagmem.write_port()
        tag_r = tagmem.read_port(domain="comb")
        issue = self.issue
        m.d.comb += [
            issue.ready.eq(1),
            tag_w.addr.eq(issue.payload.tag),
            tag_w.data.eq(issue.payload.addr >> flit_shift(self.flit_width)),
            tag_w.en.eq(issue.valid),
        ]
        set_bit = Signal(self.tags)
        with m.If(issue.valid & (issue.payload.tag < self.tags)):
            m.d.comb += set_bit.eq(Const(1, self.tags) << issue.payload.tag)
        m.d.sync += self.busy.eq((self.busy & ~self.free) | set_bit)
        tag = self.lookup.tag
        m.d.comb += [
            tag_r.addr.eq(tag),
            self.lookup.addr.eq(tag_r.data),
            self.lookup.known.eq((tag < self.tags) &
                                 self.busy.bit_select(tag[:max(1, (self.tags - 1).bit_length())], 1)),
        ]
        return m


class _HeaderDecode(wiring.Component):
    """What to do with the packet whose header is ``header`` (``status``: its staging status), decided
    combinationally: its class (the opcodes this ``accept`` instance takes), ``reason`` (one-hot
    :class:`RxError`, 0 if the packet is good: the first of long/poisoned, unknown opcode, bad length,
    length mismatch, bad group, unknown tag), its landing flit address ``land`` (``WRITE``'s ``addr``,
    ``MM_ST``'s, ``DYN_ST`` translated through ``dyn_base``, a response's tag binding through ``tag``) and
    the header ``rsp_header`` that answers a ``READ``/``RED_READ``."""

    def __init__(self, *, flit_width, credits, max_payload, groups, tags, accept, ports=None):
        self.flit_width, self.max_payload, self.groups, self.tags = flit_width, max_payload, groups, tags
        self.accept = _ACCEPT[accept]
        self.fmt = header_format(ports)
        super().__init__({
            "header": In(self.fmt.layout),
            "status": In(_status_layout(credits)),
            "cfg": In(rx_config_layout(ports)),
            "dyn_base": In(data.ArrayLayout(BYTE_ADDR_BITS, groups)),
            "tag": Out(_tag_lookup_signature(flit_width)),
            "kind": Out(data.StructLayout({"land_tag": 1, "read": 1, "error": 1, "fill": 1})),
            "reason": Out(len(RxError)),
            "land": Out(flit_addr_bits(flit_width)),
            "rsp_header": Out(self.fmt.bits),
        })

    def elaborate(self, platform):
        m = Module()
        hdr, st, acc, fsh = self.header, self.status, self.accept, flit_shift(self.flit_width)
        op = hdr.opcode
        is_land_addr = _one_of(m, "is_land_addr", op, _LAND_ADDR, acc)
        is_land_tag = _one_of(m, "is_land_tag", op, _LAND_TAG, acc)
        is_read = _one_of(m, "is_read", op, _READS, acc)
        is_error = _one_of(m, "is_error", op, (Opcode.ERROR,), acc)
        is_fill = _one_of(m, "is_fill", op, (Opcode.TLB_FILL,), acc)
        m.d.comb += [self.kind.land_tag.eq(is_land_tag), self.kind.read.eq(is_read),
                     self.kind.error.eq(is_error), self.kind.fill.eq(is_fill), self.tag.tag.eq(hdr.tag)]
        expected_n = Signal(range(MAX_LENGTH + 2))
        m.d.comb += expected_n.eq(rtl_payload_flits(hdr) + 1)
        dyn_base = Signal(BYTE_ADDR_BITS)
        m.d.comb += dyn_base.eq(self.dyn_base[hdr.route.dyn.group])
        land = self.land
        with m.If(op == Opcode.DYN_ST):
            m.d.comb += land.eq(((dyn_base + (hdr.route.dyn.index << self.cfg.row_shift)) >> fsh) +
                                hdr.route.dyn.offset)
        with m.Elif(op == Opcode.MM_ST):
            m.d.comb += land.eq(hdr.route.mm.addr >> fsh)
        with m.Elif(is_land_tag):
            m.d.comb += land.eq(self.tag.addr)
        with m.Else():
            m.d.comb += land.eq(hdr.route.uni.addr >> fsh)
        typed = op == Opcode.RED_READ
        m.d.comb += self.rsp_header.eq(header_value(
            self.fmt, opcode=Mux(typed, Opcode.RED_READ_RESP.value, Opcode.READ_RESP.value), src=self.cfg.port,
            tag=hdr.tag, length=hdr.length, etype=Mux(typed, hdr.etype.as_value(), 0),
            redop=Mux(typed, hdr.redop.as_value(), 0), dst=hdr.src, xtag=hdr.route.uni.xtag))

        def set_reason(value):
            def body():
                m.d.comb += self.reason.eq(value)
            return body
        # Only the branches this instance can take: a branch on a constant-0 condition becomes a constant
        # case pattern in the generated Verilog (a lint failure).
        _chain(m, [
            (st.long, set_reason(Mux(hdr.length > self.max_payload, 1 << RxError.BAD_LENGTH,
                                     1 << RxError.LENGTH_MISMATCH))),
            (st.bad, set_reason(1 << RxError.POISONED)),
            (~(is_land_addr | is_land_tag | is_read | is_error | is_fill), set_reason(1 << RxError.UNKNOWN_OPCODE)),
            (hdr.length > self.max_payload, set_reason(1 << RxError.BAD_LENGTH)),
            (st.n != expected_n, set_reason(1 << RxError.LENGTH_MISMATCH)),
            ((op == Opcode.DYN_ST) & (hdr.route.dyn.group >= self.groups) if Opcode.DYN_ST in acc else None,
             set_reason(1 << RxError.BAD_GROUP)),
            (is_land_tag & ~self.tag.known if any(o in acc for o in _LAND_TAG) else None,
             set_reason(1 << RxError.UNKNOWN_TAG)),
        ])
        return m


class _Commit(wiring.Component):
    """Commits staged packets at one flit per cycle (header cycle included).

    At a packet's header (``flit`` and ``status`` both valid) the :class:`_HeaderDecode` decision is
    acted on: a bad packet is dropped whole (its ``err`` strobe); a read queues its ``fetch`` and the
    response header on ``emit`` (waiting for both to have room); a TLB fill waits for ``fill`` to take it;
    an ``ERROR`` frees its tag and strobes ``err[REMOTE_ERROR]`` and ``remote[code]``; anything else
    writes its payload on ``mem_wr`` from ``land``, a flit per cycle while ``meta_room``, and reports each
    written flit on ``written``. A response landing through a tag frees it (``tag_free``) with its last
    flit."""

    def __init__(self, *, flit_width, credits, max_payload, groups, tags, accept, ports=None):
        self.flit_width, self.credits, self.tags, self.accept = flit_width, credits, tags, _ACCEPT[accept]
        self.fmt = header_format(ports)
        self.decode = _HeaderDecode(flit_width=flit_width, credits=credits, max_payload=max_payload,
                                    groups=groups, tags=tags, accept=accept, ports=ports)
        super().__init__({
            "flit": In(stream.Signature(flit_width)),
            "status": In(stream.Signature(_status_layout(credits))),
            "cfg": In(rx_config_layout(ports)),
            "dyn_base": In(data.ArrayLayout(BYTE_ADDR_BITS, groups)),
            "tag": Out(_tag_lookup_signature(flit_width)),
            "tag_free": Out(tags),
            "fetch": Out(stream.Signature(fetch_layout(flit_width))),
            "emit": Out(stream.Signature(emit_layout(ports))),
            "fill": Out(stream.Signature(backing_request_layout(ports))),
            "mem_wr": Out(mem_write_signature(flit_width)),
            "written": Out(_written_layout(flit_width)),
            "meta_room": In(1),
            "err": Out(len(RxError)),
            "remote": Out(N_REMOTE_CODES),
            "read_wait": Out(1),
        })
        # The packet being committed, attributes so that a formal harness can state invariants on it.
        self.writing = Signal()          # committing a packet's payload
        self.dropping = Signal()         # discarding a packet's remaining flits
        self.left = Signal(credits.bit_length())    # its flits still in the staging buffer

    def elaborate(self, platform):
        m = Module()
        m.submodules.decode = dec = self.decode
        acc, flit, st = self.accept, self.flit, self.status.payload
        hdr = self.fmt.layout(flit.payload[:self.fmt.bits])
        m.d.comb += [dec.header.eq(hdr), dec.status.eq(st), dec.cfg.eq(self.cfg), dec.dyn_base.eq(self.dyn_base)]
        connect(m, dec.tag, wiring.flipped(self.tag))
        kind, reason, err, clr_bit = dec.kind, dec.reason, self.err, self.tag_free
        remote = Signal()           # an ERROR is taken this cycle
        writing, dropping, left = self.writing, self.dropping, self.left
        waddr = Signal(len(self.written.addr))
        wtag = Signal(_TAG_BITS)
        wfree = Signal()            # the packet lands through a tag: free it at the end
        mw = self.mem_wr
        m.d.comb += [mw.payload.addr.eq(waddr), mw.payload.data.eq(flit.payload),
                     self.written.addr.eq(waddr), self.written.meta.eq(flit.payload[:len(self.written.meta)])]
        with m.If(writing):
            # Valid never waits on ready.
            m.d.comb += mw.valid.eq(flit.valid & self.meta_room)
            with m.If(mw.valid & mw.ready):
                m.d.comb += [flit.ready.eq(1), self.written.valid.eq(1)]
                m.d.sync += [waddr.eq(waddr + 1), left.eq(left - 1)]
                with m.If(left == 1):
                    m.d.sync += writing.eq(0)
                    with m.If(wfree):
                        m.d.comb += clr_bit.eq(Const(1, self.tags) << wtag)
        with m.Elif(dropping):
            m.d.comb += flit.ready.eq(1)
            m.d.sync += left.eq(left - 1)
            with m.If(left == 1):
                m.d.sync += dropping.eq(0)
        with m.Elif(self.status.valid):
            # A packet's header: decide what to do with the whole packet.
            m.d.comb += err.eq(reason)
            take = Signal()

            def do_drop():
                m.d.comb += take.eq(1)
                m.d.sync += [dropping.eq(st.n > 1), left.eq(st.n - 1)]

            def do_read():
                # Answer: fetch the rows and queue the response header (both queues must have room).
                ok = self.fetch.ready & self.emit.ready
                m.d.comb += [
                    self.fetch.valid.eq(ok),
                    self.fetch.payload.addr.eq(dec.land),
                    self.fetch.payload.n.eq(hdr.length),
                    self.emit.valid.eq(ok),
                    self.emit.payload.header.eq(dec.rsp_header),
                    self.emit.payload.n.eq(hdr.length),
                    take.eq(ok),
                    self.read_wait.eq(~ok),
                ]

            def do_fill():
                # A TLB fill: one backing request to the memory manager (waits for it to be taken).
                m.d.comb += [self.fill.valid.eq(1), take.eq(self.fill.ready)]

            def do_error():
                m.d.comb += [take.eq(1), err[RxError.REMOTE_ERROR].eq(1), remote.eq(1)]
                with m.If(dec.tag.known):
                    m.d.comb += clr_bit.eq(Const(1, self.tags) << hdr.tag)

            def do_write():
                m.d.comb += take.eq(1)
                m.d.sync += [writing.eq(st.n > 1), left.eq(st.n - 1), waddr.eq(dec.land), wtag.eq(hdr.tag),
                             wfree.eq(kind.land_tag)]
                with m.If(kind.land_tag & (st.n == 1)):
                    m.d.comb += clr_bit.eq(Const(1, self.tags) << hdr.tag)
            _chain(m, [
                (reason != 0, do_drop),
                (kind.read if any(o in acc for o in _READS) else None, do_read),
                (kind.fill if Opcode.TLB_FILL in acc else None, do_fill),
                (kind.error if Opcode.ERROR in acc else None, do_error),
                (True, do_write),
            ])
            m.d.comb += [self.status.ready.eq(take), flit.ready.eq(take)]

        fp = self.fill.payload
        m.d.comb += [fp.group.eq(hdr.route.dyn.group), fp.index.eq(hdr.route.dyn.index), fp.dst.eq(self.cfg.port),
                     fp.src.eq(hdr.src), fp.tag.eq(hdr.tag)]
        code = hdr.route.uni.code.as_value()
        code_ix = Signal(range(N_REMOTE_CODES))
        m.d.comb += code_ix.eq(Mux(code < N_REMOTE_CODES, code, 0))
        m.d.comb += self.remote.eq(Cat(remote & (code_ix == k) for k in range(N_REMOTE_CODES)))
        return m


class _TokenWindow(wiring.Component):
    """The token-window test of each ``written`` flit, one cycle after its write (a register stage: the
    window arithmetic on the write's own cycle kept the 640 ps clock from closing). A row's metadata flit
    (``cfg.meta_flit``) inside the window (``cfg.win_rows`` rows from ``cfg.win_base``) is pushed on
    ``meta`` (:func:`_meta_layout`). ``room``: the meta queue (``level`` of ``depth`` entries) has room
    for one more entry beside the one this stage may push (every write needs it)."""

    def __init__(self, *, flit_width, experts, depth, ports=None):
        self.flit_width, self.experts, self.depth = flit_width, experts, depth
        super().__init__({
            "written": In(_written_layout(flit_width)),
            "cfg": In(rx_config_layout(ports)),
            "level": In(range(depth + 1)),
            "room": Out(1),
            "meta": Out(stream.Signature(_meta_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        fsh, abits, cfg = flit_shift(self.flit_width), flit_addr_bits(self.flit_width), self.cfg
        wrote = Signal(data.StructLayout({"valid": 1, "rel": abits, "meta": len(self.written.meta)}))
        m.d.sync += [wrote.valid.eq(self.written.valid), wrote.rel.eq(self.written.addr - (cfg.win_base >> fsh)),
                     wrote.meta.eq(self.written.meta)]
        sh = Signal(len(cfg.row_shift))
        m.d.comb += sh.eq(cfg.row_shift - fsh)
        row = Signal(abits)
        m.d.comb += row.eq(wrote.rel >> sh)
        in_row = Signal(abits)
        m.d.comb += in_row.eq(wrote.rel & ~(Const(-1, abits) << sh))
        m.d.comb += self.room.eq(self.level + wrote.valid < self.depth)
        meta_in = self.meta.payload
        for i in range(META_ENTRIES):
            entry = wrote.meta[META_ENTRY_BITS * i:META_ENTRY_BITS * (i + 1)]
            le = Signal(META_EXPERT_BITS, name=f"meta_local{i}")
            m.d.comb += [
                le.eq(entry[:META_EXPERT_BITS] - cfg.expert_base),
                meta_in.local[i].eq(le),
                meta_in.mask[i].eq(entry[META_EXPERT_BITS] & (entry[:META_EXPERT_BITS] >= cfg.expert_base) &
                                   (le < self.experts)),
            ]
        m.d.comb += [meta_in.row.eq(row),
                     self.meta.valid.eq(wrote.valid & (row < cfg.win_rows) & (in_row == cfg.meta_flit))]
        return m


class _ArrivalReporter(wiring.Component):
    """Turns each queued token (``meta``) into one ``arrival`` per listed local expert, lowest entry
    first, one per cycle: the expert's next slot (a bump pointer per expert, in arrival order; ``clear``
    resets them) and its tile ``slot / tile_size``. A slot at ``max_slots`` or beyond is refused (strobes
    ``slot_overflow``), not reported. The token leaves ``meta`` with its last entry."""

    def __init__(self, *, experts, tile_size, max_slots):
        self.experts, self.tile_size, self.max_slots = experts, tile_size, max_slots
        super().__init__({
            "meta": In(stream.Signature(_meta_layout())),
            "clear": In(1),
            "arrival": Out(stream.Signature(TokenArrival)),
            "slot_overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        head = self.meta.payload
        lb = self.tile_size.bit_length() - 1
        sb = self.max_slots.bit_length() - 1
        local = [head.local[i] for i in range(META_ENTRIES)]
        done = Signal(META_ENTRIES)
        pending = Signal(META_ENTRIES)
        m.d.comb += pending.eq(Mux(self.meta.valid, head.mask & ~done, 0))
        any_pending, pick = first_set(m, pending, name="meta_pick")
        pick_bit = Signal(META_ENTRIES)
        m.d.comb += pick_bit.eq(Const(1, META_ENTRIES) << pick)
        cur_e = Signal(EXPERT_BITS)
        m.d.comb += cur_e.eq(local[0])
        for i in range(1, META_ENTRIES):
            with m.If(pick == i):
                m.d.comb += cur_e.eq(local[i])
        bump = [Signal(sb + 1, name=f"bump{e}") for e in range(self.experts)]
        slot = Signal(sb + 1)
        m.d.comb += slot.eq(bump[0])
        for e in range(1, self.experts):
            with m.If(cur_e == e):
                m.d.comb += slot.eq(bump[e])
        full = slot >= self.max_slots
        a = self.arrival
        m.d.comb += [
            a.valid.eq(any_pending & ~full),
            a.payload.expert.eq(cur_e),
            a.payload.tile.eq(slot >> lb),
            a.payload.slot.eq(slot),
            a.payload.row.eq(head.row),
        ]
        consumed = Signal()          # the picked entry is done this cycle (reported or refused)
        m.d.comb += consumed.eq(any_pending & (full | a.ready))
        m.d.comb += self.slot_overflow.eq(any_pending & full)
        last_one = (pending & ~pick_bit) == 0
        with m.If(self.meta.valid & ((pending == 0) | (consumed & last_one))):
            m.d.comb += self.meta.ready.eq(1)
            m.d.sync += done.eq(0)
        with m.Elif(consumed):
            m.d.sync += done.eq(done | pick_bit)
        for e in range(self.experts):
            with m.If(self.clear):
                m.d.sync += bump[e].eq(0)
            with m.Elif(consumed & ~full & (cur_e == e)):
                m.d.sync += bump[e].eq(bump[e] + 1)
        return m


class _ReadQueue(wiring.Component):
    """Read answers queued between the commit and the response builder, ``depth`` of them: a read's row
    fetch and its response header, which :class:`_Commit` offers together (each valid only with both
    readies), enter as one entry and leave together once the builder takes both."""

    def __init__(self, *, flit_width: int, ports: int | None, depth: int):
        fetch, emit = fetch_layout(flit_width), emit_layout(ports)
        self._entry = data.StructLayout({"fetch": fetch, "emit": emit})
        self.depth = depth
        super().__init__({
            "fetch_in": In(stream.Signature(fetch)), "emit_in": In(stream.Signature(emit)),
            "fetch_out": Out(stream.Signature(fetch)), "emit_out": Out(stream.Signature(emit)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = q = fifo.SyncFIFO(width=self._entry.size, depth=self.depth)
        w, r = data.View(self._entry, q.w_stream.payload), data.View(self._entry, q.r_stream.payload)
        both = self.fetch_out.ready & self.emit_out.ready
        m.d.comb += [
            q.w_stream.valid.eq(self.fetch_in.valid),
            w.fetch.eq(self.fetch_in.payload),
            w.emit.eq(self.emit_in.payload),
            self.fetch_in.ready.eq(q.w_stream.ready),
            self.emit_in.ready.eq(q.w_stream.ready),
            self.fetch_out.valid.eq(q.r_stream.valid & both),
            self.emit_out.valid.eq(q.r_stream.valid & both),
            self.fetch_out.payload.eq(r.fetch),
            self.emit_out.payload.eq(r.emit),
            q.r_stream.ready.eq(both),
        ]
        return m


class ReceivePath(wiring.Component):
    """GPU receive path: downlink packets staged into memory, read responses, token-arrival reports.

    Parameters: ``flit_width``, ``credits`` (ingress buffer flits, >= ``max_payload`` + 1),
    ``max_payload`` (1..31), ``experts`` (local experts, 1..256), ``tile_size`` and ``max_slots`` (powers
    of two; slots per local expert), ``groups`` (``dyn_base`` entries), ``tags`` (combine tags, power of
    two 4..256), ``read_depth`` (read-response payload buffer, >= ``max_payload``), ``accept`` (``"all"``,
    ``"req"`` or ``"resp"``: the opcodes taken, see the module docstring), ``ports`` (the switch's ports,
    which choose the header format, :func:`hw.packet.header_format`; None: up to 64), ``read_queue``
    (0..1024 read requests queued between the commit and the response builder, so that the packets behind
    a read whose answer has no room yet go on: writes pass reads, as posted writes pass non-posted reads,
    and a read may then return a write that arrived after it; 0: none, a read waits at the head).
    ``read_waits`` counts the cycles a read waited at the head for room.

    Latency: a packet's last flit in at cycle t -> its header is processed at t+1 and its payload written
    from t+2, one flit per cycle; the metadata flit written at t -> ``arrival`` valid at t+2 (the token-
    window test is registered). A payload write waits while the metadata queue has no room for one more
    entry (``arrival`` backpressure).
    """

    def __init__(self, *, flit_width: int = DEFAULT_FLIT_WIDTH, credits: int = 40, max_payload: int = 16,
                 experts: int = 32, tile_size: int = 128, max_slots: int = 4096, groups: int = 4,
                 tags: int = 32, read_depth: int = 48, accept: str = "all", ports: int | None = None,
                 read_queue: int = 0):
        flit_layout(flit_width)
        header_format(ports, flit_width)
        self.ports = ports
        if accept not in _ACCEPT:
            raise ValueError(f"accept must be one of {sorted(_ACCEPT)}, got {accept!r}")
        if not isinstance(max_payload, int) or not 1 <= max_payload <= MAX_LENGTH:
            raise ValueError(f"max_payload must be an integer in 1..{MAX_LENGTH}, got {max_payload!r}")
        if not isinstance(credits, int) or not max_payload + 1 <= credits <= 1024:
            raise ValueError(f"credits must be an integer in max_payload+1..1024 ({max_payload + 1}..1024), "
                             f"got {credits!r}")
        if not isinstance(experts, int) or not 1 <= experts <= 256:
            raise ValueError(f"experts must be an integer in 1..256, got {experts!r}")
        for name, v, hi in (("tile_size", tile_size, 16384), ("max_slots", max_slots, 65536)):
            if not isinstance(v, int) or not 1 <= v <= hi or v & (v - 1):
                raise ValueError(f"{name} must be a power of two in 1..{hi}, got {v!r}")
        if max_slots < tile_size or max_slots // tile_size > 256:
            raise ValueError(f"max_slots must be tile_size..256*tile_size ({tile_size}..{256 * tile_size}), "
                             f"got {max_slots}")
        if not isinstance(groups, int) or not 1 <= groups <= 256:
            raise ValueError(f"groups must be an integer in 1..256, got {groups!r}")
        if not isinstance(tags, int) or not 4 <= tags <= 256 or tags & (tags - 1):
            raise ValueError(f"tags must be a power of two in 4..256, got {tags!r}")
        if not isinstance(read_depth, int) or not max(2, max_payload) <= read_depth <= 1024:
            raise ValueError(f"read_depth must be an integer in max_payload..1024, got {read_depth!r}")
        if not isinstance(read_queue, int) or isinstance(read_queue, bool) or not 0 <= read_queue <= 1024:
            raise ValueError(f"read_queue must be an integer in 0..1024 (0: none), got {read_queue!r}")
        self.read_queue = read_queue
        self.flit_width = flit_width
        self.credits = credits
        self.max_payload = max_payload
        self.experts = experts
        self.tile_size = tile_size
        self.max_slots = max_slots
        self.groups = groups
        self.tags = tags
        self.read_depth = read_depth
        self.accept = accept
        super().__init__({
            "rx": In(credit_link_signature(flit_width)),
            "cfg": In(rx_config_layout(ports)),
            "dyn_base": In(data.ArrayLayout(BYTE_ADDR_BITS, groups)),
            "mem_wr": Out(mem_write_signature(flit_width)),
            "mem_rd": Out(mem_read_signature(flit_width)),
            "rsp": Out(stream.Signature(flit_layout(flit_width))),
            "arrival": Out(stream.Signature(TokenArrival)),
            "tag_issue": In(stream.Signature(TagIssue)),
            "tag_busy": Out(tags),
            "clear": In(1),
            "err_count": Out(data.ArrayLayout(32, len(RxError))),
            "fill": Out(stream.Signature(backing_request_layout(ports))),
            "remote_codes": Out(data.ArrayLayout(32, N_REMOTE_CODES)),
            "read_waits": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.flit_width
        m.submodules.stager = stager = _Stager(flit_width=W, credits=self.credits, max_payload=self.max_payload)
        m.submodules.tag_table = tags = _TagTable(flit_width=W, tags=self.tags)
        m.submodules.builder = builder = PacketBuilder(flit_width=W, depth=self.read_depth, ports=self.ports)
        m.submodules.commit = commit = _Commit(flit_width=W, credits=self.credits, max_payload=self.max_payload,
                                               groups=self.groups, tags=self.tags, accept=self.accept,
                                               ports=self.ports)
        m.submodules.window = window = _TokenWindow(flit_width=W, experts=self.experts, depth=_META_DEPTH,
                                                    ports=self.ports)
        m.submodules.metaq = metaq = fifo.SyncFIFO(width=_meta_layout().size, depth=_META_DEPTH)
        m.submodules.arrivals = arrivals = _ArrivalReporter(experts=self.experts, tile_size=self.tile_size,
                                                            max_slots=self.max_slots)
        m.submodules.errors = errors = EventCounters(len(RxError))
        m.submodules.remote_counters = remote = EventCounters(N_REMOTE_CODES)

        # Packets: staged whole, then committed (memory writes, read answers, fills, tag landings).
        connect(m, wiring.flipped(self.rx), stager.rx)
        connect(m, stager.flit, commit.flit)
        connect(m, stager.status, commit.status)
        connect(m, wiring.flipped(self.tag_issue), tags.issue)
        connect(m, commit.tag, tags.lookup)
        if self.read_queue:
            # Read requests queue here, so that the writes behind them go on while the answers wait for the
            # response channel (posted writes pass non-posted reads; nothing orders a read with a write).
            m.submodules.readq = readq = _ReadQueue(flit_width=W, ports=self.ports, depth=self.read_queue)
            connect(m, commit.fetch, readq.fetch_in)
            connect(m, commit.emit, readq.emit_in)
            connect(m, readq.fetch_out, builder.fetch)
            connect(m, readq.emit_out, builder.emit)
        else:
            connect(m, commit.fetch, builder.fetch)
            connect(m, commit.emit, builder.emit)
        connect(m, builder.mem_rd, wiring.flipped(self.mem_rd))
        connect(m, builder.o, wiring.flipped(self.rsp))
        connect(m, commit.mem_wr, wiring.flipped(self.mem_wr))
        connect(m, commit.fill, wiring.flipped(self.fill))
        m.d.comb += [
            commit.cfg.eq(self.cfg),
            commit.dyn_base.eq(self.dyn_base),
            tags.free.eq(commit.tag_free),
            self.tag_busy.eq(tags.busy),
        ]
        # Token arrivals: written flits -> window test -> metadata queue -> one report per local expert.
        connect(m, window.meta, metaq.w_stream)
        connect(m, metaq.r_stream, arrivals.meta)
        connect(m, arrivals.arrival, wiring.flipped(self.arrival))
        m.d.comb += [
            window.written.eq(commit.written),
            window.cfg.eq(self.cfg),
            window.level.eq(metaq.level),
            commit.meta_room.eq(window.room),
            arrivals.clear.eq(self.clear),
        ]
        # Counters.
        m.d.comb += [
            errors.strobe.eq(commit.err | (stager.credit_overflow << RxError.CREDIT_OVERFLOW) |
                             (arrivals.slot_overflow << RxError.SLOT_OVERFLOW)),
            self.err_count.eq(errors.count),
            remote.strobe.eq(commit.remote),
            self.remote_codes.eq(remote.count),
        ]
        m.submodules.read_wait_counter = rw = EventCounters(1)
        m.d.comb += [rw.strobe[0].eq(commit.read_wait), self.read_waits.eq(rw.count[0])]
        return m
