"""cocotb testbench of the NVSwitch datapath (:mod:`hw.switch.nvswitch`).

Every output is checked against :class:`verif.models.switch.SwitchModel` through a scoreboard keyed by
(source, destination): each injected packet must arrive exactly once at each destination of its mask,
intact and in order per pair; malformed packets must come back as ``ERROR`` responses on their arrival port
with the right code, and the status counters must count them exactly.

Settings (``DYSHARP_ENV``): ``packets`` per port, ``mc_frac``, ``gap`` (source valid gaps), ``stall``
(egress credit stalls), ``burst`` (mean stall run), ``bad_frac`` (malformed packets in the mix).
"""

import collections
import functools

import cocotb

from hw.packet import ErrorCode, Flit, Header, Opcode, Packet
from hw.switch.group_table import GroupWrite
from hw.switch.nvswitch import N_ERROR_CODES, zero_load_latency

from verif.harness import tbenv
from verif.harness.credit import CreditSink, CreditSource
from verif.harness.cycler import Cycler
from verif.harness.gates import Gate
from verif.harness.packet_gen import dynamic_packet, random_packet, unicast_packet
from verif.harness.scoreboard import Scoreboard
from verif.harness.stream import StreamDriver
from verif.models.switch import POISONED, SwitchModel


def pack_group_write(handle: int, mask: int) -> int:
    from amaranth.lib import data
    layout = data.Layout.cast(GroupWrite)
    return (handle << layout["handle"].offset) | (mask << layout["mask"].offset)


class SwitchEnv:
    """Sources on every ``rx``, sinks on every ``tx``, the group-table driver, model and scoreboard."""

    def __init__(self, dut, *, gap=0.0, stall=0.0, burst=1.0, track_latency=False):
        self.dut = dut
        self.p = p = tbenv.params()
        self.n = p["ports"]
        self.w = p["flit_width"]
        out_credits = p["out_credits"] or p["credits"]
        self.cycler = Cycler(dut)
        self.model = SwitchModel(self.n, p["max_payload"])
        self.model.group_entries = p["groups"]
        self.sb = Scoreboard("switch")
        self.poisoned = collections.Counter()
        self.expected_errors = collections.Counter()
        self.header_in = {}
        self.latencies = []
        self.track_latency = track_latency
        self.sources = [CreditSource(dut, f"rx__{i}", tbenv.rng(f"src{i}"), credits=p["credits"],
                                     flit_width=self.w, gap=gap, burst=burst, on_sent=self._on_sent)
                        for i in range(self.n)]
        self.sinks = [CreditSink(dut, f"tx__{j}", tbenv.rng(f"sink{j}"), credits=out_credits,
                                 flit_width=self.w, stall=stall, burst=burst,
                                 on_packet=functools.partial(self._on_packet, j))
                      for j in range(self.n)]
        self.cfg = StreamDriver(dut, "cfg", tbenv.rng("cfg"))
        self.cycler.add(*self.sources, *self.sinks, self.cfg)
        self._pid = 0

    async def start(self):
        await self.cycler.start()

    # -- stimulus
    def configure_group(self, handle: int, mask: int) -> None:
        if not self.model.configure_group(handle, mask):
            self.expected_cfg_errors = getattr(self, "expected_cfg_errors", 0) + 1
        self.cfg.send(pack_group_write(handle, mask))

    def inject(self, port: int, packet) -> None:
        """Send a Packet (or raw list of Flits) into ``port`` and record what the model expects."""
        flits = packet.flits(self.w) if isinstance(packet, Packet) else list(packet)
        outcome = self.model.route(port, flits)
        for dst, item in outcome.deliveries:
            src = Header.decode(flits[0].data).src
            self.sb.expect((src, dst), item)
        if outcome.response is not None:
            self.sb.expect(("err", port), outcome.response)
            self.expected_errors[outcome.error] += 1
        self._pid += 1
        if self.track_latency:
            self.header_in_key = None
        self.sources[port].send(flits, packet_id=(port, Header.decode(flits[0].data).tag, self._pid))

    def _on_sent(self, pid, cycle):
        if self.track_latency:
            self.header_in[pid[:2]] = cycle

    def _on_packet(self, port: int, flits: list[Flit], cycle: int) -> None:
        h = Header.decode(flits[0].data)
        if flits[-1].poison:
            self.poisoned[port] += 1
            self.sb.observe((h.src, port), POISONED, cycle=cycle)
            return
        pkt = Packet.from_flits(flits)
        if h.opcode == Opcode.ERROR.value:
            self.sb.observe(("err", port), pkt, cycle=cycle)
        else:
            self.sb.observe((h.src, port), pkt, cycle=cycle)
        if self.track_latency:
            first_flit_cycle = cycle - (len(flits) - 1)
            start = self.header_in.get((h.src, h.tag))
            if start is not None:
                self.latencies.append(first_flit_cycle - start)

    # -- checks
    def error_counts(self) -> list[int]:
        bits = int(self.dut.err_count.value)
        return [(bits >> (32 * c)) & 0xFFFFFFFF for c in range(N_ERROR_CODES)]

    async def drain(self, timeout=20000):
        await self.cycler.until(lambda: all(s.idle for s in self.sources) and self.sb.outstanding == 0,
                                timeout=timeout, what=f"delivery of all packets ({self.sb.outstanding} "
                                                      f"outstanding)")
        await self.cycler.cycles(20)   # anything extra would show up now as unexpected
        self.sb.finish()
        counts = self.error_counts()
        for code in ErrorCode:
            if code == ErrorCode.NONE:
                continue
            if code.value >= N_ERROR_CODES:      # a code the network never answers (POISONED): no counter
                assert not self.expected_errors[code], f"the model expects {code.name} from the network"
                continue
            assert counts[code.value] == self.expected_errors[code], \
                f"err_count[{code.name}] = {counts[code.value]}, expected {self.expected_errors[code]}"
        cfg_errors = int(self.dut.cfg_errors.value)
        assert cfg_errors == getattr(self, "expected_cfg_errors", 0), f"cfg_errors = {cfg_errors}"


