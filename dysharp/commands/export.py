"""``dysharp export fusesoc``: package registered modules as FuseSoC cores (CAPI2) for other flows.

``dysharp export fusesoc --out DIR [-m MODULE ...] [--point k=v,...]`` writes, per module and parameter
point, ``DIR/<module>_<slug>/<module>_<slug>.core`` beside a copy of the generated Verilog. The core is
named ``dysharp:ip:<module>_<slug>:<version>`` (``slug`` from :func:`hw.registry.point_slug`, the version
of the ``dysharp`` package), its ``description`` states every parameter of the point, its ``default``
target carries the Verilog (what a core that depends on it pulls in) and its ``lint`` target runs
``verilator --lint-only -Wall`` with the same waivers as ``dysharp lint``. ``DIR`` is a FuseSoC cores root:
``fusesoc --cores-root DIR run --target lint dysharp:ip:cam_default:0.1.0``.
"""

import importlib.metadata
import json
import os
import re
import shutil
import tomllib
from pathlib import Path

from hw import registry
from verif.lint import WAIVED

from ..cli import UsageError
from .verilog import generate

FORMATS = ("fusesoc",)
VENDOR, LIBRARY = "dysharp", "ip"
_POINT_SPLIT = re.compile(r",(?=\s*[A-Za-z_][\w.]*=)")   # split at commas that start the next name=


def add_arguments(p) -> None:
    p.add_argument("format", choices=FORMATS, help="package format (fusesoc: one CAPI2 .core per point)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="cores root to write (one folder per core; created if missing)")
    p.add_argument("--module", "-m", action="append", default=None, metavar="NAME",
                   help="module to export (repeatable; default: every registered module)")
    pts = p.add_mutually_exclusive_group()
    pts.add_argument("--point", action="append", default=[], metavar="[MODULE.]PARAM=VALUE,...",
                     help="one parameter point (repeatable, one core per point and module); a bare PARAM "
                          "applies to every selected module that has it (default: each module's defaults)")
    pts.add_argument("--points", action="store_true",
                     help="export each module's standard parameter points (as `dysharp verilog --points`)")
    pts.add_argument("--architecture", action="store_true",
                     help="export each module at the point the 64-port DySHARP addition counts it at "
                          "(synth/scaling.py ROLES; modules outside the addition at their defaults)")
    p.add_argument("--verilog-dir", default="build/verilog",
                   help="Verilog cache the cores copy from (default: build/verilog)")


def package_version() -> str:
    """The ``dysharp`` package version (installed metadata, else the checkout's ``pyproject.toml``)."""
    try:
        return importlib.metadata.version("dysharp")
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"]


def export_points(modules, point_texts, standard=False, architecture=False) -> list[registry.DesignPoint]:
    """The design points of the selection (:class:`~hw.registry.DesignPoint`), deduplicated; raises
    ValueError naming a bad module, parameter name or value (the checks of ``dysharp verilog --set``)."""
    names = modules or sorted(registry.MODULES)
    for n in names:
        registry.get(n)
    if standard:
        candidates = [(n, dict(pt)) for n in names for pt in registry.get(n).points]
    elif architecture:
        from synth.scaling import architecture_point
        candidates = [(n, architecture_point(n) or {}) for n in names]
    else:
        candidates = []
        for text in point_texts or [""]:
            items = [s.strip() for s in _POINT_SPLIT.split(text) if s.strip()] if text else []
            if text and (not items or any("=" not in s for s in items)):
                raise ValueError(f"--point expects name=value[,name=value...], got {text!r}")
            overrides = registry.parse_assignments(items, names)
            candidates += [(n, overrides[n]) for n in names]
    # dict.fromkeys: the first of equal points (same module and parameters), in order.
    return list(dict.fromkeys(registry.point(name, params) for name, params in candidates))


def core_name(point: registry.DesignPoint, version: str | None = None) -> str:
    """The VLNV ``dysharp:ip:<module>_<point slug>:<version>`` of a design point."""
    # FuseSoC allows only alphanumerics, '.', '-' and '_' in a VLNV part; point_slug may also emit '+'.
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{point.name}_{point.slug}")
    return f"{VENDOR}:{LIBRARY}:{name}:{version or package_version()}"


def core_text(point: registry.DesignPoint, verilog_file: str, version: str) -> str:
    """The CAPI2 core file (YAML; strings JSON-quoted, which YAML reads as the same strings)."""
    module = point.name
    q = json.dumps
    params = ", ".join(f"{k}={v!r}" for k, v in point.params.items())
    description = (f"dysharp {module} at {params}; Verilog generated by dysharp {version} from hw/ "
                   f"source hash {registry.hw_source_hash()}")
    lint_options = ["-Wall"] + [f"-Wno-{cat}" for cat in sorted(WAIVED)]
    return "\n".join([
        "CAPI=2:",
        f"name: {q(core_name(point, version))}",
        f"description: {q(description)}",
        "",
        "filesets:",
        "  rtl:",
        "    files:",
        f"      - {q(verilog_file)}",
        "    file_type: verilogSource",
        "",
        "targets:",
        "  default:",                        # what a depending core pulls in
        "    filesets: [rtl]",
        f"    toplevel: {q(module)}",
        "  lint:",
        "    default_tool: verilator",
        "    filesets: [rtl]",
        f"    toplevel: {q(module)}",
        "    tools:",
        "      verilator:",
        "        mode: lint-only",
        "        # the waivers of `dysharp lint` (Amaranth/Yosys output idioms); every other warning fails",
        f"        verilator_options: [{', '.join(q(o) for o in lint_options)}]",
        "",
    ])


def _check_out_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create the folder ({e.strerror})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: the folder is not writable")


def export_fusesoc(points, out, verilog_dir="build/verilog", quiet=False) -> list[Path]:
    """Write one core per :class:`~hw.registry.DesignPoint` under ``out``; returns the core file paths."""
    out = Path(out)
    _check_out_dir(out)
    version = package_version()
    cores = []
    for point in points:
        try:
            [src] = generate([point], verilog_dir, quiet=True)
        except ValueError as e:   # the component's own check of a value, e.g. ports out of range
            where = ",".join(f"{k}={v}" for k, v in point.overrides.items()) or "defaults"
            raise ValueError(f"{point.name} at {where}: {e}") from None
        name = core_name(point, version).split(":")[2]
        core_dir = out / name
        core_dir.mkdir(exist_ok=True)
        shutil.copyfile(src, core_dir / src.name)
        core = core_dir / f"{name}.core"
        core.write_text(core_text(point, src.name, version))
        cores.append(core)
        if not quiet:
            print(f"{core}  {core_name(point, version)}")
    return cores


def run(args) -> int:
    points = export_points(args.module, args.point, args.points, args.architecture)
    cores = export_fusesoc(points, args.out, args.verilog_dir)
    print(f"export: {len(cores)} core(s) in {args.out}; lint one with "
          f"`fusesoc --cores-root {args.out} run --target lint <name>`")
    return 0
