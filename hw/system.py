"""The system top: ``gpus`` GPU NICs (:class:`~hw.gpu_nic.nic.GpuNic`) on one DySHARP switch
(:class:`~hw.switch.dysharp_switch.DySharpSwitch`), GPU ``g`` on switch port ``g``.

Composition only: ``nic[g].tx -> switch.rx[g]`` and ``switch.tx[g] -> nic[g].rx`` (2-VC links). Every other
port of a NIC is a port of the system, as an array over GPUs (``desc[g]``, ``mem_wr[g]``, ``cmd[g]``, ...,
the GPU memories and the SMs stay outside: the testbench's), and the switch's ``cfg`` and ``status`` are the
system's ``switch_cfg`` and ``switch_status``. The credits on each link are matched: the NIC's uplink
holds the switch's ``link_credits`` per VC, the switch's downlink sender the NIC's ``rx_credits``.
``probe`` taps every link for the testbench's counters and utilization plots (``valid``, ``vc``, ``last``
and the opcode field of the flit, meaningful on a packet's head flit; element ``2g`` is GPU ``g``'s uplink,
``2g + 1`` its downlink): wires only, so a build with only the top-level ports public can count flits.

Configuration. Each NIC's static configuration (:data:`NIC_CFG`: ``gen_cfg``, ``rbase``, ``rx_cfg``,
``dyn_base``) is a port array of the top (``nic_cfg="ports"``), or, where those arrays would take the top
past :data:`MAX_TOP_INPUT_BITS` input bits (Amaranth's netlist numbers a design's top-level input bits in
16 bits; 72 GPUs of 256-bit flits need about 98,000), registers inside the top written through one
stream ``nic_cfg`` of :func:`nic_cfg_layout` (``nic_cfg="stream"``, a CSR bus: one register of one GPU per
transfer, always ready, zero after reset). ``nic_cfg="auto"`` (the default) takes the ports when they fit.
Latency and throughput are the blocks'; the top adds no logic. Deadlock freedom is the switch's argument
(``hw/switch/dysharp_switch.py``) with the NIC's response receive consuming unconditionally
(``hw/gpu_nic/nic.py``).
"""

from amaranth.hdl import Module, Shape, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from .gpu_nic.nic import GpuNic
from .packet import DEFAULT_FLIT_WIDTH, MAX_SWITCH_PORTS, Opcode, header_format
from .switch.dysharp_switch import DySharpSwitch

__all__ = ["System", "LinkProbe", "NIC_CFG", "MAX_TOP_INPUT_BITS", "nic_cfg_layout"]

#: The NIC's configuration ports that the ``nic_cfg`` stream writes, in register-number order.
NIC_CFG = ("gen_cfg", "rbase", "rx_cfg", "dyn_base")
#: The most top-level input bits a design may have (Amaranth 0.5's netlist: a 16-bit bit index).
MAX_TOP_INPUT_BITS = 1 << 16


class LinkProbe(data.Struct):
    """One link as the probe shows it each cycle; ``opcode`` is the flit's opcode field (a head flit's)."""
    valid: 1
    vc: 1
    last: 1
    opcode: Opcode

_LINKS = ("tx", "rx")


def _width(member) -> int:
    return Shape.cast(member.shape).width if not member.is_signature else 0


def _input_bits(members) -> int:
    """Input bits of a component with signature ``members`` (a member's ``signature`` is already seen
    from the component: an ``In`` one comes flipped)."""
    n = 0
    for m in members.values():
        k = 1
        for d in m.dimensions:
            k *= d
        if m.is_signature:
            n += k * _input_bits(m.signature.members)
        elif m.flow == In:
            n += k * Shape.cast(m.shape).width
    return n


def nic_cfg_layout(gpus: int, data_bits: int) -> data.StructLayout:
    """One write of the ``nic_cfg`` stream: ``gpu``, ``reg`` (index into :data:`NIC_CFG`) and ``data`` (the
    register's value in its low bits; ``data_bits``: the widest register's), for ``gpus`` GPUs."""
    return data.StructLayout({"gpu": max(1, (gpus - 1).bit_length()), "reg": (len(NIC_CFG) - 1).bit_length(),
                              "data": data_bits})


