"""``dysharp bench elab``: Verilog generation cost of a module against its size.

For each point (default: the switch at 4, 8, 16, 32 and 64 ports) a fresh Python process elaborates the
component and writes its Verilog exactly as ``dysharp verilog`` does (``amaranth.back.verilog.convert``),
timing the three phases separately: Amaranth elaboration (``Fragment.get``), Amaranth's netlist and RTLIL
(``rtlil.convert_fragment``: the combinational-cycle check lives here) and the builtin yosys
(``write_verilog``). Peak memory is the child's own maximum RSS (``RUSAGE_SELF``; the builtin yosys runs
inside it), so each point is measured alone. ``--src DIR`` imports ``hw/`` from another checkout (e.g. an older commit extracted with
``git archive``) to measure it in the same run.

``--emission flat,dedup`` measures each point with both emissions side by side (:data:`hw.registry.EMISSIONS`):
``flat`` as above, ``dedup`` with :func:`hw.emission.convert` (one module per distinct sub-block; its
Python time -- elaboration, netlist and RTLIL of the distinct blocks -- is one figure, ``python_s``, since
the blocks are converted one inside another). ``--lint`` then runs ``dysharp lint``'s Verilator check on
each file in a child process of its own and records its CPU seconds, peak RSS and verdict.

Writes ``build/bench/elab.json``: per point and emission, wall seconds per phase and in total, CPU seconds
(the figure to compare on a shared machine), Verilog MB, RTLIL MB and peak RSS in MB, plus the log-log
growth exponent of time and size between successive points of one emission.
"""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from infra.procs import run_bounded

__all__ = ["add_arguments", "run", "measure"]

DEFAULT_PORTS = (4, 8, 16, 32, 64)


def add_arguments(p) -> None:
    p.add_argument("--module", default="switch", help="registered module (default: switch)")
    p.add_argument("--param", default="ports", help="the size parameter swept (default: ports)")
    p.add_argument("--values", default=",".join(map(str, DEFAULT_PORTS)),
                   help="comma-separated values of --param (default: 4,8,16,32,64)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="other parameters of every point")
    p.add_argument("--src", default=None,
                   help="import hw/ from this folder instead of the working tree (to measure old code)")
    p.add_argument("--out", default="build/bench/elab.json", help="result JSON (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per point (default: %(default)s)")
    p.add_argument("--emission", default="flat",
                   help="comma-separated emissions measured at every point: flat, dedup (default: flat)")
    p.add_argument("--lint", nargs="?", const="all", default=None, metavar="VALUES",
                   help="also lint the generated files (verilator --lint-only -Wall) and record the cost: every "
                        "file, or only those at these comma-separated values of --param")
    p.add_argument("--baseline", action="append", default=[], metavar="JSON",
                   help="an earlier result of this bench (e.g. the flat emission of an older hw/ with --src; "
                        "repeatable): its points join this run's table, side-by-side comparison and JSON, marked "
                        "with their file. With --values '' the run only merges these results")
    p.add_argument("--lint-emission", default=None, metavar="EMISSIONS",
                   help="lint only the files of these comma-separated emissions (default: every one measured)")


def _worker(module: str, point: dict, out_v: str, emission: str = "flat") -> None:
    """Child process: generate the Verilog as ``DesignPoint.verilog`` does (the garbage collector paused),
    print phase timings as one JSON line."""
    from hw.emission import collector_paused

    with collector_paused():
        _measure(module, point, out_v, emission)


def _measure(module: str, point: dict, out_v: str, emission: str) -> None:
    import resource

    from amaranth.back import rtlil, verilog
    from amaranth.hdl import _ir

    from hw import registry

    def usage():
        ru = resource.getrusage(resource.RUSAGE_SELF)
        # CPU seconds: what the wall times would be on an idle core (the machine may be shared).
        return {"self_max_rss_mb": ru.ru_maxrss / 1024, "cpu_s": ru.ru_utime + ru.ru_stime}

    if emission == "dedup":
        from hw import emission as dedup
        t0 = time.perf_counter()
        component = registry.get(module).build(**point)
        t1 = time.perf_counter()
        text, st = dedup.convert(component, module)
        total = time.perf_counter() - t0
        Path(out_v).write_text(text)
        res = {"construct_s": t1 - t0, "python_s": st.python_s, "yosys_s": st.yosys_s, "total_s": total,
               "verilog_mb": len(text) / 1e6, "rtlil_mb": st.rtlil_mb, "modules": len(st.modules),
               "instances": sum(st.modules.values()), **usage()}
        print("ELAB " + json.dumps(res), flush=True)
        return

    times = {}
    real_get, real_frag, real_yosys = _ir.Fragment.get, rtlil.convert_fragment, verilog._convert_rtlil_text

    depth = {}

    def timed(key, fn):
        # Fragment.get recurses into submodules: time the outermost call only.
        def wrapper(*a, **kw):
            depth[key] = depth.get(key, 0) + 1
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                depth[key] -= 1
                if not depth[key]:
                    times[key] = times.get(key, 0.0) + time.perf_counter() - t
        return wrapper

    sizes = {}

    def frag(*a, **kw):
        text, names = real_frag(*a, **kw)
        sizes["rtlil_mb"] = len(text) / 1e6
        return text, names
    _ir.Fragment.get = staticmethod(timed("elaborate_s", real_get))
    rtlil.convert_fragment = timed("netlist_rtlil_s", frag)
    verilog._convert_rtlil_text = timed("yosys_s", real_yosys)
    t0 = time.perf_counter()
    component = registry.get(module).build(**point)
    t1 = time.perf_counter()
    text = verilog.convert(component, name=module, emit_src=False)
    total = time.perf_counter() - t0
    Path(out_v).write_text(text)
    res = {"construct_s": t1 - t0, **times, "total_s": total, "verilog_mb": len(text) / 1e6, **sizes,
           "python_s": times.get("elaborate_s", 0.0) + times.get("netlist_rtlil_s", 0.0), **usage()}
    print("ELAB " + json.dumps(res), flush=True)


def _lint_worker(path: str, top: str) -> None:
    """Child process: ``dysharp lint``'s check of one file; its verdict and Verilator's CPU and peak RSS."""
    import resource

    from verif.lint import lint_file

    t0 = time.perf_counter()
    waived, problems = lint_file(path, top)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)    # Verilator, the only child
    print("LINT " + json.dumps({"lint_wall_s": time.perf_counter() - t0, "lint_cpu_s": ru.ru_utime + ru.ru_stime,
                                "lint_peak_rss_mb": ru.ru_maxrss / 1024, "lint_clean": not problems,
                                "lint_problems": problems[:5]}), flush=True)


