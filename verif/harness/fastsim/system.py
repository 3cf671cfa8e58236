"""Compiled whole-system harness: one MoE layer on the system top (:mod:`hw.system`) with no Python per cycle.

:func:`build_system` compiles the Verilated top with the C++ harness ``system_main.cpp`` into a shared
library (cached under ``build/fastsim/`` by the hash of the Verilog, the harness and the flags, like the
switch fast path: the deduplicated blocks kept apart, the reset latched). :func:`run_layer` runs one layer
on it and returns the same figures, after the same checks, as the cocotb testbench :mod:`verif.tb.system`.

Division of work: the C++ side does every per-cycle job of that testbench (the GPU memories and their
ports, the descriptor feeders, the stream drivers and monitors, the link counters, the occupancy samples,
the quiet-skip rule :meth:`~verif.tb.system.SystemEnv.skip` with its dropped rounds), in the cocotb
cycler's order. Python keeps the testbench's models (:class:`~verif.tb.system.SystemEnv` and
:class:`~verif.tb.system.GpuSide`: the tile policy, the numpy expert compute, the token releases, the
checks) and runs only on events, through one ctypes callback: a GPU's next GEMM end (the wake cycle it
set), a watched memory write (a window row's metadata flit, a result or partial row's flit), a TileReady
or TokenRelease output, and after a cycle that had one of those, the phase's predicate. Memory is the
C++ side's; Python reads and writes it through the library. The gates of the testbench's agents are
always open: the random stalls (the ``stall`` setting) are the cocotb harness's only; the read latency
(``lat``) is modelled.
"""

import ctypes
import os
import shutil
import tempfile
import time
from importlib import resources
from pathlib import Path

from hw import registry

from .build import VERILATOR_FLAGS, FastsimBuildError, FastsimRunError, _compile, cxx_name, top_ports

__all__ = ["build_system", "SystemLib", "run_layer"]

#: The harness is a shared library: position-independent code, linked with ``-shared``.
SO_FLAGS = VERILATOR_FLAGS + ["-CFLAGS", "-fPIC", "-LDFLAGS", "-shared"]

_STREAMS = ("desc", "cmd", "mm_cfg", "ready", "release")
_VRP = ("valid", "ready", "payload")
EV_WAKE, EV_WRITE, EV_READY, EV_RELEASE, EV_POLL, EV_LANDED = 1, 2, 3, 4, 5, 6
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_uint64,
                             ctypes.POINTER(ctypes.c_uint32))
PW = 8            # 32-bit words of a stream payload in the harness (system_main.cpp)


def render_system_main(top: str, ports: dict, gpus: int) -> tuple[str, list[str]]:
    """The C++ harness for ``top``'s ports and its port table (the names, in the harness's index order)."""
    names = sorted(ports)
    need = [f"mem_wr__0__{s}" for s in _VRP] + [f"{st}__0__{s}" for st in _STREAMS for s in _VRP] + \
        [f"switch_cfg__{s}" for s in _VRP] + ["probe", "switch_status__total", "clk", "rst"]
    missing = [n for n in need if n not in ports]
    if missing:
        raise FastsimBuildError(f"{top} lacks the system ports {missing[:4]}: the system harness drives hw.system")
    for st in _STREAMS + ("switch_cfg",):
        name = f"{st}__0__payload" if st != "switch_cfg" else "switch_cfg__payload"
        if ports[name][1] > 32 * PW:
            raise FastsimBuildError(f"{top}.{name} is {ports[name][1]} bits; the harness holds {32 * PW}")
    bind = []
    for i, name in enumerate(names):
        w = ports[name][1]
        ref = f"t->{cxx_name(name)}.data()" if w > 64 else f"&t->{cxx_name(name)}"
        bind.append(f"    P[{i}] = {{(void*){ref}, {w}}};")
    text = resources.files(__package__).joinpath("system_main.cpp").read_text()
    for k, v in {"TOP": top, "GPUS": gpus, "NPORTS": len(names), "BIND": "\n".join(bind)}.items():
        text = text.replace(f"@@{k}@@", str(v))
    if "@@" in text:
        raise FastsimBuildError("unfilled template field in system_main.cpp")
    return text, names


def build_system(params: dict, *, build_root: str | os.PathLike = "build") -> tuple[Path, list[str], float]:
    """Build (or reuse) the harness library of the system top at ``params``: (library, port names, build
    seconds, 0 when reused)."""
    from verif.harness.runner import locked_verilog, require_simulator

    require_simulator("verilator")
    full = registry.get("system").resolve(params)
    if full.get("flit_width", 128) != 128:
        raise FastsimBuildError("the system harness models 128-bit flits only")
    build_root = Path(build_root)
    vpath = locked_verilog("system", params, build_root)
    ports = top_ports(vpath.read_text(), "system")
    main, names = render_system_main("system", ports, full["gpus"])
    lib, build_s = _compile("system", params, vpath, main, build_root, flags=SO_FLAGS, latch_reset=True,
                            keep_apart=True)
    return lib, names, build_s


