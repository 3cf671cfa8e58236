"""Verilog with one module per distinct sub-block ("deduplicated" emission).

``amaranth.back.verilog.convert`` elaborates and writes every instance of a sub-block separately, even
when N of them are identical: a 64-port switch writes its input unit 128 times. :func:`convert` instead
writes each distinct sub-component once, as a named Verilog module, and instantiates it where each copy
was, so generation time, Verilog size and the cost of every tool that reads the file (Verilator's lint
above all) follow the number of *distinct* blocks, not of instances.

How: while the top is converted, ``Fragment.get`` is intercepted. A sub-component (a
``lib.wiring.Component``, not the top) whose identity :func:`block_key` can state is not elaborated in
place; the first copy of each key is converted on its own (recursively, by the same rule) into the
module ``<top>__<Class>[_k]``, and every copy becomes an ``Instance`` of that module, its ports the
flattened signature (``"__".join(path)``, the names Amaranth gives a component's ports) and its clock
domains' ``clk``/``rst``. The RTLIL of all modules goes through yosys once.

Identity (the contract): two components have the same key when they are of the same class, have the
same signature (paths, flows, shapes, initial values) and the same instance attributes (numbers, strings,
enums, shapes and layouts, functions with their code and closure values, and containers of these). A
component holding anything else (a signal, another elaboratable, a memory...) is elaborated in place, as
with the flat emission: the key is never guessed. Blocks that differ only in a baked-in constant (a port
index) are distinct keys; ``hw`` blocks take such a constant as a strap input instead (``port=None``).

The top-level ports are the flat emission's, so a testbench or harness drives either file the same way
(``tests/hw/test_emission.py`` runs the same traffic through both and compares every delivery).
"""

import dataclasses
import enum
import gc
import re
import time
import types
from contextlib import contextmanager

from amaranth.back import rtlil
from amaranth.back import verilog as amaranth_verilog
from amaranth.hdl import ClockSignal, Instance, ResetSignal, Shape, ShapeCastable, Value, ValueCastable, _ir
from amaranth.lib import wiring

__all__ = ["convert", "block_key", "EmissionStats"]


class _NoKey(Exception):
    """An attribute whose value says nothing certain about the hardware (a signal, an elaboratable...)."""


def _canon(v):
    """A hashable description of ``v`` that equals another's only when they build the same hardware."""
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return (type(v).__name__, v)
    if isinstance(v, type):
        return ("type", v.__module__, v.__qualname__)
    if isinstance(v, enum.Enum):
        return ("enum", type(v).__module__, type(v).__qualname__, v.name)
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_canon(x) for x in v))
    if isinstance(v, (set, frozenset)):
        return ("set", tuple(sorted(repr(_canon(x)) for x in v)))
    if isinstance(v, dict):
        return ("dict", tuple((_canon(k), _canon(x)) for k, x in v.items()))
    if isinstance(v, types.FunctionType):
        cells = tuple(_canon(c.cell_contents) for c in (v.__closure__ or ()))
        return ("fn", v.__module__, v.__qualname__, v.__code__, _canon(v.__defaults__),
                _canon(v.__kwdefaults__), cells)
    if isinstance(v, (Shape, ShapeCastable)):
        return ("shape", type(v).__qualname__, repr(v))
    if isinstance(v, types.SimpleNamespace):
        return ("ns", _canon(vars(v)))
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return ("dc", type(v).__qualname__, _canon(dataclasses.asdict(v)))
    raise _NoKey(type(v).__qualname__)


def block_key(component) -> tuple | None:
    """The identity of ``component`` as a Verilog module (see the module doc), or None if it cannot be
    stated (the component is then elaborated in place)."""
    if not isinstance(component, wiring.Component):
        return None
    sig = component.signature
    members = set(sig.members)
    try:
        ports = tuple((path, member.flow.name, repr(member.shape), repr(member.init))
                      for path, member, _ in sig.flatten(component))
        attrs = tuple((k, _canon(v)) for k, v in sorted(vars(component).items())
                      if k not in members and not k.startswith(("_MustUse__", "_Component__")))
    except _NoKey:
        return None
    return (type(component).__module__, type(component).__qualname__, ports, attrs)


@dataclasses.dataclass
class EmissionStats:
    """What :func:`convert` did: distinct modules written, instances made of them, components elaborated
    in place because no key could be stated (per class), and seconds in Python (elaboration, netlist,
    RTLIL) and in yosys."""
    modules: dict = dataclasses.field(default_factory=dict)       # module name -> instances
    inlined: dict = dataclasses.field(default_factory=dict)       # class name -> count
    python_s: float = 0.0
    yosys_s: float = 0.0
    rtlil_mb: float = 0.0


@dataclasses.dataclass
class _Module:
    name: str
    ports: dict          # port name -> (direction, width)


# Amaranth writes a signed port's ``signed`` after its direction and index (``output 5 signed \x``).
_PORT = re.compile(r"^\s*wire\s+(?:width\s+(\d+)\s+)?(?:(?:signed|upto|offset\s+\d+)\s+)*"
                   r"(input|output|inout)\s+\d+\s+(?:(?:signed|upto|offset\s+\d+)\s+)*\\(\S+)\s*$")


