"""The estimator's main grid (models x systems x schemes), written as CSV and plotted with matplotlib (Agg
backend), and the pieces the other sweeps share: one estimate as a task (:func:`estimate_task`) with its
cache key (:func:`estimate_key`), the CSV writer and the plot helpers.

``main_sweep`` runs one :func:`estimator.estimate` per (model, system) -- every scheme shares that
layer's routing -- as tasks of :func:`infra.engine.map_tasks` (``jobs`` local processes, or the Dask
cluster at ``scheduler``). With ``cache`` an estimate is reused from ``build/cache/estimate`` when its
content key (the ``sim_models`` source with its configs, the model, system, parameters and calibration)
is unchanged. :mod:`sim_models.full_sweep` adds the sensitivity studies (:mod:`sim_models.sensitivity`).
"""

import csv
from pathlib import Path

from infra import engine

from .calibration import Calibration, load_calibration
from .estimator import BASELINES, FULL, SCHEMES, Estimate, Params, estimate
from .moe_config import load_model, model_names
from .system_config import SystemConfig, load_system

__all__ = ["SWEEP_SYSTEMS", "QUICK_MODELS", "COLUMNS", "rows_of", "estimate_task", "estimate_key", "main_sweep",
           "write_csv", "combine_table", "pyplot", "save_figure", "plot_speedups", "plot_breakdown", "markdown_table"]

SWEEP_SYSTEMS = ("hgx-h200", "gh200-nvl32", "nvl72")
QUICK_MODELS = ("deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b")     # --quick: one model of each kind
COLUMNS = ["model", "system", "gpus", "mode", "tokens_per_gpu", "routing", "placement", "dtype", "tile",
           "measured_d", "scheme", "total_us", "dispatch_us", "gemm_us", "combine_us", "exposed_us", "comm_sms",
           "dysharp_speedup"]


def rows_of(e: Estimate, **extra) -> list[dict]:
    """CSV rows of one estimate (one per scheme); ``dysharp_speedup`` = scheme time / DySHARP-full time."""
    out = []
    for name, r in e.results.items():
        row = {"model": e.model.name, "system": e.system.name, "gpus": e.gpus, "mode": e.params.mode,
               "tokens_per_gpu": e.tokens_per_gpu, "routing": e.routing, "placement": e.params.placement,
               "dtype": e.params.dtype, "tile": e.params.tile, "measured_d": round(e.measured_d, 4),
               "scheme": name, "total_us": r.total * 1e6, "dispatch_us": r.dispatch * 1e6,
               "gemm_us": r.gemm * 1e6, "combine_us": r.combine * 1e6, "exposed_us": r.exposed * 1e6,
               "comm_sms": r.comm_sms, "dysharp_speedup": e.speedup(name),
               # DySHARP-full's combine: the one taken and both layer times (Params.combine)
               "combine": r.detail.get("combine", ""),
               "pull_us": r.detail["pull_total"] * 1e6 if "pull_total" in r.detail else "",
               "push_us": r.detail["push_total"] * 1e6 if "push_total" in r.detail else ""}
        row.update(extra)
        out.append(row)
    return out


def estimate_task(job):
    """One estimate's rows. ``system`` is a name, or a :class:`SystemConfig` (a system with some fields
    changed, e.g. by the tornado of :mod:`sensitivity`)."""
    model, system, params, cal, extra = job
    sysc = system if isinstance(system, SystemConfig) else load_system(system)
    e = estimate(load_model(model), sysc, params, cal)
    return rows_of(e, **extra)


def estimate_key(job) -> str:
    """What one estimate depends on: the estimator's code and configs, and the job's inputs."""
    return engine.content_key("estimate", engine.source_hash("sim_models"), job)


def _map(work, jobs, scheduler=None, cache=False, desc="estimate"):
    store = engine.cache("estimate") if cache else None
    labels = [" ".join([m, getattr(s, "name", s), *(f"{k}={v}" for k, v in extra.items())])
              for m, s, _p, _c, extra in work]
    return engine.map_tasks(estimate_task, work, jobs=jobs, scheduler=scheduler, desc=desc, labels=labels,
                            cache=store, key=estimate_key if cache else None)


def main_sweep(models=None, systems=SWEEP_SYSTEMS, params: Params = Params(), cal: Calibration | None = None,
               jobs: int = 1, scheduler: str | None = None, cache: bool = False) -> list[dict]:
    models = models or model_names()
    cal = cal if cal is not None else load_calibration()
    work = [(m, s, params, cal, {}) for m in models for s in systems]
    # Biggest first, so the worker pool ends together.
    work.sort(key=lambda j: -load_system(j[1]).gpus)
    return [r for rows in _map(work, jobs, scheduler, cache, 'estimate sweep') for r in rows]


