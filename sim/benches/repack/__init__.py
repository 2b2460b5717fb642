"""The repack array's bench: its cocotb tests (:mod:`~nicoll.sim.benches.repack.bench`), the
driver of the Verilog top (:mod:`~nicoll.sim.benches.repack.tb`) and one all-to-all(-v) on the
array with its checks (:mod:`~nicoll.sim.benches.repack.exchange`); run by
``tests/test_repack_cocotb.py``."""

__all__ = []
