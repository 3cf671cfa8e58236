"""The ``ld_reduce`` unit: the :class:`~hw.switch.reduction_engine.ReductionEngine` with the stand-in
:class:`~hw.switch.linear_translator.LinearTranslator` on its translation port.

This is the block a switch port would instantiate until the AL-TLB replaces the translator (same
interface, :mod:`hw.switch.translate_if`). Ports: the engine's (``req``, ``resp``, ``rd``, ``out``, ``cfg``,
status) plus ``tcfg`` (translator base writes) and ``tcfg_errors``. Latency and throughput are the
engine's, with the translator's one cycle per translation.
"""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import DEFAULT_FLIT_WIDTH, flit_layout
from .group_table import group_write_layout
from .linear_translator import LinearTranslator, base_write_layout
from .reduction_buffer import status_members
from .reduction_engine import ENGINE_COUNTERS, ReductionEngine

__all__ = ["LdReduceUnit"]


class LdReduceUnit(wiring.Component):
    """Parameters: those of :class:`ReductionEngine` (``acc_stages`` included: 3, the default, meets the
    640 ps clock) plus ``row_bytes`` and ``rows`` of the translator."""

    def __init__(self, *, ports: int = 8, entries: int = 64, max_length: int = 16,
                 flit_width: int = DEFAULT_FLIT_WIDTH, timeout: int = 8192, outstanding: int | None = None,
                 groups: int = 16, translate_slots: int = 16, row_bytes: int = 14336, rows: int = 1 << 18,
                 acc_stages: int = 3):
        self.engine = ReductionEngine(ports=ports, entries=entries, max_length=max_length,
                                      flit_width=flit_width, timeout=timeout, outstanding=outstanding,
                                      groups=groups, translate_slots=translate_slots, row_bytes=row_bytes,
                                      acc_stages=acc_stages)
        try:
            self.translator = LinearTranslator(ports=ports, row_bytes=row_bytes, rows=rows)
        except ValueError:
            self.engine._MustUse__silence = True    # never used: do not warn about it
            raise
        fl = flit_layout(flit_width)
        super().__init__({
            "req": In(stream.Signature(fl)),
            "resp": In(stream.Signature(fl)),
            "rd": Out(stream.Signature(fl)),
            "out": Out(stream.Signature(fl)),
            "cfg": In(stream.Signature(group_write_layout(ports))),
            "tcfg": In(stream.Signature(base_write_layout(ports))),
            "tcfg_errors": Out(32),
            **status_members(entries, ENGINE_COUNTERS),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = e = self.engine
        m.submodules.translator = t = self.translator
        wiring.connect(m, e.translate, t.client)
        for name in ("req", "resp", "cfg"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(e, name))
        for name in ("rd", "out"):
            wiring.connect(m, getattr(e, name), wiring.flipped(getattr(self, name)))
        wiring.connect(m, wiring.flipped(self.tcfg), t.cfg)
        m.d.comb += self.tcfg_errors.eq(t.cfg_errors)
        for name in ("in_use", *ENGINE_COUNTERS):
            m.d.comb += getattr(self, name).eq(getattr(e, name))
        return m
