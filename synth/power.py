"""Power of a mapped netlist from switching activity, the Liberty tables and CACTI.

Method (the RTL-to-cell mapping)
--------------------------------
* **Seeds.** Every net of the mapped netlist whose name matches an RTL signal in the VCD takes that
  signal's measured activity bit by bit: toggles per cycle (transition density ``D``) and the fraction of
  time at 1 (static probability ``P``). Registers keep their RTL names through synthesis, so every
  flip-flop output, every primary input and many named combinational nets are measured, not estimated.
  The clock's activity is measured too (2 transitions per cycle while it runs).
* **Propagation.** Nets with no RTL counterpart (the combinational nets ABC created) get ``P`` and ``D``
  propagated from the seeds through each cell's Liberty ``function`` in topological order: ``P`` by
  evaluating the function over the input probabilities, ``D`` by Najm's transition density
  ``D(y) = sum_i P(dy/dx_i) D(x_i)`` (Boolean difference), capped at ``2 min(P, 1 - P)``, the most a
  zero-delay net can toggle. Inputs are assumed independent and glitches are not modelled. A flip-flop
  output with no RTL name takes its D input's ``P`` and ``D``; black-box array outputs with no RTL name
  take ``P = 0.5`` and the default density.
* **Cell power.** Switching: ``0.5 C V^2 D f`` per net, ``C`` = the fanout pin capacitances plus the
  library's default wire-load model for the fanout. Internal: per output transition, the Liberty
  ``internal_power`` energy (mean of rise and fall, at the net's load and the driver's input slew),
  weighted over the input arcs by each input's share of the output's transitions; plus the pin-level
  ("hidden") internal power of inputs, e.g. every flip-flop's clock pin, per input transition.
  Leakage: ``cell_leakage_power``.
* **Arrays.** Each black-box array is costed as in the area study: CACTI energy per read and per write
  times the access rate plus CACTI leakage, or, for arrays counted as flip-flops, the Liberty energy of
  their flip-flops and read multiplexers (see :func:`ff_array_power`). Access rates: synchronous read /
  write ports access when their enable is 1 on a clock edge (``P(en)``); an asynchronous read port is
  counted as one read per cycle in which its address changes (the largest address-bit density).
* **Clock gating.** Two figures: *no clock gating* (every flip-flop clock pin toggles every cycle: what
  this RTL synthesizes to) and *ideal register-level clock gating* (a register's clock pins toggle only
  in cycles in which the register's RTL value changes, measured from the VCD; unnamed flip-flops in
  cycles in which their own output toggles). The clock tree itself (buffers, wires) is not synthesized
  here and not counted.
"""

import collections
import json
import math
from pathlib import Path

import numpy as np

from . import liberty as libmod
from .macros import MACRO_PREFIX

__all__ = ["Netlist", "Activity", "propagate", "compute_power", "ff_array_power", "blackbox",
           "DEFAULT_DENSITY"]

DEFAULT_DENSITY = 0.1      # toggles per cycle for unmeasured inputs (OpenSTA's default input activity)
DEFAULT_SLEW_NS = 0.02     # input slew of primary inputs and black-box outputs for table look-ups
BLACKBOX_PIN_CAP = 1.0     # fF per black-box input bit (Liberty default_input_pin_cap of Nangate45)


def blackbox(cell_type: str) -> bool:
    """A cell with no Liberty model: a ``$mem_v2`` array or a macro (:mod:`synth.macros`)."""
    return cell_type.startswith("$") or cell_type.startswith(MACRO_PREFIX)


