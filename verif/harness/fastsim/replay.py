"""Replay a fast-path run's trace through another Verilog model of the design on Icarus.

``VcFastSim.run(traffic, trace=path)`` (the two-VC harness, ``vc_main.cpp``) writes, for every clock cycle of
the run (reset and configuration included), the value of every input but ``clk`` as driven for the cycle's
rising edge and then every output after its falling edge; ``FastSim.run`` (the credit-link harness,
``credit_main.cpp``) the inputs as driven after the rising edge, while the clock is high.
:func:`replay_on_icarus` compiles another Verilog file of the same top (for the two-VC harness with its
inputs registered at the rising edge, as in that fast path's build:
:func:`~verif.harness.fastsim.build.registered_inputs`), drives it with the recorded inputs at the same
point of each cycle and compares every output bit of every cycle with the recorded one. Equal outputs for
the same inputs in every cycle mean the two models are indistinguishable to the harness: it would have
driven the other model exactly as it drove this one, and logged the same.
"""

import re
import subprocess
from pathlib import Path

from .build import registered_inputs, top_ports, trace_ports

__all__ = ["replay_on_icarus", "Replay"]


class Replay:
    """A replay's outcome: ``cycles`` compared and the first ``mismatches`` (cycle, port, got, expected)."""

    def __init__(self, cycles: int, mismatches: list[str], total: int):
        self.cycles = cycles
        self.mismatches = mismatches
        self.total = total             # mismatching (cycle, port) pairs

    def __repr__(self):
        return f"Replay(cycles={self.cycles}, mismatches={self.total})"


def _testbench(top: str, order: list[tuple[str, str, int]], inputs_at_rise: bool) -> str:
    decl, conn, read_in, apply, check = [], [".clk(clk)"], [], [], []
    for name, d, w in order:
        rng = f"[{w - 1}:0] " if w > 1 else ""
        if d == "input":
            decl += [f"  reg {rng}i_{name} = {1 if name == 'rst' else 0};", f"  reg {rng}n_{name};"]
            conn.append(f".{name}(i_{name})")
            read_in.append(f"      if ($fscanf(fd, \"%h\", n_{name}) != 1) done = 1;")
            apply.append(f"        i_{name} = n_{name};")
        else:
            decl += [f"  wire {rng}o_{name};", f"  reg {rng}e_{name};"]
            conn.append(f".{name}(o_{name})")
            check.append(f"        if ($fscanf(fd, \"%h\", e_{name}) != 1) begin $display(\"REPLAY truncated\"); "
                         f"$finish; end\n"
                         f"        if (o_{name} !== e_{name}) begin bad = bad + 1; if (bad <= 20) "
                         f"$display(\"MISMATCH cycle %0d {name}: %h expected %h\", cycles, o_{name}, e_{name}); end")
    return "\n".join([
        "`timescale 1ns/1ps", "module replay_tb;", "  reg clk = 0;", *decl,
        f"  {top} dut({', '.join(conn)});",
        "  integer fd, cycles, bad, done;", "  reg [8*4096-1:0] path;",
        "  initial begin",
        "    if (!$value$plusargs(\"trace=%s\", path)) begin $display(\"REPLAY no trace\"); $finish; end",
        "    fd = $fopen(path, \"r\");",
        "    if (fd == 0) begin $display(\"REPLAY cannot open the trace\"); $finish; end",
        "    cycles = 0; bad = 0; done = 0;",
        "    while (!done) begin",
        *read_in,
        "      if (!done) begin",
        *(apply + ["        #1 clk = 1; #1 clk = 0; #1;"] if inputs_at_rise else
          ["        #1 clk = 1; #1;"] + apply + ["        #1 clk = 0; #1;"]),
        "        cycles = cycles + 1;",
        *check,
        "      end",
        "    end",
        "    $display(\"REPLAY cycles=%0d mismatches=%0d\", cycles, bad);",
        "    $finish;",
        "  end",
        "endmodule", ""])


def replay_on_icarus(verilog: str | Path, top: str, ports: dict, trace: str | Path, workdir: str | Path, *,
                     inputs_at_rise: bool = True) -> Replay:
    """Drive module ``top`` of the file ``verilog`` on Icarus with the inputs of ``trace`` and compare its
    outputs; ``ports`` are the ports of the model that wrote the trace (the file's top must have the same).
    ``inputs_at_rise``: a two-VC trace (its inputs registered at the rising edge); else a credit-link one."""
    from verif.harness.runner import _YOSYS_KICK, require_simulator

    require_simulator("icarus")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    text = Path(verilog).read_text()
    own = top_ports(text, top)
    if own != ports:
        raise ValueError(f"{verilog} has other ports than the traced model: "
                         f"{sorted(set(own.items()) ^ set(ports.items()))[:4]}")
    # As the fast path's build (inputs loaded at the rising edge), and the time-0 kick of the always @*
    # blocks that Icarus needs (verif/harness/runner.icarus_source).
    if inputs_at_rise:
        text = registered_inputs(text, top, "posedge")
    text = _YOSYS_KICK.sub(r"\1reg \2;\n\1initial #0 \2 = 0;", text)
    (workdir / "dut.v").write_text(text)
    (workdir / "replay_tb.v").write_text(_testbench(top, trace_ports(ports), inputs_at_rise))
    vvp = workdir / "replay.vvp"
    proc = subprocess.run(["iverilog", "-g2012", "-o", str(vvp), "-s", "replay_tb", str(workdir / "replay_tb.v"),
                           str(workdir / "dut.v")], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"iverilog failed on {verilog}: {proc.stderr.strip()[-2000:]}")
    proc = subprocess.run(["vvp", "-n", str(vvp), f"+trace={Path(trace).resolve()}"], capture_output=True, text=True)
    m = re.search(r"REPLAY cycles=(\d+) mismatches=(\d+)", proc.stdout)
    if proc.returncode or not m:
        raise RuntimeError(f"the replay on Icarus did not finish: {(proc.stdout + proc.stderr).strip()[-2000:]}")
    return Replay(int(m.group(1)), re.findall(r"^MISMATCH .*$", proc.stdout, re.M), int(m.group(2)))
