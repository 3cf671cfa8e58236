"""Hierarchical area of a large switch point: its parts synthesized alone, each once, and summed.

A flat 64-port switch is ~35 MB of Verilog; synthesizing it whole takes hours here. Synthesis teams cost
such a design bottom-up, and so does this: one input unit, the allocator, the crossbar, one egress queue,
one credit sender and the group table are each generated at the point's parameters and run through the
same flow as :func:`synth.area.flat_area_point` (yosys, OpenSTA, CACTI or flip-flops for every array), and

    area = N x input unit + allocator + crossbar + N x (egress queue + credit sender) + group table
           (+ N x request register, with ``req_stage``).

Every figure of the flat result (areas, transistors, cells, arrays) is summed the same way, so the
report reads a hierarchical point like a flat one; ``result["hierarchical"]`` lists the parts.

What it leaves out, and so the stated margin: the switch top's own glue (output-ownership register,
egress space/admit comparators, the 16 error counters) and any optimisation across part boundaries (a
flat synthesis may share or simplify logic between parts, e.g. constant inputs; the input unit is
synthesized for port 0, and the others differ only in constants: in the switch each takes its index on a
strap input tied to a constant, which the flat synthesis propagates, and the part bakes in 0).
:func:`validate` compares both on a point small enough to flatten (``VALIDATION_POINT``: 4 ports, 32
input cells): the sum of parts was 1.98% below the flat area (181,240 vs 184,905 um^2; arrays equal,
random logic 26,004 vs 29,669 um^2, the difference being the top's glue); ``tests/hw/switch/test_elab.py`` asserts
it within ``HIER_MARGIN`` (5%).

The integrated DySHARP switch (``dysharp_switch``, from ``DYSHARP_HIER_MIN_PORTS`` ports: a flat 8-port top is
~11 MB of Verilog and 0.87 M cells, past what the WebAssembly yosys can hold) is costed the same way:

    area = request network + response network (each an NVSwitch, itself hierarchical from 16 ports)
           + N x (AL-TLB + reduction engine + egress translator + fill bridge + VC receiver + VC sender
                  + 2 network-output receivers + 2 credit senders + 2 ingress checks + 3 two-way merges
                  + one five-way merge).

It leaves out the four packet splits per port (a register and a mux each), the status totals' adders and
the configuration decode.

Critical path: the maximum over the parts, each register-to-register inside its part with its ports
unconstrained (OpenSTA's input/output delay 0), and over the :data:`CROSS_PATHS`, the combinational paths
from one part into another that the design has by construction, timed as the sum of their two halves (an
input unit's request vector into the allocator, in the same cycle, unless the switch registers its
requests: ``req_stage``, the default from 32 ports). Other paths across parts start or end at a register
next to the boundary; the figure is labelled ``timing_source = "max of parts (...)"``. A cross path's sum
bounds the real path; :func:`flat_check` (``dysharp area --flat-check switch:ports=16``) times a
point flat instead, and :mod:`synth.timing` uses that while the parts' row is unchanged (the 16-port
switch: 2,738 ps flat against a bound of 3,021).
"""

from contextlib import contextmanager
from pathlib import Path

from hw import registry
from hw.packet import NARROW
from hw.switch.allocator import ISlipAllocator
from hw.vc_link import VcReceiver, VcSender

from . import area, timing, tools
from .paths import sta_inputs
from .summary_csv import merge_csv, point_label, relabel

__all__ = ["HIER_MIN_PORTS", "HIER_MARGIN", "VALIDATION_POINT", "applies", "parts", "part_modules", "area_point",
           "validate", "flat_check", "write_flat_checks"]

# Switch points with at least this many ports are costed hierarchically by ``dysharp area``: 16 ports is
# ~5 MB of Verilog, past the 3 MB the flat flow is allowed by default.
HIER_MIN_PORTS = 16

