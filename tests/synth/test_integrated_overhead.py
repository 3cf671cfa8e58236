"""The restated headline's bookkeeping (synth/integrated.py overhead_rows): every added part is in exactly
one row, the total is integrated minus plain, and the N5 scaling is the overhead table's.

Synthesis is replaced by made-up area results (the real ones take an hour at 64 ports); what is tested is
the arithmetic and the grouping, which a part missing from a group or counted twice would break.
"""

import pytest

from hw import registry
from synth import hierarchical, integrated, scaling


def _fake(i: float) -> dict:
    return {"area_um2": 100.0 * i + 30.0 * i, "area_random_logic_um2": 100.0 * i, "arrays_logic_um2": 10.0 * i,
            "arrays_sram_um2": 20.0 * i, "transistors": 1000.0 * i}


def _fields_sum(parts):
    keys = _fake(1).keys()
    return {k: sum(c * r[k] for r, c in parts) for k in keys}


@pytest.fixture
def fake_area(monkeypatch):
    point = dict(integrated.ARCH_POINT)
    params = registry.get("dysharp_switch").resolve(point)
    plist = hierarchical.dysharp_parts(params)
    by_part = {f"dysharp_switch__part_{name}": _fake(k + 1) for k, (name, *_r) in enumerate(plist)}
    plain = _fake(0.9)
    top = {**_fields_sum([(by_part[f"dysharp_switch__part_{n}"], c) for n, _f, _p, c in plist]),
           "hierarchical": {"parts": []}}

    def area(design, pt=None, max_mb=0.0):
        design = registry.point(design, pt)
        if design.name == "dysharp_switch":
            return top
        if design.name == "switch":
            assert design == registry.point("switch", {"ports": params["ports"]})
            return plain
        return by_part[design.name]
    monkeypatch.setattr(integrated, "_area", area)
    return top, plain


def test_groups_add_up_to_integrated_minus_plain(fake_area):
    top, plain = fake_area
    rows = {r["item"]: r for r in integrated.overhead_rows()}
    total = rows["TOTAL DySHARP addition = integrated - plain (switch side)"]
    expect = scaling.to_n5(top["area_random_logic_um2"] + top["arrays_logic_um2"] -
                           plain["area_random_logic_um2"] - plain["arrays_logic_um2"],
                           top["arrays_sram_um2"] - plain["arrays_sram_um2"], 0)["area_mm2"]
    assert total["area_mm2_n5"] == pytest.approx(expect)
    assert total["pct_nvswitch_area"] == pytest.approx(100 * expect / scaling.NVSWITCH["area_mm2"])
    groups = [r for k, r in rows.items() if not k.startswith(("TOTAL", "sum of blocks", "old headline"))]
    for key in ("area_mm2_n5", "area_um2_45", "transistors"):
        assert sum(r[key] for r in groups) == pytest.approx(total[key])


def test_old_headline_and_sum_of_blocks_beside_it(fake_area):
    rows = {r["item"]: r for r in integrated.overhead_rows()}
    old = next(r for k, r in rows.items() if k.startswith("old headline"))
    assert old["area_mm2_n5"] == 3.215 and old["pct_nvswitch_area"] == 1.259
    blocks = next(r for k, r in rows.items() if k.startswith("sum of blocks"))
    assert blocks["area_mm2_n5"] == pytest.approx(rows["AL-TLBs"]["area_mm2_n5"] +
                                                  rows["reduction engines (with their buffers)"]["area_mm2_n5"])


def test_a_flat_integrated_result_is_refused(monkeypatch):
    monkeypatch.setattr(integrated, "_area", lambda m, p=None, max_mb=0.0: _fake(1))
    with pytest.raises(ValueError, match="not costed from its parts"):
        integrated.overhead_rows()


def test_headline_row_goes_into_overhead_summary(fake_area, tmp_path):
    import csv

    from synth.report import BLOCKS_ROLE
    (tmp_path / "overhead_summary.csv").write_text(
        f'role,side,area_mm2_n5,note\nAL-TLB,switch,1.6,\n"{BLOCKS_ROLE}",switch,3.215,old\n'
        "TOTAL GPU side (per GPU),gpu,0.004,\n")
    for _ in range(2):                          # a second run replaces its row, never adds another
        integrated.write_overhead(tmp_path)
    rows = list(csv.DictReader((tmp_path / "overhead_summary.csv").open()))
    assert [r["role"] for r in rows] == ["AL-TLB", BLOCKS_ROLE, integrated.HEADLINE_ROLE, "TOTAL GPU side (per GPU)"]
    total = next(r for r in integrated.overhead_rows() if r["item"].startswith("TOTAL"))
    assert float(rows[2]["area_mm2_n5"]) == pytest.approx(total["area_mm2_n5"], rel=1e-5)
    assert rows[1]["area_mm2_n5"] == "3.215"    # the old total is kept beside it
    with pytest.raises(FileNotFoundError, match="run `dysharp area` first"):
        integrated.update_overhead_summary(tmp_path / "nowhere", rows[2])


