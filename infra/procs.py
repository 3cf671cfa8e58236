"""Running an external tool under a time limit without leaving its children behind.

``subprocess.run(timeout=...)`` kills only the process it started; a tool that starts its own children
(SymbiYosys starts yosys and one solver per task, Verilator starts its compiler) leaves them running, still
using the machine's cores, when the limit is reached. Killing the tool's process group is not enough
either: SymbiYosys puts every task in a process group of its own. :func:`run_bounded` starts the tool as the
leader of a new session and, on a timeout, :func:`kill_tree` stops the tool and all its descendants (so
none can start another while they are listed), kills them and its process group, and waits until they
have ended; then it raises ``subprocess.TimeoutExpired`` as ``subprocess.run`` does.
"""

import os
import signal
import subprocess
import time

import psutil

__all__ = ["run_bounded", "kill_tree"]


def _tree(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and its descendants, each stopped (SIGSTOP) as it is found, listed until no new one appears."""
    found: dict[int, psutil.Process] = {}
    todo = [root]
    while todo:
        for p in todo:
            found[p.pid] = p
            try:
                p.suspend()
            except psutil.Error:
                pass
        todo = []
        for p in list(found.values()):
            try:
                todo += [c for c in p.children(recursive=True) if c.pid not in found]
            except psutil.Error:
                pass
    return list(found.values())


def _ended(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE     # dead; only its parent's reaping is left
    except psutil.Error:
        return True


def kill_tree(pid: int, *, wait_s: float = 10.0) -> None:
    """SIGKILL process ``pid``, every descendant and ``pid``'s process group; return once they have ended
    (a zombie has ended: it waits only for its parent to reap it) or after ``wait_s`` seconds."""
    try:
        procs = _tree(psutil.Process(pid))
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):     # the group has gone (or ``pid`` never led one)
        pass
    end = time.monotonic() + wait_s
    while not all(_ended(p) for p in procs) and time.monotonic() < end:
        time.sleep(0.02)


def run_bounded(cmd, *, timeout: float | None, capture_output: bool = False, **popen_kw) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, timeout=timeout, ...)`` for a tool that may start children: on a timeout the
    tool and everything it started are killed (:func:`kill_tree`) and the tool reaped before
    ``subprocess.TimeoutExpired`` (with what the tool had written so far as ``output``/``stderr``) is
    raised. Any other exception (Ctrl-C) kills them too."""
    if capture_output:
        popen_kw["stdout"] = popen_kw["stderr"] = subprocess.PIPE
    with subprocess.Popen(cmd, start_new_session=True, **popen_kw) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            out, err = proc.communicate()       # reaps the tool; the pipes have closed with their holders
            raise subprocess.TimeoutExpired(proc.args, timeout, output=out, stderr=err) from None
        except BaseException:
            kill_tree(proc.pid)
            proc.wait()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
