"""Macros: RTL blocks written as registers plus logic that a real chip builds as one hard macro.

``lib.memory`` arrays become ``$mem_v2`` cells and are costed by :mod:`synth.area` on their own. A CAM
cannot be written that way: :class:`hw.switch.cam.Cam` keeps its keys and values in flip-flops with a
comparator per entry, so without help it would be synthesized (and counted) as some 350 cells per entry.
This module finds such blocks in a design's Verilog, so that the flow keeps them as black boxes and
costs them like arrays:

* **Recognition.** Amaranth emits one Verilog module per instance and prunes or renames the ports of
  submodules (a constant ``write_mask`` disappears, a key split in parts becomes ``port$19$0``), so a
  macro is recognised by its body, not its ports: a :class:`hw.switch.cam.Cam` declares the registers
  ``key_0 .. key_{E-1}`` and ``value_0 .. value_{E-1}`` (``E`` a power of two) and the signals
  ``valid``, ``plru``, ``lmatch`` and ``wmatch``. The geometry (entries, key and value widths) comes from
  those declarations.
* **Costing** (:func:`synth.area.cost_macro`), like an array, three figures:

  - *CACTI*: a fully associative array (``-cache type "cache"``, ``-associativity 0``): a CAM tag array
    of ``key_width`` bits searched in parallel plus an SRAM data array of ``value_width`` bits, one entry
    per row, with two search ports (the lookup and the write port's compare, which inserts and masked
    invalidates need) and one write port. CACTI's "pure CAM" model would make the value bits
    searchable too (larger); the fully associative model is a TLB's organisation.
  - *control*: what CACTI's array does not contain (the valid bits, the tree-PLRU state and its update,
    the lowest-free / victim selection, the same-cycle forwarding): the same RTL with 1-bit keys and
    values, synthesized (so it still holds one key and one value flip-flop and a 1-bit comparator per
    entry: a slight over-estimate).
  - *flip-flops*: the macro's own Verilog synthesized alone, the upper bound.

  The macro is counted at CACTI + control when that is smaller than the flip-flop figure.
* **Power.** A lookup costs CACTI's search energy plus one data-array read, a write CACTI's write
  energy; the rates are the probabilities of the lookup and write enables seen at the black box.

Adding a macro kind is one :class:`MacroKind` in :data:`KINDS`.
"""

import dataclasses
import re

from verif.lint_blocks import module_spans   # the one splitter of yosys-written Verilog into modules

__all__ = ["MacroKind", "KINDS", "find_macros", "module_text", "module_ports", "wrapper_verilog",
           "MACRO_PREFIX"]

MACRO_PREFIX = "dysharp_macro_"     # the black-box cell types in the synthesized netlist


def _decls(body: str) -> dict[str, int]:
    """Signal name -> width of every ``reg``/``wire``/``input``/``output`` declaration in a module body."""
    out = {}
    for m in re.finditer(r"^\s*(?:reg|wire|input|output)\s+(?:\[(\d+):(\d+)\]\s+)?(\\?[\w$.]+)", body, re.M):
        hi, lo, name = m.groups()
        out[name.lstrip("\\")] = (int(hi) - int(lo) + 1) if hi is not None else 1
    return out


