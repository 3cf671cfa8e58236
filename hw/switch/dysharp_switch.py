"""The DySHARP switch: the NVSwitch datapath with, at every port, an AL-TLB, an egress stage that translates
and rewrites, and a reduction engine -- one synthesizable top that multicasts, translates and reduces.

Per port ``i`` (see ``docs/architecture.md`` for the picture and the cycles per stage)::

    rx[i] -> VcReceiver -VC0-> IngressCheck -> PacketSplit --ld_reduce--> engine[i].req
                                                       \\-others-> PacketMerge(+ engine[i].rd) -> reqnet.rx[i]
                        -VC1-> IngressCheck -> PacketSplit --TLB_FILL_RESP--> fill[i] -> AlTlb[i].mem
                                                       \\-others-> PacketMerge(+ egress[i].err) -> respnet.rx[i]
    reqnet.tx[i]  -> CreditReceiver -> PacketSplit --ERROR--> (VC1 merge)
                                             \\-others-> EgressTranslator[i] (AlTlb[i]) -> PacketMerge(fill[i] first) -VC0-> tx[i]
    respnet.tx[i] -> CreditReceiver -> PacketSplit --RED_READ_RESP--> engine[i].resp
                                             \\-others-> PacketMerge(+ engine[i].out, errors) -VC1-> tx[i]

With ``fill_bypass`` the ``VcReceiver`` is a :class:`~hw.switch.fill_bypass.FillBypassReceiver`, whose own fill
lane feeds ``fill[i]``; VC 1's IngressCheck then sees only the other responses and goes straight to the merge.

What each request does
----------------------
* Unicast, static ``multimem.st``: routed by the request network (``dst``, or the static group table) and
  delivered unchanged. A static ``multimem`` store or reduction from a GPU that is not a member of the
  group is refused with ``ERROR{code = ISOLATION}`` (the request network's ``err_count``, or the
  requester's engine's ``bad_requests``): tenants sharing the switch cannot write or read each other's
  static groups.
* ``dymultimem.st``: sent once by its source, replicated by the request network's crossbar to the ``mask``
  ports; at each destination's egress the AL-TLB of that port translates (group, index, destination) into
  that GPU's row address and the packet leaves as ``WRITE`` at ``row + offset * flit_bytes``.
* ``dymultimem.ld_reduce`` / ``multimem.ld_reduce``: the requester port's engine allocates a buffer entry
  and sends one read per destination through the request network: ``DYN_RED_READ`` (untranslated: group,
  index, byte offset) for ``dymultimem``, translated into ``RED_READ`` at the destination's egress;
  ``RED_READ`` at the group offset for static ``multimem``. The destinations' ``RED_READ_RESP`` come back
  through the response network to the requester port and are reduced there; one ``RED_RESP`` (or ``ERROR``)
  leaves to the requester.

Translation happens at the destination's port, for stores and reductions alike: each AL-TLB then caches the
layout of one GPU only (its capacity is not shared by N layouts), every miss is fetched over that GPU's own
link (``TLB_FILL``/``TLB_FILL_RESP``, no fill ever crosses the crossbar), and a ``d``-way request gets its
``d`` translations in one cycle on ``d`` ports.

Message classes and deadlock freedom
------------------------------------
Requests (``WRITE``, ``READ``, ``MM_ST``, ``DYN_ST``, ``*LD_REDUCE``, ``RED_READ``, ``DYN_RED_READ``,
``TLB_FILL``) and responses (``READ_RESP``, ``RED_READ_RESP``, ``RED_RESP``, ``TLB_FILL_RESP``, ``ERROR``)
never share a buffer: each link has two virtual channels with their own credits (:mod:`hw.vc_link`) and
inside the switch they use two separate datapaths, the request network and the response network (two
:class:`NVSwitch` instances). The argument:

1. Every response sink consumes unconditionally: a GPU's response receive (required of the GPU side), the
   reduction engine's contribution port (its buffer entry was allocated when the read was sent), the AL-TLB's
   fill port (an MSHR waits for it; the bridge buffers the one cycle a config write holds it off).
2. So the response network drains: its inputs wait only for its outputs, which wait only for those sinks.
   Responses made inside the switch (egress translation errors, the engines' results, header errors of the
   request network, refused packets) enter response paths only.
3. Request resources wait only for response resources: a translation miss waits for a fill response, an
   ``ld_reduce`` waits for a buffer entry that contributions (or the timeout) free, a ``READ`` at a GPU waits
   for its response channel. Fill requests join the request channel of link ``i`` after the egress stage,
   ahead of the packets that wait for them, so the waiting traffic cannot block them.
4. No cycle exists, so no protocol deadlock; timeouts (AL-TLB, reduction buffer) bound every wait on a
   silent GPU. They are sized from the buffers and ``gpu_latency`` so that a request whose GPUs all answer
   never times out (:mod:`hw.switch.timeouts`). A multicast head still arriving is sent to all its
   destinations at once, so ``credits`` must hold a whole packet: two such heads whose grants cross would
   otherwise wait for each other. A switch input that stops returning credits while a queue head is about
   to be lapped by its arrival numbers (:class:`~hw.switch.packet_queues.PacketQueues`' ``near_lap``) waits
   only on that head's output, a wait a full input buffer already has, so it adds no edge to the argument.

Ordering guarantee
------------------
Packets from one source to one destination leave in the order the source sent them: the request network
keeps per-pair order (:mod:`hw.switch.input_unit`), the egress stage keeps per-source order while letting
other sources' hits overtake a miss (:mod:`hw.switch.egress_translator`), and the merges and the link keep
stream order. The GPU receive path's reliance on a token row's metadata flit arriving last holds. Requests
and responses are not ordered with each other; reads of one ``ld_reduce`` are not ordered with anything.

Configuration and status
------------------------
``cfg`` (:class:`SwitchConfig`, always ready): ``GROUP`` writes the static group table of the request
network and of every engine; ``TLB`` writes one port's AL-TLB group configuration, or every port's with
``all``. A ``port`` past the last, or an undefined target, counts ``cfg_errors`` and changes nothing.
``status`` (:func:`status_signature`) carries every counter per port and the totals over ports, one
port per member; :func:`status_ports` gives their offsets in the one :func:`status_layout` vector.
"""

