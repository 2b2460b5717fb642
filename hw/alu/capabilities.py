# Ref: MPI 4.0 §6.9.2 (predefined reduction operations and the types each is defined on).
"""The (op, type) pairs a ReductionALU build computes: every pair MPI defines, a set of them
checked, and the per-type op masks the ALU block's ``OPS_<TYPE>`` registers report.

A build leaves pairs out to save their units (:class:`~.reduction.ReductionALU`); the
core, the engine, the simulated cluster and the driver read the same set through these
functions.
"""

from ..ops import DType, ReduceOp, op_supported_for

__all__ = ["all_capabilities", "check_capabilities", "capability_masks"]


def all_capabilities():
    """Every (op, dtype) pair MPI defines: 10 ops on 8 integer types, 4 on 4 float types."""
    return frozenset((op, dtype) for dtype in DType for op in ReduceOp
                     if op_supported_for(op, dtype))


def check_capabilities(capabilities):
    """``capabilities`` as a frozenset of (ReduceOp, DType), checked; None means all."""
    if capabilities is None:
        return all_capabilities()
    capabilities = frozenset(capabilities)
    for pair in capabilities:
        if (not isinstance(pair, tuple) or len(pair) != 2
                or not isinstance(pair[0], ReduceOp) or not isinstance(pair[1], DType)):
            raise TypeError(f"capabilities must hold (ReduceOp, DType) pairs, not {pair!r}")
        if not op_supported_for(*pair):
            raise ValueError(f"capability {pair!r} is undefined in MPI: floating-point types "
                             f"take only sum, prod, min and max")
    return capabilities


def capability_masks(capabilities):
    """Per DType, the mask of ops computed on it (bit k = ReduceOp k): the ALU block's
    OPS_<TYPE> registers."""
    capabilities = check_capabilities(capabilities)
    return {dtype: sum(1 << op.value for op in ReduceOp if (op, dtype) in capabilities)
            for dtype in DType}
