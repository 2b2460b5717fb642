"""Reduction ops on numpy arrays: the one reference the device model and every test use.

:func:`combine` is the element-wise ``a ∘ b`` the ReductionALU computes, written once:

- integers wrap modulo 2**bits, like numpy;
- ``land`` / ``lor`` / ``lxor`` give 0 or 1 of the operand type;
- floats are IEEE-754 with round-to-nearest-even and subnormals: numpy for float16, float32,
  float64, ml_dtypes for bfloat16 (its results are correctly rounded for sum and prod,
  which tests/test_ops.py checks against exact rational arithmetic);
- ``min`` / ``max`` propagate NaN like numpy.minimum / numpy.maximum.  Where both operands
  are zeros of different sign, numpy's answer depends on the dtype and the SIMD code path
  it picks; nicoll follows IEEE 754-2019 §9.6 minimum/maximum there (−0 < +0), so the
  result does not depend on the machine;
- the bitwise and logical ops are undefined on floats in MPI (MPI 4.0 §6.9.2) and raise.

A NaN result is "some quiet NaN": the hardware returns the canonical one, numpy keeps a
payload, and comparisons treat all NaNs alike.
"""

import numpy as np

from nicoll.hw.ops import DType, ReduceOp, dtype_by_name, op_by_name, op_supported_for

from .errors import NicollError

__all__ = ["resolve_op", "resolve_dtype", "check_op_dtype", "combine", "numpy_dtype"]


def resolve_op(op):
    """A ReduceOp from a public-API name ("sum") or a ReduceOp; NicollError otherwise."""
    if isinstance(op, ReduceOp):
        return op
    if not isinstance(op, str):
        raise NicollError(f"op must be a string such as 'sum', not {op!r}")
    try:
        return op_by_name(op)
    except ValueError as exc:
        raise NicollError(str(exc)) from None


def numpy_dtype(dtype):
    """The numpy dtype of a DType (bfloat16 from ml_dtypes)."""
    dtype = DType(dtype)
    if dtype is DType.BFLOAT16:
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype.numpy_name)


def resolve_dtype(dtype):
    """A DType from a numpy dtype (or anything np.dtype accepts, or a DType)."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        # "bfloat16" is a numpy dtype name only once ml_dtypes is imported: take names first.
        try:
            return dtype_by_name(dtype)
        except ValueError:
            pass
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise NicollError(f"not a numpy dtype: {dtype!r}") from None
    name = np_dtype.name
    # A byte-swapped dtype has the name of the native one ('>i4' is "int32"), but the device
    # computes and returns little-endian elements: taken as its namesake it would be summed
    # and returned as other numbers.
    if np_dtype != np_dtype.newbyteorder("<"):
        raise NicollError(f"element type {np_dtype.str!r} ({name}) is big-endian; the device "
                          f"works in little-endian order: convert with "
                          f"x.astype(x.dtype.newbyteorder('<'))")
    try:
        return dtype_by_name(name)
    except ValueError as exc:
        raise NicollError(str(exc)) from None


def check_op_dtype(op, dtype):
    """Resolve both and refuse the pairs MPI leaves undefined; returns (ReduceOp, DType)."""
    op, dtype = resolve_op(op), resolve_dtype(dtype)
    if not op_supported_for(op, dtype):
        raise NicollError(f"op {op.mpi_name!r} is not defined on {dtype.numpy_name}: "
                          f"floating-point types take only sum, prod, min and max")
    return op, dtype


def _ieee_min_max(op, a, b, result):
    # Ref: IEEE 754-2019 §9.6: minimum(−0, +0) = −0, maximum(−0, +0) = +0.
    zeros = (a == 0) & (b == 0)
    if not zeros.any():
        return result
    if op is ReduceOp.MIN:
        wanted = np.where(np.signbit(a), a, b)
    else:
        wanted = np.where(np.signbit(a), b, a)
    return np.where(zeros, wanted, result).astype(result.dtype)


def combine(op, a, b):
    """Element-wise ``a op b`` of two arrays of one dtype, as the ReductionALU computes it."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        raise NicollError(f"operands differ in dtype: {a.dtype} and {b.dtype}")
    if a.shape != b.shape:
        raise NicollError(f"operands differ in shape: {a.shape} and {b.shape}")
    op, dtype = check_op_dtype(op, a.dtype)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        if op is ReduceOp.SUM:
            return np.add(a, b)
        if op is ReduceOp.PROD:
            return np.multiply(a, b)
        if op in (ReduceOp.MIN, ReduceOp.MAX):
            result = (np.minimum if op is ReduceOp.MIN else np.maximum)(a, b)
            return _ieee_min_max(op, a, b, result) if dtype.is_float else result
    if op is ReduceOp.BAND:
        return np.bitwise_and(a, b)
    if op is ReduceOp.BOR:
        return np.bitwise_or(a, b)
    if op is ReduceOp.BXOR:
        return np.bitwise_xor(a, b)
    logical = {ReduceOp.LAND: np.logical_and, ReduceOp.LOR: np.logical_or,
               ReduceOp.LXOR: np.logical_xor}[op]
    return logical(a != 0, b != 0).astype(a.dtype)