SWITCH_MODULES = ("switch", "switch_fifo")
NVSWITCH_FACTORY = "hw.switch.nvswitch:NVSwitch"
DYSHARP_MODULES = ("dysharp_switch",)
DYSHARP_HIER_MIN_PORTS = 8

# Parts costed from two slices along one parameter, extrapolated linearly to its value: the crossbar is
# N output columns (each its hit vector, one-hot encoder and N:1 multiplexer over every lane), plus logic
# the columns share (the inputs' inverters and buffers, which a one-column part would count N times), so
# area is a + b x n_out; it is synthesized with 2 and 4 output columns. The whole 64 x 64 crossbar at
# 130 bits x 2 lanes is 2.1 M gates before mapping (half an hour in Debian's native yosys, past the
# WebAssembly yosys's 4 GB); its 2- and 4-column slices take about a minute. Measured against whole
# syntheses (``dysharp area --check-slices``): +4.6% at 8 ports (18,545 vs 17,731
# um^2), +0.7% at 16 (70,108 vs 69,619), -2.4% at 64 (1,053,974 vs 1.08 mm^2).
SLICED = {"xbar": ("n_out", (2, 4))}

# The point on which flat and hierarchical area are compared, and the margin they must agree within.
VALIDATION_POINT = {"ports": 4, "credits": 32}
HIER_MARGIN = 0.05


def _is_switch(module: str) -> bool:
    return module in SWITCH_MODULES or (module in registry.MODULES and
                                        registry.MODULES[module].factory == NVSWITCH_FACTORY)


_flat_up_to = 0     # inside :func:`flat_up_to`: switch and integrated-switch points up to this many ports are flat


def applies(module: str, params: dict, min_ports: int = HIER_MIN_PORTS) -> bool:
    """Whether ``dysharp area`` costs this point hierarchically."""
    if module in DYSHARP_MODULES:
        n = params.get("ports", 0)
        return n >= min(min_ports, DYSHARP_HIER_MIN_PORTS) and n > _flat_up_to
    return _is_switch(module) and params.get("ports", 0) >= min_ports and params["ports"] > _flat_up_to


@contextmanager
def flat_up_to(ports: int):
    """Within the block, switch and ``dysharp_switch`` points of up to ``ports`` ports are synthesized flat
    (area, timing and the power study's netlist): the flat cross-check of the sum of parts. From 8 ports
    the flat integrated top needs the native yosys (the WebAssembly one traps past 4 GB; the flow falls
    back by itself); the plain switch flat at 16 ports (5.3 MB) fits the WebAssembly one."""
    global _flat_up_to
    old, _flat_up_to = _flat_up_to, ports
    try:
        yield
    finally:
        _flat_up_to = old


