"""Random packet generation for switch-level tests and benchmarks."""

import random

from hw.packet import EType, Header, Opcode, Packet, RedOp

__all__ = ["random_payload", "unicast_packet", "dynamic_packet", "static_packet", "random_packet"]


def random_payload(rng: random.Random, flits: int, flit_width: int = 128) -> list[int]:
    return [rng.getrandbits(flit_width) for _ in range(flits)]


def unicast_packet(rng, src, dst, length, *, tag=None, opcode=Opcode.WRITE, flit_width=128) -> Packet:
    tag = rng.getrandbits(8) if tag is None else tag
    h = Header(opcode=opcode, src=src, tag=tag, length=length, dst=dst, addr=rng.getrandbits(44) << 4)
    n = length if opcode in (Opcode.WRITE, Opcode.READ_RESP) else 0
    return Packet(h, random_payload(rng, n, flit_width))


def dynamic_packet(rng, src, mask, length, *, reduce=False, flit_width=128) -> Packet:
    if reduce:
        h = Header(opcode=Opcode.DYN_LD_REDUCE, src=src, tag=rng.getrandbits(8), length=length,
                   etype=rng.choice(list(EType)), redop=rng.choice(list(RedOp)), group=rng.getrandbits(8),
                   mask=mask, index=rng.getrandbits(18), offset=rng.getrandbits(10))
        return Packet(h, [])
    h = Header(opcode=Opcode.DYN_ST, src=src, tag=rng.getrandbits(8), length=length, group=rng.getrandbits(8),
               mask=mask, index=rng.getrandbits(18), offset=rng.getrandbits(10))
    return Packet(h, random_payload(rng, length, flit_width))


def static_packet(rng, src, group, length, flit_width=128) -> Packet:
    h = Header(opcode=Opcode.MM_ST, src=src, tag=rng.getrandbits(8), length=length, group=group,
               addr=rng.getrandbits(44) << 4)
    return Packet(h, random_payload(rng, length, flit_width))


def random_packet(rng, src, ports, *, max_payload=16, mc_frac=0.3, static_groups=(), flit_width=128):
    """Mixed traffic: unicast writes/reads, dynamic multicast stores and reductions, static stores."""
    length = rng.randint(0, max_payload)
    r = rng.random()
    if r < mc_frac:
        if static_groups and rng.random() < 0.3:
            return static_packet(rng, src, rng.choice(static_groups), max(1, length), flit_width)
        mask = 0
        while mask == 0:
            mask = rng.getrandbits(ports)
        return dynamic_packet(rng, src, mask, length, reduce=rng.random() < 0.2, flit_width=flit_width)
    dst = rng.randrange(ports)
    op = Opcode.READ if rng.random() < 0.15 else Opcode.WRITE
    return unicast_packet(rng, src, dst, length, opcode=op, flit_width=flit_width)
