"""What the study's area/power step (:func:`dysharp.study_steps.area_power_step`) synthesizes: the blocks of the
64-port DySHARP addition at their architecture points, the switch it is added to, and the ``--grid``
arguments of ``dysharp area`` that pin one point."""

from hw import registry

from . import area, scaling

# Beside the DySHARP addition's blocks, the study costs the switch it is added to, at its 64 ports.
EXTRA_POINTS = {"switch": {"ports": 64}}
QUICK_AREA = 3        # modules synthesized by --quick

__all__ = ["EXTRA_POINTS", "QUICK_AREA", "architecture_points", "grid_args"]


def architecture_points() -> dict[str, dict]:
    """{module: point} of every block the 64-port DySHARP addition counts (``synth.scaling.ROLES``), plus
    ``EXTRA_POINTS``."""
    points = {}
    for role in scaling.resolve_roles(sorted(registry.MODULES)):
        for m in role["modules"]:
            points[m] = scaling.architecture_point(m) or {}
    points.update({m: p for m, p in EXTRA_POINTS.items() if m in registry.MODULES})
    return points


def grid_args(design: "registry.DesignPoint | str", point: dict | None = None) -> list[str]:
    """``dysharp area`` arguments that synthesize ``design`` (a :class:`hw.registry.DesignPoint`, or a module
    name and its overrides ``point``) only: one ``--grid`` per parameter of :func:`synth.area.pin_items` (a
    point at its defaults pins one scalar parameter at its default)."""
    design = registry.point(design, point)
    return ["-m", design.name] + [f"--grid={design.name}.{k}={v}" for k, v in area.pin_items(design)]
