"""Calibration of the estimator from the RTL benchmarks' JSON (``build/bench/*.json``).

Each RTL benchmark writes ``build/bench/<name>.json`` with a top-level ``"calibration"`` dict of figures in
switch-clock cycles (or per-cycle rates). :func:`load_calibration` reads whichever exist; every figure
that is missing takes the documented default below and is marked ``uncalibrated`` in the output.

How each figure enters the model (see ``docs/estimator.md``):

* ``switch_zero_load_latency_cycles`` -- the switch core's header-in to header-out latency, per traversal.
* ``switch_saturation_throughput`` -- accepted flits/cycle/port under uniform load: scales every link rate
  (capped at 1).
* ``tlb_hit_latency_cycles``, ``tlb_miss_penalty_cycles``, ``tlb_hit_rate`` -- the mean AL-TLB lookup
  latency ``hit + (1 - hit_rate) * miss_penalty`` is added to every dynamic dispatch/combine traversal
  (misses wait in MSHRs and do not block other requests, so they cost latency, not throughput).
* ``tlb_translations_per_cycle`` -- per switch port; a dynamic packet with ``d`` destinations needs ``d``
  translations, so the uplink can carry at most ``translations_per_cycle * packet_flits / d`` of its line
  rate.
* ``reduce_flits_per_cycle`` -- contribution flits one reduction engine absorbs per cycle when the
  responses arrive whole, one after another (as the switch's packet-atomic response network delivers
  them); one engine per switch port, so a home GPU's ports absorb ``links * rate`` flits per cycle of its
  partials. (The bench's flit-interleaved worst case is reported beside it, not used.)
* ``reduce_last_to_result_cycles`` -- added to the NVLS ReduceScatter's ld_reduce.
* ``reduce_request_overhead_cycles`` -- the reduction engine's own time in one ld_reduce at zero load
  (request -> result minus the read latency; the networks not included): added to every DySHARP pull combine.
* ``tracker_updates_per_cycle`` -- token-tracker updates per cycle per link (one per arriving packet):
  caps the fused pipeline's dispatch arrival rate.
* ``tracker_ready_latency_cycles`` -- added to every tile's ready time in the fused pipeline (``dysharp
  system``'s fused run when present: last row landed in GPU memory to the tile's ready, measured in the
  whole system; else the token tracker's own benchmark).
* ``tlb_misses_per_key`` -- AL-TLB misses per translated key (group, index, destination) under the MoE
  layer's traffic (``dysharp system``): 1.0 means compulsory misses only. When present it replaces
  ``tlb_hit_rate`` by ``1 - misses_per_key / packets per row`` at the model's real row size (the scaled
  RTL rows are one packet each, so their own hit rate says nothing about full-size rows).
* ``reqgen_uplink_flit_ratio`` -- dynamic/unicast uplink flits measured on the request generator; a
  consistency check against this model's own count (reported, not used).
* ``tlb_backing_latency_cycles``, ``reduce_alu_latency_cycles`` -- reported for context.
"""

import dataclasses
import json
from pathlib import Path

__all__ = ["FIGURES", "Calibration", "load_calibration"]

