"""Driver and monitor for Amaranth ``lib.stream`` interfaces (``<prefix>__valid/__ready/__payload``).

The driver presents payloads with random ``valid`` gaps; the monitor drives ``ready`` with random stalls,
records every transfer, and asserts the stream rule: once ``valid`` is high, ``valid`` and ``payload``
hold until ``ready``. Payloads are ints (the flat Verilog vector, read once per cycle); decode them with
the layout's own offsets (:func:`verif.harness.structs.unpack`) or the packet module's helpers. Ports are
written only when their value changes (:class:`verif.harness.structs.Port`).
"""

import collections

from verif.harness.cycler import Agent
from verif.harness.gates import Gate
from verif.harness.structs import Port

__all__ = ["StreamDriver", "StreamMonitor", "StreamProtocolError", "record_cycles"]


class StreamProtocolError(AssertionError):
    pass


def _sig(dut, prefix, name, required=True):
    handle = getattr(dut, f"{prefix}__{name}", None)
    if handle is None and required:
        raise AttributeError(f"the DUT has no port {prefix}__{name}")
    return None if handle is None else Port(handle)


class StreamDriver(Agent):
    """Sends queued payloads on stream ``prefix``; ``gap`` is the fraction of cycles ``valid`` idles."""

    def __init__(self, dut, prefix: str, rng, *, gap: float = 0.0, burst: float = 1.0, on_accept=None):
        self.name = prefix
        self.valid = _sig(dut, prefix, "valid")
        self.payload = _sig(dut, prefix, "payload")
        self.ready = _sig(dut, prefix, "ready", required=False)
        self.gate = Gate(rng, gap, burst)
        self.queue = collections.deque()
        self.current = None
        self.sent = 0
        self.on_accept = on_accept
        self.valid.write(0)

    def send(self, payload: int) -> None:
        self.queue.append(int(payload))

    @property
    def idle(self) -> bool:
        return self.current is None and not self.queue

    def drive(self, cycle):
        if self.current is None and self.queue and self.gate.open():
            self.current = self.queue.popleft()
            self.payload.write(self.current)
            self.valid.write(1)
        elif self.current is None:
            self.valid.write(0)

    def sample(self, cycle):
        if self.current is not None and (self.ready is None or self.ready.high()):
            self.sent += 1
            if self.on_accept:
                self.on_accept(self.current, cycle)
            self.current = None


class StreamMonitor(Agent):
    """Receives on stream ``prefix`` with ``ready`` low a ``stall`` fraction of cycles.

    ``on_item(payload, cycle)`` is called per transfer; ``items`` keeps them when no callback is given.
    """

    def __init__(self, dut, prefix: str, rng, *, stall: float = 0.0, burst: float = 1.0, on_item=None):
        self.name = prefix
        self.valid = _sig(dut, prefix, "valid")
        self.payload = _sig(dut, prefix, "payload")
        self.ready = _sig(dut, prefix, "ready", required=False)
        self.gate = Gate(rng, stall, burst)
        self.on_item = on_item
        self.items = []
        self.count = 0
        self._ready_now = True
        self._held = None     # payload presented but not taken last cycle
        self.seen_valid = False   # valid at the last sample

    def drive(self, cycle):
        self._ready_now = self.gate.open()
        if self.ready is not None:
            self.ready.write(int(self._ready_now))

    def park(self):
        """Hold the DUT off (ready low) while the testbench skips cycles (:class:`Cycler`)."""
        if self.ready is not None:
            self._ready_now = False
            self.ready.write(0)

    def sample(self, cycle):
        valid = self.seen_valid = self.valid.high()
        if self._held is not None:
            if not valid:
                raise StreamProtocolError(f"{self.name}: valid dropped at cycle {cycle} before the payload "
                                          f"{self._held:#x} was accepted")
            payload = self.payload.read()
            if payload != self._held:
                raise StreamProtocolError(f"{self.name}: payload changed from {self._held:#x} to "
                                          f"{payload:#x} at cycle {cycle} while valid and not ready")
        if not valid:
            self._held = None
            return
        payload = self.payload.read() if self._held is None else self._held
        taken = self.ready is None or self._ready_now
        if taken:
            self._held = None
            self.count += 1
            if self.on_item:
                self.on_item(payload, cycle)
            else:
                self.items.append(payload)
        else:
            self._held = payload


def record_cycles(agent, hook: str = "on_accept") -> list[int]:
    """The cycles at which ``agent``'s callback ``hook`` fires (a driver's ``on_accept``, a monitor's
    ``on_item``), appended to the returned list; the callback already installed still runs after."""
    cycles = []
    inner = getattr(agent, hook)

    def tap(item, cycle):
        cycles.append(cycle)
        if inner:
            inner(item, cycle)
    setattr(agent, hook, tap)
    return cycles
