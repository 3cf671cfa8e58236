"""Multi-GPU NVLink system configurations as data (``sim_models/configs/systems.toml``), loaded and validated.

``load_system("gh200-nvl32")`` returns a :class:`SystemConfig`; a bad or missing field raises ``ValueError``
naming the system and the field. Every figure's source is in ``docs/estimator.md``.
"""

import dataclasses
from pathlib import Path

from .moe_config import CONFIG_DIR, _load_table, load_entry

__all__ = ["SystemConfig", "load_system", "system_names"]


@dataclasses.dataclass(frozen=True)
class SystemConfig:
    name: str
    description: str
    gpus: int
    links_per_gpu: int
    link_gbps: float            # GB/s per link per direction
    link_efficiency: float      # achievable / raw, bulk unicast with 256-B payload packets
    bf16_tflops: float
    fp8_tflops: float
    sms: int
    hbm_tbps: float
    switch_clock_ghz: float
    port_bytes_per_cycle: int
    switch_latency_ns: float    # default when the RTL figure is missing
    link_latency_ns: float
    kernel_overhead_us: float
    l2_mb: float = 0.0          # L2 cache per GPU, MB (tile-level weight reuse; 0: none)

    def __post_init__(self):
        def need(cond, field, what):
            if not cond:
                raise ValueError(f"system {self.name!r}: field {field!r}={getattr(self, field)!r} {what}")
        for f in ("gpus", "links_per_gpu", "sms", "port_bytes_per_cycle"):
            need(isinstance(getattr(self, f), int) and not isinstance(getattr(self, f), bool)
                 and getattr(self, f) > 0, f, "must be a positive integer")
        for f in ("link_gbps", "bf16_tflops", "fp8_tflops", "hbm_tbps", "switch_clock_ghz"):
            need(isinstance(getattr(self, f), (int, float)) and getattr(self, f) > 0, f, "must be a positive number")
        for f in ("switch_latency_ns", "link_latency_ns", "kernel_overhead_us", "l2_mb"):
            need(isinstance(getattr(self, f), (int, float)) and getattr(self, f) >= 0, f,
                 "must be a non-negative number")
        need(self.gpus >= 2, "gpus", "must be at least 2 (expert parallelism needs a peer)")
        need(isinstance(self.link_efficiency, (int, float)) and 0 < self.link_efficiency <= 1,
             "link_efficiency", "must be in (0, 1]")
        need(self.port_bytes_per_cycle in (16, 32, 64), "port_bytes_per_cycle",
             "must be a flit width of the packet format: 16, 32 or 64 bytes")
        # A switch port must carry one link at line rate, or the RTL figures do not describe this system.
        need(self.port_bytes_per_cycle * self.switch_clock_ghz >= self.link_gbps * (1 - 1e-9), "link_gbps",
             f"exceeds one switch port's datapath ({self.port_bytes_per_cycle} B x {self.switch_clock_ghz} GHz)")

    @property
    def gpu_link_bytes_per_s(self) -> float:
        """Raw bytes/s per GPU per direction (all links)."""
        return self.links_per_gpu * self.link_gbps * 1e9

    @property
    def port_bytes_per_s(self) -> float:
        """Bytes/s one switch port's datapath moves at 1 flit/cycle (the unit the RTL throughputs use)."""
        return self.port_bytes_per_cycle * self.switch_clock_ghz * 1e9

    def cycles_to_s(self, cycles: float) -> float:
        return cycles / (self.switch_clock_ghz * 1e9)

    def replace(self, **changes) -> "SystemConfig":
        """A copy with some fields changed (validated again), e.g. for sensitivity sweeps."""
        return dataclasses.replace(self, **changes)


def system_names(path: Path | None = None) -> list[str]:
    return sorted(_load_table(path or CONFIG_DIR / "systems.toml"))


def load_system(name: str, path: Path | None = None) -> SystemConfig:
    return load_entry(SystemConfig, "system", name, path or CONFIG_DIR / "systems.toml")
