"""The system top's area, timing and power, chip by chip (synth/system_top.py), and the GPU NIC's power
workload that feeds it (synth/workloads/gpu_nic.py)."""

import csv
import json
from pathlib import Path

import pytest

from synth import scaling, system_top, workloads

REPORTS = Path(__file__).resolve().parents[2] / "synth_reports"


def _csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _inputs(tmp_path, *, activity="synth.workloads.gpu_nic::moe_layer (...)", gpus=8):
    q = [("area, flat", 6_000_000.0), ("critical path", 2769.0), ("power, no clock gating", 5000.0),
         ("power, ideal register clock gating", 4000.0)]
    _csv(tmp_path / "integrated_power_summary.csv",
         [{"quantity": k, "point": f"ports={gpus}", "value": v, "unit": "", "note": ""} for k, v in q])
    _csv(tmp_path / "area_summary.csv",
         [{"module": "gpu_nic", "point": "defaults", "status": "ok", "area_um2": 200_000.0,
           "critical_path_ps": 2900.0}])
    _csv(tmp_path / "power_summary.csv",
         [{"module": "gpu_nic", "point": "defaults", "clock_gating": g, "total_mw": mw, "activity": activity}
          for g, mw in (("no_gating", 90.0), ("clock_gated", 50.0))])


def test_the_system_is_its_chips_summed(tmp_path):
    _inputs(tmp_path)
    rows = {r["part"].split(":")[0]: r for r in system_top.system_rows(8, tmp_path)}
    top, gpus = rows["system top"], rows["GPU chips"]
    assert gpus["area_um2"] == 8 * 200_000 and gpus["power_mw_no_gating"] == 8 * 90
    assert top["area_um2"] == 6_000_000 + 8 * 200_000
    assert top["power_mw_no_gating"] == 5000 + 8 * 90 and top["power_mw_clock_gated"] == 4000 + 8 * 50
    # The slower chip sets the clock: here the NIC's path, not the switch's.
    assert top["critical_path_ps"] == 2900.0
    assert top["slack_ps_n5"] == pytest.approx(scaling.PORT_PERIOD_PS - 2900 * scaling.DELAY, abs=0.1)
    assert top["slack_ps_n5"] < 0 < rows["switch chip"]["slack_ps_n5"]


def test_missing_or_vectorless_inputs_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"dysharp power --integrated 8"):
        system_top.system_rows(8, tmp_path)
    _inputs(tmp_path, gpus=4)
    with pytest.raises(ValueError, match=r"no area, flat, critical path.* at ports=8 .*up to 8 ports"):
        system_top.system_rows(8, tmp_path)
    with pytest.raises(ValueError, match=r"gpu_nic at its defaults \(ports=8\): a 4-GPU system"):
        system_top.system_rows(4, tmp_path)
    _inputs(tmp_path, activity="vectorless: inputs P=0.5")
    with pytest.raises(ValueError, match="vectorless"):
        system_top.system_rows(8, tmp_path)
    with pytest.raises(ValueError, match="gpus must be an integer in 4..64"):
        system_top.system_rows(2, tmp_path)


def test_cli_states_what_is_wrong(tmp_path, capsys):
    from dysharp import cli

    assert cli.main(["area", "--system-top", "--out", str(tmp_path)]) == 2
    assert "integrated_power_summary.csv is missing" in capsys.readouterr().err


def test_committed_summary_is_regenerated_from_the_committed_inputs(tmp_path):
    """synth_reports/system_summary.csv is what `dysharp area --system-top --gpus 8` writes from the
    committed inputs (so it cannot drift from them)."""
    system_top.write_system(tmp_path, 8, reports=REPORTS)
    assert (tmp_path / "system_summary.csv").read_text() == (REPORTS / "system_summary.csv").read_text()


def test_gpu_nic_has_a_workload():
    w = workloads.get("gpu_nic")
    assert w is not None and w.test_module == "synth.workloads.gpu_nic" and w.testcase == "moe_layer"


def test_gpu_nic_moe_layer(seed, tmp_path):
    """A short run: both links busy with both phases' traffic, every kind of packet of the layer in the
    window, and the NIC model checked every answer, the memory image and every counter after the drain
    (the workload asserts it; a failure raises here)."""
    from verif.harness.runner import run_cocotb
    out = tmp_path / "wl.json"
    run_cocotb("gpu_nic", {}, test_module="synth.workloads.gpu_nic", testcase="moe_layer", seed=seed, quiet=True,
               env={"warmup": 400, "cycles": 600, "out": str(out), "hold": 200})
    r = json.loads(out.read_text())
    assert r["window_ps"][1] - r["window_ps"][0] == 600 * 2000
    ev = r["events"]
    for kind in ("up_DYN_ST", "up_DYN_LD_REDUCE", "up_RED_READ_RESP", "down_WRITE", "down_RED_READ",
                 "down_RED_RESP"):
        assert ev.get(kind, 0) > 0, f"no {kind} flit in the window: {ev}"
    up = sum(v for k, v in ev.items() if k.startswith("up_"))
    down = sum(v for k, v in ev.items() if k.startswith("down_"))
    assert up == round(r["uplink_utilisation"] * 600) and down == round(r["downlink_utilisation"] * 600)
    assert up <= 600 and down <= 600 and max(up, down) > 0.8 * 600, (up, down)
    assert r["dispatched_flits"] == ev["up_DYN_ST"] + ev.get("down_TLB_FILL", 0) + ev["down_WRITE"]
    assert r["reduced_flits"] == ev["up_RED_READ_RESP"] + ev["down_RED_RESP"]


def test_gpu_nic_moe_layer_refuses_a_bad_round_trip(tmp_path):
    from verif.harness.runner import CocotbFailure, run_cocotb
    with pytest.raises(CocotbFailure) as e:
        run_cocotb("gpu_nic", {}, test_module="synth.workloads.gpu_nic", testcase="moe_layer", quiet=True,
                   env={"warmup": 10, "cycles": 10, "out": str(tmp_path / "wl.json"), "hold": 0})
    log = Path(str(e.value).rsplit("log and results in ", 1)[1])
    text = log.read_text() if log.is_file() else "".join(p.read_text() for p in log.glob("log-*moe_layer*"))
    assert "hold (a combine's round trip, cycles) must be an integer >= 1, got 0" in text
    assert not (tmp_path / "wl.json").exists()
