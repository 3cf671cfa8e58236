"""One input's registered request, between an input unit and the allocator (``NVSwitch(req_stage=True)``)."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RequestStage"]


class RequestStage(wiring.Component):
    """Registers an input unit's ``req``/``req_class`` for the allocator (``alloc_req``/``alloc_class``, one
    cycle later) and drops the request the input made while its grant was on the way: ``accept`` is the
    allocator's accept for this input, and a request registered in the cycle it is non-zero reaches the
    allocator as zero, in the cycle that grant reaches the input. The drop flag is its own flip-flop, so no
    OR tree precedes the allocator."""

    def __init__(self, *, ports: int):
        self.ports = ports
        super().__init__({"req": In(ports), "req_class": In(2), "accept": In(ports),
                          "alloc_req": Out(ports), "alloc_class": Out(2)})

    def elaborate(self, platform):
        m = Module()
        req, matched = Signal(self.ports), Signal()
        m.d.sync += [req.eq(self.req), self.alloc_class.eq(self.req_class), matched.eq(self.accept.any())]
        m.d.comb += self.alloc_req.eq(req & ~matched.replicate(self.ports))
        return m
