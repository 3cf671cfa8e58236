"""The DySHARP addition measured on the integrated switch: ``dysharp_switch`` minus the plain ``switch``
(NVSwitch) at the same port count, beside the sum-of-blocks figure the overhead table used before the
integrated top existed (AL-TLB + reduction engine per port, no egress rewrite, no second message class).

:func:`write_integrated` (called by the area report when both points are at hand) synthesizes what is
missing (cached like every area point) and writes ``synth_reports/integrated_summary.csv``.

:func:`write_power` (``dysharp power --integrated 4``) synthesizes the integrated top flat at a
small port count, compares it with its sum of parts, and powers it under the MoE dispatch + combine
workload (:mod:`synth.workloads.dysharp_switch`): ``synth_reports/integrated_power_summary.csv``.
"""

import csv

from . import area, area_study, hierarchical, power_study, scaling
from .summary_csv import merge_csv, write_csv

__all__ = ["integrated_rows", "write_integrated", "ARCH_POINT", "overhead_rows", "write_overhead", "power_rows",
           "write_power", "POWER_POINT"]


def _area(design, point: dict | None = None, max_mb: float = 0.0):
    """The area result of ``design`` (a :class:`hw.registry.DesignPoint`, or a module name and its overrides
    ``point``; synthesized if not cached; None when skipped by ``max_mb``, which a tiny value turns into
    "cached results only")."""
    return area_study.area_point(design, point, quiet=True, max_mb=max_mb).result


CACHED_ONLY_MB = 1e-9       # max_mb that skips every point not already synthesized


def _fields(r) -> dict:
    return {"area_um2": r["area_um2"], "seq_um2": r["area_seq_um2"], "logic_um2": r["area_logic_um2"],
            "arrays_um2": r["arrays_um2"], "transistors": r["transistors_logic"]}


_BEFORE = ("tlb", "engine")     # the blocks the sum-of-blocks overhead counted per port


def integrated_rows(ports: int = 8) -> list[dict]:
    """Rows: the integrated top, the plain switch, their difference (the DySHARP addition) and its parts,
    and the old sum of blocks (``ports`` x (AL-TLB + reduction engine) at the integrated top's parameters).
    The integrated top's area is its hierarchical sum of parts from ``DYSHARP_HIER_MIN_PORTS`` ports."""
    res = _area("dysharp_switch", {"ports": ports})
    top, plain = _fields(res), _fields(_area("switch", {"ports": ports}))
    parts = {p["part"]: p for p in (res.get("hierarchical") or {}).get("parts", [])}

    def row(name, v, note):
        return {"design": name, "ports": ports, **v, "pct_of_plain": 100 * v["area_um2"] / plain["area_um2"],
                "note": note}

    rows = [row("dysharp_switch (integrated)", top, "sum of parts" if parts else "flat"),
            row("switch (plain NVSwitch)", plain, "flat")]
    add = {k: top[k] - plain[k] for k in top}
    rows.append(row("DySHARP addition = integrated - plain", add,
                    "the response network (second message class), VC buffers, egress rewrite, plumbing"))
    if parts:
        def part_area(names):
            return {"area_um2": sum(parts[n]["count"] * parts[n]["area_um2"] for n in names if n in parts),
                    "seq_um2": None, "logic_um2": None, "arrays_um2": None, "transistors": None}
        for label, names in (("  response network", ("respnet",)), ("  AL-TLBs", ("tlb",)),
                             ("  reduction engines", ("engine",)), ("  egress translators", ("egress",)),
                             ("  links, fills, merges, checks", ("fill", "vc_rx", "vc_tx", "net_rx", "req_tx",
                                                                 "resp_tx", "check", "merge2", "merge5"))):
            rows.append(row(label, part_area(names), ", ".join(f"{n} x{parts[n]['count']}" for n in names
                                                                if n in parts)))
        rows.append(row("sum of blocks (before)", part_area(_BEFORE),
                        f"{ports} x (AL-TLB + reduction engine) at the same parameters: no egress rewrite, no "
                        "second message class"))
    return rows