class Netlist:
    """The mapped netlist (yosys ``write_json``) as nets, drivers and sinks."""

    def __init__(self, path, top: str, lib: libmod.Library):
        data = json.loads(Path(path).read_text())
        mod = data["modules"][top]
        self.top = top
        self.lib = lib
        self.cells = mod["cells"]
        self.names = collections.defaultdict(list)      # net id -> [(name, bit index)]
        for name, nn in mod["netnames"].items():
            for k, b in enumerate(nn["bits"]):
                if isinstance(b, int):
                    self.names[b].append((name, k, nn.get("hide_name", 0)))
        self.inputs, self.outputs = [], []
        self.port_bits = {}
        for pname, p in mod["ports"].items():
            bits = [b for b in p["bits"] if isinstance(b, int)]
            self.port_bits[pname] = bits
            (self.inputs if p["direction"] == "input" else self.outputs).extend(bits)
        self.driver = {}                                  # net -> (cell, pin)
        self.sinks = collections.defaultdict(list)        # net -> [(cell, pin)]
        for cname, c in self.cells.items():
            # yosys gives port directions only for cells it knows; Liberty cells take theirs from the lib.
            dirs = c.get("port_directions") or {}
            if not blackbox(c["type"]):
                dirs = {p: pd["direction"] for p, pd in lib.cell(c["type"])["pins"].items()}
                c["port_directions"] = dirs
            for pin, bits in c["connections"].items():
                for b in bits:
                    if not isinstance(b, int):
                        continue
                    if dirs.get(pin) == "output":
                        self.driver[b] = (cname, pin)
                    else:
                        self.sinks[b].append((cname, pin))
        self.nets = sorted(set(self.driver) | set(self.sinks) | set(self.inputs) | set(self.outputs))

    def load_cap(self, net: int) -> float:
        c = 0.0
        for cname, pin in self.sinks.get(net, ()):
            t = self.cells[cname]["type"]
            if blackbox(t):
                c += BLACKBOX_PIN_CAP
            else:
                c += self.lib.cell(t)["pins"][pin]["capacitance"]
        return c + self.lib.wire_cap(len(self.sinks.get(net, ())))


class Activity:
    """Per-net static probability ``P`` and transition density ``D`` (toggles per cycle)."""

    def __init__(self):
        self.P = {}
        self.D = {}
        self.seeded = set()


def _truth(expr: str):
    ins = libmod.function_inputs(expr)
    n = len(ins)
    table = np.array([libmod.eval_function(expr, {v: (m >> i) & 1 for i, v in enumerate(ins)})
                      for m in range(1 << n)], dtype=np.float64)
    return ins, table


def _eval_group(table, Pm, Dm):
    """Vectorised P, D and per-input Boolean-difference weights for cells sharing one function."""
    n = Pm.shape[1]
    cells = Pm.shape[0]
    P = np.zeros(cells)
    bd = np.zeros((cells, n))
    for m in range(1 << n):
        if table[m]:
            prod = np.ones(cells)
            for i in range(n):
                prod *= Pm[:, i] if (m >> i) & 1 else 1 - Pm[:, i]
            P += prod
    for i in range(n):
        for m in range(1 << n):
            if (m >> i) & 1 or table[m] == table[m | (1 << i)]:
                continue
            prod = np.ones(cells)
            for j in range(n):
                if j != i:
                    prod *= Pm[:, j] if (m >> j) & 1 else 1 - Pm[:, j]
            bd[:, i] += prod
    w = bd * Dm
    D = w.sum(axis=1)
    D = np.minimum(D, 2 * np.minimum(P, 1 - P))
    return np.clip(P, 0, 1), D, w


def _seq_pins(lib, ctype):
    c = lib.cell(ctype)
    ff = c.get("ff") or {}
    outs = {p: pd for p, pd in c["pins"].items() if pd["direction"] == "output"}
    return ff, outs


