"""Formal harness of a switch input's packet store: the :class:`~hw.switch.cell_pool.CellPool` (free cells, the
next-write cell, written and last bits) and the :class:`~hw.switch.packet_queues.PacketQueues` (per-output
virtual output queues and the mask queue, chained through the next-packet table, with their heads'
arrival order), with the next-cell table beside them, wired as in :class:`~hw.switch.input_unit.InputUnit`.

The harness plays the input's two other sides, free within the unit's contract:

* the *writer* (the ingress): one flit per cycle when it chooses, only while the pool holds at most
  ``n_cells - 2`` cells in use (the credit contract: a sender has ``n_cells - 1`` credits and the unit
  counts a freed cell until the cycle after) and within the queues' lap contract (below); a header names its
  queue and its length (0..``max_payload``) and enqueues the packet; each flit goes to the pool's next-write
  cell, its next-cell link to the pool's ``next_cell`` unless it is the packet's last, which is marked
  ``last``;
* the *reader* (the unit's cell reader, one lane): when idle it may dequeue any non-empty queue's head
  (``sel``/``deq``), then reads the packet's chain one written cell per cycle when it chooses, freeing
  each cell it reads, until a last cell; ``n_freed`` is its count of the last cycle's frees. With
  ``r_peek`` it reads the mask queue's head without dequeuing or freeing it instead (a partial multicast
  pass). Packet masks and read-cycle counts are written but not checked.

Each flit is written with what the harness knows of it: its queue, the packet's sequence number in that
queue, its index in the packet, the packet's length and its arrival number (per cell, in harness
registers: the cell buffer's contents). Properties, each proven by k-induction with the invariant it rests
on:

* **the pool neither loses nor shares a cell**: every cell is exactly one of free, the next-write cell or
  in use (written and not yet freed); the next-write cell always exists and is unwritten, every cell in
  use is written, and the pool's ``used`` count is the cells in use plus the cells freed last cycle;
* **every packet is read whole, in order per queue, framing kept**: each cell the reader reads is in use
  and holds the next flit of the packet it dequeued, that packet is the next one of its queue, and its
  last bit is set exactly on the packet's ``length + 1``-th cell. The chain invariant it rests on: each
  queue's ``count`` is its packets enqueued less dequeued; its head and tail cells are the header cells of
  its oldest and newest queued packets; each queued packet's header links (next-packet table) to the
  next packet's header and carries its arrival number (``pseq``); each cell in use that is not its
  packet's last links (next-cell table) to its packet's next cell, or to the next-write cell while that
  flit has not arrived; every cell in use belongs to a queued packet or to the reader's, no two hold the
  same flit; the reader's packet is the last one dequeued from its queue (in a partial pass, the mask
  queue's head) and its cell that packet's next flit (or the next-write cell, the flit not yet written);
  the writer's packet is its queue's newest;
* **the head-order flags give the heads' arrival order**: while VOQ ``j`` and the mask queue both hold a
  packet, ``older[j]`` says whether VOQ ``j``'s head arrived first (with the heads' arrival numbers, the
  queue's arrival counter and the queued packets' ages as its invariant). The flags compare arrival numbers
  modulo ``2**seq_bits``, exact while queued packets are less than ``2**(seq_bits - 1)`` arrivals apart
  (:class:`~hw.switch.head_order.HeadOrder`'s contract): the queues' lap guard keeps that bound, as the
  next property states;
* **no queued packet is ``2**(seq_bits - 1)`` arrivals old**, however long a head waits while other queues
  flow: the writer keeps the contract of :class:`~hw.switch.packet_queues.PacketQueues`, starting packets
  freely while ``near_lap`` is low and at most ``lap_margin`` while it is high (``lap_n`` counts them since
  it rose; the input withholds its credits then). The invariant: while ``near_lap`` is low every queued
  packet is 1 to ``lap_threshold`` arrivals old (the flag rises the cycle after a head is that old); while
  it is high, 1 to ``lap_threshold + 1 + lap_n`` (one arrival in its register's cycle, then those started
  since it rose), with ``lap_n <= lap_margin``; and each queued packet arrived after the one ahead of it in
  its queue (the flag looks at the heads alone). Ages are taken modulo ``2**seq_bits`` and grow by one per
  arrival from 1, so no packet passes the bound unseen. The reader's packet, dequeued, is not bounded:
  nothing compares its arrival number (its cells' numbers are only checked equal to one another).

Internal state with no port is read without changing the blocks: the pool's free set and the queues'
tails, head arrival numbers and arrival counter are the signals their ``elaborate`` drives (found by name
in the elaborated module), and the next-packet and arrival-number tables through one added asynchronous
read port per cell on each memory.
"""

