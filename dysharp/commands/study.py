"""``dysharp study``: the main study, end to end, with its report.

The study is a list of steps, registered one line each in ``STEPS``. Each step is a function
``step(args, out_dir) -> str`` that does its work (generating Verilog, running benchmarks, ...) and
returns a Markdown section for the report. ``args.quick`` / ``args.full`` select the scope
(:mod:`infra.scope`); a step reads them and sizes its sweeps. The report goes to ``<out>/report.md`` with
every figure's source (JSON/CSV/PNG) beside it; it opens with a one-screen summary
(:mod:`dysharp.report_summary`) and ends with the steps' wall times, also in ``<out>/timings.json``.

While a step runs, everything written to file descriptors 1 and 2 (the steps' own prints and the
cocotb, Verilator, Icarus and yosys subprocesses that inherit them) goes to ``build/logs/<step>.log``;
the terminal shows only the progress bars and one line per finished step.

Steps run two at a time by default (``--jobs``), each in a forked process, since one step alone leaves a
core idle for much of its time (Amaranth elaboration, yosys and cocotb are single-threaded). ``AFTER``
names the steps that read another step's output; they wait for it. Then the terminal shows the study's
bar only; ``--jobs 1`` runs the steps in turn in this process with each step's own bars.
"""

import contextlib
import importlib
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

from tabulate import tabulate
from tqdm import tqdm

from dysharp.report_summary import summary
from infra.scope import SCOPES, scope_of

# (name, "module:function", what it does) in execution order. Later steps may read what earlier steps wrote.
STEPS = [
    ("verilog", "dysharp.study_steps:verilog_step", "Verilog of every module's standard points"),
    ("lint", "dysharp.study_steps:lint_step", "verilator --lint-only -Wall on that Verilog"),
    ("switch", "dysharp.study_steps:switch_bench_step", "switch throughput and latency"),
    ("al_tlb", "verif.bench.al_tlb:study_step", "AL-TLB latency, miss penalty, hit rate, CAM cells"),
    ("reduction", "verif.bench.reduction:study_step", "in-switch reduction: ALU, buffer, throughput"),
    ("dysharp_switch", "verif.bench.dysharp_switch:study", "integrated DySHARP switch: dispatch, combine, fused"),
    ("gpu_side", "verif.bench.token_tracker:study_step", "GPU side: tile table, request generator"),
    ("system", "verif.bench.system:study", "a whole MoE layer in RTL: every scheme, plot, estimator"),
    ("area_power", "dysharp.study_steps:area_power_step", "area and power (yosys, Nangate45, CACTI)"),
    # Last: the estimator reads the calibration figures the RTL steps wrote.
    ("estimate", "sim_models.study_step:estimate_step", "end-to-end MoE layer-time estimate"),
]

# Steps that read what others write: lint reads the Verilog step's files, the estimator the calibration
# figures of the benches that write them (sim_models/calibration.py's FIGURES; not the integrated switch's
# bench, not the area and power). Every other step reads nothing another writes, so two can run at once
# (``--jobs``).
AFTER = {"lint": ("verilog",), "estimate": ("switch", "al_tlb", "reduction", "gpu_side", "system")}

# Rough wall time of each step in seconds (default scope, fresh clone, 2 cores, two steps at a time), for
# the order in which ready steps start when no earlier run of the scope left its own times: the longest
# chain of dependent steps first, so that the study does not end on a long step started late. The steps
# that this default scope did not change keep the last default study's times; dysharp_switch, system and
# area_power their CPU-seconds measured on empty caches, rounded up (docs/performance.md).
EXPECTED_S = {"verilog": 116, "lint": 87, "switch": 39, "al_tlb": 35, "reduction": 43, "dysharp_switch": 125,
              "gpu_side": 24, "system": 410, "area_power": 1050, "estimate": 128}

LOG_DIR = Path("build/logs")


def add_arguments(p) -> None:
    p.add_argument("--out", default="build/report", help="report folder (default: build/report)")
    p.add_argument("--only", action="append", default=None, metavar="STEP",
                   help=f"run only this step (repeatable): {', '.join(n for n, _, _ in STEPS)}")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--quick", action="store_true", help="smoke run of every step with small sweeps "
                                                            "(a few minutes)")
    scope.add_argument("--full", action="store_true", help="the exhaustive grids: every benchmark point and "
                                                           "the area grids (hours)")
    p.add_argument("--jobs", type=int, default=2, metavar="N",
                   help="steps run at once, each in its own process (default: 2; 1 runs them in turn and shows "
                        "each step's own progress bars). Steps that read another's output wait for it")


