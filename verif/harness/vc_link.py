"""Agents for the 2-VC credit link (``<prefix>__valid/__vc/__flit/__credit``, see :mod:`hw.vc_link`).

:class:`VcLinkSource` sends packets into a receiver (a DySHARP switch ``rx`` port): one packet queue per
virtual channel, one credit counter per VC (the receiver returns ``credit`` = 2 bits per VC per cycle),
flits of the two VCs interleaved flit by flit (a random pick among the VCs that have a flit and a credit),
random ``valid`` gaps. :class:`VcLinkSink` is the receiving end of a sender (a switch ``tx`` port): a
receive buffer of ``credits[v]`` flits per VC whose credits go back after random delays (random
backpressure, per VC), per-VC packet reassembly (``last`` framing), and the checks that the sender never
sends on a VC without a credit and (optionally) that every packet travels on its opcode's VC.

Per cycle each agent reads its inputs once as ints and writes a port only when it changes
(:class:`verif.harness.structs.Port`); queued flits are encoded once, when the packet is queued. Like
:mod:`verif.harness.credit`, both are stepped by :class:`verif.harness.cycler.Cycler`.
"""

import collections

from hw.credit import CREDIT_RETURN_BITS, CREDIT_RETURN_MAX
from hw.packet import N_VCS, Flit, Header, Packet, flit_layout, pack_flit, vc_of

from verif.harness.credit import CreditProtocolError
from verif.harness.cycler import Agent
from verif.harness.gates import Gate
from verif.harness.structs import Port

__all__ = ["VcLinkSource", "VcLinkSink", "CreditProtocolError", "VcClassError", "credit_field",
           "per_vc"]

_CMASK = (1 << CREDIT_RETURN_BITS) - 1


class VcClassError(AssertionError):
    """A packet arrived on the wrong virtual channel for its opcode."""


def per_vc(value, what: str) -> tuple:
    """``value`` (one int for both VCs, or one per VC) as a tuple of ``N_VCS`` ints >= 0."""
    t = tuple(value) if isinstance(value, (tuple, list)) else (value,) * N_VCS
    if len(t) != N_VCS or any(not isinstance(x, int) or x < 0 for x in t):
        raise ValueError(f"{what} must be an int >= 0 or {N_VCS} of them, got {value!r}")
    return t


def credit_field(bits: int, vc: int) -> int:
    """The credits returned for ``vc`` in one cycle's ``credit`` vector."""
    return (bits >> (CREDIT_RETURN_BITS * vc)) & _CMASK


