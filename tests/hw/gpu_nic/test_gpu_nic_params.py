"""GPU-side modules: parameter validation, the metadata format, bench argument checks."""

import pytest

from hw.gpu_nic.nic import GpuNic
from hw.gpu_nic.receive_path import ReceivePath, pack_token_meta, unpack_token_meta
from hw.gpu_nic.request_gen import RequestGenerator
from hw.gpu_nic.token_tracker import TokenTracker

BAD = [
    (TokenTracker, {"experts": 3}, "experts"),
    (TokenTracker, {"tiles": 512}, "tiles"),
    (TokenTracker, {"tile_size": 100}, "tile_size"),
    (TokenTracker, {"experts": 1, "tiles": 1}, "at least 2 entries"),
    (TokenTracker, {"ready_depth": 1}, "ready_depth"),
    (RequestGenerator, {"ports": 1}, "ports"),
    (RequestGenerator, {"max_payload": 32}, "max_payload"),
    (RequestGenerator, {"fetch_depth": 8}, "fetch_depth"),
    (RequestGenerator, {"tags": 48}, "tags"),
    (RequestGenerator, {"flit_width": 64}, "flit_width"),
    (ReceivePath, {"credits": 16}, "credits"),
    (ReceivePath, {"max_slots": 64}, "max_slots"),
    (ReceivePath, {"tile_size": 3}, "tile_size"),
    (ReceivePath, {"experts": 300}, "experts"),
    (ReceivePath, {"read_depth": 4}, "read_depth"),
    (ReceivePath, {"accept": "both"}, "accept"),
    (RequestGenerator, {"link": "vc"}, "link"),
    (RequestGenerator, {"any_tag": 1}, "any_tag must be a bool"),
    (ReceivePath, {"read_queue": 2048}, "read_queue must be an integer in 0..1024"),
    (ReceivePath, {"read_queue": True}, "read_queue must be an integer"),
    (GpuNic, {"any_tag": "yes"}, "any_tag must be a bool"),
    (GpuNic, {"read_queue": -1}, "read_queue must be an integer"),
    (GpuNic, {"fill_queue": 65}, "fill_queue must be an integer in 0..64"),
    (GpuNic, {"fill_queue": True}, "fill_queue must be an integer"),
    (GpuNic, {"credits": 0}, "credits"),
    (GpuNic, {"rx_credits": 16}, "credits"),
    (GpuNic, {"mm_index_bits": 2}, "index_bits"),
    (GpuNic, {"tiles": 256, "tile_size": 512}, "tiles"),
]


@pytest.mark.filterwarnings("ignore:.*created but never used")   # the half-built component
@pytest.mark.parametrize("cls, kw, msg", BAD, ids=[f"{c.__name__}-{m}" for c, _, m in BAD])
def test_bad_parameters(cls, kw, msg):
    with pytest.raises(ValueError, match=msg):
        cls(**kw)


def test_token_meta_round_trip():
    experts = [0, 7, 255, 32767, 40]
    assert unpack_token_meta(pack_token_meta(experts)) == experts
    with pytest.raises(ValueError):
        pack_token_meta(range(9))
    with pytest.raises(ValueError):
        pack_token_meta([1 << 15])


@pytest.mark.parametrize("argv, msg", [(["--tile-size", "100"], "--tile-size"), (["--gpus", "1"], "--gpus"),
                                       (["--depths", "48"], "depth 48"), (["--tokens", "0"], "--tokens"),
                                       (["--sim", "xsim"], "unknown simulator")])
def test_bench_rejects_bad_arguments(argv, msg, capsys):
    from dysharp.cli import main
    assert main(["bench", "token_tracker"] + argv) == 2
    assert msg in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_links_fit_the_dysharp_switch():
    """GpuNic's tx/rx connect to a DySharpSwitch port as they are, and its default credits are the switch's
    (uplink credits = the switch's link_credits, receive buffers = its gpu_credits)."""
    from amaranth.hdl import Module
    from amaranth.lib.wiring import connect

    from hw.switch.dysharp_switch import DySharpSwitch
    sw = DySharpSwitch(ports=4)
    nic = GpuNic(ports=4)
    assert (nic.credits, nic.rx_credits) == (sw.link_credits, sw.gpu_credits)
    m = Module()
    connect(m, nic.tx, sw.rx[1])
    connect(m, sw.tx[1], nic.rx)
