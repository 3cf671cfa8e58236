"""cocotb testbench of the integrated DySHARP switch (:mod:`hw.switch.dysharp_switch`).

The environment plays the GPUs: on every port a :class:`verif.harness.vc_link.VcLinkSource` into ``rx``
(requests on VC 0, the GPU's answers on VC 1, flit-interleaved, random gaps), a
:class:`verif.harness.vc_link.VcLinkSink` on ``tx`` (``gpu_credits`` flits of receive buffer per VC,
credits returned after random delays, credit and VC-class checks) and a GPU model
(:class:`verif.models.dysharp_gpu.DySharpGpu`: memory, asymmetric memory manager, responder with its own
random memory latency). Every delivery is checked by :class:`verif.models.dysharp_switch.DySharpSwitchModel`
as it arrives (translated addresses, payloads, ordering per pair, bit-exact reduction results, error
responses), and the test ends with :meth:`DySharpSwitchModel.finish` (everything expected came) and exact
checks of the status counters.

Layout used by every test: dispatch group ``G_DISP`` (``dymultimem.st``, memory-manager layout 0,
allocation on first touch), combine group ``G_COMB`` (``dymultimem.ld_reduce``, layout 1), both with all
ports as members; GPU ``d``'s rows start at ``(d + 1) << 32`` (+ ``1 << 31`` for layout 1) with a row
stride of ``64 + 8 d`` flits (layout ``L`` at ``+ L << 30``), so no two GPUs share a layout. Every source uses its own indices, so the
memory managers' isolation (an index belongs to the source that allocated it) never refuses good traffic.
Static groups 0..3 have random member masks (each GPU a member of one at least); a GPU uses only groups it
is a member of (the switch refuses the others, ``ISOLATION``). Address regions: unicast writes ``1 << 40``, ``MM_ST``
``2 << 40``, static reductions read ``3 << 40``, reads ``4 << 40``: nothing a test reads is ever written.

Settings (``DYSHARP_ENV``): ``packets`` (per port), ``gap``, ``stall``, ``burst``, ``lat`` (max memory
latency), ``timeout`` (cycles before a drain fails), ``sabotage`` (``row``/``data``: a wrong reference on
purpose, the run must fail), plus per-test ones named in each test (``kind``, ``reduce``, ``silent``,
``rounds``, ``reductions``, ``storm``, ...).

Reduction results: packets arrive whole, so the order in which a reduction's contributions reach the
engine is one permutation of its destinations, the same for all its flits; the model accepts a result iff
some permutation gives exactly its bits (see :mod:`verif.models.dysharp_switch`). Order-sensitive
reductions (float add) are kept to at most 4 destinations so that trying every order stays cheap.
"""

import collections
import functools

import cocotb
import numpy as np

from hw.packet import N_VCS, EType, ErrorCode, Flit, Header, Opcode, Packet, RedOp

from verif.harness import tbenv
from verif.harness.cycler import Cycler
from verif.harness.stream import StreamDriver
from verif.harness.structs import fields, pack
from verif.harness.vc_link import VcLinkSink, VcLinkSource
from verif.models.dysharp_gpu import DySharpGpu
from verif.models.dysharp_switch import DySharpSwitchModel, _RedRead, order_sensitive, reduce_candidates
from verif.models.memory_manager import SET_GROUP, MemoryManagerSpec
from verif.models import reduce_ref as R
from verif.models.reduction import random_lanes

G_DISP, G_COMB, G_FOREIGN, G_FAULT, G_SMALL = 1, 2, 3, 4, 5
ROWS = 1 << 16
SMALL_ROWS = 16
REGION_WRITE, REGION_MM, REGION_STATIC_RED, REGION_READ = 1 << 40, 2 << 40, 3 << 40, 4 << 40
INDEX_SPAN = 4096          # indices of source s: s * INDEX_SPAN + k
TARGET_GROUP, TARGET_TLB = 0, 1
ETYPES = (EType.BF16, EType.FP16, EType.FP32, EType.S32, EType.U32)
OPS = (RedOp.ADD, RedOp.MIN, RedOp.MAX)


def mask_of(ports) -> int:
    return sum(1 << p for p in ports)


