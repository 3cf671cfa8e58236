"""cocotb testbench of the ``ld_reduce`` flow: :class:`hw.switch.reduction_engine.ReductionEngine` (with
a Python AL-TLB model on ``translate``) or :class:`hw.switch.ld_reduce_unit.LdReduceUnit` (with the RTL
stand-in translator, configured through ``tcfg``).

The environment plays every other party:

* sources inject ``dymultimem``/static ``multimem.ld_reduce`` requests (random masks, lengths, element
  types, ops; malformed ones on demand) on ``req`` with random gaps;
* the translator model (engine only) answers translations after random latencies, out of order;
* the destinations take ``RED_READ`` packets from ``rd`` (random stalls), check them bit for bit (one per
  destination of the mask, the translated address, the request's length/type/op, the reduction tag), and
  answer ``RED_READ_RESP`` after a random per-packet latency with data from a deterministic memory model;
  the answers share the ``resp`` link packet by packet, so they come back reordered across destinations
  and requests;
* with ``defer_translation`` the engine sends ``DYN_RED_READ`` (row named by a ``DeferredAddr``) and must
  never use ``translate``; the destination side then plays the egress translator too: a read whose
  translation would fail is answered with a header-only error-coded ``RED_READ_RESP``;
* on demand destinations answer with an error code (with or without payload), answer twice, or a port
  that was not asked answers; these come early and the entry's other answers late, so the entry is
  certainly still live (a duplicate that were counted would complete it early with a wrong sum);
* ``out`` is drained with random stalls.

:class:`verif.models.reduction.ReductionBufferModel` sees every contribution in the order ``resp``
accepted it and predicts every ``RED_RESP`` bit-exactly (reduction in arrival order); request errors,
translation errors and timeouts have their expected ``ERROR`` responses; a scoreboard keyed by requester
(src, tag) compares, and all status counters are checked at the end.
"""

import collections
import dataclasses
import heapq

import cocotb
import numpy as np
from amaranth.lib import data

from hw.packet import (EType, ErrorCode, Flit, Header, Opcode, Packet, RedOp, pack_deferred_addr, pack_flit,
                       unpack_flit)
from hw.switch.group_table import GroupWrite
from hw.switch.linear_translator import BaseWrite
from hw.switch.reduction_buffer import rtag_from_header, rtag_to_header
from hw.switch.translate_if import TranslateRequest, TranslateResponse

from verif.harness import tbenv
from verif.harness.cycler import Agent, Cycler
from verif.harness.gates import Gate
from verif.models.reduction import Contribution, ReductionBufferModel, engine_request_error, random_lanes
from verif.harness.scoreboard import Scoreboard
from verif.harness.stream import StreamDriver, StreamMonitor
from verif.tb.reduction_buffer import pack

ROW_BYTES = 14336


def unpack(layout, word: int) -> dict:
    layout = data.Layout.cast(layout)
    return {name: (word >> f.offset) & ((1 << f.width) - 1) for name, f in layout}


class TranslatorModel(Agent):
    """The AL-TLB on ``translate``: ``addr = base[dst] + index * row_bytes`` like the stand-in, plus
    injected error codes; answers after a random latency, so out of order."""

    def __init__(self, dut, rng, nprng, *, bases, rows, errors, lat=(1, 12), stall=0.0, gap=0.0):
        self.req_valid = dut.translate__req__valid
        self.req_ready = dut.translate__req__ready
        self.req_payload = dut.translate__req__payload
        self.resp_valid = dut.translate__resp__valid
        self.resp_ready = dut.translate__resp__ready
        self.resp_payload = dut.translate__resp__payload
        self.bases, self.rows, self.errors, self.lat = bases, rows, errors, lat
        self.stall = Gate(rng, stall, 2.0)
        self.gap = Gate(rng, gap, 2.0)
        self.nprng = nprng
        self.heap = []
        self.seq = 0
        self.current = None
        self.ready_now = False
        self.resp_valid.value = 0
        self.req_ready.value = 0

    def drive(self, cycle):
        self.ready_now = self.stall.open()
        self.req_ready.value = int(self.ready_now)
        if self.current is None and self.heap and self.heap[0][0] <= cycle and self.gap.open():
            self.current = heapq.heappop(self.heap)[2]
            self.resp_payload.value = self.current
            self.resp_valid.value = 1
        elif self.current is None:
            self.resp_valid.value = 0

    def sample(self, cycle):
        if self.req_valid.value == 1 and self.ready_now:
            r = unpack(TranslateRequest, int(self.req_payload.value))
            code = self.errors.get((r["src"], r["group"], r["index"], r["dst"]))
            if code is None:
                if r["dst"] not in self.bases:
                    code = ErrorCode.ISOLATION
                elif r["index"] >= self.rows:
                    code = ErrorCode.OUT_OF_BOUNDS
                else:
                    code = ErrorCode.NONE
            addr = 0 if code != ErrorCode.NONE else (self.bases[r["dst"]] + r["index"] * ROW_BYTES) % (1 << 48)
            word = pack(TranslateResponse, addr=addr, code=code.value, tag=r["tag"])
            due = cycle + int(self.nprng.integers(self.lat[0], self.lat[1] + 1))
            heapq.heappush(self.heap, (due, self.seq, word))
            self.seq += 1
        if self.current is not None and self.resp_ready.value == 1:
            self.current = None


