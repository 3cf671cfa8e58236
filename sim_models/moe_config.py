"""MoE model configurations as data (``sim_models/configs/models.toml``), loaded and validated.

``load_model("deepseek-v3")`` returns a :class:`ModelConfig`; a bad or missing field raises
``ValueError`` naming the model and the field.
"""

import dataclasses
import functools
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
    # Attention and non-MoE parts (end-to-end model, ``end_to_end.py``); field meanings in models.toml.
    attention: str          # "mla" | "gqa"
    heads: int
    kv_heads: int
    head_dim: int           # GQA (0 for MLA)
    q_lora_rank: int        # MLA (0 for GQA)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    local_window: int       # 0: every layer attends to the whole context
    local_kind: str         # "none" | "sliding" | "chunked"
    local_layers: int       # layers with the local window
    dense_ffn: int          # intermediate size of the dense (non-MoE) layers
    shared_ffn: int         # intermediate size of one shared expert
    vocab: int
    n_group: int = 0       # DeepSeek group-limited routing: expert groups (0 = unrestricted)
    topk_group: int = 0    # groups a token may pick from
    gated: bool = True     # expert FFN: True = gated (SwiGLU: GEMM-1 is hidden x 2*ffn, the gate and up
    #                        projections); False = a plain two-GEMM MLP (hidden x ffn, activation, ffn x hidden)

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
        need(isinstance(self.gated, bool), "gated", "must be true or false")
        if self.n_group:
            need(self.routed_experts % self.n_group == 0, "n_group", "must divide routed_experts")
            need(0 < self.topk_group <= self.n_group, "topk_group", "must be in 1..n_group")
            need(self.top_k <= self.topk_group * self.routed_experts // self.n_group, "top_k",
                 "must fit in topk_group groups")
        self._check_attention(need)

    def _check_attention(self, need):
        def nat(f):
            v = getattr(self, f)
            return isinstance(v, int) and not isinstance(v, bool) and v >= 0
        mla = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        for f in ("heads", "kv_heads", "head_dim", "local_window", "local_layers", "dense_ffn", "shared_ffn",
                  "vocab") + mla:
            need(nat(f), f, "must be a non-negative integer")
        need(self.attention in ("mla", "gqa"), "attention", "must be 'mla' or 'gqa'")
        need(self.heads > 0 and self.vocab > 0, "heads" if self.heads <= 0 else "vocab", "must be positive")
        if self.attention == "gqa":
            need(self.head_dim > 0, "head_dim", "must be positive for GQA")
            need(0 < self.kv_heads <= self.heads and self.heads % self.kv_heads == 0, "kv_heads",
                 "must be positive and divide heads")
            for f in mla:
                need(getattr(self, f) == 0, f, "must be 0 for GQA (an MLA dimension)")
        else:
            need(self.head_dim == 0, "head_dim", "must be 0 for MLA (use the qk_*/v_head_dim fields)")
            for f in mla:
                need(getattr(self, f) > 0, f, "must be positive for MLA")
        need(self.local_kind in ("none", "sliding", "chunked"), "local_kind", "must be none, sliding or chunked")
        need((self.local_kind == "none") == (self.local_window == 0), "local_window",
             "must be 0 exactly when local_kind is 'none'")
        need(self.local_layers <= self.layers and (self.local_window > 0 or self.local_layers == 0),
             "local_layers", "must be 0 without a local window and at most layers")
        need((self.dense_ffn > 0) == (self.layers > self.moe_layers), "dense_ffn",
             "must be positive exactly when the model has dense layers (layers > moe_layers)")
        need((self.shared_ffn > 0) == (self.shared > 0), "shared_ffn",
             "must be positive exactly when the model has shared experts")


def _load_table(path: Path) -> dict:
    """The TOML table at ``path``, parsed once per content of the file (callers read it, never change it)."""
    path = Path(path)
    return _parse_table(path.name, path.read_bytes())


@functools.lru_cache(maxsize=32)
def _parse_table(name: str, text: bytes) -> dict:
    try:
        return tomllib.loads(text.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{name}: {e}") from None


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
