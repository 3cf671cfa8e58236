"""Reference models of the GPU-side NIC blocks, written against the packet-format module only.

* :func:`request_packets`: the packets (:class:`hw.packet.Packet`) and tag bindings a descriptor must
  produce in the request generator, in order, in dynamic, unicast or static (NVLS) mode.
* :class:`RxModel`: what the receive path must do with each packet: memory writes, read responses, token
  arrivals, error counts and outstanding tags; ``accept`` = ``"all"``/``"req"``/``"resp"`` as the RTL's.
* :class:`NicModel`: the composed NIC (:class:`hw.gpu_nic.nic.GpuNic`) on a 2-VC link: a request-path and a
  response-path :class:`RxModel` and the memory manager's spec
  (:class:`verif.models.memory_manager.MemoryManagerSpec`) answering ``TLB_FILL``.

Both are independent of the RTL: they build headers with :class:`hw.packet.Header` and read payload from
a :class:`verif.harness.gpu_memory.GpuMemory`.
"""

import collections
import dataclasses

from hw.gpu_nic.receive_path import pack_token_meta, unpack_token_meta
from hw.gpu_nic.request_gen import MAX_ROW_FLITS, DescOp, Descriptor, descriptor_layout
from hw.packet import EType, ErrorCode, Header, Opcode, Packet, RedOp, payload_flits

from verif.harness.structs import pack

__all__ = ["Desc", "desc_error", "request_packets", "RxModel", "RxConfigValues", "FLIT_BYTES", "row_packets",
           "NicModel", "ACCEPT"]

FLIT_BYTES = 16
ADDR_MASK = (1 << 48) - 1

_LAND_ADDR = {Opcode.WRITE.value, Opcode.MM_ST.value, Opcode.DYN_ST.value}
_LAND_TAG = {Opcode.READ_RESP.value, Opcode.RED_RESP.value}
_READS = {Opcode.READ.value, Opcode.RED_READ.value}
#: The opcodes a receive path takes, per ``accept`` (the RTL's :class:`hw.gpu_nic.receive_path.ReceivePath`).
ACCEPT = {
    "all": frozenset(_LAND_ADDR | _LAND_TAG | _READS | {Opcode.ERROR.value}),
    "req": frozenset(_LAND_ADDR | _READS | {Opcode.TLB_FILL.value}),
    "resp": frozenset(_LAND_TAG | {Opcode.ERROR.value}),
}
N_REMOTE_CODES = len(ErrorCode)     # as hw.gpu_nic.receive_path


@dataclasses.dataclass
class Desc:
    op: int                 # DescOp value
    mask: int
    index: int
    group: int
    addr: int               # byte address
    length: int             # flits
    etype: int = 0
    redop: int = 0

    def pack(self, ports: int | None = None) -> int:
        """The descriptor's bits in the layout of a ``ports``-port system (None: up to 64 ports)."""
        return pack(descriptor_layout(ports), op=self.op, mask=self.mask, index=self.index, group=self.group,
                           addr=self.addr, length=self.length, etype=self.etype, redop=self.redop)


def desc_error(d: Desc, *, ports: int, groups: int, unicast: bool, static: bool = False) -> str | None:
    """The :class:`hw.gpu_nic.request_gen.DescError` a bad descriptor counts (None when it is good).
    ``static``: static multimem mode (ignored when ``unicast``), which has no mask."""
    static = static and not unicast
    if not static and (d.mask == 0 or d.mask >> ports):
        return "BAD_MASK"
    if not 1 <= d.length <= MAX_ROW_FLITS:
        return "BAD_LENGTH"
    if d.op == DescOp.LD_REDUCE.value and (d.etype not in {e.value for e in EType} or
                                           d.redop not in {r.value for r in RedOp}):
        return "BAD_TYPE"
    if (unicast or static) and d.group >= groups:
        return "BAD_GROUP"
    return None


