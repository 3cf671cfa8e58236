"""cocotb testbench of the memory manager (:mod:`hw.gpu_nic.memory_manager`).

* ``test_random``: random backing reads (dispatch groups that allocate, combine groups that look up,
  sharing layouts; foreign sources; out-of-range indices; unbound groups), random epoch resets and
  rebinding, random stalls on every stream; every output is compared with
  :class:`verif.models.memory_manager.MemoryManagerModel` in every cycle (lockstep).
* ``test_directed``: the layout contract asserted explicitly: compact slots in arrival order, the same
  slot on a repeat, combine finds dispatch's slot at its own base, another source is refused, full ->
  ``BUFFER_FULL`` with nothing overwritten, an epoch reset releases everything, an epoch wrap clears
  the table.
"""

import collections

import cocotb

from hw.gpu_nic.memory_manager import MmCommand, MmCounter
from hw.packet import ErrorCode
from hw.switch.backing_if import BackingRequest, BackingResponse

from verif.harness import tbenv
from verif.harness.cycler import Agent, Cycler
from verif.models.memory_manager import EPOCH_RESET, SET_GROUP, MemoryManagerModel, MmInputs, MmOutputs
from verif.harness.stream import StreamDriver, StreamMonitor
from verif.harness.structs import pack, unpack

N = len(MmCounter)
NONE = ErrorCode.NONE.value


def pack_cmd(op, group=0, valid=0, alloc=0, layout=0, base=0, stride=0):
    return pack(MmCommand, op=op, group=group, valid=valid, alloc=alloc, layout=layout, base=base,
                stride=stride)


def read_counters(dut):
    bits = int(dut.counters.value)
    return [(bits >> (32 * c)) & 0xFFFFFFFF for c in range(N)]


class MmLockstep(Agent):
    def __init__(self, dut, model):
        self.dut = dut
        self.model = model
        self.history = collections.deque(maxlen=6)
        self.checked = 0

    def sample(self, cycle):
        d = self.dut
        i = MmInputs(req_valid=int(d.mem__req__valid.value), resp_ready=int(d.mem__resp__ready.value),
                     cfg_valid=int(d.cfg__valid.value))
        if i.req_valid:
            r = unpack(BackingRequest, d.mem__req__payload.value)
            i.req = (r["group"], r["index"], r["dst"], r["src"], r["tag"])
        if i.cfg_valid:
            c = unpack(MmCommand, d.cfg__payload.value)
            i.cfg = (c["op"], c["group"], c["valid"], c["alloc"], c["layout"], c["base"], c["stride"])
        got = MmOutputs(req_ready=int(d.mem__req__ready.value), resp_valid=int(d.mem__resp__valid.value),
                        resp=None, cfg_ready=int(d.cfg__ready.value), counters=read_counters(d))
        if got.resp_valid:
            r = unpack(BackingResponse, d.mem__resp__payload.value)
            got.resp = (r["addr"], r["code"], r["tag"])
        exp = self.model.step(i)
        self.history.append((cycle, i, got))
        if got != exp:
            diffs = [f"{f}: expected {getattr(exp, f)} got {getattr(got, f)}"
                     for f in ("req_ready", "resp_valid", "resp", "cfg_ready") if getattr(exp, f) != getattr(got, f)]
            diffs += [f"counter {c.name}: expected {exp.counters[c]} got {got.counters[c]}"
                      for c in MmCounter if exp.counters[c] != got.counters[c]]
            ctx = "\n".join(f"  cycle {c}: {inp}\n     -> {o}" for c, inp, o in self.history)
            raise AssertionError(f"memory manager differs from the model at cycle {cycle}: "
                                 f"{'; '.join(diffs)}\nrecent cycles:\n{ctx}")
        self.checked += 1


class MmEnv:
    def __init__(self, dut, *, gap=0.0, stall=0.0):
        p = tbenv.params()
        self.p = p
        self.cycler = Cycler(dut)
        self.model = MemoryManagerModel(**{k: p[k] for k in ("groups", "layouts", "index_bits", "slots",
                                                              "epoch_bits")})
        self.answers = []
        self.req = StreamDriver(dut, "mem__req", tbenv.rng("req"), gap=gap)
        self.resp = StreamMonitor(dut, "mem__resp", tbenv.rng("resp"), stall=stall,
                                  on_item=lambda b, c: self.answers.append(unpack(BackingResponse, b)))
        self.cfg = StreamDriver(dut, "cfg", tbenv.rng("cfg"), gap=gap)
        self.lockstep = MmLockstep(dut, self.model)
        self.cycler.add(self.req, self.resp, self.cfg, self.lockstep)
        self.dut = dut
        self.tag = 0

    def read(self, group, index, src):
        self.tag = (self.tag + 1) % 256
        self.req.send(pack(BackingRequest, group=group, index=index, dst=0, src=src, tag=self.tag))

    def command(self, *args, **kw):
        self.cfg.send(pack_cmd(*args, **kw))

    async def settle(self, timeout=5000):
        await self.cycler.until(lambda: self.req.idle and self.cfg.idle and self.model.state == 0,
                                timeout=timeout, what="memory manager idle")
        await self.cycler.cycles(2)


