"""The layer testbench (:mod:`verif.tb.system`) on the compiled harness
(:mod:`verif.harness.fastsim.system`): :func:`run_layer` runs one MoE layer with no Python per cycle and
returns the same figures, after the same checks, as the cocotb test ``test_layer``.

The testbench's models stay the single source of truth: :class:`FastEnv` and :class:`FastGpu` are
:class:`~verif.tb.system.SystemEnv` and :class:`~verif.tb.system.GpuSide` with the library's agents in
place of cocotb's (the tile policy, the numpy expert compute and the end-of-run checks are theirs,
unchanged), driven from the library's callback: a GPU's GEMM ends (:meth:`GpuSide.drive`), landed rows
(:meth:`GpuSide._on_write`'s bookkeeping), TileReady outputs, and the phase's predicate, asked after each
cycle with an event, as ``Cycler.until`` asks it at each edge. The phases follow ``test_layer`` step by step.

The window's bookkeeping and the token releases run in the library, per event as the testbench's
:meth:`GpuSide._on_write` (a metadata flit), :meth:`GpuSide._on_release` and :meth:`SystemEnv.released` do,
on the testbench's own tables, given once at set-up (:func:`install_releases`): every dispatched row's
bytes and its token (``SystemEnv.rows``: a release's row must be exactly a token's), each token's pending
(GPU, expert) pairs, its combine descriptor and home GPU (dysharp) and the expert GPUs' pushes with their
own pairs (fused-unicast), all packed as the feeders send them. ``left`` is the library's count, read live
by the phase's predicate; ``pending`` and ``released_at`` are read back after every wait; a release the
testbench would refuse (a slot with no row, a row that is no token's, a pair not pending) fails the run with
the testbench's message (:meth:`FastEnv.release_error`). :meth:`FastGpu.tile_rows` reads a ready tile's
rows from the library.
"""

import collections
import ctypes
import time
from pathlib import Path

import numpy as np
from amaranth.lib import data

from hw.gpu_nic.memory_if import flit_addr_bits, mem_write_layout
from hw.gpu_nic.receive_path import META_ENTRIES, META_EXPERT_BITS
from hw.gpu_nic.token_tracker import TokenRelease
from hw.switch.dysharp_switch import port_status_layout
from hw.system import LinkProbe

from verif.harness.fastsim.build import FastsimBuildError
from verif.harness.fastsim.system import (_CALLBACK, EV_LANDED, EV_POLL, EV_READY, EV_WAKE, FastDut, SystemLib,
                                          _Cycler, _Feeder, _Memory, _Stream, _words)
from verif.harness.structs import fields
from verif.models import moe_layer as ml

from . import system as tb
from .system import LinkCounters, layer_figures, queue_dispatch, start_combine

