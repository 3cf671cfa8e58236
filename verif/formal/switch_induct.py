"""Formal harness of the whole NVSwitch with its composed invariant: the switch harness's four properties
(:mod:`verif.formal.switch`: packets atomic per output, no loss, duplicate or reordering per pair, multicast
exactly once, flits conserved), each asserted together with the invariant the part harnesses prove on their
own blocks, now stated over the switch's own internal signals, and what only the composition has.

Instance: the smallest that is still the switch's datapath: 2 ports, both sending and both destinations,
``credits`` 3 (4 cells per input, the size at which ``switch_queues`` closes), ``max_payload`` 1,
``speedup`` 1, VOQ, one iSLIP iteration, 2 downstream credits per output, 4-flit output queues.
:class:`~hw.switch.nvswitch.NVSwitch`'s constructor refuses fewer than 4 ports and 4 credits (the sizes a
network uses); :func:`small_switch` builds it at those and sets ``ports`` and ``credits`` before
elaboration, so the logic elaborated is the switch's own (its ``elaborate`` and every block unchanged).

Environment and properties: those of :class:`~verif.formal.switch.SwitchHarness` (good packets only).

The invariant (each term a signal named ``inv_inv_L<line>_<tag>_<n>``, so that a counterexample's trace
shows which one broke) is read from the elaborated blocks by name (:func:`~verif.formal.observe.driven`),
through one added read port per cell or slot on their memories (cell buffer, next-cell, next-packet,
arrival-number, mask and read-cycle tables; output queues), and from harness registers kept beside the
blocks from their own signals (per cell: its queue, the packet's number in that queue, the flit's index,
the packet's length, arrival number, destinations and tag; the packets enqueued and dequeued per queue;
the writer's and reader's packets; the mask-queue head's served outputs). The part proofs' terms are
called, not copied: ``switch_queues``' :func:`~verif.formal.switch_queues.pool_partition`,
:func:`~verif.formal.switch_queues.store_chain` and :func:`~verif.formal.switch_queues.store_head_order`;
``switch_alloc``'s :func:`~verif.formal.switch_alloc.ownership_terms`; ``switch_egress``'s
:func:`~verif.formal.switch_egress.egress_credit_ok` and :func:`~verif.formal.switch_egress.egress_pointers_ok`.
What the composition adds (``docs/verification.md`` lists it): the credit link's invariant at the input;
the ingress and its sender; every cell's flit bit for bit; the mask and read-cycle count beside each
queued header; the matches' validity (a unicast one to the oldest packet for its output, a mask one to
remaining destinations, all at once for a head still arriving); the reader's outputs and tag; per output,
the queued and crossbar flits framed from the receiver's state on, a partial tail packet only the one
whose reader holds the output; per pair, the flits and headers accepted less delivered, and each pending
header's number.

Proof: k-induction, k = 1 (``stepped=True``, :meth:`SwitchInductHarness.prove`): the base case a bounded
check from reset, the induction step in parts (:func:`step_parts`), each its own k-induction run of one
cycle (:meth:`SwitchInductHarness._step_part`): with the whole invariant and the four properties holding in
a state, and the earlier parts' terms in its successor, the part's terms hold in the successor. The parts
together are the step: the invariant and the properties, holding in a state, hold in its successor. At 3
credits (``dysharp formal switch_induct``) the step is in 22 parts (``fine``: the terms by their tags, each
output's stream in four); at 2 credits (3 cells per input) and 1 downstream credit (``dysharp formal
switch_induct_small``) in 4. The step as one query (``run_formal(..., induction=True, depth=2)`` on the
plain harness) gives no answer in 10 minutes on yices at the small instance, nor in 30 at 3 credits; in
parts, the solver has the earlier parts' terms as lemmas (at 3 credits one output's stream as one part
took 16 minutes, in four parts 4). At 3 cells (not a power of two) the step needs the next-cell table's
bound (its entries are cell numbers), which a power-of-two cell count gives for free.
"""

import re
import time
from types import SimpleNamespace

from amaranth.hdl import Assume, Cat, Const, Module, Mux, Signal, Value

from hw.packet import HEADER_BITS, HeaderLayout, Opcode, rtl_payload_flits
from hw.switch.alloc_request import REQ_ERR, REQ_MASK, REQ_MASK_ALL, REQ_UC
from hw.switch.nvswitch import NVSwitch

from .observe import driven, elaborate_now, observe_queue
from .runner import UNBOUNDED, PropertyResult, run_formal
from .switch import KIND_HDR, MARK, SEQ_BITS, SEQ_LO, SwitchHarness
from .switch_alloc import ownership_terms
from .switch_egress import egress_credit_ok, egress_pointers_ok
from .switch_queues import (_Conj, _sel, pool_partition, store_age, store_chain, store_head_order, store_pos,
                            store_queued)

__all__ = ["FINE_OUT_PARTS", "FINE_PARTS", "SwitchInductHarness", "n_step_parts", "small_switch", "step_parts"]


def small_switch(*, ports: int = 2, credits: int = 3, out_credits: int = 2) -> NVSwitch:
    """The NVSwitch (``max_payload`` 1, speedup 1, VOQ, one iSLIP iteration, one group) at ``ports`` and
    ``credits`` below its constructor's minimums (4 and 4): built at those, then set before elaboration."""
    sw = NVSwitch(ports=4, credits=4, out_credits=out_credits, max_payload=1, groups=1, speedup=1, queueing="voq",
                  iterations=1)
    sw.ports, sw.credits = ports, credits
    return sw


#: The induction step's first part, split (``fine``): (what, the tag of its terms' names), in order.
FINE_PARTS = (
    ("the allocation's untagged terms", r"^inv_inv_L\d+_\d+$"), ("the credit link at the inputs", r"_cr\d+_\d+$"),
    ("the ingress", r"_ing\d+_\d+$"), ("the cell pools", r"_pool\d+_\d+$"), ("the packet stores", r"_store\d+_\d+$"),
    ("the stores' writers", r"_w\d+_\d+$"), ("the stores' cells", r"_c\d+_\d+$"),
    ("the writers' header cells and lap contract", r"_wr\d+_\d+$"), ("the allocation, per input", r"_i\d+_\d+$"),
    ("the allocation, per output", r"_o\d+_\d+$"), ("the output queues' credits and pointers", r"_eg\d+_\d+$"),
    ("the cells' flits, the matches and the queue order", r"_cells\d+_\d+$"))


