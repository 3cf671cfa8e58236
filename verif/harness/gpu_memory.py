"""A GPU memory model for the NIC testbenches: a sparse flit-addressed store behind the write and read
ports of :mod:`hw.gpu_nic.memory_if`.

* :class:`GpuMemory`: the store. Unwritten flits read as :func:`default_word` of their address, so a
  test never has to pre-fill source rows and a wrong address shows up as wrong data.
* :class:`MemWritePort`: takes ``<prefix>__valid/payload`` writes with random ``ready`` stalls (the stream
  rule is checked) and applies them when accepted; ``writes`` logs (addr, data, cycle).
* :class:`MemReadPort`: accepts ``<prefix>__req`` addresses with random stalls and answers on
  ``<prefix>__resp`` in order, each no earlier than ``latency`` cycles after its request, holding the
  data until taken, with random valid gaps. The data is read when the request is accepted.
"""

import collections

from hw.gpu_nic.memory_if import flit_addr_bits, mem_write_layout

from verif.harness.cycler import Agent
from verif.harness.gates import Gate
from verif.harness.stream import StreamMonitor
from verif.harness.structs import Port, fields

__all__ = ["default_word", "GpuMemory", "MemWritePort", "MemReadPort"]

_MIX = 0x9E3779B97F4A7C15F39CC0605CEDC835


def default_word(addr: int, flit_width: int = 128) -> int:
    """Deterministic, address-unique contents of a flit nobody wrote."""
    mask = (1 << flit_width) - 1
    x = ((int(addr) + 1) * _MIX) & mask
    return (x ^ (x >> 61) ^ (int(addr) << 7)) & mask


class GpuMemory:
    def __init__(self, flit_width: int = 128):
        self.flit_width = flit_width
        self.words: dict[int, int] = {}

    def read(self, addr: int) -> int:
        return self.words.get(int(addr), default_word(addr, self.flit_width))

    def write(self, addr: int, data: int) -> None:
        self.words[int(addr)] = int(data)


class MemWritePort(Agent):
    def __init__(self, dut, prefix: str, memory: GpuMemory, rng, *, stall: float = 0.0, burst: float = 1.0):
        self.memory = memory
        self.layout = mem_write_layout(memory.flit_width)
        f = fields(self.layout)
        (self._ao, aw), (self._do, dw) = f["addr"], f["data"]
        self._am, self._dm = (1 << aw) - 1, (1 << dw) - 1
        self.writes = []
        self.mon = StreamMonitor(dut, prefix, rng, stall=stall, burst=burst, on_item=self._on_item)

    def _on_item(self, payload, cycle):
        addr, data = (payload >> self._ao) & self._am, (payload >> self._do) & self._dm
        self.memory.write(addr, data)
        self.writes.append((addr, data, cycle))

    def drive(self, cycle):
        self.mon.drive(cycle)

    def park(self):
        self.mon.park()

    def sample(self, cycle):
        self.mon.sample(cycle)


class MemReadPort(Agent):
    def __init__(self, dut, prefix: str, memory: GpuMemory, rng, *, latency: int = 10, stall: float = 0.0,
                 gap: float = 0.0, burst: float = 1.0):
        if latency < 1:
            raise ValueError(f"read latency must be >= 1 cycle, got {latency}")
        self.memory = memory
        self.latency = latency
        self.addr_mask = (1 << flit_addr_bits(memory.flit_width)) - 1
        self.req = StreamMonitor(dut, f"{prefix}__req", rng, stall=stall, burst=burst, on_item=self._on_req)
        self.valid = Port(getattr(dut, f"{prefix}__resp__valid"))
        self.payload = Port(getattr(dut, f"{prefix}__resp__payload"))
        self.ready = Port(getattr(dut, f"{prefix}__resp__ready"))
        self.gate = Gate(rng, gap, burst)
        self.pending = collections.deque()     # (due cycle, data)
        self.current = None
        self.requests = 0
        self.valid.write(0)

    def _on_req(self, addr, cycle):
        self.requests += 1
        self.pending.append((cycle + self.latency, self.memory.read(addr & self.addr_mask)))

    @property
    def idle(self) -> bool:
        return self.current is None and not self.pending

    def park(self):
        self.req.park()

    def drive(self, cycle):
        self.req.drive(cycle)
        if self.current is None and self.pending and self.pending[0][0] <= cycle and self.gate.open():
            self.current = self.pending.popleft()[1]
            self.payload.write(self.current)
            self.valid.write(1)
        elif self.current is None:
            self.valid.write(0)

    def sample(self, cycle):
        self.req.sample(cycle)
        if self.current is not None and self.ready.high():
            self.current = None
