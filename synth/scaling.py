"""From Nangate45 figures to the NVSwitch's node, and the DySHARP addition as a share of an NVSwitch.

Factors (all stated in the report)
----------------------------------
* **45 nm -> 7 nm, logic.** Stillmaker & Baas, "Scaling equations for the accurate prediction of CMOS
  device performance from 180 nm to 7 nm", Integration 58 (2017) 74-81: area x 0.059 (Table 3). Energy
  from the paper's Table 5 energy fits ``E(V) = b2 V^2 + b1 V + b0``, HP 45 nm ``[1.018, -0.3107, 0.1539]``
  at 1.0 V = 0.8612 and HP 7 nm ``[0.1776, -0.09097, 0.02447]`` at 0.7 V = 0.04782: energy x 0.0555, at the
  same nominal voltages as the delay factor below (at Nangate45's 1.1 V characterization corner the 45 nm
  fit gives 1.044, i.e. x 0.0458: the nominal-voltage figure is the conservative one).
* **45 nm -> 7 nm, SRAM arrays.** Bit-cell area ratio: 0.027 um^2 (TSMC N7 high-density cell, Wu et al.,
  IEDM 2016) over 0.346 um^2 (Intel 45 nm, Mistry et al., IEDM 2007) = x 0.078. Energy as logic (x 0.0555).
* **N7 -> N5 (TSMC 4N is an N5-family node).** Logic density x 1.84, SRAM density x 1.3 (TSMC's N5
  announcements; the N5 bit cell is 0.021 um^2, Yeap et al., IEDM 2019: 0.027/0.021 = 1.29). No energy
  step is applied (conservative: the addition's power is overstated, not understated).
* **NVSwitch (Hopper, third generation).** 25.1 billion transistors on TSMC 4N, 64 NVLink4 ports
  (NVIDIA, Hopper architecture whitepaper / GTC 2022). Its die area is not public from a primary
  source; we estimate it from the density of H100 on the same process (80 billion transistors on
  814 mm^2, NVIDIA H100 whitepaper): 25.1e9 / (80e9 / 814 mm^2) = 255 mm^2. The addition is reported
  both against that estimated area and against the transistor count (node-independent: our count is
  the library-free CMOS count of the logic plus 6 transistors per SRAM bit).
* **Delay, 45 nm -> 7 nm.** Stillmaker & Baas (as above), Table 5: delay factor
  ``D(V) = a3 V^3 + a2 V^2 + a1 V + a0``, HP 45 nm (PTM) ``[-501.6, 1567, -1619, 566.1]`` at its nominal
  1.0 V = 12.50, HP 7 nm (ITRS-based) ``[-28.58, 76.6, -70.26, 24.69]`` at its nominal 0.7 V = 3.239:
  delay x 0.2591 (3.86x faster). The fit is evaluated at the models' nominal voltages, not at Nangate45's
  1.1 V characterization corner (the 45 nm cubic rises again above 1.0 V: 13.64 at 1.1 V).
* **Delay, N7 -> N5.** TSMC's N5 announcement: "15% faster at the same power" than N7 -> delay x 1/1.15.
  Total 45 nm -> N5: x 0.2253. Both are process figures for gate delay; wire delay scales worse, so the
  scaled paths are optimistic for wire-dominated paths (the crossbar).
* **GPU side.** The token tracker (and request generator / receive path) sit in each GPU; they are
  reported per GPU against an H100 (80 billion transistors, 814 mm^2).
"""

__all__ = ["LOGIC_AREA", "SRAM_AREA", "ENERGY", "NVSWITCH", "H100", "to_n5", "ROLES", "resolve_roles",
           "architecture_point", "DELAY_45_TO_7", "DELAY_N7_TO_N5", "DELAY", "PORT_CLOCK_GHZ", "PORT_PERIOD_PS",
           "delay_to_n5", "STILLMAKER_DELAY", "STILLMAKER_ENERGY", "DELAY_SOURCE"]

LOGIC_AREA = 0.059 / 1.84         # 45 nm -> 7 nm (Stillmaker & Baas) -> N5 (logic density 1.84x)
SRAM_AREA = (0.027 / 0.346) / 1.3  # 45 nm -> 7 nm bit cell -> N5 (SRAM density 1.3x)
# Stillmaker & Baas, Integration 58 (2017), Table 5, energy columns: (coefficients b2..b0, nominal Vdd).
STILLMAKER_ENERGY = {"HP45": ((1.018, -0.3107, 0.1539), 1.0), "HP7": ((0.1776, -0.09097, 0.02447), 0.7)}


