"""The task engine: independent tasks (sweep points) on a local process pool or a Dask cluster, with
their results cached on disk by content hash.

:func:`map_tasks` runs ``fn(item)`` for every item and returns the results in item order. Where it runs:

* locally (the default): ``jobs`` worker processes (``concurrent.futures.ProcessPoolExecutor``; default
  :data:`DEFAULT_JOBS`; ``jobs=1`` runs in this process);
* on a Dask ``distributed`` cluster when ``scheduler`` (``--scheduler ADDRESS``) or the environment
  variable :data:`SCHEDULER_ENV` names its scheduler. A scheduler that does not answer within
  :data:`CONNECT_TIMEOUT_S` seconds (or ``$DYSHARP_SCHEDULER_TIMEOUT``, :data:`TIMEOUT_ENV`) is a
  :class:`SchedulerError` naming the address, not a hang. The workers must
  import this project (start them from the repository, or install it).

A task's exception is re-raised as :class:`TaskError` naming the task. A tqdm bar shows progress and ETA
(on a terminal).

The cache (:func:`cache`) is a ``diskcache.Cache`` under ``build/cache/``. Entries are keyed by
:func:`content_key` of whatever the result depends on (the hardware source, :func:`source_hash` of the
code, the parameters, the tool versions): the caller names those parts, the cache never guesses. A
``diskcache`` write is one SQLite transaction, and a result is stored as soon as its task finishes, so an
interrupted sweep (Ctrl-C, a failed task) leaves complete entries only and a re-run computes only the
missing ones. Results are stored by the process that called :func:`map_tasks`, so the cache also works
with a remote cluster that shares no disk with it.
"""

import contextlib
import dataclasses
import enum
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = ["map_tasks", "cache", "content_key", "source_hash", "cached_call", "key_lock", "TaskError", "SchedulerError",
           "scheduler_address", "SCHEDULER_ENV", "TIMEOUT_ENV", "DEFAULT_JOBS", "CONNECT_TIMEOUT_S",
           "connect_timeout", "CACHE_DIR"]

SCHEDULER_ENV = "DYSHARP_SCHEDULER"
TIMEOUT_ENV = "DYSHARP_SCHEDULER_TIMEOUT"
CACHE_ENV = "DYSHARP_CACHE"
CONNECT_TIMEOUT_S = 5
DEFAULT_JOBS = min(2, os.cpu_count() or 1)
CACHE_DIR = Path("build/cache")
REPO = Path(__file__).resolve().parent.parent


class TaskError(RuntimeError):
    """A task raised; the message names the task (its index and label) and the original error."""


class SchedulerError(RuntimeError):
    """The Dask scheduler named by ``--scheduler`` / ``DYSHARP_SCHEDULER`` cannot be used."""


# ---------------------------------------------------------------------------------------------------------
# Content hashing