def _groups(env, rng):
    """Configure a few static groups and return their handles."""
    handles = []
    for h in range(min(4, env.p["groups"])):
        mask = 0
        while mask == 0:
            mask = rng.getrandbits(env.n)
        env.configure_group(h, mask)
        handles.append(h)
    return handles


@cocotb.test()
async def test_traffic(dut):
    """Random mixed unicast/multicast traffic on every port at once, random gaps and egress stalls."""
    s = tbenv.settings()
    env = SwitchEnv(dut, gap=s.get("gap", 0.2), stall=s.get("stall", 0.3), burst=s.get("burst", 2.0))
    rng = tbenv.rng("traffic")
    await env.start()
    handles = _groups(env, rng)
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="group configuration")
    await env.cycler.cycles(2)
    for _ in range(s.get("packets", 40)):
        for port in range(env.n):
            env.inject(port, random_packet(rng, port, env.n, max_payload=env.p["max_payload"],
                                           mc_frac=s.get("mc_frac", 0.3), static_groups=handles,
                                           flit_width=env.w))
    await env.drain(timeout=s.get("timeout", 200000))
    dut._log.info(f"delivered {env.sb.observed} packets; sink flits {[k.flits for k in env.sinks]}")


def bad_packets(rng, port, n, max_payload):
    """One of each kind of malformed input, as (kind, flits)."""
    good = unicast_packet(rng, port, rng.randrange(n), 3)
    fl = good.flits()
    out = []
    h = Header(opcode=12, src=port, tag=rng.getrandbits(8), dst=0)
    out.append(("unknown opcode", Packet(h, []).flits()))
    out.append(("unknown opcode with payload", [Flit(h.encode())] + [Flit(5), Flit(6, last=True)]))
    out.append(("too short", fl[:2] + [Flit(fl[2].data, last=True)]))
    out.append(("too long", fl[:-1] + [Flit(fl[-1].data), Flit(7), Flit(8, last=True)]))
    hdr_only = unicast_packet(rng, port, rng.randrange(n), 4, opcode=Opcode.READ).flits()
    out.append(("header-only with trailing flits", [Flit(hdr_only[0].data), Flit(9, last=True)]))
    out.append(("length above max", unicast_packet(rng, port, 0, max_payload + 1).flits()))
    out.append(("zero mask", dynamic_packet(rng, port, 0, 2).flits()))
    if n < 64:
        out.append(("mask beyond ports", dynamic_packet(rng, port, (1 << n) | 1, 2).flits()))
    static = Packet(Header(opcode=Opcode.MM_ST, src=port, tag=rng.getrandbits(8), length=1, group=200,
                           addr=0x100), [1])
    out.append(("unconfigured group", static.flits()))
    if n < 64:
        out.append(("bad dst", Packet(Header(opcode=Opcode.WRITE, src=port, tag=1, length=1, dst=n, addr=0),
                                      [3]).flits()))
    red = dynamic_packet(rng, port, 1, 2, reduce=True)
    red.header.etype = 7
    out.append(("bad reduction type", red.flits()))
    return out