class Responder(Agent):
    """Drives ``resp``: due packets one at a time (earliest first), flits with random gaps."""

    def __init__(self, dut, rng, *, gap=0.0, on_flit=None, flit_width=128):
        self.valid, self.ready, self.payload = dut.resp__valid, dut.resp__ready, dut.resp__payload
        self.gate = Gate(rng, gap, 2.0)
        self.heap = []
        self.seq = 0
        self.packet = collections.deque()     # flits of the packet being sent, with its info
        self.info = None
        self.current = None
        self.on_flit = on_flit
        self.flit_width = flit_width
        self.valid.value = 0

    def schedule(self, due, flits, info):
        heapq.heappush(self.heap, (due, self.seq, flits, info))
        self.seq += 1

    @property
    def idle(self):
        return self.current is None and not self.packet and not self.heap

    def drive(self, cycle):
        if self.current is None and not self.packet and self.heap and self.heap[0][0] <= cycle:
            _, _, flits, self.info = heapq.heappop(self.heap)
            self.packet.extend(enumerate(flits))
        if self.current is None and self.packet and self.gate.open():
            self.current = self.packet.popleft()
            self.payload.value = pack_flit(self.current[1], self.flit_width)
            self.valid.value = 1
        elif self.current is None:
            self.valid.value = 0

    def sample(self, cycle):
        if self.current is not None and self.ready.value == 1:
            if self.on_flit:
                self.on_flit(self.info, self.current[0], self.current[1], cycle)
            self.current = None


class Req:
    """One ld_reduce request and what the environment knows about it."""

    def __init__(self, header: Header, dsts, *, data_etype=None):
        self.h = header
        self.dsts = list(dsts)
        self.addrs = {}          # dst -> expected RED_READ address
        self.rtag = None
        self.read_seen = set()
        self.doomed = None       # ErrorCode of an injected translation failure
        self.failing = set()     # destinations whose translation fails
        self.silent = set()      # destinations that never answer
        self.bad_resp = {}       # dst -> "etype" | "poison" | "cut" (header only, no code; poisoned or not)
        self.expect_timeout = False
        self.err_resp = {}       # dst -> (code, with_payload): that destination answers with an error code
        self.err_poison = set()  # destinations whose header-only error answer arrives poisoned
        self.dup = set()         # destinations that answer twice (the second copy right after the first)
        self.unasked = []        # ports not in the mask that answer anyway
        self.late = False        # answers not involved in the above come LATE cycles later
        self.unasked_sent = False


