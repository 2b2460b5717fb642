"""The bench of trees of barrier units: its cocotb tests
(:mod:`~nicoll.sim.benches.barrier.bench`), the driver of the Verilog top
(:mod:`~nicoll.sim.benches.barrier.tb`) and the golden model of a tree's decision
(:mod:`~nicoll.sim.benches.barrier.golden`); run by ``tests/test_barrier_cocotb.py``."""

__all__ = []
