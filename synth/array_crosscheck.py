"""Cross-check of the array scaling: the same arrays costed by CACTI at 45 nm and at 22 nm, each scaled to N5.

The overhead table (:mod:`synth.scaling`) costs every memory array with CACTI 7 at 45 nm and scales it to
N5 by the SRAM bit-cell ratio (``SRAM_AREA`` = 0.027/0.346/1.3 = x0.0600). 45 nm is four nodes from N5;
CACTI's nearest node to N5 is 22 nm. This module costs each array the overhead table counts at both nodes
and scales each route to N5 by published bit cells:

==========  ================  ===================================================================
node        6T SRAM bit cell  source
==========  ================  ===================================================================
45 nm       0.346 um^2        Intel 45 nm (Mistry et al., IEDM 2007)
22 nm       0.092 um^2        Intel 22 nm tri-gate, high-density cell (IDF 2009 test chip; Auth
                              et al., VLSI 2012); IBM's 22 nm cell, IEDM 2008, is 0.09-0.1 um^2
N5          0.021 um^2        TSMC N5 high-density cell (Yeap et al., IEDM 2019; also TSMC's N3E
                              paper at IEDM 2022, which kept 0.021)
==========  ================  ===================================================================

* **45 nm route**: CACTI 45 nm area x ``SRAM_AREA`` (the headline's factor; 0.021/0.346 = 0.0607 directly).
* **22 nm route**: CACTI 22 nm area x 0.021/0.092 = x0.228.

**CAM bits scaled on their own.** A CAM cell is not a 6T cell: it adds a comparator (4 transistors in
the NOR cell) and a match line, and foundries' pushed-rule high-density layouts exist for the 6T cell
only. CACTI's own technology files (``tech_params/45nm.dat`` and ``22nm.dat``) give the CAM cell 292 F^2
against 146 F^2 for SRAM (``CACTI_CAM_OVER_SRAM`` = 2.0, at both nodes), so CACTI's arrays already carry
2x cells for their searched bits. At N5 we assume a CAM cell of ``N5_CAM_OVER_SRAM`` = 2.5 x the 6T cell
(an assumption: the middle of the 2-3x range usually quoted, not a published N5 figure). The searched
(tag) part of a fully associative array therefore scales by the SRAM factor x 2.5/2.0 in both routes;
the array's area is split between tag and data in proportion to their cell areas (tag bits x 2 against
data bits x 1), periphery included (CACTI reports the fully associative array as one area).

Arrays the area flow counts as flip-flops (CACTI's macro is larger, or CACTI finds no organisation) are
listed with both CACTI figures but scale as logic in the headline, not by either bit-cell route.
"""

import dataclasses

from . import area_study, cacti, hierarchical, integrated, macros, scaling
from .summary_csv import write_csv

__all__ = ["CELL_UM2", "CACTI_CAM_OVER_SRAM", "N5_CAM_OVER_SRAM", "route_factor", "cost_routes", "crosscheck_rows",
           "write_crosscheck", "table_sources", "integrated_sources"]

CELL_UM2 = {45: 0.346, 22: 0.092, "N5": 0.021}
CACTI_CAM_OVER_SRAM = 292 / 146         # CACTI 7 tech_params, area_cell (F^2) of the CAM and SRAM cells
N5_CAM_OVER_SRAM = 2.5                  # assumption (2-3x)
NODES = (45, 22)


def route_factor(node: int, cam: bool = False) -> float:
    """Area factor from a CACTI array at ``node`` nm to N5 (SRAM cells, or CAM cells when ``cam``)."""
    if node not in NODES:
        raise ValueError(f"the cross-check has routes from {NODES} nm, got {node!r}")
    sram = scaling.SRAM_AREA if node == 45 else CELL_UM2["N5"] / CELL_UM2[22]
    return sram * (N5_CAM_OVER_SRAM / CACTI_CAM_OVER_SRAM if cam else 1.0)