@cocotb.test()
async def test_bad_input(dut):
    """Each kind of malformed packet (or only the one named by the setting ``kind``), interleaved with good
    traffic on every port, under stalls."""
    s = tbenv.settings()
    only = s.get("kind")
    env = SwitchEnv(dut, gap=s.get("gap", 0.1), stall=s.get("stall", 0.2))
    rng = tbenv.rng("bad")
    await env.start()
    kinds = set()
    for rnd in range(s.get("rounds", 3)):
        for port in range(env.n):
            bad = bad_packets(rng, port, env.n, env.p["max_payload"])
            if only is not None:
                assert only in [k for k, _ in bad], f"unknown kind {only!r}; valid: {[k for k, _ in bad]}"
                bad = [(k, f) for k, f in bad if k == only]
            rng.shuffle(bad)
            for kind, flits in bad:
                kinds.add(kind)
                env.inject(port, random_packet(rng, port, env.n, max_payload=env.p["max_payload"]))
                env.inject(port, flits)
    await env.drain(timeout=s.get("timeout", 200000))
    dut._log.info(f"kinds: {sorted(kinds)}; errors: {dict(env.expected_errors)}; poisoned: {dict(env.poisoned)}")
    assert sum(env.expected_errors.values()) + sum(env.poisoned.values()) > 0, \
        f"no bad packet was answered or poisoned ({sorted(kinds)})"


@cocotb.test()
async def test_zero_load_latency(dut):
    """A lone packet's header leaves 5 cycles after it arrives (6 with ``req_stage``), for every length and
    multicast (4 before the allocator's match was registered)."""
    env = SwitchEnv(dut, track_latency=True)
    rng = tbenv.rng("lat")
    await env.start()
    for length in (0, 1, 4, 16):
        for src, dst in ((0, env.n - 1), (env.n - 1, 0), (1, 1)):
            env.inject(src, unicast_packet(rng, src, dst, length))
            await env.drain()
    env.inject(0, dynamic_packet(rng, 0, (1 << env.n) - 1, 8))
    await env.drain()
    want = zero_load_latency(env.n, tbenv.params().get("req_stage"))
    assert env.latencies and set(env.latencies) == {want}, f"zero-load latencies {env.latencies}, want {want}"


@cocotb.test()
async def test_credit_overflow(dut):
    """A source that ignores credits is counted (CREDIT_OVERFLOW); what leaves is intact or poisoned, nothing
    hangs, and the port works again once the sender respects credits. Run with small ``out_credits`` so
    that withholding egress credits blocks the outputs."""
    env = SwitchEnv(dut)
    rng = tbenv.rng("ovf")
    await env.start()
    flood = [unicast_packet(rng, 0, 1, 7, tag=t) for t in range(12)]
    intact = {p.header.tag: p for p in flood}
    got = []

    def check(port, flits, cycle):
        if not flits[-1].poison:
            pkt = Packet.from_flits(flits)
            assert intact.get(pkt.header.tag) == pkt, f"corrupt packet delivered on port {port}: {pkt}"
        got.append(flits)
    for j, sink in enumerate(env.sinks):
        sink.on_packet = functools.partial(check, j)
        sink.gate = Gate(tbenv.rng(f"blk{j}"), closed=0.999, burst=1e9)   # withhold all credits
        sink.gate.state_closed = True
    bad_src = env.sources[0]
    bad_src.ignore_credits = True
    for pkt in flood:
        bad_src.send(pkt)
    await env.cycler.until(lambda: bad_src.idle, timeout=1000, what="the flood to be sent")
    for sink in env.sinks:
        sink.gate = Gate(tbenv.rng("open"))
    await env.cycler.cycles(800)
    overflow = env.error_counts()[ErrorCode.CREDIT_OVERFLOW.value]
    assert overflow > 0, "no CREDIT_OVERFLOW was counted"
    assert got, "nothing was delivered after the overflow"
    assert not any(s.partial for s in env.sinks), "a packet was left unterminated"
    # The sender resynchronises (the switch holds nothing now, so it owns all credits again).
    bad_src.ignore_credits = False
    bad_src.credits = env.p["credits"]
    for j, sink in enumerate(env.sinks):
        sink.on_packet = functools.partial(env._on_packet, j)
    env.expected_errors[ErrorCode.CREDIT_OVERFLOW] = overflow
    for k in range(6):
        env.inject(0, unicast_packet(rng, 0, 1 + k % 3, 5))
        env.inject(2, unicast_packet(rng, 2, 3, 5))
    await env.drain()


