"""cocotb testbench of :class:`hw.switch.fill_bypass.FillBypassReceiver`.

A :class:`~verif.harness.vc_link.VcLinkSource` sends random flits on VC 0 and random packets on VC 1, some
of them ``TLB_FILL_RESP`` (header-only, or longer: the class is the opcode's); the three outputs ``o[0]``,
``o[1]`` and ``fill`` stall at random. :class:`LaneModel`, a cycle model of the three FIFOs run after every
cycle, sorts each flit that arrives into its lane (VC 0; VC 1 by its packet's head flit, held to
``last``), and checks every cycle that each output's ``valid`` is exactly its FIFO's occupancy and that
the credits returned are the flits that left (VC 1: ``o[1]`` and ``fill`` together); each lane's flits are
compared bit for bit and in order on a scoreboard. The source ignores its credits in the overflow case,
where the model counts the drops (and the poison that follows them up to the next ``last``).

Settings (``DYSHARP_ENV``): ``packets`` (per VC), ``gap``, ``stall``.
"""

import cocotb

from hw.packet import VC_RESP, Flit, Opcode, flit_layout, pack_flit, unpack_flit

from verif.harness import tbenv
from verif.harness.cycler import Cycler
from verif.harness.scoreboard import Scoreboard
from verif.harness.stream import StreamMonitor
from verif.harness.structs import Port
from verif.harness.vc_link import VcLinkSource, credit_field

FILL = Opcode.TLB_FILL_RESP.value
LANES = ("o__0", "o__1", "fill")


def random_packet(rng, w, *, fill):
    """Flits of one VC 1 packet: a fill answer (mostly header-only) or another response, 1..17 flits."""
    n = (1 if rng.random() < 0.8 else rng.randint(2, 3)) if fill else rng.randint(1, 17)
    op = FILL if fill else rng.choice([o for o in range(16) if o != FILL])
    words = [(rng.getrandbits(w - 4) << 4) | op] + [rng.getrandbits(w) for _ in range(n - 1)]
    return [Flit(x, k == n - 1, rng.random() < 0.03) for k, x in enumerate(words)]


class LaneModel:
    """The receiver's three FIFOs as a cycle model (a :class:`Cycler` watcher)."""

    def __init__(self, dut, depth, sb, w):
        self.depth, self.sb = depth, sb
        self.valid, self.vc, self.flit, self.credit = (Port(getattr(dut, f"link__{n}"))
                                                       for n in ("valid", "vc", "flit", "credit"))
        self.o_valid = [Port(getattr(dut, f"{n}__valid")) for n in LANES]
        self.level, self.popped, self.spoil = [0] * 3, [0] * 3, [False] * 3
        self.mid, self.held = False, False
        lay = flit_layout(w)
        self._last, self._poison = 1 << lay["last"].offset, 1 << lay["poison"].offset
        self.overflows = self.accepted = 0

    def pop(self, lane):
        self.popped[lane] += 1

    def __call__(self, cycle):
        credit = self.credit.read()
        for k in range(3):
            assert self.o_valid[k].high() == (self.level[k] > 0), \
                f"cycle {cycle}: {LANES[k]}.valid={int(self.o_valid[k].high())} with {self.level[k]} flit(s) buffered"
        for v, want in ((0, self.popped[0]), (1, self.popped[1] + self.popped[2])):
            assert credit_field(credit, v) == want, f"cycle {cycle}: VC {v} returned {credit_field(credit, v)}, " \
                                                    f"{want} flit(s) left"
        if self.valid.high():
            bits = self.flit.read()
            lane = 0
            if self.vc.read() == VC_RESP:
                fill = self.held if self.mid else (bits & 0xF) == FILL
                self.mid, self.held = not bits & self._last, fill
                lane = 2 if fill else 1
            if self.level[lane] < self.depth:
                self.sb.expect(lane, bits | (self._poison if self.spoil[lane] else 0))
                if bits & self._last:
                    self.spoil[lane] = False
                self.level[lane] += 1
                self.accepted += 1
            else:
                self.overflows += 1
                self.spoil[lane] = True
        for k in range(3):
            self.level[k] -= self.popped[k]
            self.popped[k] = 0