import inspect
from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.switch.cell_pool import CellPool
from hw.switch.packet_queues import PacketQueues

from .observe import driven, elaborate_now
from .runner import Properties

__all__ = ["SwitchQueuesHarness", "pool_partition", "store_chain", "store_head_order"]

class _Conj:
    """A conjunction built with ``&=``, each term a signal named after its source line (``inv_<kind>_L<line>_<n>``,
    so that a counterexample's trace shows which term broke)."""

    def __init__(self, m, kind):
        self.m, self.kind, self.terms, self.tag = m, kind, [], ""

    def __iand__(self, term):
        line = inspect.stack()[1].lineno
        sig = Signal(name=f"inv_{self.kind}_L{line}{self.tag}_{len(self.terms)}")
        self.m.d.comb += sig.eq(term)
        self.terms.append(sig)
        return self

    def all(self):
        return Cat(self.terms).all() if self.terms else Const(1)



def pool_partition(conj, pool, free, in_use, freed):
    """The cell pool's invariant, added to ``conj``: every cell is exactly one of free (``free``, the pool's own
    register), the next-write cell (which exists and is unwritten) or in use (``in_use``: written and not yet
    freed), and the pool's ``used`` is the cells in use plus those freed last cycle (``freed``)."""
    C = len(free)
    conj &= pool.new_ok & (pool.new_cell < C) & (pool.used == sum(in_use[c] for c in range(C)) + freed)
    for c in range(C):
        nw = pool.new_cell == c
        conj &= (free[c] + nw + in_use[c]) == 1
        conj &= ~in_use[c] | pool.written[c]
        conj &= ~nw | ~pool.written[c]

def _sel(vals, q):
    """``vals[q]``."""
    return sum(Mux(q == i, v, 0) for i, v in enumerate(vals))


def _at(st, cell, pred):
    """``pred(c)`` of the cell ``cell`` names (false for a value past the last cell)."""
    return Cat((cell == c) & pred(c) for c in range(st.C)).any()


def store_flit_is(st, c, q, seq, idx):
    """Cell ``c`` holds flit ``idx`` of packet ``seq`` of queue ``q``."""
    return (st.g_q[c] == q) & (st.g_seq[c] == Value.cast(seq)[:st.SEQ_BITS]) & (st.g_idx[c] == idx)


def store_queued(st, c):
    """Cell ``c`` belongs to a packet still in its queue (its position below the queue's count)."""
    return _sel([(st.g_seq[c] - st.deq_n[q])[:st.SEQ_BITS] < st.count[q] for q in range(st.n_q)], st.g_q[c])


def store_pos(st, c):
    """The position in its queue of cell ``c``'s packet."""
    return _sel([(st.g_seq[c] - st.deq_n[q])[:st.SEQ_BITS] for q in range(st.n_q)], st.g_q[c])


def store_age(st, c):
    """Arrivals since cell ``c``'s packet arrived, modulo ``2**seq_bits``."""
    return (st.arr - st.g_arr[c])[:st.S]