# name -> (bench file stem, default, why the default). Every default is replaced by the RTL's figure when its
# benchmark has run. Defaults marked "assumption": the tornado (``dysharp estimate --tornado``) moves the hit
# rate (0.5..1) and the switch latency (50..500 ns); the other latencies are a few cycles (ns) per traversal,
# far inside the switch-latency row's range, so that row bounds them.
FIGURES = {
    "switch_zero_load_latency_cycles": ("switch", None,
                                        "the system config's switch_latency_ns (an assumption)"),
    "switch_saturation_throughput": ("switch", 1.0, "VOQ + iSLIP approaches 100% under uniform traffic "
                                                    "(McKeown 1999)"),
    "tlb_hit_latency_cycles": ("al_tlb", 2.0, "the AL-TLB's CAM: fixed lookup latency of at most 2 cycles"),
    "tlb_translations_per_cycle": ("al_tlb", 1.0, "one lookup per cycle per port (the AL-TLB's CAM)"),
    "tlb_miss_penalty_cycles": ("al_tlb", 300.0, "one backing-table read in GPU memory, ~200 ns (assumption; "
                                                 "bounded by the tornado's hit-rate row)"),
    "tlb_backing_latency_cycles": ("al_tlb", 300.0, "as the miss penalty (assumption)"),
    "tlb_hit_rate": ("al_tlb", 0.9, "assumption (conservative; tornado 0.5..1)"),
    "reduce_alu_latency_cycles": ("reduction", 4.0, "assumption"),
    "reduce_flits_per_cycle": ("reduction", 1.0, "the RTL reduction engine's design: one contribution flit "
                                                 "per cycle per engine"),
    "reduce_last_to_result_cycles": ("reduction", 8.0, "assumption"),
    "reduce_request_overhead_cycles": ("reduction", 24.0, "the RTL ld_reduce unit as last measured (docs/"
                                                          "reduction.md: request -> result = read latency + 24)"),
    "tracker_updates_per_cycle": ("token_tracker", 1.0, "the Tile Status Table's design: one arrival per cycle sustained"),
    "tracker_ready_latency_cycles": (("system", "token_tracker"), 4.0, "assumption"),
    "tlb_misses_per_key": ("system", None, "tlb_hit_rate (no per-key figure)"),
    "reqgen_uplink_flit_ratio": ("token_tracker", None, "computed by this model (check only)"),
}


@dataclasses.dataclass
class Calibration:
    values: dict            # name -> value (defaults filled in; None where the default comes from elsewhere)
    sources: dict           # name -> "build/bench/x.json" or "uncalibrated (default: why)"

    def get(self, name, fallback=None):
        v = self.values.get(name)
        return fallback if v is None else v

    def calibrated(self, name) -> bool:
        return not self.sources[name].startswith("uncalibrated")

    def status(self) -> list[tuple[str, object, str]]:
        return [(n, self.values[n], self.sources[n]) for n in FIGURES]

    def uncalibrated(self) -> list[str]:
        return [n for n in FIGURES if not self.calibrated(n)]

    @classmethod
    def defaults(cls) -> "Calibration":
        return load_calibration(None)


def load_calibration(bench_dir="build/bench", exclude=()) -> "Calibration":
    """Figures from ``<bench_dir>/<name>.json`` where present, documented defaults elsewhere.

    ``bench_dir`` may be a list of folders, searched in order (the first file found for a benchmark wins).
    A figure may name several benchmarks (a tuple, first found wins); ``exclude`` leaves benchmarks out
    (to compare an estimate without them). A file that exists but is not valid JSON, or a figure that is not a finite non-negative number, is an
    error (``ValueError`` naming the file and field), so a broken benchmark never silently falls back."""
    values, sources = {}, {}
    loaded = {}
    dirs = [] if bench_dir is None else ([bench_dir] if isinstance(bench_dir, (str, Path)) else list(bench_dir))
    stems = {st for f, _, _ in FIGURES.values() for st in ((f,) if isinstance(f, str) else f)}
    for stem in sorted(stems - set(exclude)):
        for folder in dirs:
            path = Path(folder) / f"{stem}.json"
            if not path.exists():
                continue
            try:
                data = json.loads(path.read_text())
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e})") from None
            cal = data.get("calibration") if isinstance(data, dict) else None
            if cal is None:
                continue
            if not isinstance(cal, dict):
                raise ValueError(f"{path}: 'calibration' must be an object")
            loaded[stem] = (path, cal)
            break
    for name, (stems_of, default, why) in FIGURES.items():
        stem = next((st for st in ((stems_of,) if isinstance(stems_of, str) else stems_of)
                     if st in loaded and name in loaded[st][1]), None)
        if stem is not None:
            path, cal = loaded[stem]
            v = cal[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or v == float("inf"):
                raise ValueError(f"{path}: calibration field {name!r}={v!r} must be a finite number >= 0")
            if name in ("tlb_hit_rate",) and v > 1:
                raise ValueError(f"{path}: calibration field {name!r}={v!r} must be in [0, 1]")
            values[name] = float(v)
            sources[name] = str(path)
        else:
            values[name] = default
            sources[name] = f"uncalibrated (default: {why})"
    return Calibration(values, sources)