class Env:
    def __init__(self, dut, *, gap=0.0, stall=0.0, ignore_credits=False):
        p = tbenv.params()
        self.dut, self.w, self.depth = dut, p["flit_width"], p["credits"]
        self.cycler = Cycler(dut)
        self.sb = Scoreboard("fill_bypass_receiver")
        self.mons = [StreamMonitor(dut, n, tbenv.rng(f"stall{k}"), stall=stall, burst=3.0,
                                   on_item=lambda bits, cyc, k=k: self._out(k, bits, cyc))
                     for k, n in enumerate(LANES)]
        self.src = VcLinkSource(dut, "link", tbenv.rng("src"), credits=self.depth, flit_width=self.w, gap=gap,
                                burst=2.0, ignore_credits=ignore_credits)
        self.model = LaneModel(dut, self.depth, self.sb, self.w)
        self.cycler.add(self.src, *self.mons)
        self.cycler.watchers.append(self.model)
        self.out = [0] * 3

    def _out(self, lane, bits, cycle):
        self.sb.observe(lane, bits, cycle=cycle)
        self.model.pop(lane)
        self.out[lane] += 1

    def traffic(self, rng, n):
        for _ in range(n):
            self.src.send([Flit(rng.getrandbits(self.w), rng.random() < 0.3, rng.random() < 0.03)], vc=0)
            self.src.send(random_packet(rng, self.w, fill=rng.random() < 0.4), vc=VC_RESP)

    async def drain(self, timeout):
        await self.cycler.until(lambda: self.src.idle and self.sb.outstanding == 0, timeout=timeout,
                                what="every accepted flit out")
        await self.cycler.cycles(3)
        self.sb.finish()


@cocotb.test()
async def test_random(dut):
    """Random traffic within the credits, random gaps, bursty stalls on every output: every flit in its
    lane, bits and order exact, credits exact (the source holds all of them again at the end)."""
    s = tbenv.settings()
    env = Env(dut, gap=s.get("gap", 0.3), stall=s.get("stall", 0.4))
    await env.cycler.start()
    env.traffic(tbenv.rng("traffic"), s.get("packets", 300))
    await env.drain(timeout=100 * s.get("packets", 300))
    assert env.model.overflows == 0 and int(dut.overflows.value) == 0
    assert env.src.credits == [env.depth, env.depth], env.src.credits
    assert min(env.out) > 0, env.out


@cocotb.test()
async def test_overflow(dut):
    """The source ignores its credits while the outputs stall: the flits that find their lane full are
    dropped and counted exactly as the model says; the lane is poisoned to the next ``last``."""
    s = tbenv.settings()
    env = Env(dut, stall=0.7, ignore_credits=True)
    await env.cycler.start()
    env.traffic(tbenv.rng("traffic"), s.get("packets", 150))
    await env.drain(timeout=100 * s.get("packets", 150))
    assert env.model.overflows > 0, "the test did not overflow a lane"
    assert int(dut.overflows.value) == env.model.overflows, (int(dut.overflows.value), env.model.overflows)


class _Shut:
    def open(self):
        return False


@cocotb.test()
async def test_fills_pass_a_stalled_lane(dut):
    """``o[1]`` stalled with a response in it: 40 fill answers behind that response all come out on
    ``fill`` (the credits of the flits that left come back); then ``o[1]`` delivers its response."""
    env = Env(dut)
    gate = env.mons[1].gate
    env.mons[1].gate = _Shut()
    await env.cycler.start()
    rng = tbenv.rng("traffic")
    n = env.depth - 1          # a response that fits in its lane and leaves a credit for the fills
    words = [(rng.getrandbits(env.w - 4) << 4) | Opcode.READ_RESP.value] + [rng.getrandbits(env.w)
                                                                           for _ in range(n - 1)]
    env.src.send([Flit(x, k == n - 1) for k, x in enumerate(words)], vc=VC_RESP)
    for _ in range(40):
        env.src.send([Flit((rng.getrandbits(env.w - 4) << 4) | FILL, True)], vc=VC_RESP)
    await env.cycler.until(lambda: env.out[2] == 40, timeout=400, what="40 fill answers past the stalled o[1]")
    assert env.out[1] == 0 and env.model.level[1] == n, (env.out, env.model.level)
    env.mons[1].gate = gate
    await env.drain(timeout=200)
    assert env.out == [0, n, 40], env.out
