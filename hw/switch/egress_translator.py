"""The egress translator: the last block of a DySHARP switch's request network before the link to GPU
``port``. It rewrites the untranslated dynamic requests into physical ones with this port's AL-TLB.

* ``DYN_ST`` -> ``WRITE{dst=port, src, tag, length, addr = row + route.dyn.offset * flit_bytes}``, same
  payload flits.
* ``DYN_RED_READ`` -> ``RED_READ{dst=port, src, tag, xtag, length, etype, redop,
  addr = row + DeferredAddr.byte_offset}`` (header only).
* Any other packet passes unchanged, bit for bit (poisoned packets too: the receiver drops them).

The row is ``tr.resp.addr`` for the request ``{group, index, dst=port, src=header.src, tag=slot}``.
Every row of GPU ``port`` is at most ``row_bytes`` long (the row pitch of its buffers, the same for every
group): an access that does not fit in its row -- ``(offset + length) * flit_bytes > row_bytes`` for
``DYN_ST``, ``byte_offset + length * flit_bytes > row_bytes`` for ``DYN_RED_READ`` -- is answered
``OUT_OF_BOUNDS`` like an index past the group's ``rows`` (when the translation itself succeeds: the
AL-TLB's own error, e.g. ``ISOLATION``, wins), never as an access into the next row.

Contract
--------
* Storage: ``slots`` packet buffers of ``max_payload + 1`` flits (one ``lib.memory``). A packet takes a
  slot when its head flit is accepted and frees it when its last flit leaves. When every slot is busy
  ``i.ready`` is low (backpressure into the request network); nothing is ever dropped for lack of room.
  ``i.ready`` is also always high in the middle of a packet (the packet's slot is already held).
* Ordering: packets from one source (``header.src``) leave in arrival order, on ``o`` and on ``err``
  each. A packet may overtake older packets of *other* sources (a hit flows under a miss): the oldest
  slot whose translation is back (or that needs none) and that has no older, not yet departed slot of
  the same source leaves next (an age matrix), and each such overtake is counted in ``OVERTAKES``.
  Packets leave whole (``o`` carries one packet at a time) and cut-through: a packet starts leaving as
  soon as its header is translated, its payload may still be arriving.
* Latency (no stalls): a packet that needs no translation leaves 1 cycle after its header is accepted on
  ``i``; a translated one ``1 + hit latency`` cycles after (the request reaches ``tr.req`` in the cycle
  the header is accepted, the AL-TLB answers 3 cycles later, 1 cycle to register the answer): **4
  cycles** header in -> header out at an AL-TLB hit.
* Throughput: one flit per cycle in and out while translations hit, header-only packets included. A
  header-only packet holds its slot for 4 cycles at a hit, so line rate needs ``slots >= 5``; the default
  8 leaves room for a few slower answers. A miss holds its slot until answered; ``slots`` is how many
  packets can wait under misses before ``i`` backpressures.
* Errors: a translation error on ``DYN_ST`` drops the packet whole and sends ``ERROR{dst=src, src=port,
  tag, code}`` (header only) on ``err``; on ``DYN_RED_READ`` it sends ``RED_READ_RESP{dst=src, src=port,
  tag, xtag, etype, redop, code}`` with ``length`` 0 on ``err`` (header only: the response network checks
  a response's framing against its length). The error packet is made once the whole request has arrived;
  if its last flit is poisoned (the request network has already answered it) the packet is dropped
  silently. Each is counted in ``XLATE_ERRORS``. A ``tr.resp`` whose tag names no
  slot waiting for a translation is ignored. ``tr.resp`` is always ready.
* Framing: a packet longer than its slot (more than ``max_payload + 1`` flits, which the request
  network never forwards) keeps its first ``max_payload`` flits (header included) and its last one, marked ``poison``.
* ``counters``: 32-bit, indexed by :class:`EgressCounter`.
"""