class System(wiring.Component):
    """Parameters: ``gpus`` (4..128; past 64 the wide header format, :func:`hw.packet.header_format`, which
    needs ``flit_width`` 256 or 512), ``flit_width``, ``max_payload``, ``link_credits`` (per VC, GPU to
    switch), ``gpu_credits`` (per VC, switch to GPU), ``nic`` (dict of further :class:`GpuNic` parameters),
    ``switch`` (dict of further :class:`DySharpSwitch` parameters), ``nic_cfg`` (``"auto"``, ``"ports"`` or
    ``"stream"``: how the NICs' configuration is written, see the module docstring)."""

    def __init__(self, *, gpus: int = 8, flit_width: int = DEFAULT_FLIT_WIDTH, max_payload: int = 16,
                 link_credits: int = 8, gpu_credits: int = 32, nic: dict | None = None,
                 switch: dict | None = None, nic_cfg: str = "auto"):
        if not isinstance(gpus, int) or isinstance(gpus, bool) or not 4 <= gpus <= MAX_SWITCH_PORTS:
            raise ValueError(f"gpus must be an integer in 4..{MAX_SWITCH_PORTS} (one switch port each), got {gpus!r}")
        self.fmt = header_format(gpus, flit_width)
        for name, extra in (("nic", nic), ("switch", switch)):
            if extra is not None and not isinstance(extra, dict):
                raise ValueError(f"{name} must be a dict of parameters, got {extra!r}")
        self.gpus = gpus
        self.switch = DySharpSwitch(ports=gpus, flit_width=flit_width, max_payload=max_payload,
                                    link_credits=link_credits, gpu_credits=gpu_credits, **(switch or {}))
        self.nics = [GpuNic(ports=gpus, flit_width=flit_width, max_payload=max_payload, credits=link_credits,
                            rx_credits=gpu_credits, **(nic or {})) for _ in range(gpus)]
        if nic_cfg not in ("auto", "ports", "stream"):
            raise ValueError(f"nic_cfg must be one of auto, ports, stream, got {nic_cfg!r}")
        nm = self.nics[0].signature.members
        members = {name: m.array(gpus) for name, m in nm.items() if name not in _LINKS}
        members["switch_cfg"] = self.switch.signature.members["cfg"]
        members["switch_status"] = self.switch.signature.members["status"]
        members["probe"] = Out(data.ArrayLayout(LinkProbe, 2 * gpus))
        inputs = _input_bits(members)
        if nic_cfg == "auto":
            nic_cfg = "ports" if inputs < MAX_TOP_INPUT_BITS else "stream"
        self.nic_cfg_mode = nic_cfg
        if nic_cfg == "stream":
            for name in NIC_CFG:
                del members[name]
            members["nic_cfg"] = In(stream.Signature(nic_cfg_layout(gpus, max(_width(nm[n]) for n in NIC_CFG))))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.switch = sw = self.switch
        connect(m, flipped(self.switch_cfg), sw.cfg)
        connect(m, sw.status, flipped(self.switch_status))
        for g, nic in enumerate(self.nics):
            m.submodules[f"gpu{g}"] = nic
            connect(m, nic.tx, sw.rx[g])
            connect(m, sw.tx[g], nic.rx)
            for probe, link in ((self.probe[2 * g], nic.tx), (self.probe[2 * g + 1], sw.tx[g])):
                m.d.comb += [probe.valid.eq(link.valid), probe.vc.eq(link.vc), probe.last.eq(link.flit.last),
                             probe.opcode.eq(data.View(self.fmt.layout, link.flit.data[:self.fmt.bits]).opcode)]
            for name, member in nic.signature.members.items():
                if name in _LINKS:
                    continue
                if self.nic_cfg_mode == "stream" and name in NIC_CFG:
                    self._cfg_register(m, g, name, getattr(nic, name))
                    continue
                if member.is_signature:
                    connect(m, flipped(getattr(self, name)[g]), getattr(nic, name))
                elif member.flow == In:
                    m.d.comb += getattr(nic, name).eq(getattr(self, name)[g])
                else:
                    m.d.comb += getattr(self, name)[g].eq(getattr(nic, name))
        if self.nic_cfg_mode == "stream":
            m.d.comb += self.nic_cfg.ready.eq(1)
        return m

    def _cfg_register(self, m, g, name, port):
        """GPU ``g``'s NIC input ``port`` from a register the ``nic_cfg`` stream writes (register
        ``NIC_CFG.index(name)``)."""
        w, port = self.nic_cfg.payload, Value.cast(port)
        reg = Signal(len(port), name=f"cfg_{name}_{g}")
        with m.If(self.nic_cfg.valid & (w.gpu == g) & (w.reg == NIC_CFG.index(name))):
            m.d.sync += reg.eq(w.data[:len(port)])
        m.d.comb += port.eq(reg)
