"""What the study's area/power step (:func:`dysharp.study_steps.area_power_step`) synthesizes: the blocks of the
64-port DySHARP addition at their architecture points, and the ``--grid`` arguments of ``dysharp area`` that
pin one point. The switch the addition is added to (``EXTRA_POINTS``: 64 ports) is generated and linted by
the default study but costed only by ``--full`` (its 64-port area is about 430 CPU-seconds of synthesis,
and no figure of the addition uses it: the overhead is stated against the NVSwitch's published die)."""

from hw import registry

from . import scaling

# Beside the DySHARP addition's blocks, the study's Verilog and lint steps cover the switch it is added to, at
# its 64 ports (its area: ``dysharp area -m switch --grid switch.ports=64 --max-mb 0`` or ``--full``).
EXTRA_POINTS = {"switch": {"ports": 64}}
SWITCH_AREA_COMMAND = "dysharp area -m switch --grid switch.ports=64 --max-mb 0"
QUICK_AREA = 3        # modules synthesized by --quick

__all__ = ["EXTRA_POINTS", "QUICK_AREA", "SWITCH_AREA_COMMAND", "architecture_points", "grid_args"]


def architecture_points() -> dict[str, dict]:
    """{module: point} of every block the 64-port DySHARP addition counts (``synth.scaling.ROLES``)."""
    points = {}
    for role in scaling.resolve_roles(sorted(registry.MODULES)):
        for m in role["modules"]:
            points[m] = scaling.architecture_point(m) or {}
    return points


def grid_args(module: str, point: dict) -> list[str]:
    """``dysharp area`` arguments that synthesize ``module`` at ``point`` only. A module at its defaults still
    needs one ``--grid`` to replace its area grid by that one point: a scalar parameter at its default (a
    ``--grid`` value list is comma-separated, so a tuple default cannot be one)."""
    items = point.items()
    if not items:
        scalar = [(k, v) for k, v in registry.get(module).params().items() if isinstance(v, (bool, int, float, str))]
        if not scalar:
            raise ValueError(f"{module}: no scalar parameter to pin its default point with --grid")
        items = scalar[:1]
    return ["-m", module] + [f"--grid={module}.{k}={v}" for k, v in items]