def _words(value: int, n: int = PW):
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
                              ("sys_watch", [ctypes.c_int] + [i64] * 8, None),
                              ("sys_reset", [], None),
                              ("sys_send", [ctypes.c_int, ctypes.c_int, u32p], None),
                              ("sys_feed", [ctypes.c_int, u32p], None),
                              ("sys_feed_ready", [ctypes.c_int, i64, i64, i64, u32p], None),
                              ("sys_set_wake", [ctypes.c_int, i64], None),
                              ("sys_silence", [ctypes.c_int, i64], None),
                              ("sys_mem_read", [ctypes.c_int, i64, ctypes.c_int, u32p], None),
                              ("sys_mem_write", [ctypes.c_int, i64, ctypes.c_int, u32p], None),
                              ("sys_start", [i64], None),
                              ("sys_run", [ctypes.c_int, i64, i64, i64p], ctypes.c_int),
                              ("sys_state", [i64p], None),
                              ("sys_link_counts", [i64p], None),
                              ("sys_series_len", [ctypes.c_int], i64),
                              ("sys_series", [ctypes.c_int, i64p], None),
                              ("sys_gpus", [], ctypes.c_int),
                              ("sys_eval_seconds", [], ctypes.c_double),
                              ("sys_finish", [], None)):
            f = getattr(so, fn)
            f.argtypes, f.restype = args, res
        self.names = names
        self.index = {n: i for i, n in enumerate(names)}
        self.gpus = so.sys_gpus()

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

    def roles(self) -> list[int]:
        """The port indices ``sys_init`` takes (system_main.cpp)."""
        ix, r = self.index, []
        for g in range(self.gpus):
            r += [ix[f"mem_wr__{g}__{s}"] for s in _VRP]
            for rd in ("mem_rd_tx", "mem_rd_rx"):
                r += [ix[f"{rd}__{g}__req__{s}"] for s in _VRP] + [ix[f"{rd}__{g}__resp__{s}"] for s in _VRP]
            for st in _STREAMS:
                r += [ix[f"{st}__{g}__{s}"] for s in _VRP]
        r += [ix[f"switch_cfg__{s}"] for s in _VRP] + [ix["probe"], ix["switch_status__total"], ix["clk"], ix["rst"]]
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
    """A stream driver's ``send`` (0 desc, 1 cmd, 2 mm_cfg, 3 switch_cfg)."""

    def __init__(self, so, which, g=0):
        self.so, self.which, self.g = so, which, g

    def send(self, payload: int) -> None:
        self.so.sys_send(self.which, self.g, _words(payload))


class _FeederQueue:
    def __init__(self, so, g):
        self.so, self.g = so, g

    def extend(self, descs):
        for d in descs:
            self.so.sys_feed(self.g, _words(d.pack()))


class _Feeder:
    def __init__(self, so, g):
        self.so, self.g = so, g
        self.queue = _FeederQueue(so, g)

    def push_ready(self, entry):
        at, planned, token, desc = entry
        self.so.sys_feed_ready(self.g, int(at), int(planned), int(token), _words(desc.pack()))


class _Memory:
    """The GPU's memory in the library; ``words[addr] = v`` preloads without telling the testbench, like
    :class:`verif.harness.gpu_memory.GpuMemory`'s dict; ``write`` tells it (``LayerMemory``)."""

    def __init__(self, so, g, on_write):
        self.so, self.g, self.on_write = so, g, on_write
        self.words = self

    def __setitem__(self, addr, value):
        self.so.sys_mem_write(self.g, int(addr), 1, _words(value, 4))

    def read(self, addr: int) -> int:
        buf = (ctypes.c_uint32 * 4)()
        self.so.sys_mem_read(self.g, int(addr), 1, buf)
        return int.from_bytes(bytes(buf), "little")

    def read_row(self, addr: int, n: int) -> list[int]:
        buf = (ctypes.c_uint32 * (4 * n))()
        self.so.sys_mem_read(self.g, int(addr), n, buf)
        raw = bytes(buf)
        return [int.from_bytes(raw[16 * i:16 * i + 16], "little") for i in range(n)]

    def write(self, addr: int, data: int) -> None:
        self.so.sys_mem_write(self.g, int(addr), 1, _words(data, 4))
        self.on_write(int(addr), int(data))


class _Cycler:
    def __init__(self):
        self.cycle = self.skipped = self.dropped = 0
        self.skipper = self.on_resume = None


