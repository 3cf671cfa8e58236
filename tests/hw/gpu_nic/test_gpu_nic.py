"""The composed GPU NIC on its 2-VC DySHARP link (see verif/tb/gpu_nic.py): loopback dispatch/combine in
both modes with the request packets compared bit for bit, the NIC serving every downlink opcode against
its reference model (memory manager included), VC 1 responses committing while VC 0 is stalled, and the
switch's translated dispatch (TLB fills answered, rows landing, tiles ready)."""

import pytest

from verif.harness.runner import run_cocotb

PARAMS = {"experts": 8, "tiles": 4, "tile_size": 4, "tags": 8}


@pytest.mark.parametrize("unicast", [0, 1])
def test_loopback(unicast, seed, sim):
    run_cocotb("gpu_nic", PARAMS, test_module="verif.tb.gpu_nic", testcase="test_loopback", seed=seed, sim=sim,
               env={"unicast": unicast, "tokens": 24})


def test_serve(seed, sim):
    run_cocotb("gpu_nic", PARAMS, test_module="verif.tb.gpu_nic", testcase="test_serve", seed=seed, sim=sim,
               env={"packets": 400})


def test_response_under_request_stall(seed, sim):
    run_cocotb("gpu_nic", PARAMS, test_module="verif.tb.gpu_nic", testcase="test_response_under_request_stall",
               seed=seed, sim=sim)


def test_translated_dispatch(seed, sim):
    run_cocotb("gpu_nic", PARAMS, test_module="verif.tb.gpu_nic", testcase="test_translated_dispatch", seed=seed,
               sim=sim, env={"tokens": 20})


def test_translated_dispatch_uneven_share(seed, sim):
    """A GPU hosting 6 experts (not a power of two: Kimi-K2's 384 over 8 GPUs is 48): its Tile Status
    Table has 8 expert rows, yet only its own 6 experts' tokens are reported and become tiles."""
    run_cocotb("gpu_nic", {**PARAMS, "experts": 6}, test_module="verif.tb.gpu_nic",
               testcase="test_translated_dispatch", seed=seed, sim=sim, env={"tokens": 24})


@pytest.mark.parametrize("fill_queue", [0, 8])
def test_fill_answers_first(fill_queue, seed, sim):
    """TLB fill answers and read answers waiting together on VC 1: every answer against the model; with a
    fill queue, every queued fill answer leaves before the waiting read answers."""
    run_cocotb("gpu_nic", {**PARAMS, "fill_queue": fill_queue}, test_module="verif.tb.gpu_nic",
               testcase="test_fill_answers_first", seed=seed, sim=sim, env={"fills": 6})