import enum as py_enum

from amaranth.hdl import Module, Shape, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ..credit import CreditReceiver, CreditSender
from ..packet import (DEFAULT_FLIT_WIDTH, MAX_LENGTH, MAX_SWITCH_PORTS, N_VCS, PORT_BITS, VC_REQ, VC_RESP,
                      DynamicRoute, ErrorCode, Opcode, flit_layout, header_format, widened)
from ..packet_stream import PacketMerge, PacketSplit
from ..vc_link import VcReceiver, VcSender, vc_link_signature
from .al_tlb import N_COUNTERS as N_TLB_COUNTERS, AlTlb, TlbConfig, TlbCounter, tlb_config_layout
from .egress_translator import EgressCounter, EgressTranslator
from .fill_bypass import FillBypassReceiver
from .group_table import GroupWrite, group_write_layout
from .ingress_check import IngressCheck
from .nvswitch import N_ERROR_CODES, NVSwitch
from .reduction_engine import ENGINE_COUNTERS, ReductionEngine
from .timeouts import (DEFAULT_GPU_LATENCY, MAX_DERIVED_TIMEOUT, TimeoutBound, check_timeouts, derived_timeouts,
                       timeout_bounds)
from .tlb_fill_bridge import TlbFillBridge

__all__ = ["DySharpSwitch", "switch_timeouts", "SwitchConfig", "switch_config_layout", "CfgTarget", "IngressCounter",
           "status_layout",
           "port_status_layout", "status_signature", "status_ports", "error_fields", "errors_in"]

# Receive FIFO between each network's output and the egress stages (covers the 2-cycle credit loop).
_NET_OUT_DEPTH = 4


