"""``dysharp bench linerate`` on the plain switch (N = 4): every delivery passes the scoreboard, and the
rates are the switch's contract (simulated cycle counts are deterministic): one header-only packet per
cycle per output and per input, one flit per cycle for 2-flit packets, 0.75 for 3-flit ones (two read
cycles and a two-cycle rematch, see docs/architecture.md) and line rate again from 4 flits."""

import pytest

from verif.harness.runner import SIMULATORS

pytestmark = pytest.mark.skipif("verilator" not in SIMULATORS, reason="the fast path needs Verilator")


@pytest.mark.parametrize("pattern,flits,out_packets", [
    ("perm", 1, 1.0), ("perm", 2, 0.5), ("perm", 3, 0.25), ("perm", 4, 0.25),
    ("fanout", 1, 1 / 3), ("fanin", 1, 1.0),
])
def test_linerate_plain_switch(pattern, flits, out_packets):
    from verif.bench.linerate import measure

    x = measure("switch", 4, pattern, flits, cycles=600, warmup=300)
    assert x["out_packets"] == pytest.approx(out_packets, abs=0.004), x


def test_linerate_rejects_bad_arguments():
    from verif.bench.linerate import packets, pattern_pairs

    with pytest.raises(ValueError, match="unknown pattern 'ring'; valid: one, perm, fanout, fanin"):
        pattern_pairs("ring", 4)
    with pytest.raises(ValueError, match="packet length must be 1..17 flits"):
        packets(4, "one", 18, 100, None)