def dysharp_parts(params: dict) -> list[tuple[str, str, dict, int]]:
    """(part name, factory, parameters, count) of a ``dysharp_switch`` at ``params`` (as it builds them)."""
    from hw.switch.dysharp_switch import _NET_OUT_DEPTH, switch_timeouts
    N, W, P = params["ports"], params["flit_width"], params["max_payload"]
    tlb_timeout, red_timeout, _ = switch_timeouts(**params)
    net = {"ports": N, "out_credits": _NET_OUT_DEPTH, "flit_width": W, "max_payload": P}
    L, G = params["link_credits"], params["gpu_credits"]
    return [
        ("reqnet", NVSWITCH_FACTORY, {**net, "credits": params["credits"], "groups": params["groups"]}, 1),
        ("respnet", NVSWITCH_FACTORY, {**net, "credits": params["resp_credits"], "groups": 2, "multicast": False,
                                       **({"iterations": params["resp_iterations"]}
                                          if params.get("resp_iterations", 1) != 1 else {})}, 1),
        ("tlb", "hw.switch.al_tlb:AlTlb", {"ports": N, "groups": params["groups"], "entries": params["tlb_entries"],
                                           "mshrs": params["tlb_mshrs"], "timeout": tlb_timeout}, N),
        ("engine", "hw.switch.reduction_engine:ReductionEngine",
         {"ports": N, "entries": params["red_entries"], "max_length": P, "flit_width": W,
          "timeout": red_timeout, "groups": params["groups"], "defer_translation": True}, N),
        ("egress", "hw.switch.egress_translator:EgressTranslator",
         {"port": 0, "ports": N, "flit_width": W, "max_payload": P, "slots": params["egress_slots"]}, N),
        ("fill", "hw.switch.tlb_fill_bridge:TlbFillBridge", {"port": 0, "ports": N, "flit_width": W}, N),
        ("vc_rx", "hw.switch.fill_bypass:FillBypassReceiver",
         {"credits": L, "flit_width": W, **({"ports": N} if N > NARROW.max_ports else {})}, N)
        if params.get("fill_bypass") else ("vc_rx", "synth.hierarchical:_VcReceiver", {"credits": L, "flit_width": W}, N),
        ("vc_tx", "synth.hierarchical:_VcSender", {"credits": G, "flit_width": W}, N),
        ("net_rx", "hw.credit:CreditReceiver", {"depth": _NET_OUT_DEPTH, "flit_width": W}, 2 * N),
        ("req_tx", "hw.credit:CreditSender", {"credits": params["credits"], "flit_width": W}, N),
        ("resp_tx", "hw.credit:CreditSender", {"credits": params["resp_credits"], "flit_width": W}, N),
        ("check", "hw.switch.ingress_check:IngressCheck",    # past 64 ports it reads the wide header
         {"port": 0, "vc": 0, "flit_width": W, **({"ports": N} if N > NARROW.max_ports else {})}, 2 * N),
        ("merge2", "hw.packet_stream:PacketMerge", {"n_in": 2, "flit_width": W}, 3 * N),
        ("merge5", "hw.packet_stream:PacketMerge", {"n_in": 5, "flit_width": W}, N),
    ]


def _egress_depth(params: dict) -> int:
    from hw.switch.nvswitch import NVSwitch
    sw = NVSwitch(**params)          # the switch resolves its own default
    sw._MustUse__silence = True       # built for its parameters only, never elaborated
    return sw.egress_depth


def registered_requests(params: dict) -> bool:
    """Whether a switch at ``params`` registers its requests before the allocator (``req_stage``)."""
    from hw.switch.nvswitch import uses_req_stage
    return uses_req_stage(params["ports"], params.get("req_stage"))


def parts(params: dict) -> list[tuple[str, str, dict, int]]:
    """(part name, factory, parameters, count) of a switch at ``params`` (as :class:`NVSwitch` builds it)."""
    from hw.packet import flit_layout
    N, S = params["ports"], params["speedup"]
    flit_w = flit_layout(params["flit_width"]).size
    out_credits = params["out_credits"] if params["out_credits"] is not None else params["credits"]
    staged = registered_requests(params)
    return [
        ("input", "hw.switch.input_unit:InputUnit",
         {"port": 0, "ports": N, "credits": params["credits"], "flit_width": params["flit_width"],
          "max_payload": params["max_payload"], "queueing": params["queueing"], "lanes": S,
          **({"grant_delay": 2} if staged else {})}, N),
        ("alloc", "synth.hierarchical:_Allocator", {"ports": N, "iterations": params["iterations"]}, 1),
        ("xbar", "hw.switch.crossbar:Crossbar", {"n_in": N, "n_out": N, "width": flit_w, "lanes": S}, 1),
        ("egress", "hw.switch.egress_queue:EgressQueue",
         {"width": flit_w, "depth": _egress_depth(params), "lanes": S}, N),
        ("credit_tx", "hw.credit:CreditSender", {"credits": out_credits, "flit_width": params["flit_width"]}, N),
        ("groups", "hw.switch.group_table:GroupTable",
         {"ports": N, "entries": params["groups"], "n_lookups": N}, 1),
    ] + ([("req_reg", "hw.switch.request_stage:RequestStage", {"ports": N}, N)] if staged else [])


