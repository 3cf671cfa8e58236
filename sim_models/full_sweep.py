"""The whole ``dysharp estimate --sweep``: the main grid of :mod:`sim_models.sweep` and the one-at-a-time
sensitivity of :mod:`sim_models.sensitivity` (GPU count, tokens per GPU, Zipf skew, tile size) around one
model, as CSV and PNG under ``build/estimate/``. Both run as tasks of :func:`infra.engine.map_tasks`, their
estimates cached in ``build/cache/estimate``."""

import dataclasses
import time
from pathlib import Path

from infra import engine

from .calibration import load_calibration
from .estimator import Params
from .sensitivity import QUICK_SENSITIVITY, SENSITIVITY, plot_sensitivity, sensitivity
from .sweep import QUICK_MODELS, SWEEP_SYSTEMS, combine_table, main_sweep, plot_breakdown, plot_speedups, write_csv

__all__ = ["run_sweep"]


def run_sweep(out_dir="build/estimate", model="deepseek-v3", params: Params = Params(), cal=None,
              quick: bool = False, jobs: int | None = None, models=None, systems=SWEEP_SYSTEMS,
              grid: dict | None = None, scheduler: str | None = None, cache: bool = True) -> dict:
    """The full ``dysharp estimate --sweep``: main grid + sensitivity, CSVs and PNGs. Returns the paths,
    the rows and the wall times. ``jobs``, ``scheduler``: see :func:`infra.engine.map_tasks`;
    ``cache``: reuse unchanged estimates (``build/cache/estimate``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = jobs or engine.DEFAULT_JOBS
    cal = cal if cal is not None else load_calibration()
    t0 = time.time()
    if quick and models is None:
        models = list(QUICK_MODELS)
    rows = main_sweep(models, systems, params, cal, jobs, scheduler, cache)
    t_main = time.time() - t0
    sens_system = "gh200-nvl32" if "gh200-nvl32" in systems else systems[0]
    t1 = time.time()
    if grid is None:
        grid = QUICK_SENSITIVITY if quick else SENSITIVITY
    sparams = dataclasses.replace(params, tokens_per_gpu=min(params.tokens, 1024)) if quick else params
    srows = sensitivity(model, sens_system, sparams, cal, grid, jobs, scheduler, cache)
    t_sens = time.time() - t1
    paths = {
        "csv": write_csv(rows, out / "sweep.csv"),
        "sensitivity_csv": write_csv(srows, out / "sensitivity.csv"),
        "speedup_png": plot_speedups(rows, out / "speedup.png"),
        # the breakdown of ``model``, or of the grid's first model when the grid leaves it out
        "breakdown_png": plot_breakdown(rows, model if any(r["model"] == model for r in rows) else rows[0]["model"],
                                        out / "breakdown.png"),
        "sensitivity_png": plot_sensitivity(srows, out / "sensitivity.png"),
    }
    if any(r["combine"] for r in rows):     # DySHARP's pull and push combine per point, the one taken
        paths["combine_md"] = out / "combine.md"
        paths["combine_md"].write_text(combine_table(rows) + "\n")
    return {"paths": paths, "rows": rows, "sensitivity": srows, "main_s": t_main, "sensitivity_s": t_sens,
            "jobs": jobs, "scheduler": engine.scheduler_address(scheduler), "calibration": cal}