def write_integrated(out="synth_reports", ports: int = 8) -> str:
    """Write ``integrated_summary.csv`` under ``out``; returns the Markdown table."""
    from pathlib import Path

    from tabulate import tabulate

    rows = integrated_rows(ports)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "integrated_summary.csv", rows)
    def mm2(x):
        return "" if x is None else f"{x / 1e6:.3f}"
    table = [[r["design"], mm2(r["area_um2"]), mm2(r["logic_um2"]), mm2(r["seq_um2"]), mm2(r["arrays_um2"]),
              f"{r['pct_of_plain']:.1f}%", r["note"]] for r in rows]
    return tabulate(table, headers=["design", "area mm^2 (45 nm)", "logic", "sequential", "arrays",
                                    "of the plain switch", "note"], tablefmt="github", disable_numparse=True)


# ---------------------------------------------------------------------------------------------------------
# The headline restated: the integrated design's addition at the NVSwitch's 64 ports, scaled to N5.

# The architecture point: 64 ports (the NVSwitch's), the AL-TLB at 1024 entries and the reduction engine at
# 64 entries, as the sum-of-blocks table counted them (synth/scaling.py ROLES gives the reasons). The other
# parameters are the dysharp_switch's defaults.
ARCH_POINT = {"ports": 64, "tlb_entries": 1024, "red_entries": 64}

# The old headline (synth_reports/overhead_summary.csv before the integrated design was costed at 64 ports:
# 64 x (AL-TLB at 1024 entries + reduction engine at 64 entries), sum of blocks).
OLD_HEADLINE = {"area_mm2_n5": 3.215, "pct_area": 1.259, "pct_transistors": 0.856}

# Groups of parts (synth/hierarchical.py dysharp_parts) reported as one row each.
_GROUPS = (
    ("response network (second NVSwitch datapath)", ("respnet",)),
    ("AL-TLBs", ("tlb",)),
    ("reduction engines (with their buffers)", ("engine",)),
    ("egress translators", ("egress",)),
    ("VC link ends (receive buffers, senders)", ("vc_rx", "vc_tx")),
    ("network-output buffers and credit senders", ("net_rx", "req_tx", "resp_tx")),
    ("TLB fill bridges, ingress checks, merges", ("fill", "check", "merge2", "merge5")),
)


def _n5(r: dict, count: int = 1) -> dict:
    """45 nm logic / SRAM split of an area result (``count`` instances) and its N5 area."""
    logic = count * (r["area_random_logic_um2"] + r["arrays_logic_um2"])
    sram = count * r["arrays_sram_um2"]
    n5 = scaling.to_n5(logic, sram, 0.0)
    return {"area_um2_45": count * r["area_um2"], "logic_um2_45": logic, "sram_um2_45": sram,
            "transistors": count * r["transistors"], "logic_mm2_n5": n5["logic_mm2"], "sram_mm2_n5": n5["sram_mm2"],
            "area_mm2_n5": n5["area_mm2"]}