import enum as py_enum
from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import first_set, onehot_to_index
from ..packet import (DEFAULT_FLIT_WIDTH, FLIT_WIDTHS, MAX_LENGTH, MAX_SWITCH_PORTS, ErrorCode, Opcode, flit_layout,
                      header_format)
from .translate_if import TAG_BITS, translate_request_layout, translate_signature

__all__ = ["EgressTranslator", "EgressCounter", "MAX_SLOTS", "HIT_LATENCY", "DEFAULT_ROW_BYTES",
           "MAX_ROW_BYTES"]

MAX_SLOTS = 64          # the age matrix is slots x slots
DEFAULT_ROW_BYTES = 14336   # one DeepSeek-V3 BF16 row (7168 x 2 B), the longest row of the MoE layouts
MAX_ROW_BYTES = 1 << 24
HIT_LATENCY = 4         # header in -> header out at a 3-cycle AL-TLB hit, no stalls


class EgressCounter(py_enum.IntEnum):
    TRANSLATED = 0      #: packets rewritten (DYN_ST -> WRITE, DYN_RED_READ -> RED_READ) and sent
    PASSED = 1          #: packets forwarded unchanged
    XLATE_ERRORS = 2    #: translation errors (the request dropped; an error packet on ``err`` unless poisoned)
    OVERTAKES = 3       #: packets that left before an older packet of another source
    MAX_OCCUPANCY = 4   #: high-water mark of slots in use


