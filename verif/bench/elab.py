"""``dysharp bench elab``: Verilog generation cost of a module against its size.

For each point (default: the switch at 4, 8, 16, 32 and 64 ports) a fresh Python process elaborates the
component and writes its Verilog exactly as ``dysharp verilog`` does (``amaranth.back.verilog.convert``),
timing the three phases separately: Amaranth elaboration (``Fragment.get``), Amaranth's netlist and RTLIL
(``rtlil.convert_fragment``: the combinational-cycle check lives here) and the builtin yosys
(``write_verilog``). Peak memory is the child's own maximum RSS (``RUSAGE_SELF``; the builtin yosys runs
inside it), so each point is measured alone. ``--src DIR`` imports ``hw/`` from another checkout (e.g. an older commit extracted with
``git archive``) to measure it in the same run.

Writes ``build/bench/elab.json``: per point, wall seconds per phase and in total, CPU seconds (the figure
to compare on a shared machine), Verilog MB, RTLIL MB and peak RSS in MB, plus the log-log growth exponent of time and size between successive points.
"""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

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


def _worker(module: str, point: dict, out_v: str) -> None:
    """Child process: generate the Verilog, print phase timings as one JSON line."""
    import resource

    from amaranth.back import rtlil, verilog
    from amaranth.hdl import _ir

    from hw import registry

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
           "self_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           # CPU seconds: what the wall times would be on an idle core (the machine may be shared).
           "cpu_s": resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime}
    print("ELAB " + json.dumps(res), flush=True)


def measure(module: str, point: dict, *, src: str | None = None, timeout: float = 1800,
            out_dir: Path = Path("build/bench/elab")) -> dict:
    """Generate ``module`` at ``point`` in a child process; its figures (see the module doc)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = "_".join(f"{k}{v}" for k, v in sorted(point.items())) or "default"
    out_v = out_dir / f"{module}__{slug}{'_src' if src else ''}.v"
    env = dict(os.environ)
    root = str(Path(src).resolve()) if src else os.getcwd()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    code = (f"import sys; sys.path.insert(0, {root!r}); from verif.bench.elab import _worker; "
            f"_worker({module!r}, {point!r}, {str(out_v.resolve())!r})")
    # The worker module itself comes from this checkout; hw/ from ``root``.
    here = str(Path(__file__).resolve().parents[2])
    code = f"import sys; sys.path.insert(0, {here!r}); " + code
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"timed out after {timeout:g} s"}
    # The builtin yosys runs inside the worker (wasmtime), so the worker's own peak RSS (RUSAGE_SELF,
    # read just before it exits) is the point's peak. RUSAGE_CHILDREN here would be the maximum over
    # every point so far, not this one's.
    wall = time.time() - t0
    line = next((ln for ln in out.splitlines() if ln.startswith("ELAB ")), None)
    if proc.returncode or line is None:
        tail = (err or out).strip().splitlines()[-3:]
        return {"error": f"worker exited with {proc.returncode}: {' | '.join(tail)}"}
    res = json.loads(line[5:])
    res["wall_s"] = wall
    res["peak_rss_mb"] = res.pop("self_max_rss_mb")
    res["verilog"] = str(out_v)
    return res


def _growth(rows: list[dict], param: str, key: str) -> None:
    """Log-log slope of ``key`` against ``param`` between successive points (1 = linear)."""
    prev = None
    for r in rows:
        if "error" in r:
            prev = None
            continue
        if prev is not None and r[key] > 0 and prev[key] > 0:
            r[f"{key}_exponent"] = math.log(r[key] / prev[key]) / math.log(r[param] / prev[param])
        prev = r


def run(args) -> int:
    from tabulate import tabulate

    from hw import registry

    spec = registry.get(args.module)
    fixed = registry.parse_assignments(args.set, [args.module])[args.module]
    params = spec.params()
    if args.param not in params:
        raise SystemExit(f"module {args.module!r} has no parameter {args.param!r}; valid: "
                         f"{', '.join(sorted(params))}")
    try:
        values = [int(v) for v in args.values.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"--values expects comma-separated integers, got {args.values!r}")
    if not values:
        raise SystemExit("--values lists no values")
    if args.src and not (Path(args.src) / "hw" / "registry.py").is_file():
        raise SystemExit(f"--src {args.src!r} has no hw/registry.py")
    rows = []
    for v in values:
        point = {**fixed, args.param: v}
        spec.resolve(point)   # unknown names rejected before any child starts
        print(f"[bench elab] {args.module} {point} ...", flush=True)
        r = measure(args.module, point, src=args.src, timeout=args.timeout)
        rows.append({args.param: v, **r})
        if "error" in r:
            print(f"[bench elab]   {r['error']}", flush=True)
        else:
            print(f"[bench elab]   {r['total_s']:.1f} s, {r['verilog_mb']:.2f} MB, "
                  f"{r['peak_rss_mb']:.0f} MB RSS", flush=True)
    for key in ("total_s", "cpu_s", "verilog_mb", "peak_rss_mb"):
        _growth(rows, args.param, key)
    cols = [args.param, "elaborate_s", "netlist_rtlil_s", "yosys_s", "total_s", "cpu_s", "rtlil_mb", "verilog_mb",
            "peak_rss_mb", "total_s_exponent", "verilog_mb_exponent"]
    print(tabulate([[r.get(c, r.get("error", "") if c == "elaborate_s" else "") for c in cols] for r in rows],
                   headers=cols, floatfmt=".2f"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"module": args.module, "param": args.param, "fixed": fixed,
                               "src": args.src, "python": sys.version.split()[0], "points": rows}, indent=1))
    print(f"[bench elab] wrote {out}")
    return 1 if any("error" in r for r in rows) else 0
