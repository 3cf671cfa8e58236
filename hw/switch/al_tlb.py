"""The Address-Lookup TLB (AL-TLB): translates (multimem group, algebraic index, destination GPU) to the
destination's physical row address, with isolation checks, non-blocking misses and a CAM cache.

Translation scheme
------------------
One :class:`~hw.switch.translate_if.TranslateRequest` names one destination, so a request with ``d``
destinations is ``d`` lookups. One AL-TLB does **one translation per cycle**; the intended placement is
one instance per switch egress port (per-destination banks: the egress that rewrites a packet's header
for its GPU translates for that GPU only), which gives a ``d``-destination ``dymultimem`` packet its ``d``
translations in the same cycle on ``d`` ports. The key carries ``dst`` anyway, so one instance may serve
several ports. See ``docs/al_tlb.md``.

Contract
--------
* ``tr`` (translator side of :func:`~hw.switch.translate_if.translate_signature`): ``tr.req`` in,
  ``tr.resp`` out, responses matched by ``tag`` and possibly out of order (a hit overtakes a miss).
* ``cfg``: :class:`TlbConfig` writes, always ready. ``SET`` loads group ``group``'s member mask and tensor
  bound (``rows`` valid indices) and flushes the group's cached translations; mask 0 unconfigures.
  ``FLUSH`` only drops the group's cached translations (end of a layer: the destinations' memory managers
  reset their epoch). A write to a handle >= ``groups``, with mask bits for ports that do not exist or
  ``rows`` above 2**18 changes nothing and counts ``CFG_ERRORS``. A write takes effect for requests
  accepted in the same cycle or later; misses already in flight for the group are answered but not cached.
* ``mem``: the backing-table read path (:func:`~hw.switch.backing_if.backing_signature`). A read's
  ``tag`` is ``gen << mshr_bits | mshr``: the MSHR that waits for it and that MSHR's 3..7-bit generation
  (``mshr_bits = ceil(log2(mshrs))``, at least 1), which advances each time one of its reads times out.
* ``counters``: 32-bit event counters, indexed by :class:`TlbCounter`; each counts its event a cycle later
  (``BAD_RESPONSES`` and ``STALE_RESPONSES`` two cycles: the response is looked up in the owed tags a cycle
  after it arrives).
* Checks (every request, before its translation is used): the group must be configured, and ``src`` and
  ``dst`` members of it -- else an ``ISOLATION`` response; ``index`` below the group's ``rows`` -- else
  ``OUT_OF_BOUNDS``. A backing error (``TLB_FAULT``, ``BUFFER_FULL``, ...) is returned to every request
  waiting on that miss and is not cached. Each error response increments its counter. Nothing is dropped.
* Timeout (always on): a backing read not answered within ``timeout`` cycles is abandoned. Its timer
  starts in the cycle the read is queued for ``mem.req`` (so reads behind a stuck ``mem.req`` time out
  too) and expires ``timeout + 1`` cycles later, i.e. ``timeout`` cycles after ``mem.req`` took the read
  when ``mem.req`` is ready; a response that arrives by then (the expiry cycle included) fills as usual.
  On expiry every request waiting on the read (the primary and all coalesced ones, including one that
  joins in that very cycle) is answered ``TIMEOUT`` through the replay path, the MSHRs free as they
  answer, nothing is cached, ``READ_TIMEOUTS`` counts the read and ``TIMEOUT`` each answer. The read's
  tag is remembered as *owed* (one bit per tag value); its response, if it ever comes, is ignored and
  counted in ``STALE_RESPONSES`` (once: a second copy is a ``BAD_RESPONSES``). The MSHR's generation
  advances, so its next read carries another tag and a late response can neither fill the CAM nor answer
  a request that reuses the MSHR -- unless the MSHR times out ``2**gen_bits - 1`` more times first (at
  least ``(2**gen_bits - 1) * timeout`` cycles: 7 x ``timeout`` at 32 MSHRs) and a new read takes the old
  tag again, giving the owed response up.
* Latency: a hit is answered 3 cycles after it is accepted (2-cycle CAM + the response FIFO). A miss is
  answered ``backing latency + 7`` cycles after it is accepted (a penalty of latency + 4), or with
  ``TIMEOUT`` ``timeout + 7`` cycles after it when the backing latency exceeds ``timeout`` (no stalls).
* Throughput: one request accepted per cycle while hits flow. A miss takes an MSHR and waits without
  blocking later requests (hit-under-miss); a miss to a key already being fetched coalesces (one backing
  read per key); the answer is replayed through the pipeline once the fill arrives, taking one slot. When
  no MSHR is free, or a miss needs a new read and the ``mshrs``-deep backing-read queue is full (it also
  holds reads that timed out before ``mem.req`` took them), the missing request is recirculated and
  ``tr.req`` takes new requests only in the cycles the recirculation leaves free, until one frees: only
  this translator's input stalls, never the switch. ``tr.resp`` backpressure is absorbed by the
  ``resp_depth``-entry response FIFO, after which ``tr.req`` is backpressured too.

Blocks: the CAM (:class:`~hw.switch.cam.Cam`), the MSHRs (:class:`~hw.switch.mshr_file.MshrFile`: allocation,
fills, timeouts, replays), the owed tags (:class:`~hw.switch.owed_tags.OwedTags`), the group table and three
``lib.fifo`` queues (answers, recirculated requests, backing reads). The three-stage pipeline that joins
them, the configuration port and the counters are here.
"""

