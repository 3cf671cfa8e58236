"""Reference models of the memory manager (:mod:`hw.gpu_nic.memory_manager`).

* :class:`MemoryManagerSpec` -- the contract as an atomic function: ``command(...)`` applies a
  configuration or epoch reset, ``serve(group, index, src)`` answers one backing read (allocating a slot
  when the group is a dispatch group). It is also what the AL-TLB testbenches use as each destination
  GPU's backing table, and :meth:`MemoryManagerSpec.slot_of` says which slot a token was given.
* :class:`MemoryManagerModel` -- the RTL's timing around the spec: requests are taken one at a time in
  IDLE (configuration first), answered 3 cycles later and held until taken; counters move in the DECIDE
  cycle; an epoch reset that wraps the epoch counter makes the manager busy for ``2**index_bits`` cycles
  while it clears the layout. Nothing can change the state between a request's acceptance and its
  decision (configuration is only taken in IDLE), so serving it atomically at acceptance is exact.
"""

import collections
import dataclasses

from hw.gpu_nic.memory_manager import MmCounter
from hw.packet import ErrorCode

__all__ = ["MemoryManagerSpec", "MemoryManagerModel", "MmInputs", "MmOutputs", "SET_GROUP", "EPOCH_RESET"]

SET_GROUP = 0
EPOCH_RESET = 1


@dataclasses.dataclass(frozen=True)
class GroupBinding:
    valid: int
    alloc: int
    layout: int
    base: int
    stride: int


class MemoryManagerSpec:
    def __init__(self, *, groups=16, layouts=4, index_bits=10, slots=1024, epoch_bits=8):
        self.groups, self.layouts, self.index_bits = groups, layouts, index_bits
        self.slots, self.epoch_bits = slots, epoch_bits
        self.rows = 1 << index_bits
        self.gcfg = {}
        self.epoch = [0] * layouts
        self.bump = [0] * layouts
        self.table = {}                 # (layout, index) -> (epoch, src, slot)
        self.counters = collections.Counter()

    def command(self, op, group=0, valid=0, alloc=0, layout=0, base=0, stride=0) -> tuple[bool, bool]:
        """Apply a command; returns (legal, starts a sweep)."""
        if op == SET_GROUP:
            legal = group < self.groups and layout < self.layouts and (not valid or stride != 0)
            if legal:
                self.gcfg[group] = GroupBinding(valid, alloc, layout, base, stride)
            else:
                self.counters[MmCounter.CFG_ERRORS] += 1
            return legal, False
        if layout >= self.layouts:
            self.counters[MmCounter.CFG_ERRORS] += 1
            return False, False
        self.counters[MmCounter.EPOCH_RESETS] += 1
        self.bump[layout] = 0
        wrap = self.epoch[layout] == (1 << self.epoch_bits) - 1
        self.epoch[layout] = (self.epoch[layout] + 1) % (1 << self.epoch_bits)
        if wrap:
            for k in [k for k in self.table if k[0] == layout]:
                del self.table[k]
        return True, wrap

    def binding(self, group) -> GroupBinding | None:
        g = self.gcfg.get(group) if group < self.groups else None
        return g if g is not None and g.valid else None

    def serve(self, group, index, src) -> tuple[int, int]:
        """(addr, error code) for a backing read; allocates on a dispatch group's first read."""
        code, slot, g = self._decide(group, index, src)
        counter = {ErrorCode.NONE.value: None, ErrorCode.BUFFER_FULL.value: MmCounter.BUFFER_FULL,
                   ErrorCode.TLB_FAULT.value: MmCounter.TLB_FAULT, ErrorCode.ISOLATION.value: MmCounter.ISOLATION,
                   ErrorCode.OUT_OF_BOUNDS.value: MmCounter.OUT_OF_BOUNDS}[code]
        if counter is not None:
            self.counters[counter] += 1
        if code != ErrorCode.NONE.value:
            return 0, code
        key = (g.layout, index)
        if key in self.table and self.table[key][0] == self.epoch[g.layout]:
            self.counters[MmCounter.FOUND] += 1
        else:
            self.table[key] = (self.epoch[g.layout], src, slot)
            self.bump[g.layout] += 1
            self.counters[MmCounter.ALLOCATED] += 1
        return (g.base + slot * g.stride * 16) & ((1 << 48) - 1), code

    def _decide(self, group, index, src):
        g = self.binding(group)
        if g is None:
            return ErrorCode.TLB_FAULT.value, 0, None
        if index >= self.rows:
            return ErrorCode.OUT_OF_BOUNDS.value, 0, g
        e = self.table.get((g.layout, index))
        if e is not None and e[0] == self.epoch[g.layout]:
            return (ErrorCode.NONE.value if e[1] == src else ErrorCode.ISOLATION.value), e[2], g
        if not g.alloc:
            return ErrorCode.TLB_FAULT.value, 0, g
        if self.bump[g.layout] >= self.slots:
            return ErrorCode.BUFFER_FULL.value, 0, g
        return ErrorCode.NONE.value, self.bump[g.layout], g

    def slot_of(self, layout, index):
        """The slot recorded for ``index`` in ``layout`` in the current epoch (None if none)."""
        e = self.table.get((layout, index))
        return e[2] if e is not None and e[0] == self.epoch[layout] else None

    def used(self, layout) -> int:
        return self.bump[layout]


