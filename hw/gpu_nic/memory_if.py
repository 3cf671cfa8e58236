"""The GPU-side memory ports that the NIC blocks use: a write stream and a read request/response pair.

Addresses are *flit addresses*: a byte address divided by the flit size (16 B at the default 128-bit
flit), so every access moves one whole flit. The memory itself (HBM behind the GPU's L2) is not part of
the RTL: testbenches attach a model (:class:`verif.harness.gpu_memory.GpuMemory`) that applies backpressure and
answers reads after a configurable latency.

* ``mem_write_signature``: ``stream`` of :func:`mem_write_layout` (``addr``, ``data``), from the NIC.
* ``mem_read_signature``: ``req`` (stream of ``addr``, from the NIC) and ``resp`` (stream of ``data``,
  to the NIC). Responses return in request order, one flit per request.
"""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import DEFAULT_FLIT_WIDTH, flit_layout

__all__ = ["BYTE_ADDR_BITS", "flit_shift", "flit_addr_bits", "mem_write_layout", "mem_write_signature",
           "mem_read_signature"]

BYTE_ADDR_BITS = 48      # the header's address field


def flit_shift(flit_width: int = DEFAULT_FLIT_WIDTH) -> int:
    """log2 of the flit size in bytes: byte address >> flit_shift = flit address."""
    flit_layout(flit_width)   # validates
    return (flit_width // 8).bit_length() - 1


def flit_addr_bits(flit_width: int = DEFAULT_FLIT_WIDTH) -> int:
    return BYTE_ADDR_BITS - flit_shift(flit_width)


def mem_write_layout(flit_width: int = DEFAULT_FLIT_WIDTH) -> data.StructLayout:
    return data.StructLayout({"addr": flit_addr_bits(flit_width), "data": flit_width})


def mem_write_signature(flit_width: int = DEFAULT_FLIT_WIDTH) -> wiring.Signature:
    """Seen from the writer (the NIC): a stream of (flit address, flit)."""
    return stream.Signature(mem_write_layout(flit_width))


def mem_read_signature(flit_width: int = DEFAULT_FLIT_WIDTH) -> wiring.Signature:
    """Seen from the reader (the NIC): requests out, in-order data back."""
    return wiring.Signature({
        "req": Out(stream.Signature(flit_addr_bits(flit_width))),
        "resp": In(stream.Signature(flit_width)),
    })
