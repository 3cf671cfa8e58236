"""The one definition of dysharp's packet and flit formats.

Both the RTL (``hw.*``) and every Python model (``sim_models``, ``verif``) import this module, so the wire
format has a single source of truth: the Amaranth layouts below. The Python encoder and decoder read their
bit offsets from those layouts; they are not a second copy of the format.

Wire format
-----------
A link carries one *flit* per cycle: ``data`` (``flit_width`` bits, default 128 = 16 B, one NVLink4 port at
~1.56 GHz), ``last`` (end of packet, the link's framing) and ``poison`` (set by a cut-through switch on the
final flit of a packet it found malformed after forwarding had begun; receivers discard such a packet).

A packet is one *head flit* whose low bits hold a :class:`Header`, followed by
``payload_flits(opcode, length)`` payload flits. ``length`` always counts payload flits of the transaction:
for opcodes that carry data (writes, stores, responses) those flits follow the header; for requests
(reads, ``ld_reduce``) ``length`` is the size of the data asked for and nothing follows.

Two header formats share every opcode, rule and field name; the switch's port count chooses one
(:func:`header_format`), and the RTL blocks and the Python encoder/decoder read their widths from it:

* **narrow** (:data:`NARROW`, up to 64 ports, any flit width): 128 bits, LSB first::

    opcode 4 | src 6 | tag 8 | length 5 | etype 3 | redop 2 | route 100
    route = uni: dst 6 | code 8 | addr 48 | xtag 8 (unicast, responses, errors)
          | mm:  group 8 | addr 48                  (static multimem.*: group handle + offset)
          | dyn: group 8 | mask 64 | index 18 | offset 10   (dymultimem.*)

* **wide** (:data:`WIDE`, 65 to 128 ports, the NVL72 plane): 256 bits, so it needs ``flit_width`` >= 256
  (one NVLink5 port, 50 GB/s per direction at the same clock) and still fills one head flit::

    opcode 4 | src 7 | tag 8 | length 5 | etype 3 | redop 2 | route 166 | reserved 61 (zero)
    route = uni: dst 7 | code 8 | addr 48 | xtag 8
          | mm:  group 8 | addr 48
          | dyn: group 8 | mask 128 | index 20 | offset 10

The dynamic route of the narrow format fills its 100 bits; a 72-bit mask and 7-bit port ids do not fit
in 128 bits. The wide format spends the head flit's upper half, which a 256-bit flit carries anyway, so a
packet is still one header flit plus its payload flits, and the payload efficiency at 72 ports is that of
256-bit flits at any port count (:func:`payload_efficiency` with ``flit_bytes=32``): ``P/(P+1)`` for ``P``
payload flits, 0.941 for 512-B packets (16 flits, the switch's default ``max_payload``), 0.889 for 256-B
ones. Past 64 ports a 128-bit flit is refused: the alternative, a second header flit, would cost a flit
of every packet (0.889 instead of 0.941 at 256-B packets of 128-bit flits). The wide index (20 bits)
holds 128 GPUs x 8,192 tokens; the narrow one (18 bits) 64 x 4,096.

``xtag`` extends ``tag`` to 16 bits where one requester has more than 256 transactions in flight: the
switch's reduction engine names its buffer entries (up to 512) with it on ``RED_READ``, and a responder
copies ``tag`` and ``xtag`` into its ``RED_READ_RESP``/``READ_RESP`` (:func:`wide_tag_fields`,
:func:`wide_tag`).

``mask`` has one bit per switch port. ``index`` is the algebraic index: the token's row in the
logical dispatch/combine tensor, identical on every GPU. ``offset`` is the flit offset of this packet's
payload inside that row, so rows longer than one packet (a 7168-B FP8 token is 28 packets of 256 B) are
addressed without physical addresses.

The module-level widths (:data:`HEADER_BITS`, :data:`PORT_BITS`, :data:`MAX_PORTS`, :data:`INDEX_BITS`)
and layouts (:class:`HeaderLayout`, ...) are the narrow format's; a block that may run past 64 ports
reads them from ``header_format(ports)`` instead.
"""


import dataclasses
import enum as py_enum
import functools
import math
from typing import Iterable

from amaranth.hdl import Cat, Const, Mux, Shape, Value
from amaranth.lib import data, enum

