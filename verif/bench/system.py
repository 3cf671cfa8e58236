"""``dysharp system``: one MoE layer on the system top (G GPU NICs on one DySHARP switch), per scheme.

Each scheme is one run of the layer testbench :mod:`verif.tb.system` on the same RTL (``system`` at the
layer's :meth:`~verif.models.moe_layer.MoeLayer.system_params`). ``--harness fast`` (the default) runs it on
the compiled harness :mod:`verif.tb.system_fast` (Verilator; the per-cycle agents in C++, the
testbench's models in Python on events only), ``--harness cocotb`` under cocotb (Verilator by default, or
``--sim icarus``); both give the same figures (``tests/verif/test_system_fast.py``). The testbench checks every
home GPU's output rows bit for bit against numpy, every error counter, and each GPU's link flits per
direction against ``sim_models.traffic`` (a failed check fails the run, naming the seed). This command
then writes, under ``--out`` (default ``build/system/``):

* ``<point>.json``: per scheme the testbench's figures (cycles per phase, flits per link direction per
  GPU, AL-TLB hits and misses, reduction-engine counters, reduction-buffer entries in use over time,
  tile ready cycles and latencies, pipeline fill (first tile ready) and drain (cycles after the last
  GEMM), link
  utilization per ``bin`` cycles, simulated cycles/s), the estimator's prediction of the same scaled
  configuration (:func:`sim_models.rtl_scale.predict_cycles`), the estimator's full-size figure for the
  same G, tokens and routing on a real system (:func:`sim_models.rtl_scale.full_size`) and the
  calibration figures;
* ``<point>.png``: both link directions' utilization over time, one panel per scheme;
* ``build/bench/system.json``: the calibration figures the estimator reads (:mod:`sim_models.calibration`):
  the AL-TLB misses per translated key under MoE traffic and the tile ready latency (last row landed -> tile ready) of the
  fused run; and how much they move the full-scale estimate (DeepSeek-V3 on the default system).

``--predict-only`` prints the estimator's prediction of the scaled run and its full-size figure and exits
before any build (the same argument checks; nothing written).

Bad arguments (model, scheme, GPU count, tokens, hidden size) are refused with the valid values. A GPU
that stops answering (``--silent-gpu G --silent-at CYCLE``, a fault) ends its run with a timeout that
names the unfinished tokens.
"""

import dataclasses
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from verif.bench.common import table

from verif.models.moe_layer import SCHEMES, TRAFFIC_SCHEME
from infra.scope import scope_of
DEFAULTS = {"model": "deepseek-v3", "gpus": 8, "tokens": 256, "hidden": 128, "seed": 1, "redundant_experts": 0}
#: The compiled harness's builds: name -> (build_system's inputs_at_rise, profile-guided, its other
#: arguments). ``fast`` (the default) is profile-guided (:func:`fast_build`), keeps the RTL's conditions
#: (:data:`~verif.harness.fastsim.build.KEEP_CONDITIONS`) and, up to 32 GPUs, inlines every block;
#: ``fast-noprofile`` is the same build without the profile, ``fast-dfg-all`` with every rewrite of
#: Verilator's DFG pass, ``fast-apart`` with the repeated blocks kept apart (``fast-apart-dfg-all``: and
#: every rewrite), ``fast-inline`` with every block inlined whatever the top's size, ``fast-threads2``
#: the default build evaluating each cycle on 2 threads (Verilator's ``--threads 2``), and ``fast-fall``
#: latches the inputs on the falling edge, without the profile; kept for side-by-side measurements (same
#: figures).
FAST_HARNESSES = {"fast": (True, True, {}), "fast-noprofile": (True, False, {}),
                  "fast-dfg-all": (True, True, {"keep_conditions": False}),
                  "fast-apart": (True, True, {"inline": False}),
                  "fast-inline": (True, True, {"inline": True}),
                  "fast-threads2": (True, True, {"threads": 2}),
                  "fast-apart-dfg-all": (True, True, {"inline": False, "keep_conditions": False}),
                  "fast-fall": (False, False, {})}
#: Every harness of ``dysharp system --harness``: the compiled builds, ``cocotb`` second.
HARNESSES = ("fast", "cocotb", *(h for h in FAST_HARNESSES if h != "fast"))


def fast_build(point: "Point", schemes, harness: str, timeout: int, bin_cycles: int,
               train_scheme: str | None = None) -> tuple:
    """(library, port names) of the compiled harness ``harness`` for ``point`` with ``schemes`` built in
    (None: all); a profile-guided build trains on the point's layer under ``train_scheme`` (default: the
    first fused one of ``schemes``, else its first)."""
    from hw import registry
    from verif.harness.fastsim.system import build_system

    design = registry.point("system", point.system_params(schemes))
    inputs_at_rise, pgo, more = FAST_HARNESSES[harness]
    train = None
    if pgo:
        from verif.models.moe_layer import FUSED_SCHEMES
        scheme = train_scheme or next((s for s in schemes if s in FUSED_SCHEMES), schemes[0])
        train = layer_settings(point, scheme, None, timeout, bin_cycles, None)
    return build_system(design, inputs_at_rise=inputs_at_rise, train=train, **more)[:2]


