"""The memory-request interface between the AL-TLB and the backing translation tables.

On a miss the AL-TLB (in the switch) reads the translation of (group, algebraic index) from the backing
table of the *destination* GPU: the request travels over that GPU's NVLink to its memory manager
(:mod:`hw.gpu_nic.memory_manager`), which owns the table and the receive layout and answers with the
physical address of the row or an error code. ``tag`` names the AL-TLB's miss-status holding register
(MSHR) and that MSHR's generation (see :mod:`hw.switch.al_tlb`: a response after the read timed out is
told apart by it) and comes back unchanged; responses may return in any order.

:func:`backing_signature` is the requester's (AL-TLB's) view; a table server uses ``wiring.flipped``.
"""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import ADDR_BITS, GROUP_BITS, INDEX_BITS, PORT_BITS, ErrorCode, widened

__all__ = ["BackingRequest", "BackingResponse", "backing_signature", "backing_request_layout", "BACKING_TAG_BITS"]

BACKING_TAG_BITS = 8


class BackingRequest(data.Struct):
    group: GROUP_BITS  #: multimem group handle
    index: INDEX_BITS    #: algebraic index (the token's row in the logical tensor)
    dst: PORT_BITS  #: the GPU whose table is read (the fabric routes the request by it)
    src: PORT_BITS  #: the GPU whose request missed (recorded when a slot is allocated, checked on reuse)
    tag: BACKING_TAG_BITS


class BackingResponse(data.Struct):
    addr: ADDR_BITS  #: physical byte address of the row on ``dst`` (0 with an error code)
    code: ErrorCode
    tag: BACKING_TAG_BITS


def backing_request_layout(ports: int | None = None):
    """:class:`BackingRequest` in the header format of a ``ports``-port switch (:func:`hw.packet.widened`)."""
    return widened(BackingRequest, ports, index="index_bits", dst="port_bits", src="port_bits")


def backing_signature(ports: int | None = None) -> wiring.Signature:
    """Requester side: ``req`` stream out, ``resp`` stream in (the request's widths: a ``ports``-port
    switch's)."""
    return wiring.Signature({
        "req": Out(stream.Signature(backing_request_layout(ports))),
        "resp": In(stream.Signature(BackingResponse)),
    })
