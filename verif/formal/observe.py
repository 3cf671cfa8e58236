"""Reaching a queue's state from a formal harness without adding ports to the design."""

from amaranth.hdl import Signal

__all__ = ["observe_queue", "elaborate_now", "driven"]


def observe_queue(q, storage: str, prefix: str):
    """(read pointer, write pointer, slots) of ``q``, a queue not yet elaborated whose memory is its submodule
    ``storage`` (``lib.fifo.SyncFIFO``: ``"storage"``): signals named ``<prefix>_rptr``, ``<prefix>_wptr`` and
    ``<prefix>_slot<j>``, driven once ``q`` is elaborated, from the memory's own port addresses and one added
    read port per slot."""
    depth = q.depth
    rptr, wptr = Signal(range(depth), name=f"{prefix}_rptr"), Signal(range(depth), name=f"{prefix}_wptr")
    slots = [Signal(q.width, name=f"{prefix}_slot{j}") for j in range(depth)]
    elaborate = q.elaborate

    def observed(platform):
        qm = elaborate(platform)
        mem = qm.submodules[storage]
        qm.d.comb += [rptr.eq(mem.read_ports[0].addr), wptr.eq(mem.write_ports[0].addr)]
        for j, slot in enumerate(slots):
            port = mem.read_port(domain="comb")
            qm.d.comb += [port.addr.eq(j), slot.eq(port.data)]
        return qm

    q.elaborate = observed
    return rptr, wptr, slots


def elaborate_now(block, platform):
    """Elaborate ``block`` here and return its module, so that a harness can name its submodules (and
    observe their queues) before they are elaborated; the design's own elaboration of ``block`` later
    returns this same module."""
    built = block.elaborate(platform)
    block.elaborate = lambda platform: built
    return built


def driven(module, name: str):
    """The signal named ``name`` that elaborated ``module`` drives (a register or wire its ``elaborate`` keeps
    local), so that a harness can state an invariant over it without a port added to the block."""
    found = [s for s in module._driving.keys() if s.name == name]
    if len(found) != 1:
        raise LookupError(f"{len(found)} signals named {name!r} driven by {type(module).__name__}")
    return found[0]