@contextlib.contextmanager
def tool_log(path: Path, terminal):
    """Send file descriptors 1 and 2 and ``sys.stdout`` to ``path`` (subprocesses inherit the descriptors)
    while ``sys.stderr`` -- where tqdm draws its bars -- is ``terminal``. Restores everything on exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    old_stdout, old_stderr = sys.stdout, sys.stderr
    with open(path, "w", buffering=1) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout, sys.stderr = log, terminal   # sys.stdout need not be fd 1 (pytest, notebooks)
        try:
            yield
        finally:
            log.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sys.stdout, sys.stderr = old_stdout, old_stderr


def _tail(path: Path, n: int = 12) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in lines[-n:])


def run(args) -> int:
    names = [n for n, _, _ in STEPS]
    for n in args.only or []:
        if n not in names:
            raise ValueError(f"unknown study step {n!r}; valid: {', '.join(names)}")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    scope = scope_of(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = [s for s in STEPS if not args.only or s[0] in args.only]
    # The bars and the step lines go to the terminal even while fds 1/2 point at a step's log.
    sys.stderr.flush()
    terminal = os.fdopen(os.dup(2), "w", buffering=1)
    t_all = time.time()
    tqdm.write(f"[study] {scope} scope ({SCOPES[scope]}): {len(steps)} step(s), {min(args.jobs, len(steps))} at "
               f"a time; tool logs in {LOG_DIR}/", file=terminal)
    # The bar advances by each step's time in the last run of this scope (so its ETA is that run's; a step
    # it did not run counts as its median step), or by one per step when there is none.
    last = _last_times(out / "timings.json", scope)
    typical = sorted(last.values())[len(last) // 2] if last else 1.0
    weights = {n: last.get(n, typical) for n, _, _ in steps}
    bar = tqdm(total=sum(weights.values()), desc="study", file=terminal, dynamic_ncols=True,
               bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}] {postfix}")
    results = {}

    def finished(name, what, section, status, dt, cpu=None):
        log = LOG_DIR / f"{name}.log"
        results[name] = ({"step": name, "what": what, "seconds": round(dt, 1),
                          "cpu_seconds": None if cpu is None else round(cpu, 1), "status": status,
                          "log": str(log)}, section)
        bar.update(weights[name])
        if status == "ok":
            tqdm.write(f"[study] {name}: done in {_hms(dt)} (log: {log})", file=terminal)
        else:
            tqdm.write(f"[study] {name}: FAILED after {_hms(dt)}: {status[8:]}\n"
                       f"[study] full log: {log}; its last lines:\n{_tail(log)}", file=terminal)

    try:
        if args.jobs == 1:
            for i, (name, target, what) in enumerate(steps):
                bar.set_postfix_str(f"step {i + 1}/{len(steps)}: {name}")
                finished(name, what, *_run_step(name, target, args, out, terminal))
        else:
            cost = {n: last.get(n, EXPECTED_S.get(n, typical)) for n, _, _ in steps}
            _run_concurrently(steps, args, out, bar, finished, cost)
    finally:
        bar.close()
    timings = [results[n][0] for n, _, _ in steps]
    sections = [results[n][1] for n, _, _ in steps]
    failed = [t["step"] for t in timings if t["status"] != "ok"]
    total = time.time() - t_all
    cpu_all = [t["cpu_seconds"] for t in timings]
    cpu_total = None if None in cpu_all else sum(cpu_all)
    cmd = "dysharp study" + {"quick": " --quick", "full": " --full"}.get(scope, "") + \
        "".join(f" --only {n}" for n in args.only or []) + (f" --jobs {args.jobs}" if args.jobs != 2 else "")
    (out / "timings.json").write_text(json.dumps({
        "command": cmd, "scope": scope, "steps": timings, "total_seconds": round(total, 1),
        "cpu_seconds": None if cpu_total is None else round(cpu_total, 1),
        "cpus": os.cpu_count(), "jobs": args.jobs}, indent=1) + "\n")
    table = tabulate([[t["step"], t["what"], _hms(t["seconds"]), _hms(t["cpu_seconds"]), t["status"]]
                      for t in timings] +
                     [["total", "", _hms(total), _hms(cpu_total), "ok" if not failed else f"{len(failed)} failed"]],
                     headers=["step", "what", "wall time", "CPU time", "status"], tablefmt="github",
                     disable_numparse=True)
    report = out / "report.md"
    report.write_text("# dysharp study report\n\n"
                      f"Generated by `{cmd}` ({scope} scope: {SCOPES[scope]}) in {_hms(total)} on "
                      f"{os.cpu_count()} CPU(s), {args.jobs} step(s) at a time (each step's wall time below "
                      "is its own; steps overlap; its CPU time is user + system time of the step's process "
                      "and every process it waited for). Tables marked *`--full` only* are left out of the "
                      "default study; `dysharp study --full` or the named `dysharp bench` command produces "
                      "them.\n\n" + summary(out, timings) + "\n\n" + "\n\n".join(sections) +
                      "\n\n## Step wall and CPU times\n\n" + table + "\n")
    tqdm.write(f"[study] total {_hms(total)}; report: {report}; timings: {out / 'timings.json'}", file=terminal)
    if failed:
        tqdm.write(f"[study] {len(failed)} step(s) failed: {', '.join(failed)} (logs in {LOG_DIR}/)",
                   file=terminal)
    terminal.close()
    return 1 if failed else 0


def _cpu_seconds() -> float:
    """User + system CPU time of this process and of every child process it has waited for."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _run_step(name, target, args, out, terminal) -> tuple[str, str, float, float]:
    """Run one step with its output in its log: (Markdown section, "ok" or "failed: ...", wall seconds,
    CPU seconds of the step and the processes it ran)."""
    log = LOG_DIR / f"{name}.log"
    mod, _, fn = target.partition(":")
    t0 = time.time()
    c0 = _cpu_seconds()
    status = "ok"
    with tool_log(log, terminal):
        try:
            section = getattr(importlib.import_module(mod), fn)(args, out)
        except KeyboardInterrupt:
            raise
        except Exception as e:   # the step failed: say so, keep its traceback in the log, go on
            traceback.print_exc(file=sys.stdout)   # fd 1: the log
            status = f"failed: {type(e).__name__}: {e}"
            section = f"## {name}\n\nStep failed: `{type(e).__name__}: {e}` (log: `{log}`)."
    return section, status, time.time() - t0, _cpu_seconds() - c0


