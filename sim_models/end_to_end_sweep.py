"""The whole-step sweep (``dysharp estimate --sweep --end-to-end``): :func:`end_to_end.end_to_end` over the
sweep's model x system grid, for training and inference (prefill and decode), written as CSV and plotted.

One task per (model, system, mode) -- every scheme shares that step's routed MoE layer -- run by
:func:`infra.engine.map_tasks` as the layer sweep's are (``jobs`` local processes or the Dask cluster at
``scheduler``, a tqdm bar). With ``cache`` a task's rows are reused from ``build/cache/end_to_end`` when its
content key (the ``sim_models`` source with its configs, the model, system, parameters, whole-step
parameters and calibration) is unchanged, and each step's routed MoE layer is stored as the layer sweep's
estimate of that point (a later ``dysharp estimate --sweep`` of the same parameters reuses it). Outputs
under ``out_dir`` (default ``build/estimate/``): ``end_to_end_sweep.csv`` (one row per model, system, mode
and scheme) and ``end_to_end_speedup.png``.
"""

import dataclasses
import time
from pathlib import Path

from infra import engine

from .calibration import Calibration, load_calibration
from .end_to_end import E2EParams, EndToEnd, end_to_end
from .estimator import BASELINES, FULL, MODES, SCHEMES, Params
from .moe_config import load_model, model_names
from .sweep import SWEEP_SYSTEMS, estimate_key, pyplot, rows_of, save_figure, write_csv
from .system_config import load_system, system_names

__all__ = ["E2E_MODES", "E2E_COLUMNS", "e2e_rows_of", "end_to_end_sweep", "plot_end_to_end", "markdown_tables",
           "run_end_to_end_sweep", "check_names"]

# Training, then inference: prefill and decode (the estimator's modes, in the order the tables show them).
E2E_MODES = ("training", "prefill", "decode")
assert set(E2E_MODES) == set(MODES)
E2E_COLUMNS = ["model", "system", "gpus", "mode", "tokens_per_gpu", "context", "scheme", "moe_layer_us",
               "moe_block_us", "step_ms", "moe_share", "layer_speedup", "step_speedup"]
# Relative cost of one task by mode (training: forward + backward at the prefill token count), to start the
# longest tasks first so the worker pool ends together.
_COST = {"training": 3.5, "prefill": 1.0, "decode": 0.1}


