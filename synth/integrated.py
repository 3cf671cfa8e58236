"""The DySHARP addition measured on the integrated switch: ``dysharp_switch`` minus the plain ``switch``
(NVSwitch) at the same port count, beside the sum-of-blocks figure the overhead table used before the
integrated top existed (AL-TLB + reduction engine per port, no egress rewrite, no second message class).

``dysharp area --integrated PORTS`` (or :func:`integrated_rows` from a report) synthesizes what is missing
(cached like every area point) and writes ``synth_reports/integrated_summary.csv``.
"""

from hw import registry

__all__ = ["integrated_rows", "block_points", "write_integrated"]


def block_points(ports: int) -> dict[str, dict]:
    """The per-port blocks of ``dysharp_switch`` at its defaults, as registered modules and points."""
    d = registry.get("dysharp_switch").resolve({"ports": ports})
    return {
        "al_tlb": {"ports": ports, "groups": d["groups"], "entries": d["tlb_entries"], "mshrs": d["tlb_mshrs"],
                   "timeout": d["tlb_timeout"]},
        "reduction_engine": {"ports": ports, "entries": d["red_entries"], "max_length": d["max_payload"],
                             "timeout": d["red_timeout"], "groups": d["groups"], "defer_translation": True},
    }


def _area(module, point):
    from .area import area_point
    return area_point(module, point, quiet=True).result


def _fields(r) -> dict:
    return {"area_um2": r["area_um2"], "seq_um2": r["area_seq_um2"], "logic_um2": r["area_logic_um2"],
            "arrays_um2": r["arrays_um2"], "transistors": r["transistors_logic"]}


def integrated_rows(ports: int = 8) -> list[dict]:
    """Rows: the integrated top, the plain switch, their difference (the DySHARP addition), and the old
    sum of blocks (``ports`` x (AL-TLB + reduction engine) at the integrated top's parameters)."""
    top = _fields(_area("dysharp_switch", {"ports": ports}))
    plain = _fields(_area("switch", {"ports": ports}))
    add = {k: top[k] - plain[k] for k in top}
    blocks = {m: _fields(_area(m, p)) for m, p in block_points(ports).items()}
    summed = {k: ports * sum(b[k] for b in blocks.values()) for k in top}
    rows = []
    for name, v, note in (
            ("dysharp_switch (integrated)", top, "request + response networks, per port AL-TLB, egress "
             "translator, reduction engine, fill bridge, 2-VC link ends"),
            ("switch (plain NVSwitch)", plain, "one network, no DySHARP blocks"),
            ("DySHARP addition = integrated - plain", add, "includes the response network (the second message "
             "class), the VC buffers, the egress rewrite and the plumbing"),
            ("sum of blocks (before)", summed, f"{ports} x ({' + '.join(blocks)}) at the same parameters; no "
             "egress rewrite, no second message class")):
        row = {"design": name, "ports": ports, **v,
               "pct_of_plain": 100 * v["area_um2"] / plain["area_um2"], "note": note}
        rows.append(row)
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
    table = [[r["design"], f"{r['area_um2'] / 1e6:.3f}", f"{r['logic_um2'] / 1e6:.3f}",
              f"{r['seq_um2'] / 1e6:.3f}", f"{r['arrays_um2'] / 1e6:.3f}", f"{r['pct_of_plain']:.1f}%"]
             for r in rows]
    return tabulate(table, headers=["design", "area mm^2 (45 nm)", "logic", "sequential", "arrays",
                                    "of the plain switch"], tablefmt="github", disable_numparse=True)
