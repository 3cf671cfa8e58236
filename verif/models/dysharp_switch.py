"""Reference model of what the integrated DySHARP switch (:mod:`hw.switch.dysharp_switch`) must deliver.

The model is told every packet a GPU sends (:meth:`DySharpSwitchModel.inject`) and checks every packet the
switch delivers to a GPU (:meth:`DySharpSwitchModel.deliver`); :meth:`DySharpSwitchModel.finish` fails if
anything expected never came. It knows nothing of cycles; where the switch's choices are free (which
physical row a GPU's memory manager gives a token, the arrival order of a reduction's contributions)
it reads them from the GPU models (:class:`verif.models.dysharp_gpu.DySharpGpu`) when the delivery is
checked, and accepts exactly the deliveries consistent with them.

Contract, per packet a GPU ``s`` sends (the switch stamps ``src = s``):

* ``WRITE``/``READ``: delivered unchanged to ``dst``; a ``READ`` is answered by the GPU model and the
  ``READ_RESP`` is delivered unchanged to ``s``.
* ``MM_ST`` (static group ``h``): delivered unchanged to every member of ``h``.
* ``DYN_ST`` (``group``, ``mask`` M, ``index``, ``offset``): at each ``d`` in M, a ``WRITE{dst=d, src=s, tag,
  length, addr = row_d(group, index) + offset * flit_bytes}`` with the same payload, where ``row_d`` is GPU
  ``d``'s memory manager's row for the index (allocated on first touch), exactly once; nothing anywhere
  else. If d's AL-TLB or memory manager refuses (group unconfigured, ``s`` or ``d`` not a member:
  ``ISOLATION``; ``index`` >= the group's rows: ``OUT_OF_BOUNDS``; no row and no allocation:
  ``TLB_FAULT``; d never answers the fill: ``TIMEOUT``) the copy for ``d`` is dropped and ``s`` receives
  ``ERROR{dst=s, src=d, tag, code}``.
* ``DYN_LD_REDUCE``/``MM_LD_REDUCE``: one ``RED_READ{dst=d, src=s, length, etype, redop, addr}`` at each
  destination (``addr`` = ``row_d + offset * flit_bytes``, or the static ``addr``; the buffer tag in
  ``tag``/``xtag`` is the switch's), then one ``RED_RESP{dst=s, src=s, tag, length, etype, redop}`` whose
  payload is the bit-exact reduction (:func:`verif.models.reduce_ref.reduce_sequence`) of the GPUs'
  answers in their arrival order at the engine. Packets arrive whole, so that order is one permutation of
  the destinations for all flits of the result; the model accepts the result iff some permutation gives
  it (for min/max and integer add every order gives the same bits) and records it. A translation error at
  any destination answers ``ERROR{dst=s, src=s, tag, code}`` with that code; a destination that never
  answers makes it ``TIMEOUT``.
* Header errors the ingress finds (:func:`hw.packet.check_header`, static groups isolated: a ``MM_ST``
  from a non-member is ``ISOLATION``): ``ERROR{dst=s, src=s, tag, code}``.
  An ``ld_reduce`` request is checked by the requester port's engine instead
  (:func:`verif.models.reduction.engine_request_error`: a header flit marked ``poison`` is ``POISONED``, one
  without ``last`` is ``LENGTH_MISMATCH``, ``length`` 0 is ``BAD_LENGTH``, ...), with the same answer, and
  counted in that engine's ``bad_requests``.

Ordering: request-class deliveries (``WRITE``, ``MM_ST``, ``READ``, translated stores) keep their order per
(source, destination) pair; ``RED_READ`` s (made by the switch) and all responses are matched in any order.
"""

import collections
import dataclasses
import itertools

from hw.packet import OPCODES, EType, ErrorCode, Header, Opcode, Packet, RedOp, check_header

from verif.harness.scoreboard import ScoreboardError, describe_diff
from verif.models import reduce_ref as R
from verif.models.reduction import engine_request_error

__all__ = ["DySharpSwitchModel", "Reduction", "order_sensitive", "reduce_candidates"]

_NONE = ErrorCode.NONE.value


def order_sensitive(etype, op) -> bool:
    """Whether the result bits of a reduction depend on the order of its contributions."""
    return RedOp(op) == RedOp.ADD and EType(etype) in (EType.BF16, EType.FP16, EType.FP32)


