"""Power workloads: which cocotb run gives a module its switching activity. One line per module.

``WORKLOADS[name] = Workload(test_module, testcase, env)``: the cocotb test drives module ``name``
with realistic traffic for ``warmup`` + ``cycles`` cycles and writes a JSON (path in ``env["out"]``)
with ``window_ps`` (the measurement window's simulation-time span) and the flit counts that the energy
per flit is computed from (``dispatched_flits``, ``reduced_flits``). :mod:`synth.vcd_run` runs it with
a VCD dump. A module without a workload gets a *vectorless* estimate (stated in the report).
"""

import dataclasses

__all__ = ["Workload", "WORKLOADS", "get"]


@dataclasses.dataclass(frozen=True)
class Workload:
    test_module: str
    testcase: str
    env: dict = dataclasses.field(default_factory=dict)
    doc: str = ""


WORKLOADS: dict[str, Workload] = {}


def register(name: str, test_module: str, testcase: str, doc: str = "", **env) -> None:
    WORKLOADS[name] = Workload(test_module, testcase, dict(env), doc)


def get(name: str) -> Workload | None:
    return WORKLOADS.get(name)


# ---------------------------------------------------------------------------------------------------------
register("switch", "verif.power_switch", "moe_dispatch", model="deepseek-v3",
         doc="MoE dispatch, DeepSeek-V3 destination masks, back-to-back dymultimem.st packets")
register("switch_fifo", "verif.power_switch", "moe_dispatch", model="deepseek-v3",
         doc="MoE dispatch, DeepSeek-V3 destination masks, back-to-back dymultimem.st packets")
