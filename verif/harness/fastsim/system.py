"""Compiled whole-system harness: the per-cycle side of the layer testbench on the system top
(:mod:`hw.system`), in C++, with no Python per cycle.

:func:`build_system` compiles the Verilated top with ``system_main.cpp`` into a shared library (cached
under ``build/fastsim/`` by the hash of the Verilog, the harness and the flags, like the switch fast path:
the deduplicated blocks kept apart, every input registered at the rising edge: :func:`registered_inputs`);
:class:`SystemLib` loads a fresh copy of it
(ctypes) and gives its ports by name. The library does every per-cycle job of the cocotb testbench
:mod:`verif.tb.system` (the GPU memories and their ports, the descriptor feeders, the stream drivers and
monitors, the link counters, the occupancy samples, the quiet-skip rule
:meth:`~verif.tb.system.SystemEnv.skip` with its dropped rounds) in the cocotb cycler's order, and calls
one Python callback on events only (``EV_*``): a GPU's next GEMM end (the wake cycle Python set), a
result or partial row once all its flits have landed, a TileReady output, and after a cycle that had one
of those or a token release, the phase's predicate. The window's bookkeeping (each window row's metadata
flit: the rows of each local expert's slots, in arrival order) and the reaction to a TokenRelease (the
slot's row, its bytes, their token, the token's pending pairs, the combine or push descriptor made ready)
are the library's too, from the testbench's tables given at set-up (``sys_rel_*``; :mod:`verif.tb.system_fast`);
a release the testbench would refuse stops the run with an error code. The objects below
stand in for the testbench's agents where its models touch them (memory, stream sends, the feeders,
``dut.<port>.value``). The layer's driver on it is :mod:`verif.tb.system_fast`.

The gates of the testbench's agents are always open: the random stalls (the ``stall`` setting) are the
cocotb harness's only; the read latency (``lat``) is modelled.
"""

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from hw import registry

from .build import (INLINE_ALL, KEEP_CONDITIONS, VERILATOR_FLAGS, FastsimBuildError, _compile, cxx_name,
                    registered_inputs, top_ports)

__all__ = ["build_system", "render_system_main", "SystemLib", "FastDut"]

#: The harness is a shared library: position-independent code, linked with ``-shared``.
SO_FLAGS = VERILATOR_FLAGS + ["-CFLAGS", "-fPIC", "-LDFLAGS", "-shared"]

#: A top of more Verilog than this (bytes, after :func:`registered_inputs`) is compiled from
#: :data:`BIG_TOP_GROUPS` unity files of each kind (Verilator's ``--output-groups``: its fast and its slow
#: code), not Verilator's default of one per make job (2): the 72-GPU top's 827 MB of C++ in four
#: files of 200 MB each took each compiler past 3 GB; in smaller files two compilers fit beside each
#: other. A top below it is built as before (the 32-GPU top: 10 MB of Verilog, 184 MB of C++).
BIG_TOP_BYTES = 16 << 20
BIG_TOP_GROUPS = 16


def system_flags(verilog: str) -> list[str]:
    """The Verilator flags of the harness library of a top of Verilog ``verilog`` (:data:`SO_FLAGS`, with
    ``--output-groups`` past :data:`BIG_TOP_BYTES`); part of the build's cache key."""
    if len(verilog) > BIG_TOP_BYTES:
        return SO_FLAGS + ["--output-groups", str(BIG_TOP_GROUPS)]
    return SO_FLAGS

_STREAMS = ("desc", "cmd", "mm_cfg", "ready", "release")
_VRP = ("valid", "ready", "payload")
EV_WAKE, EV_READY, EV_POLL, EV_LANDED = 1, 3, 5, 6
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_uint64,
                             ctypes.POINTER(ctypes.c_uint32))
PW = 8            # 32-bit words of a stream payload in the harness (system_main.cpp), at least