__all__ = [
    "HEADER_BITS", "MAX_PORTS", "MAX_LENGTH", "FLIT_WIDTHS", "DEFAULT_FLIT_WIDTH", "PORT_BITS", "TAG_BITS",
    "LENGTH_BITS", "GROUP_BITS", "ADDR_BITS", "INDEX_BITS", "OFFSET_BITS",
    "Opcode", "EType", "RedOp", "ErrorCode", "OPCODES", "OpInfo",
    "UnicastRoute", "StaticRoute", "DynamicRoute", "Route", "HeaderLayout", "flit_layout",
    "Header", "Packet", "Flit", "header_fields",
    "payload_flits", "carries_payload", "check_header", "rtl_payload_flits", "rtl_header_error",
    "payload_efficiency", "wire_flits", "pack_flit", "unpack_flit", "WIDE_TAG_BITS", "wide_tag_fields",
    "wide_tag", "VC_REQ", "VC_RESP", "N_VCS", "vc_of", "DeferredAddr", "pack_deferred_addr",
    "unpack_deferred_addr", "rtl_vclass_resp", "rtl_origin_ok",
    "HeaderFormat", "NARROW", "WIDE", "FORMATS", "header_format", "MAX_SWITCH_PORTS", "WIDE_FLIT_WIDTH",
    "WideUnicastRoute", "WideDynamicRoute", "WideRoute", "WideHeaderLayout", "WideDeferredAddr", "widened",
]

# The narrow format's widths (the wide format's are read from WIDE / header_format(ports)).
HEADER_BITS = 128
MAX_PORTS = 64
PORT_BITS = (MAX_PORTS - 1).bit_length()   # a port id: ``src``, ``dst``
TAG_BITS = 8         # a requester's transaction tag (``xtag`` widens it to WIDE_TAG_BITS)
LENGTH_BITS = 5      # a packet's ``length`` field, and a flit index below it
GROUP_BITS = 8       # a multimem group handle
ADDR_BITS = 48       # a byte address (unicast route, static multimem offset)
INDEX_BITS = 18      # the algebraic index (a token's row in the logical dispatch/combine tensor)
OFFSET_BITS = 10     # a packet's flit offset inside its row (dymultimem)
FLIT_WIDTHS = (128, 256, 512)
DEFAULT_FLIT_WIDTH = 128
MAX_SWITCH_PORTS = 128   # the wide format's mask: one bit per port
WIDE_FLIT_WIDTH = 256    # the narrowest flit that holds the wide header


class Opcode(enum.Enum, shape=4):
    """Packet types. Values 12 and 13 are unassigned; a switch answers them with ``UNKNOWN_OPCODE``.

    ``TLB_FILL``/``TLB_FILL_RESP`` travel only between a DySHARP switch port and its own GPU (the AL-TLB's
    miss path, :mod:`hw.switch.tlb_fill_bridge`); ``DYN_RED_READ`` never leaves the switch (see
    :class:`DeferredAddr`). :data:`OPCODES` says who may send each one.
    """
    WRITE = 0          #: unicast write: ``dst``, ``addr``; ``length`` payload flits follow
    READ = 1           #: unicast read: ``dst``, ``addr``; ``length`` flits requested
    READ_RESP = 2      #: read data back to ``dst`` (the requester), same ``tag``
    MM_ST = 3          #: static ``multimem.st``: ``group`` handle (switch table) + ``addr`` offset
    MM_LD_REDUCE = 4   #: static ``multimem.ld_reduce`` over a configured group
    DYN_ST = 5         #: ``dymultimem.st``: per-request ``mask``, algebraic ``index``, ``offset``
    DYN_LD_REDUCE = 6  #: ``dymultimem.ld_reduce``: read-and-reduce over ``mask`` at ``index``
    RED_READ = 7       #: switch -> GPU: read one contribution of a reduction (``tag`` = buffer entry)
    RED_READ_RESP = 8  #: GPU -> switch: the contribution (``tag`` = buffer entry)
    RED_RESP = 9       #: switch -> requester: the reduced payload (requester's ``tag``)
    TLB_FILL = 10      #: switch -> GPU: read (``group``, ``index``) from its memory manager (``tag`` = MSHR)
    TLB_FILL_RESP = 11 #: GPU -> switch: the row address in ``addr`` or an error ``code``, same ``tag``
    DYN_RED_READ = 14  #: inside the switch: an untranslated ``RED_READ`` (``addr`` is a :class:`DeferredAddr`)
    ERROR = 15         #: error response to ``dst`` with ``code``; the requester's ``tag``


class EType(enum.Enum, shape=3):
    """Element type of a reduction (``ld_reduce``) payload."""
    BF16 = 0
    FP16 = 1
    FP32 = 2
    S32 = 3   #: int32, signed min/max
    U32 = 4   #: int32, unsigned min/max


class RedOp(enum.Enum, shape=2):
    ADD = 0
    MIN = 1
    MAX = 2


