"""Generate, compile (cached) and run the fast-path Verilator harness of a credit-link component.

``sim = build("switch", {"ports": 8})`` generates the Verilog of the registered module, fills the C++ main
template (``credit_main.cpp``) for its ports and compiles both with Verilator
(``--cc --exe --build -O3 --x-assign fast --x-initial fast``, ``OPT_FAST=-O1``) into
``build/fastsim/<verilog name>-<hash>/``, where the hash covers the Verilog, the generated main and the
flags: an unchanged design and harness reuse the binary. The compiler's output goes to ``build.log`` in
that folder; a failed build raises :class:`FastsimBuildError` naming it. ``sim.run(traffic)`` writes the
traffic file, runs the binary and returns the :class:`~verif.harness.fastsim.files.SimLog`.

``build_vc("dysharp_switch", {...})`` does the same for a component with two-VC links (the template
``vc_main.cpp``, which also models each GPU's side of its link; the deduplicated blocks kept apart,
:func:`keep_apart_config`, and the design's reset latched, :func:`registered_reset`); its ``run`` takes a
:class:`~verif.harness.fastsim.files.VcTraffic` and returns a :class:`~verif.harness.fastsim.files.VcLog`.
"""

import collections
import hashlib
import importlib
import os
import re
import subprocess
import time
from importlib import resources
from pathlib import Path

from hw import registry

from ..runner import file_lock, locked_verilog
from .files import (SimLog, Traffic, VcLog, VcTraffic, flag_bits, flit_words, read_log, read_vc_log,
                    write_traffic, write_vc_traffic)

__all__ = ["build", "build_vc", "registered_reset", "SIM_RST", "FastSim", "VcFastSim", "FastsimBuildError",
           "FastsimRunError", "VERILATOR_FLAGS", "keep_apart_config"]

# The C++ is compiled at g++ -O1: on the plain switch's fast path it builds a third faster than -O3 and
# simulates as fast (8 ports: 15.8 against 22.6 s, 161,274 against 160,973 cycles/s; 16 ports: 38.9
# against 58.7 s, 27,611 against 23,826 cycles/s; the same 33,000-cycle full-load traffic, equal logs).
VERILATOR_FLAGS = ["--cc", "--exe", "--build", "-O3", "--x-assign", "fast", "--x-initial", "fast",
                   "-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-MAKEFLAGS", "OPT_FAST=-O1"]


# The two-VC harness keeps the deduplicated emission's repeated blocks apart (a Verilator config of
# ``no_inline`` lines, :func:`keep_apart_config`): each then compiles once. ``-fno-inline``, before it, kept
# every module apart, a block's parts too (an input unit's ingress and reader, an AL-TLB's MSHR file): the
# 8-port integrated switch, full-load dispatch, equal logs, built in 57 s and ran 6,747 cycles/s. Against
# the config that kept every block module apart (the parts written inside their block), side by side
# (`dysharp bench sim_speed --ports 8 --harnesses fast --dysharp-ports 8,16`): 8 ports 8,979 -> 10,278
# cycles/s, build 49 -> 50 s; 16 ports 3,237 -> 3,588, build 112 -> 89 s; logs equal. Before the blocks
# had parts, -fno-inline had cut the 8-port build from 85 to 48 s (16 ports: 229 -> 116 s).
def keep_apart_config(verilog: str, top: str) -> str:
    """A Verilator config that keeps out of Verilator's inlining every module of ``verilog`` that is
    instantiated in more than one place of its text (the deduplicated emission writes a repeated block once
    and instantiates it at each copy), so that each compiles once. A module instantiated once (a block's
    part, or a single block) is left to Verilator: inlined into its parent, it is compiled once per
    compiled parent all the same."""
    names = set(re.findall(r"^module ([A-Za-z_][A-Za-z0-9_$]*)\s*\(", verilog, re.M)) - {top}
    uses = collections.Counter(m for m in re.findall(r"^\s+([A-Za-z_][A-Za-z0-9_$]*)\s+\S+\s*\(", verilog, re.M)
                               if m in names)
    blocks = sorted(m for m, n in uses.items() if n > 1)
    return "`verilator_config\n" + "".join(f'no_inline -module "{m}"\n' for m in blocks)


