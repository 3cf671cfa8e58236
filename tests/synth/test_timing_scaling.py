"""The delay scaling to N5 and the timing table (synth/timing.py) from a small fake area_summary.csv."""

import csv

import pytest

from synth import scaling, timing

HEADER = ["module", "point", "status", "area_um2", "critical_path_ps", "timing"]


def write_csv(path, rows, header=HEADER):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_delay_factor_is_stillmaker_baas_then_n5_step():
    # Table 5 delay fits at the nominal voltages, worked by hand: HP 45 nm at 1.0 V, HP 7 nm at 0.7 V.
    hp45 = -501.6 + 1567 - 1619 + 566.1                                   # 12.5
    hp7 = -28.58 * 0.7 ** 3 + 76.6 * 0.7 ** 2 - 70.26 * 0.7 + 24.69        # 3.23906
    assert scaling.DELAY_45_TO_7 == pytest.approx(hp7 / hp45) == pytest.approx(0.25912, abs=1e-5)
    assert scaling.DELAY == pytest.approx(0.25912 / 1.15, abs=1e-5)         # 0.22533
    assert scaling.delay_to_n5(1000.0) == pytest.approx(225.33, abs=0.01)
    assert scaling.PORT_PERIOD_PS == 640.0


def test_table_from_fake_csv(tmp_path):
    src = write_csv(tmp_path / "area_summary.csv", [
        ["fast", "ports=8", "ok", "10", "2000", "OpenSTA"],          # 450.7 ps: meets, slack +189.3
        ["slow", "defaults", "ok", "10", "4000", "OpenSTA"],         # 901.3 ps: misses by 261.3
        ["edge", "defaults", "ok", "10", f"{640 / scaling.DELAY:.6f}", "OpenSTA"],   # exactly 640 ps
        ["arrays", "entries=64", "ok", "10", "", "none"],            # no timed path
        ["big", "ports=64", "skipped: Verilog is 4.5 MB (> --max-mb 3); run ...", "", "", ""],
    ])
    md = timing.write_timing(src, tmp_path / "out")
    with open(tmp_path / "out" / "timing_summary.csv", newline="") as f:
        rows = {r["module"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["fast", "slow", "edge", "arrays", "big"]
    assert rows["fast"]["point"] == "ports=8"
    assert float(rows["fast"]["critical_path_ps_45"]) == 2000.0
    assert float(rows["fast"]["critical_path_ps_n5"]) == pytest.approx(450.7, abs=0.05)
    assert float(rows["fast"]["slack_ps"]) == pytest.approx(189.3, abs=0.05)
    assert rows["fast"]["meets"] == "yes"
    assert float(rows["slow"]["critical_path_ps_n5"]) == pytest.approx(901.3, abs=0.05)
    assert float(rows["slow"]["slack_ps"]) == pytest.approx(-261.3, abs=0.05) and rows["slow"]["meets"] == "no"
    assert float(rows["edge"]["slack_ps"]) == pytest.approx(0.0, abs=0.05) and rows["edge"]["meets"] == "yes"
    assert rows["arrays"]["meets"] == "n/a" and rows["arrays"]["critical_path_ps_n5"] == ""
    assert "no register-to-register path" in rows["arrays"]["note"]
    assert rows["big"]["meets"] == "n/a" and rows["big"]["note"] == "not synthesized: Verilog is 4.5 MB (> --max-mb 3)"
    # The Markdown table: one line per row, the figures, and the summary line.
    assert "| fast " in md and "451" in md and "+189" in md and "-261" in md
    assert "2 of 3 timed points meet 640 ps; modules with a point that misses: slow." in md
    assert "Stillmaker & Baas" in md and "1/1.15" in md


def test_other_clock(tmp_path):
    src = write_csv(tmp_path / "a.csv", [["fast", "ports=8", "ok", "10", "2000", "OpenSTA"]])
    [row] = timing.timing_rows(timing.read_area_summary(src), period_ps=400.0)
    assert row["slack_ps"] == pytest.approx(400.0 - 450.65, abs=0.01) and row["meets"] == "no"
    assert row["note"] == "misses: no reason recorded"


def test_a_known_miss_carries_its_reason_and_plan(tmp_path):
    src = write_csv(tmp_path / "a.csv", [["switch", "ports=16", "ok", "10", "2894", "OpenSTA"],
                                         ["switch", "ports=8", "ok", "10", "2356", "OpenSTA"]])
    miss, meet = timing.timing_rows(timing.read_area_summary(src))
    assert miss["meets"] == "no" and "req_stage=True registers it" in miss["note"]
    assert "dysharp area --flat-check switch:ports=16" in miss["note"]
    assert meet["meets"] == "yes" and meet["note"] == ""


FLAT_HEADER = ["module", "point", "flat_critical_path_ps", "parts_critical_path_ps", "flat_area_um2",
               "parts_area_um2", "cells", "verilog_mb", "synth_s"]


def test_a_flat_check_replaces_the_parts_bound_until_the_row_changes(tmp_path):
    parts = "max of parts (OpenSTA, composed, worst: input unit request -> allocator)"
    src = write_csv(tmp_path / "area_summary.csv", [["switch", "ports=16", "ok", "10", "2893.6", parts],
                                                    ["switch", "ports=64", "ok", "10", "2704.0", parts],
                                                    ["switch", "ports=8", "ok", "10", "2355.7", "OpenSTA"]])
    write_csv(tmp_path / timing.FLAT_CHECKS, [["switch", "ports=16", "2737.5", "2893.6", "1", "1", "1", "5", "589"],
                                              ["switch", "ports=64", "2000.0", "2999.0", "1", "1", "1", "35", "1"],
                                              ["switch", "ports=8", "1.0", "2355.7", "1", "1", "1", "1", "1"]],
              header=FLAT_HEADER)
    timing.write_timing(src)
    with open(tmp_path / "timing_summary.csv", newline="") as f:
        r16, r64, r8 = csv.DictReader(f)
    # The flat path is used: 2,737.5 ps meets where the parts' bound of 2,893.6 missed.
    assert float(r16["critical_path_ps_45"]) == 2737.5 and r16["meets"] == "yes"
    assert r16["note"] == "synthesized flat (flat_check_summary.csv); from its parts 2,893.6 ps, a bound"
    # A check made against another row (the RTL changed since) is stale: the bound stays, and the note says so.
    assert float(r64["critical_path_ps_45"]) == 2704.0
    assert r64["note"].startswith("flat check stale (made against 2,999.0 ps from parts)")
    assert "dysharp area --flat-check switch:ports=64" in r64["note"]
    # A point synthesized flat by `dysharp area` keeps its own path.
    assert float(r8["critical_path_ps_45"]) == 2355.7 and r8["note"] == ""


def test_flat_checks_refuse_bad_points(tmp_path):
    from synth import hierarchical
    write_csv(tmp_path / "area_summary.csv", [["switch", "defaults", "ok", "10", "2355.7", "OpenSTA"]])
    # The 8-port switch is the registry's default point, labelled so.
    with pytest.raises(ValueError, match="no row of switch defaults costed from its parts; run `dysharp area -m "
                                         "switch --grid switch.ports=8 --max-mb 0` first"):
        hierarchical.write_flat_checks(["switch:ports=8"], tmp_path)
    with pytest.raises(ValueError, match="unknown module 'nope'"):
        hierarchical.write_flat_checks(["nope:ports=8"], tmp_path)
    with pytest.raises(ValueError, match="expected MODULE:PARAM=VALUE"):
        hierarchical.write_flat_checks(["switch:ports"], tmp_path)
    with pytest.raises(ValueError, match="has no parameter 'portz'"):
        hierarchical.write_flat_checks(["switch:portz=16"], tmp_path)
    assert not (tmp_path / timing.FLAT_CHECKS).exists()


def test_missing_column_is_named(tmp_path):
    src = write_csv(tmp_path / "area_summary.csv", [["fast", "ports=8", "ok", "10", "OpenSTA"]],
                    header=["module", "point", "status", "area_um2", "timing"])
    with pytest.raises(ValueError, match=r"missing column\(s\) critical_path_ps .*has: module, point"):
        timing.write_timing(src, tmp_path)
    assert not (tmp_path / "timing_summary.csv").exists()


def test_bad_values_are_named(tmp_path):
    src = write_csv(tmp_path / "a.csv", [["fast", "ports=8", "ok", "10", "2000", "OpenSTA"],
                                         ["slow", "defaults", "ok", "10", "4 ns", "OpenSTA"]])
    with pytest.raises(ValueError, match=r"line 3 \(slow defaults\): critical_path_ps is not a number: '4 ns'"):
        timing.write_timing(src)
    with pytest.raises(ValueError, match="no such file"):
        timing.write_timing(tmp_path / "absent.csv")


def test_main_writes_csv_and_rejects_bad_input(tmp_path, capsys):
    from dysharp import cli

    src = write_csv(tmp_path / "area_summary.csv", [["fast", "ports=8", "ok", "10", "2000", "OpenSTA"]])
    assert cli.main(["timing", "--area-csv", str(src), "--out", str(tmp_path / "o")]) == 0
    assert "| fast " in capsys.readouterr().out and (tmp_path / "o" / "timing_summary.csv").is_file()
    bad = write_csv(tmp_path / "bad.csv", [["x"]], header=["module"])
    assert cli.main(["timing", "--area-csv", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "missing column(s) point, status, critical_path_ps" in err and str(bad) in err
    assert cli.main(["timing", "--area-csv", str(src), "--clock-ghz", "0"]) == 2
    assert "--clock-ghz must be positive" in capsys.readouterr().err


def test_committed_table_matches_committed_area_summary(tmp_path):
    """synth_reports/timing_summary.csv is what synth/timing.py computes from the committed area_summary.csv."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[2] / "synth_reports"
    timing.write_timing(root / "area_summary.csv", tmp_path)
    assert (tmp_path / "timing_summary.csv").read_text() == (root / "timing_summary.csv").read_text()


def test_the_design_note_table_is_the_committed_summary():
    """docs/timing.md's table is synth_reports/timing_summary.csv as committed, row for row (the note is
    written by hand; the summary by ``dysharp area``): a re-costed block must update both."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    with open(root / "synth_reports" / "timing_summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))

    def ps(x, sign=""):
        return "-" if x == "" else format(round(float(x)), sign + ",")

    want = [(r["module"], r["point"], ps(r["critical_path_ps_45"]), ps(r["critical_path_ps_n5"]),
             ps(r["slack_ps"], "+"), r["meets"]) for r in rows]
    text = (root / "docs" / "timing.md").read_text()
    table = text[text.index("| module | point | 45 nm path ps"):].split("\n\n")[0].split("\n")[2:]
    got = [tuple(c.strip() for c in re.split(r"\s*\|\s*", line.strip("| "))[:6]) for line in table]
    assert got == want