@dataclasses.dataclass(frozen=True)
class MacroKind:
    """One kind of macro: how to recognise it, its geometry, and how to cost it."""
    name: str
    component: str              # "package.module:Class" of the RTL block
    signals: frozenset          # signals every instance declares

    def geometry(self, decls: dict[str, int]) -> dict | None:
        if not self.signals <= set(decls):
            return None
        keys = sorted(int(n[4:]) for n in decls if re.fullmatch(r"key_\d+", n))
        values = sorted(int(n[6:]) for n in decls if re.fullmatch(r"value_\d+", n))
        e = len(keys)
        if e < 2 or e & (e - 1) or keys != list(range(e)) or values != keys:
            return None
        return {"entries": e, "key_width": decls["key_0"], "value_width": decls["value_0"]}

    def cacti_array(self, geom: dict):
        from . import cacti
        return cacti.Array(rows=geom["entries"], width=geom["value_width"], read_ports=0, write_ports=1,
                           kind="fa", tag_width=geom["key_width"], search_ports=2)

    def control_params(self, geom: dict) -> dict:
        """Parameters of the control-logic proxy: the same block with 1-bit keys and values."""
        return {"entries": geom["entries"], "key_width": 1, "value_width": 1}

    def build(self, **params):
        import importlib
        mod, _, cls = self.component.partition(":")
        return getattr(importlib.import_module(mod), cls)(**params)

    def bits(self, geom: dict) -> dict:
        """Storage bits by kind (for the transistor count): searched (CAM) and plain (SRAM) bits."""
        return {"cam_bits": geom["entries"] * geom["key_width"],
                "sram_bits": geom["entries"] * geom["value_width"]}

    def accesses(self, conn_rates) -> tuple[float, float]:
        """(lookups, writes) per cycle from the enable rates at the black box (``conn_rates(port)`` is
        the probability of a 1-bit port, or None when the port was pruned)."""
        look = conn_rates("lookup_valid")
        write = conn_rates("write_valid")
        return (1.0 if look is None else look), (1.0 if write is None else write)


KINDS = [MacroKind("cam", "hw.switch.cam:Cam", frozenset({"valid", "plru", "lmatch", "wmatch", "key_0",
                                                          "value_0"}))]

def module_text(text: str, name: str) -> str:
    """The Verilog of module ``name`` (from ``module`` to ``endmodule``)."""
    s, e = module_spans(text)[name]
    return text[s:e] + "\n"


def module_ports(text: str, name: str) -> list[tuple[str, str, int]]:
    """(direction, name, width) of each port of module ``name``, in declaration order."""
    body = module_text(text, name)
    out = []
    for m in re.finditer(r"^\s*(input|output)\s+(?:\[(\d+):(\d+)\]\s+)?(\\?[\w$.]+)", body, re.M):
        d, hi, lo, n = m.groups()
        out.append((d, n.lstrip("\\"), (int(hi) - int(lo) + 1) if hi is not None else 1))
    return out


def find_macros(text: str) -> list[dict]:
    """Every macro module of a design's Verilog: ``{"module", "kind", geometry...}`` (leaf modules only)."""
    mods = module_spans(text)
    out = []
    for name, (s, e) in mods.items():
        body = text[s:e]
        decls = _decls(body)
        for kind in KINDS:
            geom = kind.geometry(decls)
            if geom is None:
                continue
            inner = [n for n in mods if n != name and re.search(rf"^\s*\\?{re.escape(n)}\s+\\?[\w$.]+\s*\(",
                                                                  body, re.M)]
            if inner:
                raise ValueError(f"macro {name} ({kind.name}) instantiates other modules ({inner}); the flow "
                                 f"black-boxes leaf modules only")
            out.append({"module": name, "kind": kind.name, **geom})
            break
    return out


def kind(name: str) -> MacroKind:
    return next(k for k in KINDS if k.name == name)


def wrapper_verilog(text: str, top: str, wrapper: str) -> str:
    """A module ``wrapper`` with ``top``'s ports that instantiates ``top`` (for a design that is itself a
    macro: the wrapper is synthesized, the macro stays a black box inside it)."""
    ports = module_ports(text, top)
    decl = [f"  {d} {'[%d:0] ' % (w - 1) if w > 1 else ''}\\{n} ;" for d, n, w in ports]
    conn = ",\n".join(f"    .\\{n} (\\{n} )" for _d, n, _w in ports)
    return (f"module {wrapper}({', '.join(f'{chr(92)}{n} ' for _d, n, _w in ports)});\n" + "\n".join(decl) +
            f"\n  \\{top}  u_macro (\n{conn}\n  );\nendmodule\n")
