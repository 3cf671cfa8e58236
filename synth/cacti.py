"""CACTI 7 for memory arrays: a configuration per array geometry, the run, and the parse of its output.

An :class:`Array` says what to cost: ``rows`` x ``width`` bits, read/write/read-write ports, an SRAM
(``kind="ram"``), a CAM (``kind="cam"``, every bit searchable, with ``search_ports``) or a fully
associative array (``kind="fa"``: a ``tag_width``-bit CAM tag per row searched in parallel plus a
``width``-bit SRAM data row, CACTI's fully associative cache: a TLB's organisation), at a CACTI technology node
(22/32/45/65/90 nm). :func:`run` writes a configuration derived from CACTI's own ``cache.cfg`` (the
keys below replaced), runs the binary built by :mod:`synth.tools`, and returns a :class:`Result` with
the area (um^2), access time (ns), read/write/search energy per access (pJ) and leakage (mW). Results,
and CACTI's refusals, are cached (:mod:`infra.engine`, ``build/cache/synth``) by the content hash of the
configuration text; the configurations are kept under ``build/synth/cacti/``.

CACTI's geometry limits (found by running it): whole-byte rows and a capacity of at least 64 bytes;
smaller arrays get extra rows, and an array CACTI finds no organisation for is retried with its rows
rounded up to a power of two; what was modelled is recorded (``Result.rows_modelled``). A configuration CACTI still rejects raises :class:`CactiError` with
CACTI's own message and what to change.
"""

import dataclasses
import hashlib
import json
import math
import re
import subprocess
from pathlib import Path

from infra import engine
from infra.procs import run_bounded

from .tools import ToolError, cacti_binary

__all__ = ["Array", "Result", "CactiError", "run", "config_text", "parse_output", "VALID_NODES"]

VALID_NODES = (22, 32, 45, 65, 90)
MIN_BYTES = 64


class CactiError(ValueError):
    """CACTI rejected a configuration (the message includes CACTI's reason and a fix)."""


@dataclasses.dataclass(frozen=True)
class Array:
    rows: int
    width: int                     # bits per row
    read_ports: int = 1            # exclusive read ports
    write_ports: int = 1           # exclusive write ports
    rw_ports: int = 0              # read-write ports
    kind: str = "ram"              # "ram", "cam" or "fa" (fully associative: CAM tags + SRAM data)
    search_ports: int = 0          # CAM / fully associative search ports
    tag_width: int = 0             # fa: searched bits per row
    node_nm: int = 45
    cell: str = "itrs-hp"          # CACTI cell/peripheral type

    def validate(self):
        if self.kind not in ("ram", "cam", "fa"):
            raise CactiError(f"array kind must be 'ram', 'cam' or 'fa', got {self.kind!r}")
        if self.node_nm not in VALID_NODES:
            raise CactiError(f"CACTI models technology nodes {VALID_NODES} nm, got {self.node_nm}")
        if self.rows < 1 or self.width < 1:
            raise CactiError(f"array must have rows >= 1 and width >= 1 bit, got {self.rows} x {self.width}")
        if self.read_ports + self.rw_ports < 1 and self.kind == "ram":
            raise CactiError("a RAM needs at least one read or read-write port")
        if self.kind in ("cam", "fa") and self.search_ports < 1:
            raise CactiError("a CAM or fully associative array needs at least one search port")
        if self.kind == "fa" and self.tag_width < 1:
            raise CactiError("a fully associative array needs tag_width >= 1 (the searched bits per row)")


@dataclasses.dataclass
class Result:
    array: Array
    rows_modelled: int
    width_modelled: int
    area_um2: float
    access_ns: float
    cycle_ns: float
    read_pj: float
    write_pj: float
    search_pj: float
    leakage_mw: float
    config: str = ""

    def as_dict(self):
        d = dataclasses.asdict(self)
        d.pop("config")
        return d


