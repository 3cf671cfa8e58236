"""Run a module's power workload (:mod:`synth.workloads`) under Icarus with a VCD of every signal.

cocotb's own ``waves`` option writes FST with Icarus, which vcdvcd cannot read, so a small dump module
(``dysharp_vcd_dump``) is compiled in as a second root and writes VCD to the path given as ``+vcd=``.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

from hw import registry

__all__ = ["run_workload"]

REPO = Path(__file__).resolve().parent.parent

_DUMP = """module dysharp_vcd_dump();
  reg [8*1024-1:0] path;
  integer t_on, t_off;
  initial begin
    if ($value$plusargs("vcd=%s", path)) begin
      if (!$value$plusargs("vcd_on_ns=%d", t_on)) t_on = 0;
      if (!$value$plusargs("vcd_off_ns=%d", t_off)) t_off = 0;
      $dumpfile(path);
      $dumpvars(0, {top});
      if (t_on > 0) begin
        $dumpoff;
        #(t_on) $dumpon;
      end
      if (t_off > t_on) #(t_off - t_on) $dumpoff;
    end
  end
endmodule
"""


def run_workload(design: registry.DesignPoint, workload, *, warmup: int, cycles: int, seed: int = 1,
                 out_dir="build/synth/vcd", period_ns: int = 2, reset_cycles: int = 3
                 ) -> tuple[Path, dict]:
    """Simulate ``workload`` on ``design``; returns (VCD path, the workload's JSON).

    Only the stretch from a few cycles before the measurement window to a few cycles after it is dumped
    (``period_ns``/``reset_cycles`` are :class:`verif.harness.cycler.Cycler`'s); the toggle counter then uses
    the window's exact span from the workload's JSON."""
    from cocotb_tools.runner import Icarus, get_results

    class VcdIcarus(Icarus):
        """cocotb's Icarus runner passes ``-none`` (no waveforms) unless ``waves`` (then FST): ask for VCD."""

        def _test_command(self):
            return [[("-vcd" if a == "-none" else a) for a in c] for c in super()._test_command()]

    from verif.harness.runner import icarus_source, require_simulator

    require_simulator("icarus")
    module, params = design.name, design.params
    vpath = design.verilog("build/verilog")
    # The same time-0 fix as the test runner's (verif.harness.runner.icarus_source), or a counter fed by
    # combinational logic of constant registers stays X under Icarus.
    digest = hashlib.sha256(vpath.read_bytes() + b"icarus-time0-kick").hexdigest()[:12]
    bdir = (Path(out_dir) / f"{vpath.stem}-{digest}").resolve()
    bdir.mkdir(parents=True, exist_ok=True)
    src = icarus_source(vpath, bdir)
    dump = bdir / "dysharp_vcd_dump.v"
    dump.write_text(_DUMP.replace("{top}", module))
    runner = VcdIcarus()
    runner.build(sources=[src.resolve(), dump], hdl_toplevel=module, build_dir=bdir,
                 build_args=["-s", "dysharp_vcd_dump"], timescale=("1ns", "1ps"),
                 always=not (bdir / "sim.vvp").exists())
    vcd = bdir / f"{workload.testcase}-s{seed}.vcd"
    meta_path = bdir / f"{workload.testcase}-s{seed}.json"
    env = dict(workload.env, warmup=warmup, cycles=cycles, out=str(meta_path))
    stamp = bdir / f"{workload.testcase}-s{seed}.stamp"
    import importlib.util
    origin = importlib.util.find_spec(workload.test_module).origin
    tb_hash = hashlib.sha256(Path(origin).read_bytes()).hexdigest()[:16] if origin else ""
    want = json.dumps({"env": env, "params": params, "module": workload.test_module, "tb": tb_hash},
                      sort_keys=True)
    if vcd.exists() and meta_path.exists() and stamp.exists() and stamp.read_text() == want:
        return vcd, json.loads(meta_path.read_text())     # the same run (same Verilog, settings, seed)
    stamp.unlink(missing_ok=True)
    results = bdir / f"results-{workload.testcase}-{os.getpid()}.xml"
    test_env = {"DYSHARP_MODULE": module, "DYSHARP_PARAMS": json.dumps(params), "DYSHARP_SEED": str(seed),
                "DYSHARP_ENV": json.dumps(env), "PYTHONPATH": os.pathsep.join([str(REPO)] + sys.path)}
    try:
        runner.test(test_module=workload.test_module, testcase=workload.testcase, hdl_toplevel=module,
                    build_dir=bdir, test_dir=bdir, extra_env=test_env, seed=seed, results_xml=str(results),
                    plusargs=[f"+vcd={vcd}",
                              f"+vcd_on_ns={max(1, (reset_cycles + warmup - 4) * period_ns)}",
                              f"+vcd_off_ns={(reset_cycles + warmup + cycles + 8) * period_ns}"], timescale=("1ns", "1ps"))
    except SystemExit:
        pass
    tests, failed = get_results(results) if results.exists() else (0, 1)
    if failed or not tests or not vcd.exists() or not meta_path.exists():
        raise RuntimeError(f"power workload {workload.test_module}::{workload.testcase} on {module} {design.overrides} "
                           f"failed (seed {seed}); log and results in {bdir}")
    stamp.write_text(want)
    return vcd, json.loads(meta_path.read_text())