def propagate(nl: Netlist, seeds: dict, *, default_density: float = DEFAULT_DENSITY,
              clock_net_names=("clk",)) -> tuple[Activity, dict]:
    """Seed (net -> (P, D)) and propagate through the combinational cells (see the module doc).

    Returns the activity and, per combinational cell output, the input-arc weights (for internal power).
    """
    lib = nl.lib
    act = Activity()
    for net, (p, d) in seeds.items():
        act.P[net], act.D[net] = p, d
        act.seeded.add(net)
    # Constants and starting points.
    comb, seq = [], []
    for cname, c in nl.cells.items():
        t = c["type"]
        if blackbox(t):
            continue
        (seq if lib.cell(t)["sequential"] else comb).append(cname)
    start_defaults = {}
    for net in nl.inputs:
        start_defaults[net] = (0.5, default_density)
    for cname, c in nl.cells.items():
        if blackbox(c["type"]):
            for pin, bits in c["connections"].items():
                if c.get("port_directions", {}).get(pin) == "output":
                    for b in bits:
                        if isinstance(b, int):
                            start_defaults[b] = (0.5, default_density)
    for net, pd in start_defaults.items():
        if net not in act.seeded:
            act.P[net], act.D[net] = pd
    # Flip-flop outputs: measured, or a first guess refined below from their D inputs.
    ff_out = {}
    for cname in seq:
        c = nl.cells[cname]
        ff, outs = _seq_pins(lib, c["type"])
        for pin in outs:
            for b in c["connections"].get(pin, []):
                if isinstance(b, int):
                    ff_out[b] = (cname, pin, outs[pin]["function"] == ff.get("qn"))
                    if b not in act.seeded:
                        act.P[b], act.D[b] = 0.5, default_density

    # Levelise the combinational cells.
    tables = {}
    out_pin = {}
    for cname in comb:
        t = nl.cells[cname]["type"]
        pins = lib.cell(t)["pins"]
        outs = [p for p, pd in pins.items() if pd["direction"] == "output" and pd["function"]]
        out_pin[cname] = outs
        for p in outs:
            if (t, p) not in tables:
                tables[(t, p)] = _truth(pins[p]["function"])
    level = {}
    driver_cell = {}
    for cname in comb:
        for p in out_pin[cname]:
            for b in nl.cells[cname]["connections"].get(p, []):
                if isinstance(b, int):
                    driver_cell[b] = cname
    indeg = {}
    users = collections.defaultdict(list)
    for cname in comb:
        deps = set()
        for pin, bits in nl.cells[cname]["connections"].items():
            if pin in out_pin[cname]:
                continue
            for b in bits:
                if isinstance(b, int) and b in driver_cell and driver_cell[b] != cname:
                    deps.add(driver_cell[b])
        indeg[cname] = len(deps)
        for d in deps:
            users[d].append(cname)
    frontier = [c for c in comb if indeg[c] == 0]
    for c in frontier:
        level[c] = 0
    order = []
    while frontier:
        nxt = []
        for c in frontier:
            order.append(c)
            for u in users[c]:
                indeg[u] -= 1
                level[u] = max(level.get(u, 0), level[c] + 1)
                if indeg[u] == 0:
                    nxt.append(u)
        frontier = nxt
    loops = [c for c in comb if c not in level or indeg[c] > 0]
    groups = collections.defaultdict(list)
    for c in order:
        groups[level[c]].append(c)

    def value_of(b):
        if b == "0" or b == "x" or b == "z":
            return 0.0, 0.0
        if b == "1":
            return 1.0, 0.0
        return act.P.get(b, 0.5), act.D.get(b, default_density)

    weights = {}

    def sweep():
        for lv in sorted(groups):
            by_fn = collections.defaultdict(list)
            for c in groups[lv]:
                t = nl.cells[c]["type"]
                for p in out_pin[c]:
                    by_fn[(t, p)].append(c)
            for (t, p), cs in by_fn.items():
                ins, table = tables[(t, p)]
                Pm = np.zeros((len(cs), len(ins)))
                Dm = np.zeros((len(cs), len(ins)))
                for k, c in enumerate(cs):
                    conns = nl.cells[c]["connections"]
                    for i, pin in enumerate(ins):
                        Pm[k, i], Dm[k, i] = value_of(conns[pin][0])
                P, D, w = _eval_group(table, Pm, Dm)
                for k, c in enumerate(cs):
                    net = nl.cells[c]["connections"][p][0]
                    if not isinstance(net, int):
                        continue
                    weights[(c, p)] = (ins, w[k])
                    if net in act.seeded:
                        continue
                    act.P[net], act.D[net] = float(P[k]), float(D[k])

    sweep()
    # Unmeasured flip-flops follow their D input; one more sweep settles the logic they feed.
    changed = False
    for net, (cname, pin, inverted) in ff_out.items():
        if net in act.seeded:
            continue
        dnet = nl.cells[cname]["connections"].get("D", [None])[0]
        if dnet is None:
            continue
        p, d = value_of(dnet)
        act.P[net], act.D[net] = (1 - p if inverted else p), min(d, 2 * min(p, 1 - p))
        changed = True
    if changed:
        sweep()
    info = {"loops": len(loops), "levels": len(groups)}
    return act, weights, info