def _stillmaker_energy(coeffs, vdd: float) -> float:
    """Stillmaker & Baas's relative energy ``b2 V^2 + b1 V + b0`` (Table 5 coefficients)."""
    b2, b1, b0 = coeffs
    return b2 * vdd ** 2 + b1 * vdd + b0


# 45 nm -> 7 nm at the nodes' nominal voltages (0.0555); no N7 -> N5 step
ENERGY = _stillmaker_energy(*STILLMAKER_ENERGY["HP7"]) / _stillmaker_energy(*STILLMAKER_ENERGY["HP45"])
NVSWITCH = {"transistors": 25.1e9, "ports": 64, "area_mm2": 25.1e9 / (80e9 / 814.0),
            "source": "25.1 B transistors (NVIDIA Hopper whitepaper); area estimated at H100's 4N "
                      "density (80 B transistors / 814 mm^2)"}
H100 = {"transistors": 80e9, "area_mm2": 814.0, "source": "NVIDIA H100 whitepaper"}


def _stillmaker_delay(coeffs, vdd: float) -> float:
    """Stillmaker & Baas's relative delay ``a3 V^3 + a2 V^2 + a1 V + a0`` (Table 5 coefficients)."""
    a3, a2, a1, a0 = coeffs
    return a3 * vdd ** 3 + a2 * vdd ** 2 + a1 * vdd + a0


# Stillmaker & Baas, Integration 58 (2017), Table 5, delay columns: (coefficients a3..a0, nominal Vdd).
STILLMAKER_DELAY = {"HP45": ((-501.6, 1567, -1619, 566.1), 1.0), "HP7": ((-28.58, 76.6, -70.26, 24.69), 0.7)}
DELAY_45_TO_7 = _stillmaker_delay(*STILLMAKER_DELAY["HP7"]) / _stillmaker_delay(*STILLMAKER_DELAY["HP45"])  # 0.2591
DELAY_N7_TO_N5 = 1 / 1.15         # TSMC N5: "15% faster at the same power" than N7
DELAY = DELAY_45_TO_7 * DELAY_N7_TO_N5   # 45 nm -> N5: 0.2253
PORT_CLOCK_GHZ = 1.5625           # one NVLink4 port's flit clock (16 B per cycle)
PORT_PERIOD_PS = 1000 / PORT_CLOCK_GHZ   # 640 ps
DELAY_SOURCE = (f"45->7 nm x{DELAY_45_TO_7:.4f} (Stillmaker & Baas 2017, Table 5 delay fits: HP 7 nm at 0.7 V "
                f"over HP 45 nm at 1.0 V), N7->N5 x1/1.15 (TSMC N5: 15% faster at the same power): "
                f"x{DELAY:.4f}")


def delay_to_n5(ps: float) -> float:
    """A Nangate45 (45 nm) path delay in ps -> the same path at N5, in ps (x :data:`DELAY`)."""
    return ps * DELAY


def to_n5(logic_um2: float, sram_um2: float, power_mw: float) -> dict:
    """Nangate45 logic/SRAM area (um^2) and power (mW) -> N5-class area (mm^2) and power (mW)."""
    return {"area_mm2": (logic_um2 * LOGIC_AREA + sram_um2 * SRAM_AREA) / 1e6,
            "logic_mm2": logic_um2 * LOGIC_AREA / 1e6, "sram_mm2": sram_um2 * SRAM_AREA / 1e6,
            "power_mw": power_mw * ENERGY}


