"""What the estimator's conclusions hang on: a tornado over its assumed constants, and one-at-a-time
sensitivity figures over the design and workload inputs.

* :func:`tornado` moves each key assumption (:data:`ASSUMPTIONS`: comm SMs, GEMM and HBM efficiency, link
  efficiency, switch and link latency, kernel overhead, routing skew, ...) to the low and the high end of
  a stated plausible range, one at a time, around a base point (default DeepSeek-V3 on GH200 NVL32,
  prefill, 4,096 tokens/GPU), and reports DySHARP's speedup over each baseline at both ends. Every
  assumption carries the source of its default (or the word "assumption") and why the range is plausible.
  System fields are varied on a copy of the loaded :class:`SystemConfig`; no default changes.
* :func:`sensitivity` varies one input at a time (tile size, GPU count, tokens per GPU in prefill and in
  decode, Zipf skew with and without the model's group limit, FP8/BF16 dispatch). ``dysharp estimate
  --sweep`` uses it with its smaller grid (:data:`SENSITIVITY`); ``--sensitivity`` with
  :data:`FIGURES_GRID`.

Both run their estimates as tasks of :func:`infra.engine.map_tasks` (process pool or Dask, tqdm bar,
``build/cache/estimate`` when ``cache``), each distinct estimate once.
"""

import dataclasses
import json
import math
import time
from pathlib import Path

from infra import engine

from .calibration import Calibration, load_calibration
from .estimator import DEFAULT_TOKENS, FULL, SCHEMES, Params
from .moe_config import ModelConfig, load_model
from .sweep import estimate_key, estimate_task, pyplot, save_figure, write_csv
from .system_config import SystemConfig, load_system

__all__ = ["Assumption", "ASSUMPTIONS", "TORNADO_BASELINES", "SENSITIVITY", "QUICK_SENSITIVITY", "FIGURES_GRID",
           "QUICK_FIGURES_GRID", "skew_spec", "tornado", "tornado_table", "plot_tornado", "run_tornado",
           "sensitivity", "plot_sensitivity", "run_sensitivity", "run_cli"]

TORNADO_BASELINES = ("deepep", "tutel", "comet", "ccfuser", "dualpipe")


def skew_spec(model: ModelConfig, exponent: float, grouped: bool = True) -> str:
    """The routing spec of Zipf skew ``exponent`` in the model's own routing family (group-limited when the
    model has a group limit and ``grouped``); exponent 0 is the unskewed spec itself (``group`` /
    ``uniform``), so the tornado's low end of the skew is the default routing exactly."""
    if not (isinstance(exponent, (int, float)) and exponent >= 0):
        raise ValueError(f"Zipf exponent must be a number >= 0, got {exponent!r}")
    if grouped and model.n_group:
        return "group" if exponent == 0 else f"group-zipf:{exponent:g}"
    return "uniform" if exponent == 0 else f"zipf:{exponent:g}"


@dataclasses.dataclass(frozen=True)
class Assumption:
    """One assumed constant and its plausible range. ``target`` is ``params.<field>`` (:class:`Params`),
    ``system.<field>`` (:class:`SystemConfig`), ``calibration.<figure>`` (an RTL figure's default) or
    ``routing`` (Zipf skew in the model's routing family)."""
    key: str
    label: str
    target: str
    low: object
    high: object
    unit: str
    source: str      # where the default comes from, or "assumption"
    why: str         # why the range is plausible
    modes: tuple = ()   # the modes whose base point it enters (empty: every mode)

    def applies(self, mode: str) -> bool:
        return not self.modes or mode in self.modes

    def base(self, model: ModelConfig, system: SystemConfig, params: Params, cal: Calibration):
        """The value the base point uses."""
        kind, _, field = self.target.partition(".")
        if kind == "params":
            if field == "bf16_gemm_efficiency" and params.bf16_gemm_efficiency is None:   # derived from FP8's
                return round(params.gemm_efficiency_of("bf16", system), 3)
            if field == "tokens_per_gpu":
                return params.tokens
            return getattr(params, field)
        if kind == "system":
            if field == "switch_latency_ns":     # the RTL's zero-load latency replaces it when calibrated
                cyc = cal.get("switch_zero_load_latency_cycles")
                return system.switch_latency_ns if cyc is None else cyc / system.switch_clock_ghz
            return getattr(system, field)
        if kind == "calibration":
            return cal.get(field)
        r = params.routing            # the base routing's Zipf exponent (0: unskewed)
        return float(r.split(":", 1)[1]) if r.startswith(("zipf:", "group-zipf:")) else 0.0

    def apply(self, model: ModelConfig, system: SystemConfig, params: Params, cal: Calibration, value):
        """(system, params, calibration) with this assumption at ``value``; the others unchanged."""
        kind, _, field = self.target.partition(".")
        if kind == "params":
            return system, dataclasses.replace(params, **{field: value}), cal
        if kind == "system":
            if field == "switch_latency_ns":
                cal = _with(cal, switch_zero_load_latency_cycles=None)
            return system.replace(**{field: value}), params, cal
        if kind == "calibration":
            extra = {"tlb_misses_per_key": None} if field == "tlb_hit_rate" else {}
            return system, params, _with(cal, **{field: value}, **extra)
        if kind == "routing":
            return system, dataclasses.replace(params, routing=skew_spec(model, value)), cal
        raise ValueError(f"assumption {self.key!r}: unknown target {self.target!r}")


