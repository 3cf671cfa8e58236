"""Formal harness of the NVSwitch datapath (:class:`hw.switch.nvswitch.NVSwitch`): packets are atomic on
each output, and no packet or flit is lost, duplicated or reordered between ingress and egress; a
multicast packet reaches each of its destinations exactly once; with ``errors``, a bad packet is dropped,
counted and answered, or delivered poisoned, as the switch's contract says.

Instance: the smallest the block allows, ``ports`` 4 (its minimum), ``credits`` 4 (minimum), 128-bit
flits (the header's width), ``max_payload`` 1, one iSLIP iteration, one group-table entry, 2 downstream
credits per output; ``speedup`` 1 (4-flit output queues) or 2 (two crossbar lanes, ``egress_depth``
2 (max_payload + 1) = 4), ``queueing`` ``"voq"`` or ``"fifo"`` (one queue per input: head-of-line
blocking). Traffic enters on ports 0 and 1 and is addressed to ports 0 and 1 (ports 2 and 3 stay idle:
their logic is the same per port, and two inputs competing for two outputs already exercise contention,
fanout splitting and output hand-over). Every output, idle or not, is checked.

Proof: bounded model check to depth 9 (``dysharp formal switch``, ``switch_speedup2``, ``switch_fifo``,
``switch_errors``; yices, each further step costs several times the one before) and every ``Cover``
reached within 13 (14 at speedup 2): a header takes 5 cycles from ingress to egress and an input asks for
its next match only after its transfer ends, so the atomicity cover (output 0 carrying packets of both
inputs, with payload) needs step 12 (14 at speedup 2): one round of contention and hand-over, not long
traffic. k-induction does not close: the properties speak of the outputs only, and a state no traffic
reaches (an output queue slot holding a flit out of order, a cell chain that loops) can sit unchanged
while every receiver stalls, then break a property; the invariants that exclude such states, and why
they are not built, are in ``docs/verification.md``. The default test suite checks depth 7 (seconds).
``ports`` 2 is not possible: the block's minimum is 4.

Environment (the block's documented contract, by construction):

* each active input's sender honours its credits (``credits`` initial, one per flit, returned by
  ``rx.credit``) and may pause anywhere, also inside a packet;
* traffic: ``WRITE`` (``length`` 0 or 1 payload flits), header-only ``READ`` and multicast ``DYN_ST``
  (mask over ports 0/1). Without ``errors`` every packet is well formed (framing as the length says) and
  must be delivered. With ``errors`` each packet also has a free *kind*: good; a bad header (``length`` 2,
  above ``max_payload``: ``BAD_LENGTH``; sent framed as its length says); misframed (a 1-flit payload cut
  to its header, or a header-only packet followed by a stray flit: ``LENGTH_MISMATCH``); or poisoned
  (every flit sent with ``poison``);
* each output's downstream receiver has ``out_credits`` buffer flits and drains them when its free
  ``o_ready`` says so (any stall), returning one credit per flit drained.

Numbering: the harness writes into each header its source port (``src``), a per-input packet number
(``tag``), its kind (bits 108-109) and, for each destination j, the packet's sequence number among the
delivered packets of its (input, output j) pair (header bits 100 + 4 j .. 103 + 4 j, unused by the
routing); each payload flit carries bit 127 (absent in headers), the source, the packet number, its index
in the packet and its kind. So a loss, a duplicate, a reordering or an interleaving changes what an output
sees.

Properties (each with a ``Cover``):

* **packets are atomic on each output**: after a header, every flit up to ``last`` on that output is the
  same packet's next payload flit (source, number, index), ``last`` exactly at its length (a misframed
  packet's at its header), nothing of a good packet poisoned. Cover: output 0 carries packets of both
  inputs, each with a payload flit.
* **no packet lost, duplicated or reordered per (input, output) pair**: each header on output j from
  input i carries the next sequence number of that pair, and reaches only an addressed output; nothing
  reaches ports 2 and 3. Cover: two packets of one pair delivered.
* **multicast: each destination gets exactly one copy**: a multicast packet's header reaches only
  outputs in its mask, each once and in its pair's order (the sequence check, for multicast packets).
  Cover: one multicast packet delivered to both outputs.
* **flits conserved: accepted = delivered + in flight, bounded**: per (input, output) pair, flits
  accepted at the ingress for that output (the ones the switch keeps) minus flits delivered there is
  between 0 and ``credits + speedup + egress_depth`` (the input buffer, the crossbar register and the
  output queue). Cover: a pair with flits delivered and none in flight.

With ``errors``, two more:

* **a bad header's packet is dropped whole; each error is counted once and answered to its port**: no
  flit of a bad-header packet reaches an output; ``err_count[BAD_LENGTH]`` and
  ``err_count[LENGTH_MISMATCH]`` equal, in every cycle, the bad-header and misframed packets sent (each
  counted in the cycle its header arrives), every other counter stays 0; every ``ERROR`` answer leaves
  by the port the bad packet came from, header only, unpoisoned, naming ``BAD_LENGTH`` or
  ``LENGTH_MISMATCH``, and no port gets more answers than it sent bad packets. Cover: both ports
  answered.
* **a misframed or poisoned packet arrives ending poisoned; nothing else is poisoned**: a misframed
  packet's header arrives as its last flit with ``poison`` (the receiver drops it), every flit of a
  poisoned packet arrives poisoned, and no flit of a good packet or answer does. Cover: the poisoned
  last payload flit of a poisoned packet on output 0.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.packet import HEADER_BITS, ErrorCode, HeaderLayout, Opcode, rtl_payload_flits
from hw.switch.nvswitch import N_ERROR_CODES, NVSwitch

from .runner import YICES_BMC, Properties

__all__ = ["SwitchHarness"]

W = 128
MARK = W - 1
SEQ_LO = 100          # header bits of the per-destination sequence numbers (4 bits each)
SEQ_BITS = 4
ACTIVE = 2            # ports with traffic (inputs) and destinations (outputs)
KIND_HDR = 108        # header bits of the packet's kind (error mode), unused by the routing
KIND_PAY = 20         # the same in payload flits
GOOD, BAD_HEADER, MISFRAMED, POISONED = range(4)    # packet kinds (error mode)


class SwitchHarness(wiring.Component):
    """Free inputs per active input i: ``valid{i}`` (offer a flit), ``op{i}`` (0 WRITE, 1 READ, 2/3
    DYN_ST), ``dst{i}``, ``len{i}``, ``mask{i}`` (0 is taken as 1); per output j: ``o_ready{j}``.
    ``switch`` may be replaced by a mutant (the proof must then fail)."""

    def __init__(self, *, credits: int = 4, out_credits: int = 2, speedup: int = 1, queueing: str = "voq",
                 errors: bool = False, switch=None):
        self.credits = credits
        self.errors = errors
        self.out_credits = out_credits
        self.switch = switch if switch is not None else NVSwitch(
            ports=4, credits=credits, out_credits=out_credits, max_payload=1, groups=1, speedup=speedup,
            queueing=queueing, iterations=1)
        self.props = Properties()
        self.formal_options = dict(YICES_BMC)
        ports = {}
        for i in range(ACTIVE):
            ports.update({f"valid{i}": In(1), f"op{i}": In(2), f"dst{i}": In(1), f"len{i}": In(1),
                          f"mask{i}": In(2)})
            if errors:
                ports[f"kind{i}"] = In(2)
        for j in range(self.switch.ports):
            ports[f"o_ready{j}"] = In(1)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        t = self._traffic(m)
        inv = self._invariant(m, t, platform)
        A, N, p = ACTIVE, t.N, self.props
        p.check(m, "packets are atomic on each output (no interleaving, framing kept)",
                Cat(t.atomic_ok).all() & inv, t.saw[0].all())
        p.check(m, "no packet lost, duplicated or reordered per (input, output) pair",
                Cat(t.order_ok).all() & inv, t.exp[0][0] == 2)
        p.check(m, "multicast: each destination gets exactly one copy, in order",
                Cat(t.mc_ok).all() & inv, t.mc_got[0] == 0b11)
        p.check(m, "flits conserved: accepted = delivered + in flight (0..credits+speedup+egress_depth)",
                Cat(t.cons_ok).all() & inv, (t.dlv[1][0] != 0) & (t.dlv[1][0] == t.acc[1][0]))
        if self.errors:
            ec = self.switch.err_count
            n_bad_len, n_misframed = t.n_bad_len, t.n_misframed
            counted = (ec[ErrorCode.BAD_LENGTH.value][:8] == (n_bad_len[0] + n_bad_len[1])[:8]) & \
                (ec[ErrorCode.LENGTH_MISMATCH.value][:8] == (n_misframed[0] + n_misframed[1])[:8])
            for c in range(N_ERROR_CODES):
                if c not in (ErrorCode.BAD_LENGTH.value, ErrorCode.LENGTH_MISMATCH.value):
                    counted = counted & (ec[c] == 0)
            for j in range(A):
                counted = counted & (t.answered[j] <= n_bad_len[j] + n_misframed[j])
            p.check(m, "a bad header's packet is dropped whole; each error is counted once and answered to its port",
                    Cat(t.drop_ok).all() & counted & inv, (t.answered[0] != 0) & (t.answered[1] != 0))
            p.check(m, "a misframed or poisoned packet arrives ending poisoned; nothing else is poisoned",
                    Cat(t.poison_ok).all() & inv, t.poisoned_end)
        return m

    def _invariant(self, m, t, platform):
        """What the properties are proven with (none here: a bounded check); a subclass states its invariant
        over ``t`` (:meth:`_traffic`'s senders, receivers and the switch)."""
        return Const(1)

    def _traffic(self, m):
        """The switch, its senders and receivers, and the properties' terms: a namespace of them."""
        sw = self.switch
        m.submodules.sw = sw
        N, C, A = sw.ports, self.credits, ACTIVE
        senders, receivers = [], []
        E = sw.egress_depth

        acc = [[Signal(8, name=f"acc_{i}_{j}") for j in range(A)] for i in range(A)]   # flits accepted
        dlv = [[Signal(8, name=f"dlv_{i}_{j}") for j in range(A)] for i in range(A)]   # flits delivered
        sq = [[Signal(SEQ_BITS, name=f"sq_{i}_{j}") for j in range(A)] for i in range(A)]  # packets sent
        exp = [[Signal(SEQ_BITS, name=f"exp_{i}_{j}") for j in range(A)] for i in range(A)]  # delivered
        mc_got = [Signal(A, name=f"mc_got{i}") for i in range(A)]   # destinations of input i's 1st mc
        n_bad_len = [Signal(8, name=f"n_bad_len{i}") for i in range(A)]    # headers sent with a bad length
        n_misframed = [Signal(8, name=f"n_misframed{i}") for i in range(A)]
        answered = [Signal(8, name=f"answered{j}") for j in range(A)]      # ERROR answers out of output j

        # ---------------------------------------------------------------- senders (inputs 0, 1)
        for i in range(A):
            rx = sw.rx[i]
            credits_left = Signal(range(C + 4), init=C, name=f"credits_left{i}")
            first = Signal(init=1, name=f"first{i}")
            left = Signal(2, name=f"left{i}")          # payload flits still to send
            idx = Signal(2, name=f"idx{i}")
            num = Signal(8, name=f"num{i}")            # this input's next packet number
            pnum = Signal(8, name=f"pnum{i}")          # the current packet's number
            dests = Signal(A, name=f"dests{i}")        # the current packet's destinations
            send = Signal(name=f"send{i}")
            kind = getattr(self, f"kind{i}") if self.errors else Const(GOOD, 2)
            pkind = Signal(2, name=f"pkind{i}")        # the current packet's kind
            m.d.comb += send.eq(getattr(self, f"valid{i}") & (credits_left != 0))
            m.d.sync += credits_left.eq(credits_left - send + rx.credit)
            op_sel, dst, ln, msk = (getattr(self, f"{n}{i}") for n in ("op", "dst", "len", "mask"))
            opcode = Mux(op_sel == 0, Opcode.WRITE, Mux(op_sel == 1, Opcode.READ, Opcode.DYN_ST))
            is_mc = op_sel[1]
            mask = Mux(msk == 0, 1, msk)
            h_dests = Mux(is_mc, mask, Mux(dst, 0b10, 0b01))
            hdr_bits = Signal(W, name=f"hdr{i}")
            hdr = HeaderLayout(hdr_bits[:HEADER_BITS])
            m.d.comb += [hdr.opcode.eq(opcode), hdr.src.eq(i), hdr.tag.eq(num),
                         hdr.length.eq(Mux(kind == BAD_HEADER, 2, ln))]
            with m.If(is_mc):
                m.d.comb += hdr.route.dyn.mask.eq(mask)
            with m.Else():
                m.d.comb += hdr.route.uni.dst.eq(dst)
            m.d.comb += [hdr_bits[SEQ_LO:SEQ_LO + A * SEQ_BITS].eq(Cat(sq[i])),
                         hdr_bits[KIND_HDR:KIND_HDR + 2].eq(kind)]
            plen = rtl_payload_flits(hdr)[:2]
            # The payload flits sent: as the length says, except a misframed packet, whose sender ends it
            # early (a 1-flit payload cut, its header marked last) or late (a stray flit after a header-only).
            nsend = Mux(kind == MISFRAMED, plen == 0, plen)
            pay = Signal(W, name=f"pay{i}")
            fields = Cat(Const(i, 6), Const(0, 2), pnum, (idx + 1)[:2], Const(0, 2), pkind,
                         Const(0, W - 1 - KIND_PAY - 2), Const(1, 1))
            assert len(fields) == W    # the marker in bit MARK, the kind at KIND_PAY
            m.d.comb += pay.eq(fields)
            m.d.comb += [
                rx.valid.eq(send),
                rx.flit.data.eq(Mux(first, hdr_bits, pay)),
                rx.flit.last.eq(Mux(first, nsend == 0, left == 1)),
                rx.flit.poison.eq(Mux(first, kind, pkind) == POISONED),
            ]
            cur_dests = Mux(first, h_dests, dests)
            # Flits the switch keeps (it drops a bad header's packet, and a misframed one after its header).
            kept = Mux(first, kind != BAD_HEADER, (pkind != BAD_HEADER) & (pkind != MISFRAMED))
            for j in range(A):
                m.d.sync += acc[i][j].eq(acc[i][j] + (send & cur_dests[j] & kept))
            with m.If(send):
                with m.If(first):
                    m.d.sync += [dests.eq(h_dests), left.eq(nsend), idx.eq(0), first.eq(nsend == 0),
                                 num.eq(num + 1), pnum.eq(num), pkind.eq(kind),
                                 n_bad_len[i].eq(n_bad_len[i] + (kind == BAD_HEADER)),
                                 n_misframed[i].eq(n_misframed[i] + (kind == MISFRAMED))]
                    for j in range(A):
                        with m.If(h_dests[j] & (kind != BAD_HEADER)):
                            m.d.sync += sq[i][j].eq(sq[i][j] + 1)
                with m.Else():
                    m.d.sync += [left.eq(left - 1), idx.eq(idx + 1), first.eq(left == 1)]
            senders.append(SimpleNamespace(rx=rx, credits_left=credits_left, first=first, left=left, idx=idx, num=num,
                                           pnum=pnum, dests=dests, send=send, kind=kind, pkind=pkind,
                                           h_dests=h_dests, is_mc=is_mc, nsend=nsend, hdr=hdr_bits, pay=pay))

        # ---------------------------------------------------------------- receivers (every output)
        atomic_ok, order_ok, mc_ok, drop_ok, poison_ok = [], [], [], [], []
        saw = [Signal(A, name=f"saw{j}") for j in range(A)]   # output j delivered a payload of input i
        poisoned_end = Signal()                               # output 0 ended a poisoned packet's payload
        for j in range(N):
            tx = sw.tx[j]
            level = Signal(range(self.out_credits + 2), name=f"dlevel{j}")
            pop = Signal(name=f"dpop{j}")
            m.d.comb += [pop.eq(getattr(self, f"o_ready{j}") & (level != 0)), tx.credit.eq(pop)]
            m.d.sync += level.eq(level + tx.valid - pop)
            receivers.append(SimpleNamespace(tx=tx, level=level, pop=pop))
            if j >= A:
                order_ok.append(~tx.valid)
                continue
            in_pkt = Signal(name=f"o{j}_in_pkt")
            r_src = Signal(6, name=f"o{j}_src")
            r_num = Signal(8, name=f"o{j}_num")
            r_len = Signal(2, name=f"o{j}_len")
            r_idx = Signal(2, name=f"o{j}_idx")
            r_kind = Signal(2, name=f"o{j}_kind")
            d = tx.flit.data
            h = HeaderLayout(d[:HEADER_BITS])
            h_len = rtl_payload_flits(h)[:2]
            h_src = h.src
            h_kind = d[KIND_HDR:KIND_HDR + 2]
            seq = d[SEQ_LO + SEQ_BITS * j:SEQ_LO + SEQ_BITS * (j + 1)]
            p_src, p_num, p_idx, p_kind = d[0:6], d[8:16], d[16:18], d[KIND_PAY:KIND_PAY + 2]
            poison, last = tx.flit.poison, tx.flit.last
            # An ERROR answer of the switch (error mode): one header-only flit to the bad packet's own port.
            is_err = Const(0, 1)
            if self.errors:
                is_err = ~in_pkt & (h.opcode == Opcode.ERROR)
            hdr_at = tx.valid & ~in_pkt & ~is_err      # a forwarded packet's header
            # Framing: a header ends its packet as its length says; a misframed one (error mode) at the header.
            good_hdr = ~d[MARK] & (h_src < A) & Mux(h_kind == MISFRAMED, last, last == (h_len == 0)) & \
                (~poison | (h_kind != GOOD))
            good_pay = d[MARK] & (p_src == r_src) & (p_num == r_num) & (p_idx == r_idx + 1) & \
                (p_kind == r_kind) & (last == (p_idx == r_len)) & (~poison | (r_kind != GOOD))
            atomic_ok.append(~tx.valid | is_err | Mux(in_pkt, good_pay, good_hdr))
            exp_seq = Mux(h_src == 0, exp[0][j], exp[1][j])
            order_ok.append(~hdr_at | (seq == exp_seq))
            is_mc_hdr = h.opcode == Opcode.DYN_ST
            with m.If(tx.valid):
                with m.If(~in_pkt):
                    m.d.sync += [in_pkt.eq(~last), r_src.eq(h_src), r_num.eq(h.tag), r_len.eq(h_len),
                                 r_idx.eq(0), r_kind.eq(h_kind)]
                    for i in range(A):
                        with m.If((h_src == i) & ~is_err):
                            m.d.sync += exp[i][j].eq(exp[i][j] + 1)
                            with m.If(is_mc_hdr & (h.tag == 0)):
                                m.d.sync += mc_got[i][j].eq(1)
                with m.Else():
                    m.d.sync += [in_pkt.eq(~last), r_idx.eq(p_idx)]
                    for i in range(A):
                        with m.If(r_src == i):
                            m.d.sync += saw[j][i].eq(1)
            receivers[j].__dict__.update(in_pkt=in_pkt, src=r_src, num=r_num, len=r_len, idx=r_idx, kind=r_kind)
            src_now = Mux(in_pkt, r_src, h_src)
            for i in range(A):
                m.d.sync += dlv[i][j].eq(dlv[i][j] + (tx.valid & ~is_err & (src_now == i)))
            # A header reaches only its destinations (mask bit j, or dst j), once (the sequence check).
            addressed = Mux(is_mc_hdr, h.route.dyn.mask[j], h.route.uni.dst == j)
            mc_ok.append(~hdr_at | ~is_mc_hdr | ((seq == exp_seq) & addressed))
            order_ok[-1] = order_ok[-1] & (~hdr_at | addressed)
            if self.errors:
                code = h.route.uni.code
                m.d.sync += answered[j].eq(answered[j] + (tx.valid & is_err))
                # Bad packets: a bad header never leaves the switch; an answer names its own port and a
                # cause; a misframed packet's header arrives as its last flit, poisoned; every flit of a
                # packet sent poisoned arrives poisoned, and nothing else is poisoned.
                drop_ok.append(~tx.valid | Mux(
                    is_err, (h_src == j) & (h.route.uni.dst == j) & last & ~poison &
                    ((code == ErrorCode.BAD_LENGTH) | (code == ErrorCode.LENGTH_MISMATCH)),
                    in_pkt | (h_kind != BAD_HEADER)))
                poison_ok.append(~tx.valid | is_err | Mux(
                    in_pkt, poison == (r_kind == POISONED),
                    poison == ((h_kind == MISFRAMED) | (h_kind == POISONED))))
                if j == 0:
                    m.d.comb += poisoned_end.eq(tx.valid & in_pkt & (r_kind == POISONED) & last)

        bound = C + sw.speedup + E        # input cells, crossbar register (one flit per lane), output queue
        cons_ok = []
        for i in range(A):
            for j in range(A):
                # (modulo 2**8: the counters wrap on a long run, which a proof by induction covers)
                cons_ok.append((acc[i][j] - dlv[i][j])[:8] <= bound)

        return SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("self", "m")})
