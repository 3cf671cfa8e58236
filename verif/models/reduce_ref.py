"""numpy reference of the reduction ALU (:mod:`hw.switch.reduce_alu`), independent of the RTL.

Float arithmetic is numpy ``float32`` (IEEE-754 binary32, round-to-nearest-even, subnormals kept); fp16
conversions are numpy's ``float16`` casts; bf16 is fp32 bit manipulation (widen: ``<< 16``; narrow: the
round-to-nearest-even increment on the upper half). NaN results are replaced by the canonical quiet NaN.
Min/max follow IEEE 754-2019 ``minimum``/``maximum`` (NaN wins, ``-0 < +0``), written with numpy float
comparisons.

Arrays are ``uint32`` accumulator lanes and ``uint16``/``uint32`` element lanes (bit patterns).
"""

import numpy as np

from hw.packet import EType, RedOp

__all__ = ["FP32_NAN", "BF16_NAN", "FP16_NAN", "widen", "narrow", "accumulate", "alu_reference",
           "identity", "special_values", "lanes_to_int", "int_to_lanes", "reduce_sequence"]

FP32_NAN = np.uint32(0x7FC00000)
BF16_NAN = np.uint16(0x7FC0)
FP16_NAN = np.uint16(0x7E00)

_FLOATS = (EType.BF16, EType.FP16, EType.FP32)


def is16(etype) -> bool:
    return EType(etype) in (EType.BF16, EType.FP16)


