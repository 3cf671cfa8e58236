"""``dysharp power`` for one (module, point): netlist + workload VCD -> power figures (see :mod:`synth.power`).

:func:`power_point` synthesizes (or reuses) the netlist, runs the module's workload from
:mod:`synth.workloads` with a VCD (or goes vectorless when it has none), seeds and propagates the
activity, and returns the power with and without clock gating, the arrays' share, and the energy per
dispatched / reduced flit. :func:`opensta_crosscheck` runs OpenSTA's ``report_power`` on the same netlist
with the same measured activity annotated on the same start points (inputs, flip-flop outputs, array
outputs) and the same clock, and returns both totals.
"""

import json
import re
from pathlib import Path

from infra.procs import run_bounded
from hw import registry
from infra import engine

from . import area as area_mod
from . import area_study, liberty, macros, power, tools, workloads
from .power import blackbox
from .activity import vcd_activity
from .vcd_run import run_workload

__all__ = ["power_point", "power_points", "opensta_crosscheck", "seeds_from_vcd"]

SIM_PERIOD_PS = 2000      # verif.harness.cycler.Cycler's clock period in the simulations


def _rtl_match(nl: power.Netlist, acts: dict, cycles: float):
    """Net -> (P, D) for every netlist net whose name (and bit) exists in the VCD; also net -> signal."""
    seeds, owner = {}, {}
    for net in nl.nets:
        for name, k, hidden in sorted(nl.names.get(net, []), key=lambda x: x[2]):
            a = acts.get(name)
            if a is not None and k < a.width:
                seeds[net] = (float(a.ones[k]), float(a.toggles[k]) / cycles)
                owner[net] = name
                break
    return seeds, owner


def seeds_from_vcd(nl, acts, cycles):
    return _rtl_match(nl, acts, cycles)[0]


def _start_points(nl: power.Netlist) -> set:
    """Primary inputs, flip-flop outputs and black-box outputs: where OpenSTA takes annotations."""
    pts = set(nl.inputs)
    for cname, c in nl.cells.items():
        t = c["type"]
        if blackbox(t) or nl.lib.cell(t)["sequential"]:
            for pin, bits in c["connections"].items():
                if c.get("port_directions", {}).get(pin) == "output":
                    pts.update(b for b in bits if isinstance(b, int))
    return pts


