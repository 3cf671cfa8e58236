"""The estimator's results as Markdown tables (readable in a terminal): ``dysharp estimate`` prints them and
the study's estimator section (:mod:`sim_models.study_step`) reports them."""

from tabulate import tabulate

from .end_to_end import EndToEnd
from .estimator import BASELINES, FULL, SCHEMES, Estimate

__all__ = ["format_estimate", "format_calibration", "format_end_to_end"]


def format_estimate(e: Estimate) -> str:
    """The layer-time breakdown and speedups as Markdown (readable in a terminal)."""
    p = e.params
    lines = [f"### {e.model.name} on {e.system.name}: {p.mode}, {e.tokens_per_gpu} tokens/GPU",
             "",
             f"{e.gpus} GPUs in the expert-parallel group ({e.system.description}); routing `{e.routing}` "
             f"(seed {p.seed}), placement `{p.placement}`, dispatch {p.dtype} / combine bf16, tile {p.tile}.",
             f"Distinct destination GPUs per token: measured {e.measured_d:.2f}"
             + f" (closed form for uniform routing: {e.closed_form_d:.2f})"
             + f"; all GEMMs with no communication: {e.compute_only * 1e6:.1f} us.",
             "",
             "| scheme | layer us | dispatch us | GEMM us | combine us | exposed us | comm SMs | DySHARP speedup |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in e.results.items():
        lines.append(f"| {SCHEMES[name].label} | {r.total * 1e6:.1f} | {r.dispatch * 1e6:.1f} | {r.gemm * 1e6:.1f} | "
                     f"{r.combine * 1e6:.1f} | {r.exposed * 1e6:.1f} | {r.comm_sms} | {e.speedup(name):.2f}x |")
    if "unicast" in e.traffic and "dynamic" in e.traffic:
        ratio = e.traffic["dynamic"].dispatch.up_wire.sum() / max(e.traffic["unicast"].dispatch.up_wire.sum(), 1e-30)
        meas = e.calibration.get("reqgen_uplink_flit_ratio")
        lines += ["", f"Dispatch uplink flits, dymultimem / unicast, for this routing: {ratio:.3f}"
                  + (f" (request generator RTL measured {meas:.3f} on its own dispatch)" if meas is not None else "")
                  + "."]
    full = e.results[FULL].detail
    if "combine" in full:
        times = ", ".join(f"{k} {full[f'{k}_total'] * 1e6:.1f} us" for k in ("pull", "push") if f"{k}_total" in full)
        lines += ["", f"DySHARP (full) combine: {full['combine']} ({times}; `--combine {p.combine}`: "
                  + ("the faster of the two for this layer" if p.combine == "auto" else "as given") + ")."]
    base = [b for b in BASELINES if b in e.results]
    lines += ["", "DySHARP (full) speedup: " + ", ".join(f"{b} {e.speedup(b):.2f}x" for b in base) + "."]
    lines += ["", "dispatch/combine: that phase alone (busiest link direction + latency); GEMM: busy time on the "
                  "SMs the scheme leaves to GEMMs; exposed: layer - GEMM."]
    return "\n".join(lines)


def format_calibration(cal) -> str:
    """The calibration table: each RTL figure the estimator reads, its value and where it came from."""
    lines = ["| RTL figure | value | source |", "|---|---|---|"]
    for name, v, src in cal.status():
        lines.append(f"| {name} | {'-' if v is None else f'{v:g}'} | {src} |")
    n_un = len(cal.uncalibrated())
    lines.append("")
    lines.append(f"{len(cal.values) - n_un} of {len(cal.values)} figures calibrated from the RTL benchmarks; "
                 + ("uncalibrated: " + ", ".join(cal.uncalibrated()) if n_un else "all calibrated") + ".")
    return "\n".join(lines)


def format_end_to_end(e: EndToEnd) -> str:
    est, p = e.estimate, e.estimate.params
    what = "cached positions per sequence" if p.mode == "decode" else "tokens per sequence"
    pt = e.parts
    lines = [f"### End to end: {est.model.name} on {est.system.name}, {p.mode}, {est.tokens_per_gpu} tokens/GPU, "
             f"context {e.context} ({what})", "",
             f"Per GPU, per layer: attention {pt.attention * 1e6:.1f} us (projections {pt.attention_proj * 1e6:.1f}, "
             f"core {pt.attention_core * 1e6:.1f}), shared experts {pt.shared * 1e6:.1f} us, router "
             f"{pt.router * 1e6:.1f} us; dense layer FFN {pt.dense_ffn * 1e6:.1f} us x {e.dense_layers}; "
             f"LM head {pt.head * 1e6:.1f} us; {e.moe_layers} MoE layers.", ""]
    rows = [[SCHEMES[n].label, f"{r.moe_layer * 1e6:.1f}", f"{r.step * 1e3:.2f}", f"{r.moe_share:.0%}",
             f"{r.layer_speedup:.2f}x", f"{r.step_speedup:.2f}x"] for n, r in e.schemes.items()]
    lines.append(tabulate(rows, headers=["scheme", "MoE layer us", "step ms", "MoE share",
                                         "DySHARP MoE-layer speedup", "DySHARP whole-step speedup"],
                          tablefmt="github", disable_numparse=True))
    lines += ["", "MoE share: MoE layers x routed MoE layer time / step. Shared experts "
              + ("overlap the routed path's exposed time" if e.params.shared_overlap else "run after the routed path")
              + "; DualPipe hides its exposed communication under attention and the shared expert"
              + ("" if e.params.dualpipe_overlap else " (off)") + ". Model: docs/estimator_end_to_end.md."]
    return "\n".join(lines)
