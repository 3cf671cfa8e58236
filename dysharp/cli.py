"""The ``dysharp`` command line. Each subcommand lives in ``dysharp/commands/<name>.py`` and is
registered here with one line; it provides ``add_arguments(parser)`` and ``run(args) -> int``."""

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS = {
    "list": ("dysharp.commands.modules", "list the registered hardware modules and their parameters"),
    "verilog": ("dysharp.commands.verilog", "write Verilog for the registered hardware modules"),
    "lint": ("dysharp.commands.lint", "run verilator --lint-only over the generated Verilog"),
    "bench": ("dysharp.commands.bench", "run an RTL benchmark and write its figures under build/"),
    "efficiency": ("dysharp.commands.efficiency", "payload efficiency: dynamic vs explicit addressing"),
    "study": ("dysharp.commands.study", "run the main study end to end and write its report"),
    "estimate": ("dysharp.commands.estimate", "MoE layer-time estimate: DySHARP against the baselines"),
    "area": ("dysharp.commands.area", "synthesize modules over their area grid (yosys, Nangate45, CACTI)"),
    "power": ("dysharp.commands.power", "activity-based power of modules under their workloads"),
}


class UsageError(Exception):
    """A bad argument: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dysharp", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return importlib.import_module(args._module).run(args) or 0
    except (UsageError, ValueError) as e:
        print(f"dysharp {args.command}: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:   # a missing tool or a failed external step, with its own explanation
        print(f"dysharp {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