@cocotb.test()
async def test_group_config(dut):
    """Illegal group-table writes are refused and counted; legal ones route static multimem."""
    env = SwitchEnv(dut)
    rng = tbenv.rng("grp")
    await env.start()
    env.configure_group(env.p["groups"], 1)              # handle out of range
    if env.n < 64:
        env.configure_group(1, 1 << env.n)               # mask beyond the ports
    env.configure_group(2, (1 << env.n) - 1)             # all ports
    env.configure_group(3, 0b101)
    env.configure_group(3, 0)                            # unconfigure again
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="group configuration")
    await env.cycler.cycles(2)
    from verif.harness.packet_gen import static_packet
    for port in range(env.n):
        env.inject(port, static_packet(rng, port, 2, 3))
        env.inject(port, static_packet(rng, port, 3, 1))   # unconfigured -> BAD_GROUP
        env.inject(port, static_packet(rng, port, 1, 2))   # refused write -> still unconfigured
    await env.drain()


def _tagged(packet, tag):
    packet.header.tag = tag
    return packet


async def _stall_output(env, rng, out: int) -> None:
    """Stall output ``out``: its receiver returns no credits and input 1 fills its output queue, so a
    packet to it cannot be matched until the receiver's gate opens again."""
    mp = env.p["max_payload"]
    env.sinks[out].gate = _Shut()
    depth = env.p["egress_depth"] or (4 if env.p["speedup"] == 1 else 2 * (mp + 1))
    fill = (env.p["out_credits"] or env.p["credits"]) + depth + 2 * (mp + 1)
    for k in range(-(-fill // (mp + 1))):           # more flits than the receiver and output queue hold
        env.inject(1, unicast_packet(rng, 1, out, mp, tag=0x80 + k))
    await env.cycler.cycles(8 * fill)


class _Shut:
    """A sink gate that stays closed: the receiver returns no credits (a stalled downstream)."""

    def open(self) -> bool:
        return False


@cocotb.test()
async def test_pair_order_lapped(dut):
    """Per-(source, destination) order while a VOQ head waits through more arrivals than its input's arrival
    numbers can order.

    Output ``A``'s receiver returns no credits and input 1 fills ``A``'s output queue, so input 0's
    unicast ``P`` to ``A`` waits at the head of its VOQ, asking for ``A``, with a second one, ``Q``, behind
    it. Input 0 then sends ``rounds`` rounds of a header-only unicast to ``C`` and a header-only multicast
    to ``B``: they flow, because the input asks for its unicast and mask-queue heads in turns. The
    last round's multicast is followed at once by one, ``M``, to ``{A, B}``, ``2 * rounds + 2`` arrivals
    after ``P``. Past ``PacketQueues.lap_threshold`` arrivals the input must stop taking packets (its
    credit returns held) until ``P`` leaves, so that the arrival numbers never lap ``P``; within it every
    round flows. Then ``A`` is released; the (0, ``A``) scoreboard wants ``P``, ``Q``, then ``M``, and every
    packet delivered. Settings: ``rounds`` (default ``2**(seq_bits - 2)``: ``M`` one arrival past half the
    arrival numbers' range after ``Q``)."""
    from hw.switch.packet_queues import PacketQueues
    s = tbenv.settings()
    env = SwitchEnv(dut)
    rng = tbenv.rng("lap")
    A, B, C = 1, 2, 3
    assert env.n >= 4 and env.p["multicast"], "the scenario needs 4 ports and multicast"
    # An input has credits + 1 cells (InputUnit); its packet queues number arrivals in seq_bits bits.
    pq = PacketQueues(n_uc=env.n, n_cells=env.p["credits"] + 1, ports=env.n)
    seq_bits = pq.seq_bits
    rounds = s.get("rounds", 2 ** (seq_bits - 2))
    guarded = 2 * rounds + 2 > pq.lap_threshold
    seen = []
    on_a = env.sinks[A].on_packet

    def log_a(flits, cycle):
        h = Header.decode(flits[0].data)
        seen.append((cycle, h.src, h.tag))
        on_a(flits, cycle)
    env.sinks[A].on_packet = log_a
    sent, n_sent = {}, [0]
    on_sent = env.sources[0].on_sent

    def log_sent(pid, cycle):
        sent[pid[1]] = cycle
        n_sent[0] += 1
        on_sent(pid, cycle)
    env.sources[0].on_sent = log_sent
    await env.start()
    await _stall_output(env, rng, A)
    env.inject(0, unicast_packet(rng, 0, A, 0, tag=0))                                  # P, arrival 0
    env.inject(0, unicast_packet(rng, 0, A, 0, tag=255))                                # Q, arrival 1
    held_at = None
    for r in range(rounds):
        env.inject(0, unicast_packet(rng, 0, C, 0, tag=2 + r % 253))
        env.inject(0, _tagged(dynamic_packet(rng, 0, 1 << B, 0), 2 + r % 253))
        if r == rounds - 1:
            env.inject(0, _tagged(dynamic_packet(rng, 0, (1 << A) | (1 << B), 0), 1))              # M
        if held_at is None:
            await env.cycler.cycles(12)
            if not env.sources[0].idle:
                await env.cycler.cycles(200)
                if not env.sources[0].idle:         # the input holds its credits: stop waiting per round
                    held_at = r
    dut._log.info(f"before A's release: input 0 sent {n_sent[0]} packets, delivered to C {env.sb.count[(0, C)]}, "
                  f"to B {env.sb.count[(0, B)]}; input held from round {held_at}")
    assert not any(src == 0 for _, src, _ in seen), f"input 0 reached A while A was stalled: {seen}"
    if guarded:
        # P's arrival numbers would be lapped: the input stops before 2**(seq_bits - 1) packets pass P.
        assert held_at is not None, f"input 0 took all {2 * rounds + 3} packets while P waited"
        assert n_sent[0] < 2 ** (seq_bits - 1), f"input 0 took {n_sent[0]} packets while P waited: P was lapped"
    else:
        assert held_at is None and env.sb.count[(0, C)] == rounds and env.sb.count[(0, B)] >= rounds, \
            "the rounds did not flow"
    env.sinks[A].gate = Gate(tbenv.rng("open"))
    released = env.cycler.cycle
    try:
        await env.drain()
    finally:
        names = {0: "P", 255: "Q", 1: f"M (multicast to A and B, {2 * rounds + 2} arrivals after P)"}
        order = [(c, names.get(t, t)) for c, src, t in seen if src == 0]
        dut._log.info(f"arrival numbers {seq_bits} bits; input 0 sent P at cycle {sent.get(0)} and M at cycle "
                      f"{sent.get(1)}; A released at cycle {released}; input 0's packets at A (cycle, packet): "
                      f"{order}")


@cocotb.test()
async def test_mask_past_stalled_unicast(dut):
    """An input's multicast goes while its unicast waits for a stalled output.

    Output ``A``'s receiver returns no credits and input 1 fills ``A``'s output queue; input 0 then sends a
    header-only unicast ``P`` to ``A`` (matched only with room at ``A``) and a multicast ``M`` to ``B`` and
    ``C``. ``P`` cannot be granted, and the input asks for its unicast and mask-queue heads in turns, so
    ``M`` reaches ``B`` and ``C`` within ``patience`` cycles while ``A`` is still stalled; then ``A`` is
    released and everything is delivered (the scoreboard checks per-pair order and delivery)."""
    s = tbenv.settings()
    env = SwitchEnv(dut)
    rng = tbenv.rng("turn")
    A, B, C = 1, 2, 3
    mp = env.p["max_payload"]
    assert env.n >= 4 and env.p["multicast"], "the scenario needs 4 ports and multicast"
    await env.start()
    await _stall_output(env, rng, A)
    env.inject(0, unicast_packet(rng, 0, A, 0, tag=0))                                  # P, header only
    env.inject(0, _tagged(dynamic_packet(rng, 0, (1 << B) | (1 << C), mp), 1))         # M
    patience = s.get("patience", 100)
    await env.cycler.until(lambda: env.sb.count[(0, B)] == 1 and env.sb.count[(0, C)] == 1, timeout=patience,
                           what="input 0's multicast delivered to B and C while its unicast waits for A")
    assert env.sb.count[(0, A)] == 0, "input 0 reached A while A was stalled"
    env.sinks[A].gate = Gate(tbenv.rng("open"))
    await env.drain()
