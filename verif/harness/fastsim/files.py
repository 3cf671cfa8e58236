"""The fast path's two binary files: the traffic a run injects and the log of what it delivered.

Both are little-endian. The C++ main (``credit_main.cpp``) reads the traffic and writes the log; the cocotb
bench writes the same log from its agents (:func:`write_log`), so one reader and one scoreboard serve both.

Traffic (``DYSTRF01``): int64 ports, flit words, packets P, flits F, run cycles, stall period S, 0; then
int64 arrival[P] (cycle at which the packet joins its source's queue, >= 1, non-decreasing), int32 src[P],
int64 first[P] (index of its first flit), int32 nflits[P], uint32 flits[F][words] (each flit in the
Verilator ``VlWide`` word order of :func:`hw.packet.flit_layout`), uint8 stall[S][ports] (1: that tx port
returns no credit in cycles with ``cycle % S`` equal to the row).

Log (``DYSLOG01``): int64 ports, flit words, packets P, records R, run cycles C, nanoseconds of the cycle
loop (wall clock), the same in process CPU time; then
int64 sent[P] (cycle the packet's first flit left its source, -1 if never), uint8 delivered[C][ports]
(1: a flit left that tx port in that cycle, row 0 is cycle 1), and R packed records (:data:`record_dtype`),
one per packet delivered on a tx port, in delivery order.

The two-VC harness (``vc_main.cpp``, the DySHARP switch) has its own pair: :class:`VcTraffic`
(``DYSVTR01``: the packets with their VC, the GPU models' memory-manager groups and first-touch preloads,
the ``cfg`` words, fill and read latencies, random-backpressure probability and seed, and in header words
14 and 15 the latency jitter and sender-stall probability, 0 in files written before them) and
:class:`VcLog` (``DYSVLG01``: every packet each GPU received with all its flits, every response it sent,
per-cycle link activity per VC and direction, ``status`` samples and the stall tallies); the layouts are in
their writer and reader.
"""

import dataclasses
import functools
from pathlib import Path

import numpy as np

from hw.packet import DEFAULT_FLIT_WIDTH, flit_layout

__all__ = ["Traffic", "SimLog", "VcTraffic", "VcLog", "GpuGroup", "write_vc_traffic", "read_vc_log",
           "vc_word", "vc_words", "vc_rx_dtype", "vc_tx_dtype", "pack_packets", "flit_words", "flag_bits",
           "record_dtype", "fnv_words", "fnv_packets",
           "write_traffic", "read_traffic", "write_log", "read_log", "flit_to_words", "words_to_int"]

TRAFFIC_MAGIC = b"DYSTRF01"
LOG_MAGIC = b"DYSLOG01"
FNV_OFFSET = np.uint64(1469598103934665603)
FNV_PRIME = np.uint64(1099511628211)


