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

Blocks: the three-stage lookup pipeline (:mod:`hw.switch.tlb_stages`: issue, check, resolve), the CAM
(:class:`~hw.switch.cam.Cam`), the MSHRs (:class:`~hw.switch.mshr_file.MshrFile`: allocation, fills,
timeouts, replays), the owed tags (:class:`~hw.switch.owed_tags.OwedTags`), the group table, the
configuration port (:class:`TlbConfigPort`, which owns the CAM's write port), three ``lib.fifo`` queues
(answers, recirculated requests, backing reads) and the counters (:class:`~hw.event_counters.EventCounters`).
"""

import enum as py_enum
from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal
from amaranth.lib import data, enum, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..event_counters import EventCounters
from ..packet import GROUP_BITS, INDEX_BITS, MAX_PORTS, MAX_SWITCH_PORTS, ErrorCode, header_format, widened
from .backing_if import BACKING_TAG_BITS, backing_request_layout, backing_signature
from .cam import Cam, CamOp
from .mshr_file import MshrFile, backing_tag_fields, fills_signature, flush_signature
from .owed_tags import OwedTags
from .timeouts import MAX_DERIVED_TIMEOUT
from .tlb_stages import TlbCheck, TlbIssue, TlbResolve, group_entry_layout, tlb_key_fields
from .translate_if import TranslateResponse, translate_request_layout, translate_signature

__all__ = ["AlTlb", "TlbConfig", "TlbConfigOp", "TlbConfigPort", "TlbCounter", "INDEX_BITS", "MAX_ROWS",
           "tlb_key_fields", "backing_tag_fields", "DEFAULT_TIMEOUT", "MAX_TIMEOUT", "tlb_config_layout"]

MAX_ROWS = 1 << INDEX_BITS   # up to 64 ports; past them 1 << header_format(ports).index_bits
DEFAULT_TIMEOUT = 8192      # cycles; the reduction engine's default too
MAX_TIMEOUT = MAX_DERIVED_TIMEOUT     # 2**26: room for the DySHARP switch's derived timeouts
_ADDR = TranslateResponse.as_shape()["addr"].shape


class TlbConfigOp(enum.Enum, shape=1):
    SET = 0
    FLUSH = 1


class TlbConfig(data.Struct):
    op: TlbConfigOp
    group: GROUP_BITS
    mask: MAX_PORTS
    rows: INDEX_BITS + 1


def tlb_config_layout(ports: int | None = None):
    """:class:`TlbConfig` in the header format of a ``ports``-port switch (:func:`hw.packet.widened`)."""
    return widened(TlbConfig, ports, mask="max_ports", rows=lambda fmt: fmt.index_bits + 1)


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


class TlbConfigPort(wiring.Component):
    """The configuration port and the CAM's write port. ``cfg`` is always ready. A legal write (``group``
    below ``groups``; a ``SET``'s mask within the ports and ``rows`` at most :data:`MAX_ROWS`) flushes the
    group -- ``flush``, the CAM invalidates its translations (``cam_*``) -- and a ``SET`` writes its entry
    (``group_w``); another is counted (``cfg_error``). A fill (``fills``: code ``NONE``, its group not
    flushed meanwhile) is inserted into the CAM (``insert``) in a cycle without a write: the AL-TLB holds
    backing responses off while ``cfg.valid``."""

    def __init__(self, *, ports: int, groups: int):
        self.ports, self.groups = ports, groups
        _, gb, kw = tlb_key_fields(ports, groups)
        super().__init__({
            "cfg": In(stream.Signature(tlb_config_layout(ports))),
            "fills": In(fills_signature(kw)),
            "group_w": In(memory.WritePort.Signature(addr_width=(groups - 1).bit_length(),
                                                     shape=group_entry_layout(ports))),
            "flush": Out(flush_signature(gb)),
            "cam_write_valid": Out(1), "cam_write_op": Out(CamOp), "cam_write_key": Out(kw),
            "cam_write_mask": Out(kw), "cam_write_value": Out(_ADDR),
            "cfg_error": Out(1), "insert": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        db, gb, kw = tlb_key_fields(self.ports, self.groups)
        cfg, c, fills = self.cfg, self.cfg.payload, self.fills
        legal = Signal(name="cfg_legal")
        index_bits = header_format(self.ports).index_bits
        extra_mask = c.mask >> self.ports if self.ports < len(c.mask) else Const(0, 1)
        m.d.comb += legal.eq((c.group < self.groups) &
                             ((c.op == TlbConfigOp.FLUSH) | ((extra_mask == 0) & (c.rows <= 1 << index_bits))))
        flush = self.flush.valid
        m.d.comb += [
            cfg.ready.eq(1),
            flush.eq(cfg.valid & legal),
            self.flush.group.eq(c.group[:gb]),
            self.cfg_error.eq(cfg.valid & ~legal),
            self.insert.eq(fills.valid & (fills.code == ErrorCode.NONE.value) & ~fills.flushed),
            self.group_w.en.eq(flush & (c.op == TlbConfigOp.SET)),
            self.group_w.addr.eq(c.group[:gb]),
            self.group_w.data.mask.eq(c.mask[:self.ports]),
            self.group_w.data.rows.eq(c.rows),
        ]
        group_shift = index_bits + db
        cfg_key = Signal(kw, name="cfg_key")
        m.d.comb += cfg_key.eq(c.group[:gb] << group_shift)
        m.d.comb += [
            self.cam_write_valid.eq(flush | self.insert),
            self.cam_write_op.eq(Mux(flush, CamOp.INVALIDATE, CamOp.INSERT)),
            self.cam_write_key.eq(Mux(flush, cfg_key, fills.key)),
            self.cam_write_mask.eq(((1 << gb) - 1) << group_shift),
            self.cam_write_value.eq(fills.addr),
        ]
        return m


class AlTlb(wiring.Component):
    """AL-TLB: (group, index, dst) -> row address; 1 translation/cycle, 3-cycle hits, non-blocking misses.

    Parameters: ``ports`` (GPU ports, 2..128: mask width and ``dst``/``src`` range; past 64 the wide header
    format's widths, :func:`hw.packet.header_format`), ``groups`` (group
    handles, 1..256), ``entries`` (CAM entries, power of two 16..1024), ``mshrs`` (miss-status holding
    registers, 1..32), ``resp_depth`` (response FIFO entries, 4..64), ``timeout`` (cycles a backing read
    may take before its waiters are answered ``TIMEOUT``, 16..2**26; default 8192, 8 x the 1000-cycle
    backing latency the benchmark assumes; always on: 2**26 cycles, 43 ms, is the practical "off"; the
    DySHARP switch sizes it from its buffers, :mod:`hw.switch.timeouts`)."""

    def __init__(self, *, ports: int = 8, groups: int = 16, entries: int = 1024, mshrs: int = 32,
                 resp_depth: int = 8, timeout: int = DEFAULT_TIMEOUT):
        if not isinstance(ports, int) or not 2 <= ports <= MAX_SWITCH_PORTS:
            raise ValueError(f"ports must be an integer in 2..{MAX_SWITCH_PORTS}, got {ports!r}")
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
            "tr": In(translate_signature(ports)),
            "mem": Out(backing_signature(ports)),
            "cfg": In(stream.Signature(tlb_config_layout(ports))),
            "counters": Out(data.ArrayLayout(32, N_COUNTERS)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.cam = cam = Cam(entries=self.entries, key_width=self.key_width,
                                     value_width=Shape.cast(_ADDR).width)
        m.submodules.out_fifo = out_fifo = fifo.SyncFIFO(width=TranslateResponse.as_shape().size, depth=self.resp_depth)
        m.submodules.recirc = recirc = fifo.SyncFIFO(width=data.Layout.cast(translate_request_layout(self.ports)).size,
                                                     depth=3)
        m.submodules.memq = memq = fifo.SyncFIFO(width=data.Layout.cast(backing_request_layout(self.ports)).size,
                                                 depth=self.mshrs)
        m.submodules.mshr = mshr = MshrFile(mshrs=self.mshrs, key_width=self.key_width, timeout=self.timeout,
                                            group_bits=self.group_bits,
                                            group_shift=header_format(self.ports).index_bits + self.dst_bits)
        m.submodules.gtab = gtab = memory.Memory(shape=group_entry_layout(self.ports), depth=self.groups,
                                                 init=[])
        gw = gtab.write_port()
        gr = gtab.read_port(transparent_for=(gw,))
        geometry = dict(ports=self.ports, groups=self.groups)
        m.submodules.issue = issue = TlbIssue(**geometry)
        m.submodules.check = check = TlbCheck(**geometry)
        m.submodules.resolve = resolve = TlbResolve(**geometry)
        m.submodules.config = config = TlbConfigPort(**geometry)
        m.submodules.owed_tags = owed = OwedTags(tag_bits=BACKING_TAG_BITS)
        m.submodules.counters = counters = EventCounters(N_COUNTERS)

        # Stage A: replays first, then recirculated misses, then new requests, while the response FIFO has
        # room for everything in flight; a request starts its CAM lookup and group-table read.
        wiring.connect(m, mshr.replay, issue.replay)
        wiring.connect(m, recirc.r_stream, issue.recirc)
        wiring.connect(m, wiring.flipped(self.tr.req), issue.req)
        m.d.comb += [
            issue.room.eq(out_fifo.level + issue.next.valid + check.next.valid + 1 <= self.resp_depth),
            cam.lookup_valid.eq(issue.lookup_valid),
            cam.lookup_key.eq(issue.lookup_key),
            gr.addr.eq(issue.group),
        ]
        # Stage B: isolation and bounds against the group table.
        wiring.connect(m, issue.next, check.prev)
        m.d.comb += check.entry.eq(gr.data)
        # Stage C: answer, or park the miss in an MSHR, or recirculate it; the answers leave by tr.resp,
        # the backing reads by mem.req.
        wiring.connect(m, check.next, resolve.prev)
        m.d.comb += [resolve.cam_hit.eq(cam.result_hit), resolve.cam_value.eq(cam.result_value)]
        wiring.connect(m, resolve.alloc, mshr.alloc)
        wiring.connect(m, resolve.resp, out_fifo.w_stream)
        wiring.connect(m, resolve.recirc, recirc.w_stream)
        wiring.connect(m, resolve.read, memq.w_stream)
        wiring.connect(m, out_fifo.r_stream, wiring.flipped(self.tr.resp))
        wiring.connect(m, memq.r_stream, wiring.flipped(self.mem.req))

        # Backing responses fill the MSHRs (a configuration write owns the CAM write port first); fills
        # and timeouts answer the misses in stage C too, and fills go into the CAM.
        resp = self.mem.resp
        fill = resp.valid & resp.ready
        m.d.comb += [
            resp.ready.eq(~self.cfg.valid),
            mshr.fill.eq(fill),
            mshr.fill_tag.eq(resp.payload.tag),
            mshr.fill_addr.eq(resp.payload.addr),
            mshr.fill_code.eq(resp.payload.code),
        ]
        wiring.connect(m, mshr.fills, resolve.fills, config.fills)
        wiring.connect(m, mshr.expiry, resolve.expiry)

        # Configuration: the group table, flushes (of the CAM and the MSHRs waiting), the CAM write port.
        wiring.connect(m, wiring.flipped(self.cfg), config.cfg)
        wiring.connect(m, config.group_w, gw)
        wiring.connect(m, config.flush, mshr.flush, resolve.flush)
        for port in ("valid", "op", "key", "mask", "value"):
            m.d.comb += getattr(cam, f"write_{port}").eq(getattr(config, f"cam_write_{port}"))

        # Owed tags: set by a timeout, cleared by the late response or, after the generation has wrapped,
        # by a new read that takes the tag again (the old response is given up).
        m.d.comb += [
            owed.timeout.eq(mshr.expiry.valid), owed.timeout_tag.eq(mshr.expiry.tag),
            owed.response.eq(fill & ~mshr.fills.valid), owed.response_tag.eq(resp.payload.tag),
            owed.reissue.eq(mshr.alloc.primary), owed.reissue_tag.eq(mshr.alloc.new_tag),
        ]

        # Counters. The events are registered first, so that a counter's 32-bit carry chain does not follow
        # the MSHR and fill logic in one cycle (the 640 ps port clock; in the integrated switch the fill
        # bridge's response register feeds that logic): each counts a cycle after its event.
        alloc, out = mshr.alloc, resolve.resp
        code = out.payload.code.as_value()
        incs = {
            TlbCounter.HITS: resolve.hit,
            TlbCounter.MISSES: alloc.primary,
            TlbCounter.COALESCED: alloc.valid & ~alloc.primary,
            TlbCounter.RECIRCULATED: resolve.recirc.valid,
            TlbCounter.FILLS: config.insert,
            TlbCounter.REPLAYS: resolve.prev.valid & resolve.prev.item.replay,
            TlbCounter.BAD_RESPONSES: owed.bad,
            TlbCounter.CFG_ERRORS: config.cfg_error,
            TlbCounter.READ_TIMEOUTS: mshr.expiry.valid,
            TlbCounter.STALE_RESPONSES: owed.stale,
        }
        known = ("ISOLATION", "OUT_OF_BOUNDS", "TLB_FAULT", "BUFFER_FULL", "TIMEOUT")
        for c in known:
            incs[TlbCounter[c]] = out.valid & (code == ErrorCode[c].value)
        incs[TlbCounter.OTHER_ERRORS] = (out.valid & (code != ErrorCode.NONE.value) &
                                         ~Cat(code == ErrorCode[c].value for c in known).any())
        events = Signal(N_COUNTERS, name="count_events")
        m.d.sync += events.eq(Cat(incs[c] for c in TlbCounter))
        m.d.comb += [counters.strobe.eq(events), self.counters.eq(counters.count)]

        # Internal state, for formal harnesses (verif/formal/al_tlb.py).
        self.state = SimpleNamespace(cam=cam, busy=mshr.busy, filled=mshr.filled, primary=mshr.primary,
                                     mkey=mshr.mkey, mage=mshr.mage, hit=resolve.hit, key=resolve.alloc.key,
                                     out=out.payload, take_replay=issue.replay.valid & issue.replay.ready,
                                     replay_oh=mshr.replay_oh)
        return m
