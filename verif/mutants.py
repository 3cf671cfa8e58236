"""Deliberately broken RTL variants that tests build to show that a check fails them (a check that passes
its mutant cannot fail). Each is the real block with one behaviour changed; :func:`register` adds them to
the module registry under their own names, so the cocotb runner builds them like any module."""

import contextlib

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import memory

from hw import registry
from hw.credit import CreditSender
from hw.switch.egress_queue import EgressQueue
from hw.switch.packet_queues import PacketQueues
from hw.switch import reduction_buffer as _rb
from hw.switch import reduction_engine as _re

__all__ = ["AllStaleEvents", "AllStaleBuffer", "AllStaleEngine", "GreedySender", "RepeatingQueues", "StuckEgressQueue",
           "register"]


@contextlib.contextmanager
def _swapped(module, name: str, replacement):
    """``module.name`` is ``replacement`` while the block elaborates (its parent looks the name up then)."""
    saved = getattr(module, name)
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, saved)


class GreedySender(CreditSender):
    """A credit sender that sends whenever it is offered a flit, credit or not (the credit proofs' mutant)."""

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.i.ready.eq(1), self.link.valid.eq(self.i.valid), self.link.flit.eq(self.i.payload)]
        m.d.sync += self.credits_left.eq(self.credits_left - self.link.valid + self.link.credit)
        return m


class RepeatingQueues(PacketQueues):
    """Broken queues: a dequeue of VOQ 0 leaves its head in place, so its first packet is read again."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        with m.If(self.deq[0]):
            m.d.sync += self.head[0].eq(self.head[0])
        return m


class StuckEgressQueue(EgressQueue):
    """A broken output queue: its read pointer never advances, so it repeats its first flit."""

    def elaborate(self, platform):
        m = Module()
        D = self.depth
        m.submodules.mem = mem = memory.Memory(shape=self.width, depth=D, init=[])
        wptr = Signal(range(D))
        wp = mem.write_port()
        m.d.comb += [wp.addr.eq(wptr), wp.data.eq(self.w_data[0]), wp.en.eq(self.w_valid[0])]
        rp = mem.read_port(domain="comb")
        pop = self.r.valid & self.r.ready
        m.d.comb += [rp.addr.eq(0), self.r.payload.eq(rp.data), self.r.valid.eq(self.level != 0)]
        m.d.sync += [wptr.eq(Mux(wptr == D - 1, 0, wptr + self.w_valid[0])),
                     self.level.eq(self.level + self.w_valid[0] - pop)]
        return m


class AllStaleEvents(_rb.EntryEvents):
    """Counts every contribution it examines as ``stale`` (live ones too); everything else unchanged, so
    the results stay right and only the counter is wrong."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        seen = Signal()
        m.d.sync += [seen.eq(self.seen), self.stale.eq(self.stale + seen)]     # overrides the real count
        return m


class AllStaleBuffer(_rb.ReductionBuffer):
    """The reduction buffer with :class:`AllStaleEvents`."""

    def elaborate(self, platform):
        with _swapped(_rb, "EntryEvents", AllStaleEvents):
            return super().elaborate(platform)


class AllStaleEngine(_re.ReductionEngine):
    """The reduction engine with :class:`AllStaleBuffer`."""

    def elaborate(self, platform):
        with _swapped(_re, "ReductionBuffer", AllStaleBuffer):
            return super().elaborate(platform)


MUTANTS = {"reduction_engine_all_stale": f"{__name__}:AllStaleEngine"}


def register() -> None:
    """Register the mutants (once)."""
    for name, factory in MUTANTS.items():
        if name not in registry.MODULES:
            registry.register(name, factory, points=[{}], doc="mutant: " + factory)
