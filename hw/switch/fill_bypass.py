"""A switch port's link receiver with a lane of its own for the GPU's ``TLB_FILL_RESP`` packets.

The plain receiver (:class:`hw.vc_link.VcReceiver`) holds one FIFO per virtual channel, so on VC 1 a fill
answer waits behind whatever response came up before it. A read answer that cannot enter the response
network (its input cells full) then holds the fills behind it, and with them the port's egress stage,
which waits for its translations. Here VC 1 is demultiplexed as it arrives: ``TLB_FILL_RESP`` packets go
into a FIFO of their own, drained by the AL-TLB's fill bridge, which consumes unconditionally; every other
packet goes where the plain receiver sends it. The link protocol is unchanged: the sender's VC 1 credits
bound the flits in both FIFOs together, each FIFO as deep as those credits, so neither overflows while the
sender holds to its credits.

Contract (``credits`` flits of credit per VC on the link):

* ``o[0]``: the VC 0 flits, as :class:`~hw.vc_link.VcReceiver` gives them (FIFO of ``credits``).
* ``o[1]``: the VC 1 packets that are not ``TLB_FILL_RESP``, in arrival order; ``fill``: the
  ``TLB_FILL_RESP`` packets, in arrival order. The class is read from each packet's head flit (the
  opcode of the header format of a ``ports``-port switch) and held to its ``last``: packets stay whole.
* Latency 1 on every lane; one flit per cycle in on the link. A flit of VC 0 leaving returns one VC 0
  credit; a flit leaving ``o[1]`` and one leaving ``fill`` return one VC 1 credit each (up to 2 in a
  cycle). A stalled ``o[1]`` never stops ``fill``.
* Bad input: a flit that arrives at a full FIFO (the sender had no credit) is dropped and counted in
  ``overflows``; the later flits of its lane are poisoned up to the next ``last``, as in
  :class:`~hw.vc_link.VcReceiver`.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import DEFAULT_FLIT_WIDTH, N_VCS, VC_REQ, VC_RESP, Opcode, flit_layout, header_format
from ..vc_link import receive_lane, vc_link_signature

__all__ = ["FillBypassReceiver"]


class FillBypassReceiver(wiring.Component):
    """Parameters: ``credits`` (per VC, 2..256: the link's credits, the switch's ``link_credits``),
    ``flit_width``, ``ports`` (the switch's ports: the header format; None: up to 64).

    Ports: ``link`` (VC link in), ``o`` (``N_VCS`` streams: VC 0, and VC 1 without the fills), ``fill``
    (``TLB_FILL_RESP`` packets), ``overflows`` (32-bit count)."""

    def __init__(self, *, credits: int = 8, flit_width: int = DEFAULT_FLIT_WIDTH, ports: int | None = None):
        if not isinstance(credits, int) or isinstance(credits, bool) or not 2 <= credits <= 256:
            raise ValueError(f"credits must be an integer in 2..256, got {credits!r}")
        self.fmt = header_format(ports, flit_width)
        self.credits = credits
        self.flit_width = flit_width
        layout = flit_layout(flit_width)
        super().__init__({
            "link": In(vc_link_signature(flit_width)),
            "o": Out(stream.Signature(layout)).array(N_VCS),
            "fill": Out(stream.Signature(layout)),
            "overflows": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        link, fmt = self.link, self.fmt
        # The class of each VC 1 packet, read from its head flit and held to its last.
        head = data.View(fmt.layout, link.flit.data[:fmt.bits])
        mid = Signal()          # inside a VC 1 packet (its head has arrived)
        held = Signal()         # ... which is a fill
        resp = Signal()
        is_fill = Signal()
        m.d.comb += [
            resp.eq(link.valid & (link.vc == VC_RESP)),
            is_fill.eq(Mux(mid, held, head.opcode == Opcode.TLB_FILL_RESP)),
        ]
        with m.If(resp):
            m.d.sync += [mid.eq(~link.flit.last), held.eq(is_fill)]

        # Three lanes, each a FIFO of `credits` flits: VC 0, VC 1's other packets, VC 1's fills.
        lanes = ((self.o[VC_REQ], link.valid & (link.vc == VC_REQ)), (self.o[VC_RESP], resp & ~is_fill),
                 (self.fill, resp & is_fill))
        left = []
        overflow = Signal()
        for k, (out, arrive) in enumerate(lanes):
            gone, dropped = receive_lane(m, link.flit, arrive, out, self.credits, fifo_name=f"lane{k}", tag=k)
            with m.If(dropped):                  # the sender had no credit
                m.d.comb += overflow.eq(1)
            left.append(gone)
        m.d.comb += [link.credit[VC_REQ].eq(left[0]), link.credit[VC_RESP].eq(left[1] + left[2])]
        with m.If(overflow):
            m.d.sync += self.overflows.eq(self.overflows + 1)
        return m
