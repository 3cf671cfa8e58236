"""The arbitration primitives and the iSLIP allocator against Python reference models.

The allocator's round-robin picks are written as log-depth prefix-OR trees (for timing); these tests hold
them to the plain definitions: random and corner-case vectors for the primitives, and random request
sequences, cycle by cycle (pointers included), for the allocator.
"""

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from hw.arbiter import mask_after, prefix_or, rr_pick
from hw.switch.allocator import ISlipAllocator
from hw.switch.input_unit import REQ_ERR, REQ_MASK, REQ_MASK_ALL, REQ_UC


def ref_rr(req: int, ptr: int, n: int) -> int:
    """One-hot of the first set bit of ``req`` at or after ``ptr``, wrapping (0 when ``req`` is 0)."""
    for k in list(range(ptr, n)) + list(range(ptr)):
        if req >> k & 1:
            return 1 << k
    return 0


def _vectors(n: int, rng, count: int):
    yield from (0, (1 << n) - 1, 1, 1 << (n - 1))
    for _ in range(count):
        yield rng.getrandbits(n) & rng.getrandbits(n)   # sparse as well as dense vectors
        yield rng.getrandbits(n)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13, 64])
def test_prefix_or_and_rr_pick_match_reference(n):
    m = Module()
    req = Signal(n)
    ptr = Signal(range(max(2, n)))
    pre = prefix_or(m, req, name="pre")
    pick = rr_pick(m, req, ptr, name="pick")
    rng = random.Random(n)

    async def tb(ctx):
        for v in _vectors(n, rng, 60):
            ctx.set(req, v)
            assert ctx.get(pre) == sum(1 << k for k in range(n) if v & ((1 << k) - 1)), (n, v)
            for p in {0, n - 1, rng.randrange(n)}:
                ctx.set(ptr, p)
                assert ctx.get(pick) == ref_rr(v, p, n), (n, v, p)
    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()


@pytest.mark.parametrize("n", [1, 3, 8, 64])
def test_mask_after_is_the_pointer_one_past_the_bit(n):
    m = Module()
    onehot = Signal(n)
    mask = mask_after(m, onehot, name="after")

    async def tb(ctx):
        for w in range(n):
            ctx.set(onehot, 1 << w)
            p = (w + 1) % n
            assert ctx.get(mask) == sum(1 << k for k in range(p, n)), (n, w)
    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()


class IslipModel:
    """One iSLIP iteration per cycle, as the allocator's module docstring states it."""

    def __init__(self, n: int):
        self.n = n
        self.gptr = [0] * n
        self.aptr = [0] * n

    def step(self, req, cls, out_free):
        n = self.n
        grant = [ref_rr(sum((req[i] >> j & 1) << i for i in range(n)) if out_free >> j & 1 else 0,
                        self.gptr[j], n) for j in range(n)]
        acc = []
        for i in range(n):
            got = sum((grant[j] >> i & 1) << j for j in range(n))
            if cls[i] == REQ_UC:
                a = ref_rr(got, self.aptr[i], n)
                if got:
                    self.aptr[i] = (a.bit_length() % n)       # one past the accepted output
            elif cls[i] == REQ_MASK_ALL:
                a = got if got == req[i] else 0
            else:
                a = got
            acc.append(a)
        for j in range(n):
            if any(a >> j & 1 for a in acc):
                self.gptr[j] = (grant[j].bit_length() % n)   # one past the granted input
        return acc


@pytest.mark.parametrize("n", [3, 4, 8])
def test_allocator_matches_islip_model(n):
    dut = ISlipAllocator(n, 1)
    model = IslipModel(n)
    rng = random.Random(100 + n)

    async def tb(ctx):
        for _ in range(400):
            req = [rng.getrandbits(n) if rng.random() < 0.8 else 0 for _ in range(n)]
            cls = [rng.choice([REQ_UC, REQ_UC, REQ_MASK, REQ_MASK_ALL, REQ_ERR]) for _ in range(n)]
            free = rng.getrandbits(n) | (rng.getrandbits(n) if rng.random() < 0.5 else 0)
            for i in range(n):
                ctx.set(dut.req[i], req[i])
                ctx.set(dut.req_class[i], cls[i])
            ctx.set(dut.out_free, free)
            want = model.step(req, cls, free)
            assert [ctx.get(dut.accept[i]) for i in range(n)] == want
            await ctx.tick()
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