def _cam_share(a) -> float:
    """The searched (CAM) part of an array's area, by cell area: all of a CAM, the tags of a fully
    associative array, nothing of a RAM."""
    if a.kind == "cam":
        return 1.0
    if a.kind == "fa":
        tag = a.tag_width * CACTI_CAM_OVER_SRAM
        return tag / (tag + a.width)
    return 0.0


def cost_routes(array) -> dict:
    """CACTI area of ``array`` (a :class:`synth.cacti.Array`) at 45 and 22 nm and both routes to N5 (um^2).
    A node CACTI finds no organisation for gives ``None`` figures and its reason in ``error_<node>``."""
    out = {"cam_share": _cam_share(array), "n5_headline_um2": None}
    for node in NODES:
        a = dataclasses.replace(array, node_nm=node)
        try:
            area = cacti.run(a).area_um2
        except cacti.CactiError as e:
            out[f"cacti{node}_um2"] = out[f"n5_via{node}_um2"] = None
            out[f"error_{node}"] = str(e).split(" (configuration")[0]
            continue
        s = out["cam_share"]
        out[f"cacti{node}_um2"] = area
        out[f"n5_via{node}_um2"] = area * ((1 - s) * route_factor(node) + s * route_factor(node, cam=True))
        if node == 45:      # the headline's treatment: every bit at the SRAM ratio
            out["n5_headline_um2"] = area * route_factor(45)
    v45, v22 = out.get("n5_via45_um2"), out.get("n5_via22_um2")
    out["ratio_22_over_45"] = v22 / v45 if v45 and v22 else None
    return out


def _arrays_of(result: dict):
    """(name, cacti.Array, counted-as) of every array and macro of an area result, as the flow costs them."""
    for a in result["arrays"]:
        if "key_width" in a:       # a CAM macro
            geom = {"entries": a["rows"], "key_width": a["key_width"], "value_width": a["width"]}
            arr = macros.kind(a.get("kind", "cam")).cacti_array(geom)
        else:
            arr = cacti.Array(rows=a["rows"], width=a["width"], read_ports=max(1, a["read_ports"]),
                              write_ports=max(1, a["write_ports"]))
        yield a["name"], arr, a["geometry"], a["chosen"]


def crosscheck_rows(sources: list[tuple[str, str, dict, int]], off_chip: dict | None = None,
                    total_label: str = "TOTAL") -> list[dict]:
    """One row per distinct array of each source ``(label, module, point, instances)`` (synthesized or
    cached by :func:`synth.area_study.area_point`), with its count, and one TOTAL row per route over the arrays
    counted as CACTI macros. ``off_chip`` maps a module to array names left out (as the overhead table)."""
    rows = []
    for label, module, point, n in sources:
        res = area_study.area_point(module, point, quiet=True).result
        if res is None:
            raise RuntimeError(f"{module} {point}: no area result")
        skip = set((off_chip or {}).get(module, ()))
        merged = {}
        for name, arr, geometry, chosen in _arrays_of(res):
            if name.split(".")[-1] in skip:
                continue
            key = (geometry, arr.kind, chosen)
            if key in merged:
                merged[key]["count"] += n
                continue
            merged[key] = {"source": label, "module": module,
                           "point": ", ".join(f"{k}={v}" for k, v in point.items()) or "defaults",
                           "array": name.split(".")[-1], "kind": arr.kind, "geometry": geometry,
                           "bits": arr.rows * (arr.width + arr.tag_width), "count": n, "counted": chosen,
                           **cost_routes(arr)}
        rows += merged.values()
    macro = [r for r in rows if r["counted"] == "cacti"]

    def tot(k):
        return sum(r["count"] * r[k] for r in macro if r[k] is not None)
    total = {"source": f"{total_label} (arrays counted as CACTI macros, x count)", "count": sum(r["count"] for r in macro),
             "bits": sum(r["count"] * r["bits"] for r in macro)}
    for k in ("cacti45_um2", "cacti22_um2", "n5_headline_um2", "n5_via45_um2", "n5_via22_um2"):
        total[k] = tot(k)
    total["ratio_22_over_45"] = total["n5_via22_um2"] / total["n5_via45_um2"] if total["n5_via45_um2"] else None
    return rows + [total]


