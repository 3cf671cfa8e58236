"""``dysharp estimate``: MoE layer time of DySHARP against DeepEP, NVLS, Tutel, FasterMoE, COMET, CCFuser and
DualPipe (and the DySHARP ablations), from hardware and model parameters and the RTL's measured figures.

One point prints a table of the layer-time breakdown and the speedups; ``--sweep`` writes CSV and PNG plots
under ``--out`` (default ``build/estimate/``); ``--sweep --end-to-end`` the whole-step speedups of the same
model x system grid in training, prefill and decode. The model is described in ``docs/estimator.md``.
"""

import dataclasses
import json
import sys
from pathlib import Path

from sim_models.calibration import load_calibration
from sim_models.end_to_end_sweep import E2E_MODES
from sim_models.estimator import COMBINES, DEFAULT_TOKENS, MODES, SCHEMES, Params, estimate
from sim_models.moe_config import load_model, model_names
from sim_models.routing import TRACE_FORMAT
from sim_models.sweep import SWEEP_SYSTEMS
from sim_models.system_config import load_system, system_names
from sim_models.tables import format_calibration, format_estimate
from sim_models.traffic import DTYPES
from sim_models.workload import parse_placement

from .estimate_e2e import run_end_to_end, run_end_to_end_sweep


def add_arguments(p) -> None:
    p.add_argument("--model", default="deepseek-v3", help=f"model (default deepseek-v3); valid: {', '.join(model_names())}")
    p.add_argument("--system", default="gh200-nvl32",
                   help=f"system (default gh200-nvl32); valid: {', '.join(system_names())}")
    p.add_argument("--mode", default=None, help="prefill | decode | training (default prefill)")
    p.add_argument("--tokens", type=int, default=None,
                   help="tokens per GPU (default: " + ", ".join(f"{m} {t}" for m, t in DEFAULT_TOKENS.items()) + ")")
    p.add_argument("--routing", default="auto",
                   help="uniform | zipf:S | group | group-zipf:S | auto (group-limited when the model has a "
                        "routing limit) | trace:PATH.npy (default auto). " + TRACE_FORMAT.split('\n')[0])
    p.add_argument("--placement", default="contiguous", help="contiguous | random | redundant:N (default contiguous)")
    p.add_argument("--dtype", default="fp8", help="dispatch/GEMM dtype: bf16 | fp8 (default fp8; combine is bf16)")
    p.add_argument("--tile", type=int, default=128, help="tokens per GEMM tile (default 128)")
    p.add_argument("--gpus", type=int, default=None, help="override the system's GPU count")
    p.add_argument("--seed", type=int, default=0, help="routing seed (default 0)")
    p.add_argument("--schemes", default=None, help=f"comma-separated subset; valid: {', '.join(SCHEMES)}")
    p.add_argument("--gemm-efficiency", type=float, default=Params.gemm_efficiency)
    p.add_argument("--comm-sms", type=int, default=Params.comm_sms,
                   help="SMs a DeepEP-like kernel needs to keep the links busy (default 24)")
    p.add_argument("--per-tile-weights", action="store_true",
                   help="tile-level schemes re-read expert weights for every tile")
    p.add_argument("--weight-reuse", default=Params.weight_reuse, choices=("l2", "expert"),
                   help="tile-level schemes' weight traffic: expert (once per expert, default) or l2 (tiles in "
                        "ready order, each re-reads its expert's weights unless L2 still holds them)")
    p.add_argument("--combine", default=Params.combine,
                   help="DySHARP's combine: auto (the faster of pull and push per layer) | pull (ld_reduce) | "
                        "push (partials stored at the home) (default auto)")
    p.add_argument("--bench-dir", default="build/bench", help="RTL benchmark JSON folder (calibration)")
    p.add_argument("--sweep", action="store_true", help="run the model x system sweep and sensitivity plots")
    p.add_argument("--tornado", action="store_true",
                   help="DySHARP's speedup over each baseline (--schemes) as each assumed constant moves over its "
                        "plausible range: build/estimate/tornado.{png,csv,json}; --quick: 1024 tokens/GPU")
    p.add_argument("--sensitivity", action="store_true",
                   help="speedup against tile, GPU count, tokens/GPU, routing skew, dtype: build/estimate/"
                        "sensitivity_*.png, sensitivity_all.csv; --quick: fewer points; --jobs/--scheduler/--no-cache apply")
    p.add_argument("--quick", action="store_true", help="with --sweep: fewer models and sensitivity points")
    p.add_argument("--models", default=None, metavar="A,B,...",
                   help=f"with --sweep: the grid's models (default: all; --quick: 3); valid: "
                        f"{', '.join(model_names())}")
    p.add_argument("--systems", default=None, metavar="A,B,...",
                   help=f"with --sweep: the grid's systems (default: {','.join(SWEEP_SYSTEMS)}); valid: "
                        f"{', '.join(system_names())}")
    p.add_argument("--modes", default=None, metavar="A,B,...",
                   help=f"with --sweep --end-to-end: the modes (default: {','.join(E2E_MODES)}: training and "
                        "inference)")
    p.add_argument("--jobs", type=int, default=None, help="worker processes for --sweep (default: min(2, CPUs))")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="with --sweep: run the estimates on the Dask cluster at ADDRESS (e.g. tcp://host:8786; "
                        "default: $DYSHARP_SCHEDULER, else --jobs local processes)")
    p.add_argument("--no-cache", action="store_true",
                   help="with --sweep: recompute every estimate (default: reuse build/cache/estimate)")
    p.add_argument("--out", default="build/estimate", help="output folder (default build/estimate)")
    p.add_argument("--end-to-end", action="store_true",
                   help="whole-step time (attention, shared experts, dense layers, LM head) next to the MoE layer; "
                        "with --sweep: the whole-step speedups of the model x system grid in training, prefill and "
                        "decode: <out>/end_to_end_sweep.csv, end_to_end_speedup.png")
    p.add_argument("--context", type=int, default=None,
                   help="with --end-to-end: tokens per sequence (prefill/training, default tokens/GPU) or cached "
                        "positions per sequence (decode, default 4096)")
    p.add_argument("--shared-serial", action="store_true",
                   help="with --end-to-end: shared experts run after the routed path (default: in its exposed time)")
    p.add_argument("--no-dualpipe-overlap", action="store_true",
                   help="with --end-to-end: DualPipe does not hide communication under attention/shared experts")
    p.add_argument("--validate", action="store_true",
                   help="compare the estimator with the baselines' published figures (sim_models.validation): "
                        "print the table, write validation.{json,md} under --out")