class ErrorCode(enum.Enum, shape=8):
    """Codes carried by :attr:`Opcode.ERROR` responses and counted by status counters."""
    NONE = 0
    UNKNOWN_OPCODE = 1    #: opcode value not in :class:`Opcode`
    BAD_LENGTH = 2        #: ``length`` above the receiver's maximum payload
    LENGTH_MISMATCH = 3   #: ``last`` framing disagrees with ``length``
    BAD_MASK = 4          #: zero mask, or bits for ports that do not exist
    BAD_GROUP = 5         #: unconfigured (or out-of-range) group handle
    BAD_DST = 6           #: unicast ``dst`` is not a port
    BAD_TYPE = 7          #: undefined ``etype``/``redop`` on a reduction
    CREDIT_OVERFLOW = 8   #: a flit arrived with no credit (sender broke the credit protocol)
    ISOLATION = 9         #: source or a destination is not a member of the group (AL-TLB)
    OUT_OF_BOUNDS = 10    #: algebraic index past the group's tensor bounds (AL-TLB)
    BUFFER_FULL = 11      #: a receive/layout buffer has no room (memory manager)
    TIMEOUT = 12          #: a reduction contribution never arrived
    TYPE_MISMATCH = 13    #: a contribution's type/length disagrees with its reduction
    UNKNOWN_ENTRY = 14    #: a response for a reduction entry that is not in flight
    TLB_FAULT = 15        #: the backing translation table has no valid entry
    POISONED = 16         #: the request arrived marked ``poison`` (its sender or a link found it corrupt)


# ---------------------------------------------------------------------------------------------------------
# Layouts (the source of truth)

class UnicastRoute(data.Struct):
    dst: PORT_BITS
    code: ErrorCode
    addr: ADDR_BITS
    xtag: TAG_BITS      # high byte of a 16-bit tag (``tag`` is the low byte); responders echo it with ``tag``


class StaticRoute(data.Struct):
    group: GROUP_BITS
    addr: ADDR_BITS


class DynamicRoute(data.Struct):
    group: GROUP_BITS
    mask: MAX_PORTS
    index: INDEX_BITS
    offset: OFFSET_BITS


class Route(data.Union):
    uni: UnicastRoute
    mm: StaticRoute
    dyn: DynamicRoute


class HeaderLayout(data.Struct):
    opcode: Opcode
    src: PORT_BITS
    tag: TAG_BITS
    length: LENGTH_BITS
    etype: EType
    redop: RedOp
    route: Route


assert data.Layout.cast(HeaderLayout).size == HEADER_BITS, data.Layout.cast(HeaderLayout)

_WIDE_PORT_BITS = (MAX_SWITCH_PORTS - 1).bit_length()
_WIDE_INDEX_BITS = 20
_WIDE_HEADER_BITS = 256


class WideUnicastRoute(data.Struct):
    dst: _WIDE_PORT_BITS
    code: ErrorCode
    addr: ADDR_BITS
    xtag: TAG_BITS


class WideDynamicRoute(data.Struct):
    group: GROUP_BITS
    mask: MAX_SWITCH_PORTS
    index: _WIDE_INDEX_BITS
    offset: OFFSET_BITS


class WideRoute(data.Union):
    uni: WideUnicastRoute
    mm: StaticRoute
    dyn: WideDynamicRoute


class WideHeaderLayout(data.Struct):
    """The wide format's header (65..128 ports): :class:`HeaderLayout`'s fields at their wide widths, padded
    with zeros to 256 bits (a whole 256-bit head flit)."""
    opcode: Opcode
    src: _WIDE_PORT_BITS
    tag: TAG_BITS
    length: LENGTH_BITS
    etype: EType
    redop: RedOp
    route: WideRoute
    _reserved: _WIDE_HEADER_BITS - data.Layout.cast(WideRoute).size - \
        sum(Shape.cast(s).width for s in (Opcode, _WIDE_PORT_BITS, TAG_BITS, LENGTH_BITS, EType, RedOp))


assert data.Layout.cast(WideHeaderLayout).size == _WIDE_HEADER_BITS, data.Layout.cast(WideHeaderLayout)
MAX_LENGTH = (1 << LENGTH_BITS) - 1   # the length field's range


def flit_layout(flit_width: int = DEFAULT_FLIT_WIDTH) -> data.StructLayout:
    """Layout of one flit on a link: ``data`` (``flit_width`` bits), ``last``, ``poison``."""
    if flit_width not in FLIT_WIDTHS:
        raise ValueError(f"flit_width must be one of {FLIT_WIDTHS} (the header needs 128 bits), "
                         f"got {flit_width!r}")
    return data.StructLayout({"data": flit_width, "last": 1, "poison": 1})


@functools.lru_cache(maxsize=None)
def _flit_offsets(flit_width: int) -> tuple[int, int, int]:
    layout = flit_layout(flit_width)
    return layout["data"].offset, layout["last"].offset, layout["poison"].offset