def _energy(table_entry, slew, cap):
    vals = []
    for kind in ("rise_power", "fall_power"):
        t = table_entry.get(kind)
        if t and t["values"]:
            if t["index_2"]:
                vals.append(libmod.lookup(t, slew, cap))
            else:
                vals.append(libmod.lookup(t, slew))
    return sum(vals) / len(vals) if vals else 0.0


def _slew(lib, ctype, pin, cap, slew_in=DEFAULT_SLEW_NS):
    tr = lib.cell(ctype)["pins"][pin]["transition"]
    if not tr:
        return slew_in
    return sum(libmod.lookup(t, slew_in, cap) for t in tr) / len(tr)


def compute_power(nl: Netlist, act: Activity, weights: dict, *, freq_ghz: float, clock_nets: set,
                  gated_rate: dict | None = None) -> dict:
    """Cell power in mW by kind, and per-cell-class totals. ``gated_rate``: flip-flop cell -> fraction of
    cycles its clock pin toggles (ideal clock gating); None = no clock gating."""
    lib = nl.lib
    V2 = lib.voltage ** 2
    f = freq_ghz * 1e9
    fJ = 1e-15
    cap = {}
    slew = {}
    for net in nl.nets:
        cap[net] = nl.load_cap(net)
    for net, (cname, pin) in nl.driver.items():
        t = nl.cells[cname]["type"]
        slew[net] = DEFAULT_SLEW_NS if blackbox(t) else _slew(lib, t, pin, cap[net])
    out = {"switching_mw": 0.0, "internal_mw": 0.0, "leakage_mw": 0.0, "clock_pin_mw": 0.0,
           "seq_mw": 0.0, "comb_mw": 0.0}
    # Switching power of every net (charged by its driver).
    for net in nl.nets:
        d = act.D.get(net, 0.0)
        if d:
            p = 0.5 * cap[net] * V2 * d * f * fJ * 1e3
            out["switching_mw"] += p
            drv = nl.driver.get(net)
            if drv and not blackbox(nl.cells[drv[0]]["type"]) and lib.cell(nl.cells[drv[0]]["type"])["sequential"]:
                out["seq_mw"] += p
            else:
                out["comb_mw"] += p
    for cname, c in nl.cells.items():
        t = c["type"]
        if blackbox(t):
            continue
        cell = lib.cell(t)
        is_seq = cell["sequential"]
        leak = cell["leakage"] * 1e-6   # nW -> mW
        out["leakage_mw"] += leak
        e_cell = 0.0                    # fJ per cycle
        for pin, pd in cell["pins"].items():
            bits = c["connections"].get(pin, [])
            if not bits or not isinstance(bits[0], int):
                continue
            net = bits[0]
            if pd["direction"] == "output":
                groups = [g for g in pd["internal_power"] if g.get("related_pin")]
                if not groups:
                    continue
                d = act.D.get(net, 0.0)
                if not d:
                    continue
                by_rel = collections.defaultdict(list)
                for g in groups:
                    by_rel[g["related_pin"]].append(_energy(g, DEFAULT_SLEW_NS, cap[net]))
                e_rel = {r: sum(v) / len(v) for r, v in by_rel.items()}
                wt = weights.get((cname, pin))
                if wt and sum(wt[1]) > 0:
                    ins, w = wt
                    tot = float(sum(w))
                    e = sum(e_rel.get(i, 0.0) * float(wi) for i, wi in zip(ins, w)) / tot
                else:
                    e = sum(e_rel.values()) / len(e_rel)
                e_cell += e * d
            else:
                groups = [g for g in pd["internal_power"] if not g.get("related_pin")]
                if not groups:
                    continue
                d = act.D.get(net, 0.0)
                if net in clock_nets and is_seq and gated_rate is not None:
                    d = d * gated_rate.get(cname, 1.0)
                if not d:
                    continue
                e = sum(_energy(g, slew.get(net, DEFAULT_SLEW_NS), 0.0) for g in groups) / len(groups)
                e_cell += e * d
                if net in clock_nets:
                    out["clock_pin_mw"] += e * d * f * fJ * 1e3
        p = e_cell * f * fJ * 1e3
        out["internal_mw"] += p
        out["seq_mw" if is_seq else "comb_mw"] += p + leak
    out["total_mw"] = out["switching_mw"] + out["internal_mw"] + out["leakage_mw"]
    return out


