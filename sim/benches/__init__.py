"""cocotb benches of single blocks, run under Verilator by the tests in ``tests/``."""

__all__ = []