def _with(cal: Calibration, **values) -> Calibration:
    """A copy of ``cal`` with some figures replaced (None: the figure's fallback)."""
    v, s = dict(cal.values), dict(cal.sources)
    for name, x in values.items():
        v[name] = x
        s[name] = "uncalibrated (varied by the tornado)"
    return Calibration(v, s)


# The key assumptions and their plausible ranges (docs/estimator.md, "Assumptions and their sources").
ASSUMPTIONS = (
    Assumption("comm_sms", "comm SMs", "params.comm_sms", 0, 48, "SMs",
               "DeepEP README: 24 of H800's 132 SMs reach 153/158 GB/s (MISSION.md: 20-24)",
               "0: copy engines / TMA issue all traffic (no SM cost); 48: twice DeepEP's pool, a less tuned kernel"),
    Assumption("dualpipe_sms", "DualPipe comm SMs", "params.dualpipe_sms", 10, 32, "SMs",
               "DeepSeek-V3 technical report: 20 SMs for DualPipe's communication",
               "half of DeepSeek-V3's 20, up to DeepEP's 24 plus a third"),
    Assumption("gemm_efficiency", "GEMM efficiency", "params.gemm_efficiency", 0.45, 0.75, "of peak",
               "DeepGEMM README: 1,093-1,297 of 1,979 FP8 TFLOPS on MoE shapes (0.55-0.66)",
               "0.45: a less tuned grouped GEMM; 0.75: above DeepGEMM's best dense shape (0.66)"),
    Assumption("gemm_pipeline_costs", "GEMM pipeline fixed costs", "params.gemm_pipeline_costs", False, True, "",
               "DeepGEMM's kernel (fp8_gemm.cuh): per block an epilogue, per launch a prologue, from Hopper's "
               "shared-memory rate and measured L2/HBM latencies; Blackwell assumed equal",
               "without them (the plain tile-aware roofline), against the base"),
    Assumption("mem_efficiency", "HBM efficiency", "params.mem_efficiency", 0.6, 0.9, "of peak",
               "DeepGEMM README: memory-bound shapes reach 2.2-2.6 of 3.35 TB/s (0.66-0.78)",
               "around DeepGEMM's memory-bound range, both ways"),
    Assumption("link_efficiency", "link efficiency", "system.link_efficiency", 0.7, 0.95, "of raw",
               "NCCL ~370 of 450 GB/s per direction on NVLink4 (MISSION.md); NVLink5 assumed equal",
               "0.7: smaller messages or a less tuned kernel; 0.95: close to raw"),
    Assumption("switch_latency_ns", "switch latency", "system.switch_latency_ns", 50, 500, "ns",
               "assumption (the RTL's zero-load latency replaces it when build/bench/switch.json has it)",
               "half to five times the assumed 100 ns per switch traversal"),
    Assumption("link_latency_ns", "link latency", "system.link_latency_ns", 200, 1000, "ns",
               "assumption (GPU memory system + PHY, one way; no public primary figure)",
               "half the assumed 400 ns per crossing, up to 2.1 us per GPU-to-GPU traversal (the ~1-2 us quoted "
               "for NVLink intra-node latency, software included)"),
    Assumption("kernel_overhead_us", "kernel overhead", "system.kernel_overhead_us", 0.0, 10.0, "us",
               "assumption (DeepEP's published latencies do not resolve a fixed cost; docs: Kernel overheads)",
               "0: launches fully hidden (CUDA graphs, persistent kernels); 10: a host-synchronised launch"),
    Assumption("skew", "routing skew (Zipf)", "routing", 0.0, 1.0, "exponent",
               "default: uniform expert popularity (group-limited where the model has a limit); "
               "MISSION.md: real text ~ Zipf 0.2-0.5",
               "from uniform to twice the skew measured on real text"),
    Assumption("weight_reuse", "tile weight reuse", "params.weight_reuse", "expert", "l2", "",
               "assumption: the fused kernel co-schedules an expert's ready tiles (docs: Tile-aware GEMM)",
               "the two brackets: weights once per expert, or tiles in ready order with an LRU L2"),
    Assumption("tlb_hit_rate", "AL-TLB hit rate", "calibration.tlb_hit_rate", 0.5, 1.0, "",
               "assumption, 0.9 (replaced by dysharp system's misses per key when measured)",
               "from half the lookups missing to none"),
    Assumption("combine", "DySHARP combine", "params.combine", "pull", "push", "",
               "modelled: a runtime takes the faster of ld_reduce (pull) and stored partials (push) per layer",
               "each combine alone: what the choice is worth"),
    Assumption("combine_link_share", "combine's least link share", "params.combine_link_share", 0.25, 0.75, "",
               "assumption: max-min fair arbitration between dispatch and combine (half each under backlog)",
               "dispatch-first to combine-first arbitration"),
    Assumption("hbm_split", "fused stages' HBM split", "params.hbm_split", "equal", "sms", "",
               "assumption: by SM count when both stages saturate HBM (bounded loads in flight per SM)",
               "an equal split against the base's SM-weighted one"),
    Assumption("comm_sm_duty", "comm-SM duty scaling", "params.comm_sm_duty", False, True, "",
               "assumption: COMET-style adaptive sizing, ceil(pool x phi) SMs, every scheme alike",
               "the whole pool reserved while overlapped, against the duty-scaled base"),
    Assumption("tutel_degrees", "chunk counts tried", "params.tutel_degrees", (1, 2), (1, 2, 4, 8, 16), "",
               "assumption: the search space of Tutel's pipelining degree and FasterMoE's peer batching",
               "half the choices to one more doubling"),
    Assumption("bf16_gemm_efficiency", "BF16 GEMM efficiency", "params.bf16_gemm_efficiency", 0.6, 0.8,
               "of BF16 peak", "cuBLAS 12.9 blog: block-scaled FP8 1.75x BF16; assumption: DeepGEMM and the BF16 "
               "kernels stand in that ratio (0.686)",
               "an FP8/BF16 ratio of 2.0 to 1.5 at FP8's 0.6 (moves only BF16 GEMMs: nothing at an FP8 base)"),
    Assumption("tlb_miss_penalty", "AL-TLB miss penalty", "calibration.tlb_miss_penalty_cycles", 100, 1000,
               "cycles", "assumption: one backing-table read in GPU memory, ~200 ns",
               "64 ns to 640 ns per miss"),
    Assumption("tracker_ready_latency", "tracker ready latency", "calibration.tracker_ready_latency_cycles", 1,
               160, "cycles", "assumption, 4 (dysharp system's measured 4.2 replaces it)",
               "one cycle to 100 ns of GPU-side signalling"),
    Assumption("reduce_last_to_result", "NVLS reduce last-to-result", "calibration.reduce_last_to_result_cycles",
               4, 64, "cycles", "assumption, 8 (the RTL engine measures 8); enters the NVLS ReduceScatter only",
               "half to eight times"),
    Assumption("reduce_request_overhead", "ld_reduce engine time", "calibration.reduce_request_overhead_cycles",
               12, 200, "cycles", "the RTL ld_reduce unit, 24 cycles (docs/reduction.md)",
               "half to a 128 ns engine (a larger switch's longer pipeline)"),
    Assumption("decode_tokens", "decode tokens per GPU", "params.tokens_per_gpu", 16, 256, "tokens",
               "assumption: 64 (DeepEP's low-latency tests use 128 per batch)",
               "a quarter to four times the assumed batch", modes=("decode",)),
    Assumption("explicit_sm_fraction", "explicit-address SMs", "params.explicit_sm_fraction", 0.10, 0.20,
               "of SMs", "MISSION.md: explicit addressing costs 10-20% of the SMs",
               "MISSION.md's range (moves only the DySHARP explicit-address ablation)"),
)