def _module_ports(text: str, name: str) -> dict:
    """Ports of module ``name`` in RTLIL ``text``: name -> (direction, width)."""
    ports, inside = {}, False
    for line in text.splitlines():
        if line == f"module \\{name}":
            inside = True
        elif inside and line == "end":
            break
        elif inside:
            m = _PORT.match(line)
            if m:
                ports[m.group(3)] = (m.group(2), int(m.group(1) or 1))
    if not inside:
        raise RuntimeError(f"module {name!r} is missing from its own RTLIL")
    return ports


class _Emitter:
    def __init__(self, prefix: str, platform):
        self.prefix = prefix
        self.platform = platform
        self.by_key = {}          # block_key -> _Module
        self.texts = []           # RTLIL of each distinct module, children first
        self.stack = []           # components being converted as modules (not to be replaced)
        self.names = set()
        self.stats = EmissionStats()

    def _name(self, component) -> str:
        base = f"{self.prefix}__{type(component).__name__}"
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def rtlil(self, component, name: str) -> str:
        """RTLIL of ``component`` as module ``name`` (its sub-blocks replaced by instances)."""
        self.stack.append(component)
        try:
            return rtlil.convert(component, name=name, platform=self.platform, emit_src=False)
        finally:
            self.stack.pop()

    def replace(self, obj):
        """An ``Instance`` standing for ``obj``, or None to elaborate ``obj`` in place."""
        if not isinstance(obj, wiring.Component) or (self.stack and obj is self.stack[-1]):
            return None
        key = block_key(obj)
        if key is None:
            cls = type(obj).__qualname__
            self.stats.inlined[cls] = self.stats.inlined.get(cls, 0) + 1
            return None
        mod = self.by_key.get(key)
        if mod is None:
            name = self._name(obj)
            text = self.rtlil(obj, name)
            text = text.replace(f"attribute \\top 1\nmodule \\{name}\n", f"module \\{name}\n")
            mod = self.by_key[key] = _Module(name, _module_ports(text, name))
            self.texts.append(text)
        self.stats.modules[mod.name] = self.stats.modules.get(mod.name, 0) + 1
        obj._MustUse__used = True
        return _instance(mod, obj)


def _instance(mod: _Module, obj) -> Instance:
    args, seen = [], set()
    for path, member, value in obj.signature.flatten(obj):
        pname = "__".join(map(str, path))
        value = Value.cast(value.as_value() if isinstance(value, ValueCastable) else value)
        if pname not in mod.ports:
            if len(value) == 0:
                continue
            raise RuntimeError(f"{mod.name}: port {pname!r} of the signature is missing from the module")
        direction, width = mod.ports[pname]
        want = "input" if member.flow == wiring.In else "output"
        if (direction, width) != (want, len(value)):
            raise RuntimeError(f"{mod.name}: port {pname!r} is {direction} {width} bits in the module, "
                               f"{want} {len(value)} bits in the signature")
        args.append(("i" if want == "input" else "o", pname, value))
        seen.add(pname)
    for pname, (direction, _) in mod.ports.items():
        if pname in seen:
            continue
        # Clock-domain ports: ``clk``/``rst`` for ``sync``, ``<domain>_clk``/``<domain>_rst`` otherwise.
        m = re.fullmatch(r"(?:(.+)_)?(clk|rst)", pname)
        if not m or direction != "input":
            raise RuntimeError(f"{mod.name}: port {pname!r} is neither in the signature nor a clock/reset")
        domain = m.group(1) or "sync"
        args.append(("i", pname, ClockSignal(domain) if m.group(2) == "clk" else ResetSignal(domain)))
    return Instance(mod.name, *args)


@contextmanager
def collector_paused():
    """Python's cyclic garbage collector off inside the block (as it was after it). Elaborating a design
    and writing its RTLIL allocate millions of objects that live until the text is written, and the
    collections they trigger scan them again and again: about half the CPU of generating Verilog (the
    flat 4-port integrated switch 29.7 -> 14.9 CPU-s, the same text), for a higher peak (449 -> 747 MB)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def _intercept(emitter: _Emitter):
    real_get = _ir.Fragment.get

    def get(obj, platform):
        inst = emitter.replace(obj)
        return real_get(obj if inst is None else inst, platform)

    _ir.Fragment.get = staticmethod(get)
    try:
        yield
    finally:
        _ir.Fragment.get = staticmethod(real_get)


def convert(component, name: str, platform=None) -> tuple[str, EmissionStats]:
    """Verilog of ``component`` with top module ``name`` and one module per distinct sub-block, and
    what it did (:class:`EmissionStats`). Ports and behaviour are those of
    ``amaranth.back.verilog.convert(component, name=name, emit_src=False)``."""
    emitter = _Emitter(name, platform)
    t0 = time.perf_counter()
    with _intercept(emitter):
        top = emitter.rtlil(component, name)
    text = "\n".join(emitter.texts + [top])
    t1 = time.perf_counter()
    verilog = amaranth_verilog._convert_rtlil_text(text)
    st = emitter.stats
    st.python_s, st.yosys_s, st.rtlil_mb = t1 - t0, time.perf_counter() - t1, len(text) / 1e6
    return verilog, st
