"""Static multimem group table: group handle -> member port mask, written by the host.

This is what Hopper's NVLS needs set up before a ``multimem.*`` access: one fixed member set per handle.
``dymultimem`` requests carry their own mask and never look here.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..packet import GROUP_BITS, MAX_PORTS, widened

__all__ = ["GroupWrite", "GroupTable", "group_write_layout"]


class GroupWrite(data.Struct):
    """One configuration write: ``mask`` zero unconfigures ``handle``."""
    handle: GROUP_BITS
    mask: MAX_PORTS


def group_write_layout(ports: int | None = None):
    """:class:`GroupWrite` in the header format of a ``ports``-port switch (:func:`hw.packet.widened`)."""
    return widened(GroupWrite, ports, mask="max_ports")


class GroupTable(wiring.Component):
    """``entries`` handles x ``ports``-bit masks with ``n_lookups`` combinational lookup ports.

    ``cfg`` accepts one write per cycle (always ready). A write to a handle >= ``entries`` or with mask
    bits for ports that do not exist changes nothing and increments ``cfg_errors``. A lookup of an
    unconfigured or out-of-range handle returns mask 0. Contents start unconfigured and are kept across
    reset (configuration state, like a CSR file without reset).
    """

    def __init__(self, *, ports: int, entries: int = 16, n_lookups: int = 1):
        if not 1 <= entries <= 256:
            raise ValueError(f"group table entries must be in 1..256, got {entries!r}")
        self.ports = ports
        self.entries = entries
        self.n_lookups = n_lookups
        super().__init__({
            "cfg": In(stream.Signature(group_write_layout(ports))),
            "lookup_handle": In(GROUP_BITS).array(n_lookups),
            "lookup_mask": Out(ports).array(n_lookups),
            "cfg_errors": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.table = table = memory.Memory(shape=self.ports, depth=self.entries, init=[])
        wp = table.write_port()
        w = self.cfg.payload
        legal = (w.handle < self.entries) & ((w.mask >> self.ports) == 0)
        m.d.comb += [
            self.cfg.ready.eq(1),
            wp.addr.eq(w.handle),
            wp.data.eq(w.mask),
            wp.en.eq(self.cfg.valid & legal),
        ]
        with m.If(self.cfg.valid & ~legal):
            m.d.sync += self.cfg_errors.eq(self.cfg_errors + 1)
        for k in range(self.n_lookups):
            rp = table.read_port(domain="comb")
            h = self.lookup_handle[k]
            m.d.comb += rp.addr.eq(h)
            with m.If(h < self.entries):
                m.d.comb += self.lookup_mask[k].eq(rp.data)
        return m
