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


def area_point(design: "registry.DesignPoint | str", point: dict | None = None, *,
               period_ps: float = DEFAULT_PERIOD_PS, netlist: bool = True, max_mb: float = 0.0, cache: bool = True,
               quiet: bool = False) -> AreaPoint:
    """Synthesize ``design`` (a :class:`hw.registry.DesignPoint`, or a module name and its overrides
    ``point``) and cost its arrays (see :mod:`synth.area`); a large switch from its parts
    (:mod:`synth.hierarchical`)."""
    design = registry.point(design, point)
    kw = dict(period_ps=period_ps, netlist=netlist, max_mb=max_mb, cache=cache, quiet=quiet)
    if hierarchical.applies(design.name, design.params):
        return hierarchical.area_point(design, **kw)
    return area.flat_area_point(design, **kw)


def _point_task(job) -> AreaPoint:
    design, kw = job
    return area_point(design, **kw)


def run_study(selection: dict[str, list[registry.DesignPoint]], *, jobs: int | None = None,
              scheduler: str | None = None, **kw) -> list[AreaPoint]:
    """``selection``: {module: [design points]} (:func:`synth.area.grid_points`) -> every point's
    :class:`AreaPoint`, in order.

    The points are :func:`infra.engine.map_tasks` tasks (``jobs`` local processes, or the Dask cluster
    at ``scheduler``), ``kw`` passed to :func:`area_point`. With ``max_mb`` they run in waves of as many
    points as there are workers, in order: a point at least as large (every numeric parameter >=) as one
    skipped for size in an earlier wave is skipped without generating its Verilog, which alone takes
    minutes for a 64-port switch. Without it they run as one batch, the points costed hierarchically (a
    large switch, its parts one after another in one task: the longest task) first, so that the other
    points run beside it rather than after it."""

    todo = [registry.point(d) for points in selection.values() for d in points]
    out: list = [None] * len(todo)
    skipped: dict[str, list] = {m: [] for m in selection}
    width = len(todo) if not kw.get("max_mb") else \
        (jobs or (8 if engine.scheduler_address(scheduler) else engine.DEFAULT_JOBS))
    pending = list(range(len(todo)))
    if not kw.get("max_mb"):
        pending.sort(key=lambda i: not hierarchical.applies(todo[i].name, todo[i].params))
    while pending:
        wave = []
        while pending and len(wave) < width:
            i = pending.pop(0)
            d = todo[i]
            big = next((q for q in skipped.setdefault(d.name, []) if _dominates(d, q)), None)
            if big is not None and kw.get("max_mb"):
                out[i] = AreaPoint(d, None,
                                   skipped=f"larger than {big.overrides}, which exceeds --max-mb {kw['max_mb']:g}; "
                                           f"run with --max-mb 0 to include it")
                continue
            wave.append(i)
        results = engine.map_tasks(_point_task, [(todo[i], kw) for i in wave], jobs=jobs, scheduler=scheduler,
                                   desc="area", labels=[f"{todo[i].name} {todo[i].overrides or '(defaults)'}"
                                                        for i in wave])
        for i, ap in zip(wave, results):
            out[i] = ap
            if ap.result is None:
                skipped[ap.module].append(ap.design)
    return out


def _dominates(p: registry.DesignPoint, q: registry.DesignPoint) -> bool:
    """Whether ``p`` is at least as large as ``q``: the same module, and every parameter in which they differ
    numeric in both and not smaller in ``p``."""
    if p.name != q.name:
        return False
    keys = [k for k in p.params if p.params[k] != q.params.get(k)]
    if not keys or any(not isinstance(p.params[k], (int, float)) or not isinstance(q.params.get(k), (int, float))
                       for k in keys):
        return False
    return all(p.params[k] >= q.params[k] for k in keys)
