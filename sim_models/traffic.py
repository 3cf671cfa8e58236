"""Traffic accounting: bytes per GPU per link direction per phase for each communication scheme.

Directions: ``up`` is GPU -> switch (the GPU's uplink), ``down`` is switch -> GPU (its downlink). Phases:
``dispatch`` (token vectors to the GPUs that host their experts) and ``combine`` (expert outputs back to
each token's home GPU, summed). Local deliveries (a token's expert on its own GPU) never touch a link.

Schemes (``SCHEMES``):

* ``unicast`` -- DeepEP-like all-to-all: one copy per distinct remote destination GPU in dispatch; in
  combine every remote expert GPU sends one partial (its experts' outputs pre-summed) to the home GPU,
  which sums them.
* ``nvls`` -- static NVLink SHARP: dispatch is an AllGather (``multimem.st`` of every token, the switch
  writes it to the G-1 other GPUs), combine a ReduceScatter (``multimem.ld_reduce`` of each home's own
  tokens over the G-1 other GPUs' partial buffers, zeros included, reduced in the switch). The static group
  ignores the routing. With ``issuer_in_group`` the group's members include the issuing GPU (a multicast
  object bound on all G GPUs, as the RTL switch's static group table has it): each GPU's own rows also
  cross the switch to its own downlink, and the ReduceScatter reads all G partials, the home's own
  through the switch too.
* ``dynamic`` -- DySHARP: ``dymultimem.st`` sends one uplink copy per token that has any remote expert,
  the switch replicates it to the mask; combine is ``dymultimem.ld_reduce``: one header-only request per
  packet up from the home, one read request down to each remote expert GPU, their partials up, one reduced
  result down.
* ``explicit`` -- DySHARP's copy counts, but every packet carries one physical address per destination
  (computed by SMs) instead of the algebraic index: the payload efficiency is
  :func:`hw.packet.wire_flits` with ``scheme="explicit"``. The switch forwards each destination's copy
  with a plain header.

Payload sizes (:func:`payload_bytes`): BF16 is 2 B per channel; FP8 is 1 B per channel plus one FP32 scale
per 128 channels (DeepSeek-V3/DeepEP's fine-grained quantisation). Combine is always BF16. A dispatched row
(:func:`dispatch_row_bytes`) is that hidden vector, plus the token's per-token metadata (gate weights,
expert ids) in flits of its own when it carries any: the one row size :func:`account`'s callers pass, the
RTL's layer (:mod:`verif.models.moe_layer`) and the estimator alike.

Wire sizes come from :mod:`hw.packet` only (``wire_flits``): every packet is a header flit plus payload
flits, at most ``max_payload_bytes`` of payload each; a read/ld_reduce request is the header flits of the
matching store without payload.
"""

import dataclasses
import math

import numpy as np

from hw.packet import wire_flits

__all__ = ["SCHEMES", "DTYPES", "payload_bytes", "dispatch_row_bytes", "TokenDestinations", "WireCosts", "wire_costs",
           "PhaseTraffic", "SchemeTraffic", "account"]

SCHEMES = ("unicast", "nvls", "dynamic", "explicit")
DTYPES = ("bf16", "fp8")
SCALE_GROUP = 128      # channels per FP8 scale (source: DeepSeek-V3 fine-grained quantisation, 1 x 128 tiles)
SCALE_BYTES = 4        # one FP32 scale (source: DeepSeek-V3 / DeepEP's FP8 dispatch)


def payload_bytes(hidden: int, dtype: str) -> int:
    """Bytes of one token's hidden vector on the wire."""
    if dtype == "bf16":
        return 2 * hidden
    if dtype == "fp8":
        return hidden + SCALE_BYTES * math.ceil(hidden / SCALE_GROUP)
    raise ValueError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")


def dispatch_row_bytes(hidden: int, dtype: str, meta_bytes: int = 0, flit_bytes: int = 16) -> int:
    """Bytes of one dispatched token row: the hidden vector (:func:`payload_bytes`) and, when the row carries
    ``meta_bytes`` of per-token metadata (its gate weights and expert ids), the vector padded to whole flits
    and the metadata in whole flits after it (the RTL's row: :func:`verif.models.moe_layer.encode_row`)."""
    x = payload_bytes(hidden, dtype)
    if not (isinstance(meta_bytes, int) and meta_bytes >= 0):
        raise ValueError(f"meta_bytes={meta_bytes!r}: must be an integer >= 0")
    if meta_bytes == 0:
        return x
    return (math.ceil(x / flit_bytes) + math.ceil(meta_bytes / flit_bytes)) * flit_bytes


