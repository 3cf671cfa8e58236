"""The area/power step of ``dysharp study`` (registered in :mod:`dysharp.commands.study`)."""

import argparse
from pathlib import Path

from hw import registry
from infra.scope import scope_of

# Beside the DySHARP addition's blocks, the study costs the switch it is added to, at its 64 ports.
EXTRA_POINTS = {"switch": {"ports": 64}}
QUICK_AREA = 3        # modules synthesized by --quick


def architecture_points() -> dict[str, dict]:
    """{module: point} of every block the 64-port DySHARP addition counts (``synth.scaling.ROLES``), plus
    ``EXTRA_POINTS``."""
    from . import scaling
    points = {}
    for role in scaling.resolve_roles(sorted(registry.MODULES)):
        for m in role["modules"]:
            points[m] = scaling.architecture_point(m) or {}
    points.update({m: p for m, p in EXTRA_POINTS.items() if m in registry.MODULES})
    return points


def _grid_args(module: str, point: dict) -> list[str]:
    # A module at its defaults still needs one --grid to replace its area grid by that one point: a scalar
    # parameter at its default (a --grid value list is comma-separated, so a tuple default cannot be one).
    items = point.items()
    if not items:
        scalar = [(k, v) for k, v in registry.get(module).params().items() if isinstance(v, (bool, int, float, str))]
        if not scalar:
            raise ValueError(f"{module}: no scalar parameter to pin its default point with --grid")
        items = scalar[:1]
    return ["-m", module] + [f"--grid={module}.{k}={v}" for k, v in items]


def area_power_step(args, out: Path) -> str:
    """``dysharp area`` then ``dysharp power``, in the study's scope:

    * default: area and power of each block of the DySHARP addition at its architecture point (the
      report's overhead table), and the switch's area at 64 ports;
    * ``--full``: area over every registered module's grid, power of every module;
    * ``--quick``: area of the ``QUICK_AREA`` smallest modules (by Verilog) at their first standard point,
      power of the smallest module that has a workload.
    """
    from dysharp.commands import area as area_cmd
    from dysharp.commands import power as power_cmd

    from verif.harness.runner import locked_verilog

    from . import report, scaling, workloads

    scope = scope_of(args)
    modules = sorted(registry.MODULES)
    a = argparse.ArgumentParser()
    area_cmd.add_arguments(a)
    p = argparse.ArgumentParser()
    power_cmd.add_arguments(p)
    note = ""
    if scope == "quick":
        # A smoke run of the flow: the QUICK_AREA modules with the least Verilog at their first standard
        # point, and power of the smallest that has a workload. The sizes are the verilog step's files (the
        # `auto` emission, under the same per-point locks: whichever step comes first generates a file):
        # the flat form of the two big tops took 3 of this step's 4 CPU-minutes, only to rank them last.
        first = {m: registry.get(m).points[0] for m in modules}
        size = {m: locked_verilog(m, first[m]).stat().st_size for m in modules}
        small = sorted(modules, key=size.get)
        area_argv, power_argv = ["--max-mb", "0.5"], ["--cycles", "300", "--warmup", "100"]
        area_argv += [x for m in small[:QUICK_AREA] for x in _grid_args(m, first[m])]
        powered = next((m for m in small if workloads.get(m)), small[0])
        # `dysharp power` starts from the architecture point (e.g. 64 ports): pin those parameters too.
        spec = registry.get(powered)
        point = {k: spec.params()[k] for k in scaling.architecture_point(powered) or {}}
        point.update(first[powered])
        power_argv += ["-m", powered] + [f"--set={powered}.{k}={v}" for k, v in point.items()]
    elif scope == "default":
        arch = architecture_points()
        # Every architecture point is synthesized, whatever its Verilog size (the 64-port switch's allocator
        # part is 3.2 MB, past `dysharp area`'s default limit).
        area_argv = [x for m, pt in arch.items() for x in _grid_args(m, pt)] + ["--max-mb", "0"]
        # Power defaults to each module's architecture point; the switch itself is not part of the addition.
        power_argv = [x for m in arch if m not in EXTRA_POINTS for x in ("-m", m)]
        note = ("\n\n*`--full` only*: the area grids (every module over its `area_grid`) and the power of "
                "modules outside the DySHARP addition (`dysharp area`, `dysharp power` or "
                "`dysharp study --full`).")
    else:
        area_argv, power_argv = [], []
    dest = out / "synth_reports"
    dest.mkdir(parents=True, exist_ok=True)
    if scope != "full":
        # Only --full covers every module's grid: the quick and default runs write their summaries beside
        # the report, so that their partial grids never replace the committed synth_reports/ ones.
        area_argv += ["--out", str(dest)]
        power_argv += ["--out", str(dest)]
    if scope == "quick":
        # A smoke run does not synthesize the architecture points for the overhead table (most of the time).
        report.SYNTHESIZE_MISSING = False
    try:
        area_cmd.run(a.parse_args(area_argv))
        power_cmd.run(p.parse_args(power_argv))
        md = report.write_reports(str(dest))
    finally:
        report.SYNTHESIZE_MISSING = True
    # --full: `dysharp area`/`power` also regenerated the committed synth_reports/ summaries.
    return md + note