#: An output stream's terms, split (``fine``): (what, the tag's last letter), in order.
FINE_OUT_PARTS = (("framing", "f"), ("flits per pair", "n"), ("headers per pair", "h"),
                  ("pending headers' numbers", "s"))


def n_step_parts(ports: int, fine: bool = False) -> int:
    """How many parts :func:`step_parts` makes."""
    return (len(FINE_PARTS) + len(FINE_OUT_PARTS) * ports + 2) if fine else (ports + 2)


def step_parts(terms, props, ports: int, fine: bool = False) -> list[tuple[str, list]]:
    """The induction step's parts, in order: (what, terms). Each part is proven in a successor state from
    the whole invariant and the properties in the state before it and the earlier parts in the successor
    (:meth:`SwitchInductHarness._step_part`): first every term but the output streams' (the inputs' credits,
    ingress, packet store, cells and matches, the allocation, the output queues' credits and pointers),
    then output ``j``'s stream (its ``_out<j>`` terms) for each output, then the four properties.
    ``fine``: the first part split by the terms' tags (:data:`FINE_PARTS`, in that order), each output's
    stream by its terms' tags (:data:`FINE_OUT_PARTS`), and the terms of none of those tags (the stores'
    pairwise terms: no two cells hold one flit) last, after the properties."""
    outs = [[x for x in terms if re.search(rf"_out{j}[fnhs]_\d+$", x.name)] for j in range(ports)]
    in_out = {id(x) for o in outs for x in o}
    if not fine:
        tail = [(f"output {j}'s stream", outs[j]) for j in range(ports)] + [("the four properties", [props])]
        return [("the inputs, the allocation, the output queues", [x for x in terms if id(x) not in in_out])] + tail
    tail = [(f"output {j}'s stream: {what}", [x for x in outs[j] if re.search(rf"_out{j}{t}_\d+$", x.name)])
            for j in range(ports) for what, t in FINE_OUT_PARTS] + [("the four properties", [props])]
    groups = [(what, [x for x in terms if re.search(tag, x.name)]) for what, tag in FINE_PARTS]
    seen = in_out | {id(x) for _, g in groups for x in g}
    return groups + tail + [("the rest (the stores' pairwise terms)", [x for x in terms if id(x) not in seen])]


