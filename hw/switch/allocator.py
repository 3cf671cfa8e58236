"""Packet-mode iSLIP allocator for an N x N crossbar, with multicast fanout splitting.

Each iteration, every unmatched output grants one requesting unmatched input round-robin from its grant
pointer; every input accepts grants: one (round-robin from its accept pointer) for a unicast request, all
of them for a mask-queue or error request (fanout splitting: the rest of a multicast is sent in later
rounds), and all or none for a multicast head still arriving (see :mod:`hw.switch.input_unit`). Pointers
move one past the winner only when a grant is accepted in the first iteration, the rule that
desynchronises iSLIP's pointers and gives it ~100% throughput under uniform traffic (McKeown 1999).
Matches persist for a whole packet (packet mode), so even one iteration per cycle keeps filling the match
as outputs free up; more iterations match more pairs per cycle at the cost of a longer combinational path.

Latency 0: ``accept`` is combinational from ``req`` in the same cycle.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import mask_after, onehot_to_index, or_reduce, rr_pick, rr_pick_masked
from .input_unit import REQ_MASK_ALL, REQ_UC

__all__ = ["ISlipAllocator"]


def index_after(onehot):
    """Index one past the set bit of a one-hot vector, modulo its width: the encoder of the vector rotated
    by one place, so no incrementer follows the encoder on the pointer-update path."""
    return onehot_to_index(Value.cast(onehot).rotate_left(1))


class ISlipAllocator(wiring.Component):
    """Ports: ``req[i]`` (outputs input i requests), ``req_class[i]``, ``out_free`` (outputs that can start a
    packet this cycle), ``accept[i]`` (outputs matched to input i this cycle). ``iterations`` >= 1."""

    def __init__(self, ports: int, iterations: int = 1):
        if not 1 <= iterations <= 4:
            raise ValueError(f"iSLIP iterations must be in 1..4, got {iterations!r}")
        self.ports = ports
        self.iterations = iterations
        super().__init__({
            "req": In(ports).array(ports),
            "req_class": In(2).array(ports),
            "out_free": In(ports),
            "accept": Out(ports).array(ports),
        })

    def elaborate(self, platform):
        m = Module()
        N = self.ports
        # Grant pointers are kept as masks (the inputs at or after the pointer; reset: all), so that the
        # grant's first gate is the request AND: the grant-accept-update loop is the allocator's critical
        # path. Accept pointers are indices: their decode runs beside the grant.
        gmask = [Signal(N, init=(1 << N) - 1, name=f"gmask{j}") for j in range(N)]
        aptr = [Signal(range(N), name=f"aptr{i}") for i in range(N)]

        out_avail = self.out_free           # outputs not yet matched in this cycle
        in_avail = Const((1 << N) - 1, N)   # inputs not yet matched in this cycle
        accepted = [Const(0, N)] * N
        for it in range(self.iterations):
            # Grant: each available output picks one requesting available input.
            grant = []
            for j in range(N):
                reqs = Signal(N, name=f"it{it}_reqs_to{j}")
                m.d.comb += reqs.eq(Cat(self.req[i][j] for i in range(N)) & in_avail & out_avail[j].replicate(N))
                grant.append(rr_pick_masked(m, reqs, gmask[j], name=f"it{it}_grant{j}"))
            # Accept.
            acc = []
            for i in range(N):
                got = Signal(N, name=f"it{it}_got{i}")
                m.d.comb += got.eq(Cat(grant[j][i] for j in range(N)))
                one = rr_pick(m, got, aptr[i], name=f"it{it}_one{i}")
                a = Signal(N, name=f"it{it}_acc{i}")
                with m.If(self.req_class[i] == REQ_UC):
                    m.d.comb += a.eq(one)
                    if it == 0:
                        with m.If(got.any()):
                            m.d.sync += aptr[i].eq(index_after(one))
                with m.Elif(self.req_class[i] == REQ_MASK_ALL):
                    m.d.comb += a.eq(Mux(got == self.req[i], got, 0))
                with m.Else():
                    m.d.comb += a.eq(got)
                acc.append(a)
            if it == 0:
                # Grant pointers move past an input only when it accepted this output (first iteration).
                for j in range(N):
                    taken = Cat(acc[i][j] for i in range(N)).any()
                    after = mask_after(m, grant[j], name=f"gnext{j}")
                    with m.If(taken):
                        m.d.sync += gmask[j].eq(after)
            accepted = [accepted[i] | acc[i] for i in range(N)]
            matched_out = Signal(N, name=f"it{it}_matched_out")
            m.d.comb += matched_out.eq(or_reduce(acc))
            out_avail = out_avail & ~matched_out
            in_avail = in_avail & ~Cat(acc[i].any() for i in range(N))
        for i in range(N):
            m.d.comb += self.accept[i].eq(accepted[i])
        return m
