"""Pure-Python checks of the reduction blocks: parameter validation, the tag encoding, and the numpy
reference model against an independent float64 rounding (so the reference itself is tested)."""

import numpy as np
import pytest

from dysharp.cli import main
from hw.packet import EType, Header, Opcode, RedOp
from hw.switch.ld_reduce_unit import LdReduceUnit
from hw.switch.linear_translator import LinearTranslator
from hw.switch.reduce_alu import ReduceALU, identity
from hw.switch.reduction_buffer import ReductionBuffer, rtag_from_header, rtag_to_header
from hw.switch.reduction_engine import ReductionEngine
from verif.models import reduce_ref as R


@pytest.mark.parametrize("cls,kwargs,message", [
    (ReductionBuffer, {"entries": 8}, "entries must be an integer in 16..512"),
    (ReductionBuffer, {"entries": 1024}, "entries must be an integer in 16..512"),
    (ReductionBuffer, {"max_length": 0}, "max_length must be an integer in 1..31"),
    (ReductionBuffer, {"timeout": 10}, "timeout must be an integer in 64.."),
    (ReductionBuffer, {"entries": 16, "outstanding": 17}, "outstanding must be an integer in 1..entries"),
    (ReductionBuffer, {"flit_width": 100}, "flit_width must be one of"),
    (ReductionBuffer, {"acc_stages": 2}, "acc_stages must be 1 or 3, got 2"),
    (ReduceALU, {"user_width": 0}, "user_width must be an integer in 1..64"),
    (ReduceALU, {"flit_width": 256, "chain_copies": 3}, "chain_copies must divide the 16 lanes, got 3"),
    (ReductionEngine, {"ports": 2}, "ports must be an integer in 4..128"),
    (ReductionEngine, {"translate_slots": 1}, "translate_slots must be an integer in 2..256"),
    (ReductionEngine, {"entries": 4}, "entries must be an integer in 16..512"),
    (ReductionEngine, {"acc_stages": 0}, "acc_stages must be 1 or 3, got 0"),
    (LdReduceUnit, {"acc_stages": 4}, "acc_stages must be 1 or 3, got 4"),
    (LinearTranslator, {"rows": 0}, "rows must be an integer in 1.."),
    (LdReduceUnit, {"row_bytes": 0}, "row_bytes must be an integer in 1.."),
])
@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")   # the rejected instance is never used
def test_parameters_are_validated(cls, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        cls(**kwargs)


def test_rtag_round_trips_through_the_header():
    for rtag in (0, 1, 0xFF, 0x100, 0xABCD, 0xFFFF):
        h = Header(opcode=Opcode.RED_READ_RESP, src=3, dst=1, length=2, **rtag_to_header(rtag))
        assert rtag_from_header(Header.decode(h.encode())) == rtag


def test_identity_matches_reference():
    for et in EType:
        for op in RedOp:
            assert identity(et, op) == int(R.identity(et, op))


def _nearest_even(x: np.ndarray, candidates_lo, candidates_hi, lo_val, hi_val):
    """Pick the nearer of two neighbouring representable values by exact float64 distance, ties to the
    one with an even last bit."""
    d_lo = np.abs(x - lo_val)
    d_hi = np.abs(hi_val - x)
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (candidates_hi % 2 == 0))
    return np.where(pick_hi, candidates_hi, candidates_lo)


def test_reference_bf16_rounding_is_nearest_even():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 0x7F7F0000, size=200000, dtype=np.uint64).astype(np.uint32)   # finite, positive
    bits = np.concatenate([bits, (np.arange(0x3F800000, 0x3F800000 + (1 << 17), 0x4000)).astype(np.uint32)])
    x = bits.view(np.float32).astype(np.float64)
    lo = (bits >> 16).astype(np.uint32)
    hi = lo + 1
    lo_val = (lo << 16).view(np.float32).astype(np.float64)
    hi_val = (hi << 16).view(np.float32).astype(np.float64)
    want = _nearest_even(x, lo, hi, lo_val, hi_val)
    got = R.narrow(bits, EType.BF16).astype(np.uint32)
    assert np.array_equal(got, want)