class SwitchInductHarness(SwitchHarness):
    """The switch harness on :func:`small_switch`, its properties asserted with the composed invariant
    (``invariant=False``: the properties alone).

    ``stepped=True``: :meth:`prove` proves the properties by k-induction (k = 1) with the induction step in
    parts (:func:`step_parts`, :meth:`_step_part`) and the base case a bounded check from reset; else it is
    :func:`~verif.formal.runner.run_formal` on this harness (a bounded check). ``part=p``: the harness of
    the step's part ``p`` (one property, no cover)."""

    #: The next-cell table's bound (a test turns it off: the induction step then fails at 3 cells).
    next_cell_bound = True

    def __init__(self, *, credits: int = 3, out_credits: int = 2, invariant: bool = True, switch=None,
                 stepped: bool = False, part: int | None = None, fine: bool = False):
        self.invariant = invariant
        self.stepped, self.part = stepped, part
        self._make = dict(credits=credits, out_credits=out_credits, invariant=invariant, fine=fine)
        self.fine = fine
        super().__init__(credits=credits, out_credits=out_credits,
                         switch=switch if switch is not None else
                         small_switch(credits=credits, out_credits=out_credits))
        # The base case (and, not ``stepped``, the whole check): bounded, yices, flattened, memories mapped
        # to registers (as YICES_BMC; without opt_dff -sat, which gains nothing here).
        self.formal_options = {"engine": "smtbmc yices", "induction": False,
                               "script_extra": "flatten\nmemory_map\nopt -full"}
        if part is not None:
            # One part of the induction step: k-induction of one cycle (the part's assert, unclocked, on
            # the next state; the whole invariant on this state through a register).
            self.formal_options = {**self.formal_options, "induction": True}

    def elaborate(self, platform):
        if self.part is None:
            return super().elaborate(platform)
        return self._step_part(platform)

    def _step_part(self, platform):
        """Part ``self.part`` of the induction step: with the whole invariant and the four properties
        holding in a state (``prev_ok``, a register of them, assumed) and the earlier parts' terms holding
        in its successor (assumed), this part's terms hold in the successor (asserted). ``prev_ok``
        starts at 1, so the base case (depth 1) also checks the part's terms in the reset state."""
        m = Module()
        t = self._traffic(m)
        self._invariant(m, t, platform)
        terms = list(self._inv.terms)
        props = Cat(t.atomic_ok).all() & Cat(t.order_ok).all() & Cat(t.mc_ok).all() & Cat(t.cons_ok).all()
        parts = step_parts(terms, props, self.switch.ports, self.fine)
        prev_ok = Signal(init=1, name="prev_ok")
        m.d.sync += prev_ok.eq(Cat(terms).all() & props)
        m.d.comb += Assume(prev_ok)
        earlier = [x for _, part in parts[:self.part] for x in part]
        if earlier:
            m.d.comb += Assume(Cat(earlier).all())
        name, goal = parts[self.part]
        self.props.check(m, f"induction step, part {self.part + 1} of {len(parts)}: {name}", Cat(goal).all(),
                         Const(1), domain="comb")
        return m

    def prove(self, name: str, *, depth: int, cover_depth: int | None, workdir="build/formal",
              engine: str | None = None, timeout: int = 900):
        """The four properties' proof: (one result per property, wall seconds). Not ``stepped`` (or on PDR):
        :func:`~verif.formal.runner.run_formal` on this harness. ``stepped``: the base case, a bounded
        check from reset to ``depth`` (and each property's cover, within ``cover_depth``), then each part
        of the induction step (:meth:`_step_part`, k = 1, on ``engine``, else yices); a property is
        "proven (k-induction, k = 1 ...)" when the base case holds and every part is proven. The parts
        together show that the invariant and the properties, holding in a state, hold in its successor.
        The parts build their own :func:`small_switch` (a ``switch`` given here, a mutant, is checked by
        the base case; the step is not tried once the base case fails)."""
        if not self.stepped or engine in UNBOUNDED:
            return run_formal(name, self, self.props, depth=depth, cover_depth=cover_depth, workdir=workdir,
                              engine=engine, timeout=timeout)
        t0 = time.perf_counter()
        base, _ = run_formal(name, self, self.props, depth=depth, cover_depth=cover_depth, workdir=workdir,
                             engine=engine, timeout=timeout)
        n_parts = n_step_parts(self.switch.ports, self.fine)
        step_ok, failed = True, []
        if any(r.proof.startswith("FAILS") for r in base):      # a counterexample from reset: no step to try
            return base, time.perf_counter() - t0
        for p in range(n_parts):
            h = SwitchInductHarness(**self._make, part=p)
            res, _ = run_formal(f"{name}_step{p + 1}", h, h.props, depth=1, cover_depth=None, workdir=workdir,
                                engine=engine, timeout=timeout)
            if not res[0].proof.startswith("proven"):
                step_ok = False
                failed.append(f"part {p + 1}: {res[0].proof}")
        out = []
        for r in base:
            if r.proof.startswith("FAILS") or not step_ok:
                proof = r.proof if r.proof.startswith("FAILS") else f"{r.proof}; induction step: {'; '.join(failed)}"
            else:
                proof = f"proven (k-induction, k = 1; the step in {n_parts} parts; base case to depth {depth})"
            ok = proof.startswith("proven") and r.cover.startswith("reached")
            out.append(PropertyResult(r.name, proof, r.cover, ok, r.engine))
        return out, time.perf_counter() - t0

    def _invariant(self, m, t, platform):
        if not self.invariant:
            return Const(1)
        sw = self.switch
        swm = elaborate_now(sw, platform)
        N, C, D, K = sw.ports, sw.credits + 1, sw.egress_depth, sw.out_credits
        inv = _Conj(m, "inv")

        # ------------------------------------------------------------ the inputs' blocks and hidden state
        ins = []
        for i in range(N):
            iu = swm.submodules[f"in{i}"]
            im = elaborate_now(iu, platform)
            b = dict(iu=iu, pool=im.submodules.pool, ing=im.submodules.ingress, credit=im.submodules.credit,
                     errq=im.submodules.errq, rd=im.submodules.reader, rq=im.submodules.request,
                     gs=im.submodules.start, pq=im.submodules.queues)
            pm = elaborate_now(b["pool"], platform)
            gm = elaborate_now(b["ing"], platform)
            dm = elaborate_now(b["rd"], platform)
            rm = elaborate_now(b["rq"], platform)
            b.update(free=driven(pm, "free"), dropping=driven(gm, "dropping"), cur_poison=driven(gm, "cur_poison"),
                     rd_err=driven(dm, "rd_err"), rd_cell=driven(dm, "rd_cell"), rd_hot=driven(dm, "lane0_hot"),
                     rd_free=driven(dm, "rd_free"), rd_issue=driven(dm, "lane0_issue"),
                     short_d=driven(rm, "short_d"), cd_d=driven(rm, "cd_d"), rleft=driven(rm, "rleft"))
            # The cell buffer's contents, through one added read port per cell.
            cells = []
            for c in range(C):
                port = im.submodules.cells.read_port(domain="comb")
                sig = Signal(len(port.data.as_value()), name=f"obs_cell{i}_{c}")
                im.d.comb += [port.addr.eq(c), sig.eq(port.data)]
                cells.append(sig)
            b["cells"] = cells
            # The packet store, as switch_queues states it: its hidden state, and what each cell holds.
            b["gs_m"] = elaborate_now(b["gs"], platform)
            b["store"] = self._store(m, platform, im, b, i)
            ins.append(b)

        # ------------------------------------------------------------ per input: credits, ingress, pool
        for i in range(N):
            b, s = ins[i], t.senders[i]
            pool, ing, credit = b["pool"], b["ing"], b["credit"]
            # The sender's packet in progress: its header as sent, its queue.
            hdr_sent = Signal(128, name=f"hdr_sent{i}")
            q_sent = Signal(range(N + 1), name=f"q_sent{i}")
            with m.If(s.send & s.first):
                m.d.sync += [hdr_sent.eq(s.hdr), q_sent.eq(Mux(s.is_mc, N, getattr(self, f"dst{i}")))]
            inv.tag = f"_cr{i}"
            # The credit link's invariant at the input (good traffic: nothing discarded or answered).
            inv &= (s.credits_left + pool.used + b["errq"].level + credit.pending) == self.credits
            inv &= credit.pending >= 0
            inv &= (b["errq"].level == 0) & ~b["dropping"] & ~b["cur_poison"]
            inv &= ~(b["rd"].active & b["rd_err"]) & (b["rq"].grant_class != REQ_ERR)
            # The sender: good packets (error mode off), of at most one payload flit.
            inv &= (s.pkind == 0) & (s.credits_left <= self.credits) & (s.first | ((s.left == 1) & (s.idx == 0)))
            inv.tag = f"_ing{i}"
            # The ingress is inside a packet exactly when its sender is; then its payload flit is still to
            # come, its header written in the header cell.
            inv &= s.first == ~ing.in_pkt
            hdr_cell = Cat((ing.cur_hdr == c) & (b["cells"][c][:128] == hdr_sent) for c in range(C)).any()
            inv &= ~ing.in_pkt | ((ing.cur_left == 1) & (ing.cur_written == 1) & (s.left == 1) &
                                  (ing.cur_q == q_sent) & hdr_cell)
            inv.tag = f"_pool{i}"
            st = b["store"]
            pool_partition(inv, pool, b["free"], st.g_used, b["rd"].n_freed)
            inv.tag = f"_store{i}"
            store_chain(inv, st)
            # The next-cell table holds cell numbers only (the pool's next cell is one): the reader that
            # follows a packet's last link still stands on a cell (a bound that only binds when the cell
            # count is not a power of two).
            if self.next_cell_bound:
                for c in range(C):
                    inv &= st.cnext[c] < C
            # The writer's packet is the ingress's; the reader's the reader's; the lap contract from the credits.
            inv.tag = f"_wr{i}"
            inv &= (st.wr_pkt == ing.in_pkt) & (~ing.in_pkt | (st.wr_q == ing.cur_q))
            # (its header cell, while in use, is the ingress's; once read and freed, no other packet's)
            for c in range(C):
                is_wr_hdr = st.g_used[c] & (st.g_idx[c] == 0) & (st.g_q[c] == st.wr_q) & (st.g_seq[c] == st.wr_seq)
                inv &= ~ing.in_pkt | (is_wr_hdr == (ing.cur_hdr == c)) | ((ing.cur_hdr != c) & ~is_wr_hdr) | \
                    ((ing.cur_hdr == c) & ~st.g_used[c])
            inv &= ~st.near | (st.lap_n + s.credits_left <= st.LM)
        inv.tag = ""

        # ------------------------------------------------------------ the output allocation
        owner = swm.submodules.owner
        rds = [b["rd"] for b in ins]
        rqs = [b["rq"] for b in ins]
        egress = [swm.submodules[f"egress{j}"] for j in range(N)]
        n_in = [Signal(range(N + 1), name=f"obs_n_in{j}") for j in range(N)]
        m.d.comb += [n_in[j].eq(sum(rds[i].out_valid[0] & rds[i].out_dests[j] for i in range(N))) for j in range(N)]
        ownership_terms(inv, inv, inv, inv, inv, match=[owner.match[i] for i in range(N)],
                        act=[rd.active for rd in rds], dst=[rd.dests for rd in rds], cd=[rq.cur_cd for rq in rqs],
                        readers=rds, gsh=[rq.grant_short for rq in rqs], rleft=[b["rleft"] for b in ins],
                        out_busy=owner.busy, granted_cd=owner.granted_cd, reads_now=owner.reads_now,
                        level=[q.level for q in egress], n_in=n_in, depth=D, lanes=1, short=True,
                        cd_d=[b["cd_d"] for b in ins], short_d=[b["short_d"] for b in ins],
                        grant_class=[rq.grant_class for rq in rqs], rd_err=[b["rd_err"] for b in ins],
                        rd_cell=[b["rd_cell"] for b in ins], rd_hot=[b["rd_hot"] for b in ins],
                        rd_issue=[b["rd_issue"] for b in ins], n_cells=C)

        # ------------------------------------------------------------ the outputs
        slots_of = []
        for j in range(N):
            q, tx, r = egress[j], swm.submodules[f"tx{j}"], t.receivers[j]
            rptr, wptr, slots = observe_queue(q, "mem", f"obs_eg{j}")
            slots_of.append((rptr, slots))
            inv.tag = f"_eg{j}"
            inv &= egress_credit_ok(send=tx.link.valid, credits_left=tx.credits_left, dlevel=r.level, out_credits=K)
            inv &= egress_pointers_ok(level=q.level, rptr=rptr, wptr=wptr, depth=D)
        inv.tag = ""
        self._streams(m, t, inv, ins, egress, slots_of, N, D)
        self._inv = inv
        return inv.all()

    def _store(self, m, platform, im, b, i):
        """Input ``i``'s packet store as :func:`~verif.formal.switch_queues.store_chain` reads it: the queues'
        hidden state, the next-cell, next-packet and arrival-number tables (one added read port per cell), and
        harness registers kept beside the blocks: what each cell holds (its queue, the packet's number in
        that queue, the flit's index, the packet's length and arrival number), the packets enqueued and
        dequeued per queue, and the writer's and reader's packets, updated from the blocks' own signals."""
        pool, pq, ing, rd, gs = b["pool"], b["pq"], b["ing"], b["rd"], b["gs"]
        C, n_q = pool.n_cells, pq.n_uc + 1
        qm = elaborate_now(pq, platform)
        S, SEQ_BITS = pq.seq_bits, (C + 1).bit_length()
        pn, ps, cn, pmk, prc = [], [], [], [], []
        for c in range(C):
            for mem, out, nm in ((qm.submodules.pnext, pn, "pnext"), (qm.submodules.pseq, ps, "pseq"),
                                 (im.submodules.cnext, cn, "cnext"), (qm.submodules.pmask, pmk, "pmask"),
                                 (qm.submodules.prc, prc, "prc")):
                port = mem.read_port(domain="comb")
                sig = Signal(len(port.data), name=f"obs_{nm}{i}_{c}")
                (im if nm == "cnext" else qm).d.comb += [port.addr.eq(c), sig.eq(port.data)]
                out.append(sig)
        P = 1
        st = SimpleNamespace(
            C=C, n_q=n_q, MQ=pq.n_uc, S=S, T=pq.lap_threshold, LM=pq.lap_margin, SEQ_BITS=SEQ_BITS, pool=pool,
            count=list(pq.count), head=list(pq.head), q_tail=[driven(qm, f"q{q}_tail") for q in range(n_q)],
            q_hseq=[driven(qm, f"q{q}_hseq") for q in range(n_q)], aseq=driven(qm, "aseq"), pn=pn, ps=ps, cnext=cn,
            g_used=Signal(C, name=f"g_used{i}"),
            g_q=[Signal(range(n_q), name=f"g_q{i}_{c}") for c in range(C)],
            g_seq=[Signal(SEQ_BITS, name=f"g_seq{i}_{c}") for c in range(C)],
            g_idx=[Signal(range(P + 1), name=f"g_idx{i}_{c}") for c in range(C)],
            g_len=[Signal(range(P + 1), name=f"g_len{i}_{c}") for c in range(C)],
            g_arr=[Signal(S, name=f"g_arr{i}_{c}") for c in range(C)],
            g_dst=[Signal(pq.ports, name=f"g_dst{i}_{c}") for c in range(C)],
            g_tag=[Signal(8, name=f"g_tag{i}_{c}") for c in range(C)],
            wr_dst=Signal(pq.ports, name=f"wr_dst{i}"), wr_tag=Signal(8, name=f"wr_tag{i}"),
            r_tag=Signal(8, name=f"r_tag{i}"), pmask=pmk, prc=prc,
            enq_n=[Signal(SEQ_BITS, name=f"enq_n{i}_{q}") for q in range(n_q)],
            deq_n=[Signal(SEQ_BITS, name=f"deq_n{i}_{q}") for q in range(n_q)],
            arr=Signal(S, name=f"arr{i}"), near=pq.near_lap, lap_n=Signal(range(pq.lap_margin + 1), name=f"lap_n{i}"),
            r_act=rd.active, r_free=b["rd_free"], r_qr=Signal(range(n_q), name=f"r_qr{i}"),
            r_seq=Signal(SEQ_BITS, name=f"r_seq{i}"), r_idx=Signal(range(P + 1), name=f"r_idx{i}"),
            r_cell=b["rd_cell"], wr_pkt=Signal(name=f"wr_pkt{i}"), wr_q=Signal(range(n_q), name=f"wr_q{i}"),
            wr_seq=Signal(SEQ_BITS, name=f"wr_seq{i}"), wr_idx=Signal(range(P + 1), name=f"wr_idx{i}"),
            wr_len=Signal(range(P + 1), name=f"wr_len{i}"), wr_arr=Signal(S, name=f"wr_arr{i}"))
        # The writer: each flit the ingress writes, into the pool's next-write cell.
        write, hdr = ing.write, ing.enq
        f_q = Mux(st.wr_pkt, st.wr_q, ing.target_q)
        f_seq = Mux(st.wr_pkt, st.wr_seq, _sel(st.enq_n, ing.target_q))
        f_idx = Mux(st.wr_pkt, st.wr_idx, 0)
        f_len = Mux(st.wr_pkt, st.wr_len, ing.payload)
        f_arr = Mux(st.wr_pkt, st.wr_arr, st.arr)
        f_dst = Mux(st.wr_pkt, st.wr_dst, ing.mask)
        f_tag = Mux(st.wr_pkt, st.wr_tag, HeaderLayout(ing.w_data[:HEADER_BITS]).tag)
        with m.If(write):
            for c in range(C):
                with m.If(pool.new_cell == c):
                    m.d.sync += [st.g_used[c].eq(1), st.g_q[c].eq(f_q), st.g_seq[c].eq(f_seq), st.g_idx[c].eq(f_idx),
                                 st.g_len[c].eq(f_len), st.g_arr[c].eq(f_arr), st.g_dst[c].eq(f_dst),
                                 st.g_tag[c].eq(f_tag)]
            m.d.sync += [st.wr_pkt.eq(~ing.w_last), st.wr_q.eq(f_q), st.wr_seq.eq(f_seq), st.wr_idx.eq(f_idx + 1),
                         st.wr_len.eq(f_len), st.wr_arr.eq(f_arr), st.wr_dst.eq(f_dst), st.wr_tag.eq(f_tag)]
        with m.If(hdr):
            m.d.sync += st.arr.eq(st.arr + 1)
            for q in range(n_q):
                with m.If(ing.target_q == q):
                    m.d.sync += st.enq_n[q].eq(st.enq_n[q] + 1)
        with m.If(~st.near):
            m.d.sync += st.lap_n.eq(0)
        with m.Elif(hdr):
            m.d.sync += st.lap_n.eq(st.lap_n + 1)
        # The reader: a transfer's start (its packet dequeued unless a partial multicast pass), its reads.
        start = gs.start.valid & ~gs.start.err
        with m.If(start):
            m.d.sync += [st.r_qr.eq(gs.sel), st.r_seq.eq(_sel(st.deq_n, gs.sel)), st.r_idx.eq(0),
                         st.r_tag.eq(_sel([HeaderLayout(d[:HEADER_BITS]).tag for d in b["cells"]], gs.start.cell))]
        with m.Elif(b["rd_issue"]):
            m.d.sync += st.r_idx.eq(st.r_idx + 1)
        for q in range(n_q):
            with m.If(gs.deq[q]):
                m.d.sync += st.deq_n[q].eq(st.deq_n[q] + 1)
        for c in range(C):
            with m.If(rd.free_bits[c]):
                m.d.sync += st.g_used[c].eq(0)
        return st

    def _streams(self, m, t, inv, ins, egress, slots_of, N, D):
        """What only the composition has: per input, what each cell in use holds (its flit as the sender sent it:
        header fields, payload fields, framing), the destinations each packet still has to reach and the
        per-pair sequence numbers still undelivered, in order; per output, the flits in its queue and on their
        way in the crossbar register, from the receiver's state on, framed packet after packet, their headers
        the pair's next numbers, a partial tail packet only the one whose reader holds the output."""
        C = ins[0]["pool"].n_cells
        MQ = ins[0]["pq"].n_uc
        pend, now, hdr = [], [], []
        for i in range(N):
            inv.tag = f"_cells{i}"
            _cell_contents(inv, ins[i], t.senders[i], i, N, C, MQ)
            mqh = _matches(m, inv, ins[i], i, N, C, MQ)
            pend_i, now_i, hdr_i, q_i = _pending(m, ins[i], i, N, C, MQ)
            pend.append(pend_i)
            now.append(now_i)
            hdr.append(hdr_i)
            _queue_order(inv, ins[i], mqh, hdr_i, q_i, N, C, MQ)
        inv.tag = ""
        for j in range(N):
            _output_stream(m, t, inv, ins, egress[j].level, slots_of[j], j, N, D, C, pend, now, hdr)
        inv.tag = ""