def _lanes(etype, word, flit_width):
    bits = 16 if R.is16(etype) else 32
    return R.int_to_lanes(word, bits, flit_width // bits)


def reduce_flits(contribs: list[list[int]], etype, op, flit_width=128) -> list[int]:
    """Reduce per-flit words of the contributions (in the given order) into result words."""
    bits = 16 if R.is16(etype) else 32
    out = []
    for k in range(len(contribs[0])):
        lanes = [_lanes(etype, c[k], flit_width) for c in contribs]
        out.append(R.lanes_to_int(R.reduce_sequence(lanes, etype, op), bits))
    return out


def reduce_candidates(contribs: dict, etype, op, flit_width=128, limit=5040):
    """Yield (order, result words) for every arrival order of ``contribs`` (dst -> words) that can
    differ (one order when the reduction does not depend on it)."""
    keys = sorted(contribs)
    if not order_sensitive(etype, op):
        yield tuple(keys), reduce_flits([contribs[k] for k in keys], etype, op, flit_width)
        return
    seen = set()
    for n, order in enumerate(itertools.permutations(keys)):
        if n >= limit:
            raise ValueError(f"{len(keys)} contributors: too many arrival orders to try (keep order-sensitive "
                             f"reductions to at most 7 destinations)")
        sig = tuple(tuple(contribs[k]) for k in order)
        if sig in seen:
            continue
        seen.add(sig)
        yield order, reduce_flits([contribs[k] for k in order], etype, op, flit_width)


@dataclasses.dataclass
class Reduction:
    src: int
    tag: int
    static: bool
    dests: list            # destination ports (mask or static group members)
    group: int
    index: int
    offset: int
    addr: int              # static: the address at every member
    length: int
    etype: int
    op: int
    code: int = _NONE      # expected error (NONE: a RED_RESP)
    readers: set = dataclasses.field(default_factory=set)   # destinations that get a RED_READ
    rtags: dict = dataclasses.field(default_factory=dict)   # dst -> buffer tag seen on its RED_READ
    order: tuple | None = None                              # arrival order that explains the result
    done: bool = False
    failed: int = 0        # destinations whose translation fails


class _Exact:
    def __init__(self, packet: Packet):
        self.packet = packet

    def check(self, model, port, pkt):
        return None if pkt == self.packet else describe_diff(self.packet, pkt)

    def __repr__(self):
        return f"{self.packet.header!r} + {len(self.packet.payload)} flits"


class _Store:
    """A ``DYN_ST`` copy for ``dst``: the translated ``WRITE``, its address read from the GPU's layout."""

    def __init__(self, dst: int, packet: Packet):
        self.dst = dst
        self.packet = packet

    def expected(self, model):
        h = self.packet.header
        row = model.gpus[self.dst].row(h.group, h.index)
        if row is None:
            return None
        return Packet(Header(opcode=Opcode.WRITE, dst=self.dst, src=h.src, tag=h.tag, length=h.length,
                             addr=(row + h.offset * model.flit_bytes) & ((1 << 48) - 1)), list(self.packet.payload))

    def check(self, model, port, pkt):
        exp = self.expected(model)
        if exp is None:
            h = self.packet.header
            return f"GPU {self.dst} has no row for group {h.group} index {h.index}: the write cannot be right"
        return None if pkt == exp else describe_diff(exp, pkt)

    def __repr__(self):
        return f"translated copy for {self.dst} of {self.packet.header!r}"


class _RedRead:
    def __init__(self, red: Reduction, dst: int):
        self.red = red
        self.dst = dst

    def expected_addr(self, model):
        r = self.red
        if r.static:
            return r.addr
        row = model.gpus[self.dst].row(r.group, r.index)
        return None if row is None else (row + r.offset * model.flit_bytes) & ((1 << 48) - 1)

    def check(self, model, port, pkt):
        r = self.red
        h = pkt.header
        addr = self.expected_addr(model)
        if addr is None:
            return f"GPU {self.dst} has no row for group {r.group} index {r.index}"
        exp = Header(opcode=Opcode.RED_READ, dst=self.dst, src=r.src, tag=h.tag, xtag=h.xtag, length=r.length,
                     etype=r.etype, redop=r.op, addr=addr)
        if pkt.payload:
            return f"a RED_READ carries no payload, got {len(pkt.payload)} flits"
        return None if h == exp else describe_diff(exp, h)

    def __repr__(self):
        r = self.red
        return f"RED_READ at {self.dst} for ld_reduce src={r.src} tag={r.tag}"


class _Result:
    def __init__(self, red: Reduction):
        self.red = red

    def check(self, model, port, pkt):
        r = self.red
        h = pkt.header
        if r.code != _NONE:
            exp = Packet(Header(opcode=Opcode.ERROR, src=r.src, dst=r.src, tag=r.tag, code=r.code))
            return None if pkt == exp else describe_diff(exp, pkt)
        if h.opcode != Opcode.RED_RESP.value or h.tag != r.tag:
            return f"expected RED_RESP tag {r.tag}, observed {h!r}"
        exp_h = Header(opcode=Opcode.RED_RESP, src=r.src, dst=r.src, tag=r.tag, length=r.length, etype=r.etype,
                       redop=r.op)
        if h != exp_h:
            return describe_diff(exp_h, h)
        if len(pkt.payload) != r.length:
            return f"RED_RESP with {len(pkt.payload)} flits, expected {r.length}"
        missing = [d for d in r.dests if d not in r.rtags]
        if missing:
            return f"result came before the RED_READ of destination(s) {missing} was seen"
        contribs = {}
        for d in r.dests:
            addr = _RedRead(r, d).expected_addr(model)
            contribs[d] = model.gpus[d].data_at(addr, r.length)
        for order, words in reduce_candidates(contribs, r.etype, r.op, model.flit_width):
            if words == list(pkt.payload):
                r.order = order
                return None
        words = next(reduce_candidates(contribs, r.etype, r.op, model.flit_width))[1]
        k = next(i for i, (a, b) in enumerate(zip(words, pkt.payload)) if a != b)
        return (f"RED_RESP payload matches no arrival order of {sorted(contribs)} "
                f"({EType(r.etype).name} {RedOp(r.op).name}); flit {k}: e.g. expected {words[k]:#x}, "
                f"observed {pkt.payload[k]:#x}")

    def __repr__(self):
        r = self.red
        what = "RED_RESP" if r.code == _NONE else f"ERROR {ErrorCode(r.code).name}"
        return f"{what} for ld_reduce src={r.src} tag={r.tag} dests={r.dests}"


class DySharpSwitchModel:
    """See the module docstring. ``gpus``: the :class:`~verif.models.dysharp_gpu.DySharpGpu` per port."""

    def __init__(self, ports: int, gpus, *, max_payload: int = 16, flit_width: int = 128):
        self.n = ports
        self.gpus = gpus
        self.max_payload = max_payload
        self.flit_width = flit_width
        self.flit_bytes = flit_width // 8
        self.static: dict[int, int] = {}
        self.tlb = [dict() for _ in range(ports)]      # port -> group -> (mask, rows)
        self.cached: set = set()                          # (dst, group, index) translated successfully
        self.ordered = collections.defaultdict(collections.deque)    # (src, dst) -> request deliveries
        self.red_reads = collections.defaultdict(list)               # (src, dst) -> [_RedRead]
        self.responses = collections.defaultdict(list)               # requester -> [_Exact | _Result]
        self.reductions: list[Reduction] = []
        self.matched = collections.Counter()
        self.errors = collections.Counter()       # ErrorCode -> responses expected
        self.stale_uncertain = False              # contributions may arrive after an abort
        self.stale_expected = 0                   # stale contribution flits the engines must count
        self.writes = 0
        # What the status counters must show, per port.
        self.xlate = [collections.Counter() for _ in range(ports)]    # translation requests by result code
        self.passed = collections.Counter()       # port -> packets its egress passes unchanged
        self.bad_requests = collections.Counter() # port -> ld_reduce requests its engine answered ERROR
        self.net_errors = collections.Counter()   # ErrorCode -> header errors the request network answered

    # ---- configuration (mirrors what the testbench writes to the switch and the GPUs)
    def configure_static(self, handle: int, mask: int) -> None:
        if mask:
            self.static[handle] = mask
        else:
            self.static.pop(handle, None)

    def configure_tlb(self, port, group: int, mask: int, rows: int) -> None:
        """``port`` None: every port."""
        for p in range(self.n) if port is None else [port]:
            self.tlb[p][group] = (mask, rows)
            self.cached = {k for k in self.cached if not (k[0] == p and k[1] == group)}

    # ---- predictions
    def translation(self, dst: int, group: int, index: int, src: int) -> int:
        """The error code (NONE on success) translating (group, index) for ``src`` at ``dst``'s port."""
        mask, rows = self.tlb[dst].get(group, (0, 0))
        if not mask or not (mask >> src) & 1 or not (mask >> dst) & 1:
            return ErrorCode.ISOLATION.value
        if index >= rows:
            return ErrorCode.OUT_OF_BOUNDS.value
        if (dst, group, index) in self.cached:
            return _NONE
        gpu = self.gpus[dst]
        if gpu.silent_tlb_fill:
            return ErrorCode.TIMEOUT.value
        code, _, _ = gpu.mm._decide(group, index, src)
        if code == _NONE:
            self.cached.add((dst, group, index))
        return code

    def members(self, mask: int) -> list[int]:
        return [p for p in range(self.n) if mask >> p & 1]

    # ---- stimulus
    def inject(self, port: int, packet: Packet, *, poison: bool = False, last: bool = True) -> Packet:
        """Record what the switch must do with ``packet`` sent by GPU ``port``; returns it as the switch sees
        it (``src`` stamped). ``poison``/``last``: the header flit arrives marked ``poison`` / without
        ``last`` (more flits follow it); the model predicts such framing for ``ld_reduce`` requests only."""
        h = dataclasses.replace(packet.header)
        h.src = port
        pkt = Packet(h, list(packet.payload))
        if h.opcode in (Opcode.DYN_LD_REDUCE.value, Opcode.MM_LD_REDUCE.value):
            # The requester port's engine checks it (verif.models.reduction.engine_request_error).
            code = engine_request_error(h, ports=self.n, max_length=self.max_payload, groups=self.static,
                                        last=last, poison=poison)
            self.bad_requests[port] += code != ErrorCode.NONE
        elif poison or not last:
            raise ValueError(f"the model predicts a poisoned or misframed ld_reduce request only, not {h!r} "
                             f"(poison={poison}, last={last})")
        else:
            code = check_header(h, ports=self.n, max_payload=self.max_payload, groups=self.static, src=port)
            self.net_errors[code] += code != ErrorCode.NONE      # the request network answers it
        if code != ErrorCode.NONE:
            self._respond(port, Packet(Header(opcode=Opcode.ERROR, src=port, dst=port, tag=h.tag, code=code)))
            return pkt
        op = Opcode(h.opcode)
        if op in (Opcode.WRITE, Opcode.READ):
            self.ordered[(port, h.dst)].append(_Exact(pkt))
            self.passed[h.dst] += 1
            if op == Opcode.READ:
                data = self.gpus[h.dst].data_at(h.addr, h.length)
                self._respond(port, Packet(Header(opcode=Opcode.READ_RESP, src=h.dst, dst=port, tag=h.tag,
                                                  xtag=h.xtag, length=h.length), data))
        elif op == Opcode.MM_ST:
            for d in self.members(self.static[h.group]):
                self.ordered[(port, d)].append(_Exact(pkt))
                self.passed[d] += 1
        elif op == Opcode.DYN_ST:
            for d in self.members(h.mask):
                code = self.translation(d, h.group, h.index, port)
                self.xlate[d][code] += 1
                if code == _NONE:
                    self.ordered[(port, d)].append(_Store(d, pkt))
                else:
                    self._respond(port, Packet(Header(opcode=Opcode.ERROR, src=d, dst=port, tag=h.tag, code=code)))
        elif op in (Opcode.DYN_LD_REDUCE, Opcode.MM_LD_REDUCE):
            self._reduction(port, h)
        else:
            raise ValueError(f"the model does not know what a GPU sending {h!r} means")
        return pkt

    def _respond(self, port, packet):
        self.responses[port].append(_Exact(packet))
        if packet.header.opcode == Opcode.ERROR.value:
            self.errors[ErrorCode(packet.header.code)] += 1

    def _reduction(self, port, h):
        static = h.opcode == Opcode.MM_LD_REDUCE.value
        dests = self.members(self.static[h.group] if static else h.mask)
        r = Reduction(port, h.tag, static, dests, h.group, 0 if static else h.index, 0 if static else h.offset,
                      h.addr if static else 0, h.length, h.etype, h.redop)
        codes = {}
        for d in dests:
            if static:
                codes[d] = _NONE
                self.passed[d] += 1
            else:
                codes[d] = self.translation(d, h.group, h.index, port)
                self.xlate[d][codes[d]] += 1
        r.readers = {d for d in dests if codes[d] == _NONE}
        failing = {c for c in codes.values() if c != _NONE}
        if len(failing) > 1:
            raise ValueError(f"ld_reduce {h!r}: destinations fail with different codes {failing}; which one "
                             f"aborts first is timing: keep one failure kind per request")
        r.failed = len([c for c in codes.values() if c != _NONE])
        if failing:
            r.code = failing.pop()
            if r.readers or r.failed > 1:
                self.stale_uncertain = True
        elif any(self.gpus[d].silent_red_read or self.gpus[d].red_read_late for d in dests):
            r.code = ErrorCode.TIMEOUT.value
            # Each late answer reaches a freed entry: one stale count per flit.
            self.stale_expected += r.length * sum(1 for d in dests if self.gpus[d].red_read_late)
        for d in r.readers:
            self.red_reads[(port, d)].append(_RedRead(r, d))
        self.reductions.append(r)
        self.responses[port].append(_Result(r))
        if r.code != _NONE:
            self.errors[ErrorCode(r.code)] += 1

    # ---- checking
    def deliver(self, port: int, vc: int, pkt: Packet | None, cycle: int) -> None:
        """Check one packet the switch delivered to GPU ``port`` (``pkt`` None: poisoned)."""
        where = f"GPU {port} at cycle {cycle}"
        if pkt is None:
            raise ScoreboardError(f"{where}: a poisoned packet was delivered (no bad framing was sent)")
        h = pkt.header
        op = h.opcode
        if op == Opcode.TLB_FILL.value:
            return                                   # the GPU model answers and checks it
        if op in (Opcode.WRITE.value, Opcode.MM_ST.value, Opcode.READ.value):
            q = self.ordered.get((h.src, port))
            if not q:
                raise ScoreboardError(f"{where}: unexpected {h!r} + {len(pkt.payload)} flits (nothing more "
                                      f"was expected from {h.src} here)")
            diff = q[0].check(self, port, pkt)
            if diff:
                raise ScoreboardError(f"{where}: delivery #{self.matched[(h.src, port)]} from {h.src} "
                                      f"mismatch: {diff}\n  expected {q[0]!r}\n  observed {h!r}")
            q.popleft()
            self.matched[(h.src, port)] += 1
            if op != Opcode.READ.value:
                self.writes += 1
            return
        if op == Opcode.RED_READ.value:
            cands = self.red_reads.get((h.src, port), [])
            diffs = []
            for k, c in enumerate(cands):
                diff = c.check(self, port, pkt)
                if diff is None:
                    c.red.rtags[port] = (h.xtag << 8) | h.tag
                    del cands[k]
                    self.matched["red_read"] += 1
                    return
                diffs.append(diff)
            raise ScoreboardError(f"{where}: unexpected {h!r}; {len(cands)} RED_READ(s) from {h.src} expected "
                                  f"here" + (f", e.g. {cands[0]!r}: {diffs[0]}" if cands else ""))
        if OPCODES.get(Opcode(op)) is not None and OPCODES[Opcode(op)].vclass == "resp" and \
                op not in (Opcode.RED_READ_RESP.value, Opcode.TLB_FILL_RESP.value):
            cands = self.responses.get(port, [])
            diffs = []
            for k, c in enumerate(cands):
                diff = c.check(self, port, pkt)
                if diff is None:
                    if isinstance(c, _Result):
                        c.red.done = True
                    del cands[k]
                    self.matched["response"] += 1
                    return
                if (isinstance(c, _Result) and c.red.tag == h.tag) or \
                        (isinstance(c, _Exact) and c.packet.header.tag == h.tag and
                         c.packet.header.opcode == op and c.packet.header.src == h.src):
                    diffs.append(f"{c!r}: {diff}")
            raise ScoreboardError(f"{where}: unexpected response {h!r} + {len(pkt.payload)} flits; "
                                  f"{len(cands)} response(s) expected here"
                                  + (f"; same tag: {diffs[0]}" if diffs else
                                     (f", e.g. {cands[0]!r}" if cands else "")))
        raise ScoreboardError(f"{where}: {h!r} must never reach a GPU")

    @property
    def outstanding(self) -> int:
        return (sum(len(q) for q in self.ordered.values()) + sum(len(v) for v in self.red_reads.values())
                + sum(len(v) for v in self.responses.values()))

    def describe_outstanding(self, limit: int = 8) -> str:
        lines = []
        for k, q in self.ordered.items():
            if q:
                lines.append(f"  {k}: {len(q)} deliveries, first {q[0]!r}")
        for k, v in self.red_reads.items():
            if v:
                lines.append(f"  {k}: {len(v)} RED_READs, first {v[0]!r}")
        for k, v in self.responses.items():
            if v:
                lines.append(f"  responses to {k}: {len(v)}, first {v[0]!r}")
        return "\n".join(lines[:limit])

    def finish(self) -> None:
        if self.outstanding:
            raise ScoreboardError(f"{self.outstanding} expected deliveries never came:\n"
                                  + self.describe_outstanding())

