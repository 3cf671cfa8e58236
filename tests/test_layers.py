"""The import layers of pyproject.toml's ``[tool.importlinter]`` (dysharp > synth > verif > sim_models > hw >
infra, and no circle inside a package) hold, checked by ``lint-imports``; the same contracts break on a
forbidden import; and no module imports itself back through others."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` in ``root`` with the packages of ``root`` first on the path (not an installed copy)."""
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_layers_and_acyclic_contracts_are_kept():
    res = lint_imports(REPO)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    for contract in CONFIG["contracts"]:
        assert f"{contract['name']} KEPT" in out, out
    assert "BROKEN" not in out


def _fixture(root: Path, imports: dict[str, str]) -> None:
    """A tree with every root package of the contracts, the modules their ignored imports name, and
    ``imports`` ({module: the module it imports}); the project's contracts as its pyproject.toml."""
    ignored = [tuple(s.strip() for s in line.split("->"))
               for c in CONFIG["contracts"] for line in c.get("ignore_imports", [])]
    edges = list(imports.items()) + ignored
    modules = set(CONFIG["root_packages"]) | {m for e in edges for m in e}
    for mod in modules:
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):
            d = root.joinpath(*parts[:i])
            d.mkdir(exist_ok=True)
            (d / "__init__.py").touch()
    for mod in modules:
        (root.joinpath(*mod.split(".")) / "__init__.py").write_text(
            "".join(f"import {b}\n" for a, b in edges if a == mod))
    lines = ["[tool.importlinter]", f"root_packages = {CONFIG['root_packages']!r}"]
    for c in CONFIG["contracts"]:
        lines.append("[[tool.importlinter.contracts]]")
        lines += [f"{k} = {v!r}" for k, v in c.items()]
    (root / "pyproject.toml").write_text("\n".join(lines).replace("'", '"') + "\n")


@pytest.mark.parametrize("imports, broken", [
    ({"hw.packet": "infra.engine"}, None),                                  # downwards: allowed
    ({"verif.bench": "dysharp.commands"}, "layers"),                        # up into the CLI
    ({"sim_models.sweep": "verif.harness"}, "layers"),                      # up one layer
    ({"synth.area": "synth.report", "synth.report": "synth.area"}, "circles"),  # a circle in a package
])
def test_the_contracts_break_on_a_forbidden_import(tmp_path, imports, broken):
    _fixture(tmp_path, dict(imports))
    res = lint_imports(tmp_path)
    out = res.stdout + res.stderr
    names = {("layers" if c["type"] == "layers" else "circles"): c["name"] for c in CONFIG["contracts"]}
    if broken is None:
        assert res.returncode == 0 and "BROKEN" not in out, out
    else:
        assert res.returncode == 1, out
        assert f"{names[broken]} BROKEN" in out, out
        assert all(f"{n} KEPT" in out for k, n in names.items() if k != broken), out


def test_no_module_imports_itself_back():
    """No circle of modules, in any package or across them (the acyclic contract counts sub-packages as one
    and ignores two imports; this counts every module, with no exception)."""
    sys.path.insert(0, str(REPO))
    try:
        graph = grimp.build_graph(*CONFIG["root_packages"], cache_dir=None)
    finally:
        sys.path.remove(str(REPO))
    index, low, stack, on, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v):        # Tarjan's strongly connected components; a component of two or more is a circle
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph.modules)))
    try:
        for m in sorted(graph.modules):
            if m not in index:
                visit(m)
    finally:
        sys.setrecursionlimit(limit)
    assert circles == []