class CfgTarget(enum.Enum, shape=2):
    GROUP = 0   #: static multimem group table (request network and every engine)
    TLB = 1     #: AL-TLB group configuration of ``port`` (or every port with ``all``)


class SwitchConfig(data.Struct):
    target: CfgTarget
    port: PORT_BITS
    all: 1
    group: GroupWrite
    tlb: TlbConfig


def switch_config_layout(ports: int | None = None):
    """:class:`SwitchConfig` in the header format of a ``ports``-port switch (:func:`hw.packet.widened`)."""
    return widened(SwitchConfig, ports, port="port_bits", group=group_write_layout(ports),
                   tlb=tlb_config_layout(ports))


class IngressCounter(py_enum.IntEnum):
    REFUSED_REQ = 0     #: packets refused on the request channel (wrong class or a switch-only opcode)
    REFUSED_RESP = 1    #: ... on the response channel
    LINK_OVERFLOWS = 2  #: flits the GPU sent without a credit (dropped)
    BAD_FILLS = 3       #: malformed TLB_FILL_RESP packets (dropped)


def port_status_layout() -> data.StructLayout:
    """Counters of one port: AL-TLB (:class:`~hw.switch.al_tlb.TlbCounter`), reduction engine (``in_use``
    and :data:`~hw.switch.reduction_engine.ENGINE_COUNTERS`), egress stage (:class:`EgressCounter`) and
    ingress (:class:`IngressCounter`)."""
    return data.StructLayout({
        "tlb": data.ArrayLayout(32, N_TLB_COUNTERS),
        "engine": data.StructLayout({name: 32 for name in ("in_use", *ENGINE_COUNTERS)}),
        "egress": data.ArrayLayout(32, len(EgressCounter)),
        "ingress": data.ArrayLayout(32, len(IngressCounter)),
    })


def status_layout(ports: int) -> data.StructLayout:
    """``port[i]`` and ``total`` (sums over ports; ``egress[MAX_OCCUPANCY]`` and ``engine.in_use`` total
    are sums too), the two networks' error counters per :class:`~hw.packet.ErrorCode`, ``cfg_errors``."""
    ps = port_status_layout()
    return data.StructLayout({
        "port": data.ArrayLayout(ps, ports),
        "total": ps,
        "req_net": data.ArrayLayout(32, N_ERROR_CODES),
        "resp_net": data.ArrayLayout(32, N_ERROR_CODES),
        "cfg_errors": 32,
    })


# The counters that only a fault moves (the others count traffic or occupancy).
_TLB_ERRORS = (TlbCounter.BAD_RESPONSES, TlbCounter.CFG_ERRORS, TlbCounter.ISOLATION, TlbCounter.OUT_OF_BOUNDS,
               TlbCounter.TLB_FAULT, TlbCounter.BUFFER_FULL, TlbCounter.OTHER_ERRORS, TlbCounter.READ_TIMEOUTS,
               TlbCounter.TIMEOUT, TlbCounter.STALE_RESPONSES)
_ENGINE_ERRORS = ("stale", "mismatches", "aborts", "timeouts", "bad_requests", "bad_responses", "duplicates")


def error_fields() -> dict[str, str]:
    """The :func:`status_layout` fields that count errors, as {flattened field name (``total.`` sums over
    ports): readable name}: every one is zero after a run in which no fault was injected. The AL-TLB's
    error answers, timeouts and refused fills and writes; every reduction-engine refusal (stale, mismatched,
    aborted, timed-out, malformed and duplicate contributions or requests); egress translation errors;
    ingress refusals, link overflows and bad fills; both networks' error packets per
    :class:`~hw.packet.ErrorCode` (``NONE`` excluded); refused configuration writes."""
    codes = {c.value: c.name for c in ErrorCode}
    out = {f"total.tlb.{c.value}": f"tlb.{c.name}" for c in _TLB_ERRORS}
    out |= {f"total.engine.{n}": f"engine.{n}" for n in _ENGINE_ERRORS}
    c = EgressCounter.XLATE_ERRORS
    out[f"total.egress.{c.value}"] = f"egress.{c.name}"
    out |= {f"total.ingress.{c.value}": f"ingress.{c.name}" for c in IngressCounter}
    out |= {f"{net}.{v}": f"{net}.{codes.get(v, v)}"
            for net in ("req_net", "resp_net") for v in range(1, N_ERROR_CODES)}
    return out | {"cfg_errors": "cfg_errors"}


