"""The NVSwitch datapath: N credit-link ports, per-input VOQ buffers, an iSLIP crossbar allocator, and
multicast by destination mask.

Contract
--------
* Ports: ``rx[i]``/``tx[i]`` credit links (one flit per cycle each way), ``cfg`` (group-table writes),
  ``err_count`` (one 32-bit counter per :class:`~hw.packet.ErrorCode` value below ``N_ERROR_CODES``: every
  code the network answers), ``cfg_errors``.
* Routing: unicast opcodes go to ``dst``; static ``multimem`` to the group table's mask for ``group``;
  ``dymultimem`` to the header ``mask``. A packet whose destination is its own source port is delivered
  like any other. Every packet is forwarded unchanged (header rewriting belongs to the DySHARP blocks).
* Packet-atomic: an output carries one packet at a time, start to ``last``.
* Flow control: ``rx`` returns one credit per freed cell (``credits`` cells per input); ``tx`` sends only
  with credits from downstream (``out_credits`` initial). Nothing is dropped by backpressure.
* Bad input (unknown opcode, length above ``max_payload``, zero/out-of-range mask, unconfigured group,
  bad ``dst``, bad reduction type): the packet is dropped whole, an ``ERROR`` response goes back out of
  the arrival port, and ``err_count[code]`` increments. A length that disagrees with ``last`` is found at
  the packet's end, after cut-through forwarding began: the packet is ended with ``poison`` (receivers
  drop it), the error response and counter are as above. With ``isolate_static=True`` a static
  ``multimem`` packet from a port that is not a member of its group is refused the same way
  (``ISOLATION``); by default any port may send to any configured group, as NVLS's plain switch does.
  With ``multicast=False`` (a network that routes by ``dst`` only, like the DySHARP switch's response
  network) a static or dynamic ``multimem`` packet is refused the same way (``UNKNOWN_OPCODE``).
* A whole packet of credits: a multicast head still arriving is sent to all its destinations at once or
  not at all (:mod:`hw.switch.input_unit`); two such heads whose grants cross wait for each other for
  ever unless each input can hold its packet whole. So a switch that carries multicast refuses
  ``credits`` below ``max_payload + 1`` (``docs/timeouts.md``); a ``multicast=False`` one does not need it.
* Latency: header in at cycle t, header out at t+5 with no contention (the allocator's match is
  registered, see :class:`~hw.switch.input_unit.InputUnit`), t+6 with ``req_stage`` (the requests are
  registered too: from ``REQ_STAGE_PORTS`` ports by default, where the input units' request vectors and
  the allocator's grant and accept do not fit one 640 ps cycle together). Throughput (one input to one
  output, full load, speedup 2): one flit per cycle at every packet length, one packet per cycle for
  1- and 2-flit unicast packets (counted transfers, see :class:`~hw.switch.input_unit.InputUnit`; not
  with ``req_stage``, where a transfer costs its read cycles plus two and 3-flit packets reach 0.75
  flits per cycle; ``dysharp bench linerate``). Inside, each input reads ``speedup`` cells per cycle into a crossbar lane per
  cell and each output queues what it cannot send yet (combined input/output queueing): packet-mode
  matching then loses little when inputs and outputs free up at different times. ``queueing="fifo"``
  builds the head-of-line-blocking baseline (one FIFO per input).
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect

from ..credit import CreditSender, credit_link_signature
from ..packet import DEFAULT_FLIT_WIDTH, MAX_LENGTH, MAX_SWITCH_PORTS, ErrorCode, flit_layout, header_format
from .allocator import ISlipAllocator
from .crossbar import Crossbar
from .egress_queue import EgressQueue
from .group_table import GroupTable, group_write_layout
from .input_unit import InputUnit
from .output_ownership import OutputOwnership
from .request_stage import RequestStage

__all__ = ["NVSwitch", "N_ERROR_CODES", "REQ_STAGE_PORTS", "uses_req_stage", "zero_load_latency"]

N_ERROR_CODES = 16      # codes 0..15: the network never answers a later one (POISONED is the reduction engine's)
# From this many ports the requests are registered before the allocator by default (``req_stage``): at 64
# ports the request vector (1.5 ns at 45 nm) and the allocator (2.6 ns) are 4.1 ns together, against 2.8 ns.
REQ_STAGE_PORTS = 32


def uses_req_stage(ports: int, req_stage: bool | None = None) -> bool:
    """Whether a switch of ``ports`` registers its requests (``req_stage``; None: by port count)."""
    return bool(ports >= REQ_STAGE_PORTS if req_stage is None else req_stage)


def zero_load_latency(ports: int, req_stage: bool | None = None) -> int:
    """Cycles from a header in to the same header out with no contention."""
    return 5 + uses_req_stage(ports, req_stage)


class NVSwitch(wiring.Component):
    """Parameters: ``ports`` (4..128; past 64 the wide header format, :func:`hw.packet.header_format`, which
    needs ``flit_width`` >= 256), ``credits`` (input cells per port, 4..1024; default 256 = 4 KB, which
    keeps enough packets per input for the VOQ matching to saturate above 0.95), ``out_credits``
    (downstream buffer per port; default ``credits``), ``flit_width`` (128/256/512), ``max_payload``
    (payload flits per packet, 1..31), ``groups`` (static group-table entries), ``queueing``
    (``"voq"`` or ``"fifo"``), ``speedup`` (1 or 2: flits per cycle an input reads and the crossbar moves
    per port), ``egress_depth`` (output queue flits; default 4 at speedup 1, two maximal packets at
    speedup 2), ``iterations`` (iSLIP iterations per cycle, 1..4), ``req_stage`` (register the requests
    before the allocator, one more cycle per traversal; default: from ``REQ_STAGE_PORTS`` ports),
    ``isolate_static`` (refuse a static ``multimem`` packet from a non-member), ``multicast`` (False: route
    by ``dst`` only and refuse multicast packets; ``credits`` may then be below ``max_payload + 1``)."""

    def __init__(self, *, ports: int = 8, credits: int = 256, out_credits: int | None = None,
                 flit_width: int = DEFAULT_FLIT_WIDTH, max_payload: int = 16, groups: int = 16,
                 queueing: str = "voq", egress_depth: int | None = None, iterations: int = 1,
                 speedup: int = 2, req_stage: bool | None = None, isolate_static: bool = False,
                 multicast: bool = True):
        if not isinstance(ports, int) or not 4 <= ports <= MAX_SWITCH_PORTS:
            raise ValueError(f"ports must be an integer in 4..{MAX_SWITCH_PORTS}, got {ports!r}")
        flit_layout(flit_width)   # validates flit_width
        header_format(ports, flit_width)   # past 64 ports: the wide header, which needs 256-bit flits
        if not isinstance(credits, int) or not 4 <= credits <= 1024:
            raise ValueError(f"credits must be an integer in 4..1024, got {credits!r}")
        if out_credits is None:
            out_credits = credits
        if not isinstance(out_credits, int) or not 1 <= out_credits <= 1024:
            raise ValueError(f"out_credits must be an integer in 1..1024, got {out_credits!r}")
        if not isinstance(max_payload, int) or not 1 <= max_payload <= MAX_LENGTH:
            raise ValueError(f"max_payload must be an integer in 1..{MAX_LENGTH}, got {max_payload!r}")
        if queueing not in ("voq", "fifo"):
            raise ValueError(f"queueing must be 'voq' or 'fifo', got {queueing!r}")
        if speedup not in (1, 2):
            raise ValueError(f"speedup must be 1 or 2, got {speedup!r}")
        if egress_depth is None:
            # Speedup 2 needs room for a whole packet arriving at twice the drain rate.
            egress_depth = 4 if speedup == 1 else 2 * (max_payload + 1)
        if not isinstance(egress_depth, int) or not 2 * speedup <= egress_depth <= 256:
            raise ValueError(f"egress_depth must be an integer in {2 * speedup}..256, got {egress_depth!r}")
        for name, v in (("isolate_static", isolate_static), ("multicast", multicast)):
            if not isinstance(v, bool):
                raise ValueError(f"{name} must be a bool, got {v!r}")
        # A multicast head still arriving is sent to all its destinations at once (see input_unit): two such
        # heads whose grants cross wait for each other for ever unless each can arrive whole.
        if multicast and credits < max_payload + 1:
            raise ValueError(f"credits must be at least max_payload + 1 = {max_payload + 1} for a switch that "
                             f"carries multicast (a multicast packet must fit whole in an input: a multicast head "
                             f"still arriving is sent to all its destinations at once, and two such heads whose "
                             f"grants cross would wait for each other for ever), got {credits}; "
                             f"multicast=False builds a unicast-only switch without this minimum")
        self.isolate_static = isolate_static
        self.multicast = multicast
        self.speedup = speedup
        self.ports = ports
        self.credits = credits
        self.out_credits = out_credits
        self.flit_width = flit_width
        self.max_payload = max_payload
        self.groups = groups
        self.queueing = queueing
        self.egress_depth = egress_depth
        if not isinstance(iterations, int) or not 1 <= iterations <= 4:
            raise ValueError(f"iterations must be an integer in 1..4, got {iterations!r}")
        self.iterations = iterations
        if req_stage not in (None, True, False, 0, 1):
            raise ValueError(f"req_stage must be a bool or None (by port count), got {req_stage!r}")
        self.req_stage = uses_req_stage(ports, req_stage)
        self.latency = zero_load_latency(ports, self.req_stage)
        link = credit_link_signature(flit_width)
        super().__init__({
            "rx": In(link).array(ports),
            "tx": Out(link).array(ports),
            "cfg": In(stream.Signature(group_write_layout(ports))),
            "err_count": Out(data.ArrayLayout(32, N_ERROR_CODES)),
            "cfg_errors": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        N = self.ports
        flit_w = flit_layout(self.flit_width).size

        m.submodules.groups = groups = GroupTable(ports=N, entries=self.groups, n_lookups=N)
        connect(m, wiring.flipped(self.cfg), groups.cfg)
        m.d.comb += self.cfg_errors.eq(groups.cfg_errors)

        m.submodules.alloc = alloc = ISlipAllocator(N, self.iterations)
        S = self.speedup
        admit = "packet" if S > 1 else "in_flight" if self.queueing == "voq" and not self.req_stage else "any"
        m.submodules.owner = owner = OutputOwnership(ports=N, lanes=S, egress_depth=self.egress_depth,
                                                     max_payload=self.max_payload, admit=admit)
        m.d.comb += alloc.out_free.eq(owner.out_free)
        inputs = []
        for i in range(N):
            # The index is a strap input, so the N input units are one Verilog module (hw.emission).
            iu = InputUnit(port=None, ports=N, credits=self.credits, flit_width=self.flit_width,
                           max_payload=self.max_payload, queueing=self.queueing, lanes=self.speedup,
                           grant_delay=2 if self.req_stage else 1, isolate_static=self.isolate_static,
                           multicast=self.multicast)
            m.submodules[f"in{i}"] = iu
            inputs.append(iu)
            connect(m, wiring.flipped(self.rx[i]), iu.rx)
            m.d.comb += [
                iu.port.eq(i),
                groups.lookup_handle[i].eq(iu.group_handle),
                iu.group_mask.eq(groups.lookup_mask[i]),
                iu.grant.eq(owner.match[i]),
                owner.accept[i].eq(alloc.accept[i]),
                owner.short[i].eq(iu.req_short),
                owner.counted[i].eq(iu.req_cd),
                owner.release[i].eq(iu.release),
                owner.reads_next[i].eq(iu.reads_next),
            ]
            if self.req_stage:
                # Registered requests, one cycle old (see RequestStage): no input is matched twice.
                rs = m.submodules[f"req{i}"] = RequestStage(ports=N)
                m.d.comb += [rs.req.eq(iu.req), rs.req_class.eq(iu.req_class), rs.accept.eq(alloc.accept[i]),
                             alloc.req[i].eq(rs.alloc_req), alloc.req_class[i].eq(rs.alloc_class)]
            else:
                m.d.comb += [alloc.req[i].eq(iu.req), alloc.req_class[i].eq(iu.req_class)]

        # Crossbar (each output selects its one sending input by an encoded index, see
        # hw.switch.crossbar) and an output queue + credit sender per output.
        m.submodules.xbar = xbar = Crossbar(n_in=N, n_out=N, width=flit_w, lanes=S)
        for i, iu in enumerate(inputs):
            m.d.comb += [xbar.in_valid[i].eq(iu.out_valid), xbar.in_dests[i].eq(iu.out_dests)]
            m.d.comb += [xbar.in_data[i][k].eq(iu.out_flit[k].as_value()) for k in range(S)]
        for j in range(N):
            q = EgressQueue(width=flit_w, depth=self.egress_depth, lanes=S)
            m.submodules[f"egress{j}"] = q
            m.d.comb += [q.w_valid.eq(xbar.out_valid[j])]
            m.d.comb += [q.w_data[k].eq(xbar.out_data[j][k]) for k in range(S)]
            m.d.comb += [owner.level[j].eq(q.level),
                         owner.written[j].eq(sum(xbar.out_valid[j][k] for k in range(S)))]
            tx = CreditSender(credits=self.out_credits, flit_width=self.flit_width)
            m.submodules[f"tx{j}"] = tx
            m.d.comb += [
                tx.i.valid.eq(q.r.valid),
                tx.i.payload.eq(q.r.payload),
                q.r.ready.eq(tx.i.ready),
            ]
            connect(m, tx.link, wiring.flipped(self.tx[j]))
        for iu in inputs:
            m.d.comb += iu.space.eq(owner.space)

        # Status: one counter per error code, summed over ports.
        for c in range(N_ERROR_CODES):
            inc = Signal(range(N + 1), name=f"err_inc{c}")
            m.d.comb += inc.eq(sum((iu.err_valid & (iu.err_code.as_value() == c)) for iu in inputs))
            m.d.sync += self.err_count[c].eq(self.err_count[c] + inc)
        return m
