"""The AL-TLB's owed tags: backing reads that timed out and whose response may still come (see
:mod:`hw.switch.al_tlb`)."""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["OwedTags"]


class OwedTags(wiring.Component):
    """One bit per ``tag_bits``-bit tag value: a read with that tag timed out and its response is owed.

    ``timeout`` (with ``timeout_tag``) sets a tag's bit. ``response`` (with ``response_tag``): a backing
    response that filled nothing; if its tag is owed it is ``stale`` (a late answer, ignored; its bit is
    cleared, so a second copy is ``bad``), else ``bad`` (it answers no read). ``reissue`` (with
    ``reissue_tag``): a new read takes the tag again (the MSHR's generation wrapped), so the old response
    is given up and the bit is cleared.

    Every input is registered first and ``stale``/``bad`` come a cycle after their response, from
    registers: the tag of a response already drives the MSHR match, and this lookup's multiplexer and
    decoder loaded it too (fan-out ~150 in the integrated switch, 1 ns at 45 nm, in front of the MSHR
    allocation). The owed set runs a cycle behind for the same reason, so the lookup sees it as it stood
    when the response came: the answers are the same as without the registers, a cycle later.
    """

    def __init__(self, *, tag_bits: int):
        self.tag_bits = tag_bits
        super().__init__({
            "timeout": In(1), "timeout_tag": In(tag_bits),
            "response": In(1), "response_tag": In(tag_bits),
            "reissue": In(1), "reissue_tag": In(tag_bits),
            "stale": Out(1), "bad": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n_tags = 1 << self.tag_bits

        def onehot(tag):
            return (Const(1, n_tags) << tag)[:n_tags]
        owed = Signal(n_tags, name="owed")
        stray = Signal(name="stray")                        # last cycle's response filled nothing
        stray_tag = Signal(self.tag_bits, name="stray_tag")
        tmo_q, tmo_tag_q = Signal(name="tmo_q"), Signal(self.tag_bits, name="tmo_tag_q")
        new_q, new_tag_q = Signal(name="new_q"), Signal(self.tag_bits, name="new_tag_q")
        m.d.sync += [stray.eq(self.response), stray_tag.eq(self.response_tag), tmo_q.eq(self.timeout),
                     tmo_tag_q.eq(self.timeout_tag), new_q.eq(self.reissue), new_tag_q.eq(self.reissue_tag)]
        m.d.comb += [self.stale.eq(stray & owed.bit_select(stray_tag, 1)), self.bad.eq(stray & ~self.stale)]
        set_owed = Mux(tmo_q, onehot(tmo_tag_q), 0)
        clr_late = Mux(self.stale, onehot(stray_tag), 0)
        clr_new = Mux(new_q, onehot(new_tag_q), 0)
        m.d.sync += owed.eq((owed & ~clr_late & ~clr_new) | set_owed)
        return m