# The DySHARP addition, by role. Each role lists alternatives (module-name lists); the first alternative
# whose modules are all registered is used. ``per`` says how many instances a 64-port switch has
# ("port": one per port; "gpu": one per GPU, reported per GPU). ``points`` gives the parameter point of
# each module: the size the architecture needs, justified in ``why`` (the figures are the measured ones of
# docs/al_tlb.md and docs/reduction.md). ``off_chip`` names arrays that stand in for memory that is not on
# the chip (left out of the addition). Composite modules are never listed beside their parts:
# ld_reduce_unit = reduction_engine + linear_translator (a stand-in for the AL-TLB, which has its own
# role); reduction_engine contains reduction_buffer, which contains reduce_alu; gpu_nic = request_gen +
# receive_path + token_tracker.
ROLES = [
    {"role": "AL-TLB (address-lookup CAM)", "side": "switch", "per": "port",
     "alternatives": [["al_tlb"]],
     "points": {"al_tlb": {"ports": 64, "entries": 1024}},
     "why": "one per egress port (docs/al_tlb.md). 1024 CAM entries: DeepSeek-V3 tile-order dispatch "
            "reuses a (token, destination) key after about (G-1) x 128 x D/G other keys (590 at G=8, 900 "
            "at G=32, 970 at G=64), so the measured hit rate is 0.000 at 64-256 entries, 0.014 at 512 and "
            "0.965 (the compulsory limit 28/29) at 1024, for G=8 and G=32. 64 ports: 6-bit dst in the key "
            "(28-bit key, 48-bit value), 64-bit group masks."},
    {"role": "reduction engine + buffer", "side": "switch", "per": "port",
     "alternatives": [["reduction_engine"], ["reduction_buffer", "reduce_alu"]],
     "points": {"reduction_engine": {"ports": 64, "entries": 64},
                "reduction_buffer": {"entries": 64}, "reduce_alu": {}},
     "why": "one per port (the ld_reduce requester's port). Little's law, entries = throughput x request "
            "latency, with the measured figures of docs/reduction.md (one contribution flit per cycle, "
            "request latency = read latency + 24 cycles): the bench's short requests (4 destinations x 2 "
            "flits, 1/12 request per cycle) need 68.7 entries at an 800-cycle read latency, and 64 entries "
            "measured 0.0775 of 0.0833 requests per cycle (93%); DeepSeek-V3 combine requests (16-flit "
            "BF16 chunks of a 14336-B row, D = 7.68 destinations at 64 GPUs: 1/131 request per cycle) "
            "need (1000 + 24 + 131) / 131 = 8.8 entries at the AL-TLB's assumed 1000-cycle NVLink + HBM "
            "round trip. 64 entries (16 payload rows each, 263-bit fp32 partial rows: 33.7 KB) cover "
            "both; max_length 16."},
    {"role": "multicast logic + extra header handling", "side": "switch", "per": "port",
     "alternatives": [["egress_translator"]],
     "points": {"egress_translator": {"ports": 64}},
     "why": "one per egress port: the rewrite of a dymultimem.st into a WRITE at the destination's row "
            "address + offset x 16 (and of a DYN_RED_READ into a RED_READ), with 8 packet slots of 17 flits "
            "so that other sources' hits flow under a miss while each source's order holds "
            "(hw/switch/egress_translator.py). The multicast itself rides the switch's existing mask queue "
            "(Hopper's NVLS path). The second message class (the integrated switch's response network and "
            "VC link ends) is not in this table: synth_reports/integrated_summary.csv states the integrated "
            "switch minus the plain one at 8 ports."},
    {"role": "token tracker (tile status table)", "side": "gpu", "per": "gpu",
     "alternatives": [["token_tracker"]],
     "points": {"token_tracker": {"experts": 32, "tiles": 16}},
     "why": "32 local experts x 16 tiles of 128 tokens (the default): DeepSeek-V3 on 8 GPUs hosts 32 "
            "experts per GPU and receives 4096 x 8 x 8 / 256 = 1024 tokens per expert from a 4096-token "
            "batch per GPU (8 tiles): 2x headroom for routing skew."},
    {"role": "request generator", "side": "gpu", "per": "gpu",
     "alternatives": [["request_gen"]],
     "points": {"request_gen": {"ports": 64}},
     "why": "64-bit destination masks for a 64-GPU domain; other parameters default."},
    {"role": "receive path", "side": "gpu", "per": "gpu",
     "alternatives": [["receive_path"]],
     "points": {"receive_path": {}},
     "why": "defaults: slots per expert equal the tracker's 16 x 128 tokens."},
    {"role": "memory manager (receive layout)", "side": "gpu", "per": "gpu",
     "alternatives": [["memory_manager"]],
     "points": {"memory_manager": {}},
     "off_chip": ["table"],
     "why": "defaults; its backing table lives in the GPU's HBM (docs/al_tlb.md), so the RTL's stand-in "
            "table array is left out: the on-chip part is the group bindings and the logic."},
]


def resolve_roles(registered: list[str]) -> list[dict]:
    """Each role with the registered modules that fill it (or ``modules=[]`` = not registered)."""
    out = []
    for r in ROLES:
        chosen = next((alt for alt in r["alternatives"] if all(m in registered for m in alt)), [])
        out.append({**r, "modules": chosen})
    return out


def architecture_point(module: str) -> dict | None:
    """The parameter point at which ``module`` is counted in the DySHARP addition (None: not counted)."""
    for r in ROLES:
        if module in r.get("points", {}) and any(module in alt for alt in r["alternatives"]):
            return dict(r["points"][module])
    return None
