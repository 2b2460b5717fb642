"""The ReductionALU's bench: its cocotb tests (:mod:`~nicoll.sim.benches.alu.bench`) check
every (op, dtype) pair of a build under Verilator against :func:`nicoll.ops.combine`; run by
``tests/test_alu_cocotb.py``."""

__all__ = []
