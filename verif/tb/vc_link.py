"""cocotb testbench of the credit-link receiver and the two-VC link (:mod:`hw.credit`, :mod:`hw.vc_link`).

Each DUT runs against the harness's model of its link partner, so the partner can also break the
protocol:

* ``credit_receiver``: :class:`~verif.harness.credit.CreditSource` sends random packets; ``vc_receiver``:
  :class:`~verif.harness.vc_link.VcLinkSource` sends raw random flits on both VCs with per-VC credits. A
  cycle model of the receiver FIFOs (:class:`ReceiverModel`) checks every cycle that ``o[v].valid`` and
  the returned credits are exactly what the FIFO occupancy says, queues each accepted flit for the
  in-order scoreboard of its VC, and counts the flits that must overflow (the source ignores its credits
  in the ``*_overflow`` tests).
* ``vc_sender``: random flits on ``i[0]``/``i[1]`` into :class:`~verif.harness.vc_link.VcLinkSink`, which
  returns credits after random stalls (or withholds one VC's, then returns them 3 per cycle), and fails
  on a flit sent without a credit or into a full buffer; :class:`SenderChecker` checks ``credits_left``
  every cycle against the sink's count (never negative, never above the configured credits) and the
  arbitration exactly: a flit goes whenever a VC has a flit and a credit, and with both able the VC that
  did not send last.

Every output flit's bits are compared with what went in (per-VC order, nothing lost or duplicated).
Settings (``DYSHARP_ENV``): ``flits`` (per VC), ``gap``, ``stall``, ``batch`` (the most credits the sink
returns per VC per cycle in ``test_sender_random``, default 1).
"""

import cocotb

from hw.packet import Flit, N_VCS, flit_layout, pack_flit, unpack_flit

from verif.harness import tbenv
from verif.harness.credit import CreditSource
from verif.harness.cycler import Cycler
from verif.harness.scoreboard import Scoreboard
from verif.harness.stream import StreamDriver, StreamMonitor, record_cycles
from verif.harness.structs import Port
from verif.harness.vc_link import VcLinkSink, VcLinkSource

CREDIT_BITS = 2


def random_flits(rng, n, flit_width=128, *, vc=0):
    """``n`` random flits (random ``last`` framing, rare ``poison``), as packed ints."""
    return [pack_flit(Flit(rng.getrandbits(flit_width), rng.random() < 0.3, rng.random() < 0.05), flit_width)
            for _ in range(n)]


class ReceiverModel:
    """Cycle model of a receiver's per-VC FIFOs, run as a :class:`Cycler` watcher (after every agent's
    ``sample``): checks ``o[v].valid`` and ``link.credit`` and queues accepted flits on the scoreboard."""

    def __init__(self, dut, depths, monitors, sb):
        self.nvc = len(depths)
        self.depths = depths
        self.level = [0] * self.nvc
        self.valid = Port(dut.link__valid)
        self.vc = Port(dut.link__vc) if self.nvc > 1 else None
        self.flit = Port(dut.link__flit)
        self.credit = Port(dut.link__credit)
        self.o_valid = [Port(getattr(dut, f"{m.name}__valid")) for m in monitors]
        self.sb = sb
        self.popped = [0] * self.nvc     # set by the monitors' callbacks this cycle
        self.overflows = 0
        self.accepted = 0
        # VcReceiver (two VCs) poisons a VC's flits after an overflow up to the next `last`; CreditReceiver
        # (one VC) does not.
        self.spoil = [False] * self.nvc
        lay = flit_layout(tbenv.params()["flit_width"])
        self._last, self._poison = 1 << lay["last"].offset, 1 << lay["poison"].offset

    def pop(self, v):
        self.popped[v] += 1

    def __call__(self, cycle):
        credit = self.credit.read()
        for v in range(self.nvc):
            has = self.level[v] > 0
            assert self.o_valid[v].high() == has, \
                f"cycle {cycle}: o[{v}].valid={int(self.o_valid[v].high())} with {self.level[v]} flit(s) buffered"
            ret = (credit >> (CREDIT_BITS * v)) & ((1 << CREDIT_BITS) - 1)
            assert ret == self.popped[v], f"cycle {cycle}: VC {v} returned {ret} credit(s), popped {self.popped[v]}"
        if self.valid.high():
            v = self.vc.read() if self.vc else 0
            if self.level[v] < self.depths[v]:
                bits = self.flit.read()
                self.sb.expect(v, bits | (self._poison if self.spoil[v] else 0))
                if bits & self._last:
                    self.spoil[v] = False
                self.level[v] += 1
                self.accepted += 1
            else:
                self.overflows += 1
                self.spoil[v] = self.vc is not None
        for v in range(self.nvc):
            self.level[v] -= self.popped[v]
            self.popped[v] = 0