def _wire(m, expr, name):
    """``expr`` as a named wire (an expression used many times is built once)."""
    v = Signal(len(Value.cast(expr)), name=name)
    m.d.comb += v.eq(expr)
    return v


def _fields(d, N):
    """A flit's fields as the switch harness's sender writes them."""
    h = HeaderLayout(d[:HEADER_BITS])
    return SimpleNamespace(mark=d[MARK], h=h, hlen=rtl_payload_flits(h)[:2], src=h.src, tag=h.tag,
                           seq=[d[SEQ_LO + SEQ_BITS * j:SEQ_LO + SEQ_BITS * (j + 1)] for j in range(N)],
                           kind=d[KIND_HDR:KIND_HDR + 2], p_src=d[0:6], p_num=d[8:16], p_idx=d[16:18],
                           d=d)


def _payload_is(f, src, num, idx):
    """The payload flit the sender sends (switch harness): source, packet number, index, a good kind."""
    def fit(v, n):
        return Cat(v, Const(0, n))[:n]
    return f.d == Cat(fit(src, 6), Const(0, 2), fit(num, 8), fit(idx, 2), Const(0, 6),
                      Const(0, 128 - 1 - 24), Const(1, 1))


def _header_ok(f, j, N):
    """A good header's own bits (switch harness): its kind good, its opcode one the harness sends, and
    output ``j`` one of its destinations."""
    op = f.h.opcode
    return (f.kind == 0) & ((op == Opcode.WRITE) | (op == Opcode.READ) | (op == Opcode.DYN_ST)) & \
        Mux(op == Opcode.DYN_ST, f.h.route.dyn.mask[j] & ((f.h.route.dyn.mask >> N) == 0),
            f.h.route.uni.dst == j)