def request_packets(d: Desc, *, port: int, unicast: bool, row_shift: int, rbase: list[int], max_payload: int,
                    memory, tags: int, next_tag: int, static: bool = False):
    """(packets, tag bindings [(tag, byte address)], next tag) for one good descriptor. ``static``: static
    multimem mode (``MM_ST``/``MM_LD_REDUCE`` at the symmetric address; ignored when ``unicast``)."""
    packets, bindings = [], []
    chunks = [(off, min(max_payload, d.length - off)) for off in range(0, d.length, max_payload)]
    store = d.op == DescOp.STORE.value
    src_flit = d.addr // FLIT_BYTES

    def payload(off, n):
        return [memory.read(src_flit + off + i) for i in range(n)]
    if static and not unicast:
        for off, n in chunks:
            addr = (rbase[d.group] + (d.index << row_shift) + off * FLIT_BYTES) & ADDR_MASK
            if store:
                packets.append(Packet(Header(opcode=Opcode.MM_ST, src=port, length=n, group=d.group, addr=addr),
                                      payload(off, n)))
            else:
                packets.append(Packet(Header(opcode=Opcode.MM_LD_REDUCE, src=port, tag=next_tag, length=n,
                                             etype=d.etype, redop=d.redop, group=d.group, addr=addr), []))
                bindings.append((next_tag, (d.addr + off * FLIT_BYTES) & ADDR_MASK))
                next_tag = (next_tag + 1) % tags
        return packets, bindings, next_tag
    if not unicast:
        for off, n in chunks:
            if store:
                h = Header(opcode=Opcode.DYN_ST, src=port, length=n, group=d.group, mask=d.mask, index=d.index,
                           offset=off)
                packets.append(Packet(h, payload(off, n)))
            else:
                h = Header(opcode=Opcode.DYN_LD_REDUCE, src=port, tag=next_tag, length=n, etype=d.etype,
                           redop=d.redop, group=d.group, mask=d.mask, index=d.index, offset=off)
                packets.append(Packet(h, []))
                bindings.append((next_tag, (d.addr + off * FLIT_BYTES) & ADDR_MASK))
                next_tag = (next_tag + 1) % tags
        return packets, bindings, next_tag
    dests = [g for g in range(64) if d.mask >> g & 1]
    for k, g in enumerate(dests):
        for off, n in chunks:
            remote = (rbase[d.group] + (d.index << row_shift) + off * FLIT_BYTES) & ADDR_MASK
            if store:
                packets.append(Packet(Header(opcode=Opcode.WRITE, src=port, length=n, dst=g, addr=remote),
                                      payload(off, n)))
            else:
                packets.append(Packet(Header(opcode=Opcode.READ, src=port, tag=next_tag, length=n, dst=g,
                                             addr=remote), []))
                land = d.addr + (k * d.length + off) * FLIT_BYTES
                bindings.append((next_tag, land & ADDR_MASK))
                next_tag = (next_tag + 1) % tags
    return packets, bindings, next_tag


@dataclasses.dataclass
class RxConfigValues:
    port: int = 3
    row_shift: int = 9
    win_base: int = 0x40_0000
    win_rows: int = 64
    meta_flit: int = 19
    expert_base: int = 32
    dyn_base: tuple = (0x40_0000, 0x80_0000, 0xC0_0000, 0x100_0000)