def check_names(kind: str, names, valid) -> list[str]:
    """``names`` (a list, or comma-separated text) checked against ``valid``: a ValueError naming the bad
    one and the valid values; an empty list is an error too."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    names = list(dict.fromkeys(names))
    valid = list(valid)
    if not names:
        raise ValueError(f"no {kind} given; valid: {', '.join(valid)}")
    for n in names:
        if n not in valid:
            raise ValueError(f"unknown {kind} {n!r}; valid: {', '.join(valid)}")
    return names


def e2e_rows_of(e: EndToEnd, **extra) -> list[dict]:
    """CSV rows of one whole-step result (one per scheme): ``layer_speedup`` and ``step_speedup`` are the
    scheme's MoE-layer and whole-step time over DySHARP-full's (the :class:`end_to_end.SchemeStep` fields)."""
    est = e.estimate
    out = []
    for name, s in e.schemes.items():
        row = {"model": est.model.name, "system": est.system.name, "gpus": est.gpus, "mode": est.params.mode,
               "tokens_per_gpu": est.tokens_per_gpu, "context": e.context, "scheme": name,
               "moe_layer_us": s.moe_layer * 1e6, "moe_block_us": s.moe_block * 1e6, "step_ms": s.step * 1e3,
               "moe_share": s.moe_share, "layer_speedup": s.layer_speedup, "step_speedup": s.step_speedup}
        row.update(extra)
        out.append(row)
    return out


def _one(job) -> dict:
    """The whole-step rows of one (model, system, mode), and, when it estimated every scheme, the rows of its
    routed MoE layer as the layer sweep has them (:func:`sweep.rows_of`)."""
    model, system, params, e2e, cal, schemes = job
    e = end_to_end(load_model(model), load_system(system), params, e2e, cal, schemes)
    return {"steps": e2e_rows_of(e), "layer": rows_of(e.estimate) if schemes is None else None}


def _key(job) -> str:
    return engine.content_key("end_to_end", engine.source_hash("sim_models"), job)


def end_to_end_sweep(models=None, systems=SWEEP_SYSTEMS, modes=E2E_MODES, params: Params = Params(),
                     e2e: E2EParams = E2EParams(), cal: Calibration | None = None, schemes=None, jobs: int = 1,
                     scheduler: str | None = None, cache: bool = False) -> list[dict]:
    """Rows of :func:`e2e_rows_of` for every (model, system, mode): ``params`` with its mode replaced by each
    of ``modes`` (its ``tokens_per_gpu``, if set, for every mode; else each mode's default)."""
    models = check_names("model", models or model_names(), model_names())
    systems = check_names("system", systems, system_names())
    modes = check_names("mode", modes, E2E_MODES)
    if schemes is not None:
        schemes = check_names("scheme", schemes, SCHEMES)
    e2e.validate()
    cal = cal if cal is not None else load_calibration()
    grid = [(m, s, dataclasses.replace(params, mode=mode), e2e, cal, schemes)
            for mode in modes for m in models for s in systems]
    for job in grid:
        job[2].validate()
    # Longest tasks first, so the worker pool ends together; the rows come back in the grid's order.
    order = sorted(range(len(grid)), key=lambda i: -load_system(grid[i][1]).gpus * _COST[grid[i][2].mode])
    work = [grid[i] for i in order]
    store = engine.cache("end_to_end") if cache else None
    res = engine.map_tasks(_one, work, jobs=jobs, scheduler=scheduler, desc="whole-step sweep",
                           labels=[f"{m} {s} {p.mode}" for m, s, p, *_ in work], cache=store,
                           key=_key if cache else None)
    if cache:
        # The routed MoE layer of each step is the layer sweep's estimate of the same point: stored under its
        # key, so that a layer sweep after this one (the study's) reuses it instead of recomputing it.
        layer_store = engine.cache("estimate")
        for (m, s, p, _e2e, c, _schemes), r in zip(work, res):
            k = estimate_key((m, s, p, c, {}))
            if r["layer"] is not None and k not in layer_store:
                layer_store.set(k, r["layer"], retry=True)
    by_grid = dict(zip(order, res))
    return [r for i in range(len(grid)) for r in by_grid[i]["steps"]]


_TICKS = (0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16)


def plot_end_to_end(rows: list[dict], path: Path, baselines=BASELINES) -> Path:
    """One panel per (mode, system): DySHARP's whole-step speedup over each baseline, per model."""
    plt = pyplot()
    modes = [m for m in E2E_MODES if any(r["mode"] == m for r in rows)]
    systems = list(dict.fromkeys(r["system"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    baselines = [b for b in baselines if any(r["scheme"] == b for r in rows)]
    fig, axes = plt.subplots(len(modes), len(systems), figsize=(max(6.0, 0.75 * len(models) + 2) * len(systems),
                                                                3.4 * len(modes)), squeeze=False)
    width = 0.8 / max(len(baselines), 1)
    for row_axes, mode in zip(axes, modes):
        for ax, s in zip(row_axes, systems):
            sel = {(r["model"], r["scheme"]): r for r in rows if r["mode"] == mode and r["system"] == s}
            for i, b in enumerate(baselines):
                ys = [sel[(m, b)]["step_speedup"] if (m, b) in sel else 0 for m in models]
                ax.bar([x + (i - len(baselines) / 2 + 0.5) * width for x in range(len(models))], ys, width,
                       label=SCHEMES[b].label)
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set_yscale("log", base=2)            # NVLS dwarfs the rest on a linear axis
            lo, hi = ax.get_ylim()
            ax.set_yticks([t for t in _TICKS if lo <= t <= hi], minor=False)
            ax.set_yticks([], minor=True)
            ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.set_xticks(range(len(models)))
            ax.set_xticklabels(models, rotation=20, ha="right", fontsize=7)
            ax.grid(axis="y", lw=0.3, alpha=0.5)
            full = [r for r in sel.values() if r["scheme"] == FULL]
            tok = full[0]["tokens_per_gpu"] if full else "?"
            ax.set_title(f"{mode} on {s}, {tok} tokens/GPU: step of baseline / DySHARP", fontsize=9)
        row_axes[0].set_ylabel("whole-step speedup (x)")
    axes[0, 0].legend(ncol=4, fontsize=6, loc="upper left")
    return save_figure(plt, fig, path)


def markdown_tables(rows: list[dict], baselines=BASELINES) -> str:
    """Per mode, models x systems: DySHARP's MoE share of the step and its whole-step speedup over each
    baseline (Markdown)."""
    from tabulate import tabulate
    out = []
    for mode in (m for m in E2E_MODES if any(r["mode"] == m for r in rows)):
        sel = [r for r in rows if r["mode"] == mode]
        bs = [b for b in baselines if any(r["scheme"] == b for r in sel)]
        table = []
        for m, s in dict.fromkeys((r["model"], r["system"]) for r in sel):
            rs = {r["scheme"]: r for r in sel if r["model"] == m and r["system"] == s}
            f = rs[FULL]
            table.append([m, s, str(f["gpus"]), f"{f['step_ms']:.2f}", f"{f['moe_share']:.0%}"]
                         + [f"{rs[b]['step_speedup']:.2f}" if b in rs else "-" for b in bs])
        tok = sel[0]["tokens_per_gpu"] if len({r["tokens_per_gpu"] for r in sel}) == 1 else "varied"
        kind = "training" if mode == "training" else f"inference, {mode}"
        out += [f"**{kind}** ({tok} tokens/GPU): DySHARP's step time, the MoE layers' share of it, and DySHARP's "
                "whole-step speedup over each baseline", "",
                tabulate(table, headers=["model", "system", "GPUs", "DySHARP step ms", "MoE share"]
                         + [f"vs {b}" for b in bs], tablefmt="github", disable_numparse=True), ""]
    return "\n".join(out).rstrip()


def run_end_to_end_sweep(out_dir="build/estimate", models=None, systems=SWEEP_SYSTEMS, modes=E2E_MODES,
                         params: Params = Params(), e2e: E2EParams = E2EParams(), cal=None, schemes=None,
                         jobs: int | None = None, scheduler: str | None = None, cache: bool = True) -> dict:
    """The whole-step sweep with its CSV and PNG under ``out_dir``. Returns the paths, the rows, the wall
    time, the worker count and the scheduler."""
    out = Path(out_dir)
    jobs = jobs or engine.DEFAULT_JOBS
    t0 = time.time()
    rows = end_to_end_sweep(models, systems, modes, params, e2e, cal, schemes, jobs, scheduler, cache)
    seconds = time.time() - t0
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": write_csv(rows, out / "end_to_end_sweep.csv", E2E_COLUMNS),
             "png": plot_end_to_end(rows, out / "end_to_end_speedup.png")}
    return {"paths": paths, "rows": rows, "seconds": seconds, "jobs": jobs,
            "scheduler": engine.scheduler_address(scheduler)}