def _cell_contents(inv, b, s, i, N, C, MQ):
    """Input ``i``: each cell in use holds its flit bit for bit, cells of one packet agree, the writer's and
    the reader's packets are those of their cells, the reader's outputs are its packet's."""
    st, rd = b["store"], b["rd"]
    for c in range(C):
        d = b["cells"][c]
        f = _fields(d[:128], N)
        last, poison = d[128], d[129]
        is_h = st.g_idx[c] == 0
        dests_ok = Cat(~st.g_dst[c][j] | _header_ok(f, j, N) for j in range(N)).all() & \
            Mux(f.h.opcode == Opcode.DYN_ST, f.h.route.dyn.mask[:N] == st.g_dst[c],
                st.g_dst[c] == (Const(1, N) << f.h.route.uni.dst)[:N])
        inv &= ~st.g_used[c] | ((f.mark == ~is_h) & (last == (st.g_idx[c] == st.g_len[c])) & ~poison &
                                Mux(is_h, (f.src == i) & (f.tag == st.g_tag[c]) & (f.hlen == st.g_len[c]) &
                                    (st.g_dst[c] != 0) & ((st.g_dst[c] >> N) == 0) & dests_ok &
                                    Mux(st.g_q[c] == MQ, f.h.opcode == Opcode.DYN_ST,
                                        (f.h.opcode != Opcode.DYN_ST) &
                                        (st.g_dst[c] == (Const(1, N) << st.g_q[c])[:N])),
                                    _payload_is(f, i, st.g_tag[c], st.g_idx[c])))
        for e in range(c + 1, C):
            same = st.g_used[c] & st.g_used[e] & (st.g_q[c] == st.g_q[e]) & (st.g_seq[c] == st.g_seq[e])
            inv &= ~same | ((st.g_tag[c] == st.g_tag[e]) & (st.g_dst[c] == st.g_dst[e]))
    inv &= ~st.wr_pkt | ((s.pnum == st.wr_tag) & (s.dests == st.wr_dst) & (s.idx + 1 == st.wr_idx) &
                         (st.wr_dst != 0) & ((st.wr_q == MQ) | (st.wr_dst == (Const(1, N) << st.wr_q)[:N])))
    for c in range(C):
        inv &= ~(st.wr_pkt & st.g_used[c] & (st.g_q[c] == st.wr_q) & (st.g_seq[c] == st.wr_seq)) | \
            ((st.g_tag[c] == st.wr_tag) & (st.g_dst[c] == st.wr_dst))
    # The reader's packet: its tag; its header cell, while unread, holds it.
    inv &= ~rd.active | ~Cat(st.g_used[c] & (st.g_q[c] == st.r_qr) & (st.g_seq[c] == st.r_seq) &
                             (st.g_tag[c] != st.r_tag) for c in range(C)).any()
    inv &= ~(rd.active & st.wr_pkt & (st.wr_q == st.r_qr) & (st.wr_seq == st.r_seq)) | (st.wr_tag == st.r_tag)
    inv &= (~rd.active | (rd.dests != 0)) & (~rd.out_valid[0] | (rd.out_dests != 0))
    # The reader's outputs are its packet's: a unicast one's output, some of a multicast one's.
    inv &= ~rd.active | (st.r_qr == MQ) | (rd.dests == (Const(1, N) << st.r_qr)[:N])
    for c in range(C):
        inv &= ~(rd.active & st.g_used[c] & (st.g_q[c] == st.r_qr) & (st.g_seq[c] == st.r_seq)) | \
            ((rd.dests & ~st.g_dst[c]) == 0)
    # (a packet still arriving is read to all its destinations at once)
    inv &= ~(rd.active & st.wr_pkt & (st.wr_q == st.r_qr) & (st.wr_seq == st.r_seq)) | (rd.dests == st.wr_dst)