class _Allocator(ISlipAllocator):
    """The switch allocator with keyword-only parameters, as the registry reads them."""

    def __init__(self, *, ports: int, iterations: int = 1):
        super().__init__(ports, iterations)


class _VcReceiver(VcReceiver):
    """A VC receiver with the same credits on both channels, as one integer (a list-valued parameter would
    put brackets into the file names, which OpenSTA's Tcl reads as commands)."""

    def __init__(self, *, credits: int, flit_width: int = 128):
        super().__init__(credits=(credits, credits), flit_width=flit_width)


class _VcSender(VcSender):
    """A VC sender with the same credits on both channels (see :class:`_VcReceiver`)."""

    def __init__(self, *, credits: int, flit_width: int = 128):
        super().__init__(credits=(credits, credits), flit_width=flit_width)


@contextmanager
def part_modules(module: str, plist):
    """Register each part as a (hidden) registry module for the duration, so that it is generated,
    cached and synthesized by exactly the flat flow's code."""
    added = []
    try:
        for name, factory, prm, _ in plist:
            key = f"{module}__part_{name}"
            if key not in registry.MODULES:
                registry.MODULES[key] = registry.ModuleSpec(key, factory, [prm], None, f"{module} part {name}")
                added.append(key)
        yield {name: f"{module}__part_{name}" for name, *_ in plist}
    finally:
        for key in added:
            registry.MODULES.pop(key, None)


_SUMMED = ("cell_count", "area_seq_um2", "area_logic_um2", "area_random_logic_um2", "arrays_um2",
           "arrays_cacti_um2", "arrays_ff_um2", "area_um2", "area_all_ff_um2", "array_bits",
           "transistors_logic", "transistors_all_ff", "transistors", "arrays_sram_um2", "arrays_logic_um2",
           "verilog_mb", "seconds", "yosys_s")


def _part_area(area, key: str, name: str, prm: dict, kw: dict):
    """(result, skipped) of one part: synthesized as it is; an NVSwitch datapath part (the integrated
    switch's request and response networks) from its own parts when a switch of its port count is
    (:func:`applies`: a 64-port network flat is about 58 MB of Verilog); or, for a part in ``SLICED``, at
    the two slice values of its parameter and extrapolated linearly to its value (see ``SLICED``)."""
    design = registry.point(key, prm)
    if applies(key, design.params):
        ap = area_point(design, **kw)
        return ap.result, ap.skipped
    if name not in SLICED or prm[SLICED[name][0]] <= max(SLICED[name][1]):
        ap = area.flat_area_point(design, **kw)
        return ap.result, ap.skipped
    param, (x0, x1) = SLICED[name]
    # The slices are registered like parts, next to the part (``<prefix>__part_<name>_<param><value>``).
    prefix = key.rsplit("__part_", 1)[0]
    slices = [(f"{name}_{param}{x}", registry.MODULES[key].factory, {**prm, param: x}, 1) for x in (x0, x1)]
    sliced = []
    with part_modules(prefix, slices) as names:
        for sname, _factory, sprm, _ in slices:
            ap = area.flat_area_point(names[sname], sprm, **kw)
            if ap.result is None:
                return None, ap.skipped
            sliced.append(ap.result)
    return extrapolate(sliced[0], sliced[1], x0, x1, prm[param], param), None


