"""Power workloads: which cocotb run gives a module its switching activity. One line per module.

``WORKLOADS[name] = Workload(test_module, testcase, env)``: the cocotb test drives module ``name``
with realistic traffic for ``warmup`` + ``cycles`` cycles and writes a JSON (path in ``env["out"]``)
with ``window_ps`` (the measurement window's simulation-time span), the flit counts that the energy
per flit is computed from (``dispatched_flits``, ``reduced_flits``) and optionally ``events`` (name ->
count in the window, e.g. translations: the report gives the energy per event). ``warmup`` in the
registration is the least warm-up the workload needs to reach its steady state (the power command's
``--warmup`` is raised to it). :mod:`synth.vcd_run` runs it with a VCD dump. A module without a
workload gets a *vectorless* estimate (stated in the report).
"""

import dataclasses

__all__ = ["Workload", "WORKLOADS", "get"]


@dataclasses.dataclass(frozen=True)
class Workload:
    test_module: str
    testcase: str
    env: dict = dataclasses.field(default_factory=dict)
    doc: str = ""
    warmup: int = 0          # least warm-up (cycles) before the measurement window


WORKLOADS: dict[str, Workload] = {}


def register(name: str, test_module: str, testcase: str, doc: str = "", warmup: int = 0, **env) -> None:
    WORKLOADS[name] = Workload(test_module, testcase, dict(env), doc, warmup)


def get(name: str) -> Workload | None:
    return WORKLOADS.get(name)


# ---------------------------------------------------------------------------------------------------------
register("switch", "synth.workloads.switch", "moe_dispatch", model="deepseek-v3",
         doc="MoE dispatch, DeepSeek-V3 destination masks, back-to-back dymultimem.st packets")
register("switch_fifo", "synth.workloads.switch", "moe_dispatch", model="deepseek-v3",
         doc="MoE dispatch, DeepSeek-V3 destination masks, back-to-back dymultimem.st packets")
register("al_tlb", "synth.workloads.al_tlb", "moe_translate", model="deepseek-v3", tile=16, spacing=17, latency=1000,
         warmup=3000, doc="one egress port's DeepSeek-V3 dispatch translations, one per 17 cycles, steady state")
register("reduction_engine", "synth.workloads.reduction", "moe_combine_engine", model="deepseek-v3", length=16,
         latency=1000, warmup=1300, doc="DeepSeek-V3 combine ld_reduce, BF16 16-flit requests, contribution "
                                        "link saturated, 1000-cycle reads")
register("ld_reduce_unit", "synth.workloads.reduction", "moe_combine_engine", model="deepseek-v3", length=16,
         latency=1000, warmup=1300, doc="DeepSeek-V3 combine ld_reduce, BF16 16-flit requests, contribution "
                                        "link saturated, 1000-cycle reads")
register("reduction_buffer", "synth.workloads.reduction", "moe_combine_buffer", model="deepseek-v3", gpus=64,
         length=16, latency=1000, warmup=1300, doc="DeepSeek-V3 combine contributions (64 GPUs), BF16 "
                                                   "16-flit requests, one contribution flit per cycle")
register("token_tracker", "synth.workloads.gpu_side", "tracker_dispatch", model="deepseek-v3", gpus=8,
         doc="one GPU of an 8-GPU DeepSeek-V3 layer, arrivals over 18 links, lockstep with the scheduler's table")
register("request_gen", "synth.workloads.gpu_side", "reqgen_fused", model="deepseek-v3",
         doc="fused pipeline uplink: DeepSeek-V3 dymultimem.st rows and ld_reduce combine requests, line rate")
register("receive_path", "synth.workloads.gpu_side", "rx_dispatch", model="deepseek-v3", gpus=8,
         doc="one downlink at line rate: DeepSeek-V3 DYN_ST token rows with metadata, arrivals reported")
register("dysharp_switch", "synth.workloads.dysharp_switch", "moe_layer", model="deepseek-v3", lat=40, warmup=400,
         doc="one MoE layer per GPU: DeepSeek-V3 dymultimem.st dispatch interleaved with its BF16 ld_reduce "
             "combine, line rate, GPU answers within 40 cycles")
register("gpu_nic", "synth.workloads.gpu_nic", "moe_layer", model="deepseek-v3", gpus=8, hold=200, warmup=400,
         doc="GPU 2 of an 8-GPU DeepSeek-V3 layer on the integrated switch: its row stores and ld_reduce combine "
             "up, TLB fills, translated token rows and RED_READs down, dispatch and combine interleaved")