class ReceiverEnv:
    """``credit_receiver`` (one VC) or ``vc_receiver`` (two) with its source, monitors and model."""

    def __init__(self, dut, *, gap=0.0, stall=0.0, ignore_credits=False):
        p = tbenv.params()
        self.dut = dut
        self.two = hasattr(dut, "link__vc")
        self.depths = list(p["credits"]) if self.two else [p["depth"]]
        self.W = p["flit_width"]
        self.cycler = Cycler(dut)
        self.sb = Scoreboard("receiver")
        names = ["o__0", "o__1"] if self.two else ["o"]
        self.mons = []
        for v, name in enumerate(names):
            mon = StreamMonitor(dut, name, tbenv.rng(f"stall{v}"), stall=stall, burst=3.0,
                                on_item=lambda bits, cyc, v=v: self._out(v, bits, cyc))
            self.mons.append(mon)
        if self.two:
            self.src = VcLinkSource(dut, "link", tbenv.rng("src"), credits=self.depths, flit_width=self.W,
                                    gap=gap, burst=2.0, ignore_credits=ignore_credits)
        else:
            self.src = CreditSource(dut, "link", tbenv.rng("src"), credits=self.depths[0], flit_width=self.W,
                                    gap=gap, ignore_credits=ignore_credits)
        self.src.sent_cycles = []      # first flit of each send() call
        self.src.on_sent = lambda pid, cyc: self.src.sent_cycles.append(cyc)
        self.model = ReceiverModel(dut, self.depths, self.mons, self.sb)
        self.cycler.add(self.src, *self.mons)
        self.cycler.watchers.append(self.model)

    def _out(self, v, bits, cycle):
        self.sb.observe(v, bits, cycle=cycle)
        self.model.pop(v)

    def send(self, v, bits_list):
        """Queue raw flits (packed ints, any framing) on VC ``v`` (0 on the one-VC receiver)."""
        flits = [unpack_flit(b, self.W) for b in bits_list]
        if self.two:
            self.src.send(flits, vc=v)
        else:
            self.src.send(flits)

    async def drain(self, timeout):
        await self.cycler.until(lambda: self.src.idle and self.sb.outstanding == 0, timeout=timeout,
                                what="every accepted flit out")
        await self.cycler.cycles(3)
        self.sb.finish()

    def overflows(self):
        return int(self.dut.overflows.value)


@cocotb.test()
async def test_receiver_random(dut):
    """Random traffic within the credits, random gaps and bursty stalls: bits, order, credits exact."""
    s = tbenv.settings()
    env = ReceiverEnv(dut, gap=s.get("gap", 0.3), stall=s.get("stall", 0.4))
    await env.cycler.start()   # traffic is queued after reset
    rng = tbenv.rng("traffic")
    n = s.get("flits", 400)
    for v in range(len(env.depths)):
        env.send(v, random_flits(rng, n, env.W))
    await env.drain(timeout=40 * n)
    assert env.model.accepted == n * len(env.depths)
    assert env.model.overflows == 0 and env.overflows() == 0, (env.model.overflows, env.overflows())