class _Links:
    """:class:`verif.tb.system.LinkCounters`' figures, read from the library."""

    def __init__(self, env, bin_cycles):
        self.env, self.bin = env, bin_cycles

    def start(self, cycle):
        self.env.lib.so.sys_start(cycle)

    @property
    def counts(self):
        import collections
        G = self.env.L.G
        a = (ctypes.c_int64 * (4 * G))()
        self.env.lib.so.sys_link_counts(a)
        return {(g, d): collections.Counter(data=a[2 * (2 * g + k)], fills=a[2 * (2 * g + k) + 1])
                for g in range(G) for k, d in enumerate(("up", "down"))}

    @property
    def series(self):
        G = self.env.L.G
        return {(g, d): self.env.series(2 * g + k) for g in range(G) for k, d in enumerate(("up", "down"))}


class _Occupancy:
    def __init__(self, env, bin_cycles):
        self.env, self.bin = env, bin_cycles

    def start(self, cycle):
        pass            # one start for both (_Links.start)

    @property
    def series(self):
        s = self.env.series(-1)
        return [[s[i], s[i + 1]] for i in range(0, len(s), 2)]


def _classes():
    """The fast GpuSide and SystemEnv (imported late: the testbench module imports cocotb)."""
    from verif.tb import system as tb

    class FastGpu(tb.GpuSide):
        def _connect(self, env, g):
            so = env.lib.so
            self.mem = _Memory(so, g, self._on_write)
            self.feeder = _Feeder(so, g)
            self.cmd = _Stream(so, 1, g)
            self.mm_cfg = _Stream(so, 2, g)
            self.agents = []

        def row_flits(self, flit_addr, n):
            return self.mem.read_row(flit_addr, n)

        def silence(self):
            pass            # the library's (sys_silence): at the same cycle, at the same point of it

    class FastEnv(tb.SystemEnv):
        gpu_class = FastGpu

        def __init__(self, lib, params, settings):
            self.lib = lib
            self.error = None
            self.predicate = None
            self.loop_s = self.python_s = 0.0        # in the library's cycle loop; of that, in Python
            super().__init__(FastDut(lib), params, settings)

        def _cycler(self, dut):
            return _Cycler()

        def _connect(self, dut):
            s = self.s
            self.links = _Links(self, s.get("bin", 64))
            self.occupancy = _Occupancy(self, s.get("bin", 64))
            self.switch_cfg = _Stream(self.lib.so, 3)

        def series(self, i):
            so = self.lib.so
            n = so.sys_series_len(i)
            a = (ctypes.c_int64 * max(n, 1))()
            so.sys_series(i, a)
            return list(a[:n])

        def wake(self, gs):
            self.lib.so.sys_set_wake(gs.g, gs.due[0][0] if gs.due else -1)

        def callback(self, kind, g, cycle, arg, words):
            c0 = time.perf_counter()
            try:
                self.cycler.cycle = cycle
                if kind == EV_POLL:
                    return 1 if self.predicate() else 0
                gs = self.gpus[g]
                if kind == EV_WAKE:
                    gs.drive(cycle)
                    self.wake(gs)
                elif kind == EV_WRITE:
                    gs._on_write(int(arg), int.from_bytes(ctypes.string_at(words, 16), "little"))
                elif kind == EV_LANDED:
                    base = gs.out0 if 0 <= arg - gs.out0 < self.L.G * self.L.N * gs.stride else gs.part0
                    gs.landed[(base, (arg - base) // gs.stride)] = words[0]
                elif kind == EV_READY:
                    gs._on_ready(int(arg), cycle)
                    self.wake(gs)
                elif kind == EV_RELEASE:
                    gs._on_release(int(arg), cycle)
                return 0
            except BaseException as e:      # noqa: BLE001 -- re-raised by run() once the library returns
                self.error = e
                return -1
            finally:
                self.python_s += time.perf_counter() - c0

        def run(self, mode, arg=0, timeout=1 << 62, what=""):
            seen = ctypes.c_int64()
            c0 = time.perf_counter()
            r = self.lib.so.sys_run(mode, arg, timeout, ctypes.byref(seen))
            self.loop_s += time.perf_counter() - c0
            self.cycler.cycle = seen.value
            if r == 2:
                raise self.error
            if r == 1:
                raise AssertionError(f"timeout: {what} did not happen within {timeout} cycles "
                                     f"(cycle {seen.value})")

        def until(self, predicate, timeout, what):
            """``Cycler.until``: the predicate before each cycle, asked after cycles with an event."""
            if predicate():
                return
            self.predicate = predicate
            self.run(1, 0, timeout, what)

        def wait(self, predicate, timeout, phase, left):
            try:
                self.until(predicate, timeout, phase)
            except AssertionError as e:
                if not str(e).startswith("timeout"):
                    raise
                toks = left()
                silent = f" (GPU {self.silent[0]} stopped answering at cycle {self.silent[1]})" if self.silent else ""
                raise AssertionError(f"{e}{silent}: {len(toks)} unfinished tokens, first {toks[:20]}") from None

        def state(self):
            a = (ctypes.c_int64 * (4 + self.L.G))()
            self.lib.so.sys_state(a)
            self.cycler.skipped, self.cycler.dropped, self.skip_interrupted = a[1], a[2], a[3]

    return FastEnv


def _library_config(env, lib: SystemLib) -> list[int]:
    from amaranth.lib import data

    from hw.gpu_nic.memory_if import flit_addr_bits, mem_write_layout
    from hw.packet import Opcode
    from hw.switch.dysharp_switch import port_status_layout
    from hw.system import LinkProbe
    from verif.harness.structs import fields
    from verif.tb.system import LinkCounters

    wl = fields(mem_write_layout(128))
    occ = fields(port_status_layout())["engine.in_use"]
    lp = fields(LinkProbe)
    lw = data.Layout.cast(LinkProbe).size
    if lw > 16 or lp["opcode"][1] > 8:
        raise FastsimBuildError(f"a link probe of {lw} bits does not fit the harness (16 at most)")
    return [wl["addr"][0], wl["addr"][1], wl["data"][0], occ[0], occ[1], lw, lp["valid"][0], lp["vc"][0],
            lp["last"][0], lp["opcode"][0], lp["opcode"][1], *LinkCounters.FILLS, env.s.get("lat", 10),
            (1 << flit_addr_bits(128)) - 1, env.drop_k or 0, env.s.get("bin", 64), env.QUIET]


def run_layer(lib_path: Path, names: list[str], params: dict, settings: dict) -> dict:
    """One layer on the compiled harness, the cocotb testbench's flow (``verif.tb.system.test_layer``):
    the same checks (an ``AssertionError`` names the failed one) and the same figures."""
    from verif.models import moe_layer as ml
    from verif.tb.system import layer_figures

    if settings.get("stall", 0.0) or not settings.get("skip", True):
        raise ValueError("the compiled system harness runs with the testbench's defaults: stall 0 and the "
                         "quiet-cycle skip on (use the cocotb harness for the others)")
    wall0 = time.perf_counter()
    lib = SystemLib(lib_path, names)
    FastEnv = _classes()
    env = FastEnv(lib, params, settings)
    L, s = env.L, env.s
    so = lib.so
    cb = _CALLBACK(env.callback)
    roles = lib.roles()
    cfg = _library_config(env, lib)
    so.sys_init(cb, (ctypes.c_int32 * len(roles))(*roles), (ctypes.c_int64 * len(cfg))(*cfg))
    stride = 1 << (L.row_shift - 4)
    for gs in env.gpus:
        so.sys_watch(gs.g, gs.win0, gs.win0 + L.N * stride, stride, L.meta_flit, gs.out0, gs.part0,
                     L.G * L.N * stride, L.comb_flits)
        env.wake(gs)
    if env.silent:
        so.sys_silence(*env.silent)
    timeout = s.get("timeout", 400_000)
    so.sys_reset()
    env.configure()
    seen = ctypes.c_int64()
    if so.sys_run(0, 0, 1000, ctypes.byref(seen)) == 1:
        raise AssertionError(f"timeout: configuration did not happen within 1000 cycles (cycle {seen.value})")
    env.run(2, 4)
    t0 = env.cycler.cycle
    env.links.start(t0)
    for w, gs in zip(env.work, env.gpus):
        gs.feeder.queue.extend(w.dispatch)
    env.wait(lambda: env.left == 0 and all(g.gemm_done for g in env.gpus), timeout, "dispatch and GEMMs",
             lambda: [t for t in range(L.N) if +env.pending[t]])
    env.phase["dispatch_gemm"] = env.cycler.cycle - t0
    if env.scheme not in ml.FUSED_SCHEMES:
        env.snap = env.flits()
        t1 = env.cycler.cycle
        for w, gs in zip(env.work, env.gpus):
            gs.feeder.queue.extend(c.desc for c in w.combine if c.desc is not None)
            gs.feeder.queue.extend(r.desc for r in w.returns)
    env.wait(env.complete, timeout, "combine results", env.unfinished)
    total = env.cycler.cycle - t0
    if env.scheme not in ml.FUSED_SCHEMES:
        env.phase["combine"] = env.cycler.cycle - t1
    env.phase["total"] = total
    env.run(2, 50)                       # let anything stray show up in the counters
    env.state()
    fig = layer_figures(env, t0, total, wall0)
    sim = fig["sim"]
    sim["harness"] = "fast"
    sim["loop_s"], sim["python_s"], sim["eval_s"] = env.loop_s, env.python_s, so.sys_eval_seconds()
    so.sys_finish()
    return fig
