"""A whole MoE layer on the system top (verif/tb/system.py): G = 4 GPU NICs on one DySHARP switch run
dispatch, the GEMM stand-in on the Tile Status Tables' ready tiles and combine, with real routing (hidden
scaled to 128, GEMM times overridden to 64/32 cycles per tile to keep Icarus runs short); every home GPU's
output rows equal the numpy layer bit for bit, no error counter moves, and each GPU's link flits per
direction equal sim_models.traffic's accounting plus the AL-TLB fills (per phase where phases are in
sequence). The default suite runs dysharp-basic; the other schemes, the model without group-limited
routing and the sabotaged run (which must fail) are marked slow (about 1-3 minutes each on Icarus)."""

import json

import pytest

from verif.harness.runner import run_cocotb

# 64 local experts per GPU (DeepSeek-V3 over 4 GPUs); at 16 tokens per GPU every expert has one tile.
PARAMS = {"gpus": 4, "nic": {"experts": 64, "tiles": 1, "tile_size": 128, "mm_index_bits": 8, "mm_slots": 256}}
LAYER = {"model": "deepseek-v3", "tokens": 16, "hidden": 128, "gemm": [64, 32]}


def run(scheme, seed, sim, tmp_path, check=True, **env):
    out = tmp_path / f"{scheme}.json"
    r = run_cocotb("system", PARAMS, test_module="verif.tb.system", testcase="test_layer", seed=seed, sim=sim,
                   env={**LAYER, "scheme": scheme, "out": str(out), **env}, check=check)
    return json.loads(out.read_text()) if out.exists() else r


def check_figures(fig, scheme):
    assert fig["scheme"] == scheme
    assert fig["flits"] == fig["predicted"]["total"]            # also asserted inside the run
    assert fig["tiles_ready"] > 0 and fig["cycles"]["total"] > 0
    if scheme == "deepep":
        assert fig["tlb"]["misses"] == 0 and sum(fig["fills"]["up"]) == 0
    else:
        assert fig["tlb"]["misses"] == sum(fig["fills"]["down"])  # one fill per translated key


def test_layer_dysharp_basic(seed, sim, tmp_path):
    check_figures(run("dysharp-basic", seed, sim, tmp_path), "dysharp-basic")


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["dysharp", "deepep"])
def test_layer_schemes(scheme, seed, sim, tmp_path):
    check_figures(run(scheme, seed, sim, tmp_path), scheme)


@pytest.mark.slow
def test_layer_no_group_limit(seed, sim, tmp_path):
    """Qwen3-30B-A3B: 128 experts, top-8, no group-limited routing (32 local experts per GPU)."""
    fig = run("dysharp", seed, sim, tmp_path, model="qwen3-30b-a3b")
    check_figures(fig, "dysharp")
    assert not fig["layer"]["group_limited"] and fig["layer"]["experts"] == 128


@pytest.mark.slow
def test_sabotage_fails(seed, sim, tmp_path):
    """Test the test: one expert output made wrong on purpose must fail the numerical check."""
    r = run("dysharp-basic", seed, sim, tmp_path, check=False, sabotage="partial")
    assert not isinstance(r, dict) and r.failed == 1