@cocotb.test()
async def test_receiver_overflow(dut):
    """The source ignores its credits while the output stalls: the flits that find their FIFO full are
    dropped and counted (exactly as the model says); every other flit still comes out intact."""
    s = tbenv.settings()
    env = ReceiverEnv(dut, gap=0.0, stall=0.7, ignore_credits=True)
    await env.cycler.start()   # traffic is queued after reset
    rng = tbenv.rng("traffic")
    n = s.get("flits", 200)
    for v in range(len(env.depths)):
        env.send(v, random_flits(rng, n, env.W))
    await env.drain(timeout=40 * n)
    assert env.model.overflows > 0, "the test did not overflow the FIFO"
    assert env.overflows() == env.model.overflows, (env.overflows(), env.model.overflows)
    assert env.model.accepted + env.model.overflows == n * len(env.depths)


@cocotb.test()
async def test_receiver_full_rate(dut):
    """No gaps, no stalls: K flits (spread over the VCs) leave in K + 1 cycles, one per cycle."""
    env = ReceiverEnv(dut)
    await env.cycler.start()   # traffic is queued after reset
    rng = tbenv.rng("traffic")
    k = 64
    for j in range(k):
        env.send(j % len(env.depths) if env.two else 0, random_flits(rng, 1, env.W))
    outs = [record_cycles(m, "on_item") for m in env.mons]
    await env.drain(timeout=10 * k)
    cycles = sorted(c for o in outs for c in o)
    sent = env.src.sent_cycles
    assert len(cycles) == k
    assert cycles[-1] - cycles[0] == k - 1, f"{k} flits left over {cycles[-1] - cycles[0] + 1} cycles"
    assert len(sent) == k and sent[-1] - sent[0] == k - 1, "the source could not send at full rate"
    assert cycles[0] == sent[0] + 1 and cycles[-1] == sent[-1] + 1, (sent[0], cycles[0])


# ---------------------------------------------------------------------------------------------------------
# VcSender

class SenderChecker:
    """What is particular to :class:`hw.vc_link.VcSender`, checked every cycle against the counts of the
    :class:`VcLinkSink` at its link (which checks the credit protocol itself): ``credits_left[v]`` equals
    the credits the sink says the sender holds (so never negative, never above ``credits[v]``);
    ``link.valid`` is high exactly when some VC offers a flit and has a credit, it sends only on such a
    VC, and with both able the VC that did not send last goes. A :class:`Cycler` watcher (after the
    sink's ``sample``); it keeps the sink's counts from the end of the previous cycle, those the cycle
    began with."""

    def __init__(self, dut, sink):
        self.sink = sink
        self.credits = sink.capacity
        self.available = list(sink.available)
        self.left = [Port(getattr(dut, f"credits_left__{v}")) for v in range(N_VCS)]
        self.in_valid = [Port(getattr(dut, f"i__{v}__valid")) for v in range(N_VCS)]
        self.valid = Port(dut.link__valid)
        self.vc = Port(dut.link__vc)
        self.last_vc = 0
        self.send_cycles = []

    def __call__(self, cycle):
        available = self.available
        for v in range(N_VCS):
            left = self.left[v].read()
            assert left == available[v], \
                f"cycle {cycle}: credits_left[{v}]={left}, the receiver's count says {available[v]}"
            assert 0 <= left <= self.credits[v], f"cycle {cycle}: credits_left[{v}]={left} out of range"
        can = [self.in_valid[v].high() and available[v] > 0 for v in range(N_VCS)]
        valid = self.valid.high()
        assert valid == any(can), f"cycle {cycle}: link.valid={int(valid)} while able to send: {can}"
        if valid:
            v = self.vc.read()
            assert can[v], f"cycle {cycle}: VC {v} sent without a flit offered"
            if all(can):
                assert v != self.last_vc, f"cycle {cycle}: VC {v} sent twice in a row with both VCs able"
            self.last_vc = v
            self.send_cycles.append(cycle)
        self.available = list(self.sink.available)


