"""Agents for credit links (``<prefix>__valid/__flit/__credit``, see :mod:`hw.credit`).

:class:`CreditSource` sends packets into a receiver (e.g. a switch ``rx`` port), spending one credit per
flit and idling ``valid`` for random gaps. :class:`CreditSink` receives from a sender (e.g. a switch
``tx`` port), returns credits after random stalls, checks that the sender never exceeds its credits, and
reassembles packets (``last`` framing), reporting poisoned ones separately.

Per cycle each agent reads its inputs once as ints (a flit in one read, decoded with the flit layout's
offsets) and writes a port only when its value changes; queued flits are encoded to the simulator's
format once, when the packet is queued (:class:`verif.harness.structs.Port`).
"""

import collections

from hw.credit import CREDIT_RETURN_MAX
from hw.packet import Flit, Packet, flit_layout, pack_flit

from verif.harness.cycler import Agent
from verif.harness.gates import Gate
from verif.harness.structs import Port

__all__ = ["CreditSource", "CreditSink", "CreditProtocolError"]


class CreditProtocolError(AssertionError):
    pass


class CreditSource(Agent):
    def __init__(self, dut, prefix: str, rng, *, credits: int, flit_width: int = 128, gap: float = 0.0,
                 burst: float = 1.0, ignore_credits: bool = False, on_sent=None):
        self.name = prefix
        self.valid = Port(getattr(dut, f"{prefix}__valid"))
        self.flit = Port(getattr(dut, f"{prefix}__flit"))
        self.credit = Port(getattr(dut, f"{prefix}__credit"))
        self.credits = credits
        self.flit_width = flit_width
        self.gate = Gate(rng, gap, burst)
        self.ignore_credits = ignore_credits
        self.queue = collections.deque()   # (flit as a bit string, packet id or None, is_first)
        self.on_sent = on_sent             # on_sent(packet_id, cycle) when a packet's first flit leaves
        self.flits_sent = 0
        self.valid.write(0)

    def send(self, packet, packet_id=None) -> None:
        """Queue a :class:`Packet` or a list of :class:`Flit` (for malformed framing)."""
        flits = packet.flits(self.flit_width) if isinstance(packet, Packet) else list(packet)
        encode = self.flit.encode
        for k, f in enumerate(flits):
            self.queue.append((encode(pack_flit(f, self.flit_width)), packet_id, k == 0))

    @property
    def idle(self) -> bool:
        return not self.queue

    def drive(self, cycle):
        if self.queue and (self.credits > 0 or self.ignore_credits) and self.gate.open():
            bits, pid, first = self.queue.popleft()
            self.flit.write_bits(bits)
            self.valid.write(1)
            self.credits -= 1
            self.flits_sent += 1
            if first and self.on_sent:
                self.on_sent(pid, cycle)
        else:
            self.valid.write(0)

    def sample(self, cycle):
        self.credits += self.credit.read()


class CreditSink(Agent):
    """``on_packet(flits, cycle)`` gets each complete packet (a list of :class:`Flit`). Each open cycle
    returns up to ``batch`` credits (the link's credit count is 0..3 per cycle)."""

    def __init__(self, dut, prefix: str, rng, *, credits: int, flit_width: int = 128, stall: float = 0.0,
                 burst: float = 1.0, on_packet=None, on_flit=None, batch: int = 1):
        if not 1 <= batch <= CREDIT_RETURN_MAX:
            raise ValueError(f"batch must be in 1..{CREDIT_RETURN_MAX}, got {batch}")
        self.batch = batch
        self.name = prefix
        self.valid = Port(getattr(dut, f"{prefix}__valid"))
        self.flit = Port(getattr(dut, f"{prefix}__flit"))
        self.credit = Port(getattr(dut, f"{prefix}__credit"))
        self.flit_width = flit_width
        layout = flit_layout(flit_width)
        self._offsets = tuple(layout[name].offset for name in ("data", "last", "poison"))
        self._data_mask = (1 << flit_width) - 1
        self.gate = Gate(rng, stall, burst)
        self.available = credits    # credits the sender holds, as far as we know
        self.to_return = 0          # buffered flits whose credit is not yet returned
        self.returning = False
        self.partial: list[Flit] = []
        self.on_packet = on_packet
        self.on_flit = on_flit
        self.flits = 0
        self.credit.write(0)

    def drive(self, cycle):
        self.returning = min(self.to_return, self.batch) if self.to_return and self.gate.open() else 0
        self.credit.write(self.returning)

    def sample(self, cycle):
        if self.valid.high():
            if self.available <= 0:
                raise CreditProtocolError(f"{self.name}: flit sent without a credit at cycle {cycle}")
            self.available -= 1
            self.to_return += 1
            self.flits += 1
            bits = self.flit.read()
            d, l, p = self._offsets
            f = Flit((bits >> d) & self._data_mask, bool((bits >> l) & 1), bool((bits >> p) & 1))
            if self.on_flit:
                self.on_flit(f, cycle)
            self.partial.append(f)
            if f.last:
                flits, self.partial = self.partial, []
                if self.on_packet:
                    self.on_packet(flits, cycle)
        if self.returning:
            self.to_return -= self.returning
            self.available += self.returning
