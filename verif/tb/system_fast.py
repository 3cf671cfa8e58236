"""The layer testbench (:mod:`verif.tb.system`) on the compiled harness
(:mod:`verif.harness.fastsim.system`): :func:`run_layer` runs one MoE layer with no Python per cycle and
returns the same figures, after the same checks, as the cocotb test ``test_layer``.

The testbench's models stay the single source of truth: :class:`FastEnv` and :class:`FastGpu` are
:class:`~verif.tb.system.SystemEnv` and :class:`~verif.tb.system.GpuSide` with the library's agents in
place of cocotb's (the tile policy, the numpy expert compute, the token releases, the descriptors they
make ready and the end-of-run checks are theirs, unchanged), driven from the library's callback: a GPU's
GEMM ends (:meth:`GpuSide.drive`), window metadata flits and landed rows (:meth:`GpuSide._on_write`'s
bookkeeping), TileReady / TokenRelease outputs, and the phase's predicate, asked after each cycle with an
event, as ``Cycler.until`` asks it at each edge. The phases follow ``test_layer`` step by step.
"""

import collections
import ctypes
import time
from pathlib import Path

from amaranth.lib import data

from hw.gpu_nic.memory_if import flit_addr_bits, mem_write_layout
from hw.switch.dysharp_switch import port_status_layout
from hw.system import LinkProbe

from verif.harness.fastsim.build import FastsimBuildError
from verif.harness.fastsim.system import (_CALLBACK, EV_LANDED, EV_POLL, EV_READY, EV_RELEASE, EV_WAKE, EV_WRITE,
                                          FastDut, SystemLib, _Cycler, _Feeder, _Memory, _Stream, _words)
from verif.harness.structs import fields
from verif.models import moe_layer as ml

from . import system as tb
from .system import LinkCounters, layer_figures, queue_dispatch, start_combine

__all__ = ["run_layer", "FastEnv", "FastGpu"]


class _Links:
    """:class:`verif.tb.system.LinkCounters`' figures, read from the library."""

    def __init__(self, env, bin_cycles):
        self.env, self.bin = env, bin_cycles

    def start(self, cycle):
        self.env.lib.so.sys_start(cycle)

    @property
    def counts(self):
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


class FastGpu(tb.GpuSide):
    """A GPU's side with the library's memory, feeder and stream drivers."""

    def _connect(self, env, g):
        so = env.lib.so
        self.mem = _Memory(so, g, self._on_write)
        self.feeder = _Feeder(so, g, env.L.G)
        self.cmd = _Stream(so, 1, g)
        self.mm_cfg = _Stream(so, 2, g)
        self.agents = []

    def row_flits(self, flit_addr, n):
        return self.mem.read_row(flit_addr, n)

    def row_bytes(self, flit_addr, n):
        return self.mem.read_bytes(flit_addr, n)

    def write_row_bytes(self, flit_addr, raw):
        """One call into the library; :meth:`_on_write` hears of the flits only where it follows them."""
        fb = 4 * self.mem.so.flit_words
        n = len(raw) // fb
        self.mem.so.sys_mem_write(self.g, int(flit_addr), n, (ctypes.c_uint32 * (fb // 4 * n)).from_buffer_copy(raw))
        if self.watches(flit_addr, n):
            for i in range(n):
                self._on_write(flit_addr + i, int.from_bytes(raw[fb * i:fb * (i + 1)], "little"))

    def preload(self, flit_addr, words):
        fw = self.mem.so.flit_words
        self.mem.so.sys_mem_write(self.g, int(flit_addr), len(words),
                                  _words(int.from_bytes(b"".join(int(w).to_bytes(4 * fw, "little") for w in words),
                                                        "little"), fw * len(words)))

    def silence(self):
        pass            # the library's (sys_silence): at the same cycle, at the same point of it


class FastEnv(tb.SystemEnv):
    """The testbench's state on the library: its callback, the phases' waits (``Cycler.until``'s semantics)."""

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
        self.nic_cfg = _Stream(self.lib.so, 4) if "nic_cfg__valid" in self.lib.index else None

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
                gs._on_write(int(arg), int.from_bytes(ctypes.string_at(words, 4 * self.lib.so.flit_words), "little"))
            elif kind == EV_LANDED:
                (out0, out_size), (part0, _) = gs.landing
                base = out0 if 0 <= arg - out0 < out_size else part0
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


def _library_config(env) -> list[int]:
    """The layouts and settings ``sys_init`` takes (system_main.cpp), from their sources."""
    fw = env.L.flit_width
    wl = fields(mem_write_layout(fw))
    occ = fields(port_status_layout())["engine.in_use"]
    lp = fields(LinkProbe)
    lw = data.Layout.cast(LinkProbe).size
    if lw > 16 or lp["opcode"][1] > 8:
        raise FastsimBuildError(f"a link probe of {lw} bits does not fit the harness (16 at most)")
    return [wl["addr"][0], wl["addr"][1], wl["data"][0], occ[0], occ[1], lw, lp["valid"][0], lp["vc"][0],
            lp["last"][0], lp["opcode"][0], lp["opcode"][1], *LinkCounters.FILLS, env.s.get("lat", 10),
            (1 << flit_addr_bits(fw)) - 1, env.drop_k or 0, env.s.get("bin", 64), env.QUIET]


def run_layer(lib_path: Path, names: list[str], params: dict, settings: dict) -> dict:
    """One layer on the compiled harness, the cocotb testbench's flow (``verif.tb.system.test_layer``):
    the same checks (an ``AssertionError`` names the failed one) and the same figures."""
    if settings.get("stall", 0.0) or not settings.get("skip", True):
        raise ValueError("the compiled system harness runs with the testbench's defaults: stall 0 and the "
                         "quiet-cycle skip on (use the cocotb harness for the others)")
    wall0 = time.perf_counter()
    lib = SystemLib(lib_path, names)
    env = FastEnv(lib, params, settings)
    L, s = env.L, env.s
    so = lib.so
    cb = _CALLBACK(env.callback)
    roles = lib.roles(env.tag_gate)
    cfg = _library_config(env)
    so.sys_init(cb, (ctypes.c_int32 * len(roles))(*roles), (ctypes.c_int64 * len(cfg))(*cfg))
    stride = 1 << (L.row_shift - L.flit_shift)
    for gs in env.gpus:
        (out0, out_size), (part0, part_size) = gs.landing
        so.sys_watch(gs.g, gs.win0, gs.win0 + L.N * stride, stride, L.meta_flit, out0, part0, out_size, part_size,
                     L.comb_flits)
        env.wake(gs)
    if env.silent:
        so.sys_silence(*env.silent)
    timeout = s.get("timeout", 400_000)
    so.sys_reset()
    env.configure()                      # while the clock is high, as under cocotb
    so.sys_settle()
    seen = ctypes.c_int64()
    if so.sys_run(0, 0, 1000, ctypes.byref(seen)) == 1:
        raise AssertionError(f"timeout: configuration did not happen within 1000 cycles (cycle {seen.value})")
    env.run(2, 4)
    t0 = env.cycler.cycle
    env.links.start(t0)
    queue_dispatch(env)
    env.wait(lambda: env.left == 0 and all(g.gemm_done for g in env.gpus), timeout, "dispatch and GEMMs",
             lambda: [t for t in range(L.N) if +env.pending[t]])
    env.phase["dispatch_gemm"] = env.cycler.cycle - t0
    if env.scheme not in ml.FUSED_SCHEMES:
        t1 = start_combine(env)
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
