"""The miss-status holding registers of the AL-TLB: misses waiting for a backing read, its fill or its
timeout, and their replay (see :mod:`hw.switch.al_tlb`)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import lowest_one, onehot_to_index, or_reduce
from ..packet import ErrorCode
from .backing_if import BACKING_TAG_BITS
from .translate_if import TAG_BITS, TranslateResponse

__all__ = ["MshrFile", "MshrAnswer", "backing_tag_fields", "alloc_signature", "fills_signature",
           "expiry_signature", "flush_signature"]

_ADDR = TranslateResponse.as_shape()["addr"].shape      # a row address, as the AL-TLB answers it
_CODE = ErrorCode.as_shape()


def backing_tag_fields(mshrs: int) -> tuple[int, int]:
    """(MSHR bits, generation bits) of a backing read's tag ``gen << mshr_bits | mshr``."""
    mb = max(1, (mshrs - 1).bit_length())
    return mb, BACKING_TAG_BITS - mb


class MshrAnswer(data.Struct):
    """What a filled MSHR answers its request with: the request's tag, the row address and an error code."""
    tag: TAG_BITS
    addr: _ADDR
    code: _CODE


def alloc_signature(key_width: int) -> wiring.Signature:
    """The allocator's side of an MSHR allocation (see :class:`MshrFile`)."""
    return wiring.Signature({
        "key": Out(key_width), "pending": In(1), "free_any": In(1), "new_tag": In(BACKING_TAG_BITS),
        "valid": Out(1), "primary": Out(1), "filled": Out(1), "flushed": Out(1),
        "tag": Out(TAG_BITS), "addr": Out(_ADDR), "code": Out(_CODE),
    })


def fills_signature(key_width: int) -> wiring.Signature:
    """A backing response that answers an outstanding read (``valid``): the read's key, the answer and
    whether the key's group was flushed while it waited."""
    return wiring.Signature({"valid": Out(1), "key": Out(key_width), "addr": Out(_ADDR), "code": Out(_CODE),
                             "flushed": Out(1)})


def expiry_signature(key_width: int) -> wiring.Signature:
    """A backing read that timed out (``valid``): its key and its tag."""
    return wiring.Signature({"valid": Out(1), "key": Out(key_width), "tag": Out(BACKING_TAG_BITS)})


def flush_signature(group_bits: int) -> wiring.Signature:
    """A group's cached translations are flushed (``valid``) in this cycle."""
    return wiring.Signature({"valid": Out(1), "group": Out(group_bits)})