import enum as py_enum
from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import INDEX_BITS, MAX_PORTS, ErrorCode
from .backing_if import BACKING_TAG_BITS, BackingRequest, backing_signature
from .cam import Cam, CamOp
from .mshr_file import MshrFile, backing_tag_fields
from .owed_tags import OwedTags
from .timeouts import MAX_DERIVED_TIMEOUT
from .translate_if import TranslateRequest, TranslateResponse, translate_signature

__all__ = ["AlTlb", "TlbConfig", "TlbConfigOp", "TlbCounter", "INDEX_BITS", "MAX_ROWS", "tlb_key_fields",
           "backing_tag_fields", "DEFAULT_TIMEOUT", "MAX_TIMEOUT"]

MAX_ROWS = 1 << INDEX_BITS
DEFAULT_TIMEOUT = 8192      # cycles; the reduction engine's default too
MAX_TIMEOUT = MAX_DERIVED_TIMEOUT     # 2**26: room for the DySHARP switch's derived timeouts


class TlbConfigOp(enum.Enum, shape=1):
    SET = 0
    FLUSH = 1


class TlbConfig(data.Struct):
    op: TlbConfigOp
    group: 8
    mask: MAX_PORTS
    rows: INDEX_BITS + 1


class TlbCounter(py_enum.IntEnum):
    HITS = 0            #: requests answered from the CAM
    MISSES = 1          #: backing reads issued (primary misses)
    COALESCED = 2       #: misses that joined an outstanding read of the same key
    RECIRCULATED = 3    #: misses that found every MSHR busy or the read queue full (each retry counts)
    FILLS = 4           #: translations inserted into the CAM
    REPLAYS = 5         #: answers delivered from a filled MSHR
    BAD_RESPONSES = 6   #: backing responses whose tag names no outstanding or timed-out read (ignored)
    CFG_ERRORS = 7      #: refused configuration writes
    ISOLATION = 8       #: ISOLATION answers
    OUT_OF_BOUNDS = 9   #: OUT_OF_BOUNDS answers
    TLB_FAULT = 10      #: TLB_FAULT answers (from the backing table)
    BUFFER_FULL = 11    #: BUFFER_FULL answers (from the backing table)
    OTHER_ERRORS = 12   #: answers with any other error code from the backing table
    READ_TIMEOUTS = 13  #: backing reads abandoned after ``timeout`` cycles without a response
    TIMEOUT = 14        #: TIMEOUT answers (every request that waited on a read that timed out)
    STALE_RESPONSES = 15  #: backing responses to reads that had timed out (ignored)


N_COUNTERS = len(TlbCounter)


def _bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


def tlb_key_fields(ports: int, groups: int) -> tuple[int, int, int]:
    """(dst bits, group bits, key width) of the CAM key ``{group, dst, index}`` (index in the low bits)."""
    db, gb = _bits(ports), _bits(groups)
    return db, gb, INDEX_BITS + db + gb


