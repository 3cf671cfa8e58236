"""Registry of the synthesizable hardware modules.

Registering a module is one line at the bottom of this file::

    register("switch", "hw.switch.nvswitch:NVSwitch", points=[{"ports": n} for n in (4, 8, 16, 32, 64)])

Everything else is derived: the parameter names and defaults come from the component's ``__init__``
signature, the component itself validates values (raising ``ValueError`` with a message), and ``points``
lists the standard parameter points that ``dysharp verilog --points``, ``dysharp lint`` and the area flow
generate. ``area_grid`` (optional) lists the points the area study sweeps; it defaults to ``points``.
``dedup_from_ports`` (optional): from this many ports (the parameter ``ports_param``, default ``ports``),
``dysharp verilog``/``lint``, the study and the simulation builds write the point with :mod:`hw.emission`
(one Verilog module per distinct sub-block, :func:`emission_for`).

A point past 64 ports (``ports_param``) takes the wide header format (:func:`hw.packet.header_format`),
which needs ``flit_width`` 256 or 512: :func:`point` refuses it at a narrower flit with the reason and the
valid widths, before anything is built (``point("dysharp_switch", {"ports": 72, "flit_width": 256})``).
"""

import dataclasses
import hashlib
import importlib
import inspect
import json
import re
import os
from pathlib import Path
from typing import Any

from .packet import NARROW, header_format

__all__ = ["ModuleSpec", "DesignPoint", "point", "register", "MODULES", "get", "parse_assignments",
           "hw_source_hash", "generate_verilog", "point_slug", "EMISSIONS", "emission_for"]

#: ``flat``: ``amaranth.back.verilog.convert`` (every instance written out; what the area flow and the
#: cocotb builds that expose internal signals use). ``dedup``: :func:`hw.emission.convert`, one module per
#: distinct sub-block, the same top-level ports and behaviour. ``auto`` (:func:`emission_for`) picks per
#: point; the fast path and the ports-only cocotb builds use it, so a big point elaborates its repeated
#: blocks once (the 8-port integrated switch: about 5x faster to generate, 6x less Verilog).
EMISSIONS = ("auto", "flat", "dedup")


@dataclasses.dataclass
class ModuleSpec:
    name: str
    factory: str                      # "package.module:Class"
    points: list = dataclasses.field(default_factory=list)
    area_grid: list | None = None
    doc: str = ""
    defaults: dict = dataclasses.field(default_factory=dict)   # overrides of the __init__ defaults
    dedup_from_ports: int | None = None
    ports_param: str = "ports"        # the parameter dedup_from_ports counts

    def component_class(self):
        mod, _, cls = self.factory.partition(":")
        return getattr(importlib.import_module(mod), cls)

    def params(self) -> dict[str, Any]:
        """Parameter name -> default, from the component's ``__init__`` signature."""
        sig = inspect.signature(self.component_class().__init__)
        params = {n: (None if p.default is inspect.Parameter.empty else p.default)
                  for n, p in sig.parameters.items() if n != "self" and p.kind == p.KEYWORD_ONLY}
        params.update(self.defaults)
        return params

    def resolve(self, overrides: dict | None = None) -> dict[str, Any]:
        """Full parameter dict: defaults updated with ``overrides`` (unknown names rejected)."""
        params = self.params()
        for k in (overrides or {}):
            if k not in params:
                raise ValueError(f"module {self.name!r} has no parameter {k!r}; "
                                 f"valid parameters: {', '.join(sorted(params))}")
        params.update(overrides or {})
        return params

    def build(self, **overrides):
        """Instantiate the component (its ``__init__`` validates the values)."""
        return self.component_class()(**self.resolve(overrides))

    def description(self) -> str:
        doc = self.doc or (inspect.getdoc(self.component_class()) or "").split("\n")[0]
        return doc


MODULES: dict[str, ModuleSpec] = {}


def register(name: str, factory: str, *, points=None, area_grid=None, doc: str = "",
             defaults: dict | None = None, dedup_from_ports: int | None = None,
             ports_param: str = "ports") -> ModuleSpec:
    if name in MODULES:
        raise ValueError(f"module {name!r} is registered twice")
    spec = ModuleSpec(name, factory, list(points or [{}]), area_grid, doc, dict(defaults or {}),
                      dedup_from_ports, ports_param)
    MODULES[name] = spec
    return spec