def _canon(obj: Any) -> Any:
    """A JSON-able, order-independent form of ``obj`` (dicts sorted, dataclasses as their fields)."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        # NaN and the infinities have no JSON form; repr keeps them apart from strings by the tag.
        return obj if math.isfinite(obj) else {"__float__": repr(obj)}
    if isinstance(obj, enum.Enum):
        return {"__enum__": f"{type(obj).__qualname__}.{obj.name}"}
    if isinstance(obj, os.PathLike):
        return {"__path__": os.fspath(obj)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__dataclass__": type(obj).__qualname__,
                "fields": {f.name: _canon(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    if isinstance(obj, dict):
        return {"__dict__": sorted(([_canon(k), _canon(v)] for k, v in obj.items()),
                                   key=lambda kv: json.dumps(kv[0], sort_keys=True))}
    if isinstance(obj, (list, tuple)):
        return [_canon(x) for x in obj]
    if isinstance(obj, (set, frozenset)):
        return {"__set__": sorted((_canon(x) for x in obj), key=lambda x: json.dumps(x, sort_keys=True))}
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):       # numpy scalars and arrays
        return {"__array__": str(obj.dtype), "value": _canon(obj.tolist())}
    raise TypeError(f"content_key cannot hash a {type(obj).__name__} ({obj!r:.80}); pass its defining "
                    f"parameters instead")


def content_key(*parts: Any) -> str:
    """The sha256 (hex) of ``parts`` in a canonical form: equal parameters give equal keys whatever the
    dict order; anything without a stable form (an open file, a function) is a TypeError."""
    text = json.dumps(_canon(list(parts)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


_SOURCE_HASHES: dict = {}


def source_hash(*packages: str, suffixes=(".py", ".toml", ".json")) -> str:
    """Hash of the files (``suffixes``) of the repository folders ``packages`` (e.g. ``"sim_models"``):
    a cached result computed by that code is keyed on it, so editing the code recomputes it."""
    key = (packages, tuple(suffixes))
    if key not in _SOURCE_HASHES:
        h = hashlib.sha256()
        for pkg in packages:
            root = REPO / pkg
            if not root.is_dir():
                raise ValueError(f"source_hash: {pkg!r} is not a folder of the repository ({REPO})")
            for path in sorted(p for p in root.rglob("*") if p.suffix in suffixes and p.is_file()
                               and "__pycache__" not in p.parts):
                h.update(str(path.relative_to(REPO)).encode())
                h.update(path.read_bytes())
        _SOURCE_HASHES[key] = h.hexdigest()[:16]
    return _SOURCE_HASHES[key]


# ---------------------------------------------------------------------------------------------------------
# The cache

_CACHES: dict = {}


def cache(name: str = "results", directory: str | os.PathLike | None = None):
    """The ``diskcache.Cache`` ``name`` under ``build/cache/`` (``DYSHARP_CACHE`` overrides the folder),
    opened once per process."""
    import diskcache

    root = Path(directory or os.environ.get(CACHE_ENV) or CACHE_DIR)
    path = (root / name).resolve()
    pid = os.getpid()
    c = _CACHES.get((path, pid))
    if c is None:
        path.mkdir(parents=True, exist_ok=True)
        # No size limit: a cache of synthesis results must not drop entries behind the user's back
        # ("none" eviction); `rm -r build/cache` empties it.
        c = diskcache.Cache(str(path), eviction_policy="none", size_limit=2 ** 62)
        _CACHES[(path, pid)] = c
    return c


_MISS = object()


@contextlib.contextmanager
def key_lock(store, key: str):
    """An exclusive lock named ``key`` across the processes of this machine that share ``store``
    (``flock``: the system drops it when its holder dies, so a killed run leaves no stale lock)."""
    try:
        import fcntl
    except ImportError:             # not POSIX: no lock; two processes may compute the same entry
        yield
        return
    d = Path(store.directory) / "locks"
    d.mkdir(exist_ok=True)
    name = key if len(key) <= 64 and key.replace("-", "").replace("_", "").isalnum() else \
        hashlib.sha256(key.encode()).hexdigest()[:40]
    with open(d / f"{name}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cached_call(store, key: str, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)``, or its cached result under ``key`` in ``store`` (a :func:`cache`);
    ``store=None`` computes without the cache. The result is stored only once ``fn`` has returned. Two
    processes asking for the same missing key compute it once: the second waits and reads it (so ``fn``
    may use a work folder named after the key)."""
    if store is None:
        return fn(*args, **kwargs)
    got = store.get(key, default=_MISS, retry=True)
    if got is not _MISS:
        return got
    with key_lock(store, key):
        got = store.get(key, default=_MISS, retry=True)
        if got is not _MISS:
            return got
        res = fn(*args, **kwargs)
        store.set(key, res, retry=True)
    return res


# ---------------------------------------------------------------------------------------------------------
# Running tasks

def _label(item, i: int, labels) -> str:
    if labels is not None:
        return str(labels[i])
    text = repr(item)
    return text if len(text) <= 100 else text[:97] + "..."


def connect_timeout() -> float:
    """Seconds to wait for a Dask scheduler to answer: ``$DYSHARP_SCHEDULER_TIMEOUT`` (a positive number),
    else :data:`CONNECT_TIMEOUT_S`."""
    text = os.environ.get(TIMEOUT_ENV)
    if text is None or text == "":
        return CONNECT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise SchedulerError(f"{TIMEOUT_ENV} must be a positive number of seconds, got {text!r}")
    return int(value) if value == int(value) else value


