"""Combinational arbitration primitives (round-robin pick, first set bit, one-hot encode).

They build the switch allocator and any other block that must choose one of many requesters per cycle.
No state, no latency. Each helper that slices a computed vector first assigns it to a named signal in
``m``: an unnamed expression sliced many times is duplicated per slice by the Verilog backend (a
129-bit find-first-set written that way became hundreds of adders and ran 50x slower in Icarus).
"""

from amaranth.hdl import Cat, Const, Mux, Signal, Value

__all__ = ["lowest_one", "onehot_to_index", "first_set", "prefix_or", "rr_pick", "rr_pick_masked", "mask_after",
           "or_reduce", "decode", "decode_split", "join_split"]


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


def prefix_or(m, x, *, name="prefix") -> Signal:
    """Signal whose bit ``k`` is the OR of ``x``'s bits below ``k`` (bit 0 is 0): a Sklansky parallel
    prefix, ``ceil(log2(len(x)))`` OR levels. ``x & ~prefix_or(x)`` is the lowest set bit without the
    carry chain of ``x & (~x + 1)``."""
    x = Value.cast(x)
    n = len(x)
    # Each level is a named signal (see the module note): level l holds, at bit k, the OR of k's aligned
    # 2**l block up to k.
    level = Signal(n, name=f"{name}_l0")
    m.d.comb += level.eq(x)
    span, depth = 1, 0
    while span < n:
        depth += 1
        nxt = Signal(n, name=f"{name}_l{depth}")
        # The upper half of each 2*span block adds the lower half's total, its last bit. Written as one
        # vector OR of replicated bits, not n one-bit ORs, which the Verilog backend emits a wire each.
        add = []
        for b in range(0, n, 2 * span):
            add += [Const(0, min(span, n - b))]
            if b + span < n:
                add += [level[b + span - 1].replicate(min(span, n - b - span))]
        m.d.comb += nxt.eq(level | Cat(*add))
        level, span = nxt, span * 2
    out = Signal(n, name=name)
    m.d.comb += out.eq(Cat(Const(0, 1), level[:n - 1]) if n > 1 else Const(0, 1))
    return out


def rr_pick(m, req, ptr, *, name="rr") -> Signal:
    """Round-robin choice: one-hot of the first set bit of ``req`` at or after index ``ptr``, wrapping.

    This is the grant/accept arbiter of iSLIP: the caller moves ``ptr`` one past the winner when the
    grant is used, which is what makes iSLIP desynchronise its pointers. The mask of the bits at or after
    ``ptr`` is one comparison with a constant per bit; :func:`rr_pick_masked` takes that mask instead.
    """
    req = Value.cast(req)
    ptr = Value.cast(ptr)
    top = (1 << len(ptr)) - 1          # ``ptr <= top`` always holds: a constant, not a comparison (lint)
    return rr_pick_masked(m, req, Cat(Const(1, 1) if k >= top else ptr <= k for k in range(len(req))),
                          name=name)


def rr_pick_masked(m, req, at_or_after, *, name="rr") -> Signal:
    """:func:`rr_pick` with the pointer given as its mask: bit ``k`` of ``at_or_after`` is set for every
    ``k`` at or after the pointer (a caller that keeps the pointer in this form, see :func:`mask_after`,
    takes the decode off its path).

    Log depth, no adders: both lowest-set-bit searches (above the pointer, and wrapped around) are
    :func:`prefix_or` trees. (The form ``req & ~((1 << ptr) - 1)`` and ``x & (~x + 1)`` maps to a shifter
    and two carry chains; in a 64-port allocator that was most of a 5 ns grant-accept-update path at
    45 nm.)
    """
    req = Value.cast(req)
    n = len(req)
    upper = Signal(n, name=f"{name}_upper")
    m.d.comb += upper.eq(req & at_or_after)
    below_up = prefix_or(m, upper, name=f"{name}_pre_up")
    below_all = prefix_or(m, req, name=f"{name}_pre_all")
    up_any = Signal(name=f"{name}_up_any")
    m.d.comb += up_any.eq(upper.any())
    out = Signal(n, name=name)
    m.d.comb += out.eq(Mux(up_any, upper & ~below_up, req & ~below_all))
    return out


def mask_after(m, onehot, *, name="after") -> Signal:
    """The :func:`rr_pick_masked` mask of the index one past the set bit of ``onehot`` (wrapping): the
    bits above the set bit, or every bit when the set bit is the last."""
    onehot = Value.cast(onehot)
    out = Signal(len(onehot), name=name)
    m.d.comb += out.eq(prefix_or(m, onehot, name=f"{name}_pre") | onehot[-1].replicate(len(onehot)))
    return out


def decode(m, idx, n: int, *, name="dec") -> Signal:
    """Signal holding the one-hot ``n``-bit decode of ``idx`` (zero when ``idx >= n``).

    Two-level (a one-hot of the low bits ANDed with each bit of a one-hot of the high bits,
    :func:`decode_split`), not ``Const(1, n) << idx``: Amaranth's combinational-cycle check walks every
    output bit of a shift back to every input bit, and Amaranth widens a shift's operand to its result, so
    ``Const(1, 257) << idx`` is 768 x 777 edges. The cell decoders of a 257-cell switch input written that
    way were 98% of the check's work and most of the switch's elaboration time. This form is a few vector
    ANDs: linear in ``n`` for the check and in the Verilog.
    """
    out = Signal(n, name=name)
    m.d.comb += out.eq(join_split(*decode_split(m, idx, n, name=name), n))
    return out


def decode_split(m, idx, n: int, *, name="dec") -> tuple:
    """The two factors of :func:`decode` as ``(lo, hi)``: the one-hot decode of ``idx``'s low
    ``_DECODE_LEAF_BITS`` bits and that of the rest, one bit per group of ``len(lo)`` (``Const(1, 1)``
    when ``idx`` is no wider). ``join_split(lo, hi, n)`` is the decode. Registered apart, they hold an
    index in ``len(lo) + len(hi)`` bits (41 for 257 values) whose every bit drives a few dozen loads of a
    one-hot select, where a binary index register's bits drive hundreds."""
    idx = Value.cast(idx)
    w = len(idx)
    if n <= 0:
        raise ValueError(f"decode width must be positive, got {n!r}")
    if w <= _DECODE_LEAF_BITS:
        return Const(1, 1) << idx, Const(1, 1)          # 2**w bits, small
    lo = decode(m, idx[:_DECODE_LEAF_BITS], 1 << _DECODE_LEAF_BITS, name=f"{name}_lo")
    hi = decode(m, idx[_DECODE_LEAF_BITS:], -(-n >> _DECODE_LEAF_BITS), name=f"{name}_hi")
    return lo, hi


def join_split(lo, hi, n: int) -> Value:
    """The ``n``-bit one-hot of :func:`decode_split`'s ``(lo, hi)``: ``lo`` ANDed with each ``hi`` bit."""
    one_group = isinstance(hi, Const) and hi.value == 1 and len(hi) == 1
    full = lo if one_group else Cat(*(lo & hi[g].replicate(len(lo)) for g in range(len(hi))))
    return full[:n] if len(full) >= n else full


_DECODE_LEAF_BITS = 5   # a shift of up to 32 bits is cheap for the check


def or_reduce(values) -> Value:
    """Bitwise OR of a list of equal-width values (the AND-OR form of a one-hot multiplexer)."""
    values = list(values)
    acc = values[0]
    for v in values[1:]:
        acc = acc | v
    return acc