def layer_settings(point: "Point", scheme: str, out: "Path | None", timeout: int, bin_cycles: int,
                   silent: tuple | None, drop: bool = True) -> dict:
    """The testbench's settings of one run (``verif/tb/system.py``; ``out``: its JSON file, or None)."""
    env = {"model": point.model, "tokens": point.tokens, "hidden": point.hidden, "seed": point.seed,
           "scheme": scheme, "timeout": timeout, "bin": bin_cycles}
    if out is not None:
        env["out"] = str(out.resolve())
    if point.gemm:
        env["gemm"] = list(point.gemm)
    if point.redundant_experts:
        env["redundant_experts"] = point.redundant_experts
    if point.system:
        env["system"] = point.system
    if silent is not None:
        env["silent"] = list(silent)
    if not drop:
        env["drop"] = False
    if point.feeder != "plain":
        env["feeder"] = point.feeder
    return env


def add_arguments(p) -> None:
    p.add_argument("--model", default=DEFAULTS["model"], help="model configuration (default: deepseek-v3)")
    p.add_argument("--gpus", type=int, default=DEFAULTS["gpus"], help="GPUs G, one switch port each (default: 8)")
    p.add_argument("--tokens", type=int, default=DEFAULTS["tokens"], help="tokens per GPU (default: 256)")
    p.add_argument("--hidden", type=int, default=DEFAULTS["hidden"],
                   help="scaled hidden size, a multiple of 16 (default: 128; GEMM times scale with it)")
    p.add_argument("--scheme", default="all",
                   help=f"comma-separated schemes or 'all' (default); valid: {', '.join(SCHEMES)}")
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="routing and data seed (default: 1)")
    p.add_argument("--redundant-experts", type=int, default=DEFAULTS["redundant_experts"], metavar="R",
                   help="replicas of the R most-loaded experts, so that experts + R split evenly over the GPUs "
                        "(e.g. 32 for DeepSeek-V3's 256 experts on 72 GPUs, as its deployment does; default: 0)")
    p.add_argument("--system", default=None,
                   help="the system the layer stands for (GEMM roofline, links, and its port width as the flit "
                        "width; default: hgx-h100 up to 64 GPUs, nvl72 past them, whose 256-bit flits carry the "
                        "wide header)")
    p.add_argument("--harness", default="fast",
                   help=f"fast (compiled, Verilator, profile-guided; default) or cocotb (fast-noprofile: the "
                        f"compiled harness without the profile; fast-dfg-all: with every rewrite of Verilator's "
                        f"DFG pass; fast-apart: its repeated blocks kept apart (fast-apart-dfg-all: and every "
                        f"rewrite); fast-inline: every block inlined at any size; fast-threads2: on 2 threads; "
                        f"fast-fall: its inputs latched on the falling edge, without the profile; for "
                        f"side-by-side measurements); valid: {', '.join(HARNESSES)}")
    p.add_argument("--sim", default=None, help="simulator of the cocotb harness: verilator (default when installed) "
                                              "or icarus")
    p.add_argument("--gemm", default=None, metavar="G1,G2",
                   help="override the GEMM-1/GEMM-2 cycles per full tile (default: derived from the model)")
    p.add_argument("--feeder", default="plain",
                   help="how the SMs offer a ready combine ld_reduce: plain (always first, default: a load "
                        "waiting for its combine tag then holds the NIC's descriptor stream, the dispatch's "
                        "stores behind it) or tags (first only while the NIC's next tag is free, else the next "
                        "dispatch store)")
    p.add_argument("--design", default=None, metavar="BLOCK.PARAM=V,...",
                   help="override parameters of the system top's NICs (nic.) or switch (switch.), e.g. "
                        "nic.tags=64,nic.any_tag=true,switch.resp_iterations=4 (default: none)")
    p.add_argument("--timeout", type=int, default=None,
                   help="cycles a phase may take before the run fails (default: 4x the prediction + 20000)")
    p.add_argument("--silent-gpu", type=int, default=None, help="fault: this GPU stops answering reads")
    p.add_argument("--silent-at", type=int, default=2000, help="cycle at which --silent-gpu goes silent")
    p.add_argument("--jobs", type=int, default=None, help="schemes run at once (default: all of them)")
    p.add_argument("--bin", type=int, default=None, help="cycles per utilization bin (default: about 200 bins)")
    p.add_argument("--clock-quiet", action="store_true",
                   help="clock the DUT through every quiet cycle the testbench skips, instead of leaving out "
                        "whole rounds of them (the figures are the same; about 10x slower)")
    p.add_argument("--out", default="build/system", help="output folder (default: build/system)")
    p.add_argument("--predict-only", action="store_true",
                   help="print the estimator's prediction of the scaled run and its full-size figure, then exit "
                        "(no build, no run)")


