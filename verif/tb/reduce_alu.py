"""cocotb testbench of the reduction ALU (:mod:`hw.switch.reduce_alu`) against :mod:`verif.models.reduce_ref`.

Every output flit (new fp32/int32 partial and the result in the element type) is compared bit-exactly
with the numpy reference through an ordered scoreboard. Inputs come with random ``valid`` gaps and the
output with random ``ready`` stalls (settings ``gap``/``stall``; 0 for the bulk runs).

Tests:

* ``test_special_matrix``: for every element type and op, every pair of special values (both signs of
  zero, smallest/largest subnormal, smallest/largest normal, one, inf, quiet/signalling NaN and a few
  ordinary values; boundary values for ints) as (partial, contribution), plus each special as a first
  contribution (``first``).
* ``test_random``: ``pairs`` random operand pairs per element type (ops random per flit): partials that
  are widened elements, arbitrary fp32 bit patterns, or close to the contribution (cancellation), and 5%
  first contributions. ``etypes`` restricts the types.
* ``test_chain``: back-to-back reductions through the ``chain`` operand, checked against a sequential
  reduction in arrival order.
"""

import dataclasses
import time

import cocotb
import numpy as np
from amaranth.lib import data

from hw.packet import EType, RedOp
from hw.switch.reduce_alu import LATENCY, alu_in_layout, alu_out_layout

from verif.models import reduce_ref as R
from verif.harness import tbenv
from verif.harness.cycler import Cycler
from verif.harness.scoreboard import Scoreboard
from verif.harness.stream import StreamDriver, StreamMonitor


@dataclasses.dataclass
class AluOut:
    user: int
    acc: list
    result: list