def extrapolate(r0: dict, r1: dict, x0: int, x1: int, x: int, param: str = "n_out") -> dict:
    """A part's result at ``param = x`` from its results at ``x0`` < ``x1``: every summed figure and cell
    count on the line through the two; timing the worse of the two slices (one more output column or bit
    adds no depth to a path); synthesis time and Verilog size what was actually run."""
    t = (x - x0) / (x1 - x0)

    def line(a, b):
        return a + t * (b - a)
    out = dict(r1)
    out.update({k: line(r0[k], r1[k]) for k in _SUMMED})
    for k in ("seconds", "yosys_s", "verilog_mb"):
        out[k] = r0[k] + r1[k]
    out["cells"] = {c: round(line(r0["cells"].get(c, 0), r1["cells"].get(c, 0)))
                    for c in set(r0["cells"]) | set(r1["cells"])}
    out["critical_path_ps"] = max(r0["critical_path_ps"] or 0, r1["critical_path_ps"] or 0) or None
    out["sliced"] = {"param": param, "at": [x0, x1], "value": x}
    return out


# Combinational paths from one part into another that the design has by construction, timed as the sum of
# the two halves: (label, from part, its output ports, to part, its input ports). An NVSwitch's input
# units present their requests to the allocator in the same cycle (registers -> request vector ->
# grant -> accept -> pointers and the registered match).
CROSS_PATHS = [("input unit request -> allocator", "input", "req[*] req_class[*]", "alloc", "req*")]


def _sta_half(result: dict, ports: str, direction: str) -> float | None:
    """The longest path of a synthesized part to (``direction="to"``) or from (``"from"``) its ``ports``, as
    a minimum period in ps (arrival, plus the setup time when it ends at a register); None when OpenSTA or
    the part's netlist is not at hand."""

    sta = tools.opensta_binary(required=False)
    work = area.BUILD / "work" / Path(result.get("verilog", "")).stem
    netlist, top = sta_inputs(work)
    if not sta or netlist is None or top is None:
        return None
    period = result["period_ps"]
    out = area.run_sta(sta, tools.liberty_path(), netlist, top, period,
                       [f"report_checks -path_delay max -{direction} [get_ports {{{ports}}}] -digits 4"],
                       work / f"cross_{direction}.tcl")
    slack = area.sta_slack_ps(out)
    return None if slack is None else period - slack


def cross_paths(results: dict[str, dict]) -> dict[str, float]:
    """{label: minimum period in ps} of the :data:`CROSS_PATHS` whose two parts are in ``results`` (part
    name -> area result): the output half's arrival plus the input half's path to a register, both with
    the flow's zero input and output delays."""
    out = {}
    for label, src, src_ports, dst, dst_ports in CROSS_PATHS:
        if src in results and dst in results and "sliced" not in results[dst]:
            a = _sta_half(results[src], src_ports, "to")
            b = _sta_half(results[dst], dst_ports, "from")
            if a is not None and b is not None:
                out[label] = round(a + b, 1)
    return out


