"""The address-translation interface between the AL-TLB and the blocks that need physical addresses.

A client (the multicast egress, the ``ld_reduce`` engine) sends a :class:`TranslateRequest` naming the
multimem group, the algebraic index (the token's row), the destination port and the requesting port; the
translator answers with a :class:`TranslateResponse`: the destination's physical byte address of that row
(the client adds ``offset * flit_bytes`` for a packet inside the row) or an error code (``ISOLATION``,
``OUT_OF_BOUNDS``, ``TLB_FAULT``). Responses may come back out of order (hit-under-miss): clients match
them by ``tag``, which the translator returns unchanged.

:func:`translate_signature` is the client's view; a translator uses ``wiring.flipped`` of it.
"""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import ADDR_BITS, GROUP_BITS, PORT_BITS, ErrorCode

__all__ = ["TranslateRequest", "TranslateResponse", "translate_signature", "TAG_BITS"]

TAG_BITS = 12


class TranslateRequest(data.Struct):
    group: GROUP_BITS
    index: 18
    dst: PORT_BITS
    src: PORT_BITS
    tag: TAG_BITS


class TranslateResponse(data.Struct):
    addr: ADDR_BITS
    code: ErrorCode
    tag: TAG_BITS


def translate_signature() -> wiring.Signature:
    """Client side: ``req`` stream out, ``resp`` stream in."""
    return wiring.Signature({
        "req": Out(stream.Signature(TranslateRequest)),
        "resp": In(stream.Signature(TranslateResponse)),
    })