SIM_RST = "rst__sim_q"      # the simulated top's latched reset (see registered_reset)


def registered_reset(verilog: str, top: str) -> str:
    """The Verilog with module ``top`` taking its ``rst`` input through a register latched on the falling
    clock edge (``rst__sim_q``); unchanged when ``top`` has no ``rst`` and ``clk`` input.

    Verilator evaluates all logic fed by a top-level input (its ``ico`` region) at every ``eval()``, twice
    per clock cycle, and Amaranth folds the synchronous reset into the next-state logic of every register,
    so all of that logic is input logic. Latched, ``rst`` reaches the design from a register. Each rising
    edge sees the value ``rst`` had at the falling edge before it: the value it sees directly, since the
    mains change ``rst`` only while the clock is high. The two-VC fast path (then built with ``-fno-inline``)
    ran 1.17x faster so at 8 ports and 1.27x at 16; the credit-link fast path, whose model Verilator
    inlines, 0.93x (``dysharp bench sim_speed``), so it keeps the Verilog as generated by default.
    """
    m = re.search(rf"^module {re.escape(top)}\(.*?^endmodule", verilog, re.M | re.S)
    if not m:
        raise ValueError(f"module {top!r} not found in the Verilog")
    body = m.group(0)
    decl = "  input rst;\n  wire rst;\n"
    if decl not in body or not re.search(r"^  input clk;$", body, re.M):
        return verilog
    ports_end = body.index(");\n") + 3
    rest = re.sub(r"(?<![\w$\\.])rst(?![\w$])", SIM_RST, body[ports_end:])
    rest = rest.replace(decl.replace("rst", SIM_RST),
                        f"{decl}  reg {SIM_RST} = 1'h1;\n  always @(negedge clk) {SIM_RST} <= rst;\n", 1)
    return verilog[:m.start()] + body[:ports_end] + rest + verilog[m.end():]


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
        return _run_binary(self, traffic, workdir, tag, write_traffic, read_log, ("traffic", "log.bin"))