class DySharpEnv:
    """GPUs on every port, the configuration driver, the reference model and the status reader."""

    def __init__(self, dut, *, gap=0.2, stall=0.3, burst=2.0, lat=40, silent_red_read=(), silent_tlb_fill=()):
        self.dut = dut
        self.p = p = tbenv.params()
        self.s = tbenv.settings()
        self.n = p["ports"]
        self.w = p["flit_width"]
        self.max_payload = p["max_payload"]
        self.cycler = Cycler(dut)
        self.rng = tbenv.rng("env")
        self.np_rng = np.random.default_rng(tbenv.seed())
        self.sources, self.sinks, self.gpus = [], [], []
        for i in range(self.n):
            src = VcLinkSource(dut, f"rx__{i}", tbenv.rng(f"src{i}"), credits=p["link_credits"], flit_width=self.w,
                               gap=gap, burst=burst)
            lo = self.rng.randint(1, max(1, lat // 4))
            hi = lo + self.rng.randint(0, lat)
            mm = MemoryManagerSpec(groups=max(16, p["groups"]), layouts=4, index_bits=18, slots=1 << 16)
            gpu_np = np.random.default_rng([tbenv.seed(), i])
            gpu = DySharpGpu(i, src, tbenv.rng(f"gpu{i}"), latency=(lo, hi), flit_width=self.w, mm=mm,
                             on_delivery=self._on_delivery,
                             init_word=functools.partial(self._init_word, gpu_np),
                             silent_red_read=i in silent_red_read, silent_tlb_fill=i in silent_tlb_fill)
            sink = VcLinkSink(dut, f"tx__{i}", tbenv.rng(f"sink{i}"), credits=p["gpu_credits"], flit_width=self.w,
                              stall=stall, burst=burst, on_packet=gpu.on_packet, batch=2)
            self.sources.append(src)
            self.sinks.append(sink)
            self.gpus.append(gpu)
        self.cfg = StreamDriver(dut, "cfg", tbenv.rng("cfg"))
        self.cycler.add(*self.gpus, *self.sources, *self.sinks, self.cfg)
        self.model = DySharpSwitchModel(self.n, self.gpus, max_payload=self.max_payload, flit_width=self.w)
        self._sabotage(self.s.get("sabotage"))
        self.tags = [0] * self.n
        self.next_index = collections.defaultdict(int)     # (src, group) -> next fresh index offset
        self.used_index = collections.defaultdict(list)    # (src, group) -> indices in use
        self.static_groups = {}
        self._switch_config = None
        self._status_layout = None

    def _sabotage(self, what):
        """Test the test: make the reference wrong on purpose (``row``: every translated row one flit off;
        ``data``: one bit of every flit a GPU returns flipped in the model's view), so the run must fail."""
        if what is None:
            return
        for g in self.gpus:
            if what == "row":
                g.row = lambda group, index, f=g.row: None if f(group, index) is None else f(group, index) + 16
            elif what == "data":
                g.data_at = lambda addr, n, f=g.data_at: [w ^ 1 for w in f(addr, n)]
            else:
                raise ValueError(f"unknown sabotage {what!r}; valid: row, data")

    def _init_word(self, nprng, flit_addr, etype):
        """Memory contents a reduction reads: for float types mostly moderate values (so that the order of
        a sum shows in its rounding), a few special values; otherwise any bit patterns."""
        if etype is None:
            return 0
        et = EType(etype)
        if et not in (EType.BF16, EType.FP16, EType.FP32) or nprng.random() < 0.1:
            return random_lanes(nprng, et, self.w)
        bits = 32 if et == EType.FP32 else 16
        n = self.w // bits
        vals = nprng.normal(0, 4, size=n).astype(np.float32)
        if et == EType.FP32:
            lanes = vals.view(np.uint32).astype(np.uint64)
        elif et == EType.FP16:
            lanes = vals.astype(np.float16).view(np.uint16).astype(np.uint64)
        else:
            lanes = (vals.view(np.uint32) >> np.uint32(16)).astype(np.uint64)
        special = np.array(R.special_values(et), dtype=np.uint64)
        lanes = np.where(nprng.random(n) < 0.03, nprng.choice(special, size=n), lanes)
        return R.lanes_to_int(lanes, bits)

    def _on_delivery(self, port, vc, pkt, flits, cycle):
        self.model.deliver(port, vc, pkt, cycle)

    # ---- configuration
    def _cfg_layout(self):
        if self._switch_config is None:
            from hw.switch.dysharp_switch import SwitchConfig
            self._switch_config = SwitchConfig
        return self._switch_config

    def static_group(self, handle: int, mask: int) -> None:
        self.cfg.send(pack(self._cfg_layout(), target=TARGET_GROUP, group__handle=handle, group__mask=mask))
        self.model.configure_static(handle, mask)
        self.static_groups[handle] = mask

    def tlb_group(self, group: int, mask: int, rows: int, port=None) -> None:
        """SET on every port's AL-TLB (or ``port``'s)."""
        self.cfg.send(pack(self._cfg_layout(), target=TARGET_TLB, port=port or 0, all=int(port is None),
                           tlb__op=0, tlb__group=group, tlb__mask=mask, tlb__rows=rows))
        self.model.configure_tlb(port, group, mask, rows)

    def mm_group(self, group: int, *, layout: int, alloc: int = 1, gpus=None) -> None:
        for d in gpus if gpus is not None else range(self.n):
            base = ((d + 1) << 32) + (layout << 30)
            self.gpus[d].mm.command(SET_GROUP, group, valid=1, alloc=alloc, layout=layout, base=base,
                                    stride=64 + 8 * d)

    async def setup(self, *, static_groups=4):
        """Reset, then the standard configuration (see the module docstring)."""
        await self.cycler.start()
        everyone = (1 << self.n) - 1
        self.mm_group(G_DISP, layout=0)
        self.mm_group(G_COMB, layout=1)
        self.tlb_group(G_DISP, everyone, ROWS)
        self.tlb_group(G_COMB, everyone, ROWS)
        for h in range(static_groups):
            mask = 0
            while bin(mask).count("1") < 2:
                mask = self.rng.getrandbits(self.n)
            self.static_group(h, mask)
        for p in range(self.n if static_groups else 0):     # every GPU a member of some static group
            if not self.member_groups(p):
                self.static_group(p % static_groups, self.static_groups[p % static_groups] | 1 << p)
        await self.cycler.until(lambda: self.cfg.idle, timeout=200, what="configuration writes")
        await self.cycler.cycles(4)

    # ---- status
    def status(self) -> dict:
        """The status port decoded with its layout (dotted field names -> ints)."""
        if self._status_layout is None:
            from hw.switch.dysharp_switch import status_layout
            self._status_layout = fields(status_layout(self.n))
        from verif.harness.structs import read_status
        bits = read_status(self.dut, self.n)
        return {k: (bits >> off) & ((1 << w) - 1) for k, (off, w) in self._status_layout.items()}

    # ---- traffic
    def tag(self, src) -> int:
        t = self.tags[src] & 0xFF
        self.tags[src] += 1
        return t

    def index(self, src, group, *, fresh=None, pool=None) -> int:
        """An index of ``src`` in ``group``: a fresh one (``fresh``), or one it used (of its last ``pool``)."""
        used = self.used_index[(src, group)]
        if fresh is None:
            fresh = not used or self.rng.random() < 0.4
        if fresh:
            k = self.next_index[(src, group)]
            self.next_index[(src, group)] += 1
            if k >= INDEX_SPAN:
                raise ValueError(f"source {src} ran out of indices in group {group}")
            idx = src * INDEX_SPAN + k
            used.append(idx)
            return idx
        return self.rng.choice(used[-(pool or len(used)):])

    def send(self, src, packet: Packet) -> None:
        pkt = self.model.inject(src, packet)
        self.sources[src].send(pkt)

    def payload(self, n) -> list[int]:
        return [self.rng.getrandbits(self.w) for _ in range(n)]

    def random_mask(self, src=None, *, max_fanout=None, allow_self=True) -> int:
        ports = [p for p in range(self.n) if allow_self or p != src]
        k = self.rng.randint(1, min(len(ports), max_fanout or len(ports)))
        return mask_of(self.rng.sample(ports, k))

    def unicast(self, src, dst=None, length=None):
        dst = self.rng.randrange(self.n) if dst is None else dst
        length = self.rng.randint(0, self.max_payload) if length is None else length
        addr = REGION_WRITE + self.rng.randrange(1 << 20) * 16
        self.send(src, Packet(Header(opcode=Opcode.WRITE, src=src, tag=self.tag(src), dst=dst, length=length,
                                     addr=addr), self.payload(length)))

    def read(self, src, dst=None):
        dst = self.rng.randrange(self.n) if dst is None else dst
        length = self.rng.randint(1, self.max_payload)
        addr = REGION_READ + self.rng.randrange(1 << 20) * 16
        self.send(src, Packet(Header(opcode=Opcode.READ, src=src, tag=self.tag(src), dst=dst, length=length,
                                     addr=addr)))

    def member_groups(self, src) -> list[int]:
        """The static groups ``src`` is a member of (the only ones it may use: the switch isolates them)."""
        return sorted(h for h, m in self.static_groups.items() if m >> src & 1)

    def mm_st(self, src, handle=None):
        handle = self.rng.choice(self.member_groups(src)) if handle is None else handle
        length = self.rng.randint(1, self.max_payload)
        addr = REGION_MM + self.rng.randrange(1 << 20) * 16
        self.send(src, Packet(Header(opcode=Opcode.MM_ST, src=src, tag=self.tag(src), length=length,
                                     group=handle, addr=addr), self.payload(length)))

    def dyn_st(self, src, *, group=G_DISP, mask=None, index=None, offset=None, length=None, fresh=None):
        mask = self.random_mask(src) if mask is None else mask
        index = self.index(src, group, fresh=fresh) if index is None else index
        length = self.rng.randint(1, self.max_payload) if length is None else length
        offset = self.rng.randint(0, 64 - length) if offset is None else offset
        self.send(src, Packet(Header(opcode=Opcode.DYN_ST, src=src, tag=self.tag(src), length=length, group=group,
                                     mask=mask, index=index, offset=offset), self.payload(length)))

    def ld_reduce(self, src, *, group=G_COMB, mask=None, index=None, offset=None, length=None, etype=None,
                  op=None, fresh=None):
        etype = self.rng.choice(ETYPES) if etype is None else etype
        op = self.rng.choice(OPS) if op is None else op
        if mask is None:
            mask = self.random_mask(src, max_fanout=4 if order_sensitive(etype, op) else None)
        index = self.index(src, group, fresh=fresh, pool=8) if index is None else index
        length = self.rng.randint(1, self.max_payload) if length is None else length
        offset = self.rng.randint(0, 64 - length) if offset is None else offset
        self.send(src, Packet(Header(opcode=Opcode.DYN_LD_REDUCE, src=src, tag=self.tag(src), length=length,
                                     etype=etype, redop=op, group=group, mask=mask, index=index, offset=offset)))

    def mm_ld_reduce(self, src, handle=None, *, etype=None, op=None, length=None):
        etype = self.rng.choice(ETYPES) if etype is None else etype
        op = self.rng.choice(OPS) if op is None else op
        if handle is None:
            ok = [h for h in self.member_groups(src)
                  if not order_sensitive(etype, op) or bin(self.static_groups[h]).count("1") <= 4]
            handle = self.rng.choice(ok) if ok else None
            if handle is None:
                op = RedOp.MAX
                handle = self.rng.choice(self.member_groups(src))
        length = self.rng.randint(1, self.max_payload) if length is None else length
        addr = REGION_STATIC_RED + self.rng.randrange(1 << 12) * 16 * 16
        self.send(src, Packet(Header(opcode=Opcode.MM_LD_REDUCE, src=src, tag=self.tag(src), length=length,
                                     etype=etype, redop=op, group=handle, addr=addr)))

    def bad_ld_reduce(self, src, how: str, *, static=False) -> None:
        """An ``ld_reduce`` that reaches the switch malformed (``how``): ``poison`` (its header flit marked
        poison, a link CRC failure; the header keeps its bits), ``long`` (a flit after the header: not
        ``last``), ``empty`` (``length`` 0). The model expects the engine's ERROR for it."""
        etype, op = EType.S32, RedOp.MAX
        length = 0 if how == "empty" else self.rng.randint(1, self.max_payload)
        if static:
            h = Header(opcode=Opcode.MM_LD_REDUCE, src=src, tag=self.tag(src), length=length, etype=etype,
                       redop=op, group=sorted(self.static_groups)[0], addr=REGION_STATIC_RED)
        else:
            h = Header(opcode=Opcode.DYN_LD_REDUCE, src=src, tag=self.tag(src), length=length, etype=etype,
                       redop=op, group=G_COMB, mask=self.random_mask(src), index=src * INDEX_SPAN, offset=0)
        pkt = self.model.inject(src, Packet(h), poison=how == "poison", last=how != "long")
        flits = [Flit(pkt.header.encode(), last=how != "long", poison=how == "poison")]
        if how == "long":
            flits.append(Flit(self.rng.getrandbits(self.w), last=True))
        elif how not in ("poison", "empty"):
            raise ValueError(f"unknown malformed ld_reduce {how!r}; valid: poison, long, empty")
        self.sources[src].send(flits, vc=0)

    def mixed(self, src, kinds=None):
        """One random packet of the mix."""
        kinds = kinds or {"unicast": 3, "read": 1, "mm_st": 2, "dyn_st": 4, "ld_reduce": 2, "mm_ld_reduce": 1}
        kind = self.rng.choices(list(kinds), weights=list(kinds.values()))[0]
        getattr(self, kind)(src)

    # ---- ending
    def quiet(self) -> bool:
        return all(g.idle for g in self.gpus) and self.model.outstanding == 0

    async def drain(self, timeout=None, what="all deliveries"):
        timeout = timeout or self.s.get("timeout", 200000)
        try:
            await self.cycler.until(self.quiet, timeout=timeout, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.model.outstanding} outstanding:\n"
                                 f"{self.model.describe_outstanding()}\n"
                                 f"sources pending {[[s.pending(v) for v in range(N_VCS)] for s in self.sources]}, "
                                 f"credits {[s.credits for s in self.sources]}") from None
        await self.cycler.cycles(40)     # anything extra shows up now as unexpected
        self.model.finish()
        for k in self.sinks:
            assert k.idle, f"{k.name}: a packet was left unterminated"

    def log_summary(self, what):
        m = self.model
        self.dut._log.info(
            f"{what}: {self.cycler.cycle} cycles; writes {m.writes}, RED_READs {m.matched['red_read']}, "
            f"responses {m.matched['response']}, reductions {len(m.reductions)}, errors "
            f"{ {c.name: n for c, n in m.errors.items()} }, fills {[len(g.fills) for g in self.gpus]}")


# ---- status counters --------------------------------------------------------------------------------------

def counter(st: dict, name: str, port=None) -> int:
    """An engine counter (``stale``, ``duplicates``, ...) of ``port``, or the total over ports."""
    key = f"total.engine.{name}" if port is None else f"port.{port}.engine.{name}"
    if key not in st:
        raise KeyError(f"no status field {key}; engine fields: {[k for k in st if k.startswith('total.engine')]}")
    return st[key]


def tlb_counters(env, port) -> dict:
    from hw.switch.al_tlb import TlbCounter
    st = env.status()
    return {c.name: st[f"port.{port}.tlb.{c.value}"] for c in TlbCounter}


def check_counters(env, *, duplicates=0, stale=True, extra=None, errors_only=False):
    """Every status counter the model can predict exactly, per port: AL-TLB (misses = fills the GPU got,
    error answers by code), egress (translated / passed / translation errors), engine (completed, aborts,
    timeouts, duplicates, stale unless the test made it timing-dependent, refused requests: the model's
    ``bad_requests``, nothing else refused), ingress and
    network error counters (the request network's: the model's ``net_errors``), ``cfg_errors``. ``stale``: the model's count (True),
    a number, or None (not checked). ``extra``: {status field: count} added to the model's expectation of
    that field (the faults a fault scenario injected; a field this function does not check otherwise is
    checked against its count alone). ``errors_only``: skip the traffic counters (AL-TLB misses, egress
    translated/passed, engine completed), for runs whose injected packets bypass the model."""
    from hw.switch.al_tlb import TlbCounter
    from hw.switch.dysharp_switch import IngressCounter
    from hw.switch.egress_translator import EgressCounter
    st = env.status()
    m = env.model
    problems = []
    extra = dict(extra or {})
    for key in extra:
        if key not in st:
            raise KeyError(f"no status field {key}")

    traffic = (f".tlb.{TlbCounter.MISSES.value}", f".egress.{EgressCounter.TRANSLATED.value}",
               f".egress.{EgressCounter.PASSED.value}", ".engine.completed")

    def expect(key, want):
        want += extra.pop(key, 0)
        if errors_only and key.endswith(traffic):
            return
        if st[key] != want:
            problems.append(f"{key} = {st[key]}, expected {want}")

    E = ErrorCode
    for d in range(env.n):
        x = m.xlate[d]
        tlb = f"port.{d}.tlb."
        expect(tlb + str(TlbCounter.MISSES.value), len(env.gpus[d].fills))
        for c, code in ((TlbCounter.ISOLATION, E.ISOLATION), (TlbCounter.OUT_OF_BOUNDS, E.OUT_OF_BOUNDS),
                        (TlbCounter.TLB_FAULT, E.TLB_FAULT), (TlbCounter.TIMEOUT, E.TIMEOUT)):
            expect(tlb + str(c.value), x[code.value])
        silent = env.gpus[d].silent_tlb_fill
        expect(tlb + str(TlbCounter.READ_TIMEOUTS.value), len(env.gpus[d].fills) if silent else 0)
        for c in (TlbCounter.BAD_RESPONSES, TlbCounter.STALE_RESPONSES, TlbCounter.CFG_ERRORS,
                  TlbCounter.BUFFER_FULL, TlbCounter.OTHER_ERRORS):
            expect(tlb + str(c.value), 0)
        eg = f"port.{d}.egress."
        errors = sum(n for code, n in x.items() if code != 0)
        expect(eg + str(EgressCounter.TRANSLATED.value), x[0])
        expect(eg + str(EgressCounter.XLATE_ERRORS.value), errors)
        expect(eg + str(EgressCounter.PASSED.value), m.passed[d])
        mine = [r for r in m.reductions if r.src == d]
        en = f"port.{d}.engine."
        expect(en + "completed", sum(1 for r in mine if r.code == 0))
        aborts = sum(1 for r in mine if r.code != 0 and r.failed and r.code != E.TIMEOUT.value)
        timeouts = sum(1 for r in mine if r.code == E.TIMEOUT.value and not r.failed)
        # A read whose translation times out (AL-TLB timeout) may wait at the egress behind other such reads
        # until the entry's own timeout fires first: TIMEOUT either way, counted as an abort or a timeout.
        either = sum(1 for r in mine if r.code == E.TIMEOUT.value and r.failed)
        aborts += extra.pop(en + "aborts", 0)
        timeouts += extra.pop(en + "timeouts", 0)
        got_a, got_t = st[en + "aborts"], st[en + "timeouts"]
        if not (aborts <= got_a <= aborts + either and got_a + got_t == aborts + timeouts + either):
            problems.append(f"{en}aborts/timeouts = {got_a}/{got_t}, expected {aborts}/{timeouts} plus {either} "
                            f"counted as either")
        expect(en + "in_use", 0)
        expect(en + "bad_requests", m.bad_requests[d])
        for name in ("mismatches", "bad_responses"):
            expect(en + name, 0)
        for c in IngressCounter:
            expect(f"port.{d}.ingress.{c.value}", 0)
    if duplicates is not None:
        expect("total.engine.duplicates", duplicates)
    if stale is True:
        stale = None if m.stale_uncertain else m.stale_expected
    if stale is not None:
        expect("total.engine.stale", stale)
    for net in ("req_net", "resp_net"):
        for k in range(len([f for f in st if f.startswith(net + ".")])):
            expect(f"{net}.{k}", m.net_errors[ErrorCode(k)] if net == "req_net" else 0)
    expect("cfg_errors", 0)
    for key in list(extra):
        expect(key, 0)
    if problems:
        raise AssertionError("status counters differ from the model:\n  " + "\n  ".join(problems))


def check_fills_match_misses(env):
    """Each primary miss of port d's AL-TLB is one TLB_FILL that GPU d received."""
    for d in range(env.n):
        c = tlb_counters(env, d)
        assert c["MISSES"] == len(env.gpus[d].fills), \
            f"port {d}: AL-TLB MISSES {c['MISSES']} but GPU {d} received {len(env.gpus[d].fills)} TLB_FILLs"
        assert c["BAD_RESPONSES"] == 0 and c["STALE_RESPONSES"] == 0, f"port {d}: AL-TLB counters {c}"


# ---- tests ------------------------------------------------------------------------------------------------

@cocotb.test()
async def test_traffic(dut):
    """Mixed unicast, reads, static multimem.st, dymultimem.st and both ld_reduce kinds on every port at
    once, random gaps on every rx link, random credit stalls on both VCs of every tx link, random memory
    latency per GPU."""
    s = tbenv.settings()
    env = DySharpEnv(dut, gap=s.get("gap", 0.2), stall=s.get("stall", 0.3), burst=s.get("burst", 2.0),
                     lat=s.get("lat", 40))
    await env.setup()
    for _ in range(s.get("packets", 24)):
        for src in range(env.n):
            env.mixed(src)
    await env.drain()
    env.log_summary("traffic")
    assert env.model.writes > 0 and env.model.matched["red_read"] > 0
    check_counters(env)


@cocotb.test()
async def test_reduce_types(dut):
    """dymultimem and static ld_reduce for every element type and op, from every port, under stalls: each
    result bit-exact for the arrival order of its contributions."""
    s = tbenv.settings()
    env = DySharpEnv(dut, gap=s.get("gap", 0.1), stall=s.get("stall", 0.2), lat=s.get("lat", 30))
    await env.setup()
    combos = [(e, o) for e in ETYPES for o in OPS]
    for k, (etype, op) in enumerate(combos * s.get("rounds", 1)):
        src = k % env.n
        mask = None
        if order_sensitive(etype, op):
            # At least 3 contributors: with 2 the float sum is the same in either order.
            mask = mask_of(env.rng.sample(range(env.n), env.rng.randint(3, min(4, env.n))))
        env.ld_reduce(src, etype=etype, op=op, mask=mask)
        env.mm_ld_reduce((src + 1) % env.n, etype=etype, op=op)
    for src in range(env.n):   # fp32 sums over 4 contributors: their bits almost surely depend on the order
        env.ld_reduce(src, etype=EType.FP32, op=RedOp.ADD, mask=mask_of(env.rng.sample(range(env.n), min(4, env.n))),
                      length=env.max_payload)
    await env.drain()
    env.log_summary("reduce_types")
    seen = {(EType(r.etype), RedOp(r.op)) for r in env.model.reductions if r.done and r.code == 0}
    assert seen == set(combos), f"combinations never completed: {set(combos) - seen}"
    multi = [r for r in env.model.reductions if order_sensitive(r.etype, r.op) and len(r.dests) > 2]
    check_counters(env)
    distinct = [r for r in multi if len({tuple(w) for _, w in reduce_candidates(
        {d: env.gpus[d].data_at(_RedRead(r, d).expected_addr(env.model), r.length) for d in r.dests},
        r.etype, r.op)}) > 1]
    env.dut._log.info(f"order-sensitive reductions with 3+ contributors: {len(multi)}, {len(distinct)} of them "
                      f"with results that differ by order; arrival orders {[r.order for r in distinct]}")
    assert distinct, "no reduction whose result depends on the arrival order: the check proved nothing"


@cocotb.test()
async def test_tlb(dut):
    """Cold misses and coalescing (each source stores a whole row, ``row_packets`` packets at one index,
    to every port at once), then a miss storm (every store a new index)."""
    s = tbenv.settings()
    env = DySharpEnv(dut, gap=0.0, stall=s.get("stall", 0.1), lat=s.get("lat", 60))
    await env.setup()
    everyone = (1 << env.n) - 1
    rows = s.get("rows", 2)
    per_row = s.get("row_packets", 4)
    for r in range(rows):
        for src in range(env.n):
            index = env.index(src, G_DISP, fresh=True)
            for k in range(per_row):
                env.dyn_st(src, mask=everyone, index=index, offset=4 * k, length=4)
    await env.drain()
    cold = [tlb_counters(env, d) for d in range(env.n)]
    keys = rows * env.n
    for d, c in enumerate(cold):
        assert c["MISSES"] == keys, f"port {d}: {c['MISSES']} misses, expected {keys} cold misses: {c}"
        assert c["HITS"] + c["COALESCED"] == keys * (per_row - 1), f"port {d}: {c}"
        assert c["FILLS"] == keys, f"port {d}: {c}"
    coalesced = sum(c["COALESCED"] for c in cold)
    assert coalesced > 0, f"no miss coalesced: {cold}"
    check_fills_match_misses(env)
    env.log_summary("tlb cold")
    # Miss storm: every store a fresh key, at every port.
    storm = s.get("storm", 6)
    for _ in range(storm):
        for src in range(env.n):
            env.dyn_st(src, mask=everyone, fresh=True, length=1)
    await env.drain()
    for d in range(env.n):
        c = tlb_counters(env, d)
        assert c["MISSES"] - cold[d]["MISSES"] == storm * env.n, f"port {d}: storm misses: {c} (before {cold[d]})"
        assert c["HITS"] == cold[d]["HITS"] and c["COALESCED"] == cold[d]["COALESCED"], f"port {d}: {c}"
    check_fills_match_misses(env)
    env.log_summary("tlb storm")
    check_counters(env)
    env.dut._log.info(f"AL-TLB port 0 counters: {tlb_counters(env, 0)}")


@cocotb.test()
async def test_fill_timeout(dut):
    """GPU ``silent`` never answers a TLB_FILL: its port answers every store copy and ld_reduce that
    needs it with TIMEOUT, nothing hangs, and traffic that does not need it flows."""
    s = tbenv.settings()
    f = s.get("silent", 1)
    env = DySharpEnv(dut, gap=0.1, stall=0.2, lat=20, silent_tlb_fill={f})
    await env.setup()
    for _ in range(s.get("packets", 4)):
        for src in range(env.n):
            env.dyn_st(src, fresh=True, mask=env.random_mask(src) | (1 << f))
            if s.get("reduce", True):
                env.ld_reduce(src, fresh=True, mask=env.random_mask(src) | (1 << f), etype=EType.S32,
                              op=RedOp.ADD)
            env.dyn_st(src, mask=env.random_mask(src) & ~(1 << f) or (1 << ((f + 1) % env.n)))
            env.unicast(src)
    await env.drain()
    # A reduction whose read waits on a fill may be answered by its entry's own timeout first; the AL-TLB's
    # read times out later (and its error answer then reaches a freed entry). Wait for every read.
    limit = env.cycler.cycle + 4 * env.p["tlb_timeout"] + 2000
    while tlb_counters(env, f)["READ_TIMEOUTS"] != len(env.gpus[f].fills):
        assert env.cycler.cycle < limit, f"port {f}: AL-TLB reads never timed out: {tlb_counters(env, f)}"
        await env.cycler.cycles(16)
    await env.cycler.cycles(60)
    env.model.finish()
    env.log_summary("fill_timeout")
    assert env.model.errors[ErrorCode.TIMEOUT] > 0
    c = tlb_counters(env, f)
    assert c["READ_TIMEOUTS"] == len(env.gpus[f].fills) > 0, f"port {f}: {c}; fills {len(env.gpus[f].fills)}"
    assert c["TIMEOUT"] >= c["READ_TIMEOUTS"], c
    check_counters(env)


async def _bad_run(dut, kind):
    s = tbenv.settings()
    silent_red = {s.get("silent", 1)} if kind == "silent_red_read" else ()
    env = DySharpEnv(dut, gap=0.1, stall=0.2, lat=s.get("lat", 30), silent_red_read=silent_red)
    if kind == "stale":
        # GPU `silent` answers every RED_READ only after its entry has timed out (the timeout scanner
        # needs up to `red_entries` more cycles): the answer reaches a freed entry.
        env.gpus[s.get("silent", 1)].red_read_late = env.p["red_timeout"] + env.p["red_entries"] + 200
    await env.setup()
    everyone = (1 << env.n) - 1
    bad_src = 0
    env.mm_group(G_FOREIGN, layout=2)
    env.tlb_group(G_FOREIGN, everyone & ~(1 << bad_src), ROWS)
    env.mm_group(G_FAULT, layout=3, alloc=0)
    env.tlb_group(G_FAULT, everyone, ROWS)
    env.mm_group(G_SMALL, layout=2)
    env.tlb_group(G_SMALL, everyone, SMALL_ROWS)
    foreign = max(env.static_groups) + 1        # a static group of every GPU but bad_src
    env.static_group(foreign, everyone & ~(1 << bad_src))
    await env.cycler.until(lambda: env.cfg.idle, timeout=200, what="configuration writes")
    await env.cycler.cycles(4)
    others = everyone & ~(1 << bad_src)
    rounds = s.get("rounds", 3)
    reduce = s.get("reduce", True)     # the reduction variant of the bad input too
    dup_port = 1 % env.n
    if kind == "duplicate":
        # GPU dup_port answers each RED_READ twice (the copy with other data) and fast; the others answer
        # late, so the entry is still waiting when the copy arrives.
        g = env.gpus[dup_port]
        g.latency = (1, 4)
        for d in range(env.n):
            if d != dup_port:
                env.gpus[d].latency = (150, 200)

        def dup(h, resp):   # only port 0's reductions (all of them read every port)
            return [Packet(resp.header, env.payload(len(resp.payload)))] if h.src == bad_src else []
        g.red_read_hook = dup
    no_reduce = {"unicast": 3, "read": 1, "mm_st": 2, "dyn_st": 4}
    for r in range(rounds):
        for src in range(env.n):
            env.mixed(src, no_reduce if kind == "duplicate" and src == bad_src else None)
            if src != bad_src:
                continue
            if kind == "foreign":
                env.dyn_st(src, group=G_FOREIGN, mask=others, index=src * INDEX_SPAN + r)
                if reduce:
                    env.ld_reduce(src, group=G_FOREIGN, mask=others, index=src * INDEX_SPAN + r, etype=EType.S32,
                              op=RedOp.MAX)
            elif kind == "bounds":
                env.dyn_st(src, group=G_SMALL, mask=env.random_mask(src), index=SMALL_ROWS + r)
                if reduce:
                    env.ld_reduce(src, group=G_SMALL, mask=env.random_mask(src), index=SMALL_ROWS + 7 * r + 1,
                              etype=EType.FP32, op=RedOp.MIN)
                env.dyn_st(src, group=G_SMALL, mask=env.random_mask(src), index=r)   # in bounds: delivered
            elif kind == "fault":
                env.dyn_st(src, group=G_FAULT, mask=env.random_mask(src), index=src * INDEX_SPAN + r)
                if reduce:
                    env.ld_reduce(src, group=G_FAULT, mask=env.random_mask(src), index=src * INDEX_SPAN + 100 + r,
                              etype=EType.BF16, op=RedOp.MAX)
            elif kind in ("silent_red_read", "stale"):
                f = s.get("silent", 1)
                env.ld_reduce(src, mask=env.random_mask(src) | (1 << f), etype=EType.FP16, op=RedOp.MAX)
                env.mm_ld_reduce(src, handle=_static_with(env, f, src), etype=EType.S32, op=RedOp.ADD)
            elif kind == "duplicate":
                env.ld_reduce(src, mask=everyone, etype=EType.U32, op=RedOp.ADD, length=4)
            elif kind == "static_foreign":
                env.mm_st(src, handle=foreign)
                if reduce:
                    env.mm_ld_reduce(src, handle=foreign, etype=EType.S32, op=RedOp.MAX)
            elif kind == "malformed_ld_reduce":
                for how in ("poison", "long", "empty"):
                    env.bad_ld_reduce(src, how, static=bool(r % 2))
    await env.drain()
    env.log_summary(f"bad input {kind}")
    return env


def _static_with(env, port, src):
    """A static group with ``port`` and ``src`` as members (configured if none is)."""
    both = (1 << port) | (1 << src)
    for h, m in sorted(env.static_groups.items()):
        if m & both == both:
            return h
    h = max(env.static_groups) + 1
    env.static_group(h, both)
    return h


@cocotb.test()
async def test_bad_input(dut):
    """One kind of bad input (setting ``kind``) from port 0 among good mixed traffic on every port: the
    right error responses, nothing written for it, everything else delivered exactly."""
    s = tbenv.settings()
    kind = s["kind"]
    valid = ("foreign", "bounds", "fault", "silent_red_read", "stale", "duplicate", "malformed_ld_reduce",
             "static_foreign")
    # stale: a contribution for a freed entry (a late answer after its entry timed out)
    assert kind in valid, f"unknown kind {kind!r}; valid: {valid}"
    env = await _bad_run(dut, kind)
    E = ErrorCode
    codes = {"foreign": (E.ISOLATION,), "bounds": (E.OUT_OF_BOUNDS,), "fault": (E.TLB_FAULT,),
             "silent_red_read": (E.TIMEOUT,), "stale": (E.TIMEOUT,), "duplicate": (),
             "malformed_ld_reduce": (E.POISONED, E.LENGTH_MISMATCH, E.BAD_LENGTH),
             "static_foreign": (E.ISOLATION,)}[kind]
    for c in codes:
        assert env.model.errors[c] > 0, f"no {c.name} was expected: the test did not inject its input"
    st = env.status()
    want = 0
    if kind == "duplicate":
        dups = counter(st, "duplicates")
        want = sum(1 for r in env.model.reductions if r.src == 0)
        assert dups == want > 0, f"duplicates = {dups}, expected {want}"
    if kind == "foreign":
        # (the model refuses any write it does not expect; this names the foreign group's rows directly)
        for g in env.gpus:
            lo = ((g.port + 1) << 32) + (2 << 30)
            hit = [h for h, _, _ in g.writes if lo <= h.addr < lo + (1 << 30)]
            assert not hit, f"GPU {g.port}: the foreign group's rows were written: {hit[:2]}"
    if kind == "stale":
        assert env.model.stale_expected > 0
        env.dut._log.info(f"stale = {counter(st, 'stale')} (expected {env.model.stale_expected})")
    check_counters(env, duplicates=want)


@cocotb.test()
async def test_deadlock(dut):
    """Every GPU issues ld_reduce at full rate (no gaps) while it answers the others' RED_READs, its
    receive side backpressured at random on both VCs: everything completes."""
    s = tbenv.settings()
    env = DySharpEnv(dut, gap=0.0, stall=s.get("stall", 0.5), burst=s.get("burst", 4.0), lat=s.get("lat", 20))
    await env.setup()
    for k in range(s.get("reductions", 24)):
        for src in range(env.n):
            if k % 3 == 2:
                env.mm_ld_reduce(src, etype=EType.FP32, op=RedOp.MAX, length=env.max_payload)
            else:
                env.ld_reduce(src, mask=env.random_mask(src, allow_self=True), length=env.max_payload,
                              etype=env.rng.choice([EType.S32, EType.BF16]), op=RedOp.MAX)
    await env.drain(timeout=s.get("timeout", 100000), what="every reduction under full load")
    env.log_summary("deadlock")
    done = sum(1 for r in env.model.reductions if r.done)
    assert done == len(env.model.reductions)
    check_counters(env)
    env.dut._log.info(f"max buffered flits per VC at the GPUs: {[k.max_buffered for k in env.sinks]}")


# ---- the link agents alone, on a loopback -----------------------------------------------------------------

def vc_loop_component(*, flit_width=128, delay=3, rtl=None):
    """A stand-in DUT for the agents: ``rx__0`` (a 2-VC link in) is ``tx__0`` (a 2-VC link out) delayed by
    ``delay`` cycles, and ``tx__0``'s credit returns come back on ``rx__0`` ``delay`` cycles later. With
    ``rtl=(rx_credits, tx_credits)`` the loop is the switch's own link ends instead: ``rx__0`` ->
    :class:`hw.vc_link.VcReceiver` -> :class:`hw.vc_link.VcSender` -> ``tx__0``."""
    from amaranth.hdl import Module, Signal
    from amaranth.lib import data, wiring
    from amaranth.lib.wiring import In, Out

    from hw.credit import CREDIT_RETURN_BITS
    from hw.packet import flit_layout

    link = wiring.Signature({"valid": Out(1), "vc": Out(1), "flit": Out(flit_layout(flit_width)),
                             "credit": In(data.ArrayLayout(CREDIT_RETURN_BITS, N_VCS))})

    class VcLoop(wiring.Component):
        def __init__(self):
            super().__init__({"rx": In(link).array(1), "tx": Out(link).array(1)})

        def elaborate(self, platform):
            m = Module()
            if rtl is not None:
                from hw.vc_link import VcReceiver, VcSender
                m.submodules.rxl = rxl = VcReceiver(credits=(rtl[0],) * N_VCS, flit_width=flit_width)
                m.submodules.txl = txl = VcSender(credits=(rtl[1],) * N_VCS, flit_width=flit_width)
                wiring.connect(m, wiring.flipped(self.rx[0]), rxl.link)
                for v in range(N_VCS):
                    wiring.connect(m, rxl.o[v], txl.i[v])
                wiring.connect(m, txl.link, wiring.flipped(self.tx[0]))
                return m
            fwd = [self.rx[0].valid, self.rx[0].vc, self.rx[0].flit]
            back = self.tx[0].credit
            for _ in range(delay):
                nf = [Signal.like(s) for s in fwd]
                nb = Signal.like(back)
                m.d.sync += [a.eq(b) for a, b in zip(nf, fwd)] + [nb.eq(back)]
                fwd, back = nf, nb
            m.d.comb += [self.tx[0].valid.eq(fwd[0]), self.tx[0].vc.eq(fwd[1]), self.tx[0].flit.eq(fwd[2]),
                         self.rx[0].credit.eq(back)]
            return m

    return VcLoop()


@cocotb.test()
async def test_vc_loopback(dut):
    """VcLinkSource -> delay line -> VcLinkSink: per-VC packets arrive intact and in order, flits of the two
    VCs interleave, credits are never exceeded; with ``cheat`` the source ignores credits and the sink must
    raise."""
    s = tbenv.settings()
    credits = s.get("credits", 4)
    out_credits = s.get("out_credits", credits)
    rng = tbenv.rng("loop")
    got = [[], []]
    cyc = Cycler(dut)
    src = VcLinkSource(dut, "rx__0", tbenv.rng("src"), credits=credits, gap=s.get("gap", 0.2), burst=2.0,
                       ignore_credits=s.get("cheat", False))
    sink = VcLinkSink(dut, "tx__0", tbenv.rng("sink"), credits=out_credits, stall=(s.get("stall", 0.4), 0.1),
                      burst=3.0, on_packet=lambda v, flits, c: got[v].append(Packet.from_flits(flits)), batch=2)
    switches = [0]
    last = [None]

    def watch(c):
        if dut.tx__0__valid.value == 1:
            v = int(dut.tx__0__vc.value)
            if last[0] is not None and v != last[0]:
                switches[0] += 1
            last[0] = v
    cyc.watchers.append(watch)
    cyc.add(src, sink)
    await cyc.start()
    sent = [[], []]
    for k in range(s.get("packets", 60)):
        if rng.random() < 0.5:
            h = Header(opcode=Opcode.WRITE, src=0, tag=k & 0xFF, dst=rng.randrange(4), length=rng.randint(0, 6),
                       addr=rng.randrange(1 << 20) * 16)
        else:
            h = Header(opcode=Opcode.RED_READ_RESP, src=0, tag=k & 0xFF, dst=rng.randrange(4),
                       length=rng.randint(0, 6))
        p = Packet(h, [rng.getrandbits(128) for _ in range(h.length)])
        v = 0 if h.opcode == Opcode.WRITE.value else 1
        sent[v].append(p)
        src.send(p)
    await cyc.until(lambda: sum(map(len, got)) == sum(map(len, sent)), timeout=20000, what="every packet")
    assert got == sent, "per-VC packets differ"
    assert switches[0] > 10, f"the VCs hardly interleaved ({switches[0]} switches)"
    dut._log.info(f"loopback: {cyc.cycle} cycles, {switches[0]} VC switches, max buffered {sink.max_buffered}")