@dataclasses.dataclass
class MmInputs:
    req_valid: int = 0
    req: tuple | None = None        # (group, index, dst, src, tag)
    resp_ready: int = 0
    cfg_valid: int = 0
    cfg: tuple | None = None        # (op, group, valid, alloc, layout, base, stride)


@dataclasses.dataclass
class MmOutputs:
    req_ready: int
    resp_valid: int
    resp: tuple | None              # (addr, code, tag) when valid
    cfg_ready: int
    counters: list


class MemoryManagerModel:
    IDLE, LOOK, DECIDE, RESP, SWEEP = range(5)

    def __init__(self, **params):
        self.spec = MemoryManagerSpec(**params)
        self.state = self.IDLE
        self.answer = None              # (addr, code, tag) being prepared / presented
        self.pending_counts = None      # spec counter increments of the request in flight
        self.sweep_left = 0
        self.counters = [0] * len(MmCounter)

    def outputs(self, cfg_valid=0) -> MmOutputs:
        idle = self.state == self.IDLE
        return MmOutputs(req_ready=int(idle and not cfg_valid), resp_valid=int(self.state == self.RESP),
                         resp=self.answer if self.state == self.RESP else None, cfg_ready=int(idle),
                         counters=list(self.counters))

    def _count(self, delta):
        for c, n in delta.items():
            self.counters[c] = (self.counters[c] + n) & 0xFFFFFFFF

    def step(self, i: MmInputs) -> MmOutputs:
        outs = self.outputs(i.cfg_valid)
        spec = self.spec
        if self.state == self.IDLE:
            if i.cfg_valid:
                before = collections.Counter(spec.counters)
                _, sweep = spec.command(*i.cfg)
                self._count(spec.counters - before)
                if sweep:
                    self.state, self.sweep_left = self.SWEEP, spec.rows
            elif i.req_valid:
                group, index, _, src, tag = i.req
                before = collections.Counter(spec.counters)
                addr, code = spec.serve(group, index, src)
                self.pending_counts = spec.counters - before
                self.answer = (addr, code, tag)
                self.state = self.LOOK
        elif self.state == self.LOOK:
            self.state = self.DECIDE
        elif self.state == self.DECIDE:
            self._count(self.pending_counts)
            self.state = self.RESP
        elif self.state == self.RESP:
            if i.resp_ready:
                self.state = self.IDLE
        elif self.state == self.SWEEP:
            self.sweep_left -= 1
            if self.sweep_left == 0:
                self.counters[MmCounter.SWEEPS] += 1
                self.state = self.IDLE
        return outs
