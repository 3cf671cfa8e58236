"""``dysharp estimate --end-to-end``: whole-step time per scheme next to the MoE layer (``sim_models.end_to_end``).

Prints the table (scheme, MoE layer us, step ms, MoE share, MoE-layer and whole-step speedup of DySHARP)
and writes ``<out>/end_to_end_<model>_<system>_<mode>.json``. With ``--sweep``: the whole-step speedups of
the sweep's model x system grid in every mode of ``--modes`` (``sim_models.end_to_end_sweep``), printed per
mode and written to ``<out>/end_to_end_sweep.csv`` and ``<out>/end_to_end_speedup.png``.
"""

import dataclasses
import json
from pathlib import Path

from sim_models.end_to_end import E2EParams, end_to_end
from sim_models.end_to_end_sweep import E2E_MODES, check_names, markdown_tables, run_end_to_end_sweep as _sweep
from sim_models.estimator import FULL
from sim_models.sweep import QUICK_MODELS
from sim_models.tables import format_end_to_end


def e2e_params_from_args(args) -> E2EParams:
    if args.context is not None and args.context < 1:
        raise ValueError(f"--context must be >= 1 position per sequence, got {args.context}")
    return E2EParams(context=args.context, shared_overlap=not getattr(args, "shared_serial", False),
                     dualpipe_overlap=not getattr(args, "no_dualpipe_overlap", False))


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


def run_end_to_end_sweep(args, cal, schemes, params, grid) -> int:
    """``--sweep --end-to-end``: the grid of ``--models`` x ``--systems`` (``grid``, as ``dysharp estimate``
    parsed them: default the sweep's; ``--quick``: its three models) in every mode of ``--modes``, each mode
    replacing that of ``params``."""
    models, systems = grid
    if models is None and args.quick:
        models = list(QUICK_MODELS)
    modes = check_names("mode", args.modes, E2E_MODES) if args.modes is not None else list(E2E_MODES)
    res = _sweep(args.out, models, systems, modes, params, e2e_params_from_args(args), cal, schemes,
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
