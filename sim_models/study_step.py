"""The estimator's step in ``dysharp study``: the sweep (CSV + plots), one example table, the whole-step
(end-to-end) table and the whole-step sweep (training, prefill, decode over the sweep's grid), the
validation against the baselines' published figures, and what the conclusions hang on (tornado and
sensitivity plots), calibrated from whatever RTL benchmark figures the study has produced so far
(``<report>/`` first, then ``build/bench/``)."""

import json
import os
from pathlib import Path

from .calibration import load_calibration
from .end_to_end import end_to_end
from .end_to_end_sweep import markdown_tables, run_end_to_end_sweep
from .estimator import BASELINES, Params, estimate
from .full_sweep import run_sweep
from .moe_config import load_model
from .sensitivity import run_sensitivity, run_tornado, tornado_table
from .sweep import QUICK_MODELS, markdown_table
from .system_config import load_system
from .tables import format_calibration, format_end_to_end, format_estimate
from .validation import markdown as validation_markdown, validate


def estimate_step(args, out_dir: Path) -> str:
    out_dir = Path(out_dir)
    cal = load_calibration([out_dir, "build/bench"])
    est_dir = out_dir / "estimate"
    quick = bool(getattr(args, "quick", False))
    q = " --quick" if quick else ""
    # The whole-step sweep first: its prefill steps' MoE layers are the layer sweep's estimates (cached).
    whole_sweep = run_end_to_end_sweep(est_dir, models=list(QUICK_MODELS) if quick else None, params=Params(),
                                       cal=cal)
    res = run_sweep(est_dir, model="deepseek-v3", params=Params(), cal=cal, quick=quick)
    model, system = load_model("deepseek-v3"), load_system("gh200-nvl32")
    example = estimate(model, system, Params(), cal)
    whole = end_to_end(model, system, Params(), calibration=cal, estimate_result=example)
    rows = validate(cal=cal)
    (est_dir / "validation.json").write_text(json.dumps(rows, indent=1))
    torn = run_tornado(est_dir, cal=cal, quick=quick)
    sens = run_sensitivity(est_dir, cal=cal, quick=quick)
    rel = {k: os.path.relpath(p, out_dir) for k, p in res["paths"].items()}
    r = lambda p: os.path.relpath(p, out_dir)   # noqa: E731
    lines = ["## End-to-end MoE layer-time estimate", "",
             f"Command: `dysharp estimate --sweep{q}` (main sweep {res['main_s']:.0f} s: its estimates are the "
             f"whole-step sweep's prefill MoE layers, cached; "
             f"sensitivity {res['sensitivity_s']:.0f} s, {res['jobs']} processes). The model and every "
             "assumption: `docs/estimator.md`.", "",
             format_estimate(example).replace("### ", "### Example: "), "",
             "### DySHARP (full) speedup over each baseline, prefill, 4096 tokens/GPU", "",
             markdown_table(res["rows"], BASELINES), "",
             f"![speedups]({rel['speedup_png']})", "",
             f"![time breakdown]({rel['breakdown_png']})", "",
             f"![sweep sensitivity]({rel['sensitivity_png']})", "",
             f"Data: `{rel['csv']}`, `{rel['sensitivity_csv']}`.", "",
             "### Whole step (`dysharp estimate --end-to-end`)", "",
             format_end_to_end(whole).replace("### ", "#### "), "",
             f"#### Whole-step sweep: training and inference (`dysharp estimate --sweep --end-to-end{q}`, "
             f"{whole_sweep['seconds']:.0f} s)", "",
             markdown_tables(whole_sweep["rows"]), "",
             f"![whole-step speedups]({r(whole_sweep['paths']['png'])})", "",
             f"Data: `{r(whole_sweep['paths']['csv'])}`.", "",
             "### Validation against the baselines' published figures (`dysharp estimate --validate`)", "",
             validation_markdown(rows), "",
             f"### What the conclusions hang on (`dysharp estimate --tornado{q}`, {torn['seconds']:.0f} s)", "",
             tornado_table(torn), "",
             f"![tornado]({r(torn['paths']['png'])})", "",
             f"### Sensitivity (`dysharp estimate --sensitivity{q}`, {sens['seconds']:.0f} s)", "",
             f"![sensitivity]({r(sens['paths']['all'])})", "",
             f"Data: `{r(sens['paths']['csv'])}`, `{r(torn['paths']['csv'])}`.", "",
             "### Calibration", "", format_calibration(cal)]
    return "\n".join(lines)
