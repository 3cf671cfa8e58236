"""Packet-level stream plumbing: split one flit stream by a header function, merge several packet-atomically.

Flit streams are ``lib.stream.Signature(flit_layout(flit_width))``; a packet is the flits up to and
including the one with ``last``. Both blocks are combinational (zero latency, full rate) with one
register of state per packet, and neither has a combinational path from a ``ready`` to a ``valid``.
"""

from amaranth.hdl import Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import first_set, onehot_to_index, rr_pick
from .packet import DEFAULT_FLIT_WIDTH, flit_layout, header_format, rtl_vclass_resp

__all__ = ["PacketSplit", "PacketMerge", "VcClassSplit"]


class PacketSplit(wiring.Component):
    """One packet stream ``i`` to ``n_out`` streams ``o[k]``, chosen per packet by ``select``.

    ``select(header)`` gets a view of the head flit's header (the header format of a ``ports``-port
    switch, :func:`hw.packet.header_format`; None: up to 64 ports, :class:`~hw.packet.HeaderLayout` over the
    low 128 bits) and returns the output index (an Amaranth value). The choice is made on the head flit and held until
    ``last``, so every flit of a packet goes to the same output.

    * Latency 0, throughput one flit per cycle: ``o[k].valid = i.valid & (choice == k)``,
      ``i.ready = o[choice].ready`` (no path from a ``ready`` to a ``valid``).
    * Backpressure: a stalled output stalls ``i`` (the other outputs wait behind it).
    * Bad input: a ``select`` value ``>= n_out`` discards the packet (``i.ready`` high, no output valid);
      ``select`` should never return one.
    """

    def __init__(self, *, flit_width: int = DEFAULT_FLIT_WIDTH, n_out: int, select, ports: int | None = None):
        if not isinstance(n_out, int) or not 1 <= n_out <= 64:
            raise ValueError(f"n_out must be an integer in 1..64, got {n_out!r}")
        if not callable(select):
            raise ValueError(f"select must be a function of a HeaderLayout view returning the output "
                             f"index, got {select!r}")
        self.n_out = n_out
        self.flit_width = flit_width
        self.select = select
        layout = flit_layout(flit_width)
        self.fmt = header_format(ports, flit_width)
        super().__init__({
            "i": In(stream.Signature(layout)),
            "o": Out(stream.Signature(layout)).array(n_out),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.n_out
        header = data.View(self.fmt.layout, self.i.payload.data[:self.fmt.bits])
        chosen = Value.cast(self.select(header))
        # As wide as select's value: an out-of-range index matches no output (never truncated onto one).
        head_sel = Signal(max(1, len(chosen), (n - 1).bit_length()), name="head_sel")
        m.d.comb += head_sel.eq(chosen)
        mid = Signal()        # inside a packet: its head has gone
        held = Signal.like(head_sel, name="held_sel")
        sel = Signal.like(head_sel, name="sel")
        m.d.comb += sel.eq(Mux(mid, held, head_sel))
        ready = Const(1, 1)    # an out-of-range choice: discard
        for k in range(n):
            hit = sel == k
            m.d.comb += [
                self.o[k].valid.eq(self.i.valid & hit),
                self.o[k].payload.eq(self.i.payload),
            ]
            ready = Mux(hit, self.o[k].ready, ready)
        m.d.comb += self.i.ready.eq(ready)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [mid.eq(~self.i.payload.last), held.eq(sel)]
        return m


class PacketMerge(wiring.Component):
    """``n_in`` packet streams ``i[k]`` onto one stream ``o``, packet-atomically.

    * Arbitration: among the inputs with a flit waiting, round robin (the input after the last winner
      first), or fixed priority (lowest index first) with ``priority=True``. The input chosen when its
      head flit is first offered on ``o`` owns ``o`` until its ``last`` flit has gone: packets never
      interleave, and the offered head never changes while ``o`` is stalled (stream rule).
    * Latency 0, throughput one flit per cycle, including back-to-back packets from different inputs.
      ``o.valid`` depends only on the inputs' ``valid`` and registered state; ``i[k].ready`` is
      ``o.ready`` for the owner and 0 for the others.
    * A gap (``valid`` low) inside a packet stalls ``o``; the other inputs wait for that packet's end.
    """

    def __init__(self, *, flit_width: int = DEFAULT_FLIT_WIDTH, n_in: int, priority: bool = False):
        if not isinstance(n_in, int) or not 1 <= n_in <= 64:
            raise ValueError(f"n_in must be an integer in 1..64, got {n_in!r}")
        if not isinstance(priority, bool):
            raise ValueError(f"priority must be a bool, got {priority!r}")
        self.n_in = n_in
        self.flit_width = flit_width
        self.priority = priority
        layout = flit_layout(flit_width)
        super().__init__({
            "i": In(stream.Signature(layout)).array(n_in),
            "o": Out(stream.Signature(layout)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.n_in
        valid = Signal(n, name="in_valid")
        for k in range(n):
            m.d.comb += valid[k].eq(self.i[k].valid)
        locked = Signal()                       # o is owned by `owner` (a head has been offered)
        owner = Signal(range(max(2, n)))
        ptr = Signal(range(max(2, n)))          # round robin: first input considered
        if self.priority:
            _, pick = first_set(m, valid, name="prio")
        else:
            pick = Signal.like(owner, name="rr_idx")
            m.d.comb += pick.eq(onehot_to_index(rr_pick(m, valid, ptr, name="rr")))
        sel = Signal.like(owner, name="sel")
        m.d.comb += sel.eq(Mux(locked, owner, pick))
        o_valid = Const(0, 1)
        o_payload = Value.cast(self.i[0].payload)
        for k in range(n):
            hit = sel == k
            o_valid = Mux(hit, self.i[k].valid, o_valid)
            if k:
                o_payload = Mux(hit, self.i[k].payload, o_payload)
            m.d.comb += self.i[k].ready.eq(hit & self.o.ready)
        m.d.comb += [self.o.valid.eq(o_valid), self.o.payload.eq(o_payload)]
        done = Signal()
        m.d.comb += done.eq(self.o.valid & self.o.ready & self.o.payload.last)
        m.d.sync += [locked.eq((locked | self.o.valid) & ~done), owner.eq(sel)]
        if not self.priority:
            with m.If(self.o.valid & ~locked):     # a new packet starts: the next one searches after it
                m.d.sync += ptr.eq(Mux(sel == n - 1, 0, sel + 1))
        return m


class VcClassSplit(PacketSplit):
    """:class:`PacketSplit` by message class: requests to ``o[0]``, responses (``VC_RESP`` opcodes) to
    ``o[1]`` (a fixed ``select`` for the registry's Verilog and lint)."""

    def __init__(self, *, flit_width: int = DEFAULT_FLIT_WIDTH):
        super().__init__(flit_width=flit_width, n_out=2, select=rtl_vclass_resp)