def area_point(design: "registry.DesignPoint | str", point: dict | None = None, **kw):
    """:class:`synth.area.AreaPoint` of a switch point (a :class:`hw.registry.DesignPoint`, or a module name
    and its overrides ``point``), costed from its parts (see the module doc). Keyword arguments are
    :func:`synth.area.flat_area_point`'s; ``max_mb`` applies to each part."""

    design = registry.point(design, point)
    module, point, params = design.name, design.overrides, design.params
    plist = dysharp_parts(params) if module in DYSHARP_MODULES else parts(params)
    quiet = kw.get("quiet", False)
    if not quiet:
        print(f"[area] {module} {point}: hierarchical ({', '.join(f'{n} x{c}' for n, _, _, c in plist)})",
              flush=True)
    results = []
    # Every NVSwitch datapath (the plain switch, and the integrated switch's request and response networks)
    # names its parts alike: parts with the same parameters (input unit, allocator, crossbar) then have the
    # same Verilog and are synthesized once (the 64-port crossbar alone takes half an hour here).
    prefix = module if module in DYSHARP_MODULES else "switch"
    with part_modules(prefix, plist) as names:
        for name, _factory, prm, count in plist:
            res, skipped = _part_area(area, names[name], name, prm, kw)
            if res is None:
                # The part's own hint names a hidden part module; the user reruns the switch point.
                return area.AreaPoint(design, None,
                                      skipped=f"hierarchical part {name}: {skipped.split(';')[0]}; run "
                                              f"`{area.rerun_hint(design)}` to include it")
            results.append((name, prm, count, res))
    total = {k: sum(count * r[k] for _, _, count, r in results) for k in _SUMMED}
    # Synthesis time is spent once per part, not per instance.
    for k in ("seconds", "yosys_s", "verilog_mb"):
        total[k] = sum(r[k] for *_, r in results)
    cells = {}
    arrays = []
    for name, _, count, r in results:
        for c, n in r["cells"].items():
            cells[c] = cells.get(c, 0) + count * n
        for a in r["arrays"]:
            arrays += [{**a, "name": f"{name}.{a['name']}"}] * count
    crit = [(r["critical_path_ps"], name, r["timing_source"]) for name, _, _, r in results
            if r["critical_path_ps"]]
    # A switch that registers its requests has no combinational path from the input units to the allocator.
    staged = module not in DYSHARP_MODULES and registered_requests(params)
    crossing = {} if staged else cross_paths({name: r for name, _, _, r in results})
    crit += [(ps, label, "OpenSTA, composed") for label, ps in crossing.items()]
    worst = max(crit) if crit else (None, "", "none")
    result = {
        **total, "verilog": "hierarchical", "cells": cells, "arrays": arrays,
        "critical_path_ps": worst[0],
        "timing_source": f"max of parts ({worst[2]}, worst: {worst[1]})" if crit else "none",
        "period_ps": results[0][3]["period_ps"],
        "hierarchical": {"parts": [{"part": name, "count": count, "params": prm,
                                    "area_um2": r["area_um2"], "critical_path_ps": r["critical_path_ps"],
                                    "verilog_mb": r["verilog_mb"]} for name, prm, count, r in results],
                         "cross_paths_ps": crossing,
                         "omitted": ("packet splits, status totals, configuration decode"
                                     if module in DYSHARP_MODULES else
                                     "switch-top glue (ownership, space/admit, error counters)")
                                    + "; cross-part optimisation; paths across parts"},
    }
    if not quiet:
        print(f"[area] {module} {point}: {result['area_um2']:.0f} um^2 (sum of parts)", flush=True)
    return area.AreaPoint(design, result)


def validate(module: str = "switch", point: dict | None = None, **kw) -> dict:
    """Flat and hierarchical area of one point (default ``VALIDATION_POINT``) and their relative
    difference (hierarchical minus flat, over flat)."""
    point = point or dict(VALIDATION_POINT)
    design = registry.point(module, point)
    if applies(module, design.params):
        raise ValueError(f"validate needs a point below {HIER_MIN_PORTS} ports (flat synthesis), got {point}")
    flat = area.flat_area_point(design, max_mb=0, **kw).result
    hier = area_point(design, max_mb=0, **kw).result
    out = {"point": point, "flat_um2": flat["area_um2"], "hier_um2": hier["area_um2"],
           "rel_diff": (hier["area_um2"] - flat["area_um2"]) / flat["area_um2"],
           "flat_logic_um2": flat["area_random_logic_um2"], "hier_logic_um2": hier["area_random_logic_um2"],
           "flat_arrays_um2": flat["arrays_um2"], "hier_arrays_um2": hier["arrays_um2"],
           "flat_critical_path_ps": flat["critical_path_ps"], "hier_critical_path_ps": hier["critical_path_ps"]}
    return out


