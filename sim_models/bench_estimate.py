"""``dysharp bench estimate``: wall time of the estimator.

Times the full sweep (every model x the three sweep systems x every scheme, at ``--tokens`` tokens per GPU,
``--jobs`` processes), then single estimates of one model for growing GPU counts and growing tokens per
GPU, so the cost's growth is visible. Prints the figures and writes JSON (default
``build/bench/estimate.json``). Wall-clock figures; they depend on the machine and its load.
"""

import json
import os
import resource
import time
from pathlib import Path

from .calibration import load_calibration
from .estimator import SCHEMES, Params, estimate
from .moe_config import load_model, model_names
from .sweep import SWEEP_SYSTEMS, main_sweep
from .system_config import load_system


def add_arguments(p) -> None:
    p.add_argument("--tokens", type=int, default=4096, help="tokens per GPU of the full sweep (default 4096)")
    p.add_argument("--jobs", type=int, default=None, help="processes for the full sweep (default: min(2, CPUs))")
    p.add_argument("--model", default="deepseek-v3", help="model of the growth runs (default deepseek-v3)")
    p.add_argument("--system", default="gh200-nvl32", help="system of the growth runs (default gh200-nvl32)")
    p.add_argument("--gpus", default="8,16,32,64", help="GPU counts of the growth runs (default 8,16,32,64)")
    p.add_argument("--token-counts", default="512,1024,2048,4096,8192",
                   help="tokens per GPU of the growth runs (default 512,1024,2048,4096,8192)")
    p.add_argument("--no-sweep", action="store_true", help="only the growth runs")
    p.add_argument("--out", default="build/bench/estimate.json")


def _ints(text, what):
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{what} expects comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise ValueError(f"--{what} needs positive integers, got {text!r}")
    return vals


def _cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def run(args) -> int:
    if args.tokens < 1:
        raise ValueError(f"--tokens must be >= 1, got {args.tokens}")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    gpus = _ints(args.gpus, "gpus")
    if min(gpus) < 2:
        raise ValueError("--gpus values must be >= 2")
    tokens = _ints(args.token_counts, "token-counts")
    model = load_model(args.model)
    system = load_system(args.system)
    jobs = args.jobs or min(2, os.cpu_count() or 1)
    cal = load_calibration()
    report = {"command": f"dysharp bench estimate --tokens {args.tokens} --jobs {jobs} --model {model.name} "
                         f"--system {system.name} --gpus {args.gpus} --token-counts {args.token_counts}",
              "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()[0], "schemes": list(SCHEMES)}
    if not args.no_sweep:
        models = model_names()
        print(f"[bench estimate] full sweep: {len(models)} models x {len(SWEEP_SYSTEMS)} systems x "
              f"{len(SCHEMES)} schemes at {args.tokens} tokens/GPU, {jobs} processes ...", flush=True)
        c0, t0 = _cpu(), time.time()
        rows = main_sweep(models, SWEEP_SYSTEMS, Params(tokens_per_gpu=args.tokens), cal, jobs)
        wall = time.time() - t0
        report["sweep"] = {"models": len(models), "systems": list(SWEEP_SYSTEMS), "schemes": len(SCHEMES),
                           "tokens_per_gpu": args.tokens, "jobs": jobs, "estimates": len(rows) // len(SCHEMES),
                           "wall_s": wall, "cpu_s": _cpu() - c0}
        print(f"  {wall:.1f} s wall, {report['sweep']['cpu_s']:.1f} s CPU")
    growth = []
    for kind, values in (("gpus", gpus), ("tokens_per_gpu", tokens)):
        for v in values:
            params = Params(gpus=v) if kind == "gpus" else Params(tokens_per_gpu=v)
            c0, t0 = _cpu(), time.time()
            e = estimate(model, system, params, cal)
            wall = time.time() - t0
            growth.append({"vary": kind, "value": v, "gpus": e.gpus, "tokens_per_gpu": e.tokens_per_gpu,
                           "wall_s": wall, "cpu_s": _cpu() - c0})
            print(f"  {model.name} on {system.name}: {e.gpus} GPUs x {e.tokens_per_gpu} tokens/GPU: "
                  f"{wall:.2f} s", flush=True)
    report["growth"] = growth
    report["load_avg_end"] = os.getloadavg()[0]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")
    return 0


def markdown(report: dict) -> str:
    lines = ["## Estimator run time", "", f"Command: `{report['command']}` ({report['cpus']} CPUs, load average "
             f"{report['load_avg_start']:.1f} at the start).", ""]
    s = report.get("sweep")
    if s:
        lines += [f"Full sweep: {s['models']} models x {len(s['systems'])} systems x {s['schemes']} schemes at "
                  f"{s['tokens_per_gpu']} tokens/GPU ({s['estimates']} estimates, {s['jobs']} processes): "
                  f"**{s['wall_s']:.1f} s wall**, {s['cpu_s']:.1f} s CPU.", ""]
    from tabulate import tabulate
    lines.append(tabulate([[g["vary"], str(g["gpus"]), str(g["tokens_per_gpu"]), f"{g['wall_s']:.2f}",
                            f"{g['cpu_s']:.2f}"] for g in report["growth"]],
                          headers=["varied", "GPUs", "tokens/GPU", "wall s", "CPU s"], tablefmt="github",
                          disable_numparse=True))
    return "\n".join(lines)


