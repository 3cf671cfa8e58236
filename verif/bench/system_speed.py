"""``dysharp bench system_speed``: simulated cycles per second of one whole MoE layer on the system top
(``dysharp system``), the cocotb testbench and the compiled harness side by side in one run, on the same
layer and scheme.

Per harness: the layer's cycles, the cycles the quiet-cycle skip left out (``skipped``; of those, not
simulated at all: ``dropped``), and the speed counted on the **stepped** cycles only, the cycles in which
every agent drove and sampled the DUT (``cycles - skipped``: a skipped quiet stretch does not count as
speed): ``stepped_per_s = (cycles - skipped) / wall_s``, where ``wall_s`` is the run's own time (the
layer's set-up, the cycle loop and the end-of-run checks; the build and the simulator's start excluded).
The compiled harness also reports the seconds inside the Verilated model's ``eval()`` (``eval_s``), in
its Python callbacks (``python_s``), and the process's CPU seconds over ``wall_s``'s span (``cpu_s``, every
thread's), with the speed per CPU second ``stepped_per_cpu_s = (cycles - skipped) / cpu_s``. ``fast`` is
the default, profile-guided build (:func:`verif.bench.system.fast_build`: the RTL's conditions kept,
every block inlined up to 32 GPUs); ``fast-noprofile`` is the same build without the profile,
``fast-dfg-all`` with every rewrite of Verilator's DFG pass, ``fast-apart`` with the repeated blocks
kept apart (``fast-apart-dfg-all``: and every rewrite), ``fast-inline`` with every block inlined at any
size, ``fast-threads2`` the default build on 2 threads (Verilator's ``--threads 2``), and ``fast-fall``
is built without the profile with its inputs latched on the falling edge
(:func:`verif.harness.fastsim.system.build_system` ``inputs_at_rise=False``), for measuring them beside
the default build. The runs' figures must be equal (``equal``: every figure of the
JSON but the wall-clock ones). Writes ``build/bench/system_speed.json``.
"""

import argparse
import json
import time
from pathlib import Path

from verif.bench.common import table
from verif.bench.system import FAST_HARNESSES

HARNESSES = ("cocotb", *FAST_HARNESSES)
WALL = ("wall_s", "cycles_per_s", "run_wall_s", "harness", "loop_s", "python_s", "eval_s", "cpu_s")


def add_arguments(p) -> None:
    p.add_argument("--model", default="deepseek-v3", help="model configuration (default: deepseek-v3)")
    p.add_argument("--gpus", type=int, default=4, help="GPUs (default: 4)")
    p.add_argument("--tokens", type=int, default=16, help="tokens per GPU (default: 16)")
    p.add_argument("--hidden", type=int, default=128, help="scaled hidden size (default: 128)")
    p.add_argument("--gemm", default="64,32", help="GEMM-1/GEMM-2 cycles per tile, or 'model' for the derived "
                                                   "ones (default: 64,32, the smallest layer's)")
    p.add_argument("--seed", type=int, default=1, help="routing and data seed (default: 1)")
    p.add_argument("--scheme", default="dysharp", help="one scheme (default: dysharp)")
    p.add_argument("--harnesses", default="cocotb,fast",
                   help="comma-separated harnesses to time (default: cocotb,fast; fast-noprofile is the compiled "
                        "harness without its profile, fast-dfg-all with every DFG rewrite, fast-apart with its "
                        "blocks kept apart, fast-apart-dfg-all both, fast-inline every block inlined at any size, "
                        "fast-threads2 the default build on 2 threads, fast-fall without the profile and with its "
                        "inputs latched on the falling edge); "
                        f"valid: {', '.join(HARNESSES)}")
    p.add_argument("--out", default="build/bench", help="output folder (default: build/bench)")


def figures(fig: dict) -> dict:
    """The run's figures without the wall-clock ones (as the JSON file has them)."""
    fig = json.loads(json.dumps(fig))
    return {**fig, "sim": {k: v for k, v in fig["sim"].items() if k not in WALL}}