def write_csv(rows: list[dict], path: Path, columns=COLUMNS) -> Path:
    """``rows`` as CSV, ``columns`` first, then the rows' other keys; floats to 4 decimals."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = list(columns) + [c for c in (rows[0] if rows else {}) if c not in columns]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    return path


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (imported here, not at the top: it costs start-up time)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(plt, fig, path) -> Path:
    """``fig`` laid out, written to ``path`` (PNG, 110 dpi) and closed."""
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_speedups(rows: list[dict], path: Path, baselines=BASELINES) -> Path:
    """One panel per system: DySHARP's speedup over each baseline, per model."""
    plt = pyplot()
    systems = list(dict.fromkeys(r["system"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(len(systems), 1, figsize=(13, 3.6 * len(systems)), squeeze=False)
    width = 0.8 / len(baselines)
    for ax, s in zip(axes[:, 0], systems):
        for i, b in enumerate(baselines):
            ys = [next((r["dysharp_speedup"] for r in rows if r["system"] == s and r["model"] == m
                        and r["scheme"] == b), 0) for m in models]
            ax.bar([x + (i - len(baselines) / 2 + 0.5) * width for x in range(len(models))], ys, width,
                   label=SCHEMES[b].label)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log", base=2)        # NVLS's all-to-all-everywhere dwarfs the rest on a linear axis
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(models, rotation=20, ha="right", fontsize=8)
        g = max(r["gpus"] for r in rows if r["system"] == s)
        ax.set_ylabel("DySHARP speedup (x)")
        ax.set_title(f"{s}: layer time of baseline / DySHARP (EP up to {g} GPUs)", fontsize=10)
    axes[0, 0].legend(ncol=4, fontsize=7, loc="upper left")
    return save_figure(plt, fig, path)


def plot_breakdown(rows: list[dict], model: str, path: Path) -> Path:
    """Stacked layer-time breakdown (GEMM busy + exposed dispatch/combine) of every scheme, per system."""
    plt = pyplot()
    sel = [r for r in rows if r["model"] == model]
    systems = list(dict.fromkeys(r["system"] for r in sel))
    fig, axes = plt.subplots(1, len(systems), figsize=(5.2 * len(systems), 4.2), squeeze=False)
    for ax, s in zip(axes[0], systems):
        rs = [r for r in sel if r["system"] == s]
        names = [r["scheme"] for r in rs]
        gemm = [r["gemm_us"] for r in rs]
        # Split the exposed time between dispatch and combine in proportion to their stand-alone times.
        exp_d = [r["exposed_us"] * r["dispatch_us"] / max(r["dispatch_us"] + r["combine_us"], 1e-12) for r in rs]
        exp_c = [r["exposed_us"] - d for r, d in zip(rs, exp_d)]
        x = range(len(rs))
        ax.bar(x, gemm, label="GEMM (busy)")
        ax.bar(x, exp_d, bottom=gemm, label="exposed: dispatch share")
        ax.bar(x, exp_c, bottom=[a + b for a, b in zip(gemm, exp_d)], label="exposed: combine share")
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
        ax.set_ylabel("layer time (us)")
        ax.set_title(f"{model} on {s}", fontsize=10)
    axes[0, 0].legend(fontsize=7)
    return save_figure(plt, fig, path)


def markdown_table(rows: list[dict], baselines=BASELINES) -> str:
    """Models x systems: DySHARP's speedup over each baseline."""
    from tabulate import tabulate
    table = []
    keys = list(dict.fromkeys((r["model"], r["system"]) for r in rows))
    for m, s in keys:
        rs = {r["scheme"]: r for r in rows if r["model"] == m and r["system"] == s}
        any_r = rs[FULL]
        table.append([m, s, str(any_r["gpus"]), f"{any_r['measured_d']:.2f}"]
                     + [f"{rs[b]['dysharp_speedup']:.2f}" if b in rs else "-" for b in baselines]
                     + [f"{any_r['total_us']:.0f}"])
    return tabulate(table, headers=["model", "system", "GPUs", "D"] + [f"vs {b}" for b in baselines] +
                    ["DySHARP us"], tablefmt="github", disable_numparse=True)


def combine_table(rows: list[dict], baselines=BASELINES) -> str:
    """Models x systems: DySHARP-full's layer time with each combine (pull = ld_reduce, push = partials
    stored at the home), the one taken, and its speedup over each baseline (bold: DySHARP loses)."""
    from tabulate import tabulate
    table = []
    for m, s in dict.fromkeys((r["model"], r["system"]) for r in rows):
        rs = {r["scheme"]: r for r in rows if r["model"] == m and r["system"] == s}
        d = rs[FULL]
        pull, push = d["pull_us"], d["push_us"]
        ratio = f"{push / pull:.3f}" if pull != "" and push != "" else "-"
        cell = lambda b: (f"**{rs[b]['dysharp_speedup']:.2f}**" if rs[b]["dysharp_speedup"] < 0.995
                          else f"{rs[b]['dysharp_speedup']:.2f}") if b in rs else "-"
        table.append([m, s, str(d["gpus"]), f"{d['measured_d']:.2f}",
                      f"{pull:.1f}" if pull != "" else "-", f"{push:.1f}" if push != "" else "-", ratio,
                      d["combine"]] + [cell(b) for b in baselines])
    return tabulate(table, headers=["model", "system", "GPUs", "D", "pull us", "push us", "push/pull", "taken"]
                    + [f"vs {b}" for b in baselines], tablefmt="github", disable_numparse=True)