class EgressTranslator(wiring.Component):
    """Rewrites ``DYN_ST``/``DYN_RED_READ`` for GPU ``port`` with the AL-TLB on ``tr``; see the module.

    Parameters: ``port`` (0..ports-1; None makes it a ``port`` strap input, ``In(range(ports))``, that the
    switch ties to a constant, so that its N translators are one Verilog module), ``ports`` (2..128; past 64 the wide header, which needs ``flit_width`` 256 or 512), ``flit_width`` (128/256/512), ``max_payload``
    (payload flits per packet, 1..31), ``slots`` (packet buffers and outstanding translations, 2..64;
    >= 5 for line rate at a 3-cycle hit), ``row_bytes`` (the longest row of GPU ``port``'s buffers,
    1..2**24 bytes; default 14336, a DeepSeek-V3 BF16 row, the :class:`LinearTranslator` default):
    accesses that run past it are ``OUT_OF_BOUNDS``.

    Ports: ``i`` (flit stream in), ``o`` (flit stream to the GPU), ``err`` (error packets, response class),
    ``tr`` (AL-TLB client), ``counters``.
    """

    def __init__(self, *, port: int | None = 0, ports: int = 8, flit_width: int = DEFAULT_FLIT_WIDTH,
                 max_payload: int = 16, slots: int = 8, row_bytes: int = DEFAULT_ROW_BYTES):
        if not isinstance(ports, int) or not 2 <= ports <= MAX_SWITCH_PORTS:
            raise ValueError(f"ports must be an integer in 2..{MAX_SWITCH_PORTS}, got {ports!r}")
        if port is not None and not (isinstance(port, int) and 0 <= port < ports):
            raise ValueError(f"port must be None (a strap input) or an integer in 0..{ports - 1} (ports={ports}), "
                             f"got {port!r}")
        if flit_width not in FLIT_WIDTHS:
            raise ValueError(f"flit_width must be one of {FLIT_WIDTHS}, got {flit_width!r}")
        self.fmt = header_format(ports, flit_width)   # past 64 ports the wide header (256-bit flits)
        if not isinstance(max_payload, int) or not 1 <= max_payload <= MAX_LENGTH:
            raise ValueError(f"max_payload must be an integer in 1..{MAX_LENGTH}, got {max_payload!r}")
        if not isinstance(slots, int) or not 2 <= slots <= min(MAX_SLOTS, 1 << TAG_BITS):
            raise ValueError(f"slots must be an integer in 2..{MAX_SLOTS}, got {slots!r}")
        if not isinstance(row_bytes, int) or not 1 <= row_bytes <= MAX_ROW_BYTES:
            raise ValueError(f"row_bytes must be an integer in 1..{MAX_ROW_BYTES}, got {row_bytes!r}")
        self.row_bytes = row_bytes
        if port is not None:
            self.port = port
        self.ports, self.flit_width = ports, flit_width
        self.max_payload, self.slots = max_payload, slots
        self.capacity = max_payload + 1        # flits per slot
        fl = flit_layout(flit_width)
        super().__init__({
            **({"port": In(range(ports))} if port is None else {}),
            "i": In(stream.Signature(fl)),
            "o": Out(stream.Signature(fl)),
            "err": Out(stream.Signature(fl)),
            "tr": Out(translate_signature(ports)),
            "counters": Out(data.ArrayLayout(32, len(EgressCounter))),
        })

    # -----------------------------------------------------------------------------------------------------
    def elaborate(self, platform):
        m = Module()
        st = SimpleNamespace()    # the datapath's signals, shared by the sub-blocks below
        S, C = self.slots, self.capacity
        fl = flit_layout(self.flit_width)
        m.submodules.mem = mem = memory.Memory(shape=fl, depth=S * C, init=[])
        st.wp = mem.write_port()
        st.rp = mem.read_port(domain="comb")   # cut-through: a flit is readable the cycle after its write
        # TR queue: the translation request of each accepted header (never full: one entry per busy slot).
        m.submodules.trq = st.trq = fifo.SyncFIFO(width=data.Layout.cast(translate_request_layout(self.ports)).size,
                                                  depth=S)
        m.submodules.errq = st.errq = fifo.SyncFIFO(width=fl.size, depth=2)
        self._slot_state(m, st)
        self._input(m, st)
        self._translations(m, st)
        self._select(m, st)
        self._output(m, st)
        self._count(m, st)
        return m

    # Per-slot state (registers; the payload flits are in the memory).
    def _slot_state(self, m, st):
        S = self.slots
        st.busy = Signal(S)          # holds a packet
        st.gone = Signal(S)          # its departure has started (or it was dropped)
        st.needs = Signal(S)         # needs a translation (DYN_ST / DYN_RED_READ)
        st.done = Signal(S)          # translation answered
        st.poisoned = Signal(S)      # its last flit arrived poisoned
        st.oob = Signal(S)           # its access runs past the end of its row (answered OUT_OF_BOUNDS)
        st.src = Array(Signal(self.fmt.port_bits, name=f"src{s}") for s in range(S))
        st.code = Array(Signal(ErrorCode, name=f"code{s}") for s in range(S))
        st.row = Array(Signal(48, name=f"row{s}") for s in range(S))
        # older[s] bit t: slot t was allocated before slot s (valid while both are busy).
        st.older = [Signal(S, name=f"older{s}") for s in range(S)]

    # ---- Input: allocate a slot per head flit, write the flits, queue the translation request.
    def _input(self, m, st):
        S, C = self.slots, self.capacity
        i, wp, trq = self.i, st.wp, st.trq
        st.in_active = in_active = Signal()          # between a head flit and its packet's last flit
        st.in_slot = in_slot = Signal(range(S))
        st.in_count = in_count = Signal(range(C + 1))  # flits of in_slot final in memory (readable)
        in_over = Signal()                             # a non-last flit already landed at position C-1

        free_any, free_idx = first_set(m, ~st.busy, name="free")
        fmt = self.fmt
        h = Signal(fmt.layout)
        m.d.comb += h.eq(i.payload.data[:fmt.bits])
        is_st = h.opcode == Opcode.DYN_ST
        is_rr = h.opcode == Opcode.DYN_RED_READ
        deferred = data.View(fmt.deferred, h.route.uni.addr[:data.Layout.cast(fmt.deferred).size])

        head = ~in_active
        m.d.comb += i.ready.eq(in_active | (free_any & trq.w_rdy))
        take = i.valid & i.ready
        slot = Signal(range(S))
        m.d.comb += slot.eq(Mux(head, free_idx, in_slot))
        pos = Mux(head, 0, in_count)                   # in_count <= C-1 while a packet is open
        at_end = pos == C - 1
        poison = i.payload.poison | (i.payload.last & in_over)
        m.d.comb += [
            wp.addr.eq(slot * C + pos), wp.en.eq(take),
            wp.data.data.eq(i.payload.data), wp.data.last.eq(i.payload.last),
            wp.data.poison.eq(poison),
        ]
        req = Signal(translate_request_layout(self.ports))
        m.d.comb += [
            req.group.eq(Mux(is_st, h.route.dyn.group, deferred.group)),
            req.index.eq(Mux(is_st, h.route.dyn.index, deferred.index)),
            req.dst.eq(self.port), req.src.eq(h.src), req.tag.eq(free_idx),
        ]
        # The request goes straight to ``tr.req`` when the queue is empty (no added latency) and into
        # the queue otherwise or when ``tr.req`` is not ready; either way it is offered until taken.
        st.new_req = new_req = Signal()
        m.d.comb += new_req.eq(take & head & (is_st | is_rr))
        st.bypass = bypass = Signal()
        m.d.comb += [bypass.eq(new_req & ~trq.r_rdy & self.tr.req.ready),
                     trq.w_data.eq(req), trq.w_en.eq(new_req & ~bypass)]
        st.new_req_payload = req
        # Row bound: the access's end byte, (offset + length) flits for DYN_ST, byte_offset + length flits
        # for DYN_RED_READ, against the row length (a static parameter: the same for every group).
        fshift = (self.flit_width // 8).bit_length() - 1
        end = Signal(range(((1 << 16) + MAX_LENGTH) << fshift), name="access_end")
        m.d.comb += end.eq(Mux(is_st, (h.route.dyn.offset + h.length) << fshift,
                               deferred.byte_offset + (h.length << fshift)))
        oob = Signal()
        m.d.comb += oob.eq(end > self.row_bytes)
        with m.If(take):
            m.d.sync += [in_active.eq(~i.payload.last), in_slot.eq(slot)]
            with m.If(i.payload.last):
                m.d.sync += [in_over.eq(0), in_count.eq(0)]
                m.d.sync += st.poisoned.bit_select(slot, 1).eq(poison)
            with m.Elif(at_end):
                m.d.sync += in_over.eq(1)              # overflow: keep overwriting position C-1
            with m.Else():
                m.d.sync += in_count.eq(pos + 1)
        st.alloc = alloc = Signal(S)                 # one-hot: the slot taken this cycle
        m.d.comb += alloc.eq(Mux(take & head, Const(1, S) << free_idx, 0))
        for s in range(S):
            with m.If(alloc[s]):
                m.d.sync += [
                    st.busy[s].eq(1), st.gone[s].eq(0), st.done[s].eq(0),
                    st.needs[s].eq(is_st | is_rr), st.src[s].eq(h.src), st.oob[s].eq(oob),
                    st.code[s].eq(0), st.older[s].eq(st.busy),
                ]
            for t in range(S):
                if t != s:
                    with m.If(alloc[t]):
                        m.d.sync += st.older[s][t].eq(0)

    # ---- Translations: requests from the queue, answers matched by tag (= slot), in any order.
    def _translations(self, m, st):
        S = self.slots
        trq, tr = st.trq, self.tr
        m.d.comb += [tr.req.valid.eq(trq.r_rdy | st.new_req),
                     tr.req.payload.eq(Mux(trq.r_rdy, trq.r_data, st.new_req_payload)),
                     trq.r_en.eq(tr.req.ready),
                     tr.resp.ready.eq(1)]
        rtag = tr.resp.payload.tag
        for s in range(S):
            hit = tr.resp.valid & (rtag == s) & st.busy[s] & st.needs[s] & ~st.done[s]
            code = tr.resp.payload.code.as_value()
            with m.If(hit):
                m.d.sync += [st.done[s].eq(1), st.row[s].eq(tr.resp.payload.addr),
                             st.code[s].eq(Mux((code == ErrorCode.NONE.value) & st.oob[s],
                                               ErrorCode.OUT_OF_BOUNDS.value, code))]

    # ---- Selection: the oldest slot ready to leave with no older pending slot of its source.
    def _select(self, m, st):
        S = self.slots
        pending = Signal(S)
        m.d.comb += pending.eq(st.busy & ~st.gone)
        complete = Signal(S)         # every flit has arrived
        for s in range(S):
            m.d.comb += complete[s].eq(st.busy[s] & ~(st.in_active & (st.in_slot == s)))
        is_err = Signal(S)
        eligible = Signal(S)
        st.other_older = other_older = Signal(S)   # an older pending slot of another source exists
        for s in range(S):
            same = Cat(*(st.src[t] == st.src[s] for t in range(S)))
            older = st.older[s] & pending
            blocked = (older & same).any()
            m.d.comb += [
                other_older[s].eq((older & ~same).any()),
                is_err[s].eq(st.needs[s] & (st.code[s] != ErrorCode.NONE)),
                eligible[s].eq(pending[s] & ~blocked & (~st.needs[s] | st.done[s]) &
                               (~is_err[s] | (complete[s] & st.errq.w_rdy))),
            ]
        oldest = Signal(S)
        for s in range(S):
            m.d.comb += oldest[s].eq(eligible[s] & ~(st.older[s] & eligible).any())
        st.pick_any = Signal()
        st.pick = Signal(range(S))
        st.pick_err = Signal()
        m.d.comb += [st.pick_any.eq(eligible.any()), st.pick.eq(onehot_to_index(oldest)),
                     st.pick_err.eq((oldest & is_err).any())]

    # ---- Output: one packet at a time on ``o``; error packets on ``err``.
    def _output(self, m, st):
        S, C = self.slots, self.capacity
        o, rp, errq = self.o, st.rp, st.errq
        cur_active = Signal()
        cur_slot = Signal(range(S))
        cur_idx = Signal(range(C))
        idle = ~cur_active
        rd_slot = Signal(range(S))
        rd_idx = Signal(range(C))
        m.d.comb += [rd_slot.eq(Mux(idle, st.pick, cur_slot)), rd_idx.eq(Mux(idle, 0, cur_idx)),
                     rp.addr.eq(rd_slot * C + rd_idx)]
        avail = ~(st.in_active & (st.in_slot == rd_slot)) | (rd_idx < st.in_count)
        st.commit = commit = Signal()     # a packet starts on ``o`` (its slot is committed)
        st.drop = drop = Signal()         # an error slot is resolved (error packet or silent drop)
        m.d.comb += [commit.eq(idle & st.pick_any & ~st.pick_err),
                     drop.eq(idle & st.pick_any & st.pick_err)]

        # The rewritten header of the flit read (used when rd_idx == 0).
        fmt = self.fmt
        hin = Signal(fmt.layout)
        m.d.comb += hin.eq(rp.data.data[:fmt.bits])
        row = st.row[rd_slot]
        flit_bytes = self.flit_width // 8
        wr = Signal(fmt.layout)
        m.d.comb += [wr.opcode.eq(Opcode.WRITE), wr.src.eq(hin.src), wr.tag.eq(hin.tag),
                     wr.length.eq(hin.length), wr.route.uni.dst.eq(self.port),
                     wr.route.uni.addr.eq(row + hin.route.dyn.offset * flit_bytes)]
        rr = Signal(fmt.layout)
        deferred = data.View(fmt.deferred, hin.route.uni.addr[:data.Layout.cast(fmt.deferred).size])
        m.d.comb += [rr.opcode.eq(Opcode.RED_READ), rr.src.eq(hin.src), rr.tag.eq(hin.tag),
                     rr.length.eq(hin.length), rr.etype.eq(hin.etype), rr.redop.eq(hin.redop),
                     rr.route.uni.dst.eq(self.port), rr.route.uni.xtag.eq(hin.route.uni.xtag),
                     rr.route.uni.addr.eq(row + deferred.byte_offset)]
        is_st = hin.opcode == Opcode.DYN_ST
        translate = (rd_idx == 0) & st.needs.bit_select(rd_slot, 1)
        fl = flit_layout(self.flit_width)
        out = Signal(fl)
        new_hdr = Mux(translate, Mux(is_st, wr.as_value(), rr.as_value()), rp.data.data[:fmt.bits])
        m.d.comb += out.eq(Cat(new_hdr, rp.data.data[fmt.bits:], rp.data.last, rp.data.poison))
        m.d.comb += [o.payload.eq(out), o.valid.eq(Mux(idle, commit, avail))]

        sent = o.valid & o.ready
        with m.If(sent):
            with m.If(rp.data.last):
                m.d.sync += cur_active.eq(0)
            with m.Else():
                m.d.sync += [cur_active.eq(1), cur_slot.eq(rd_slot), cur_idx.eq(rd_idx + 1)]
        with m.Elif(commit):
            m.d.sync += [cur_active.eq(1), cur_slot.eq(st.pick), cur_idx.eq(0)]

        # Error packets: the request's header fields, header only.
        e_st, e_rr = Signal(fmt.layout), Signal(fmt.layout)
        for e in (e_st, e_rr):
            m.d.comb += [e.src.eq(self.port), e.tag.eq(hin.tag), e.route.uni.dst.eq(hin.src),
                         e.route.uni.code.as_value().eq(st.code[rd_slot])]
        m.d.comb += [e_st.opcode.eq(Opcode.ERROR), e_rr.opcode.eq(Opcode.RED_READ_RESP),
                     e_rr.etype.eq(hin.etype), e_rr.redop.eq(hin.redop),
                     e_rr.route.uni.xtag.eq(hin.route.uni.xtag)]
        ef = Signal(fl)
        m.d.comb += [ef.data.eq(Mux(is_st, e_st.as_value(), e_rr.as_value())), ef.last.eq(1), errq.w_data.eq(ef),
                     errq.w_en.eq(drop & ~st.poisoned.bit_select(st.pick, 1))]
        m.d.comb += [self.err.valid.eq(errq.r_rdy), self.err.payload.eq(errq.r_data),
                     errq.r_en.eq(self.err.ready)]

        freed = Signal(S)
        m.d.comb += freed.eq(Mux(sent & rp.data.last, Const(1, S) << rd_slot, 0) |
                             Mux(drop, Const(1, S) << st.pick, 0))
        started = Signal(S)
        m.d.comb += started.eq(Mux(commit | drop, Const(1, S) << st.pick, 0))
        for s in range(S):
            with m.If(started[s]):
                m.d.sync += st.gone[s].eq(1)
            with m.If(freed[s]):
                m.d.sync += st.busy[s].eq(0)
        st.freed = freed

    # ---- Counters.
    def _count(self, m, st):
        S = self.slots
        c = self.counters
        needs_pick = st.needs.bit_select(st.pick, 1)
        ovt = st.other_older.bit_select(st.pick, 1)
        m.d.sync += [
            c[EgressCounter.TRANSLATED].eq(c[EgressCounter.TRANSLATED] + (st.commit & needs_pick)),
            c[EgressCounter.PASSED].eq(c[EgressCounter.PASSED] + (st.commit & ~needs_pick)),
            c[EgressCounter.XLATE_ERRORS].eq(c[EgressCounter.XLATE_ERRORS] + st.drop),
            c[EgressCounter.OVERTAKES].eq(c[EgressCounter.OVERTAKES] + ((st.commit | st.drop) & ovt)),
        ]
        occ = Signal(range(S + 1))
        m.d.comb += occ.eq(sum(st.busy[s] for s in range(S)))
        with m.If(occ > c[EgressCounter.MAX_OCCUPANCY]):
            m.d.sync += c[EgressCounter.MAX_OCCUPANCY].eq(occ)
