"""One MoE layer over G GPUs as the system testbench runs it: routing, data, the numpy reference, and the
per-GPU work lists of the five schemes. Independent of the RTL (it imports only packet/descriptor
definitions and :mod:`sim_models`).

``plan = build_layer(LayerParams(model="deepseek-v3", gpus=4, tokens=64, hidden=128, seed=1))`` gives a
:class:`MoeLayer`:

* **Routing** from :mod:`sim_models` for the real model: its expert count, top-k and routing rule
  (``routing_from_spec("auto")``: DeepSeek group-limited routing when the model has ``n_group``, else
  uniform top-k), contiguous placement over G GPUs (:func:`sim_models.routing.place_experts`), token
  ``t`` at home GPU ``t // tokens``.
* **The plane.** ``system`` (default: :func:`plane_system` of G, the NVLink4 board ``hgx-h100`` up to 64
  GPUs, the NVLink5 plane ``nvl72`` past them) gives the GEMM roofline, the link count and the flit: its
  ``port_bytes_per_cycle`` (16 B, or 32 B on NVLink5) is the width of every flit, row and memory word of
  the layer (:attr:`MoeLayer.flit_bytes`), and G picks the header format that flit carries
  (:func:`hw.packet.header_format`: past 64 ports the wide one, which needs 256-bit flits).
* **Redundant experts** (``redundant_experts`` = R, default 0): where G does not divide the model's E
  experts (DeepSeek-V3's 256 on 72 GPUs), R more expert *slots* hold replicas of the R most-loaded experts
  of this routing, so that the E + R slots split evenly (256 + 32 = 288 = 72 x 4, as DeepSeek-V3's
  deployment adds 32 redundant experts). Slots ``0..E-1`` are the experts, slot ``E + i`` a replica of
  :attr:`MoeLayer.replicated` ``[i]``; slots are placed contiguously like experts. A token that picks a
  replicated expert goes to its replica when its home GPU is odd, to the original when even (each copy
  serves half the homes; deterministic, so every scheme routes alike). The routing, work lists, Tile
  Status Tables and metadata flits name slots; a slot computes its expert's FFN, so the reference is the
  unreplicated layer's.
* **Scaled hidden size.** ``hidden`` replaces the model's hidden size for the data on the wire and the
  numerics; ``hidden_factor = model.hidden / hidden`` is stated in :meth:`MoeLayer.describe`. GEMM times
  are the real model's (:class:`sim_models.gemm.GemmModel` on the real ``hidden x expert_ffn`` expert:
  :meth:`MoeLayer.gemm_parts`, the GEMM stand-in's work; :meth:`MoeLayer.gemm_tile_cycles` states one full
  tile on ``sms_per_tile`` SMs, the unit of an override) divided by ``hidden_factor`` (both link bytes
  and GEMM work are linear in the hidden size, so their ratio is the real model's) and multiplied by
  ``links_per_gpu / rtl_links``: the RTL system gives each GPU one switch port, a real GPU has
  ``links_per_gpu`` (18 on NVLink4), so link time per byte is that much longer in the RTL and GEMM time
  must be too. Result in port-clock cycles
  (``switch_clock_ghz`` of the system). ``gemm_cycles`` overrides them (short simulations; stated).
* **Data.** Token rows ``x`` are integers in -2..2 (exact in FP8 e4m3 and BF16), gate weights are in
  {1, 1/2, 1/4}, and each expert is a SwiGLU-shaped FFN ``E(x) = W_down (relu(W_gate x) * (W_up x))``
  whose weights are sparse ternary (one +-1 per row) with ``ffn_compute`` intermediate channels (the
  numerics only; the GEMM *time* uses the model's real ``expert_ffn``). Every ``E(x)`` is an integer in
  -4..4, so every partial and full sum ``sum_k g_k E_k(x)`` is a multiple of 1/4 below 32 in magnitude:
  exact in BF16 (8 significant bits) in any summation order. The reference is therefore bit-exact
  whatever order the switch reduces in.
* **Rows on the wire.** A dispatched row is the hidden vector (FP8: ``hidden`` bytes + one FP32 scale per
  128 channels, all scales 1.0; BF16: ``2 hidden`` bytes), then one flit of gate weights (8 x BF16, in
  the order of the metadata's experts; DeepEP sends ``topk_weights`` with the token likewise), then the
  metadata flit (:func:`hw.gpu_nic.receive_path.pack_token_meta`, the top-k global expert ids), last.
  A combine row is the hidden vector in BF16. Rows occupy ``1 << row_shift`` bytes. Flit ``i`` of a row
  holds its bytes ``16 i .. 16 i + 15`` little-endian (byte 0 in bits 0-7).
* **Local pairs never touch a link** (as :mod:`sim_models.traffic` counts), except under ``nvls``: a
  token's experts on its own home GPU are computed there from its own row (:attr:`GpuWork.local_tiles`,
  ready at cycle 0) and their partial added at home; masks name remote GPUs only.

Schemes (:data:`SCHEMES`), as descriptor streams (:class:`verif.models.gpu_nic.Desc`, i.e.
:class:`hw.gpu_nic.request_gen.Descriptor`) per GPU, :class:`GpuWork`:

* ``deepep`` (request generator in unicast mode): dispatch ``STORE`` with the remote mask (one ``WRITE``
  per destination to ``rbase[G_DISP] + (t << row_shift)``: a symmetric window indexed by the global token
  id); after all GEMMs each expert GPU *pushes* its pre-summed partial of every remote token home with a
  unicast ``STORE`` of index ``t`` to its own stripe of the home's partial rows,
  ``rbase[G_PART] = PART_BASE + ((src * N) << row_shift)``, so at row ``src * N + t`` (no read requests: what
  ``traffic.py``'s ``unicast`` combine counts), interleaved over the homes with each GPU starting at the
  next GPU (no incast: every home receives from one GPU at a time); the home sums its local partial and
  the pushed ones.
* ``fused-unicast``: the token-centric fusion without in-switch compute: ``deepep``'s descriptors, but
  each expert GPU pushes its partial of a token home as soon as its own pairs of that token are released
  by its Tile Status Table (:attr:`ReturnItem.pairs`), ahead of dispatch descriptors not yet taken, ties
  in ``deepep``'s interleaved order: combine overlaps dispatch, with no barrier.
* ``dysharp-basic`` (dynamic mode): dispatch ``dymultimem.st`` (``DYN_ST``, group ``G_DISP``, index =
  global token id); after all GEMMs, combine ``dymultimem.ld_reduce`` (group ``G_COMB``, BF16 add) over the
  remote GPUs holding the token's experts, result at ``OUT_BASE`` + row; the home adds its local partial.
* ``dysharp``: the same descriptors, fused: dispatch in token order, each combine issued once the token's
  pairs are released (:attr:`CombineItem.pairs`), in the order the reference token-centric scheduler
  (:func:`sim_models.scheduler.schedule`) plans (``Schedule.combine_issue``).
* ``nvls`` (request generator in static mode): the NVLS baseline, static ``multimem`` over the switch's
  static group of all G GPUs (:meth:`MoeLayer.static_groups`; the switch admits only members, so the issuer
  is one), in sequence like ``deepep``. Dispatch is an AllGather: every home token is one ``multimem.st``
  (``MM_ST``, handle ``G_DISP``) of its row to ``rbase[G_DISP] + (t << row_shift)`` = the symmetric window
  row of the global token id on every GPU, its own included, whatever the routing. Each GPU computes its
  experts' pairs of every token from the window, its own tokens too (no local tiles: its own rows came
  back through the switch like the others). After all GEMMs, combine is a ReduceScatter: each home issues
  one ``multimem.ld_reduce`` (``MM_LD_REDUCE``, handle ``G_COMB``, BF16 add) per home token over the
  group, which reads every GPU's partial row ``COMB_BASE + (t << row_shift)``; a GPU that hosts none of
  the token's experts holds a zero row there (:meth:`MoeLayer.zero_partials`: the partial buffer is
  zero-filled before the layer), and the result at ``OUT_BASE`` + row is the whole output.

Memory manager (per GPU, :meth:`MoeLayer.mm_commands`): ``G_DISP`` in alloc mode on layout 0 at
``WIN_BASE`` (the compact receive buffer, slot = window row), ``G_COMB`` lookup-only on the same layout at
``COMB_BASE`` (the expert-output rows, same slot). AL-TLB (:meth:`MoeLayer.tlb_config`): both groups on
every port, all GPUs members, ``rows`` = N. The switch's static group table (:meth:`MoeLayer.static_groups`,
``nvls`` only): handles ``G_DISP`` and ``G_COMB``, all GPUs members.

Flits (:meth:`MoeLayer.predicted_flits`): :func:`sim_models.traffic.account` of the same routing with the
rows' real sizes (``nvls`` with ``issuer_in_group``: the static group holds the issuer), per GPU per
direction per phase, plus the DySHARP switch's AL-TLB fill traffic (one
header-only ``TLB_FILL`` down and one ``TLB_FILL_RESP`` up the destination's link per translated key
(group, index, destination); exact when a row is one packet, otherwise when no key is evicted between the
packets of its row), which ``traffic.py`` does not model.
"""