# One-at-a-time grids. SENSITIVITY / QUICK_SENSITIVITY: ``dysharp estimate --sweep``'s (unchanged);
# FIGURES_GRID / QUICK_FIGURES_GRID: ``dysharp estimate --sensitivity``'s.
SENSITIVITY = {
    "gpus": [8, 16, 32, 64],
    "tokens_per_gpu": [256, 1024, 4096, 16384],
    "zipf": [0.0, 0.3, 0.6, 1.0],
    "tile": [64, 128, 256],
}
QUICK_SENSITIVITY = {"gpus": [8, 16], "tokens_per_gpu": [256, 2048], "zipf": [0.0, 0.6], "tile": [64, 128]}
FIGURES_GRID = {
    "tile": [32, 64, 128, 256, 512],
    "gpus": [8, 16, 32, 64, 72],
    "tokens_per_gpu": [512, 1024, 2048, 4096, 8192, 16384],     # in the base mode (prefill by default)
    "decode_tokens": [1, 4, 16, 64, 256],                       # decode mode
    "zipf": [0.0, 0.25, 0.5, 0.75, 1.0],                        # the model's routing family
    "zipf_ungrouped": [0.0, 0.25, 0.5, 0.75, 1.0],              # without the group limit (grouped models)
    "dtype": ["fp8", "bf16"],
}
QUICK_FIGURES_GRID = {"tile": [64, 128, 512], "gpus": [8, 32, 72], "tokens_per_gpu": [1024, 4096],
                      "decode_tokens": [1, 64], "zipf": [0.0, 1.0], "zipf_ungrouped": [0.0, 1.0],
                      "dtype": ["fp8", "bf16"]}