def _child(code: str, tag: str, timeout: float, env=None) -> dict:
    """Run ``code`` in a fresh Python; the JSON it prints after ``tag`` (or an ``error``)."""
    try:        # the worker runs Verilator or yosys: a timeout kills them too (run_bounded)
        proc = run_bounded([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    out, err = proc.stdout, proc.stderr
    line = next((ln for ln in out.splitlines() if ln.startswith(tag + " ")), None)
    if proc.returncode or line is None:
        tail = (err or out).strip().splitlines()[-3:]
        return {"error": f"worker exited with {proc.returncode}: {' | '.join(tail)}"}
    return json.loads(line[len(tag) + 1:])


def measure_lint(path: str | Path, top: str, *, timeout: float = 3600) -> dict:
    """Lint ``path`` (top module ``top``) in a child process; its figures (see :func:`_lint_worker`)."""
    here = str(Path(__file__).resolve().parents[2])
    code = (f"import sys; sys.path.insert(0, {here!r}); from verif.bench.elab import _lint_worker; "
            f"_lint_worker({str(path)!r}, {top!r})")
    r = _child(code, "LINT", timeout)
    return {f"lint_{k}" if k == "error" else k: v for k, v in r.items()}


def measure(module: str, point: dict, *, src: str | None = None, timeout: float = 1800,
            out_dir: Path = Path("build/bench/elab"), emission: str = "flat") -> dict:
    """Generate ``module`` at ``point`` with ``emission`` in a child process; its figures (see the
    module doc)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = "_".join(f"{k}{v}" for k, v in sorted(point.items())) or "default"
    out_v = out_dir / f"{module}__{slug}{'_src' if src else ''}{'_dedup' if emission == 'dedup' else ''}.v"
    env = dict(os.environ)
    root = str(Path(src).resolve()) if src else os.getcwd()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    code = (f"import sys; sys.path.insert(0, {root!r}); from verif.bench.elab import _worker; "
            f"_worker({module!r}, {point!r}, {str(out_v.resolve())!r}, {emission!r})")
    # The worker module itself comes from this checkout; hw/ from ``root``.
    here = str(Path(__file__).resolve().parents[2])
    code = f"import sys; sys.path.insert(0, {here!r}); " + code
    t0 = time.time()
    # The builtin yosys runs inside the worker (wasmtime), so the worker's own peak RSS (RUSAGE_SELF,
    # read just before it exits) is the point's peak. RUSAGE_CHILDREN here would be the maximum over
    # every point so far, not this one's.
    res = _child(code, "ELAB", timeout, env)
    if "error" in res:
        return res
    res["wall_s"] = time.time() - t0
    res["peak_rss_mb"] = res.pop("self_max_rss_mb")
    res["verilog"] = str(out_v)
    return res


def _growth(rows: list[dict], param: str, key: str) -> None:
    """Log-log slope of ``key`` against ``param`` between successive points of one emission (1 = linear)."""
    prev = None
    for r in sorted(rows, key=lambda r: (r.get("emission", "flat"), r[param])):
        if prev is not None and prev.get("emission") != r.get("emission"):
            prev = None
        if "error" in r:
            prev = None
            continue
        if prev is not None and r[param] != prev[param] and r[key] > 0 and prev[key] > 0:
            r[f"{key}_exponent"] = math.log(r[key] / prev[key]) / math.log(r[param] / prev[param])
        prev = r


def _values(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"{what} expects comma-separated integers, got {text!r}")
    if not values:
        raise SystemExit(f"{what} lists no values")
    return values


def _names(text: str, what: str) -> list[str]:
    names = [e.strip() for e in text.split(",") if e.strip()]
    bad = [e for e in names if e not in ("flat", "dedup")]
    if bad or not names:
        raise SystemExit(f"{what} expects comma-separated emissions out of flat, dedup; got {text!r}")
    return names


def side_by_side(rows: list[dict], param: str) -> list[dict]:
    """Per value of ``param`` measured with both emissions: flat and dedup figures and their ratios."""
    by = {}
    for r in rows:
        if "error" not in r:
            by.setdefault(r[param], {})[r.get("emission", "flat")] = r
    out = []
    for v, e in sorted(by.items()):
        if "flat" in e and "dedup" in e:
            f, d = e["flat"], e["dedup"]
            row = {param: v}
            for k in ("cpu_s", "verilog_mb", "peak_rss_mb", "lint_cpu_s", "lint_peak_rss_mb"):
                if k in f and k in d:
                    row.update({f"flat_{k}": f[k], f"dedup_{k}": d[k], f"{k}_ratio": f[k] / max(d[k], 1e-9)})
            out.append(row)
    return out


def run(args) -> int:
    from tabulate import tabulate

    from hw import registry

    spec = registry.get(args.module)
    fixed = registry.parse_assignments(args.set, [args.module])[args.module]
    params = spec.params()
    if args.param not in params:
        raise SystemExit(f"module {args.module!r} has no parameter {args.param!r}; valid: "
                         f"{', '.join(sorted(params))}")
    values = _values(args.values, "--values") if args.values.strip() or not args.baseline else []
    emissions = _names(args.emission, "--emission")
    lint_values = None if args.lint in (None, "all") else _values(args.lint, "--lint")
    lint_emissions = _names(args.lint_emission, "--lint-emission") if args.lint_emission else emissions
    if args.src and not (Path(args.src) / "hw" / "registry.py").is_file():
        raise SystemExit(f"--src {args.src!r} has no hw/registry.py")
    rows = []
    for path in args.baseline:
        try:
            base = json.loads(Path(path).read_text())
            if base["module"] != args.module or base["param"] != args.param:
                raise SystemExit(f"--baseline {path!r} measured {base['module']} over {base['param']}, "
                                 f"not {args.module} over {args.param}")
            rows += [{"emission": "flat", **r, "baseline": r.get("baseline", path),
                      "baseline_src": r.get("baseline_src", base.get("src"))} for r in base["points"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"--baseline {path!r} is not a result of this bench: {e}")
    for v in values:
        point = {**fixed, args.param: v}
        spec.resolve(point)   # unknown names rejected before any child starts
        for emission in emissions:
            print(f"[bench elab] {args.module} {point} {emission} ...", flush=True)
            r = measure(args.module, point, src=args.src, timeout=args.timeout, emission=emission)
            if "error" in r:
                print(f"[bench elab]   {r['error']}", flush=True)
            else:
                print(f"[bench elab]   {r['total_s']:.1f} s ({r['cpu_s']:.1f} CPU s), {r['verilog_mb']:.2f} MB, "
                      f"{r['peak_rss_mb']:.0f} MB RSS", flush=True)
                if args.lint and (lint_values is None or v in lint_values) and emission in lint_emissions:
                    r.update(measure_lint(r["verilog"], args.module, timeout=args.timeout))
                    print(f"[bench elab]   lint: {r.get('lint_error') or ('clean' if r['lint_clean'] else 'WARNINGS')}"
                          f", {r.get('lint_cpu_s', 0):.1f} CPU s, {r.get('lint_peak_rss_mb', 0):.0f} MB RSS",
                          flush=True)
            rows.append({args.param: v, "emission": emission, **r})
    for key in ("total_s", "cpu_s", "verilog_mb", "peak_rss_mb"):
        _growth(rows, args.param, key)
    rows.sort(key=lambda r: (r[args.param], r["emission"]))
    cols = [args.param, "emission", "python_s", "yosys_s", "total_s", "cpu_s", "rtlil_mb", "verilog_mb",
            "peak_rss_mb", "cpu_s_exponent", "verilog_mb_exponent", "lint_cpu_s", "lint_peak_rss_mb", "lint_clean"]
    print(tabulate([[r.get(c, r.get("error", "") if c == "python_s" else "") for c in cols] for r in rows],
                   headers=cols, floatfmt=".2f"))
    pairs = side_by_side(rows, args.param)
    if pairs:
        keys = list(dict.fromkeys(k for r in pairs for k in r))
        print(tabulate([[r.get(k, "") for k in keys] for r in pairs], headers=keys, floatfmt=".2f"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"module": args.module, "param": args.param, "fixed": fixed, "emissions": emissions,
                               "src": args.src, "python": sys.version.split()[0], "points": rows,
                               "side_by_side": pairs}, indent=1))
    print(f"[bench elab] wrote {out}")
    bad = any("error" in r or "lint_error" in r or r.get("lint_clean") is False for r in rows if "baseline" not in r)
    return 1 if bad else 0
