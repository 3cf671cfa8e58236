"""``dysharp estimate --end-to-end``: whole-step time per scheme next to the MoE layer (``sim_models.end_to_end``).

Prints the table (scheme, MoE layer us, step ms, MoE share, MoE-layer and whole-step speedup of DySHARP)
and writes ``<out>/end_to_end_<model>_<system>_<mode>.json``. With ``--sweep``: the whole-step speedups of
the sweep's model x system grid in every mode of ``--modes`` (``sim_models.end_to_end_sweep``), printed per
mode and written to ``<out>/end_to_end_sweep.csv`` and ``<out>/end_to_end_speedup.png``.
"""

import dataclasses
import json
from pathlib import Path

from tabulate import tabulate

from sim_models.end_to_end import E2EParams, EndToEnd, end_to_end
from sim_models.end_to_end_sweep import E2E_MODES, check_names, markdown_tables, run_end_to_end_sweep as _sweep
from sim_models.sweep import QUICK_MODELS
from sim_models.estimator import FULL, SCHEMES


def e2e_params_from_args(args) -> E2EParams:
    if args.context is not None and args.context < 1:
        raise ValueError(f"--context must be >= 1 position per sequence, got {args.context}")
    return E2EParams(context=args.context, shared_overlap=not getattr(args, "shared_serial", False),
                     dualpipe_overlap=not getattr(args, "no_dualpipe_overlap", False))


def format_end_to_end(e: EndToEnd) -> str:
    est, p = e.estimate, e.estimate.params
    what = "cached positions per sequence" if p.mode == "decode" else "tokens per sequence"
    pt = e.parts
    lines = [f"### End to end: {est.model.name} on {est.system.name}, {p.mode}, {est.tokens_per_gpu} tokens/GPU, "
             f"context {e.context} ({what})", "",
             f"Per GPU, per layer: attention {pt.attention * 1e6:.1f} us (projections {pt.attention_proj * 1e6:.1f}, "
             f"core {pt.attention_core * 1e6:.1f}), shared experts {pt.shared * 1e6:.1f} us, router "
             f"{pt.router * 1e6:.1f} us; dense layer FFN {pt.dense_ffn * 1e6:.1f} us x {e.dense_layers}; "
             f"LM head {pt.head * 1e6:.1f} us; {e.moe_layers} MoE layers.", ""]
    rows = [[SCHEMES[n].label, f"{r.moe_layer * 1e6:.1f}", f"{r.step * 1e3:.2f}", f"{r.moe_share:.0%}",
             f"{r.layer_speedup:.2f}x", f"{r.step_speedup:.2f}x"] for n, r in e.schemes.items()]
    lines.append(tabulate(rows, headers=["scheme", "MoE layer us", "step ms", "MoE share",
                                         "DySHARP MoE-layer speedup", "DySHARP whole-step speedup"],
                          tablefmt="github", disable_numparse=True))
    lines += ["", "MoE share: MoE layers x routed MoE layer time / step. Shared experts "
              + ("overlap the routed path's exposed time" if e.params.shared_overlap else "run after the routed path")
              + "; DualPipe hides its exposed communication under attention and the shared expert"
              + ("" if e.params.dualpipe_overlap else " (off)") + ". Model: docs/estimator.md, \"End to end\"."]
    return "\n".join(lines)


def run_end_to_end(args, model, system, params, cal, schemes) -> int:
    e2e = e2e_params_from_args(args)
    e = end_to_end(model, system, params, e2e, cal, schemes)
    print(format_end_to_end(e))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"end_to_end_{model.name}_{e.estimate.system.name}_{params.mode}.json"
    path.write_text(json.dumps({
        "model": model.name, "system": e.estimate.system.name, "mode": params.mode,
        "params": dataclasses.asdict(params), "e2e_params": dataclasses.asdict(e2e), "context": e.context,
        "tokens_per_gpu": e.estimate.tokens_per_gpu, "gpus": e.estimate.gpus,
        "dense_layers": e.dense_layers, "moe_layers": e.moe_layers, "parts_s": dataclasses.asdict(e.parts),
        "schemes": {n: dataclasses.asdict(r) for n, r in e.schemes.items()}, "full": FULL,
        "calibration": {n: {"value": v, "source": s} for n, v, s in cal.status()}}, indent=1))
    print(f"\nwrote {path}")
    return 0


def run_end_to_end_sweep(args, cal, schemes) -> int:
    """``--sweep --end-to-end``: the grid of ``--models`` x ``--systems`` (default: the sweep's; ``--quick``:
    its three models) in every mode of ``--modes``."""
    from .estimate import params_from_args, sweep_grid
    models, systems = sweep_grid(args)
    if models is None and args.quick:
        models = list(QUICK_MODELS)
    modes = check_names("mode", args.modes, E2E_MODES) if args.modes is not None else list(E2E_MODES)
    res = _sweep(args.out, models, systems, modes, params_from_args(args), e2e_params_from_args(args), cal, schemes,
                 jobs=args.jobs, scheduler=args.scheduler, cache=not args.no_cache)
    print(markdown_tables(res["rows"]))
    print()
    where = f"Dask scheduler {res['scheduler']}" if res["scheduler"] else f"{res['jobs']} processes"
    n = len({(r["model"], r["system"], r["mode"]) for r in res["rows"]})
    print(f"whole-step sweep: {n} steps in {res['seconds']:.1f} s ({where}"
          f"{'' if args.no_cache else ', cached results reused'})")
    for path in res["paths"].values():
        print(f"wrote {path}")
    return 0