import dataclasses
import functools
import math
import struct

import numpy as np

from hw.gpu_nic.receive_path import META_ENTRY_BITS, META_EXPERT_BITS, pack_token_meta
from hw.gpu_nic.request_gen import DescOp
from amaranth.hdl import Shape
from amaranth.lib import data

from hw.packet import MAX_SWITCH_PORTS, NARROW, EType, RedOp, UnicastRoute, header_format
from sim_models import moe_config, routing as routing_mod, traffic
from sim_models.gemm import GemmModel
from sim_models.scheduler import SchedulerParams, schedule, token_row_flits
from sim_models.system_config import load_system

from verif.models.gpu_nic import Desc

__all__ = ["SCHEMES", "TRAFFIC_SCHEME", "UNICAST_SCHEMES", "STATIC_SCHEMES", "FUSED_SCHEMES",
           "LayerParams", "MoeLayer", "GpuWork", "CombineItem", "ReturnItem", "build_layer", "encode_row",
           "encode_rows", "decode_row", "decode_row_bytes", "decode_rows_bytes", "encode_bf16_row",
           "encode_bf16_bytes", "encode_bf16_rows_bytes", "decode_bf16_row", "expert_ffn",
           "G_DISP", "G_COMB", "G_PART", "X_BASE", "WIN_BASE", "COMB_BASE", "OUT_BASE", "PART_BASE",
           "LOCAL_BASE", "FLIT_BYTES", "plane_system", "replica_choices", "expert_split"]

SCHEMES = ("deepep", "fused-unicast", "nvls", "dysharp-basic", "dysharp")
TRAFFIC_SCHEME = {"deepep": "unicast", "fused-unicast": "unicast", "nvls": "nvls", "dysharp-basic": "dynamic",
                  "dysharp": "dynamic"}
UNICAST_SCHEMES = tuple(s for s in SCHEMES if TRAFFIC_SCHEME[s] == "unicast")   # request generator in unicast mode
STATIC_SCHEMES = ("nvls",)                        # request generator in static mode, the switch's static groups
FUSED_SCHEMES = ("fused-unicast", "dysharp")       # token-centric: combine overlaps dispatch, no barrier
DTYPES = ("fp8", "bf16")
FLIT_BYTES = 16             # the narrow plane's flit (a layer's own is MoeLayer.flit_bytes)
#: The system a layer of G GPUs stands for when none is named: an NVLink4 board up to the narrow header's
#: 64 ports, the NVLink5 NVL72 plane past them (its 32-B port is the 256-bit flit the wide header needs).
PLANE_SYSTEMS = (("hgx-h100", NARROW.max_ports), ("nvl72", MAX_SWITCH_PORTS))
META_ENTRIES = 8
ROW_META_FLITS = 2          # a dispatched row's gate flit and metadata flit, after the hidden vector

# Group handles: memory manager + AL-TLB (dynamic), request-generator rbase entries (unicast, static) and
# the switch's static group table (nvls).
G_DISP, G_COMB, G_PART = 0, 1, 1
# Byte address map, the same on every GPU (regions far apart; rows are 1 << row_shift bytes).
X_BASE = 0x0100_0000        # the home GPU's own token rows (dispatch source), row = local token
WIN_BASE = 0x0400_0000      # token window (receive buffer): dysharp slot / deepep, nvls global token id
COMB_BASE = 0x0800_0000     # expert-output (partial) rows, one per window row
OUT_BASE = 0x0C00_0000      # ld_reduce results at the home GPU, row = local token
LOCAL_BASE = 0x0E00_0000    # the home's partial of its own local experts, row = local token
PART_BASE = 0x1000_0000     # deepep: partials pushed home, row = src * N + global token
ADDR_BITS = Shape.cast(data.Layout.cast(UnicastRoute)["addr"].shape).width   # a unicast address

