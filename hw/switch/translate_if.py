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

from ..packet import ADDR_BITS, GROUP_BITS, INDEX_BITS, PORT_BITS, ErrorCode, widened

__all__ = ["TranslateRequest", "TranslateResponse", "translate_signature", "translate_request_layout", "TAG_BITS"]

TAG_BITS = 12


class TranslateRequest(data.Struct):
    group: GROUP_BITS
    index: INDEX_BITS
    dst: PORT_BITS
    src: PORT_BITS
    tag: TAG_BITS


class TranslateResponse(data.Struct):
    addr: ADDR_BITS
    code: ErrorCode
    tag: TAG_BITS


def translate_request_layout(ports: int | None = None):
    """:class:`TranslateRequest` in the header format of a ``ports``-port switch (:func:`hw.packet.widened`)."""
    return widened(TranslateRequest, ports, index="index_bits", dst="port_bits", src="port_bits")


def translate_signature(ports: int | None = None) -> wiring.Signature:
    """Client side: ``req`` stream out, ``resp`` stream in (the request's widths: a ``ports``-port switch's)."""
    return wiring.Signature({
        "req": Out(stream.Signature(translate_request_layout(ports))),
        "resp": In(stream.Signature(TranslateResponse)),
    })
