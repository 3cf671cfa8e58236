"""Cheap switch generation: the one-hot decoder, the crossbar, the netlist size that elaboration time
follows, the hierarchical area's parts, and (slow) hierarchical against flat area."""

import random

import pytest
from amaranth.hdl import Module, Signal, _ir
from amaranth.sim import Simulator

from hw.arbiter import decode
from hw.switch.crossbar import Crossbar


@pytest.mark.parametrize("w,n", [(2, 8), (3, 8), (4, 10), (6, 33), (9, 257)])
def test_decode_is_one_hot(w, n):
    m = Module()
    idx = Signal(w)
    out = decode(m, idx, n, name="d")

    async def tb(ctx):
        for v in range(1 << w):
            ctx.set(idx, v)
            assert ctx.get(out) == ((1 << v) if v < n else 0), (w, n, v)
    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()


def test_decode_rejects_bad_width():
    with pytest.raises(ValueError, match="decode width"):
        decode(Module(), Signal(3), 0)


@pytest.mark.parametrize("n_in,n_out,lanes", [(4, 4, 2), (5, 3, 1), (1, 2, 2)])
def test_crossbar_routes_each_output_from_its_owner(n_in, n_out, lanes):
    """Random one-owner-per-output assignments (multicast included), random lanes and data: every
    valid output lane carries its owner's flit, and only owners' valid lanes are valid."""
    width = 12
    dut = Crossbar(n_in=n_in, n_out=n_out, width=width, lanes=lanes)
    rng = random.Random(n_in * 100 + n_out)

    async def tb(ctx):
        for _ in range(200):
            owner = [rng.choice([None] + list(range(n_in))) for _ in range(n_out)]
            dests = [sum(1 << j for j in range(n_out) if owner[j] == i) for i in range(n_in)]
            # An input that owns nothing may still show stale destination bits while idle (valid 0).
            valid = []
            for i in range(n_in):
                k = rng.randint(0, lanes)
                valid.append((1 << k) - 1)   # lanes 0..k-1: lane k only with the lanes before it
                if not valid[i] and rng.random() < 0.5:
                    dests[i] = rng.getrandbits(n_out)
            data = [[rng.getrandbits(width) for _ in range(lanes)] for _ in range(n_in)]
            # Stale bits must not claim an output an active owner holds: drop them where they would.
            for i in range(n_in):
                if not valid[i]:
                    dests[i] &= ~sum(1 << j for j in range(n_out) if owner[j] is not None and valid[owner[j]])
            for i in range(n_in):
                ctx.set(dut.in_valid[i], valid[i])
                ctx.set(dut.in_dests[i], dests[i])
                for k in range(lanes):
                    ctx.set(dut.in_data[i][k], data[i][k])
            for j in range(n_out):
                o = owner[j]
                exp_valid = valid[o] if o is not None else 0
                assert ctx.get(dut.out_valid[j]) == exp_valid, (owner, valid, j)
                for k in range(lanes):
                    if exp_valid >> k & 1:
                        assert ctx.get(dut.out_data[j][k]) == data[o][k], (owner, j, k)
    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()


def test_crossbar_rejects_bad_parameters():
    with pytest.raises(ValueError, match="n_in"):
        Crossbar(n_in=0, n_out=4, width=8)
    with pytest.raises(ValueError, match="lanes"):
        Crossbar(n_in=4, n_out=4, width=8, lanes=0)


def _comb_edges(component) -> int:
    """Edges Amaranth's combinational-cycle check walks for ``component`` (its elaboration cost)."""
    from amaranth.hdl import _nir
    counted = {}
    real = _nir.Netlist.check_comb_cycles

    def count(self):
        counted["edges"] = sum(sum(1 for _ in cell.comb_edges_to(net.bit))
                               for idx, cell in enumerate(self.cells) if idx
                               for net in cell.output_nets(idx))
    _nir.Netlist.check_comb_cycles = count
    try:
        _ir.build_netlist(_ir.Fragment.get(component, None), name="top")
    finally:
        _nir.Netlist.check_comb_cycles = real
    return counted["edges"]


def test_input_unit_netlist_stays_small():
    """The 257-cell input unit once had ~4.3 M comb edges (three ``Const(1, 257) << idx`` decoders); it
    must stay linear in its cell count (~90 k edges now)."""
    from hw.switch.input_unit import InputUnit
    edges = _comb_edges(InputUnit(port=0, ports=8, credits=256, lanes=2))
    assert edges < 250_000, edges


def test_crossbar_netlist_linear_in_width():
    """Doubling the flit width at most doubles the crossbar's netlist (a variable part-select would
    make it quadratic in N x width)."""
    small = _comb_edges(Crossbar(n_in=8, n_out=8, width=64, lanes=2))
    big = _comb_edges(Crossbar(n_in=8, n_out=8, width=128, lanes=2))
    assert big <= 2.05 * small, (small, big)


