"""The cells of a switch input's buffer: which are free, written and last of their packet (see
:mod:`hw.switch.input_unit`)."""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import decode, first_set

__all__ = ["CellPool"]


class CellPool(wiring.Component):
    """Allocation state of ``n_cells`` buffer cells, one pre-allocated *next-write cell* at a time.

    ``new_cell`` is where this cycle's flit goes (``new_ok``: there is one; cell 0 after reset). A
    ``write`` (with ``last``: the packet's last flit) fills it and, in the same cycle, takes the lowest free
    cell, ``next_cell``, as the next ``new_cell``: the writer links the written cell to it, so every written
    cell's successor is known when it is read. Without a free cell ``new_ok`` drops until one is freed.
    ``free_bits``: cells the reader frees this cycle (as a one-hot set), ``n_freed``: how many cells it
    freed last cycle.

    ``written``/``clast``: per cell, it holds a flit / the last flit of its packet. ``used``: cells written
    and not yet freed, for the receiver's credit accounting (a freed cell counts until the cycle after,
    when the receiver returns its credit).
    """

    def __init__(self, *, n_cells: int, max_freed: int):
        self.n_cells = n_cells
        cell_shape = unsigned(max(1, (n_cells - 1).bit_length()))
        super().__init__({
            "write": In(1),
            "last": In(1),
            "new_cell": Out(cell_shape),
            "new_ok": Out(1, init=1),
            "next_cell": Out(cell_shape),
            "free_bits": In(n_cells),
            "n_freed": In(range(max_freed + 1)),
            "used": Out(range(n_cells + 1)),
            "written": Out(n_cells),
            "clast": Out(n_cells),
        })

    def elaborate(self, platform):
        m = Module()
        C = self.n_cells
        free = Signal(C, init=(1 << C) - 2)   # 1 = cell free (cell 0 starts as the next-write cell)
        _, first_free = first_set(m, free, name="ffree")
        m.d.comb += self.next_cell.eq(first_free)
        refill = self.write | ~self.new_ok
        can_alloc = free.any()
        with m.If(refill):
            m.d.sync += [self.new_cell.eq(self.next_cell), self.new_ok.eq(can_alloc)]
        alloc_bit = Mux(refill & can_alloc, decode(m, self.next_cell, C, name="alloc_dec"), 0)
        write_bit = Mux(self.write, decode(m, self.new_cell, C, name="write_dec"), 0)
        m.d.sync += [
            free.eq((free & ~alloc_bit) | self.free_bits),
            self.used.eq(self.used + self.write - self.n_freed),
            self.clast.eq((self.clast & ~write_bit) | Mux(self.last, write_bit, 0)),
            self.written.eq((self.written & ~alloc_bit) | write_bit),
        ]
        return m