class RxModel:
    """The receive path's expected behaviour, packet by packet (in commit order)."""

    def __init__(self, cfg: RxConfigValues, *, memory, experts: int, tile_size: int, max_slots: int, groups: int,
                 tags: int, max_payload: int, accept: str = "all"):
        if accept not in ACCEPT:
            raise ValueError(f"accept must be one of {sorted(ACCEPT)}, got {accept!r}")
        self.accept = ACCEPT[accept]
        self.cfg = cfg
        self.memory = memory             # GpuMemory: the expected image (and the data reads return)
        self.experts, self.tile_size, self.max_slots = experts, tile_size, max_slots
        self.groups, self.tags, self.max_payload = groups, tags, max_payload
        self.bound: dict[int, int] = {}  # tag -> flit address
        self.slots = [0] * experts
        self.errors = collections.Counter()
        self.responses: list[Packet] = []
        self.arrivals: list[tuple] = []  # (local expert, tile, slot, row)
        self.writes = 0
        self.fills: list[Header] = []    # TLB_FILL headers passed to the memory manager, in order
        self.remote_codes = [0] * N_REMOTE_CODES

    def bind(self, tag: int, byte_addr: int) -> None:
        self.bound[tag] = byte_addr // FLIT_BYTES

    def clear(self) -> None:
        self.slots = [0] * self.experts

    def _known(self, op) -> bool:
        return op in self.accept

    def receive(self, flits) -> str:
        """Apply one packet (list of :class:`hw.packet.Flit`); returns what happened (for logs)."""
        h = Header.decode(flits[0].data)
        op = h.opcode
        if len(flits) > self.max_payload + 1:      # cannot be staged: dropped as it arrives
            return self._err("BAD_LENGTH" if h.length > self.max_payload else "LENGTH_MISMATCH")
        if any(f.poison for f in flits):
            return self._err("POISONED")
        if not self._known(op):
            return self._err("UNKNOWN_OPCODE")
        if h.length > self.max_payload:
            return self._err("BAD_LENGTH")
        if len(flits) != 1 + payload_flits(op, h.length):
            return self._err("LENGTH_MISMATCH")
        if op == Opcode.DYN_ST.value and h.group >= self.groups:
            return self._err("BAD_GROUP")
        if op in (Opcode.READ_RESP.value, Opcode.RED_RESP.value) and h.tag not in self.bound:
            return self._err("UNKNOWN_TAG")
        if op in (Opcode.READ.value, Opcode.RED_READ.value):
            start = (h.addr & ADDR_MASK) // FLIT_BYTES
            data = [self.memory.read(start + i) for i in range(h.length)]
            red = op == Opcode.RED_READ.value
            rh = Header(opcode=Opcode.RED_READ_RESP if red else Opcode.READ_RESP, src=self.cfg.port, tag=h.tag,
                        length=h.length, etype=h.etype if red else 0, redop=h.redop if red else 0, dst=h.src,
                        xtag=h.xtag)
            self.responses.append(Packet(rh, data))
            return "read"
        if op == Opcode.TLB_FILL.value:
            self.fills.append(h)
            return "fill"
        if op == Opcode.ERROR.value:
            self.errors["REMOTE_ERROR"] += 1
            self.remote_codes[h.code if h.code < N_REMOTE_CODES else 0] += 1
            self.bound.pop(h.tag, None)
            return "error"
        if op == Opcode.DYN_ST.value:
            base = self.cfg.dyn_base[h.group] + (h.index << self.cfg.row_shift)
            addr = (base & ADDR_MASK) // FLIT_BYTES + h.offset
        elif op in (Opcode.READ_RESP.value, Opcode.RED_RESP.value):
            addr = self.bound.pop(h.tag)
        else:
            addr = (h.addr & ADDR_MASK) // FLIT_BYTES
        for i, f in enumerate(flits[1:]):
            a = (addr + i) & ((1 << 44) - 1)
            self.memory.write(a, f.data)
            self.writes += 1
            self._maybe_meta(a, f.data)
        return "write"

    def _err(self, name):
        self.errors[name] += 1
        return name

    def _maybe_meta(self, flit_addr, data):
        c = self.cfg
        rel = (flit_addr - c.win_base // FLIT_BYTES) & ((1 << 44) - 1)
        stride = 1 << (c.row_shift - 4)
        row, within = divmod(rel, stride)
        if row >= c.win_rows or within != c.meta_flit:
            return
        lb = self.tile_size.bit_length() - 1
        for e in unpack_token_meta(data):
            local = e - c.expert_base
            if not 0 <= local < self.experts:
                continue
            slot = self.slots[local]
            if slot >= self.max_slots:
                self.errors["SLOT_OVERFLOW"] += 1
                continue
            self.slots[local] += 1
            self.arrivals.append((local, slot >> lb, slot, row))


def row_packets(*, opcode, src, row, row_flits, meta_experts, max_payload, rng, group=0, win_base=0,
                row_shift=9, index=None):
    """A dispatched token row as packets: ``row_flits`` flits whose last one is the metadata flit, sent
    as ``DYN_ST`` (``index`` = row) or as translated ``WRITE`` deliveries into the window."""
    data = [rng.getrandbits(128) for _ in range(row_flits - 1)] + [pack_token_meta(meta_experts)]
    out = []
    for off in range(0, row_flits, max_payload):
        n = min(max_payload, row_flits - off)
        if opcode == Opcode.DYN_ST:
            h = Header(opcode=Opcode.DYN_ST, src=src, length=n, group=group, mask=1, index=row if index is None
                       else index, offset=off)
        else:
            addr = win_base + (row << row_shift) + off * FLIT_BYTES
            h = Header(opcode=Opcode.WRITE, src=src, length=n, dst=0, addr=addr)
        out.append(Packet(h, data[off:off + n]))
    return out



class NicModel:
    """The composed NIC on a DySHARP link, packet by packet per virtual channel.

    ``receive(vc, flits)`` applies a downlink packet to the request path (VC 0) or the response path
    (VC 1, no token window); a ``TLB_FILL`` is served at once by ``mm`` (a
    :class:`verif.models.memory_manager.MemoryManagerSpec`: the manager takes fills one at a time in
    arrival order, so serving in order is exact) and its ``TLB_FILL_RESP`` appended to ``fill_responses``.
    ``read_responses`` are the request path's ``READ_RESP``/``RED_READ_RESP`` in order. Both paths write
    ``memory``; their relative order is not modelled (tests keep their address ranges apart).
    """

    def __init__(self, cfg: RxConfigValues, *, memory, mm, experts: int, tile_size: int, max_slots: int,
                 groups: int, tags: int, max_payload: int):
        kw = dict(memory=memory, experts=experts, tile_size=tile_size, max_slots=max_slots, groups=groups,
                  tags=tags, max_payload=max_payload)
        self.cfg = cfg
        self.req = RxModel(cfg, accept="req", **kw)
        self.rsp = RxModel(dataclasses.replace(cfg, win_rows=0), accept="resp", **kw)
        self.mm = mm
        self.fill_responses: list[Packet] = []

    @property
    def read_responses(self) -> list[Packet]:
        return self.req.responses

    def bind(self, tag: int, byte_addr: int) -> None:
        self.rsp.bind(tag, byte_addr)

    def receive(self, vc: int, flits) -> str:
        what = (self.req if vc == 0 else self.rsp).receive(flits)
        if what == "fill":
            h = self.req.fills[-1]
            addr, code = self.mm.serve(h.group, h.index, h.src)
            port = self.cfg.port
            self.fill_responses.append(Packet(Header(opcode=Opcode.TLB_FILL_RESP, src=port, dst=port, tag=h.tag,
                                                     addr=addr, code=code), []))
        return what
