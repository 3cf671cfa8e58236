"""The estimator's step in ``dysharp study``: the sweep (CSV + plots) and one example table, calibrated from
whatever RTL benchmark figures the study has produced so far (``<report>/`` first, then ``build/bench/``)."""

import os
from pathlib import Path

from .calibration import load_calibration
from .estimator import BASELINES, Params, estimate
from .moe_config import load_model
from .sweep import markdown_table, run_sweep
from .system_config import load_system


def estimate_step(args, out_dir: Path) -> str:
    from dysharp.commands.estimate import format_calibration, format_estimate

    out_dir = Path(out_dir)
    cal = load_calibration([out_dir, "build/bench"])
    est_dir = out_dir / "estimate"
    quick = bool(getattr(args, "quick", False))
    res = run_sweep(est_dir, model="deepseek-v3", params=Params(), cal=cal, quick=quick)
    example = estimate(load_model("deepseek-v3"), load_system("gh200-nvl32"), Params(), cal)
    rel = {k: os.path.relpath(p, out_dir) for k, p in res["paths"].items()}
    lines = ["## End-to-end MoE layer-time estimate", "",
             f"Command: `dysharp estimate --sweep{' --quick' if quick else ''}` (main sweep {res['main_s']:.0f} s, "
             f"sensitivity {res['sensitivity_s']:.0f} s, {res['jobs']} processes). The model and every "
             "assumption: `docs/estimator.md`.", "",
             format_estimate(example).replace("### ", "### Example: "), "",
             "### DySHARP (full) speedup over each baseline, prefill, 4096 tokens/GPU", "",
             markdown_table(res["rows"], BASELINES), "",
             f"![speedups]({rel['speedup_png']})", "",
             f"![time breakdown]({rel['breakdown_png']})", "",
             f"![sensitivity]({rel['sensitivity_png']})", "",
             f"Data: `{rel['csv']}`, `{rel['sensitivity_csv']}`.", "",
             "### Calibration", "", format_calibration(cal)]
    return "\n".join(lines)