def test_hierarchical_parts_cover_the_switch():
    from hw import registry
    from synth import hierarchical

    params = registry.get("switch").resolve({"ports": 16})
    parts = {name: (prm, count) for name, _, prm, count in hierarchical.parts(params)}
    assert set(parts) == {"input", "alloc", "xbar", "egress", "credit_tx", "groups"}
    assert parts["input"][1] == parts["egress"][1] == parts["credit_tx"][1] == 16
    assert parts["xbar"][0] == {"n_in": 16, "n_out": 16, "width": 130, "lanes": params["speedup"]}
    assert parts["egress"][0]["depth"] == 2 * (params["max_payload"] + 1)
    assert hierarchical.applies("switch", params) and not hierarchical.applies(
        "switch", registry.get("switch").resolve({"ports": 8}))
    # Every part builds with the registry's parameters, and the part modules are removed afterwards.
    with hierarchical.part_modules("switch", hierarchical.parts(params)) as names:
        for name, (prm, _) in parts.items():
            registry.get(names[name]).build(**prm)
    assert not any("__part_" in k for k in registry.MODULES)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("fill_bypass", [False, True])
def test_dysharp_parts_build_with_a_constant_port(fill_bypass):
    """The integrated switch's parts build from the registry; its per-port blocks are synthesized with the
    index 0 baked in (no strap input left for synthesis to keep), as the strapped copies are after the
    flat synthesis propagates their tied constants. With ``fill_bypass`` the link receiver is the one with
    the fill lane."""
    from hw import registry
    from synth import hierarchical

    params = registry.get("dysharp_switch").resolve({"ports": 8, "fill_bypass": fill_bypass})
    plist = hierarchical.dysharp_parts(params)
    rx = next(f for n, f, _p, _c in plist if n == "vc_rx")
    assert rx.endswith("FillBypassReceiver" if fill_bypass else "_VcReceiver"), rx
    with hierarchical.part_modules("dysharp_switch", plist) as names:
        for name, _f, prm, _c in plist:
            comp = registry.get(names[name]).build(**prm)
            assert "port" not in comp.signature.members, name
    assert not any("__part_" in k for k in registry.MODULES)


@pytest.mark.slow
def test_hierarchical_area_matches_flat():
    """Sum of parts against the flat synthesis on a point small enough to flatten (measured: -1.98%;
    ~9 minutes here)."""
    from synth import hierarchical, tools
    try:
        tools.liberty_path()
        tools.cacti_binary()
    except tools.ToolError as e:
        pytest.skip(str(e))
    v = hierarchical.validate("switch", hierarchical.VALIDATION_POINT, quiet=True)
    assert abs(v["rel_diff"]) <= hierarchical.HIER_MARGIN, v
    assert v["hier_arrays_um2"] == pytest.approx(v["flat_arrays_um2"], rel=1e-9), v


def test_validate_refuses_a_hierarchical_point():
    from synth import hierarchical
    with pytest.raises(ValueError, match="below 16 ports"):
        hierarchical.validate("switch", {"ports": 16})


def test_bench_elab_rejects_bad_values(capsys):
    import argparse

    from verif.bench import elab
    p = argparse.ArgumentParser()
    elab.add_arguments(p)
    with pytest.raises(SystemExit, match="--values"):
        elab.run(p.parse_args(["--values", "4,x"]))
    with pytest.raises(SystemExit, match="no parameter"):
        elab.run(p.parse_args(["--param", "nope"]))
    with pytest.raises(SystemExit, match="--emission expects"):
        elab.run(p.parse_args(["--emission", "flat,fast"]))
    with pytest.raises(SystemExit, match="--lint expects"):
        elab.run(p.parse_args(["--lint", "8,x"]))
    with pytest.raises(SystemExit, match="--baseline 'nothing.json' is not a result"):
        elab.run(p.parse_args(["--baseline", "nothing.json"]))


def test_bench_elab_side_by_side():
    from verif.bench import elab
    rows = [{"ports": 8, "emission": "flat", "cpu_s": 100.0, "verilog_mb": 11.0, "peak_rss_mb": 700.0},
            {"ports": 8, "emission": "dedup", "cpu_s": 20.0, "verilog_mb": 2.0, "peak_rss_mb": 200.0},
            {"ports": 16, "emission": "dedup", "cpu_s": 30.0, "verilog_mb": 3.0, "peak_rss_mb": 250.0}]
    (pair,) = elab.side_by_side(rows, "ports")
    assert pair["ports"] == 8 and pair["cpu_s_ratio"] == 5.0 and pair["verilog_mb_ratio"] == 5.5


