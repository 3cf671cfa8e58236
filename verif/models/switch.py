"""Reference model of the NVSwitch datapath's delivery contract (see :mod:`hw.switch.nvswitch`).

Given the flits a source injects on a port, it says what each output must deliver: the intact packet to
every destination, a poisoned frame (which receivers drop) when the length disagrees with the framing,
and the ``ERROR`` response that goes back out of the arrival port. It knows nothing of cycles: ordering is
per (source, destination) pair, which is what the switch guarantees.
"""

import dataclasses

from hw.packet import (OPCODES, ErrorCode, Flit, Header, Opcode, Packet, check_header, payload_flits)

__all__ = ["SwitchModel", "Outcome", "POISONED", "error_response"]

POISONED = "<poisoned frame>"


@dataclasses.dataclass
class Outcome:
    deliveries: list            # [(dst port, Packet or POISONED)]
    error: ErrorCode            # NONE when the packet is well formed
    response: Packet | None     # the ERROR packet sent back to the arrival port


def error_response(port: int, tag: int, code: ErrorCode) -> Packet:
    return Packet(Header(opcode=Opcode.ERROR, src=port, tag=tag, dst=port, code=code))


class SwitchModel:
    def __init__(self, ports: int, max_payload: int = 16):
        self.ports = ports
        self.max_payload = max_payload
        self.groups: dict[int, int] = {}
        self.group_entries = 16

    def configure_group(self, handle: int, mask: int) -> bool:
        """Apply a group-table write; False if the switch must reject it (cfg_errors)."""
        if handle >= self.group_entries or mask >> self.ports:
            return False
        self.groups[handle] = mask
        return True

    def destinations(self, h: Header) -> list[int]:
        info = OPCODES[Opcode(h.opcode)]
        if info.routing == "dst":
            mask = 1 << h.dst
        elif info.routing == "group":
            mask = self.groups.get(h.group, 0)
        else:
            mask = h.mask
        return [p for p in range(self.ports) if mask >> p & 1]

    def route(self, port: int, flits: list[Flit]) -> Outcome:
        h = Header.decode(flits[0].data)
        code = check_header(h, ports=self.ports, max_payload=self.max_payload, groups=self.groups)
        if code != ErrorCode.NONE:
            return Outcome([], code, error_response(port, h.tag, code))
        dests = self.destinations(h)
        if len(flits) - 1 != payload_flits(h.opcode, h.length):
            code = ErrorCode.LENGTH_MISMATCH
            return Outcome([(d, POISONED) for d in dests], code, error_response(port, h.tag, code))
        packet = Packet.from_flits(flits)
        return Outcome([(d, packet) for d in dests], ErrorCode.NONE, None)
