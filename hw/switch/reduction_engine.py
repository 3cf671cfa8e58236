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
   is cleared at allocation: the generation tags the row). A response of another generation, or for an
   entry never allocated, passes untouched: stale tags stay the buffer's business (``stale``). An
   answer for an entry whose fan-out was aborted after its allocation is passed too (stale in the
   buffer). A header-only packet followed at once by another header reads the row it just wrote: the
   ``answered`` read port is transparent.

   *Storage and cost.* ``asked`` and ``answered`` are ``lib.memory`` arrays (SRAM-like, one row per
   access: ``asked`` 1W at fan-out start + 1R per response header, ``answered`` 1R (transparent) + 1W),
   ``entries`` rows of ``gen_bits + ports`` bits each (``gen_bits = 16 - ceil(log2(entries))``): per
   entry ``2 * (gen_bits + ports)`` bits, e.g. 36 bits at 64 entries and 8 ports (2304 bits in all),
   144 bits at 256 entries and 64 ports (36,864 bits). Flip-flops would cost the same bits plus a
   ``ports``-wide write decoder per entry; the engine reads one row per cycle, which SRAM gives. The
   verdict adds 17 bits of registers (source, code, flags) and the 32-bit ``duplicates`` counter. Throughput stays one response flit per cycle; the response
   link is held only while an error-coded answer's abort waits for the buffer's ``contrib`` (the cycle
   after a timeout was held up), and payload flits wait behind translation aborts as before.
5. **Result** (``out``): the buffer's ``RED_RESP``/``ERROR`` packets and the request errors, packet by
   packet.

Every interface is a ``lib.stream`` with backpressure; ``rd`` and ``out`` leave through 2-flit FIFOs.
Throughput: one request header, one ``RED_READ`` and one response flit per cycle. ``outstanding=1`` is
the one-reduction-at-a-time baseline.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import first_set
from ..packet import (DEFAULT_FLIT_WIDTH, HEADER_BITS, MAX_LENGTH, MAX_PORTS, DeferredAddr, EType, ErrorCode,
                      HeaderLayout, Opcode, RedOp, flit_layout, rtl_header_error)
from .group_table import GroupTable, GroupWrite
from .reduction_buffer import BUFFER_COUNTERS, RTAG_BITS, ReductionBuffer, status_members
from .translate_if import translate_signature

__all__ = ["ReductionEngine", "ENGINE_COUNTERS"]

# The buffer's counters plus the engine's own (requests and responses it refused).
ENGINE_COUNTERS = BUFFER_COUNTERS + ("bad_requests", "bad_responses", "duplicates")