class VcLinkSource(Agent):
    """Sends packets on a 2-VC link. ``credits`` is the receiver's buffer per VC (one int or a pair).

    ``send(packet, vc=None)``: ``vc`` defaults to the opcode's VC (:func:`hw.packet.vc_of`). ``gap`` and
    ``burst`` shape random idle cycles (:class:`Gate`); ``on_sent(packet_id, cycle)`` is called when a
    packet's first flit leaves. ``interleave`` is the chance per flit of switching to the other VC when
    both could send (1.0 alternates, 0.0 sends VC 0 first whenever it can).

    Fault injection (:mod:`verif.faults`): ``credit_filter(vc, n, cycle) -> n'`` rewrites each non-zero
    credit return as it arrives (drop or duplicate a credit on the wire).
    """

    def __init__(self, dut, prefix: str, rng, *, credits, flit_width: int = 128, gap: float = 0.0,
                 burst: float = 1.0, interleave: float = 0.5, ignore_credits: bool = False, on_sent=None):
        self.name = prefix
        self.valid = Port(getattr(dut, f"{prefix}__valid"))
        self.vc = Port(getattr(dut, f"{prefix}__vc"))
        self.flit = Port(getattr(dut, f"{prefix}__flit"))
        self.credit = Port(getattr(dut, f"{prefix}__credit"))
        self.credits = list(per_vc(credits, "credits"))
        self.flit_width = flit_width
        self.rng = rng
        self.gate = Gate(rng, gap, burst)
        self.interleave = interleave
        self.ignore_credits = ignore_credits
        self.queues = [collections.deque() for _ in range(N_VCS)]   # (flit bits, packet id, is_first)
        self.on_sent = on_sent
        self.flits_sent = [0] * N_VCS
        self.packets_sent = [0] * N_VCS
        self.last_vc = 0
        self.credit_filter = None
        self.valid.write(0)
        self.vc.write(0)

    def send(self, packet, vc: int | None = None, packet_id=None) -> None:
        """Queue a :class:`Packet` (or a list of :class:`Flit`) on ``vc``."""
        flits = packet.flits(self.flit_width) if isinstance(packet, Packet) else list(packet)
        if vc is None:
            vc = vc_of(Header.decode(flits[0].data).opcode)
        if vc not in range(N_VCS):
            raise ValueError(f"{self.name}: vc must be in 0..{N_VCS - 1}, got {vc!r}")
        encode = self.flit.encode
        q = self.queues[vc]
        for k, f in enumerate(flits):
            q.append((encode(pack_flit(f, self.flit_width)), packet_id, k == 0))

    @property
    def idle(self) -> bool:
        return not any(self.queues)

    def pending(self, vc: int) -> int:
        """Flits queued on ``vc``."""
        return len(self.queues[vc])

    def _ready(self, v) -> bool:
        return bool(self.queues[v]) and (self.credits[v] > 0 or self.ignore_credits)

    def drive(self, cycle):
        can = [v for v in range(N_VCS) if self._ready(v)]
        if can and self.gate.open():
            if len(can) == 1:
                v = can[0]
            else:
                other = 1 - self.last_vc
                v = other if self.rng.random() < self.interleave else self.last_vc
            bits, pid, first = self.queues[v].popleft()
            self.flit.write_bits(bits)
            self.vc.write(v)
            self.valid.write(1)
            self.credits[v] -= 1
            self.flits_sent[v] += 1
            self.last_vc = v
            if first:
                self.packets_sent[v] += 1
                if self.on_sent:
                    self.on_sent(pid, cycle)
        else:
            self.valid.write(0)

    def sample(self, cycle):
        bits = self.credit.read()
        if bits:
            for v in range(N_VCS):
                n = credit_field(bits, v)
                if n and self.credit_filter is not None:
                    n = self.credit_filter(v, n, cycle)
                self.credits[v] += n


