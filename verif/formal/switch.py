"""Formal harness of the NVSwitch datapath (:class:`hw.switch.nvswitch.NVSwitch`): packets are atomic on
each output, and no packet or flit is lost, duplicated or reordered between ingress and egress; a
multicast packet reaches each of its destinations exactly once.

Instance: the smallest the block allows, ``ports`` 4 (its minimum), ``credits`` 4 (minimum), 128-bit
flits (the header's width), ``max_payload`` 1, speedup 1 (4-flit output queues), one iSLIP iteration,
VOQ queueing, one group-table entry, 2 downstream credits per output. Traffic enters on ports 0 and 1 and
is addressed to ports 0 and 1 (ports 2 and 3 stay idle: their logic is the same per port, and two
inputs competing for two outputs already exercise contention, fanout splitting and output hand-over).
Every output, idle or not, is checked.

Proof: bounded model check to depth 9 (``dysharp formal switch``, yices; about 3 minutes on the shared
machine, each further step costs several times the one before) and every ``Cover`` reached within 13
(10 before the allocator's match and the freed-cell count were registered: a header now takes 5 cycles
from ingress to egress, a freed cell's credit returns a cycle later, and an input asks for its next
match only after its transfer ends). The atomicity cover (output 0 carrying packets of both inputs, with
payload) is reached at step 12 (was 9): one round of contention and hand-over, not long traffic;
k-induction does not close over the cell buffers' free-list state. The default test suite checks depth 7
(seconds). ``ports`` 2 is not possible: the block's minimum is 4.

Environment (the block's documented contract, by construction):

* each active input's sender honours its credits (``credits`` initial, one per flit, returned by
  ``rx.credit``) and may pause anywhere, also inside a packet;
* traffic is well formed: ``WRITE`` (``length`` 0 or 1 payload flits), header-only ``READ`` and
  multicast ``DYN_ST`` (mask over ports 0/1), framing as the length says (the switch's error and
  poison paths are another property: here every packet must be delivered);
* each output's downstream receiver has ``out_credits`` buffer flits and drains them when its free
  ``o_ready`` says so (any stall), returning one credit per flit drained.

Numbering: the harness writes into each header its source port (``src``), a per-input packet number
(``tag``) and, for each destination j, the packet's sequence number among the packets of its (input,
output j) pair (header bits 100 + 4 j .. 103 + 4 j, unused by the routing); each payload flit carries
bit 127 (absent in headers), the source, the packet number and its index in the packet. So a loss, a
duplicate, a reordering or an interleaving changes what an output sees.

Properties (each with a ``Cover``):

* **packets are atomic on each output**: after a header, every flit up to ``last`` on that output is the
  same packet's next payload flit (source, number, index), ``last`` exactly at its length, nothing
  poisoned. Cover: output 0 carries packets of both inputs, each with a payload flit.
* **no packet lost, duplicated or reordered per (input, output) pair**: each header on output j from
  input i carries the next sequence number of that pair, and reaches only an addressed output; nothing
  reaches ports 2 and 3. Cover: two
  packets of one pair delivered.
* **multicast: each destination gets exactly one copy**: a multicast packet's header reaches only
  outputs in its mask, each once and in its pair's order (the sequence check, for multicast packets).
  Cover: one multicast packet delivered to both outputs.
* **flits conserved: accepted = delivered + in flight, bounded**: per (input, output) pair, flits
  accepted at the ingress for that output minus flits delivered there is between 0 and ``credits + 1
  + egress_depth`` (the input buffer, the crossbar register and the output queue). Cover: a pair with
  flits delivered and none in flight.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.packet import HEADER_BITS, HeaderLayout, Opcode, rtl_payload_flits
from hw.switch.nvswitch import NVSwitch

from .runner import YICES_BMC, Properties

__all__ = ["SwitchHarness"]

W = 128
MARK = W - 1
SEQ_LO = 100          # header bits of the per-destination sequence numbers (4 bits each)
SEQ_BITS = 4
ACTIVE = 2            # ports with traffic (inputs) and destinations (outputs)


class SwitchHarness(wiring.Component):
    """Free inputs per active input i: ``valid{i}`` (offer a flit), ``op{i}`` (0 WRITE, 1 READ, 2/3
    DYN_ST), ``dst{i}``, ``len{i}``, ``mask{i}`` (0 is taken as 1); per output j: ``o_ready{j}``.
    ``switch`` may be replaced by a mutant (the proof must then fail)."""

    def __init__(self, *, credits: int = 4, out_credits: int = 2, switch=None):
        self.credits = credits
        self.out_credits = out_credits
        self.switch = switch if switch is not None else NVSwitch(
            ports=4, credits=credits, out_credits=out_credits, max_payload=1, groups=1, speedup=1,
            iterations=1)
        self.props = Properties()
        self.formal_options = dict(YICES_BMC)
        ports = {}
        for i in range(ACTIVE):
            ports.update({f"valid{i}": In(1), f"op{i}": In(2), f"dst{i}": In(1), f"len{i}": In(1),
                          f"mask{i}": In(2)})
        for j in range(4):
            ports[f"o_ready{j}"] = In(1)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        sw = self.switch
        m.submodules.sw = sw
        N, C, A = 4, self.credits, ACTIVE
        E = sw.egress_depth

        acc = [[Signal(8, name=f"acc_{i}_{j}") for j in range(A)] for i in range(A)]   # flits accepted
        dlv = [[Signal(8, name=f"dlv_{i}_{j}") for j in range(A)] for i in range(A)]   # flits delivered
        sq = [[Signal(SEQ_BITS, name=f"sq_{i}_{j}") for j in range(A)] for i in range(A)]  # packets sent
        exp = [[Signal(SEQ_BITS, name=f"exp_{i}_{j}") for j in range(A)] for i in range(A)]  # delivered
        mc_got = [Signal(A, name=f"mc_got{i}") for i in range(A)]   # destinations of input i's 1st mc

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
            m.d.comb += send.eq(getattr(self, f"valid{i}") & (credits_left != 0))
            m.d.sync += credits_left.eq(credits_left - send + rx.credit)
            op_sel, dst, ln, msk = (getattr(self, f"{n}{i}") for n in ("op", "dst", "len", "mask"))
            opcode = Mux(op_sel == 0, Opcode.WRITE, Mux(op_sel == 1, Opcode.READ, Opcode.DYN_ST))
            is_mc = op_sel[1]
            mask = Mux(msk == 0, 1, msk)
            h_dests = Mux(is_mc, mask, Mux(dst, 0b10, 0b01))
            hdr_bits = Signal(W, name=f"hdr{i}")
            hdr = HeaderLayout(hdr_bits[:HEADER_BITS])
            m.d.comb += [hdr.opcode.eq(opcode), hdr.src.eq(i), hdr.tag.eq(num), hdr.length.eq(ln)]
            with m.If(is_mc):
                m.d.comb += hdr.route.dyn.mask.eq(mask)
            with m.Else():
                m.d.comb += hdr.route.uni.dst.eq(dst)
            m.d.comb += hdr_bits[SEQ_LO:SEQ_LO + A * SEQ_BITS].eq(Cat(sq[i]))
            plen = rtl_payload_flits(hdr)[:2]
            pay = Signal(W, name=f"pay{i}")
            m.d.comb += pay.eq(Cat(Const(i, 6), Const(0, 2), pnum, idx + 1, Const(0, W - 1 - 19), Const(1, 1)))
            m.d.comb += [
                rx.valid.eq(send),
                rx.flit.data.eq(Mux(first, hdr_bits, pay)),
                rx.flit.last.eq(Mux(first, plen == 0, left == 1)),
                rx.flit.poison.eq(0),
            ]
            cur_dests = Mux(first, h_dests, dests)
            for j in range(A):
                m.d.sync += acc[i][j].eq(acc[i][j] + (send & cur_dests[j]))
            with m.If(send):
                with m.If(first):
                    m.d.sync += [dests.eq(h_dests), left.eq(plen), idx.eq(0), first.eq(plen == 0),
                                 num.eq(num + 1), pnum.eq(num)]
                    for j in range(A):
                        with m.If(h_dests[j]):
                            m.d.sync += sq[i][j].eq(sq[i][j] + 1)
                with m.Else():
                    m.d.sync += [left.eq(left - 1), idx.eq(idx + 1), first.eq(left == 1)]

        # ---------------------------------------------------------------- receivers (every output)
        atomic_ok, order_ok, mc_ok = [], [], []
        saw = [Signal(A, name=f"saw{j}") for j in range(A)]   # output j delivered a payload of input i
        for j in range(N):
            tx = sw.tx[j]
            level = Signal(range(self.out_credits + 2), name=f"dlevel{j}")
            pop = Signal(name=f"dpop{j}")
            m.d.comb += [pop.eq(getattr(self, f"o_ready{j}") & (level != 0)), tx.credit.eq(pop)]
            m.d.sync += level.eq(level + tx.valid - pop)
            if j >= A:
                order_ok.append(~tx.valid)
                continue
            in_pkt = Signal(name=f"o{j}_in_pkt")
            r_src = Signal(6, name=f"o{j}_src")
            r_num = Signal(8, name=f"o{j}_num")
            r_len = Signal(2, name=f"o{j}_len")
            r_idx = Signal(2, name=f"o{j}_idx")
            d = tx.flit.data
            h = HeaderLayout(d[:HEADER_BITS])
            h_len = rtl_payload_flits(h)[:2]
            h_src = h.src
            seq = d[SEQ_LO + SEQ_BITS * j:SEQ_LO + SEQ_BITS * (j + 1)]
            p_src, p_num, p_idx = d[0:6], d[8:16], d[16:18]
            good_hdr = ~d[MARK] & (h_src < A) & (tx.flit.last == (h_len == 0))
            good_pay = d[MARK] & (p_src == r_src) & (p_num == r_num) & (p_idx == r_idx + 1) & \
                (tx.flit.last == (p_idx == r_len))
            atomic_ok.append(~tx.valid | (~tx.flit.poison & Mux(in_pkt, good_pay, good_hdr)))
            exp_seq = Mux(h_src == 0, exp[0][j], exp[1][j])
            order_ok.append(~tx.valid | in_pkt | (seq == exp_seq))
            is_mc_hdr = h.opcode == Opcode.DYN_ST
            with m.If(tx.valid):
                with m.If(~in_pkt):
                    m.d.sync += [in_pkt.eq(~tx.flit.last), r_src.eq(h_src), r_num.eq(h.tag), r_len.eq(h_len),
                                 r_idx.eq(0)]
                    for i in range(A):
                        with m.If(h_src == i):
                            m.d.sync += exp[i][j].eq(exp[i][j] + 1)
                            with m.If(is_mc_hdr & (h.tag == 0)):
                                m.d.sync += mc_got[i][j].eq(1)
                with m.Else():
                    m.d.sync += [in_pkt.eq(~tx.flit.last), r_idx.eq(p_idx)]
                    for i in range(A):
                        with m.If(r_src == i):
                            m.d.sync += saw[j][i].eq(1)
            src_now = Mux(in_pkt, r_src, h_src)
            for i in range(A):
                m.d.sync += dlv[i][j].eq(dlv[i][j] + (tx.valid & (src_now == i)))
            # A header reaches only its destinations (mask bit j, or dst j), once (the sequence check).
            addressed = Mux(is_mc_hdr, h.route.dyn.mask[j], h.route.uni.dst == j)
            mc_ok.append(~tx.valid | in_pkt | ~is_mc_hdr | ((seq == exp_seq) & addressed))
            order_ok[-1] = order_ok[-1] & (~tx.valid | in_pkt | addressed)

        bound = C + 1 + E
        cons_ok = []
        for i in range(A):
            for j in range(A):
                cons_ok.append((dlv[i][j] <= acc[i][j]) & (acc[i][j] - dlv[i][j] <= bound))

        p = self.props
        p.check(m, "packets are atomic on each output (no interleaving, framing kept)",
                Cat(atomic_ok).all(), saw[0].all())
        p.check(m, "no packet lost, duplicated or reordered per (input, output) pair",
                Cat(order_ok).all(), exp[0][0] == 2)
        p.check(m, "multicast: each destination gets exactly one copy, in order",
                Cat(mc_ok).all(), mc_got[0] == 0b11)
        p.check(m, "flits conserved: accepted = delivered + in flight (0..credits+1+egress_depth)",
                Cat(cons_ok).all(), (dlv[1][0] != 0) & (dlv[1][0] == acc[1][0]))
        return m