def pack_flit(flit: "Flit", flit_width: int = DEFAULT_FLIT_WIDTH) -> int:
    """Bits of a :class:`Flit` as laid out by :func:`flit_layout` (for driving a simulation)."""
    d, l, p = _flit_offsets(flit_width)
    return (int(flit.data) << d) | (int(flit.last) << l) | (int(flit.poison) << p)


def unpack_flit(bits: int, flit_width: int = DEFAULT_FLIT_WIDTH) -> "Flit":
    d, l, p = _flit_offsets(flit_width)
    bits = int(bits)
    return Flit((bits >> d) & ((1 << flit_width) - 1), bool((bits >> l) & 1), bool((bits >> p) & 1))


# ---------------------------------------------------------------------------------------------------------
# Per-opcode rules: which route variant, whether data follows, how the destinations are named.

@dataclasses.dataclass(frozen=True)
class OpInfo:
    variant: str        # "uni", "mm" or "dyn"
    has_payload: bool   # payload flits follow the header
    routing: str        # "dst" (route.uni.dst), "group" (switch group table) or "mask" (route.dyn.mask)
    typed: bool         # etype/redop are meaningful and validated
    vclass: str = "req"     # message class: "req" (virtual channel 0) or "resp" (virtual channel 1)
    origin: str = "gpu"     # who sends it into a switch port: "gpu", "switch" (downlinks only), "internal"


OPCODES: dict[Opcode, OpInfo] = {
    Opcode.WRITE:         OpInfo("uni", True,  "dst",   False),
    Opcode.READ:          OpInfo("uni", False, "dst",   False),
    Opcode.READ_RESP:     OpInfo("uni", True,  "dst",   False, "resp"),
    Opcode.MM_ST:         OpInfo("mm",  True,  "group", False),
    Opcode.MM_LD_REDUCE:  OpInfo("mm",  False, "group", True),
    Opcode.DYN_ST:        OpInfo("dyn", True,  "mask",  False),
    Opcode.DYN_LD_REDUCE: OpInfo("dyn", False, "mask",  True),
    Opcode.RED_READ:      OpInfo("uni", False, "dst",   False, "req",  "switch"),
    Opcode.RED_READ_RESP: OpInfo("uni", True,  "dst",   True,  "resp"),
    Opcode.RED_RESP:      OpInfo("uni", True,  "dst",   True,  "resp", "switch"),
    Opcode.TLB_FILL:      OpInfo("dyn", False, "mask",  False, "req",  "switch"),
    Opcode.TLB_FILL_RESP: OpInfo("uni", False, "dst",   False, "resp"),
    Opcode.DYN_RED_READ:  OpInfo("uni", False, "dst",   True,  "req",  "internal"),
    Opcode.ERROR:         OpInfo("uni", False, "dst",   False, "resp"),
}

#: Virtual channel of each message class on a DySHARP link (:mod:`hw.vc_link`).
VC_REQ, VC_RESP = 0, 1
N_VCS = 2


def vc_of(opcode) -> int:
    """The virtual channel an opcode travels on (requests 0, responses 1; unknown opcodes 0)."""
    return VC_RESP if _is_known(opcode) and OPCODES[Opcode(_iv(opcode))].vclass == "resp" else VC_REQ


class DeferredAddr(data.Struct):
    """``route.uni.addr`` of a ``DYN_RED_READ``: what the destination port's AL-TLB translates.

    The requester port's reduction engine does not translate a ``dymultimem.ld_reduce``; it names the row
    and the byte offset inside it, and the destination's egress rewrites the packet into a ``RED_READ`` at
    ``row address + byte_offset``.
    """
    byte_offset: 16
    index: INDEX_BITS
    group: GROUP_BITS


class WideDeferredAddr(data.Struct):
    """:class:`DeferredAddr` of the wide format (its 20-bit index)."""
    byte_offset: 16
    index: _WIDE_INDEX_BITS
    group: GROUP_BITS


def _deferred_fields(layout) -> dict:
    """(offset, width) of each field of a deferred-address layout."""
    return {name: (field.offset, field.width) for name, field in data.Layout.cast(layout)}


def pack_deferred_addr(group: int, index: int, byte_offset: int, fmt: "HeaderFormat | None" = None) -> int:
    """Python twin of :class:`DeferredAddr` (``fmt``'s, default narrow): the ``addr`` of a ``DYN_RED_READ``."""
    fields = (fmt or NARROW).deferred_fields
    addr = 0
    for name, v in (("group", group), ("index", index), ("byte_offset", byte_offset)):
        off, w = fields[name]
        if not 0 <= v < (1 << w):
            raise ValueError(f"{name}={v} does not fit in {w} bits")
        addr |= v << off
    return addr