__all__ = ["run_layer", "FastEnv", "FastGpu", "install_releases"]


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

    def rows_bytes(self, flit_addrs, n):
        """Each row read into one buffer (a call per row), the buffer's bytes once."""
        fw, so, g = self.mem.so.flit_words, self.mem.so, self.g
        buf = bytearray(4 * fw * n * len(flit_addrs))
        row = ctypes.c_uint32 * (fw * n)
        for k, a in enumerate(flit_addrs):
            so.sys_mem_read(g, a, n, row.from_buffer(buf, 4 * fw * n * k))
        return bytes(buf)

    def write_rows_bytes(self, flit_addrs, raw):
        """Each row written from one buffer (a call per row); :meth:`_on_write` hears of the flits of the rows
        it follows only."""
        if not flit_addrs:
            return
        fw, so, g = self.mem.so.flit_words, self.mem.so, self.g
        n = len(raw) // len(flit_addrs) // (4 * fw)
        buf = bytearray(raw)
        row = ctypes.c_uint32 * (fw * n)
        watched = self.watches(min(flit_addrs), max(flit_addrs) + n - min(flit_addrs))
        for k, a in enumerate(flit_addrs):
            so.sys_mem_write(g, a, n, row.from_buffer(buf, 4 * fw * n * k))
            if watched:
                self._heard(a, raw[4 * fw * n * k:4 * fw * n * (k + 1)])

    def write_row_bytes(self, flit_addr, raw):
        """One call into the library; :meth:`_on_write` hears of the flits only where it follows them."""
        fb = 4 * self.mem.so.flit_words
        n = len(raw) // fb
        self.mem.so.sys_mem_write(self.g, int(flit_addr), n, (ctypes.c_uint32 * (fb // 4 * n)).from_buffer_copy(raw))
        self._heard(flit_addr, raw)

    def _heard(self, flit_addr, raw):
        """:meth:`_on_write` of the flits of ``raw`` written from ``flit_addr`` on, where it follows them."""
        fb = 4 * self.mem.so.flit_words
        n = len(raw) // fb
        if self.watches(flit_addr, n):
            for i in range(n):
                self._on_write(flit_addr + i, int.from_bytes(raw[fb * i:fb * (i + 1)], "little"))

    def preload(self, flit_addr, words):
        fw = self.mem.so.flit_words
        self.mem.so.sys_mem_write(self.g, int(flit_addr), len(words),
                                  _words(int.from_bytes(b"".join(int(w).to_bytes(4 * fw, "little") for w in words),
                                                        "little"), fw * len(words)))

    def preload_bytes(self, flit_addr, raw):
        """One call into the library."""
        self.mem.so.sys_mem_write(self.g, int(flit_addr), len(raw) // (4 * self.mem.so.flit_words),
                                  (ctypes.c_uint32 * (len(raw) // 4)).from_buffer_copy(raw))

    def silence(self):
        pass            # the library's (sys_silence): at the same cycle, at the same point of it

    def tile_rows(self, e, start, n):
        """The library's slots of local expert ``e`` (its window bookkeeping)."""
        rows, arrived = (ctypes.c_int64 * max(n, 1))(), (ctypes.c_int64 * max(n, 1))()
        k = self.mem.so.sys_tile_rows(self.g, e, start, n, rows, arrived)
        return list(rows[:k]), list(arrived[:k])

    def _on_release(self, payload, cycle):
        raise AssertionError("the compiled harness reacts to token releases itself (install_releases)")


class FastEnv(tb.SystemEnv):
    """The testbench's state on the library: its callback, the phases' waits (``Cycler.until``'s semantics)."""

    gpu_class = FastGpu

    def __init__(self, lib, params, settings):
        self.lib = lib
        self.error = None
        self.predicate = None
        self.loop_s = self.python_s = 0.0        # in the library's cycle loop; of that, in Python
        self._releases = None                     # install_releases: each token's pairs in the library's order
        super().__init__(FastDut(lib), params, settings)

    @property
    def left(self):
        """Tokens not yet released: the library's count once its release tables are installed."""
        return self.lib.so.sys_rel_left() if self._releases is not None else self._left

    @left.setter
    def left(self, value):
        if self._releases is not None:
            raise AttributeError("left is the library's once its release tables are installed")
        self._left = value

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
            elif kind == EV_LANDED:
                (out0, out_size), (part0, _) = gs.landing
                base = out0 if 0 <= arg - out0 < out_size else part0
                gs.landed[(base, (arg - base) // gs.stride)] = words[0]
            elif kind == EV_READY:
                gs._on_ready(int(arg), cycle)
                self.wake(gs)
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
        self.read_releases()
        if r == 2:
            raise self.error or self.release_error()
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

    def read_releases(self):
        """``pending`` and ``released_at`` as the library has them."""
        if self._releases is None:
            return
        so, N = self.lib.so, self.L.N
        at = (ctypes.c_int64 * max(N, 1))()
        counts = (ctypes.c_int64 * max(len(self._releases), 1))()
        so.sys_rel_read(at, counts)
        c = np.ctypeslib.as_array(counts)[:len(self._releases)].copy()
        for i in np.nonzero(c != self._rel_counts)[0].tolist():        # the counts that moved since last read
            t, pair = self._releases[i]
            self.pending[t][pair] = int(c[i])
        self._rel_counts = c
        a = np.ctypeslib.as_array(at)[:N]
        rel = np.nonzero(a >= 0)[0]
        self.released_at = dict(zip(rel.tolist(), a[rel].tolist()))

    def release_error(self) -> AssertionError:
        """The release the library refused, with the testbench's message."""
        v = (ctypes.c_int64 * 8)()
        self.lib.so.sys_rel_error(v)
        code, g, a, b, c, d, cycle = v[:7]
        if code == 1:
            return AssertionError(f"GPU {g}: release of slot {c} of tile ({a}, {b}) at cycle {cycle}, "
                                  f"with {d} window rows of expert {a} seen")
        if code == 2:
            return AssertionError(f"GPU {g}: release of slot {c} of tile ({a}, {b}) at cycle {cycle}: its window "
                                  f"row {d} holds no dispatched token's row")
        if code == 3:
            return AssertionError(f"release of ({g}, {a}) for token {b}, which is not pending (cycle {cycle})")
        if code == 4:
            return AssertionError(f"token {b} released (cycle {cycle}) with no combine descriptor")
        return AssertionError(f"the compiled harness stopped the run (code {code}) with no error")

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


def install_releases(env) -> None:
    """Give the library the testbench's release tables (``sys_rel_*``, system_main.cpp): from then on it
    keeps the windows' slots and reacts to every TokenRelease, and ``env.left`` is its count."""
    so, L = env.lib.so, env.L
    tr = fields(TokenRelease)
    so.sys_rel_setup((ctypes.c_int64 * 14)(META_ENTRIES, META_EXPERT_BITS, L.p.tile_size, L.row_flits,
                                            *tr["expert"], *tr["tile"], *tr["slot"], env.sp.notify_cycles, L.N,
                                            env.scheme == "dysharp", env.left))
    for gs in env.gpus:
        so.sys_rel_gpu(gs.g, gs.lo, gs.hi - gs.lo, L.N)
    row_bytes = 4 * so.flit_words * L.row_flits
    for raw, t in env.rows.items():
        assert len(raw) == row_bytes, f"token {t}'s row has {len(raw)} bytes, the library reads {row_bytes}"
        so.sys_rel_row(t, (ctypes.c_uint32 * (len(raw) // 4)).from_buffer_copy(raw))
    order, counts = [], []
    for t in range(L.N):
        pairs = list(env.pending[t].items())
        order += [(t, p) for p, _ in pairs]
        counts += [n for _, n in pairs]
        flat = [v for (g, e), n in pairs for v in (g, e, n)]
        so.sys_rel_pending(t, len(pairs), (ctypes.c_int64 * max(len(flat), 1))(*flat))
    if env.scheme == "dysharp":
        for t, c in env.combine_items.items():
            if c.desc is not None:
                so.sys_rel_combine(t, int(L.home[t]), int(c.planned), _words(c.desc.pack(L.G), so.payload_words))
    for (g, t), (i, r) in env.push_items.items():
        flat = [v for (gg, e), n in env.push_pending[(g, t)].items() for v in (gg, e, n)]
        so.sys_rel_push(g, t, i, len(flat) // 3, (ctypes.c_int64 * max(len(flat), 1))(*flat),
                        _words(r.desc.pack(L.G), so.payload_words))
    env._releases = order
    env._rel_counts = np.array(counts, dtype=np.int64)        # the counts given (read_releases: as last read)


def run_layer(lib_path: Path, names: list[str], params: dict, settings: dict) -> dict:
    """One layer on the compiled harness, the cocotb testbench's flow (``verif.tb.system.test_layer``):
    the same checks (an ``AssertionError`` names the failed one) and the same figures."""
    if settings.get("stall", 0.0) or not settings.get("skip", True):
        raise ValueError("the compiled system harness runs with the testbench's defaults: stall 0 and the "
                         "quiet-cycle skip on (use the cocotb harness for the others)")
    wall0, cpu0 = time.perf_counter(), time.process_time()
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
    install_releases(env)
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
    sim["cpu_s"] = time.process_time() - cpu0      # the process's CPU (every thread) over wall_s's span
    so.sys_finish()
    return fig