def widen(bits, etype) -> np.ndarray:
    """Element bit patterns -> fp32 bit patterns (uint32); ints pass through."""
    etype = EType(etype)
    if etype == EType.BF16:
        return np.asarray(bits, dtype=np.uint32) << np.uint32(16)
    if etype == EType.FP16:
        return np.asarray(bits, dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    return np.asarray(bits, dtype=np.uint32)


def _canon32(bits: np.ndarray) -> np.ndarray:
    f = bits.view(np.float32)
    return np.where(np.isnan(f), FP32_NAN, bits).astype(np.uint32)


def narrow(acc, etype) -> np.ndarray:
    """fp32 partials -> element bit patterns (round-to-nearest-even); 32-bit types pass through."""
    etype = EType(etype)
    acc = np.asarray(acc, dtype=np.uint32)
    nan = np.isnan(acc.view(np.float32))
    if etype == EType.BF16:
        lsb = (acc >> np.uint32(16)) & np.uint32(1)
        rounded = ((acc.astype(np.uint64) + 0x7FFF + lsb) >> 16).astype(np.uint16)
        return np.where(nan, BF16_NAN, rounded).astype(np.uint16)
    if etype == EType.FP16:
        with np.errstate(over="ignore", invalid="ignore"):
            h = acc.view(np.float32).astype(np.float16).view(np.uint16)
        return np.where(nan, FP16_NAN, h).astype(np.uint16)
    return acc


def identity(etype, op) -> np.uint32:
    etype, op = EType(etype), RedOp(op)
    if etype in _FLOATS:
        return np.uint32({RedOp.ADD: 0x80000000, RedOp.MIN: 0x7F800000, RedOp.MAX: 0xFF800000}[op])
    if op == RedOp.ADD:
        return np.uint32(0)
    if etype == EType.S32:
        return np.uint32(0x7FFFFFFF if op == RedOp.MIN else 0x80000000)
    return np.uint32(0xFFFFFFFF if op == RedOp.MIN else 0)


def accumulate(acc, b_wide, etype, op) -> np.ndarray:
    """``op(acc, b)`` per lane on fp32/int32 bit patterns (``b`` already widened)."""
    etype, op = EType(etype), RedOp(op)
    a = np.asarray(acc, dtype=np.uint32)
    b = np.asarray(b_wide, dtype=np.uint32)
    if etype in _FLOATS:
        fa, fb = a.view(np.float32), b.view(np.float32)
        if op == RedOp.ADD:
            with np.errstate(all="ignore"):
                return _canon32((fa + fb).astype(np.float32).view(np.uint32))
        nan = np.isnan(fa) | np.isnan(fb)
        # Equal values have equal bits except +-0: min takes the set sign bit, max the clear one.
        if op == RedOp.MIN:
            r = np.where(fa < fb, a, np.where(fb < fa, b, a | b))
        else:
            r = np.where(fa > fb, a, np.where(fb > fa, b, a & b))
        return np.where(nan, FP32_NAN, r).astype(np.uint32)
    if op == RedOp.ADD:
        return (a.astype(np.uint64) + b).astype(np.uint32)
    if etype == EType.S32:
        sa, sb = a.view(np.int32), b.view(np.int32)
        pick_a = sa < sb if op == RedOp.MIN else sa > sb
    else:
        pick_a = a < b if op == RedOp.MIN else a > b
    return np.where(pick_a, a, b).astype(np.uint32)


def alu_reference(acc, data, etype, op, first) -> tuple[np.ndarray, np.ndarray]:
    """One ALU operation: (new accumulator lanes (uint32, len n16), result element lanes).

    ``acc``: uint32[n16] accumulator lanes; ``data``: the element lanes (uint16[n16] for 16-bit types,
    uint32[n32] otherwise). Lanes past ``n32`` of the accumulator are 0 for 32-bit types.
    """
    etype = EType(etype)
    acc = np.asarray(acc, dtype=np.uint32)
    n16 = len(acc)
    a = np.full(n16, identity(etype, op), dtype=np.uint32) if first else acc
    if is16(etype):
        new = accumulate(a, widen(data, etype), etype, op)
        return new, narrow(new, etype)
    n32 = n16 // 2
    new = np.zeros(n16, dtype=np.uint32)
    new[:n32] = accumulate(a[:n32], widen(data, etype), etype, op)
    return new, new[:n32].copy()


def reduce_sequence(contributions, etype, op) -> np.ndarray:
    """Reduce element-lane arrays in the given (arrival) order: what the buffer must return."""
    etype = EType(etype)
    acc = None
    for c in contributions:
        wide = widen(c, etype)
        acc = accumulate(np.full(len(wide), identity(etype, op), dtype=np.uint32) if acc is None else acc,
                         wide, etype, op)
    return narrow(acc, etype)


# ---------------------------------------------------------------------------------------------------------
# Special operand classes and packing helpers

def special_values(etype) -> list[int]:
    """Both signs of: zero, smallest/largest subnormal, smallest/largest normal, one, inf, quiet and
    signalling NaN, a few ordinary values, and pairs whose sums are exact rounding ties (1 + half an ulp,
    1 + ulp + half an ulp) (floats); for ints the boundary values."""
    etype = EType(etype)
    if etype == EType.BF16:
        pos = [0x0000, 0x0001, 0x007F, 0x0080, 0x7F7F, 0x3F80, 0x7F80, 0x7FC0, 0x7F81, 0x0055, 0x4049,
               0x3F81, 0x3B80]
        sign = 0x8000
    elif etype == EType.FP16:
        pos = [0x0000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x3C00, 0x7C00, 0x7E00, 0x7C01, 0x0155, 0x4248,
               0x3C01, 0x1000]
        sign = 0x8000
    elif etype == EType.FP32:
        pos = [0x00000000, 0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x3F800000, 0x7F800000,
               0x7FC00000, 0x7F800001, 0x00400000, 0x40490FDB, 0x33800000, 0x4B800000, 0x3F800001]
        sign = 0x80000000
    else:
        return [0, 1, 2, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFF, 0xFFFFFFFE, 0x40000000,
                0x12345678, 0xEDCBA987]
    return pos + [v | sign for v in pos]


def lanes_to_int(lanes, bits: int) -> int:
    """Pack lanes (lane 0 least significant) into one int."""
    dtype = {16: "<u2", 32: "<u4"}[bits]
    return int.from_bytes(np.asarray(lanes).astype(dtype).tobytes(), "little")


def int_to_lanes(value: int, bits: int, count: int) -> np.ndarray:
    dtype = {16: "<u2", 32: "<u4"}[bits]
    return np.frombuffer(int(value).to_bytes(count * bits // 8, "little"), dtype=dtype).astype(
        np.uint16 if bits == 16 else np.uint32)


def alu_reference_batch(acc, data, etype, ops, first) -> tuple[np.ndarray, np.ndarray]:
    """:func:`alu_reference` over ``n`` flits of one element type at once (numpy-vectorised).

    ``acc``: uint32[n, n16]; ``data``: uint16[n, n16] or uint32[n, n32]; ``ops``: int[n]; ``first``:
    bool[n]. Returns (uint32[n, n16] new accumulators, element lanes[n, ...] results).
    """
    etype = EType(etype)
    acc = np.asarray(acc, dtype=np.uint32)
    n, n16 = acc.shape
    ops = np.asarray(ops)
    first = np.asarray(first, dtype=bool)
    lanes = n16 if is16(etype) else n16 // 2
    a = acc[:, :lanes].copy()
    new = np.zeros_like(acc)
    wide = widen(data, etype)
    for op in RedOp:
        rows = ops == op.value
        if not rows.any():
            continue
        a_op = np.where(first[rows, None], identity(etype, op), a[rows])
        new[rows, :lanes] = accumulate(a_op, wide[rows], etype, op)
    return new, narrow(new[:, :lanes], etype)