def unpack_deferred_addr(addr: int, fmt: "HeaderFormat | None" = None) -> tuple[int, int, int]:
    """(group, index, byte_offset) of a ``DYN_RED_READ`` address."""
    fields = (fmt or NARROW).deferred_fields
    return tuple((addr >> off) & ((1 << w) - 1) for off, w in (fields[n] for n in ("group", "index", "byte_offset")))


def _flatten(layout, offset=0, prefix=()):
    """Yield (path, offset, width, shape) for every leaf field of a layout, union variants included
    (reserved fields, named ``_...``, left out)."""
    layout = data.Layout.cast(layout)
    for name, field in layout:
        if name.startswith("_"):
            continue
        shape = field.shape
        if isinstance(shape, type) and issubclass(shape, (data.Struct, data.Union)) or \
                isinstance(shape, data.Layout):
            yield from _flatten(shape, offset + field.offset, prefix + (name,))
        else:
            yield prefix + (name,), offset + field.offset, field.width, shape


def _offsets(layout) -> tuple[dict, dict]:
    """(common, variant) field offsets of a header layout: name -> (offset, width), and
    variant -> {name -> (offset, width)}."""
    common, variant = {}, {}
    for path, off, w, _ in _flatten(layout):
        if path[0] == "route":
            variant.setdefault(path[1], {})[path[2]] = (off, w)
        else:
            common[path[0]] = (off, w)
    return common, variant


@dataclasses.dataclass(frozen=True, repr=False)
class HeaderFormat:
    """One header format: its layouts and every width read from them (see the module docstring).

    ``layout`` (the header), ``unicast``/``static``/``dynamic`` (the route variants) and ``deferred`` (a
    ``DYN_RED_READ``'s address) are Amaranth layouts; ``bits``, ``port_bits``, ``max_ports``, ``index_bits``
    and ``min_flit_width`` are derived from them. Get one with :func:`header_format`. A dataclass of its
    layouts, so that a block holding one keeps a stated identity (:func:`hw.emission.block_key`).
    """
    name: str
    layout: type
    unicast: type
    static: type
    dynamic: type
    deferred: type

    def __post_init__(self):
        hl, dyn = data.Layout.cast(self.layout), data.Layout.cast(self.dynamic)
        derived = {
            "bits": hl.size,                       # the header's bits in the head flit (HEADER_BITS)
            "port_bits": hl["src"].width,          # a port id (PORT_BITS)
            "max_ports": dyn["mask"].width,        # one mask bit per port (MAX_PORTS)
            "index_bits": dyn["index"].width,      # the algebraic index (INDEX_BITS)
        }
        derived["min_flit_width"] = min(w for w in FLIT_WIDTHS if w >= derived["bits"])
        derived["common"], derived["variants"] = _offsets(self.layout)
        derived["deferred_fields"] = _deferred_fields(self.deferred)
        for k, v in derived.items():
            object.__setattr__(self, k, v)

    def __repr__(self):
        return f"<HeaderFormat {self.name}: {self.bits} bits, up to {self.max_ports} ports>"


NARROW = HeaderFormat("narrow", HeaderLayout, UnicastRoute, StaticRoute, DynamicRoute, DeferredAddr)
WIDE = HeaderFormat("wide", WideHeaderLayout, WideUnicastRoute, StaticRoute, WideDynamicRoute, WideDeferredAddr)
FORMATS = (NARROW, WIDE)
assert (NARROW.bits, NARROW.port_bits, NARROW.max_ports, NARROW.index_bits) == \
    (HEADER_BITS, PORT_BITS, MAX_PORTS, INDEX_BITS)
assert WIDE.max_ports == MAX_SWITCH_PORTS and WIDE.min_flit_width == WIDE_FLIT_WIDTH


def header_format(ports: int | None = None, flit_width: int | None = None) -> HeaderFormat:
    """The header format of a switch with ``ports`` ports (None: the narrow one): narrow up to 64 ports,
    wide from 65 to :data:`MAX_SWITCH_PORTS`. With ``flit_width``, a flit too narrow for the format's header
    is refused (the wide header needs 256-bit flits)."""
    if ports is None:
        return NARROW
    if not isinstance(ports, int) or not 1 <= ports <= MAX_SWITCH_PORTS:
        raise ValueError(f"ports must be an integer in 1..{MAX_SWITCH_PORTS} (the widest header's mask), "
                         f"got {ports!r}")
    fmt = NARROW if ports <= NARROW.max_ports else WIDE
    if flit_width is not None and flit_width < fmt.min_flit_width:
        valid = ", ".join(str(w) for w in FLIT_WIDTHS if w >= fmt.min_flit_width)
        raise ValueError(f"{ports} ports need the {fmt.name} header ({fmt.bits} bits: a {fmt.max_ports}-bit "
                         f"mask and {fmt.port_bits}-bit port ids past {NARROW.max_ports} ports), which does not "
                         f"fit one {flit_width}-bit flit; use flit_width {valid} (one NVLink5 port is 256 bits "
                         f"per cycle), or at most {NARROW.max_ports} ports")
    return fmt