@dataclasses.dataclass(frozen=True)
class Point:
    model: str
    gpus: int
    tokens: int
    hidden: int
    seed: int
    gemm: tuple | None = None
    redundant_experts: int = 0
    system: str | None = None
    feeder: str = "plain"
    design: tuple = ()          # ((block, parameter, value), ...): overrides of the system top's NICs / switch

    @property
    def slug(self) -> str:
        g = f"_gemm{self.gemm[0]}x{self.gemm[1]}" if self.gemm else ""
        r = f"_r{self.redundant_experts}" if self.redundant_experts else ""
        sy = f"_{self.system}" if self.system else ""
        f = f"_{self.feeder}" if self.feeder != "plain" else ""
        ds = "".join(f"_{b}.{k}{int(v)}" for b, k, v in self.design)
        return f"{self.model}_g{self.gpus}_t{self.tokens}_h{self.hidden}_s{self.seed}{r}{sy}{g}{f}{ds}"

    def system_params(self, schemes=None) -> dict:
        """The system top's parameters: the layer's (:meth:`~verif.models.moe_layer.MoeLayer.system_params`)
        with ``design``'s overrides."""
        params = self.layer().system_params(schemes)
        for block, key, value in self.design:
            params[block] = {**params.get(block, {}), key: value}
        return params

    def layer(self):
        from verif.models import moe_layer as ml
        return ml.build_layer(model=self.model, gpus=self.gpus, tokens=self.tokens, hidden=self.hidden,
                              seed=self.seed, gemm_cycles=self.gemm, redundant_experts=self.redundant_experts,
                              system=self.system)


def parse_schemes(text: str) -> list[str]:
    names = list(SCHEMES) if text.strip() == "all" else [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in names if s not in SCHEMES]
    if bad or not names:
        raise ValueError(f"--scheme {text!r}: unknown scheme {', '.join(bad) or '(none)'}; "
                         f"valid: {', '.join(SCHEMES)} or all")
    return names


def check_point(model: str, gpus: int, tokens: int, hidden: int, seed: int, gemm: str | None,
                redundant_experts: int = 0, system: str | None = None, feeder: str = "plain",
                design: str | None = None) -> Point:
    """A :class:`Point`, or ``ValueError`` naming the argument and its valid values."""
    from verif.tb.system import FEEDERS
    if feeder not in FEEDERS:
        raise ValueError(f"--feeder {feeder!r}: valid: {', '.join(FEEDERS)}")
    overrides = parse_design(design)
    from hw.packet import MAX_SWITCH_PORTS, header_format
    from sim_models import moe_config
    from verif.models.moe_layer import expert_split
    names = moe_config.model_names()
    if model.lower() not in names:
        raise ValueError(f"--model {model!r} is unknown; valid: {', '.join(names)}")
    cfg = moe_config.load_model(model.lower())
    E, R = cfg.routed_experts, redundant_experts
    if not 4 <= gpus <= MAX_SWITCH_PORTS:
        raise ValueError(f"--gpus {gpus}: must be in 4..{MAX_SWITCH_PORTS} (one switch port each; the widest "
                         f"header's mask has {MAX_SWITCH_PORTS} bits)")
    if not 0 <= R <= E:
        raise ValueError(f"--redundant-experts {R}: must be in 0..{E} (one replica of each of {cfg.name}'s "
                         f"experts at most)")
    if split := expert_split(E, R, gpus):
        what = f"its {E} experts" + (f" + {R} redundant ({E + R})" if R else "")
        raise ValueError(f"--gpus {gpus}: {cfg.name} needs G in 4..{MAX_SWITCH_PORTS} dividing {what}; valid: "
                         f"{', '.join(map(str, split[0]))}; or, at G = {gpus}, --redundant-experts "
                         f"{', '.join(map(str, split[1]))}, ...")
    if system is not None:
        from sim_models.system_config import load_system, system_names
        if system not in system_names():
            raise ValueError(f"--system {system!r} is unknown; valid: {', '.join(system_names())}")
        fw = 8 * load_system(system).port_bytes_per_cycle
        try:
            header_format(gpus, fw)
        except ValueError as e:
            raise ValueError(f"--system {system} ({fw}-bit flits) at --gpus {gpus}: {e}") from None
    index_bits = header_format(gpus).index_bits
    max_t = (1 << index_bits) // gpus
    if not 1 <= tokens <= max_t:
        raise ValueError(f"--tokens {tokens}: must be in 1..{max_t} per GPU (G x tokens <= 2^{index_bits}, "
                         f"the algebraic index of the {header_format(gpus).name} header)")
    if not (16 <= hidden <= cfg.hidden and hidden % 16 == 0):
        raise ValueError(f"--hidden {hidden}: must be a multiple of 16 in 16..{cfg.hidden} ({cfg.name}'s hidden size)")
    if seed < 0:
        raise ValueError(f"--seed {seed}: must be >= 0")
    g = None
    if gemm is not None:
        try:
            g = tuple(int(x) for x in gemm.split(","))
        except ValueError:
            g = ()
        if len(g) != 2 or min(g) < 1:
            raise ValueError(f"--gemm {gemm!r}: must be two positive cycle counts G1,G2")
    return Point(model.lower(), gpus, tokens, hidden, seed, g, R, system, feeder, overrides)


