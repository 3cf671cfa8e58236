"""One coroutine per clock that steps every testbench agent, cycle by cycle.

Each cycle, right after the rising edge, every agent's ``drive()`` sets its inputs for the cycle; then, in
the ``ReadOnly`` phase, every agent's ``sample()`` reads the settled values. A ``valid``/``ready`` pair
seen high together in ``sample()`` is a transfer at the next edge. One coroutine stepping all agents is
several times faster under cocotb than one coroutine per interface, and it gives every agent the same,
unambiguous view of a cycle.

**Skipping quiet stretches.** ``skipper(cycle)``, when set, is asked after each cycle's samples how many
cycles the testbench may leave the DUT alone (0: none). Then, right after the next edge, every agent's
``park()`` (if it has one) lowers its ``ready`` outputs, and the model runs that many cycles at compiled
speed with no agent stepped; cycle numbers stay exact. A DUT output that turns valid meanwhile is held by
its stream's backpressure and seen after the skip (``on_resume`` may count such a case). The skipper must
only skip when the testbench has nothing to send and expects nothing before its next own event.

**Dropping quiet cycles.** With ``drop_period`` k set, a skipped stretch of n cycles gives the DUT only
``n - d`` clock edges, where d, the dropped cycles, is the largest multiple of k below n (at most k - 1
edges besides the one that ends the stretch); ``cycle`` still advances by n, simulated time by ``n - d``
periods (a waveform shows the stretch shortened). The testbench that sets it states why that is exact: the
DUT, quiet, must be in a state that clocking leaves unchanged but for state of period k, which the dropped
cycles would have taken round a whole number of times.
"""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge, Timer

__all__ = ["Cycler", "Agent"]


class Agent:
    """Base class: override ``drive`` and ``sample``."""

    def drive(self, cycle: int) -> None:
        pass

    def sample(self, cycle: int) -> None:
        pass


class Cycler:
    def __init__(self, dut, *, clk: str = "clk", rst: str = "rst", period_ns: int = 2):
        self.dut = dut
        self.clk = getattr(dut, clk)
        self.rst = getattr(dut, rst, None)
        self.period_ns = period_ns
        self.agents: list[Agent] = []
        self.cycle = 0
        self.watchers = []
        self._task = None
        self.skipper = None       # cycle -> cycles to leave the DUT alone (see the module docstring)
        self.on_resume = None     # called after a skip, before the agents drive
        self.skipped = 0          # cycles skipped in total
        self.drop_period = None   # k: skipped cycles are not simulated in multiples of k (module docstring)
        self.dropped = 0          # skipped cycles not simulated, in total
        self._skip = 0

    def add(self, *agents: Agent) -> None:
        self.agents.extend(agents)

    async def start(self, reset_cycles: int = 3) -> None:
        """Start the clock, hold reset for ``reset_cycles``, then start stepping agents."""
        Clock(self.clk, self.period_ns, unit="ns", impl="gpi").start()
        if self.rst is not None:
            self.rst.value = 1
        for a in self.agents:
            a.drive(0)
        for _ in range(reset_cycles):
            await RisingEdge(self.clk)
        if self.rst is not None:
            self.rst.value = 0
        self._task = cocotb.start_soon(self._run())

    async def _run(self):
        agents = self.agents
        # One trigger object each, awaited every cycle (cocotb triggers are reusable).
        edge, settled = RisingEdge(self.clk), ReadOnly()
        while True:
            await edge
            self.cycle += 1
            if self._skip:
                n, self._skip = self._skip, 0
                for a in agents:
                    park = getattr(a, "park", None)
                    if park is not None:
                        park()
                k = self.drop_period
                dropped = (n - 1) // k * k if k else 0
                # One timer across the stretch (no Python per edge; the GPI clock toggles in C), ending
                # half a period before the (n - dropped)-th edge from here, then that edge itself.
                if n - dropped > 1:
                    await Timer((n - dropped - 1) * self.period_ns + self.period_ns / 2, unit="ns")
                await edge
                self.dropped += dropped
                self.cycle += n
                self.skipped += n
                if self.on_resume is not None:
                    self.on_resume()
            cycle = self.cycle
            for a in agents:
                a.drive(cycle)
            await settled
            for a in agents:
                a.sample(cycle)
            for w in self.watchers:
                w(cycle)
            if self.skipper is not None:
                self._skip = max(0, int(self.skipper(cycle)))

    async def cycles(self, n: int) -> None:
        for _ in range(n):
            await RisingEdge(self.clk)

    async def until(self, predicate, *, timeout: int, what: str) -> int:
        """Wait until ``predicate()`` holds; fail with ``what`` after ``timeout`` cycles."""
        start = self.cycle
        while not predicate():
            if self.cycle - start > timeout:
                raise AssertionError(f"timeout: {what} did not happen within {timeout} cycles "
                                     f"(cycle {self.cycle})")
            await RisingEdge(self.clk)
        return self.cycle - start
