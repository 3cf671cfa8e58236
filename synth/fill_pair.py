"""Timing of the path that crosses the integrated switch's AL-TLB and its fill bridge.

The sum of parts (:mod:`synth.hierarchical`) times each part alone, its ports driven ideally; in the
integrated switch the AL-TLB's ``mem.resp`` comes from the fill bridge's response register, whose load
(fan-out) the part does not see. This synthesizes the two composed as the switch composes them
(:class:`~hw.switch.tlb_fill_bridge.TlbFillBridge` into :class:`~hw.switch.al_tlb.AlTlb`, at the
integrated switch's table sizes) with the area flow (yosys, the CAM as a macro, OpenSTA) and writes the
worst register-to-register path::

    dysharp timing --fill-pair [--ports 4] [--out build/synth/fill_pair.json]

``dysharp timing --paths build/synth/work/fill_pair__ports4`` then names the path's registers.
"""

import inspect
from pathlib import Path

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out, connect, flipped

__all__ = ["FillPair", "pair_timing"]


class FillPair(wiring.Component):
    """The fill bridge feeding the AL-TLB's backing port; every other port of the two is a module port.
    Parameters: the :class:`~hw.switch.dysharp_switch.DySharpSwitch` ones the two take (its defaults)."""

    def __init__(self, *, ports: int = 4, groups: int | None = None, tlb_entries: int | None = None,
                 tlb_mshrs: int | None = None, tlb_timeout: int | None = None):
        from hw.switch.al_tlb import AlTlb
        from hw.switch.dysharp_switch import DySharpSwitch, switch_timeouts
        from hw.switch.tlb_fill_bridge import TlbFillBridge
        d = {k: v.default for k, v in inspect.signature(DySharpSwitch.__init__).parameters.items()}
        self.tlb = AlTlb(ports=ports, groups=groups or d["groups"], entries=tlb_entries or d["tlb_entries"],
                         mshrs=tlb_mshrs or d["tlb_mshrs"],
                         timeout=tlb_timeout or switch_timeouts(ports=ports, tlb_mshrs=tlb_mshrs or d["tlb_mshrs"])[0])
        self.fill = TlbFillBridge(port=0, ports=ports)
        tm, fm = self.tlb.signature.members, self.fill.signature.members
        super().__init__({"tr": tm["tr"], "cfg": tm["cfg"], "counters": tm["counters"],
                          "tx": fm["tx"], "rx": fm["rx"], "bad": Out(32)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.tlb = self.tlb
        m.submodules.fill = self.fill
        connect(m, self.tlb.mem, self.fill.mem)
        connect(m, flipped(self.tr), self.tlb.tr)
        connect(m, flipped(self.cfg), self.tlb.cfg)
        connect(m, self.fill.tx, flipped(self.tx))
        connect(m, flipped(self.rx), self.fill.rx)
        m.d.comb += [self.counters.eq(self.tlb.counters), self.bad.eq(self.fill.bad)]
        return m


def pair_timing(ports: int = 4, build: str = "build/synth") -> dict:
    """Synthesize :class:`FillPair` at ``ports`` and time it: area (um^2, 45 nm, arrays not costed), the
    critical path in ps at 45 nm and scaled to N5, and the slack against the port clock."""
    from amaranth.back import verilog

    from . import area, liberty, macros, scaling, tools, yosys_flow
    if not isinstance(ports, int) or not 4 <= ports <= 64:
        raise ValueError(f"ports must be an integer in 4..64 (the integrated switch's range), got {ports!r}")
    work = Path(build) / "work" / f"fill_pair__ports{ports}"
    work.mkdir(parents=True, exist_ok=True)
    v = work / "fill_pair.v"
    v.write_text(verilog.convert(FillPair(ports=ports), name="fill_pair"))
    lp = tools.liberty_path()
    period = scaling.PORT_PERIOD_PS / scaling.DELAY
    syn = yosys_flow.synthesize(v, "fill_pair", liberty.load(lp), lp, period_ps=period, workdir=work,
                                netlist=True, macros=[m["module"] for m in macros.find_macros(v.read_text())])
    t = area.sta_timing(work / "netlist.v", "fill_pair", lp, period, work)
    crit = t["min_period_ps"] if t else syn["critical_path_ps"]
    return {"ports": ports, "logic_um2": round(syn["area_um2"], 1), "critical_path_ps_45": round(crit, 1),
            "critical_path_ps_n5": round(crit * scaling.DELAY, 1),
            "slack_ps_n5": round(scaling.PORT_PERIOD_PS - crit * scaling.DELAY, 1),
            "timing": "OpenSTA" if t else "ABC", "workdir": str(work)}