def test_switch_datapaths_share_part_syntheses(monkeypatch):
    """The plain switch and the integrated switch's response network name their parts alike, so a part
    with the same parameters (the crossbar: half an hour at 64 ports) is one synthesis, not three."""
    from hw import registry
    from synth import area, hierarchical

    calls = []

    def fake_area_point(design, point=None, **kw):
        design = registry.point(design, point)
        calls.append((design.name, dict(design.params)))
        res = {k: 1.0 for k in hierarchical._SUMMED}
        res.update(cells={}, arrays=[], critical_path_ps=None, timing_source="none", period_ps=640.0)
        return area.AreaPoint(design, res)
    monkeypatch.setattr(area, "flat_area_point", fake_area_point)
    hierarchical.area_point("switch", {"ports": 16}, quiet=True)
    plain = dict(calls)
    calls.clear()
    params = registry.get("dysharp_switch").resolve({"ports": 16})
    net = {n: prm for n, _f, prm, _c in hierarchical.dysharp_parts(params) if n == "respnet"}
    with hierarchical.part_modules("dysharp_switch", hierarchical.dysharp_parts(params)) as names:
        hierarchical.area_point(names["respnet"], net["respnet"], quiet=True)
    resp = dict(calls)
    # The crossbar is costed from two column slices (synth.hierarchical.SLICED), each shared.
    param, (k0, k1) = hierarchical.SLICED["xbar"]
    assert {f"switch__part_xbar_{param}{k0}", f"switch__part_xbar_{param}{k1}"} <= set(plain)
    assert plain[f"switch__part_xbar_{param}{k0}"] == resp[f"switch__part_xbar_{param}{k0}"]
    assert plain[f"switch__part_xbar_{param}{k0}"][param] == k0
    assert plain["switch__part_input"] == resp["switch__part_input"]
    assert not any("__part_" in k for k in registry.MODULES)


def test_extrapolation_is_the_line_through_the_slices():
    from synth import hierarchical

    def res(a, cells, cp):
        r = {k: a for k in hierarchical._SUMMED}
        r.update(cells=cells, critical_path_ps=cp, timing_source="sta")
        return r
    out = hierarchical.extrapolate(res(100.0, {"AND2": 10}, 500.0), res(180.0, {"AND2": 18, "INV": 2}, 520.0),
                                   8, 16, 130)
    assert out["area_um2"] == pytest.approx(100 + (130 - 8) * 10)
    assert out["cells"] == {"AND2": 10 + (130 - 8), "INV": round(2 * (130 - 8) / 8)}
    assert out["critical_path_ps"] == 520.0
    assert out["seconds"] == 280.0          # what was run, not extrapolated


@pytest.mark.slow
def test_column_sliced_crossbar_matches_whole():
    """The 8-port crossbar from its 2- and 4-column slices against its whole synthesis (measured +4.6%;
    ~30 s here), within the hierarchical method's margin."""
    from synth import hierarchical, tools
    try:
        tools.liberty_path()
    except tools.ToolError as e:
        pytest.skip(str(e))
    r = hierarchical.check_slices(8, quiet=True)
    assert abs(r["rel_diff"]) <= hierarchical.HIER_MARGIN, r


@pytest.mark.parametrize("arg, message", [("x", "takes comma-separated port counts, got 'x'"),
                                          ("8,1", "port counts must be >= 2, got '8,1'")])
def test_check_slices_rejects_bad_port_counts(arg, message, capsys):
    from dysharp import cli
    assert cli.main(["area", "--check-slices", arg]) == 2
    assert message in capsys.readouterr().err


def test_cross_part_path_is_the_sum_of_its_halves(monkeypatch, tmp_path):
    """A hierarchical point times the input unit -> allocator request path as the output half's arrival plus
    the input half's path to a register (OpenSTA reports canned here), and only when both parts are whole."""
    from synth import area, hierarchical, tools
    work = tmp_path / "work"
    for stem in ("in", "al"):
        (work / stem).mkdir(parents=True)
        (work / stem / "netlist.v").write_text("")
        (work / stem / "timing.tcl").write_text(f"link_design top_{stem}\n")
    monkeypatch.setattr(area, "BUILD", tmp_path)
    monkeypatch.setattr(tools, "opensta_binary", lambda required=True: "sta")
    seen = []

    def run_sta(sta, lib, netlist, top, period, reports, tcl):
        seen.append((top, reports[0]))
        return {"top_in": "  0.1300   slack (MET)", "top_al": "  -1.9000   slack (VIOLATED)"}[top]
    monkeypatch.setattr(area, "run_sta", run_sta)
    monkeypatch.setattr(tools, "liberty_path", lambda: "lib")
    parts = {"input": {"verilog": "x/in.v", "period_ps": 640.0}, "alloc": {"verilog": "x/al.v", "period_ps": 640.0}}
    assert hierarchical.cross_paths(parts) == {"input unit request -> allocator": (640 - 130) + (640 + 1900)}
    assert "-to [get_ports {req[*] req_class[*]}]" in seen[0][1] and "-from [get_ports {req*}]" in seen[1][1]
    assert hierarchical.cross_paths({"input": parts["input"]}) == {}
    assert hierarchical.cross_paths({**parts, "alloc": {**parts["alloc"], "sliced": {}}}) == {}
