"""The area of any point and the area study (``dysharp area``): every selected module over its grid.

:func:`area_point` synthesizes a point flat (:func:`synth.area.flat_area_point`), or, for a switch large
enough (:func:`synth.hierarchical.applies`), costs it from its parts synthesized alone
(:func:`synth.hierarchical.area_point`). :func:`run_study` runs the points as
:func:`infra.engine.map_tasks` tasks (local processes or a Dask cluster).
"""

from hw import registry
from infra import engine

from . import area, hierarchical
from .area import DEFAULT_PERIOD_PS, AreaPoint

__all__ = ["area_point", "run_study"]


def area_point(module: str, point: dict, *, period_ps: float = DEFAULT_PERIOD_PS, netlist: bool = True,
               max_mb: float = 0.0, cache: bool = True, quiet: bool = False) -> AreaPoint:
    """Synthesize ``module`` at ``point`` and cost its arrays (see :mod:`synth.area`); a large switch from
    its parts (:mod:`synth.hierarchical`)."""
    kw = dict(period_ps=period_ps, netlist=netlist, max_mb=max_mb, cache=cache, quiet=quiet)
    if hierarchical.applies(module, registry.get(module).resolve(point)):
        return hierarchical.area_point(module, point, **kw)
    return area.flat_area_point(module, point, **kw)


def _point_task(job) -> AreaPoint:
    module, point, kw = job
    return area_point(module, point, **kw)


def run_study(selection: dict[str, list[dict]], *, jobs: int | None = None, scheduler: str | None = None,
              **kw) -> list[AreaPoint]:
    """``selection``: {module: [points]} -> every point's :class:`AreaPoint`, in order.

    The points are :func:`infra.engine.map_tasks` tasks (``jobs`` local processes, or the Dask cluster
    at ``scheduler``), ``kw`` passed to :func:`area_point`. With ``max_mb`` they run in waves of as many
    points as there are workers, in order: a point at least as large (every numeric parameter >=) as one
    skipped for size in an earlier wave is skipped without generating its Verilog, which alone takes
    minutes for a 64-port switch. Without it they run as one batch, the points costed hierarchically (a
    large switch, its parts one after another in one task: the longest task) first, so that the other
    points run beside it rather than after it."""

    todo = [(m, p) for m, points in selection.items() for p in points]
    out: list = [None] * len(todo)
    skipped: dict[str, list] = {m: [] for m in selection}
    width = len(todo) if not kw.get("max_mb") else \
        (jobs or (8 if engine.scheduler_address(scheduler) else engine.DEFAULT_JOBS))
    pending = list(range(len(todo)))
    if not kw.get("max_mb"):
        def flat(i):
            module, point = todo[i]
            return not hierarchical.applies(module, registry.get(module).resolve(point))
        pending.sort(key=flat)
    while pending:
        wave = []
        while pending and len(wave) < width:
            i = pending.pop(0)
            module, p = todo[i]
            big = next((q for q in skipped[module] if _dominates(p, q)), None)
            if big is not None and kw.get("max_mb"):
                out[i] = AreaPoint(module, p, registry.get(module).resolve(p), None,
                                   skipped=f"larger than {big}, which exceeds --max-mb {kw['max_mb']:g}; run "
                                           f"with --max-mb 0 to include it")
                continue
            wave.append(i)
        results = engine.map_tasks(_point_task, [(*todo[i], kw) for i in wave], jobs=jobs, scheduler=scheduler,
                                   desc="area", labels=[f"{todo[i][0]} {todo[i][1] or '(defaults)'}" for i in wave])
        for i, ap in zip(wave, results):
            out[i] = ap
            if ap.result is None:
                skipped[ap.module].append(ap.point)
    return out


def _dominates(p: dict, q: dict) -> bool:
    keys = set(p) | set(q)
    if not keys or any(not isinstance(p.get(k), (int, float)) or not isinstance(q.get(k), (int, float))
                       for k in keys):
        return False
    return all(p[k] >= q[k] for k in keys)