class SenderEnv:
    def __init__(self, dut, *, gap=0.0, stall=0.0, batch=1):
        p = tbenv.params()
        self.dut = dut
        self.credits = list(p["credits"])
        self.W = p["flit_width"]
        self.cycler = Cycler(dut)
        self.sb = Scoreboard("vc_sender")
        self.drvs = [StreamDriver(dut, f"i__{v}", tbenv.rng(f"gap{v}"), gap=gap, burst=2.0,
                                  on_accept=lambda bits, cyc, v=v: self.sb.expect(v, bits))
                     for v in range(N_VCS)]
        # Random flits carry no header: no check of the VC class.
        self.sink = VcLinkSink(dut, "link", tbenv.rng("sink"), credits=self.credits, flit_width=self.W,
                               stall=stall, burst=3.0, batch=batch, check_class=False,
                               on_flit=lambda v, f, cyc: self.sb.observe(v, pack_flit(f, self.W), cycle=cyc))
        self.checker = SenderChecker(dut, self.sink)
        self.cycler.add(*self.drvs, self.sink)   # drivers first: a flit is expected before it is seen
        self.cycler.watchers.append(self.checker)

    @property
    def sent(self):
        return sum(self.sink.flits)

    async def drain(self, timeout):
        await self.cycler.until(lambda: all(d.idle for d in self.drvs) and self.sb.outstanding == 0,
                                timeout=timeout, what="every flit across the link")
        self.sb.finish()


@cocotb.test()
async def test_sender_random(dut):
    """Random flits, random gaps, bursty credit stalls: bits, order, credits_left and arbitration exact."""
    s = tbenv.settings()
    env = SenderEnv(dut, gap=s.get("gap", 0.3), stall=s.get("stall", 0.4), batch=s.get("batch", 1))
    await env.cycler.start()   # traffic is queued after reset
    rng = tbenv.rng("traffic")
    n = s.get("flits", 400)
    for v in range(N_VCS):
        for b in random_flits(rng, n, env.W):
            env.drvs[v].send(b)
    await env.drain(timeout=40 * n)
    assert env.sent == 2 * n


@cocotb.test()
async def test_sender_full_rate(dut):
    """Both VCs loaded, the receiver never stalls: 2K flits in 2K consecutive cycles, VCs alternating."""
    env = SenderEnv(dut)
    await env.cycler.start()   # traffic is queued after reset
    rng = tbenv.rng("traffic")
    k = 50
    for v in range(N_VCS):
        for b in random_flits(rng, k, env.W):
            env.drvs[v].send(b)
    await env.drain(timeout=20 * k)
    c = env.checker.send_cycles
    assert len(c) == 2 * k and c[-1] - c[0] == 2 * k - 1, f"{len(c)} flits over {c[-1] - c[0] + 1} cycles"


@cocotb.test()
async def test_sender_vc_independence(dut):
    """The response VC's receiver stops returning credits: that VC sends exactly its credits and stops,
    while the request VC carries on at full rate; released, the response VC drains (its buffered credits
    come back 3 per cycle, the most a cycle's ``credit`` carries)."""
    env = SenderEnv(dut, batch=3)
    await env.cycler.start()   # traffic is queued after reset
    rng = tbenv.rng("traffic")
    k = 60
    env.sink.withhold(1)
    for v in range(N_VCS):
        for b in random_flits(rng, k, env.W):
            env.drvs[v].send(b)
    await env.cycler.until(lambda: env.drvs[0].idle and env.sb.outstanding == 0,
                           timeout=20 * k, what="the request VC done")
    await env.cycler.cycles(5)
    assert env.sb.count[1] == env.credits[1], (env.sb.count[1], env.credits[1])
    assert env.sb.count[0] == k
    assert int(getattr(dut, "credits_left__1").value) == 0
    env.sink.withhold(1, on=False)
    await env.drain(timeout=20 * k)
    assert env.sb.count[1] == k
