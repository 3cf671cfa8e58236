"""Which switch outputs are held and which may be matched: the registered match, output-busy, the counted
transfers' read-ahead and each output queue's room, between the allocator, the input units and the output
queues of :class:`~hw.switch.nvswitch.NVSwitch`."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import or_reduce

__all__ = ["OutputOwnership", "ADMIT_RULES"]

#: ``admit``: which outputs the allocator may match. ``"packet"``: room in the output queue for the flits in
#: flight and a whole packet (speedup 2); ``"in_flight"``: room for the flits in flight (speedup 1, VOQs, no
#: request stage: the short transfers); ``"any"``: every output (its input then stalls on ``space``).
ADMIT_RULES = ("packet", "in_flight", "any")


class OutputOwnership(wiring.Component):
    """The allocator's view of the outputs.

    Per input ``i``: ``accept[i]`` (the allocator's accept this cycle), ``short[i]``/``counted[i]`` (its
    request is a short / counted transfer, :class:`~hw.switch.input_unit.InputUnit`), ``release[i]`` (the
    outputs its transfer releases) and ``reads_next[i]`` (the outputs its counted transfer reads next
    cycle). Per output ``j``: ``level[j]`` (flits in its output queue) and ``written[j]`` (flits the crossbar
    writes into it this cycle).

    ``match[i]`` is ``accept[i]`` registered: the input dequeues and reads the cycle after its request, so
    request -> grant -> accept and accept -> dequeue are separate register-to-register paths. An output is
    ``busy`` from a held (not short) match until the cycle after its release (registered, so no reader
    logic feeds the allocator). ``out_free`` (to the allocator) is an output not busy and admitted by
    ``admit`` (:data:`ADMIT_RULES`); ``space[j]`` is room for ``lanes`` more flits after this cycle's writes
    (a read issued now lands next cycle). ``granted_cd`` (the counted matches starting) and ``reads_now``
    (the outputs counted transfers read this cycle) count the flits not in the queues yet.
    """

    def __init__(self, *, ports: int, lanes: int, egress_depth: int, max_payload: int, admit: str):
        if admit not in ADMIT_RULES:
            raise ValueError(f"admit must be one of {', '.join(ADMIT_RULES)}, got {admit!r}")
        self.ports, self.lanes, self.egress_depth, self.max_payload, self.admit = (
            ports, lanes, egress_depth, max_payload, admit)
        N = ports
        super().__init__({
            "accept": In(N).array(N), "short": In(N).array(N), "counted": In(N).array(N),
            "release": In(N).array(N), "reads_next": In(N).array(N),
            "level": In(range(egress_depth + 1)).array(N), "written": In(range(N * lanes + 1)).array(N),
            "match": Out(N).array(N), "out_free": Out(N), "space": Out(N),
            "busy": Out(N), "granted_cd": Out(N), "reads_now": Out(N),
        })

    def next_busy(self, busy, release, newly):
        """Output-busy next cycle (a mutant overrides it)."""
        return (busy & ~release) | newly

    def coming(self, j, reads_next):
        """Flits of counted transfers bound for output ``j`` not in its queue yet (a mutant overrides it)."""
        return self.lanes * (self.reads_now[j] + reads_next[j])

    def whole_packet(self):
        """The room a new packet needs at speedup 2 beyond the flits in flight (a mutant overrides it)."""
        return self.max_payload + 1

    def elaborate(self, platform):
        m = Module()
        N, S, D = self.ports, self.lanes, self.egress_depth
        m.d.sync += [self.match[i].eq(self.accept[i]) for i in range(N)]
        release = Signal(N)
        m.d.comb += release.eq(or_reduce(list(self.release)))
        newly = or_reduce([self.accept[i] & ~self.short[i] for i in range(N)])
        m.d.sync += self.granted_cd.eq(or_reduce([self.accept[i] & self.counted[i] for i in range(N)]))
        reads_next = Signal(N)
        m.d.comb += reads_next.eq(self.granted_cd | or_reduce(list(self.reads_next)))
        m.d.sync += [self.busy.eq(self.next_busy(self.busy, release, newly)), self.reads_now.eq(reads_next)]

        admit = Signal(N)
        m.d.comb += self.out_free.eq(~self.busy & admit)
        for j in range(N):
            queued = self.level[j] + self.written[j]
            m.d.comb += self.space[j].eq(queued + S <= D)
            # A new packet is matched only to an output whose queue can take all of it at full speed (the
            # reads of counted transfers in this cycle and the next included): otherwise its input would
            # stall at the drain rate, busy but unable to serve other outputs, and a counted transfer could
            # not end on time. At speedup 1 only the room for a short transfer is asked (a longer one may
            # stall on space), and nothing where no transfer is short.
            if self.admit == "packet":
                m.d.comb += admit[j].eq(queued + self.coming(j, reads_next) + S + self.whole_packet() <= D)
            elif self.admit == "in_flight":
                m.d.comb += admit[j].eq(queued + self.coming(j, reads_next) + S <= D)
            else:
                m.d.comb += admit[j].eq(1)
        return m
