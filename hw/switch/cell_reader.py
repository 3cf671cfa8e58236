"""The reader of a switch input's cell buffer: a granted transfer, ``lanes`` flits per cycle, into the
crossbar (see :mod:`hw.switch.input_unit`)."""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import decode_split, join_split, or_reduce
from ..packet import DEFAULT_FLIT_WIDTH, TAG_BITS, ErrorCode, Opcode, flit_layout, header_format

__all__ = ["CellReader", "ErrorEntry", "start_signature"]


class ErrorEntry(data.Struct):
    """An error response waiting to leave a switch input: the tag of the packet in error and why."""
    tag: TAG_BITS
    code: ErrorCode


def start_signature(*, ports: int, n_cells: int) -> wiring.Signature:
    """A transfer the reader starts (driven by the input that starts it): ``valid`` in the grant cycle,
    ``err`` (an error response, else a packet beginning at ``cell``), ``free`` (free the cells read: the
    packet's last pass) and ``dests`` (the granted outputs)."""
    return wiring.Signature({"valid": Out(1), "err": Out(1), "cell": Out(max(1, (n_cells - 1).bit_length())),
                             "free": Out(1), "dests": Out(ports)})


class CellReader(wiring.Component):
    """Reads one transfer at a time: a packet's cell chain, or one error response.

    ``start`` (:func:`start_signature`; ``start.dests``: the granted outputs) begins a transfer next cycle;
    ``active`` is high until its ``release`` cycle. A packet transfer (``start.err`` low) begins at
    ``start.cell`` and frees its cells as it reads them when ``start.free`` (the packet's last pass). An
    error transfer sends ``err``, the error queue's head, as one ERROR flit from and to ``port``, and pops
    it (``err_pop``).

    Lane k reads cell c_k, where c_0 is the reader's cell and c_{k+1} = cnext[c_k] (``cnext_addr``/
    ``cnext_data``: combinational reads of the next-cell table), as long as each cell is ``written``, the
    lanes before it did not read the packet's last cell (``clast``), and every destination has ``space``.
    Each lane's cell is also held as a split one-hot (:func:`~hw.arbiter.decode_split`): lane 0's in
    registers beside the binary cell (41 bits for 257 cells), lane k's decoded from lane k-1's ``cnext``
    read. The ``written``/``clast`` bits and the freed cells (``free_bits``) go through it: indexed by the
    binary register, those selects put ~330 loads on each of its bits (2.0 ns on one flip-flop in the flat
    integrated switch); a one-hot bit drives about 30.

    ``cell_rd[k]``: lane k's synchronous read of the cell buffer. ``out_valid``/``out_flit``/``out_dests``:
    the crossbar input, one cycle after the read (lane 0 first). ``n_freed``: the cells freed by the last
    cycle's reads (registered, so that the receiver's counts feed on no issue logic).
    """

    def __init__(self, *, ports: int, n_cells: int, flit_width: int = DEFAULT_FLIT_WIDTH, lanes: int = 1):
        self.ports, self.n_cells, self.flit_width, self.lanes = ports, n_cells, flit_width, lanes
        N, C, L = ports, n_cells, lanes
        cell_shape = unsigned(max(1, (C - 1).bit_length()))
        flit = flit_layout(flit_width)
        super().__init__({
            "start": In(start_signature(ports=N, n_cells=C)),
            "active": Out(1),
            "dests": Out(N),
            "release": Out(1),
            "written": In(C),
            "clast": In(C),
            "space": In(N),
            "port": In(range(N)),
            "err": In(ErrorEntry),
            "err_pop": Out(1),
            "cnext_addr": Out(cell_shape).array(L),
            "cnext_data": In(cell_shape).array(L),
            "cell_rd": In(memory.ReadPort.Signature(addr_width=cell_shape.width, shape=flit)).array(L),
            "free_bits": Out(C),
            "n_freed": Out(range(L + 1)),
            "out_valid": Out(L),
            "out_flit": Out(flit).array(L),
            "out_dests": Out(N),
        })

    def elaborate(self, platform):
        m = Module()
        C, L = self.n_cells, self.lanes
        rd_err = Signal()          # the transfer is an error response
        rd_cell = Signal(len(self.start.cell))
        rd_free = Signal()         # free cells as they are read (last pass of the packet)

        space_ok = (self.space & self.dests) == self.dests
        lane_cell = [rd_cell] + [Signal(len(rd_cell), name=f"lane{k}_cell") for k in range(1, L)]
        lane_next = [Signal(len(rd_cell), name=f"lane{k}_next") for k in range(L)]
        next_split = [decode_split(m, lane_next[k], C, name=f"next_dec{k}") for k in range(L)]
        rd_lo = Signal(len(next_split[0][0]), init=1)
        rd_hi = Signal(len(next_split[0][1]), init=1)
        lane_hot = [Signal(C, name=f"lane{k}_hot") for k in range(L)]
        m.d.comb += [hot.eq(join_split(lo, hi, C))
                     for hot, (lo, hi) in zip(lane_hot, [(rd_lo, rd_hi)] + next_split[:-1])]
        lane_issue = [Signal(name=f"lane{k}_issue") for k in range(L)]
        lane_last = [Signal(name=f"lane{k}_last") for k in range(L)]
        for k in range(L):
            m.d.comb += [self.cnext_addr[k].eq(lane_cell[k]), lane_next[k].eq(self.cnext_data[k]),
                         lane_last[k].eq((self.clast & lane_hot[k]).any())]
            if k + 1 < L:
                m.d.comb += lane_cell[k + 1].eq(lane_next[k])
            ok = (self.written & lane_hot[k]).any()
            if k == 0:
                m.d.comb += lane_issue[0].eq(self.active & ~rd_err & space_ok & ok)
            else:
                m.d.comb += lane_issue[k].eq(lane_issue[k - 1] & ~lane_last[k - 1] & ok)
            m.d.comb += [self.cell_rd[k].addr.eq(lane_cell[k]), self.cell_rd[k].en.eq(lane_issue[k])]
        err_issue = Signal()
        m.d.comb += [
            err_issue.eq(self.active & rd_err & space_ok),
            self.release.eq(err_issue | or_reduce([lane_issue[k] & lane_last[k] for k in range(L)])),
            self.err_pop.eq(err_issue),
        ]

        # The next cell to read: one past the last lane that issued; a data transfer's start loads its head.
        nxt, nxt_lo, nxt_hi = rd_cell, rd_lo, rd_hi
        for k in range(L):
            lo, hi = next_split[k]
            nxt, nxt_lo, nxt_hi = (Mux(lane_issue[k], a, b) for a, b in ((lane_next[k], nxt), (lo, nxt_lo),
                                                                         (hi, nxt_hi)))
        m.d.sync += [rd_cell.eq(nxt), rd_lo.eq(nxt_lo), rd_hi.eq(nxt_hi)]
        head_lo, head_hi = decode_split(m, self.start.cell, C, name="head_dec")
        with m.If(self.start.valid):
            m.d.sync += [self.active.eq(1), self.dests.eq(self.start.dests), rd_err.eq(self.start.err)]
            with m.If(~self.start.err):
                m.d.sync += [rd_cell.eq(self.start.cell), rd_lo.eq(head_lo), rd_hi.eq(head_hi),
                             rd_free.eq(self.start.free)]
        with m.Elif(self.release):
            m.d.sync += self.active.eq(0)

        freed = [Signal(name=f"lane{k}_freed") for k in range(L)]
        m.d.comb += [freed[k].eq(lane_issue[k] & rd_free) for k in range(L)]
        m.d.comb += self.free_bits.eq(or_reduce([Mux(freed[k], lane_hot[k], 0) for k in range(L)]))
        m.d.sync += self.n_freed.eq(sum(freed))

        # Crossbar-side pipeline register (aligned with the synchronous cell read).
        o_err = Signal()
        err_flit = Signal(self.flit_width)
        fmt = header_format(self.ports)
        err_hdr = fmt.layout(err_flit[:fmt.bits])
        m.d.sync += [self.out_valid.eq(Cat(lane_issue) | err_issue), o_err.eq(err_issue),
                     self.out_dests.eq(self.dests)]
        with m.If(err_issue):
            m.d.sync += [
                err_flit.eq(0),
                err_hdr.opcode.eq(Opcode.ERROR),
                err_hdr.src.eq(self.port),
                err_hdr.tag.eq(self.err.tag),
                err_hdr.route.uni.dst.eq(self.port),
                err_hdr.route.uni.code.eq(self.err.code),
            ]
        with m.If(o_err):
            m.d.comb += [self.out_flit[0].data.eq(err_flit), self.out_flit[0].last.eq(1)]
        with m.Else():
            m.d.comb += self.out_flit[0].eq(self.cell_rd[0].data)
        m.d.comb += [self.out_flit[k].eq(self.cell_rd[k].data) for k in range(1, L)]
        return m