@dataclasses.dataclass
class TokenDestinations:
    """Where each token goes: ``N = gpus * tokens_per_gpu`` tokens, token ``t`` lives on GPU
    ``t // tokens_per_gpu``; ``hit[t, g]`` is true when GPU ``g`` serves at least one of its top-k picks."""
    gpus: int
    tokens_per_gpu: int
    expert_gpu: np.ndarray          # (N, k) GPU serving each pick

    def __post_init__(self):
        n = self.expert_gpu.shape[0]
        if n != self.gpus * self.tokens_per_gpu:
            raise ValueError(f"{n} tokens is not gpus ({self.gpus}) x tokens_per_gpu ({self.tokens_per_gpu})")
        self.src = np.arange(n) // self.tokens_per_gpu
        self.hit = np.zeros((n, self.gpus), dtype=bool)
        self.hit[np.arange(n)[:, None], self.expert_gpu] = True
        self.remote = self.hit.copy()
        self.remote[np.arange(n), self.src] = False
        self.d_remote = self.remote.sum(axis=1)          # distinct remote destination GPUs per token
        self.d_all = self.hit.sum(axis=1)                # distinct destination GPUs, own GPU included

    @classmethod
    def from_routing(cls, routing: np.ndarray, placement, gpus: int) -> "TokenDestinations":
        """``placement`` is an expert->GPU array (:func:`routing.place_experts`) or an
        :class:`routing.ExpertPlacement` (replicas resolved with its ``gpu_of``)."""
        n = routing.shape[0]
        if n % gpus:
            raise ValueError(f"{n} tokens do not split evenly over {gpus} GPUs")
        t = n // gpus
        if hasattr(placement, "gpu_of"):
            eg = placement.gpu_of(routing, np.arange(n) // t)
        else:
            eg = np.asarray(placement)[routing]
        return cls(gpus, t, eg)

    def mean_distinct_gpus(self) -> float:
        """Measured D: mean distinct destination GPUs per token (own GPU counted), the closed form's quantity."""
        return float(self.d_all.mean())


@dataclasses.dataclass(frozen=True)
class WireCosts:
    """Wire bytes (headers included) of the unit transfers of one scheme, for payloads ``s_d`` / ``s_c``."""
    scheme: str
    flit_bytes: int
    disp_copy: int                 # one dispatch copy (a plain or dynamic packet stream)
    comb_copy: int                 # one combine partial or result
    comb_request: int              # one ld_reduce / read request stream for one token (headers only)
    disp_payload: int
    comb_payload: int
    max_payload_bytes: int

    def disp_up(self, d_remote: np.ndarray) -> np.ndarray:
        """Uplink wire bytes for each token with ``d_remote`` remote destinations (non-NVLS schemes)."""
        d = np.asarray(d_remote)
        if self.scheme == "unicast":
            return d * self.disp_copy
        if self.scheme == "dynamic":
            return np.where(d > 0, self.disp_copy, 0)
        if self.scheme == "explicit":
            return _explicit_bytes(self.disp_payload, d, self.flit_bytes, self.max_payload_bytes, payload=True)
        raise ValueError(f"disp_up is per-token only for unicast/dynamic/explicit, not {self.scheme!r}")

    def comb_request_up(self, d_remote: np.ndarray) -> np.ndarray:
        """Uplink request bytes from the home GPU for each token (ld_reduce schemes; 0 for unicast)."""
        d = np.asarray(d_remote)
        if self.scheme == "unicast":
            return np.zeros_like(d)
        if self.scheme == "explicit":
            return _explicit_bytes(self.comb_payload, d, self.flit_bytes, self.max_payload_bytes, payload=False)
        return np.where(d > 0, self.comb_request, 0)


def _explicit_bytes(size, d, flit_bytes, max_payload, *, payload: bool):
    """Wire bytes of an explicitly addressed store (``payload``) or request (header flits only) of ``size``
    payload bytes to ``d`` destinations, per token."""
    d = np.asarray(d)
    out = np.zeros(d.shape, dtype=np.int64)
    for v in np.unique(d):
        if v <= 0:
            continue
        f = wire_flits(size, scheme="explicit", destinations=int(v), flit_bytes=flit_bytes,
                       max_payload_bytes=max_payload)
        if not payload:
            f -= math.ceil(size / flit_bytes)
        out[d == v] = f * flit_bytes
    return out


def wire_costs(scheme: str, s_d: int, s_c: int, flit_bytes: int = 16, max_payload_bytes: int = 256) -> WireCosts:
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; valid: {', '.join(SCHEMES)}")
    kw = dict(flit_bytes=flit_bytes, max_payload_bytes=max_payload_bytes)
    one = "dynamic" if scheme in ("dynamic", "explicit", "nvls") else "unicast"
    disp = wire_flits(s_d, scheme=one, **kw) * flit_bytes
    comb = wire_flits(s_c, scheme=one, **kw) * flit_bytes
    # A request is the store's header flits without its payload flits.
    req = (wire_flits(s_c, scheme="dynamic", **kw) - math.ceil(s_c / flit_bytes)) * flit_bytes
    return WireCosts(scheme, flit_bytes, disp, comb, req if scheme != "unicast" else 0, s_d, s_c,
                     max_payload_bytes)


@dataclasses.dataclass
class PhaseTraffic:
    """One phase: per-GPU arrays (length G) of payload and wire bytes per direction.

    ``reduce_in``: partial wire bytes the switch reduces on behalf of each home GPU (in-switch reduction
    schemes; the load on that GPU's ports' reduction engines)."""
    up: np.ndarray
    down: np.ndarray
    up_wire: np.ndarray
    down_wire: np.ndarray
    reduce_in: np.ndarray


@dataclasses.dataclass
class SchemeTraffic:
    scheme: str
    dispatch: PhaseTraffic
    combine: PhaseTraffic
    costs: WireCosts

    def totals(self) -> dict:
        """Per-GPU sums over both phases (what a fused pipeline puts on each direction)."""
        return {"up_wire": self.dispatch.up_wire + self.combine.up_wire,
                "down_wire": self.dispatch.down_wire + self.combine.down_wire}


def account(dest: TokenDestinations, scheme: str, s_d: int, s_c: int, flit_bytes: int = 16,
            max_payload_bytes: int = 256, issuer_in_group: bool = False) -> SchemeTraffic:
    """Bytes per GPU, per direction, per phase for ``scheme`` (see the module docstring; ``issuer_in_group``
    is ``nvls``'s only)."""
    c = wire_costs(scheme, s_d, s_c, flit_bytes, max_payload_bytes)
    g, t = dest.gpus, dest.tokens_per_gpu
    src, d = dest.src, dest.d_remote
    per_src = lambda x: np.bincount(src, weights=x, minlength=g)          # noqa: E731
    hosted = dest.remote.sum(axis=0).astype(np.float64)                   # remote (token, GPU) pairs per GPU
    zeros = np.zeros(g)
    if scheme == "nvls":
        own = np.full(g, float(t))
        members = g if issuer_in_group else g - 1          # the GPUs each row goes to / each read reaches
        others = np.full(g, float(members * t))
        disp = PhaseTraffic(own * s_d, others * s_d, own * c.disp_copy, others * c.disp_copy, zeros.copy())
        # ReduceScatter: each home reads its T tokens from the G-1 others: a request per token up, G-1 read
        # requests down at every other GPU, G-1 partials up from each, one result down.
        comb = PhaseTraffic(others * s_c, own * s_c,
                            others * c.comb_copy + own * c.comb_request,
                            own * c.comb_copy + others * c.comb_request,
                            own * members * c.comb_copy)
        return SchemeTraffic(scheme, disp, comb, c)
    any_remote = (d > 0).astype(np.float64)
    disp_down_p = hosted * s_d
    disp_down_w = hosted * c.disp_copy
    if scheme == "unicast":
        disp = PhaseTraffic(per_src(d * float(s_d)), disp_down_p, per_src(c.disp_up(d).astype(float)),
                            disp_down_w, zeros.copy())
        comb = PhaseTraffic(hosted * s_c, per_src(d * float(s_c)), hosted * c.comb_copy,
                            per_src(d * float(c.comb_copy)), zeros.copy())
        return SchemeTraffic(scheme, disp, comb, c)
    # dynamic / explicit: one uplink copy in dispatch, in-switch reduction in combine.
    disp = PhaseTraffic(per_src(any_remote * s_d), disp_down_p, per_src(c.disp_up(d).astype(float)),
                        disp_down_w, zeros.copy())
    comb = PhaseTraffic(hosted * s_c, per_src(any_remote * s_c),
                        hosted * c.comb_copy + per_src(c.comb_request_up(d).astype(float)),
                        per_src(any_remote * c.comb_copy) + hosted * c.comb_request,
                        per_src(d * float(c.comb_copy)))
    return SchemeTraffic(scheme, disp, comb, c)