GATES = (1.0, 0.5, 0.25)
X_VALUES = (-2, -1, 0, 1, 2)
# FP8 e4m3 encodings of the integers x may take (sign bit 7, exponent bias 7, 3 mantissa bits).
_FP8 = {0: 0x00, 1: 0x38, 2: 0x40, -1: 0xB8, -2: 0xC0}
_FP8_INV = {v: k for k, v in _FP8.items()}
_FP8_VALUE = np.full(256, np.nan)          # byte -> value (NaN: not a value of the layer's data)
_FP8_VALUE[list(_FP8_INV)] = list(_FP8_INV.values())


def plane_system(gpus: int) -> str:
    """The :mod:`sim_models.system_config` entry a layer of ``gpus`` GPUs stands for by default
    (:data:`PLANE_SYSTEMS`): its ``port_bytes_per_cycle`` is the RTL's flit (128 bits up to 64 GPUs, 256
    past them, where the wide header needs it)."""
    for name, most in PLANE_SYSTEMS:
        if gpus <= most:
            return name
    raise ValueError(f"gpus={gpus}: at most {MAX_SWITCH_PORTS} (the widest header's mask)")


def replica_choices(experts: int, gpus: int, most: int = 8) -> list[int]:
    """The first ``most`` redundant-expert counts R in 0..``experts`` that make ``experts + R`` split evenly
    over ``gpus`` GPUs."""
    return [r for r in range(experts + 1) if (experts + r) % gpus == 0][:most]


def expert_split(experts: int, redundant: int, gpus: int) -> tuple[list[int], list[int]] | None:
    """None when ``experts + redundant`` expert slots split evenly over ``gpus`` GPUs; otherwise what a refusal
    names: the GPU counts (4..128) that split them, and the redundant-expert counts that split over ``gpus``."""
    n = experts + redundant
    if n % gpus == 0:
        return None
    return [g for g in range(4, MAX_SWITCH_PORTS + 1) if n % g == 0], replica_choices(experts, gpus)