def params_from_args(args, mode: str | None = None) -> Params:
    """The estimator's parameters from the command line; ``mode`` overrides ``--mode`` (default prefill)."""
    mode = mode or getattr(args, "mode", None) or "prefill"
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    if args.dtype not in DTYPES:
        raise ValueError(f"unknown dtype {args.dtype!r}; valid: {', '.join(DTYPES)}")
    if args.tokens is not None and args.tokens < 1:
        raise ValueError(f"--tokens must be >= 1 token per GPU, got {args.tokens}")
    if not 1 <= args.tile <= 4096:
        raise ValueError(f"--tile must be in 1..4096 tokens, got {args.tile}")
    if args.gpus is not None and args.gpus < 2:
        raise ValueError(f"--gpus must be >= 2, got {args.gpus}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0 (a NumPy seed), got {args.seed}")
    if not 0 < args.gemm_efficiency <= 1:
        raise ValueError(f"--gemm-efficiency must be in (0, 1], got {args.gemm_efficiency}")
    if args.comm_sms < 0:
        raise ValueError(f"--comm-sms must be >= 0, got {args.comm_sms}")
    combine = getattr(args, "combine", Params.combine)
    if combine not in COMBINES:
        raise ValueError(f"unknown --combine {combine!r}; valid: {', '.join(COMBINES)}")
    parse_placement(args.placement)
    return Params(mode=mode, tokens_per_gpu=args.tokens, routing=args.routing, placement=args.placement,
                  dtype=args.dtype, tile=args.tile, gemm_efficiency=args.gemm_efficiency, comm_sms=args.comm_sms,
                  per_tile_weights=args.per_tile_weights,
                  weight_reuse=getattr(args, "weight_reuse", Params.weight_reuse), gpus=args.gpus, seed=args.seed,
                  combine=combine)