def _matches(m, inv, b, i, N, C, MQ):
    """Input ``i``'s matches answer its requests; the mask-queue head's remaining destinations (``served``:
    the outputs the head has been granted so far, as switch_alloc keeps it). Returns the flags of the cells
    that hold the mask queue's head (``mqh``)."""
    st, rd, gs = b["store"], b["rd"], b["gs"]
    # A match answers a request: to a unicast packet queued for that output, or to the mask queue's head.
    grant = b["rq"].grant
    uc = b["rq"].grant_class == REQ_UC
    inv &= ~uc | ((grant & (grant - 1))[:N] == 0)       # the allocator accepts one unicast grant
    for q in range(MQ):
        inv &= ~(grant[q] & uc) | (st.count[q] != 0)
    inv &= ~((grant != 0) & ~uc) | ((st.count[MQ] != 0) & ((grant & ~gs.mc_res) == 0))
    # (a head still arriving is granted all its destinations at once; a fanout-split one has arrived)
    head_arriving = st.wr_pkt & (st.wr_q == MQ) & (st.wr_seq == st.deq_n[MQ])
    inv &= ~((grant != 0) & (b["rq"].grant_class == REQ_MASK)) | ~head_arriving
    inv &= ~((grant != 0) & (b["rq"].grant_class == REQ_MASK_ALL)) | (grant == gs.mc_res)
    # The mask-queue head's remaining destinations and the per-output counts of pending mask packets.
    mqh = [_wire(m, st.g_used[c] & (st.g_idx[c] == 0) & (st.g_q[c] == MQ) & store_queued(st, c) &
                 (store_pos(st, c) == 0), f"x_mqh{i}_{c}") for c in range(C)]
    head_dst = _sel(st.g_dst, st.head[MQ])
    has = st.count[MQ] != 0
    served = Signal(N, name=f"served{i}")
    with m.If(gs.deq[MQ]):
        m.d.sync += served.eq(0)
    with m.Elif((gs.grant != 0) & gs.grant_class[0]):
        m.d.sync += served.eq(served | gs.grant)
    inv &= ~has | ((gs.mc_res != 0) & (gs.mc_res == (head_dst & ~served)))
    inv &= has | (served == 0)
    # A partial pass serves the mask queue's head to outputs already counted as served.
    inv &= ~(rd.active & ~b["rd_free"]) | ((st.r_qr == MQ) & ((rd.dests & ~served) == 0))
    # A mask-queue head still arriving is sent to all its destinations at once: none served before.
    inv &= ~(has & st.wr_pkt & (st.wr_q == MQ) & (st.wr_seq == st.deq_n[MQ])) | (served == 0)
    return mqh


