"""Reference model of the reduction buffer's contract (:mod:`hw.switch.reduction_buffer`).

It sees what the DUT sees, in the DUT's order: allocations (with the granted ``rtag``) and contribution
flits in the order the DUT accepted them. From that it says what the DUT must send back: a ``RED_RESP``
with, per payload flit, the contributions reduced in *arrival order* (bit-exact, :mod:`verif.models.reduce_ref`),
or an ``ERROR`` with the right code, and how many stale flits, mismatches and aborts the counters must
show. Timeouts depend on the DUT's scanner position, so tests name the entries that must time out and the
model checks the window.
"""

import dataclasses

import numpy as np

from hw.packet import EType, ErrorCode, Header, Opcode, Packet, RedOp

from verif.models import reduce_ref as R

__all__ = ["Contribution", "Use", "ReductionBufferModel", "random_lanes", "flit_lanes"]


@dataclasses.dataclass
class Contribution:
    rtag: int
    flit: int
    length: int
    etype: int
    data: int = 0
    abort: bool = False
    code: int = 0


@dataclasses.dataclass
class Use:
    """One allocation of an entry."""
    rtag: int
    src: int
    tag: int
    etype: int
    op: int
    length: int
    expected: int
    flits: list = dataclasses.field(default_factory=list)   # per flit: contributions (int words) in order

    def __post_init__(self):
        self.flits = [[] for _ in range(self.length)]


def flit_lanes(etype, word: int, flit_width: int) -> np.ndarray:
    bits = 16 if R.is16(etype) else 32
    return R.int_to_lanes(word, bits, flit_width // bits)


def random_lanes(rng, etype, flit_width: int, special_frac: float = 0.1) -> int:
    """One flit of random elements (a ``special_frac`` share of them special values), as an int."""
    bits = 16 if R.is16(etype) else 32
    n = flit_width // bits
    lanes = rng.integers(0, 1 << bits, size=n, dtype=np.uint64)
    if etype in (EType.BF16, EType.FP16, EType.FP32) and rng.random() < 0.5:
        # Mostly moderate magnitudes so sums are meaningful (random bit patterns are often huge/NaN).
        vals = rng.normal(0, 4, size=n).astype(np.float32)
        if etype == EType.FP32:
            lanes = vals.view(np.uint32).astype(np.uint64)
        elif etype == EType.FP16:
            lanes = vals.astype(np.float16).view(np.uint16).astype(np.uint64)
        else:
            lanes = (vals.view(np.uint32) >> np.uint32(16)).astype(np.uint64)
    special = np.array(R.special_values(etype), dtype=np.uint64)
    pick = rng.random(n) < special_frac
    lanes = np.where(pick, rng.choice(special, size=n), lanes)
    return R.lanes_to_int(lanes, bits)


class ReductionBufferModel:
    def __init__(self, flit_width: int):
        self.flit_width = flit_width
        self.live: dict[int, Use] = {}
        self.stale = 0
        self.mismatches = 0
        self.aborts = 0
        self.timeouts = 0
        self.completed = 0

    def allocate(self, rtag: int, *, src, tag, etype, op, length, expected) -> Use:
        assert rtag not in self.live, f"rtag {rtag:#x} granted twice while in flight"
        use = Use(rtag, src, tag, EType(etype).value, RedOp(op).value, length, expected)
        self.live[rtag] = use
        return use

    def _error(self, use: Use, code: ErrorCode) -> Packet:
        del self.live[use.rtag]
        return Packet(Header(opcode=Opcode.ERROR, src=use.src, tag=use.tag, dst=use.src, code=code))

    def contribute(self, c: Contribution) -> Packet | None:
        """Apply an accepted contribution; returns the packet the DUT must send if it completes an entry."""
        use = self.live.get(c.rtag)
        if use is None:
            self.stale += 1
            return None
        if c.abort:
            self.aborts += 1
            return self._error(use, ErrorCode(c.code))
        if c.etype != use.etype or c.length != use.length or c.flit >= use.length:
            self.mismatches += 1
            return self._error(use, ErrorCode.TYPE_MISMATCH)
        use.flits[c.flit].append(c.data)
        if any(len(f) < use.expected for f in use.flits):
            return None
        # Complete. (More than `expected` contributions to a flit is a protocol violation the tests avoid.)
        del self.live[use.rtag]
        self.completed += 1
        payload = []
        for words in use.flits:
            lanes = [flit_lanes(use.etype, w, self.flit_width) for w in words]
            bits = 16 if R.is16(use.etype) else 32
            payload.append(R.lanes_to_int(R.reduce_sequence(lanes, use.etype, use.op), bits))
        h = Header(opcode=Opcode.RED_RESP, src=use.src, tag=use.tag, dst=use.src, length=use.length,
                   etype=use.etype, redop=use.op)
        return Packet(h, payload)

    def time_out(self, rtag: int) -> Packet:
        """The DUT timed this entry out (the test expected it to)."""
        self.timeouts += 1
        return self._error(self.live[rtag], ErrorCode.TIMEOUT)


def engine_request_error(h: Header, *, ports: int, max_length: int, groups: dict[int, int],
                         last: bool = True, poison: bool = False) -> ErrorCode:
    """The error the ``ld_reduce`` engine answers a request header with (``NONE`` if it is accepted):
    ``last``/``poison`` are the header flit's. Every request that is not ``NONE`` gets exactly one
    ``ERROR`` with this code (the table of :mod:`hw.switch.reduction_engine`)."""
    from hw.packet import check_header
    if poison:
        return ErrorCode.POISONED
    if h.opcode not in (Opcode.DYN_LD_REDUCE.value, Opcode.MM_LD_REDUCE.value):
        return ErrorCode.UNKNOWN_OPCODE
    if h.length == 0 or h.length > max_length:
        return ErrorCode.BAD_LENGTH
    if not last:
        return ErrorCode.LENGTH_MISMATCH
    return check_header(h, ports=ports, max_payload=max_length, groups=groups, src=h.src)