def check_slices(ports: int, part: str = "xbar", **kw) -> dict:
    """The switch part ``part`` at ``ports`` ports (the switch's defaults otherwise), synthesized whole
    and from its ``SLICED`` slices; returns both areas and their relative difference."""
    params = registry.get("switch").resolve({"ports": ports})
    name, factory, prm, _ = next(p for p in parts(params) if p[0] == part)
    plist = [(name, factory, prm, 1)]
    with part_modules(f"check{ports}", plist) as names:
        whole = area.flat_area_point(names[name], prm, max_mb=0, **kw).result
        sliced, _ = _part_area(area, names[name], name, prm, dict(kw, max_mb=0))
    return {"part": part, "ports": ports, "params": prm, "whole_um2": whole["area_um2"],
            "sliced_um2": sliced["area_um2"], "rel_diff": (sliced["area_um2"] - whole["area_um2"]) / whole["area_um2"],
            "whole_critical_path_ps": whole["critical_path_ps"], "sliced_critical_path_ps": sliced["critical_path_ps"]}


def flat_check(design: registry.DesignPoint, parts_row: dict, *, quiet: bool = True) -> dict:
    """Synthesize ``design``, a point that ``dysharp area`` costs from its parts, flat, for its real critical path:
    the parts' figure bounds a path across two parts by the sum of its halves (:data:`CROSS_PATHS`), which
    a flat netlist may beat. ``parts_row`` is the point's ``area_summary.csv`` row; its critical path is
    kept beside the flat one, so that :mod:`synth.timing` can tell when the check is stale (the row changed
    since: new RTL or flow)."""
    module = design.name
    if not applies(module, design.params):
        raise ValueError(f"{module} {point_label(design)} is synthesized flat by `dysharp area` already: "
                         f"nothing to check")
    with flat_up_to(design.params["ports"]):
        r = area.flat_area_point(design, max_mb=0, quiet=quiet).result
    return {"module": module, "point": point_label(design), "flat_critical_path_ps": r["critical_path_ps"],
            "parts_critical_path_ps": float(parts_row["critical_path_ps"]), "flat_area_um2": r["area_um2"],
            "parts_area_um2": float(parts_row["area_um2"]), "cells": r["cell_count"],
            "verilog_mb": r["verilog_mb"], "synth_s": r["seconds"]}


def _parse_point(spec: str) -> tuple[str, dict]:
    """``MODULE:k=v,k=v`` -> (module, point), each value parsed as ``--set`` parses it."""
    module, _, rest = spec.partition(":")
    if module not in registry.MODULES:
        raise ValueError(f"--flat {spec!r}: unknown module {module!r} (`dysharp list` names them)")
    try:
        point = registry.parse_assignments([f"{module}.{kv}" for kv in rest.split(",") if kv], [module])[module]
    except ValueError as e:
        raise ValueError(f"--flat {spec!r}: expected MODULE:PARAM=VALUE[,PARAM=VALUE]: {e}") from None
    return module, point


def write_flat_checks(specs: list[str], reports="synth_reports", quiet: bool = True) -> list[dict]:
    """Flat-check each ``MODULE:k=v,...`` point of ``reports/area_summary.csv``, merge the results into
    ``reports/flat_check_summary.csv`` and rewrite ``timing_summary.csv`` from both."""

    reports = Path(reports)
    rows = {(r["module"], r["point"]): r for r in timing.read_area_summary(reports / "area_summary.csv")}
    todo = []
    for spec in specs:
        module, point = _parse_point(spec)
        design = registry.point(module, point)
        row = rows.get((module, point_label(design)))
        if row is None or row["status"] != "ok" or not (row.get("timing") or "").startswith("max of parts"):
            raise ValueError(f"{reports / 'area_summary.csv'} has no row of {module} {point_label(design)} costed "
                             f"from its parts; run `{area.rerun_hint(design)}` first")
        todo.append((design, row))
    out = [flat_check(design, row, quiet=quiet) for design, row in todo]
    merge_csv(reports / timing.FLAT_CHECKS, out, ("module", "point"), old_rows=relabel)
    timing.write_timing(reports / "area_summary.csv", reports)
    return out