def payload_words(ports: dict) -> int:
    """32-bit words the harness holds a stream payload in (system_main.cpp's ``PW``): :data:`PW`, or the
    widest payload it drives or reads (streams, ``switch_cfg``, ``mem_wr``) plus the two words its bit
    reader may look past the field (the wide header's configuration and 256-bit memory writes)."""
    widths = [w for name, (_, w) in ports.items() if name.endswith("__payload") and "__0__" in name
              or name in ("switch_cfg__payload", "nic_cfg__payload")]
    return max(PW, -(-max(widths) // 32) + 2)


#: The clock input that loads the registered inputs (:func:`registered_inputs` ``load``; system_main.cpp).
SIM_LOAD = "sim_load"


def render_system_main(top: str, ports: dict, gpus: int, inputs_at_rise: bool = True,
                       flit_width: int = 128) -> tuple[str, list[str]]:
    """The C++ harness for ``top``'s ports and its port table (the names, in the harness's index order);
    ``inputs_at_rise``: for a top whose inputs are registered at the rising edge by :data:`SIM_LOAD`
    (``registered_inputs(..., edge="posedge", load=SIM_LOAD)``), else latched on the falling edge;
    ``flit_width``: the top's flit, the GPU memories' word."""
    names = sorted(ports)
    need = [f"mem_wr__0__{s}" for s in _VRP] + [f"{st}__0__{s}" for st in _STREAMS for s in _VRP] + \
        [f"switch_cfg__{s}" for s in _VRP] + ["probe", "switch_status__total", "clk", "rst"]
    missing = [n for n in need if n not in ports]
    if missing:
        raise FastsimBuildError(f"{top} lacks the system ports {missing[:4]}: the system harness drives hw.system")
    pw = payload_words(ports)
    bind = []
    for i, name in enumerate(names):
        w = ports[name][1]
        ref = f"t->{cxx_name(name)}.data()" if w > 64 else f"&t->{cxx_name(name)}"
        bind.append(f"    P[{i}] = {{(void*){ref}, {w}}};")
    text = resources.files(__package__).joinpath("system_main.cpp").read_text()
    for k, v in {"TOP": top, "GPUS": gpus, "NPORTS": len(names), "BIND": "\n".join(bind),
                 "INPUTS_AT_RISE": int(inputs_at_rise), "PW": pw, "FW": flit_width // 32}.items():
        text = text.replace(f"@@{k}@@", str(v))
    if "@@" in text:
        raise FastsimBuildError("unfilled template field in system_main.cpp")
    return text, names


#: The most GPUs of a top whose profile-guided build inlines every block by default (:func:`build_system`
#: ``inline``; measured at 8 and 32: 1.4-1.6x the kept-apart build's stepped cycles/s at 32 GPUs for 1.8x
#: its build's CPU time and 5.2 against 4.0 GB peak; a larger top's inlined C++ was not tried).
INLINE_MAX_GPUS = 32

#: The most cycles of a profile-guided build's training layer (:func:`build_system` ``train``).
TRAIN_CYCLES = 40_000


def _train(lib: Path, names: list[str], params: dict, settings: dict) -> None:
    """Run the layer of ``settings`` on the instrumented library ``lib`` for at most :data:`TRAIN_CYCLES`
    cycles, in a process of its own (the profile is written when a process exits); a layer cut short
    or failing still leaves its profile."""
    settings = {**settings, "timeout": min(int(settings.get("timeout", TRAIN_CYCLES)), TRAIN_CYCLES)}
    settings.pop("out", None)
    code = ("import json, sys\nfrom pathlib import Path\nfrom verif.tb.system_fast import run_layer\n"
            "a = json.loads(sys.stdin.read())\ntry:\n    run_layer(Path(a[0]), a[1], a[2], a[3])\n"
            "except AssertionError:\n    pass\n")
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps([str(lib), names, params, settings]),
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[3])
    if proc.returncode != 0:
        raise FastsimBuildError(f"the training run of the system harness failed: {proc.stderr.strip()[-2000:]}")


def build_system(params: "dict | registry.DesignPoint", *, build_root: str | os.PathLike = "build",
                 inputs_at_rise: bool = True, train: dict | None = None,
                 keep_conditions: bool | None = None, inline: bool | None = None,
                 threads: int = 1) -> tuple[Path, list[str], float]:
    """Build (or reuse) the harness library of the system top at ``params`` (its overrides, or its
    :class:`~hw.registry.DesignPoint`): (library, port names, build seconds, 0 when reused). The
    library's copy of the Verilog has every input registered at the rising edge, the harness writing each
    cycle's inputs before it (:func:`registered_inputs` with ``edge="posedge"``): each cycle's logic is
    evaluated once. ``inputs_at_rise=False`` latches them on
    the falling edge instead, the harness writing them after the rising edge (each cycle's logic evaluated
    after both edges); the figures are the same.

    ``train`` (a layer's settings, as :func:`verif.tb.system_fast.run_layer` takes them) makes the build
    profile-guided (``_compile``'s ``train`` in :mod:`verif.harness.fastsim.build`): an instrumented
    library first runs that layer for at most :data:`TRAIN_CYCLES` cycles. The profile changes the machine
    code only, never what is simulated, so the cache key names the training method, not the layer: a
    later layer on the same design reuses the library trained on the first.

    ``keep_conditions`` adds :data:`~verif.harness.fastsim.build.KEEP_CONDITIONS` to the flags (logic the
    RTL computes under a condition evaluated only in the cycles it holds); the default keeps them in a
    profile-guided build. ``inline`` compiles every block into one model
    (:data:`~verif.harness.fastsim.build.INLINE_ALL`, no ``keep_apart``): the model simulates faster, for
    about 1.7-1.8 times the build's CPU time; the default inlines a profile-guided build of at most
    :data:`INLINE_MAX_GPUS` GPUs and keeps the repeated blocks apart otherwise (docs/performance.md, "The
    layer's compiled harness").

    ``threads`` above 1 builds a model that evaluates each cycle on that many threads (Verilator's
    ``--threads``; a profile-guided build's counters are then updated atomically)."""
    from verif.harness.runner import locked_verilog, require_simulator

    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a positive integer (1: one thread), got {threads!r}")
    require_simulator("verilator")
    point = params if isinstance(params, registry.DesignPoint) else registry.point("system", params)
    full = point.params
    build_root = Path(build_root)
    vpath = locked_verilog(point, None, build_root)
    verilog = vpath.read_text()
    ports = top_ports(verilog, "system")
    main, names = render_system_main("system", ports, full["gpus"], inputs_at_rise, full.get("flit_width", 128))
    latched = build_root / "fastsim" / "latched" / (vpath.name if not inputs_at_rise else
                                                    f"{vpath.stem}-rise{vpath.suffix}")
    latched.parent.mkdir(parents=True, exist_ok=True)
    text = registered_inputs(verilog, "system", "posedge", SIM_LOAD) if inputs_at_rise else \
        registered_inputs(verilog, "system")
    if not latched.exists() or latched.read_text() != text:
        latched.write_text(text)
    trainer = None
    if train is not None:
        trainer = (f"layer-{TRAIN_CYCLES}", lambda lib: _train(lib, names, dict(full), train))
    if keep_conditions is None:
        keep_conditions = train is not None
    if inline is None:
        inline = train is not None and full["gpus"] <= INLINE_MAX_GPUS
    flags = system_flags(text) + (KEEP_CONDITIONS if keep_conditions else []) + (INLINE_ALL if inline else [])
    if threads != 1:
        flags += ["--threads", str(threads)]
    lib, build_s = _compile("system", params, latched, main, build_root, flags=flags, keep_apart=not inline,
                            train=trainer)
    return lib, names, build_s


def _words(value: int, n: int):
    return (ctypes.c_uint32 * n).from_buffer_copy(int(value).to_bytes(4 * n, "little"))


class SystemLib:
    """One loaded copy of the harness library (its state is static: each run loads a fresh copy)."""

    def __init__(self, lib: Path, names: list[str]):
        self._dir = tempfile.mkdtemp(prefix="dysharp-sys-")
        copy = Path(self._dir) / "sim.so"
        shutil.copyfile(lib, copy)
        self.so = so = ctypes.CDLL(str(copy))
        shutil.rmtree(self._dir, ignore_errors=True)
        i64, u32p, i64p = ctypes.c_int64, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_int64)
        for fn, args, res in (("sys_port_width", [ctypes.c_int], ctypes.c_int),
                              ("sys_port_read", [ctypes.c_int, u32p], None),
                              ("sys_port_write", [ctypes.c_int, u32p], None),
                              ("sys_init", [_CALLBACK, ctypes.POINTER(ctypes.c_int32), i64p], ctypes.c_int),
                              ("sys_watch", [ctypes.c_int] + [i64] * 9, None),
                              ("sys_reset", [], None),
                              ("sys_settle", [], None),
                              ("sys_send", [ctypes.c_int, ctypes.c_int, u32p], None),
                              ("sys_feed", [ctypes.c_int, u32p], None),
                              ("sys_feed_ready", [ctypes.c_int, i64, i64, i64, u32p], None),
                              ("sys_set_wake", [ctypes.c_int, i64], None),
                              ("sys_silence", [ctypes.c_int, i64], None),
                              ("sys_mem_read", [ctypes.c_int, i64, ctypes.c_int, u32p], None),
                              ("sys_mem_write", [ctypes.c_int, i64, ctypes.c_int, u32p], None),
                              ("sys_start", [i64], None),
                              ("sys_rel_setup", [i64p], None),
                              ("sys_rel_gpu", [ctypes.c_int, i64, i64, i64], None),
                              ("sys_rel_row", [i64, u32p], None),
                              ("sys_rel_pending", [i64, ctypes.c_int, i64p], None),
                              ("sys_rel_combine", [i64, ctypes.c_int, i64, u32p], None),
                              ("sys_rel_push", [ctypes.c_int, i64, i64, ctypes.c_int, i64p, u32p], None),
                              ("sys_rel_left", [], i64),
                              ("sys_rel_read", [i64p, i64p], None),
                              ("sys_rel_error", [i64p], None),
                              ("sys_tile_rows", [ctypes.c_int, ctypes.c_int, i64, ctypes.c_int, i64p, i64p],
                               ctypes.c_int),
                              ("sys_run", [ctypes.c_int, i64, i64, i64p], ctypes.c_int),
                              ("sys_state", [i64p], None),
                              ("sys_link_counts", [i64p], None),
                              ("sys_series_len", [ctypes.c_int], i64),
                              ("sys_series", [ctypes.c_int, i64p], None),
                              ("sys_gpus", [], ctypes.c_int),
                              ("sys_flit_words", [], ctypes.c_int),
                              ("sys_payload_words", [], ctypes.c_int),
                              ("sys_eval_seconds", [], ctypes.c_double),
                              ("sys_finish", [], None)):
            f = getattr(so, fn)
            f.argtypes, f.restype = args, res
        self.names = names
        self.index = {n: i for i, n in enumerate(names)}
        self.gpus = so.sys_gpus()
        # the harness's word counts, read by the objects below through ``so``
        so.flit_words, so.payload_words = so.sys_flit_words(), so.sys_payload_words()

    def width(self, name: str) -> int:
        return self.so.sys_port_width(self.index[name])

    def read(self, name: str) -> int:
        i = self.index[name]
        n = -(-self.so.sys_port_width(i) // 32)
        buf = (ctypes.c_uint32 * max(n, 2))()
        self.so.sys_port_read(i, buf)
        return int.from_bytes(bytes(buf)[:4 * n], "little")

    def write(self, name: str, value: int) -> None:
        i = self.index[name]
        w = self.so.sys_port_width(i)
        value = int(value)
        if value < 0 or value >> w:
            raise ValueError(f"value {value:#x} does not fit port {name} ({w} bits)")
        self.so.sys_port_write(i, _words(value, max(2, -(-w // 32))))

    def roles(self, tag_gate: bool = False) -> list[int]:
        """The port indices ``sys_init`` takes (system_main.cpp); ``tag_gate``: the feeders offer a ready
        reduction load first only while the NIC's ``gen_tag_ready`` is high (:class:`verif.tb.system.Feeder`)."""
        ix, r = self.index, []
        for g in range(self.gpus):
            r += [ix[f"mem_wr__{g}__{s}"] for s in _VRP]
            for rd in ("mem_rd_tx", "mem_rd_rx"):
                r += [ix[f"{rd}__{g}__req__{s}"] for s in _VRP] + [ix[f"{rd}__{g}__resp__{s}"] for s in _VRP]
            for st in _STREAMS:
                r += [ix[f"{st}__{g}__{s}"] for s in _VRP]
        r += [ix[f"switch_cfg__{s}"] for s in _VRP] + [ix["probe"], ix["switch_status__total"], ix["clk"], ix["rst"]]
        r += [ix.get(f"nic_cfg__{s}", -1) for s in _VRP]          # hw.system's nic_cfg="stream" form
        r += [ix[f"gen_tag_ready__{g}"] if tag_gate else -1 for g in range(self.gpus)]
        return r


# ------------------------------------------------------------------------------------------ the testbench's
# objects, backed by the library

class _Port:
    """``dut.<name>.value`` for the testbench code shared with cocotb (configuration, counters, status)."""

    def __init__(self, lib, name):
        self._lib, self._name = lib, name

    @property
    def value(self):
        return self._lib.read(self._name)

    @value.setter
    def value(self, v):
        self._lib.write(self._name, v)


class FastDut:
    def __init__(self, lib: SystemLib):
        self._lib = lib

    def __getattr__(self, name):
        if name.startswith("_") or name not in self._lib.index:
            raise AttributeError(f"the system top has no port {name}")
        return _Port(self._lib, name)


class _Stream:
    """A stream driver's ``send`` (0 desc, 1 cmd, 2 mm_cfg, 3 switch_cfg, 4 nic_cfg)."""

    def __init__(self, so, which, g=0):
        self.so, self.which, self.g = so, which, g

    def send(self, payload: int) -> None:
        self.so.sys_send(self.which, self.g, _words(payload, self.so.payload_words))


class _FeederQueue:
    def __init__(self, so, g, ports=None):
        self.so, self.g, self.ports = so, g, ports

    def extend(self, descs):
        for d in descs:
            self.so.sys_feed(self.g, _words(d.pack(self.ports), self.so.payload_words))


class _Feeder:
    """The testbench's :class:`~verif.tb.system.Feeder` in the library; descriptors in the layout of a
    ``ports``-port system."""

    def __init__(self, so, g, ports=None):
        self.so, self.g, self.ports = so, g, ports
        self.queue = _FeederQueue(so, g, ports)

    def push_ready(self, entry):
        at, planned, token, desc = entry
        self.so.sys_feed_ready(self.g, int(at), int(planned), int(token),
                               _words(desc.pack(self.ports), self.so.payload_words))


class _Memory:
    """The GPU's memory in the library; ``words[addr] = v`` preloads without telling the testbench, like
    :class:`verif.harness.gpu_memory.GpuMemory`'s dict; ``write`` tells it (``LayerMemory``)."""

    def __init__(self, so, g, on_write):
        self.so, self.g, self.on_write = so, g, on_write
        self.words = self

    def __setitem__(self, addr, value):
        self.so.sys_mem_write(self.g, int(addr), 1, _words(value, self.so.flit_words))

    def read(self, addr: int) -> int:
        buf = (ctypes.c_uint32 * self.so.flit_words)()
        self.so.sys_mem_read(self.g, int(addr), 1, buf)
        return int.from_bytes(bytes(buf), "little")

    def read_bytes(self, addr: int, n: int) -> bytes:
        """``n`` flits from ``addr`` as little-endian bytes."""
        buf = (ctypes.c_uint32 * (self.so.flit_words * n))()
        self.so.sys_mem_read(self.g, int(addr), n, buf)
        return bytes(buf)

    def read_row(self, addr: int, n: int) -> list[int]:
        raw, b = self.read_bytes(addr, n), 4 * self.so.flit_words
        return [int.from_bytes(raw[b * i:b * i + b], "little") for i in range(n)]

    def write(self, addr: int, data: int) -> None:
        self.so.sys_mem_write(self.g, int(addr), 1, _words(data, self.so.flit_words))
        self.on_write(int(addr), int(data))


class _Cycler:
    def __init__(self):
        self.cycle = self.skipped = self.dropped = 0
        self.skipper = self.on_resume = None
