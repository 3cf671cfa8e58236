"""Formal harness of the GPU receive path (:class:`hw.gpu_nic.receive_path.ReceivePath`): a poisoned or
misframed packet commits nothing to memory and reports no token arrival, and is counted once.

Instance: 128-bit flits (the smallest the header allows), ``max_payload`` 2, ``credits`` 3 (the minimum,
``max_payload + 1``), one local expert, one slot, one ``dyn_base`` group, 4 tags, a 2-flit read buffer,
``accept="all"`` (every opcode class, so every commit branch is in the proof). The staging logic that
the properties are about (whole-packet buffering, the too-long truncation, the per-packet drop decision)
is the same at any ``credits``/``max_payload``: the small instance has packets that are short, exact and
too long (truncated while the buffer is full), which are all the cases of that logic. It is the smallest
that exercises every property: with ``max_payload`` 1 no payload has more than one flit, so the commit
stage would never write a packet over several cycles (its ``left`` count and write address stepping
through a packet, with a stall between flits).

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

Proof: k-induction, k = 3 (``dysharp formal receive_path``, yices, about 15 s), every ``Cover`` reached
within 8 steps. Each property is stated together with the staging invariant below, so that no state the
link cannot reach satisfies it for k cycles and then breaks a property (with the properties alone a
stalled buffer holding, say, a marked flit outside the tracked packet breaks them after any number of
cycles). Why 3 and not 2: the token window's registered stage (``wrote``, loaded every cycle from the
commit stage's write) is not named by the invariant; the third step constrains it through the write of
the cycle before. The same invariant closes at 4 credits and at ``max_payload`` 3 (a ``slow`` test).

The invariant names the stager's registers (``cnt``, ``spoiled``, ``truncating``, ``owed``) and the
commit stage's (``writing``, ``dropping``, ``left``), attributes of those blocks, and the slots and
pointers of three queues (the stager's flit and status FIFOs and the metadata queue), read through one
added asynchronous read port per slot as in the credit link's harness (:func:`.observe.observe_queue`);
the harness elaborates the receive path and its stager itself to name them. The block's generated
Verilog is unchanged (byte-equal) by that. The parts:

1. *credits and pointers*: the sender's credits, the flit FIFO's level and the credits owed for discarded
   flits add up to ``credits``; no flit was refused (``spoiled`` 0); each FIFO's write pointer is
   ``level`` slots past its read pointer;
2. *the arriving packet*: between packets nothing of it is stored; while it is stored ``cnt`` equals the
   flits the harness sent (1 .. ``max_payload``) and its header flit (the ``cnt``-th from the FIFO's
   end) gives the harness's verdict on its opcode and length and its expected flit count; while its
   over-long tail is discarded (``truncating``) nothing of it is stored and the harness has counted it;
   the tracked packet is the arriving one exactly while the harness says it is arriving, and is bad then
   exactly when it ran over-long;
3. *the staging buffer's layout*: from the read pointer, the commit stage's ``left`` flits (while it
   writes or drops a packet), then one run of ``n`` flits (``n`` at least 1) per queued status entry,
   header first, then the arriving packet's ``cnt`` flits; these add up to the FIFO's level;
4. *contents*: every payload flit there is the marker or 0; the arriving packet's payload flits carry the
   marker exactly when it is tracked; a marked flit of the commit stage's packet or of a queued one exists
   only once the tracked packet has fully arrived (or while its over-long tail is discarded), a queued
   marked packet's status and header make it bad exactly when the tracked packet is bad, and the commit
   stage writes marked flits only of a good tracked packet;
5. *counting* (with the counting property): the bad packets not yet counted (modulo 2^8) are the queued
   entries whose status and header make them bad;
6. *the token side* (with the arrival property): the metadata queue's pointers agree with its level, and
   before a good tracked packet has arrived no queued token lists an expert.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In

from hw.gpu_nic.memory_if import BYTE_ADDR_BITS
from hw.gpu_nic.receive_path import ReceivePath, RxError
from hw.packet import HEADER_BITS, PORT_BITS, HeaderLayout, Opcode, rtl_payload_flits

from .observe import elaborate_now, observe_queue
from .runner import YICES_BMC, Properties

__all__ = ["ReceivePathHarness", "ACCEPTED"]

W = 128
MARK = W - 1                         # the tracked packet's payload marker (metadata entry 7's valid bit)
MARKED = 1 << MARK
ACCEPTED = (Opcode.WRITE, Opcode.MM_ST, Opcode.DYN_ST, Opcode.READ, Opcode.RED_READ, Opcode.READ_RESP,
            Opcode.RED_RESP, Opcode.ERROR)      # the block's documented "all" opcodes
COUNTED = (RxError.POISONED, RxError.LENGTH_MISMATCH, RxError.BAD_LENGTH, RxError.UNKNOWN_OPCODE)
NONE, ARRIVING, ARRIVED = 0, 1, 2


def _offset(j, rptr, depth):
    """How many places slot ``j`` of a ring of ``depth`` slots is past the read pointer ``rptr``."""
    return Mux(rptr <= j, j - rptr, j + depth - rptr)


def _nth(slots, rptr, k):
    """The slot ``k`` places past ``rptr`` (``k`` below the ring's depth)."""
    out = slots[0]
    for j in range(1, len(slots)):
        out = Mux(_offset(j, rptr, len(slots)) == k, slots[j], out)
    return out


def _ring_ok(rptr, wptr, level, depth):
    """A queue's pointers agree with its level (at most ``depth``): the write pointer is ``level`` slots past
    the read one."""
    wrapped = rptr + level
    return (level <= depth) & (rptr < depth) & (wptr == Mux(wrapped >= depth, wrapped - depth, wrapped))


class ReceivePathHarness(wiring.Component):
    """Ports are the free inputs (see the module docstring). ``strip_poison`` is a mutant knob: the poison
    bit is lost between the link and the block (the proof must then fail). ``only``: declare only the
    properties whose name contains it (a bounded check stops at its first failing step, so a mutant test
    that targets one property declares only that one). ``invariant=False`` states the properties without
    the staging invariant (induction then cannot close): a mutant that fails them so shows that a
    property itself fails, not only the invariant it is proven with."""

    def __init__(self, *, max_payload: int = 2, credits: int | None = None, strip_poison: bool = False,
                 only: str | None = None, invariant: bool = True):
        self.only = only
        self.invariant = invariant
        self.max_payload = max_payload
        self.credits = credits if credits is not None else max_payload + 1
        self.strip_poison = strip_poison
        self.props = Properties()
        # k-induction with yices (~10x faster than z3 here) on the flattened design, memories mapped to
        # registers; without YICES_BMC's `opt_dff -sat`, which costs more than it saves here.
        self.formal_options = {**YICES_BMC, "induction": True, "script_extra": "flatten\nmemory_map\nopt -full"}
        super().__init__({
            "i_valid": In(1), "i_data": In(W), "i_last": In(1), "i_poison": In(1), "pick": In(1),
            "wr_ready": In(1), "rsp_ready": In(1), "arr_ready": In(1), "fill_ready": In(1),
            "rd_req_ready": In(1), "rd_resp_valid": In(1),
            "tag_valid": In(1), "tag_tag": In(8), "tag_addr": In(BYTE_ADDR_BITS), "clear": In(1),
            "port": In(PORT_BITS), "dyn_base": In(BYTE_ADDR_BITS),
        })

    def _judge(self, bits):
        """What a header alone says: (bad: an opcode not accepted or a length above ``max_payload``, the
        flits its packet must have)."""
        hdr = HeaderLayout(bits[:HEADER_BITS])
        known = Cat(hdr.opcode == op for op in ACCEPTED).any()
        return ~known | (hdr.length > self.max_payload), rtl_payload_flits(hdr) + 1

    def elaborate(self, platform):
        m = Module()
        C, limit = self.credits, self.max_payload + 1
        rp = ReceivePath(flit_width=W, credits=C, max_payload=self.max_payload, experts=1, tile_size=1,
                         max_slots=1, groups=1, tags=4, read_depth=max(2, self.max_payload))
        # Elaborated here so that the invariants can name its staging queues and registers.
        rm = elaborate_now(rp, platform)
        m.submodules.rp = rp
        stager, commit = rm.submodules.stager, rm.submodules.commit
        sm = elaborate_now(stager, platform)
        flits, status, metaq = sm.submodules.flits, sm.submodules.status, rm.submodules.metaq
        if self.invariant:
            ring = {"flits": observe_queue(flits, "storage", "flits"),
                    "status": observe_queue(status, "storage", "status"),
                    "metaq": observe_queue(metaq, "storage", "metaq")}
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
        g = _Ghost(m, self, C)
        credits_left, send = g.credits_left, g.send
        m.d.sync += credits_left.eq(credits_left - send + rp.rx.credit)
        first, n, cur_tracked, hdr_bad, exp_n, over = g.first, g.n, g.cur_tracked, g.hdr_bad, g.exp_n, g.over
        t_state, t_bad, bad_in = g.t_state, g.t_bad, g.bad_in

        data_ = Signal(W)
        tracked_now = Signal()          # this flit belongs to the tracked packet
        m.d.comb += tracked_now.eq(Cat(first & self.pick & (t_state == NONE), ~first & cur_tracked).any())
        # Payload flits carry only the marker: the block interprets no payload bit but the metadata, and
        # free payload bits only make the problem bigger.
        with m.If(first):
            m.d.comb += data_.eq(self.i_data)
        with m.Else():
            m.d.comb += data_.eq(Mux(cur_tracked, MARKED, 0))
        poison = self.i_poison & self.i_last
        m.d.comb += [rp.rx.valid.eq(send), rp.rx.flit.data.eq(data_), rp.rx.flit.last.eq(self.i_last),
                     rp.rx.flit.poison.eq(0 if self.strip_poison else poison)]

        h_bad, h_exp = self._judge(self.i_data)
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
        # Modulo 2^8 (the counters wrap at 2^32, a multiple): bad packets not yet counted. Stated without
        # wrap it would fail after 256 bad packets, so it could only ever be a bounded claim.
        pending = Signal(8)
        m.d.comb += pending.eq(bad_in - counted)
        staged, queued_bad, token = 1, pending, 1
        if self.invariant:
            staged, queued_bad, token = self._invariants(
                m, g, stager, commit, ring, flits, status, metaq, status_layout=stager.status.payload.shape(),
                meta_layout=rm.submodules.arrivals.meta.payload.shape())
        p = self.props
        P1 = "a packet is committed only once it has fully arrived"
        P2 = "a poisoned or misframed packet commits nothing to memory"
        P3 = "a poisoned or misframed packet reports no token arrival"
        P4 = "every bad packet is counted once (POISONED/LENGTH_MISMATCH/BAD_LENGTH/UNKNOWN_OPCODE)"
        want = {n: self.only is None or self.only in n for n in (P1, P2, P3, P4)}
        # Each property is stated with the staging invariant it rests on (k-induction assumes them all).
        if want[P1]:
            p.check(m, P1, (~marked_write | (t_state == ARRIVED)) & staged,
                    marked_write & mw.ready & good_done)
        if want[P2]:
            p.check(m, P2, (~marked_write | ~t_bad) & staged,
                    (t_state == ARRIVED) & t_bad & (credits_left == C) & (bad_in != 0))
        if want[P3]:
            p.check(m, P3, (~rp.arrival.valid | good_done) & staged & token,
                    rp.arrival.valid & rp.arrival.ready)
        if want[P4]:
            p.check(m, P4, (pending <= held) & (pending == queued_bad) & staged,
                    (counted == 2) & (credits_left == C))
        return m

    def _invariants(self, m, g, stager, commit, ring, flits, status, metaq, *, status_layout, meta_layout):
        """(the staging invariant, the bad packets queued, the token side's invariant); see the module
        docstring."""
        C, limit = self.credits, self.max_payload + 1
        f_rptr, f_wptr, f_slots = ring["flits"]
        s_rptr, s_wptr, s_slots = ring["status"]
        q_rptr, q_wptr, q_slots = ring["metaq"]
        flevel, slevel, qlevel = flits.level, status.level, metaq.level
        first, over, cnt = g.first, g.over, stager.cnt
        good_done = (g.t_state == ARRIVED) & ~g.t_bad
        # The tracked packet may be staged (queued or being committed) once its last flit is in, or while
        # its over-long tail is discarded.
        staged_ok = (g.t_state == ARRIVED) | ((g.t_state == ARRIVING) & stager.truncating)
        inv = []
        # Credits: each is with the sender, held by a buffered flit or owed for a discarded one.
        inv += [g.credits_left + flevel + stager.owed == C, ~stager.spoiled]
        inv += [_ring_ok(f_rptr, f_wptr, flevel, C), _ring_ok(s_rptr, s_wptr, slevel, C)]
        # The arriving packet: its flits stored so far, its header's verdict, its tracking.
        tail_hdr = _nth(f_slots, f_rptr, flevel - cnt)
        t_hbad, t_exp = self._judge(tail_hdr)
        inv += [
            ~first | ((cnt == 0) & ~stager.truncating),
            first | over | (~stager.truncating & (cnt == g.n) & (g.n >= 1) & (g.n <= limit - 1) &
                            (g.hdr_bad == t_hbad) & (g.exp_n == t_exp)),
            first | ~over | (stager.truncating & (cnt == 0) & (g.n >= limit) & (g.n <= limit + 1)),
            g.t_state != 3,
            (g.t_state == ARRIVING) == (~first & g.cur_tracked),
            (g.t_state != ARRIVING) | (g.t_bad == over),
        ]
        # The commit stage's packet: its `left` flits head the buffer.
        busy = commit.writing | commit.dropping
        h = Mux(busy, commit.left, 0)
        inv += [~(commit.writing & commit.dropping), ~busy | (commit.left != 0)]
        # The queued packets: one status entry each, their flits after the commit stage's, in order.
        st = [data.View(status_layout, _nth(s_slots, s_rptr, e)) for e in range(C)]
        queued = [slevel > e for e in range(C)]
        starts, o = [], h
        for e in range(C):
            starts.append(o)
            o = o + Mux(queued[e], st[e].n, 0)
            inv.append(~queued[e] | (st[e].n != 0))
        inv.append(o + cnt == flevel)
        bad = []
        for e in range(C):
            hbad, exp = self._judge(_nth(f_slots, f_rptr, starts[e]))
            bad.append(Signal(name=f"queued_bad{e}"))
            m.d.comb += bad[-1].eq(st[e].long | st[e].bad | hbad | (st[e].n != exp))
        # Every buffered flit: a header is free; a payload flit is the marker or 0, the marker only on
        # the tracked packet's flits, which a bad packet's status and header say is bad.
        tail_start = flevel - cnt
        for j, slot in enumerate(f_slots):
            k = _offset(j, f_rptr, C)
            live = k < flevel
            marked = slot == MARKED
            in_cur = k < h
            in_tail = (cnt != 0) & (k >= tail_start)
            is_hdr = (in_tail & (k == tail_start))
            for e in range(C):
                in_e = queued[e] & (k >= starts[e]) & (k < starts[e] + st[e].n)
                is_hdr = is_hdr | (in_e & (k == starts[e]))
                inv.append(~(live & in_e & (k != starts[e]) & marked) | (staged_ok & (bad[e] == g.t_bad)))
            inv += [
                ~live | is_hdr | marked | (slot == 0),
                ~(live & in_cur & marked) | (staged_ok & (~commit.writing | ~g.t_bad)),
                ~(live & in_tail & ~is_hdr) | (slot == Mux(g.cur_tracked, MARKED, 0)),
            ]
        queued_bad = sum(Mux(queued[e], bad[e], 0) for e in range(C))
        # The token side: no queued token lists an expert before a good tracked packet has arrived.
        token = [_ring_ok(q_rptr, q_wptr, qlevel, metaq.depth)]
        for j, slot in enumerate(q_slots):
            live = _offset(j, q_rptr, metaq.depth) < qlevel
            token.append(~live | good_done | (data.View(meta_layout, slot).mask == 0))
        return _all(m, "staged", inv), queued_bad, _all(m, "token", token)


def _all(m, name, terms):
    """The conjunction of ``terms``, each also a signal of its own (``<name>_<i>``): a failed induction
    step's trace shows which one broke."""
    sigs = []
    for i, t in enumerate(terms):
        sigs.append(Signal(name=f"{name}_{i}"))
        m.d.comb += sigs[-1].eq(t)
    return Cat(*sigs).all()


class _Ghost:
    """The harness's own registers: the sender's credits and its view of the packet on the link."""

    def __init__(self, m, h, C):
        limit = h.max_payload + 1
        self.credits_left = Signal(range(C + 4), init=C)
        self.send = Signal()
        m.d.comb += self.send.eq(h.i_valid & (self.credits_left != 0))
        self.first = Signal(init=1)          # the next flit is a packet's header
        self.n = Signal(range(limit + 2))    # flits of the current packet sent so far (saturates past limit)
        self.cur_tracked = Signal()
        self.hdr_bad = Signal()              # the header alone makes the packet bad (opcode, length)
        self.exp_n = Signal(6)               # 1 + payload flits the header announces
        self.over = Signal()                 # the packet already ran past `limit` flits (bad, counted)
        self.t_state = Signal(range(3))
        self.t_bad = Signal()
        self.bad_in = Signal(8)
