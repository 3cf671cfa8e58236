"""Pack and unpack Amaranth ``data`` layouts as Python ints, from the layout's own field offsets; fast
int access to DUT ports (:class:`Port`).

Testbenches drive and read struct ports as flat vectors; these helpers keep the layout in one place (the
RTL's definition). Nested structs are addressed with dotted names (``"req.tag"``); enum fields take ints.
A struct port is read once per cycle as one int (:meth:`Port.read`) and decoded with :func:`unpack` or
:func:`field`, never field by field through the simulator.
"""

import enum as py_enum
import functools

from amaranth.lib import data

__all__ = ["fields", "pack", "unpack", "field", "width", "Port", "read_status"]


@functools.lru_cache(maxsize=None)
def fields(layout) -> dict[str, tuple[int, int]]:
    """Dotted field name -> (offset, width) for every leaf field (array elements by index, e.g.
    ``port.3.tlb.0``)."""
    out = {}

    def walk(lay, offset, prefix):
        for name, field in data.Layout.cast(lay):
            shape = field.shape
            if isinstance(shape, data.Layout) or (isinstance(shape, type) and
                                                  issubclass(shape, (data.Struct, data.Union))):
                walk(shape, offset + field.offset, f"{prefix}{name}.")
            else:   # array elements are named by their index
                out[f"{prefix}{name}"] = (offset + field.offset, field.width)
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


def field(layout, bits: int, name: str) -> int:
    """One field (dotted name) of ``bits`` laid out as ``layout``."""
    off, w = fields(layout)[name]
    return (int(bits) >> off) & ((1 << w) - 1)


try:   # cocotb's own write path, minus the per-call argument checks of ``handle.value = ...``
    from cocotb import handle as _cocotb_handle
    _DEPOSIT = _cocotb_handle._GPISetAction.DEPOSIT
    _cocotb_handle._schedule_write
except (ImportError, AttributeError):   # another cocotb: fall back to the public setter
    _cocotb_handle = None


class Port:
    """One DUT port (a cocotb handle of a flat vector) as a Python int.

    ``read()`` returns the value as an int (``ValueError`` naming the port when it holds X/Z); ``high()``
    is ``handle.value == 1`` for a 1-bit port (False on X/Z). ``write(v)`` assigns only when ``v`` differs
    from the last value this Port wrote, so an agent that owns an input can call it every cycle at no
    cost; ``write_bits(s)`` takes the value pre-encoded as a ``width``-character ``0``/``1`` string
    (:meth:`encode`), for wide ports whose values are known ahead (flits of a queued packet).

    Why not ``handle.value``: a cocotb read builds a ``LogicArray`` and a write re-checks and re-formats
    its argument; at several accesses per port per cycle that Python work, not the compiled model, sets
    the simulation speed. Reads here take the simulator's bit string directly, writes go through
    cocotb's own scheduler (``_schedule_write``, so inertial-write handling is unchanged) with a value
    already in the simulator's format.
    """

    __slots__ = ("handle", "name", "width", "_get", "_set_int", "_set_str", "_last")

    def __init__(self, handle):
        self.handle = handle
        self.name = handle._name
        self.width = len(handle)
        raw = handle._handle
        self._get = raw.get_signal_val_binstr
        self._set_int = raw.set_signal_val_int if self.width <= 32 else None
        self._set_str = raw.set_signal_val_binstr
        self._last = None

    def read(self) -> int:
        s = self._get()
        try:
            return int(s, 2)
        except ValueError:
            raise ValueError(f"port {self.name} holds {s!r}, not a 0/1 value") from None

    def high(self) -> bool:
        return self._get() == "1"

    def encode(self, value: int) -> str:
        """``value`` as the bit string :meth:`write_bits` takes."""
        value = int(value)
        if value < 0 or value >> self.width:
            raise ValueError(f"value {value:#x} does not fit port {self.name} ({self.width} bits)")
        return format(value, f"0{self.width}b")

    def write(self, value: int) -> None:
        if value == self._last:
            return
        if value < 0 or value >> self.width:
            raise ValueError(f"value {value:#x} does not fit port {self.name} ({self.width} bits)")
        self._last = value
        if _cocotb_handle is None:
            self.handle.value = value
        elif self._set_int is not None:
            _cocotb_handle._schedule_write(self.handle, self._set_int, _DEPOSIT, value)
        else:
            _cocotb_handle._schedule_write(self.handle, self._set_str, _DEPOSIT, format(value, f"0{self.width}b"))

    def write_bits(self, bits: str) -> None:
        if bits == self._last:
            return
        self._last = bits
        if _cocotb_handle is None:
            self.handle.value = bits
        else:
            _cocotb_handle._schedule_write(self.handle, self._set_str, _DEPOSIT, bits)


def read_status(dut, ports: int, prefix: str = "status") -> int:
    """The DySHARP switch's status as one :func:`hw.switch.dysharp_switch.status_layout` vector, read from
    its per-member ports (``<prefix>__port__<i>``, ``<prefix>__total``, ...; see ``status_ports``)."""
    from hw.switch.dysharp_switch import status_ports
    bits = 0
    for name, offset, _width in status_ports(ports, prefix):
        bits |= int(getattr(dut, name).value) << offset
    return bits