def overhead_rows(point: dict | None = None, cached_only: bool = False) -> list[dict] | None:
    """The DySHARP addition on the integrated design at ``point`` (default :data:`ARCH_POINT`), by group of
    parts, in 45 nm and N5 area: integrated (sum of parts) minus the plain switch at the same port count
    (hierarchical from 16 ports), against the NVSwitch; the old sum-of-blocks headline beside it.
    ``cached_only``: None unless every part is already synthesized (never starts the hour-long run)."""
    from hw import registry
    from hw.switch.dysharp_switch import _NET_OUT_DEPTH

    work = area.BUILD / "work"
    if cached_only and not any((w / "netlist.json").is_file() for w in work.glob("dysharp_switch__part_*")):
        # A cached result is used only beside its netlist in its work folder (synth.area.flat_area_point):
        # with no part of the integrated switch ever synthesized here, none can be found, and the look-up
        # would generate every 64-port part's Verilog to find that out (about 270 CPU-seconds).
        return None
    point = dict(ARCH_POINT if point is None else point)
    design = registry.point("dysharp_switch", point)
    params = design.params
    n = params["ports"]
    mb = CACHED_ONLY_MB if cached_only else 0.0
    top = _area(design, max_mb=mb)
    plain = _area("switch", {"ports": n}, max_mb=mb)
    if top is None or plain is None:
        if cached_only:
            return None
        raise RuntimeError(f"dysharp_switch {point} or switch ports={n}: no area result")
    if not top.get("hierarchical"):
        raise ValueError(f"dysharp_switch {point} was not costed from its parts; the group rows need them")
    # The parts' own results (cached: the sum above synthesized them).
    counts = {name: c for name, _f, _p, c in hierarchical.dysharp_parts(params)}
    res = {}
    with hierarchical.part_modules("dysharp_switch", hierarchical.dysharp_parts(params)) as names:
        for name, _f, prm, _c in hierarchical.dysharp_parts(params):
            res[name] = _area(names[name], prm, max_mb=mb)
    nv = scaling.NVSWITCH

    def row(label, v, note):
        return {"item": label, "ports": n, **v, "pct_nvswitch_area": 100 * v["area_mm2_n5"] / nv["area_mm2"],
                "pct_nvswitch_transistors": 100 * v["transistors"] / nv["transistors"], "note": note}

    def add(a, b, sign=1):
        return {k: a[k] + sign * b[k] for k in a}
    rows = []
    req_extra = add(_n5(res["reqnet"]), _n5(plain), -1)
    for label, names in _GROUPS:
        v = None
        for nm in names:
            x = _n5(res[nm], counts[nm])
            v = x if v is None else add(v, x)
        rows.append(row(label, v, ", ".join(f"{nm} x{counts[nm]}" for nm in names)))
    rows.append(row("request network minus the plain switch", req_extra,
                    "the same NVSwitch datapath with a shallower output credit count towards the per-port "
                    f"logic (out_credits={_NET_OUT_DEPTH}); a negative figure is a saving"))
    total = add(_n5(top), _n5(plain), -1)
    rows.append(row("TOTAL DySHARP addition = integrated - plain (switch side)", total,
                    f"dysharp_switch {', '.join(f'{k}={v}' for k, v in point.items())} (sum of parts) minus "
                    f"switch ports={n} (" + ("sum of parts" if plain.get("hierarchical") else "flat") + ")"))
    before = add(_n5(res["tlb"], counts["tlb"]), _n5(res["engine"], counts["engine"]))
    rows.append(row("sum of blocks at the same parameters (the old method)", before,
                    f"{n} x (AL-TLB + reduction engine), no response network, egress rewrite or VC ends"))
    rows.append({"item": "old headline (overhead_summary.csv before the integrated design)", "ports": 64,
                 "area_mm2_n5": OLD_HEADLINE["area_mm2_n5"], "pct_nvswitch_area": OLD_HEADLINE["pct_area"],
                 "pct_nvswitch_transistors": OLD_HEADLINE["pct_transistors"],
                 "note": "64 x (al_tlb ports=64 entries=1024 + reduction_engine ports=64 entries=64), sum of blocks"})
    return rows


HEADLINE_ROLE = "TOTAL switch side, integrated design (64 ports)"


