"""The CSR slave's bench: its cocotb tests (:mod:`~nicoll.sim.benches.csr.bench`) drive one
NicCore's AXI4-Lite slave under Verilator against the device model; run by
``tests/test_csr_cocotb.py``."""

__all__ = []