class ReductionEngine(wiring.Component):
    """Parameters: ``ports`` (4..64), ``entries``, ``max_length``, ``flit_width``, ``timeout``,
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
        if not isinstance(ports, int) or not 4 <= ports <= MAX_PORTS:
            raise ValueError(f"ports must be an integer in 4..{MAX_PORTS}, got {ports!r}")
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
                                  timeout=timeout, outstanding=outstanding, acc_stages=acc_stages)
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
            "translate": Out(translate_signature()),
            "cfg": In(stream.Signature(GroupWrite)),
            **status_members(entries, ENGINE_COUNTERS),
        })

    def _request_code(self, m, h, flit, static, is_ldr, group_mask):
        """The answer to request header ``h`` (its ``flit``), by the priority of the docstring's table."""
        header_code = rtl_header_error(h, n_ports=self.ports, max_payload=self.max_length, group_mask=group_mask)
        outsider = static & ~(group_mask >> h.src)[0]      # a src past the ports is no member either
        base_code = Mux((header_code == 0) & outsider, ErrorCode.ISOLATION.value, header_code)
        code = Signal(8)
        m.d.comb += code.eq(Mux(flit.poison, ErrorCode.POISONED.value,
                            Mux(~is_ldr, ErrorCode.UNKNOWN_OPCODE.value,
                                Mux((h.length == 0) | (h.length > self.max_length), ErrorCode.BAD_LENGTH.value,
                                    Mux(~flit.last, ErrorCode.LENGTH_MISMATCH.value, base_code)))))
        return code

    def elaborate(self, platform):
        m = Module()
        P, W, S = self.ports, self.flit_width, self.translate_slots
        flit_bits = len(self.out.payload.as_value())
        m.submodules.buf = buf = ReductionBuffer(**self.buffer_params)
        m.submodules.groups = groups = GroupTable(n_ports=P, entries=self.groups, n_lookups=1)
        wiring.connect(m, wiring.flipped(self.cfg), groups.cfg)
        for name in ("in_use", *BUFFER_COUNTERS):
            m.d.comb += getattr(self, name).eq(getattr(buf, name))

        # ---- 1. Requests.
        rq = self.req
        h = Signal(HeaderLayout)
        m.d.comb += h.eq(rq.payload.data[0:HEADER_BITS])
        m.d.comb += groups.lookup_handle[0].eq(h.route.mm.group)
        static = h.opcode == Opcode.MM_LD_REDUCE
        is_ldr = static | (h.opcode == Opcode.DYN_LD_REDUCE)
        code = self._request_code(m, h, rq.payload, static, is_ldr, groups.lookup_mask[0])
        mask = Signal(P)
        m.d.comb += mask.eq(Mux(static, groups.lookup_mask[0], h.route.dyn.mask[0:P]))
        expected = Signal(range(P + 1))
        m.d.comb += expected.eq(sum(mask[i] for i in range(P)))

        info_layout = data.StructLayout({"mask": P, "static": 1, "group": 8, "index": 18, "offset": 10,
                                         "addr": 48, "src": 6, "length": 5, "etype": EType, "op": RedOp})
        m.submodules.info = info = fifo.SyncFIFO(width=info_layout.size, depth=4)
        m.submodules.errq = errq = fifo.SyncFIFO(width=flit_bits, depth=4)
        skip = Signal()                       # dropping the trailing flits of a malformed request
        bad = code != 0
        ok_path = buf.alloc.ready & info.w_rdy
        m.d.comb += rq.ready.eq(skip | Mux(bad, errq.w_rdy, ok_path))
        header_in = rq.valid & ~skip
        m.d.comb += [
            buf.alloc.valid.eq(header_in & ~bad & info.w_rdy),
            buf.alloc.payload.src.eq(h.src),
            buf.alloc.payload.tag.eq(h.tag),
            buf.alloc.payload.etype.eq(h.etype),
            buf.alloc.payload.op.eq(h.redop),
            buf.alloc.payload.length.eq(h.length),
            buf.alloc.payload.expected.eq(expected),
        ]
        info_w = Signal(info_layout)
        m.d.comb += [
            info_w.mask.eq(mask), info_w.static.eq(static), info_w.group.eq(h.route.dyn.group),
            info_w.index.eq(h.route.dyn.index), info_w.offset.eq(h.route.dyn.offset),
            info_w.addr.eq(h.route.mm.addr), info_w.src.eq(h.src), info_w.length.eq(h.length),
            info_w.etype.eq(h.etype), info_w.op.eq(h.redop),
            info.w_data.eq(info_w),
            info.w_en.eq(header_in & ~bad & buf.alloc.ready),
        ]
        err_hdr = Signal(HeaderLayout)
        m.d.comb += [err_hdr.opcode.eq(Opcode.ERROR), err_hdr.src.eq(h.src), err_hdr.tag.eq(h.tag),
                     err_hdr.route.uni.dst.eq(h.src), err_hdr.route.uni.code.as_value().eq(code)]
        err_flit = Signal(flit_layout(W))
        m.d.comb += [err_flit.data.eq(err_hdr.as_value()), err_flit.last.eq(1),
                     errq.w_data.eq(err_flit), errq.w_en.eq(header_in & bad & errq.w_rdy)]
        with m.If(rq.valid & rq.ready):
            m.d.sync += skip.eq(~rq.payload.last)
        m.d.sync += self.bad_requests.eq(self.bad_requests + (header_in & bad & errq.w_rdy))

        # ---- 2. Fan-out: one destination per cycle.
        fo_valid = Signal()
        fo = Signal(info_layout)
        fo_rtag = Signal(RTAG_BITS)
        _, dst = first_set(m, fo.mask, name="fo_dst")
        dst_bit = Signal(P)
        m.d.comb += dst_bit.eq(Const(1, P) << dst)
        last_dst = (fo.mask & ~dst_bit) == 0
        issued = Signal()
        load = (~fo_valid | (issued & last_dst)) & buf.grant.valid & info.r_rdy
        m.d.comb += [buf.grant.ready.eq(load), info.r_en.eq(load)]
        with m.If(load):
            m.d.sync += [fo_valid.eq(1), fo.eq(info.r_data), fo_rtag.eq(buf.grant.payload.rtag)]
        with m.Elif(issued):
            m.d.sync += fo.mask.eq(fo.mask & ~dst_bit)
            with m.If(last_dst):
                m.d.sync += fo_valid.eq(0)

        # Response tracking (see the module docstring): when an entry's fan-out starts, its generation and
        # destination mask go to ``asked``; ``answered`` holds, per entry, the sources that have answered,
        # tagged with the generation they answered (a row of another generation counts as empty, so
        # nothing needs clearing at allocation).
        EB, N = self.entry_bits, self.entries
        GB = RTAG_BITS - EB
        track_layout = data.StructLayout({"gen": GB, "mask": P})
        m.submodules.asked = asked = memory.Memory(shape=track_layout, depth=N, init=[])
        m.submodules.answered = answered = memory.Memory(shape=track_layout, depth=N, init=[])
        ask_w = asked.write_port()
        info_r = Signal(info_layout)
        m.d.comb += [info_r.eq(info.r_data),
                     ask_w.addr.eq(buf.grant.payload.rtag[0:EB]), ask_w.data.gen.eq(buf.grant.payload.rtag[EB:]),
                     ask_w.data.mask.eq(info_r.mask), ask_w.en.eq(load)]

        def red_read(opcode, rtag, dst_port, src, length, etype, op, addr):
            hdr = Signal(HeaderLayout)
            m.d.comb += [hdr.opcode.as_value().eq(opcode), hdr.src.eq(src), hdr.tag.eq(rtag[0:8]),
                         hdr.length.eq(length), hdr.etype.eq(etype), hdr.redop.eq(op),
                         hdr.route.uni.dst.eq(dst_port), hdr.route.uni.xtag.eq(rtag[8:16]),
                         hdr.route.uni.addr.eq(addr)]
            f = Signal(flit_layout(W))
            m.d.comb += [f.data.eq(hdr.as_value()), f.last.eq(1)]
            return f

        flit_bytes = W // 8
        m.submodules.rdq = rdq = fifo.SyncFIFO(width=flit_bits, depth=2)
        m.d.comb += [self.rd.valid.eq(rdq.r_rdy), self.rd.payload.eq(rdq.r_data), rdq.r_en.eq(self.rd.ready)]
        # Translation aborts for section 4 (none when translation is deferred).
        t_abort_valid = Signal()
        t_abort_rtag = Signal(RTAG_BITS)
        t_abort_code = Signal(8)
        t_abort_taken = Signal()

        if self.defer_translation:
            # Every read leaves straight from the fan-out: static ones as RED_READ at route.mm.addr,
            # dymultimem ones as DYN_RED_READ naming the row; the destination's egress translates.
            deferred = Signal(DeferredAddr)
            m.d.comb += [deferred.group.eq(fo.group), deferred.index.eq(fo.index),
                         deferred.byte_offset.eq(fo.offset * flit_bytes)]
            direct_flit = red_read(Mux(fo.static, Opcode.RED_READ.value, Opcode.DYN_RED_READ.value), fo_rtag,
                                   dst, fo.src, fo.length, fo.etype, fo.op,
                                   Mux(fo.static, fo.addr, deferred.as_value()))
            m.d.comb += [rdq.w_en.eq(fo_valid & rdq.w_rdy), rdq.w_data.eq(direct_flit),
                         issued.eq(fo_valid & rdq.w_rdy)]
        else:
            # Translation slots, reused in order; a slot's context says what its response is for.
            ctx_layout = data.StructLayout({"rtag": RTAG_BITS, "dst": 6, "src": 6, "length": 5, "etype": EType,
                                            "op": RedOp, "offset": 10})
            m.submodules.ctx = ctx = memory.Memory(shape=ctx_layout, depth=S, init=[])
            ctx_w = ctx.write_port()
            ctx_r = ctx.read_port(domain="comb")
            slot_busy = Signal(S)
            next_slot = Signal(range(S))
            tq = self.translate.req
            m.d.comb += [
                tq.valid.eq(fo_valid & ~fo.static & ~slot_busy.bit_select(next_slot, 1)),
                tq.payload.group.eq(fo.group), tq.payload.index.eq(fo.index), tq.payload.dst.eq(dst),
                tq.payload.src.eq(fo.src), tq.payload.tag.eq(next_slot),
            ]
            t_issue = tq.valid & tq.ready
            m.d.comb += [
                ctx_w.addr.eq(next_slot), ctx_w.en.eq(t_issue),
                ctx_w.data.rtag.eq(fo_rtag), ctx_w.data.dst.eq(dst), ctx_w.data.src.eq(fo.src),
                ctx_w.data.length.eq(fo.length), ctx_w.data.etype.eq(fo.etype), ctx_w.data.op.eq(fo.op),
                ctx_w.data.offset.eq(fo.offset),
            ]
            with m.If(t_issue):
                m.d.sync += next_slot.eq(Mux(next_slot == S - 1, 0, next_slot + 1))

            static_flit = red_read(Opcode.RED_READ.value, fo_rtag, dst, fo.src, fo.length, fo.etype, fo.op,
                                   fo.addr)
            static_valid = fo_valid & fo.static

            # ---- 3. Translation responses -> RED_READ, or an abort of the entry.
            tr = self.translate.resp
            m.d.comb += ctx_r.addr.eq(tr.payload.tag)
            c = ctx_r.data
            # A read that does not fit in its row is OUT_OF_BOUNDS, never a read of the next row.
            oob = (c.offset + c.length) * flit_bytes > self.row_bytes
            tr_ok = (tr.payload.code == ErrorCode.NONE) & ~oob
            dyn_flit = red_read(Opcode.RED_READ.value, c.rtag, c.dst, c.src, c.length, c.etype, c.op,
                                (tr.payload.addr + c.offset * flit_bytes)[0:48])
            dyn_valid = tr.valid & tr_ok
            m.d.comb += [t_abort_valid.eq(tr.valid & ~tr_ok), t_abort_rtag.eq(c.rtag),
                         t_abort_code.eq(Mux(tr.payload.code == ErrorCode.NONE, ErrorCode.OUT_OF_BOUNDS.value,
                                             tr.payload.code))]

            # RED_READ merge (translated first) into the rd FIFO.
            m.d.comb += [
                rdq.w_en.eq((dyn_valid | static_valid) & rdq.w_rdy),
                rdq.w_data.eq(Mux(dyn_valid, dyn_flit.as_value(), static_flit.as_value())),
            ]
            static_issue = static_valid & ~dyn_valid & rdq.w_rdy
            m.d.comb += issued.eq(t_issue | static_issue)
            tr_taken = Mux(tr_ok, rdq.w_rdy, t_abort_taken)
            m.d.comb += tr.ready.eq(tr_taken)
            set_busy = Mux(t_issue, Const(1, S) << next_slot, 0)
            clr_busy = Mux(tr.valid & tr_taken, Const(1, S) << tr.payload.tag, 0)
            m.d.sync += slot_busy.eq((slot_busy | set_busy) & ~clr_busy)

        # ---- 4. Responses -> contributions.
        rs = self.resp
        rh = Signal(HeaderLayout)
        m.d.comb += rh.eq(rs.payload.data[0:HEADER_BITS])
        in_payload = Signal()          # past the header of a RED_READ_RESP
        dropping = Signal()            # past the header of another packet: its flits are dropped
        r_rtag = Signal(RTAG_BITS)
        r_len = Signal(5)
        r_etype = Signal(3)
        r_k = Signal(5)
        r_src = Signal(6)
        r_code = Signal(8)
        r_in_range = Signal()
        vcyc = Signal()                # the cycle after a RED_READ_RESP header: its tracking rows are out
        r_drop = Signal()              # the verdict on the packet, for its flits after that cycle
        rh_rtag = Cat(rh.tag, rh.route.uni.xtag)
        hdr_take = Signal()
        ask_r = asked.read_port()
        ans_w = answered.write_port()
        ans_r = answered.read_port(transparent_for=(ans_w,))
        m.d.comb += [ask_r.addr.eq(rh_rtag[0:EB]), ask_r.en.eq(hdr_take),
                     ans_r.addr.eq(rh_rtag[0:EB]), ans_r.en.eq(hdr_take)]

        # The verdict, in the cycle after the header (the rows are registered reads).
        cb = buf.contrib
        cp = cb.payload
        ask_d, ans_d = ask_r.data, ans_r.data
        r_gen = r_rtag[EB:RTAG_BITS]
        tracked = Signal()
        src_asked = Signal()
        same_gen = Signal()
        unasked = Signal()
        dup = Signal()
        m.d.comb += [
            tracked.eq(r_in_range & (ask_d.gen == r_gen) & (ask_d.mask != 0)),
            src_asked.eq((r_src < P) & (ask_d.mask >> r_src)[0]),
            same_gen.eq(ans_d.gen == r_gen),
            unasked.eq(tracked & ~src_asked),
            dup.eq(tracked & src_asked & same_gen & (ans_d.mask >> r_src)[0]),
        ]
        v_drop = unasked | dup
        errored = r_code != ErrorCode.NONE.value
        v_abort = Signal()            # an error-coded answer: abort its entry with that code
        v_hold = Signal()             # ... and the contribution port cannot take it this cycle
        v_done = Signal()
        m.d.comb += [v_abort.eq(vcyc & ~v_drop & errored), v_hold.eq(v_abort & ~cb.ready),
                     v_done.eq(vcyc & ~v_hold)]
        drop_now = Mux(vcyc, v_drop | errored, r_drop)
        m.d.comb += [
            ans_w.addr.eq(r_rtag[0:EB]), ans_w.data.gen.eq(r_gen),
            ans_w.data.mask.eq(Mux(same_gen, ans_d.mask, 0) | (Const(1, P) << r_src)[0:P]),
            ans_w.en.eq(v_done & tracked & ~v_drop),
        ]
        with m.If(v_done):
            m.d.sync += r_drop.eq(v_drop | errored)

        is_payload = rs.valid & in_payload
        # Contribution port: a response's abort first (it holds the response link while it waits), then
        # translation aborts, then payload flits (which wait for a free slot).
        with m.If(v_abort):
            m.d.comb += [cb.valid.eq(1), cp.rtag.eq(r_rtag), cp.abort.eq(1), cp.code.eq(r_code)]
        if not self.defer_translation:
            with m.Elif(t_abort_valid):
                m.d.comb += [cb.valid.eq(1), cp.rtag.eq(t_abort_rtag), cp.abort.eq(1),
                             cp.code.eq(t_abort_code)]
                m.d.comb += t_abort_taken.eq(cb.ready)
        with m.Elif(is_payload & ~drop_now):
            poison = rs.payload.last & rs.payload.poison
            m.d.comb += [cb.valid.eq(1), cp.rtag.eq(r_rtag), cp.flit.eq(r_k), cp.length.eq(r_len),
                         cp.etype.eq(r_etype), cp.data.eq(rs.payload.data), cp.abort.eq(poison),
                         cp.code.eq(Mux(poison, ErrorCode.LENGTH_MISMATCH.value, 0))]
        m.d.comb += rs.ready.eq(Mux(in_payload, Mux(drop_now, ~v_hold, ~t_abort_valid & cb.ready),
                                    dropping | ~v_hold))
        take = rs.valid & rs.ready
        is_resp = rh.opcode == Opcode.RED_READ_RESP
        # The code a response aborts its entry with (NONE: it contributes). A header-only answer without a
        # code lacks its payload (cut, poisoned or not): LENGTH_MISMATCH; a poisoned error answer: POISONED.
        in_code = rh.route.uni.code.as_value()
        hdr_code = Mux(rs.payload.last & (in_code == ErrorCode.NONE.value), ErrorCode.LENGTH_MISMATCH.value,
                       Mux(rs.payload.last & rs.payload.poison, ErrorCode.POISONED.value, in_code))
        m.d.comb += hdr_take.eq(take & ~in_payload & ~dropping)
        with m.If(take):
            with m.If(in_payload | dropping):
                m.d.sync += r_k.eq(Mux(r_k == MAX_LENGTH, r_k, r_k + 1))
                with m.If(rs.payload.last):
                    m.d.sync += [in_payload.eq(0), dropping.eq(0)]
            with m.Else():
                m.d.sync += [r_rtag.eq(rh_rtag), r_len.eq(rh.length), r_src.eq(rh.src), r_code.eq(hdr_code),
                             r_in_range.eq(rh_rtag[0:EB] < N if N < 1 << EB else 1),
                             r_etype.eq(rh.etype.as_value()), r_k.eq(0),
                             in_payload.eq(is_resp & ~rs.payload.last),
                             dropping.eq(~is_resp & ~rs.payload.last)]
        m.d.sync += vcyc.eq(v_hold | (hdr_take & is_resp))
        m.d.sync += [
            self.bad_responses.eq(self.bad_responses + (hdr_take & ~is_resp) + (v_done & unasked)),
            self.duplicates.eq(self.duplicates + (v_done & dup)),
        ]

        # ---- 5. Results: buffer packets and request errors, packet by packet, into the out FIFO.
        m.submodules.outq = outq = fifo.SyncFIFO(width=flit_bits, depth=2)
        in_pkt = Signal()
        pick_err = ~in_pkt & errq.r_rdy
        m.d.comb += [
            outq.w_data.eq(Mux(pick_err, errq.r_data, buf.out.payload.as_value())),
            outq.w_en.eq(outq.w_rdy & (pick_err | buf.out.valid)),
            errq.r_en.eq(outq.w_rdy & pick_err),
            buf.out.ready.eq(outq.w_rdy & ~pick_err),
            self.out.valid.eq(outq.r_rdy), self.out.payload.eq(outq.r_data), outq.r_en.eq(self.out.ready),
        ]
        with m.If(buf.out.valid & buf.out.ready):
            m.d.sync += in_pkt.eq(~buf.out.payload.last)
        return m
