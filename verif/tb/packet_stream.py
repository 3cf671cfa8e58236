"""cocotb testbench of :mod:`hw.packet_stream`: ``packet_merge`` (:class:`PacketMerge`, registered with
``n_in=3``) and ``packet_split`` (:class:`VcClassSplit`: requests to ``o[0]``, responses to ``o[1]``).

* Merge: random packets (1..6 flits, random bits, rare ``poison``) on every input with random ``valid``
  gaps, random bursty ``ready`` stalls on ``o``. :class:`MergeModel` checks every cycle, exactly: which
  input owns ``o`` (round robin from the input after the last winner, or lowest index first with
  ``priority``), that ``o`` carries that input's offered flit bit for bit, that exactly the owner's
  flit is taken when ``o`` is, that a started packet keeps ``o`` until its ``last`` (no interleaving),
  and that ``o.valid`` is high whenever a head is waiting and ``o`` is free (work conserving). The
  drivers' queues give per-input order; nothing lost or duplicated (counts at the end).
* Split: random packets of every opcode value (unknown ones included) through one input; each flit must
  come out, bit for bit and in order, on the output :func:`hw.packet.vc_of` of its packet's opcode says.
* Full rate: with no gaps and no stalls, F flits leave in F consecutive cycles (zero latency).

Settings (``DYSHARP_ENV``): ``packets`` (per input), ``gap``, ``stall``.
"""

import cocotb

from hw.packet import Flit, pack_flit, vc_of

from verif.harness import tbenv
from verif.harness.cycler import Cycler
from verif.harness.scoreboard import Scoreboard
from verif.harness.stream import StreamDriver, StreamMonitor, record_cycles
from verif.harness.structs import Port


def random_packet(rng, *, flit_width=128, opcode=None, max_flits=6):
    """A packet as packed flit ints: ``opcode`` (random 0..15 if None) in the head's low 4 bits."""
    n = rng.randint(1, max_flits)
    flits = []
    for k in range(n):
        data = rng.getrandbits(flit_width)
        if k == 0:
            op = rng.randrange(16) if opcode is None else opcode
            data = (data & ~0xF) | op
        flits.append(pack_flit(Flit(data, k == n - 1, k == n - 1 and rng.random() < 0.05), flit_width))
    return flits


def _last(bits, flit_width):
    return (bits >> flit_width) & 1


class MergeModel:
    """Cycle model of the merge's arbitration and ownership (a :class:`Cycler` watcher)."""

    def __init__(self, dut, n, flit_width, priority):
        self.n = n
        self.W = flit_width
        self.priority = priority
        self.iv = [Port(getattr(dut, f"i__{k}__valid")) for k in range(n)]
        self.ip = [Port(getattr(dut, f"i__{k}__payload")) for k in range(n)]
        self.ir = [Port(getattr(dut, f"i__{k}__ready")) for k in range(n)]
        self.ov = Port(dut.o__valid)
        self.op = Port(dut.o__payload)
        self.orr = Port(dut.o__ready)
        self.locked = False
        self.owner = 0
        self.ptr = 0
        self.packets = 0
        self.grants = []          # input of each packet, in order

    def __call__(self, cycle):
        valid = [p.high() for p in self.iv]
        if self.locked:
            sel = self.owner
        elif any(valid):
            order = range(self.n) if self.priority else [(self.ptr + j) % self.n for j in range(self.n)]
            sel = next(k for k in order if valid[k])
        else:
            sel = None
        ov = self.ov.high()
        exp_valid = sel is not None and valid[sel]
        assert ov == exp_valid, f"cycle {cycle}: o.valid={int(ov)}, expected {int(exp_valid)} " \
                                f"(owner {sel}, locked {self.locked}, input valid {valid})"
        o_ready = self.orr.high()
        for k in range(self.n):
            if not valid[k]:
                continue          # ready without valid transfers nothing
            exp = int(k == sel and o_ready)
            assert int(self.ir[k].high()) == exp, f"cycle {cycle}: i[{k}].ready={int(self.ir[k].high())}, " \
                                                  f"expected {exp} (owner {sel})"
        if not ov:
            return
        bits = self.op.read()
        assert bits == self.ip[sel].read(), f"cycle {cycle}: o carries {bits:#x}, not input {sel}'s flit"
        if not self.locked:
            self.ptr = (sel + 1) % self.n
            self.grants.append(sel)
        done = o_ready and _last(bits, self.W)
        self.locked = not done
        self.owner = sel
        if done:
            self.packets += 1


