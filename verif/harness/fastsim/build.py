"""Generate, compile (cached) and run the fast-path Verilator harness of a credit-link component.

``sim = build("switch", {"ports": 8})`` generates the Verilog of the registered module, fills the C++ main
template (``credit_main.cpp``) for its ports and compiles both with Verilator
(``--cc --exe --build -O3 --x-assign fast --x-initial fast``, ``OPT_FAST=-O3``) into
``build/fastsim/<verilog name>-<hash>/``, where the hash covers the Verilog, the generated main and the
flags: an unchanged design and harness reuse the binary. The compiler's output goes to ``build.log`` in
that folder; a failed build raises :class:`FastsimBuildError` naming it. ``sim.run(traffic)`` writes the
traffic file, runs the binary and returns the :class:`~verif.harness.fastsim.files.SimLog`.
"""

import hashlib
import os
import re
import subprocess
import time
from importlib import resources
from pathlib import Path

from hw import registry

from ..runner import file_lock
from .files import SimLog, Traffic, flag_bits, flit_words, read_log, write_traffic

__all__ = ["build", "FastSim", "FastsimBuildError", "FastsimRunError", "VERILATOR_FLAGS"]

VERILATOR_FLAGS = ["--cc", "--exe", "--build", "-O3", "--x-assign", "fast", "--x-initial", "fast",
                   "-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-MAKEFLAGS", "OPT_FAST=-O3"]


class FastsimBuildError(RuntimeError):
    pass


class FastsimRunError(RuntimeError):
    pass


def cxx_name(verilog_name: str) -> str:
    """Verilator's C++ member name for a Verilog port (``__`` is encoded as ``___05F``)."""
    return verilog_name.replace("__", "___05F")


