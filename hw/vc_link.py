"""A credit link with two virtual channels (requests and responses, :data:`hw.packet.VC_REQ`/``VC_RESP``).

One flit per cycle crosses the link, tagged with its ``vc``. The receiver holds a separate FIFO per VC and
the sender a separate credit count per VC, so a VC whose receiver has stopped draining (requests waiting
on responses) never blocks the other: the two message classes share the wire, never a buffer. VCs
interleave at flit granularity (two packets of different VCs may be in flight at once; ``last`` frames
each VC's packets separately). ``credit[v]`` returns that many credits of VC ``v`` in a cycle (0..3, as
on :func:`hw.credit.credit_link_signature`).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .credit import CREDIT_RETURN_BITS, CREDIT_RETURN_MAX
from .packet import DEFAULT_FLIT_WIDTH, N_VCS, flit_layout

__all__ = ["vc_link_signature", "VcSender", "VcReceiver"]

assert N_VCS == 2   # the round robin below is written for two VCs


def vc_link_signature(flit_width: int = DEFAULT_FLIT_WIDTH) -> wiring.Signature:
    """Signature of a VC link, seen from its sender: ``valid``/``vc``/``flit`` out, ``credit`` (one
    count per VC) in."""
    return wiring.Signature({
        "valid": Out(1),
        "vc": Out(1),
        "flit": Out(flit_layout(flit_width)),
        "credit": In(data.ArrayLayout(CREDIT_RETURN_BITS, N_VCS)),
    })


def _check_credits(credits) -> tuple[int, int]:
    if not isinstance(credits, (tuple, list)) or len(credits) != N_VCS or \
            not all(isinstance(c, int) and not isinstance(c, bool) for c in credits):
        raise ValueError(f"credits must be a tuple of {N_VCS} integers (one per VC), got {credits!r}")
    for v, c in enumerate(credits):
        if not 1 <= c <= 4096:
            raise ValueError(f"credits[{v}] must be in 1..4096, got {c!r}")
    return tuple(credits)


class VcSender(wiring.Component):
    """Two flit streams (``i[0]`` requests, ``i[1]`` responses) onto one VC link.

    Ports: ``i`` (``N_VCS`` streams in), ``link`` (VC link out), ``credits_left`` (per VC, status).
    ``credits[v]`` is the receiver's FIFO depth for VC ``v`` (a :class:`VcReceiver` built with the same
    tuple).

    * Latency 0: ``link.valid``/``link.flit`` are combinational from ``i[v].valid``/``payload`` and the
      credit counts (registers); ``ready`` is never on a path to ``link.valid``.
    * Throughput one flit per cycle. Each cycle one VC that has a flit and a credit sends; when both can,
      the VC that did not send last goes (round robin per flit).
    * Backpressure: a VC without credits holds its flit (``i[v].ready`` low); never a drop.
    * ``credits_left[v]`` = credits held; it never goes below 0 (a flit is sent only with one) and stays
      at most ``credits[v]`` while the receiver returns only what it took.
    """

    def __init__(self, *, credits: tuple[int, int] = (8, 8), flit_width: int = DEFAULT_FLIT_WIDTH):
        self.credits = _check_credits(credits)
        self.flit_width = flit_width
        layout = flit_layout(flit_width)
        cmax = max(self.credits) + CREDIT_RETURN_MAX
        super().__init__({
            "i": In(stream.Signature(layout)).array(N_VCS),
            "link": Out(vc_link_signature(flit_width)),
            "credits_left": Out(range(cmax + 1)).array(N_VCS),
        })

    def elaborate(self, platform):
        m = Module()
        cmax = max(self.credits) + CREDIT_RETURN_MAX
        # One register per VC with its own reset value; credits_left mirrors it (array members of a
        # signature share one init value).
        left = [Signal(range(cmax + 1), init=c, name=f"left{v}") for v, c in enumerate(self.credits)]
        can = [Signal(name=f"can{v}") for v in range(N_VCS)]
        for v in range(N_VCS):
            m.d.comb += [can[v].eq(self.i[v].valid & (left[v] != 0)),
                         self.credits_left[v].eq(left[v])]
        last_vc = Signal()        # the VC that sent last
        pick = Signal()           # the VC that sends this cycle (when any can)
        # The VC after last_vc if it can send, else the other one.
        m.d.comb += pick.eq(Mux(Mux(last_vc, can[0], can[1]), ~last_vc, last_vc))
        send = Signal()
        m.d.comb += [
            send.eq(can[0] | can[1]),
            self.link.valid.eq(send),
            self.link.vc.eq(pick),
            self.link.flit.eq(Mux(pick, self.i[1].payload, self.i[0].payload)),
        ]
        for v in range(N_VCS):
            sent = Signal(name=f"sent{v}")
            m.d.comb += [sent.eq(send & (pick == v)), self.i[v].ready.eq(sent)]
            m.d.sync += left[v].eq(left[v] - sent + self.link.credit[v])
        with m.If(send):
            m.d.sync += last_vc.eq(pick)
        return m


def receive_lane(m, flit, arrive, out, depth: int, *, fifo_name: str, tag) -> tuple:
    """One lane of a link receiver, added to module ``m``: a FIFO of ``depth`` flits written with ``flit``
    when ``arrive``, read out on stream ``out``. A flit that arrives at a full FIFO (its sender had no credit)
    is dropped, and the lane's later flits are poisoned up to the next ``last``. Returns (a flit leaves
    ``out`` this cycle: one credit back, a flit is dropped this cycle)."""
    q = fifo.SyncFIFO(width=len(flit.as_value()), depth=depth)
    m.submodules[fifo_name] = q
    spoil = Signal(name=f"spoil{tag}")      # a flit of this lane was dropped: poison until `last`
    w_flit = Signal.like(flit, name=f"w_flit{tag}")
    m.d.comb += [w_flit.eq(flit), w_flit.poison.eq(flit.poison | spoil)]
    with m.If(arrive & ~q.w_rdy):
        m.d.sync += spoil.eq(1)
    with m.Elif(arrive & flit.last):
        m.d.sync += spoil.eq(0)
    m.d.comb += [q.w_en.eq(arrive), q.w_data.eq(w_flit.as_value()),
                 out.valid.eq(q.r_rdy), out.payload.eq(q.r_data), q.r_en.eq(out.ready)]
    return q.r_rdy & out.ready, arrive & ~q.w_rdy


class VcReceiver(wiring.Component):
    """The receiving end of a VC link: one FIFO of ``credits[v]`` flits per VC, each a stream ``o[v]``.

    Ports: ``link`` (VC link in), ``o`` (``N_VCS`` streams out), ``overflows`` (32-bit count).

    * Latency 1 (a flit received in cycle t is on ``o[vc]`` in t+1); throughput one flit per cycle in
      total, and per VC with ``credits[v] >= 2``.
    * One credit of VC ``v`` is returned (``link.credit[v]`` = 1, combinationally) in each cycle a flit
      leaves ``o[v]``. ``o[v].valid`` depends only on its FIFO's state.
    * Bad input: a flit that arrives while its VC's FIFO is full (the sender had no credit) is dropped and
      counted in ``overflows``. The packet it belonged to is then broken, so every later flit of that VC is
      marked ``poison`` up to and including the next one with ``last``: the switch behind ends the broken
      packet poisoned (and its receiver drops it) instead of reading a payload flit as a header.
    """

    def __init__(self, *, credits: tuple[int, int] = (8, 8), flit_width: int = DEFAULT_FLIT_WIDTH):
        self.credits = _check_credits(credits)
        self.flit_width = flit_width
        layout = flit_layout(flit_width)
        self._width = layout.size
        super().__init__({
            "link": In(vc_link_signature(flit_width)),
            "o": Out(stream.Signature(layout)).array(N_VCS),
            "overflows": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        overflow = Signal()
        for v in range(N_VCS):
            arrive = Signal(name=f"arrive{v}")
            m.d.comb += arrive.eq(self.link.valid & (self.link.vc == v))
            left, dropped = receive_lane(m, self.link.flit, arrive, self.o[v], self.credits[v],
                                         fifo_name=f"fifo{v}", tag=v)
            m.d.comb += self.link.credit[v].eq(left)
            # As in CreditReceiver: a sender holding a credit never finds its FIFO full.
            with m.If(dropped):
                m.d.comb += overflow.eq(1)
        with m.If(overflow):
            m.d.sync += self.overflows.eq(self.overflows + 1)
        return m
