"""``dysharp list``: the registered modules, their parameters and defaults, and standard points."""

from hw import registry


def add_arguments(p) -> None:
    pass


def run(args) -> int:
    for name in sorted(registry.MODULES):
        spec = registry.get(name)
        print(f"{name}: {spec.description()}")
        params = ", ".join(f"{k}={v!r}" for k, v in spec.params().items())
        print(f"    parameters: {params}")
        print(f"    points: {spec.points}")
    return 0