def get(name: str) -> ModuleSpec:
    try:
        return MODULES[name]
    except KeyError:
        raise ValueError(f"unknown module {name!r}; registered modules: {', '.join(sorted(MODULES))}")


def _parse_value(text: str, default: Any) -> Any:
    if isinstance(default, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean, got {text!r}")
    if default is None and text.lower() in ("true", "false"):   # e.g. an automatic flag (None) set by hand
        return text.lower() == "true"
    if isinstance(default, int) or default is None:
        try:
            return int(text, 0)
        except ValueError:
            if default is not None:
                raise ValueError(f"expected an integer, got {text!r}")
            return text
    if isinstance(default, float):
        return float(text)
    return text


def parse_assignments(items: list[str], modules: list[str]) -> dict[str, dict[str, Any]]:
    """Parse ``--set`` items (``param=value`` or ``module.param=value``) into per-module overrides.

    A bare ``param`` applies to every selected module that has it; it is an error if none does.
    """
    out: dict[str, dict[str, Any]] = {m: {} for m in modules}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set expects name=value, got {item!r}")
        key, value = item.split("=", 1)
        if "." in key:
            mod, param = key.split(".", 1)
            spec = get(mod)
            if mod not in out:
                raise ValueError(f"module {mod!r} is not selected (selected: {', '.join(modules)})")
            targets = [spec]
        else:
            param = key
            targets = [get(m) for m in modules if param in get(m).params()]
            if not targets:
                valid = sorted({f"{m}.{p}" for m in modules for p in get(m).params()})
                raise ValueError(f"no selected module has a parameter {param!r}; valid: {', '.join(valid)}")
        for spec in targets:
            params = spec.params()
            if param not in params:
                raise ValueError(f"module {spec.name!r} has no parameter {param!r}; "
                                 f"valid parameters: {', '.join(sorted(params))}")
            try:
                out[spec.name][param] = _parse_value(value, params[param])
            except ValueError as e:
                raise ValueError(f"{spec.name}.{param}: {e}") from None
    return out


def hw_source_hash() -> str:
    """Hash of every Python file under ``hw/``: generated Verilog is cached against it."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def point_slug(params: dict[str, Any], defaults: dict[str, Any]) -> str:
    """Short file-name-safe description of the non-default parameters of a point (nested dicts, tuples and
    lists are flattened: no spaces, quotes or braces, which make and some shells cannot take)."""
    def text(v):
        if isinstance(v, dict):
            return "-".join(f"{k}{text(x)}" for k, x in sorted(v.items()))
        if isinstance(v, (list, tuple)):
            return "x".join(text(x) for x in v)
        return re.sub(r"[^A-Za-z0-9.+-]", "", str(v))
    parts = [f"{k}{text(v)}" for k, v in sorted(params.items()) if defaults.get(k) != v]
    return "_".join(parts) if parts else "default"


def emission_for(name: str, params: dict, emission: str = "auto") -> str:
    """``flat`` or ``dedup`` for module ``name`` at ``params`` (:meth:`DesignPoint.emission`)."""
    return point(name, params).emission(emission)


@dataclasses.dataclass(frozen=True, eq=False)
class DesignPoint:
    """One registered module at one parameter point, resolved once: every parameter filled in from the
    defaults, unknown names refused (:meth:`ModuleSpec.resolve`). This value is what the CLI, the benches,
    the simulation builds and synthesis pass along; make it with :func:`point`.

    Two points are equal when their module and parameters are.
    """
    spec: ModuleSpec
    params: dict                      # every parameter of the component, by name
    defaults: dict                    # the module's defaults (what :attr:`slug` leaves out)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def overrides(self) -> dict:
        """The parameters that differ from the module's defaults."""
        return {k: v for k, v in self.params.items() if self.defaults.get(k) != v}

    @property
    def slug(self) -> str:
        """:func:`point_slug`: the non-default parameters, file-name safe (``default`` when none)."""
        return point_slug(self.params, self.defaults)

    def __eq__(self, other):
        return isinstance(other, DesignPoint) and (self.name, self.params) == (other.name, other.params)

    def __hash__(self):
        return hash((self.name, json.dumps(self.params, sort_keys=True, default=str)))

    def __repr__(self):
        return f"DesignPoint({self.name!r}, {self.overrides!r})"

    def emission(self, emission: str = "auto") -> str:
        """``flat`` or ``dedup`` (:data:`EMISSIONS`): ``auto`` is ``dedup`` from the module's
        ``dedup_from_ports`` ports (its ``ports_param``) on, ``flat`` otherwise."""
        if emission not in EMISSIONS:
            raise ValueError(f"unknown emission {emission!r}; valid: {', '.join(EMISSIONS)}")
        if emission != "auto":
            return emission
        spec = self.spec
        big = spec.dedup_from_ports is not None and self.params.get(spec.ports_param, 0) >= spec.dedup_from_ports
        return "dedup" if big else "flat"

    def component(self):
        """A fresh instance of the component (its ``__init__`` validates the values)."""
        return self.spec.component_class()(**self.params)

    def verilog(self, out_dir: str | os.PathLike = "build/verilog", *, cache: bool = True,
                emission: str = "flat") -> Path:
        """Elaborate and write ``<out_dir>/<name>__<slug>.v`` (``<name>__<slug>__dedup.v`` for the ``dedup``
        emission, see :data:`EMISSIONS`).

        The top-level Verilog module is named :attr:`name`. A JSON sidecar records the full parameters, the
        emission and the ``hw/`` source hash; with ``cache`` an up-to-date file is reused.
        """
        from amaranth.back import verilog

        emission = self.emission(emission)
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        suffix = "__dedup" if emission == "dedup" else ""
        path = out_dir / f"{self.name}__{self.slug}{suffix}.v"
        meta_path = path.with_suffix(".json")
        meta = {"module": self.name, "params": self.params, "hw_hash": hw_source_hash(), "emission": emission}
        if cache and path.exists() and meta_path.exists():
            try:
                if json.loads(meta_path.read_text()) == meta:
                    return path
            except (OSError, ValueError):
                pass
        from .emission import collector_paused, convert as convert_dedup
        with collector_paused():
            component = self.component()
            if emission == "dedup":
                text, _ = convert_dedup(component, self.name)
            else:
                text = verilog.convert(component, name=self.name, emit_src=False)
        tmp = path.with_suffix(f".v.tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
        meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True))
        return path


