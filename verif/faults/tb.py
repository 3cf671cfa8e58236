"""cocotb scenarios of the fault campaign on the integrated DySHARP switch (:mod:`verif.faults.campaign`).

One test, :func:`test_fault`: setting ``fault`` names the class (a key of :data:`SCENARIOS`), ``out`` the
JSON file the figures go to. Every scenario runs the switch testbench's environment
(:class:`verif.tb.dysharp_switch.DySharpEnv`: link agents, GPU models, the reference model) with good
mixed traffic on every port and injects its faults through the agents' and the GPU model's fault knobs;
the reference model checks every good delivery exactly, and :class:`FaultEnv` takes the deliveries and
answers that belong to injected faults out of the model's stream and counts them.

Figures per run (the campaign judges them against the class's guarantee): ``injected``, ``detected``,
``recovered``, ``lost`` (good data never delivered and never answered with an error, plus corrupted data
committed), ``hangs`` (a drain that did not finish within its cycle budget), ``checks`` (named facts,
each true or false) and ``notes``. The test itself fails only when the scenario could not run.
"""

import collections
import json
import traceback
from pathlib import Path

import cocotb

from hw.packet import N_VCS, EType, ErrorCode, Flit, Header, Opcode, Packet, RedOp

from verif.harness import tbenv
from verif.tb.dysharp_switch import G_DISP, INDEX_SPAN, ROWS, DySharpEnv, check_counters, tlb_counters

REGION_FAULT = 5 << 40      # corrupted writes aim here: no good packet ever writes it
_E = ErrorCode


class Hang(AssertionError):
    """A drain did not finish within its cycle budget."""


class FaultEnv(DySharpEnv):
    """The switch testbench's environment plus a ledger of injected faults.

    ``fault_tags[src]``: tags of the corrupted request packets ``src`` sent (their answers and poisoned
    deliveries are counted here, not by the model); ``poisoned_seen``/``fault_errors``: what came back.
    ``claims``: callbacks ``(port, vc, pkt, flits) -> bool`` that take a delivery (a poisoned one has
    ``pkt`` None) out of the model's stream.
    """

    def __init__(self, dut, **kw):
        super().__init__(dut, **kw)
        self.fault_tags = collections.defaultdict(set)
        self.poisoned_seen = collections.Counter()       # port -> poisoned deliveries of injected faults
        self.fault_errors = collections.Counter()        # ErrorCode -> ERRORs answering injected faults
        self.claims = []
        self.after = []           # callbacks () run after each delivery the model checked
        self.failure = None
        for g in self.gpus:
            g.on_delivery = self._deliver_safe
        sabotage = self.s.get("sabotage_fault")
        if sabotage == "commit_poison":
            # Test the campaign: GPUs that ignore poison commit corrupted packets; the run must fail.
            for k in self.sinks:
                k.on_packet = lambda v, flits, c, f=k.on_packet: f(v, [Flit(x.data, x.last, False) for x in flits], c)
        elif sabotage is not None:
            raise ValueError(f"unknown sabotage_fault {sabotage!r}; valid: commit_poison")

    def _deliver(self, port, vc, pkt, flits, cycle):
        for claim in self.claims:
            if claim(port, vc, pkt, flits):
                return
        h = Header.decode(flits[0].data)
        if pkt is not None and h.opcode == Opcode.WRITE.value and self._is_fault(h):
            return      # a corrupted write committed: committed_faults() counts it
        if pkt is None and h.tag in self.fault_tags[h.src] and h.opcode in (Opcode.WRITE.value,):
            self.poisoned_seen[port] += 1
            return
        if pkt is not None and h.opcode == Opcode.ERROR.value and h.dst == port and \
                h.tag in self.fault_tags[port] and h.code == _E.LENGTH_MISMATCH.value:
            self.fault_errors[_E(h.code)] += 1
            return
        self.model.deliver(port, vc, pkt, cycle)
        for f in self.after:
            f()

    def _deliver_safe(self, port, vc, pkt, flits, cycle):
        # A scoreboard error inside the cycler would end the test before its figures are written: keep the
        # first one, end the drain (quiet), and raise it from settle().
        if self.failure is not None:
            return
        try:
            self._deliver(port, vc, pkt, flits, cycle)
        except AssertionError as e:
            self.failure = e

    def quiet(self) -> bool:
        return self.failure is not None or super().quiet()

    def fault_write(self, src, dst, length, corrupt):
        """Send a WRITE from ``src`` to ``dst`` at :data:`REGION_FAULT`, its flits rewritten by
        ``corrupt(flits) -> flits``, around the model (it must never be committed)."""
        tag = self.tag(src)
        if tag in self.fault_tags[src]:
            raise ValueError(f"source {src} reused fault tag {tag}: send fewer packets per run")
        self.fault_tags[src].add(tag)
        addr = REGION_FAULT + self.rng.randrange(1 << 16) * 16
        pkt = Packet(Header(opcode=Opcode.WRITE, src=src, tag=tag, dst=dst, length=length, addr=addr),
                     self.payload(length))
        self.sources[src].send(corrupt(pkt.flits(self.w)), vc=0)
        return tag

    def fault_dyn_st(self, src, mask, length, corrupt):
        """The same for a ``dymultimem.st`` to ``mask`` (group ``G_DISP``, an index no good packet uses): it
        crosses the request network's multicast and every destination's egress translator."""
        tag = self.tag(src)
        if tag in self.fault_tags[src]:
            raise ValueError(f"source {src} reused fault tag {tag}: send fewer packets per run")
        self.fault_tags[src].add(tag)
        index = src * INDEX_SPAN + INDEX_SPAN - 1 - self.rng.randrange(64)
        pkt = Packet(Header(opcode=Opcode.DYN_ST, src=src, tag=tag, length=length, group=G_DISP, mask=mask,
                            index=index, offset=0), self.payload(length))
        self.sources[src].send(corrupt(pkt.flits(self.w)), vc=0)
        return tag

    def _is_fault(self, h) -> bool:
        return REGION_FAULT <= h.addr < 2 * REGION_FAULT or h.tag in self.fault_tags[h.src]

    def committed_faults(self) -> int:
        """Writes of injected faults (at :data:`REGION_FAULT`, or with a fault's source and tag) that any GPU
        committed."""
        return sum(1 for g in self.gpus for h, _, _ in g.writes if self._is_fault(h))

    async def settle(self, budget=None):
        """Drain with a cycle budget; a budget overrun is a :class:`Hang`."""
        try:
            await self.drain(timeout=budget)
        except AssertionError as e:
            if self.failure is not None:
                raise self.failure from None
            if str(e).startswith("timeout:"):
                raise Hang(str(e)) from None
            raise
        if self.failure is not None:
            raise self.failure

    def reduction_for(self, requester, responder, tag16):
        """The model's in-flight reduction whose RED_READ at ``responder`` carried buffer tag ``tag16``."""
        for r in reversed(self.model.reductions):
            if r.src == requester and r.rtags.get(responder) == tag16 and not r.done:
                return r
        return None

    def expect_error(self, r, code):
        """Reduction ``r`` must now end with ``code`` (if it was to succeed)."""
        if r.code == 0:
            r.code = code.value
            self.model.errors[code] += 1
        self.model.stale_uncertain = True


