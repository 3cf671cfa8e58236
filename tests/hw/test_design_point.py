"""A design point (:class:`hw.registry.DesignPoint`) is resolved once: defaults filled in, unknown names
refused, and it is what the builds, the runner and the benches take."""

import pytest

from hw import registry


def test_a_point_fills_in_the_defaults_and_names_its_overrides():
    p = registry.point("switch", {"ports": 16, "credits": registry.get("switch").params()["credits"]})
    assert p.name == "switch"
    assert p.params == registry.get("switch").resolve({"ports": 16})
    assert p.overrides == {"ports": 16}               # a default given by hand is not an override
    assert p.slug == "ports16"
    assert registry.point("switch").slug == "default"


def test_a_point_is_resolved_once():
    p = registry.point("dysharp_switch", {"ports": 4})
    assert registry.point(p) is p                     # an entry point may take either form
    with pytest.raises(ValueError, match="already resolved"):
        registry.point(p, {"ports": 8})


def test_points_are_equal_by_module_and_parameters():
    a = registry.point("switch", {"ports": 16})
    b = registry.point("switch", {"ports": 16, "credits": a.params["credits"]})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != registry.point("switch", {"ports": 32})
    assert a != registry.point("switch_fifo", {"ports": 16})    # same component, another module


def test_bad_points_are_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="unknown module 'swich'.*registered modules: .*switch"):
        registry.point("swich")
    with pytest.raises(ValueError, match="no parameter 'port'.*valid parameters: .*ports"):
        registry.point("switch", {"port": 8})
    with pytest.raises(ValueError, match="unknown emission 'fast'"):
        registry.point("switch").emission("fast")


def test_the_emission_follows_the_port_count():
    assert registry.point("switch", {"ports": 4}).emission() == "flat"
    assert registry.point("switch", {"ports": 8}).emission() == "dedup"
    assert registry.point("system", {"gpus": 4}).emission() == "dedup"    # its ports_param is gpus
    assert registry.point("switch", {"ports": 8}).emission("flat") == "flat"


def test_generate_verilog_is_the_points_verilog(tmp_path):
    p = registry.point("credit_receiver")
    path = p.verilog(tmp_path)
    assert path == registry.generate_verilog("credit_receiver", None, tmp_path)
    assert path == tmp_path / "credit_receiver__default.v"
    assert "module credit_receiver" in path.read_text()


def test_past_64_ports_a_point_needs_the_wide_headers_flit():
    """72 ports (an NVL72 plane) take the wide header: accepted at 256-bit flits, refused at 128 before
    anything is built, with the reason and the valid widths."""
    p = registry.point("dysharp_switch", {"ports": 72, "flit_width": 256})
    assert p.overrides == {"ports": 72, "flit_width": 256} and p.slug == "flit_width256_ports72"
    assert registry.point("system", {"gpus": 72, "flit_width": 512}).params["gpus"] == 72
    for module, params in (("dysharp_switch", {"ports": 72}), ("system", {"gpus": 72, "flit_width": 128}),
                           ("switch", {"ports": 65})):
        with pytest.raises(ValueError, match=f"^{module}: .* ports need the wide header .* use flit_width 256, 512"):
            registry.point(module, params)
    assert registry.point("dysharp_switch", {"ports": 64}).params["flit_width"] == 128   # narrow: unchanged