def _step_child(name, target, args, out, conn) -> None:
    """A forked step process: the step's own progress bars go to /dev/null (the parent draws the study's
    bar), its result goes back through ``conn``."""
    with open(os.devnull, "w") as quiet:
        try:
            conn.send(_run_step(name, target, args, out, quiet))
        except KeyboardInterrupt:
            pass
    conn.close()


def _depends(names) -> dict[str, list[str]]:
    """{step: the selected steps it waits for} (:data:`AFTER`; ``*`` is every other step)."""
    out = {}
    for n in names:
        deps = AFTER.get(n, ())
        out[n] = [d for d in names if d != n] if "*" in deps else [d for d in deps if d in names]
    return out


def start_order(names, cost: dict) -> list[str]:
    """``names`` by priority: a step's cost plus its costliest chain of dependent steps, highest first
    (list scheduling on the critical path); ties keep ``names`` order."""
    deps = _depends(names)
    memo = {}

    def chain(n):
        if n not in memo:
            memo[n] = cost[n] + max((chain(m) for m in names if n in deps[m]), default=0.0)
        return memo[n]
    return sorted(names, key=lambda n: -chain(n))


def _run_concurrently(steps, args, out, bar, finished, cost: dict) -> None:
    """Up to ``args.jobs`` steps at once, each in a forked process, started in :func:`start_order` as their
    ``AFTER`` dependencies (among the selected steps) finish. A step process that dies without a result
    counts as failed; Ctrl-C stops them all."""
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("fork")
    names = [n for n, _, _ in steps]
    deps = _depends(names)
    by_name = {s[0]: s for s in steps}
    pending = [by_name[n] for n in start_order(names, cost)]
    running = {}            # result connection -> (name, what, process, start time)
    done = set()

    def ready(name):
        return all(d in done for d in deps[name])

    try:
        while pending or running:
            for step in [s for s in pending if ready(s[0])]:
                if len(running) >= args.jobs:
                    break
                name, target, what = step
                pending.remove(step)
                parent, child = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_step_child, args=(name, target, args, out, child), name=f"study-{name}")
                proc.start()
                child.close()
                running[parent] = (name, what, proc, time.time())
            bar.set_postfix_str(f"{len(done)}/{len(steps)} done, running: {', '.join(r[0] for r in running.values())}")
            # Wait on the connections, not the processes: a section larger than the pipe's buffer is sent
            # only as it is read, so the child cannot exit first. A child that dies without a result
            # makes its connection readable too (EOF).
            for conn in wait(list(running)):
                name, what, proc, t0 = running.pop(conn)
                try:
                    section, status, dt, cpu = conn.recv()
                except (EOFError, OSError):
                    proc.join()
                    status, dt = f"failed: the step's process exited with code {proc.exitcode}", time.time() - t0
                    cpu = None
                    section = f"## {name}\n\nStep failed: {status[8:]} (log: `{LOG_DIR / f'{name}.log'}`)."
                proc.join()
                conn.close()
                done.add(name)
                finished(name, what, section, status, dt, cpu)
    finally:
        for name, what, proc, t0 in running.values():
            proc.terminate()
            proc.join()


def _last_times(path: Path, scope: str) -> dict:
    """{step: seconds} of the last run of ``scope`` recorded in ``path`` (empty when there is none)."""
    try:
        doc = json.loads(path.read_text())
        if doc.get("scope") != scope:
            return {}
        return {t["step"]: max(float(t["seconds"]), 1.0) for t in doc["steps"] if t["status"] == "ok"}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _hms(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    s = int(round(seconds))
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{seconds:.1f} s"
