"""Formal harness of the GPU receive path (:class:`hw.gpu_nic.receive_path.ReceivePath`): a poisoned or
misframed packet commits nothing to memory and reports no token arrival, and is counted once.

Instance: 128-bit flits (the smallest the header allows), ``max_payload`` 2, ``credits`` 3 (the minimum,
``max_payload + 1``), one local expert, one slot, one ``dyn_base`` group, 4 tags, a 2-flit read buffer,
``accept="all"`` (every opcode class, so every commit branch is in the proof). The staging logic that
the properties are about (whole-packet buffering, the too-long truncation, the per-packet drop decision)
is the same at any ``credits``/``max_payload``: the small instance has packets that are short, exact and
too long (truncated while the buffer is full), which are all the cases of that logic.

Proof: bounded model check to depth 10 (``dysharp formal receive_path``, yices, about a minute), every
``Cover`` reached within 8; the default test suite checks depth 6. Ten cycles hold three maximal packets
(or a truncated over-long one and the packets behind it) through staging and commit. k-induction does
not close: it needs an invariant on the staging buffer's contents (which flits of the FIFO belong to which
queued packet, and that each queued packet's status and header agree with what the harness saw), which
the harness does not state (``docs/verification.md``).

Free inputs (every cycle): the link's flits (header data, ``last``, ``poison``), the memory, response,
arrival and fill consumers' ``ready``, the read port's handshakes, ``tag_issue``, ``clear``, ``cfg.port``
and ``dyn_base``. The rest of ``cfg`` (the token window's address map) is held constant: 32-B rows from
address 0, metadata in flit 1, experts from 0.

Environment, as the block's documented contract requires (by construction, no ``Assume``):

* the link honours credits: the harness is the sender, with ``credits`` credits, and sends only with one;
* ``poison`` appears only on a packet's last flit (:mod:`hw.packet`: the switch's stomp is on the final
  flit);
* tracking: the environment picks one packet (``pick`` at its header, once). Its payload flits are the
  marker alone (bit 127 set, which is also metadata entry 7's valid bit, expert 0); every other payload
  flit is 0. The receive path writes payload flits unchanged and interprets no payload bit but the
  metadata, so a memory write with the marker is a write of the tracked packet, and (since only the
  tracked packet can list an expert) a token arrival is one of the tracked packet's. Headers are free
  (128 bits), so untracked packets are any mix of opcodes, lengths and framings: they fill the buffer,
  stall, and are dropped or committed around the tracked one. The read-data port returns 0 (its data is
  only forwarded to ``rsp``).

A packet is *bad* when its last flit is poisoned, its flit count disagrees with ``1 +
payload_flits(opcode, length)`` (:func:`hw.packet.rtl_payload_flits`), its ``length`` is above
``max_payload``, or its opcode is not one the block accepts (``"all"``: WRITE, MM_ST, DYN_ST, READ,
RED_READ, READ_RESP, RED_RESP, ERROR). The block documents dropping such packets whole and counting
``POISONED``, ``LENGTH_MISMATCH``, ``BAD_LENGTH`` or ``UNKNOWN_OPCODE`` (one of them, by its priority).

Properties (each with a ``Cover``):

* **a packet is committed only once it has fully arrived** (whole-packet staging): a write of the tracked
  packet happens only after its last flit was sent. Cover: a good tracked packet is written.
* **a poisoned or misframed packet commits nothing to memory**: no write strobe (``mem_wr.valid``) of a
  bad tracked packet. Cover: a bad tracked packet has arrived and every credit is back (it was dropped).
* **a poisoned or misframed packet reports no token arrival**: ``arrival.valid`` only after a good
  tracked packet has arrived. Cover: an arrival is taken.
* **every bad packet is counted once**: ``0 <= bad packets arrived - (POISONED + LENGTH_MISMATCH +
  BAD_LENGTH + UNKNOWN_OPCODE) <= flits the block holds credits for`` (the difference taken modulo 2^8,
  as the counters wrap); so once every credit is back each bad packet has been counted exactly once, and
  a good one never is. Cover: two bad packets counted.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.gpu_nic.memory_if import BYTE_ADDR_BITS
from hw.gpu_nic.receive_path import ReceivePath, RxError
from hw.packet import HEADER_BITS, HeaderLayout, Opcode, rtl_payload_flits

from .runner import YICES_BMC, Properties

__all__ = ["ReceivePathHarness", "ACCEPTED"]

W = 128
MARK = W - 1                         # the tracked packet's payload marker (metadata entry 7's valid bit)
ACCEPTED = (Opcode.WRITE, Opcode.MM_ST, Opcode.DYN_ST, Opcode.READ, Opcode.RED_READ, Opcode.READ_RESP,
            Opcode.RED_RESP, Opcode.ERROR)      # the block's documented "all" opcodes
COUNTED = (RxError.POISONED, RxError.LENGTH_MISMATCH, RxError.BAD_LENGTH, RxError.UNKNOWN_OPCODE)
NONE, ARRIVING, ARRIVED = 0, 1, 2


class ReceivePathHarness(wiring.Component):
    """Ports are the free inputs (see the module docstring). ``strip_poison`` is a mutant knob: the poison
    bit is lost between the link and the block (the proof must then fail). ``only``: declare only the
    properties whose name contains it (a bounded check stops at its first failing step, so a mutant test
    that targets one property declares only that one)."""

    def __init__(self, *, max_payload: int = 2, credits: int | None = None, strip_poison: bool = False,
                 only: str | None = None):
        self.only = only
        self.max_payload = max_payload
        self.credits = credits if credits is not None else max_payload + 1
        self.strip_poison = strip_poison
        self.props = Properties()
        # Induction cannot close over the block's free-running counters; yices is ~10x faster than z3 here.
        self.formal_options = dict(YICES_BMC)
        super().__init__({
            "i_valid": In(1), "i_data": In(W), "i_last": In(1), "i_poison": In(1), "pick": In(1),
            "wr_ready": In(1), "rsp_ready": In(1), "arr_ready": In(1), "fill_ready": In(1),
            "rd_req_ready": In(1), "rd_resp_valid": In(1),
            "tag_valid": In(1), "tag_tag": In(8), "tag_addr": In(BYTE_ADDR_BITS), "clear": In(1),
            "port": In(6), "dyn_base": In(BYTE_ADDR_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        C, limit = self.credits, self.max_payload + 1
        m.submodules.rp = rp = ReceivePath(flit_width=W, credits=C, max_payload=self.max_payload, experts=1,
                                           tile_size=1, max_slots=1, groups=1, tags=4, read_depth=2)
        # ---------------------------------------------------------------- the consumers and configuration
        m.d.comb += [
            rp.mem_wr.ready.eq(self.wr_ready), rp.rsp.ready.eq(self.rsp_ready),
            rp.arrival.ready.eq(self.arr_ready), rp.fill.ready.eq(self.fill_ready),
            rp.mem_rd.req.ready.eq(self.rd_req_ready), rp.mem_rd.resp.valid.eq(self.rd_resp_valid),
            rp.mem_rd.resp.payload.eq(0),   # read data is only forwarded
            rp.tag_issue.valid.eq(self.tag_valid), rp.tag_issue.payload.tag.eq(self.tag_tag),
            rp.tag_issue.payload.addr.eq(self.tag_addr), rp.clear.eq(self.clear),
            rp.dyn_base[0].eq(self.dyn_base),
            # The address map is configuration, held constant (static during traffic): 32-B rows (two
            # flits) from address 0, flit 1 of a row is its metadata, experts from 0. Free, it only adds
            # variable shifters to the problem; the staging logic does not depend on it.
            rp.cfg.port.eq(self.port), rp.cfg.row_shift.eq(5), rp.cfg.win_base.eq(0),
            rp.cfg.win_rows.eq(1 << 17), rp.cfg.meta_flit.eq(1), rp.cfg.expert_base.eq(0),
        ]
        # ---------------------------------------------------------------- the sender (honours credits)
        credits_left = Signal(range(C + 4), init=C)
        send = Signal()
        m.d.comb += send.eq(self.i_valid & (credits_left != 0))
        m.d.sync += credits_left.eq(credits_left - send + rp.rx.credit)
        first = Signal(init=1)          # the next flit is a packet's header
        n = Signal(range(limit + 2))    # flits of the current packet sent so far (saturates past limit)
        cur_tracked = Signal()
        hdr_bad = Signal()              # the header alone makes the packet bad (opcode, length)
        exp_n = Signal(6)               # 1 + payload flits the header announces
        over = Signal()                 # the packet already ran past `limit` flits (bad, counted)
        t_state = Signal(range(3))
        t_bad = Signal()
        bad_in = Signal(8)

        hdr = HeaderLayout(self.i_data[:HEADER_BITS])
        data_ = Signal(W)
        tracked_now = Signal()          # this flit belongs to the tracked packet
        m.d.comb += tracked_now.eq(Cat(first & self.pick & (t_state == NONE), ~first & cur_tracked).any())
        # Payload flits carry only the marker: the block interprets no payload bit but the metadata, and
        # free payload bits only make the problem bigger.
        with m.If(first):
            m.d.comb += data_.eq(self.i_data)
        with m.Else():
            m.d.comb += data_.eq(Mux(cur_tracked, 1 << MARK, 0))
        poison = self.i_poison & self.i_last
        m.d.comb += [rp.rx.valid.eq(send), rp.rx.flit.data.eq(data_), rp.rx.flit.last.eq(self.i_last),
                     rp.rx.flit.poison.eq(0 if self.strip_poison else poison)]

        known = Cat(hdr.opcode == op for op in ACCEPTED).any()
        h_bad = ~known | (hdr.length > self.max_payload)
        h_exp = rtl_payload_flits(hdr) + 1
        n_now = Signal(range(limit + 2))     # this flit's number in its packet (1 = header)
        with m.If(first):
            m.d.comb += n_now.eq(1)
        with m.Elif(n <= limit):
            m.d.comb += n_now.eq(n + 1)
        with m.Else():
            m.d.comb += n_now.eq(n)
        bad_now = Signal()              # the packet is found bad at this flit (counted here)
        ends_bad = Signal()             # ... or at its last flit
        m.d.comb += ends_bad.eq(poison | Mux(first, h_bad, hdr_bad) |
                                (n_now != Mux(first, h_exp, exp_n)))
        with m.If(send):
            with m.If(first):
                m.d.sync += [hdr_bad.eq(h_bad), exp_n.eq(h_exp), cur_tracked.eq(tracked_now), over.eq(0)]
                with m.If(tracked_now):
                    m.d.sync += [t_state.eq(ARRIVING), t_bad.eq(0)]
            m.d.sync += [n.eq(n_now), first.eq(self.i_last)]
            with m.If((n_now == limit) & ~self.i_last):
                # Longer than any legal packet: bad whatever follows (the block drops it at this flit).
                m.d.comb += bad_now.eq(1)
                m.d.sync += over.eq(1)
            with m.Elif(self.i_last & (first | ~over)):
                m.d.comb += bad_now.eq(ends_bad)
            with m.If(tracked_now & bad_now):
                m.d.sync += t_bad.eq(1)
            with m.If(tracked_now & self.i_last):
                m.d.sync += t_state.eq(ARRIVED)
        m.d.sync += bad_in.eq(bad_in + bad_now)

        # ---------------------------------------------------------------- properties
        counted = Signal(34)
        m.d.comb += counted.eq(sum(rp.err_count[e] for e in COUNTED))
        held = Signal(range(C + 1))
        m.d.comb += held.eq(C - credits_left)
        mw = rp.mem_wr
        marked_write = mw.valid & mw.payload.data[MARK]
        good_done = (t_state == ARRIVED) & ~t_bad
        p = self.props
        P1 = "a packet is committed only once it has fully arrived"
        P2 = "a poisoned or misframed packet commits nothing to memory"
        P3 = "a poisoned or misframed packet reports no token arrival"
        P4 = "every bad packet is counted once (POISONED/LENGTH_MISMATCH/BAD_LENGTH/UNKNOWN_OPCODE)"
        want = {n: self.only is None or self.only in n for n in (P1, P2, P3, P4)}
        if want[P1]:
            p.check(m, P1, ~marked_write | (t_state == ARRIVED), marked_write & mw.ready & good_done)
        if want[P2]:
            p.check(m, P2, ~marked_write | ~t_bad,
                    (t_state == ARRIVED) & t_bad & (credits_left == C) & (bad_in != 0))
        if want[P3]:
            p.check(m, P3, ~rp.arrival.valid | good_done, rp.arrival.valid & rp.arrival.ready)
        if want[P4]:
            # Modulo 2^8 (the counters wrap at 2^32, a multiple): bad packets not yet counted, never
            # negative (a difference below 0 wraps far above `held`) and at most one per held flit. Stated
            # without wrap it would fail after 256 bad packets, so it could only ever be a bounded claim.
            pending = Signal(8)
            m.d.comb += pending.eq(bad_in - counted)
            p.check(m, P4, pending <= held, (counted == 2) & (credits_left == C))
        return m

