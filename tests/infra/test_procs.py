"""A tool that runs over its time limit is killed with every process it started (``infra.procs``), and the
formal runner uses that: a SymbiYosys run that times out leaves no yosys or solver behind."""

import os
import subprocess
import sys
import time

import pytest

from infra.procs import run_bounded
from verif.formal.credit_link import CreditLinkHarness
from verif.formal.runner import run_formal


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its parent to reap it runs no more)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone_soon(pids, within=5.0) -> bool:
    end = time.monotonic() + within
    while any(_alive(p) for p in pids):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _running_under(folder) -> list[int]:
    """Processes whose working directory is ``folder`` or below it."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cwd = os.readlink(f"/proc/{d}/cwd")
            except OSError:
                continue
            if cwd.startswith(str(folder)) and _alive(int(d)):
                out.append(int(d))
    return out


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_timed_out_tool_leaves_no_child_behind():
    # The tool starts a child (sleep), prints its pid and waits: only the group kill can end the child.
    cmd = ["sh", "-c", "sleep 300 & echo $!; wait"]
    with pytest.raises(subprocess.TimeoutExpired) as e:
        run_bounded(cmd, timeout=1, capture_output=True, text=True)
    assert e.value.timeout == 1 and e.value.cmd == cmd
    child = int(e.value.output.split()[0])      # what the tool wrote before the limit is kept
    assert _gone_soon([child]), f"the tool's child {child} survived the timeout"


def test_a_tool_within_its_limit_runs_as_subprocess_run():
    r = run_bounded([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                    timeout=30, capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")


def test_a_formal_run_that_times_out_kills_its_solvers(tmp_path):
    h = CreditLinkHarness(4)
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_formal("slow", h, h.props, depth=40, cover_depth=40, workdir=tmp_path, timeout=3)
    assert time.monotonic() - t0 < 30
    assert _gone_soon([]) and not _running_under(tmp_path), "sby, yosys or a solver survived the timeout"
