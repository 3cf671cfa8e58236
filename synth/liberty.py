"""A small Liberty (``.lib``) reader: what the area and power flow needs from a standard-cell library.

:func:`load` parses the library once and caches a JSON summary under ``build/synth/`` (keyed by the
file's sha256): per cell its area, leakage (``cell_leakage_power``), whether it is sequential (``ff`` /
``latch`` group), and per pin its direction, capacitance, Boolean ``function`` and internal-power tables;
plus the units, the nominal voltage and the wire-load models.

Units follow the library's own declarations; for Nangate45 that is area in um^2, capacitance in fF,
time in ns, leakage in nW, and internal power tables in fJ per transition (capacitance unit x voltage
unit^2).
"""

import bisect
import hashlib
import json
import os
import re
from pathlib import Path

__all__ = ["Library", "load", "parse_groups", "eval_function", "function_inputs"]

_TOKEN = re.compile(r'\s+|/\*.*?\*/|\\\n|"(?:[^"\\]|\\.)*"|[{}();:,]|[^\s{}();:,"]+', re.S)


class _Group:
    __slots__ = ("kind", "args", "attrs", "groups")

    def __init__(self, kind, args):
        self.kind = kind
        self.args = args
        self.attrs = {}
        self.groups = []

    def find(self, kind):
        return [g for g in self.groups if g.kind == kind]


def _tokens(text):
    for m in _TOKEN.finditer(text):
        t = m.group(0)
        if t[0].isspace() or t.startswith("/*") or t == "\\\n":
            continue
        yield t


def _unquote(t):
    return t[1:-1].replace("\\\n", "") if t.startswith('"') else t


def parse_groups(text: str) -> _Group:
    """Parse Liberty text into nested groups; returns the top-level ``library`` group."""
    toks = list(_tokens(text))
    n = len(toks)
    root = _Group("<root>", [])
    stack = [root]
    i = 0
    while i < n:
        t = toks[i]
        if t == "}":
            stack.pop()
            i += 1
            if i < n and toks[i] == ";":
                i += 1
            continue
        name = t
        nxt = toks[i + 1] if i + 1 < n else None
        if nxt == ":":                                   # simple attribute: name : value ;
            j = i + 2
            vals = []
            while j < n and toks[j] not in (";", "}") and not (toks[j + 1] == ":" if j + 1 < n else False):
                vals.append(toks[j])
                j += 1
            stack[-1].attrs[name] = _unquote(" ".join(vals)) if len(vals) != 1 else _unquote(vals[0])
            i = j + 1 if j < n and toks[j] == ";" else j
        elif nxt == "(":                                 # group or complex attribute
            j = i + 2
            args = []
            while toks[j] != ")":
                if toks[j] != ",":
                    args.append(_unquote(toks[j]))
                j += 1
            j += 1
            if j < n and toks[j] == "{":
                g = _Group(name, args)
                stack[-1].groups.append(g)
                stack.append(g)
                i = j + 1
            else:
                stack[-1].attrs.setdefault(name, args)
                i = j + 1 if j < n and toks[j] == ";" else j
        else:
            raise ValueError(f"liberty parse error near token {i}: {toks[max(0, i - 5):i + 5]}")
    libs = root.find("library")
    if not libs:
        raise ValueError("no library group found: not a Liberty file")
    return libs[0]


def _floats(args) -> list[float]:
    out = []
    for a in args:
        out.extend(float(x) for x in str(a).replace("\\", " ").replace(",", " ").split())
    return out


def _table(g: _Group, templates: dict) -> dict:
    tmpl = templates.get(g.args[0] if g.args else "", {})
    idx1 = _floats(g.attrs.get("index_1", tmpl.get("index_1", [])))
    idx2 = _floats(g.attrs.get("index_2", tmpl.get("index_2", [])))
    vals = _floats(g.attrs.get("values", []))
    return {"vars": tmpl.get("vars", []), "index_1": idx1, "index_2": idx2, "values": vals}