#: The blocks of the system top whose parameters ``--design`` sets, and their classes.
DESIGN_BLOCKS = {"nic": "hw.gpu_nic.nic:GpuNic", "switch": "hw.switch.dysharp_switch:DySharpSwitch"}
#: Parameters the layer sets itself (``MoeLayer.system_params``) or the top passes down: not overridable.
_FIXED = {"ports", "flit_width", "max_payload", "credits", "rx_credits", "link_credits", "gpu_credits", "experts",
          "tiles", "tile_size", "mm_index_bits", "mm_slots"}


def parse_design(text: str | None) -> tuple:
    """``--design`` (``block.param=value,...``, integer or true/false values) as ((block, param, value), ...),
    or ``ValueError`` naming the bad item and the valid blocks or parameters. The blocks check the values
    when the top is built."""
    import importlib
    import inspect
    if not text:
        return ()
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        key, eq, value = item.partition("=")
        block, dot, param = key.strip().partition(".")
        if not eq or not dot or block not in DESIGN_BLOCKS:
            raise ValueError(f"--design {item!r}: expected BLOCK.PARAM=VALUE with BLOCK one of "
                             f"{', '.join(DESIGN_BLOCKS)} (e.g. nic.tags=64)")
        mod, cls = DESIGN_BLOCKS[block].split(":")
        names = [n for n, p in inspect.signature(getattr(importlib.import_module(mod), cls)).parameters.items()
                 if p.kind == p.KEYWORD_ONLY and n not in _FIXED]
        if param not in names:
            raise ValueError(f"--design {item!r}: {block} has no settable parameter {param!r}; valid: "
                             f"{', '.join(names)}")
        v = value.strip().lower()
        if v in ("true", "false"):
            val = v == "true"
        else:
            try:
                val = int(v, 0)
            except ValueError:
                raise ValueError(f"--design {item!r}: the value must be an integer or true/false") from None
        out.append((block, param, val))
    return tuple(out)


def check_design(point: Point, schemes) -> None:
    """``ValueError`` naming ``--design``'s overrides when the system top refuses its parameters: its
    blocks' ``__init__`` check the values (no elaboration), so a bad value is refused before the estimator,
    the build or ``--predict-only``'s table."""
    from hw import registry
    if not point.design:
        return
    try:
        registry.point("system", point.system_params(schemes)).component()
    except ValueError as e:
        items = ",".join(f"{b}.{k}={str(v).lower() if isinstance(v, bool) else v}" for b, k, v in point.design)
        raise ValueError(f"--design {items}: {e}") from None


def check_harness(harness: str, sim: str | None) -> str:
    """``harness``, or ``ValueError`` naming the valid ones (the fast harness is Verilator's only)."""
    if harness not in HARNESSES:
        raise ValueError(f"--harness {harness!r}: valid: {', '.join(HARNESSES)}")
    if harness in FAST_HARNESSES and sim not in (None, "verilator"):
        raise ValueError(f"--harness {harness} runs on Verilator only, not {sim!r}; use --harness cocotb --sim {sim}")
    return harness


def run_scheme(point: Point, scheme: str, sim: str, out: Path, timeout: int, bin_cycles: int,
               silent: tuple | None, drop: bool = True, fast: tuple | None = None,
               build_schemes: tuple | None = None) -> dict:
    """One run; the testbench's figures, or ``{"failed": message}``. ``drop=False``: quiet cycles
    are clocked through (``verif/tb/system.py``, ``SystemEnv.skip``). ``fast``: (library, port names) of
    :func:`verif.harness.fastsim.system.build_system`, the compiled harness; else cocotb on ``sim``.
    ``build_schemes``: the schemes the build holds (:meth:`~verif.models.moe_layer.MoeLayer.system_params`;
    None: all)."""
    from hw import registry

    L = point.layer()
    design = registry.point("system", point.system_params(build_schemes))
    f = out / f"{point.slug}.{scheme}.json"
    f.unlink(missing_ok=True)
    env = layer_settings(point, scheme, f, timeout, bin_cycles, silent, drop)
    t0 = time.perf_counter()
    if fast is not None:
        from verif.tb.system_fast import run_layer
        try:
            fig = run_layer(*fast, design.params, env)
        except AssertionError as e:
            return {"scheme": scheme, "failed": f"AssertionError: {e}"}
        fig["sim"]["run_wall_s"] = time.perf_counter() - t0
        f.write_text(json.dumps(fig, indent=1))
        return fig
    from verif.harness.runner import CocotbFailure, run_cocotb
    try:
        run_cocotb(design, test_module="verif.tb.system", testcase="test_layer",
                   seed=point.seed, sim=sim, env=env, quiet=True)
    except CocotbFailure as e:
        return {"scheme": scheme, "failed": _failure_reason(e)}
    fig = json.loads(f.read_text())
    fig["sim"]["harness"] = "cocotb"
    fig["sim"]["run_wall_s"] = time.perf_counter() - t0
    return fig


