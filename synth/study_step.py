"""The area/power step of ``dysharp study`` (registered in :mod:`dysharp.commands.study`)."""

import argparse
import shutil
from pathlib import Path

from hw import registry


def area_power_step(args, out: Path) -> str:
    """``dysharp area`` over every registered module's grid, then ``dysharp power`` at each module's
    default point. ``--quick``: each module at the first of its standard points only, and power for the
    smallest module (by Verilog) that has a workload, at that point."""
    from dysharp.commands import area as area_cmd
    from dysharp.commands import power as power_cmd

    from . import report, workloads

    modules = sorted(registry.MODULES)
    a = argparse.ArgumentParser()
    area_cmd.add_arguments(a)
    p = argparse.ArgumentParser()
    power_cmd.add_arguments(p)
    if args.quick:
        area_argv, power_argv = ["--max-mb", "0.5"], ["--cycles", "300", "--warmup", "100"]
        for m in modules:
            first = registry.get(m).points[0]
            area_argv += ["-m", m] + [f"--grid={m}.{k}={v}" for k, v in first.items()]
        # The module with a workload whose first point has the least Verilog (already generated above).
        with_wl = [m for m in modules if workloads.get(m)] or modules[:1]
        powered = min(with_wl, key=lambda m: registry.generate_verilog(m, registry.get(m).points[0]).stat().st_size)
        power_argv += ["-m", powered] + [f"--set={powered}.{k}={v}"
                                         for k, v in registry.get(powered).points[0].items()]
    else:
        area_argv, power_argv = [], []
    area_cmd.run(a.parse_args(area_argv))
    power_cmd.run(p.parse_args(power_argv))
    md = report.write_reports("synth_reports")
    dest = out / "synth_reports"
    dest.mkdir(parents=True, exist_ok=True)
    for f in Path("synth_reports").iterdir():
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    return md