def summary_row(rows: list[dict]) -> dict:
    """The restated headline as a row of ``overhead_summary.csv`` (its columns)."""
    t = next(r for r in rows if r["item"].startswith("TOTAL"))
    return {"role": HEADLINE_ROLE, "side": "switch", "modules": "dysharp_switch - switch", "status": "total",
            "instances": 1, "point": ", ".join(f"{k}={v}" for k, v in ARCH_POINT.items()),
            "logic_um2_45": t["logic_um2_45"], "sram_um2_45": t["sram_um2_45"], "transistors": t["transistors"],
            "logic_mm2_n5": t["logic_mm2_n5"], "sram_mm2_n5": t["sram_mm2_n5"], "area_mm2_n5": t["area_mm2_n5"],
            "note": f"{t['pct_nvswitch_area']:.3f}% of the NVSwitch's estimated 255 mm^2; "
                    f"{t['pct_nvswitch_transistors']:.3f}% of its 25.1 B transistors; integrated design (sum of "
                    f"parts) minus the plain switch, both at 64 ports, no power (synth_reports/"
                    f"integrated_overhead_summary.csv); the headline: the sum of blocks above leaves out the "
                    f"response network, the VC link ends and the plumbing"}


def update_overhead_summary(out, row: dict) -> None:
    """Put ``row`` into ``out``/overhead_summary.csv after the sum-of-blocks switch total (replacing an
    earlier integrated row), keeping the other rows as they are."""
    from pathlib import Path

    path = Path(out) / "overhead_summary.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `dysharp area` first (it writes the table)")
    with path.open(newline="") as f:
        cols = next(csv.reader(f))
    merge_csv(path, [{k: row.get(k, "") for k in cols}], ("role",),
              place_new=lambda rows: next((i + 1 for i, r in enumerate(rows)
                                           if r["role"].startswith("TOTAL switch side")), len(rows)))


_OV_COLUMNS = ["item", "ports", "area_um2_45", "logic_um2_45", "sram_um2_45", "transistors", "logic_mm2_n5",
               "sram_mm2_n5", "area_mm2_n5", "pct_nvswitch_area", "pct_nvswitch_transistors", "note"]


def write_overhead(out="synth_reports", point: dict | None = None) -> str:
    """Write ``integrated_overhead_summary.csv`` under ``out`` (:func:`overhead_rows`) and the restated headline's
    row into its ``overhead_summary.csv``; returns the Markdown table."""
    from pathlib import Path

    from tabulate import tabulate

    rows = overhead_rows(point)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "integrated_overhead_summary.csv", [{k: r.get(k, "") for k in _OV_COLUMNS} for r in rows])
    update_overhead_summary(out, summary_row(rows))

    def f(x, spec):
        return "" if x is None or x == "" else format(x, spec)
    table = [[r["item"], f(r.get("area_um2_45"), ",.0f"), f(r.get("logic_mm2_n5"), ".3f"),
              f(r.get("sram_mm2_n5"), ".3f"), f(r["area_mm2_n5"], ".3f"), f(r["pct_nvswitch_area"], ".3f") + "%",
              f(r.get("pct_nvswitch_transistors"), ".3f") + "%"] for r in rows]
    return tabulate(table, headers=["item", "45 nm um^2", "N5 logic mm^2", "N5 SRAM mm^2", "N5 mm^2",
                                    "of NVSwitch area (255 mm^2)", "of its 25.1 B transistors"],
                    tablefmt="github", disable_numparse=True)


# ---------------------------------------------------------------------------------------------------------
# The integrated top synthesized flat at a small port count, and its power under MoE dispatch and combine.

POWER_POINT = {"ports": 4}      # synthesized flat, the registry's defaults
FLAT_MAX_PORTS = 8              # 8 ports flat: 11 MB of Verilog, ~0.9 M cells (the native yosys)
POWER_RUN = {"freq_ghz": 1.5625, "cycles": 1000, "warmup": 200, "seed": 1}   # `dysharp power`'s defaults