def _client(address: str, source: str):
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - a declared dependency
        raise SchedulerError(f"{source} {address!r} needs dask.distributed: pip install 'dask[distributed]'")
    timeout = connect_timeout()
    try:
        return Client(address, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as e:
        raise SchedulerError(
            f"cannot reach the Dask scheduler at {address} ({source}) within {timeout} s: "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no answer'}; start one with "
            f"`dask scheduler` (and `dask worker {address}`), or drop --scheduler and unset "
            f"{SCHEDULER_ENV} to run on local processes") from None


def scheduler_address(scheduler: str | None = None) -> str | None:
    """The Dask scheduler tasks go to: ``scheduler``, else ``$DYSHARP_SCHEDULER``; None (or ``""``
    given explicitly): local processes."""
    if scheduler is None:
        scheduler = os.environ.get(SCHEDULER_ENV, "")
    return scheduler.strip() or None


def map_tasks(fn: Callable, items: Iterable, *, scheduler: str | None = None, jobs: int | None = None,
              desc: str = "tasks", labels: list | None = None, cache=None,
              key: Callable | None = None, progress: bool | None = None) -> list:
    """``[fn(item) for item in items]``, run in parallel (see the module docstring); results in item order.

    ``fn`` and the items must be picklable (a module-level function) unless ``jobs=1``. With ``cache`` (a
    :func:`cache`) and ``key`` (``item -> content key``, e.g. from :func:`content_key`), items whose key is
    cached are not run, and every result is stored as soon as its task finishes. ``labels``: a name per
    item for the progress bar and error messages (default: the item's repr). ``scheduler``: a Dask
    scheduler address (default: ``$DYSHARP_SCHEDULER``; ``""`` forces local processes). ``progress``:
    the tqdm bar (default: on a terminal)."""
    from tqdm.auto import tqdm

    items = list(items)
    if labels is not None and len(labels) != len(items):
        raise ValueError(f"map_tasks: {len(labels)} labels for {len(items)} items")
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"--jobs must be a positive number of worker processes, got {jobs!r}")
    if (cache is None) != (key is None):
        raise ValueError("map_tasks: cache and key go together (a cache needs a key per item)")
    source = "--scheduler" if scheduler is not None else SCHEDULER_ENV
    scheduler = scheduler_address(scheduler)
    results: list = [_MISS] * len(items)
    keys = [key(it) for it in items] if key is not None else None
    if cache is not None:
        for i, k in enumerate(keys):
            results[i] = cache.get(k, default=_MISS, retry=True)
    todo = [i for i, r in enumerate(results) if r is _MISS]
    bar = tqdm(total=len(items), initial=len(items) - len(todo), desc=desc, unit="task",
               disable=(None if progress is None else not progress), dynamic_ncols=True, leave=False)

    def done(i, value):
        results[i] = value
        if cache is not None:
            cache.set(keys[i], value, retry=True)
        bar.update(1)

    def failed(i, exc):
        if isinstance(exc, TaskError):
            raise exc
        raise TaskError(f"{desc}: task {i + 1}/{len(items)} ({_label(items[i], i, labels)}) failed: "
                        f"{type(exc).__name__}: {exc}") from exc

    try:
        if scheduler:
            # Connected even when every result is cached: a wrong address is an error either way.
            client = _client(scheduler, source)
            try:
                if todo:
                    _run_dask(client, fn, items, todo, done, failed)
            finally:
                client.close()
        elif not todo:
            pass
        elif (jobs or DEFAULT_JOBS) == 1 or len(todo) == 1:
            for i in todo:
                try:
                    value = fn(items[i])
                except Exception as e:      # KeyboardInterrupt passes through untouched
                    failed(i, e)
                done(i, value)
        else:
            _run_pool(fn, items, todo, min(jobs or DEFAULT_JOBS, len(todo)), done, failed)
    finally:
        bar.close()
    return results


def _run_pool(fn, items, todo, workers, done, failed):
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ex = ProcessPoolExecutor(max_workers=workers)
    try:
        pending = {ex.submit(fn, items[i]): i for i in todo}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                i = pending.pop(f)
                exc = f.exception()
                if exc is not None:
                    failed(i, exc)
                done(i, f.result())
    except BaseException:
        # A failed task or Ctrl-C: drop the queued tasks rather than run them to the end.
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    ex.shutdown(wait=True)


def _run_dask(client, fn, items, todo, done, failed):
    from distributed import as_completed

    futures = client.map(fn, [items[i] for i in todo], pure=False)
    index = {f.key: i for f, i in zip(futures, todo)}
    try:
        for f in as_completed(futures):
            i = index[f.key]
            if f.status == "error":
                failed(i, f.exception())
            done(i, f.result())
    except BaseException:
        client.cancel(futures)
        raise
