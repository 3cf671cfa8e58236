"""The ``dysharp`` command line. Each subcommand lives in ``dysharp/commands/<name>.py`` and is
registered in ``COMMANDS`` with one line; it provides ``add_arguments(parser)`` and ``run(args) -> int``."""

import argparse
import importlib
import sys

# name -> (module, one-line help shown in `dysharp --help` and at the top of `dysharp NAME --help`)
COMMANDS = {
    "study": ("dysharp.commands.study",
              "Run the whole study (Verilog, lint, benchmarks, area and power, speedup estimate) and write "
              "its report to build/report/report.md."),
    "list": ("dysharp.commands.modules", "List the hardware modules, their parameters and standard points."),
    "verilog": ("dysharp.commands.verilog", "Write the Verilog of the hardware modules to build/verilog/."),
    "lint": ("dysharp.commands.lint", "Check the generated Verilog with verilator --lint-only -Wall."),
    "bench": ("dysharp.commands.bench",
              "Measure one hardware block in simulation (switch, AL-TLB, reduction, GPU side) and write its "
              "figures to build/bench/."),
    "system": ("dysharp.commands.system",
               "Run a whole MoE layer on G GPU NICs and the DySHARP switch (deepep, nvls, fused-unicast, "
               "dysharp-basic, dysharp): numpy check, cycles, flits, link-utilization plot and the estimator's "
               "prediction."),
    "formal": ("dysharp.commands.formal",
               "Prove the blocks' invariants (credit link, ...) with SymbiYosys and z3: a table of properties, "
               "proofs and covers."),
    "faults": ("dysharp.commands.faults", "Run the fault-injection campaign on the DySHARP switch: per fault class its guarantee, injected, detected, recovered, lost data, hangs."),
    "estimate": ("dysharp.commands.estimate",
                 "Estimate an MoE layer's time with DySHARP against DeepEP, NVLS and other baselines."),
    "area": ("dysharp.commands.area",
             "Synthesize modules to Nangate45 gates (yosys, CACTI) and report their area in synth_reports/."),
    "timing": ("dysharp.commands.timing",
               "Time the synthesized blocks at the N5 port clock: the timing table, a point's worst paths, the "
               "AL-TLB fill pair."),
    "power": ("dysharp.commands.power",
              "Estimate modules' power from simulated switching activity and report it in synth_reports/."),
    "export": ("dysharp.commands.export", "Package modules as FuseSoC cores (Verilog + Verilator lint target)."),
    "efficiency": ("dysharp.commands.efficiency",
                   "Print the packet format's payload efficiency: dynamic against explicit addressing."),
}

DESCRIPTION = """\
dysharp is an open RTL model of DySHARP: dynamic in-switch multicast and reduction in an NVSwitch,
plus token-centric fusion of the MoE dispatch-compute-combine pipeline. It generates the hardware's
Verilog, simulates and measures it, estimates its area and power, and turns the measured figures into
an end-to-end MoE speedup estimate."""

EPILOG = """\
typical use:
  dysharp study --quick        smoke run of the whole study (a few minutes)
  dysharp study                the study at the architecture points (report: build/report/report.md)
  dysharp study --full         the exhaustive grids (hours)
  dysharp list                 which modules exist and their parameters
  dysharp verilog -m switch --set ports=16
  dysharp bench al_tlb         one benchmark; figures in build/bench/al_tlb.json
  dysharp estimate --model deepseek-v3 --system gh200-nvl32
  dysharp system --gpus 8 --tokens 256   a whole MoE layer in RTL, every scheme; build/system/

output: Verilog in build/verilog/, benchmark JSON in build/bench/, area and power in synth_reports/,
the study report and its step times in build/report/, tool logs of study steps in build/logs/.
Run 'dysharp COMMAND --help' for a command's options."""


class UsageError(Exception):
    """A bad argument: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dysharp", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
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