def ff_array_power(geom: dict, lib: libmod.Library, *, reads: float, writes: float, clock: float,
                   freq_ghz: float, gated: bool) -> dict:
    """Estimated power of an array built from flip-flops (Liberty energies; see the module doc):
    clock pins of every bit each cycle (or only the written row's with clock gating), half the bits of
    a written word toggling, a read multiplexer tree of log2(rows) levels with half its nets toggling
    per read, leakage of a DFF + MUX2 per bit."""
    dff = lib.cell("DFF_X1")
    mux = lib.cell("MUX2_X1")
    f = freq_ghz * 1e9
    fJ = 1e-15
    ck = [g for g in dff["pins"]["CK"]["internal_power"]]
    e_ck = sum(_energy(g, DEFAULT_SLEW_NS, 0.0) for g in ck) / max(1, len(ck))
    e_q = sum(_energy(g, DEFAULT_SLEW_NS, 1.0) for g in dff["pins"]["Q"]["internal_power"]) / \
        max(1, len(dff["pins"]["Q"]["internal_power"]))
    e_mux = sum(_energy(g, DEFAULT_SLEW_NS, 1.0) for g in mux["pins"]["Z"]["internal_power"]) / \
        max(1, len(mux["pins"]["Z"]["internal_power"]))
    bits = geom["rows"] * geom["width"]
    levels = max(1, math.ceil(math.log2(max(2, geom["rows"]))))
    clocked_bits = geom["width"] * writes if gated else bits
    e_cycle = clocked_bits * clock * e_ck + writes * geom["width"] * 0.5 * e_q \
        + reads * geom["width"] * levels * 0.5 * e_mux
    leak = bits * (dff["leakage"] + mux["leakage"]) * 1e-6
    dyn = e_cycle * f * fJ * 1e3
    return {"dynamic_mw": dyn, "leakage_mw": leak, "total_mw": dyn + leak}


def macro_control_power(control: dict, lib: libmod.Library, *, accesses: float, clock: float, freq_ghz: float,
                        gated: bool) -> dict:
    """Estimated power of a macro's synthesized control logic (:func:`synth.area.cost_macro`), which is a
    black box in the netlist: the clock pins of its flip-flops (with ideal register-level clock gating,
    only in the fraction ``accesses`` of cycles that update its state) and the leakage of its cells. Its
    combinational switching is not counted (it switches only on the macro's accesses)."""
    dff = lib.cell("DFF_X1")
    ck = dff["pins"]["CK"]["internal_power"]
    e_ck = sum(_energy(g, DEFAULT_SLEW_NS, 0.0) for g in ck) / max(1, len(ck))
    n_ff = control.get("flip_flops", 0)
    e_cycle = n_ff * clock * e_ck * (accesses if gated else 1.0)
    leak = sum(n * lib.cell(c)["leakage"] for c, n in control.get("cells", {}).items()
               if not blackbox(c)) * 1e-6
    dyn = e_cycle * freq_ghz * 1e9 * 1e-15 * 1e3
    return {"dynamic_mw": dyn, "leakage_mw": leak, "total_mw": dyn + leak}
