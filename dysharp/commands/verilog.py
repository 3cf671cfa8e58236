"""``dysharp verilog``: elaborate registered modules and write their Verilog."""

import time

from tqdm import tqdm

from hw import registry

from .selection import add_selection_arguments, selected_points


def add_arguments(p) -> None:
    p.add_argument("--out", default="build/verilog", help="output folder (default: build/verilog)")
    p.add_argument("--force", action="store_true", help="regenerate even when an up-to-date file exists")
    add_emission_argument(p)
    add_selection_arguments(p)


def add_emission_argument(p) -> None:
    p.add_argument("--emission", choices=registry.EMISSIONS, default="auto",
                   help="flat: every instance written out (what the area flow uses); dedup: one module per "
                        "distinct sub-block (hw/emission.py), same ports and behaviour; auto (default, and what "
                        "the simulations use): dedup for the switches from 8 ports, the integrated switch and "
                        "the system top (a module's dedup_from_ports), flat otherwise")


def generate(points, out, force=False, quiet=False, emission="flat"):
    """Write (or reuse) the Verilog of each :class:`~hw.registry.DesignPoint` with ``emission``
    (:data:`hw.registry.EMISSIONS`); a progress bar on stderr, and with ``quiet=False`` one line per file.
    Returns the paths."""
    paths = []
    bar = tqdm(points, desc="verilog", unit="file", leave=False, dynamic_ncols=True)
    for point in bar:
        bar.set_postfix_str(" ".join([point.name] + [f"{k}={v}" for k, v in point.overrides.items()]))
        t0 = time.time()
        path = point.verilog(out, cache=not force, emission=emission)
        if not quiet:
            tqdm.write(f"{path}  ({path.stat().st_size / 1e6:.2f} MB, {time.time() - t0:.1f} s)")
        paths.append(path)
    return paths


def run(args) -> int:
    points = selected_points(args)
    generate(points, args.out, args.force, emission=args.emission)
    return 0