def errors_in(status: dict) -> dict[str, int]:
    """{readable name: count} of the :func:`error_fields` that are not zero in ``status`` (a decoded
    :func:`status_layout`: {flattened field name: value})."""
    return {name: status[f] for f, name in error_fields().items() if status[f]}


def status_signature(ports: int) -> wiring.Signature:
    """The ``status`` interface: one port per member of :func:`status_layout`, ``port`` one per switch port
    (a single status vector would pass Amaranth's 65,536-bit limit on one signal at 64 ports)."""
    ps = port_status_layout()
    return wiring.Signature({
        "port": Out(ps).array(ports),
        "total": Out(ps),
        "req_net": Out(data.ArrayLayout(32, N_ERROR_CODES)),
        "resp_net": Out(data.ArrayLayout(32, N_ERROR_CODES)),
        "cfg_errors": Out(32),
    })


def status_ports(ports: int, prefix: str = "status") -> list[tuple[str, int, int]]:
    """(Verilog port name, bit offset in :func:`status_layout`, width) of every ``status`` port, in
    layout order: concatenating them (each value shifted to its offset) gives the :func:`status_layout`
    vector that the testbenches decode."""
    layout = status_layout(ports)
    ps = port_status_layout().size
    out = [(f"{prefix}__port__{i}", layout["port"].offset + i * ps, ps) for i in range(ports)]
    for name in ("total", "req_net", "resp_net", "cfg_errors"):
        f = layout[name]
        out.append((f"{prefix}__{name}", f.offset, f.width))
    return out


