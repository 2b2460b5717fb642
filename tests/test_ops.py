"""The reference reduction ops (nicoll.ops.combine) against independent models.

Integers against Python's unbounded integers reduced modulo 2**bits; float sums and products
against exact rational arithmetic rounded to nearest-even by the rounding written here, so
the reference's numpy/ml_dtypes results are shown to be the correctly rounded IEEE results
the gateware must produce.
"""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nicoll import NicollError
from nicoll.hw.ops import DType, FLOAT_OPS, FLOAT_TYPES, INTEGER_TYPES, ReduceOp
from nicoll.ops import check_op_dtype, combine, numpy_dtype, resolve_dtype, resolve_op

FORMATS = {DType.FLOAT16: (5, 10), DType.BFLOAT16: (8, 7),
           DType.FLOAT32: (8, 23), DType.FLOAT64: (11, 52)}
UINT = {16: np.uint16, 32: np.uint32, 64: np.uint64}


def round_to_bits(value, exp_bits, man_bits, zero_sign=0):
    """Bits of the IEEE binary format nearest to the rational ``value`` (ties to even)."""
    bias = (1 << (exp_bits - 1)) - 1
    sign = 1 if value < 0 else 0
    x = abs(value)
    if x == 0:
        return zero_sign << (exp_bits + man_bits)
    exponent = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** exponent > x:
        exponent -= 1
    exponent = max(exponent, 1 - bias)                  # subnormals share the least exponent
    scaled = x / Fraction(2) ** (exponent - man_bits)
    q = scaled.numerator // scaled.denominator
    rest = scaled - q
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and q % 2):
        q += 1
    if q == 1 << (man_bits + 1):
        q >>= 1
        exponent += 1
    if exponent > bias:
        return (sign << (exp_bits + man_bits)) | (((1 << exp_bits) - 1) << man_bits)
    if q < 1 << man_bits:
        return (sign << (exp_bits + man_bits)) | q
    return (sign << (exp_bits + man_bits)) | ((exponent + bias) << man_bits) | (q - (1 << man_bits))


def _is_finite(array):
    with np.errstate(invalid="ignore"):      # casting a signalling NaN warns; it is dropped here
        return bool(np.isfinite(array.astype(np.float64))[0])


def finite_values(dtype, bits):
    np_dtype = numpy_dtype(dtype)
    return (st.integers(0, (1 << bits) - 1)
            .map(lambda raw: np.array([raw], dtype=UINT[bits]).view(np_dtype))
            .filter(_is_finite))


def as_bits(array, bits):
    return int(array.view(UINT[bits])[0])


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=lambda d: d.numpy_name)
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.PROD], ids=lambda o: o.mpi_name)
def test_float_sum_and_prod_are_correctly_rounded(op, dtype):
    exp_bits, man_bits = FORMATS[dtype]
    bits = 1 + exp_bits + man_bits
    values = finite_values(dtype, bits)

    @settings(max_examples=400, deadline=None)
    @given(values, values)
    def check(a, b):
        fa, fb = Fraction(float(a[0])), Fraction(float(b[0]))
        sa, sb = bool(np.signbit(a[0])), bool(np.signbit(b[0]))
        if op is ReduceOp.SUM:
            exact = fa + fb
            zero_sign = int(sa and sb)          # x + (−x) = +0; (−0) + (−0) = −0
        else:
            exact = fa * fb
            zero_sign = int(sa != sb)
        want = round_to_bits(exact, exp_bits, man_bits, zero_sign)
        assert as_bits(combine(op, a, b), bits) == want

    check()


