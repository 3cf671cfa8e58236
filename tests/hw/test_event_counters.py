"""The event counters shared by the GPU-side blocks, against a Python count under random strobes."""

import random

import pytest
from amaranth.sim import Simulator

from hw.event_counters import EventCounters


@pytest.mark.parametrize("n, width", [(1, 32), (4, 3)])
def test_counts_and_wraps(n, width):
    dut = EventCounters(n, width)
    rng = random.Random(n)
    strobes = [rng.getrandbits(n) for _ in range(40)]
    model = [0] * n
    seen = []

    async def bench(ctx):
        for s in strobes:
            ctx.set(dut.strobe, s)
            await ctx.tick()
            for i in range(n):
                model[i] = (model[i] + (s >> i & 1)) % (1 << width)
            seen.append(([ctx.get(dut.count[i]) for i in range(n)], list(model)))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert all(got == want for got, want in seen), seen
    if width == 3:                      # the wrap is exercised: counter 0 passed 2**3 events
        assert sum(s & 1 for s in strobes) >= 1 << width


@pytest.mark.parametrize("n, width, message", [(0, 32, "n must be a positive integer, got 0"),
                                               (2, 0, "width must be a positive integer, got 0")])
def test_rejects_bad_parameters(n, width, message):
    with pytest.raises(ValueError, match=message):
        EventCounters(n, width)