GRID_KEYS = tuple(FIGURES_GRID)
QUICK_TOKENS = 1024          # --quick: the base point's tokens per GPU (prefill/training)


# ---------------------------------------------------------------------------------------------------------
# Running points

def _canonical(m: ModelConfig, s: SystemConfig, p: Params) -> Params:
    """``p`` with the values that equal their defaults written as the defaults (``tokens_per_gpu``, ``gpus``,
    ``routing``), so equal estimates get equal keys: a grid point at the base value is the base point."""
    auto = "group" if m.n_group else "uniform"
    return dataclasses.replace(
        p, tokens_per_gpu=None if p.tokens_per_gpu == DEFAULT_TOKENS[p.mode] else p.tokens_per_gpu,
        gpus=None if p.gpus == s.gpus else p.gpus, routing="auto" if p.routing == auto else p.routing)


def _run_points(model: str, points: list, jobs: int, scheduler, cache: bool, desc: str) -> list[list[dict]]:
    """Rows (one per scheme) of each (system, params, cal) point; each distinct point is estimated once.
    An unchanged system goes by name, so a point equal to a sweep's shares its cache entry."""
    m = load_model(model)
    names = {}
    work, index, labels = [], [], []
    seen = {}
    for sysc, params, cal, label in points:
        if sysc.name not in names:
            names[sysc.name] = load_system(sysc.name)
        sys_arg = sysc.name if sysc == names[sysc.name] else sysc
        job = (model, sys_arg, _canonical(m, sysc, params), cal, {})
        k = engine.content_key(job)
        if k not in seen:
            seen[k] = len(work)
            work.append(job)
            labels.append(f"{model} {sysc.name} {label}")
        index.append(seen[k])
    store = engine.cache("estimate") if cache else None
    out = engine.map_tasks(estimate_task, work, jobs=jobs, scheduler=scheduler, desc=desc, labels=labels, cache=store,
                           key=estimate_key if cache else None)
    return [out[i] for i in index]


def _check_baselines(baselines) -> tuple:
    baselines = tuple(baselines)
    if not baselines:
        raise ValueError("no baseline to compare DySHARP with")
    for b in baselines:
        if b not in SCHEMES:
            raise ValueError(f"unknown scheme {b!r}; valid: {', '.join(s for s in SCHEMES if s != FULL)}")
        if b == FULL:
            raise ValueError(f"{FULL!r} is DySHARP itself (its speedup over itself is 1); name baselines: "
                             f"{', '.join(s for s in SCHEMES if s != FULL)}")
    return baselines


def _speedups(rows: list[dict]) -> dict:
    return {r["scheme"]: r["dysharp_speedup"] for r in rows}


def _resolve(model, system, cal):
    m = model if isinstance(model, ModelConfig) else load_model(model)
    s = system if isinstance(system, SystemConfig) else load_system(system)
    return m, s, (cal if cal is not None else load_calibration())


# ---------------------------------------------------------------------------------------------------------
# Tornado

