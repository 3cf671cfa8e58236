"""Pack and unpack Amaranth ``data`` layouts as Python ints, from the layout's own field offsets.

Testbenches drive and read struct ports as flat vectors; these helpers keep the layout in one place (the
RTL's definition). Nested structs are addressed with dotted names (``"req.tag"``); enum fields take ints.
"""

import enum as py_enum
import functools

from amaranth.lib import data

__all__ = ["fields", "pack", "unpack"]


@functools.lru_cache(maxsize=None)
def fields(layout) -> dict[str, tuple[int, int]]:
    """Dotted field name -> (offset, width) for every leaf field."""
    out = {}

    def walk(lay, offset, prefix):
        for name, field in data.Layout.cast(lay):
            shape = field.shape
            if isinstance(shape, data.Layout) or (isinstance(shape, type) and
                                                  issubclass(shape, (data.Struct, data.Union))):
                walk(shape, offset + field.offset, prefix + name + ".")
            else:
                out[prefix + name] = (offset + field.offset, field.width)
    walk(layout, 0, "")
    return out


def pack(layout, /, **values) -> int:
    """Bits of ``layout`` with the given fields (``req__tag=`` for the nested ``req.tag``); others 0."""
    f = fields(layout)
    bits = 0
    for name, v in values.items():
        name = name.replace("__", ".")
        if name not in f:
            raise KeyError(f"{layout} has no field {name!r}; fields: {', '.join(f)}")
        off, width = f[name]
        v = v.value if isinstance(v, py_enum.Enum) else int(v)
        if not 0 <= v < (1 << width):
            raise ValueError(f"field {name}={v} does not fit in {width} bits")
        bits |= v << off
    return bits


def unpack(layout, bits: int) -> dict[str, int]:
    bits = int(bits)
    return {name: (bits >> off) & ((1 << w) - 1) for name, (off, w) in fields(layout).items()}


def width(layout) -> int:
    """Total bits of ``layout``."""
    return data.Layout.cast(layout).size
