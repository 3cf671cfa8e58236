"""The response side of the ``ld_reduce`` engine (see :mod:`hw.switch.reduction_engine`, flow step 4):
``RED_READ_RESP`` packets become the reduction buffer's contributions, after the duplicate and
unasked-source checks."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import MAX_LENGTH, EType, ErrorCode, HeaderLayout, Opcode, flit_layout, header_format
from .reduction_buffer import RTAG_BITS, contrib_layout
from .reduction_reads import ABORT_LAYOUT, fanout_start_signature

__all__ = ["ResponseFilter"]

_HDR = data.Layout.cast(HeaderLayout)


class ResponseFilter(wiring.Component):
    """``resp`` packets to ``contrib`` (one payload flit per cycle), by the response table of
    :mod:`hw.switch.reduction_engine`.

    ``start`` (an entry's fan-out starts: ``asked[entry] = {gen, mask}``) and each response header's
    registered read of ``asked`` and ``answered`` give the verdict a cycle after the header: a source
    outside the mask is unasked (``bad_responses``), one that already answered is a duplicate
    (``duplicates``), both dropped whole; otherwise the source is marked in ``answered``. An answer for an
    entry whose fan-out has not started (no ``asked`` row of its generation) is passed marked ``stale``:
    the buffer counts it and it changes nothing (an early answer, or a late one). An error-coded
    or payload-less answer aborts its entry. ``abort`` (a failed translation; only with ``aborts=True``)
    aborts an entry too; on ``contrib`` a response's abort comes first, then ``abort``, then payload flits.
    ``asked``/``answered`` are ``lib.memory`` arrays of ``entries`` rows (``gen_bits + ports`` bits).
    """

    def __init__(self, *, ports: int, entries: int, flit_width: int, aborts: bool):
        self.ports, self.entries, self.flit_width, self.aborts = ports, entries, flit_width, aborts
        self.entry_bits = max(1, (entries - 1).bit_length())
        super().__init__({
            "resp": In(stream.Signature(flit_layout(flit_width))),
            "start": In(fanout_start_signature(ports)),
            **({"abort": In(stream.Signature(ABORT_LAYOUT))} if aborts else {}),
            "contrib": Out(stream.Signature(contrib_layout(flit_width))),
            "bad_responses": Out(32),
            "duplicates": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        P, EB, N = self.ports, self.entry_bits, self.entries
        GB = RTAG_BITS - EB
        track_layout = data.StructLayout({"gen": GB, "mask": P})
        m.submodules.asked = asked = memory.Memory(shape=track_layout, depth=N, init=[])
        m.submodules.answered = answered = memory.Memory(shape=track_layout, depth=N, init=[])
        ask_w = asked.write_port()
        st = self.start.payload
        m.d.comb += [ask_w.addr.eq(st.rtag[0:EB]), ask_w.data.gen.eq(st.rtag[EB:]), ask_w.data.mask.eq(st.mask),
                     ask_w.en.eq(self.start.valid)]

        rs = self.resp
        fmt = header_format(P)
        rh = Signal(fmt.layout)
        m.d.comb += rh.eq(rs.payload.data[0:fmt.bits])
        in_payload = Signal()          # past the header of a RED_READ_RESP
        dropping = Signal()            # past the header of another packet: its flits are dropped
        r_rtag = Signal(RTAG_BITS)
        r_len = Signal(_HDR["length"].shape)
        r_etype = Signal(EType.as_shape().width)      # raw: the buffer checks it
        r_k = Signal(_HDR["length"].shape)            # payload flit index
        r_src = Signal(fmt.port_bits)
        r_code = Signal(ErrorCode.as_shape().width)
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
        cb, cp = self.contrib, self.contrib.payload
        ask_d, ans_d = ask_r.data, ans_r.data
        r_gen = r_rtag[EB:RTAG_BITS]
        tracked, src_asked, same_gen, unasked, dup = (Signal(name=n) for n in ("tracked", "src_asked", "same_gen",
                                                                               "unasked", "dup"))
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
        # An answer for an entry whose fan-out has not started (its ``asked`` row holds no mask of its
        # generation) was never asked for: only a misbehaving destination sends one before its read. It
        # goes to the buffer marked ``stale`` (counted there, changes nothing), like a late answer.
        r_stale = Signal()
        # named by the formal harness
        self.in_payload, self.dropping, self.vcyc, self.r_drop, self.r_stale = in_payload, dropping, vcyc, r_drop, r_stale
        self.r_rtag, self.r_src, self.r_k, self.r_code, self.r_len = r_rtag, r_src, r_k, r_code, r_len
        self.ask_d, self.ans_d, self.r_in_range = ask_d, ans_d, r_in_range
        with m.If(v_done):
            m.d.sync += [r_drop.eq(v_drop | errored), r_stale.eq(~tracked)]
        stale_now = Mux(vcyc, ~tracked, r_stale)

        is_payload = rs.valid & in_payload
        # Contribution port: a response's abort first (it holds the response link while it waits), then
        # translation aborts, then payload flits (which wait for a free slot).
        payload_ready = (~self.abort.valid & cb.ready) if self.aborts else cb.ready
        with m.If(v_abort):
            m.d.comb += [cb.valid.eq(1), cp.rtag.eq(r_rtag), cp.abort.eq(1), cp.code.eq(r_code),
                         cp.stale.eq(~tracked)]
        if self.aborts:
            ab = self.abort
            with m.Elif(ab.valid):
                m.d.comb += [cb.valid.eq(1), cp.rtag.eq(ab.payload.rtag), cp.abort.eq(1),
                             cp.code.eq(ab.payload.code), ab.ready.eq(cb.ready)]
        with m.Elif(is_payload & ~drop_now):
            poison = rs.payload.last & rs.payload.poison
            m.d.comb += [cb.valid.eq(1), cp.rtag.eq(r_rtag), cp.flit.eq(r_k), cp.length.eq(r_len),
                         cp.etype.eq(r_etype), cp.data.eq(rs.payload.data), cp.abort.eq(poison), cp.stale.eq(stale_now),
                         cp.code.eq(Mux(poison, ErrorCode.LENGTH_MISMATCH.value, 0))]
        m.d.comb += rs.ready.eq(Mux(in_payload, Mux(drop_now, ~v_hold, payload_ready),
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
        return m
