"""The ``ld_reduce`` engine: a source's ``dymultimem.ld_reduce`` (or static ``multimem.ld_reduce``) becomes
one ``RED_READ`` per destination, the ``RED_READ_RESP`` contributions are reduced in the
:class:`~hw.switch.reduction_buffer.ReductionBuffer`, and one ``RED_RESP`` goes back to the source.

Flow
----
1. **Request** (``req``, header-only packets). Every malformed request gets one header-only ``ERROR``
   (``dst = src`` = the requester, its ``tag``) with the code of the first row that matches its header
   flit, and is counted in ``bad_requests``; flits that follow a malformed header are dropped:

   =======================================================  ===================
   request                                                  answer (``code``)
   =======================================================  ===================
   header flit marked ``poison`` (sender or link corrupt)   ``POISONED``
   opcode not ``DYN_LD_REDUCE``/``MM_LD_REDUCE``            ``UNKNOWN_OPCODE``
   ``length`` 0 or above ``max_length``                     ``BAD_LENGTH``
   header not ``last`` (flits follow it)                    ``LENGTH_MISMATCH``
   ``dymultimem`` mask zero or naming ports past ``ports``  ``BAD_MASK``
   static group handle not configured                       ``BAD_GROUP``
   ``etype``/``redop`` undefined                            ``BAD_TYPE``
   static group that ``src`` is not a member of             ``ISOLATION``
   =======================================================  ===================

   (``BAD_MASK`` to ``ISOLATION``: :func:`hw.packet.rtl_header_error` with ``max_payload = max_length``,
   then the membership of ``src`` in the static group). Poison comes
   first because nothing else in a poisoned header can be trusted; it is told apart from a length
   mismatch, which is a framing error of an intact header. In the DySHARP switch nothing before the
   engine answers a poisoned request (the link receiver poisons the flits after an overrun, the ingress
   check passes poison through), so this answer is the requester's only one.
   A good request allocates a buffer entry (``expected`` = popcount of the destination mask: the header's
   ``mask`` for ``dymultimem``, the group table's mask for a static group). With no free entry the
   request waits (``req.ready`` low): backpressure, never a drop.
2. **Fan-out**, one destination per cycle, lowest port first. ``dymultimem``: a translation request
   ``{group, index, dst, src, tag = slot}`` on ``translate`` (``translate_slots`` outstanding, reused in
   order); the response's ``addr + offset * flit_bytes`` is the ``RED_READ`` address. A translation
   error (``ISOLATION``, ``OUT_OF_BOUNDS``, ``TLB_FAULT``, ...) aborts the entry: the source gets
   ``ERROR`` with that code; so does a read that does not fit in its row (``(offset + length) *
   flit_bytes > row_bytes``: ``OUT_OF_BOUNDS``, never a read of the next row). Static ``multimem``: no translation, every member is read at ``route.mm.addr``
   (NVLS: the same offset on every GPU).
   With ``defer_translation=True`` the engine does not translate: a ``dymultimem`` read leaves at once
   as a ``DYN_RED_READ`` whose ``route.uni.addr`` is a :class:`~hw.packet.DeferredAddr`
   ``{group, index, byte_offset = offset * flit_bytes}`` (every other field as for ``RED_READ``); the
   destination port's egress translates it and answers a failed translation with an error-coded
   ``RED_READ_RESP``. ``translate`` stays in the signature, idle (``req.valid`` and ``resp.ready`` 0).
3. **RED_READ** (``rd``): ``dst`` = the destination, ``src`` = the requester, ``tag``/``route.uni.xtag`` =
   the entry's reduction tag (low/high byte, :func:`~hw.switch.reduction_buffer.rtag_to_header`),
   ``length``/``etype``/``redop`` of the request, ``addr``. The destination answers ``RED_READ_RESP``
   (``src`` = itself: the DySHARP switch stamps it with the arrival port) echoing ``tag``, ``xtag``,
   ``length`` and ``etype``, with ``code`` 0 and ``length`` payload flits, or with an error ``code``.
4. **Responses** (``resp``): each payload flit of a ``RED_READ_RESP`` becomes a contribution (flit index
   counted from the header). An aborted entry answers its requester ``ERROR`` with the code (``aborts``);
   the first matching row decides, and an abort or contribution for an entry no longer in flight only
   counts ``stale`` (buffer):

   ================================================  ========================================
   response                                          what it does to its entry
   ================================================  ========================================
   not a ``RED_READ_RESP``                           none: dropped whole, ``bad_responses``
   for an entry whose fan-out has not started        none: ``stale`` (buffer), per flit
   from a port that was not asked                    none: dropped whole, ``bad_responses``
   a destination's second answer                     none: dropped whole, ``duplicates``
   header only, ``code`` ``NONE`` (payload missing)  aborted ``LENGTH_MISMATCH``
   header only, marked ``poison``                    aborted ``POISONED``
   ``code`` not ``NONE``                             aborted with that code (payload dropped)
   payload whose last flit is ``poison``             aborted ``LENGTH_MISMATCH``
   ``etype``/``length`` not the entry's              aborted ``TYPE_MISMATCH`` (buffer)
   none within ``timeout`` cycles of allocation      aborted ``TIMEOUT`` (buffer)
   ================================================  ========================================

   A header-only answer without a code is one whose payload was cut off (the response network ends a
   misframed packet at its header with ``poison``, or nothing framed it): it can never contribute, so its
   entry is aborted at once rather than left to time out. A poisoned payload flit cannot be told from a
   cut one here (the network re-frames a packet that runs long to its header's ``length`` and poisons its
   last flit), so both are ``LENGTH_MISMATCH``.

   *Error codes.* A ``RED_READ_RESP`` whose ``route.uni.code`` is not ``NONE`` aborts its entry with that
   code (the requester gets ``ERROR`` with it, as for any abort; ``aborts`` counts it, or ``stale`` if the
   entry is no longer in flight); its payload, if any, is dropped. The checks below come first: an
   error-coded answer that is a duplicate or unasked is only counted.

   *Duplicates and unasked sources.* Per entry the engine keeps which destinations it reads and which of
   them have answered. When an entry's fan-out starts, ``asked[entry] = {gen, mask}`` (the whole
   destination mask). A response header reads ``asked`` and ``answered`` at its entry; in the next cycle
   (a registered read, so the header cycle is never stalled) the verdict: if ``asked`` holds the
   response's generation (and a nonzero mask), a ``src`` outside the mask is *unasked* (packet dropped
   whole, ``bad_responses``) and a ``src`` already in ``answered`` (same generation) is a *duplicate*
   (dropped whole, ``duplicates``), so a duplicate can no longer complete an entry early; otherwise
   ``answered[entry] = {gen, mask | 1 << src}`` (a row of another generation counts as empty, so nothing
   is cleared at allocation: the generation tags the row). A response whose entry's ``asked`` row holds
   no mask of its generation -- another generation, an entry never allocated, or an entry allocated whose
   fan-out has not started (an *early* answer: only a misbehaving destination answers before its read) --
   passes marked stale: the buffer counts it in ``stale`` and it changes nothing. An
   answer for an entry whose fan-out was aborted after its allocation is passed too (stale in the
   buffer). A header-only packet followed at once by another header reads the row it just wrote: the
   ``answered`` read port is transparent.

   *Storage and cost.* ``asked`` and ``answered`` are ``lib.memory`` arrays (SRAM-like, one row per
   access: ``asked`` 1W at fan-out start + 1R per response header, ``answered`` 1R (transparent) + 1W),
   ``entries`` rows of ``gen_bits + ports`` bits each (``gen_bits = 16 - ceil(log2(entries))``): per
   entry ``2 * (gen_bits + ports)`` bits, e.g. 36 bits at 64 entries and 8 ports (2304 bits in all),
   144 bits at 256 entries and 64 ports (36,864 bits). Flip-flops would cost the same bits plus a
   ``ports``-wide write decoder per entry; the engine reads one row per cycle, which SRAM gives. The
   verdict adds 18 bits of registers (source, code, flags, the stale mark) and the 32-bit ``duplicates`` counter. Throughput stays one response flit per cycle; the response
   link is held only while an error-coded answer's abort waits for the buffer's ``contrib`` (the cycle
   after a timeout was held up), and payload flits wait behind translation aborts as before.
5. **Result** (``out``): the buffer's ``RED_RESP``/``ERROR`` packets and the request errors, packet by
   packet.

Blocks, joined by streams: :class:`RequestCheck` (1; good requests to the buffer's ``alloc`` and a
4-deep FIFO of read descriptors, errors to a 4-deep FIFO), :class:`~hw.switch.reduction_reads.FanOut` (2),
:class:`~hw.switch.reduction_reads.TranslatedReads` or :class:`~hw.switch.reduction_reads.DeferredReads`
(2, 3), :class:`~hw.switch.reduction_responses.ResponseFilter` (4), :class:`ResultMerge` (5).
Every interface is a ``lib.stream`` with backpressure; ``rd`` and ``out`` leave through 2-flit FIFOs.
Throughput: one request header, one ``RED_READ`` and one response flit per cycle. ``outstanding=1`` is
the one-reduction-at-a-time baseline.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ..packet import DEFAULT_FLIT_WIDTH, MAX_SWITCH_PORTS, ErrorCode, Opcode, flit_layout, header_format, \
    rtl_header_error
from .group_table import GroupTable, group_write_layout
from .reduction_buffer import BUFFER_COUNTERS, ReductionBuffer, alloc_request_layout, status_members
from .reduction_reads import DeferredReads, FanOut, TranslatedReads, read_info_layout
from .reduction_responses import ResponseFilter
from .translate_if import translate_signature

__all__ = ["ReductionEngine", "RequestCheck", "ResultMerge", "ENGINE_COUNTERS"]

# The buffer's counters plus the engine's own (requests and responses it refused).
ENGINE_COUNTERS = BUFFER_COUNTERS + ("bad_requests", "bad_responses", "duplicates")


class RequestCheck(wiring.Component):
    """Step 1 of the flow: ``req`` headers checked by the request table (static groups from the
    ``groups``-entry :class:`GroupTable` written on ``cfg``). A good request leaves on ``alloc`` (the
    buffer's :class:`AllocRequest`, ``expected`` = popcount of its destination mask) and ``info``
    (:func:`~hw.switch.reduction_reads.read_info_layout`) in the same cycle, both ready or neither taken;
    a malformed one leaves as its header-only ``ERROR`` flit on ``err`` (``bad_requests`` counts it), and the
    flits that follow its header are dropped."""

    def __init__(self, *, ports: int, max_length: int, flit_width: int, groups: int):
        self.ports, self.max_length, self.flit_width, self.groups = ports, max_length, flit_width, groups
        super().__init__({
            "req": In(stream.Signature(flit_layout(flit_width))),
            "cfg": In(stream.Signature(group_write_layout(ports))),
            "alloc": Out(stream.Signature(alloc_request_layout(ports))),
            "info": Out(stream.Signature(read_info_layout(ports))),
            "err": Out(stream.Signature(flit_layout(flit_width))),
            "bad_requests": Out(32),
        })

    def _request_code(self, m, h, flit, static, is_ldr, group_mask):
        """The answer to request header ``h`` (its ``flit``), by the priority of the engine's table."""
        header_code = rtl_header_error(h, ports=self.ports, max_payload=self.max_length, group_mask=group_mask)
        outsider = static & ~(group_mask >> h.src)[0]      # a src past the ports is no member either
        base_code = Mux((header_code == 0) & outsider, ErrorCode.ISOLATION.value, header_code)
        code = Signal(ErrorCode.as_shape().width)
        m.d.comb += code.eq(Mux(flit.poison, ErrorCode.POISONED.value,
                            Mux(~is_ldr, ErrorCode.UNKNOWN_OPCODE.value,
                                Mux((h.length == 0) | (h.length > self.max_length), ErrorCode.BAD_LENGTH.value,
                                    Mux(~flit.last, ErrorCode.LENGTH_MISMATCH.value, base_code)))))
        return code

    def elaborate(self, platform):
        m = Module()
        P = self.ports
        m.submodules.groups = groups = GroupTable(ports=P, entries=self.groups, n_lookups=1)
        connect(m, flipped(self.cfg), groups.cfg)
        rq = self.req
        fmt = header_format(P)
        h = Signal(fmt.layout)
        m.d.comb += h.eq(rq.payload.data[0:fmt.bits])
        m.d.comb += groups.lookup_handle[0].eq(h.route.mm.group)
        static = h.opcode == Opcode.MM_LD_REDUCE
        is_ldr = static | (h.opcode == Opcode.DYN_LD_REDUCE)
        code = self._request_code(m, h, rq.payload, static, is_ldr, groups.lookup_mask[0])
        mask = Signal(P)
        m.d.comb += mask.eq(Mux(static, groups.lookup_mask[0], h.route.dyn.mask[0:P]))

        skip = Signal()                       # dropping the trailing flits of a malformed request
        self.skip = skip        # named by the formal harness
        bad = code != 0
        al, info, err = self.alloc, self.info, self.err
        m.d.comb += rq.ready.eq(skip | Mux(bad, err.ready, al.ready & info.ready))
        header_in = rq.valid & ~skip
        m.d.comb += [
            al.valid.eq(header_in & ~bad & info.ready),
            al.payload.src.eq(h.src), al.payload.tag.eq(h.tag), al.payload.etype.eq(h.etype),
            al.payload.op.eq(h.redop), al.payload.length.eq(h.length),
            al.payload.expected.eq(sum(mask[i] for i in range(P))),
            info.valid.eq(header_in & ~bad & al.ready),
            info.payload.mask.eq(mask), info.payload.static.eq(static), info.payload.group.eq(h.route.dyn.group),
            info.payload.index.eq(h.route.dyn.index), info.payload.offset.eq(h.route.dyn.offset),
            info.payload.addr.eq(h.route.mm.addr), info.payload.src.eq(h.src), info.payload.length.eq(h.length),
            info.payload.etype.eq(h.etype), info.payload.op.eq(h.redop),
        ]
        err_hdr = Signal(fmt.layout)
        m.d.comb += [err_hdr.opcode.eq(Opcode.ERROR), err_hdr.src.eq(h.src), err_hdr.tag.eq(h.tag),
                     err_hdr.route.uni.dst.eq(h.src), err_hdr.route.uni.code.as_value().eq(code),
                     err.payload.data.eq(err_hdr.as_value()), err.payload.last.eq(1),
                     err.valid.eq(header_in & bad)]
        with m.If(rq.valid & rq.ready):
            m.d.sync += skip.eq(~rq.payload.last)
        m.d.sync += self.bad_requests.eq(self.bad_requests + (err.valid & err.ready))
        return m


class ResultMerge(wiring.Component):
    """Step 5 of the flow: the buffer's packets (``pkt``) and the request errors (``err``, one flit each)
    onto ``out``, packet by packet; between packets an error goes first."""

    def __init__(self, *, flit_width: int):
        self.flit_width = flit_width
        fl = flit_layout(flit_width)
        super().__init__({"pkt": In(stream.Signature(fl)), "err": In(stream.Signature(fl)),
                          "out": Out(stream.Signature(fl))})

    def elaborate(self, platform):
        m = Module()
        pkt, err, out = self.pkt, self.err, self.out
        in_pkt = Signal()
        self.in_pkt = in_pkt        # named by the formal harness
        pick_err = ~in_pkt & err.valid
        m.d.comb += [
            out.payload.eq(Mux(pick_err, err.payload.as_value(), pkt.payload.as_value())),
            out.valid.eq(pick_err | pkt.valid),
            err.ready.eq(out.ready & pick_err),
            pkt.ready.eq(out.ready & ~pick_err),
        ]
        with m.If(pkt.valid & pkt.ready):
            m.d.sync += in_pkt.eq(~pkt.payload.last)
        return m


class ReductionEngine(wiring.Component):
    """Parameters: ``ports`` (4..128; past 64 the wide header format, which needs ``flit_width`` >= 256),
    ``entries``, ``max_length``, ``flit_width``, ``timeout``,
    ``outstanding``, ``acc_stages`` (see :class:`ReductionBuffer`), ``groups`` (static group-table entries, 1..256),
    ``translate_slots`` (outstanding translations, 2..256), ``row_bytes`` (the longest row of a GPU's
    buffers, for translated reads; default the 10-bit offset's reach), ``defer_translation`` (bool: ``dymultimem``
    reads leave untranslated as ``DYN_RED_READ``; ``translate`` stays idle).

    Ports: ``req``, ``resp`` (flit streams in), ``rd``, ``out`` (flit streams out), ``translate`` (AL-TLB
    client), ``cfg`` (static group writes), ``in_use``, counters ``stale``, ``mismatches``, ``aborts``,
    ``timeouts``, ``completed``, ``bad_requests``, ``bad_responses``, ``duplicates``.
    """

    def __init__(self, *, ports: int = 8, entries: int = 64, max_length: int = 16,
                 flit_width: int = DEFAULT_FLIT_WIDTH, timeout: int = 8192, outstanding: int | None = None,
                 groups: int = 16, translate_slots: int = 16, defer_translation: bool = False,
                 row_bytes: int | None = None, acc_stages: int = 3):
        if not isinstance(defer_translation, bool):
            raise ValueError(f"defer_translation must be a bool, got {defer_translation!r}")
        if not isinstance(ports, int) or not 4 <= ports <= MAX_SWITCH_PORTS:
            raise ValueError(f"ports must be an integer in 4..{MAX_SWITCH_PORTS}, got {ports!r}")
        if not isinstance(translate_slots, int) or not 2 <= translate_slots <= 256:
            raise ValueError(f"translate_slots must be an integer in 2..256, got {translate_slots!r}")
        if not isinstance(groups, int) or not 1 <= groups <= 256:
            raise ValueError(f"groups must be an integer in 1..256, got {groups!r}")
        if row_bytes is None:      # the reach of the 10-bit flit offset
            row_bytes = (1 << 10) * (flit_width // 8)
        if not isinstance(row_bytes, int) or not 1 <= row_bytes <= 1 << 24:
            raise ValueError(f"row_bytes must be an integer in 1..{1 << 24}, got {row_bytes!r}")
        self.row_bytes = row_bytes
        # The buffer validates the rest.
        self.buffer_params = dict(entries=entries, max_length=max_length, flit_width=flit_width,
                                  timeout=timeout, outstanding=outstanding, acc_stages=acc_stages, ports=ports)
        ReductionBuffer.check_params(**self.buffer_params)
        self.ports = ports
        self.max_length = max_length
        self.flit_width = flit_width
        self.groups = groups
        self.translate_slots = translate_slots
        self.defer_translation = defer_translation
        self.entries = entries
        self.entry_bits = max(1, (entries - 1).bit_length())
        fl = flit_layout(flit_width)
        super().__init__({
            "req": In(stream.Signature(fl)),
            "resp": In(stream.Signature(fl)),
            "rd": Out(stream.Signature(fl)),
            "out": Out(stream.Signature(fl)),
            "translate": Out(translate_signature(ports)),
            "cfg": In(stream.Signature(group_write_layout(ports))),
            **status_members(entries, ENGINE_COUNTERS),
        })

    def elaborate(self, platform):
        m = Module()
        P, W = self.ports, self.flit_width
        flit_bits = len(self.out.payload.as_value())
        m.submodules.buf = buf = ReductionBuffer(**self.buffer_params)
        for name in ("in_use", *BUFFER_COUNTERS):
            m.d.comb += getattr(self, name).eq(getattr(buf, name))

        # ---- 1. Requests: a good one allocates an entry and queues its reads, a bad one its ERROR.
        m.submodules.requests = reqs = RequestCheck(ports=P, max_length=self.max_length, flit_width=W,
                                                    groups=self.groups)
        m.submodules.info = info = fifo.SyncFIFO(width=read_info_layout(P).size, depth=4)
        m.submodules.errq = errq = fifo.SyncFIFO(width=flit_bits, depth=4)
        connect(m, flipped(self.req), reqs.req)
        connect(m, flipped(self.cfg), reqs.cfg)
        connect(m, reqs.alloc, buf.alloc)
        connect(m, reqs.info, info.w_stream)
        connect(m, reqs.err, errq.w_stream)

        # ---- 2. Fan-out: one destination per cycle, as the buffer grants entries.
        m.submodules.fanout = fanout = FanOut(ports=P)
        connect(m, info.r_stream, fanout.info)
        connect(m, buf.grant, fanout.grant)

        # ---- 3. RED_READs, translated here or deferred to the destination's egress.
        if self.defer_translation:
            m.submodules.reads = reads = DeferredReads(flit_width=W, ports=P)
        else:
            m.submodules.reads = reads = TranslatedReads(slots=self.translate_slots, flit_width=W,
                                                         row_bytes=self.row_bytes, ports=P)
            connect(m, reads.translate, flipped(self.translate))
        m.submodules.rdq = rdq = fifo.SyncFIFO(width=flit_bits, depth=2)
        connect(m, fanout.dest, reads.dest)
        connect(m, reads.rd, rdq.w_stream)
        connect(m, rdq.r_stream, flipped(self.rd))

        # ---- 4. Responses -> contributions (and translation aborts).
        m.submodules.responses = resps = ResponseFilter(ports=P, entries=self.entries, flit_width=W,
                                                        aborts=not self.defer_translation)
        connect(m, flipped(self.resp), resps.resp)
        connect(m, fanout.start, resps.start)
        if not self.defer_translation:
            connect(m, reads.abort, resps.abort)
        connect(m, resps.contrib, buf.contrib)

        # ---- 5. Results: buffer packets and request errors, packet by packet.
        m.submodules.results = results = ResultMerge(flit_width=W)
        m.submodules.outq = outq = fifo.SyncFIFO(width=flit_bits, depth=2)
        connect(m, buf.out, results.pkt)
        connect(m, errq.r_stream, results.err)
        connect(m, results.out, outq.w_stream)
        connect(m, outq.r_stream, flipped(self.out))
        m.d.comb += [self.bad_requests.eq(reqs.bad_requests), self.bad_responses.eq(resps.bad_responses),
                     self.duplicates.eq(resps.duplicates)]
        return m
