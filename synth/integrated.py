"""The DySHARP addition measured on the integrated switch: ``dysharp_switch`` minus the plain ``switch``
(NVSwitch) at the same port count, beside the sum-of-blocks figure the overhead table used before the
integrated top existed (AL-TLB + reduction engine per port, no egress rewrite, no second message class).

:func:`write_integrated` (called by the area report when both points are at hand) synthesizes what is
missing (cached like every area point) and writes ``synth_reports/integrated_summary.csv``.
"""


__all__ = ["integrated_rows", "write_integrated"]


def _area(module, point):
    from .area import area_point
    return area_point(module, point, quiet=True).result


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

    from .report import _write_csv
    rows = integrated_rows(ports)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "integrated_summary.csv", rows)
    def mm2(x):
        return "" if x is None else f"{x / 1e6:.3f}"
    table = [[r["design"], mm2(r["area_um2"]), mm2(r["logic_um2"]), mm2(r["seq_um2"]), mm2(r["arrays_um2"]),
              f"{r['pct_of_plain']:.1f}%", r["note"]] for r in rows]
    return tabulate(table, headers=["design", "area mm^2 (45 nm)", "logic", "sequential", "arrays",
                                    "of the plain switch", "note"], tablefmt="github", disable_numparse=True)