class MshrFile(wiring.Component):
    """``mshrs`` MSHRs, each holding one missing request (its CAM key and tag) until it is answered.

    * **Allocate** (``alloc``, :func:`alloc_signature`): ``alloc.valid`` puts the request (``key``,
      ``tag``) in the lowest free MSHR (``free_any``: there is one). A *primary* (``primary``) owns the
      backing read it starts, tagged ``new_tag`` (the MSHR's number and generation); another *coalesces*
      onto a read of the same key already waiting (``pending``: some MSHR waits for ``key``). ``filled``
      allocates it already answered (``addr``, ``code``: the key's fill or timeout happens in this very
      cycle); ``flushed``: its group is being flushed in this cycle.
    * **Fill** (``fill``, a backing response this cycle with ``fill_tag``, ``fill_addr``, ``fill_code``):
      the primary whose tag it carries (``fills.valid``, :func:`fills_signature`; ``fills.key``,
      ``fills.flushed``: its key, and whether its group was flushed while it waited) and every MSHR
      waiting for that key are answered with it.
    * **Timeout** (``expiry``, :func:`expiry_signature`): a primary's read ``timeout`` cycles old and not
      filled in this cycle expires (``valid``, ``key``, ``tag``): the waiters for its key are answered
      ``TIMEOUT`` and its generation advances, so that its next read carries another tag.
    * **Replay** (``replay``, a stream of :class:`MshrAnswer`): the lowest answered MSHR's answer; taking
      it frees the MSHR.
    * **Flush** (``flush``, :func:`flush_signature`): waiting MSHRs of that group will not be cached
      (``group_shift``: where the group sits in a key).

    ``busy``, ``filled``, ``primary``, ``key``, ``age`` (per MSHR) and ``replay_oh`` are attributes for
    formal harnesses (``verif/formal/al_tlb.py``).
    """

    def __init__(self, *, mshrs: int, key_width: int, timeout: int, group_bits: int, group_shift: int):
        self.mshrs, self.key_width, self.timeout = mshrs, key_width, timeout
        self.group_bits, self.group_shift = group_bits, group_shift
        self.mshr_bits, self.gen_bits = backing_tag_fields(mshrs)   # a read's tag: {generation, MSHR number}
        if self.gen_bits < 1:
            raise ValueError(f"{mshrs} MSHRs leave no generation bits in a {BACKING_TAG_BITS}-bit backing tag")
        N = mshrs
        super().__init__({
            "alloc": In(alloc_signature(key_width)),
            "fill": In(1),
            "fill_tag": In(BACKING_TAG_BITS),
            "fill_addr": In(_ADDR),
            "fill_code": In(_CODE),
            "fills": Out(fills_signature(key_width)),
            "expiry": Out(expiry_signature(key_width)),
            "replay": Out(stream.Signature(MshrAnswer)),
            "flush": In(flush_signature(group_bits)),
        })
        self.busy = Signal(N, name="mshr_busy")
        self.filled = Signal(N, name="mshr_filled")
        self.primary = Signal(N, name="mshr_primary")     # owns the backing read (tag = its generation, number)
        self.mkey = [Signal(key_width, name=f"mshr_key_{j}", reset_less=True) for j in range(N)]
        self.mage = [Signal(timeout.bit_length(), name=f"mshr_age_{j}", reset_less=True) for j in range(N)]
        self.replay_oh = Signal(N, name="replay_oh")

    def elaborate(self, platform):
        m = Module()
        N, ib = self.mshrs, self.mshr_bits
        busy, filled, primary, mkey, mage = self.busy, self.filled, self.primary, self.mkey, self.mage
        flushed = Signal(N, name="mshr_flushed")     # group flushed meanwhile: answer, but do not cache
        # The MSHR's generation (advanced by each timeout, so that its next read carries a new tag) and the
        # answer it holds once filled.
        mgen = [Signal(self.gen_bits, name=f"mshr_gen_{j}") for j in range(N)]
        mtag = [Signal(TAG_BITS, name=f"mshr_tag_{j}", reset_less=True) for j in range(N)]
        maddr = [Signal(_ADDR, name=f"mshr_addr_{j}", reset_less=True) for j in range(N)]
        mcode = [Signal(_CODE, name=f"mshr_code_{j}", reset_less=True) for j in range(N)]
        waiting = Signal(N, name="mshr_waiting")
        m.d.comb += waiting.eq(busy & ~filled)

        # Replay: the lowest answered MSHR.
        ready_mshr = Signal(N, name="replay_ready")
        m.d.comb += ready_mshr.eq(busy & filled)
        m.d.comb += self.replay_oh.eq(lowest_one(m, ready_mshr, name="replay_lowest"))
        oh = self.replay_oh
        m.d.comb += [
            self.replay.valid.eq(ready_mshr.any()),
            self.replay.payload.tag.eq(or_reduce([Mux(oh[j], mtag[j], 0) for j in range(N)])),
            self.replay.payload.addr.eq(or_reduce([Mux(oh[j], maddr[j], 0) for j in range(N)])),
            self.replay.payload.code.eq(or_reduce([Mux(oh[j], mcode[j], 0) for j in range(N)])),
        ]

        # Fill: the primary whose read the response answers, and every MSHR waiting for its key.
        tag = self.fill_tag
        fid_oh = Signal(N, name="fill_oh")
        m.d.comb += fid_oh.eq(Cat((tag[:ib] == j) & (tag[ib:] == mgen[j]) for j in range(N)) &
                              waiting & primary & Mux(self.fill, Const(-1, N), 0))
        m.d.comb += [
            self.fills.valid.eq(fid_oh.any()),
            self.fills.key.eq(or_reduce([Mux(fid_oh[j], mkey[j], 0) for j in range(N)])),
            self.fills.flushed.eq((fid_oh & flushed).any()),
            self.fills.addr.eq(self.fill_addr),
            self.fills.code.eq(self.fill_code),
        ]
        fill_match = Signal(N, name="fill_match")
        m.d.comb += fill_match.eq(Cat(waiting[j] & (mkey[j] == self.fills.key) for j in range(N)) &
                                  Mux(self.fills.valid, Const(-1, N), 0))

        # Timeouts: a primary whose read is `timeout` cycles old and not filled in this cycle.
        expired = Signal(N, name="mshr_expired")
        m.d.comb += expired.eq(Cat(mage[j] >= self.timeout for j in range(N)) & waiting & primary & ~fid_oh)
        tmo_oh = lowest_one(m, expired, name="tmo_oh")      # at most one: primaries start in distinct cycles
        m.d.comb += [
            self.expiry.valid.eq(expired.any()),
            self.expiry.key.eq(or_reduce([Mux(tmo_oh[j], mkey[j], 0) for j in range(N)])),
            self.expiry.tag.eq(or_reduce([Mux(tmo_oh[j], Cat(Const(j, ib), mgen[j]), 0) for j in range(N)])),
        ]
        tmo_match = Signal(N, name="tmo_match")
        m.d.comb += tmo_match.eq(Cat(waiting[j] & (mkey[j] == self.expiry.key) for j in range(N)) &
                                 Mux(self.expiry.valid, Const(-1, N), 0))

        # Allocation: the lowest free MSHR; a new read's tag is its number and generation.
        m.d.comb += self.alloc.pending.eq(Cat(waiting[j] & (mkey[j] == self.alloc.key) for j in range(N)).any())
        free = Signal(N, name="mshr_free")
        m.d.comb += [free.eq(~busy), self.alloc.free_any.eq(free.any())]
        free_oh = lowest_one(m, free, name="free_oh")
        free_idx = Signal(ib, name="free_idx")
        m.d.comb += free_idx.eq(onehot_to_index(free_oh))
        free_gen = or_reduce([Mux(free_oh[j], mgen[j], 0) for j in range(N)])
        m.d.comb += self.alloc.new_tag.eq(Cat(free_idx, free_gen))

        for j in range(N):
            with m.If(self.alloc.valid & free_oh[j]):
                m.d.sync += [
                    busy[j].eq(1),
                    filled[j].eq(self.alloc.filled),
                    primary[j].eq(self.alloc.primary),
                    flushed[j].eq(self.alloc.flushed),
                    mkey[j].eq(self.alloc.key),
                    mtag[j].eq(self.alloc.tag),
                    maddr[j].eq(self.alloc.addr),
                    mcode[j].eq(self.alloc.code),
                    mage[j].eq(0),
                ]
            with m.Elif(self.replay.ready & oh[j]):
                m.d.sync += busy[j].eq(0)
            with m.Elif(fill_match[j]):
                m.d.sync += [filled[j].eq(1), maddr[j].eq(self.fill_addr), mcode[j].eq(self.fill_code)]
            with m.Elif(tmo_match[j]):
                m.d.sync += [filled[j].eq(1), maddr[j].eq(0), mcode[j].eq(ErrorCode.TIMEOUT.value)]
            with m.If(waiting[j] & primary[j]):
                m.d.sync += mage[j].eq(mage[j] + 1)
            with m.If(tmo_oh[j]):
                m.d.sync += mgen[j].eq(mgen[j] + 1)
            with m.If(self.flush.valid & busy[j] & ((mkey[j] >> self.group_shift) == self.flush.group)):
                m.d.sync += flushed[j].eq(1)
        return m
