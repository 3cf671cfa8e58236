"""The ingress of a switch input: each arriving flit checked, framed into its packet and turned into a cell
write (see :mod:`hw.switch.input_unit`)."""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import decode
from ..packet import (DEFAULT_FLIT_WIDTH, GROUP_BITS, MAX_LENGTH, OPCODES, TAG_BITS, ErrorCode, flit_layout,
                      header_format, rtl_header_error, rtl_payload_flits)

__all__ = ["Ingress"]


class Ingress(wiring.Component):
    """Frames the flits of one credit link into packets and decides, per cycle, what the buffer does.

    ``valid``/``flit``: the link's flit this cycle. ``full``: the sender had no credit for it (or the
    buffer has no next-write cell, ``new_ok`` low), so it is an overflow. ``new_cell``: the next-write
    cell, where a written flit goes. ``group_handle``/``group_mask``: the group-table lookup of the
    header's multicast group (combinational).

    A header is checked (:func:`~hw.packet.rtl_header_error`): in error, it and the rest of its packet are
    discarded and an error is pushed (``err_push``, ``err_code``, ``err_tag``); otherwise it is written
    (``write``) and queued (``enq``) to ``target_q``: its unicast destination's queue (``n_uc`` of them,
    unicast routing only) or the mask queue ``n_uc``, with its destination set ``mask``. Payload flits
    are written after it. A ``last`` that disagrees with the header's length ends the packet there, with
    ``w_last`` and ``w_poison`` set on that flit, pushes a LENGTH_MISMATCH error and discards any flits up
    to the sender's ``last``. A poisoned flit poisons its packet's last flit. An ``overflow`` flit is
    dropped; a packet it interrupts is ended by a poisoned terminator (``write`` with ``terminate``:
    it holds no sender credit) when a cell is free, and the rest of it is discarded.

    ``payload``: the payload flits the header in ``flit`` announces (combinational).

    ``in_pkt``/``cur_q``/``cur_hdr``/``cur_left``/``cur_written``: the packet being received (its queue,
    header cell, payload flits still expected and flits written so far), for cut-through decisions.

    ``isolate_static`` (bool): a static ``multimem`` header (routed by ``group``) from an input ``port``
    that is not a member of its group is an ``ISOLATION`` error (after every other header check); adds the
    ``port`` input (this input's index).

    ``multicast`` (bool): False for a network that routes by ``dst`` only; a header routed by ``group`` or
    ``mask`` is then an ``UNKNOWN_OPCODE`` error (an opcode this network does not carry), after every other
    header check.
    """

    def __init__(self, *, ports: int, n_uc: int, n_cells: int, flit_width: int = DEFAULT_FLIT_WIDTH,
                 max_payload: int = 16, isolate_static: bool = False, multicast: bool = True):
        for name, v in (("isolate_static", isolate_static), ("multicast", multicast)):
            if not isinstance(v, bool):
                raise ValueError(f"{name} must be a bool, got {v!r}")
        self.isolate_static = isolate_static
        self.multicast = multicast
        self.ports, self.n_uc, self.n_cells = ports, n_uc, n_cells
        self.flit_width, self.max_payload = flit_width, max_payload
        C = n_cells
        cell_shape = unsigned(max(1, (C - 1).bit_length()))
        super().__init__({
            **({"port": In(range(ports))} if isolate_static else {}),
            "valid": In(1),
            "flit": In(flit_layout(flit_width)),
            "full": In(1),
            "new_ok": In(1),
            "new_cell": In(cell_shape),
            "group_handle": Out(GROUP_BITS),
            "group_mask": In(ports),
            "write": Out(1),
            "w_last": Out(1),
            "w_poison": Out(1),
            "w_data": Out(flit_width),
            "terminate": Out(1),
            "enq": Out(1),
            "target_q": Out(range(max(2, n_uc + 1))),
            "mask": Out(ports),
            "discard": Out(1),
            "overflow": Out(1),
            "err_push": Out(1),
            "err_code": Out(ErrorCode),
            "err_tag": Out(TAG_BITS),
            "payload": Out(range(MAX_LENGTH + 1)),
            "in_pkt": Out(1),
            "cur_q": Out(range(max(2, n_uc + 1))),    # never zero-width
            "cur_hdr": Out(cell_shape),
            "cur_left": Out(range(MAX_LENGTH + 1)),
            "cur_written": Out(range(C + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        fmt = header_format(self.ports)
        hdr = fmt.layout(self.flit.data[:fmt.bits])
        routing_group = self._route(m, hdr)
        hdr_err = Signal(ErrorCode)
        base_err = rtl_header_error(hdr, ports=self.ports, max_payload=self.max_payload,
                                    group_mask=self.group_mask)
        if self.isolate_static:
            outsider = routing_group & ~(self.group_mask >> self.port)[0]
            base_err = Mux((base_err == ErrorCode.NONE.value) & outsider, ErrorCode.ISOLATION.value, base_err)
        if not self.multicast:
            routed = Cat(hdr.opcode == op for op, i in OPCODES.items() if i.routing != "dst").any()
            base_err = Mux((base_err == ErrorCode.NONE.value) & routed, ErrorCode.UNKNOWN_OPCODE.value, base_err)
        m.d.comb += hdr_err.eq(base_err)
        exp = Signal(range(MAX_LENGTH + 1))
        m.d.comb += [exp.eq(rtl_payload_flits(hdr)), self.payload.eq(exp)]

        dropping = Signal()     # discarding flits until `last`
        cur_poison = Signal()   # a flit of the packet arrived poisoned: poison its last flit
        last = self.flit.last
        is_hdr = ~self.in_pkt & ~dropping
        m.d.comb += self.w_data.eq(self.flit.data)
        with m.If(self.valid):
            with m.If(self.full):
                # The sender had no credit for this flit: count it and drop it. A packet in progress is
                # terminated with a poisoned flit in a spare cell, so its reader never waits forever.
                m.d.comb += self.overflow.eq(1)
                with m.If(self.in_pkt & self.new_ok):
                    m.d.comb += [self.write.eq(1), self.w_last.eq(1), self.w_poison.eq(1), self.w_data.eq(0),
                                 self.terminate.eq(1)]
                m.d.sync += [self.in_pkt.eq(0), dropping.eq(~last)]
            with m.Elif(dropping):
                m.d.comb += self.discard.eq(1)
                with m.If(last):
                    m.d.sync += dropping.eq(0)
            with m.Elif(is_hdr):
                with m.If(hdr_err != ErrorCode.NONE):
                    m.d.comb += [self.discard.eq(1), self.err_push.eq(1), self.err_code.eq(hdr_err)]
                    m.d.sync += dropping.eq(~last)
                with m.Else():
                    mismatch = last != (exp == 0)
                    m.d.comb += [self.write.eq(1), self.enq.eq(1), self.w_last.eq(last | (exp == 0)),
                                 self.w_poison.eq(mismatch | self.flit.poison)]
                    m.d.sync += cur_poison.eq(self.flit.poison)
                    with m.If(mismatch):
                        m.d.comb += [self.err_push.eq(1), self.err_code.eq(ErrorCode.LENGTH_MISMATCH.value)]
                        m.d.sync += dropping.eq(~last)
                    with m.Else():
                        m.d.sync += [self.in_pkt.eq(~last), self.cur_left.eq(exp)]
                    m.d.sync += [self.cur_hdr.eq(self.new_cell), self.cur_q.eq(self.target_q),
                                 self.cur_written.eq(1)]
            with m.Else():   # payload flit of a stored packet
                final = self.cur_left == 1
                mismatch = last != final
                m.d.comb += [self.write.eq(1), self.w_last.eq(last | final),
                             self.w_poison.eq(mismatch | self.flit.poison | ((last | final) & cur_poison))]
                m.d.sync += [self.cur_left.eq(self.cur_left - 1), self.cur_written.eq(self.cur_written + 1),
                             cur_poison.eq(cur_poison | self.flit.poison)]
                with m.If(last | final):
                    m.d.sync += self.in_pkt.eq(0)
                with m.If(mismatch):
                    m.d.comb += [self.err_push.eq(1), self.err_code.eq(ErrorCode.LENGTH_MISMATCH.value)]
                    m.d.sync += dropping.eq(~last)

        # The error entry's tag comes from the header of the packet in error; for a payload-time (length)
        # error that header is gone, so it is remembered.
        cur_tag = Signal(TAG_BITS)
        with m.If(self.valid & is_hdr):
            m.d.sync += cur_tag.eq(hdr.tag)
        m.d.comb += self.err_tag.eq(Mux(self.valid & ~is_hdr, cur_tag, hdr.tag))
        return m

    def _route(self, m, hdr):
        """The header's destination set and queue (unicast: its destination's VOQ; else the mask queue)."""
        N = self.ports
        routing_dst = Signal()
        routing_group = Signal()
        m.d.comb += [
            self.group_handle.eq(hdr.route.mm.group),
            routing_dst.eq(Cat(hdr.opcode == op for op, i in OPCODES.items() if i.routing == "dst").any()),
            routing_group.eq(Cat(hdr.opcode == op for op, i in OPCODES.items() if i.routing == "group").any()),
        ]
        with m.If(routing_dst):
            m.d.comb += self.mask.eq(decode(m, hdr.route.uni.dst, N, name="dst_dec"))
        with m.Elif(routing_group):
            m.d.comb += self.mask.eq(self.group_mask)
        with m.Else():
            m.d.comb += self.mask.eq(hdr.route.dyn.mask[:N])
        if self.n_uc:
            m.d.comb += self.target_q.eq(Mux(routing_dst, hdr.route.uni.dst, self.n_uc))
        else:
            m.d.comb += self.target_q.eq(self.n_uc)
        return routing_group