def _summarise(lib: _Group) -> dict:
    templates = {}
    for kind in ("power_lut_template", "lu_table_template"):
        for g in lib.find(kind):
            templates[g.args[0]] = {
                "vars": [g.attrs.get(f"variable_{k}") for k in (1, 2, 3) if f"variable_{k}" in g.attrs],
                "index_1": g.attrs.get("index_1", []), "index_2": g.attrs.get("index_2", [])}
    cap_unit = lib.attrs.get("capacitive_load_unit", ["1", "ff"])
    summary = {
        "name": lib.args[0] if lib.args else "",
        "units": {"time": lib.attrs.get("time_unit"), "leakage_power": lib.attrs.get("leakage_power_unit"),
                  "capacitance": f"{cap_unit[0]}{cap_unit[1]}", "voltage": lib.attrs.get("voltage_unit")},
        "voltage": float(lib.attrs.get("nom_voltage", 0)),
        "default_wire_load": lib.attrs.get("default_wire_load"),
        "wire_loads": {},     # filled by _wire_loads (fanout_length repeats, which the group reader folds)
        "cells": {},
    }
    for cell in lib.find("cell"):
        c = {"area": float(cell.attrs.get("area", 0)),
             "leakage": float(cell.attrs.get("cell_leakage_power", 0)),
             "dont_use": str(cell.attrs.get("dont_use", "false")).lower() == "true",
             "sequential": bool(cell.find("ff") or cell.find("latch") or cell.find("statetable")),
             "ff": None, "pins": {}}
        for ff in cell.find("ff"):
            c["ff"] = {"clocked_on": ff.attrs.get("clocked_on"), "next_state": ff.attrs.get("next_state"),
                       "q": ff.args[0] if ff.args else None, "qn": ff.args[1] if len(ff.args) > 1 else None}
        for pin in cell.find("pin"):
            p = {"direction": pin.attrs.get("direction"),
                 "capacitance": float(pin.attrs.get("capacitance", 0)),
                 "function": pin.attrs.get("function"),
                 "clock": str(pin.attrs.get("clock", "false")).lower() == "true",
                 "internal_power": [], "transition": []}
            for ip in pin.find("internal_power"):
                e = {"related_pin": ip.attrs.get("related_pin"), "when": ip.attrs.get("when")}
                for kind in ("rise_power", "fall_power"):
                    t = ip.find(kind)
                    if t:
                        e[kind] = _table(t[0], templates)
                p["internal_power"].append(e)
            for tg in pin.find("timing"):
                for kind in ("rise_transition", "fall_transition"):
                    t = tg.find(kind)
                    if t:
                        p["transition"].append(_table(t[0], templates))
            c["pins"][pin.args[0]] = p
        summary["cells"][cell.args[0]] = c
    return summary


def _wire_loads(text: str) -> dict:
    """fanout_length pairs per wire_load group (repeated complex attributes, read with a regex)."""
    out = {}
    for m in re.finditer(r'wire_load\s*\(\s*"?([^")]+)"?\s*\)\s*\{(.*?)\}', text, re.S):
        body = m.group(2)
        cap = re.search(r"capacitance\s*:\s*([-\d.eE+]+)", body)
        slope = re.search(r"slope\s*:\s*([-\d.eE+]+)", body)
        pairs = [(int(a), float(b)) for a, b in re.findall(r"fanout_length\s*\(\s*(\d+)\s*,\s*([-\d.eE+]+)", body)]
        out[m.group(1)] = {"capacitance": float(cap.group(1)) if cap else 0.0,
                           "slope": float(slope.group(1)) if slope else 0.0, "fanout_length": sorted(pairs)}
    return out


class Library:
    """The summary of one liberty, with the look-ups the flow needs."""

    def __init__(self, summary: dict):
        self.summary = summary
        self.cells = summary["cells"]
        self.voltage = summary["voltage"]
        self.default_wire_load = summary.get("default_wire_load")

    # -- area / classification
    def area(self, cell: str) -> float:
        return self.cell(cell)["area"]

    def cell(self, name: str) -> dict:
        try:
            return self.cells[name]
        except KeyError:
            raise ValueError(f"cell {name!r} is not in the liberty {self.summary['name']}") from None

    def is_sequential(self, cell: str) -> bool:
        return self.cell(cell)["sequential"]

    # -- power
    def wire_cap(self, fanout: int, model: str | None = None) -> float:
        """Wire capacitance of a net with ``fanout`` sinks from the wire-load model (library cap unit)."""
        model = model or self.default_wire_load
        if not model or fanout <= 0:
            return 0.0
        wl = self.summary["wire_loads"][model]
        pairs = wl["fanout_length"]
        length = None
        for f, length_f in pairs:
            if f == fanout:
                length = length_f
                break
        if length is None:
            if not pairs:
                return 0.0
            last_f, last_l = pairs[-1]
            length = last_l + (fanout - last_f) * wl["slope"] if fanout > last_f else pairs[0][1]
        return length * wl["capacitance"]