_COMMON, _VARIANT = NARROW.common, NARROW.variants


def widened(layout, ports: int | None, **fields):
    """``layout`` (a struct whose widths are the narrow format's) for a switch of ``ports`` ports.

    Up to 64 ports it is ``layout`` itself, so those points are unchanged bit for bit. Past them it is a
    ``StructLayout`` with the same fields in the same order, each field named in ``fields`` taking its
    wide shape: a :class:`HeaderFormat` attribute name (``"port_bits"``, ``"max_ports"``,
    ``"index_bits"``), a function of the format, or a shape (e.g. a nested struct's widened layout).
    """
    fmt = header_format(ports)
    if fmt is NARROW:
        return layout
    shapes = {name: field.shape for name, field in data.Layout.cast(layout)}
    for name, wide in fields.items():
        if name not in shapes:
            raise ValueError(f"{layout!r} has no field {name!r}")
        shapes[name] = getattr(fmt, wide) if isinstance(wide, str) else wide(fmt) if callable(wide) and \
            not isinstance(wide, (type, data.Layout)) else wide
    return data.StructLayout(shapes)


def header_fields(opcode) -> tuple[str, ...]:
    """Names of the header fields that ``opcode`` carries (common fields plus its route variant; the same
    names in every format)."""
    variant = OPCODES[Opcode(opcode)].variant if _is_known(opcode) else "uni"
    return tuple(_COMMON) + tuple(_VARIANT[variant])


def _iv(v) -> int:
    """An int from an int or an enum member."""
    return v.value if isinstance(v, py_enum.Enum) else int(v)


def _is_known(opcode) -> bool:
    try:
        Opcode(_iv(opcode))
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------------------
# Python side: encode/decode

_ROUTE_FIELDS = sorted({n for v in _VARIANT.values() for n in v})
_VARIANT_OF = {op.value: info.variant for op, info in OPCODES.items()}   # opcode value -> route variant


@dataclasses.dataclass
class Header:
    """A packet header as Python values. Fields a given opcode does not carry must stay 0.

    ``opcode`` may be a raw int (to build malformed packets in tests); unknown opcodes encode with the
    unicast route variant.
    """
    opcode: int = 0
    src: int = 0
    tag: int = 0
    length: int = 0
    etype: int = 0
    redop: int = 0
    dst: int = 0
    code: int = 0
    addr: int = 0
    group: int = 0
    mask: int = 0
    index: int = 0
    offset: int = 0
    xtag: int = 0

    def __setattr__(self, name, value):
        # Store plain ints, whether given an int or an enum member (Opcode.WRITE, EType.BF16, ...).
        object.__setattr__(self, name, _iv(value))

    @property
    def variant(self) -> str:
        return _VARIANT_OF.get(self.opcode, "uni")

    def encode(self, fmt: HeaderFormat | None = None) -> int:
        """The header's bits in format ``fmt`` (default: the narrow one)."""
        fmt = fmt or NARROW
        fields = dict(fmt.common)
        fields.update(fmt.variants[self.variant])
        value = 0
        for name in fmt.common.keys() | set(_ROUTE_FIELDS):
            v = getattr(self, name)
            if name not in fields:
                if v:
                    raise ValueError(f"header field {name!r} is not carried by opcode "
                                     f"{_opname(self.opcode)} (variant {self.variant!r})")
                continue
            off, width = fields[name]
            if not 0 <= v < (1 << width):
                raise ValueError(f"header field {name!r}={v} does not fit in {width} bits")
            value |= v << off
        return value

    @classmethod
    def decode(cls, bits: int, fmt: HeaderFormat | None = None) -> "Header":
        """The header in the low bits of a head flit, in format ``fmt`` (default: the narrow one)."""
        fmt = fmt or NARROW
        bits = int(bits) & ((1 << fmt.bits) - 1)
        values = dict(_ZERO_FIELDS)
        values.update({n: (bits >> o) & ((1 << w) - 1) for n, (o, w) in fmt.common.items()})
        values.update({n: (bits >> o) & ((1 << w) - 1)
                       for n, (o, w) in fmt.variants[_VARIANT_OF.get(values["opcode"], "uni")].items()})
        # The values are plain ints already: filled in directly, not through the dataclass's __init__ and
        # __setattr__ (the scoreboards decode every packet of a run).
        h = object.__new__(cls)
        h.__dict__.update(values)
        return h

    def __repr__(self):
        shown = ", ".join(f"{n}={getattr(self, n):#x}" if n in ("addr", "mask") else f"{n}={getattr(self, n)}"
                          for n in header_fields(self.opcode) if getattr(self, n) or n == "opcode")
        return f"Header({_opname(self.opcode)}: {shown})"


