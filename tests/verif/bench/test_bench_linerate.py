"""``dysharp bench linerate`` on the plain switch (N = 4): every delivery passes the scoreboard, and the
rates are the switch's contract (simulated cycle counts are deterministic): one header-only packet per
cycle per output and per input, and one flit per cycle per output at every packet length (counted
transfers: an input and an output start their next packet right after the last read of the current one,
see docs/architecture.md)."""

import pytest

from verif.harness.runner import SIMULATORS

pytestmark = pytest.mark.skipif("verilator" not in SIMULATORS, reason="the fast path needs Verilator")


@pytest.mark.parametrize("pattern,flits,out_packets", [
    ("perm", 1, 1.0), ("perm", 2, 1 / 2), ("perm", 3, 1 / 3), ("perm", 4, 1 / 4), ("perm", 5, 1 / 5),
    ("perm", 6, 1 / 6), ("perm", 17, 1 / 17), ("one", 3, 1 / 3),
    ("fanout", 1, 1 / 3), ("fanout", 3, 1 / 9), ("fanin", 1, 1.0), ("fanin", 3, 1 / 3),
])
def test_linerate_plain_switch(pattern, flits, out_packets):
    from verif.bench.linerate import measure

    x = measure("switch", 4, pattern, flits, cycles=600, warmup=300)
    assert x["out_packets"] == pytest.approx(out_packets, abs=0.004), x
    # One flit per cycle on every output (fanout: the input's link shared by three outputs).
    assert x["out_flits"] == pytest.approx(1 / 3 if pattern == "fanout" else 1.0, abs=0.004), x


@pytest.mark.parametrize("flits", [1, 3, 5])
def test_linerate_integrated_switch(flits):
    """The integrated switch's request network gives the same rates on VC 0."""
    from verif.bench.linerate import measure

    x = measure("dysharp_switch", 4, "perm", flits, cycles=600, warmup=300)
    assert x["out_packets"] == pytest.approx(1 / flits, abs=0.004), x
    assert x["out_flits"] == pytest.approx(1.0, abs=0.004), x


def test_linerate_rejects_bad_arguments():
    from verif.bench.linerate import packets, pattern_pairs

    with pytest.raises(ValueError, match="unknown pattern 'ring'; valid: one, perm, fanout, fanin"):
        pattern_pairs("ring", 4)
    with pytest.raises(ValueError, match="packet length must be 1..17 flits"):
        packets(4, "one", 18, 100, None)