class EngineEnv:
    def __init__(self, dut, *, gap=0.1, stall=0.1, lat=(10, 80), tlat=(1, 12)):
        self.dut = dut
        self.p = p = tbenv.params()
        self.unit = hasattr(dut, "tcfg__valid")
        self.P = p["ports"]
        self.W = p["flit_width"]
        self.max_length = p["max_length"]
        self.defer = bool(p.get("defer_translation", False))
        self.rows = p.get("rows", 4096)
        # The row the engine checks a translated read against (the unit's default is its translator's).
        self.row_bytes = p.get("row_bytes") or (ROW_BYTES if self.unit else 1024 * self.W // 8)
        self.rng = np.random.default_rng(tbenv.seed())
        self.lat = lat
        self.cycler = Cycler(dut)
        self.model = ReductionBufferModel(self.W)
        self.sb = Scoreboard("ld_reduce")
        self.bases = {d: (d + 1) << 36 for d in range(self.P)}
        self.groups = {}
        self.errors = {}
        self.src = StreamDriver(dut, "req", tbenv.rng("req"), gap=gap, burst=2.0, on_accept=self._on_req_accept)
        self.cfg = StreamDriver(dut, "cfg", tbenv.rng("cfg"))
        self.rd = StreamMonitor(dut, "rd", tbenv.rng("rd"), stall=stall, burst=2.0, on_item=self._on_read)
        self.out = StreamMonitor(dut, "out", tbenv.rng("out"), stall=stall, burst=2.0, on_item=self._on_out)
        self.resp = Responder(dut, tbenv.rng("resp"), gap=gap, on_flit=self._on_resp_flit, flit_width=self.W)
        agents = [self.src, self.cfg, self.rd, self.out, self.resp]
        if self.unit:
            self.tcfg = StreamDriver(dut, "tcfg", tbenv.rng("tcfg"))
            agents.append(self.tcfg)
        else:
            self.translator = TranslatorModel(dut, tbenv.rng("tlb"), self.rng, bases=self.bases, rows=self.rows,
                                              errors=self.errors, lat=tlat, stall=stall, gap=gap)
            agents.append(self.translator)
        self.cycler.add(*agents)
        self.by_addr = {}
        self.in_flight = set()
        self.awaiting = set()     # requests that must still be answered on out
        self.key_req = {}         # (src, tag) -> Req, for requests that reached the buffer
        self.req_accept = {}      # (src, tag) -> cycle the request header was accepted
        self.resp_last = {}       # rtag -> cycle its latest response flit was accepted
        self.results = []         # (key, opcode, header cycle, cycles since the request was accepted)
        self.out_cycles = []
        self.partial = []
        self.expected_counts = collections.Counter()
        self.max_in_use = 0
        self.req_refused = 0
        self.resp_stalls = 0      # cycles with resp valid and not ready, beyond the row hazard below
        self.row_waits = 0        # ... behind two operations on one buffer row close together
        self.ops = collections.deque(maxlen=8)   # (cycle, (entry, flit)) of the buffer operations sent
        self.entry_mask = (1 << max(1, (p["entries"] - 1).bit_length())) - 1
        self.cycler.watchers.append(self._watch)

    def _watch(self, cycle):
        self.max_in_use = max(self.max_in_use, int(self.dut.in_use.value))
        if self.defer:
            assert int(self.dut.translate__req__valid.value) == 0, "translate used with defer_translation"
        if int(self.dut.req__valid.value) and not int(self.dut.req__ready.value):
            self.req_refused += 1
        if int(self.dut.resp__valid.value) and not int(self.dut.resp__ready.value):
            if self._row_hazard(cycle):
                self.row_waits += 1
            else:
                self.resp_stalls += 1

    def _row_hazard(self, cycle) -> bool:
        """The buffer's documented wait (docs/reduction.md, accumulate pipeline): an operation 1 (2) cycles
        behind another on its row -- a payload flit, or an abort, which works on the entry's flit-0 row --
        waits at stage b 2 (1) cycles, and the response link with it."""
        recent = [(t, r) for t, r in self.ops if cycle - t <= 6]
        return any(r1 == r2 and 0 < t2 - t1 <= 3 and cycle - t2 <= 3
                   for i, (t1, r1) in enumerate(recent) for t2, r2 in recent[i + 1:])

    async def start(self, *, static_groups=4, unconfigured=()):
        await self.cycler.start()
        for d in unconfigured:
            del self.bases[d]
        if self.unit:
            for d in range(self.P):
                if d in self.bases:
                    self.tcfg.send(pack(BaseWrite, dst=d, base=self.bases[d], valid=1))
        for g in range(static_groups):
            mask = 0
            while mask == 0:
                mask = int(self.rng.integers(1, 1 << self.P, dtype=np.uint64))
            self.groups[g] = mask
            self.cfg.send(pack(GroupWrite, handle=g, mask=mask))
        await self.cycler.until(lambda: self.cfg.idle and (not self.unit or self.tcfg.idle), timeout=200,
                                what="configuration")
        await self.cycler.cycles(3)

    # -- requests
    def _key(self):
        while True:
            key = (int(self.rng.integers(0, self.P)), int(self.rng.integers(0, 256)))
            if key not in self.in_flight:
                self.in_flight.add(key)
                return key

    def make_request(self, *, static=None, fanout=None, length=None, etype=None, op=None):
        rng = self.rng
        src, tag = self._key()
        etype = EType(int(rng.integers(0, 5))) if etype is None else EType(etype)
        op = RedOp(int(rng.integers(0, 3))) if op is None else RedOp(op)
        length = int(rng.integers(1, self.max_length + 1)) if length is None else length
        static = (self.groups and rng.random() < 0.25) if static is None else static
        while True:
            if static:
                # A group src is a member of (the engine refuses the others: ISOLATION, test_errors).
                mine = [g for g, mk in self.groups.items() if mk >> src & 1] or list(self.groups)
                group = int(rng.choice(mine))
                mask = self.groups[group]
                addr = int(rng.integers(0, 1 << 40)) << 4
                h = Header(opcode=Opcode.MM_LD_REDUCE, src=src, tag=tag, length=length, etype=etype, redop=op,
                           group=group, addr=addr)
                dsts = [d for d in range(self.P) if mask >> d & 1]
                addrs = {d: addr for d in dsts}
            else:
                n = int(rng.integers(1, self.P + 1)) if fanout is None else fanout
                dsts = sorted(int(x) for x in rng.choice(self.P, size=n, replace=False))
                mask = sum(1 << d for d in dsts)
                index = int(rng.integers(0, self.rows))
                # In the row: a read past it is an error case of its own (test_errors).
                offset = int(rng.integers(0, min(1024, self.row_bytes // (self.W // 8) - length + 1)))
                h = Header(opcode=Opcode.DYN_LD_REDUCE, src=src, tag=tag, length=length, etype=etype,
                           redop=op, group=int(rng.integers(0, 256)), mask=mask, index=index, offset=offset)
                addrs = {d: self.dyn_addr(d, index, offset, h.group) for d in dsts}
            if not any((src, d, a) in self.by_addr for d, a in addrs.items()):
                break
        r = Req(h, dsts)
        r.addrs = addrs
        return r

    def dyn_addr(self, d, index, offset, group):
        """The address a dymultimem read to ``d`` must carry: translated, or the deferred row name."""
        if self.defer:
            return pack_deferred_addr(group, index, offset * (self.W // 8))
        return (self.bases.get(d, 0) + index * ROW_BYTES + offset * (self.W // 8)) % (1 << 48)

    def fix_addrs(self, r: Req) -> Req:
        """Recompute a dymultimem request's read addresses after a test edited its header or mask."""
        r.addrs = {d: self.dyn_addr(d, r.h.index, r.h.offset, r.h.group) for d in r.dsts}
        return r

    def inject(self, r: Req, flits=None) -> None:
        """Send a request (optionally as raw flits) and record what must come back."""
        h = r.h
        flits = flits or Packet(h, []).flits(self.W)
        code = engine_request_error(h, ports=self.P, max_length=self.max_length, groups=self.groups,
                                    last=flits[0].last, poison=flits[0].poison)
        key = (h.src, h.tag)
        self.awaiting.add(key)
        if code != ErrorCode.NONE:
            self.sb.expect(key, Packet(Header(opcode=Opcode.ERROR, src=h.src, tag=h.tag, dst=h.src, code=code)))
            self.expected_counts["bad_requests"] += 1
        else:
            self.key_req[key] = r
            for d in r.dsts:
                self.by_addr[(h.src, d, r.addrs[d])] = r
            fails = [d for d in r.dsts if d not in self.bases] if h.opcode == Opcode.DYN_LD_REDUCE.value else []
            past_row = not self.defer and (h.offset + h.length) * (self.W // 8) > self.row_bytes
            if h.opcode == Opcode.DYN_LD_REDUCE.value and (h.index >= self.rows or past_row):
                fails = list(r.dsts)
                r.doomed = ErrorCode.OUT_OF_BOUNDS
            elif fails:
                r.doomed = ErrorCode.ISOLATION
            elif r.doomed is not None:
                fails = sorted(r.failing)
                for d in fails:
                    self.errors[(h.src, h.group, h.index, d)] = r.doomed
            if r.doomed is not None:
                r.failing = set(fails)
                if self.defer:
                    # The destinations' egress answers with the code; the model sees those aborts.
                    for d in fails:
                        r.err_resp[d] = (r.doomed.value, False)
                    r.doomed = None
                else:
                    self.sb.expect(key, Packet(Header(opcode=Opcode.ERROR, src=h.src, tag=h.tag, dst=h.src,
                                                      code=r.doomed)))
                    self.expected_counts["aborts"] += 1
                    self.expected_counts["stale"] += len(fails) - 1
            elif r.expect_timeout:
                self.sb.expect(key, "TIMEOUT")
        for f in flits:
            self.src.send(pack_flit(f, self.W))

    # -- destinations
    def gpu_data(self, dst, addr, k, etype):
        g = np.random.default_rng([dst, addr + k * (self.W // 8), tbenv.seed()])
        return random_lanes(g, etype, self.W)

    LATE = 400

    def _on_read(self, word, cycle):
        f = unpack_flit(word, self.W)
        h = Header.decode(f.data)
        read_op = Opcode.DYN_RED_READ if self.defer else Opcode.RED_READ
        assert f.last and not f.poison and h.opcode in (Opcode.RED_READ.value, read_op.value), \
            f"rd carried {h} (last={f.last}, poison={f.poison})"
        r = self.by_addr.get((h.src, h.dst, h.addr))
        assert r is not None, f"RED_READ for no request (wrong address or destination?): {h}"
        assert h.dst not in r.read_seen, f"second RED_READ to destination {h.dst}: {h}"
        assert self.defer or h.dst not in r.failing, f"RED_READ to {h.dst} although its translation failed: {h}"
        r.read_seen.add(h.dst)
        rtag = rtag_from_header(h)
        if r.rtag is None:
            r.rtag = rtag
            if r.doomed is None:
                self.model.allocate(rtag, src=r.h.src, tag=r.h.tag, etype=r.h.etype, op=r.h.redop,
                                    length=r.h.length, expected=len(r.dsts))
        assert rtag == r.rtag, f"RED_READs of one request carry different tags {rtag:#x}, {r.rtag:#x}"
        # Every bit of the read: the opcode for the request's kind, its fields, nothing else set.
        static = r.h.opcode == Opcode.MM_LD_REDUCE.value
        want = Header(opcode=Opcode.RED_READ if static else read_op, src=r.h.src, dst=h.dst, length=r.h.length,
                      etype=r.h.etype, redop=r.h.redop, addr=r.addrs[h.dst], **rtag_to_header(rtag))
        assert f.data == want.encode(), f"read {h} ({f.data:#x}), expected {want} ({want.encode():#x})"
        if r.doomed is not None or h.dst in r.silent:
            return
        etype = r.h.etype
        due = cycle + int(self.rng.integers(self.lat[0], self.lat[1] + 1))
        early = h.dst in r.dup or h.dst in r.err_resp
        if r.late and not early:
            due += self.LATE
        if r.unasked and not r.unasked_sent:
            # Ports that were not asked answer right after the first read (the entry is live: the real
            # answers are late).
            r.unasked_sent = True
            for i, u in enumerate(r.unasked):
                hdr = Header(opcode=Opcode.RED_READ_RESP, src=u, dst=h.src, length=h.length, etype=etype,
                             redop=h.redop, addr=h.addr, **rtag_to_header(rtag))
                payload = [self.gpu_data(u, h.addr, k, etype) for k in range(h.length)]
                self.resp.schedule(cycle + 2 + i, Packet(hdr, payload).flits(self.W), ("unasked", rtag, hdr))
        if h.dst in r.err_resp:
            code, with_payload = r.err_resp[h.dst]
            hdr = Header(opcode=Opcode.RED_READ_RESP, src=h.dst, dst=h.src, length=h.length, etype=etype,
                         redop=h.redop, code=code, **rtag_to_header(rtag))
            payload = [int(self.rng.integers(0, 1 << 62)) for _ in range(h.length)] if with_payload else []
            flits = Packet(hdr, payload).flits(self.W)
            if h.dst in r.err_poison:      # a corrupted error answer: POISONED, whatever its code said
                flits = [Flit(flits[0].data, last=True, poison=True)]
                hdr = dataclasses.replace(hdr, code=ErrorCode.POISONED.value)
            self.resp.schedule(due, flits, ("err", rtag, hdr))
            if h.dst in r.dup:
                # Right behind it (same due time): the duplicate's header reads the tracking row the
                # error answer writes in that very cycle.
                self.resp.schedule(due, list(flits), ("dup_after_err", rtag, hdr))
            return
        bad = r.bad_resp.get(h.dst)
        if bad == "cut":       # the header alone (its payload lost): the entry aborts LENGTH_MISMATCH
            hdr = Header(opcode=Opcode.RED_READ_RESP, src=h.dst, dst=h.src, length=h.length, etype=etype,
                         redop=h.redop, addr=h.addr, **rtag_to_header(rtag))
            flit = Flit(hdr.encode(), last=True, poison=bool(self.rng.random() < 0.5))
            self.resp.schedule(due, [flit], ("err", rtag, dataclasses.replace(hdr, code=ErrorCode.LENGTH_MISMATCH.value)))
            return
        resp_etype = (etype + 1) % 5 if bad == "etype" else etype
        payload = [self.gpu_data(h.dst, h.addr, k, etype) for k in range(h.length)]
        hdr = Header(opcode=Opcode.RED_READ_RESP, src=h.dst, dst=h.src, length=h.length, etype=resp_etype,
                     redop=h.redop, addr=h.addr, **rtag_to_header(rtag))
        flits = Packet(hdr, payload).flits(self.W)
        if bad == "poison":
            flits[-1] = Flit(flits[-1].data, last=True, poison=True)
        self.resp.schedule(due, flits, ("resp", rtag, hdr))
        if h.dst in r.dup:
            self.resp.schedule(due + 3, list(flits), ("dup", rtag, hdr))

    def _on_req_accept(self, word, cycle):
        f = unpack_flit(word, self.W)
        h = Header.decode(f.data)
        self.req_accept.setdefault((h.src, h.tag), cycle)

    def _on_resp_flit(self, info, k, flit, cycle):
        kind = info[0]
        if kind == "resp":
            self.resp_last[info[1]] = cycle
            if k >= 1:
                self.ops.append((cycle, (info[1] & self.entry_mask, k - 1)))
        elif kind == "err" and k == 0:         # the abort goes to the buffer with the verdict, a cycle later
            self.ops.append((cycle + 1, (info[1] & self.entry_mask, 0)))
        if kind == "junk":
            if k == 0:
                self.expected_counts["bad_responses"] += 1
            return
        _, rtag, hdr = info
        if kind in ("dup", "unasked", "dup_after_err"):
            # Dropped whole by the engine. The scenario keeps the entry live until they have passed (a
            # duplicate of an error answer follows it at once, before the entry can be reused).
            if k == 0:
                assert kind == "dup_after_err" or rtag in self.model.live, \
                    f"{kind} answer {hdr} arrived after its entry finished"
                self.expected_counts["bad_responses" if kind == "unasked" else "duplicates"] += 1
            return
        if kind == "err":
            # The header aborts the entry with its code; any payload is dropped.
            if k == 0:
                pkt = self.model.contribute(Contribution(rtag, 0, 0, 0, abort=True, code=hdr.code))
                if pkt is not None:
                    self.sb.expect((pkt.header.dst, pkt.header.tag), pkt)
            return
        if k == 0:
            return
        if flit.poison:
            c = Contribution(rtag, 0, 0, 0, abort=True, code=ErrorCode.LENGTH_MISMATCH.value)
        else:
            c = Contribution(rtag, k - 1, hdr.length, hdr.etype, flit.data)
        pkt = self.model.contribute(c)
        if pkt is not None:
            self.sb.expect((pkt.header.dst, pkt.header.tag), pkt)

    def send_junk(self, due, packet: Packet):
        self.resp.schedule(due, packet.flits(self.W), ("junk",))

    def send_stale(self, due, rtag, length=2):
        """A RED_READ_RESP for ``rtag``: use generation 0 of an entry (no entry is allocated 2**gen_bits
        times in a test), so that it is stale in the buffer and not tracked by the engine."""
        hdr = Header(opcode=Opcode.RED_READ_RESP, src=0, dst=0, length=length, etype=EType.FP32, **rtag_to_header(rtag))
        payload = [int(self.rng.integers(0, 1 << 62)) for _ in range(length)]
        self.resp.schedule(due, Packet(hdr, payload).flits(self.W), ("resp", rtag, hdr))

    # -- results
    def _on_out(self, word, cycle):
        f = unpack_flit(word, self.W)
        self.partial.append(f)
        self.out_cycles.append(cycle)
        if not f.last:
            return
        pkt, self.partial = Packet.from_flits(self.partial), []
        head_cycle = self.out_cycles[0]
        self.out_cycles = []
        h = pkt.header
        key = (h.dst, h.tag)
        self.in_flight.discard(key)
        self.awaiting.discard(key)
        accepted = self.req_accept.pop(key, None)
        self.results.append((key, h.opcode, head_cycle, None if accepted is None else head_cycle - accepted))
        r = self.key_req.pop(key, None)
        if r is not None and h.opcode == Opcode.RED_RESP.value:
            # Every RED_READ of a completed reduction has been seen; after an error some may still come.
            for d in r.dsts:
                if self.by_addr.get((r.h.src, d, r.addrs[d])) is r:
                    del self.by_addr[(r.h.src, d, r.addrs[d])]
        if r is not None:
            if r.expect_timeout and h.opcode == Opcode.ERROR.value and h.code == ErrorCode.TIMEOUT.value:
                self.model.time_out(r.rtag)
                self.sb.observe(key, "TIMEOUT", cycle=cycle)
                return
        self.sb.observe(key, pkt, cycle=cycle)

    def counters(self):
        names = ("stale", "mismatches", "aborts", "timeouts", "completed", "bad_requests", "bad_responses",
                 "duplicates")
        vals = {n: getattr(self.dut, n).value for n in names}
        bad = {n: str(v) for n, v in vals.items() if not v.is_resolvable}
        assert not bad, f"unresolved (X/Z) status counters: {bad}"
        return {n: int(v) for n, v in vals.items()}

    async def drain(self, timeout=200000):
        await self.cycler.until(lambda: self.src.idle and self.resp.idle and self.sb.outstanding == 0
                                and not self.awaiting, timeout=timeout,
                                what=f"all results ({len(self.awaiting)} requests unanswered)")
        await self.cycler.cycles(40)
        self.sb.finish()
        got = self.counters()
        want = {"stale": self.model.stale + self.expected_counts["stale"],
                "mismatches": self.model.mismatches,
                "aborts": self.model.aborts + self.expected_counts["aborts"],
                "timeouts": self.model.timeouts, "completed": self.model.completed,
                "bad_requests": self.expected_counts["bad_requests"],
                "bad_responses": self.expected_counts["bad_responses"],
                "duplicates": self.expected_counts["duplicates"]}
        assert got == want, f"status counters {got}, expected {want}"
        assert int(self.dut.in_use.value) == 0, "entries still in use after draining"


def _env(dut, **defaults):
    s = dict(defaults)
    s.update(tbenv.settings())
    env = EngineEnv(dut, gap=s["gap"], stall=s["stall"], lat=tuple(s["lat"]))
    return env, s


@cocotb.test()
async def test_traffic(dut):
    """Random dynamic and static ld_reduce requests, many in flight; results bit-exact in arrival order."""
    env, s = _env(dut, gap=0.2, stall=0.2, lat=[10, 120])
    await env.start()
    for _ in range(s.get("requests", 40)):
        env.inject(env.make_request(fanout=None if s.get("max_fanout") is None else
                                    int(env.rng.integers(1, s["max_fanout"] + 1))))
    await env.drain()
    dut._log.info(f"{env.model.completed} reductions; max {env.max_in_use} in flight")
    assert env.max_in_use >= min(4, s.get("requests", 40) // 4), f"only {env.max_in_use} in flight at once"
    # No translation aborts, no timeouts: the response link is never held up (one flit per cycle).
    assert env.resp_stalls == 0, f"resp not ready in {env.resp_stalls} cycles with a flit waiting"


@cocotb.test()
async def test_errors(dut):
    """Malformed requests, translation failures, junk/stale/mistyped/poisoned/cut responses, among good
    traffic: each gets its defined answer and counter; the good reductions stay bit-exact."""
    env, s = _env(dut, gap=0.1, stall=0.1, lat=[10, 80])
    await env.start(unconfigured=[env.P - 1])
    rng = env.rng
    good = lambda **kw: env.make_request(fanout=int(rng.integers(1, env.P - 1)), **kw)   # noqa: E731

    def fix_dsts(r):
        """Keep a good request away from the unconfigured destination."""
        if r.h.opcode == Opcode.DYN_LD_REDUCE.value and (env.P - 1) in r.dsts:
            r.dsts.remove(env.P - 1)
            if not r.dsts:
                r.dsts = [0]
            r.h.mask = sum(1 << d for d in r.dsts)
            env.fix_addrs(r)
        return r

    isolated = 0
    for rnd in range(s.get("rounds", 2)):
        for _ in range(4):
            env.inject(fix_dsts(good(static=False)))
        # Malformed requests.
        r = good(static=False)
        r.h.opcode = Opcode.WRITE.value
        r.h.mask = r.h.index = r.h.offset = r.h.group = 0
        r.h.dst, r.h.addr = 1, 0x40
        env.inject(r)
        r = good(static=False)
        r.h.length = 0
        env.inject(r)
        r = good(static=False)
        r.h.length = env.max_length + 1 if env.max_length < 31 else 0
        env.inject(r)
        r = good(static=False)
        r.h.etype = 7
        env.inject(r)
        r = good(static=False)
        r.h.mask = 0
        env.inject(r)
        if env.P < 64:
            r = good(static=False)
            r.h.mask |= 1 << env.P
            env.inject(r)
        r = good(static=True)
        r.h.group = 200
        env.inject(r)
        r = good(static=True)
        foreign = [g for g, mk in env.groups.items() if not mk >> r.h.src & 1]
        if foreign:                                                             # src not a member: ISOLATION
            r.h.group = foreign[0]
            isolated += 1
        env.inject(r)
        r = good(static=False)
        env.inject(r, flits=[Flit(r.h.encode()), Flit(5, last=True)])           # header not last
        r = good(static=False)
        env.inject(r, flits=[Flit(r.h.encode(), last=True, poison=True)])       # poisoned: POISONED
        r = good(static=True)
        r.h.group = 200
        env.inject(r, flits=[Flit(r.h.encode(), last=True, poison=True)])       # poison before BAD_GROUP
        r = good(static=False)
        env.inject(r, flits=[Flit(r.h.encode(), poison=True), Flit(7, last=True, poison=True)])  # and not last
        # Translation failures: an unconfigured destination (ISOLATION), an index out of bounds.
        r = env.make_request(static=False, fanout=3)
        if (env.P - 1) not in r.dsts:
            r.dsts = sorted(r.dsts[:2] + [env.P - 1])
            r.h.mask = sum(1 << d for d in r.dsts)
            env.fix_addrs(r)
        env.inject(r)
        r = fix_dsts(good(static=False))
        r.h.index = env.rows + int(rng.integers(0, 100))
        env.inject(env.fix_addrs(r))
        # A read past the end of its row (the translated path checks it; deferred: the egress does).
        last = env.row_bytes // (env.W // 8)
        if not env.defer and last - env.max_length < 1024:
            r = fix_dsts(good(static=False))
            r.h.offset = min(1023, last - r.h.length + 1 + int(rng.integers(0, 4)))
            env.inject(env.fix_addrs(r))
        if not env.unit:     # an arbitrary AL-TLB fault, only the Python translator can make one
            r = fix_dsts(good(static=False))
            r.doomed = ErrorCode.TLB_FAULT
            r.failing = {r.dsts[0]}
            env.inject(r)
        # Responses: a mistyped one and a poisoned one (each fails its reduction), junk, stale tags.
        r = fix_dsts(good(static=False, length=3))
        r.bad_resp[r.dsts[0]] = "etype"
        env.inject(r)
        r = fix_dsts(good(static=False, length=2))
        r.bad_resp[r.dsts[-1]] = "poison"
        env.inject(r)
        r = fix_dsts(good(static=False))
        r.bad_resp[r.dsts[0]] = "cut"          # header only: aborted LENGTH_MISMATCH, not left to time out
        env.inject(r)
        now = env.cycler.cycle
        env.send_junk(now + 50, Packet(Header(opcode=Opcode.READ_RESP, src=1, dst=0, length=2), [1, 2]))
        env.send_junk(now + 60, Packet(Header(opcode=Opcode.WRITE, src=1, dst=0, length=0, addr=16), []))
        env.send_stale(now + 70, int(rng.integers(0, env.p["entries"])))
        await env.cycler.cycles(100)
    await env.drain()
    assert isolated > 0, "no static request from a non-member was sent"
    dut._log.info(f"expected counters {dict(env.expected_counts)}; model stale {env.model.stale}")


@cocotb.test()
async def test_timeout(dut):
    """A destination that never answers: the source gets ERROR(TIMEOUT), no hang; others unaffected."""
    env, s = _env(dut, gap=0.1, stall=0.1, lat=[10, 60])
    await env.start(static_groups=0)
    for i in range(s.get("requests", 12)):
        r = env.make_request(static=False, fanout=int(env.rng.integers(2, 5)), length=2)
        if i % 3 == 0:
            r.silent = {r.dsts[-1]}
            r.expect_timeout = True
        env.inject(r)
    await env.drain(timeout=env.p["timeout"] * 4)
    assert env.model.timeouts == len(range(0, s.get("requests", 12), 3))


@cocotb.test()
async def test_full(dut):
    """More requests than buffer entries with slow destinations: ``req`` is backpressured, none is
    dropped, everything completes."""
    env, s = _env(dut, gap=0.0, stall=0.0, lat=[300, 400])
    await env.start(static_groups=0)
    n = env.p["entries"] + s.get("extra", 8)
    for _ in range(n):
        env.inject(env.make_request(static=False, fanout=2, length=1))
    await env.drain()
    assert env.model.completed == n
    limit = env.p["outstanding"] or env.p["entries"]
    assert env.max_in_use == limit, f"max in use {env.max_in_use}, expected {limit}"
    assert env.req_refused > 0, "req was never backpressured"


@cocotb.test()
async def test_bad_answers(dut):
    """Among good traffic: destinations answering with an error code (header only, or with a payload that
    must be dropped; once twice back to back; header only and poisoned: POISONED), duplicated answers, answers from ports that were not asked. An error code aborts its
    entry with that code (ERROR to the requester; the others' answers are then stale); a duplicate is
    dropped whole and counted in ``duplicates``, an unasked port's answer in ``bad_responses``; neither
    contributes, so the result is the reduction of the distinct contributions in arrival order."""
    env, s = _env(dut, gap=0.0, stall=0.1, lat=[10, 60])     # gap 0: answers back to back
    await env.start()
    rng = env.rng
    codes = [ErrorCode.TLB_FAULT, ErrorCode.ISOLATION, ErrorCode.OUT_OF_BOUNDS]
    for _ in range(s.get("rounds", 3)):
        for _ in range(3):
            env.inject(env.make_request())
        # Error-coded answers: header only, and with a payload.
        for with_payload in (False, True):
            r = env.make_request(static=bool(rng.random() < 0.3), fanout=int(rng.integers(1, 4)))
            d = int(rng.choice(r.dsts))
            r.err_resp[d] = (int(rng.choice(codes).value), with_payload)
            if not with_payload:
                r.dup = {d}          # the error answer twice, back to back
            env.inject(r)
        # A header-only error answer that arrives poisoned: POISONED.
        r = env.make_request(static=bool(rng.random() < 0.3), fanout=int(rng.integers(1, 4)))
        d = int(rng.choice(r.dsts))
        r.err_resp[d] = (int(rng.choice(codes).value), False)
        r.err_poison = {d}
        env.inject(r)
        # A duplicated answer (fan-out >= 2 so the entry is live when it arrives).
        r = env.make_request(static=False, fanout=int(rng.integers(2, env.P + 1)))
        r.dup = {int(rng.choice(r.dsts))}
        r.late = True
        env.inject(r)
        # Answers from ports that were not asked: one inside 0..ports-1, one beyond.
        r = env.make_request(static=False, fanout=int(rng.integers(1, env.P)))
        others = [p for p in range(env.P) if p not in r.dsts]
        r.unasked = [int(rng.choice(others))] + ([int(rng.integers(env.P, 64))] if env.P < 64 else [])
        r.late = True
        env.inject(r)
        await env.cycler.cycles(150)
    await env.drain()
    dut._log.info(f"expected counters {dict(env.expected_counts)}; model aborts {env.model.aborts}, "
                  f"stale {env.model.stale}")
    assert env.expected_counts["duplicates"] == 2 * s.get("rounds", 3)
    assert env.model.aborts == 3 * s.get("rounds", 3)
    # Dropping, verdicts and aborts cost no response cycle here (no translation aborts, no timeouts).
    assert env.resp_stalls == 0, f"resp not ready in {env.resp_stalls} cycles with a flit waiting"


class _Shut:
    """A gate that never opens: the monitor holds its stream off."""

    def open(self):
        return False


@cocotb.test()
async def test_early_answers(dut):
    """A misbehaving destination answers an entry between its allocation and its fan-out, guessing its tag
    (the buffer takes the lowest free entry and bumps its generation). ``rd`` (and ``translate``) is held
    off, so the fan-out of a request A (to every port) stalls and the entry of the request B behind it
    waits allocated, its fan-out not started; then answers with B's tag arrive: a payload answer from a
    destination B will ask, and a header-only error-coded one. Each is counted ``stale`` (once per flit)
    and changes nothing: once ``rd`` runs, B completes bit-exact from its real answers (the model counts
    the early answers stale: B is not in flight for it before its first read)."""
    env, s = _env(dut, gap=0.0, stall=0.0, lat=[10, 40])
    await env.start(static_groups=0)
    rng = env.rng
    EB = max(1, (env.p["entries"] - 1).bit_length())
    gen_mask = (1 << (16 - EB)) - 1
    last_gen = collections.Counter()          # entry -> generation of its last allocation (0: never)
    early = 0
    for _ in range(s.get("rounds", 4)):
        assert int(dut.in_use.value) == 0
        a = env.make_request(static=False, fanout=env.P, length=1)
        b = env.make_request(static=False, fanout=int(rng.integers(2, env.P + 1)),
                             length=int(rng.integers(1, env.max_length + 1)))
        gate, env.rd.gate = env.rd.gate, _Shut()
        if not env.defer:               # and translations: A's fan-out waits for them
            tgate, env.translator.stall = env.translator.stall, _Shut()
        env.inject(a)
        env.inject(b)
        await env.cycler.until(lambda: int(dut.in_use.value) == 2, timeout=200, what="two entries allocated")
        await env.cycler.cycles(4)
        rtag = 1 | (((last_gen[1] + 1) & gen_mask) << EB)      # B's entry: 1 (A holds entry 0)
        h = b.h
        d = int(rng.choice(b.dsts))
        hdr = Header(opcode=Opcode.RED_READ_RESP, src=d, dst=h.src, length=h.length, etype=h.etype,
                     redop=h.redop, **rtag_to_header(rtag))
        payload = [int(rng.integers(0, 1 << 62)) for _ in range(h.length)]
        now = env.cycler.cycle
        env.resp.schedule(now + 1, Packet(hdr, payload).flits(env.W), ("resp", rtag, hdr))
        e = int(rng.choice([x for x in b.dsts if x != d]))
        ehdr = dataclasses.replace(hdr, src=e, code=ErrorCode.TLB_FAULT.value)
        env.resp.schedule(now + 2, Packet(ehdr, []).flits(env.W), ("err", rtag, ehdr))
        early += h.length + 1
        await env.cycler.until(lambda: env.resp.idle, timeout=200, what="the early answers")
        await env.cycler.cycles(4)
        assert not b.read_seen, "B's fan-out started before its early answers were taken"
        env.rd.gate = gate
        if not env.defer:
            env.translator.stall = tgate
        await env.drain()
        assert b.rtag == rtag, f"B got tag {b.rtag:#x}, the test guessed {rtag:#x}"
        for r in (a, b):
            last_gen[r.rtag & env.entry_mask] = r.rtag >> EB
    assert env.model.stale == early, f"model stale {env.model.stale}, early answers' flits {early}"
    assert env.model.completed == 2 * s.get("rounds", 4)