def _pending(m, b, i, N, C, MQ):
    """Per cell of input ``i`` and output: whether its flit is still to go there (``pend``), in the reader's
    pass now (``now``); whether the cell is a header (``hdr``) and queued (``q``)."""
    st, rd, gs = b["store"], b["rd"], b["gs"]
    pend_i, now_i, hdr_i, q_i = [], [], [], []
    for c in range(C):
        rdr = _wire(m, rd.active & (st.g_q[c] == st.r_qr) & (st.g_seq[c] == st.r_seq), f"x_rdr{i}_{c}")
        unread = st.g_idx[c] >= st.r_idx
        queued_c = _wire(m, store_queued(st, c), f"x_queued{i}_{c}")
        q_i.append(queued_c)
        is_head = _wire(m, st.g_used[c] & (st.g_q[c] == MQ) & queued_c & (store_pos(st, c) == 0), f"x_mqp{i}_{c}")
        now_c = [_wire(m, rdr & rd.dests[j] & unread, f"x_now{i}_{c}_o{j}") for j in range(N)]
        pend_c = [_wire(m, st.g_used[c] & st.g_dst[c][j] &
                        Mux(is_head, gs.mc_res[j] | now_c[j], Mux(rdr, now_c[j], queued_c)),
                        f"x_pend{i}_{c}_o{j}") for j in range(N)]
        pend_i.append(pend_c)
        now_i.append(now_c)
        hdr_i.append(_wire(m, st.g_used[c] & (st.g_idx[c] == 0), f"x_hdr{i}_{c}"))
    return pend_i, now_i, hdr_i, q_i


def _queue_order(inv, b, mqh, hdr_i, q_i, N, C, MQ):
    """Input ``i``'s queues in order: the per-output counts of pending mask packets, the head order, the
    read-cycle counts beside queued headers, matches that keep each pair's order, the mask table."""
    st, gs = b["store"], b["gs"]
    gm = b["gs_m"]
    for j in range(N):
        want = sum(hdr_i[c] & (st.g_q[c] == MQ) & q_i[c] & Mux(mqh[c], gs.mc_res[j], st.g_dst[c][j])
                   for c in range(C))
        inv &= driven(gm, f"mc_pend{j}") == want
    store_head_order(inv, st, b["pq"].older)
    # Read-cycle counts (1: a header-only packet, a short transfer; else 0): the queues' head and next
    # registers and the table beside the next-packet links agree with the packets.
    pq = b["pq"]
    for q in range(MQ + 1):
        for c in range(C):
            rc_c = st.g_len[c] == 0
            at_pos = hdr_i[c] & (st.g_q[c] == q) & q_i[c]
            inv &= ~(at_pos & (store_pos(st, c) == 0)) | (pq.head_rc[q] == rc_c)
            inv &= ~(at_pos & (store_pos(st, c) == 1)) | (pq.next_rc[q] == rc_c)
            for e in range(C):
                if e != c:
                    nxt = hdr_i[e] & (st.g_q[e] == q) & q_i[e] & (store_pos(st, e) == store_pos(st, c) + 1)
                    inv &= ~(at_pos & nxt) | (st.prc[c] == (st.g_len[e] == 0))
    # A counted (short) match is to a VOQ whose head is a header-only packet.
    for q in range(MQ):
        inv &= ~(b["rq"].grant[q] & b["cd_d"][q]) | ((st.count[q] != 0) & (pq.head_rc[q] == 1))
    # A match keeps each pair's order: a unicast one to output j is to a VOQ head older than every queued
    # mask packet still to go to j; a mask one to j only while VOQ j's head (if any) is younger than the
    # mask queue's head.
    grant = b["rq"].grant
    uc = b["rq"].grant_class == REQ_UC
    for j in range(N):
        for h in range(C):
            voq_head = hdr_i[h] & (st.g_q[h] == j) & q_i[h] & (store_pos(st, h) == 0)
            for e in range(C):
                if e == h:
                    continue
                mq_pend = hdr_i[e] & (st.g_q[e] == MQ) & q_i[e] & Mux(mqh[e], gs.mc_res[j], st.g_dst[e][j])
                inv &= ~(grant[j] & uc & voq_head & mq_pend) | (store_age(st, e) < store_age(st, h))
                inv &= ~(grant[j] & ~uc & voq_head & mqh[e]) | (store_age(st, h) < store_age(st, e))
    # A queued header's destinations in the mask table; queued packets arrived one at a time.
    for c in range(C):
        inv &= ~(hdr_i[c] & q_i[c]) | (st.pmask[c] == st.g_dst[c])
        for e in range(c + 1, C):
            inv &= ~(hdr_i[c] & q_i[c] & hdr_i[e] & q_i[e]) | (st.g_arr[c] != st.g_arr[e])