@dataclasses.dataclass(frozen=True)
class LayerParams:
    """What to build. ``tokens`` per GPU; ``hidden`` the scaled hidden size (None: 128); ``dtype`` the
    dispatch dtype; ``ffn_compute`` intermediate channels of the numerics stand-in; ``system`` the
    :mod:`sim_models.system_config` entry the GEMM roofline and the link count come from; ``rtl_links``
    switch ports per GPU in the RTL system; SM split as :class:`sim_models.scheduler.SchedulerParams`;
    ``gemm_cycles`` = (GEMM-1, GEMM-2) per full tile to override the derived times; ``redundant_experts``
    replicas of the most-loaded experts (:class:`MoeLayer`, "Redundant experts"). ``system`` None: the
    plane of ``gpus`` GPUs (:func:`plane_system`), whose port width is the layer's flit width."""
    model: str = "deepseek-v3"
    gpus: int = 4
    tokens: int = 64
    hidden: int | None = None
    seed: int = 1
    dtype: str = "fp8"
    tile_size: int = 128
    max_payload: int = 16
    ffn_compute: int = 16
    system: str | None = None
    rtl_links: int = 1
    dispatch_sms: int = 66
    combine_sms: int = 66
    sms_per_tile: int = 33
    switch_latency: int = 11     # DySHARP switch zero-load latency, AL-TLB hit (docs/architecture.md)
    rx_latency: int = 19         # receive path: last flit of a row -> arrival (docs/gpu_side.md)
    notify_cycles: int = 8
    gemm_cycles: tuple[int, int] | None = None
    redundant_experts: int = 0

    def __post_init__(self):
        def bad(field, what):
            raise ValueError(f"LayerParams.{field}={getattr(self, field)!r}: {what}")
        names = moe_config.model_names()
        if self.model.lower() not in names:
            raise ValueError(f"unknown model {self.model!r}; valid: {', '.join(names)}")
        for f in ("gpus", "tokens", "tile_size", "max_payload", "ffn_compute", "rtl_links", "sms_per_tile"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                bad(f, "must be a positive integer")
        if not 4 <= self.gpus <= MAX_SWITCH_PORTS:
            bad("gpus", f"must be in 4..{MAX_SWITCH_PORTS} (the system top's range: the widest header's mask)")
        r = self.redundant_experts
        if not isinstance(r, int) or isinstance(r, bool) or r < 0:
            bad("redundant_experts", "must be an integer >= 0")
        if self.system is None:
            object.__setattr__(self, "system", plane_system(self.gpus))
        if self.tile_size & (self.tile_size - 1):
            bad("tile_size", "must be a power of two")
        if self.dtype not in DTYPES:
            bad("dtype", f"valid: {', '.join(DTYPES)}")
        if self.gemm_cycles is not None and (len(self.gemm_cycles) != 2 or min(self.gemm_cycles) < 1):
            bad("gemm_cycles", "must be two positive cycle counts (GEMM-1, GEMM-2)")


@dataclasses.dataclass
class CombineItem:
    """A home GPU's combine of one token: ``desc`` (a ``LD_REDUCE``; None when the token has no remote
    expert) may issue once every (gpu, global expert) in ``pairs`` (its remote pairs) is released;
    ``planned`` is the scheduler's issue cycle (``dysharp``; -1 otherwise)."""
    token: int
    desc: Desc | None
    pairs: list
    planned: int = -1


@dataclasses.dataclass
class ReturnItem:
    """deepep: expert GPU ``gpu`` pushes its pre-summed partial of ``token`` to the token's home, into
    row ``row`` (= ``gpu * N + token``) of the home's ``PART_BASE`` region."""
    token: int
    gpu: int
    desc: Desc
    pairs: list
    row: int


@dataclasses.dataclass
class GpuWork:
    """One GPU's part of the layer under one scheme."""
    gpu: int
    dispatch: list              # Desc, in issue order
    combine: list               # CombineItem (dynamic schemes), in issue order
    returns: list               # ReturnItem (deepep), in issue order
    local_tiles: list           # (global expert, [tokens]) tiles computed from the GPU's own rows
    home_tokens: list           # global ids of the tokens at home here


_FP8_LO = min(_FP8)
_FP8_BYTE = np.array([_FP8[v] for v in range(_FP8_LO, max(_FP8) + 1)], dtype=np.uint8)   # value - _FP8_LO -> byte


def fp8_bytes(values) -> bytes:
    """FP8 bytes of ``values`` (each truncated to an integer, which must be one of :data:`X_VALUES`)."""
    i = np.asarray(values).astype(np.int64) - _FP8_LO
    if i.size and (i.min() < 0 or i.max() >= len(_FP8_BYTE)):
        bad = sorted({int(v) for v in i.ravel() + _FP8_LO} - set(_FP8))
        raise ValueError(f"values {bad} have no FP8 byte in the layer's data ({', '.join(map(str, _FP8))})")
    return _FP8_BYTE[i].tobytes()


def bf16_bits(values) -> np.ndarray:
    """BF16 bit patterns of ``values`` (which must be exactly representable: checked)."""
    f = np.asarray(values, dtype=np.float32)
    bits = f.view(np.uint32)
    if np.any(bits & 0xFFFF):
        raise ValueError("value not exactly representable in BF16")
    return (bits >> 16).astype(np.uint16)


def bf16_values(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def _to_flits(data: bytes, n: int, fb: int = FLIT_BYTES) -> list[int]:
    data = data.ljust(n * fb, b"\0")
    return [int.from_bytes(data[i * fb:(i + 1) * fb], "little") for i in range(n)]


def _from_flits(flits, fb: int = FLIT_BYTES) -> bytes:
    return b"".join(int(f).to_bytes(fb, "little") for f in flits)


def x_flits(hidden: int, dtype: str, fb: int = FLIT_BYTES) -> int:
    return math.ceil(traffic.payload_bytes(hidden, dtype) / fb)


def encode_row(x, gates, experts, dtype: str, fb: int = FLIT_BYTES) -> list[int]:
    """Flits of ``fb`` bytes of a dispatched row: hidden vector, gate flit, metadata flit (see the module
    docstring)."""
    h = len(x)
    if dtype == "fp8":
        body = fp8_bytes(x) + struct.pack("<f", 1.0) * math.ceil(h / traffic.SCALE_GROUP)
    else:
        body = bf16_bits(x).astype("<u2").tobytes()
    g = np.zeros(META_ENTRIES, dtype=np.float32)
    g[:len(gates)] = gates
    return (_to_flits(body, x_flits(h, dtype, fb), fb) + _to_flits(bf16_bits(g).astype("<u2").tobytes(), 1, fb)
            + [pack_token_meta(experts)])


def encode_rows(x, gates, experts, dtype: str, fb: int = FLIT_BYTES) -> np.ndarray:
    """:func:`encode_row` of every row of ``x`` (n, hidden), ``gates`` (n, k) and ``experts`` (n lists of
    global expert ids) at once: (n, row flits x ``fb``) uint8, each row its flits as little-endian bytes."""
    x = np.asarray(x)
    n, h = x.shape
    nx = x_flits(h, dtype, fb)
    out = np.zeros((n, (nx + 2) * fb), dtype=np.uint8)
    if dtype == "fp8":
        body = np.frombuffer(fp8_bytes(x), dtype=np.uint8).reshape(n, h)
        scales = np.frombuffer(struct.pack("<f", 1.0) * math.ceil(h / traffic.SCALE_GROUP), dtype=np.uint8)
        body = np.concatenate([body, np.broadcast_to(scales, (n, scales.size))], axis=1)
    else:
        body = bf16_bits(x).astype("<u2").view(np.uint8).reshape(n, 2 * h)
    body = body[:, :nx * fb]
    out[:, :body.shape[1]] = body
    g = np.zeros((n, META_ENTRIES), dtype=np.float32)
    gates = np.asarray(gates, dtype=np.float32)
    g[:, :gates.shape[1]] = gates
    gb = bf16_bits(g).astype("<u2").view(np.uint8).reshape(n, 2 * META_ENTRIES)[:, :fb]
    out[:, nx * fb:nx * fb + gb.shape[1]] = gb
    meta = b"".join(pack_token_meta(e).to_bytes(fb, "little") for e in experts)
    out[:, (nx + 1) * fb:] = np.frombuffer(meta, dtype=np.uint8).reshape(n, fb)
    return out


def decode_row(flits, hidden: int, dtype: str, fb: int = FLIT_BYTES):
    """(x as float64, gate weights, global expert ids) of a row's flits, inverse of :func:`encode_row`."""
    return decode_row_bytes(_from_flits(flits, fb), hidden, dtype, fb)


def decode_row_bytes(raw: bytes, hidden: int, dtype: str, fb: int = FLIT_BYTES):
    """:func:`decode_row` of the row's flits as little-endian bytes (``fb`` per flit)."""
    x, gates, experts = decode_rows_bytes(raw, 1, hidden, dtype, fb)
    return x[0], gates[0], experts[0]


def decode_rows_bytes(raw: bytes, n: int, hidden: int, dtype: str, fb: int = FLIT_BYTES):
    """:func:`decode_row_bytes` of ``n`` rows of equal size laid end to end in ``raw``, at once: (x as an
    (n, hidden) float64 array, the rows' gate weights, the rows' global expert ids)."""
    nx = x_flits(hidden, dtype, fb)
    a = np.frombuffer(raw, dtype=np.uint8).reshape(n, len(raw) // n)
    if dtype == "fp8":
        x = _FP8_VALUE[a[:, :hidden]]
        if np.isnan(x).any():
            raise ValueError(f"row bytes {sorted(set(a[:, :hidden].ravel().tolist()) - set(_FP8_INV))} are not FP8 "
                             f"values of the layer's data ({', '.join(map(str, _FP8))})")
    else:
        x = bf16_values(np.ascontiguousarray(a[:, :2 * hidden]).view("<u2")).astype(np.float64)
    g = bf16_values(np.ascontiguousarray(a[:, nx * fb:(nx + 1) * fb]).view("<u2")).astype(np.float64)
    # the metadata flits' entries (unpack_token_meta: the first META_ENTRIES, whole bytes each)
    ent = np.ascontiguousarray(a[:, (nx + 1) * fb:(nx + 2) * fb]).view(f"<u{META_ENTRY_BITS // 8}")
    ent = ent[:, :META_ENTRIES].tolist()
    experts = [[v & ((1 << META_EXPERT_BITS) - 1) for v in row if v >> META_EXPERT_BITS] for row in ent]
    return x, [g[r, :len(e)] for r, e in enumerate(experts)], experts


def encode_bf16_row(v, fb: int = FLIT_BYTES) -> list[int]:
    return _to_flits(encode_bf16_bytes(v, fb), math.ceil(2 * len(v) / fb), fb)


def encode_bf16_bytes(v, fb: int = FLIT_BYTES) -> bytes:
    """:func:`encode_bf16_row`'s flits as little-endian bytes (the last flit zero-padded)."""
    return encode_bf16_rows_bytes(np.asarray(v)[None], fb)


def encode_bf16_rows_bytes(v, fb: int = FLIT_BYTES) -> bytes:
    """:func:`encode_bf16_bytes` of each row of the 2-D ``v``, laid end to end."""
    b = bf16_bits(v).astype("<u2").view(np.uint8)
    out = np.zeros((b.shape[0], math.ceil(b.shape[1] / fb) * fb), dtype=np.uint8)
    out[:, :b.shape[1]] = b
    return out.tobytes()


def decode_bf16_row(flits, hidden: int, fb: int = FLIT_BYTES) -> np.ndarray:
    return bf16_values(np.frombuffer(_from_flits(flits, fb)[:2 * hidden], dtype="<u2")).astype(np.float64)


def expert_ffn(w, x) -> np.ndarray:
    """``E(x) = W_down (relu(W_gate x) * (W_up x))`` for one expert's weights ``w = (gate, up, down)``;
    ``x`` (..., hidden)."""
    gate, up, down = w
    return (np.maximum(x @ gate.T, 0) * (x @ up.T)) @ down.T


def _sparse_ternary(rng, rows, cols):
    m = np.zeros((rows, cols), dtype=np.float64)
    m[np.arange(rows), rng.integers(0, cols, rows)] = rng.choice((-1.0, 1.0), rows)
    return m


class MoeLayer:
    """The layer: routing, data, reference, work lists, configuration and flit prediction (module doc)."""

    def __init__(self, p: LayerParams):
        self.p = p
        self.cfg = cfg = moe_config.load_model(p.model)
        self.hidden = h = p.hidden if p.hidden is not None else 128
        if not isinstance(h, int) or not 16 <= h <= cfg.hidden or h % 16:
            raise ValueError(f"hidden={h!r} must be a multiple of 16 in 16..{cfg.hidden} (the model's hidden size)")
        E, R, G = cfg.routed_experts, p.redundant_experts, p.gpus
        if R > E:
            raise ValueError(f"redundant_experts={R}: at most {E} (one replica of each of {cfg.name}'s experts)")
        if split := expert_split(E, R, G):
            what = f"{E} experts" + (f" + {R} redundant = {E + R}" if R else "")
            raise ValueError(f"{cfg.name}: {what} do not split over {G} GPUs; valid GPU counts: "
                             f"{', '.join(map(str, split[0]))}; or, at G = {G}, redundant_experts "
                             f"{', '.join(map(str, split[1]))}, ...")
        if cfg.top_k > META_ENTRIES:
            raise ValueError(f"{cfg.name}: top-k {cfg.top_k} exceeds the {META_ENTRIES} experts a metadata flit holds")
        # The plane: its port width is the flit, and the GPU count picks the header format that flit carries.
        self.flit_bytes = fb = load_system(p.system).port_bytes_per_cycle
        self.flit_width = 8 * fb
        try:
            self.fmt = header_format(G, self.flit_width)
        except ValueError as e:
            raise ValueError(f"system {p.system!r} ({self.flit_width}-bit flits): {e}") from None
        self.flit_shift = fb.bit_length() - 1
        self.hidden_factor = cfg.hidden / h
        self.G, self.T = G, p.tokens
        self.N = N = G * p.tokens
        if N > 1 << self.fmt.index_bits:
            raise ValueError(f"gpus x tokens = {N} exceeds the {self.fmt.index_bits}-bit algebraic index "
                             f"(the {self.fmt.name} header's)")
        self.E_logical, self.k = E, cfg.top_k
        rng = np.random.default_rng(p.seed)
        logical = routing_mod.routing_from_spec("auto", N, E, self.k, rng, n_group=cfg.n_group,
                                                topk_group=cfg.topk_group)
        self.home = np.arange(N) // self.T
        # Redundant experts: slots E.. hold replicas of the R most-loaded experts of this routing; a token's
        # pick of a replicated expert goes to copy (home GPU mod 2), so each copy serves half the homes.
        self.replicated = np.argsort(-np.bincount(logical.ravel(), minlength=E), kind="stable")[:R]
        self.slot_expert = np.concatenate([np.arange(E), self.replicated]).astype(np.int64)   # slot -> expert
        self.E = E + R                        # expert slots: the ids the work lists, tables and metadata use
        replica = np.arange(E)
        replica[self.replicated] = E + np.arange(R)
        self.routing = np.where((self.home % 2 == 1)[:, None], replica[logical], logical) if R else logical
        self.placement = routing_mod.place_experts(self.E, self.G)
        self.experts_per_gpu = self.E // self.G
        self.expert_gpu = self.placement[self.routing]                       # (N, k)
        self.gates = rng.choice(GATES, size=(N, self.k)).astype(np.float64)
        self.x = rng.choice(X_VALUES, size=(N, h)).astype(np.float64)
        f = p.ffn_compute
        self.weights = [(_sparse_ternary(rng, f, h), _sparse_ternary(rng, f, h), _sparse_ternary(rng, h, f))
                        for _ in range(E)]
        # Rows.
        # + gate flit + metadata flit: traffic.dispatch_row_bytes, the row size the estimator charges too
        self.row_meta_bytes = ROW_META_FLITS * fb
        self.row_flits = token_row_flits(h, dtype=p.dtype, flit_bytes=fb, meta_flits=ROW_META_FLITS)
        self.meta_flit = self.row_flits - 1
        self.comb_flits = math.ceil(traffic.payload_bytes(h, "bf16") / fb)
        self.row_shift = max(self.flit_shift, (max(self.row_flits, self.comb_flits) * fb - 1).bit_length())
        self.row_bytes = 1 << self.row_shift
        self.dest = traffic.TokenDestinations.from_routing(self.routing, self.placement, self.G)
        self._gemm = None
        self._routing_rows = self.routing.tolist()    # per-token expert lists as Python ints: the work lists'
        #                                               loops over 10^5 tokens read these, not numpy scalars
        self._gpu_rows = self.expert_gpu.tolist()      # per token, its experts' GPUs (as _routing_rows)
        self._home_list = self.home.tolist()

    # ----------------------------------------------------------------------------------- numerics
    def expert_out(self, e: int, x) -> np.ndarray:
        """Expert slot ``e``'s output (a replica computes its expert's)."""
        return expert_ffn(self.weights[self.slot_expert[e]], np.asarray(x, dtype=np.float64))

    def pair_output(self, t: int, j: int) -> np.ndarray:
        """``g_{t,j} * E_{routing[t,j]}(x_t)``."""
        return self.gates[t, j] * self.expert_out(int(self.routing[t, j]), self.x[t])

    def reference(self) -> np.ndarray:
        """``out[t] = sum_k g_k E_k(x_t)``, (N, hidden) float64 (exact), each expert run once over all its
        tokens (a token picks an expert once; every sum is exact, so the order of the adds does not matter)."""
        out = np.zeros((self.N, self.hidden))
        order = np.argsort(self.routing, axis=None, kind="stable")
        experts, starts = np.unique(self.routing.ravel()[order], return_index=True)
        for e, lo, hi in zip(experts.tolist(), starts.tolist(), [*starts[1:].tolist(), order.size]):
            rows, js = np.divmod(order[lo:hi], self.k)
            out[rows] += self.gates[rows, js, None] * self.expert_out(e, self.x[rows])
        return out

    def partials(self) -> dict:
        """(gpu, token) -> that GPU's pre-summed partial ``sum over its experts of the token g_k E_k(x_t)``,
        for every GPU holding at least one of the token's experts (the home's own included)."""
        out = {}
        for t in range(self.N):
            for j in range(self.k):
                key = (int(self.expert_gpu[t, j]), t)
                out[key] = out.get(key, 0) + self.pair_output(t, j)
        return out

    def row(self, t: int) -> list[int]:
        """Token ``t``'s dispatched row as flits."""
        return _to_flits(self.row_raw(t), self.row_flits, self.flit_bytes)

    def row_raw(self, t: int) -> bytes:
        """Token ``t``'s dispatched row as little-endian bytes (its flits laid end to end)."""
        return self.rows_bytes[t].tobytes()

    @functools.cached_property
    def rows_bytes(self) -> np.ndarray:
        """Every token's dispatched row (:func:`encode_row`), encoded at once: (N, row_flits x flit bytes)
        uint8, row ``t`` token ``t``'s flits as little-endian bytes."""
        return encode_rows(self.x, self.gates, self._routing_rows, self.p.dtype, self.flit_bytes)

    def remote_mask(self, t: int) -> int:
        h = self._home_list[t]
        return sum(1 << g for g in set(self._gpu_rows[t]) if g != h)

    def local_expert_range(self, g: int) -> tuple[int, int]:
        return g * self.experts_per_gpu, (g + 1) * self.experts_per_gpu

    # ----------------------------------------------------------------------------------- GEMM time
    def gemm_tile_cycles(self) -> tuple[int, int]:
        """(GEMM-1, GEMM-2) port-clock cycles of one full tile on one worker (module docstring)."""
        if self.p.gemm_cycles is not None:
            return tuple(int(v) for v in self.p.gemm_cycles)
        return self.derived_gemm_tile_cycles()

    def derived_gemm_tile_cycles(self) -> tuple[int, int]:
        """(GEMM-1, GEMM-2) cycles of one full tile from the real model (whether or not overridden)."""
        s = load_system(self.p.system)
        gm = GemmModel.for_model(self.cfg, s, self.p.dtype, tile=self.p.tile_size)
        t1, t2 = gm.times(self.p.tile_size, sm_fraction=self.p.sms_per_tile / s.sms)
        k = s.switch_clock_ghz * 1e9 * s.links_per_gpu / self.p.rtl_links / self.hidden_factor
        return max(1, math.ceil(float(t1) * k)), max(1, math.ceil(float(t2) * k))

    def _gemm_model(self) -> GemmModel:
        return GemmModel.for_model(self.cfg, load_system(self.p.system), self.p.dtype, tile=self.p.tile_size)

    def gemm_parts(self, rows, weight_reads=1.0):
        """(compute GEMM-1, memory GEMM-1, compute GEMM-2, memory GEMM-2) port-clock cycles of ``rows``
        tokens of one expert with every SM and all of HBM, reading ``weight_reads`` of its weights: the real
        model's :meth:`GemmModel.parts` scaled as the tile cycles are (module docstring; an override of the
        tile cycles scales them by its ratio to the derived ones). The GEMM stand-in's work
        (:class:`sim_models.gemm_engine.GemmEngine`)."""
        gm, k = self._gemm_scale
        return tuple(float(v) * k for v in gm.parts(rows, weight_reads))

    @functools.cached_property
    def _gemm_scale(self) -> tuple[GemmModel, float]:
        """:meth:`gemm_parts`' model and scale, worked out once (the testbench asks for every tile)."""
        s = load_system(self.p.system)
        k = s.switch_clock_ghz * 1e9 * s.links_per_gpu / self.p.rtl_links / self.hidden_factor
        k *= sum(self.gemm_tile_cycles()) / sum(self.derived_gemm_tile_cycles())
        return self._gemm_model(), k

    def gemm_share(self) -> float:
        """GEMM-1's share of the SMs in the fused pool: its share of the layer's GEMM time with every SM (each
        expert's rows as one GEMM), as the estimator splits its fused engines' SMs."""
        t1, t2 = self._gemm_model().times(np.bincount(self.routing.ravel(), minlength=self.E))
        return float(t1.sum() / (t1.sum() + t2.sum()))

    def scheduler_params(self) -> SchedulerParams:
        g1, g2 = self.gemm_tile_cycles()
        p = self.p
        return SchedulerParams(tile_size=p.tile_size, row_flits=self.row_flits, max_payload=p.max_payload,
                               links=p.rtl_links, switch_latency=p.switch_latency, rx_latency=p.rx_latency,
                               mode="dynamic", gemm1_tile_cycles=g1, gemm2_tile_cycles=g2,
                               dispatch_sms=p.dispatch_sms, combine_sms=p.combine_sms, sms_per_tile=p.sms_per_tile,
                               notify_cycles=p.notify_cycles,
                               combine_issue_cycles=math.ceil(self.comb_flits / p.max_payload))

    def schedule(self):
        """The reference token-centric scheduler's plan of the fused layer (cached)."""
        if self._gemm is None:
            self._gemm = schedule(self.routing, self.placement, self.G, self.scheduler_params(), home=self.home)
        return self._gemm

    # ----------------------------------------------------------------------------------- work lists
    def _chunks(self, tokens):
        ts = self.p.tile_size
        return [tokens[i:i + ts] for i in range(0, len(tokens), ts)]

    def local_tiles(self, g: int, scheme: str | None = None) -> list:
        """(global expert, [tokens]) tiles of GPU ``g``'s experts over its own tokens, token order (none under
        ``nvls``, whose own rows come back through the switch into the window)."""
        if scheme in STATIC_SCHEMES:
            return []
        lo, hi = self.local_expert_range(g)
        toks = {e: [] for e in range(lo, hi)}
        for t in range(g * self.T, (g + 1) * self.T):
            for e in set(self._routing_rows[t]):
                if lo <= e < hi:
                    toks[e].append(t)
        return [(e, c) for e in range(lo, hi) for c in self._chunks(toks[e])]

    def remote_pairs(self, t: int) -> list:
        h = self._home_list[t]
        return [(g, e) for g, e in zip(self._gpu_rows[t], self._routing_rows[t]) if g != h]

    def tracked_pairs(self, t: int, scheme: str) -> list:
        """Token ``t``'s (GPU, global expert) pairs that go through the GPUs' Tile Status Tables: the remote
        ones, or under ``nvls`` all of them (its own rows land in the home's window too)."""
        if scheme in STATIC_SCHEMES:
            return list(zip(self._gpu_rows[t], self._routing_rows[t]))
        return self.remote_pairs(t)

    def tracked_counts(self, g: int, scheme: str) -> list[int]:
        """Rows each local expert of GPU ``g`` receives through its Tile Status Table (the ``EXPECT``
        totals): its remote pairs, or under ``nvls`` all its pairs."""
        lo, hi = self.local_expert_range(g)
        sel = (self.routing >= lo) & (self.routing < hi)
        if scheme not in STATIC_SCHEMES:
            sel &= (self.home != g)[:, None]
        return np.bincount(self.routing[sel] - lo, minlength=hi - lo).tolist()

    def zero_partials(self, g: int, scheme: str) -> list[int]:
        """Global ids of the tokens whose partial row GPU ``g`` must hold as zeros before the layer: under
        ``nvls`` every token none of whose experts it hosts (the static ``ld_reduce`` reads every member's
        row); none otherwise."""
        if scheme not in STATIC_SCHEMES:
            return []
        return np.nonzero(~(self.expert_gpu == g).any(axis=1))[0].tolist()

    def check_scheme(self, scheme: str) -> None:
        """``ValueError`` naming the limit when ``scheme``'s work lists cannot represent this layer: each
        memory region must hold its rows below the next region's base (the algebraic index, which must hold
        every token id, is checked when the layer is built)."""
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; valid: {', '.join(SCHEMES)}")
        G, T, N, rb = self.G, self.T, self.N, self.row_bytes
        regions = [("X_BASE", X_BASE, T), ("WIN_BASE", WIN_BASE, N), ("COMB_BASE", COMB_BASE, N),
                   ("OUT_BASE", OUT_BASE, T), ("LOCAL_BASE", LOCAL_BASE, T)]
        if scheme in UNICAST_SCHEMES:
            regions.append(("PART_BASE", PART_BASE, G * N))
        for (name, base, rows), nxt in zip(regions, [b for _, b, _ in regions[1:]] + [1 << ADDR_BITS]):
            if base + rows * rb > nxt:
                raise ValueError(f"{scheme}: {rows} rows of {rb} B from {name} = {base:#x} run past "
                                 f"{nxt:#x} (the next region of the address map); fewer tokens or a smaller "
                                 f"hidden size")

    def work(self, scheme: str) -> list[GpuWork]:
        """Per-GPU work lists of ``scheme`` (see the module docstring)."""
        self.check_scheme(scheme)
        rf, cf, rs, N = self.row_flits, self.comb_flits, self.row_shift, self.N
        out = []
        planned = None
        if scheme == "dysharp":
            planned = self.schedule().combine_issue
        for g in range(self.G):
            home = list(range(g * self.T, (g + 1) * self.T))
            if scheme in STATIC_SCHEMES:
                out.append(self._static_work(g, home))
                continue
            disp = []
            for i, t in enumerate(home):
                m = self.remote_mask(t)
                if m:
                    disp.append(Desc(op=DescOp.STORE.value, mask=m, index=t, group=G_DISP,
                                     addr=X_BASE + (i << rs), length=rf))
            comb, rets = [], []
            if scheme in UNICAST_SCHEMES:
                lo, hi = self.local_expert_range(g)
                for t in (*range(home[0]), *range(home[-1] + 1, N)):       # every token but its own
                    pairs = [(g, e) for e in self._routing_rows[t] if lo <= e < hi]
                    if pairs:
                        rets.append(ReturnItem(t, g, Desc(op=DescOp.STORE.value, mask=1 << t // self.T,
                                                          index=t, group=G_PART,
                                                          addr=COMB_BASE + (t << rs), length=cf), pairs,
                                               row=g * N + t))
                # Interleaved over homes, each GPU starting at the next one (DeepEP's combine sends to all
                # ranks at once): in token order every GPU would push to the same home at once (incast).
                rets.sort(key=lambda r: (r.token % self.T, (r.token // self.T - g - 1) % self.G))
            else:
                for i, t in enumerate(home):
                    m = self.remote_mask(t)
                    d = Desc(op=DescOp.LD_REDUCE.value, mask=m, index=t, group=G_COMB, addr=OUT_BASE + (i << rs),
                             length=cf, etype=EType.BF16.value, redop=RedOp.ADD.value) if m else None
                    comb.append(CombineItem(t, d, self.remote_pairs(t),
                                            int(planned[t]) if planned is not None else -1))
                if planned is not None:
                    comb.sort(key=lambda c: (c.planned, c.token))
            out.append(GpuWork(g, disp, comb, rets, self.local_tiles(g), home))
        return out

    def _static_work(self, g: int, home: list) -> GpuWork:
        """``nvls``: an ``MM_ST`` of every home token to the whole group, then a ``MM_LD_REDUCE`` of every
        home token over it (the module docstring). ``mask`` is not used by static descriptors; it names the
        group's members for the reader."""
        rf, cf, rs, every = self.row_flits, self.comb_flits, self.row_shift, (1 << self.G) - 1
        disp = [Desc(op=DescOp.STORE.value, mask=every, index=t, group=G_DISP, addr=X_BASE + (i << rs), length=rf)
                for i, t in enumerate(home)]
        comb = [CombineItem(t, Desc(op=DescOp.LD_REDUCE.value, mask=every, index=t, group=G_COMB,
                                    addr=OUT_BASE + (i << rs), length=cf, etype=EType.BF16.value,
                                    redop=RedOp.ADD.value), self.tracked_pairs(t, "nvls"))
                for i, t in enumerate(home)]
        return GpuWork(g, disp, comb, [], [], home)

    # ----------------------------------------------------------------------------------- configuration
    def mm_commands(self) -> list[dict]:
        """Memory-manager commands (:class:`hw.gpu_nic.memory_manager.MmCommand` fields), the same on every
        GPU: the dispatch group allocating on layout 0, the combine group looking up the same layout."""
        stride = self.row_bytes // 16        # MmCommand.stride counts 16-byte units at any flit width
        return [dict(op=0, group=G_DISP, valid=1, alloc=1, layout=0, base=WIN_BASE, stride=stride),
                dict(op=0, group=G_COMB, valid=1, alloc=0, layout=0, base=COMB_BASE, stride=stride)]

    def tlb_config(self) -> list[dict]:
        """AL-TLB group writes (:class:`hw.switch.al_tlb.TlbConfig` fields, op SET), for every port."""
        mask = (1 << self.G) - 1
        return [dict(op=0, group=G_DISP, mask=mask, rows=self.N), dict(op=0, group=G_COMB, mask=mask, rows=self.N)]

    def rx_config(self, g: int, scheme: str) -> dict:
        """:class:`hw.gpu_nic.receive_path.RxConfig` of GPU ``g``: the token window is the compact receive
        buffer (dynamic: slots) or the symmetric one indexed by global token id (deepep); ``N`` rows."""
        return dict(port=g, row_shift=self.row_shift, win_base=WIN_BASE, win_rows=self.N, meta_flit=self.meta_flit,
                    expert_base=self.local_expert_range(g)[0])

    def gen_config(self, g: int, scheme: str) -> dict:
        """:class:`hw.gpu_nic.request_gen.GenConfig` and ``rbase`` of GPU ``g``: a pushed partial's
        ``G_PART`` base is GPU ``g``'s own stripe of ``PART_BASE`` (rows ``g * N ..``), so its index is the
        token id alone; under ``nvls`` (static mode) ``G_DISP`` is the window and ``G_COMB`` the partial
        rows, both symmetric."""
        if scheme in STATIC_SCHEMES:
            return dict(port=g, unicast=0, static=1, row_shift=self.row_shift,
                        rbase={G_DISP: WIN_BASE, G_COMB: COMB_BASE})
        return dict(port=g, unicast=int(scheme in UNICAST_SCHEMES), static=0, row_shift=self.row_shift,
                    rbase={G_DISP: WIN_BASE, G_PART: PART_BASE + ((g * self.N) << self.row_shift)})

    def static_groups(self, scheme: str) -> list[dict]:
        """The switch's static group table (:class:`hw.switch.group_table.GroupWrite` fields): under ``nvls``
        handles ``G_DISP`` and ``G_COMB``, every GPU a member (NVLS's multicast objects, bound on all G GPUs);
        none otherwise."""
        if scheme not in STATIC_SCHEMES:
            return []
        mask = (1 << self.G) - 1
        return [dict(handle=G_DISP, mask=mask), dict(handle=G_COMB, mask=mask)]

    def tracker_shape(self, schemes=None) -> tuple[int, int]:
        """(experts, tiles) of the Tile Status Table that holds every GPU's arrivals under ``schemes`` (None:
        all) (powers of two): the remote ones, and under ``nvls`` the GPU's own tokens too."""
        experts = 1 << (self.experts_per_gpu - 1).bit_length()
        most = 1
        kinds = {"nvls" if s in STATIC_SCHEMES else "deepep" for s in (SCHEMES if schemes is None else schemes)}
        for g in range(self.G):
            for scheme in sorted(kinds):
                counts = self.tracked_counts(g, scheme)
                most = max(most, -(-int(max(counts, default=0)) // self.p.tile_size))
        tiles = 1 << (most - 1).bit_length()
        return experts, max(tiles, 2 if experts == 1 else 1)

    def system_params(self, schemes=None) -> dict:
        """Parameters of the system top (:class:`hw.system.System`) that hold this layer under ``schemes``
        (None: all): the experts one GPU hosts (exactly: the receive path reports arrivals for those alone,
        and the NIC rounds the Tile Status Table up itself), the table's tiles, the memory manager's table
        (the algebraic index is the global token id) and its receive buffer (the most rows routed to one
        GPU), the last three rounded up to powers of two so that layers of one shape share a build."""
        _, tiles = self.tracker_shape(schemes)
        rows = int(self.dest.remote.sum(axis=0).max(initial=1))
        top = {"gpus": self.G} if self.flit_width == 128 else {"gpus": self.G, "flit_width": self.flit_width}
        return {**top, "nic": {"experts": self.experts_per_gpu, "tiles": tiles,
                                        "tile_size": self.p.tile_size,
                                        "mm_index_bits": max(4, (self.N - 1).bit_length()),
                                        "mm_slots": 1 << max(4, (rows - 1).bit_length())}}

    # ----------------------------------------------------------------------------------- flits
    def predicted_flits(self, scheme: str) -> dict:
        """Flits per GPU per link direction: ``{phase: {"up": [G], "down": [G]}}`` for ``dispatch`` and
        ``combine`` from :func:`sim_models.traffic.account` (rows' real sizes, this routing), ``fills``
        (AL-TLB fill traffic, dynamic schemes only), and ``total``."""
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; valid: {', '.join(SCHEMES)}")
        fb = self.flit_bytes
        tr = traffic.account(self.dest, TRAFFIC_SCHEME[scheme], self.row_flits * fb,
                             self.comb_flits * fb, fb, self.p.max_payload * fb,
                             issuer_in_group=scheme in STATIC_SCHEMES)
        out = {}
        for phase in ("dispatch", "combine"):
            ph = getattr(tr, phase)
            out[phase] = {"up": _flits(ph.up_wire, fb), "down": _flits(ph.down_wire, fb)}
        hosted = self.dest.remote.sum(axis=0).astype(np.int64)          # remote (token, GPU) pairs per GPU
        fills = hosted * 2 if TRAFFIC_SCHEME[scheme] == "dynamic" else np.zeros(self.G, dtype=np.int64)
        out["fills"] = {"up": fills.tolist(), "down": fills.tolist()}     # dispatch key + combine key
        out["total"] = {d: [sum(out[ph][d][g] for ph in ("dispatch", "combine", "fills")) for g in range(self.G)]
                        for d in ("up", "down")}
        return out

    def describe(self) -> dict:
        g1, g2 = self.gemm_tile_cycles()
        return {"model": self.cfg.name, "gpus": self.G, "tokens_per_gpu": self.T, "experts": self.E,
                "redundant_experts": self.p.redundant_experts, "system": self.p.system,
                "flit_width": self.flit_width, "header": self.fmt.name,
                "top_k": self.k, "group_limited": bool(self.cfg.n_group), "hidden_model": self.cfg.hidden,
                "hidden": self.hidden, "hidden_factor": self.hidden_factor, "dtype": self.p.dtype,
                "row_flits": self.row_flits, "comb_flits": self.comb_flits, "row_shift": self.row_shift,
                "gemm_tile_cycles": [g1, g2], "gemm_overridden": self.p.gemm_cycles is not None,
                "mean_distinct_gpus": self.dest.mean_distinct_gpus()}


def _flits(wire_bytes, fb: int) -> list[int]:
    w = np.asarray(wire_bytes, dtype=np.float64)
    f = np.rint(w / fb).astype(np.int64)
    assert np.all(f * fb == w), "wire bytes are not whole flits"
    return f.tolist()


def build_layer(p: LayerParams | None = None, **kw) -> MoeLayer:
    """``build_layer(LayerParams(...))`` or ``build_layer(model=..., gpus=..., ...)``."""
    return MoeLayer(p if p is not None else LayerParams(**kw))
