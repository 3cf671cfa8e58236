"""The array-scaling cross-check (synth/array_crosscheck.py): CACTI at 45 and 22 nm, both routes to N5.

Runs the real CACTI (built by ``./run setup``) on small arrays (well under a second each); a missing CACTI
fails with the fix, never skips.
"""

import pytest

from synth import array_crosscheck as xc
from synth import cacti, scaling, tools

RAM = cacti.Array(rows=1024, width=64)      # the CACTI reference array of tests/synth/test_synth.py
TLB = cacti.Array(rows=64, width=48, read_ports=0, write_ports=1, kind="fa", tag_width=28, search_ports=2)


def _routes(a):
    try:
        return xc.cost_routes(a)
    except tools.ToolError as e:
        pytest.fail(str(e))


def test_factors_from_the_cited_cells():
    assert xc.route_factor(45) == scaling.SRAM_AREA                      # the headline's factor, unchanged
    assert xc.route_factor(22) == pytest.approx(0.021 / 0.092)
    assert xc.route_factor(22, cam=True) / xc.route_factor(22) == pytest.approx(2.5 / 2.0)
    with pytest.raises(ValueError, match="routes from"):
        xc.route_factor(7)


def test_ram_routes_use_cacti_at_each_node():
    r = _routes(RAM)
    assert r["cam_share"] == 0
    # CACTI's 45 nm figure is the flow's reference; 22 nm is a separate run, smaller by roughly (22/45)^2.
    assert r["cacti45_um2"] == pytest.approx(52356.7, rel=1e-3)
    assert 0.15 < r["cacti22_um2"] / r["cacti45_um2"] < 0.35
    assert r["n5_via45_um2"] == pytest.approx(r["cacti45_um2"] * scaling.SRAM_AREA)
    assert r["n5_headline_um2"] == r["n5_via45_um2"]                  # no CAM bits: same as the headline
    assert r["n5_via22_um2"] == pytest.approx(r["cacti22_um2"] * 0.021 / 0.092)
    assert r["ratio_22_over_45"] == pytest.approx(r["n5_via22_um2"] / r["n5_via45_um2"])


def test_cam_tags_scale_on_their_own():
    r = _routes(TLB)
    share = 28 * 2 / (28 * 2 + 48)
    assert r["cam_share"] == pytest.approx(share)
    boost = (1 - share) + share * 2.5 / 2.0
    assert r["n5_via45_um2"] == pytest.approx(r["n5_headline_um2"] * boost)
    assert r["n5_via22_um2"] == pytest.approx(r["cacti22_um2"] * 0.021 / 0.092 * boost)


def test_a_node_cacti_refuses_is_named():
    r = _routes(cacti.Array(rows=16, width=64, read_ports=64))
    assert r["cacti45_um2"] is None and r["n5_headline_um2"] is None and r["ratio_22_over_45"] is None
    assert "no valid data array organizations" in r["error_45"]