def tornado(model="deepseek-v3", system="gh200-nvl32", params: Params = Params(), cal: Calibration | None = None,
            assumptions=ASSUMPTIONS, baselines=TORNADO_BASELINES, jobs: int = 1, scheduler: str | None = None,
            cache: bool = False) -> dict:
    """DySHARP's speedup over each baseline with each assumption at the low and the high end of its range,
    the others at the base point. Returns ``{"base": {baseline: speedup}, "rows": [...], "point": {...}}``;
    a row per (baseline, assumption) with ``speedup_low``, ``speedup_base``, ``speedup_high``, ``swing``
    (high - low, signed) and the assumption's range and source."""
    baselines = _check_baselines(baselines)
    m, s, cal = _resolve(model, system, cal)
    params.validate()
    if params.routing.startswith("trace:"):
        raise ValueError("the tornado varies the routing skew, which a replayed trace (--routing trace:...) "
                         "does not have; use uniform, zipf:S, group, group-zipf:S or auto")
    keys = [a.key for a in assumptions]
    if len(set(keys)) != len(keys):
        raise ValueError(f"assumption keys must be distinct, got {keys}")
    assumptions = [a for a in assumptions if a.applies(params.mode)]
    points = [(s, params, cal, "base")]
    for a in assumptions:
        for end, v in (("low", a.low), ("high", a.high)):
            sx, px, cx = a.apply(m, s, params, cal, v)
            points.append((sx, px, cx, f"{a.key}={v}"))
    res = _run_points(m.name, points, jobs, scheduler, cache, "tornado")
    base = _speedups(res[0])
    r0 = next(r for r in res[0] if r["scheme"] == FULL)
    rows = []
    for i, a in enumerate(assumptions):
        lo, hi = _speedups(res[1 + 2 * i]), _speedups(res[2 + 2 * i])
        for b in baselines:
            rows.append({"baseline": b, "assumption": a.key, "label": a.label, "target": a.target,
                         "low": a.low, "base_value": a.base(m, s, params, cal), "high": a.high, "unit": a.unit,
                         "speedup_low": lo[b], "speedup_base": base[b], "speedup_high": hi[b],
                         "swing": hi[b] - lo[b], "source": a.source, "why": a.why})
    point = {"model": m.name, "system": s.name, "gpus": r0["gpus"], "mode": params.mode,
             "tokens_per_gpu": r0["tokens_per_gpu"], "routing": r0["routing"], "dtype": params.dtype,
             "tile": params.tile, "dysharp_us": r0["total_us"]}
    return {"base": {b: base[b] for b in baselines}, "rows": rows, "point": point, "baselines": baselines,
            "assumptions": [dataclasses.asdict(a) for a in assumptions]}


def _save_small(plt, fig, path) -> Path:
    """:func:`sweep.save_figure`, then the PNG reduced to a 64-colour palette (a third of the size, the same
    picture), so ``docs/img`` holds the build's file as it is."""
    from PIL import Image
    path = save_figure(plt, fig, path)
    Image.open(path).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, tuple):
        return ",".join(map(str, v))
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


def _order(rows: list[dict]) -> list[str]:
    """Assumption keys, largest swing (over any baseline) first."""
    swing = {}
    for r in rows:
        swing[r["assumption"]] = max(swing.get(r["assumption"], 0.0), abs(r["swing"]))
    return sorted(swing, key=lambda k: -swing[k])


def tornado_table(result: dict) -> str:
    """Markdown: one row per assumption (largest swing first), DySHARP's speedup over each baseline at the
    low / high end of the range; the first row is the base point."""
    from tabulate import tabulate
    bl = result["baselines"]
    by = {(r["assumption"], r["baseline"]): r for r in result["rows"]}
    table = [["base point", "", *(f"{result['base'][b]:.2f}" for b in bl), ""]]
    for k in _order(result["rows"]):
        r0 = by[(k, bl[0])]
        unit = f" {r0['unit']}" if r0["unit"] else ""
        table.append([r0["label"], f"{_fmt(r0['low'])} / {_fmt(r0['base_value'])} / {_fmt(r0['high'])}{unit}",
                      *(f"{by[(k, b)]['speedup_low']:.2f} / {by[(k, b)]['speedup_high']:.2f}" for b in bl),
                      r0["source"].split(" (")[0].split(";")[0]])
    return tabulate(table, headers=["assumption", "low / base / high", *(f"vs {SCHEMES[b].label.split(' (')[0]}"
                                                                        for b in bl), "source of the default"],
                    tablefmt="github", disable_numparse=True)