class AlTlb(wiring.Component):
    """AL-TLB: (group, index, dst) -> row address; 1 translation/cycle, 3-cycle hits, non-blocking misses.

    Parameters: ``ports`` (GPU ports, 2..64: mask width and ``dst``/``src`` range), ``groups`` (group
    handles, 1..256), ``entries`` (CAM entries, power of two 16..1024), ``mshrs`` (miss-status holding
    registers, 1..32), ``resp_depth`` (response FIFO entries, 4..64), ``timeout`` (cycles a backing read
    may take before its waiters are answered ``TIMEOUT``, 16..2**26; default 8192, 8 x the 1000-cycle
    backing latency the benchmark assumes; always on: 2**26 cycles, 43 ms, is the practical "off"; the
    DySHARP switch sizes it from its buffers, :mod:`hw.switch.timeouts`)."""

    def __init__(self, *, ports: int = 8, groups: int = 16, entries: int = 1024, mshrs: int = 32,
                 resp_depth: int = 8, timeout: int = DEFAULT_TIMEOUT):
        if not isinstance(ports, int) or not 2 <= ports <= MAX_PORTS:
            raise ValueError(f"ports must be an integer in 2..{MAX_PORTS}, got {ports!r}")
        if not isinstance(groups, int) or not 1 <= groups <= 256:
            raise ValueError(f"groups must be an integer in 1..256, got {groups!r}")
        if not isinstance(entries, int) or not 16 <= entries <= 1024 or entries & (entries - 1):
            raise ValueError(f"entries must be a power of two in 16..1024, got {entries!r}")
        if not isinstance(mshrs, int) or not 1 <= mshrs <= 32:
            raise ValueError(f"mshrs must be an integer in 1..32, got {mshrs!r}")
        if not isinstance(resp_depth, int) or not 4 <= resp_depth <= 64:
            raise ValueError(f"resp_depth must be an integer in 4..64, got {resp_depth!r}")
        if not isinstance(timeout, int) or not 16 <= timeout <= MAX_TIMEOUT:
            raise ValueError(f"timeout must be an integer in 16..{MAX_TIMEOUT} cycles, got {timeout!r}")
        self.ports = ports
        self.groups = groups
        self.entries = entries
        self.mshrs = mshrs
        self.resp_depth = resp_depth
        self.timeout = timeout
        self.mshr_bits, self.gen_bits = backing_tag_fields(mshrs)
        self.dst_bits, self.group_bits, self.key_width = tlb_key_fields(ports, groups)
        super().__init__({
            "tr": In(translate_signature()),
            "mem": Out(backing_signature()),
            "cfg": In(stream.Signature(TlbConfig)),
            "counters": Out(data.ArrayLayout(32, N_COUNTERS)),
        })

    def _key(self, req):
        return Cat(req.index, req.dst[:self.dst_bits], req.group[:self.group_bits])

    def elaborate(self, platform):
        m = Module()
        kw = self.key_width
        group_shift = INDEX_BITS + self.dst_bits
        group_field = ((1 << self.group_bits) - 1) << group_shift

        req_layout = data.Layout.cast(TranslateRequest)
        resp_layout = data.Layout.cast(TranslateResponse)
        m.submodules.cam = cam = Cam(entries=self.entries, key_width=kw, value_width=48)
        m.submodules.out_fifo = out_fifo = fifo.SyncFIFO(width=resp_layout.size, depth=self.resp_depth)
        m.submodules.recirc = recirc = fifo.SyncFIFO(width=req_layout.size, depth=3)
        m.submodules.memq = memq = fifo.SyncFIFO(width=data.Layout.cast(BackingRequest).size, depth=self.mshrs)
        m.submodules.mshr = mshr = MshrFile(mshrs=self.mshrs, key_width=kw, timeout=self.timeout,
                                            group_bits=self.group_bits, group_shift=group_shift)
        glayout = data.StructLayout({"mask": self.ports, "rows": INDEX_BITS + 1})
        m.submodules.gtab = gtab = memory.Memory(shape=glayout, depth=self.groups, init=[])
        gw = gtab.write_port()
        gr = gtab.read_port(transparent_for=(gw,))

        counters = self.counters
        incs = {c: Const(0, 1) for c in TlbCounter}

        # ---- streams out of the FIFOs ---------------------------------------------------------------
        m.d.comb += [
            self.tr.resp.valid.eq(out_fifo.r_rdy),
            self.tr.resp.payload.eq(out_fifo.r_data),
            out_fifo.r_en.eq(self.tr.resp.ready),
            self.mem.req.valid.eq(memq.r_rdy),
            self.mem.req.payload.eq(memq.r_data),
            memq.r_en.eq(self.mem.req.ready),
        ]

        # ---- pipeline registers ---------------------------------------------------------------------
        item_layout = data.StructLayout({"req": TranslateRequest, "replay": 1, "pre_err": 1, "addr": 48,
                                         "code": 8})
        p1_valid, p1 = Signal(name="p1_valid"), Signal(item_layout, name="p1")
        p2_valid, p2 = Signal(name="p2_valid"), Signal(item_layout, name="p2")
        p2_err = Signal(8, name="p2_err")

        # ---- stage A: choose what enters the pipeline (replay > recirculation > new request) ---------
        replay_any = mshr.replay_valid
        out_ok = Signal(name="out_ok")
        m.d.comb += out_ok.eq(out_fifo.level + p1_valid + p2_valid + 1 <= self.resp_depth)
        take_replay = Signal(name="take_replay")
        take_recirc = Signal(name="take_recirc")
        take_new = Signal(name="take_new")
        m.d.comb += [
            take_replay.eq(out_ok & replay_any),
            take_recirc.eq(out_ok & ~replay_any & recirc.r_rdy),
            self.tr.req.ready.eq(out_ok & ~replay_any & ~recirc.r_rdy),
            take_new.eq(self.tr.req.ready & self.tr.req.valid),
            recirc.r_en.eq(take_recirc),
        ]
        issue = Signal(TranslateRequest, name="issue")
        m.d.comb += issue.eq(Mux(take_recirc, recirc.r_data, self.tr.req.payload))
        pre_err = Signal(name="pre_err")
        m.d.comb += pre_err.eq((issue.group >= self.groups) | (issue.src >= self.ports) |
                               (issue.dst >= self.ports))
        is_lookup = Signal(name="is_lookup")
        m.d.comb += is_lookup.eq(take_recirc | take_new)
        m.d.comb += [
            cam.lookup_valid.eq(is_lookup & ~pre_err),
            cam.lookup_key.eq(self._key(issue)),
            gr.addr.eq(issue.group[:self.group_bits]),
        ]
        m.d.comb += mshr.replay_take.eq(take_replay)
        m.d.sync += p1_valid.eq(take_replay | is_lookup)
        with m.If(take_replay):
            m.d.sync += [p1.replay.eq(1), p1.pre_err.eq(0), p1.req.eq(0), p1.req.tag.eq(mshr.replay.tag),
                         p1.addr.eq(mshr.replay.addr), p1.code.eq(mshr.replay.code)]
        with m.Else():
            m.d.sync += [p1.replay.eq(0), p1.pre_err.eq(pre_err), p1.req.eq(issue), p1.addr.eq(0),
                         p1.code.eq(0)]

        # ---- stage B: isolation and bounds check against the group table ------------------------------
        g = gr.data
        member_src = Signal(name="member_src")
        member_dst = Signal(name="member_dst")
        m.d.comb += [
            member_src.eq(g.mask.bit_select(p1.req.src[:self.dst_bits], 1)),
            member_dst.eq(g.mask.bit_select(p1.req.dst[:self.dst_bits], 1)),
        ]
        isolated = p1.pre_err | (g.mask == 0) | ~member_src | ~member_dst
        check = Mux(isolated, ErrorCode.ISOLATION.value,
                    Mux(p1.req.index >= g.rows, ErrorCode.OUT_OF_BOUNDS.value, ErrorCode.NONE.value))
        m.d.sync += [p2_valid.eq(p1_valid), p2.eq(p1), p2_err.eq(Mux(p1.replay, 0, check))]

        # ---- backing responses (fills) --------------------------------------------------------------
        cfg = self.cfg
        resp = self.mem.resp
        m.d.comb += [cfg.ready.eq(1), resp.ready.eq(~cfg.valid)]     # cfg owns the CAM write port first
        fill = Signal(name="fill")
        m.d.comb += fill.eq(resp.valid & resp.ready)
        resp_tag = resp.payload.tag
        fill_code = Signal(8, name="fill_code")
        m.d.comb += fill_code.eq(resp.payload.code.as_value())
        m.d.comb += [
            mshr.fill.eq(fill),
            mshr.fill_tag.eq(resp_tag),
            mshr.fill_addr.eq(resp.payload.addr),
            mshr.fill_code.eq(fill_code),
        ]
        fill_ok, fill_key, tmo, tmo_key = mshr.fill_ok, mshr.fill_key, mshr.tmo, mshr.tmo_key
        incs[TlbCounter.READ_TIMEOUTS] = tmo

        # ---- stage C: answer, or park the miss in an MSHR, or recirculate -----------------------------
        p2_key = Signal(kw, name="p2_key")
        m.d.comb += p2_key.eq(self._key(p2.req))
        lookup2 = p2_valid & ~p2.replay
        ok2 = Signal(name="ok2")
        hit2 = Signal(name="hit2")
        miss2 = Signal(name="miss2")
        m.d.comb += [
            ok2.eq(lookup2 & (p2_err == ErrorCode.NONE.value)),
            hit2.eq(ok2 & cam.result_hit),
            miss2.eq(ok2 & ~cam.result_hit),
        ]
        m.d.comb += mshr.key.eq(p2_key)
        same_fill = Signal(name="same_fill")
        m.d.comb += same_fill.eq(fill_ok & (fill_key == p2_key))
        same_tmo = Signal(name="same_tmo")
        m.d.comb += same_tmo.eq(tmo & (tmo_key == p2_key))
        alloc = Signal(name="alloc")
        alloc_primary = Signal(name="alloc_primary")
        alloc_filled = Signal(name="alloc_filled")
        to_recirc = Signal(name="to_recirc")
        needs_read = Signal(name="needs_read")
        m.d.comb += [
            needs_read.eq(~same_fill & ~same_tmo & ~mshr.pending),
            alloc.eq(miss2 & mshr.free_any & (~needs_read | memq.w_rdy)),
            to_recirc.eq(miss2 & ~alloc),
            alloc_filled.eq(alloc & (same_fill | same_tmo)),
            alloc_primary.eq(alloc & needs_read),
            mshr.alloc.eq(alloc),
            mshr.alloc_primary.eq(alloc_primary),
            mshr.alloc_filled.eq(alloc_filled),
            mshr.alloc_tag.eq(p2.req.tag),
            mshr.alloc_addr.eq(Mux(same_fill, resp.payload.addr, 0)),
            mshr.alloc_code.eq(Mux(same_fill, fill_code, Mux(same_tmo, ErrorCode.TIMEOUT.value, 0))),
        ]
        incs[TlbCounter.HITS] = hit2
        incs[TlbCounter.MISSES] = alloc_primary
        incs[TlbCounter.COALESCED] = alloc & ~alloc_primary
        incs[TlbCounter.RECIRCULATED] = to_recirc

        push = Signal(name="push")
        out = Signal(TranslateResponse, name="out")
        out_code = Signal(8, name="out_code")
        m.d.comb += [
            push.eq((p2_valid & p2.replay) | (lookup2 & ~ok2) | hit2),
            out_code.eq(Mux(p2.replay, p2.code, p2_err)),
            out.addr.eq(Mux(p2.replay, p2.addr, Mux(hit2, cam.result_value, 0))),
            out.code.as_value().eq(out_code),
            out.tag.eq(p2.req.tag),
            out_fifo.w_en.eq(push),
            out_fifo.w_data.eq(out),
            recirc.w_en.eq(to_recirc),
            recirc.w_data.eq(p2.req),
        ]
        incs[TlbCounter.REPLAYS] = p2_valid & p2.replay
        known = []
        for c in ("ISOLATION", "OUT_OF_BOUNDS", "TLB_FAULT", "BUFFER_FULL", "TIMEOUT"):
            sel = push & (out_code == ErrorCode[c].value)
            incs[TlbCounter[c]] = sel
            known.append(out_code == ErrorCode[c].value)
        incs[TlbCounter.OTHER_ERRORS] = push & (out_code != ErrorCode.NONE.value) & ~Cat(*known).any()

        new_tag = mshr.new_tag
        breq = Signal(BackingRequest, name="breq")
        m.d.comb += [
            breq.group.eq(p2.req.group),
            breq.index.eq(p2.req.index),
            breq.dst.eq(p2.req.dst),
            breq.src.eq(p2.req.src),
            breq.tag.eq(new_tag),
            memq.w_en.eq(alloc_primary),
            memq.w_data.eq(breq),
        ]

        # ---- configuration, CAM write port ------------------------------------------------------------
        c = cfg.payload
        cfg_legal = Signal(name="cfg_legal")
        extra_mask = c.mask >> self.ports if self.ports < MAX_PORTS else Const(0, 1)
        m.d.comb += cfg_legal.eq((c.group < self.groups) &
                                 ((c.op == TlbConfigOp.FLUSH) | ((extra_mask == 0) & (c.rows <= MAX_ROWS))))
        flush = Signal(name="flush")
        m.d.comb += flush.eq(cfg.valid & cfg_legal)
        incs[TlbCounter.CFG_ERRORS] = cfg.valid & ~cfg_legal
        insert = Signal(name="insert")
        m.d.comb += insert.eq(fill_ok & (fill_code == ErrorCode.NONE.value) & ~mshr.fill_flushed)
        incs[TlbCounter.FILLS] = insert
        cfg_key = Signal(kw, name="cfg_key")
        m.d.comb += cfg_key.eq(c.group[:self.group_bits] << group_shift)
        m.d.comb += [
            gw.en.eq(flush & (c.op == TlbConfigOp.SET)),
            gw.addr.eq(c.group[:self.group_bits]),
            gw.data.mask.eq(c.mask[:self.ports]),
            gw.data.rows.eq(c.rows),
            cam.write_valid.eq(flush | insert),
            cam.write_op.eq(Mux(flush, CamOp.INVALIDATE, CamOp.INSERT)),
            cam.write_key.eq(Mux(flush, cfg_key, fill_key)),
            cam.write_mask.eq(group_field),
            cam.write_value.eq(resp.payload.addr),
        ]
        flush_group = c.group[:self.group_bits]
        m.d.comb += [
            mshr.flush.eq(flush),
            mshr.flush_group.eq(flush_group),
            mshr.alloc_flushed.eq(flush & (p2.req.group[:self.group_bits] == flush_group)),
        ]

        # Owed tags: set by a timeout, cleared by the late response or, after the generation has wrapped,
        # by a new read that takes the tag again (the old response is given up).
        m.submodules.owed_tags = owed = OwedTags(tag_bits=BACKING_TAG_BITS)
        m.d.comb += [
            owed.timeout.eq(tmo), owed.timeout_tag.eq(mshr.tmo_tag),
            owed.response.eq(fill & ~fill_ok), owed.response_tag.eq(resp_tag),
            owed.reissue.eq(alloc_primary), owed.reissue_tag.eq(new_tag),
        ]
        incs[TlbCounter.BAD_RESPONSES] = owed.bad
        incs[TlbCounter.STALE_RESPONSES] = owed.stale

        # Internal state, for formal harnesses (verif/formal/al_tlb.py).
        self.state = SimpleNamespace(cam=cam, busy=mshr.busy, filled=mshr.filled, primary=mshr.primary,
                                     mkey=mshr.mkey, mage=mshr.mage, hit=hit2, key=p2_key, out=out,
                                     take_replay=take_replay, replay_oh=mshr.replay_oh)
        # The counters add a cycle after their event: the events are registered first, so that a counter's
        # 32-bit carry chain does not follow the MSHR and fill logic in one cycle (the 640 ps port clock; in
        # the integrated switch the fill bridge's response register feeds that logic).
        for cnt, inc in incs.items():
            event = Signal(name=f"count_{cnt.name.lower()}")
            m.d.sync += event.eq(inc)
            with m.If(event):
                m.d.sync += counters[int(cnt)].eq(counters[int(cnt)] + 1)
        return m
