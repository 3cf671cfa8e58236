"""``dysharp bench TARGET``: RTL benchmarks. Each target is a module with ``add_arguments``/``run``,
registered here with one line; results are printed and written as JSON under ``build/bench/``."""

import importlib

BENCHES = {
    "switch": ("verif.bench.switch", "NVSwitch throughput/latency under uniform traffic, VOQ vs FIFO"),
    "sim_speed": ("verif.bench.sim_speed", "simulated cycles/s of the switch at full load: cocotb (flat, ports-only build) vs the fast path"),
    "system_speed": ("verif.bench.system_speed", "simulated cycles/s of a whole MoE layer (dysharp system): the cocotb testbench vs the compiled harness, same figures"),
    "estimate": ("sim_models.bench_estimate", "wall time of the speedup estimator's full sweep and its growth"),
    "al_tlb": ("verif.bench.al_tlb", "AL-TLB hit latency, translations/cycle, miss penalty, hit rate vs CAM size, CAM cells"),
    "token_tracker": ("verif.bench.token_tracker", "GPU side: tile table rate/latency, dynamic vs unicast uplink flits, cells vs depth"),
    "elab": ("verif.bench.elab", "Verilog generation time, size, peak memory (and lint cost) against the switch's port count, flat vs deduplicated emission"),
    "dysharp_switch": ("verif.bench.dysharp_switch", "DySHARP switch: dispatch vs NVSwitch, combine at the uplink bound, fused mix, zero-load latency"),
    "soak": ("verif.bench.soak", "DySHARP switch soak: one run of >= 10^6 cycles of mixed dispatch/combine under random stalls, memory latency and TLB misses; 0 lost/duplicated/mismatched, no deadlock"),
    "linerate": ("verif.bench.linerate", "packets and flits per cycle per port against packet length at full load, NVSwitch and DySHARP switch"),
    "lint_blocks": ("verif.bench.lint_blocks", "lint time of the big tops whole against block by block, with the same waived counts"),
    "reduction": ("verif.bench.reduction", "in-switch reduction: ALU conformance, buffer absorption, ld_reduce throughput vs entries"),
}


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="target", metavar="TARGET")
    sub.required = True
    for name, (module, help_text) in BENCHES.items():
        q = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(q)
        q.set_defaults(_bench=module)


def run(args) -> int:
    return importlib.import_module(args._bench).run(args)
