"""From Nangate45 figures to the NVSwitch's node, and the DySHARP addition as a share of an NVSwitch.

Factors (all stated in the report)
----------------------------------
* **45 nm -> 7 nm, logic.** Stillmaker & Baas, "Scaling equations for the accurate prediction of CMOS
  device performance from 180 nm to 7 nm", Integration 58 (2017) 74-81: area x 0.059, energy x 0.094.
* **45 nm -> 7 nm, SRAM arrays.** Bit-cell area ratio: 0.027 um^2 (TSMC N7 high-density cell, Wu et al.,
  IEDM 2016) over 0.346 um^2 (Intel 45 nm, Mistry et al., IEDM 2007) = x 0.078. Energy as logic (0.094).
* **N7 -> N5 (TSMC 4N is an N5-family node).** Logic density x 1.84, SRAM density x 1.3 (TSMC's N5
  announcements; the N5 bit cell is 0.021 um^2, Yeap et al., IEDM 2019: 0.027/0.021 = 1.29). No energy
  step is applied (conservative: the addition's power is overstated, not understated).
* **NVSwitch (Hopper, third generation).** 25.1 billion transistors on TSMC 4N, 64 NVLink4 ports
  (NVIDIA, Hopper architecture whitepaper / GTC 2022). Its die area is not public from a primary
  source; we estimate it from the density of H100 on the same process (80 billion transistors on
  814 mm^2, NVIDIA H100 whitepaper): 25.1e9 / (80e9 / 814 mm^2) = 255 mm^2. The addition is reported
  both against that estimated area and against the transistor count (node-independent: our count is
  the library-free CMOS count of the logic plus 6 transistors per SRAM bit).
* **GPU side.** The token tracker (and request generator / receive path) sit in each GPU; they are
  reported per GPU against an H100 (80 billion transistors, 814 mm^2).
"""

__all__ = ["LOGIC_AREA", "SRAM_AREA", "ENERGY", "NVSWITCH", "H100", "to_n5", "ROLES"]

LOGIC_AREA = 0.059 / 1.84         # 45 nm -> 7 nm (Stillmaker & Baas) -> N5 (logic density 1.84x)
SRAM_AREA = (0.027 / 0.346) / 1.3  # 45 nm -> 7 nm bit cell -> N5 (SRAM density 1.3x)
ENERGY = 0.094                    # 45 nm -> 7 nm (Stillmaker & Baas); no N7 -> N5 step
NVSWITCH = {"transistors": 25.1e9, "ports": 64, "area_mm2": 25.1e9 / (80e9 / 814.0),
            "source": "25.1 B transistors (NVIDIA Hopper whitepaper); area estimated at H100's 4N "
                      "density (80 B transistors / 814 mm^2)"}
H100 = {"transistors": 80e9, "area_mm2": 814.0, "source": "NVIDIA H100 whitepaper"}


def to_n5(logic_um2: float, sram_um2: float, power_mw: float) -> dict:
    """Nangate45 logic/SRAM area (um^2) and power (mW) -> N5-class area (mm^2) and power (mW)."""
    return {"area_mm2": (logic_um2 * LOGIC_AREA + sram_um2 * SRAM_AREA) / 1e6,
            "logic_mm2": logic_um2 * LOGIC_AREA / 1e6, "sram_mm2": sram_um2 * SRAM_AREA / 1e6,
            "power_mw": power_mw * ENERGY}


# The DySHARP addition, by role. Each role lists alternatives (module-name lists); the first alternative
# whose modules are all registered is used. ``per`` says how many instances a 64-port switch has.
ROLES = [
    {"role": "AL-TLB (address-lookup CAM)", "side": "switch", "per": "port",
     "alternatives": [["al_tlb"], ["altlb"], ["tlb"], ["cam"]]},
    {"role": "reduction engine + buffer", "side": "switch", "per": "port",
     "alternatives": [["reduction_engine"], ["reduce_engine"], ["red_engine"],
                      ["reduction_alu", "reduction_buffer"], ["reduction"]]},
    {"role": "multicast logic + extra header handling", "side": "switch", "per": "port",
     "alternatives": [["multicast"], ["header_unit"], ["dyn_header"]],
     "absent": "no separate module: dymultimem masks ride the switch's existing multicast (mask-queue) "
               "path, which Hopper's NVSwitch already has for NVLS; counted as not registered"},
    {"role": "token tracker (tile status table)", "side": "gpu", "per": "gpu",
     "alternatives": [["token_tracker"], ["tracker"], ["tile_table"]]},
    {"role": "request generator", "side": "gpu", "per": "gpu",
     "alternatives": [["request_generator"], ["reqgen"], ["req_gen"]]},
    {"role": "receive path", "side": "gpu", "per": "gpu",
     "alternatives": [["receive_path"], ["recv_path"], ["rx_path"]]},
]


def resolve_roles(registered: list[str]) -> list[dict]:
    """Each role with the registered modules that fill it (or ``modules=[]`` = not registered)."""
    out = []
    for r in ROLES:
        chosen = next((alt for alt in r["alternatives"] if all(m in registered for m in alt)), [])
        out.append({**r, "modules": chosen})
    return out