def store_chain(chain, st):
    """The packet store's chain invariant (see the module docstring), added to ``chain``, over ``st``: the
    pool and queues (``pool``, ``count``, ``head``, ``q_tail``, ``q_hseq``, ``aseq``, the next-packet and
    arrival-number tables ``pn``/``ps``, the next-cell table ``cnext``, ``near``), what each cell holds
    (``g_used``, ``g_q``, ``g_seq``, ``g_idx``, ``g_len``, ``g_arr``), the packets enqueued and dequeued per
    queue and arrived (``enq_n``, ``deq_n``, ``arr``), ``lap_n``, the reader's packet (``r_act``, ``r_free``,
    ``r_qr``, ``r_seq``, ``r_idx``, ``r_cell``) and the writer's (``wr_pkt``, ``wr_q``, ``wr_seq``, ``wr_idx``,
    ``wr_len``, ``wr_arr``); sizes ``C``, ``n_q``, ``MQ``, ``S``, ``T`` (lap threshold), ``LM`` (lap margin),
    ``SEQ_BITS``."""
    C, n_q, MQ, S, T, LM, SEQ_BITS = st.C, st.n_q, st.MQ, st.S, st.T, st.LM, st.SEQ_BITS
    pool, count, q_tail, q_hseq, aseq, pn, ps, cnext = st.pool, st.count, st.q_tail, st.q_hseq, st.aseq, st.pn, \
        st.ps, st.cnext
    g_used, g_q, g_seq, g_idx, g_len, g_arr = st.g_used, st.g_q, st.g_seq, st.g_idx, st.g_len, st.g_arr
    enq_n, deq_n, arr, near, lap_n = st.enq_n, st.deq_n, st.arr, st.near, st.lap_n
    r_act, r_free, r_qr, r_seq, r_idx, r_cell = st.r_act, st.r_free, st.r_qr, st.r_seq, st.r_idx, st.r_cell
    wr_pkt, wr_q, wr_seq, wr_idx, wr_len, wr_arr = st.wr_pkt, st.wr_q, st.wr_seq, st.wr_idx, st.wr_len, st.wr_arr
    sel = _sel

    def at(cell, pred):
        return _at(st, cell, pred)

    def flit_is(c, q, seq, idx):
        return store_flit_is(st, c, q, seq, idx)

    def queued(c):
        return store_queued(st, c)

    def pos(c):
        return store_pos(st, c)

    def age(c):
        return store_age(st, c)

    # The lap guard: near_lap low, every queued packet is at most lap_threshold arrivals old (the flag
    # rises the cycle after a head is); high, at most one more (an arrival in its register's cycle)
    # plus the packets started since it rose.
    chain &= ~near | (lap_n <= LM)
    age_max = Mux(near, T + 1 + lap_n, T)
    for q in range(n_q):
        has = count[q] != 0
        chain &= (count[q] == (enq_n[q] - deq_n[q])[:SEQ_BITS]) & (count[q] <= C)
        chain &= ~has | at(st.head[q], lambda c: g_used[c] & flit_is(c, q, deq_n[q], 0) &
                           (q_hseq[q] == g_arr[c]))
        chain &= ~has | at(q_tail[q], lambda c: g_used[c] & flit_is(c, q, enq_n[q] - 1, 0))
    chain &= aseq == arr
    for c in range(C):
        chain.tag = f"_c{c}"
        in_reader = r_act & r_free & (g_q[c] == r_qr) & (g_seq[c] == r_seq) & (g_idx[c] >= r_idx)
        chain &= ~g_used[c] | queued(c) | in_reader
        chain &= ~g_used[c] | ((g_idx[c] <= g_len[c]) & (pool.clast[c] == (g_idx[c] == g_len[c])))
        chain &= ~g_used[c] | ~queued(c) | ((age(c) != 0) & (age(c) <= age_max))
        # The next cell of a flit that is not its packet's last.
        writer_next = (cnext[c] == pool.new_cell) & wr_pkt & (wr_q == g_q[c]) & (wr_seq == g_seq[c]) & \
            (wr_idx == g_idx[c] + 1)
        chain &= ~g_used[c] | (g_idx[c] == g_len[c]) | writer_next | \
            at(cnext[c], lambda d: g_used[d] & flit_is(d, g_q[c], g_seq[c], g_idx[c] + 1) &
               (g_len[d] == g_len[c]) & (g_arr[d] == g_arr[c]))
        # A queued header: its arrival number, and its link to the next packet of its queue.
        qhdr = g_used[c] & (g_idx[c] == 0) & queued(c)
        chain &= ~qhdr | (ps[c] == g_arr[c])
        not_tail = pos(c) + 1 < sel(list(count), g_q[c])
        chain &= ~qhdr | ~not_tail | at(pn[c], lambda d: g_used[d] &
                                         flit_is(d, g_q[c], g_seq[c] + 1, 0))
        # (that packet arrived later: near_lap looks at the heads alone)
        chain &= ~qhdr | ~not_tail | (sel([age(d) for d in range(C)], pn[c]) < age(c))
        for d in range(c + 1, C):
            chain.tag = f"_c{c}_d{d}"
            same_pkt = g_used[c] & g_used[d] & (g_q[c] == g_q[d]) & (g_seq[c] == g_seq[d])
            chain &= ~same_pkt | ((g_idx[c] != g_idx[d]) & (g_len[c] == g_len[d]) & (g_arr[c] == g_arr[d]))
    chain.tag = ""
    # The reader: its packet is the last dequeued of its queue, its cell that packet's next flit.
    r_writer = r_act & (r_cell == pool.new_cell) & wr_pkt & (wr_q == r_qr) & (wr_seq == r_seq) & \
        (wr_idx == r_idx)
    # (A partial pass reads the mask queue's head, still queued.)
    chain &= ~r_act | r_free | ((r_qr == MQ) & (r_seq == deq_n[MQ]) & (count[MQ] != 0))
    chain &= ~r_act | ~r_free | ((r_seq + 1)[:SEQ_BITS] == sel(deq_n, r_qr))
    chain &= ~r_act | ((r_writer | at(
        r_cell, lambda c: g_used[c] & flit_is(c, r_qr, r_seq, r_idx))))
    # The writer: its packet is its queue's newest, its last flit written links to the next-write cell.
    w_prev = Cat(g_used[c] & flit_is(c, wr_q, wr_seq, wr_idx - 1) for c in range(C)).any()
    for c in range(C):
        chain.tag = f"_w{c}"
        chain &= ~(wr_pkt & g_used[c] & (g_q[c] == wr_q) & (g_seq[c] == wr_seq)) | \
            ((g_idx[c] < wr_idx) & (g_len[c] == wr_len) & (g_arr[c] == wr_arr))
    chain.tag = ""
    chain &= ~wr_pkt | (((wr_seq + 1)[:SEQ_BITS] == sel(enq_n, wr_q)) & ((wr_arr + 1)[:S] == arr) &
                       (wr_idx >= 1) & (wr_idx <= wr_len) & (w_prev | r_writer))



