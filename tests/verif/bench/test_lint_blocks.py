"""Lint block by block (verif/lint_blocks.py): the plan, the stubs, and what a run finds or cannot find."""

import pytest

from verif import lint, lint_blocks
from verif.bench import lint_blocks as lint_blocks_bench

CHILD = """module leaf(a, b);
  input [3:0] a;
  wire [3:0] a;
  output [3:0] b;
  wire [3:0] b;
  assign b = ~a;
endmodule
"""


def design(top_body: str, leaf: str = CHILD) -> str:
    return ("module top(clk, x, y);\n  input clk;\n  wire clk;\n  input [3:0] x;\n  wire [3:0] x;\n"
            "  output reg [3:0] y;\n  wire [3:0] p;\n  wire [3:0] q;\n" + top_body + "endmodule\n" + leaf)


TWO_LEAVES = design("  leaf c0 (\n    .a(x),\n    .b(p)\n  );\n  leaf c1 (\n    .a(p),\n    .b(q)\n  );\n"
                    "  always @(posedge clk) y <= q;\n")


def test_parse_and_plan():
    mods = lint_blocks.parse_modules(TWO_LEAVES)
    assert set(mods) == {"top", "leaf"} and mods["top"].children == {"leaf": 2} and not mods["leaf"].children
    assert lint_blocks.plan(mods, "top") == [lint_blocks.LintRun("top")]            # small: whole
    runs = lint_blocks.plan(mods, "top", whole_bytes=10)
    assert runs == [lint_blocks.LintRun("top", ("leaf",)), lint_blocks.LintRun("leaf")]
    s = lint_blocks.stub(mods["leaf"])
    assert "input [3:0] a;" in s and "output [3:0] b;" in s and "assign" not in s
    with pytest.raises(ValueError, match="'nope' is not in the file"):
        lint_blocks.plan(mods, "nope")
    with pytest.raises(ValueError, match="no Verilog module"):
        lint_blocks.parse_modules("// nothing\n")


def test_a_flat_design_is_linted_whole():
    """Nothing instantiated twice: block by block would lint the same text, so it stays whole."""
    flat = design("  leaf c0 (\n    .a(x),\n    .b(q)\n  );\n  always @(posedge clk) y <= q;\n  assign p = 0;\n")
    mods = lint_blocks.parse_modules(flat)
    assert lint_blocks.plan(mods, "top", whole_bytes=10) == [lint_blocks.LintRun("top")]


def _lint(tmp_path, monkeypatch, text, whole_bytes, **kw):
    pytest.importorskip("cocotb")
    from verif.harness.runner import verilator_env
    if not verilator_env():
        pytest.skip("Verilator not installed")
    monkeypatch.setattr(lint_blocks, "WHOLE_BYTES", whole_bytes)
    f = tmp_path / "d.v"
    f.write_text(text)
    return lint.lint_file(f, "top", with_runs=True, **kw)


def test_block_lint_is_clean_where_whole_lint_is(tmp_path, monkeypatch):
    waived, problems, runs = _lint(tmp_path, monkeypatch, TWO_LEAVES, 10)
    assert runs == 2 and problems == []
    assert (tmp_path / "lint" / "d" / "00_top__stubbed.v").is_file()


def test_block_lint_finds_a_warning_inside_a_block(tmp_path, monkeypatch):
    bad_leaf = CHILD.replace("  assign b = ~a;\n", "  reg [3:0] r;\n  always @* if (a[0]) r = a;\n  assign b = r;\n")
    _, problems, runs = _lint(tmp_path, monkeypatch, TWO_LEAVES.replace(CHILD, bad_leaf), 10)
    assert runs == 2 and any("LATCH" in p for p in problems), problems


def test_block_lint_finds_a_bad_connection_in_the_stubbed_parent(tmp_path, monkeypatch):
    """A pin the block does not have: the parent's run sees it against the stub's port list."""
    text = TWO_LEAVES.replace("    .b(q)\n", "    .b(q),\n    .c(x)\n")
    _, problems, runs = _lint(tmp_path, monkeypatch, text, 10)
    assert runs == 2 and any("PINNOTFOUND" in p or "Pin not found" in p for p in problems), problems


def test_a_loop_between_blocks_needs_the_whole_run(tmp_path, monkeypatch):
    """The documented limit: a loop through two stubbed blocks is found only when linted whole."""
    loop = TWO_LEAVES.replace("    .a(x),\n    .b(p)", "    .a(q ^ x),\n    .b(p)")
    _, problems, runs = _lint(tmp_path, monkeypatch, loop, 10)
    assert runs == 2 and not any("UNOPTFLAT" in p for p in problems), problems
    _, problems, runs = _lint(tmp_path, monkeypatch, loop, 10, whole=True)
    assert runs == 1 and any("UNOPTFLAT" in p for p in problems), problems


def test_compare_command_rejects_a_bad_point():
    with pytest.raises(ValueError, match="bad point 'switch:ports=x'"):
        lint_blocks_bench.parse_points(["switch:ports=x"])
