"""The task engine (infra.engine): local pool vs a Dask LocalCluster, an unreachable scheduler, the
content-hash cache (hits, a changed parameter, an interrupted sweep), and the CLI's --scheduler."""

import os
import socket
import subprocess
import sys
import time

import pytest

from infra import engine

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def square_plus(item):
    x, offset = item
    return {"x": x, "y": x * x + offset}


def fail_on_three(x):
    if x == 3:
        raise ValueError("three is not allowed")
    return x


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]      # free once closed: nothing listens there


def _estimator_jobs():
    from sim_models.calibration import load_calibration
    from sim_models.estimator import Params
    cal = load_calibration("build/no-bench-here")
    return [(m, "hgx-h200", Params(tokens_per_gpu=256), cal, {}) for m in ("mixtral-8x7b", "qwen3-30b-a3b")]


def test_local_cluster_equals_local_pool():
    from distributed import LocalCluster
    from sim_models import sweep

    items = [(x, 7) for x in range(6)]
    jobs = _estimator_jobs()
    local = engine.map_tasks(square_plus, items, jobs=2, scheduler="")
    local_est = engine.map_tasks(sweep.estimate_task, jobs, jobs=2, scheduler="")
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as lc:
        dask = engine.map_tasks(square_plus, items, scheduler=lc.scheduler_address)
        dask_est = engine.map_tasks(sweep.estimate_task, jobs, scheduler=lc.scheduler_address)
    assert local == [{"x": x, "y": x * x + 7} for x in range(6)]
    assert dask == local
    assert len(local_est) == 2 and all(rows for rows in local_est)
    assert dask_est == local_est


def test_unreachable_scheduler_is_a_clear_error(monkeypatch):
    # Nothing listens there: Dask retries until the timeout, which the test shortens (the message names it).
    monkeypatch.setattr(engine, "CONNECT_TIMEOUT_S", 1)
    addr = f"tcp://127.0.0.1:{_closed_port()}"
    with pytest.raises(engine.SchedulerError, match=f"cannot reach the Dask scheduler at {addr} .* within 1 s"):
        engine.map_tasks(square_plus, [(1, 0)], scheduler=addr)
    monkeypatch.setenv(engine.SCHEDULER_ENV, addr)
    with pytest.raises(engine.SchedulerError, match=engine.SCHEDULER_ENV):
        engine.map_tasks(square_plus, [(1, 0)])


def test_task_error_names_the_task():
    with pytest.raises(engine.TaskError, match=r"task 4/5 \(x=3\) failed: ValueError: three is not allowed"):
        engine.map_tasks(fail_on_three, range(5), jobs=1, labels=[f"x={x}" for x in range(5)])
    with pytest.raises(engine.TaskError, match=r"task 4/5 .*three is not allowed"):
        engine.map_tasks(fail_on_three, range(5), jobs=2, scheduler="")


def test_bad_jobs_rejected():
    with pytest.raises(ValueError, match="--jobs must be a positive"):
        engine.map_tasks(square_plus, [(1, 0)], jobs=0)


def test_content_key_is_canonical():
    from sim_models.estimator import Params
    assert engine.content_key({"a": 1, "b": [1, 2]}) == engine.content_key({"b": [1, 2], "a": 1})
    assert engine.content_key({"a": 1}) != engine.content_key({"a": 2})
    assert engine.content_key(Params(tile=64)) != engine.content_key(Params(tile=128))
    assert engine.content_key(1) != engine.content_key("1")
    with pytest.raises(TypeError, match="cannot hash"):
        engine.content_key(object())


class Counter:
    """A task function that counts its calls (jobs=1: it runs in this process)."""

    def __init__(self, stop_at=None):
        self.calls, self.stop_at = [], stop_at

    def __call__(self, item):
        if self.stop_at is not None and item == self.stop_at:
            raise KeyboardInterrupt      # what Ctrl-C raises in the middle of a sweep
        self.calls.append(item)
        return {"item": item, "value": [item] * 3}