def _array_power(nl, act, arrays_by_name, lib, freq_ghz, gated):
    clk_factor = max((act.D.get(b, 0.0) for b in nl.port_bits.get("clk", [])), default=0.0) / 2
    rows = []
    for cname, c in nl.cells.items():
        if c["type"] != "$mem_v2":
            continue
        name = cname.lstrip("\\")
        info = arrays_by_name.get(name)
        if info is None:
            raise RuntimeError(f"black-box array {name} has no area-study costing (stale cache? re-run "
                               f"`dysharp area --no-cache`)")
        conn = c["connections"]
        width = info["width"]
        wr_en = [b for b in conn.get("WR_EN", []) if isinstance(b, int)]
        writes = 0.0
        for k in range(max(1, info["write_ports"])):
            bits = wr_en[k * width:(k + 1) * width] or wr_en
            writes += max((act.P.get(b, 0.0) for b in bits), default=0.0)
        reads = 0.0
        rd_en = [b for b in conn.get("RD_EN", []) if isinstance(b, int)]
        rd_addr = [b for b in conn.get("RD_ADDR", []) if isinstance(b, int)]
        abits = max(1, len(rd_addr) // max(1, info["read_ports"]))
        for k in range(info["read_ports"]):
            if k < info["sync_reads"]:
                en = rd_en[k:k + 1]
                reads += act.P.get(en[0], 1.0) if en else 1.0
            else:
                addr = rd_addr[k * abits:(k + 1) * abits]
                reads += min(1.0, max((act.D.get(b, 0.0) for b in addr), default=0.0))
        reads *= clk_factor
        writes *= clk_factor
        if info["chosen"] == "cacti":
            cr = info["cacti"]
            dyn = (reads * cr["read_pj"] + writes * cr["write_pj"]) * freq_ghz   # pJ/cycle * GHz = mW
            p = {"dynamic_mw": dyn, "leakage_mw": cr["leakage_mw"], "total_mw": dyn + cr["leakage_mw"]}
        else:
            p = power.ff_array_power(info, lib, reads=reads, writes=writes, clock=2 * clk_factor,
                                     freq_ghz=freq_ghz, gated=gated)
        rows.append({"name": name, "chosen": info["chosen"], "reads_per_cycle": reads,
                     "writes_per_cycle": writes, **p})
    by_type = {a["cell_type"]: a for a in arrays_by_name.values() if a.get("cell_type")}
    for cname, c in nl.cells.items():
        if not c["type"].startswith(macros.MACRO_PREFIX):
            continue
        info = by_type.get(c["type"])
        if info is None:
            raise RuntimeError(f"macro cell {cname} ({c['type']}) has no area-study costing (stale cache? "
                               f"re-run `dysharp area --no-cache`)")
        conn = c["connections"]

        def rate(port, conn=conn):
            bits = [b for b in conn.get(port, []) if isinstance(b, int)]
            return act.P.get(bits[0], 0.0) if bits else None
        lookups, writes = macros.kind(info["kind"]).accesses(rate)
        lookups *= clk_factor
        writes *= clk_factor
        if info["chosen"] == "cacti":
            cr = info["cacti"]
            dyn = (lookups * (cr["search_pj"] + cr["read_pj"]) + writes * cr["write_pj"]) * freq_ghz
            ctl = power.macro_control_power(info["control"], lib, accesses=min(1.0, lookups + writes),
                                            clock=2 * clk_factor, freq_ghz=freq_ghz, gated=gated)
            p = {"dynamic_mw": dyn + ctl["dynamic_mw"], "leakage_mw": cr["leakage_mw"] + ctl["leakage_mw"]}
            p["total_mw"] = p["dynamic_mw"] + p["leakage_mw"]
        else:
            geom = {"rows": info["rows"], "width": info["width"] + info["key_width"]}
            p = power.ff_array_power(geom, lib, reads=lookups, writes=writes, clock=2 * clk_factor,
                                     freq_ghz=freq_ghz, gated=gated)
        rows.append({"name": info["name"], "chosen": info["chosen"], "reads_per_cycle": lookups,
                     "writes_per_cycle": writes, **p})
    return rows


def power_point(design: "registry.DesignPoint | str", point: dict | None = None, *,
                freq_ghz: float = area_mod.CLOCK_GHZ, cycles: int = 1000, warmup: int = 200, seed: int = 1,
                vectorless: bool = False, quiet: bool = False, zero_activity: bool = False) -> dict:
    """Power of ``design`` (a :class:`hw.registry.DesignPoint`, or a module name and its overrides
    ``point``; see the module docstring). ``zero_activity``: every net, the clock included, held still (the
    leakage-only check)."""
    design = registry.point(design, point)
    module, point = design.name, design.overrides
    ap = area_study.area_point(design, period_ps=1000 / freq_ghz, netlist=True, quiet=quiet)
    if ap.result is None:
        raise RuntimeError(f"{module} {point}: no synthesis result ({ap.skipped})")
    res = ap.result
    work = area_mod.BUILD / "work" / Path(res["verilog"]).stem
    lp = tools.liberty_path()
    lib = liberty.load(lp)
    nl = power.Netlist(work / "netlist.json", module, lib)
    wl = None if vectorless else workloads.get(module)
    meta = {}
    acts = {}
    if zero_activity:
        seeds = {net: (0.0, 0.0) for net in nl.nets}
        source = "zero activity (every net held at 0)"
        cycles_measured = 1
    elif wl is None:
        seeds = {b: (0.0, 2.0) for b in nl.port_bits.get("clk", [])}
        source = (f"vectorless: inputs P=0.5, D={power.DEFAULT_DENSITY}/cycle" +
                  (" (no workload registered in synth/workloads.py)" if not vectorless else ""))
        cycles_measured = 0
    else:
        warmup = max(warmup, wl.warmup)
        vcd, meta = run_workload(design, wl, warmup=warmup, cycles=cycles, seed=seed)
        t0, t1 = meta["window_ps"]
        acts, length = vcd_activity(vcd, t0, t1, top=module)
        cycles_measured = length / SIM_PERIOD_PS
        seeds, owner = _rtl_match(nl, acts, cycles_measured)
        source = f"{wl.test_module}::{wl.testcase} ({wl.doc}), {cycles_measured:.0f} cycles, seed {seed}"
    act, weights, info = power.propagate(nl, seeds)
    clock_nets = set()
    for cname, c in nl.cells.items():
        if not blackbox(c["type"]) and lib.cell(c["type"])["sequential"]:
            for pin, pd in lib.cell(c["type"])["pins"].items():
                if pd.get("clock") or pin == (lib.cell(c["type"]).get("ff") or {}).get("clocked_on"):
                    clock_nets.update(b for b in c["connections"].get(pin, []) if isinstance(b, int))
    clock_nets.update(nl.port_bits.get("clk", []))
    # Ideal register-level clock gating: a flip-flop's clock runs in the cycles its register changes.
    gated = {}
    for cname, c in nl.cells.items():
        if blackbox(c["type"]) or not lib.cell(c["type"])["sequential"]:
            continue
        q = next((b for p in ("Q", "QN") for b in c["connections"].get(p, []) if isinstance(b, int)), None)
        rate = None
        if q is not None and acts:
            for name, k, _h in nl.names.get(q, []):
                a = acts.get(name)
                if a is not None and k < a.width:
                    rate = min(1.0, a.changes / max(1.0, cycles_measured))
                    break
        if rate is None:
            rate = min(1.0, act.D.get(q, 0.0)) if q is not None else 1.0
        gated[cname] = rate
    by_name = {a["name"]: a for a in res["arrays"]}
    out = {"module": module, "point": point, "params": ap.params, "freq_ghz": freq_ghz,
           "activity_source": source, "workload": meta,
           "seeded_nets": len(seeds), "nets": len(nl.nets),
           "ff_seeded": 0, "ff_total": 0, "propagation": info}
    for cname, c in nl.cells.items():
        if not blackbox(c["type"]) and lib.cell(c["type"])["sequential"]:
            out["ff_total"] += 1
            q = next((b for b in c["connections"].get("Q", []) if isinstance(b, int)), None)
            out["ff_seeded"] += q in seeds
    for label, g in (("no_gating", None), ("clock_gated", gated)):
        cells = power.compute_power(nl, act, weights, freq_ghz=freq_ghz, clock_nets=clock_nets, gated_rate=g)
        arrays = _array_power(nl, act, by_name, lib, freq_ghz, gated=g is not None)
        arr_total = sum(a["total_mw"] for a in arrays)
        out[label] = {"cells": cells, "arrays": arrays, "arrays_mw": arr_total,
                      "arrays_leakage_mw": sum(a["leakage_mw"] for a in arrays),
                      "total_mw": cells["total_mw"] + arr_total,
                      "leakage_mw": cells["leakage_mw"] + sum(a["leakage_mw"] for a in arrays)}
    for label in ("no_gating", "clock_gated"):
        tot = out[label]["total_mw"]
        for kind in ("dispatched_flits", "reduced_flits"):
            n = meta.get(kind)
            if n:
                per_cycle = n / max(1.0, cycles_measured)
                # mW / (flits/cycle * GHz) = pJ per flit
                out[label][f"pj_per_{kind[:-6]}_flit"] = tot / (per_cycle * freq_ghz)
        for name, n in (meta.get("events") or {}).items():
            if n:
                out[label].setdefault("pj_per_event", {})[name] = tot / (n / max(1.0, cycles_measured) * freq_ghz)
    return out


def _power_task(job) -> dict:
    design, kw = job
    return power_point(design, **kw)


def _power_key(job) -> str:
    """What a power point depends on: the hardware, the flow and workload code (``synth``, ``verif``),
    the liberty, the yosys command and the design point (its module and its parameters that differ from the
    defaults: equal points share a key)."""
    design, kw = job
    return engine.content_key("power", registry.hw_source_hash(), engine.source_hash("synth", "verif"),
                              area_mod.file_sha(tools.liberty_path()), area_mod.yosys_id(),
                              bool(tools.opensta_binary(required=False)), design.name, design.overrides, kw)


def power_points(points: "list[registry.DesignPoint | tuple[str, dict]]", *, jobs: int | None = None,
                 scheduler: str | None = None, cache: bool = True, **kw) -> list[dict]:
    """:func:`power_point` of every design point (a :class:`hw.registry.DesignPoint`, or a (module,
    overrides) pair), as :func:`infra.engine.map_tasks` tasks (``jobs`` local processes or the Dask cluster
    at ``scheduler``); with ``cache`` a point whose content key is unchanged is read from
    ``build/cache/power``. Results in order."""
    store = engine.cache("power") if cache else None
    designs = [registry.point(*p) if isinstance(p, tuple) else registry.point(p) for p in points]
    return engine.map_tasks(_power_task, [(d, kw) for d in designs], jobs=jobs, scheduler=scheduler, desc="power",
                            labels=[f"{d.name} {d.overrides or '(defaults)'}" for d in designs], cache=store,
                            key=_power_key if cache else None)


def opensta_crosscheck(design: "registry.DesignPoint | str", point: dict | None = None, *, freq_ghz: float,
                       seed: int = 1, cycles: int = 1000, warmup: int = 200) -> dict:
    """OpenSTA ``report_power`` and our engine on the same netlist with the same activity on every net.

    Debian's OpenSTA (2019) does not propagate pin annotations through combinational logic, so the
    activity of *every* net (measured from the VCD or propagated by :func:`synth.power.propagate`) is
    annotated on its driver pin; the clock is OpenSTA's own (2 transitions per cycle). The comparison
    then checks the power arithmetic (loads, wire-load model, internal-power tables, leakage) of cells;
    arrays are black boxes to OpenSTA and left out of both figures."""
    sta = tools.opensta_binary(required=True)
    design = registry.point(design, point)
    module, point = design.name, design.overrides
    ap = area_study.area_point(design, period_ps=1000 / freq_ghz, netlist=True, quiet=True)
    work = area_mod.BUILD / "work" / Path(ap.result["verilog"]).stem
    lp = tools.liberty_path()
    lib = liberty.load(lp)
    nl = power.Netlist(work / "netlist.json", module, lib)
    wl = workloads.get(module)
    if wl is None:
        raise RuntimeError(f"no workload for {module}: the cross-check needs measured activity")
    vcd, meta = run_workload(design, wl, warmup=max(warmup, wl.warmup), cycles=cycles, seed=seed)
    t0, t1 = meta["window_ps"]
    acts, length = vcd_activity(vcd, t0, t1, top=module)
    seeds, _ = _rtl_match(nl, acts, length / SIM_PERIOD_PS)
    act, weights, _info = power.propagate(nl, seeds)
    clk = set(nl.port_bits.get("clk", []))
    for b in clk:
        act.P[b], act.D[b] = 0.5, 2.0
    ours = power.compute_power(nl, act, weights, freq_ghz=freq_ghz, clock_nets=clk)
    area_mod.strip_array_params(work / "netlist.v")
    lines = [f"read_liberty {lp.resolve()}", f"read_verilog {(work / 'netlist.v').resolve()}",
             f"link_design {module}",
             f"create_clock -name clk -period {1 / freq_ghz:.6f} [get_ports clk]",
             "set_power_activity -input -activity 0.0 -duty 0.0"]
    port_of = {}
    for pname, bits in nl.port_bits.items():
        for k, b in enumerate(bits):
            port_of[b] = (pname, k, len(bits))
    n_annot = 0
    for net in nl.nets:
        if net in clk or net not in act.D:
            continue
        d, pr = act.D[net], act.P.get(net, 0.5)
        if net in port_of and net in nl.inputs:
            pname, k, w = port_of[net]
            ref = pname if w == 1 else f"{pname}[{k}]"
            lines.append(f"sta::set_power_input_port_activity [get_ports {{{ref}}}] {d:.6g} {pr:.6g}")
            n_annot += 1
            continue
        drv = nl.driver.get(net)
        if drv and not blackbox(nl.cells[drv[0]]["type"]):
            cname, pin = drv
            lines.append(f"sta::set_power_pin_activity [get_pins {{{cname.lstrip(chr(92))}/{pin}}}] "
                         f"{d:.6g} {pr:.6g}")
            n_annot += 1
    lines += ["report_power -digits 6", "exit", ""]
    tcl = work / "power.tcl"
    tcl.write_text("\n".join(lines))
    r = run_bounded([sta, "-no_splash", "-exit", str(tcl)], capture_output=True, text=True, timeout=3600)
    (work / "power_sta.txt").write_text(r.stdout + r.stderr)
    m = re.search(r"^Total\s+([-\d.eE+]+)\s+([-\d.eE+]+)\s+([-\d.eE+]+)\s+([-\d.eE+]+)", r.stdout, re.M)
    if not m:
        raise RuntimeError(f"OpenSTA report_power gave no total (see {work / 'power_sta.txt'})")
    internal, switching, leakage, total = (float(x) * 1e3 for x in m.groups())   # W -> mW
    groups = {}
    for g in ("Sequential", "Combinational"):
        mg = re.search(rf"^{g}\s+([-\d.eE+]+)\s+([-\d.eE+]+)\s+([-\d.eE+]+)\s+([-\d.eE+]+)", r.stdout, re.M)
        if mg:
            groups[g.lower() + "_mw"] = float(mg.group(4)) * 1e3
    errors = sum(1 for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("Error"))
    return {"module": module, "point": point, "annotated_pins": n_annot, "sta_errors": errors,
            "opensta": {"internal_mw": internal, "switching_mw": switching, "leakage_mw": leakage,
                        "total_mw": total, **groups},
            "ours": {k: ours[k] for k in ("internal_mw", "switching_mw", "leakage_mw", "total_mw")}
            | {"sequential_mw": ours["seq_mw"], "combinational_mw": ours["comb_mw"],
               "clock_pins_mw": ours["clock_pin_mw"]},
            "difference_pct": 100 * (ours["total_mw"] - total) / total if total else None}