class VcLinkSink(Agent):
    """Receives from a 2-VC link sender that was built with ``credits`` per VC (the receive buffer).

    Each VC's buffered flits are drained (their credits returned, up to ``batch`` per cycle, at most 3)
    in the cycles its own gate is open: ``stall``/``burst`` per VC (one value or a pair) are the random
    backpressure. ``on_packet(vc, flits, cycle)`` gets each complete packet (a list of :class:`Flit`),
    ``on_flit(vc, flit, cycle)`` each flit. With ``check_class`` a packet whose opcode belongs to the other
    VC raises :class:`VcClassError`; a flit sent on a VC with no credit left raises
    :class:`CreditProtocolError`. :meth:`withhold` stops one VC's credits altogether (a receiver whose VC
    has stopped draining; off by default).

    Fault injection (:mod:`verif.faults`): ``credit_filter(vc, n, cycle) -> n'`` rewrites the credits put
    on the wire (the buffer still frees ``n``; ``available`` follows what the sender got). A flit that
    finds the buffer full (possible only after a duplicated credit) raises :class:`CreditProtocolError`,
    or with ``overflow="drop"`` is dropped like a GPU receive path does (:mod:`hw.gpu_nic.receive_path`):
    counted in ``overflows``, and its whole packet is discarded (delivered with ``poison`` on its last
    flit).
    """

    def __init__(self, dut, prefix: str, rng, *, credits, flit_width: int = 128, stall=0.0, burst=1.0,
                 on_packet=None, on_flit=None, batch: int = 1, check_class: bool = True, overflow: str = "raise"):
        if overflow not in ("raise", "drop"):
            raise ValueError(f"overflow must be 'raise' or 'drop', got {overflow!r}")
        if not 1 <= batch <= CREDIT_RETURN_MAX:
            raise ValueError(f"batch must be in 1..{CREDIT_RETURN_MAX}, got {batch}")
        self.name = prefix
        self.valid = Port(getattr(dut, f"{prefix}__valid"))
        self.vc = Port(getattr(dut, f"{prefix}__vc"))
        self.flit = Port(getattr(dut, f"{prefix}__flit"))
        self.credit = Port(getattr(dut, f"{prefix}__credit"))
        self.flit_width = flit_width
        self.batch = batch
        self.check_class = check_class
        layout = flit_layout(flit_width)
        self._offsets = tuple(layout[name].offset for name in ("data", "last", "poison"))
        self._data_mask = (1 << flit_width) - 1
        stall = stall if isinstance(stall, (tuple, list)) else (stall,) * N_VCS
        burst = burst if isinstance(burst, (tuple, list)) else (burst,) * N_VCS
        self.gates = [Gate(rng, stall[v], burst[v]) for v in range(N_VCS)]
        self.capacity = per_vc(credits, "credits")
        self.available = list(self.capacity)     # credits the sender holds, as far as we know
        self.to_return = [0] * N_VCS              # buffered flits whose credit is not yet returned
        self.returning = [0] * N_VCS
        self.wire = [0] * N_VCS                   # credits put on the wire this cycle (after credit_filter)
        self.max_buffered = [0] * N_VCS
        self.partial = [[] for _ in range(N_VCS)]
        self.on_packet = on_packet
        self.on_flit = on_flit
        self.flits = [0] * N_VCS
        self.packets = [0] * N_VCS
        self.overflow = overflow
        self.overflows = [0] * N_VCS
        self.spoiled = [False] * N_VCS
        self.credit_filter = None
        self.withheld = [False] * N_VCS
        self.credit.write(0)

    def withhold(self, vc: int, on: bool = True) -> None:
        """Stop (``on``) or resume returning ``vc``'s credits: its buffer fills, the sender runs out of
        credits on that VC and must keep sending on the other."""
        self.withheld[vc] = on

    def set_stall(self, vc: int, stall: float, burst: float = 1.0, rng=None) -> None:
        """Change one VC's backpressure from now on."""
        self.gates[vc] = Gate(rng or self.gates[vc].rng, stall, burst)

    @property
    def idle(self) -> bool:
        return not any(self.partial)

    def drive(self, cycle):
        word = 0
        for v in range(N_VCS):
            n = min(self.to_return[v], self.batch) \
                if self.to_return[v] and not self.withheld[v] and self.gates[v].open() else 0
            self.returning[v] = n
            wire = self.credit_filter(v, n, cycle) if n and self.credit_filter is not None else n
            self.wire[v] = wire
            word |= wire << (CREDIT_RETURN_BITS * v)
        self.credit.write(word)

    def sample(self, cycle):
        if self.valid.high():
            v = self.vc.read()
            if self.available[v] <= 0:
                raise CreditProtocolError(f"{self.name}: flit sent on VC {v} without a credit at cycle {cycle}")
            self.available[v] -= 1
            bits = self.flit.read()
            d, l, p = self._offsets
            f = Flit((bits >> d) & self._data_mask, bool((bits >> l) & 1), bool((bits >> p) & 1))
            if self.to_return[v] >= self.capacity[v]:
                # No room (only after a duplicated credit): the flit is lost, and with it its packet.
                if self.overflow == "raise":
                    raise CreditProtocolError(f"{self.name}: flit sent on VC {v} into a full buffer at cycle "
                                              f"{cycle}")
                self.overflows[v] += 1
                self.spoiled[v] = True
            else:
                self.to_return[v] += 1
            self.max_buffered[v] = max(self.max_buffered[v], self.to_return[v])
            self.flits[v] += 1
            if self.spoiled[v] and f.last:
                f = Flit(f.data, True, True)
                self.spoiled[v] = False
            part = self.partial[v]
            if not part and self.check_class:
                op = Header.decode(f.data).opcode
                if vc_of(op) != v:
                    raise VcClassError(f"{self.name}: {Header.decode(f.data)!r} arrived on VC {v} at cycle "
                                       f"{cycle}; its class travels on VC {vc_of(op)}")
            if self.on_flit:
                self.on_flit(v, f, cycle)
            part.append(f)
            if f.last:
                self.partial[v] = []
                self.packets[v] += 1
                if self.on_packet:
                    self.on_packet(v, part, cycle)
        for v in range(N_VCS):
            if self.returning[v]:
                self.to_return[v] -= self.returning[v]
                self.available[v] += self.wire[v]