_PORT = re.compile(r"^\s*(input|output)\s+(?:\[(\d+):(\d+)\]\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)


def top_ports(verilog: str, top: str) -> dict[str, tuple[str, int]]:
    """{port name: (direction, width)} of module ``top`` in Amaranth's Verilog."""
    m = re.search(rf"^module {re.escape(top)}\s*\((.*?)^endmodule", verilog, re.M | re.S)
    if not m:
        raise FastsimBuildError(f"module {top!r} not found in the generated Verilog")
    body = m.group(1)
    # Ports are declared before the first submodule or assignment; a port list is never redeclared.
    return {name: (d, int(hi) - int(lo) + 1 if hi else 1) for d, hi, lo, name in _PORT.findall(body)}


def render_main(top: str, ports: dict, n: int, flit_width: int, in_credits: int, out_credits: int) -> str:
    words = flit_words(flit_width)
    flags = flag_bits(flit_width)
    need = {f"{side}__{i}__{sig}" for side in ("rx", "tx") for i in range(n) for sig in ("valid", "flit", "credit")}
    missing = sorted(need - ports.keys())
    if missing:
        raise FastsimBuildError(f"{top} lacks the credit-link ports {missing[:4]}: the fast path needs "
                                f"rx__<i>__valid/flit/credit and tx__<j>__valid/flit/credit for 0..{n - 1}")
    for name in (f"rx__0__flit", f"tx__0__flit"):
        if ports[name][1] > 64 and -(-ports[name][1] // 32) != words:
            raise FastsimBuildError(f"{top}.{name} is {ports[name][1]} bits, the flit layout needs {words} words")
    bind = []
    for i in range(n):
        for side in ("rx", "tx"):
            for sig in ("valid", "credit"):
                bind.append(f"    p.{side}_{sig}[{i}] = &t->{cxx_name(f'{side}__{i}__{sig}')};")
            bind.append(f"    p.{side}_flit[{i}] = t->{cxx_name(f'{side}__{i}__flit')}.data();")
    zero = []
    for name, (d, width) in sorted(ports.items()):
        if d != "input" or name in ("clk", "rst") or name in need:
            continue
        if width > 64:
            zero.append(f"    std::memset(top->{cxx_name(name)}.data(), 0, sizeof(top->{cxx_name(name)}));")
        else:
            zero.append(f"    top->{cxx_name(name)} = 0;")
    text = resources.files(__package__).joinpath("credit_main.cpp").read_text()
    fields = {"TOP": top, "PORTS": n, "FLIT_WORDS": words, "LAST_WORD": flags["last"][0],
              "LAST_BIT": flags["last"][1], "POISON_WORD": flags["poison"][0], "POISON_BIT": flags["poison"][1],
              "IN_CREDITS": in_credits, "OUT_CREDITS": out_credits, "BIND": "\n".join(bind),
              "ZERO_INPUTS": "\n".join(zero)}
    for k, v in fields.items():
        text = text.replace(f"@@{k}@@", str(v))
    if "@@" in text:
        raise FastsimBuildError(f"unfilled template field in credit_main.cpp: {re.findall('@@[A-Z_]+@@', text)}")
    return text


class FastSim:
    """A compiled harness: ``run(traffic)`` simulates and returns the log."""

    def __init__(self, module: str, params: dict, binary: Path, ports: int, words: int, build_s: float):
        self.module = module
        self.params = params
        self.binary = binary
        self.ports = ports
        self.words = words
        self.build_s = build_s   # 0 when the cached binary was reused

    def run(self, traffic: Traffic, workdir: str | os.PathLike | None = None, tag: str = "run") -> SimLog:
        if traffic.ports != self.ports or traffic.words != self.words:
            raise ValueError(f"traffic for {traffic.ports} ports x {traffic.words} words does not fit "
                             f"{self.module} ({self.ports} ports x {self.words} words)")
        workdir = Path(workdir or self.binary.parent / "runs")
        workdir.mkdir(parents=True, exist_ok=True)
        tpath = write_traffic(traffic, workdir / f"{tag}-{os.getpid()}.traffic")
        lpath = workdir / f"{tag}-{os.getpid()}.log.bin"
        proc = subprocess.run([str(self.binary), str(tpath), str(lpath)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise FastsimRunError(f"{self.binary.name} ({self.module} {self.params}) exited with "
                                  f"{proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
        log = read_log(lpath)
        tpath.unlink()
        lpath.unlink()
        return log


def build(module: str, params: dict | None = None, *, build_root: str | os.PathLike = "build") -> FastSim:
    """Build (or reuse) the fast-path binary of registered credit-link ``module`` at ``params``."""
    from verif.harness.runner import require_simulator, verilator_env

    require_simulator("verilator")
    spec = registry.get(module)
    full = spec.resolve(params)
    for key in ("ports", "credits"):
        if key not in full:
            raise ValueError(f"module {module!r} has no {key!r} parameter: the fast path drives credit-link "
                             f"components with rx/tx port arrays")
    n = full["ports"]
    flit_width = full.get("flit_width", 128)
    build_root = Path(build_root)
    slug = registry.point_slug(full, spec.params())
    with file_lock(build_root / "locks" / f"{module}__{slug}.lock"):
        vpath = registry.generate_verilog(module, params, build_root / "verilog")
    verilog = vpath.read_text()
    main = render_main(module, top_ports(verilog, module), n, flit_width, full["credits"],
                       full.get("out_credits") or full["credits"])
    digest = hashlib.sha256(verilog.encode() + main.encode() + " ".join(VERILATOR_FLAGS).encode()
                            ).hexdigest()[:16]
    bdir = (build_root / "fastsim" / f"{vpath.stem}-{digest}").resolve()
    binary = bdir / "sim"
    marker = bdir / ".built"
    t0 = time.perf_counter()
    built = False
    with file_lock(build_root / "locks" / f"fastsim-{bdir.name}.lock"):
        if not (marker.exists() and binary.exists()):
            bdir.mkdir(parents=True, exist_ok=True)
            (bdir / "main.cpp").write_text(main)
            log = bdir / "build.log"
            env = dict(os.environ, **verilator_env())
            cmd = ["verilator", *VERILATOR_FLAGS, "-j", "2", "--top-module", module, "-Mdir", str(bdir / "obj"),
                   "-o", str(binary), str(vpath.resolve()), str(bdir / "main.cpp")]
            with open(log, "w") as f:
                f.write(" ".join(cmd) + "\n")
                f.flush()
                proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=bdir)
            if proc.returncode != 0 or not binary.exists():
                raise FastsimBuildError(f"Verilator build of the fast path for {module} {params or {}} failed "
                                        f"(exit {proc.returncode}); see {log}")
            marker.write_text(digest)
            built = True
    return FastSim(module, full, binary, n, flit_words(flit_width), time.perf_counter() - t0 if built else 0.0)