def _schemes(text):
    if not text:
        return None
    names = [s.strip() for s in text.split(",") if s.strip()]
    for n in names:
        if n not in SCHEMES:
            raise ValueError(f"unknown scheme {n!r}; valid: {', '.join(SCHEMES)}")
    return names


def notices(model, system, gpus: int | None) -> list[str]:
    """What the estimate does with a GPU count it cannot take as given (printed before the result)."""
    out = []
    if gpus is None:
        return out
    if gpus > system.gpus:
        out.append(f"notice: --gpus {gpus} exceeds the {system.gpus} GPUs of {system.name}'s NVLink domain; the "
                   f"estimate assumes one switched domain of {min(gpus, model.routed_experts)} GPUs with "
                   f"{system.name}'s links and switch.")
    if gpus > model.routed_experts:
        out.append(f"notice: expert parallelism is capped at {model.name}'s {model.routed_experts} routed experts "
                   f"(one per GPU): the estimate covers one expert-parallel group of {model.routed_experts} GPUs; "
                   f"the other {gpus - model.routed_experts} GPUs would hold data-parallel replicas and are not modelled.")
    elif model.routed_experts % gpus:
        lo, hi = model.routed_experts // gpus, -(-model.routed_experts // gpus)
        n_hi = model.routed_experts % gpus
        out.append(f"notice: {model.routed_experts} experts do not split evenly over {gpus} GPUs: "
                   f"{n_hi} of them hold {hi} experts and {gpus - n_hi} hold {lo} (contiguous balanced blocks); "
                   f"the busiest GPU sets the GEMM time.")
    return out


# The run modes besides a single estimate; each is a separate run (--tornado and --sensitivity go together,
# and so do --sweep and --end-to-end: the whole-step sweep).
_RUNS = (("validate", "--validate"), ("end_to_end", "--end-to-end"), ("sweep", "--sweep"),
         ("tornado", "--tornado / --sensitivity"), ("sensitivity", "--tornado / --sensitivity"))
_E2E_ONLY = ("context", "shared_serial", "no_dualpipe_overlap")
_SWEEP_ONLY = ("models", "systems")


def _check_one_run(args) -> None:
    """One run per command, and every option given belongs to it (no option silently ignored)."""
    given = list(dict.fromkeys(flag for attr, flag in _RUNS if getattr(args, attr, False)))
    if "--end-to-end" in given and "--sweep" in given:       # together: the whole-step sweep, one run
        given = [f for f in given if f != "--end-to-end"]
        given[given.index("--sweep")] = "--sweep --end-to-end"
    if len(given) > 1:
        raise ValueError(f"{' and '.join(given)} are separate runs; give one of them")
    flag = lambda attr: "--" + attr.replace("_", "-")   # noqa: E731
    e2e, sweep = getattr(args, "end_to_end", False), getattr(args, "sweep", False)
    for attr in _E2E_ONLY:
        if getattr(args, attr, None) not in (None, False) and not e2e:
            raise ValueError(f"{flag(attr)} applies only with --end-to-end")
    for attr in _SWEEP_ONLY:
        if getattr(args, attr, None) is not None and not sweep:
            raise ValueError(f"{flag(attr)} applies only with --sweep (the grid of --sweep or --sweep --end-to-end); "
                             f"a single estimate takes --{attr[:-1]}")
    if getattr(args, "modes", None) is not None and not (sweep and e2e):
        raise ValueError(f"--modes applies only with --sweep --end-to-end (valid: {', '.join(E2E_MODES)}); "
                         "other runs take --mode")
    if sweep and e2e and getattr(args, "mode", None) is not None:
        raise ValueError(f"--sweep --end-to-end runs every mode of --modes (default {','.join(E2E_MODES)}); "
                         f"give --modes {args.mode} instead of --mode")