def store_head_order(conj, st, older):
    """The head-order flags' property, added to ``conj``: while VOQ ``j`` and the mask queue both hold a packet,
    ``older[j]`` says whether VOQ ``j``'s head arrived first."""
    C, MQ, S = st.C, st.MQ, st.S
    for j in range(MQ):
        both = (st.count[j] != 0) & (st.count[MQ] != 0)
        age_j = sum(Mux(st.head[j] == c, (st.arr - st.g_arr[c])[:S], 0) for c in range(C))
        age_m = sum(Mux(st.head[MQ] == c, (st.arr - st.g_arr[c])[:S], 0) for c in range(C))
        conj &= ~both | (older[j] == (age_j > age_m))

class SwitchQueuesHarness(wiring.Component):
    """Free inputs: the writer's ``w_go``/``w_q``/``w_len`` (write a flit; a header's queue and length) and
    the reader's ``r_go``/``r_q``/``r_peek``/``r_rd`` (dequeue queue ``r_q``'s head when idle, or read the
    mask queue's head without dequeuing it; read a cell).
    ``pool``/``queues`` may be replaced (mutants); ``lap_margin`` is the default queues' (their default:
    ``n_cells``); ``invariant=False`` states the properties alone, ``only`` some of them (``"pool"``,
    ``"read"``, ``"order"``, ``"age"``)."""

    #: Proof and covers on yices (z3 gave no answer to the 5-cell instance's induction step in 16 minutes).
    formal_options = {"engine": "smtbmc yices"}

    def __init__(self, *, n_cells: int = 4, n_uc: int = 1, max_payload: int = 1, pool=None, queues=None,
                 lap_margin: int | None = None, invariant: bool = True, only=("pool", "read", "order", "age")):
        if not n_uc:
            raise ValueError("n_uc must be at least 1 (the head-order flags compare a VOQ with the mask queue)")
        self.n_cells, self.n_uc, self.max_payload, self.invariant = n_cells, n_uc, max_payload, invariant
        self.only = only
        self.n_q = n_uc + 1
        self.pool = pool if pool is not None else CellPool(n_cells=n_cells, max_freed=1)
        self.queues = queues if queues is not None else PacketQueues(n_uc=n_uc, n_cells=n_cells, ports=max(1, n_uc),
                                                                     lap_margin=lap_margin)
        self.props = Properties()
        super().__init__({"w_go": In(1), "w_q": In(range(self.n_q)), "w_len": In(range(max_payload + 1)),
                          "r_go": In(1), "r_q": In(range(self.n_q)), "r_peek": In(1), "r_rd": In(1)})

    def elaborate(self, platform):
        m = Module()
        C, n_q, MQ, P = self.n_cells, self.n_q, self.n_uc, self.max_payload
        pool, pq = self.pool, self.queues
        cw = len(pool.new_cell)
        S = pq.seq_bits
        T, LM = pq.lap_threshold, pq.lap_margin
        # A packet's number in its queue: the queued ones (at most C) and the reader's stay apart modulo this.
        SEQ_BITS = (C + 1).bit_length()

        # ------------------------------------------------------------ the blocks and their hidden state
        pm = elaborate_now(pool, platform)
        free = driven(pm, "free")
        qm = elaborate_now(pq, platform)
        q_tail = [driven(qm, f"q{q}_tail") for q in range(n_q)]
        q_hseq = [driven(qm, f"q{q}_hseq") for q in range(n_q)]
        aseq = driven(qm, "aseq")
        pn, ps = [], []                      # pnext[c], pseq[c]
        for c in range(C):
            for mem, out in ((qm.submodules.pnext, pn), (qm.submodules.pseq, ps)):
                port = mem.read_port(domain="comb")
                sig = Signal(len(port.data), name=f"obs_{'pnext' if out is pn else 'pseq'}{c}")
                qm.d.comb += [port.addr.eq(c), sig.eq(port.data)]
                out.append(sig)
        m.submodules.pool, m.submodules.queues = pool, pq

        # ------------------------------------------------------------ the cell buffer's contents
        cnext = [Signal(cw, name=f"cnext{c}") for c in range(C)]            # the next-cell table
        g_used = Signal(C)                                                  # written, not yet freed
        g_q = [Signal(range(n_q), name=f"g_q{c}") for c in range(C)]
        g_seq = [Signal(SEQ_BITS, name=f"g_seq{c}") for c in range(C)]
        g_idx = [Signal(range(P + 1), name=f"g_idx{c}") for c in range(C)]
        g_len = [Signal(range(P + 1), name=f"g_len{c}") for c in range(C)]
        g_arr = [Signal(S, name=f"g_arr{c}") for c in range(C)]

        def at(cell, pred):
            """``pred(c)`` of the cell ``cell`` names (false for a value past the last cell)."""
            return Cat((cell == c) & pred(c) for c in range(C)).any()

        enq_n = [Signal(SEQ_BITS, name=f"enq_n{q}") for q in range(n_q)]   # packets enqueued per queue
        deq_n = [Signal(SEQ_BITS, name=f"deq_n{q}") for q in range(n_q)]   # packets dequeued per queue
        arr = Signal(S)                                                     # packets arrived

        def sel(vals, q):
            """``vals[q]``."""
            return sum(Mux(q == i, v, 0) for i, v in enumerate(vals))

        # ------------------------------------------------------------ the writer
        wr_pkt = Signal()                       # inside a packet (its header written)
        wr_q = Signal(range(n_q))
        wr_seq = Signal(SEQ_BITS)
        wr_idx = Signal(range(P + 1))           # index of the next flit
        wr_len = Signal(range(P + 1))
        wr_arr = Signal(S)
        # The lap contract: at most lap_margin packets start while near_lap is high (lap_n counts them).
        near = pq.near_lap
        lap_n = Signal(range(LM + 1))
        write = Signal()
        m.d.comb += write.eq(self.w_go & (pool.used <= C - 2) &
                             (wr_pkt | ((~near | (lap_n < LM)) & (self.w_q < n_q))))
        hdr = write & ~wr_pkt
        with m.If(~near):
            m.d.sync += lap_n.eq(0)
        with m.Elif(hdr):
            m.d.sync += lap_n.eq(lap_n + 1)
        f_q = Mux(wr_pkt, wr_q, self.w_q)
        f_seq = Mux(wr_pkt, wr_seq, sel(enq_n, self.w_q))
        f_idx = Mux(wr_pkt, wr_idx, 0)
        f_len = Mux(wr_pkt, wr_len, self.w_len)
        f_arr = Mux(wr_pkt, wr_arr, arr)
        f_last = f_idx == f_len
        m.d.comb += [
            pool.write.eq(write), pool.last.eq(f_last),
            pq.enq.eq(hdr), pq.enq_q.eq(self.w_q), pq.enq_cell.eq(pool.new_cell),
            pq.enq_mask.eq(0), pq.enq_rc.eq(self.w_len == 0),
        ]
        with m.If(write):
            for c in range(C):
                with m.If(pool.new_cell == c):
                    m.d.sync += [g_used[c].eq(1), g_q[c].eq(f_q), g_seq[c].eq(f_seq), g_idx[c].eq(f_idx),
                                 g_len[c].eq(f_len), g_arr[c].eq(f_arr)]
                    with m.If(~f_last):
                        m.d.sync += cnext[c].eq(pool.next_cell)
            m.d.sync += [wr_pkt.eq(~f_last), wr_q.eq(f_q), wr_seq.eq(f_seq), wr_idx.eq(f_idx + 1), wr_len.eq(f_len),
                         wr_arr.eq(f_arr)]
        with m.If(hdr):
            m.d.sync += arr.eq(arr + 1)
            for q in range(n_q):
                with m.If(self.w_q == q):
                    m.d.sync += enq_n[q].eq(enq_n[q] + 1)

        # ------------------------------------------------------------ the reader
        r_act = Signal()
        r_qr = Signal(range(n_q))
        r_seq = Signal(SEQ_BITS)
        r_idx = Signal(range(P + 1))
        r_cell = Signal(cw)
        count = pq.count
        r_free = Signal()        # the pass frees the cells it reads (a dequeued packet), else a partial pass
        start = ~r_act & self.r_go & (sel(list(count), self.r_q) != 0)
        peek = self.r_peek & (self.r_q == MQ)       # a partial multicast pass: no dequeue, nothing freed
        m.d.comb += [pq.sel.eq(self.r_q), pq.deq.eq(Mux(start & ~peek, 1 << self.r_q, 0))]
        with m.If(start):
            m.d.sync += [r_act.eq(1), r_qr.eq(self.r_q), r_seq.eq(sel(deq_n, self.r_q)), r_idx.eq(0),
                         r_cell.eq(pq.sel_head), r_free.eq(~peek)]
            for q in range(n_q):
                with m.If((self.r_q == q) & ~peek):
                    m.d.sync += deq_n[q].eq(deq_n[q] + 1)
        read = r_act & self.r_rd & at(r_cell, lambda c: pool.written[c])
        r_last = at(r_cell, lambda c: pool.clast[c])
        freed = Signal()
        m.d.sync += freed.eq(read & r_free)
        m.d.comb += [pool.free_bits.eq(Mux(read & r_free, Cat(r_cell == c for c in range(C)), 0)),
                     pool.n_freed.eq(freed)]
        with m.If(read):
            for c in range(C):
                with m.If((r_cell == c) & r_free):
                    m.d.sync += g_used[c].eq(0)
            with m.If(r_last):
                m.d.sync += r_act.eq(0)
            with m.Else():
                m.d.sync += [r_cell.eq(sum(Mux(r_cell == c, cnext[c], 0) for c in range(C))),
                             r_idx.eq(r_idx + 1)]

        # ------------------------------------------------------------ properties and their invariants
        def flit_is(c, q, seq, idx):
            return (g_q[c] == q) & (g_seq[c] == Value.cast(seq)[:SEQ_BITS]) & (g_idx[c] == idx)

        inv = self.invariant
        n_used = sum(g_used[c] for c in range(C))

        # The pool: a partition of the cells; the next-write cell exists, is unwritten.
        pool_ok = _Conj(m, "pool")
        pool_partition(pool_ok, pool, free, g_used, freed)

        # Reading: the cell read holds the reader's packet's next flit; its last bit ends the packet.
        read_ok = _Conj(m, "read")
        read_ok &= ~read | at(r_cell, lambda c: g_used[c] & flit_is(c, r_qr, r_seq, r_idx) &
                             (pool.clast[c] == (g_idx[c] == g_len[c])))
        st = SimpleNamespace(C=C, n_q=n_q, MQ=MQ, S=S, T=T, LM=LM, SEQ_BITS=SEQ_BITS, pool=pool, count=list(count),
                             head=list(pq.head), q_tail=q_tail, q_hseq=q_hseq, aseq=aseq, pn=pn, ps=ps, cnext=cnext,
                             g_used=g_used, g_q=g_q, g_seq=g_seq, g_idx=g_idx, g_len=g_len, g_arr=g_arr, enq_n=enq_n,
                             deq_n=deq_n, arr=arr, near=near, lap_n=lap_n, r_act=r_act, r_free=r_free, r_qr=r_qr,
                             r_seq=r_seq, r_idx=r_idx, r_cell=r_cell, wr_pkt=wr_pkt, wr_q=wr_q, wr_seq=wr_seq,
                             wr_idx=wr_idx, wr_len=wr_len, wr_arr=wr_arr)
        queued, pos, age = (lambda c: store_queued(st, c)), (lambda c: store_pos(st, c)), (lambda c: store_age(st, c))
        chain = _Conj(m, "chain")
        if inv:
            store_chain(chain, st)

        # The head order: VOQ j's head older than the mask-queue head.
        order_ok = _Conj(m, "order")
        store_head_order(order_ok, st, pq.older)

        # The lap guard: no queued packet is 2**(seq_bits - 1) arrivals old (its age, modulo 2**seq_bits, grows
        # by one per arrival from 1, so it cannot pass that age unseen).
        age_ok = _Conj(m, "age")
        for c in range(C):
            age_ok &= ~g_used[c] | ~queued(c) | ((age(c) != 0) & ~age(c)[S - 1])

        # Covers.
        full = Signal()
        m.d.sync += full.eq(full | (n_used == C - 2))
        two_pkts = Signal()
        m.d.sync += two_pkts.eq(two_pkts | (count[0] >= 2))
        peeked = Signal()       # a partial pass has read a packet's last cell
        m.d.sync += peeked.eq(peeked | (read & ~r_free & r_last))
        older_seen = Signal()
        m.d.sync += older_seen.eq(older_seen | ((count[0] != 0) & (count[MQ] != 0) & pq.older[0]))

        p, only = self.props, self.only
        if "pool" in only:
            p.check(m, "the pool neither loses nor shares a cell", pool_ok.all() & chain.all(),
                    read & full & hdr)
        if "read" in only:
            p.check(m, "every packet is read whole, in order per queue, framing kept", read_ok.all() & chain.all(),
                    read & r_free & r_last & (r_idx == P) & two_pkts & peeked)
        if "order" in only:
            p.check(m, "the head-order flags give the heads' arrival order", order_ok.all() & chain.all(),
                    older_seen & start & (self.r_q == MQ) & (count[0] != 0))
        if "age" in only:
            p.check(m, "no queued packet is 2^(seq_bits - 1) arrivals old", age_ok.all() & chain.all(),
                    near & hdr & (lap_n != 0))
        return m