# ---- flit corruptions (the link's view: a CRC failure marks poison; framing that disagrees with length)

def poison(rng, width=128):
    """One random bit of one random flit flipped, and that flit marked ``poison``."""
    def corrupt(flits):
        k = rng.randrange(len(flits))
        out = list(flits)
        f = out[k]
        # The header keeps its bits (the ledger names the packet by its tag); payload flits get one flipped.
        out[k] = Flit(f.data ^ (1 << rng.randrange(width)) if k else f.data, f.last, True)
        return out
    return corrupt


def truncate(flits):
    """The last flit lost: the one before it carries ``last`` (``length`` now claims one flit too many)."""
    out = list(flits[:-1])
    out[-1] = Flit(out[-1].data, True, out[-1].poison)
    return out


def extend(rng):
    def corrupt(flits):
        """One flit too many: a random flit inserted before ``last``."""
        out = [Flit(f.data, False, f.poison) for f in flits]
        out.append(Flit(rng.getrandbits(128), True, False))
        return out
    return corrupt


# ---- scenarios ------------------------------------------------------------------------------------------

def _good_round(env, skip=()):
    for src in range(env.n):
        if src not in skip:
            env.mixed(src)


def _link_checks(env, m):
    st = env.status()
    from hw.switch.dysharp_switch import IngressCounter
    ovf = sum(st[f"port.{d}.ingress.{IngressCounter.LINK_OVERFLOWS.value}"] for d in range(env.n))
    m["checks"]["no link overflow counted"] = ovf == 0
    m["checks"]["every GPU link holds all its credits again"] = all(
        s.credits == [env.p["link_credits"]] * N_VCS for s in env.sources)
    m["checks"]["every reduction answered"] = all(r.done for r in env.model.reductions)
    m["checks"]["every reduction entry freed"] = st["total.engine.in_use"] == 0
    return st


COUNTERS_CHECK = "every switch counter as the model predicts, plus exactly the injected faults"


def _counters(env, m, **kw):
    """The end-of-run counter check (:func:`verif.tb.dysharp_switch.check_counters`): every counter of every
    port equal to the model's count for the good traffic plus the faults the scenario injected (``extra``:
    {status field: count}); ``stale``/``duplicates`` as there. Only the error counters (and ``in_use``):
    the injected packets bypass the model, so its traffic counts (egress, completions) do not hold. A check
    of the run, its problems in the notes."""
    try:
        check_counters(env, errors_only=True, **kw)
        m["checks"][COUNTERS_CHECK] = True
    except AssertionError as e:
        m["checks"][COUNTERS_CHECK] = False
        m["notes"].append(str(e)[:3000])


async def _fault_rounds(env, s, inject) -> int:
    """``rounds`` rounds of good traffic, each followed by ``inject(src)`` at every GPU (it returns how many
    faulty deliveries it made), then settle; the number injected."""
    await env.setup()
    inj = 0
    for _ in range(s.get("rounds", 6)):
        _good_round(env)
        for src in range(env.n):
            inj += inject(src)
    await env.settle()
    return inj


async def sc_poison_request(dut, env, s, m):
    """Corrupted WRITEs and dymultimem stores (one bit flipped on one flit, that flit ``poison``) among good
    traffic; a store counts once per destination."""
    rng = env.rng

    def inject(src):
        env.fault_write(src, rng.randrange(env.n), rng.randint(0, env.max_payload), poison(rng, env.w))
        mask = env.random_mask(src)
        env.fault_dyn_st(src, mask, rng.randint(1, env.max_payload), poison(rng, env.w))
        return 1 + bin(mask).count("1")      # the WRITE, and one store copy per destination
    inj = await _fault_rounds(env, s, inject)
    st = _link_checks(env, m)
    committed = env.committed_faults()
    seen = sum(env.poisoned_seen.values())
    m.update(injected=inj, detected=seen + sum(env.fault_errors.values()), lost=committed)
    m["recovered"] = inj if m["checks"]["every GPU link holds all its credits again"] else 0
    m["checks"]["no corrupted write committed"] = committed == 0
    m["checks"]["every corrupted packet discarded by its receiver or answered"] = m["detected"] == inj
    m["notes"].append(f"poisoned deliveries {seen}, ERRORs {dict(env.fault_errors)}, committed {committed}, "
                      f"req_net errors {[st[f'req_net.{k}'] for k in range(16) if st[f'req_net.{k}']]}")
    _counters(env, m)