def _run_binary(sim, traffic, workdir, tag, write, read, exts):
    """Write ``traffic`` with ``write``, run ``sim.binary`` on it, read its log with ``read`` and remove both
    files (the credit and the 2-VC harness differ only in their file formats)."""
    workdir = Path(workdir or sim.binary.parent / "runs")
    workdir.mkdir(parents=True, exist_ok=True)
    tpath = write(traffic, workdir / f"{tag}-{os.getpid()}.{exts[0]}")
    lpath = workdir / f"{tag}-{os.getpid()}.{exts[1]}"
    proc = subprocess.run([str(sim.binary), str(tpath), str(lpath)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise FastsimRunError(f"{sim.binary.name} ({sim.module} {sim.params}) exited with "
                              f"{proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
    log = read(lpath)
    tpath.unlink()
    lpath.unlink()
    return log


def _compile(module: str, params: dict, vpath: Path, main: str, build_root: Path,
             flags: list[str] = VERILATOR_FLAGS, latch_reset: bool = False,
             keep_apart: bool = False) -> tuple[Path, float]:
    """Compile (or reuse) the Verilator binary of ``vpath`` + ``main``; (binary, build seconds or 0).
    ``latch_reset`` compiles the Verilog with :func:`registered_reset` applied; ``keep_apart`` adds
    :func:`keep_apart_config`."""
    from verif.harness.runner import verilator_env

    verilog = vpath.read_text()
    if latch_reset:
        verilog = registered_reset(verilog, module)
    config = keep_apart_config(verilog, module) if keep_apart else ""
    digest = hashlib.sha256(verilog.encode() + main.encode() + " ".join(flags).encode() +
                            config.encode()).hexdigest()[:16]
    bdir = (build_root / "fastsim" / f"{vpath.stem}-{digest}").resolve()
    binary = bdir / "sim"
    marker = bdir / ".built"
    t0 = time.perf_counter()
    built = False
    with file_lock(build_root / "locks" / f"fastsim-{bdir.name}.lock"):
        if not (marker.exists() and binary.exists()):
            bdir.mkdir(parents=True, exist_ok=True)
            (bdir / "main.cpp").write_text(main)
            source = vpath.resolve()
            if latch_reset:             # the rewritten copy; otherwise the generated file itself
                source = bdir / "dut.v"
                source.write_text(verilog)
            log = bdir / "build.log"
            env = dict(os.environ, **verilator_env())
            extra = []
            if config:
                (bdir / "keep_apart.vlt").write_text(config)
                extra = [str(bdir / "keep_apart.vlt")]
            cmd = ["verilator", *flags, "-j", "2", "--top-module", module, "-Mdir", str(bdir / "obj"),
                   "-o", str(binary), *extra, str(source), str(bdir / "main.cpp")]
            with open(log, "w") as f:
                f.write(" ".join(cmd) + "\n")
                f.flush()
                proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=bdir)
            if proc.returncode != 0 or not binary.exists():
                raise FastsimBuildError(f"Verilator build of the fast path for {module} {params or {}} failed "
                                        f"(exit {proc.returncode}); see {log}")
            marker.write_text(digest)
            built = True
    return binary, time.perf_counter() - t0 if built else 0.0


def build(module: str, params: dict | None = None, *, build_root: str | os.PathLike = "build",
          emission: str = "auto", latch_reset: bool = False) -> FastSim:
    """Build (or reuse) the fast-path binary of registered credit-link ``module`` at ``params``, from its
    ``emission`` Verilog (:data:`hw.registry.EMISSIONS`)."""
    from verif.harness.runner import require_simulator

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
    vpath = locked_verilog(module, params, build_root, emission=emission)
    verilog = vpath.read_text()
    main = render_main(module, top_ports(verilog, module), n, flit_width, full["credits"],
                       full.get("out_credits") or full["credits"])
    binary, build_s = _compile(module, params, vpath, main, build_root, latch_reset=latch_reset)
    return FastSim(module, full, binary, n, flit_words(flit_width), build_s)


# ---------------------------------------------------------------------------------------------------------
# Two-VC links (vc_main.cpp)

def _assign_from_words(dst: str, width: int) -> str:
    """C++ statement setting Verilator member ``dst`` (``width`` bits) from ``const uint32_t* w``."""
    if width > 64:
        return f"    std::memcpy(t->{dst}.data(), w, sizeof(t->{dst}));"
    if width > 32:
        return f"    t->{dst} = QData(w[0]) | (QData(w[1]) << 32);"
    return f"    t->{dst} = w[0];"


def _read_to_words(src: str, width: int, word: int = 0) -> str:
    """C++ statement copying Verilator member ``src`` (``width`` bits) to ``out[word...]``."""
    if width > 64:
        return f"    std::memcpy(out + {word}, t->{src}.data(), sizeof(t->{src}));"
    if width > 32:
        return (f"    out[{word}] = uint32_t(t->{src}); "
                f"out[{word + 1}] = uint32_t(uint64_t(t->{src}) >> 32);")
    return f"    out[{word}] = uint32_t(t->{src});"


def status_members(ports: dict, status_ports=None) -> tuple[list, int]:
    """([(Verilog port, bit offset, width)], total bits) of the status vector the harness samples: the
    design's ``status_ports`` list (one port per member, e.g. :func:`hw.switch.dysharp_switch.status_ports`),
    else a single ``status`` output, else none."""
    if status_ports is not None:
        members = [(name, off, width) for name, off, width in status_ports]
        for name, off, width in members:
            if ports.get(name, ("", 0))[0] != "output" or ports[name][1] != width:
                raise FastsimBuildError(f"status member {name} ({width} bits) is not an output of the design")
            if off % 32:
                raise FastsimBuildError(f"status member {name} is at bit {off}, not 32-bit aligned")
        return members, max((off + width for _, off, width in members), default=0)
    if ports.get("status", ("", 0))[0] == "output":
        return [("status", 0, ports["status"][1])], ports["status"][1]
    return [], 0


def header_field_decls() -> str:
    """``static constexpr Field F_<NAME>`` lines for the C++ harness, from :mod:`hw.packet`'s layouts."""
    from hw import packet

    lines = [f"static constexpr Field F_{n.upper()}{{{o}, {w}}};" for n, (o, w) in packet._COMMON.items()]
    for variant, fields in packet._VARIANT.items():
        lines += [f"static constexpr Field F_{variant.upper()}_{n.upper()}{{{o}, {w}}};" for n, (o, w) in fields.items()]
    return "\n".join(lines)


def render_vc_main(top: str, ports: dict, n: int, flit_width: int, link_credits: int, gpu_credits: int,
                   rows: int = 1 << 18, status_ports=None) -> str:
    """The C++ main of the two-VC harness (``vc_main.cpp``) for ``top``'s ports."""
    from hw.packet import ErrorCode, Opcode

    if flit_width != 128:
        raise FastsimBuildError(f"the two-VC harness models 128-bit flits only, {top} has {flit_width}")
    for op, v in (("READ", 1), ("READ_RESP", 2), ("RED_READ", 7), ("RED_READ_RESP", 8), ("TLB_FILL", 10),
                  ("TLB_FILL_RESP", 11)):
        assert Opcode[op].value == v, f"vc_main.cpp hard-codes opcode {op} = {v}"
    for code, v in (("ISOLATION", 9), ("OUT_OF_BOUNDS", 10), ("BUFFER_FULL", 11), ("TLB_FAULT", 15)):
        assert ErrorCode[code].value == v, f"vc_main.cpp hard-codes error code {code} = {v}"
    words = flit_words(flit_width)
    flags = flag_bits(flit_width)
    need = {f"{side}__{i}__{sig}" for side in ("rx", "tx") for i in range(n) for sig in ("valid", "vc", "flit", "credit")}
    missing = sorted(need - ports.keys())
    if missing:
        raise FastsimBuildError(f"{top} lacks the VC-link ports {missing[:4]}: the two-VC fast path needs "
                                f"rx__<i>__valid/vc/flit/credit and tx__<i>__valid/vc/flit/credit for 0..{n - 1}")
    for name in ("rx__0__flit", "tx__0__flit"):
        if -(-ports[name][1] // 32) != words:
            raise FastsimBuildError(f"{top}.{name} is {ports[name][1]} bits, the flit layout needs {words} words")
    for name in ("rx__0__credit", "tx__0__credit"):
        if ports[name][1] != 4:
            raise FastsimBuildError(f"{top}.{name} is {ports[name][1]} bits; the harness expects 2 bits per VC")
    bind = []
    for i in range(n):
        for side in ("rx", "tx"):
            for sig in ("valid", "vc", "credit"):
                bind.append(f"    p.{side}_{sig}[{i}] = &t->{cxx_name(f'{side}__{i}__{sig}')};")
            bind.append(f"    p.{side}_flit[{i}] = t->{cxx_name(f'{side}__{i}__flit')}.data();")
    cfg_words = 0
    drive = ["    (void)t; (void)w; (void)valid;"]
    if "cfg__payload" in ports and "cfg__valid" in ports:
        width = ports["cfg__payload"][1]
        cfg_words = -(-width // 32)
        drive = [f"    t->cfg___05Fvalid = valid;", "    if (!w) return;", _assign_from_words("cfg___05Fpayload", width)]
    members, status_bits = status_members(ports, status_ports)
    status_words = -(-status_bits // 32)
    read = ["    (void)t; (void)out;"]
    if members:
        read = [_read_to_words(cxx_name(name), width, off // 32) for name, off, width in members]
    zero = []
    for name, (d, width) in sorted(ports.items()):
        if d != "input" or name in ("clk", "rst") or name in need:
            continue
        if width > 64:
            zero.append(f"    std::memset(top->{cxx_name(name)}.data(), 0, sizeof(top->{cxx_name(name)}));")
        else:
            zero.append(f"    top->{cxx_name(name)} = 0;")
    text = resources.files(__package__).joinpath("vc_main.cpp").read_text()
    fields = {"TOP": top, "PORTS": n, "FLIT_WORDS": words, "LAST_WORD": flags["last"][0],
              "LAST_BIT": flags["last"][1], "POISON_WORD": flags["poison"][0], "POISON_BIT": flags["poison"][1],
              "LINK_CREDITS": link_credits, "GPU_CREDITS": gpu_credits, "CFG_WORDS": cfg_words,
              "STATUS_WORDS": status_words, "ROWS": rows, "FIELDS": header_field_decls(),
              "BIND": "\n".join(bind), "DRIVE_CFG": "\n".join(drive), "READ_STATUS": "\n".join(read),
              "ZERO_INPUTS": "\n".join(zero)}
    for k, v in fields.items():
        text = text.replace(f"@@{k}@@", str(v))
    if "@@" in text:
        raise FastsimBuildError(f"unfilled template field in vc_main.cpp: {re.findall('@@[A-Z_]+@@', text)}")
    return text


class VcFastSim:
    """A compiled two-VC harness: ``run(traffic)`` simulates a :class:`VcTraffic` and returns the :class:`VcLog`."""

    def __init__(self, module: str, params: dict, binary: Path, ports: int, words: int, build_s: float,
                 cfg_words: int, status_words: int):
        self.module = module
        self.params = params
        self.binary = binary
        self.ports = ports
        self.words = words
        self.build_s = build_s
        self.cfg_words = cfg_words
        self.status_words = status_words

    def run(self, traffic: VcTraffic, workdir: str | os.PathLike | None = None, tag: str = "run") -> VcLog:
        if traffic.ports != self.ports or traffic.words != self.words:
            raise ValueError(f"traffic for {traffic.ports} ports x {traffic.words} words does not fit "
                             f"{self.module} ({self.ports} ports x {self.words} words)")
        if traffic.cfg is not None and len(traffic.cfg) and traffic.cfg.shape[1] != self.cfg_words:
            raise ValueError(f"traffic's cfg words are {traffic.cfg.shape[1]} wide, {self.module}'s cfg payload "
                             f"takes {self.cfg_words}")
        return _run_binary(self, traffic, workdir, tag, write_vc_traffic, read_vc_log, ("vtraffic", "vlog.bin"))


def build_vc(module: str, params: dict | None = None, *, build_root: str | os.PathLike = "build",
             verilog: str | os.PathLike | None = None, link_credits: int | None = None,
             gpu_credits: int | None = None, emission: str = "auto",
             latch_reset: bool = True) -> VcFastSim:
    """Build (or reuse) the two-VC fast-path binary of registered ``module`` at ``params`` (its
    ``link_credits``/``gpu_credits`` parameters are the GPU sender's and receiver's credits per VC), from
    its ``emission`` Verilog (:data:`hw.registry.EMISSIONS`).

    ``verilog`` (a file whose top module is named ``module``, with ``ports``, ``link_credits`` and
    ``gpu_credits`` given) builds an unregistered design instead: the harness's own tests use it.
    ``latch_reset=False`` compiles the Verilog as generated instead of with :func:`registered_reset`."""
    from verif.harness.runner import require_simulator

    require_simulator("verilator")
    build_root = Path(build_root)
    if verilog is None:
        spec = registry.get(module)
        full = spec.resolve(params)
        for key in ("ports", "link_credits", "gpu_credits"):
            if key not in full:
                raise ValueError(f"module {module!r} has no {key!r} parameter: the two-VC fast path drives "
                                 f"components with rx/tx VC-link arrays")
        vpath = locked_verilog(module, params, build_root, emission=emission)
        link_credits, gpu_credits = full["link_credits"], full["gpu_credits"]
    else:
        full = dict(params or {})
        if "ports" not in full or link_credits is None or gpu_credits is None:
            raise ValueError("build_vc with verilog= needs params['ports'], link_credits and gpu_credits")
        vpath = Path(verilog)
    n = full["ports"]
    flit_width = full.get("flit_width", 128)
    ports = top_ports(vpath.read_text(), module)
    sp = None
    if verilog is None:
        # A design whose status is one port per member names them (hw.switch.dysharp_switch.status_ports).
        mod = importlib.import_module(spec.component_class().__module__)
        if hasattr(mod, "status_ports") and "status" not in ports:
            sp = mod.status_ports(n)
    main = render_vc_main(module, ports, n, flit_width, link_credits, gpu_credits, status_ports=sp)
    binary, build_s = _compile(module, params, vpath, main, build_root, latch_reset=latch_reset,
                               keep_apart=True)
    cfg_words = -(-ports["cfg__payload"][1] // 32) if "cfg__payload" in ports else 0
    status_words = -(-status_members(ports, sp)[1] // 32)
    return VcFastSim(module, full, binary, n, flit_words(flit_width), build_s, cfg_words, status_words)