_ZERO_FIELDS = {f.name: 0 for f in dataclasses.fields(Header)}


def _opname(opcode) -> str:
    return Opcode(_iv(opcode)).name if _is_known(opcode) else f"<unknown {_iv(opcode)}>"


WIDE_TAG_BITS = 16


def wide_tag_fields(tag16: int) -> dict:
    """Header fields (``tag``, ``xtag``) that carry a 16-bit transaction tag."""
    if not 0 <= tag16 < (1 << WIDE_TAG_BITS):
        raise ValueError(f"a wide tag must fit in {WIDE_TAG_BITS} bits, got {tag16}")
    return {"tag": tag16 & 0xFF, "xtag": tag16 >> 8}


def wide_tag(h: "Header") -> int:
    """The 16-bit transaction tag of a unicast-route header."""
    return (h.xtag << 8) | h.tag


def carries_payload(opcode) -> bool:
    return _is_known(opcode) and OPCODES[Opcode(_iv(opcode))].has_payload


def payload_flits(opcode, length: int) -> int:
    """Number of payload flits that follow a header with this opcode and length field."""
    return _iv(length) if carries_payload(opcode) else 0


@dataclasses.dataclass(frozen=True)
class Flit:
    data: int
    last: bool = False
    poison: bool = False


@dataclasses.dataclass
class Packet:
    """A header plus its payload flits (ints of ``flit_width`` bits)."""
    header: Header
    payload: list[int] = dataclasses.field(default_factory=list)

    def flits(self, flit_width: int = DEFAULT_FLIT_WIDTH, fmt: HeaderFormat | None = None) -> list[Flit]:
        """The packet's flits; the header in format ``fmt`` (default: the narrow one)."""
        fmt = fmt or NARROW
        if flit_width < fmt.min_flit_width:
            raise ValueError(f"the {fmt.name} header ({fmt.bits} bits) needs flit_width >= {fmt.min_flit_width}, "
                             f"got {flit_width}")
        words = [self.header.encode(fmt)] + [int(p) for p in self.payload]
        limit = 1 << flit_width
        for w in words:
            if not 0 <= w < limit:
                raise ValueError(f"flit value {w:#x} does not fit in {flit_width} bits")
        return [Flit(w, last=(i == len(words) - 1)) for i, w in enumerate(words)]

    @classmethod
    def from_flits(cls, flits: Iterable[Flit], fmt: HeaderFormat | None = None) -> "Packet":
        flits = list(flits)
        return cls(Header.decode(flits[0].data, fmt), [f.data for f in flits[1:]])


def check_header(h: Header, *, ports: int, max_payload: int, groups: dict[int, int] | None = None,
                 src: int | None = None) -> ErrorCode:
    """Python twin of :func:`rtl_header_error`: the error a switch ingress reports for this header.

    ``groups`` maps configured group handles to member masks (static ``multimem`` only). ``src``: the
    sending port, where static groups are isolated (a non-member is ``ISOLATION``, after every other
    check); None where any port may use any group.
    """
    if not _is_known(h.opcode):
        return ErrorCode.UNKNOWN_OPCODE
    info = OPCODES[Opcode(int(h.opcode))]
    if h.length > max_payload:
        return ErrorCode.BAD_LENGTH
    if info.routing == "dst" and h.dst >= ports:
        return ErrorCode.BAD_DST
    if info.routing == "mask" and (h.mask == 0 or h.mask >> ports):
        return ErrorCode.BAD_MASK
    if info.routing == "group" and not (groups or {}).get(h.group, 0):
        return ErrorCode.BAD_GROUP
    if info.typed and (h.etype not in {e.value for e in EType} or h.redop not in {r.value for r in RedOp}):
        return ErrorCode.BAD_TYPE
    if src is not None and info.routing == "group" and not (groups or {})[h.group] >> src & 1:
        return ErrorCode.ISOLATION
    return ErrorCode.NONE


# ---------------------------------------------------------------------------------------------------------
# RTL side: the same rules as combinational logic over a header view

def rtl_payload_flits(header) -> Value:
    """Payload flits that follow ``header`` (a view of either format's header), as a 5-bit value."""
    has = Const(0, 1)
    for op, info in OPCODES.items():
        if info.has_payload:
            has = has | (header.opcode == op)
    return Mux(has, header.length, 0)