async def sc_framing_request(dut, env, s, m):
    """WRITEs whose ``last`` disagrees with ``length`` (one flit short, one flit long) among good traffic."""
    rng = env.rng

    def inject(src):
        corrupt = truncate if rng.random() < 0.5 else extend(rng)
        env.fault_write(src, rng.randrange(env.n), rng.randint(1, env.max_payload), corrupt)
        return 1
    inj = await _fault_rounds(env, s, inject)
    st = _link_checks(env, m)
    committed = env.committed_faults()
    answered = env.fault_errors[_E.LENGTH_MISMATCH]
    m.update(injected=inj, detected=answered, lost=committed)
    m["recovered"] = inj if m["checks"]["every GPU link holds all its credits again"] else 0
    m["checks"]["no misframed write committed"] = committed == 0
    m["checks"]["every misframed packet answered LENGTH_MISMATCH"] = answered == inj
    m["checks"]["LENGTH_MISMATCH counted once per packet"] = st[f"req_net.{_E.LENGTH_MISMATCH.value}"] == inj
    m["notes"].append(f"poisoned deliveries {sum(env.poisoned_seen.values())}, committed {committed}")
    _counters(env, m, extra={f"req_net.{_E.LENGTH_MISMATCH.value}": inj})


async def sc_malformed_ld_reduce(dut, env, s, m):
    """ld_reduce requests (dymultimem and static multimem in turn) whose header flit is marked poison (a
    link CRC failure, the header's bits kept) or that a flit follows (misframed), among good traffic; the
    model expects each one's ERROR and no RED_READ for it."""
    answers = collections.Counter()      # ErrorCode -> ERRORs the GPUs got for malformed requests
    sent = set()                          # (src, tag) of the malformed requests

    def peek(port, vc, pkt, flits):
        h = Header.decode(flits[0].data)
        if pkt is not None and h.opcode == Opcode.ERROR.value and (port, h.tag) in sent:
            answers[_E(h.code)] += 1
        return False      # the model checks it too
    env.claims.append(peek)
    k = {"n": 0}

    def inject(src):
        how = ("poison", "long")[k["n"] % 2]
        sent.add((src, env.tags[src] & 0xFF))
        env.bad_ld_reduce(src, how, static=bool(k["n"] // 2 % 2))
        k["n"] += 1
        return 1
    inj = await _fault_rounds(env, s, inject)
    st = _link_checks(env, m)
    refused = sum(st[f"port.{d}.engine.bad_requests"] for d in range(env.n))
    want = {_E.POISONED: (inj + 1) // 2, _E.LENGTH_MISMATCH: inj // 2}
    m.update(injected=inj, detected=sum(answers.values()), lost=0)
    m["recovered"] = m["detected"] if m["checks"]["every reduction entry freed"] else 0
    m["checks"]["each poisoned request answered POISONED, each misframed one LENGTH_MISMATCH"] = answers == want
    m["checks"]["the engines counted each in bad_requests"] = refused == inj
    m["notes"].append(f"answers {{{', '.join(f'{c.name}: {n}' for c, n in answers.items())}}}; engines' "
                      f"bad_requests {refused}")
    _counters(env, m)


def _response_faults(env, gpu, corrupt, m, *, every=2, responder_errors=False):
    """GPU ``gpu`` answers every ``every``-th RED_READ with ``corrupt(flits)``; the reduction it feeds must
    end in ERROR LENGTH_MISMATCH. With ``responder_errors`` (framing) the response network also answers
    the responder with ERROR LENGTH_MISMATCH; ``gpu``'s own reductions are then left uncorrupted, so that
    the two ERRORs it could receive are never confused."""
    hit = collections.Counter()
    faulty = {}       # (requester, tag16) -> reduction

    def hook(p):
        h = p.header
        if h.opcode != Opcode.RED_READ_RESP.value:
            return [p]
        hit["k"] += 1
        if hit["k"] % every:
            return [p]
        r = env.reduction_for(h.dst, gpu, (h.xtag << 8) | h.tag)
        if r is None or (responder_errors and h.dst == gpu):
            return [p]
        hit["n"] += 1
        faulty[id(r)] = r
        flits = corrupt(p.flits(env.w))
        # A contribution cut down to its header reaches the engine as a header-only answer without a code
        # (poisoned by the response network): LENGTH_MISMATCH too, at once.
        code = _E.LENGTH_MISMATCH
        hit["cut to the header" if len(flits) == 1 else "payload"] += 1
        env.expect_error(r, code)
        return [flits]
    env.gpus[gpu].answer_hook = hook
    got = collections.Counter()

    def claim(port, vc, pkt, flits):
        h = Header.decode(flits[0].data)
        if responder_errors and pkt is not None and port == gpu and h.opcode == Opcode.ERROR.value and \
                h.code == _E.LENGTH_MISMATCH.value:
            got["responder"] += 1     # the response network answering the misframed packet
            return True
        if pkt is not None and h.opcode == Opcode.RED_RESP.value:
            for r in faulty.values():
                if r.src == port and r.tag == h.tag and not r.done:
                    got["committed"] += 1          # a corrupted contribution made it into a result
                    r.done = True
                    env.model.responses[port] = [c for c in env.model.responses[port]
                                                 if getattr(c, "red", None) is not r]
                    return True
        return False
    env.claims.append(claim)
    return hit, faulty, got


async def _sc_response(dut, env, s, m, corrupt_of, responder_errors=False):
    await env.setup()
    f = s.get("gpu", 1)
    hit, faulty, got = _response_faults(env, f, corrupt_of(env.rng), m, responder_errors=responder_errors)
    everyone = (1 << env.n) - 1
    for r in range(s.get("rounds", 6)):
        _good_round(env)
        for src in range(env.n):
            env.ld_reduce(src, mask=everyone, etype=EType.S32, op=RedOp.ADD)
    m["injected"] = hit["n"]
    await env.settle()
    _link_checks(env, m)
    ended = sum(1 for r in faulty.values() if r.done and not got["committed"])
    m.update(injected=hit["n"], detected=ended, lost=got["committed"])
    m["recovered"] = ended
    m["checks"]["no corrupted contribution in a result"] = got["committed"] == 0
    m["checks"]["every reduction fed a bad contribution answered ERROR"] = ended == hit["n"] > 0
    m["notes"].append(f"reductions ended LENGTH_MISMATCH: {hit['payload']} with a bad payload flit, "
                      f"{hit['cut to the header']} with the contribution cut to its header")
    # Each corrupted contribution aborts its reduction once, in the requester port's engine (the others'
    # contributions then arriving are stale: timing-dependent, not checked).
    aborts = collections.Counter(r.src for r in faulty.values())
    extra = {f"port.{p}.engine.aborts": n for p, n in aborts.items()}
    if responder_errors:     # the response network answers each misframed packet LENGTH_MISMATCH
        extra[f"resp_net.{_E.LENGTH_MISMATCH.value}"] = got["responder"]
    _counters(env, m, extra=extra, stale=None)
    return got


async def sc_poison_response(dut, env, s, m):
    """A GPU's RED_READ_RESP contributions corrupted on the link (a flipped bit, the flit ``poison``)."""
    def corrupt_of(rng):
        def c(flits):
            k = rng.randrange(1, len(flits))
            out = list(flits)
            out[k] = Flit(out[k].data ^ (1 << rng.randrange(128)), out[k].last, True)
            return out
        return c
    await _sc_response(dut, env, s, m, corrupt_of)


async def sc_framing_response(dut, env, s, m):
    """A GPU's RED_READ_RESP contributions misframed (one flit short or long)."""
    mode = s.get("framing", "both")

    def corrupt_of(rng):
        ext = extend(rng)
        short = {"both": 0.5, "truncate": 1.0, "extend": 0.0}[mode]
        return lambda flits: truncate(flits) if rng.random() < short else ext(flits)
    got = await _sc_response(dut, env, s, m, corrupt_of, responder_errors=True)
    m["checks"]["the responder is answered LENGTH_MISMATCH"] = got["responder"] == m["injected"]


class _Closed:
    """A gate that never opens (a receiver that stops returning credits)."""

    def open(self):
        return False


async def _credit_run(env, s, m, *, link, kind, measure=None):
    """Drop or duplicate credit returns on every port's ``link`` (``up``: the switch's returns to the GPU's
    sender; ``down``: the GPU's returns to the switch's sender), ``per_port`` per VC, spread over the run.
    ``measure(env)`` (if given) runs first, before any fault, into ``m["rate_before"]``."""
    await env.setup()
    if measure is not None:
        m["rate_before"] = await measure(env)
    per = s.get("per_port", 3)
    done = collections.Counter()
    rng = env.rng
    p_fault = s.get("p_fault", 0.05)

    def make(port):
        def filt(v, n, cycle):
            if done[(port, v)] >= per or rng.random() > p_fault:
                return n
            if kind == "drop":
                done[(port, v)] += 1
                return n - 1
            if n < 3:
                done[(port, v)] += 1
                return n + 1
            return n
        return filt
    agents = env.sources if link == "up" else env.sinks
    for p, a in enumerate(agents):
        a.credit_filter = make(p)
    rounds = s.get("rounds", 12)
    for r in range(rounds):
        _good_round(env)
    await env.settle()
    while sum(done.values()) < per * N_VCS * env.n and rounds < s.get("max_rounds", 60):
        for _ in range(4):
            _good_round(env)
        rounds += 4
        await env.settle()
    for a in agents:
        a.credit_filter = None
    m["injected"] = sum(done.values())
    m["notes"].append(f"rounds {rounds}; faults per (port, vc): {dict(done)}")
    return done


async def _measure_switch_credits(env, port, vc=0, burst=40):
    """The credits the switch's sender on ``tx[port]`` holds for ``vc``, measured: the GPU stops returning
    credits, other GPUs send ``burst`` one-flit WRITEs to ``port``, and the flits that arrive are counted."""
    sink = env.sinks[port]
    gate = sink.gates[vc]
    sink.gates[vc] = _Closed()
    before = sink.flits[vc]
    srcs = [p for p in range(env.n) if p != port]
    for k in range(burst):
        env.unicast(srcs[k % len(srcs)], dst=port, length=0)
    await env.cycler.cycles(400)
    got = sink.flits[vc] - before
    sink.gates[vc] = gate
    await env.settle()
    return got


async def _uplink_rate(env, port=0, n=120):
    """Measured uplink throughput of GPU ``port``'s request VC: ``n`` header-only WRITEs (to the next port)
    sent back to back; flits per cycle from the first to the last flit sent."""
    from verif.harness.gates import Gate
    src = env.sources[port]
    gate, src.gate = src.gate, Gate(env.rng, 0.0)
    start, sent0 = env.cycler.cycle, src.flits_sent[0]
    for _ in range(n):
        env.unicast(port, dst=(port + 1) % env.n, length=0)
    await env.cycler.until(lambda: src.pending(0) == 0, timeout=20 * n, what="the uplink stream")
    rate = (src.flits_sent[0] - sent0) / max(1, env.cycler.cycle - start)
    src.gate = gate
    await env.settle()
    return rate


async def sc_credit_drop_up(dut, env, s, m):
    """Credit returns on the uplinks dropped; the GPU 0 uplink's request-VC throughput measured before
    and after."""
    done = await _credit_run(env, s, m, link="up", kind="drop", measure=_uplink_rate)
    _link_checks(env, m)
    del m["checks"]["every GPU link holds all its credits again"]
    lc = env.p["link_credits"]
    exact = all(env.sources[p].credits[v] == lc - done[(p, v)] for p in range(env.n) for v in range(N_VCS))
    m["checks"]["each drop costs its VC exactly one credit (GPU sender)"] = exact
    after = await _uplink_rate(env)
    m.update(detected=0, recovered=0, lost=0)
    m["throughput"] = {"before": round(m.pop("rate_before"), 3), "after": round(after, 3)}
    # Where the loss starts: more drops on GPU 0's request VC, down to 2 and 1 credits left.
    src = env.sources[0]
    extra = collections.Counter()
    for left in (2, 1):
        def filt(v, n, cycle, left=left):
            if v == 0 and src.credits[0] + n > left and n and sum(extra.values()) < lc:
                extra[left] += 1
                return n - 1
            return n
        src.credit_filter = filt
        await _uplink_rate(env)        # a stream whose credit returns are dropped
        src.credit_filter = None
        await env.settle()
        m["throughput"][f"{src.credits[0]} credits"] = round(await _uplink_rate(env), 3)
    m["injected"] += sum(extra.values())
    m["notes"].append(f"GPU senders' credits at the end {[s_.credits for s_ in env.sources]} of {lc} per VC; "
                      f"GPU 0 request-VC uplink throughput, back-to-back header-only WRITEs: "
                      f"{m['throughput']['before']} flits/cycle with {lc} credits, {m['throughput']['after']} "
                      f"with {lc - done[(0, 0)]}; then {m['throughput']}")
    _counters(env, m)


async def sc_credit_drop_down(dut, env, s, m):
    done = await _credit_run(env, s, m, link="down", kind="drop")
    _link_checks(env, m)
    gc = env.p["gpu_credits"]
    got = await _measure_switch_credits(env, 0)
    m["checks"]["each drop costs its VC exactly one credit (switch sender, measured)"] = got == gc - done[(0, 0)]
    m["checks"]["the switch never sent without a credit"] = sum(sum(k.overflows) for k in env.sinks) == 0
    m.update(detected=0, recovered=0, lost=0)
    m["notes"].append(f"port 0 VC 0: {done[(0, 0)]} credits dropped, the switch then sent {got} flits into a "
                      f"stalled {gc}-flit buffer")
    _counters(env, m)


async def sc_credit_dup_up(dut, env, s, m):
    """Duplicated credit returns to the GPUs' senders under good traffic (latent: the switch's receive FIFO
    never fills), then the extra credits used: every GPU stops draining its request VC, GPU 0 floods
    one-payload-flit WRITEs (whose data looks like a WRITE header) until its uplink's request FIFO is full and its extra credits overrun it. Each
    flood packet must arrive intact or be discarded (poisoned, or refused with an ERROR): nothing
    corrupted may be committed."""
    from hw.switch.dysharp_switch import IngressCounter
    done = await _credit_run(env, s, m, link="up", kind="dup")
    st = env.status()
    key = f"port.0.ingress.{IngressCounter.LINK_OVERFLOWS.value}"
    latent = sum(st[f"port.{d}.ingress.{IngressCounter.LINK_OVERFLOWS.value}"] for d in range(env.n))
    lc = env.p["link_credits"]
    extra = [[env.sources[p].credits[v] - lc for v in range(N_VCS)] for p in range(env.n)]
    m["checks"]["each duplicate gives its GPU sender exactly one credit too many"] = all(
        extra[p][v] == done[(p, v)] for p in range(env.n) for v in range(N_VCS))
    m["checks"]["latent under good traffic (no overflow)"] = latent == 0
    # ---- the flood: GPU 0's extra VC-0 credits used against a full FIFO
    flood = {}                     # addr -> Packet sent (around the model)
    seen = collections.Counter()

    def claim(port, vc, pkt, flits):
        h = Header.decode(flits[0].data)
        if h.src != 0 and not (pkt is not None and h.opcode == Opcode.ERROR.value and port == 0):
            return False
        if pkt is None:
            seen["discarded"] += 1
        elif h.opcode == Opcode.ERROR.value:
            seen[f"error {_E(h.code).name}" if h.code in _E._value2member_map_ else f"error {h.code}"] += 1
        elif h.opcode == Opcode.WRITE.value and flood.get(h.addr) == pkt:
            seen["intact"] += 1
            del flood[h.addr]
        else:
            seen["corrupt"] += 1
        return True
    env.claims.append(claim)
    gates = [k.gates[0] for k in env.sinks]
    for k in env.sinks:
        k.gates[0] = _Closed()
    n_flood = s.get("flood", 240)
    for k in range(n_flood):
        addr = REGION_FAULT + k * 16
        # The data written happens to look like a header-only WRITE to GPU 2: if a lost head flit left it
        # to be read as a header, a write nobody sent would be committed.
        word = Header(opcode=Opcode.WRITE, src=0, tag=0, dst=2, length=0, addr=REGION_FAULT + (1 << 39) + k * 16)
        pkt = Packet(Header(opcode=Opcode.WRITE, src=0, tag=k & 0xFF, dst=1, length=1, addr=addr), [word.encode()])
        flood[addr] = pkt
        env.sources[0].send(pkt)
    limit = env.cycler.cycle + 20 * n_flood
    while env.status()[key] < done[(0, 0)] and env.sources[0].pending(0) and env.cycler.cycle < limit:
        await env.cycler.cycles(20)
    for k, g in zip(env.sinks, gates):
        k.gates[0] = g
    # The flood is not the model's: wait until it stops arriving (within the drain budget), then drain.
    last, limit = -1, env.cycler.cycle + env.s.get("timeout", 30000)
    while sum(seen.values()) != last or not all(k.idle for k in env.sinks):
        if env.cycler.cycle > limit:
            raise Hang(f"timeout: the flood still arriving after {env.s.get('timeout', 30000)} cycles: {dict(seen)}")
        last = sum(seen.values())
        await env.cycler.cycles(300)
    await env.settle()
    ovf = env.status()[key]
    broken = n_flood - seen["intact"]
    m["injected"] = sum(done.values())
    m.update(detected=ovf, recovered=0, lost=broken)
    m["checks"]["the flood overran the FIFO once per extra credit"] = ovf == done[(0, 0)] > 0
    m["checks"]["no corrupted packet committed"] = seen["corrupt"] == 0 and \
        env.committed_faults() == seen["intact"]
    m["checks"]["packets broken at most 2 per overflow"] = broken <= 2 * ovf
    m["notes"].append(f"latent LINK_OVERFLOWS under traffic {latent}; credits over the receive FIFO per "
                      f"port/VC {extra}; flood of {n_flood}: {dict(seen)}, {broken} not delivered intact, "
                      f"LINK_OVERFLOWS {ovf}")
    # One LINK_OVERFLOWS per duplicate the flood used (GPU 0's request VC); nothing else counted.
    _counters(env, m, extra={key: done[(0, 0)]})


async def sc_credit_dup_down(dut, env, s, m):
    """Duplicated credit returns from the GPUs to the switch's senders; then GPU 0 stops returning credits and
    a burst of one-flit WRITEs shows what the extra credits do: the switch sends into a full buffer, and the
    GPU's receive path discards each packet that lost a flit (as :mod:`hw.gpu_nic.receive_path` does)."""
    lost = collections.Counter()

    def claim(port, vc, pkt, flits):
        if pkt is not None:
            return False
        h = Header.decode(flits[0].data)
        q = env.model.ordered.get((h.src, port), ())
        for item in q:
            if item.packet.header.tag == h.tag and item.packet.header.opcode in (h.opcode, Opcode.DYN_ST.value):
                q.remove(item)
                lost[port] += 1
                return True
        return False
    env.claims.append(claim)
    for k in env.sinks:
        k.overflow = "drop"
    kinds = {"unicast": 3, "mm_st": 2, "dyn_st": 4}     # nothing whose loss leaves an answer owed
    env.mixed = lambda src, kinds_=None, f=env.mixed: f(src, kinds)
    done = await _credit_run(env, s, m, link="down", kind="dup")
    before = sum(sum(k.overflows) for k in env.sinks)
    gc = env.p["gpu_credits"]
    got = await _measure_switch_credits(env, 0, burst=gc + 16)
    ovf = sum(sum(k.overflows) for k in env.sinks)
    dups = sum(done.values())
    m.update(detected=ovf, recovered=0, lost=sum(lost.values()))
    m["checks"]["the switch sent exactly one flit per duplicate past a stalled buffer"] = got == gc + done[(0, 0)]
    m["checks"]["lost packets at most one per duplicated credit"] = m["lost"] <= dups
    m["notes"].append(f"overflows under traffic {before}, after the stalled burst {ovf}; port 0 VC 0 had "
                      f"{done[(0, 0)]} duplicates and the switch sent {got} flits into a stalled {gc}-flit "
                      f"buffer; packets lost per port {dict(lost)}")
    _counters(env, m)


async def sc_silent_combine(dut, env, s, m):
    """GPU ``gpu`` answers its first ``after`` RED_READs, then none: reductions in flight need it."""
    f = s.get("gpu", 1)
    g = env.gpus[f]
    g.silent_after = s.get("after", 6)
    ignored, affected = [], {}

    def mark():
        while ignored:
            h = ignored.pop()
            r = env.reduction_for(h.src, f, (h.xtag << 8) | h.tag)
            if r is None:
                raise AssertionError(f"no reduction in flight for the RED_READ {h!r} the silent GPU ignored")
            affected[id(r)] = r
            env.expect_error(r, _E.TIMEOUT)
    g.on_silent = ignored.append
    env.after.append(mark)
    await env.setup()
    for r in range(s.get("rounds", 6)):
        _good_round(env)
        for src in range(env.n):
            env.ld_reduce(src, mask=env.random_mask(src) | (1 << f), etype=EType.S32, op=RedOp.ADD)
    await env.settle()
    st = _link_checks(env, m)
    timed = sum(1 for r in affected.values() if r.done)
    ok_done = sum(1 for r in env.model.reductions if r.done and r.code == 0)
    m.update(injected=len(affected), detected=timed, recovered=timed if st["total.engine.in_use"] == 0 else 0,
             lost=0)
    m["checks"]["every reduction that needed the silent GPU answered TIMEOUT"] = timed == len(affected) > 0
    m["checks"]["engine timeouts counted"] = st["total.engine.timeouts"] >= len(affected)
    m["notes"].append(f"silent after {g.silent_after} answers; {len(affected)} reductions timed out, {ok_done} "
                      f"completed exactly; engine timeouts {st['total.engine.timeouts']}, aborts "
                      f"{st['total.engine.aborts']}")
    _counters(env, m)


async def _fill_run(env, s, m, f):
    await env.setup()
    for _ in range(s.get("rounds", 3)):
        for src in range(env.n):
            env.dyn_st(src, fresh=True, mask=env.random_mask(src) | (1 << f))
            env.ld_reduce(src, fresh=True, mask=env.random_mask(src) | (1 << f), etype=EType.S32, op=RedOp.ADD)
            env.dyn_st(src, mask=env.random_mask(src) & ~(1 << f) or (1 << ((f + 1) % env.n)))
            env.unicast(src)
    await env.settle()
    # As in test_fill_timeout: a reduction's entry may time out before the AL-TLB read it waits on.
    limit = env.cycler.cycle + 4 * env.p["tlb_timeout"] + 2000
    while tlb_counters(env, f)["READ_TIMEOUTS"] != len(env.gpus[f].fills):
        if env.cycler.cycle > limit:
            raise Hang(f"timeout: port {f}'s AL-TLB reads never all timed out: {tlb_counters(env, f)}")
        await env.cycler.cycles(16)
    await env.cycler.cycles(60)
    env.model.finish()
    _link_checks(env, m)
    c = tlb_counters(env, f)
    fills = len(env.gpus[f].fills)
    m["checks"]["every abandoned fill timed out"] = c["READ_TIMEOUTS"] == fills > 0
    m["checks"]["TIMEOUT answered for every request waiting on one"] = c["TIMEOUT"] >= c["READ_TIMEOUTS"]
    m["checks"]["no garbage fill entered the AL-TLB"] = c["FILLS"] == 0
    m["notes"].append(f"port {f} AL-TLB: {c}; TIMEOUT answers expected {env.model.errors[_E.TIMEOUT]}")
    return c, fills


async def sc_fill_never(dut, env, s, m):
    f = s.get("gpu", 1)
    c, fills = await _fill_run(env, s, m, f)
    m.update(injected=fills, detected=c["READ_TIMEOUTS"], recovered=c["READ_TIMEOUTS"], lost=0)
    _counters(env, m)


async def sc_fill_garbage(dut, env, s, m):
    """GPU ``gpu`` answers every TLB_FILL with garbage: poisoned, or with a stray payload flit, or the right
    answer long after its read timed out (stale)."""
    f = s.get("gpu", 1)
    kinds = collections.Counter()
    late = env.p["tlb_timeout"] + 200

    def garbage(h):
        kind = ("poison", "framing", "stale")[sum(kinds.values()) % 3]
        kinds[kind] += 1
        addr, code = env.gpus[f].mm.serve(h.group, h.index, h.src)
        resp = Packet(Header(opcode=Opcode.TLB_FILL_RESP, src=f, dst=f, tag=h.tag, addr=addr, code=code))
        flits = resp.flits(env.w)
        if kind == "poison":
            return [[Flit(flits[0].data, True, True)]]
        if kind == "framing":
            return [[Flit(flits[0].data, False, False), Flit(env.rng.getrandbits(env.w), True, False)]]
        env.gpus[f].inject(resp, delay=late)     # the right answer, after the read timed out
        return []
    env.gpus[f].tlb_fill_garbage = garbage
    env.gpus[f].silent_tlb_fill = True
    c, fills = await _fill_run(env, s, m, f)
    await env.cycler.cycles(late + 100)
    c = tlb_counters(env, f)
    st = env.status()
    from hw.switch.dysharp_switch import IngressCounter
    bad = st[f"port.{f}.ingress.{IngressCounter.BAD_FILLS.value}"]
    detected = bad + c["BAD_RESPONSES"] + c["STALE_RESPONSES"]
    m.update(injected=sum(kinds.values()), detected=detected, recovered=c["READ_TIMEOUTS"], lost=0)
    m["checks"]["every garbage fill dropped and counted"] = detected == sum(kinds.values())
    m["checks"]["no garbage fill entered the AL-TLB"] = c["FILLS"] == 0
    m["notes"].append(f"garbage kinds {dict(kinds)}; BAD_FILLS {bad}, AL-TLB {c}")
    # Poisoned and misframed fills: the ingress's BAD_FILLS; stale ones: the AL-TLB's STALE_RESPONSES.
    from hw.switch.al_tlb import TlbCounter
    _counters(env, m, extra={f"port.{f}.ingress.{IngressCounter.BAD_FILLS.value}": kinds["poison"] + kinds["framing"],
                             f"port.{f}.tlb.{TlbCounter.STALE_RESPONSES.value}": kinds["stale"]})


async def sc_hostile(dut, env, s, m):
    """GPU 0 sprays requests at groups it is not a member of, while GPUs 1.. run their own traffic, into
    those groups too: dymultimem stores and reductions into a foreign tenant's dynamic group and a group
    configured nowhere, at other tenants' indices; static multimem.st and multimem.ld_reduce into a static
    group of the other GPUs."""
    from verif.tb.dysharp_switch import G_FOREIGN
    G_NOWHERE = 9
    await env.setup()
    everyone = (1 << env.n) - 1
    bad = 0
    tenants = everyone & ~1
    env.mm_group(G_FOREIGN, layout=2)
    env.tlb_group(G_FOREIGN, tenants, ROWS)
    env.mm_group(G_NOWHERE, layout=3)
    h_foreign = max(env.static_groups) + 1         # a static group of every GPU but the hostile one
    env.static_group(h_foreign, tenants)
    await env.cycler.until(lambda: env.cfg.idle, timeout=200, what="configuration writes")
    isolation = collections.Counter()

    def peek(port, vc, pkt, flits):
        if pkt is not None and port == bad and pkt.header.opcode == Opcode.ERROR.value:
            isolation[pkt.header.code] += 1
        return False
    env.claims.append(peek)
    hostile = collections.Counter()         # kind -> hostile requests (per destination for dynamic stores)
    rng = env.rng
    for r in range(s.get("rounds", 8)):
        for src in range(1, env.n):
            env.mixed(src)
            env.dyn_st(src, group=G_FOREIGN, mask=env.random_mask(src, allow_self=True) & tenants or 2,
                       index=src * INDEX_SPAN + r)
            env.mm_st(src, handle=h_foreign)
        for _ in range(s.get("spray", 3)):
            g = rng.choice([G_FOREIGN, G_NOWHERE])
            victim = rng.randrange(1, env.n)
            mask = env.random_mask(bad)
            idx = victim * INDEX_SPAN + rng.randrange(8)
            if rng.random() < 0.6:
                env.dyn_st(bad, group=g, mask=mask, index=idx)
                hostile["dynamic store copies"] += bin(mask).count("1")
            else:
                env.ld_reduce(bad, group=g, mask=mask, index=idx, etype=EType.S32, op=RedOp.MAX)
                hostile["dynamic reductions"] += 1
        for _ in range(s.get("spray_static", 2)):
            if rng.random() < 0.6:
                env.mm_st(bad, handle=h_foreign)
                hostile["static stores"] += 1
            else:
                env.mm_ld_reduce(bad, handle=h_foreign, etype=EType.S32, op=RedOp.MAX)
                hostile["static reductions"] += 1
    await env.settle()
    _link_checks(env, m)
    # The hostile GPU sends nothing else: every write it is the source of is a foreign write.
    foreign_writes = sum(1 for g in env.gpus for h, _, _ in g.writes if h.src == bad)
    tenant_writes = sum(1 for g in env.gpus for h, _, _ in g.writes
                        if ((g.port + 1) << 32) + (2 << 30) <= h.addr < ((g.port + 1) << 32) + (3 << 30))
    tenant_static = sum(1 for g in env.gpus for h, _, _ in g.writes
                        if h.opcode == Opcode.MM_ST.value and h.group == h_foreign)
    answered = isolation[_E.ISOLATION.value]
    n_hostile = sum(hostile.values())
    st = env.status()
    m.update(injected=n_hostile, detected=answered, recovered=answered, lost=0)
    m["checks"]["0 writes into foreign groups' memory (dynamic and static)"] = foreign_writes == 0
    m["checks"]["every hostile request answered ISOLATION"] = answered == n_hostile and \
        set(isolation) <= {_E.ISOLATION.value}
    m["checks"]["static ones counted: req_net ISOLATION (stores), engine bad_requests (reductions)"] = \
        st[f"req_net.{_E.ISOLATION.value}"] == hostile["static stores"] and \
        st["total.engine.bad_requests"] == hostile["static reductions"]
    m["checks"]["the tenants' own writes into their groups arrived (dynamic and static)"] = \
        tenant_writes > 0 and tenant_static > 0
    m["notes"].append(f"hostile requests {dict(hostile)}; answers at the hostile GPU "
                      f"{ {_E(k).name: v for k, v in isolation.items()} }; tenants' writes into their dynamic "
                      f"group {tenant_writes}, static group {tenant_static}; AL-TLB ISOLATION counters "
                      f"{[tlb_counters(env, d)['ISOLATION'] for d in range(env.n)]}; req_net ISOLATION "
                      f"{st[f'req_net.{_E.ISOLATION.value}']}; engine bad_requests {st['total.engine.bad_requests']}")
    _counters(env, m)


SCENARIOS = {
    "poison_request": sc_poison_request,
    "framing_request": sc_framing_request,
    "poison_response": sc_poison_response,
    "framing_response": sc_framing_response,
    "credit_drop_up": sc_credit_drop_up,
    "credit_drop_down": sc_credit_drop_down,
    "credit_dup_up": sc_credit_dup_up,
    "credit_dup_down": sc_credit_dup_down,
    "silent_combine": sc_silent_combine,
    "fill_never": sc_fill_never,
    "fill_garbage": sc_fill_garbage,
    "hostile": sc_hostile,
    "malformed_ld_reduce": sc_malformed_ld_reduce,
}

ENV_ARGS = {     # scenario -> DySharpEnv keyword arguments
    "fill_never": dict(gap=0.1, stall=0.2, lat=20, silent_tlb_fill={1}),
}


@cocotb.test()
async def test_fault(dut):
    s = tbenv.settings()
    name = s["fault"]
    if name not in SCENARIOS:
        raise ValueError(f"unknown fault scenario {name!r}; valid: {', '.join(SCENARIOS)}")
    m = {"fault": name, "injected": 0, "detected": 0, "recovered": 0, "lost": 0, "hangs": 0, "checks": {},
         "notes": [], "error": None, "cycles": 0}
    env = FaultEnv(dut, **ENV_ARGS.get(name, dict(gap=0.1, stall=0.2, lat=30)))
    try:
        await SCENARIOS[name](dut, env, s, m)
    except Hang as e:
        m["hangs"] = 1
        m["error"] = str(e).splitlines()[0]
        m["notes"].append(str(e)[:2000])
    except Exception as e:    # a scoreboard error: good data delivered wrong, or an unexpected answer
        m["error"] = f"{type(e).__name__}: {e}"[:2000]
        m["notes"].append(traceback.format_exc()[-3000:])
    m["cycles"] = env.cycler.cycle
    out = Path(s["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(m, indent=1, default=str))
    dut._log.info(f"fault {name}: {json.dumps({k: v for k, v in m.items() if k != 'notes'})}")
