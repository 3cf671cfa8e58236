"""cocotb testbench of the CAM core (:mod:`hw.switch.cam`) against :class:`verif.models.cam.CamCycleModel`.

Every cycle the driver presents a random lookup and a random write command (insert, invalidate one key,
flush by the key's upper field, random masks); in the same cycle the model is stepped with exactly those
inputs and every output of the DUT (result and write-port outputs) must equal the model's, cycle by cycle.
Directed tests pin the same-cycle lookup/insert and lookup/invalidate results and the replacement order
independently of the model.

Settings (``DYSHARP_ENV``): ``cycles``, ``keys`` (distinct keys in the random stream), ``p_lookup``,
``p_write``.
"""

import dataclasses

import cocotb

from verif.harness import tbenv
from verif.models.cam import INSERT, INVALIDATE, CamCycleModel, CamOutputs
from verif.harness.cycler import Agent, Cycler

OUTPUTS = [f.name for f in dataclasses.fields(CamOutputs)]


class CamLockstep(Agent):
    """Drives one (lookup, write) pair per cycle from a script or a generator and checks every output
    against the cycle model in the same cycle."""

    def __init__(self, dut, p):
        self.dut = dut
        self.model = CamCycleModel(p["entries"], p["key_width"], p["value_width"])
        self.kw = p["key_width"]
        self.script = []            # list of (lookup or None, write or None) for the coming cycles
        self.gen = None
        self.current = (None, None)
        self.history = []           # recent (cycle, inputs, outputs)
        self.observed = []          # (cycle, CamOutputs) of every cycle
        self.checked = 0
        self._idle()

    def _idle(self):
        d = self.dut
        d.lookup_valid.value = 0
        d.lookup_key.value = 0
        d.write_valid.value = 0
        d.write_op.value = 0
        d.write_key.value = 0
        d.write_mask.value = 0
        d.write_value.value = 0

    def drive(self, cycle):
        if cycle == 0:              # during reset: no sample() follows, so the model must not see it
            self._idle()
            return
        if self.script:
            lookup, write = self.script.pop(0)
        elif self.gen is not None:
            lookup, write = self.gen()
        else:
            lookup, write = None, None
        d = self.dut
        d.lookup_valid.value = int(lookup is not None)
        d.lookup_key.value = lookup or 0
        d.write_valid.value = int(write is not None)
        if write is not None:
            op, key, mask, value = write
            d.write_op.value = op
            d.write_key.value = key
            d.write_mask.value = mask
            d.write_value.value = value
        self.current = (lookup, write)

    def sample(self, cycle):
        d = self.dut
        got = CamOutputs(**{name: int(getattr(d, name).value) for name in OUTPUTS})
        exp = self.model.step(*self.current)
        self.history = (self.history + [(cycle, self.current, got)])[-6:]
        self.observed.append((cycle, got))
        if got != exp:
            diffs = ", ".join(f"{n}: expected {getattr(exp, n):#x} got {getattr(got, n):#x}"
                              for n in OUTPUTS if getattr(exp, n) != getattr(got, n))
            ctx = "\n".join(f"  cycle {c}: inputs {i} outputs {o}" for c, i, o in self.history)
            raise AssertionError(f"CAM output mismatch at cycle {cycle}: {diffs}\nrecent cycles:\n{ctx}")
        self.checked += 1


def random_stream(rng, p, settings):
    kw, vw, entries = p["key_width"], p["value_width"], p["entries"]
    n_keys = settings.get("keys", 2 * entries)
    field_bits = min(3, kw)
    field_shift = kw - field_bits
    keys = rng.sample(range(1 << kw), min(n_keys, 1 << kw)) if kw < 20 else \
        [rng.getrandbits(kw) for _ in range(n_keys)]
    p_lookup, p_write = settings.get("p_lookup", 0.7), settings.get("p_write", 0.5)
    all_ones = (1 << kw) - 1
    field_mask = ((1 << field_bits) - 1) << field_shift

    def gen():
        lookup = rng.choice(keys) if rng.random() < p_lookup else None
        write = None
        if rng.random() < p_write:
            r = rng.random()
            key = rng.choice(keys)
            if r < 0.75:
                write = (INSERT, key, rng.getrandbits(kw), rng.getrandbits(vw))   # mask ignored on insert
            elif r < 0.92:
                write = (INVALIDATE, key, all_ones, rng.getrandbits(vw))
            else:
                write = (INVALIDATE, key, field_mask if r < 0.97 else rng.getrandbits(kw), 0)
        # make same-cycle collisions frequent
        if lookup is not None and write is not None and rng.random() < 0.2:
            write = (write[0], lookup, write[2], write[3])
        return lookup, write
    return gen