def test_cached_only_never_synthesizes(monkeypatch, tmp_path):
    from synth import area as area_mod
    seen = []

    def area(module, pt=None, max_mb=0.0):
        seen.append(max_mb)
        return None                             # as area_point reports a point skipped by max_mb
    monkeypatch.setattr(integrated, "_area", area)
    monkeypatch.setattr(area_mod, "BUILD", tmp_path)
    # No part of the integrated switch synthesized here: nothing can be cached, nothing is looked up (the
    # look-up generates every 64-port part's Verilog).
    (tmp_path / "work" / "switch__part_alloc__ports64").mkdir(parents=True)
    (tmp_path / "work" / "switch__part_alloc__ports64" / "netlist.json").write_text("{}")
    assert integrated.overhead_rows(cached_only=True) is None and not seen
    # A part synthesized once (its netlist beside it): the look-up runs, cached results only.
    (tmp_path / "work" / "dysharp_switch__part_input__ports64").mkdir()
    (tmp_path / "work" / "dysharp_switch__part_input__ports64" / "netlist.json").write_text("{}")
    assert integrated.overhead_rows(cached_only=True) is None
    assert seen and all(0 < mb <= integrated.CACHED_ONLY_MB for mb in seen)
    with pytest.raises(RuntimeError, match="no area result"):
        integrated.overhead_rows()


def _ov_csv(path, rows):
    import csv
    from synth.report import _OVERHEAD_COLUMNS
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(_OVERHEAD_COLUMNS))
        w.writeheader()
        w.writerows([{k: r.get(k, "") for k in _OVERHEAD_COLUMNS} for r in rows])


def test_a_run_without_every_power_keeps_the_committed_overhead_table(tmp_path, capsys):
    """`dysharp area` on a few modules with no power results must not blank the committed power columns,
    nor drop the integrated headline that only `dysharp area --overhead` computes."""
    from synth.integrated import HEADLINE_ROLE
    from synth.report import BLOCKS_ROLE, write_overhead_csv
    path = tmp_path / "overhead_summary.csv"
    role = {"role": "AL-TLB", "side": "switch", "status": "registered", "area_mm2_n5": "1.6", "power_mw_n5": "2202"}
    total = {"role": BLOCKS_ROLE, "side": "switch", "status": "total", "area_mm2_n5": "3.39",
             "power_mw_n5": "5124"}
    headline = {"role": HEADLINE_ROLE, "side": "switch", "status": "total", "area_mm2_n5": "3.915"}
    _ov_csv(path, [role, total, headline])
    before = path.read_text()
    new_role, new_total = dict(role, area_mm2_n5="1.7", power_mw_n5=None), dict(total, power_mw_n5=None)
    assert not write_overhead_csv(path, [new_role], [new_total], None, power_complete=False)
    assert path.read_text() == before
    assert "kept: this run's power results" in capsys.readouterr().out
    # With every power: written, and the headline carried over after the switch total.
    assert write_overhead_csv(path, [dict(role, area_mm2_n5="1.7")], [dict(total, power_mw_n5="5200")], None,
                              power_complete=True)
    text = path.read_text().splitlines()
    assert "1.7" in text[1] and text[2].startswith(f'"{BLOCKS_ROLE}"') and "5200" in text[2]
    assert text[3].startswith(f'"{HEADLINE_ROLE}"') and "3.915" in text[3]
    # A table that never had power figures is written either way (the first `dysharp area`).
    _ov_csv(path, [dict(role, power_mw_n5=""), dict(total, power_mw_n5="")])
    assert write_overhead_csv(path, [new_role], [new_total], None, power_complete=False)
    assert "1.7" in path.read_text()


def test_the_networks_are_costed_from_their_parts(monkeypatch):
    """The integrated switch's request and response networks are 64-port NVSwitch datapaths: each is costed
    from its own parts, like the plain switch (flat, one is about 58 MB of Verilog: hours of synthesis and
    past the WebAssembly yosys's memory); every other part is synthesized flat (or from its slices)."""
    from synth import area
    calls = []

    def fake(kind):
        def run(design, point=None, **kw):
            design = registry.point(design, point)
            calls.append((kind, design.name))
            return area.AreaPoint(design, {"fake": True})
        return run
    monkeypatch.setattr(area, "flat_area_point", fake("flat"))
    monkeypatch.setattr(hierarchical, "area_point", fake("parts"))
    params = registry.get("dysharp_switch").resolve(integrated.ARCH_POINT)
    plist = hierarchical.dysharp_parts(params)
    with hierarchical.part_modules("dysharp_switch", plist) as names:
        for name, _f, prm, _c in plist:
            res, _skipped = hierarchical._part_area(area, names[name], name, prm, {})
            assert res == {"fake": True}
    nets = {"dysharp_switch__part_reqnet", "dysharp_switch__part_respnet"}
    assert {m for kind, m in calls if kind == "parts"} == nets
    flat = {m for kind, m in calls if kind == "flat"}
    assert not flat & nets and len(flat) == len(plist) - 2