def _output_stream(m, t, inv, ins, level, slots_of_j, j, N, D, C, pend, now, hdr):
    """Output ``j``: the flits in its queue and in the crossbar register, from the receiver's state on,
    framed packet after packet, their headers the pair's next numbers; a partial tail packet only the one
    whose reader holds the output; per pair, the flits and headers accepted less delivered. The terms' tags:
    ``_out<j>f`` the framing, ``_out<j>n`` and ``_out<j>h`` the pairs' flits and headers, ``_out<j>s`` the
    pending headers' numbers."""
    inv.tag = f"_out{j}f"
    r = t.receivers[j]
    rptr, slots = slots_of_j
    # The receiver's packet in progress: a good one's, its payload flit still to come.
    inv &= (r.kind == 0) & (~r.in_pkt | ((r.src < N) & (r.len == 1) & (r.idx == 0)))
    in_pkt, src, num, idx, ln = r.in_pkt, r.src, r.num, r.idx, r.len
    seen_h = [Const(0, 4) for _ in range(N)]     # headers of input i ahead in the stream
    seen_n = [Const(0, 4) for _ in range(N)]     # flits of input i ahead in the stream
    flits = []
    for k in range(D):
        at_k = Mux(rptr + k >= D, rptr + k - D, rptr + k)
        slot = _wire(m, sum(Mux(at_k == a, slots[a], 0) for a in range(D)), f"x_slot{j}_{k}")
        flits.append((_wire(m, k < level, f"x_valid{j}_{k}"), slot[:128], slot[128], slot[129]))
    for i in range(N):
        rd = ins[i]["rd"]
        flits.append((rd.out_valid[0] & rd.out_dests[j], rd.out_flit[0].data, rd.out_flit[0].last,
                      rd.out_flit[0].poison))
    for n, (valid, d, last, poison) in enumerate(flits):
        f = _fields(d, N)
        src_now = Mux(in_pkt, src, f.src)
        ok_h = ~f.mark & (f.src < N) & (last == (f.hlen == 0)) & _header_ok(f, j, N)
        ok_p = _payload_is(f, src, num, idx + 1) & (last == (idx + 1 == ln))
        inv &= ~valid | (~poison & Mux(in_pkt, ok_p, ok_h))
        for i in range(N):
            is_i = valid & (src_now == i)
            # a header: the pair's next number, to an addressed output
            inv &= ~(is_i & ~in_pkt) | (f.seq[j] == (t.exp[i][j] + seen_h[i])[:4])
            seen_h[i] = _wire(m, (seen_h[i] + (is_i & ~in_pkt))[:4], f"x_seen_h{j}_{n}_{i}")
            seen_n[i] = _wire(m, (seen_n[i] + is_i)[:4], f"x_seen_n{j}_{n}_{i}")
        n_in_pkt = _wire(m, Mux(valid, ~last, in_pkt), f"x_in_pkt{j}_{n}")
        src, num, idx, ln = (_wire(m, Mux(valid & ~in_pkt, f.src, src)[:6], f"x_src{j}_{n}"),
                             _wire(m, Mux(valid & ~in_pkt, f.tag, num)[:8], f"x_num{j}_{n}"),
                             _wire(m, Mux(valid, Mux(in_pkt, f.p_idx, 0), idx)[:2], f"x_idx{j}_{n}"),
                             _wire(m, Mux(valid & ~in_pkt, f.hlen, ln)[:2], f"x_len{j}_{n}"))
        in_pkt = n_in_pkt
    # The tail: a partial packet is the one whose reader holds the output, at its next flit.
    inv &= ~in_pkt | Cat(ins[i]["rd"].active & ins[i]["rd"].dests[j] & (ins[i]["store"].r_idx != 0)
                         for i in range(N)).any()
    for i in range(N):
        b, st = ins[i], ins[i]["store"]
        rd = b["rd"]
        holds = rd.active & rd.dests[j]
        mid = holds & (st.r_idx != 0)
        inv.tag = f"_out{j}f"
        inv &= ~mid | (in_pkt & (src == i) & (num == st.r_tag) & (idx + 1 == st.r_idx))
        inv &= ~(holds & (st.r_idx == 0)) | ~in_pkt
        # the pair's flits and headers: in the stream, then in the cells, in order
        cells_n = sum(pend[i][c][j] for c in range(C))
        cells_h = sum(pend[i][c][j] & hdr[i][c] for c in range(C))
        inv.tag = f"_out{j}n"
        inv &= (t.acc[i][j] - t.dlv[i][j])[:8] == seen_n[i] + cells_n
        inv.tag = f"_out{j}h"
        inv &= (t.sq[i][j] - t.exp[i][j])[:4] == (seen_h[i] + cells_h)[:4]
        inv.tag = f"_out{j}s"
        for c in range(C):
            d = b["cells"][c]
            f = _fields(d[:128], N)
            ahead = sum(pend[i][e][j] & hdr[i][e] &
                        ((now[i][e][j] & ~now[i][c][j]) |
                         (~now[i][e][j] & ~now[i][c][j] & (store_age(st, e) > store_age(st, c))))
                        for e in range(C) if e != c)
            inv &= ~(pend[i][c][j] & hdr[i][c]) | (f.seq[j] == (t.exp[i][j] + seen_h[i] + ahead)[:4])
        inv.tag = f"_out{j}f"
