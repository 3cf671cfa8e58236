"""Formal harness of the switch's output allocation: who holds each output while a packet is read, and how a
multicast packet is served.

The real blocks, one set per input, wired as in :class:`~hw.switch.input_unit.InputUnit` and
:class:`~hw.switch.nvswitch.NVSwitch`: each input's :class:`~hw.switch.alloc_request.AllocRequest` (its
request, the class and shortness of the request a grant answers), :class:`~hw.switch.grant_start.GrantStart`
(what a grant starts; the mask-queue head's remaining destinations and the per-output counts of pending
multicast packets) and :class:`~hw.switch.cell_reader.CellReader` (the transfer, its hold and release of
its outputs), with ``req_stage`` its :class:`~hw.switch.request_stage.RequestStage`; the switch's
:class:`~hw.switch.allocator.ISlipAllocator` and its
:class:`~hw.switch.output_ownership.OutputOwnership`, in VOQ mode (or ``queueing="fifo"``: no VOQs, every
packet in the mask queue) at speedup 1 or 2: the registered match, the output-busy flags (set by a held
match, cleared the cycle after its release), the read-ahead registers of counted transfers
(``granted_cd``, ``reads_now``), the egress room ``space`` and the admission (room for the flits in
flight and, at speedup 2, for a whole packet). Each input's release (its reader's release of a held
transfer's outputs, or its request's of a counted one) is formed here as ``InputUnit`` forms it. A counted transfer (``InputUnit``: a unicast packet fully written, read in exactly its read-cycle
count R = ceil(flits / lanes); at speedup 1 only R = 1, a short transfer) holds no output once released:
short ones never hold it, at speedup 2 one of R = 2 releases it in its grant cycle and one of R >= 3 two
reads before its end.

Free inputs stand for the rest of each input, under the contracts the store guarantees:

* the VOQs' state as the request sees it (``count``, ``older``, read-cycle counts, the mask-queue head's
  cell, the packet arriving, ``cut_ok``, the error queue's ``err_rdy``) is free: any request the store
  could make is allowed. At speedup 2 each VOQ's length and the flits of its head and of the packet behind
  it are kept here as the store keeps them (a packet of any length up to ``max_payload + 1`` flits queued
  while the VOQ has room, the one behind those any length), so that the read-cycle count a grant starts is
  its packet's;
* the mask queue is kept here as the store keeps it (``switch_queues``: every packet read whole, in order
  per queue): its length and its packets' destination masks, from its head on; the ingress queues a mask
  packet only with a destination (a zero mask is refused at the header) and within the cells; it leaves
  on ``GrantStart``'s dequeue. Its length and the mask behind its head are what the blocks see;
* a counted transfer's packet (``AllocRequest`` asks for one as counted only once it is not arriving) is
  written whole, its cells chained to its last, marked last: the harness shows the reader ``written`` set
  while that transfer is active, and at speedup 2 the packet's cells one after another from its header
  cell (``cnext``) with its last cell marked (``clast``); at speedup 1 the one cell marked last (the
  store's "every packet is read whole, framing kept" and the pool's written cells, proven by
  ``switch_queues``); any other transfer's cells are written, linked and last when the free inputs say so
  (a held transfer may wait or run on); cell indices name cells that exist;
* each output queue's level is the flits written into it less those it sent, at most its depth, and it
  sends one flit when the free ``o_ready`` says so (``switch_egress``: the output queue delivers every flit
  written into it once, in order); the crossbar writes each reader's flit into the outputs its
  ``out_dests`` names, one cycle after the read.

Properties, proven by k-induction with the invariant below:

* **no output is read by two readers at once, nor fed by two inputs in one cycle**;
* **output-busy agrees with the holders**: an output is busy exactly while a match to it that is not short
  is starting, a held reader has not released it, or a counted reader of three or more read cycles left
  has not;
* **the registered match and the read-ahead registers agree with the readers**: a match starts only on an
  input whose reader is idle or ends its counted transfer now; ``granted_cd`` is the outputs of the
  counted matches starting, ``reads_now`` those of the counted transfers reading now, and a counted
  transfer reads in every cycle from the one after its grant, its last read in its R-th (at speedup 1:
  its one cell in the cycle after its grant);
* **no output queue overflows**: the flits in an output queue and those on their way to it never exceed
  its depth (the room ``switch_egress`` assumes of the crossbar);
* **a multicast is served once per destination**: while the mask queue holds a packet, ``GrantStart``'s
  remaining destinations are its head's mask less the outputs granted to it so far; a multicast grant
  goes only to remaining destinations; the head is dequeued exactly on the round that serves its last;
* **the per-output counts of pending multicast packets match the mask queue**: ``GrantStart``'s count for
  output j is the number of queued mask packets that still have to go to j (the head's remaining
  destinations, the others' masks);
* **the reader's transfer is its grant's**: its outputs are the grant, it is an error response exactly
  when the grant answered one, and it frees the packet's cells exactly on the packet's last pass (a
  unicast packet's, a multicast's last round).

The invariant: per output, no two matches at once, a match beside another input's reader only when that
reader's counted transfer reads its last now, and the output queue's level, the flits on their way and
``lanes`` flits per read cycle of the counted transfers to come (those reading, those matched) within its
depth; per input, a counted match is to one output and answers a unicast request (``short_d`` within
``cd_d`` of ``AllocRequest``: equal at speedup 1), the counted transfer's reader is not an error response
and holds one output, the reader's cell and its one-hot agree, the class the allocator answered is the one
the input kept; at speedup 2, the counted reader's cells left to its last are ``2 * rleft`` or one fewer
(``rleft`` of ``AllocRequest``: zero with no counted transfer), a unicast match is to a non-empty VOQ and
a counted one short exactly when its head's read-cycle count is 1; with ``req_stage`` a request on its way (``RequestStage``'s register)
only from an input with no match and an idle reader, and a multicast one only to remaining destinations;
the mask queue within the cells, every queued mask non-zero, the head's served outputs within its mask
(none while the queue is empty) and at least one destination left.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.switch.alloc_request import REQ_ERR, REQ_UC, AllocRequest
from hw.switch.allocator import ISlipAllocator
from hw.switch.cell_reader import CellReader
from hw.switch.grant_start import GrantStart
from hw.switch.output_ownership import OutputOwnership
from hw.switch.request_stage import RequestStage

from .observe import driven, elaborate_now
from .runner import Properties
from .switch_queues import _Conj

__all__ = ["SwitchAllocHarness", "ownership_terms", "ONE", "BUSY", "AHEAD", "ROOM", "MC", "PEND", "PASS"]

FLIT_WIDTH = 128
ONE = "no output is read by two readers at once, nor fed by two inputs in one cycle"
BUSY = "output-busy agrees with the holders"
AHEAD = "the registered match and the read-ahead registers agree with the readers"
ROOM = "no output queue overflows"
MC = "a multicast is served once per destination: grants only to its remaining destinations, dequeued on its last round"
PEND = "the per-output counts of pending multicast packets match the mask queue"
PASS = "the reader's transfer is its grant's: its outputs, and its cells freed only on the packet's last pass"


class _BusyKept(OutputOwnership):
    def next_busy(self, busy, release, newly):
        return busy | newly


class _BusyDropped(OutputOwnership):
    def next_busy(self, busy, release, newly):
        return busy & ~release


class _AdmitBlind(OutputOwnership):
    def coming(self, j, reads_next):
        return 0


class _AdmitPacketBlind(OutputOwnership):
    def whole_packet(self):
        return 0


#: Broken output ownerships (``SwitchAllocHarness(glue=...)``).
GLUE_MUTANTS = {"busy_kept": _BusyKept, "busy_dropped": _BusyDropped, "admit_blind": _AdmitBlind,
                "admit_packet_blind": _AdmitPacketBlind}


def _at_most_one(bits):
    bits = list(bits)
    return Cat(bits[a] & bits[b] for a in range(len(bits)) for b in range(a + 1, len(bits))).any() == 0 \
        if len(bits) > 1 else Const(1)


def _orr(vals):
    vals = list(vals)
    acc = vals[0]
    for v in vals[1:]:
        acc = acc | v
    return acc


def _onehot(v):
    return (v != 0) & ((v & (v - 1)) == 0)


def ownership_terms(one_ok, busy_ok, ahead_ok, room_ok, inv, *, match, act, dst, cd, readers, gsh, rleft, out_busy,
                    granted_cd, reads_now, level, n_in, depth, lanes, short, cd_d, short_d, grant_class, rd_err,
                    rd_cell, rd_hot, rd_issue, n_cells, to_come=None):
    """The output allocation's properties and the invariant they rest on, over the blocks' signals (per input
    ``i``: its match, its reader's activity, outputs and count of reads left, its request's counted and short
    flags; per output ``j``: output-busy, the read-ahead registers, the output queue's level and this cycle's
    writes), added to the conjunctions ``one_ok``... and ``inv`` (None: the properties alone).
    ``to_come`` (speedup 2): per output, the flits of the counted transfers still to be read to it."""
    N, D, L, C = len(match), depth, lanes, n_cells
    for j in range(N):
        one_ok &= _at_most_one(act[i] & dst[i][j] for i in range(N))
        one_ok &= _at_most_one(readers[i].out_valid.any() & readers[i].out_dests[j] for i in range(N))
        # A counted transfer of three read cycles or more is released two reads before its end.
        busy_ok &= out_busy[j] == _orr([(match[i][j] & ~gsh[i]) | (act[i] & ~cd[i] & dst[i][j]) |
                                        (act[i] & cd[i] & (rleft[i] >= 3) & dst[i][j]) for i in range(N)])
        if short:
            ahead_ok &= granted_cd[j] == _orr([match[i][j] & cd_d[i][j] for i in range(N)])
            ahead_ok &= reads_now[j] == _orr([act[i] & cd[i] & dst[i][j] for i in range(N)])
        room_ok &= level[j] + n_in[j] <= D
    for i in range(N):
        ahead_ok &= (match[i] == 0) | ~act[i] | (cd[i] & readers[i].release)
        if L == 1:      # a short transfer reads its one cell in the cycle after its grant
            ahead_ok &= ~(act[i] & cd[i]) | readers[i].release
        else:           # a counted one reads in each of the rleft cycles after its grant, its last in the last
            ahead_ok &= ~(act[i] & cd[i]) | (rd_issue[i] & (readers[i].release == (rleft[i] == 1)))
    if inv is None:
        return
    for j in range(N):
        inv.tag = f"_o{j}"
        inv &= _at_most_one(match[i][j] for i in range(N))
        for i in range(N):
            for k in range(N):
                if k != i:
                    inv &= ~(match[i][j] & act[k] & dst[k][j]) | (cd[k] & readers[k].release)
        if L == 1:
            inv &= level[j] + n_in[j] + reads_now[j] + granted_cd[j] <= D
        else:
            inv &= level[j] + n_in[j] + to_come[j] <= D
    for i in range(N):
        inv.tag = f"_i{i}"
        inv &= ((match[i] & cd_d[i]) == 0) | _onehot(match[i])
        inv &= (cd_d[i] == short_d[i]) if L == 1 else ((short_d[i] & ~cd_d[i]) == 0)
        inv &= (cd_d[i] == 0) | (grant_class[i] == REQ_UC)
        inv &= ~(act[i] & cd[i]) | (~rd_err[i] & _onehot(dst[i]))
        inv &= (rd_cell[i] < C) & (rd_hot[i] == (Const(1, C) << rd_cell[i])[:C])
    inv.tag = ""


class SwitchAllocHarness(wiring.Component):
    """``ports`` inputs and outputs (every input sends), ``n_cells`` cells per input (the widths of the cell
    indices; at speedup 2 at least ``max_payload + 2``), at ``speedup`` 1 or 2, packets of up to
    ``max_payload + 1`` flits (default 2 at speedup 1, 4 at speedup 2), output queues of ``egress_depth``
    flits (default as ``NVSwitch``: 4, or two maximal packets), ``iterations`` of iSLIP per cycle,
    ``queueing`` ``"voq"`` or ``"fifo"`` (no VOQs: no counted transfers);
    ``req_stage`` registers the requests (then
    no transfer is counted and, at speedup 1, every output is admitted). ``allocator``/``reader``/
    ``request``/``start`` (factories, ``port -> block`` for the per-input ones) replace the real blocks
    (mutants); ``glue`` names a broken :class:`OutputOwnership` (:data:`GLUE_MUTANTS`: ``"busy_kept"``, the
    busy flag never cleared; ``"busy_dropped"``, a held match does not set it; ``"admit_blind"``, an output
    admitted without the room of the flits in flight; ``"admit_packet_blind"``, at speedup 2 without room for
    a whole packet).
    ``invariant=False`` states the properties alone, ``only`` some of them (``"one"``, ``"busy"``,
    ``"ahead"``, ``"room"``, ``"mc"``, ``"pend"``, ``"pass"``)."""

    #: Proof and covers on yices; the design flattened and optimised (the flit datapath is unobserved).
    formal_options = {"engine": "smtbmc yices", "script_extra": "flatten\nopt -full"}

    def __init__(self, *, ports: int = 3, n_cells: int = 3, speedup: int = 1, max_payload: int | None = None,
                 egress_depth: int | None = None, req_stage: bool = False, iterations: int = 1, queueing: str = "voq",
                 allocator=None, reader=None, request=None, start=None, glue: str | None = None, invariant: bool = True,
                 only=("one", "busy", "ahead", "room", "mc", "pend", "pass")):
        if glue is not None and glue not in GLUE_MUTANTS:
            raise ValueError(f"unknown glue mutant {glue!r}; valid: {', '.join(GLUE_MUTANTS)}")
        if queueing not in ("voq", "fifo"):
            raise ValueError(f"queueing must be 'voq' or 'fifo', got {queueing!r}")
        if speedup not in (1, 2):
            raise ValueError(f"speedup must be 1 or 2, got {speedup!r}")
        L = self.lanes = speedup
        P = self.max_payload = max_payload if max_payload is not None else (1 if L == 1 else 3)
        # As NVSwitch: 4 flits at speedup 1, two maximal packets at speedup 2.
        egress_depth = egress_depth if egress_depth is not None else (4 if L == 1 else 2 * (P + 1))
        # As InputUnit: a packet's read cycles ceil(flits / lanes), counted only for 1 at one lane.
        self.max_rc = -(-(P + 1) // L) if L > 1 else 1
        if L > 1 and n_cells < P + 2:
            raise ValueError(f"n_cells must be at least max_payload + 2 = {P + 2} at speedup 2 (a counted packet's "
                             f"cells are laid out consecutively), got {n_cells}")
        self.ports, self.n_cells, self.depth, self.req_stage = ports, n_cells, egress_depth, req_stage
        self.glue, self.invariant, self.only = glue, invariant, only
        N, C = ports, n_cells
        self.queueing = queueing
        NU = self.n_uc = N if queueing == "voq" else 0      # VOQs (fifo: every packet in the mask queue)
        self.short = not req_stage and NU > 0   # InputUnit: counted transfers need grant_delay 1 and VOQs
        gd = 2 if req_stage else 1
        self.alloc = allocator(N) if allocator is not None else ISlipAllocator(N, iterations)
        self.requests = [request(i) if request is not None else
                         AllocRequest(ports=N, n_uc=NU, n_cells=C, port=i, grant_delay=gd, short=self.short,
                                      max_rc=self.max_rc) for i in range(N)]
        self.starts = [start(i) if start is not None else GrantStart(ports=N, n_uc=NU, n_cells=C) for i in range(N)]
        self.readers = [reader(i) if reader is not None else
                        CellReader(ports=N, n_cells=C, flit_width=FLIT_WIDTH, lanes=L) for i in range(N)]
        self.stages = [RequestStage(ports=N) for _ in range(N)] if req_stage else []
        admit = "packet" if L > 1 else "in_flight" if NU and not req_stage else "any"      # as NVSwitch
        self.owner = GLUE_MUTANTS.get(glue, OutputOwnership)(ports=N, lanes=L, egress_depth=egress_depth,
                                                             max_payload=P, admit=admit)
        self.props = Properties()
        n_q = NU + 1
        cell = range(C)
        super().__init__({
            # per input: the packet store's state as the request sees it
            "count": In(range(C + 1)).array(max(1, NU)).array(N),
            "older": In(N).array(N),
            "head_rc": In(range(2)).array(n_q).array(N),
            "next_rc": In(range(2)).array(n_q).array(N),
            "grant_rc": In(range(2)).array(N),
            # per input, at speedup 2: a unicast packet's flits (queued; behind the next packet of a VOQ)
            "enq_len": In(range(P + 2)).array(N),
            "fill_len": In(range(P + 2)).array(N).array(N),
            "mq_head": In(cell).array(N),
            "in_pkt": In(1).array(N),
            "cur_q": In(range(max(2, n_q))).array(N),
            "cur_hdr": In(cell).array(N),
            "cut_ok": In(1).array(N),
            "err_rdy": In(1).array(N),
            # per input: the queues' side of a grant
            "enq": In(1).array(N),
            "enq_q": In(range(max(2, n_q))).array(N),
            "enq_mask": In(N).array(N),
            "head": In(cell).array(N),
            # per input: the cells the reader sees
            "written": In(C).array(N),
            "clast": In(C).array(N),
            "cnext": In(cell).array(L).array(N),
            # per output: the output queue sends a flit
            "o_ready": In(N),
        })

    def elaborate(self, platform):
        m = Module()
        N, D, L, P, NU = self.ports, self.depth, self.lanes, self.max_payload, self.n_uc
        MQ = NU
        al = self.alloc
        m.submodules.alloc = al
        rqs, gss, rds = self.requests, self.starts, self.readers

        # ------------------------------------------------------------ the blocks and their hidden state
        short_d, cd_d, rd_err, rd_cell, rd_hot, rd_free, mc_cnt = [], [], [], [], [], [], []
        rd_issue, rleft = [], []
        for i in range(N):
            rm = rqs[i]._formal_m = elaborate_now(rqs[i], platform)
            short_d.append(driven(rm, "short_d") if self.short else Const(0, N))
            cd_d.append(driven(rm, "cd_d") if self.short else Const(0, N))
            dm = elaborate_now(rds[i], platform)
            rd_err.append(driven(dm, "rd_err"))
            rd_cell.append(driven(dm, "rd_cell"))
            rd_hot.append(driven(dm, "lane0_hot"))
            rd_free.append(driven(dm, "rd_free"))
            rd_issue.append(driven(dm, "lane0_issue"))
            rleft.append(driven(rm, "rleft") if self.short else Const(0, 1))
            gm = elaborate_now(gss[i], platform)
            mc_cnt.append([driven(gm, f"mc_pend{j}") for j in range(N)])

        # ------------------------------------------------------------ the inputs
        m.submodules.owner = ow = self.owner
        match = [ow.match[i] for i in range(N)]
        space = ow.space
        C = self.n_cells
        ones = Const((1 << C) - 1, C)

        def valid_cell(c):       # the store names cells that exist
            return Mux(c < C, c, 0)
        # The mask queue of each input, as the store keeps it (switch_queues: every packet read whole, in order per
        # queue): its packets' destination masks from its head (position 0) on.
        mq_n = [Signal(range(C + 1), name=f"mq_n{i}") for i in range(N)]
        mq_mask = [[Signal(N, name=f"mq_mask{i}_{k}") for k in range(C)] for i in range(N)]
        e_mq = [Signal(name=f"e_mq{i}") for i in range(N)]
        # At speedup 2, each VOQ as the store keeps it, as far as the request sees it: its length and the flits
        # of its head and of the packet behind it (a packet's read-cycle count is ceil(flits / 2)); the one
        # behind those is any length. A counted transfer's packet, fully written, is read from its header cell
        # on through consecutive cells to its last (``last_cell``).
        vn = [[Signal(range(C + 1), name=f"vn{i}_{j}") for j in range(NU)] for i in range(N)]
        hlen = [[Signal(range(P + 2), init=1, name=f"hlen{i}_{j}") for j in range(NU)] for i in range(N)]
        nlen = [[Signal(range(P + 2), init=1, name=f"nlen{i}_{j}") for j in range(NU)] for i in range(N)]
        last_cell = [Signal(range(C), name=f"last_cell{i}") for i in range(N)]

        def flits(v):            # a packet's flits: 1..max_payload + 1
            return Mux((v == 0) | (v > P + 1), 1, v)

        def rc(v):
            return (v + 1) >> 1

        def cell_after(c, k):    # the cell k after cell c, modulo the cells
            return Mux(c + k >= C, c + k - C, c + k)
        for i in range(N):
            rq, gs, rd = rqs[i], gss[i], rds[i]
            m.submodules[f"request{i}"], m.submodules[f"start{i}"], m.submodules[f"reader{i}"] = rq, gs, rd
            m.d.comb += rq.count[MQ].eq(mq_n[i])
            if L == 1:
                for q in range(NU):
                    m.d.comb += rq.count[q].eq(self.count[i][q])
                for q in range(NU + 1):
                    m.d.comb += [rq.head_rc[q].eq(self.head_rc[i][q]), rq.next_rc[q].eq(self.next_rc[i][q])]
                m.d.comb += rq.grant_rc.eq(self.grant_rc[i])
                enq_uc_ok = Const(1)
            else:
                for q in range(NU):
                    m.d.comb += [rq.count[q].eq(vn[i][q]), rq.head_rc[q].eq(rc(hlen[i][q])),
                                 rq.next_rc[q].eq(rc(nlen[i][q]))]
                m.d.comb += rq.grant_rc.eq(sum(Mux(gs.sel == q, rc(hlen[i][q]), 0) for q in range(NU)))
                enq_uc_ok = Value.cast(sum(Mux(self.enq_q[i] == q, vn[i][q], 0) for q in range(NU))) < C
            # The ingress queues a mask packet with a destination (a zero mask is refused), and any packet within
            # the cells.
            enq = self.enq[i] & Mux(self.enq_q[i] == MQ, (self.enq_mask[i] != 0) & (mq_n[i] < C),
                                    (self.enq_q[i] < MQ) & enq_uc_ok)
            if L > 1:
                nf = flits(self.enq_len[i])
                for q in range(NU):
                    pop_q, e_q = gs.deq[q], enq & (self.enq_q[i] == q)
                    after = vn[i][q] - pop_q
                    h_after = Mux(pop_q, nlen[i][q], hlen[i][q])
                    n_after = Mux(pop_q, flits(self.fill_len[i][q]), nlen[i][q])
                    m.d.sync += [vn[i][q].eq(after + e_q),
                                 hlen[i][q].eq(Mux(e_q & (after == 0), nf, h_after)),
                                 nlen[i][q].eq(Mux(e_q & (after == 1), nf, n_after))]
                with m.If(gs.start.valid & ((match[i] & cd_d[i]) != 0)):      # a counted transfer starts
                    m.d.sync += last_cell[i].eq(cell_after(gs.start.cell, sum(Mux(gs.sel == q, hlen[i][q], 0)
                                                                              for q in range(NU)) - 1))
            m.d.comb += e_mq[i].eq(enq & (self.enq_q[i] == MQ))
            pop = gs.deq[MQ]
            m.d.sync += mq_n[i].eq(mq_n[i] + e_mq[i] - pop)
            for k in range(C):
                # after the pop (if any), the packet enqueued goes to the first free position
                shifted = Mux(pop, mq_mask[i][k + 1] if k + 1 < C else 0, mq_mask[i][k])
                with m.If(e_mq[i] & ((mq_n[i] - pop) == k)):
                    m.d.sync += mq_mask[i][k].eq(self.enq_mask[i])
                with m.Else():
                    m.d.sync += mq_mask[i][k].eq(shifted)
            m.d.comb += [
                rq.older.eq(self.older[i]), rq.mq_head.eq(self.mq_head[i]), rq.in_pkt.eq(self.in_pkt[i]),
                rq.cur_q.eq(self.cur_q[i]), rq.cur_hdr.eq(self.cur_hdr[i]), rq.cut_ok.eq(self.cut_ok[i]),
                rq.mc_res.eq(gs.mc_res), rq.mc_pend.eq(gs.mc_pend), rq.err_rdy.eq(self.err_rdy[i]),
                rq.rd_active.eq(rd.active), rq.rd_dests.eq(rd.dests), rq.grant.eq(match[i]),
                gs.grant.eq(match[i]), gs.grant_class.eq(rq.grant_class), gs.enq.eq(enq),
                gs.enq_q.eq(self.enq_q[i]), gs.enq_mask.eq(self.enq_mask[i]), gs.mq_count.eq(mq_n[i]),
                gs.next_mask.eq(mq_mask[i][1] if C > 1 else 0), gs.head.eq(valid_cell(self.head[i])),
                rd.space.eq(space), rd.port.eq(i),
            ]
            wiring.connect(m, gs.start, rd.start)
            # A counted transfer's cells are written, its last cell marked last (the store's contract); other
            # cells as the free inputs say.
            counted = rd.active & rq.cur_cd
            if L == 1:      # a short transfer: one cell
                m.d.comb += [rd.written.eq(Mux(counted, ones, self.written[i])),
                             rd.clast.eq(Mux(counted, ones, self.clast[i])),
                             rd.cnext_data[0].eq(valid_cell(self.cnext[i][0]))]
            else:
                m.d.comb += [rd.written.eq(Mux(counted, ones, self.written[i])),
                             rd.clast.eq(Mux(counted, (Const(1, C) << last_cell[i])[:C], self.clast[i]))]
                for k in range(L):
                    m.d.comb += rd.cnext_data[k].eq(Mux(counted, cell_after(rd.cnext_addr[k], 1),
                                                        valid_cell(self.cnext[i][k])))
            if self.req_stage:
                rs = self.stages[i]
                m.submodules[f"stage{i}"] = rs
                m.d.comb += [rs.req.eq(rq.req), rs.req_class.eq(rq.req_class), rs.accept.eq(al.accept[i]),
                             al.req[i].eq(rs.alloc_req), al.req_class[i].eq(rs.alloc_class)]
            else:
                m.d.comb += [al.req[i].eq(rq.req), al.req_class[i].eq(rq.req_class)]

        # ------------------------------------------------------------ output ownership (as NVSwitch)
        in_release = [Mux(rds[i].release & ~rqs[i].cur_cd, rds[i].dests, 0) | rqs[i].release for i in range(N)]
        # The switch's output ownership, the real block (NVSwitch's ``owner``), wired as NVSwitch wires it.
        for i in range(N):
            m.d.comb += [ow.accept[i].eq(al.accept[i]), ow.short[i].eq(rqs[i].req_short),
                         ow.counted[i].eq(rqs[i].req_cd), ow.release[i].eq(in_release[i]),
                         ow.reads_next[i].eq(rqs[i].reads_next)]
        m.d.comb += al.out_free.eq(ow.out_free)
        out_busy, granted_cd, reads_now = ow.busy, ow.granted_cd, ow.reads_now

        # ------------------------------------------------------------ the crossbar and the output queues
        level = [Signal(range(D + 1), name=f"level{j}") for j in range(N)]
        n_in = [Signal(range(N * L + 1), name=f"n_in{j}") for j in range(N)]
        for j in range(N):
            m.d.comb += n_in[j].eq(sum(rds[i].out_valid[k] & rds[i].out_dests[j] for i in range(N) for k in range(L)))
            pop = self.o_ready[j] & (level[j] != 0)
            m.d.sync += level[j].eq(level[j] + n_in[j] - pop)
            m.d.comb += [ow.level[j].eq(level[j]), ow.written[j].eq(n_in[j])]

        # ------------------------------------------------------------ properties and their invariant
        act = [rds[i].active for i in range(N)]
        dst = [rds[i].dests for i in range(N)]
        cd = [rqs[i].cur_cd for i in range(N)]
        gsh = [rqs[i].grant_short for i in range(N)]

        one_ok = _Conj(m, "one")
        busy_ok = _Conj(m, "busy")
        ahead_ok = _Conj(m, "ahead")
        room_ok = _Conj(m, "room")
        inv = _Conj(m, "inv")
        if L > 1:
            # The flits on their way, and two per read cycle of the counted transfers to come.
            to_come = [L * sum(Mux(act[i] & cd[i] & dst[i][j], rleft[i], 0) +
                               (Mux(match[i][j] & cd_d[i][j], rc(hlen[i][j]), 0) if NU else 0) for i in range(N))
                       for j in range(N)]
        else:
            to_come = None
        ownership_terms(one_ok, busy_ok, ahead_ok, room_ok, inv if self.invariant else None, match=match,
                        act=act, dst=dst, cd=cd, readers=rds, gsh=gsh, rleft=rleft, out_busy=out_busy,
                        granted_cd=granted_cd, reads_now=reads_now, level=level, n_in=n_in, depth=D, lanes=L,
                        short=self.short, cd_d=cd_d, short_d=short_d, grant_class=[rq.grant_class for rq in rqs],
                        rd_err=rd_err, rd_cell=rd_cell, rd_hot=rd_hot, rd_issue=rd_issue, n_cells=self.n_cells,
                        to_come=to_come)
        if self.invariant:
            for i in range(N):
                inv.tag = f"_i{i}"
                if self.req_stage:
                    inv &= (self.stages[i].alloc_req == 0) | ((match[i] == 0) & ~act[i])
                if L > 1:
                    # The counted transfer's cells left and its read cycles left; its packet's queue.
                    left = Mux(last_cell[i] >= rd_cell[i], last_cell[i] - rd_cell[i], last_cell[i] + C - rd_cell[i]) + 1
                    inv &= last_cell[i] < C
                    inv &= Mux(act[i] & cd[i], (rleft[i] >= 1) & (rleft[i] <= self.max_rc) &
                               ((left == 2 * rleft[i]) | (left + 1 == 2 * rleft[i])), rleft[i] == 0)
                    for q in range(NU):
                        inv &= (hlen[i][q] >= 1) & (hlen[i][q] <= P + 1) & (nlen[i][q] >= 1) & (nlen[i][q] <= P + 1)
                        inv &= vn[i][q] <= C
                        inv &= ~(match[i][q] & (rqs[i].grant_class == REQ_UC)) | (vn[i][q] != 0)
                        inv &= ~(match[i][q] & cd_d[i][q]) | (short_d[i][q] == (rc(hlen[i][q]) == 1))
            inv.tag = ""

        # ------------------------------------------------------------ multicast: the spec of the mask-queue head
        # ``served``: the outputs the mask-queue head has been granted so far (its destinations left: its mask
        # less those); ``acc_cls``: the class of the request the allocator answered, as it saw it.
        mc_ok = _Conj(m, "mc")
        pend_ok = _Conj(m, "pend")
        pass_ok = _Conj(m, "pass")
        partial_done = Signal()     # a head was granted a round that was not its last
        two_pending = Signal()
        last_after_partial = Signal()     # a head left on a round after one that was not its last
        lap_terms = []
        partial_pass = Signal()
        for i in range(N):
            gs, rq, rd = gss[i], rqs[i], rds[i]
            served = Signal(N, name=f"served{i}")
            acc_cls = Signal(2, name=f"acc_cls{i}")
            m.d.sync += acc_cls.eq(al.req_class[i])
            head_mask = mq_mask[i][0]
            rem = head_mask & ~served
            granted = match[i] != 0
            mask_grant = granted & acc_cls[0]
            final = (rem & ~match[i]) == 0
            pop = gs.deq[MQ]
            with m.If(pop):
                m.d.sync += served.eq(0)
            with m.Elif(mask_grant):
                m.d.sync += served.eq(served | match[i])
            has = mq_n[i] != 0
            # Each grant goes to destinations the head still has (each served once); the head leaves on the
            # round that serves its last ones, and GrantStart's remaining destinations are the head's.
            mc_ok &= ~has | (gs.mc_res == rem)
            mc_ok &= ~mask_grant | (has & ((match[i] & ~rem) == 0))
            mc_ok &= pop == (mask_grant & final)
            # The per-output counts: the queued packets that still have to go there.
            for j in range(N):
                want = sum((mq_n[i] > k) & (rem[j] if k == 0 else mq_mask[i][k][j]) for k in range(C))
                pend_ok &= mc_cnt[i][j] == want
            # The reader's transfer is its grant's: its outputs; an error response or a packet; the packet's
            # cells freed only on its last pass (a unicast packet's only one, a multicast's last round).
            exp_dests = Signal(N, name=f"exp_dests{i}")
            exp_err = Signal(name=f"exp_err{i}")
            exp_free = Signal(name=f"exp_free{i}")
            with m.If(granted):
                m.d.sync += [exp_dests.eq(match[i]), exp_err.eq(acc_cls == REQ_ERR),
                             exp_free.eq((acc_cls == REQ_UC) | (acc_cls[0] & final))]
            pass_ok &= ~rd.active | ((rd.dests == exp_dests) & (rd_err[i] == exp_err) &
                                     (exp_err | (rd_free[i] == exp_free)))
            if self.invariant:
                inv.tag = f"_m{i}"
                inv &= mq_n[i] <= C
                inv &= acc_cls == rq.grant_class
                inv &= ~has | (rem != 0)
                inv &= has | (served == 0)
                inv &= (served & ~head_mask) == 0
                for k in range(1, C):
                    inv &= (mq_n[i] <= k) | (mq_mask[i][k] != 0)
                if self.req_stage:
                    st = self.stages[i]
                    inv &= ~((st.alloc_req != 0) & st.alloc_class[0]) | (has & ((st.alloc_req & ~rem) == 0))
                inv.tag = ""
            m.d.sync += [partial_done.eq(partial_done | (mask_grant & ~final)),
                         two_pending.eq(two_pending | Cat(mc_cnt[i][j] >= 2 for j in range(N)).any()),
                         partial_pass.eq(partial_pass | (rd.active & ~rd_err[i] & ~rd_free[i]))]
            lap_terms.append(pop & (served != 0))

        m.d.comb += last_after_partial.eq(Cat(lap_terms).any())

        # Covers.
        held_now = sum(act[i] & ~cd[i] for i in range(N))
        two_held = Signal()         # two readers have held an output each at once
        m.d.sync += two_held.eq(two_held | (held_now >= 2))
        rel_d = [Signal(N, name=f"rel_d{i}") for i in range(N)]
        m.d.sync += [rel_d[i].eq(in_release[i]) for i in range(N)]
        # An output released by one input's reader is matched to another input in the next cycle.
        handover = Cat((al.accept[i] & _orr([rel_d[k] for k in range(N) if k != i])) != 0
                       for i in range(N)).any()
        handed = Signal()
        m.d.sync += handed.eq(handed | handover)
        back_to_back = Cat((match[i] != 0) & act[i] & cd[i] for i in range(N)).any()
        busy_cover = handover & (_orr(in_release) != 0)
        if L > 1:
            # A counted transfer of the most read cycles ends while another input's match to its output starts:
            # the output was released ahead of the transfer's end and handed over with no idle read cycle.
            r_of = [Signal(range(self.max_rc + 1), name=f"r_of{i}") for i in range(N)]
            for i in range(N):
                with m.If((match[i] & cd_d[i]) != 0):
                    m.d.sync += r_of[i].eq(rqs[i].grant_rc)
            back_to_back = Cat(match[k][j] & act[i] & cd[i] & dst[i][j] & (rleft[i] == 1) &
                               (r_of[i] == self.max_rc)
                               for i in range(N) for k in range(N) if k != i for j in range(N)).any()
            early_d = [Signal(N, name=f"early_d{i}") for i in range(N)]
            m.d.sync += [early_d[i].eq(rqs[i].release) for i in range(N)]
            busy_cover = Cat((al.accept[i] & _orr([early_d[k] for k in range(N) if k != i])) != 0
                             for i in range(N)).any()

        # With the invariant, each property is proven together with the others (they rest on one another);
        # without it (a mutant's bounded check) each is stated alone.
        every = Cat(one_ok.all(), busy_ok.all(), ahead_ok.all(), room_ok.all(), mc_ok.all(), pend_ok.all(),
                    pass_ok.all(), inv.all()).all() if self.invariant else Const(1)
        p, only = self.props, self.only
        if "one" in only:
            p.check(m, ONE, one_ok.all() & every, two_held & handed & (sum(n_in) >= 2))
        if "busy" in only:
            p.check(m, BUSY, busy_ok.all() & every, busy_cover)
        if "ahead" in only:
            p.check(m, AHEAD, ahead_ok.all() & every,
                    back_to_back if self.short else handed & (sum(match[i] != 0 for i in range(N)) >= 2))
        if "room" in only:
            p.check(m, ROOM, room_ok.all() & every, Cat(level[j] + n_in[j] == D for j in range(N)).any())
        if "mc" in only:
            p.check(m, MC, mc_ok.all() & every, last_after_partial & partial_done)
        if "pend" in only:
            p.check(m, PEND, pend_ok.all() & every, two_pending)
        if "pass" in only:
            p.check(m, PASS, pass_ok.all() & every, partial_pass & last_after_partial)
        return m