def _failure_reason(e) -> str:
    """The assertion a failed cocotb run stopped on (from its log), else the failure itself."""
    text = str(e)
    log = next((w for w in text.split() if w.endswith(".txt") and Path(w).exists()), None)
    if log:
        for line in Path(log).read_text(errors="replace").splitlines():
            if "AssertionError" in line or "timeout:" in line:
                return line.strip()
    return text


def calibration_figures(figs: dict) -> dict:
    """Estimator calibration from the runs: AL-TLB misses per translated key under MoE traffic (dynamic
    schemes; keys = the predicted fills, one per (group, index, destination)) and the fused run's mean
    tile ready latency."""
    cal = {}
    keys = sum(sum(f["predicted"]["fills"]["down"]) for s, f in figs.items() if TRAFFIC_SCHEME[s] == "dynamic")
    misses = sum(f["tlb"]["misses"] for s, f in figs.items() if TRAFFIC_SCHEME[s] == "dynamic")
    if keys:
        cal["tlb_misses_per_key"] = misses / keys
    fused = figs.get("dysharp") or figs.get("dysharp-basic")
    if fused and fused["tile_ready_latency"]["mean"] is not None:
        cal["tracker_ready_latency_cycles"] = fused["tile_ready_latency"]["mean"]
    return cal


def full_scale_shift(bench_dir: Path) -> dict:
    """DeepSeek-V3 on gh200-nvl32, prefill and decode: the estimate without and with the system
    calibration (the block benchmarks' figures, where present, in both)."""
    from sim_models.calibration import load_calibration
    from sim_models.estimator import Params, estimate
    from sim_models.moe_config import load_model
    from sim_models.system_config import load_system
    m, s = load_model("deepseek-v3"), load_system("gh200-nvl32")
    base = [d for d in ("build/bench",) if Path(d).exists()]
    cals = {"without": load_calibration(base, exclude=("system",)), "with": load_calibration([str(bench_dir)] + base)}
    out = {}
    for mode in ("prefill", "decode"):
        r = {}
        for name, cal in cals.items():
            e = estimate(m, s, Params(mode=mode), calibration=cal, schemes=["deepep", "dysharp"])
            r[name] = {k: e.results[k].total * 1e6 for k in ("deepep", "dysharp")}
        r["dysharp_change"] = r["with"]["dysharp"] / r["without"]["dysharp"] - 1
        r["speedup_without"] = r["without"]["deepep"] / r["without"]["dysharp"]
        r["speedup_with"] = r["with"]["deepep"] / r["with"]["dysharp"]
        out[mode] = r
    return out