def point(module: "str | DesignPoint", params: dict | None = None) -> DesignPoint:
    """The :class:`DesignPoint` of registered ``module`` at ``params`` (overrides of its defaults; unknown
    modules and parameter names are refused with the valid ones). A :class:`DesignPoint` is returned as it
    is, so an entry point may take either; giving it ``params`` too is an error."""
    if isinstance(module, DesignPoint):
        if params:
            raise ValueError(f"{module!r} is already resolved; got parameters {params!r} as well")
        return module
    spec = get(module)
    defaults = spec.params()
    resolved = spec.resolve(params)
    ports = resolved.get(spec.ports_param)
    if isinstance(ports, int) and not isinstance(ports, bool) and ports > NARROW.max_ports and "flit_width" in resolved:
        try:
            header_format(ports, resolved["flit_width"])
        except ValueError as e:
            raise ValueError(f"{spec.name}: {e}") from None
    return DesignPoint(spec, resolved, defaults)


def generate_verilog(name: "str | DesignPoint", overrides: dict | None = None,
                     out_dir: str | os.PathLike = "build/verilog", *, cache: bool = True,
                     emission: str = "flat") -> Path:
    """:meth:`DesignPoint.verilog` of module ``name`` at ``overrides``."""
    return point(name, overrides).verilog(out_dir, cache=cache, emission=emission)


# ---------------------------------------------------------------------------------------------------------
# The registered modules: one line each.

register("switch", "hw.switch.nvswitch:NVSwitch", dedup_from_ports=8,
         points=[{"ports": n} for n in (4, 8, 16, 32, 64)],
         area_grid=[{"ports": n} for n in (4, 8, 16, 32, 64)])
register("switch_fifo", "hw.switch.nvswitch:NVSwitch", defaults={"queueing": "fifo", "speedup": 1},
         dedup_from_ports=8,
         points=[{"ports": 8}],
         doc="NVSwitch datapath with one FIFO per input and no speedup (the classical head-of-line-blocking "
             "input-queued baseline)")
