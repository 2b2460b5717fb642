"""Reduction operations and element types: the codes the gateware decodes and the host packs.

One definition for both sides: the ALU decodes :class:`ReduceOp` and :class:`DType` values,
the driver and the device model look up the same members by name (``"sum"``, numpy dtypes),
and the ALU block's capability registers carry one bit per member, bit index = value.

Ref: MPI 4.0 §6.9.2 (predefined reduction operations and the types each applies to).
"""

from amaranth.lib import enum

__all__ = ["ReduceOp", "DType", "INTEGER_OPS", "FLOAT_OPS", "INTEGER_TYPES", "FLOAT_TYPES",
           "element_bits", "op_by_name", "dtype_by_name", "op_supported_for"]


class ReduceOp(enum.Enum, shape=4):
    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3
    BAND = 4
    BOR = 5
    BXOR = 6
    LAND = 7
    LOR = 8
    LXOR = 9

    @property
    def mpi_name(self):
        """The lower-case name the public API takes ("sum", "band", ...)."""
        return self.name.lower()


class DType(enum.Enum, shape=4):
    INT8 = 0
    INT16 = 1
    INT32 = 2
    INT64 = 3
    UINT8 = 4
    UINT16 = 5
    UINT32 = 6
    UINT64 = 7
    FLOAT16 = 8
    BFLOAT16 = 9
    FLOAT32 = 10
    FLOAT64 = 11

    @property
    def numpy_name(self):
        """Name numpy (or ml_dtypes, for bfloat16) gives the type."""
        return self.name.lower()

    @property
    def is_float(self):
        return self in FLOAT_TYPES

    @property
    def is_signed(self):
        return self.name.startswith("INT") or self.is_float

    @property
    def bits(self):
        return element_bits(self)


INTEGER_TYPES = (DType.INT8, DType.INT16, DType.INT32, DType.INT64,
                 DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64)
FLOAT_TYPES = (DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64)
#: Ops MPI defines on integers: all ten.
INTEGER_OPS = tuple(ReduceOp)
#: Ops MPI defines on floating point; the bitwise and logical ones are undefined there.
FLOAT_OPS = (ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MIN, ReduceOp.MAX)

_BITS = {DType.INT8: 8, DType.INT16: 16, DType.INT32: 32, DType.INT64: 64,
         DType.UINT8: 8, DType.UINT16: 16, DType.UINT32: 32, DType.UINT64: 64,
         DType.FLOAT16: 16, DType.BFLOAT16: 16, DType.FLOAT32: 32, DType.FLOAT64: 64}


def element_bits(dtype):
    return _BITS[DType(dtype)]


def op_supported_for(op, dtype):
    """Whether MPI defines ``op`` on ``dtype`` (floats take only sum, prod, min, max)."""
    return ReduceOp(op) in (FLOAT_OPS if DType(dtype).is_float else INTEGER_OPS)


def op_by_name(name):
    """The ReduceOp for a public-API name; ValueError naming the allowed ones otherwise."""
    for op in ReduceOp:
        if op.mpi_name == name:
            return op
    raise ValueError(f"unknown reduction op {name!r}; ops are "
                     f"{', '.join(op.mpi_name for op in ReduceOp)}")


def dtype_by_name(name):
    """The DType for a numpy dtype name ("float32", "bfloat16"); ValueError otherwise."""
    for dtype in DType:
        if dtype.numpy_name == name:
            return dtype
    raise ValueError(f"unsupported element type {name!r}; types are "
                     f"{', '.join(d.numpy_name for d in DType)}")