@cocotb.test()
async def test_random(dut):
    """Random lookup/insert/invalidate/flush streams, checked cycle by cycle against the model."""
    p, s = tbenv.params(), tbenv.settings()
    cyc = Cycler(dut)
    agent = CamLockstep(dut, p)
    cyc.add(agent)
    agent.gen = random_stream(tbenv.rng("cam"), p, s)
    await cyc.start()
    await cyc.cycles(s.get("cycles", 2000))
    agent.gen = None
    await cyc.cycles(4)
    hits = sum(o.result_hit for _, o in agent.observed)
    evictions = sum(o.write_evicted for _, o in agent.observed)
    lookups = sum(o.result_valid for _, o in agent.observed)
    dut._log.info(f"{agent.checked} cycles checked; {lookups} lookups, {hits} hits, {evictions} evictions")
    # The stream must have exercised what it claims to (a test that cannot fail is a defect).
    assert hits > lookups // 10 and lookups - hits > lookups // 10, (hits, lookups)
    assert evictions > 0, "no eviction happened: the PLRU path was not exercised"


@cocotb.test()
async def test_directed(dut):
    """Same-cycle lookup+insert / lookup+invalidate results and PLRU order, asserted explicitly."""
    p = tbenv.params()
    E, kw = p["entries"], p["key_width"]
    all_ones = (1 << kw) - 1
    cyc = Cycler(dut)
    agent = CamLockstep(dut, p)
    cyc.add(agent)
    await cyc.start()

    async def run(script, extra=4):
        start = cyc.cycle + 1
        agent.script.extend(script)
        await cyc.cycles(len(script) + extra)
        return [o for c, o in agent.observed if c >= start]

    def res(outs, i):
        return outs[i + 2]               # result of the script's cycle i appears two cycles later

    # 1. lookup and insert of the same key in the same cycle: the lookup sees the insert.
    outs = await run([(5, (INSERT, 5, 0, 0xAA))])
    r = res(outs, 0)
    assert (r.result_valid, r.result_hit, r.result_value) == (1, 1, 0xAA), r
    assert outs[1].write_done and outs[1].write_index == 0 and not outs[1].write_hit
    # 2. lookup in cycle t, insert of that key in t+1: forwarded into stage 2.
    outs = await run([(9, None), (None, (INSERT, 9, 0, 0xBB))])
    r = res(outs, 0)
    assert (r.result_hit, r.result_value, r.result_index) == (1, 0xBB, 1), r
    # 3. update in place: same index, new value, write_hit set.
    outs = await run([(None, (INSERT, 5, 0, 0xCC)), (5, None)])
    assert outs[1].write_hit and outs[1].write_index == 0
    assert (res(outs, 1).result_hit, res(outs, 1).result_value) == (1, 0xCC)
    # 4. lookup and invalidate of the same key in the same cycle: miss; one cycle later: miss too.
    outs = await run([(5, (INVALIDATE, 5, all_ones, 0)), (9, None), (None, (INVALIDATE, 9, all_ones, 0))])
    assert res(outs, 0).result_valid and not res(outs, 0).result_hit
    assert not res(outs, 1).result_hit, "invalidate in stage 2 must cancel the hit"
    # 5. fill every entry, touch entry 3 by a hit, then the next insert must evict the PLRU victim,
    #    which is never the most recently used entry.
    script = [(None, (INSERT, 0x100 + i, 0, i)) for i in range(E)]
    outs = await run(script)
    assert [o.write_index for o in outs[1:E + 1]] == list(range(E))
    outs = await run([(0x103, None), (None, None), (None, (INSERT, 0x999, 0, 7))])
    assert res(outs, 0).result_hit and res(outs, 0).result_index == 3
    w = outs[3]
    assert w.write_evicted and w.write_index != 3, w
    # 6. flush by field: keys 0x100.. share the upper field with nothing else inserted here.
    field_shift = kw - min(3, kw)
    mask = ((1 << min(3, kw)) - 1) << field_shift
    outs = await run([(None, (INVALIDATE, 0x100, mask, 0)), (0x105, None), (0x999, None)])
    assert outs[1].write_hit
    hit_999 = (0x999 & mask) == (0x100 & mask)
    assert not res(outs, 1).result_hit and bool(res(outs, 2).result_hit) != hit_999
    dut._log.info(f"directed checks passed ({agent.checked} cycles checked against the model too)")
