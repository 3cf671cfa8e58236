"""``PacketQueues``' head-order flags and lap guard against the arrival order the test drives: a VOQ head
waits while mask-queue packets come and go, then the mask queue holds two newer packets and gives up the
first; ``older[0]`` must then say that the VOQ head arrived first. The flags compare arrival numbers modulo
``2**seq_bits``; ``near_lap`` rises once the waiting head is ``lap_threshold`` arrivals old, and the unit's
user enqueues at most ``lap_margin`` more packets until it falls (the input unit withholds its credits)."""

from amaranth.sim import Simulator

from hw.switch.packet_queues import PacketQueues

MQ = 2


def _run(body):
    dut = PacketQueues(n_uc=2, n_cells=5, ports=2)
    seen = {}

    async def tb(ctx):
        async def step(enq=None, deq=None):
            q, cell = enq if enq else (0, 0)
            ctx.set(dut.enq, enq is not None)
            ctx.set(dut.enq_q, q)
            ctx.set(dut.enq_cell, cell)
            ctx.set(dut.deq, (1 << deq) if deq is not None else 0)
            ctx.set(dut.sel, deq if deq is not None else 0)
            await ctx.tick()
        await body(dut, ctx, step, seen)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return dut, seen


async def _lap(dut, ctx, step, seen, *, extra):
    """VOQ head P (arrival 0), then one mask-queue packet per cycle, each leaving as the next arrives,
    while ``near_lap`` is low; then ``extra`` more arrivals, the last two (X, then M) staying queued, and X
    leaves: ``older[0]`` orders P against M."""
    await step(enq=(0, 0))
    await step(enq=(MQ, 1))
    n = 2                                          # arrivals so far; the next one is numbered n
    while not ctx.get(dut.near_lap):
        await step(enq=(MQ, 1 + n % 2), deq=MQ)
        n += 1
    seen["rose_at"] = n                            # arrivals when near_lap was first high
    seen["held"] = True
    for i in range(extra - 2):
        await step(enq=(MQ, 1 + i % 2), deq=MQ)
        seen["held"] &= bool(ctx.get(dut.near_lap))
    await step(enq=(MQ, 3), deq=MQ)                # X
    await step(enq=(MQ, 4))                        # M
    seen["m_num"] = n + extra - 1                  # M's arrival number (P's is 0)
    await step(deq=MQ)                             # X leaves: the flag is recomputed against M
    assert [ctx.get(dut.count[q]) for q in range(3)] == [1, 0, 1]
    seen["older"] = ctx.get(dut.older[0])
    seen["near_lap"] = ctx.get(dut.near_lap)
    await step(deq=0)                              # P leaves: the oldest head is M, young
    await step()
    seen["after"] = ctx.get(dut.near_lap)


def test_lap_guard_keeps_the_order():
    """The worst the contract allows: near_lap rises at lap_threshold, then lap_margin more packets
    arrive while P waits; the flag still says P arrived before M, and near_lap falls once P leaves."""
    async def body(dut, ctx, step, seen):
        await _lap(dut, ctx, step, seen, extra=dut.lap_margin)
    dut, seen = _run(body)
    assert dut.seq_bits == 7 and dut.lap_threshold == 2 ** 6 - 2 - 5
    # P is lap_threshold arrivals old once the arrival counter reaches it; registered, one arrival later
    assert seen["rose_at"] == dut.lap_threshold + 1
    assert seen["held"] and seen["near_lap"]
    assert seen["m_num"] == 2 ** (dut.seq_bits - 1) - 2            # within the numbers' half range
    assert seen["older"] == 1
    assert seen["after"] == 0


def test_lap_past_the_contract_breaks_the_order():
    """Two arrivals more than the contract allows put M half the numbers' range after P: the modular
    comparison calls M older (so the test above fails if near_lap rose two arrivals later)."""
    async def body(dut, ctx, step, seen):
        await _lap(dut, ctx, step, seen, extra=dut.lap_margin + 2)
    dut, seen = _run(body)
    assert seen["m_num"] == 2 ** (dut.seq_bits - 1)
    assert seen["older"] == 0
