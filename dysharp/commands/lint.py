"""``dysharp lint``: ``verilator --lint-only -Wall`` over the generated Verilog of the selected points. The
check of one file and the warning categories it waives are :mod:`verif.lint`'s; any other warning makes the
command fail.
"""

from tqdm import tqdm

from verif.lint import lint_file

from .selection import add_selection_arguments, selected_points
from .verilog import add_emission_argument, generate


def add_arguments(p) -> None:
    p.add_argument("--out", default="build/verilog", help="Verilog folder (default: build/verilog)")
    p.add_argument("--whole", action="store_true",
                   help="one Verilator run over each whole design, even a large one that repeats blocks (by "
                        "default linted one distinct block at a time: every module and connection, but no "
                        "combinational loop through two blocks; see verif/lint_blocks.py)")
    add_emission_argument(p)
    add_selection_arguments(p)


def run(args) -> int:
    points = selected_points(args)
    paths = generate(points, args.out, quiet=True, emission=args.emission)
    failed = 0
    bar = tqdm(list(zip(points, paths)), desc="lint", unit="file", leave=False, dynamic_ncols=True)
    for point, path in bar:
        bar.set_postfix_str(path.name)
        waived, problems, runs = lint_file(path, point.name, whole=args.whole, with_runs=True)
        status = "clean" if not problems else f"{len(problems)} warning(s)"
        waived_text = ", ".join(f"{k} {v}" for k, v in sorted(waived.items())) or "none"
        how = "" if runs == 1 else f", {runs} blocks"
        tqdm.write(f"{path}: {status} (waived: {waived_text}{how})")
        for line in problems[:20]:
            tqdm.write(f"    {line}")
        failed += bool(problems)
    print(f"lint: {len(paths) - failed} of {len(paths)} file(s) clean")
    return 1 if failed else 0