def plot_tornado(result: dict, path: Path) -> Path:
    """One panel per baseline: a horizontal bar per assumption from the base speedup to the speedup at the
    low (blue) and the high (orange) end of its range, largest swing on top; lines at 1.0x and the base."""
    plt = pyplot()
    bl = result["baselines"]
    n = len(bl)
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    n_a = len({r["assumption"] for r in result["rows"]})
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.4 * ncols, 0.32 * n_a * nrows + 1.2 * nrows + 0.6),
                             squeeze=False)
    for ax, b in zip(axes.flat, bl):
        rs = sorted((r for r in result["rows"] if r["baseline"] == b), key=lambda r: abs(r["swing"]))
        base = result["base"][b]
        for i, r in enumerate(rs):
            ax.barh(i, r["speedup_low"] - base, left=base, color="tab:blue", height=0.7)
            ax.barh(i, r["speedup_high"] - base, left=base, color="tab:orange", height=0.7, alpha=0.85)
        ax.set_yticks(range(len(rs)))
        ax.set_yticklabels([f"{r['label']} ({_fmt(r['low'])} / {_fmt(r['high'])})" for r in rs], fontsize=7)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.axvline(base, color="gray", lw=0.8, ls="--")
        lo = min([1.0] + [min(r["speedup_low"], r["speedup_high"]) for r in rs])
        hi = max([1.0] + [max(r["speedup_low"], r["speedup_high"]) for r in rs])
        pad = 0.05 * max(hi - lo, 0.05)
        ax.set_xlim(lo - pad, hi + pad)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title(f"vs {SCHEMES[b].label}: base {base:.2f}x", fontsize=9)
        ax.set_xlabel("DySHARP speedup (x)", fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    from matplotlib.patches import Patch
    axes.flat[0].legend(handles=[Patch(color="tab:blue", label="low end"), Patch(color="tab:orange", label="high end")],
                        fontsize=7, loc="lower right")
    p = result["point"]
    fig.suptitle(f"What the speedup hangs on: {p['model']} on {p['system']} ({p['gpus']} GPUs), {p['mode']}, "
                 f"{p['tokens_per_gpu']} tokens/GPU, {p['routing']} routing", fontsize=10)
    return _save_small(plt, fig, path)


def run_tornado(out_dir="build/estimate", model="deepseek-v3", system="gh200-nvl32", params: Params = Params(),
                cal=None, baselines=TORNADO_BASELINES, quick: bool = False, jobs: int | None = None,
                scheduler: str | None = None, cache: bool = True) -> dict:
    """:func:`tornado`, written as ``tornado.csv``, ``tornado.json`` and ``tornado.png`` under ``out_dir``.
    ``quick``: the base point at :data:`QUICK_TOKENS` tokens per GPU (prefill/training) unless fewer."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = jobs or engine.DEFAULT_JOBS
    if quick and params.mode != "decode":
        params = dataclasses.replace(params, tokens_per_gpu=min(params.tokens, QUICK_TOKENS))
    t0 = time.time()
    res = tornado(model, system, params, cal, baselines=baselines, jobs=jobs, scheduler=scheduler, cache=cache)
    res["seconds"] = time.time() - t0
    res["paths"] = {"csv": write_csv(res["rows"], out / "tornado.csv", columns=()),
                    "json": _write_json(res, out / "tornado.json"),
                    "png": plot_tornado(res, out / "tornado.png")}
    return res


def _write_json(res: dict, path: Path) -> Path:
    keep = {k: v for k, v in res.items() if k != "paths"}
    path.write_text(json.dumps(keep, indent=1))
    return path


# ---------------------------------------------------------------------------------------------------------
# One-at-a-time sensitivity

def _grid_point(m: ModelConfig, params: Params, key: str, v) -> Params | None:
    if key == "gpus":
        return dataclasses.replace(params, gpus=v)
    if key == "tokens_per_gpu":
        return dataclasses.replace(params, tokens_per_gpu=v)
    if key == "decode_tokens":
        return dataclasses.replace(params, mode="decode", tokens_per_gpu=v)
    if key == "zipf":
        return dataclasses.replace(params, routing=skew_spec(m, v))
    if key == "zipf_ungrouped":      # the same skew without the group limit: only where the model has one
        return dataclasses.replace(params, routing=skew_spec(m, v, grouped=False)) if m.n_group else None
    if key == "tile":
        return dataclasses.replace(params, tile=v)
    if key == "dtype":
        return dataclasses.replace(params, dtype=v)
    raise ValueError(f"unknown sensitivity input {key!r}; valid: {', '.join(GRID_KEYS)}")


def sensitivity(model: str, system: str, params: Params = Params(), cal: Calibration | None = None,
                grid: dict | None = None, jobs: int = 1, scheduler: str | None = None,
                cache: bool = False) -> list[dict]:
    """One-at-a-time variation around (model, system, params): every scheme's row for each value of each
    input in ``grid`` (keys: :data:`GRID_KEYS`). Rows carry ``param`` and ``value``."""
    grid = SENSITIVITY if grid is None else grid
    m, s, cal = _resolve(model, system, cal)
    if any(k in grid for k in ("zipf", "zipf_ungrouped")) and params.routing.startswith("trace:"):
        raise ValueError("the sensitivity varies the routing skew, which a replayed trace does not have; "
                         "use uniform, zipf:S, group, group-zipf:S or auto")
    points, extras = [], []
    for key, values in grid.items():
        for v in values:
            p = _grid_point(m, params, key, v)
            if p is None:
                continue
            p.validate()
            points.append((s, p, cal, f"{key}={v}"))
            extras.append({"param": key, "value": v})
    res = _run_points(m.name, points, jobs, scheduler, cache, "sensitivity")
    return [dict(r, **x) for rows, x in zip(res, extras) for r in rows]


LABELS = {"gpus": "GPUs (expert parallel)", "tokens_per_gpu": "tokens per GPU", "decode_tokens":
          "tokens per GPU (decode)", "zipf": "Zipf exponent", "zipf_ungrouped": "Zipf exponent",
          "tile": "tile (tokens)", "dtype": "dispatch dtype"}
# Figures of --sensitivity: name -> the grid inputs on its panels (zipf and zipf_ungrouped share one).
FIGURES = {"tile": [["tile"]], "gpus": [["gpus"]], "tokens": [["tokens_per_gpu"], ["decode_tokens"]],
           "skew": [["zipf", "zipf_ungrouped"]], "dtype": [["dtype"]]}


def _panel(plt, ax, rows, keys, baselines):
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    sel = [r for r in rows if r["param"] in keys]
    if not sel:
        ax.axis("off")
        return
    categorical = any(isinstance(r["value"], str) for r in sel)
    if categorical:
        cats = list(dict.fromkeys(r["value"] for r in sel))
        width = 0.8 / len(baselines)
        for i, b in enumerate(baselines):
            ys = [next((r["dysharp_speedup"] for r in sel if r["value"] == c and r["scheme"] == b), 0) for c in cats]
            ax.bar([x + (i - len(baselines) / 2 + 0.5) * width for x in range(len(cats))], ys, width,
                   color=colors[i % len(colors)], label=SCHEMES[b].label)
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels(cats)
        low = min(r["dysharp_speedup"] for r in sel if r["scheme"] in baselines)
        ax.set_ylim(bottom=min(0.9, 0.9 * low))        # the differences, not the bars' common base
    else:
        for i, b in enumerate(baselines):
            for j, k in enumerate(keys):
                pts = sorted((r["value"], r["dysharp_speedup"]) for r in sel if r["param"] == k and r["scheme"] == b)
                if pts:
                    ax.plot([a for a, _ in pts], [s for _, s in pts], marker="o", ms=3, color=colors[i % len(colors)],
                            ls="-" if j == 0 else "--", label=SCHEMES[b].label if j == 0 else None)
        if keys[0] in ("gpus", "tokens_per_gpu", "decode_tokens", "tile"):
            ax.set_xscale("log", base=2)
            vals = sorted({r["value"] for r in sel})
            ax.set_xticks(vals)
            ax.set_xticklabels([f"{v:g}" for v in vals], fontsize=7)
            ax.minorticks_off()
    ax.axhline(1.0, color="k", lw=0.8)
    r0 = sel[0]
    label = LABELS.get(keys[0], keys[0])
    if keys[0] == "tokens_per_gpu":
        label = f"tokens per GPU ({r0['mode']})"
    if keys[0] == "gpus":
        own = load_system(r0["system"]).gpus
        if any(r["value"] > own for r in sel):
            ax.axvline(own, color="gray", lw=0.8, ls=":")
            label += f"; > {own}: {r0['system']}'s GPUs and links, larger domain"
    if "zipf_ungrouped" in keys and any(r["param"] == "zipf_ungrouped" for r in sel):
        label += " (solid: group-limited, dashed: no group limit)"
    ax.set_xlabel(label, fontsize=8)
    ax.set_ylabel("DySHARP speedup (x)", fontsize=8)
    ax.tick_params(labelsize=7)


def plot_sensitivity(rows: list[dict], path: Path, baselines=("deepep", "comet", "ccfuser", "dualpipe"),
                     panels: list | None = None, title: str | None = None) -> Path:
    """DySHARP's speedup over each baseline against each varied input, one panel per input (``panels``:
    lists of grid keys sharing a panel; default one per input present in ``rows``); ``title`` names the
    base point."""
    plt = pyplot()
    if panels is None:
        present = list(dict.fromkeys(r["param"] for r in rows))
        panels = [[k] for k in present if k != "zipf_ungrouped"]
        if "zipf_ungrouped" in present:
            z = next((p for p in panels if p == ["zipf"]), None)
            if z is not None:
                z.append("zipf_ungrouped")
            else:
                panels.append(["zipf_ungrouped"])
    n = len(panels)
    ncols = 3 if n in (5, 6) else min(4, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.4 * nrows), squeeze=False)
    for ax, keys in zip(axes.flat, panels):
        _panel(plt, ax, rows, keys, baselines)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    r0 = rows[0] if rows else {}
    fig.suptitle(title or f"sensitivity: {r0.get('model', '')} on {r0.get('system', '')}", fontsize=10)
    return _save_small(plt, fig, path)


def run_sensitivity(out_dir="build/estimate", model="deepseek-v3", system="gh200-nvl32", params: Params = Params(),
                    cal=None, baselines=TORNADO_BASELINES, quick: bool = False, grid: dict | None = None,
                    jobs: int | None = None, scheduler: str | None = None, cache: bool = True) -> dict:
    """:func:`sensitivity` over :data:`FIGURES_GRID` (``quick``: :data:`QUICK_FIGURES_GRID` around
    :data:`QUICK_TOKENS` tokens per GPU), written as ``sensitivity_all.csv``, one PNG per figure
    (``sensitivity_{tile,gpus,tokens,skew,dtype}.png``) and all panels in ``sensitivity_all.png``."""
    baselines = _check_baselines(baselines)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = jobs or engine.DEFAULT_JOBS
    grid = grid or (QUICK_FIGURES_GRID if quick else FIGURES_GRID)
    if quick and params.mode != "decode":
        params = dataclasses.replace(params, tokens_per_gpu=min(params.tokens, QUICK_TOKENS))
    t0 = time.time()
    rows = sensitivity(model, system, params, cal, grid, jobs, scheduler, cache)
    secs = time.time() - t0
    paths = {"csv": write_csv(rows, out / "sensitivity_all.csv")}
    m, s = (model if isinstance(model, ModelConfig) else load_model(model)), \
        (system if isinstance(system, SystemConfig) else load_system(system))
    title = (f"sensitivity around {m.name} on {s.name} ({params.gpus or s.gpus} GPUs), {params.mode}, "
             f"{params.tokens} tokens/GPU, routing {params.routing}, {params.dtype}, tile {params.tile}")
    for name, panels in FIGURES.items():
        keys = {k for p in panels for k in p}
        sel = [r for r in rows if r["param"] in keys]
        if sel:
            paths[name] = plot_sensitivity(sel, out / f"sensitivity_{name}.png", baselines,
                                           [p for p in panels if any(r["param"] in p for r in sel)], title)
    paths["all"] = plot_sensitivity(rows, out / "sensitivity_all.png", baselines, title=title)
    return {"rows": rows, "paths": paths, "seconds": secs, "jobs": jobs, "baselines": baselines}


def sensitivity_table(rows: list[dict], baselines) -> str:
    """Markdown: DySHARP's speedup over each baseline at every grid point."""
    from tabulate import tabulate
    keys = list(dict.fromkeys((r["param"], r["value"]) for r in rows))
    table = []
    for k, v in keys:
        sp = {r["scheme"]: r["dysharp_speedup"] for r in rows if r["param"] == k and r["value"] == v}
        table.append([k, _fmt(v), *(f"{sp[b]:.2f}" for b in baselines)])
    return tabulate(table, headers=["input", "value", *(f"vs {b}" for b in baselines)], tablefmt="github",
                    disable_numparse=True)