@pytest.mark.parametrize("dtype", INTEGER_TYPES, ids=lambda d: d.numpy_name)
def test_integer_ops_wrap_like_unbounded_integers(dtype):
    bits = dtype.bits
    np_dtype = numpy_dtype(dtype)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype.is_signed else (0, (1 << bits) - 1)
    edges = st.sampled_from([lo, hi, 0, 1, -1 if dtype.is_signed else 2, lo + 1, hi - 1])
    values = st.one_of(edges, st.integers(lo, hi))

    def wrap(v):
        v &= (1 << bits) - 1
        return v - (1 << bits) if dtype.is_signed and v >> (bits - 1) else v

    model = {ReduceOp.SUM: lambda x, y: wrap(x + y), ReduceOp.PROD: lambda x, y: wrap(x * y),
             ReduceOp.MIN: min, ReduceOp.MAX: max,
             ReduceOp.BAND: lambda x, y: wrap(x & y), ReduceOp.BOR: lambda x, y: wrap(x | y),
             ReduceOp.BXOR: lambda x, y: wrap(x ^ y),
             ReduceOp.LAND: lambda x, y: int(bool(x) and bool(y)),
             ReduceOp.LOR: lambda x, y: int(bool(x) or bool(y)),
             ReduceOp.LXOR: lambda x, y: int(bool(x) != bool(y))}

    @settings(max_examples=200, deadline=None)
    @given(values, values)
    def check(x, y):
        a, b = np.array([x], dtype=np_dtype), np.array([y], dtype=np_dtype)
        for op, f in model.items():
            got = combine(op, a, b)
            assert got.dtype == np_dtype
            assert int(got[0]) == f(x, y), (op, x, y)

    check()


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=lambda d: d.numpy_name)
def test_float_min_max(dtype):
    np_dtype = numpy_dtype(dtype)
    a = np.array([1, -2, 0.0, -0.0, -0.0, np.nan, 3, np.inf, -np.inf], dtype=np_dtype)
    b = np.array([2, -3, -0.0, 0.0, -0.0, 1, np.nan, 5, 7], dtype=np_dtype)
    lo, hi = combine("min", a, b), combine("max", a, b)
    assert lo.dtype == hi.dtype == np_dtype
    low_values = lo.astype(np.float64)
    high_values = hi.astype(np.float64)
    assert list(low_values[:2]) == [1, -3] and list(high_values[:2]) == [2, -2]
    # IEEE 754-2019 §9.6: −0 < +0, whatever the operand order
    assert list(np.signbit(lo[2:5])) == [True, True, True]
    assert list(np.signbit(hi[2:5])) == [False, False, True]
    assert np.isnan(low_values[5:7]).all() and np.isnan(high_values[5:7]).all()
    assert low_values[7] == 5 and high_values[7] == np.inf
    assert low_values[8] == -np.inf and high_values[8] == 7


def test_nan_in_gives_nan_out():
    for dtype in FLOAT_TYPES:
        np_dtype = numpy_dtype(dtype)
        a = np.array([np.nan, 1, np.inf], dtype=np_dtype)
        b = np.array([1, np.nan, -np.inf], dtype=np_dtype)
        for op in FLOAT_OPS:
            result = combine(op, a, b).astype(np.float64)
            assert np.isnan(result[:2]).all(), (dtype, op)
        assert np.isnan(combine("sum", a, b).astype(np.float64)[2])       # inf − inf


@pytest.mark.parametrize("op", ["band", "bor", "bxor", "land", "lor", "lxor"])
@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=lambda d: d.numpy_name)
def test_bitwise_and_logical_ops_on_floats_are_refused(op, dtype):
    a = np.ones(3, dtype=numpy_dtype(dtype))
    with pytest.raises(NicollError, match=rf"op '{op}' is not defined on {dtype.numpy_name}"):
        combine(op, a, a)


def test_names_resolve_and_bad_names_are_refused():
    assert resolve_op("sum") is ReduceOp.SUM
    assert resolve_dtype(np.float32) is DType.FLOAT32
    assert resolve_dtype("bfloat16") is DType.BFLOAT16    # by name, before ml_dtypes registers it
    assert resolve_dtype("int16") is DType.INT16
    import ml_dtypes
    assert resolve_dtype(ml_dtypes.bfloat16) is DType.BFLOAT16
    assert check_op_dtype("lxor", np.uint16) == (ReduceOp.LXOR, DType.UINT16)
    with pytest.raises(NicollError, match=r"unknown reduction op 'avg'; ops are sum, prod, min"):
        resolve_op("avg")
    with pytest.raises(NicollError, match=r"unsupported element type 'complex64'"):
        resolve_dtype(np.complex64)
    with pytest.raises(NicollError, match=r"operands differ in dtype: int8 and int16"):
        combine("sum", np.zeros(2, np.int8), np.zeros(2, np.int16))
    with pytest.raises(NicollError, match=r"operands differ in shape"):
        combine("sum", np.zeros(2, np.int8), np.zeros(3, np.int8))
