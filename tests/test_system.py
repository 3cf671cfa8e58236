"""A whole MoE layer on the system top (verif/tb/system.py): G = 4 GPU NICs on one DySHARP switch run
dispatch, the GEMM stand-in and combine for a DeepSeek-V3 layer (real routing, hidden scaled to 128), and
every home GPU's output rows equal the numpy layer bit for bit; link flits equal sim_models.traffic's."""

import json

import pytest

from verif.harness.runner import run_cocotb

# 64 local experts per GPU (DeepSeek-V3 over 4 GPUs), one 128-token tile each at these token counts.
PARAMS = {"gpus": 4, "nic": {"experts": 64, "tiles": 1, "tile_size": 128, "mm_index_bits": 8, "mm_slots": 256}}


def run(scheme, seed, sim, tmp_path, **env):
    out = tmp_path / f"{scheme}.json"
    run_cocotb("system", PARAMS, test_module="verif.tb.system", testcase="test_layer", seed=seed, sim=sim,
               env={"scheme": scheme, "out": str(out), **env})
    return json.loads(out.read_text())


@pytest.mark.parametrize("scheme", ["dysharp-basic"])
def test_layer(scheme, seed, sim, tmp_path):
    fig = run(scheme, seed, sim, tmp_path, model="deepseek-v3", tokens=16, gemm=[64, 32])
    assert fig["flits"] == fig["predicted"]["total"]
    assert fig["tiles_ready"] > 0