def _timeouts(*, tlb_timeout, red_timeout, allow_short_timeouts, gpu_latency, **sizes):
    """(tlb_timeout, red_timeout, :class:`~hw.switch.timeouts.TimeoutBound`): None derived, values checked."""
    if not isinstance(gpu_latency, int) or isinstance(gpu_latency, bool) or not 1 <= gpu_latency <= 1 << 20:
        raise ValueError(f"gpu_latency must be an integer in 1..{1 << 20} cycles, got {gpu_latency!r}")
    if not isinstance(allow_short_timeouts, bool):
        raise ValueError(f"allow_short_timeouts must be a bool, got {allow_short_timeouts!r}")
    for name, v in (("tlb_timeout", tlb_timeout), ("red_timeout", red_timeout)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise ValueError(f"{name} must be an integer number of cycles or None (derived), got {v!r}")
    for name, v in sizes.items():      # the blocks check the ranges; the bound needs numbers
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    # A multicast head still arriving is sent to all its destinations at once or not at all: two such heads
    # whose grants cross wait for each other for ever unless each can arrive whole. No wait is bounded then.
    if sizes["credits"] < sizes["max_payload"] + 1:
        raise ValueError(f"credits must be at least max_payload + 1 = {sizes['max_payload'] + 1} (a multicast "
                         f"packet must fit whole in a request-network input: a multicast head still arriving is "
                         f"sent to all its destinations at once, and two such heads whose grants cross would wait "
                         f"for each other for ever), got {sizes['credits']}")
    bound = timeout_bounds(gpu_latency=gpu_latency, **sizes)
    d_tlb, d_red = derived_timeouts(bound)
    tlb = d_tlb if tlb_timeout is None else tlb_timeout
    red = d_red if red_timeout is None else red_timeout
    for name, v, given in (("tlb_timeout", tlb, tlb_timeout), ("red_timeout", red, red_timeout)):
        if given is None and v > MAX_DERIVED_TIMEOUT:
            raise ValueError(f"the derived {name} {v:,} is above {MAX_DERIVED_TIMEOUT:,} cycles, the longest "
                             f"timer: these buffers and gpu_latency allow waits too long to time (bound "
                             f"{bound.tlb if name == 'tlb_timeout' else bound.red:,}); use smaller buffers")
    if not allow_short_timeouts:
        check_timeouts(bound, tlb, red)
    return tlb, red, bound


def switch_timeouts(**params) -> tuple[int, int, TimeoutBound]:
    """(``tlb_timeout``, ``red_timeout``, their :class:`~hw.switch.timeouts.TimeoutBound`) that
    :class:`DySharpSwitch` builds with ``params`` (any of its parameters; the others at their defaults),
    checked as the constructor checks them, without building it."""
    import inspect
    p = {k: v.default for k, v in inspect.signature(DySharpSwitch.__init__).parameters.items()
         if v.kind == v.KEYWORD_ONLY}
    unknown = set(params) - set(p)
    if unknown:
        raise ValueError(f"DySharpSwitch has no parameter {', '.join(sorted(unknown))}")
    p.update(params)
    return _timeouts(**{k: p[k] for k in (
        "ports", "credits", "resp_credits", "link_credits", "gpu_credits", "max_payload", "red_entries",
        "tlb_mshrs", "egress_slots", "gpu_latency", "tlb_timeout", "red_timeout", "allow_short_timeouts")})


def _is(*ops):
    def select(h):
        hit = 0
        for op in ops:
            hit = hit | (h.opcode == op)
        return hit
    return select


class DySharpSwitch(wiring.Component):
    """Parameters: ``ports`` (4..128; past 64 the wide header format, :func:`hw.packet.header_format`, which
    needs ``flit_width`` 256 or 512), ``credits``/``resp_credits`` (request/response network input cells per
    port), ``link_credits`` (per virtual channel: the switch's receive FIFO on each link), ``gpu_credits``
    (per virtual channel: the GPU's receive buffers), ``flit_width``, ``max_payload``, ``groups`` (static
    and AL-TLB group handles), ``tlb_entries``, ``tlb_mshrs``, ``tlb_timeout``, ``red_entries``,
    ``red_timeout``, ``egress_slots``, ``resp_iterations`` (iSLIP iterations per cycle of the response
    network, 1..4: combine converges every contribution of a request onto its requester's port),
    ``row_bytes`` (the longest row of any GPU's buffers: a ``dymultimem`` access past it is answered
    ``OUT_OF_BOUNDS`` by the egress; default: the reach of the 10-bit flit offset, 16 KB at 16-B flits),
    ``fill_bypass`` (default False: each link's VC 1 receive FIFO holds fill answers and read answers alike;
    True: :class:`~hw.switch.fill_bypass.FillBypassReceiver`, the ``TLB_FILL_RESP`` packets split off as they
    arrive into a FIFO of their own, so a fill never waits behind a response that cannot enter the response
    network; the link protocol and credits are unchanged).

    Timeouts (:mod:`hw.switch.timeouts`, ``docs/timeouts.md``): ``gpu_latency`` (cycles within which every
    GPU answers a request it has taken, 1..2**20; default 1000) and the buffer sizes above bound the longest
    legal wait of a ``TLB_FILL`` and of an ``ld_reduce`` (``self.timeout_bound``). ``tlb_timeout`` and
    ``red_timeout`` default to twice their bound (None: derived); a value below its bound is refused with the
    bound and its terms, unless ``allow_short_timeouts`` (fault experiments, where answered requests may
    time out).

    Ports: ``rx[i]``/``tx[i]`` (:func:`~hw.vc_link.vc_link_signature`, GPU to switch and back), ``cfg``
    (:class:`SwitchConfig`), ``status`` (:func:`status_signature`).
    """

    def __init__(self, *, ports: int = 8, credits: int = 256, resp_credits: int = 256, link_credits: int = 8,
                 gpu_credits: int = 32, flit_width: int = DEFAULT_FLIT_WIDTH, max_payload: int = 16,
                 groups: int = 16, tlb_entries: int = 64, tlb_mshrs: int = 8, tlb_timeout: int | None = None,
                 red_entries: int = 64, red_timeout: int | None = None, egress_slots: int = 8,
                 resp_iterations: int = 1, row_bytes: int | None = None, gpu_latency: int = DEFAULT_GPU_LATENCY,
                 allow_short_timeouts: bool = False, fill_bypass: bool = False):
        if not isinstance(fill_bypass, bool):
            raise ValueError(f"fill_bypass must be True or False (true/false with --design), got {fill_bypass!r}")
        if not isinstance(ports, int) or not 4 <= ports <= MAX_SWITCH_PORTS:
            raise ValueError(f"ports must be an integer in 4..{MAX_SWITCH_PORTS}, got {ports!r}")
        flit_layout(flit_width)      # validates flit_width
        header_format(ports, flit_width)   # past 64 ports: the wide header, which needs 256-bit flits
        for name, v, lo, hi in (("link_credits", link_credits, 2, 256), ("gpu_credits", gpu_credits, 1, 1024)):
            if not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {v!r}")
        if not isinstance(max_payload, int) or not 1 <= max_payload <= MAX_LENGTH:
            raise ValueError(f"max_payload must be an integer in 1..{MAX_LENGTH}, got {max_payload!r}")
        tlb_timeout, red_timeout, self.timeout_bound = _timeouts(
            ports=ports, credits=credits, resp_credits=resp_credits, link_credits=link_credits,
            gpu_credits=gpu_credits, max_payload=max_payload, red_entries=red_entries, tlb_mshrs=tlb_mshrs,
            egress_slots=egress_slots, gpu_latency=gpu_latency, tlb_timeout=tlb_timeout,
            red_timeout=red_timeout, allow_short_timeouts=allow_short_timeouts)
        self.tlb_timeout, self.red_timeout = tlb_timeout, red_timeout
        self.ports = ports
        self.flit_width = flit_width
        self.link_credits = link_credits
        self.gpu_credits = gpu_credits
        self.credits = credits
        self.resp_credits = resp_credits
        self.fill_bypass = fill_bypass
        # Build the parts now: their constructors validate the remaining parameters.
        net = dict(ports=ports, out_credits=_NET_OUT_DEPTH, flit_width=flit_width, max_payload=max_payload)
        self.reqnet = NVSwitch(credits=credits, groups=groups, isolate_static=True, **net)
        # The response network routes by dst only (multicast=False: it needs no whole packet of credits); its
        # group table is idle (2 entries: a 1-entry table has a zero-width address).
        try:
            self.respnet = NVSwitch(credits=resp_credits, groups=2, iterations=resp_iterations, multicast=False,
                                    **net)
        except ValueError as e:      # its parameters are resp_credits and resp_iterations here
            raise ValueError(f"the response network (resp_credits={resp_credits!r}, "
                             f"resp_iterations={resp_iterations!r}): {e}") from None
        self.tlbs = [AlTlb(ports=ports, groups=groups, entries=tlb_entries, mshrs=tlb_mshrs,
                           timeout=tlb_timeout) for _ in range(ports)]
        self.engines = [ReductionEngine(ports=ports, entries=red_entries, max_length=max_payload,
                                        flit_width=flit_width, timeout=red_timeout, groups=groups,
                                        defer_translation=True) for _ in range(ports)]
        if row_bytes is None:
            row_bytes = (1 << Shape.cast(data.Layout.cast(DynamicRoute)["offset"].shape).width) * (flit_width // 8)
        # Per-port blocks take their port index as a strap input (tied in _port): the N copies of each are
        # then one Verilog module (hw.emission).
        self.egress = [EgressTranslator(port=None, ports=ports, flit_width=flit_width, max_payload=max_payload,
                                        slots=egress_slots, row_bytes=row_bytes) for _ in range(ports)]
        link = vc_link_signature(flit_width)
        super().__init__({
            "rx": In(link).array(ports),
            "tx": Out(link).array(ports),
            "cfg": In(stream.Signature(switch_config_layout(ports))),
            "status": Out(status_signature(ports)),
        })

    def elaborate(self, platform):
        m = Module()
        N, W = self.ports, self.flit_width
        m.submodules.reqnet = reqnet = self.reqnet
        m.submodules.respnet = respnet = self.respnet
        self._configure(m)
        for i in range(N):
            self._port(m, i)
        st = self.status
        m.d.comb += [st.req_net.eq(reqnet.err_count), st.resp_net.eq(respnet.err_count)]
        for name, field in port_status_layout():
            for k in range(len(st.total[name].as_value()) // 32):
                bits = slice(32 * k, 32 * (k + 1))
                m.d.comb += st.total[name].as_value()[bits].eq(
                    sum(st.port[i][name].as_value()[bits] for i in range(N)))
        return m

    def _configure(self, m):
        c = self.cfg
        N = self.ports
        m.d.comb += c.ready.eq(1)
        group = c.valid & (c.payload.target == CfgTarget.GROUP)
        tlb = c.valid & (c.payload.target == CfgTarget.TLB)
        m.d.comb += [self.reqnet.cfg.valid.eq(group), self.reqnet.cfg.payload.eq(c.payload.group)]
        for i in range(N):
            e, t = self.engines[i], self.tlbs[i]
            m.d.comb += [e.cfg.valid.eq(group), e.cfg.payload.eq(c.payload.group),
                         t.cfg.valid.eq(tlb & (c.payload.all | (c.payload.port == i))),
                         t.cfg.payload.eq(c.payload.tlb)]
        bad = c.valid & ((c.payload.target.as_value() > CfgTarget.TLB.value) |
                         (tlb & ~c.payload.all & (c.payload.port >= N)))
        cfg_errors = Signal(32)
        m.d.sync += cfg_errors.eq(cfg_errors + bad)
        m.d.comb += self.status.cfg_errors.eq(cfg_errors + self.reqnet.cfg_errors)

    def _port(self, m, i):
        W, fl = self.flit_width, flit_layout(self.flit_width)
        reqnet, respnet = self.reqnet, self.respnet
        sub = m.submodules
        tlb, eng, egr = self.tlbs[i], self.engines[i], self.egress[i]
        sub[f"tlb{i}"], sub[f"engine{i}"], sub[f"egress{i}"] = tlb, eng, egr
        sub[f"fill{i}"] = fill = TlbFillBridge(port=None, ports=self.ports, flit_width=W)
        P = self.ports
        m.d.comb += [egr.port.eq(i), fill.port.eq(i)]
        connect(m, tlb.mem, fill.mem)
        connect(m, egr.tr, tlb.tr)

        # ---- from the GPU
        if self.fill_bypass:      # VC 1's fills get a FIFO of their own, split off as they arrive
            sub[f"rxl{i}"] = rxl = FillBypassReceiver(credits=self.link_credits, flit_width=W, ports=self.ports)
        else:
            sub[f"rxl{i}"] = rxl = VcReceiver(credits=(self.link_credits,) * N_VCS, flit_width=W)
        connect(m, flipped(self.rx[i]), rxl.link)
        sub[f"chk_req{i}"] = chk_req = IngressCheck(port=None, vc=VC_REQ, flit_width=W, ports=P)
        sub[f"chk_resp{i}"] = chk_resp = IngressCheck(port=None, vc=VC_RESP, flit_width=W, ports=P)
        m.d.comb += [chk_req.port.eq(i), chk_resp.port.eq(i)]
        connect(m, rxl.o[VC_REQ], chk_req.i)
        connect(m, rxl.o[VC_RESP], chk_resp.i)

        sub[f"split_req{i}"] = split_req = PacketSplit(flit_width=W, n_out=2, ports=P,
                                                       select=_is(Opcode.DYN_LD_REDUCE, Opcode.MM_LD_REDUCE))
        connect(m, chk_req.o, split_req.i)
        connect(m, split_req.o[1], eng.req)
        sub[f"into_req{i}"] = into_req = PacketMerge(flit_width=W, n_in=2)
        connect(m, split_req.o[0], into_req.i[0])
        connect(m, eng.rd, into_req.i[1])
        sub[f"send_req{i}"] = send_req = CreditSender(credits=self.credits, flit_width=W)
        connect(m, into_req.o, send_req.i)
        connect(m, send_req.link, reqnet.rx[i])

        if self.fill_bypass:      # the fills never reach chk_resp: only other responses follow it
            connect(m, rxl.fill, fill.rx)
            resp_in = chk_resp.o
        else:
            sub[f"split_resp{i}"] = split_resp = PacketSplit(flit_width=W, n_out=2, ports=P,
                                                             select=_is(Opcode.TLB_FILL_RESP))
            connect(m, chk_resp.o, split_resp.i)
            connect(m, split_resp.o[1], fill.rx)
            resp_in = split_resp.o[0]
        sub[f"into_resp{i}"] = into_resp = PacketMerge(flit_width=W, n_in=2)
        connect(m, resp_in, into_resp.i[0])
        connect(m, egr.err, into_resp.i[1])
        sub[f"send_resp{i}"] = send_resp = CreditSender(credits=self.resp_credits, flit_width=W)
        connect(m, into_resp.o, send_resp.i)
        connect(m, send_resp.link, respnet.rx[i])

        # ---- to the GPU
        sub[f"from_req{i}"] = from_req = CreditReceiver(depth=_NET_OUT_DEPTH, flit_width=W)
        connect(m, reqnet.tx[i], from_req.link)
        sub[f"split_out{i}"] = split_out = PacketSplit(flit_width=W, n_out=2, ports=P, select=_is(Opcode.ERROR))
        connect(m, from_req.o, split_out.i)
        connect(m, split_out.o[0], egr.i)
        sub[f"out_req{i}"] = out_req = PacketMerge(flit_width=W, n_in=2, priority=True)
        connect(m, fill.tx, out_req.i[0])
        connect(m, egr.o, out_req.i[1])

        sub[f"from_resp{i}"] = from_resp = CreditReceiver(depth=_NET_OUT_DEPTH, flit_width=W)
        connect(m, respnet.tx[i], from_resp.link)
        sub[f"split_red{i}"] = split_red = PacketSplit(flit_width=W, n_out=2, ports=P, select=_is(Opcode.RED_READ_RESP))
        connect(m, from_resp.o, split_red.i)
        connect(m, split_red.o[1], eng.resp)
        sub[f"out_resp{i}"] = out_resp = PacketMerge(flit_width=W, n_in=5)
        connect(m, split_red.o[0], out_resp.i[0])
        connect(m, eng.out, out_resp.i[1])
        connect(m, split_out.o[1], out_resp.i[2])
        connect(m, chk_req.err, out_resp.i[3])
        connect(m, chk_resp.err, out_resp.i[4])

        sub[f"txl{i}"] = txl = VcSender(credits=(self.gpu_credits,) * N_VCS, flit_width=W)
        connect(m, out_req.o, txl.i[VC_REQ])
        connect(m, out_resp.o, txl.i[VC_RESP])
        connect(m, txl.link, flipped(self.tx[i]))

        # ---- status
        ps = self.status.port[i]
        m.d.comb += [ps.tlb.eq(tlb.counters), ps.egress.eq(egr.counters)]
        for name in ("in_use", *ENGINE_COUNTERS):
            m.d.comb += ps.engine[name].eq(getattr(eng, name))
        ic = IngressCounter
        m.d.comb += [
            ps.ingress[ic.REFUSED_REQ].eq(chk_req.refused),
            ps.ingress[ic.REFUSED_RESP].eq(chk_resp.refused),
            ps.ingress[ic.LINK_OVERFLOWS].eq(rxl.overflows + from_req.overflows + from_resp.overflows),
            ps.ingress[ic.BAD_FILLS].eq(fill.bad),
        ]