class AluEnv:
    def __init__(self, dut, *, gap=0.0, stall=0.0):
        p = tbenv.params()
        self.dut = dut
        self.W = p["flit_width"]
        self.U = p["user_width"]
        self.n16 = self.W // 16
        self.n32 = self.W // 32
        self.wide = bool(p.get("wide_data", False))   # data given widened to fp32 (the model's widen)
        self.inl = data.Layout.cast(alu_in_layout(self.W, self.U, 1, self.wide))
        self.outl = data.Layout.cast(alu_out_layout(self.W, self.U))
        self.cycler = Cycler(dut)
        self.sb = Scoreboard("reduce_alu")
        self.drv = StreamDriver(dut, "i", tbenv.rng("gap"), gap=gap, burst=2.0)
        self.mon = StreamMonitor(dut, "o", tbenv.rng("stall"), stall=stall, burst=2.0, on_item=self._on_out)
        self.cycler.add(self.drv, self.mon)
        self.seq = 0
        self.context = {}
        self.first_out_cycle = None
        self.sent_cycle = {}

    def _field(self, layout, value, name):
        f = layout[name]
        return (value >> f.offset) & ((1 << f.width) - 1)

    def send(self, acc_lanes, data_lanes, etype, op, *, first=False, chain=False, exp_acc, exp_res,
             what=""):
        etype = EType(etype)
        bits = 16 if R.is16(etype) else 32
        user = self.seq & ((1 << self.U) - 1)
        self.seq += 1
        flit = (R.lanes_to_int(R.widen(np.asarray(data_lanes, dtype=f"<u{bits // 8}"), etype), 32) if self.wide
                else R.lanes_to_int(data_lanes, bits))
        fields = {"acc": R.lanes_to_int(acc_lanes, 32), "data": flit,
                  "etype": etype.value, "op": RedOp(op).value, "first": int(first), "chain": int(chain),
                  "user": user}
        word = 0
        for k, v in fields.items():
            word |= v << self.inl[k].offset
        self.drv.send(word)
        self.sb.expect("o", AluOut(user, [int(x) for x in exp_acc], [int(x) for x in exp_res]))
        if what:
            self.context[user] = what

    def _on_out(self, word, cycle):
        acc = R.int_to_lanes(self._field(self.outl, word, "acc"), 32, self.n16)
        user = self._field(self.outl, word, "user")
        exp = self.sb.expected["o"][0] if self.sb.expected["o"] else None
        bits = 16 if exp is not None and len(exp.result) == self.n16 else 32
        res = R.int_to_lanes(self._field(self.outl, word, "result"), bits, self.W // bits)
        try:
            self.sb.observe("o", AluOut(user, [int(x) for x in acc], [int(x) for x in res]), cycle=cycle)
        except AssertionError as e:
            raise AssertionError(f"{e}\n  operands: {self.context.get(user, '?')}") from None
        self.context.pop(user, None)

    async def drain(self, timeout=None):
        n = self.sb.outstanding
        await self.cycler.until(lambda: self.sb.outstanding == 0, timeout=timeout or (50 * n + 200),
                                what=f"all {n} ALU results")
        await self.cycler.cycles(5)
        self.sb.finish()


def _rows(values: np.ndarray, lanes: int) -> np.ndarray:
    """Pad a flat lane array to whole flits (repeating the start) and reshape to [flits, lanes]."""
    n = len(values)
    pad = (-n) % lanes
    if pad:
        values = np.concatenate([values, values[:pad]])
    return values.reshape(-1, lanes)


def _send_batch(env: AluEnv, etype, acc_rows, data_rows, ops, first, describe=True):
    new, res = R.alu_reference_batch(acc_rows, data_rows, etype, ops, first)
    for k in range(len(ops)):
        what = (f"{etype.name} {RedOp(int(ops[k])).name} first={bool(first[k])} acc={[hex(x) for x in acc_rows[k]]} "
                f"data={[hex(x) for x in data_rows[k]]}") if describe else ""
        env.send(acc_rows[k], data_rows[k], etype, int(ops[k]), first=bool(first[k]), exp_acc=new[k],
                 exp_res=res[k], what=what)


def _acc_rows(env, etype, acc_lanes):
    """Accumulator rows [flits, n16] from lanes for this type (32-bit types use the lower half)."""
    lanes = env.n16 if R.is16(etype) else env.n32
    rows = _rows(acc_lanes.astype(np.uint32), lanes)
    if lanes == env.n16:
        return rows
    full = np.zeros((len(rows), env.n16), dtype=np.uint32)
    full[:, :lanes] = rows
    return full


def special_vectors(env, etype):
    """(acc rows, data rows, ops, first) for the full pairwise special matrix of ``etype``."""
    sp = np.array(R.special_values(etype), dtype=np.uint32)
    a, b = np.meshgrid(sp, sp, indexing="ij")
    a, b = a.ravel(), b.ravel()
    wide_a = R.widen(a.astype(np.uint16) if R.is16(etype) else a, etype)
    lanes = env.n16 if R.is16(etype) else env.n32
    dtype = np.uint16 if R.is16(etype) else np.uint32
    out = []
    for op in RedOp:
        acc = _acc_rows(env, etype, wide_a)
        dat = _rows(b.astype(dtype), lanes)
        out.append((acc, dat, np.full(len(acc), op.value), np.zeros(len(acc), dtype=bool)))
        # Each special value as the first contribution (the partial operand is ignored: garbage given).
        dat1 = _rows(sp.astype(dtype), lanes)
        acc1 = np.full((len(dat1), env.n16), 0x12345678, dtype=np.uint32)
        out.append((acc1, dat1, np.full(len(dat1), op.value), np.ones(len(dat1), dtype=bool)))
    return out


def random_vectors(env, etype, pairs, rng):
    lanes = env.n16 if R.is16(etype) else env.n32
    flits = -(-pairs // lanes)
    bits = 16 if R.is16(etype) else 32
    dtype = np.uint16 if bits == 16 else np.uint32
    dat = rng.integers(0, 1 << bits, size=(flits, lanes), dtype=np.uint64).astype(dtype)
    kind = rng.integers(0, 3, size=(flits, 1))
    widened_other = R.widen(rng.integers(0, 1 << bits, size=(flits, lanes), dtype=np.uint64).astype(dtype),
                            etype)
    arbitrary = rng.integers(0, 1 << 32, size=(flits, lanes), dtype=np.uint64).astype(np.uint32)
    # Close to the contribution, either sign: exercises cancellation and the normalisation shift.
    close = R.widen(dat, etype) ^ rng.integers(0, 1 << (6 if bits == 16 else 12), size=(flits, lanes),
                                              dtype=np.uint64).astype(np.uint32)
    close ^= (rng.integers(0, 2, size=(flits, lanes)).astype(np.uint32) << np.uint32(31))
    acc = np.where(kind == 0, widened_other, np.where(kind == 1, arbitrary, close)).astype(np.uint32)
    if etype in (EType.S32, EType.U32):
        acc = np.where(kind == 2, dat.astype(np.uint32) + rng.integers(-3, 4, size=(flits, lanes)).astype(
            np.uint32), acc).astype(np.uint32)
    full = np.zeros((flits, env.n16), dtype=np.uint32)
    full[:, :lanes] = acc
    ops = rng.integers(0, 3, size=flits)
    first = rng.random(flits) < 0.05
    return full, dat, ops, first


def _etypes(s):
    names = s.get("etypes")
    return [EType[n] for n in names] if names else list(EType)


@cocotb.test()
async def test_special_matrix(dut):
    s = tbenv.settings()
    env = AluEnv(dut, gap=s.get("gap", 0.2), stall=s.get("stall", 0.2))
    await env.cycler.start()
    total = 0
    for etype in _etypes(s):
        for acc, dat, ops, first in special_vectors(env, etype):
            _send_batch(env, etype, acc, dat, ops, first)
            total += len(ops)
    await env.drain()
    dut._log.info(f"special matrix: {total} flits checked bit-exactly")


@cocotb.test()
async def test_random(dut):
    s = tbenv.settings()
    env = AluEnv(dut, gap=s.get("gap", 0.2), stall=s.get("stall", 0.2))
    rng = np.random.default_rng(tbenv.seed())
    pairs = s.get("pairs", 10000)
    await env.cycler.start()
    stats = {}
    t0 = time.perf_counter()
    c0 = env.cycler.cycle
    for etype in _etypes(s):
        remaining = pairs
        while remaining > 0:   # in chunks, so the scoreboard and driver queues stay small
            chunk = min(remaining, 64 * 1024)
            acc, dat, ops, first = random_vectors(env, etype, chunk, rng)
            _send_batch(env, etype, acc, dat, ops, first, describe=False)
            remaining -= chunk
            await env.drain()
        lanes = env.n16 if R.is16(etype) else env.n32
        stats[etype.name] = -(-pairs // lanes) * lanes
    wall = time.perf_counter() - t0
    dut._log.info(f"random pairs checked bit-exactly per type: {stats}; {env.cycler.cycle - c0} cycles in "
                  f"{wall:.1f} s")
    out = s.get("out")
    if out:
        import json
        from pathlib import Path
        Path(out).write_text(json.dumps({"pairs_per_type": stats, "mismatches": 0, "flit_width": env.W,
                                         "cycles": env.cycler.cycle - c0, "wall_s": wall}))


@cocotb.test()
async def test_chain(dut):
    """Sequences reduced through ``chain`` (no memory round trip) equal the arrival-order reduction."""
    s = tbenv.settings()
    env = AluEnv(dut, gap=s.get("gap", 0.2), stall=s.get("stall", 0.3))
    rng = np.random.default_rng(tbenv.seed() + 1)
    await env.cycler.start()
    for _ in range(s.get("sequences", 60)):
        etype = EType(int(rng.integers(0, 5)))
        op = RedOp(int(rng.integers(0, 3)))
        lanes = env.n16 if R.is16(etype) else env.n32
        bits = 16 if R.is16(etype) else 32
        sp = np.array(R.special_values(etype), dtype=np.uint32)
        acc = np.zeros(env.n16, dtype=np.uint32)
        contribs = []
        for k in range(int(rng.integers(1, 9))):
            if rng.random() < 0.1:
                c = rng.choice(sp, size=lanes).astype(np.uint16 if bits == 16 else np.uint32)
            else:
                c = rng.integers(0, 1 << bits, size=lanes, dtype=np.uint64).astype(
                    np.uint16 if bits == 16 else np.uint32)
            contribs.append(c)
            new, res = R.alu_reference(acc, c, etype, op, k == 0)
            assert np.array_equal(res, R.reduce_sequence(contribs, etype, op))
            garbage = rng.integers(0, 1 << 32, size=env.n16, dtype=np.uint64).astype(np.uint32)
            env.send(garbage, c, etype, op, first=(k == 0), chain=(k > 0), exp_acc=new, exp_res=res,
                     what=f"chain {etype.name} {op.name} step {k}")
            acc = new
    await env.drain()


@cocotb.test()
async def test_latency(dut):
    """A lone operation's result is valid LATENCY cycles after its input transfer; back to back, one per
    cycle."""
    env = AluEnv(dut)
    await env.cycler.start()
    seen = []
    env.mon.on_item = lambda word, cycle: seen.append(cycle)
    zero = np.zeros(env.n16, dtype=np.uint32)
    accepted = []
    env.drv.on_accept = lambda word, cycle: accepted.append(cycle)
    env.send(zero, zero[:env.n32], EType.FP32, RedOp.ADD, exp_acc=zero, exp_res=zero[:env.n32])
    await env.cycler.until(lambda: seen, timeout=20, what="the result")
    latency = LATENCY + tbenv.params().get("acc_stages", 1) - 1
    assert seen[0] - accepted[0] == latency, f"latency {seen[0] - accepted[0]}, documented {latency}"
    seen.clear()
    accepted.clear()
    for _ in range(20):
        env.send(zero, zero[:env.n32], EType.FP32, RedOp.ADD, exp_acc=zero, exp_res=zero[:env.n32])
    await env.cycler.until(lambda: len(seen) == 20, timeout=60, what="20 results")
    assert seen == list(range(seen[0], seen[0] + 20)), f"not one per cycle: {seen}"
    assert accepted == list(range(accepted[0], accepted[0] + 20)), f"input not one per cycle: {accepted}"
