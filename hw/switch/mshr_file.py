"""The miss-status holding registers of the AL-TLB: misses waiting for a backing read, its fill or its
timeout, and their replay (see :mod:`hw.switch.al_tlb`)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import lowest_one, onehot_to_index, or_reduce
from ..packet import ErrorCode
from .backing_if import BACKING_TAG_BITS
from .translate_if import TAG_BITS, TranslateResponse

__all__ = ["MshrFile", "MshrAnswer", "backing_tag_fields"]

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


class MshrFile(wiring.Component):
    """``mshrs`` MSHRs, each holding one missing request (its CAM key and tag) until it is answered.

    * **Allocate** (``alloc``): the lowest free MSHR (``free_any``: there is one) takes the request with
      ``key``/``alloc_tag``. A *primary* (``alloc_primary``) owns the backing read it starts, tagged
      ``new_tag`` (the MSHR's number and generation); another *coalesces* onto a read of the same key
      already waiting (``pending``: some MSHR waits for ``key``). ``alloc_filled`` allocates it already
      answered (``alloc_addr``, ``alloc_code``: the key's fill or timeout happens in this very cycle).
      ``alloc_flushed``: its group is being flushed in this cycle.
    * **Fill** (``fill``, a backing response this cycle with ``fill_tag``, ``fill_addr``, ``fill_code``):
      the primary whose tag it carries (``fill_ok``; ``fill_key``, ``fill_flushed``: its key, and whether
      its group was flushed while it waited) and every MSHR waiting for that key are answered with it.
    * **Timeout**: a primary's read ``timeout`` cycles old and not filled in this cycle expires (``tmo``,
      ``tmo_key``, ``tmo_tag``): the waiters for its key are answered ``TIMEOUT`` and its generation
      advances, so that its next read carries another tag.
    * **Replay** (``replay_valid``, ``replay``): an answered MSHR's answer; ``replay_take`` frees it.
    * **Flush** (``flush``, ``flush_group``): waiting MSHRs of that group will not be cached
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
            "key": In(key_width),
            "pending": Out(1),
            "alloc": In(1),
            "alloc_primary": In(1),
            "alloc_filled": In(1),
            "alloc_flushed": In(1),
            "alloc_tag": In(TAG_BITS),
            "alloc_addr": In(_ADDR),
            "alloc_code": In(_CODE),
            "free_any": Out(1),
            "new_tag": Out(BACKING_TAG_BITS),
            "fill": In(1),
            "fill_tag": In(BACKING_TAG_BITS),
            "fill_addr": In(_ADDR),
            "fill_code": In(_CODE),
            "fill_ok": Out(1),
            "fill_key": Out(key_width),
            "fill_flushed": Out(1),
            "tmo": Out(1),
            "tmo_key": Out(key_width),
            "tmo_tag": Out(BACKING_TAG_BITS),
            "replay_valid": Out(1),
            "replay": Out(MshrAnswer),
            "replay_take": In(1),
            "flush": In(1),
            "flush_group": In(group_bits),
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
            self.replay_valid.eq(ready_mshr.any()),
            self.replay.tag.eq(or_reduce([Mux(oh[j], mtag[j], 0) for j in range(N)])),
            self.replay.addr.eq(or_reduce([Mux(oh[j], maddr[j], 0) for j in range(N)])),
            self.replay.code.eq(or_reduce([Mux(oh[j], mcode[j], 0) for j in range(N)])),
        ]

        # Fill: the primary whose read the response answers, and every MSHR waiting for its key.
        tag = self.fill_tag
        fid_oh = Signal(N, name="fill_oh")
        m.d.comb += fid_oh.eq(Cat((tag[:ib] == j) & (tag[ib:] == mgen[j]) for j in range(N)) &
                              waiting & primary & Mux(self.fill, Const(-1, N), 0))
        m.d.comb += [
            self.fill_ok.eq(fid_oh.any()),
            self.fill_key.eq(or_reduce([Mux(fid_oh[j], mkey[j], 0) for j in range(N)])),
            self.fill_flushed.eq((fid_oh & flushed).any()),
        ]
        fill_match = Signal(N, name="fill_match")
        m.d.comb += fill_match.eq(Cat(waiting[j] & (mkey[j] == self.fill_key) for j in range(N)) &
                                  Mux(self.fill_ok, Const(-1, N), 0))

        # Timeouts: a primary whose read is `timeout` cycles old and not filled in this cycle.
        expired = Signal(N, name="mshr_expired")
        m.d.comb += expired.eq(Cat(mage[j] >= self.timeout for j in range(N)) & waiting & primary & ~fid_oh)
        tmo_oh = lowest_one(m, expired, name="tmo_oh")      # at most one: primaries start in distinct cycles
        m.d.comb += [
            self.tmo.eq(expired.any()),
            self.tmo_key.eq(or_reduce([Mux(tmo_oh[j], mkey[j], 0) for j in range(N)])),
            self.tmo_tag.eq(or_reduce([Mux(tmo_oh[j], Cat(Const(j, ib), mgen[j]), 0) for j in range(N)])),
        ]
        tmo_match = Signal(N, name="tmo_match")
        m.d.comb += tmo_match.eq(Cat(waiting[j] & (mkey[j] == self.tmo_key) for j in range(N)) &
                                 Mux(self.tmo, Const(-1, N), 0))

        # Allocation: the lowest free MSHR; a new read's tag is its number and generation.
        m.d.comb += self.pending.eq(Cat(waiting[j] & (mkey[j] == self.key) for j in range(N)).any())
        free = Signal(N, name="mshr_free")
        m.d.comb += [free.eq(~busy), self.free_any.eq(free.any())]
        free_oh = lowest_one(m, free, name="free_oh")
        free_idx = Signal(ib, name="free_idx")
        m.d.comb += free_idx.eq(onehot_to_index(free_oh))
        m.d.comb += self.new_tag.eq(Cat(free_idx, or_reduce([Mux(free_oh[j], mgen[j], 0) for j in range(N)])))

        for j in range(N):
            with m.If(self.alloc & free_oh[j]):
                m.d.sync += [
                    busy[j].eq(1),
                    filled[j].eq(self.alloc_filled),
                    primary[j].eq(self.alloc_primary),
                    flushed[j].eq(self.alloc_flushed),
                    mkey[j].eq(self.key),
                    mtag[j].eq(self.alloc_tag),
                    maddr[j].eq(self.alloc_addr),
                    mcode[j].eq(self.alloc_code),
                    mage[j].eq(0),
                ]
            with m.Elif(self.replay_take & oh[j]):
                m.d.sync += busy[j].eq(0)
            with m.Elif(fill_match[j]):
                m.d.sync += [filled[j].eq(1), maddr[j].eq(self.fill_addr), mcode[j].eq(self.fill_code)]
            with m.Elif(tmo_match[j]):
                m.d.sync += [filled[j].eq(1), maddr[j].eq(0), mcode[j].eq(ErrorCode.TIMEOUT.value)]
            with m.If(waiting[j] & primary[j]):
                m.d.sync += mage[j].eq(mage[j] + 1)
            with m.If(tmo_oh[j]):
                m.d.sync += mgen[j].eq(mgen[j] + 1)
            with m.If(self.flush & busy[j] & ((mkey[j] >> self.group_shift) == self.flush_group)):
                m.d.sync += flushed[j].eq(1)
        return m