def plot(figs: dict, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    names = [s for s in SCHEMES if s in figs]
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 2.4 * len(names)), sharex=True, squeeze=False)
    for ax, s in zip(axes[:, 0], names):
        u = figs[s]["utilization"]
        b = u["bin"]
        for d, colour in (("up", "tab:blue"), ("down", "tab:orange")):
            series = u[d]
            n = max(len(x) for x in series)
            a = np.zeros((len(series), n))
            for g, x in enumerate(series):
                a[g, :len(x)] = x
            ax.plot(np.arange(n) * b, a.mean(axis=0) / b, colour, lw=1,
                    label=f"{'GPU -> switch' if d == 'up' else 'switch -> GPU'} (mean over GPUs)")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("flits/cycle")
        ax.set_title(f"{s}: {figs[s]['cycles']['total']:,} cycles", fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8, loc="upper right")
    axes[-1, 0].set_xlabel("cycle (from the first dispatch descriptor)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def scheme_table(figs: dict, pred: dict, gpus: int) -> str:
    """Measured against predicted, per scheme run (Markdown): cycles per phase, the estimator, link
    utilization per direction (flits per GPU per cycle), AL-TLB hit rate, reduction entries, drain, the
    cycles a store descriptor waited behind a reduction load waiting for its tag (summed over the GPUs'
    NICs, ``gen_stalls``), speed."""
    rows = []
    for s in SCHEMES:
        if s not in figs:
            continue
        f, p, c = figs[s], pred[s], figs[s]["cycles"]
        rows.append([s, f"{c['total']:,}", f"{c['dispatch_gemm']:,}", f"{c['combine']:,}" if "combine" in c else "fused",
                     f"{p['total']:,.0f}", f"{100 * (c['total'] / p['total'] - 1):+.1f}%",
                     *(f"{sum(f['flits'][d]) / (gpus * c['total']):.3f}" for d in ("up", "down")),
                     "-" if f["tlb"]["hit_rate"] is None else f"{f['tlb']['hit_rate']:.3f}",
                     str(f["red_buffer_in_use"]["max"]), f"{f['pipeline']['drain']:,}",
                     f"{sum(f['gen_stalls']['tag_blocked']):,}" if "gen_stalls" in f else "-",
                     f"{f['sim']['cycles_per_s']:,.0f}"])
    return table(rows, ["scheme", "cycles", "dispatch + GEMM", "combine", "estimator", "measured vs estimator",
                        "up util.", "down util.", "TLB hit rate", "red. entries (max)", "cycles after the last GEMM",
                        "descriptors behind a tag wait", "sim cycles/s"])


def prediction_table(pred: dict) -> str:
    """The estimator's prediction of the scaled run per scheme (Markdown): cycles per phase and the total."""
    rows = [[s, *(f"{p[k]:,.0f}" for k in ("dispatch", "gemm", "combine", "total")),
             f"{p['total'] / pred['dysharp']['total']:.3f}x" if "dysharp" in pred else "-"]
            for s, p in pred.items()]
    return table(rows, ["scheme", "dispatch alone", "GEMM", "combine alone", "total (cycles)", "dysharp over it"])


def full_size_line(fs: dict) -> str:
    """One line: the estimator's full-size figure (:func:`sim_models.rtl_scale.full_size`)."""
    sp = ", ".join(f"{v:.3f}x over {s}" for s, v in fs["speedup"].items() if s != "dysharp")
    us = ", ".join(f"{s} {v:,.1f}" for s, v in fs["us"].items())
    return (f"estimator at full size ({fs['model']} on {fs['system']}, G = {fs['gpus']}, {fs['tokens_per_gpu']} "
            f"tokens per GPU, {fs['mode']}, this routing): {us} us" + (f"; dysharp {sp}" if sp else ""))


def point_line(point: Point, d: dict) -> str:
    """The layer point in one line (``d``: :meth:`~verif.models.moe_layer.MoeLayer.describe`)."""
    return (f"{d['model']}: G={point.gpus}" + (f" ({d['experts']} expert slots: {point.redundant_experts} "
                                                f"redundant)" if point.redundant_experts else "") +
            f", {d['flit_width']}-bit flits ({d['header']} header), {point.tokens} tokens/GPU, hidden {point.hidden} "
            f"(x{d['hidden_factor']:.0f} scaled down), {d['row_flits']} flits per dispatched row, GEMM "
            f"{d['gemm_tile_cycles'][0]}/{d['gemm_tile_cycles'][1]} cycles per tile"
            f"{' (overridden)' if point.gemm else ''}")


def run(args) -> int:
    from sim_models.calibration import load_calibration
    from sim_models.rtl_scale import full_size, predict_cycles
    from verif.harness.runner import SIMULATORS, verilator_env
    schemes = parse_schemes(args.scheme)
    point = check_point(args.model, args.gpus, args.tokens, args.hidden, args.seed, args.gemm,
                        args.redundant_experts, args.system, args.feeder, args.design)
    if args.sim is not None and args.sim not in SIMULATORS:
        raise ValueError(f"--sim {args.sim!r}: valid: {', '.join(SIMULATORS)}")
    harness = check_harness(args.harness, args.sim)
    sim = "verilator" if harness in FAST_HARNESSES else \
        args.sim or os.environ.get("SIM") or ("verilator" if verilator_env() else "icarus")
    if sim not in SIMULATORS:
        raise ValueError(f"--sim {sim!r}: valid: {', '.join(SIMULATORS)}")
    if args.silent_gpu is not None and not 0 <= args.silent_gpu < point.gpus:
        raise ValueError(f"--silent-gpu {args.silent_gpu}: must be a GPU in 0..{point.gpus - 1}")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: must be >= 1")
    L = point.layer()
    for scheme in schemes:         # a point the work lists cannot represent is refused before the build
        L.check_scheme(scheme)
    check_design(point, schemes)
    # The prediction uses the block benchmarks' calibration, not a previous run's system figures.
    cal0 = load_calibration(["build/bench"], exclude=("system",))
    tags = {(b, k): v for b, k, v in point.design}.get(("nic", "tags"))     # the ld_reduce window
    pred = predict_cycles(L, schemes, calibration=cal0, tags=tags)
    full = full_size(L, schemes, calibration=cal0)
    if args.predict_only:
        print(f"{point_line(point, L.describe())}; the estimator's prediction of the scaled run:")
        print(prediction_table(pred))
        print(full_size_line(full))
        return 0
    longest = max(p["total"] for p in pred.values())
    timeout = args.timeout or int(4 * longest) + 20_000
    bin_cycles = args.bin or max(16, int(longest / 200))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    silent = None if args.silent_gpu is None else (args.silent_gpu, args.silent_at)
    d = L.describe()
    print(f"{point_line(point, d)}; schemes {', '.join(schemes)} on {sim} ({harness} harness)")
    # Build once, before the schemes run side by side.
    from hw import registry
    design = registry.point("system", point.system_params(schemes))
    t0 = time.perf_counter()
    fast = None
    if harness in FAST_HARNESSES:
        fast = fast_build(point, schemes, harness, timeout, bin_cycles)
    else:
        from verif.harness.runner import sim_build
        sim_build(design, sim=sim)
    build_s = time.perf_counter() - t0
    jobs = args.jobs or len(schemes)       # the runs are independent processes; 3 on 2 cores share them well
    t0 = time.perf_counter()
    built = tuple(schemes)
    if jobs == 1:
        results = [run_scheme(point, s, sim, out, timeout, bin_cycles, silent, not args.clock_quiet, fast, built)
                   for s in schemes]
    else:
        k = len(schemes)
        with ProcessPoolExecutor(jobs) as ex:
            results = list(ex.map(run_scheme, [point] * k, schemes, [sim] * k, [out] * k, [timeout] * k,
                                  [bin_cycles] * k, [silent] * k, [not args.clock_quiet] * k, [fast] * k,
                                  [built] * k))
    runs_s = time.perf_counter() - t0
    failed = {r["scheme"]: r["failed"] for r in results if "failed" in r}
    figs = {r["scheme"]: r for r in results if "failed" not in r}
    for s, why in failed.items():
        print(f"{s}: FAILED: {why}")
    if not figs:
        return 1
    report = {"point": dataclasses.asdict(point), "layer": d, "sim": sim, "harness": harness, "build_s": build_s,
              "runs_wall_s": runs_s,
              "jobs": jobs, "clock_quiet": args.clock_quiet, "schemes": figs, "failed": failed, "predicted": pred,
              "full_size": full}
    print(scheme_table(figs, pred, point.gpus))
    if "dysharp" in figs:
        for s in SCHEMES[:-1]:
            if s in figs:
                print(f"speedup of dysharp over {s}: measured {figs[s]['cycles']['total'] / figs['dysharp']['cycles']['total']:.3f}x, "
                      f"predicted {pred[s]['total'] / pred['dysharp']['total']:.3f}x, "
                      f"full size {full['speedup'][s]:.3f}x")
    print(full_size_line(full))
    cal = calibration_figures(figs)
    report["calibration"] = cal
    bench = Path("build/bench")
    bench.mkdir(parents=True, exist_ok=True)
    if cal:   # a run without a dynamic scheme has nothing to calibrate: an earlier file stays
        (bench / "system.json").write_text(json.dumps({"calibration": cal, "point": dataclasses.asdict(point)},
                                                      indent=1))
    try:
        report["full_scale"] = fs = full_scale_shift(bench)
        print(f"calibration from this run: {', '.join(f'{k} = {v:.3g}' for k, v in cal.items())}; DeepSeek-V3 "
              f"on gh200-nvl32: " + "; ".join(
                  f"{mode} DySHARP {r['without']['dysharp']:.2f} -> {r['with']['dysharp']:.2f} us "
                  f"({100 * r['dysharp_change']:+.3f}%), over DeepEP {r['speedup_without']:.3f}x -> "
                  f"{r['speedup_with']:.3f}x" for mode, r in fs.items()))
    except (ValueError, OSError) as e:
        print(f"full-scale shift not computed: {e}")
    png = out / f"{point.slug}.png"
    plot(figs, png, f"{d['model']}, G={point.gpus}, {point.tokens} tokens/GPU, hidden {point.hidden}: link utilization")
    report["png"] = png.name
    js = out / f"{point.slug}.json"
    js.write_text(json.dumps(report, indent=1))
    print(f"build {build_s:.0f} s, runs {runs_s:.0f} s ({jobs} at once); wrote {js} and {png}")
    return 1 if failed else 0


def markdown(report: dict) -> str:
    """The study report's section: measured against predicted per scheme, the plot, the calibration."""
    pt, d = report["point"], report["layer"]
    ran = [s for s in SCHEMES if s in report["schemes"] or s in report.get("failed", {})]
    cmd = (f"dysharp system --model {pt['model']} --gpus {pt['gpus']} --tokens {pt['tokens']} --hidden {pt['hidden']} "
           f"--seed {pt['seed']}" + (f" --gemm {pt['gemm'][0]},{pt['gemm'][1]}" if pt.get("gemm") else "")
           + (f" --redundant-experts {pt['redundant_experts']}" if pt.get("redundant_experts") else "")
           + (f" --system {pt['system']}" if pt.get("system") else "")
           + ("" if len(ran) == len(SCHEMES) else f" --scheme {','.join(ran)}")
           + ("" if report.get("harness", "fast") == "fast" else f" --harness {report['harness']}"))
    lines = ["## Whole MoE layer in RTL (`dysharp system`)", "",
             f"Command: `{cmd}` on {report['sim']}. {d['model']}, G = {pt['gpus']}, {pt['tokens']} tokens per GPU, "
             f"hidden {pt['hidden']} (scaled down x{d['hidden_factor']:.0f}), GEMM {d['gemm_tile_cycles'][0]}/"
             f"{d['gemm_tile_cycles'][1]} cycles per tile. Every scheme's outputs equal numpy bit for bit and its "
             f"link flits equal `sim_models.traffic`'s.", ""]
    lines.append(scheme_table(report["schemes"], report["predicted"], pt["gpus"]))
    figs, pred, full = report["schemes"], report["predicted"], report.get("full_size")
    if "dysharp" in figs:
        lines += ["", "Speedup of dysharp, RTL-measured (the estimator's prediction of this scaled layer; its figure "
                      "at full size): " + "; ".join(
                          f"over {s} {figs[s]['cycles']['total'] / figs['dysharp']['cycles']['total']:.3f}x "
                          f"({pred[s]['total'] / pred['dysharp']['total']:.3f}x"
                          + (f"; {full['speedup'][s]:.3f}x" if full and s in full.get("speedup", {}) else "") + ")"
                          for s in SCHEMES if s in figs and s != "dysharp") + "."]
    if full:
        lines += ["", f"The {full_size_line(full)}."]
    for s, why in report.get("failed", {}).items():
        lines.append(f"\n**{s} failed**: {why}")
    if report.get("png"):
        lines += ["", f"![link utilization]({report['png']})"]
    cal = report.get("calibration", {})
    fs = report.get("full_scale")
    if cal and fs:
        lines += ["", f"Calibration written to `build/bench/system.json`: "
                      f"{', '.join(f'`{k}` = {v:.3g}' for k, v in cal.items())}. DeepSeek-V3 on gh200-nvl32 "
                      "without and with it: " + "; ".join(
                          f"{mode}: DySHARP {r['without']['dysharp']:.2f} -> {r['with']['dysharp']:.2f} us "
                          f"({100 * r['dysharp_change']:+.3f}%), over DeepEP {r['speedup_without']:.3f}x -> "
                          f"{r['speedup_with']:.3f}x" for mode, r in fs.items()) + "."]
    return "\n".join(lines)


#: The layer each study scope runs. The default scope runs a headline point, G = 8 with 4096 tokens per GPU
#: (links 23% busy, 1.24x over DeepEP; at 256 tokens per GPU they idle over 90% of the layer), with the two
#: schemes of the headline speedup, on the build without the profile (measured: 410 CPU-s for the build and
#: both runs; the profile-guided build adds a second compile and a 40,000-cycle training run for 2,733 instead
#: of 2,424 stepped cycles/s at 256 tokens per GPU; not measured at this point: docs/performance.md).
STUDY_ARGS = {"quick": ["--gpus", "4", "--tokens", "16", "--gemm", "64,32", "--harness", "fast-noprofile"],
              "default": ["--tokens", "4096", "--scheme", "deepep,dysharp", "--harness", "fast-noprofile"],
              "full": ["--tokens", "4096"]}
#: What a scope leaves out of the layer runs (the report names it).
FULL_ONLY = {"default": "the other three schemes at this point, fused-unicast, dysharp-basic and nvls "
                        "(`dysharp system --gpus 8 --tokens 4096`, or `dysharp study --full`)"}


def study(args, out_dir) -> str:
    """The ``system`` step of ``dysharp study``: the layer at the study's scope, every scheme."""
    import argparse
    p = argparse.ArgumentParser()
    add_arguments(p)
    sargs = p.parse_args(["--out", str(Path(out_dir) / "system")] + STUDY_ARGS[scope_of(args)])
    run(sargs)
    pt = check_point(sargs.model, sargs.gpus, sargs.tokens, sargs.hidden, sargs.seed, sargs.gemm,
                     sargs.redundant_experts, sargs.system)
    report = json.loads((Path(sargs.out) / f"{pt.slug}.json").read_text())
    report["png"] = f"system/{report['png']}"          # relative to the report
    scope = scope_of(args)
    return markdown(report) + (f"\n\n*`--full` only*: {FULL_ONLY[scope]}." if scope in FULL_ONLY else "")