def test_reference_fp16_rounding_is_nearest_even():
    rng = np.random.default_rng(2)
    # Magnitudes from below the smallest subnormal to beyond the largest finite fp16.
    x = np.exp2(rng.uniform(-27, 15.9, size=200000)).astype(np.float32)
    x = np.concatenate([x, np.float32([2.0 ** -25, 2.0 ** -25 * 1.5, 65504.0, 65519.99, 2.0 ** -24 * 2.5])])
    got = R.narrow(x.view(np.uint32), EType.FP16)
    xv = x.astype(np.float64)
    # Neighbours on the fp16 grid: spacing 2^-24 below 2^-14, else 2^(e-10).
    e = np.floor(np.log2(np.maximum(xv, 2.0 ** -24)))
    ulp = np.where(xv < 2.0 ** -14, 2.0 ** -24, np.exp2(e - 10))
    lo_val = np.floor(xv / ulp) * ulp
    hi_val = lo_val + ulp
    lo = np.float16(0) + lo_val.astype(np.float16)          # exact: on the grid
    with np.errstate(over="ignore"):
        hi_bits = hi_val.astype(np.float16).view(np.uint16)     # 65536 is inf: overflow rounds there
    lo_bits = lo.view(np.uint16)
    want = _nearest_even(xv, lo_bits.astype(np.uint32), hi_bits.astype(np.uint32), lo_val, hi_val)
    assert np.array_equal(got.astype(np.uint32), want)


def test_reference_special_cases():
    # Canonical NaN from inf - inf; -0 + -0 = -0; x + (-x) = +0; overflow to inf; min(+0, -0) = -0.
    inf, ninf = np.uint32(0x7F800000), np.uint32(0xFF800000)
    assert R.accumulate([inf], [ninf], EType.FP32, RedOp.ADD)[0] == 0x7FC00000
    assert R.accumulate([0x80000000], [0x80000000], EType.FP32, RedOp.ADD)[0] == 0x80000000
    assert R.accumulate([0x3F800000], [0xBF800000], EType.FP32, RedOp.ADD)[0] == 0
    assert R.accumulate([0x7F7FFFFF], [0x7F7FFFFF], EType.FP32, RedOp.ADD)[0] == 0x7F800000
    assert R.accumulate([0], [0x80000000], EType.FP32, RedOp.MIN)[0] == 0x80000000
    assert R.accumulate([0x80000000], [0], EType.FP32, RedOp.MAX)[0] == 0
    assert R.accumulate([0x7FC00001], [0], EType.FP32, RedOp.MAX)[0] == 0x7FC00000
    assert R.accumulate([0xFFFFFFFF], [1], EType.S32, RedOp.MIN)[0] == 0xFFFFFFFF       # -1 < 1
    assert R.accumulate([0xFFFFFFFF], [1], EType.U32, RedOp.MIN)[0] == 1
    assert R.accumulate([0xFFFFFFFF], [2], EType.U32, RedOp.ADD)[0] == 1               # wraps
    # Subnormal results are kept: 2^-149 + 2^-149 = 2^-148.
    assert R.accumulate([1], [1], EType.FP32, RedOp.ADD)[0] == 2


def test_bench_rejects_bad_arguments(capsys):
    assert main(["bench", "reduction", "--entries", "8"]) == 2
    assert "entries must be an integer in 16..512" in capsys.readouterr().err
    assert main(["bench", "reduction", "--fanout", "9"]) == 2
    assert "--fanout must be in 1..8" in capsys.readouterr().err
    assert main(["bench", "reduction", "--latencies", "x"]) == 2
    assert "--latencies expects comma-separated integers" in capsys.readouterr().err
