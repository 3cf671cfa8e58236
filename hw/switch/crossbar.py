"""The switch crossbar: ``n_in`` inputs of ``lanes`` flits each, to ``n_out`` outputs, by destination mask.

Contract
--------
* Ports: ``in_valid[i]`` (lanes of input i carrying a flit; lane k only with the lanes before it),
  ``in_data[i][k]``, ``in_dests[i]`` (outputs input i is sending to, one bit per output),
  ``out_valid[j]``/``out_data[j][k]``.
* An output listens to at most one valid input at a time (the allocator guarantees it). Output j lane k
  is valid when the input sending to j has lane k valid, and then carries that input's lane-k flit.
  ``out_data`` is unspecified while its lane is not valid (the egress queue writes only valid lanes).
* Combinational, latency 0.

Why an encoded select: each output turns its column of the destination masks (one-hot) into an input
index once and selects with a ``case`` on it. The former AND-OR form (one masked ``Mux`` per input per
lane, OR-reduced) wrote ``n_in`` full-width multiplexers and ``n_in - 1`` full-width ORs per output lane
into the Verilog; the ``case`` is one short line per input. The hardware is the same N x N x width
multiplexer either way (synthesis maps both to AND-OR trees). Not ``Cat(...).word_select(sel, w)``:
Amaranth's combinational-cycle check walks every output bit of a variable part-select back to every bit
of its ``n_in * width``-bit operand, which at 64 ports is ~10^8 edges.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import onehot_to_index

__all__ = ["Crossbar"]


class Crossbar(wiring.Component):
    """Parameters: ``n_in``, ``n_out`` (>= 1), ``width`` (flit bits), ``lanes`` (flits per port per
    cycle, >= 1)."""

    def __init__(self, *, n_in: int, n_out: int, width: int, lanes: int = 1):
        for name, v in (("n_in", n_in), ("n_out", n_out), ("width", width), ("lanes", lanes)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"crossbar {name} must be a positive integer, got {v!r}")
        self.n_in, self.n_out, self.width, self.lanes = n_in, n_out, width, lanes
        super().__init__({
            "in_valid": In(lanes).array(n_in),
            "in_data": In(width).array(lanes).array(n_in),
            "in_dests": In(n_out).array(n_in),
            "out_valid": Out(lanes).array(n_out),
            "out_data": Out(width).array(lanes).array(n_out),
        })

    def elaborate(self, platform):
        m = Module()
        L = self.lanes
        for j in range(self.n_out):
            # Lane k of input i is valid only with lane 0, so lane 0's hits name the source of every lane.
            hits = []
            for k in range(L):
                h = Signal(self.n_in, name=f"out{j}_lane{k}_hits")
                m.d.comb += h.eq(Cat(self.in_valid[i][k] & self.in_dests[i][j] for i in range(self.n_in)))
                hits.append(h)
                m.d.comb += self.out_valid[j][k].eq(h.any())
            if self.n_in == 1:
                for k in range(L):
                    m.d.comb += self.out_data[j][k].eq(self.in_data[0][k])
                continue
            sel = Signal(range(self.n_in), name=f"out{j}_sel")
            m.d.comb += sel.eq(onehot_to_index(hits[0]))
            # ``sel`` is below n_in; when n_in is not a power of two the last input is the default case, so
            # the case statement covers every value of ``sel`` (no CASEINCOMPLETE at e.g. 72 ports).
            full = self.n_in & (self.n_in - 1) == 0
            with m.Switch(sel):
                for i in range(self.n_in):
                    with m.Case(i) if full or i < self.n_in - 1 else m.Default():
                        m.d.comb += [self.out_data[j][k].eq(self.in_data[i][k]) for k in range(L)]
        return m
