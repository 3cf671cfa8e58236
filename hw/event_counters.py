"""Event counters: the status counters of the blocks (errors, allocations, answers by code)."""

from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["EventCounters"]


class EventCounters(wiring.Component):
    """``count[i]`` (``width`` bits, wrapping, reset to 0) counts the cycles with ``strobe[i]`` high.

    One register per event; the blocks index ``strobe`` and ``count`` by their error or counter enum's
    values, which run 0..n-1."""

    def __init__(self, n: int, width: int = 32):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"EventCounters: n must be a positive integer, got {n!r}")
        if not isinstance(width, int) or width < 1:
            raise ValueError(f"EventCounters: width must be a positive integer, got {width!r}")
        super().__init__({"strobe": In(n), "count": Out(data.ArrayLayout(width, n))})

    def elaborate(self, platform):
        m = Module()
        for i in range(len(self.strobe)):
            with m.If(self.strobe[i]):
                m.d.sync += self.count[i].eq(self.count[i] + 1)
        return m