register("cam", "hw.switch.cam:Cam", points=[{"entries": n} for n in (64, 256, 1024)],
         area_grid=[{"entries": n} for n in (64, 256)])
register("al_tlb", "hw.switch.al_tlb:AlTlb", points=[{"entries": n} for n in (64, 256, 1024)],
         area_grid=[{"ports": 64, "entries": n} for n in (64, 256, 1024)])
register("memory_manager", "hw.gpu_nic.memory_manager:MemoryManager",
         points=[{"index_bits": 10, "slots": 1024}, {"index_bits": 12, "slots": 4096}])
register("token_tracker", "hw.gpu_nic.token_tracker:TokenTracker",
         points=[{"experts": 32, "tiles": 16}, {"experts": 8, "tiles": 8}],
         area_grid=[{"experts": 32, "tiles": t} for t in (2, 4, 8, 16, 32)])
register("request_gen", "hw.gpu_nic.request_gen:RequestGenerator",
         points=[{"ports": 8}, {"ports": 32, "tags": 64}], area_grid=[{"ports": 8}, {"ports": 64}])
register("receive_path", "hw.gpu_nic.receive_path:ReceivePath",
         points=[{}, {"experts": 8, "tile_size": 64, "tags": 64}])
register("gpu_nic", "hw.gpu_nic.nic:GpuNic", points=[{}, {"ports": 16, "experts": 8, "tiles": 4, "tile_size": 4}])
register("group_table", "hw.switch.group_table:GroupTable", defaults={"ports": 8},
         points=[{"entries": e} for e in (4, 16, 64)],
         area_grid=[{"entries": e} for e in (4, 16, 64, 256)],
         doc="Static multimem group table (handle -> port mask), the NVLS baseline's table")
register("reduce_alu", "hw.switch.reduce_alu:ReduceALU",
         points=[{"flit_width": w} for w in (128, 256, 512)] + [{"flit_width": 128, "acc_stages": 3}])
register("reduction_buffer", "hw.switch.reduction_buffer:ReductionBuffer",
         points=[{"entries": n} for n in (16, 32, 256, 512)],
         area_grid=[{"entries": n} for n in (32, 64, 128, 256)])
register("linear_translator", "hw.switch.linear_translator:LinearTranslator",
         points=[{"ports": n} for n in (8, 32, 64)])
register("reduction_engine", "hw.switch.reduction_engine:ReductionEngine",
         points=[{"entries": n} for n in (32, 256)] + [{"entries": 32, "defer_translation": True}],
         area_grid=[{"ports": 64, "entries": n} for n in (32, 64, 256)])
register("ld_reduce_unit", "hw.switch.ld_reduce_unit:LdReduceUnit",
         points=[{"entries": n} for n in (32, 256)], area_grid=[{}])
register("credit_receiver", "hw.credit:CreditReceiver", defaults={"depth": 8}, points=[{"depth": 8}])
register("vc_sender", "hw.vc_link:VcSender", defaults={"credits": [8, 8]}, points=[{}])
register("vc_receiver", "hw.vc_link:VcReceiver", defaults={"credits": [8, 8]}, points=[{}])
register("packet_merge", "hw.packet_stream:PacketMerge", defaults={"n_in": 3}, points=[{"n_in": 3}])
register("packet_split", "hw.packet_stream:VcClassSplit", points=[{}],
         doc="PacketSplit with a fixed example select: requests to o[0], responses to o[1]")
register("tlb_fill_bridge", "hw.switch.tlb_fill_bridge:TlbFillBridge", points=[{}])
register("fill_bypass_receiver", "hw.switch.fill_bypass:FillBypassReceiver", points=[{}])
register("egress_translator", "hw.switch.egress_translator:EgressTranslator", points=[{"ports": 8}, {"ports": 64}])
register("dysharp_switch", "hw.switch.dysharp_switch:DySharpSwitch", dedup_from_ports=4,
         points=[{"ports": n} for n in (4, 8, 16, 32, 64)], area_grid=[{"ports": 4}, {"ports": 8}],
         doc="The integrated DySHARP switch: request and response networks, and per port an AL-TLB, an egress "
             "translator and a reduction engine")
register("system", "hw.system:System", dedup_from_ports=4, ports_param="gpus",
         points=[{"gpus": n} for n in (4, 8, 16)],
         doc="The system top: G GPU NICs on one DySHARP switch")
