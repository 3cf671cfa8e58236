"""The study report's first screen (dysharp/report_summary.py): figures read from what the steps wrote,
a missing source named as missing, and the section placed first in the report."""

import csv
import json

from dysharp.report_summary import summary


def _system_report(path, cycles, predicted, full=None):
    schemes = {s: {"cycles": {"total": c}} for s, c in cycles.items()}
    path.write_text(json.dumps({"schemes": schemes, "predicted": {s: {"total": c} for s, c in predicted.items()},
                                "point": {"gpus": 8, "tokens": 256, "hidden": 128},
                                "layer": {"model": "DeepSeek-V3"}, "failed": {},
                                **({"full_size": full} if full else {})}))


def test_summary_states_the_steps_figures(tmp_path):
    (tmp_path / "system").mkdir()
    _system_report(tmp_path / "system" / "p.json", {"deepep": 1100, "dysharp": 1000},
                   {"deepep": 1200, "dysharp": 1000},
                   {"system": "hgx-h100", "speedup": {"deepep": 1.5, "dysharp": 1.0}})
    (tmp_path / "system" / "p.deepep.json").write_text("{}")             # a scheme's own file: not a report
    (tmp_path / "estimate").mkdir()
    with (tmp_path / "estimate" / "sweep.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["model", "system", "scheme", "dysharp_speedup"])
        w.writeheader()
        w.writerows([{"model": "deepseek-v3", "system": "gh200-nvl32", "scheme": "deepep", "dysharp_speedup": 1.61},
                     {"model": "deepseek-v3", "system": "gh200-nvl32", "scheme": "tutel", "dysharp_speedup": 1.3},
                     {"model": "qwen3-30b-a3b", "system": "gh200-nvl32", "scheme": "deepep", "dysharp_speedup": 9}])
    (tmp_path / "synth_reports").mkdir()
    with (tmp_path / "synth_reports" / "overhead_summary.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["role", "side", "status", "area_mm2_n5", "power_mw_n5",
                                          "power_gated_mw_n5", "note"])
        w.writeheader()
        w.writerow({"role": "AL-TLB", "side": "switch", "status": "registered", "area_mm2_n5": "1.6"})
        w.writerow({"role": "TOTAL switch side, sum of blocks (64 ports)", "side": "switch", "status": "total",
                    "area_mm2_n5": "3.3914", "power_mw_n5": "5124.87", "power_gated_mw_n5": "4295.93",
                    "note": "1.328% of the NVSwitch's estimated 255 mm^2; more"})
    text = summary(tmp_path, [{"step": "system", "status": "ok"}, {"step": "area_power", "status": "failed"}])
    assert text.startswith("## Summary")
    assert ("Switch side, sum of blocks (64 ports), at N5: 3.391 mm^2, 5.12 W (4.30 W with ideal clock gating); "
            "1.328%") in text
    # The sum of blocks alone: the summary says the integrated headline is not in the table, and why it is higher.
    assert "integrated design (the headline): not in this table; `dysharp area --overhead`" in text
    assert "leaves out the response network" in text
    assert "AL-TLB" not in text                                              # totals only
    assert "dysharp 1.100x over deepep (predicted 1.200x, full size 1.500x)" in text
    assert "Full size: the estimator on hgx-h100" in text
    assert "DeepSeek-V3, gh200-nvl32: dysharp 1.61x over deepep." in text   # other models and baselines left out
    assert "Steps passed: 1 of 2; failed: area_power (failed)." in text
    assert "bit for bit" in text                                             # the system step passed


def test_summary_names_missing_sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                                             # no committed synth_reports/ either
    text = summary(tmp_path, [{"step": "system", "status": "failed"}])
    assert "no overhead table" in text and "no layer run" in text and "Full-scale estimate: none" in text
    assert "bit for bit" not in text


def test_summary_names_the_integrated_headline(tmp_path):
    """With the integrated design's row in the table, both switch-side totals are stated, each by its route,
    the integrated one as the headline."""
    from synth.integrated import HEADLINE_ROLE
    from synth.report import BLOCKS_ROLE
    (tmp_path / "synth_reports").mkdir()
    with (tmp_path / "synth_reports" / "overhead_summary.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["role", "side", "status", "area_mm2_n5", "note"])
        w.writeheader()
        w.writerow({"role": BLOCKS_ROLE, "side": "switch", "status": "total", "area_mm2_n5": "3.408",
                    "note": "1.334% of the NVSwitch's estimated 255 mm^2; more"})
        w.writerow({"role": HEADLINE_ROLE, "side": "switch", "status": "total", "area_mm2_n5": "3.915",
                    "note": "1.533% of the NVSwitch's estimated 255 mm^2; more"})
    text = summary(tmp_path, [{"step": "area_power", "status": "ok"}])
    assert "Switch side, sum of blocks (64 ports), at N5: 3.408 mm^2; 1.334%" in text
    assert "Switch side, integrated design (64 ports), at N5: 3.915 mm^2; 1.533% of the NVSwitch's estimated " \
           "255 mm^2. The headline." in text
    assert "not in this table" not in text