@cocotb.test()
async def test_random(dut):
    s = tbenv.settings()
    env = MmEnv(dut, gap=s.get("gap", 0.3), stall=s.get("stall", 0.3))
    p = env.p
    rng = tbenv.rng("mm")
    await env.cycler.start()
    L = p["layouts"]
    # dispatch group 2k and combine group 2k+1 on layout k, plus one unbound handle
    for k in range(min(L, p["groups"] // 2)):
        env.command(SET_GROUP, 2 * k, 1, 1, k, 0x1000 * (k + 1), 14)
        env.command(SET_GROUP, 2 * k + 1, 1, 0, k, 0x80000 * (k + 1), 28)
    rows = 1 << p["index_bits"]
    for _ in range(s.get("requests", 600)):
        r = rng.random()
        group = rng.randrange(min(p["groups"], 2 * L) + 1)
        index = rows + rng.randrange(4) if r < 0.05 else rng.randrange(min(rows, 3 * p["slots"] // 2))
        src = rng.choice([1, 1, 1, 2])
        env.read(group, index, src)
        if rng.random() < s.get("p_reset", 0.03):
            env.command(EPOCH_RESET, layout=rng.randrange(L + (1 if rng.random() < 0.2 else 0)))
        if rng.random() < 0.01:
            env.command(SET_GROUP, rng.randrange(p["groups"] + 1), rng.randrange(2), rng.randrange(2),
                        rng.randrange(L + 1), rng.getrandbits(40), rng.randrange(3))
        if len(env.req.queue) > 6:
            await env.cycler.until(lambda: len(env.req.queue) < 3, timeout=2000, what="request queue")
    await env.settle(timeout=50000)
    c = {m.name: v for m, v in zip(MmCounter, read_counters(dut))}
    dut._log.info(f"{env.lockstep.checked} cycles in lockstep; {len(env.answers)} answers; counters {c}")
    for name in ("ALLOCATED", "FOUND", "TLB_FAULT", "ISOLATION", "OUT_OF_BOUNDS", "EPOCH_RESETS"):
        assert c[name] > 0, f"never exercised {name}"
    if p["epoch_bits"] <= 2:
        assert c["SWEEPS"] > 0
    if p["slots"] < rows:
        assert c["BUFFER_FULL"] > 0


@cocotb.test()
async def test_directed(dut):
    env = MmEnv(dut, gap=0.2, stall=0.2)
    p = env.p
    await env.cycler.start()
    base_d, base_c, stride_d, stride_c = 0x10_0000, 0x80_0000, 448, 896     # 7168-B and 14336-B rows
    env.command(SET_GROUP, 3, 1, 1, 1, base_d, stride_d)    # dispatch group 3 on layout 1
    env.command(SET_GROUP, 4, 1, 0, 1, base_c, stride_c)    # combine group 4 on layout 1

    async def ask(*reqs):
        start = len(env.answers)
        for r in reqs:
            env.read(*r)
        await env.settle()
        return [(a["addr"], a["code"]) for a in env.answers[start:]]

    order = [9, 2, 7, 300 % (1 << p["index_bits"]), 5]
    got = await ask(*[(3, i, 1) for i in order])
    assert got == [(base_d + s * stride_d * 16, NONE) for s in range(len(order))], got   # compact, in order
    got = await ask((3, 7, 1), (4, 7, 1), (4, 9, 1))
    assert got == [(base_d + 2 * stride_d * 16, NONE), (base_c + 2 * stride_c * 16, NONE),
                   (base_c + 0, NONE)], got                                              # combine finds it
    got = await ask((4, 8, 1), (3, 7, 2), (5, 1, 1), (3, 1 << p["index_bits"], 1))
    assert [c for _, c in got] == [ErrorCode.TLB_FAULT.value, ErrorCode.ISOLATION.value,
                                   ErrorCode.TLB_FAULT.value, ErrorCode.OUT_OF_BOUNDS.value], got
    # Fill the layout: the allocation after the last slot is refused, earlier slots keep their rows.
    free = p["slots"] - len(order)
    fresh = [i for i in range(1 << p["index_bits"]) if i not in order][:free + 1]
    got = await ask(*[(3, i, 1) for i in fresh])
    assert all(c == NONE for _, c in got[:free]) and got[free] == (0, ErrorCode.BUFFER_FULL.value), got[-3:]
    got = await ask((3, 9, 1), (4, fresh[free], 1))
    assert got == [(base_d, NONE), (0, ErrorCode.TLB_FAULT.value)], got
    # Epoch reset: everything released, slots start again from 0.
    env.command(EPOCH_RESET, layout=1)
    got = await ask((4, 9, 1), (3, 20, 1), (3, 9, 1))
    assert got == [(0, ErrorCode.TLB_FAULT.value), (base_d, NONE), (base_d + stride_d * 16, NONE)], got
    # Wrap the epoch counter: the table is cleared, so an entry from 2**epoch_bits epochs ago is not
    # mistaken for a current one.
    for _ in range(1 << p["epoch_bits"]):     # back to the epoch index 20 was written in
        env.command(EPOCH_RESET, layout=1)
        await env.settle()
    got = await ask((4, 20, 1))
    assert got == [(0, ErrorCode.TLB_FAULT.value)], got
    c = {m.name: v for m, v in zip(MmCounter, read_counters(dut))}
    assert c["SWEEPS"] == 1 and c["BUFFER_FULL"] == 1, c
    dut._log.info(f"directed checks passed; counters {c}")