def power_rows(point: dict | None = None, *, hierarchical_sum: bool = True, **run) -> list[dict]:
    """Rows (quantity, value, unit, note) of ``dysharp_switch`` at ``point`` (default :data:`POWER_POINT`):
    its flat area and timing, the sum of its parts at the same point and their margin
    (``hierarchical_sum``), and its power from the workload of :mod:`synth.workloads.dysharp_switch`
    (:func:`synth.power_study.power_points`, cached like ``dysharp power``'s with the same settings)."""
    from hw import registry

    point = dict(POWER_POINT if point is None else point)
    run = {**POWER_RUN, **run}
    design = registry.point("dysharp_switch", point)
    params = design.params
    if params["ports"] > FLAT_MAX_PORTS:
        raise ValueError(f"dysharp_switch {point}: the flat synthesis takes at most {FLAT_MAX_PORTS} ports "
                         f"(larger points are costed from their parts: dysharp area --overhead)")
    with hierarchical.flat_up_to(params["ports"]):
        flat = area_study.area_point(design, period_ps=1000 / run["freq_ghz"], quiet=True).result
    label = ", ".join(f"{k}={v}" for k, v in point.items())
    rows = []

    def add(quantity, value, unit, note=""):
        rows.append({"quantity": quantity, "point": label, "value": value, "unit": unit, "note": note})
    ran = (f"; {flat['yosys_fallback']} after a YoWASP trap" if flat.get("yosys_fallback") else
           "; pyosys (yosys natively, DYSHARP_YOSYS=native)" if "native_yosys" in flat.get("yosys", "") else "")
    add("area, flat", flat["area_um2"], "um^2", f"{flat['cell_count']:,} cells, {flat['verilog_mb']:.1f} MB of "
        "Verilog" + ran)
    add("  random logic", flat["area_random_logic_um2"], "um^2", f"sequential {flat['area_seq_um2']:,.0f}")
    add("  arrays", flat["arrays_um2"], "um^2", f"{len(flat['arrays'])} arrays, {flat['array_bits']:,} bits")
    add("transistors", flat["transistors"], "", "logic, plus 6 per SRAM bit / the flip-flop arrays")
    add("critical path", flat["critical_path_ps"], "ps", f"{flat['timing_source']}; clock "
        f"{1000 / run['freq_ghz']:.0f} ps")
    if hierarchical_sum:
        hier = hierarchical.area_point(design, period_ps=1000 / run["freq_ghz"], quiet=True, max_mb=0).result
        add("area, sum of parts", hier["area_um2"], "um^2", "synth/hierarchical.py dysharp_parts at the same point")
        add("  random logic", hier["area_random_logic_um2"], "um^2", "")
        add("  arrays", hier["arrays_um2"], "um^2", "")
        def rel(key):
            return 100 * (hier[key] - flat[key]) / flat[key]
        add("sum of parts vs flat", rel("area_um2"), "%",
            f"random logic {rel('area_random_logic_um2'):+.2f}%, arrays {rel('arrays_um2'):+.2f}%")
        add("critical path, max of parts", hier["critical_path_ps"], "ps", hier["timing_source"])
    with hierarchical.flat_up_to(params["ports"]):     # the power study maps activity onto the flat netlist
        (p,) = power_study.power_points([design], jobs=1, **run)
    w = p["workload"]
    cyc = w["cycles"]
    n = params["ports"]
    add("dispatched flits per port per cycle", w["dispatched_flits"] / cyc / n, "flits",
        f"dymultimem.st flits into the switch, window of {cyc} cycles")
    add("reduced flits per port per cycle", w["reduced_flits"] / cyc / n, "flits", "RED_RESP payload flits out")
    names = {"gpu_answer_flit": ("GPU answer flits in per port per cycle", "contributions and TLB fill answers (VC 1)"),
             "store_flit_delivered": ("store flits out per port per cycle", "translated WRITE copies (VC 0)"),
             "reduction": ("reductions completed per port per cycle", "RED_RESP results")}
    for k, v in w["events"].items():
        quantity, note = names.get(k, (f"{k} per port per cycle", ""))
        add(quantity, v / cyc / n, "", note)
    add("uplink busy", (w["dispatched_flits"] + w["ld_reduce_requests"] + w["events"]["gpu_answer_flit"]) / cyc / n,
        "flits/cycle", "stores + ld_reduce requests + answers, per GPU link")
    for g, name in (("no_gating", "no clock gating"), ("clock_gated", "ideal register clock gating")):
        x = p[g]
        add(f"power, {name}", x["total_mw"], "mW", f"at {run['freq_ghz']} GHz; cells {x['cells']['total_mw']:.2f}, "
            f"arrays {x['arrays_mw']:.2f}")
        add(f"  arrays' share, {name}", 100 * x["arrays_mw"] / x["total_mw"], "%", "")
        add(f"  leakage, {name}", x["leakage_mw"], "mW", "")
        for k in ("pj_per_dispatched_flit", "pj_per_reduced_flit"):
            if k in x:
                add(f"  energy per {k[7:-5]} flit, {name}", x[k], "pJ",
                    "the whole switch's power over that flit rate alone (both phases run at once)")
        moved = (w["dispatched_flits"] + w["reduced_flits"]) / cyc
        add(f"  energy per dispatched or reduced flit, {name}", x["total_mw"] / (moved * run["freq_ghz"]), "pJ",
            "the whole switch's power over both flit rates together")
        for group, mw, leak, count in _array_groups(x["arrays"]):
            add(f"  arrays: {group}, {name}", mw, "mW", f"{count} arrays, leakage {leak:.1f} mW")
    add("activity", p["seeded_nets"], "nets seeded", f"{p['ff_seeded']}/{p['ff_total']} flip-flops measured; "
        f"{p['activity_source']}")
    return rows