# ---------------------------------------------------------------------------------------------------------
# CLI

def run_cli(args, model: ModelConfig, system: SystemConfig, params: Params, cal: Calibration, schemes) -> int:
    """``dysharp estimate --tornado`` / ``--sensitivity`` (both may be given): files under ``--out``, the
    tornado's table on stdout. ``--schemes`` names the baselines (default :data:`TORNADO_BASELINES`)."""
    if getattr(args, "sweep", False):
        raise ValueError("--sweep cannot be combined with --tornado or --sensitivity (run them one at a time)")
    if params.routing.startswith("trace:"):
        raise ValueError("--tornado and --sensitivity vary the routing skew, which a replayed trace "
                         "(--routing trace:...) does not have; use uniform, zipf:S, group, group-zipf:S or auto")
    baselines = _check_baselines(schemes or TORNADO_BASELINES)
    where = dict(jobs=args.jobs, scheduler=args.scheduler, cache=not args.no_cache)
    if args.tornado:
        res = run_tornado(args.out, model, system, params, cal, baselines, quick=args.quick, **where)
        p = res["point"]
        print(f"### What DySHARP's speedup hangs on: {p['model']} on {p['system']} ({p['gpus']} GPUs), "
              f"{p['mode']}, {p['tokens_per_gpu']} tokens/GPU, routing {p['routing']}, {p['dtype']}, tile {p['tile']}")
        print()
        print("Each row: DySHARP's speedup over the baseline with that assumption at the low / high end of its "
              "range, all others at the base point.")
        print()
        print(tornado_table(res))
        print()
        print(f"tornado: {res['seconds']:.1f} s")
        for path in res["paths"].values():
            print(f"wrote {path}")
    if args.sensitivity:
        res = run_sensitivity(args.out, model, system, params, cal, baselines, quick=args.quick, **where)
        print()
        print(sensitivity_table(res["rows"], baselines))
        print()
        print(f"sensitivity: {res['seconds']:.1f} s")
        for path in res["paths"].values():
            print(f"wrote {path}")
    return 0
