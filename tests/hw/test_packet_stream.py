"""PacketSplit / PacketMerge: cocotb with exact cycle models (verif/tb/packet_stream.py)."""

import gc

import pytest

from hw.packet_stream import PacketMerge, PacketSplit
from verif.harness.runner import run_scenarios

TB = "verif.tb.packet_stream"


# A design point's cases share one simulator run (each a cocotb test of its own, from reset).
def _cases(module, params, cases, seed, sim):
    failed = run_scenarios(module, params, test_module=TB, sim=sim, scenarios=[(c, {}, seed) for c in cases])
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("params", [{}, {"priority": True}], ids=["round_robin", "priority"])
def test_merge(params, seed, sim):
    _cases("packet_merge", params, ["test_merge_random", "test_merge_full_rate"], seed, sim)


def test_split(seed, sim):
    _cases("packet_split", {}, ["test_split_random", "test_split_full_rate"], seed, sim)


def test_split_out_of_range_select_discards():
    """A select value past n_out matches no output: the packet is consumed and goes nowhere."""
    from amaranth.hdl import Const
    from amaranth.sim import Simulator

    dut = PacketSplit(n_out=3, select=lambda h: h.opcode.as_value())   # opcodes >= 3 are out of range

    async def tb(ctx):
        ctx.set(dut.i.valid, 1)
        for k in range(3):
            ctx.set(dut.o[k].ready, 0)
        for op, out in ((1, 1), (2, 2), (0, 0), (7, None)):
            ctx.set(dut.i.payload, {"data": op, "last": 1, "poison": 0})
            valids = [ctx.get(dut.o[k].valid) for k in range(3)]
            assert valids == [int(k == out) for k in range(3)], (op, valids)
            assert ctx.get(dut.i.ready) == (1 if out is None else 0), op
    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("make", [
    lambda: PacketMerge(n_in=0), lambda: PacketMerge(n_in=65), lambda: PacketMerge(n_in=2, priority=1),
    lambda: PacketMerge(n_in=2, flit_width=100), lambda: PacketSplit(n_out=0, select=lambda h: 0),
    lambda: PacketSplit(n_out=2, select=3),
])
def test_bad_parameters(make):
    with pytest.raises(ValueError):
        make()
    gc.collect()
