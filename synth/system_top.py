"""Area, timing and power of the system top (:class:`hw.system.System`), chip by chip.

The system top is ``gpus`` GPU NICs on one DySHARP switch, composition only: it adds no logic
(``hw/system.py``), so its area and power are the switch's plus ``gpus`` NICs'. Its two kinds of part sit on
different chips (the NVSwitch die and each GPU die) joined by NVLink, whose PHY and SerDes pipelines are
not modelled: no path crosses a link in one cycle, so each chip's critical path stands alone and the
system's clock is the slower chip's.

Inputs (all committed under ``synth_reports/``), nothing synthesized here:

* the switch: ``integrated_power_summary.csv`` at ``ports = gpus`` (``dysharp power --integrated
  G``: the integrated switch synthesized flat, powered under the MoE dispatch + combine workload);
* each GPU: ``area_summary.csv`` and ``power_summary.csv``, module ``gpu_nic`` at the registry's defaults
  (``dysharp area -m gpu_nic``, ``dysharp power -m gpu_nic``: the composed NIC under one GPU's share of
  the same kind of layer, :mod:`synth.workloads.gpu_nic`).

:func:`write_system` (``dysharp area --system-top --gpus 8``) writes ``system_summary.csv`` and returns
its Markdown table. A missing input is an error naming the command that makes it.
"""

import csv
from pathlib import Path

from . import scaling
from .summary_csv import write_csv

__all__ = ["system_rows", "write_system"]

_GATING = (("no_gating", "power, no clock gating"), ("clock_gated", "power, ideal register clock gating"))


def _read(path: Path, what: str, command: str) -> list[dict]:
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: it holds {what} (run `{command}`)")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _switch(reports: Path, gpus: int) -> dict:
    rows = _read(reports / "integrated_power_summary.csv", "the flat integrated switch's area, timing and power",
                 f"dysharp power --integrated {gpus}")
    have = {(r["quantity"].strip(), r["point"]): r for r in rows}
    point = f"ports={gpus}"
    need = ["area, flat", "critical path", *(q for _, q in _GATING)]
    missing = [q for q in need if (q, point) not in have]
    if missing:
        raise ValueError(f"integrated_power_summary.csv has no {', '.join(missing)} at {point} (run `python -m "
                         f"synth.integrated --power {gpus}`, which synthesizes the switch flat: up to 8 ports)")
    return {"area_um2": float(have["area, flat", point]["value"]),
            "critical_path_ps": float(have["critical path", point]["value"]),
            **{g: float(have[q, point]["value"]) for g, q in _GATING},
            "source": f"integrated_power_summary.csv: dysharp_switch {point} synthesized flat, powered under MoE "
                      f"dispatch + combine (synth.workloads.dysharp_switch)"}


def _gpu(reports: Path, gpus: int) -> dict:
    from hw import registry
    ports = registry.get("gpu_nic").resolve({})["ports"]
    if gpus != ports:
        raise ValueError(f"the summaries cost gpu_nic at its defaults (ports={ports}): a {gpus}-GPU system needs "
                         f"its NIC at ports={gpus}")
    area = [r for r in _read(reports / "area_summary.csv", "every module's area and timing", "dysharp area")
            if r["module"] == "gpu_nic" and r["point"] == "defaults" and r["status"] == "ok"]
    if not area:
        raise ValueError("area_summary.csv has no gpu_nic row at its defaults (run `dysharp area -m gpu_nic`)")
    power = {r["clock_gating"]: r for r in _read(reports / "power_summary.csv", "every module's power",
                                                  "dysharp power")
             if r["module"] == "gpu_nic" and r["point"] == "defaults"}
    if set(power) != {g for g, _ in _GATING}:
        raise ValueError("power_summary.csv lacks gpu_nic's rows at its defaults (run `dysharp power -m gpu_nic`)")
    activity = power["no_gating"]["activity"]
    if activity.startswith("vectorless"):
        raise ValueError("gpu_nic's power in power_summary.csv is vectorless; the system's figure needs its "
                         "workload's (run `dysharp power -m gpu_nic`)")
    return {"area_um2": float(area[0]["area_um2"]), "critical_path_ps": float(area[0]["critical_path_ps"]),
            **{g: float(power[g]["total_mw"]) for g, _ in _GATING},
            "source": f"area_summary.csv and power_summary.csv: gpu_nic at its defaults; activity: {activity}"}


def system_rows(gpus: int = 8, reports="synth_reports") -> list[dict]:
    """Rows: the switch chip, one GPU's NIC, the ``gpus`` NICs, and the system top (their sum; the slower
    chip's path). 45 nm area and power, the critical path at 45 nm and scaled to N5 with its slack at the
    port clock."""
    if not isinstance(gpus, int) or isinstance(gpus, bool) or not 4 <= gpus <= 64:
        raise ValueError(f"gpus must be an integer in 4..64 (the system top's range), got {gpus!r}")
    reports = Path(reports)
    sw, nic = _switch(reports, gpus), _gpu(reports, gpus)

    def row(part, n, v, note):
        n5 = scaling.delay_to_n5(v["critical_path_ps"])
        return {"part": part, "gpus": gpus, "instances": n, "area_um2": n * v["area_um2"],
                "critical_path_ps": v["critical_path_ps"], "critical_path_ps_n5": round(n5, 1),
                "slack_ps_n5": round(scaling.PORT_PERIOD_PS - n5, 1),
                "power_mw_no_gating": n * v["no_gating"], "power_mw_clock_gated": n * v["clock_gated"],
                "note": note}
    gpus_v = {k: nic[k] for k in ("area_um2", "critical_path_ps", "no_gating", "clock_gated")}
    rows = [row("switch chip: dysharp_switch", 1, sw, sw["source"]),
            row("GPU chip: gpu_nic (one GPU)", 1, nic, nic["source"]),
            row(f"GPU chips: {gpus} x gpu_nic", gpus, gpus_v, "one NIC per GPU die")]
    total = {"area_um2": sw["area_um2"] + gpus * nic["area_um2"],
             "critical_path_ps": max(sw["critical_path_ps"], nic["critical_path_ps"]),
             "no_gating": sw["no_gating"] + gpus * nic["no_gating"],
             "clock_gated": sw["clock_gated"] + gpus * nic["clock_gated"]}
    rows.append(row(f"system top: switch + {gpus} GPUs", 1, total,
                    "composition only (hw/system.py adds no logic): the sum of its chips; the critical path is the "
                    "slower chip's, no path crossing a link (chip to chip over NVLink)"))
    return rows


def write_system(out="synth_reports", gpus: int = 8, reports=None) -> str:
    """Write ``system_summary.csv`` under ``out`` (inputs from ``reports``, default ``out``); returns the
    Markdown table."""
    from tabulate import tabulate

    rows = system_rows(gpus, reports or out)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "system_summary.csv", rows)
    table = [[r["part"], f"{r['area_um2'] / 1e6:.3f}", f"{r['critical_path_ps']:,.0f}",
              f"{r['critical_path_ps_n5']:,.0f} ({r['slack_ps_n5']:+,.0f})",
              f"{r['power_mw_no_gating']:,.0f} / {r['power_mw_clock_gated']:,.0f}"] for r in rows]
    return tabulate(table, headers=[f"system top, {gpus} GPUs (45 nm)", "area mm^2", "critical path ps",
                                    "N5 ps (slack at 640)", "power mW (no gating / ideal gating)"],
                    tablefmt="github", disable_numparse=True)
