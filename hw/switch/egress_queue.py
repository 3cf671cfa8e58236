"""Output queue of a switch port: takes up to ``lanes`` flits per cycle from the crossbar, sends one.

With internal speedup 2 the crossbar can deliver a packet at twice the link rate; this queue absorbs the
difference, which frees the input (and lets the allocator start the output's next packet) before the link
has sent the current one. That is what lifts a packet-mode input-queued switch past the ~90% saturation
of speedup 1 without huge input buffers (a combined input/output-queued switch).

Ports: ``w_valid[k]``/``w_data[k]`` (lane 0 first; lane k valid only with the lanes before it), ``r``
(stream out, first-word fall-through), ``level``. The writer must not exceed the free space (``depth -
level``); the switch checks it one cycle ahead. Latency: a flit written in cycle t is readable in t+1.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["EgressQueue"]


class EgressQueue(wiring.Component):
    def __init__(self, *, width: int, depth: int, lanes: int = 1):
        if lanes not in (1, 2):
            raise ValueError(f"lanes must be 1 or 2, got {lanes!r}")
        if depth < 2 * lanes:
            raise ValueError(f"egress depth must be at least {2 * lanes} for {lanes} lane(s), got {depth!r}")
        self.width = width
        self.depth = depth
        self.lanes = lanes
        super().__init__({
            "w_valid": In(lanes),
            "w_data": In(width).array(lanes),
            "r": Out(stream.Signature(width)),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        D = self.depth
        m.submodules.mem = mem = memory.Memory(shape=self.width, depth=D, init=[])
        wptr = Signal(range(D))
        rptr = Signal(range(D))

        def inc(ptr, by):
            total = ptr + by
            return Mux(total >= D, total - D, total)[:len(ptr)]

        for k in range(self.lanes):
            wp = mem.write_port()
            m.d.comb += [wp.addr.eq(inc(wptr, k)), wp.data.eq(self.w_data[k]), wp.en.eq(self.w_valid[k])]
        n_in = Signal(range(self.lanes + 1))
        m.d.comb += n_in.eq(sum(self.w_valid[k] for k in range(self.lanes)))
        rp = mem.read_port(domain="comb")
        pop = Signal()
        m.d.comb += [
            rp.addr.eq(rptr),
            self.r.payload.eq(rp.data),
            self.r.valid.eq(self.level != 0),
            pop.eq(self.r.valid & self.r.ready),
        ]
        m.d.sync += [
            wptr.eq(inc(wptr, n_in)),
            self.level.eq(self.level + n_in - pop),
        ]
        with m.If(pop):
            m.d.sync += rptr.eq(inc(rptr, 1))
        return m
