"""MoE model configurations as data (``sim_models/configs/models.toml``), loaded and validated.

``load_model("deepseek-v3")`` returns a :class:`ModelConfig`; a bad or missing field raises
``ValueError`` naming the model and the field.
"""

import dataclasses
import tomllib
from pathlib import Path

__all__ = ["ModelConfig", "load_model", "model_names", "CONFIG_DIR"]

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str
    hidden: int
    routed_experts: int
    top_k: int
    expert_ffn: int
    shared: int
    moe_layers: int
    layers: int
    n_group: int = 0       # DeepSeek group-limited routing: expert groups (0 = unrestricted)
    topk_group: int = 0    # groups a token may pick from

    def __post_init__(self):
        def need(cond, field, what):
            if not cond:
                raise ValueError(f"model {self.name!r}: field {field!r}={getattr(self, field)!r} {what}")
        for f in ("hidden", "routed_experts", "top_k", "expert_ffn", "moe_layers", "layers"):
            need(isinstance(getattr(self, f), int) and getattr(self, f) > 0, f, "must be a positive integer")
        need(isinstance(self.shared, int) and self.shared >= 0, "shared", "must be a non-negative integer")
        need(self.top_k <= self.routed_experts, "top_k", "must not exceed routed_experts")
        need(self.moe_layers <= self.layers, "moe_layers", "must not exceed layers")
        need(self.n_group >= 0 and self.topk_group >= 0, "n_group", "must be non-negative")
        if self.n_group:
            need(self.routed_experts % self.n_group == 0, "n_group", "must divide routed_experts")
            need(0 < self.topk_group <= self.n_group, "topk_group", "must be in 1..n_group")
            need(self.top_k <= self.topk_group * self.routed_experts // self.n_group, "top_k",
                 "must fit in topk_group groups")


def _load_table(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path.name}: {e}") from None


def model_names(path: Path | None = None) -> list[str]:
    return sorted(_load_table(path or CONFIG_DIR / "models.toml"))


def load_entry(cls, kind: str, name: str, path: Path):
    """``cls(name=..., **entry)`` for the entry ``name`` of the TOML table at ``path`` (``kind`` names it in
    messages): unknown names, unknown fields and missing fields without a default are rejected with
    the valid choices."""
    table = _load_table(path)
    key = name.lower()
    if key not in table:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(table))}")
    fields = {f.name for f in dataclasses.fields(cls)} - {"name"}
    entry = table[key]
    unknown = set(entry) - fields
    if unknown:
        raise ValueError(f"{kind} {key!r}: unknown field(s) {', '.join(sorted(unknown))}; "
                         f"valid: {', '.join(sorted(fields))}")
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing = required - {"name"} - set(entry)
    if missing:
        raise ValueError(f"{kind} {key!r}: missing field(s) {', '.join(sorted(missing))}")
    return cls(name=key, **entry)


def load_model(name: str, path: Path | None = None) -> ModelConfig:
    return load_entry(ModelConfig, "model", name, path or CONFIG_DIR / "models.toml")