def _legal_geometry(a: Array, pow2: bool = False) -> tuple[int, int]:
    """Rows and width CACTI accepts: whole-byte rows, capacity >= 64 bytes (rows added), and with
    ``pow2`` a power-of-two number of rows (the retry when CACTI finds no organisation otherwise)."""
    width = max(8, 8 * math.ceil(a.width / 8))
    rows = max(1, a.rows)
    if pow2:
        rows = 1 << (rows - 1).bit_length()
    rows = max(rows, -(-MIN_BYTES * 8 // width))
    return rows, width


_OVERRIDES = {
    "-size (bytes)": None, "-block size (bytes)": None, "-associativity": None, "-read-write port": None,
    "-exclusive read port": None, "-exclusive write port": None, "-single ended read ports": "0",
    "-search port": None, "-UCA bank count": "1", "-technology (u)": None,
    "-Data array cell type -": None, "-Data array peripheral type -": None,
    "-Tag array cell type -": None, "-Tag array peripheral type -": None,
    "-output/input bus width": None, "-cache type": None, "-tag size (b)": None,
    "-access mode (normal, sequential, fast) -": '"normal"', "-Cache model (NUCA, UCA)  -": '"UCA"',
    "-Add ECC -": '"false"', "-Print level (DETAILED, CONCISE) -": '"DETAILED"',
    "-Print input parameters -": '"false"', "-operating temperature (K)": "350",
    "-design objective (weight delay, dynamic power, leakage power, cycle time, area)": "0:0:0:0:100",
    "-deviate (delay, dynamic power, leakage power, cycle time, area)": "60:100000:100000:100000:100000",
    "-Optimize ED or ED^2 (ED, ED^2, NONE):": '"NONE"',
    "-Array Power Gating -": '"false"',
}


def config_text(a: Array, template: str, pow2: bool = False) -> tuple[str, int, int]:
    """The CACTI configuration for ``a`` (from CACTI's ``cache.cfg`` ``template``), rows and width used."""
    a.validate()
    rows, width = _legal_geometry(a, pow2)
    block = width // 8
    cell = f'"{a.cell}"'
    values = dict(_OVERRIDES)
    values.update({
        "-size (bytes)": str(rows * block), "-block size (bytes)": str(block),
        "-associativity": "0" if a.kind in ("cam", "fa") else "1",
        "-read-write port": str(a.rw_ports), "-exclusive read port": str(a.read_ports),
        "-exclusive write port": str(a.write_ports), "-search port": str(a.search_ports),
        "-technology (u)": f"{a.node_nm / 1000:.3f}",
        "-Data array cell type -": cell, "-Data array peripheral type -": cell,
        "-Tag array cell type -": cell, "-Tag array peripheral type -": cell,
        "-output/input bus width": str(width),
        "-cache type": {"cam": '"cam"', "fa": '"cache"'}.get(a.kind, '"ram"'),
        "-tag size (b)": {"cam": str(width), "fa": str(a.tag_width)}.get(a.kind, '"default"'),
    })
    out, seen = [], set()
    for line in template.splitlines():
        key = next((k for k in values if line.startswith(k)), None)
        if key is None:
            out.append(line)
        elif key not in seen:
            out.append(f"{key} {values[key]}")
            seen.add(key)
    for key in values:
        if key not in seen:
            out.append(f"{key} {values[key]}")
    return "\n".join(out) + "\n", rows, width


_FIELDS = {
    "access_ns": r"Access time \(ns\):\s*([-\d.eE+]+)",
    "cycle_ns": r"Cycle time \(ns\):\s*([-\d.eE+]+)",
    "read_nj": r"Total dynamic read energy per access \(nJ\):\s*([-\d.eE+]+)",
    "write_nj": r"Total dynamic write energy per access \(nJ\):\s*([-\d.eE+]+)",
    "search_nj": r"Total dynamic associative search energy per access \(nJ\):\s*([-\d.eE+]+)",
    "leak_mw": r"Total leakage power of a bank \(mW\):\s*([-\d.eE+]+)",
    "hw": r"Cache height x width \(mm\):\s*([-\d.eE+]+)\s*x\s*([-\d.eE+]+)",
}


def parse_output(text: str) -> dict:
    """The figures of one CACTI run (raises CactiError when the output has none)."""
    got = {}
    for key, pat in _FIELDS.items():
        m = re.search(pat, text)
        if m:
            got[key] = tuple(float(x) for x in m.groups()) if key == "hw" else float(m.group(1))
    if "hw" not in got or "access_ns" not in got:
        reason = next((ln.strip() for ln in text.splitlines()
                       if re.search(r"error|invalid|not|cannot|must", ln, re.I)), text.strip()[-300:])
        raise CactiError(f"CACTI produced no result: {reason or 'empty output'}")
    return got


def run(a: Array, cache_dir="build/synth/cacti") -> Result:
    """Cost array ``a`` with CACTI (cached); the exact row count first, then rounded up to a power of
    two if CACTI finds no organisation for the exact one."""
    try:
        return _run(a, cache_dir, pow2=False)
    except CactiError as first:
        if _legal_geometry(a, True) == _legal_geometry(a, False):
            raise
        try:
            return _run(a, cache_dir, pow2=True)
        except CactiError:
            raise first from None


def _run(a: Array, cache_dir, pow2: bool) -> Result:
    exe = cacti_binary()
    template = (exe.parent / "cache.cfg").read_text()
    cfg, rows, width = config_text(a, template, pow2)
    digest = hashlib.sha256(cfg.encode()).hexdigest()[:20]
    cfg_path = (Path(cache_dir) / f"{digest}.cfg").resolve()
    legacy = Path(cache_dir) / f"{digest}.json"      # the JSON cache of earlier versions, read once

    def compute():
        if legacy.is_file():
            try:
                return "ok", json.loads(legacy.read_text())
            except ValueError:
                pass
        try:
            return "ok", _invoke(exe, a, cfg, cfg_path, rows, width)
        except CactiError as e:         # CACTI's refusal is a result too: not re-run on every call
            return "error", str(e)

    status, d = engine.cached_call(engine.cache("synth"), engine.content_key("cacti", cfg), compute)
    if status == "error":
        raise CactiError(d)
    d = dict(d)
    d["array"] = Array(**d["array"])
    return Result(**d, config=cfg)


def _invoke(exe: Path, a: Array, cfg: str, cfg_path: Path, rows: int, width: int) -> dict:
    """Run CACTI on configuration ``cfg`` (written to ``cfg_path``): the result as a dict."""
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(cfg)
    try:
        r = run_bounded([str(exe), "-infile", str(cfg_path)], cwd=exe.parent, capture_output=True,
                        text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise CactiError(f"CACTI ran over 300 s on {a}; try fewer ports or a smaller array") from None
    except OSError as e:
        raise ToolError(f"cannot run CACTI ({exe}): {e}; rebuild it with `./run setup`") from None
    try:
        got = parse_output(r.stdout + r.stderr)
    except CactiError as e:
        raise CactiError(f"{e} (configuration {a}: {rows} rows x {width} bits modelled; CACTI accepts "
                         f"RAMs of >= {MIN_BYTES} bytes with power-of-two rows and a modest number of "
                         f"ports; config in {cfg_path})") from None
    h_mm, w_mm = got["hw"]
    res = Result(array=a, rows_modelled=rows, width_modelled=width, area_um2=h_mm * w_mm * 1e6,
                 access_ns=got["access_ns"], cycle_ns=got.get("cycle_ns", float("nan")),
                 read_pj=got.get("read_nj", 0.0) * 1e3, write_pj=got.get("write_nj", 0.0) * 1e3,
                 search_pj=got.get("search_nj", 0.0) * 1e3, leakage_mw=got.get("leak_mw", 0.0), config=cfg)
    if not res.area_um2 > 0:
        raise CactiError(f"CACTI reported a zero area for {a}; refusing it (config in {cfg_path})")
    d = res.as_dict()
    d["array"] = dataclasses.asdict(a)
    return d
