"""README.md's "Headline results" against their sources: every row is either checked here or named in
``BENCH_ONLY`` (its source is a benchmark run of minutes), so a new row without a check fails.

Checked without a simulation: the committed synthesis summaries (``synth_reports/*.csv``), the estimator
(``dysharp estimate`` and ``--end-to-end`` at their defaults, no ``build/bench/`` calibration, so the result
is that of a clean clone), the packet format's payload efficiency (``dysharp efficiency``) and the
RTL-measured ``dysharp system`` speedups against the cycle counts of footnotes (2) and (5) and the tables of
``docs/system_figures.md`` and ``docs/system_scale.md``. The README rounds; each figure is compared at the README's own precision. Every failure
names the row, the README's figure and the source's.
"""

import argparse
import csv
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The design notes that hold the layer's measured tables (docs/).
SYSTEM_FIGURES = ("system_figures.md", "system_scale.md")
README = ROOT / "README.md"
SYNTH = ROOT / "synth_reports"

# Rows whose source is a benchmark run (minutes of simulation or a solver): no unit-test check.
BENCH_ONLY = {
    "switch saturation, unicast": "dysharp bench switch: a slow bench (saturation sweep on the RTL)",
    "switch zero-load latency": "dysharp bench switch: a slow bench (latency at 8..64 ports on the RTL)",
    "switch line rate against packet length": "dysharp bench linerate: a slow bench (every length on the RTL)",
    "AL-TLB": "dysharp bench al_tlb: a slow bench (throughput, latency, hit-rate sweep on the RTL)",
    "reduction buffer": "dysharp bench reduction: a slow bench (contribution stream on the RTL)",
    "integrated switch, dispatch": "dysharp bench dysharp_switch: a slow bench (fanout sweep on the RTL)",
    "integrated switch, combine": "dysharp bench dysharp_switch: a slow bench (combine load on the RTL)",
    "GPU side": "dysharp bench token_tracker: a slow bench (tile readiness on the RTL)",
    "dispatch uplink flits": "dysharp bench token_tracker: a slow bench (request generator on the RTL)",
    "formal proofs": "dysharp formal: a slow run (SymbiYosys proofs and covers of every block)",
    "soak, 10^6 cycles": "dysharp bench soak: a slow bench (10^6 cycles of the integrated switch)",
    "fault injection": "dysharp faults: a slow run (the fault-injection campaign)",
}


# ---------------------------------------------------------------------------------------------------------
# The README's table and footnotes