def table_sources(sides=("switch", "gpu")) -> tuple[list, dict]:
    """The overhead table's blocks of ``sides`` at their architecture points (:data:`synth.scaling.ROLES`):
    sources for :func:`crosscheck_rows` (per-port blocks x 64, GPU-side blocks x 1) and their off-chip
    arrays."""
    from hw import registry

    sources, off = [], {}
    for r in scaling.resolve_roles(sorted(registry.MODULES)):
        if r["side"] not in sides:
            continue
        for m in r["modules"]:
            n = scaling.NVSWITCH["ports"] if r["per"] == "port" else 1
            sources.append((f"{r['side']}: {r['role']}", m, r["points"].get(m, {}), n))
            if r.get("off_chip"):
                off[m] = r["off_chip"]
    return sources, off


def integrated_sources(params: dict, names: dict) -> list:
    """The integrated design's added parts (:func:`synth.hierarchical.dysharp_parts` without the request
    network, which the plain switch has too) as sources; ``names`` maps a part to its registered name."""
    return [(f"integrated: {name}", names[name], prm, c) for name, _f, prm, c in hierarchical.dysharp_parts(params)
            if name != "reqnet"]


def write_all(out="synth_reports", blocks: bool = False) -> str:
    """``synth_reports/array_crosscheck_summary.csv`` (``dysharp area --crosscheck``) for the arrays of the
    integrated design's added parts at 64 ports (the switch side of the restated headline) and of the
    GPU-side blocks; ``blocks`` also the sum-of-blocks table's switch-side blocks (al_tlb,
    reduction_engine, egress_translator at their architecture points, synthesized if not cached). Returns the
    Markdown table."""
    from hw import registry

    params = registry.get("dysharp_switch").resolve(integrated.ARCH_POINT)
    plist = hierarchical.dysharp_parts(params)
    with hierarchical.part_modules("dysharp_switch", plist) as names:
        rows = crosscheck_rows(integrated_sources(params, names), None,
                               f"TOTAL switch side, integrated addition at {integrated.ARCH_POINT['ports']} ports")
    sources, off = table_sources(("gpu",))
    rows += crosscheck_rows(sources, off, "TOTAL GPU side, per GPU")
    if blocks:
        sources, off = table_sources(("switch",))
        rows += crosscheck_rows(sources, off, "TOTAL switch side, sum-of-blocks table")
    return write_crosscheck(rows, out)


COLUMNS = ["source", "module", "point", "array", "kind", "geometry", "bits", "count", "counted", "cam_share",
           "cacti45_um2", "cacti22_um2", "n5_headline_um2", "n5_via45_um2", "n5_via22_um2", "ratio_22_over_45",
           "error_45", "error_22"]


def write_crosscheck(rows: list[dict], out="synth_reports") -> str:
    """Write ``array_crosscheck_summary.csv`` under ``out`` (every array); returns a Markdown table of the arrays
    counted as CACTI macros and the totals (the flip-flop arrays, which scale as logic, are in the CSV)."""
    from pathlib import Path

    from tabulate import tabulate

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "array_crosscheck_summary.csv", [{k: r.get(k, "") for k in COLUMNS} for r in rows])

    def f(x, spec=",.0f"):
        return "-" if x is None or x == "" else format(x, spec)
    table = [[r["source"], r.get("array", ""), r.get("geometry", ""), r["count"], r.get("counted", "cacti"),
              f(r["cacti45_um2"]), f(r["cacti22_um2"]), f(r["n5_headline_um2"]), f(r["n5_via45_um2"]),
              f(r["n5_via22_um2"]), f(r["ratio_22_over_45"], ".2f")] for r in rows if r.get("counted", "cacti") == "cacti"]
    return tabulate(table, headers=["source", "array", "geometry", "count", "counted as", "CACTI 45 nm um^2",
                                    "CACTI 22 nm um^2", "N5 headline (x0.060)", "N5 via 45 nm, CAM own",
                                    "N5 via 22 nm, CAM own", "22/45"],
                    tablefmt="github", disable_numparse=True)

