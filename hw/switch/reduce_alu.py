"""The in-switch reduction ALU: one flit of lanes, IEEE-754 float add/min/max accumulated in fp32, and
int32 add/min/max.

Number formats
--------------
A flit of ``flit_width`` bits carries ``flit_width/16`` bf16 or fp16 elements, or ``flit_width/32`` fp32,
s32 or u32 elements (element ``i`` in bits ``[16i, 16i+16)`` resp. ``[32i, 32i+32)``). The *accumulator*
is always ``flit_width/16`` lanes of 32 bits (twice the flit): lane ``i`` accumulates element ``i``.

* **Float add** (bf16, fp16, fp32) accumulates in fp32, like PTX ``multimem.ld_reduce .acc::f32``: every
  contribution is widened to fp32 (exact), added to the fp32 partial with IEEE-754 round-to-nearest-even,
  and only the *final* partial is rounded back to the element type (round-to-nearest-even). So a bf16/fp16
  reduction is rounded ``d - 1`` times in fp32 plus once to the element type; an fp32 reduction is rounded
  ``d - 1`` times. The order of the additions is the order in which the contributions are presented.
* **Float min/max** compare the widened fp32 values. Widening is exact and min/max selects an operand, so
  the result converts back to the element type exactly. ``-0 < +0`` (IEEE 754-2019 ``minimum``/
  ``maximum``), so ``min(+0, -0) = -0`` and ``max(+0, -0) = +0`` whatever the order.
* **IEEE behaviour.** Subnormal inputs, partials and results are kept (no flush to zero). ``+-0`` follow
  IEEE addition (``x + -x = +0``, ``-0 + -0 = -0``). ``+-inf`` propagate; ``inf + -inf`` is NaN. Any NaN
  result, from a NaN operand or an invalid operation, is the canonical quiet NaN: fp32 ``0x7fc00000``,
  bf16 ``0x7fc0``, fp16 ``0x7e00``. Overflow (in the fp32 add or in the final rounding) gives ``+-inf``.
* **int32**: add wraps modulo 2^32 (the same for s32 and u32); min/max compare as signed for ``S32`` and
  as unsigned for ``U32``.
* Undefined encodings (``etype`` 5..7, ``op`` 3; the switch ingress rejects them with ``BAD_TYPE``) behave
  like ``U32`` and ``ADD``.

Ports
-----
``i`` (stream in): ``acc`` (the fp32/int32 partial, ``2*flit_width`` bits), ``data`` (one flit of
elements), ``etype``, ``op``, ``first`` and ``chain`` (operand selection, below), ``user`` (passed through).

``wide_data=True`` takes ``data`` already widened (``2*flit_width`` bits: lane ``i``'s 32-bit operand as
:func:`alu_operands` computes it), so that a user can register the widening a stage ahead and the first
accumulate cut starts from a flip-flop; everything else is the same.

``o`` (stream out): ``acc`` (the new partial), ``result`` (the new partial converted to the element type:
one flit, the value the reduction returns if this was its last contribution), ``user``.

The accumulator operand is the identity of ``op`` when ``first`` is set (``-0.0`` for float add, ``+inf``/
``-inf`` for float min/max, ``0``, ``INT_MAX``/``UINT_MAX`` or ``INT_MIN``/``0`` for ints: the result is
then the contribution itself, NaN made canonical); else the previous input's new partial when ``chain`` is
set (a stream of contributions reduced back to back without a round trip through memory); else ``acc``.

Pipeline
--------
Latency 2 cycles (input transfer at cycle t, output valid from cycle t+2), one flit per cycle. Stage 1 is
the accumulate step (widen, select the operand, fp32 add/min/max or int op); it is the read-modify-write
loop of a reduction, so it is one cycle and ``chain`` feeds stage 1's own output register back into it.
Stage 2 converts the partial to the element type. On a stall (``o.valid`` and not ``o.ready``) the whole
pipeline holds; ``chain`` refers to the last input *accepted*, stalls or gaps in between do not matter.

``acc_stages=3`` splits the accumulate step in three (operand selection, widening, compare/swap and
alignment | significand add and leading-zero count | normalisation, rounding and special values; the
one-cycle min/max and int results are delayed to match): latency 4, one flit per cycle, but an input
with ``chain`` (and not ``first``) is not accepted while the previous operation is in the first two
accumulate stages, so back-to-back chained operations go one every 3 cycles. The three-stage form
closes the 640 ps port clock (docs/timing.md, "Reduce ALU").

``chain_hold=False`` (for a user that tracks its own hazards, like the reduction buffer) drops that wait:
``chain`` then selects the stage-1 register: the partial of the operation that last left the accumulate
stages (without stalls, the one accepted ``acc_stages`` cycles earlier), whatever is still in the first
two stages. With ``acc_stages=1`` the two forms are the same.

``chain_copies`` (default 1) widens the two operand-select flags, ``chain`` and ``first``, to that many
copies of each flag, copy ``j`` selecting the operand of lanes ``[j*n, (j+1)*n)`` (``n = lanes /
chain_copies``): a user that drives them from separate flip-flops splits the select's fan-out (one
flip-flop driving every lane cost 2-3 ns at 45 nm in this flow). All copies of a flag must be equal.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import first_set
from ..packet import DEFAULT_FLIT_WIDTH, EType, RedOp, flit_layout

__all__ = ["ReduceALU", "LATENCY", "alu_in_layout", "alu_out_layout", "alu_operands", "identity", "CANONICAL_NAN",
           "fp32_add", "fp32_minmax", "widen_fp16", "narrow_bf16", "narrow_fp16", "lane_accumulate"]

LATENCY = 2

CANONICAL_NAN = {EType.FP32: 0x7FC00000, EType.BF16: 0x7FC0, EType.FP16: 0x7E00}
_FP32_NAN = 0x7FC00000
_FP32_INF = 0x7F800000


def identity(etype, op) -> int:
    """The accumulator value that makes ``op`` return the other operand (the ``first`` operand)."""
    etype, op = EType(etype), RedOp(op)
    if etype in (EType.BF16, EType.FP16, EType.FP32):
        return {RedOp.ADD: 0x80000000, RedOp.MIN: 0x7F800000, RedOp.MAX: 0xFF800000}[op]
    if op == RedOp.ADD:
        return 0
    if etype == EType.S32:
        return 0x7FFFFFFF if op == RedOp.MIN else 0x80000000
    return 0xFFFFFFFF if op == RedOp.MIN else 0


def alu_in_layout(flit_width: int, user_width: int, chain_copies: int = 1,
                  wide_data: bool = False) -> data.StructLayout:
    return data.StructLayout({
        "acc": 2 * flit_width,
        "data": 2 * flit_width if wide_data else flit_width,   # wide: see alu_operands
        "etype": EType,
        "op": RedOp,
        "first": chain_copies,   # copies of one flag, each selecting for its share of the lanes
        "chain": chain_copies,
        "user": user_width,
    })


def alu_out_layout(flit_width: int, user_width: int) -> data.StructLayout:
    return data.StructLayout({"acc": 2 * flit_width, "result": flit_width, "user": user_width})


# ---------------------------------------------------------------------------------------------------------
# Combinational building blocks. Each names its intermediate vectors (see hw/arbiter.py on why).

def _named(m, value, width, name) -> Signal:
    s = Signal(width, name=name)
    m.d.comb += s.eq(value)
    return s


def _clz(m, v: Value, width: int, name: str) -> Signal:
    """Leading zeros of ``v`` (``width`` bits), ``width`` when zero."""
    rev = Cat(*[v[width - 1 - i] for i in range(width)])
    any_, idx = first_set(m, rev, name=f"{name}_ffs")
    return _named(m, Mux(any_, idx, width), range(width + 1), name)


def _no_cut(value, width, name):
    return value


def _register_cut(m, enable):
    """A ``cut`` (see :func:`fp32_add`) that puts a register, loaded while ``enable``, at the boundary."""
    def cut(value, width, name):
        r = Signal(width, name=name)
        with m.If(enable):
            m.d.sync += r.eq(value)
        return r
    return cut


def fp32_add(m, a, b, name: str, cut=_no_cut) -> Signal:
    """IEEE-754 binary32 ``a + b`` with round-to-nearest-even; NaN results are canonical.

    ``cut(value, width, name)`` is called on every value that crosses the two stage boundaries (after
    the alignment, after the significand add and leading-zero count); a pipelined ALU passes one that
    registers them, the default leaves the adder combinational."""
    A = _named(m, a, 32, f"{name}_a")
    B = _named(m, b, 32, f"{name}_b")
    a_exp_max = A[23:31] == 0xFF
    b_exp_max = B[23:31] == 0xFF
    a_nan = a_exp_max & (A[0:23] != 0)
    b_nan = b_exp_max & (B[0:23] != 0)
    a_inf = a_exp_max & (A[0:23] == 0)
    b_inf = b_exp_max & (B[0:23] == 0)

    # X is the operand of larger magnitude (ties: either; the result is the same).
    swap = _named(m, B[0:31] > A[0:31], 1, f"{name}_swap")
    X = _named(m, Mux(swap, B, A), 32, f"{name}_x")
    Y = _named(m, Mux(swap, A, B), 32, f"{name}_y")
    ex = X[23:31]
    ey = Y[23:31]
    # Subnormals have the scale of exponent 1 and no hidden bit.
    ex_eff = _named(m, Mux(ex == 0, 1, ex), 8, f"{name}_ex")
    ey_eff = Mux(ey == 0, 1, ey)
    dist = _named(m, (ex_eff - ey_eff)[0:8], 8, f"{name}_dist")

    # 27-bit significands: hidden bit at 26, fraction 25..3, then guard, round and sticky bits.
    x_sig = _named(m, Cat(Const(0, 3), X[0:23], ex != 0), 27, f"{name}_xsig")
    y_ext = _named(m, Cat(Const(0, 3), Y[0:23], ey != 0), 27, f"{name}_yext")
    shift = _named(m, Mux(dist > 27, 27, dist[0:5]), 5, f"{name}_sh")
    lost = _named(m, ((Const(1, 28) << shift) - 1)[0:27], 27, f"{name}_lostmask")
    sticky = (y_ext & lost) != 0
    y_sig = _named(m, (y_ext >> shift) | sticky, 27, f"{name}_ysig")

    sub = _named(m, X[31] ^ Y[31], 1, f"{name}_sub")
    # Stage boundary 1: aligned significands and what the later stages need.
    nan_in = cut(a_nan | b_nan | (a_inf & b_inf & sub), 1, f"{name}_c1_nan")
    inf_in = cut(a_inf | b_inf, 1, f"{name}_c1_inf")
    x_sig, y_sig = cut(x_sig, 27, f"{name}_c1_x"), cut(y_sig, 27, f"{name}_c1_y")
    X, sub, ex_eff = cut(X, 32, f"{name}_c1_X"), cut(sub, 1, f"{name}_c1_sub"), cut(ex_eff, 8, f"{name}_c1_ex")
    # |X| >= |Y| after alignment, so the difference is never negative.
    z = _named(m, Mux(sub, (x_sig - y_sig)[0:28], x_sig + y_sig), 28, f"{name}_z")

    # Normalise: one right shift on carry-out, else left by the leading zeros, but not below exponent 1
    # (the result is then subnormal). Left shifts of more than one happen only when the alignment lost
    # no bits (distance <= 1), which is why guard/round/sticky suffice.
    lz = _clz(m, z[0:27], 27, f"{name}_lz")
    room = _named(m, ex_eff - 1, 8, f"{name}_room")
    lshift = _named(m, Mux(lz > room, room, lz), 5, f"{name}_lsh")
    # Stage boundary 2: the sum and its normalisation shift.
    z, lshift = cut(z, 28, f"{name}_c2_z"), cut(lshift, 5, f"{name}_c2_lsh")
    X, sub, ex_eff = cut(X, 32, f"{name}_c2_X"), cut(sub, 1, f"{name}_c2_sub"), cut(ex_eff, 8, f"{name}_c2_ex")
    nan_in, inf_in = cut(nan_in, 1, f"{name}_c2_nan"), cut(inf_in, 1, f"{name}_c2_inf")
    carry = z[27]
    z_left = _named(m, (z[0:27] << lshift)[0:27], 27, f"{name}_zl")
    z_right = Cat(z[0] | z[1], z[2:28])
    zn = _named(m, Mux(carry, z_right, z_left), 27, f"{name}_zn")
    e_norm = _named(m, Mux(carry, ex_eff + 1, (ex_eff - lshift)[0:9]), 9, f"{name}_en")
    biased = Mux(zn[26], e_norm, 0)

    # Round to nearest, ties to even. A carry out of the fraction moves into the exponent by itself
    # (including subnormal -> smallest normal and largest finite -> infinity).
    round_up = zn[2] & (zn[1] | zn[0] | zn[3])
    packed = _named(m, Cat(zn[3:26], biased) + round_up, 33, f"{name}_packed")
    overflow = packed >= _FP32_INF
    magnitude = Mux(overflow, _FP32_INF, packed[0:31])
    # An exact zero from x - x is +0 under round-to-nearest; -0 + -0 keeps its sign.
    sign = Mux((magnitude == 0) & sub, 0, X[31])

    out = Signal(32, name=f"{name}_sum")
    with m.If(nan_in):
        m.d.comb += out.eq(_FP32_NAN)
    with m.Elif(inf_in):
        m.d.comb += out.eq(X)          # the infinity has the larger magnitude
    with m.Else():
        m.d.comb += out.eq(Cat(magnitude, sign))
    return out


def fp32_minmax(m, a, b, is_max, name: str) -> Signal:
    """IEEE 754-2019 ``minimum``/``maximum`` of binary32 values (``-0 < +0``; NaN -> canonical NaN)."""
    A = _named(m, a, 32, f"{name}_a")
    B = _named(m, b, 32, f"{name}_b")
    # Map sign-magnitude to an unsigned order: negative values reversed below positive ones.
    ka = _named(m, Mux(A[31], ~A, A | 0x80000000), 32, f"{name}_ka")
    kb = _named(m, Mux(B[31], ~B, B | 0x80000000), 32, f"{name}_kb")
    a_less = ka < kb
    pick_a = Mux(is_max, ~a_less, a_less)
    nan = ((A[23:31] == 0xFF) & (A[0:23] != 0)) | ((B[23:31] == 0xFF) & (B[0:23] != 0))
    return _named(m, Mux(nan, _FP32_NAN, Mux(pick_a, A, B)), 32, f"{name}_mm")


def widen_fp16(m, x, name: str) -> Signal:
    """Exact binary16 -> binary32 (subnormals become normal fp32 values)."""
    X = _named(m, x, 16, f"{name}_h")
    e5 = X[10:15]
    frac = X[0:10]
    lz = _clz(m, frac, 10, f"{name}_lz")
    # A subnormal m * 2^-24 with its top one at bit p = 9 - lz is 1.f * 2^(p - 24): biased exponent 112 - lz.
    sub_frac = _named(m, (frac << (lz + 1))[0:10], 10, f"{name}_sf")
    out = Signal(32, name=f"{name}_w")
    with m.If(e5 == 0x1F):
        m.d.comb += out.eq(Cat(Const(0, 13), frac, Const(0xFF, 8), X[15]))
    with m.Elif(e5 != 0):
        m.d.comb += out.eq(Cat(Const(0, 13), frac, (e5 + 112)[0:8], X[15]))
    with m.Elif(frac != 0):
        m.d.comb += out.eq(Cat(Const(0, 13), sub_frac, (112 - lz)[0:8], X[15]))
    with m.Else():
        m.d.comb += out.eq(Cat(Const(0, 31), X[15]))
    return out


def narrow_bf16(m, x, name: str) -> Signal:
    """binary32 -> bfloat16 with round-to-nearest-even (overflow -> inf, NaN -> canonical NaN)."""
    X = _named(m, x, 32, f"{name}_f")
    nan = (X[23:31] == 0xFF) & (X[0:23] != 0)
    round_up = X[15] & ((X[0:15] != 0) | X[16])
    # The carry moves into the exponent by itself; rounding the largest finite values gives inf.
    mag = _named(m, X[16:31] + round_up, 16, f"{name}_mag")
    return _named(m, Mux(nan, CANONICAL_NAN[EType.BF16], Cat(mag[0:15], X[31])), 16, f"{name}_bf")


def narrow_fp16(m, x, name: str) -> Signal:
    """binary32 -> binary16 with round-to-nearest-even, subnormal results, overflow -> inf, canonical NaN."""
    X = _named(m, x, 32, f"{name}_f")
    e8 = X[23:31]
    nan = (e8 == 0xFF) & (X[0:23] != 0)
    sig = _named(m, Cat(X[0:23], e8 != 0), 24, f"{name}_sig")
    # Target biased exponent te = e8 - 112. Normal results (te >= 1) keep 11 significant bits (shift 13);
    # subnormal ones (te <= 0) shift 14 - te more, at most 25 (everything below rounds to zero).
    normal = e8 >= 113
    big = e8 >= 143                        # te >= 31: beyond the largest finite fp16 before rounding
    sub_shift = Mux(e8 <= 101, 25, (126 - e8)[0:5])
    shift = _named(m, Mux(normal, 13, sub_shift), 5, f"{name}_sh")
    kept = _named(m, sig >> shift, 24, f"{name}_kept")
    lost = _named(m, ((Const(1, 26) << shift) - 1)[0:24], 24, f"{name}_lost")
    half = _named(m, (Const(1, 26) << shift)[1:26], 25, f"{name}_half")   # 1 << (shift - 1)
    rem = _named(m, sig & lost, 24, f"{name}_rem")
    round_up = (rem > half) | ((rem == half) & kept[0])
    # For normals the hidden bit in `kept` (bit 10) adds one to (te - 1): the exponent field is te.
    base = Mux(normal, Cat(Const(0, 10), (e8 - 113)[0:5]), 0)
    packed = _named(m, (base + kept + round_up)[0:16], 16, f"{name}_packed")
    mag = Mux(big | (packed >= 0x7C00), 0x7C00, packed[0:15])
    return _named(m, Mux(nan, CANONICAL_NAN[EType.FP16], Cat(mag, X[31])), 16, f"{name}_hf")


def lane_accumulate(m, acc, b, etype, op, name: str, *, int_lane: bool, cut=_no_cut) -> Signal:
    """One 32-bit lane: ``op(acc, b)`` for floats (b already widened to fp32) and, on ``int_lane``s, ints.
    ``cut``: see :func:`fp32_add`; the one-cycle results (min/max, ints) are delayed to match."""
    def late(value, width, what):
        return cut(cut(value, width, f"{name}_c1_{what}"), width, f"{name}_c2_{what}")
    is_float = late((etype == EType.BF16) | (etype == EType.FP16) | (etype == EType.FP32), 1, "isf")
    fadd = fp32_add(m, acc, b, f"{name}_add", cut)
    fmm = late(fp32_minmax(m, acc, b, op == RedOp.MAX, f"{name}_mm"), 32, "mm")
    fres = Mux(late((op == RedOp.MIN) | (op == RedOp.MAX), 1, "ismm"), fmm, fadd)
    if not int_lane:
        return _named(m, Mux(is_float, fres, 0), 32, f"{name}_out")
    A = _named(m, acc, 32, f"{name}_ia")
    B = _named(m, b, 32, f"{name}_ib")
    less = Mux(etype == EType.S32, A.as_signed() < B.as_signed(), A < B)
    imin = Mux(less, A, B)
    imax = Mux(less, B, A)
    ires = late(Mux(op == RedOp.MIN, imin, Mux(op == RedOp.MAX, imax, (A + B)[0:32])), 32, "int")
    return _named(m, Mux(is_float, fres, ires), 32, f"{name}_out")


def alu_operands(m, flit, etype, flit_width: int, name: str = "b") -> Signal:
    """The 32-bit operand of every 16-bit lane (``2*flit_width`` bits) from one flit of elements: bf16
    and fp16 elements widened to fp32 (exact); 32-bit elements in the lower lanes (the upper lanes then
    carry don't-care values, which the ALU's result zeroes)."""
    L16, L32 = flit_width // 16, flit_width // 32
    lanes = []
    for lane in range(L16):
        h = flit[16 * lane:16 * lane + 16]
        bf = Cat(Const(0, 16), h)
        hf = widen_fp16(m, h, f"{name}_w{lane}")
        if lane < L32:
            b = Mux(etype == EType.BF16, bf, Mux(etype == EType.FP16, hf, flit[32 * lane:32 * lane + 32]))
        else:   # only 16-bit types use the upper lanes (the ALU zeroes them for the others)
            b = Mux(etype == EType.BF16, bf, hf)
        lanes.append(_named(m, b, 32, f"{name}{lane}"))
    return _named(m, Cat(*lanes), 2 * flit_width, name)


def _identity_value(etype, op) -> Value:
    """Combinational :func:`identity` (undefined encodings: U32 and ADD)."""
    is_float = (etype == EType.BF16) | (etype == EType.FP16) | (etype == EType.FP32)
    s32 = etype == EType.S32
    f = Mux(op == RedOp.MIN, 0x7F800000, Mux(op == RedOp.MAX, 0xFF800000, 0x80000000))
    i_min = Mux(s32, 0x7FFFFFFF, 0xFFFFFFFF)
    i_max = Mux(s32, 0x80000000, 0)
    i = Mux(op == RedOp.MIN, i_min, Mux(op == RedOp.MAX, i_max, 0))
    return Mux(is_float, f, i)


# ---------------------------------------------------------------------------------------------------------

class ReduceALU(wiring.Component):
    """Vector reduction ALU over one flit (see the module docstring for formats and pipeline).

    Parameters: ``flit_width`` (128/256/512: 8/16/32 16-bit lanes), ``user_width`` (1..64 bits carried
    alongside each operation), ``acc_stages`` (1 or 3, see the module docstring), ``chain_hold`` (default
    True: a ``chain`` input waits for the previous operation; False: the user keeps chained operations
    ``acc_stages`` cycles apart itself), ``chain_copies`` (copies of the ``chain`` and ``first`` flags,
    dividing the lanes; default 1), ``wide_data`` (default False: ``data`` is one flit of elements; True:
    it is already widened, :func:`alu_operands`). Latency ``self.latency``
    = :data:`LATENCY` + ``acc_stages`` - 1, throughput one flit per cycle (with ``acc_stages=3``, an
    operation with ``chain`` waits until the previous one has left the accumulate stages), whole-pipeline
    stall on output backpressure.
    """

    def __init__(self, *, flit_width: int = DEFAULT_FLIT_WIDTH, user_width: int = 8, acc_stages: int = 1,
                 chain_hold: bool = True, chain_copies: int = 1, wide_data: bool = False):
        flit_layout(flit_width)   # validates flit_width
        if not isinstance(user_width, int) or not 1 <= user_width <= 64:
            raise ValueError(f"user_width must be an integer in 1..64, got {user_width!r}")
        if acc_stages not in (1, 3):
            raise ValueError(f"acc_stages must be 1 or 3, got {acc_stages!r}")
        self.flit_width = flit_width
        self.user_width = user_width
        self.acc_stages = acc_stages
        self.chain_hold = bool(chain_hold)
        if not isinstance(chain_copies, int) or chain_copies < 1 or (flit_width // 16) % chain_copies:
            raise ValueError(f"chain_copies must divide the {flit_width // 16} lanes, got {chain_copies!r}")
        self.chain_copies = chain_copies
        self.wide_data = bool(wide_data)
        self.lanes16 = flit_width // 16
        self.lanes32 = flit_width // 32
        self.latency = LATENCY + acc_stages - 1
        super().__init__({
            "i": In(stream.Signature(alu_in_layout(flit_width, user_width, chain_copies, self.wide_data))),
            "o": Out(stream.Signature(alu_out_layout(flit_width, user_width))),
        })

    def elaborate(self, platform):
        m = Module()
        W, L16, L32 = self.flit_width, self.lanes16, self.lanes32
        p = self.i.payload

        advance = Signal()
        m.d.comb += advance.eq(~self.o.valid | self.o.ready)

        cut = _no_cut if self.acc_stages == 1 else _register_cut(m, advance)

        # Stage 1 registers: the new partial (also the `chain` operand) and what stage 2 needs.
        s1_valid = Signal()
        s1_acc = Signal(2 * W)
        s1_etype = Signal(EType)
        s1_user = Signal(self.user_width)

        etype = Signal(EType)
        op = Signal(RedOp)
        m.d.comb += [etype.eq(p.etype), op.eq(p.op)]
        # An operation still in an accumulate stage before s1: a `chain` operand must wait for it.
        v1 = cut(self.i.valid & self.i.ready, 1, "acc_v1")
        v2 = cut(v1, 1, "acc_v2")
        in_flight = (v1 | v2) if self.acc_stages > 1 and self.chain_hold else Const(0)
        m.d.comb += self.i.ready.eq(advance & ~(p.chain[0] & ~p.first[0] & in_flight))
        etype_late = cut(cut(etype, 3, "acc_et1"), 3, "acc_et2")
        user_late = cut(cut(p.user, self.user_width, "acc_user1"), self.user_width, "acc_user2")
        ident = _named(m, _identity_value(etype, op), 32, "ident")
        is16 = (etype_late == EType.BF16) | (etype_late == EType.FP16)
        operands = p.data if self.wide_data else alu_operands(m, p.data, etype, W)
        new_acc = []
        for lane in range(L16):
            b = operands[32 * lane:32 * lane + 32]
            copy = lane * self.chain_copies // L16
            prev = Mux(p.chain[copy], s1_acc[32 * lane:32 * lane + 32], p.acc[32 * lane:32 * lane + 32])
            a = _named(m, Mux(p.first[copy], ident, prev), 32, f"a{lane}")
            r = lane_accumulate(m, a, b, etype, op, f"l{lane}", int_lane=lane < L32, cut=cut)
            if lane >= L32:
                r = Mux(is16, r, 0)
            new_acc.append(r)

        with m.If(advance):
            m.d.sync += s1_valid.eq(v2)
            with m.If(v2):
                m.d.sync += [s1_acc.eq(Cat(*new_acc)), s1_etype.eq(etype_late), s1_user.eq(user_late)]

        # Stage 2: convert the partial to the element type.
        res = []
        for lane in range(L16):
            lane_acc = s1_acc[32 * lane:32 * lane + 32]
            bf = narrow_bf16(m, lane_acc, f"nb{lane}")
            hf = narrow_fp16(m, lane_acc, f"nh{lane}")
            res.append(_named(m, Mux(s1_etype == EType.BF16, bf, hf), 16, f"n{lane}"))
        narrow = Cat(*res)
        result = Mux((s1_etype == EType.BF16) | (s1_etype == EType.FP16), narrow, s1_acc[0:W])
        with m.If(advance):
            m.d.sync += self.o.valid.eq(s1_valid)
            with m.If(s1_valid):
                m.d.sync += [self.o.payload.acc.eq(s1_acc), self.o.payload.result.eq(result),
                             self.o.payload.user.eq(s1_user)]
        return m