def headline_section(text: str) -> str:
    m = re.search(r"^## Headline results\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README.md has no '## Headline results' section"
    return m.group(1)


def headline_rows(text: str) -> dict[str, dict]:
    """result -> {"figure", "rtl", "command"} of the "Headline results" table of README text."""
    rows = {}
    for line in headline_section(text).splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ("result",) or set(cells[0]) <= set("-:"):
            continue
        assert len(cells) == 4, f"README headline row {line!r}: expected 4 cells, got {len(cells)}"
        assert cells[0] not in rows, f"README headline row {cells[0]!r} appears twice"
        rows[cells[0]] = {"figure": cells[1], "rtl": cells[2], "command": cells[3]}
    return rows


def footnote(text: str, n: int) -> str:
    """Footnote (n) of the headline table: its text up to the next footnote or blank line."""
    m = re.search(rf"^\({n}\) (.*?)(?=^\(\d+\) |^\s*$)", headline_section(text), re.S | re.M)
    assert m, f"README.md has no footnote ({n}) under the headline table"
    return " ".join(m.group(1).split())


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


class Checker:
    """Collects mismatches of one README row; every message names the row and both figures."""

    def __init__(self, row: str, cell: str):
        self.row, self.cell, self.errors = row, cell, []

    def find(self, pattern: str, what: str) -> str | None:
        m = re.search(pattern, self.cell)
        if not m:
            self.errors.append(f"README row {self.row!r}: {what}: pattern {pattern!r} not found in {self.cell!r}")
            return None
        return m.group(1)

    def same(self, pattern: str, source: float, what: str, source_name: str) -> None:
        """The number ``pattern`` captures in the cell equals ``source`` rounded to the README's decimals."""
        shown = self.find(pattern, what)
        if shown is None:
            return
        d = _decimals(shown)
        if f"{_num(shown):.{d}f}" != f"{source:.{d}f}":
            self.errors.append(f"README row {self.row!r}: {what}: README shows {shown}, {source_name} gives "
                               f"{source:.{d}f} ({source!r})")


# ---------------------------------------------------------------------------------------------------------
# Sources

def _csv(name: str) -> list[dict]:
    with open(SYNTH / name, newline="") as f:
        return list(csv.DictReader(f))


def _one(rows: list[dict], key: str, prefix: str) -> dict:
    hits = [r for r in rows if r[key].startswith(prefix)]
    assert len(hits) == 1, f"expected one row whose {key} starts with {prefix!r}, got {len(hits)}"
    return hits[0]


def _cli_args(command: str, argv: list[str]):
    """The command's parsed arguments, its own defaults (``dysharp/commands``); no calibration JSON."""
    import importlib
    mod = importlib.import_module(f"dysharp.commands.{command}")
    p = argparse.ArgumentParser()
    mod.add_arguments(p)
    return p.parse_args(argv)


#: ``once`` of tests/conftest.py while this module's tests run: the estimates below are then computed by one
#: xdist worker for both.
_once = None


@pytest.fixture(autouse=True, scope="module")
def _share_estimates(once):
    global _once
    _once = once
    yield
    _once = None


def _shared(key: str, fn):
    return _once(key, fn) if _once is not None else fn()


@functools.lru_cache(maxsize=None)
def _estimate():
    """``dysharp estimate`` at its defaults (prefill, DeepSeek-V3 on GH200 NVL32), uncalibrated."""
    return _shared("readme-estimate", _estimate_now)


def _estimate_now():
    from dysharp.commands.estimate import params_from_args
    from sim_models.calibration import load_calibration
    from sim_models.estimator import estimate
    from sim_models.moe_config import load_model
    from sim_models.system_config import load_system
    args = _cli_args("estimate", ["--bench-dir", str(ROOT / "tests" / "no-calibration")])
    cal = load_calibration(args.bench_dir)
    assert not any(cal.calibrated(n) for n, _, _ in cal.status()), "the estimate must use the defaults only"
    return estimate(load_model(args.model), load_system(args.system), params_from_args(args), cal, None)


@functools.lru_cache(maxsize=None)
def _end_to_end(mode: str):
    """``dysharp estimate --end-to-end --mode MODE`` at its defaults, uncalibrated."""
    return _shared(f"readme-end-to-end-{mode}", lambda: _end_to_end_now(mode))


def _end_to_end_now(mode: str):
    from dysharp.commands.estimate import params_from_args
    from dysharp.commands.estimate_e2e import e2e_params_from_args
    from sim_models.calibration import load_calibration
    from sim_models.end_to_end import end_to_end
    from sim_models.moe_config import load_model
    from sim_models.system_config import load_system
    args = _cli_args("estimate", ["--end-to-end", "--mode", mode,
                                  "--bench-dir", str(ROOT / "tests" / "no-calibration")])
    return end_to_end(load_model(args.model), load_system(args.system), params_from_args(args),
                      e2e_params_from_args(args), load_calibration(args.bench_dir), None)


def _system_totals(heading: str) -> dict[str, int]:
    """scheme -> bold total cycles of the first table under ``heading`` in the layer's figures
    (docs/system_figures.md, docs/system_scale.md)."""
    text = "".join((ROOT / "docs" / f).read_text() for f in SYSTEM_FIGURES)
    assert heading in text, f"{', '.join(SYSTEM_FIGURES)}: no heading {heading!r}"
    lines = text.split(heading, 1)[1].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        table.append(line)
    out = {}
    for line in table:
        m = re.match(r"\| `([\w-]+)` \|.*?\*\*([\d,]+)\*\*", line)
        if m:
            out[m.group(1)] = int(_num(m.group(2)))
    assert out, f"{', '.join(SYSTEM_FIGURES)}: no table of total cycles under {heading!r}"
    return out


# ---------------------------------------------------------------------------------------------------------
# Checks: row -> function(row name, row cells, README text) -> list of error messages

def _efficiency(name, row, text):
    from hw.packet import payload_efficiency
    args = _cli_args("efficiency", [])
    c = Checker(name, row["figure"])
    c.same(r"^([\d.]+)%", 100 * payload_efficiency(256, flit_bytes=args.flit_bytes,
                                                   max_payload_bytes=args.max_payload),
           "dynamic, 256 B", "hw.packet.payload_efficiency(256)")
    c.same(r"8 GPUs: ([\d.]+)%", 100 * payload_efficiency(256, scheme="explicit", destinations=8,
                                                          flit_bytes=args.flit_bytes,
                                                          max_payload_bytes=args.max_payload),
           "explicit, 8 GPUs, 256 B", "hw.packet.payload_efficiency(256, 'explicit', 8)")
    return c.errors


def _footnote2(text: str) -> dict[str, int]:
    """scheme -> cycles stated in footnote (2)."""
    note = footnote(text, 2).split(":", 1)[1]
    return {s: int(_num(v)) for s, v in re.findall(r"\b(deepep|fused-unicast|nvls|dysharp-basic|dysharp) "
                                                     r"(\d{1,3}(?:,\d{3})+)", note)}


def _rtl_speedup(c: Checker, text: str, pattern: str, over: str, what: str) -> None:
    cycles = _footnote2(text)
    for s in ("dysharp", over):
        if s not in cycles:
            c.errors.append(f"README row {c.row!r}: footnote (2) states no {s} cycle count")
            return
    c.same(pattern, cycles[over] / cycles["dysharp"], what,
           f"footnote (2)'s cycles ({over} {cycles[over]:,} / dysharp {cycles['dysharp']:,})")
    # and the footnote's cycles are docs/system_figures.md's 8-GPU table's
    docs = _system_totals("## 256 tokens per GPU")
    for s, n in cycles.items():
        if docs.get(s) != n:
            shown = "none" if docs.get(s) is None else f"{docs[s]:,}"
            c.errors.append(f"README row {c.row!r}: footnote (2) shows {s} {n:,} cycles, docs/system_figures.md's "
                            f"8-GPU table gives {shown}")


def _t4k_speedup(c: Checker, pattern: str, over: str, heading: str = "## 4,096 tokens per GPU",
                 what: str = "DeepSeek-V3 4,096-token") -> None:
    """``pattern``'s figure is dysharp's speedup over ``over`` in the first table under ``heading``."""
    t = _system_totals(heading)
    c.same(pattern, t[over] / t["dysharp"], f"{what} speedup over {over}",
           f"the layer notes' table under {heading!r} ({over} {t[over]:,} / dysharp {t['dysharp']:,})")


def _layer_deepep(name, row, text):
    c = Checker(name, row["figure"])
    c.same(r"^([\d.]+)x", _estimate().speedup("deepep"), "prefill layer speedup over deepep",
           "dysharp estimate (defaults, uncalibrated)")
    r = Checker(name, row["rtl"])
    _rtl_speedup(r, text, r"([\d.]+)x at 256 \(2\)", "deepep", "dysharp system speedup over deepep")
    g16 = _system_totals("## 16 GPUs")
    r.same(r"([\d.]+)x at 16 GPUs", g16["deepep"] / g16["dysharp"], "16-GPU speedup over deepep",
           f"docs/system_scale.md's 16-GPU table (deepep {g16['deepep']:,} / dysharp {g16['dysharp']:,})")
    _t4k_speedup(r, r"([\d.]+)x at 4,096 tokens", "deepep")
    _t4k_speedup(r, r"Kimi-K2 ([\d.]+)x", "deepep", "### Kimi-K2, G = 8, 4,096 tokens per GPU", "Kimi-K2 4,096-token")
    _t4k_speedup(r, r"Qwen3-235B ([\d.]+)x", "deepep", "### Qwen3-235B-A22B, G = 8, 4,096 tokens per GPU",
                 "Qwen3-235B-A22B 4,096-token")
    g32 = _system_totals("## 32 GPUs, 1,024 tokens per GPU")
    r.same(r"([\d.]+)x at 32 GPUs", g32["deepep"] / g32["dysharp"], "32-GPU speedup over deepep",
           f"docs/system_scale.md's 32-GPU, 1,024-token table (deepep {g32['deepep']:,} / dysharp {g32['dysharp']:,})")
    _t4k_speedup(r, r"1,024 tokens/GPU, Kimi-K2 ([\d.]+)x", "deepep", "### Kimi-K2, G = 32, 1,024 tokens per GPU",
                 "Kimi-K2 32-GPU, 1,024-token")
    _t4k_speedup(r, r"Kimi-K2 [\d.]+x, Qwen3-235B ([\d.]+)x \(8\)", "deepep",
                 "### Qwen3-235B-A22B, G = 32, 1,024 tokens per GPU", "Qwen3-235B-A22B 32-GPU, 1,024-token")
    return c.errors + r.errors


def _layer_basic(name, row, text):
    c = Checker(name, row["figure"])
    c.same(r"^([\d.]+)x", _estimate().speedup("dysharp-basic"), "prefill layer speedup over dysharp-basic",
           "dysharp estimate (defaults, uncalibrated)")
    r = Checker(name, row["rtl"])
    _rtl_speedup(r, text, r"([\d.]+)x \(2\)", "dysharp-basic", "dysharp system speedup over dysharp-basic")
    _t4k_speedup(r, r"^([\d.]+)x \(6\)", "dysharp-basic")
    return c.errors + r.errors


def _layer_fused(name, row, text):
    c = Checker(name, row["figure"])
    src = "dysharp estimate (defaults, uncalibrated)"
    c.same(r"^([\d.]+)x /", _estimate().speedup("ccfuser"), "prefill layer speedup over ccfuser", src)
    c.same(r"/ ([\d.]+)x", _estimate().speedup("comet"), "prefill layer speedup over comet", src)
    r = Checker(name, row["rtl"])
    _rtl_speedup(r, text, r"([\d.]+)x \(2\)", "fused-unicast", "dysharp system speedup over fused-unicast")
    _t4k_speedup(r, r"fused-unicast.*?: ([\d.]+)x \(6\)", "fused-unicast")
    return c.errors + r.errors


def _layer_nvls(name, row, text):
    c = Checker(name, row["figure"])
    c.same(r"^([\d.]+)x", _estimate().speedup("nvls"), "prefill layer speedup over nvls",
           "dysharp estimate (defaults, uncalibrated)")
    r = Checker(name, row["rtl"])
    _rtl_speedup(r, text, r"([\d.]+)x \(2\)", "nvls", "dysharp system speedup over nvls")
    _t4k_speedup(r, r"^([\d.]+)x \(6\)", "nvls")
    _t4k_speedup(r, r"([\d.]+)x \(8\)", "nvls", "## 32 GPUs, 1,024 tokens per GPU", "32-GPU, 1,024-token")
    return c.errors + r.errors


def _whole_step(name, row, text):
    c = Checker(name, row["figure"])
    for mode in ("prefill", "decode", "training"):
        c.same(rf"{mode} ([\d.]+)x", _end_to_end(mode).schemes["deepep"].step_speedup,
               f"{mode} whole-step speedup over deepep",
               f"dysharp estimate --end-to-end --mode {mode} (defaults, uncalibrated)")
    return c.errors


def _switch_area(name, row, text):
    total = _one(_csv("integrated_overhead_summary.csv"), "item", "TOTAL DySHARP addition")
    c = Checker(name, row["figure"])
    src = "synth_reports/integrated_overhead_summary.csv (TOTAL DySHARP addition)"
    c.same(r"^([\d.]+) mm\^2", float(total["area_mm2_n5"]), "area, N5 mm^2", src)
    c.same(r"= ([\d.]+)% of the NVSwitch", float(total["pct_nvswitch_area"]), "% of the NVSwitch", src)
    return c.errors


def _switch_power(name, row, text):
    total = _one(_csv("overhead_summary.csv"), "role", "TOTAL switch side, sum of blocks (64 ports)")
    c = Checker(name, row["figure"])
    src = "synth_reports/overhead_summary.csv (TOTAL switch side, sum of blocks)"
    c.same(r"^([\d.]+) W", float(total["power_mw_n5"]) / 1000, "power, W", src)
    c.same(r"\(([\d.]+) W with ideal clock gating", float(total["power_gated_mw_n5"]) / 1000,
           "gated power, W", src)
    # Footnote (4) states the same total's area, the figure the study's summary gives without the headline.
    f = Checker(name, footnote(text, 4))
    f.same(r"the switch side is ([\d.]+) mm\^2", float(total["area_mm2_n5"]), "footnote (4): sum-of-blocks area, "
           "N5 mm^2", src)
    f.same(r"side is [\d.]+ mm\^2 = ([\d.]+)%", float(total["note"].split("%")[0]),
           "footnote (4): sum-of-blocks % of the NVSwitch", src)
    return c.errors + f.errors


def _gpu_side(name, row, text):
    total = _one(_csv("overhead_summary.csv"), "role", "TOTAL GPU side")
    c = Checker(name, row["figure"])
    src = "synth_reports/overhead_summary.csv (TOTAL GPU side)"
    c.same(r"^([\d.]+) mm\^2", float(total["area_mm2_n5"]), "area per GPU, mm^2", src)
    c.same(r", ([\d.]+) mW", float(total["power_mw_n5"]), "power per GPU, mW", src)
    c.same(r"\(([\d.]+) mW gated", float(total["power_gated_mw_n5"]), "gated power per GPU, mW", src)
    return c.errors


def _system_top(name, row, text):
    top = _one(_csv("system_summary.csv"), "part", "system top")
    c = Checker(name, row["figure"])
    src = "synth_reports/system_summary.csv (system top)"
    assert top["gpus"] == "8", f"system_summary.csv's system top is of {top['gpus']} GPUs, the README's row of 8"
    c.same(r"^([\d.]+) mm\^2", float(top["area_um2"]) / 1e6, "area, 45 nm mm^2", src)
    c.same(r"mm\^2, ([\d.]+) W", float(top["power_mw_no_gating"]) / 1000, "power, W", src)
    c.same(r"\(([\d.]+) W gated", float(top["power_mw_clock_gated"]) / 1000, "gated power, W", src)
    return c.errors


def _timing(name, row, text):
    rows = _csv("timing_summary.csv")
    timed = [r for r in rows if r["meets"] in ("yes", "no")]
    met = sum(r["meets"] == "yes" for r in timed)
    c = Checker(name, row["figure"])
    src = "synth_reports/timing_summary.csv (meets = yes / yes or no)"
    c.same(r"^(\d+) of \d+ timed", met, "points that meet", src)
    c.same(r"^\d+ of (\d+) timed", len(timed), "timed points", src)
    return c.errors


# The command each checked row must name (README's "command" column).
COMMANDS = {
    "payload efficiency, 256 B": "`dysharp efficiency`",
    "MoE layer speedup over DeepEP": "`dysharp estimate`",
    "... over DySHARP-Basic (no fusion)": "`dysharp estimate`",
    "... over CCFuser / COMET": "`dysharp estimate`",
    "... over NVLS (static multimem)": "`dysharp estimate`",
    "whole step over DeepEP": "`dysharp estimate --end-to-end`",
    "switch-side area, 64 ports, N5 (4)": "`dysharp area --overhead`",
    "switch-side power, 64 ports, N5 (4)": "`dysharp power`",
    "GPU side, per GPU, N5 (4)": "`dysharp area`, `dysharp power`",
    "system top, 8 GPUs, 45 nm (4)": "`dysharp area --system-top`",
    "port clock, 640 ps at N5 (4)": "`dysharp timing`",
}

CHECKS = {
    "payload efficiency, 256 B": _efficiency,
    "MoE layer speedup over DeepEP": _layer_deepep,
    "... over DySHARP-Basic (no fusion)": _layer_basic,
    "... over CCFuser / COMET": _layer_fused,
    "... over NVLS (static multimem)": _layer_nvls,
    "whole step over DeepEP": _whole_step,
    "switch-side area, 64 ports, N5 (4)": _switch_area,
    "switch-side power, 64 ports, N5 (4)": _switch_power,
    "GPU side, per GPU, N5 (4)": _gpu_side,
    "system top, 8 GPUs, 45 nm (4)": _system_top,
    "port clock, 640 ps at N5 (4)": _timing,
}


def check_row(name: str, row: dict, text: str) -> list[str]:
    """The mismatches of one checked row: its command, then its figures against their sources."""
    errors = []
    if not row["command"].startswith(COMMANDS[name]):
        errors.append(f"README row {name!r}: names the command {row['command']!r}; its check reproduces "
                      f"{COMMANDS[name]}")
    return errors + CHECKS[name](name, row, text)


def check_readme(text: str) -> list[str]:
    """Every mismatch between README text's headline table and its sources, and every row not covered."""
    errors = []
    for name, row in headline_rows(text).items():
        if name in BENCH_ONLY:
            continue
        if name not in CHECKS:
            errors.append(f"README row {name!r} has no check in tests/test_readme_figures.py: add one to CHECKS, "
                          f"or name it in BENCH_ONLY with its slow bench")
            continue
        errors += check_row(name, row, text)
    return errors


# ---------------------------------------------------------------------------------------------------------
# Tests

TEXT = README.read_text()
ROWS = headline_rows(TEXT)


def test_every_row_checked_or_bench_only():
    missing = [n for n in ROWS if n not in CHECKS and n not in BENCH_ONLY]
    assert not missing, f"README headline rows with no check and not listed in BENCH_ONLY: {missing}"
    stale = [n for n in list(CHECKS) + list(BENCH_ONLY) if n not in ROWS]
    assert not stale, f"CHECKS / BENCH_ONLY name rows the README no longer has: {stale}"
    assert not set(CHECKS) & set(BENCH_ONLY)
    assert set(COMMANDS) == set(CHECKS)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_row_matches_source(name):
    errors = check_row(name, ROWS[name], TEXT)
    assert not errors, "\n".join(errors)


# The check can fail: a deliberately wrong figure in a copy of the README is reported with the row name, the
# README's figure and the source's.
WRONG = [
    ("1.82x (1)", "1.58x (1)", "MoE layer speedup over DeepEP", "1.58", "1.82"),
    ("prefill 1.33x", "prefill 1.53x", "whole step over DeepEP", "1.53", "1.33"),
    ("3.951 mm^2", "3.915 mm^2", "switch-side area, 64 ports, N5 (4)", "3.915", "3.951"),
    ("1.547% of", "1.574% of", "switch-side area, 64 ports, N5 (4)", "1.574", "1.547"),
    ("(2.54 W with", "(2.64 W with", "switch-side power, 64 ports, N5 (4)", "2.64", "2.54"),
    ("side is 3.408 mm^2", "side is 3.480 mm^2", "switch-side power, 64 ports, N5 (4)", "3.480", "3.408"),
    ("6.8 mW", "7.8 mW", "GPU side, per GPU, N5 (4)", "7.8", "6.8"),
    ("8.132 mm^2", "8.123 mm^2", "system top, 8 GPUs, 45 nm (4)", "8.123", "8.132"),
    ("39 of 42", "40 of 42", "port clock, 640 ps at N5 (4)", "40", "39"),
    ("94.1% (", "94.3% (", "payload efficiency, 256 B", "94.3", "94.1"),
    ("1.12x / 1.13x", "1.12x / 1.71x", "... over CCFuser / COMET", "1.71", "1.13"),
    ("1.027x (2)", "1.072x (2)", "... over DySHARP-Basic (no fusion)", "1.072", "1.027"),
    ("1.092x at 16", "1.029x at 16", "MoE layer speedup over DeepEP", "1.029", "1.092"),
    ("1.244x at 4,096", "1.424x at 4,096", "MoE layer speedup over DeepEP", "1.424", "1.244"),
    ("Kimi-K2 1.399x", "Kimi-K2 1.939x", "MoE layer speedup over DeepEP", "1.939", "1.399"),
    ("1.505x at 32 GPUs", "1.530x at 32 GPUs", "MoE layer speedup over DeepEP", "1.530", "1.505"),
    ("Kimi-K2 1.404x", "Kimi-K2 1.440x", "MoE layer speedup over DeepEP", "1.440", "1.404"),
    ("Qwen3-235B 1.695x", "Qwen3-235B 1.659x", "MoE layer speedup over DeepEP", "1.659", "1.695"),
    ("1.622x (6)", "1.662x (6)", "... over NVLS (static multimem)", "1.662", "1.622"),
    ("dysharp 316,852 cycles", "dysharp 361,852 cycles", "MoE layer speedup over DeepEP", "361,852", "316,852"),
    ("| `dysharp timing` |", "| `dysharp lint` |", "port clock, 640 ps at N5 (4)", "`dysharp lint`",
     "`dysharp timing`"),
]


@pytest.mark.parametrize("old,new,row,shown,source", WRONG, ids=[w[1] for w in WRONG])
def test_wrong_figure_is_reported(old, new, row, shown, source):
    assert TEXT.count(old) == 1, f"the README no longer has {old!r} once: update WRONG"
    errors = check_readme(TEXT.replace(old, new))
    assert errors, f"README with {new!r} in place of {old!r} passed the check"
    ours = [e for e in errors if repr(row) in e]
    assert ours, f"no error names the row {row!r}: {errors}"
    assert any(shown in e and source in e for e in ours), f"no error names {shown} and {source}: {ours}"


def test_new_row_without_check_is_reported():
    text = TEXT.replace("| formal proofs |", "| a new figure | 42x | | `dysharp new` |\n| formal proofs |")
    errors = check_readme(text)
    assert any("'a new figure'" in e and "no check" in e for e in errors), errors