def run(args) -> int:
    from verif.bench import system as bs
    from verif.models.moe_layer import SCHEMES

    point = bs.check_point(args.model, args.gpus, args.tokens, args.hidden, args.seed,
                           None if args.gemm == "model" else args.gemm)
    if args.scheme not in SCHEMES:
        raise ValueError(f"--scheme {args.scheme!r}: valid: {', '.join(SCHEMES)}")
    harnesses = [h.strip() for h in args.harnesses.split(",") if h.strip()]
    bad = [h for h in harnesses if h not in HARNESSES]
    if bad or not harnesses:
        raise ValueError(f"--harnesses {args.harnesses!r}: valid: {', '.join(HARNESSES)}")
    L = point.layer()
    L.check_scheme(args.scheme)
    from sim_models.calibration import load_calibration
    from sim_models.rtl_scale import predict_cycles
    pred = predict_cycles(L, [args.scheme], calibration=load_calibration(["build/bench"], exclude=("system",)))
    timeout = int(4 * pred[args.scheme]["total"]) + 20_000
    bin_cycles = max(16, int(pred[args.scheme]["total"] / 200))
    out = Path(args.out)
    runs_dir = out / "system_speed"
    runs_dir.mkdir(parents=True, exist_ok=True)
    gemm = "" if args.gemm == "model" else f" --gemm {args.gemm}"
    report = {"command": f"dysharp bench system_speed --model {point.model} --gpus {point.gpus} --tokens "
                         f"{point.tokens} --hidden {point.hidden}{gemm} --seed {point.seed} --scheme {args.scheme} "
                         f"--harnesses {','.join(harnesses)}",
              "point": {"model": point.model, "gpus": point.gpus, "tokens": point.tokens, "hidden": point.hidden,
                        "seed": point.seed, "gemm": point.gemm, "scheme": args.scheme},
              "runs": {}}
    figs = {}
    for h in harnesses:
        t0 = time.perf_counter()
        fast = None
        if h in bs.FAST_HARNESSES:
            fast = bs.fast_build(point, None, h, timeout, bin_cycles, args.scheme)
        else:
            from verif.harness.runner import sim_build
            sim_build("system", L.system_params(), sim="verilator")
        build_s = time.perf_counter() - t0
        print(f"{h}: built in {build_s:.0f} s; running {args.scheme} at G={point.gpus}, {point.tokens} tokens/GPU",
              flush=True)
        (runs_dir / h).mkdir(exist_ok=True)
        fig = bs.run_scheme(point, args.scheme, "verilator", runs_dir / h, timeout, bin_cycles, None, True, fast)
        if "failed" in fig:
            print(f"{h}: FAILED: {fig['failed']}")
            report["runs"][h] = {"failed": fig["failed"]}
            continue
        figs[h] = fig
        s = fig["sim"]
        stepped = s["cycles"] - s["skipped"]
        r = {"layer_cycles": fig["cycles"]["total"], "cycles": s["cycles"], "skipped": s["skipped"],
             "dropped": s["dropped"], "stepped": stepped, "wall_s": s["wall_s"], "run_wall_s": s["run_wall_s"],
             "build_s": build_s, "stepped_per_s": stepped / s["wall_s"]}
        for k in ("loop_s", "eval_s", "python_s", "cpu_s"):
            if k in s:
                r[k] = s[k]
        if "cpu_s" in s:
            r["stepped_per_cpu_s"] = stepped / s["cpu_s"]
        report["runs"][h] = r
    if len(figs) >= 2:
        first = next(iter(figs))
        report["equal"] = all(figures(figs[first]) == figures(f) for f in figs.values())
    if "cocotb" in figs and "fast" in figs:
        report["speedup"] = report["runs"]["fast"]["stepped_per_s"] / report["runs"]["cocotb"]["stepped_per_s"]
    rows = [[h, f"{r['layer_cycles']:,}", f"{r['stepped']:,}", f"{r['skipped']:,}", f"{r['wall_s']:.1f}",
             f"{r['stepped_per_s']:,.0f}",
             f"{r['stepped_per_cpu_s']:,.0f}" if "stepped_per_cpu_s" in r else "-",
             f"{r['eval_s']:.1f}" if "eval_s" in r else "-",
             f"{r['python_s']:.1f}" if "python_s" in r else "-"]
            for h, r in report["runs"].items() if "failed" not in r]
    print(table(rows, ["harness", "layer cycles", "stepped cycles", "skipped", "wall s", "stepped cycles/s",
                       "per CPU s", "in eval() s", "in Python s"]))
    if "equal" in report:
        print(f"figures equal: {report['equal']}" +
              (f"; fast over cocotb: {report['speedup']:.1f}x" if "speedup" in report else ""))
    path = out / "system_speed.json"
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path}")
    return 0 if all("failed" not in r for r in report["runs"].values()) and report.get("equal", True) else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    add_arguments(p)
    raise SystemExit(run(p.parse_args()))