_ARRAY_GROUPS = {"engine partial": "reduction engines' partial-sum SRAMs", "engine": "reduction engines' other arrays",
                 "reqnet": "request network", "respnet": "response network", "egress": "egress translators",
                 "tlb": "AL-TLBs (CAM macros, tables, FIFOs)", "rxl": "VC receive buffers",
                 "from_req": "network-output FIFOs", "from_resp": "network-output FIFOs"}


def _array_groups(arrays: list[dict]) -> list[tuple[str, float, float, int]]:
    """(label, mW, leakage mW, arrays) per group of the power study's arrays, largest first: by the
    instance an array sits in (``engine0.buf.partial`` -> the engines' partial sums)."""
    import re
    groups = {}
    for a in arrays:
        parts = a["name"].split(".")
        if parts[0] == "dysharp_switch" and len(parts) > 1:   # a macro, named by its module path
            parts = parts[1:]
        key = re.sub(r"\d+$", "", parts[0])
        if key == "engine" and parts[-1] == "partial":
            key = "engine partial"
        label = _ARRAY_GROUPS.get(key, key)
        g = groups.setdefault(label, [0.0, 0.0, 0])
        g[0] += a["total_mw"]
        g[1] += a["leakage_mw"]
        g[2] += 1
    return sorted(((k, *v) for k, v in groups.items()), key=lambda r: -r[1])


def write_power(out="synth_reports", point: dict | None = None, hierarchical_sum: bool = True) -> str:
    """Write ``integrated_power_summary.csv`` under ``out`` (:func:`power_rows`); returns the Markdown table."""
    from pathlib import Path

    from tabulate import tabulate

    rows = power_rows(point, hierarchical_sum=hierarchical_sum)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # One file for every point measured: this point's rows replace its old ones, the others stay.
    merge_csv(out / "integrated_power_summary.csv", rows, ("point",),
              sort=lambda r: int(r["point"].split("ports=")[1].split(",")[0]))

    def f(x):
        if isinstance(x, float):
            return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"
        return f"{x:,}" if isinstance(x, int) else str(x)
    def q(text):     # Markdown drops leading blanks: mark a sub-row
        return "- " + text.strip() if text.startswith("  ") else text
    return tabulate([[q(r["quantity"]), f(r["value"]), r["unit"], r["note"]] for r in rows],
                    headers=[f"dysharp_switch {rows[0]['point']}", "value", "unit", "note"], tablefmt="github",
                    disable_numparse=True)