class MergeEnv:
    def __init__(self, dut, *, gap=0.0, stall=0.0):
        p = tbenv.params()
        self.n = p["n_in"]
        self.W = p["flit_width"]
        self.cycler = Cycler(dut)
        self.sb = Scoreboard("packet_merge")
        self.taken = []      # (input, bits) accepted this cycle
        self.drvs = [StreamDriver(dut, f"i__{k}", tbenv.rng(f"gap{k}"), gap=gap, burst=2.0,
                                  on_accept=lambda bits, cyc, k=k: self.taken.append((k, bits)))
                     for k in range(self.n)]
        self.mon = StreamMonitor(dut, "o", tbenv.rng("stall"), stall=stall, burst=3.0, on_item=self._out)
        self.model = MergeModel(dut, self.n, self.W, p["priority"])
        self.cycler.add(*self.drvs, self.mon)
        self.cycler.watchers.append(self.model)
        self.cycler.watchers.append(self._check)
        self.out = []
        self.queued = [0] * self.n

    def _out(self, bits, cycle):
        self.out.append(bits)

    def _check(self, cycle):
        # Exactly one input flit taken per output flit, and it is the same flit (nothing lost or doubled).
        assert len(self.taken) == len(self.out) <= 1, f"cycle {cycle}: {len(self.taken)} input flit(s) " \
                                                      f"taken, {len(self.out)} output flit(s)"
        if self.out:
            assert self.taken[0][1] == self.out[0], f"cycle {cycle}: output flit is not the one taken"
            self.sb.observe(self.taken[0][0], self.out[0], cycle=cycle)
        self.taken.clear()
        self.out.clear()

    def send(self, k, flits):
        for b in flits:
            self.drvs[k].send(b)
            self.sb.expect(k, b)      # per-input order
        self.queued[k] += 1

    async def drain(self, timeout):
        await self.cycler.until(lambda: self.sb.outstanding == 0, timeout=timeout, what="every flit merged")
        self.sb.finish()
        assert self.model.packets == sum(self.queued), (self.model.packets, self.queued)


@cocotb.test()
async def test_merge_random(dut):
    s = tbenv.settings()
    env = MergeEnv(dut, gap=s.get("gap", 0.4), stall=s.get("stall", 0.3))
    await env.cycler.start()
    rng = tbenv.rng("traffic")
    n = s.get("packets", 120)
    for _ in range(n):
        for k in range(env.n):
            env.send(k, random_packet(rng, flit_width=env.W))
    await env.drain(timeout=60 * n * env.n)


@cocotb.test()
async def test_merge_full_rate(dut):
    """Every input saturated, o never stalled: F flits in F consecutive cycles, and the grants follow
    the arbitration (round robin: inputs in rotation; priority: input 0's packets first)."""
    env = MergeEnv(dut)
    await env.cycler.start()
    rng = tbenv.rng("traffic")
    flits = 0
    for _ in range(20):
        for k in range(env.n):
            pkt = random_packet(rng, flit_width=env.W)
            flits += len(pkt)
            env.send(k, pkt)
    cycles = record_cycles(env.mon, "on_item")
    await env.drain(timeout=10 * flits)
    assert len(cycles) == flits and cycles[-1] - cycles[0] == flits - 1, \
        f"{flits} flits over {cycles[-1] - cycles[0] + 1} cycles"
    if env.model.priority:
        assert env.model.grants[:20] == [0] * 20, env.model.grants[:25]
    else:
        assert env.model.grants == [j % env.n for j in range(20 * env.n)], env.model.grants[:12]


# ---------------------------------------------------------------------------------------------------------
# PacketSplit (VcClassSplit)

class SplitEnv:
    def __init__(self, dut, *, gap=0.0, stall=0.0):
        p = tbenv.params()
        self.W = p["flit_width"]
        self.cycler = Cycler(dut)
        self.sb = Scoreboard("packet_split")
        self.drv = StreamDriver(dut, "i", tbenv.rng("gap"), gap=gap, burst=2.0)
        self.mons = [StreamMonitor(dut, f"o__{k}", tbenv.rng(f"stall{k}"), stall=stall, burst=3.0,
                                   on_item=lambda bits, cyc, k=k: self.sb.observe(k, bits, cycle=cyc))
                     for k in range(2)]
        self.cycler.add(self.drv, *self.mons)

    def send(self, flits):
        out = vc_of(flits[0] & 0xF)
        for b in flits:
            self.drv.send(b)
            self.sb.expect(out, b)

    async def drain(self, timeout):
        await self.cycler.until(lambda: self.sb.outstanding == 0, timeout=timeout, what="every flit split")
        self.sb.finish()


@cocotb.test()
async def test_split_random(dut):
    s = tbenv.settings()
    env = SplitEnv(dut, gap=s.get("gap", 0.3), stall=s.get("stall", 0.4))
    await env.cycler.start()
    rng = tbenv.rng("traffic")
    n = s.get("packets", 300)
    for _ in range(n):
        env.send(random_packet(rng, flit_width=env.W))
    await env.drain(timeout=60 * n)
    assert env.sb.count[0] and env.sb.count[1], dict(env.sb.count)


@cocotb.test()
async def test_split_full_rate(dut):
    env = SplitEnv(dut)
    await env.cycler.start()
    rng = tbenv.rng("traffic")
    flits = 0
    for _ in range(60):
        pkt = random_packet(rng, flit_width=env.W)
        flits += len(pkt)
        env.send(pkt)
    cycles = [record_cycles(m, "on_item") for m in env.mons]
    await env.drain(timeout=10 * flits)
    c = sorted(cycles[0] + cycles[1])
    assert len(c) == flits and c[-1] - c[0] == flits - 1, f"{flits} flits over {c[-1] - c[0] + 1} cycles"
