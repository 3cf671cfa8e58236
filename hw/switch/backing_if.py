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

from ..packet import ADDR_BITS, GROUP_BITS, PORT_BITS, ErrorCode

__all__ = ["BackingRequest", "BackingResponse", "backing_signature", "BACKING_TAG_BITS"]

BACKING_TAG_BITS = 8


class BackingRequest(data.Struct):
    group: GROUP_BITS  #: multimem group handle
    index: 18    #: algebraic index (the token's row in the logical tensor)
    dst: PORT_BITS  #: the GPU whose table is read (the fabric routes the request by it)
    src: PORT_BITS  #: the GPU whose request missed (recorded when a slot is allocated, checked on reuse)
    tag: BACKING_TAG_BITS


class BackingResponse(data.Struct):
    addr: ADDR_BITS  #: physical byte address of the row on ``dst`` (0 with an error code)
    code: ErrorCode
    tag: BACKING_TAG_BITS


def backing_signature() -> wiring.Signature:
    """Requester side: ``req`` stream out, ``resp`` stream in."""
    return wiring.Signature({
        "req": Out(stream.Signature(BackingRequest)),
        "resp": In(stream.Signature(BackingResponse)),
    })