def lookup(table: dict, x: float, y: float | None = None) -> float:
    """Bilinear interpolation (and extrapolation) in a Liberty table."""
    i1, i2, v = table["index_1"], table["index_2"], table["values"]
    if not i1:                       # scalar table
        return v[0] if v else 0.0
    if not i2:
        return _interp1(i1, v, x)
    n2 = len(i2)
    rows = [v[k * n2:(k + 1) * n2] for k in range(len(i1))]
    col = [_interp1(i2, r, y) for r in rows]
    return _interp1(i1, col, x)


def _interp1(xs, ys, x):
    if len(xs) == 1:
        return ys[0]
    k = bisect.bisect_left(xs, x)
    k = min(max(k, 1), len(xs) - 1)
    x0, x1 = xs[k - 1], xs[k]
    return ys[k - 1] + (ys[k] - ys[k - 1]) * (x - x0) / (x1 - x0)


def load(path, cache_dir="build/synth") -> Library:
    """Parse ``path`` (cached as JSON by its sha256)."""
    path = Path(path)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()[:16]
    cache = Path(cache_dir) / f"liberty-{digest}.json"
    if cache.is_file():
        try:
            return Library(json.loads(cache.read_text()))
        except ValueError:
            pass
    text = data.decode("latin-1")
    summary = _summarise(parse_groups(text))
    summary["wire_loads"] = _wire_loads(text)
    if not summary["cells"]:
        raise ValueError(f"{path} has no cells: not a usable liberty")
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(summary))
    os.replace(tmp, cache)
    return Library(summary)


# ---------------------------------------------------------------------------------------------------------
# Liberty Boolean functions ("!(A1 & A2)", "(A ^ B)", "A1 + A2", "(S & B) | (A & !S)", "A'")

_FTOK = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|[!()&|*+^']|[01])")


def _fparse(expr: str):
    toks = [m.group(1) for m in _FTOK.finditer(expr)]
    pos = [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else None

    def take():
        t = toks[pos[0]]
        pos[0] += 1
        return t

    def primary():
        t = take()
        if t == "!":
            node = ("not", primary())
        elif t == "(":
            node = orexpr()
            if take() != ")":
                raise ValueError(f"unbalanced parentheses in function {expr!r}")
        elif t in ("0", "1"):
            node = ("const", int(t))
        else:
            node = ("var", t)
        while peek() == "'":
            take()
            node = ("not", node)
        return node

    def andexpr():
        node = primary()
        while peek() in ("&", "*") or (peek() is not None and peek() not in ("|", "+", "^", ")")):
            if peek() in ("&", "*"):
                take()
            node = ("and", node, primary())
        return node

    def xorexpr():
        node = andexpr()
        while peek() == "^":
            take()
            node = ("xor", node, andexpr())
        return node

    def orexpr():
        node = xorexpr()
        while peek() in ("|", "+"):
            take()
            node = ("or", node, xorexpr())
        return node

    tree = orexpr()
    if pos[0] != len(toks):
        raise ValueError(f"cannot parse liberty function {expr!r}")
    return tree


def _feval(node, env):
    op = node[0]
    if op == "var":
        return env[node[1]]
    if op == "const":
        return node[1]
    if op == "not":
        return 1 - _feval(node[1], env)
    a, b = _feval(node[1], env), _feval(node[2], env)
    return a & b if op == "and" else a | b if op == "or" else a ^ b


def function_inputs(expr: str) -> list[str]:
    names = []

    def walk(n):
        if n[0] == "var" and n[1] not in names:
            names.append(n[1])
        for c in n[1:]:
            if isinstance(c, tuple):
                walk(c)
    walk(_fparse(expr))
    return names


def eval_function(expr: str, env: dict) -> int:
    return _feval(_fparse(expr), env)