@functools.lru_cache(maxsize=None)
def flit_words(flit_width: int = DEFAULT_FLIT_WIDTH) -> int:
    """32-bit words per flit (data, ``last``, ``poison``) as Verilator stores the port."""
    return -(-flit_layout(flit_width).size // 32)


@functools.lru_cache(maxsize=None)
def flag_bits(flit_width: int = DEFAULT_FLIT_WIDTH) -> dict[str, tuple[int, int]]:
    """(word, bit) of ``last`` and ``poison`` inside a flit's words."""
    layout = flit_layout(flit_width)
    return {name: divmod(layout[name].offset, 32) for name in ("last", "poison")}


@functools.lru_cache(maxsize=None)
def record_dtype(words: int) -> np.dtype:
    return np.dtype([("first", "<i8"), ("last", "<i8"), ("port", "<i4"), ("nflits", "<i4"),
                     ("poison", "<i4"), ("pad", "<i4"), ("hash", "<u8"), ("head", "<u4", (words,))])


def flit_to_words(bits: int, words: int) -> list[int]:
    return [(bits >> (32 * k)) & 0xFFFFFFFF for k in range(words)]


def words_to_int(ws) -> int:
    return sum(int(w) << (32 * k) for k, w in enumerate(ws))


def fnv_words(words, h: int = int(FNV_OFFSET)) -> int:
    """FNV-1a 64 over 32-bit words (the C++ main hashes each delivered packet with it)."""
    for w in words:
        h = ((h ^ int(w)) * int(FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF
    return h


@dataclasses.dataclass
class Traffic:
    """Packets to inject: per packet its arrival cycle, source port and pre-encoded flits."""
    ports: int
    words: int
    arrival: np.ndarray      # int64[P]
    src: np.ndarray          # int32[P]
    first: np.ndarray        # int64[P]
    nflits: np.ndarray       # int32[P]
    flits: np.ndarray        # uint32[F, words]
    run_cycles: int
    stall: np.ndarray | None = None   # uint8[S, ports] or None (no stalls)
    dests: np.ndarray | None = None   # uint64[P] expected destination masks (from the reference model)

    def __post_init__(self):
        P = len(self.arrival)
        for name in ("src", "first", "nflits"):
            if len(getattr(self, name)) != P:
                raise ValueError(f"traffic: {name} has {len(getattr(self, name))} entries, arrival has {P}")
        if self.flits.ndim != 2 or self.flits.shape[1] != self.words:
            raise ValueError(f"traffic: flits must be [F, {self.words}] words, got {self.flits.shape}")
        if P:
            if self.arrival.min() < 1:
                raise ValueError("traffic: arrival cycles start at 1")
            if np.any(np.diff(self.arrival) < 0):
                raise ValueError("traffic: packets must be sorted by arrival cycle")
            if self.src.min() < 0 or self.src.max() >= self.ports:
                raise ValueError(f"traffic: source ports must be in 0..{self.ports - 1}")
            if self.nflits.min() < 1 or (self.first + self.nflits).max() > len(self.flits):
                raise ValueError("traffic: packet flit ranges fall outside the flit array")
        if self.stall is not None and (self.stall.ndim != 2 or self.stall.shape[1] != self.ports):
            raise ValueError(f"traffic: stall must be [period, {self.ports}], got {self.stall.shape}")

    @property
    def packets(self) -> int:
        return len(self.arrival)

    def packet_words(self, k: int) -> np.ndarray:
        return self.flits[self.first[k]:self.first[k] + self.nflits[k]]

    def hashes(self) -> np.ndarray:
        return fnv_packets(self.flits, self.first, self.nflits)


def fnv_packets(flits: np.ndarray, first: np.ndarray, nflits: np.ndarray) -> np.ndarray:
    """FNV-1a 64 of every packet's words, vectorised across packets."""
    P = len(first)
    h = np.full(P, FNV_OFFSET, dtype=np.uint64)
    if not P:
        return h
    words = flits.shape[1]
    with np.errstate(over="ignore"):
        for k in range(int(nflits.max())):
            live = nflits > k
            rows = flits[(first + k)[live]].astype(np.uint64)
            hk = h[live]
            for w in range(words):
                hk = (hk ^ rows[:, w]) * FNV_PRIME
            h[live] = hk
    return h


def write_traffic(t: Traffic, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stall = t.stall if t.stall is not None else np.zeros((0, t.ports), np.uint8)
    with open(path, "wb") as f:
        f.write(TRAFFIC_MAGIC)
        np.array([t.ports, t.words, t.packets, len(t.flits), t.run_cycles, len(stall), 0], "<i8").tofile(f)
        np.ascontiguousarray(t.arrival, "<i8").tofile(f)
        np.ascontiguousarray(t.src, "<i4").tofile(f)
        np.ascontiguousarray(t.first, "<i8").tofile(f)
        np.ascontiguousarray(t.nflits, "<i4").tofile(f)
        np.ascontiguousarray(t.flits, "<u4").tofile(f)
        np.ascontiguousarray(stall, "u1").tofile(f)
    return path


def read_traffic(path: str | Path) -> Traffic:
    with open(path, "rb") as f:
        if f.read(8) != TRAFFIC_MAGIC:
            raise ValueError(f"{path} is not a fastsim traffic file")
        ports, words, P, F, run, S, _ = (int(x) for x in np.fromfile(f, "<i8", 7))
        arrival = np.fromfile(f, "<i8", P)
        src = np.fromfile(f, "<i4", P)
        first = np.fromfile(f, "<i8", P)
        nflits = np.fromfile(f, "<i4", P)
        flits = np.fromfile(f, "<u4", F * words).reshape(F, words)
        stall = np.fromfile(f, "u1", S * ports).reshape(S, ports) if S else None
    return Traffic(ports, words, arrival, src, first, nflits, flits, run, stall)


@dataclasses.dataclass
class SimLog:
    """What a run delivered (see the module docstring)."""
    ports: int
    words: int
    run_cycles: int
    loop_ns: int
    sent: np.ndarray         # int64[P]
    delivered: np.ndarray    # uint8[C, ports]
    records: np.ndarray      # record_dtype[R]
    loop_cpu_ns: int = 0     # process CPU time of the cycle loop (the fair speed on a loaded machine)

    @property
    def cycles_per_s(self) -> float:
        return self.run_cycles / (self.loop_ns * 1e-9) if self.loop_ns else float("nan")

    @property
    def cycles_per_cpu_s(self) -> float:
        return self.run_cycles / (self.loop_cpu_ns * 1e-9) if self.loop_cpu_ns else float("nan")


def write_log(log: SimLog, path: str | Path) -> Path:
    path = Path(path)
    with open(path, "wb") as f:
        f.write(LOG_MAGIC)
        np.array([log.ports, log.words, len(log.sent), len(log.records), log.run_cycles, log.loop_ns,
                  log.loop_cpu_ns],
                 "<i8").tofile(f)
        np.ascontiguousarray(log.sent, "<i8").tofile(f)
        np.ascontiguousarray(log.delivered, "u1").tofile(f)
        np.ascontiguousarray(log.records, record_dtype(log.words)).tofile(f)
    return path


def read_log(path: str | Path) -> SimLog:
    with open(path, "rb") as f:
        if f.read(8) != LOG_MAGIC:
            raise ValueError(f"{path} is not a fastsim log file")
        ports, words, P, R, run, loop_ns, cpu_ns = (int(x) for x in np.fromfile(f, "<i8", 7))
        sent = np.fromfile(f, "<i8", P)
        delivered = np.fromfile(f, "u1", run * ports).reshape(run, ports)
        records = np.fromfile(f, record_dtype(words), R)
    if len(records) != R:
        raise ValueError(f"{path} is truncated ({len(records)} of {R} records)")
    return SimLog(ports, words, run, loop_ns, sent, delivered, records, cpu_ns)


# ---------------------------------------------------------------------------------------------------------
# Two-VC links (vc_main.cpp): the DySHARP switch with a model of each GPU's side of its link

VC_TRAFFIC_MAGIC = b"DYSVTR01"
VC_LOG_MAGIC = b"DYSVLG01"
STALL_ONE = 1 << 16          # VcTraffic.stall is a probability in units of 1/65536
#: bits of VcLog.activity[cycle - 1, port]
SENT_VC0, SENT_VC1, RECV_VC0, RECV_VC1 = 1, 2, 4, 8


def vc_word(gpu: int, byte_addr: int) -> int:
    """The 128-bit data the GPU model answers for the flit at ``byte_addr`` of GPU ``gpu`` (its C++ twin is
    ``gpu_word`` in ``vc_main.cpp``): :func:`verif.harness.gpu_memory.default_word` of the flit address
    ``((gpu + 1) << 40) ^ (byte_addr >> 4)``, so that equal addresses on different GPUs differ."""
    from verif.harness.gpu_memory import default_word

    return default_word(((gpu + 1) << 40) ^ (int(byte_addr) >> 4), 128)


def vc_words(gpu: int, byte_addrs) -> np.ndarray:
    """:func:`vc_word` of GPU ``gpu`` at each of ``byte_addrs``, as 32-bit words (uint32, one row of four
    per flit, least significant first: the layout of a logged flit's data words)."""
    data = b"".join(vc_word(gpu, a).to_bytes(16, "little") for a in byte_addrs)
    return np.frombuffer(data, "<u4").reshape(-1, 4).astype(np.uint32)


@functools.lru_cache(maxsize=None)
def vc_rx_dtype() -> np.dtype:
    return np.dtype([("first", "<i8"), ("last", "<i8"), ("port", "<i4"), ("vc", "<i4"), ("nflits", "<i4"),
                     ("poison", "<i4"), ("flit0", "<i8")])


@functools.lru_cache(maxsize=None)
def vc_tx_dtype(words: int) -> np.dtype:
    return np.dtype([("first", "<i8"), ("last", "<i8"), ("port", "<i4"), ("vc", "<i4"), ("nflits", "<i4"),
                     ("pad", "<i4"), ("ready", "<i8"), ("head", "<u4", (words,))])


@dataclasses.dataclass(frozen=True)
class GpuGroup:
    """One group binding of every GPU's memory manager model (:class:`~verif.models.memory_manager.MemoryManagerSpec`
    ``SET_GROUP``): ``alloc`` groups allocate a slot on a row's first touch, the others only look up;
    row address ``base + slot * stride * 16``."""
    group: int
    alloc: bool
    layout: int = 0
    base: int = 0
    stride: int = 1024      # 16-byte units per row (16 KB rows)
    valid: bool = True


@dataclasses.dataclass
class VcTraffic:
    """What a two-VC run injects and how the GPU models answer (see ``vc_main.cpp``).

    Packets: arrival cycle (non-decreasing, >= 1), source port, VC, pre-encoded flits, as :class:`Traffic`.
    ``groups``/``preloads`` set up every GPU's memory manager model (a preload ``(port, group, index, src)``
    is a first touch before cycle 1, in list order); ``cfg`` are the words of the DUT's ``cfg`` payload,
    written one per cycle after reset; ``stall`` is the probability (1/65536 units) that a GPU returns no
    credit on a VC in a cycle (seeded by ``seed``); ``status_period`` > 0 samples the ``status`` output every
    that many cycles (it is always sampled once after the run). ``jitter`` > 0 draws each response's latency
    uniformly from [``fill_latency`` or ``read_latency``, that + ``jitter``] (so a GPU answers out of order);
    ``send_stall`` is the probability (1/65536 units) that a GPU's sender idles in a cycle. Both 0 (the
    default) leave a run cycle-identical to one without them."""
    ports: int
    words: int
    arrival: np.ndarray      # int64[P]
    src: np.ndarray          # int32[P]
    vc: np.ndarray           # int32[P]
    first: np.ndarray        # int64[P]
    nflits: np.ndarray       # int32[P]
    flits: np.ndarray        # uint32[F, words]
    run_cycles: int
    groups: tuple = ()       # GpuGroup
    preloads: np.ndarray | None = None   # int64[Q, 4]: port, group, index, src
    cfg: np.ndarray | None = None        # uint32[K, cfg words]
    fill_latency: int = 100
    read_latency: int = 150
    stall: int = 0
    seed: int = 1
    status_period: int = 0
    jitter: int = 0
    send_stall: int = 0

    def __post_init__(self):
        P = len(self.arrival)
        for name in ("src", "vc", "first", "nflits"):
            if len(getattr(self, name)) != P:
                raise ValueError(f"traffic: {name} has {len(getattr(self, name))} entries, arrival has {P}")
        if self.flits.ndim != 2 or self.flits.shape[1] != self.words:
            raise ValueError(f"traffic: flits must be [F, {self.words}] words, got {self.flits.shape}")
        if P:
            if self.arrival.min() < 1 or np.any(np.diff(self.arrival) < 0):
                raise ValueError("traffic: arrival cycles start at 1 and must be non-decreasing")
            if self.src.min() < 0 or self.src.max() >= self.ports:
                raise ValueError(f"traffic: source ports must be in 0..{self.ports - 1}")
            if not np.isin(self.vc, (0, 1)).all():
                raise ValueError("traffic: vc must be 0 or 1")
            if self.nflits.min() < 1 or (self.first + self.nflits).max() > len(self.flits):
                raise ValueError("traffic: packet flit ranges fall outside the flit array")
        for name in ("fill_latency", "read_latency", "jitter"):
            if not 0 <= getattr(self, name) < 1 << 40:
                raise ValueError(f"traffic: {name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.stall < STALL_ONE:
            raise ValueError(f"traffic: stall must be in 0..{STALL_ONE - 1} (units of 1/65536)")
        if not 0 <= self.send_stall < STALL_ONE:
            raise ValueError(f"traffic: send_stall must be in 0..{STALL_ONE - 1} (units of 1/65536)")
        if self.preloads is not None and (self.preloads.ndim != 2 or self.preloads.shape[1] != 4):
            raise ValueError("traffic: preloads must be [Q, 4] (port, group, index, src)")

    @property
    def packets(self) -> int:
        return len(self.arrival)

    def packet_words(self, k: int) -> np.ndarray:
        return self.flits[self.first[k]:self.first[k] + self.nflits[k]]


def write_vc_traffic(t: VcTraffic, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    groups = np.array([[g.group, int(g.valid), int(g.alloc), g.layout, g.base, g.stride] for g in t.groups],
                      "<i8").reshape(-1, 6)
    pre = np.zeros((0, 4), "<i8") if t.preloads is None else np.ascontiguousarray(t.preloads, "<i8")
    cfg = np.zeros((0, 0), "<u4") if t.cfg is None else np.ascontiguousarray(t.cfg, "<u4")
    with open(path, "wb") as f:
        f.write(VC_TRAFFIC_MAGIC)
        np.array([t.ports, t.words, t.packets, len(t.flits), t.run_cycles, len(groups), len(pre), len(cfg),
                  cfg.shape[1] if cfg.ndim == 2 else 0, t.fill_latency, t.read_latency, t.stall, t.seed,
                  t.status_period, t.jitter, t.send_stall], "<i8").tofile(f)
        np.ascontiguousarray(t.arrival, "<i8").tofile(f)
        np.ascontiguousarray(t.src, "<i4").tofile(f)
        np.ascontiguousarray(t.vc, "<i4").tofile(f)
        np.ascontiguousarray(t.first, "<i8").tofile(f)
        np.ascontiguousarray(t.nflits, "<i4").tofile(f)
        np.ascontiguousarray(t.flits, "<u4").tofile(f)
        groups.tofile(f)
        pre.tofile(f)
        cfg.tofile(f)
    return path


@dataclasses.dataclass
class VcLog:
    """What a two-VC run did, per GPU: ``sent[P]`` (cycle each traffic packet's first flit left, -1 never),
    ``activity[C, ports]`` (:data:`SENT_VC0` ... bits per cycle), ``rx`` (:func:`vc_rx_dtype`, one record per
    packet a GPU received, in completion order; its flits are ``rxflits[flit0:flit0 + nflits]``), ``tx``
    (:func:`vc_tx_dtype`, one record per response the GPU models sent, in send order), ``status`` samples
    (``status_cycles[K]``, ``status[K, words]``; the last row is the end state), ``unsent`` (responses still
    waiting at the end), ``stalls`` (credit-return draws, of them stalled, sender draws, of them stalled;
    zeros for a log written before the tallies)."""
    ports: int
    words: int
    run_cycles: int
    loop_ns: int
    loop_cpu_ns: int
    sent: np.ndarray
    activity: np.ndarray
    rx: np.ndarray
    rxflits: np.ndarray
    tx: np.ndarray
    status_cycles: np.ndarray
    status: np.ndarray
    unsent: int = 0
    stalls: tuple = (0, 0, 0, 0)

    @property
    def cycles_per_s(self) -> float:
        return self.run_cycles / (self.loop_ns * 1e-9) if self.loop_ns else float("nan")

    @property
    def cycles_per_cpu_s(self) -> float:
        return self.run_cycles / (self.loop_cpu_ns * 1e-9) if self.loop_cpu_ns else float("nan")

    def packet(self, r: int) -> np.ndarray:
        """The flits (uint32[n, words]) of received record ``r``."""
        rec = self.rx[r]
        return self.rxflits[rec["flit0"]:rec["flit0"] + rec["nflits"]]


def read_vc_log(path: str | Path) -> VcLog:
    with open(path, "rb") as f:
        if f.read(8) != VC_LOG_MAGIC:
            raise ValueError(f"{path} is not a fastsim VC log file")
        ports, words, P, R, T, F, run, S, K, loop_ns, cpu_ns, unsent = (int(x) for x in np.fromfile(f, "<i8", 12))
        sent = np.fromfile(f, "<i8", P)
        activity = np.fromfile(f, "u1", run * ports).reshape(run, ports)
        rx = np.fromfile(f, vc_rx_dtype(), R)
        rxflits = np.fromfile(f, "<u4", F * words).reshape(F, words)
        tx = np.fromfile(f, vc_tx_dtype(words), T)
        status_cycles = np.fromfile(f, "<i8", K)
        status = np.fromfile(f, "<u4", K * S).reshape(K, S)
        tally = np.fromfile(f, "<i8", 4)
    if len(status) != K or len(tx) != T:
        raise ValueError(f"{path} is truncated")
    stalls = tuple(int(x) for x in tally) if len(tally) == 4 else (0, 0, 0, 0)
    return VcLog(ports, words, run, loop_ns, cpu_ns, sent, activity, rx, rxflits, tx, status_cycles, status, unsent,
                 stalls)


def pack_packets(packets, flit_width: int = DEFAULT_FLIT_WIDTH) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first[P], nflits[P], flits[F, words]) of :class:`hw.packet.Packet` objects, in the Verilator word
    order of :func:`hw.packet.flit_layout`."""
    from hw.packet import pack_flit

    words = flit_words(flit_width)
    nflits = np.array([1 + len(p.payload) for p in packets], np.int32)
    first = np.zeros(len(packets), np.int64)
    if len(packets):
        first[1:] = np.cumsum(nflits)[:-1]
    flits = np.zeros((int(nflits.sum()), words), np.uint32)
    row = 0
    for p in packets:
        for f in p.flits(flit_width):
            flits[row] = flit_to_words(pack_flit(f, flit_width), words)
            row += 1
    return first, nflits, flits