def test_cache_hits_changed_parameter_and_resume(tmp_path):
    store = engine.cache("test", directory=tmp_path)
    key = lambda scale: (lambda x: engine.content_key("test-fn", x, scale))  # noqa: E731

    f = Counter()
    first = engine.map_tasks(f, range(4), jobs=1, cache=store, key=key(1))
    assert f.calls == [0, 1, 2, 3]
    g = Counter()
    assert engine.map_tasks(g, range(4), jobs=1, cache=store, key=key(1)) == first
    assert g.calls == []                                     # every result from the cache
    h = Counter()
    engine.map_tasks(h, range(4), jobs=1, cache=store, key=key(2))
    assert h.calls == [0, 1, 2, 3]                           # a changed parameter recomputes

    # Interrupted at item 3 (of 0..5) with the new parameter: 0..2 are stored whole, nothing else.
    fresh = engine.cache("fresh", directory=tmp_path)
    stop = Counter(stop_at=3)
    with pytest.raises(KeyboardInterrupt):
        engine.map_tasks(stop, range(6), jobs=1, cache=fresh, key=key(3))
    assert stop.calls == [0, 1, 2]
    assert len(fresh) == 3
    assert all(fresh[key(3)(i)] == {"item": i, "value": [i] * 3} for i in range(3))
    assert fresh.check() == []                               # diskcache's own consistency check
    resume = Counter()
    out = engine.map_tasks(resume, range(6), jobs=1, cache=fresh, key=key(3))
    assert resume.calls == [3, 4, 5]                         # the re-run computes only what is missing
    assert out == [{"item": i, "value": [i] * 3} for i in range(6)]


def test_cache_with_pool_stores_every_result(tmp_path):
    store = engine.cache("pool", directory=tmp_path)
    items = [(x, 1) for x in range(5)]
    key = lambda it: engine.content_key("square_plus", it)  # noqa: E731
    out = engine.map_tasks(square_plus, items, jobs=2, scheduler="", cache=store, key=key)
    assert sorted(store.iterkeys()) == sorted(key(it) for it in items)
    assert [store[key(it)] for it in items] == out


def compute_once(job):
    """Two processes ask for the same missing entry: the lock lets one compute it (logged in ``marker``)."""
    directory, marker = job
    store = engine.cache("lock", directory=directory)

    def compute():
        with open(marker, "a") as f:
            f.write("computed\n")
        time.sleep(1.0)     # holds the entry missing long enough for the other process to ask for it
        return {"answer": 42}
    return engine.cached_call(store, "the-key", compute)


def test_cached_call_computes_a_shared_key_once(tmp_path):
    marker = tmp_path / "marker.txt"
    out = engine.map_tasks(compute_once, [(tmp_path, marker)] * 2, jobs=2, scheduler="")
    assert out == [{"answer": 42}] * 2
    assert marker.read_text().splitlines() == ["computed"]


def _estimate_sweep(tmp_path, address, **env):
    return subprocess.run([sys.executable, "-m", "dysharp", "estimate", "--sweep", "--quick", "--scheduler",
                           address, "--out", str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_cli_estimate_sweep_unreachable_scheduler(tmp_path):
    # The wait shortened through the CLI's environment setting, which the message then names.
    r = _estimate_sweep(tmp_path, "tcp://127.0.0.1:1", **{engine.TIMEOUT_ENV: "1"})
    assert r.returncode in (1, 2), r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "tcp://127.0.0.1:1" in lines[0] and "cannot reach the Dask scheduler" in lines[0]
    assert "within 1 s" in lines[0], lines[0]


@pytest.mark.parametrize("value", ["0", "-2", "soon", "inf", "nan"])
def test_a_bad_scheduler_timeout_is_refused(monkeypatch, value):
    monkeypatch.setenv(engine.TIMEOUT_ENV, value)
    with pytest.raises(engine.SchedulerError, match=f"{engine.TIMEOUT_ENV} must be a positive number of seconds"):
        engine.map_tasks(square_plus, [(1, 0)], scheduler="tcp://127.0.0.1:1")


def test_scheduler_timeout_setting(monkeypatch):
    monkeypatch.delenv(engine.TIMEOUT_ENV, raising=False)
    assert engine.connect_timeout() == engine.CONNECT_TIMEOUT_S
    monkeypatch.setenv(engine.TIMEOUT_ENV, "2.5")
    assert engine.connect_timeout() == 2.5