def run(args) -> int:
    _check_one_run(args)
    if getattr(args, "validate", False):
        return _validate(args)
    params = params_from_args(args)
    model = load_model(args.model)
    system = load_system(args.system)
    for line in notices(model, system, args.gpus):
        print(line)
    schemes = _schemes(args.schemes)
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    cal = load_calibration(args.bench_dir)
    if args.tornado or args.sensitivity:
        from sim_models.sensitivity import run_cli
        return run_cli(args, model, system, params, cal, schemes)
    if args.sweep and args.end_to_end:
        return run_end_to_end_sweep(args, cal, schemes, params, sweep_grid(args))
    if args.sweep:
        from sim_models.full_sweep import run_sweep
        from sim_models.sweep import markdown_table
        models, systems = sweep_grid(args)
        res = run_sweep(args.out, model=model.name, params=params, cal=cal, quick=args.quick, jobs=args.jobs,
                        scheduler=args.scheduler, cache=not args.no_cache, models=models, systems=systems)
        print(markdown_table(res["rows"]))
        print()
        where = f"Dask scheduler {res['scheduler']}" if res["scheduler"] else f"{res['jobs']} processes"
        print(f"main sweep {res['main_s']:.1f} s, sensitivity {res['sensitivity_s']:.1f} s ({where}"
              f"{'' if args.no_cache else ', cached estimates reused'})")
        for k, path in res["paths"].items():
            print(f"wrote {path}")
        print()
        print(format_calibration(cal))
        return 0
    if getattr(args, "end_to_end", False):
        return run_end_to_end(args, model, system, params, cal, schemes)
    e = estimate(model, system, params, cal, schemes)
    print(format_estimate(e))
    print()
    print(format_calibration(cal))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{model.name}_{e.system.name}_{params.mode}.json"
    path.write_text(json.dumps({
        "params": dataclasses.asdict(params), "model": model.name, "system": e.system.name, "gpus": e.gpus,
        "tokens_per_gpu": e.tokens_per_gpu, "routing": e.routing, "measured_d": e.measured_d,
        "results": {n: {k: v for k, v in dataclasses.asdict(r).items()} for n, r in e.results.items()},
        "speedup": {n: e.speedup(n) for n in e.results},
        "calibration": {n: {"value": v, "source": s} for n, v, s in cal.status()}}, indent=1))
    print(f"\nwrote {path}")
    return 0


def sweep_grid(args) -> tuple[list[str] | None, tuple[str, ...]]:
    """``--models`` and ``--systems`` of a sweep, checked (None: the sweep's default models)."""
    from sim_models.end_to_end_sweep import check_names
    models = check_names("model", args.models, model_names()) if args.models is not None else None
    systems = tuple(check_names("system", args.systems, system_names())) if args.systems is not None else SWEEP_SYSTEMS
    return models, systems


def _validate(args) -> int:
    """``--validate``: the published-figure validation table (docs/estimator_validation.md), its JSON and Markdown.
    Exit status 1 when a row is outside its tolerance without a stated reason, or inside it with one."""
    from sim_models.validation import failures, markdown, validate
    rows = validate(cal=load_calibration(args.bench_dir))
    table = markdown(rows)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "validation.json").write_text(json.dumps(rows, indent=1))
    (out / "validation.md").write_text(table + "\n")
    print(f"\nwrote {out / 'validation.json'} and {out / 'validation.md'}")
    bad = failures(rows)
    for r in bad:
        what = ("outside its tolerance and states no reason (name the missing mechanism in its Setup.reason)"
                if r["status"].startswith("OUTSIDE") else "within its tolerance but still states a reason (remove it)")
        print(f"validation: {r['key']}: error {r['error_pct']:+.1f}% against ±{r['tolerance_pct']:.0f}%: {what}",
              file=sys.stderr)
    if bad:
        print(f"validation failed: {len(bad)} of {len(rows)} rows", file=sys.stderr)
        return 1
    return 0
