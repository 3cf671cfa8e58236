"""Pack and unpack flat Amaranth struct layouts as ints, for driving and reading struct ports in cocotb.

The bit offsets come from the layout itself (``data.Layout.cast(...)``), so the testbench and the RTL share
one definition. Nested structs are addressed with dotted names (``"route.uni.dst"``) only where needed;
the GPU-side interfaces are flat.
"""

import enum as py_enum

from amaranth.lib import data

__all__ = ["pack_struct", "unpack_struct", "struct_width"]


def _fields(layout):
    return {name: (f.offset, f.width) for name, f in data.Layout.cast(layout)}


def struct_width(layout) -> int:
    return data.Layout.cast(layout).size


def pack_struct(layout, **values) -> int:
    """Bits of ``layout`` with the given field values (ints or enum members; missing fields are 0)."""
    fields = _fields(layout)
    bits = 0
    for name, v in values.items():
        if name not in fields:
            raise KeyError(f"{name!r} is not a field of {layout!r}; fields: {', '.join(fields)}")
        off, width = fields[name]
        v = v.value if isinstance(v, py_enum.Enum) else int(v)
        if not 0 <= v < (1 << width):
            raise ValueError(f"field {name!r}={v} does not fit in {width} bits")
        bits |= v << off
    return bits


def unpack_struct(layout, bits: int) -> dict:
    """Field name -> int for the bits of ``layout``."""
    bits = int(bits)
    return {name: (bits >> off) & ((1 << width) - 1) for name, (off, width) in _fields(layout).items()}