def rtl_header_error(header, *, ports: int, max_payload: int, group_mask: Value | None = None) -> Value:
    """Combinational error code for a received header (a view of either format's; same rules as
    :func:`check_header`).

    ``group_mask`` is the member mask the switch's group table returns for ``header.route.mm.group``
    (zero when the handle is unconfigured); pass ``None`` where static groups are not routed.
    """
    known = Const(0, 1)
    routing = {"dst": Const(0, 1), "mask": Const(0, 1), "group": Const(0, 1)}
    typed = Const(0, 1)
    for op, info in OPCODES.items():
        hit = header.opcode == op
        known = known | hit
        routing[info.routing] = routing[info.routing] | hit
        if info.typed:
            typed = typed | hit
    mask = Value.cast(header.route.dyn.mask)
    port_limit = Const((1 << ports) - 1, len(mask))
    bad_mask = (mask == 0) | ((mask & ~port_limit) != 0)
    bad_type = (Value.cast(header.etype).as_unsigned() > max(e.value for e in EType)) | \
               (Value.cast(header.redop).as_unsigned() > max(r.value for r in RedOp))
    no_group = Const(1, 1) if group_mask is None else (group_mask == 0)
    code = Const(ErrorCode.NONE.value, 8)
    # Lowest priority first; later Mux wins, so the order matches check_header's.
    code = Mux(typed & bad_type, ErrorCode.BAD_TYPE.value, code)
    code = Mux(routing["group"] & no_group, ErrorCode.BAD_GROUP.value, code)
    code = Mux(routing["mask"] & bad_mask, ErrorCode.BAD_MASK.value, code)
    code = Mux(routing["dst"] & (header.route.uni.dst >= ports), ErrorCode.BAD_DST.value, code)
    code = Mux(header.length > max_payload, ErrorCode.BAD_LENGTH.value, code)
    code = Mux(~known, ErrorCode.UNKNOWN_OPCODE.value, code)
    return code


def rtl_vclass_resp(header) -> Value:
    """1 when ``header``'s opcode is a response-class message (travels on :data:`VC_RESP`)."""
    out = Const(0, 1)
    for op, info in OPCODES.items():
        if info.vclass == "resp":
            out = out | (header.opcode == op)
    return out


def rtl_origin_ok(header, origins=("gpu",)) -> Value:
    """1 when ``header``'s opcode is known and may be sent by one of ``origins`` (see :class:`OpInfo`)."""
    out = Const(0, 1)
    for op, info in OPCODES.items():
        if info.origin in origins:
            out = out | (header.opcode == op)
    return out


# ---------------------------------------------------------------------------------------------------------
# Payload efficiency

def wire_flits(payload_bytes: int, *, scheme: str = "dynamic", destinations: int = 1,
               flit_bytes: int = 16, max_payload_bytes: int = 256, address_bytes: int = 8) -> int:
    """Flits on the source's uplink to send ``payload_bytes`` to ``destinations`` GPUs.

    Schemes:

    * ``dynamic``  -- dysharp ``dymultimem.st``: one copy; each packet is a header flit plus payload.
    * ``explicit`` -- one copy, but each packet also carries one ``address_bytes`` physical address per
      destination (computed by SMs), packed into extra header flits.
    * ``unicast``  -- one packet stream per destination (DeepEP-like all-to-all).
    """
    if payload_bytes <= 0:
        raise ValueError(f"payload_bytes must be positive, got {payload_bytes}")
    if destinations < 1:
        raise ValueError(f"destinations must be >= 1, got {destinations}")
    if max_payload_bytes % flit_bytes:
        raise ValueError("max_payload_bytes must be a multiple of flit_bytes")
    packets = math.ceil(payload_bytes / max_payload_bytes)
    data_flits = math.ceil(payload_bytes / flit_bytes)
    if scheme == "dynamic":
        return packets + data_flits
    if scheme == "explicit":
        return packets * (1 + math.ceil(destinations * address_bytes / flit_bytes)) + data_flits
    if scheme == "unicast":
        return destinations * (packets + data_flits)
    raise ValueError(f"unknown scheme {scheme!r}; valid: dynamic, explicit, unicast")


def payload_efficiency(payload_bytes: int, *, scheme: str = "dynamic", destinations: int = 1,
                       flit_bytes: int = 16, max_payload_bytes: int = 256, address_bytes: int = 8) -> float:
    """Payload bytes / wire bytes for one packet stream under ``scheme`` (see :func:`wire_flits`).

    For ``unicast`` this is the per-copy efficiency (each copy is a plain packet); the redundancy of
    sending ``destinations`` copies shows in :func:`wire_flits`, not here.
    """
    copies = destinations if scheme == "unicast" else 1
    flits = wire_flits(payload_bytes, scheme=scheme, destinations=destinations, flit_bytes=flit_bytes,
                       max_payload_bytes=max_payload_bytes, address_bytes=address_bytes)
    return payload_bytes * copies / (flits * flit_bytes)
