"""Every block's ``elaborate()`` in ``hw/`` stays about the size of amaranth's own ``lib/`` (at most 120
lines): a bigger body is stages waiting to be named as sub-blocks with signatures."""

import ast
from pathlib import Path

HW = Path(__file__).resolve().parents[2] / "hw"
LIMIT = 120


def _elaborates(root):
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "elaborate":
                yield path.relative_to(root.parent), node.lineno, node.end_lineno - node.lineno + 1


def test_every_elaborate_is_at_most_120_lines():
    found = list(_elaborates(HW))
    assert len(found) > 30                           # the walk sees the blocks
    long = [f"{p}:{line} ({n} lines)" for p, line, n in found if n > LIMIT]
    assert not long, f"elaborate() longer than {LIMIT} lines: {long}"


def test_the_check_sees_a_long_body(tmp_path):
    body = "\n".join(f"        m.d.comb += x.eq({i})" for i in range(LIMIT + 1))
    (tmp_path / "blk.py").write_text(f"class B:\n    def elaborate(self, platform):\n{body}\n")
    [(_, _, n)] = list(_elaborates(tmp_path))
    assert n == LIMIT + 2 > LIMIT                    # the def line and every statement are counted
