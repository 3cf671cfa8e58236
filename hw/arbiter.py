"""Combinational arbitration primitives (round-robin pick, first set bit, one-hot encode).

They build the switch allocator and any other block that must choose one of many requesters per cycle.
No state, no latency. Each helper that slices a computed vector first assigns it to a named signal in
``m``: an unnamed expression sliced many times is duplicated per slice by the Verilog backend (a
129-bit find-first-set written that way became hundreds of adders and ran 50x slower in Icarus).
"""

from amaranth.hdl import Cat, Const, Mux, Signal, Value

__all__ = ["lowest_one", "onehot_to_index", "first_set", "rr_pick", "or_reduce", "decode"]


def lowest_one(m, x, *, name="lowest") -> Signal:
    """Signal holding the one-hot lowest set bit of ``x`` (zero when ``x`` is zero)."""
    x = Value.cast(x)
    out = Signal(len(x), name=name)
    m.d.comb += out.eq(x & (~x + 1))
    return out


def onehot_to_index(onehot) -> Value:
    """Index of the set bit of a one-hot vector (0 when no bit is set). Pass a Signal, not an
    expression (see the module note)."""
    onehot = Value.cast(onehot)
    n = len(onehot)
    width = max(1, (n - 1).bit_length())
    bits = []
    for b in range(width):
        terms = [onehot[i] for i in range(n) if (i >> b) & 1]
        bits.append(Cat(*terms).any() if terms else Const(0, 1))
    return Cat(*bits)


def first_set(m, x, *, name="first") -> tuple[Signal, Signal]:
    """(any, index) of the lowest set bit of ``x``: a balanced priority-encoder tree, log depth."""
    x = Value.cast(x)
    n = len(x)
    vec = Signal(n, name=f"{name}_in")
    m.d.comb += vec.eq(x)

    def enc(lo, hi):
        if hi - lo == 1:
            return vec[lo], Const(lo, range(max(2, n)))
        mid = (lo + hi) // 2
        a_any, a_idx = enc(lo, mid)
        b_any, b_idx = enc(mid, hi)
        return a_any | b_any, Mux(a_any, a_idx, b_idx)
    any_, idx = enc(0, n)
    s_any = Signal(name=f"{name}_any")
    s_idx = Signal(range(max(2, n)), name=f"{name}_idx")
    m.d.comb += [s_any.eq(any_), s_idx.eq(idx)]
    return s_any, s_idx


def rr_pick(m, req, ptr, *, name="rr") -> Signal:
    """Round-robin choice: one-hot of the first set bit of ``req`` at or after index ``ptr``, wrapping.

    This is the grant/accept arbiter of iSLIP: the caller moves ``ptr`` one past the winner when the
    grant is used, which is what makes iSLIP desynchronise its pointers.
    """
    req = Value.cast(req)
    n = len(req)
    upper = Signal(n, name=f"{name}_upper")
    m.d.comb += upper.eq(req & ~((Const(1, n + 1) << ptr) - 1)[:n])
    lo_up = lowest_one(m, upper, name=f"{name}_lo_up")
    lo_all = lowest_one(m, req, name=f"{name}_lo_all")
    out = Signal(n, name=name)
    m.d.comb += out.eq(Mux(upper.any(), lo_up, lo_all))
    return out


def decode(m, idx, n: int, *, name="dec") -> Signal:
    """Signal holding the one-hot ``n``-bit decode of ``idx`` (zero when ``idx >= n``).

    Two-level (a one-hot of the low bits ANDed with each bit of a one-hot of the high bits), not
    ``Const(1, n) << idx``: Amaranth's combinational-cycle check walks every output bit of a shift back
    to every input bit, and Amaranth widens a shift's operand to its result, so ``Const(1, 257) << idx``
    is 768 x 777 edges. The cell decoders of a 257-cell switch input written that way were 98% of the
    check's work and most of the switch's elaboration time. This form is a few vector ANDs: linear in
    ``n`` for the check and in the Verilog.
    """
    idx = Value.cast(idx)
    w = len(idx)
    if n <= 0:
        raise ValueError(f"decode width must be positive, got {n!r}")
    out = Signal(n, name=name)
    if w <= _DECODE_LEAF_BITS:
        full = Const(1, 1) << idx               # 2**w bits, small
    else:
        lo = decode(m, idx[:_DECODE_LEAF_BITS], 1 << _DECODE_LEAF_BITS, name=f"{name}_lo")
        groups = -(-n >> _DECODE_LEAF_BITS)     # ceil(n / 2**leaf)
        hi = decode(m, idx[_DECODE_LEAF_BITS:], groups, name=f"{name}_hi")
        full = Cat(*(lo & hi[g].replicate(len(lo)) for g in range(groups)))
    m.d.comb += out.eq(full[:n] if len(full) >= n else full)
    return out


_DECODE_LEAF_BITS = 5   # a shift of up to 32 bits is cheap for the check


def or_reduce(values) -> Value:
    """Bitwise OR of a list of equal-width values (the AND-OR form of a one-hot multiplexer)."""
    values = list(values)
    acc = values[0]
    for v in values[1:]:
        acc = acc | v
    return acc
