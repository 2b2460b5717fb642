"""cocotb benches of single blocks under Verilator, one folder per bench (``alu``, ``csr``,
``barrier``, ``repack``): its cocotb tests in ``bench.py`` and their helpers beside them.  The
pytest function that builds a bench's design and runs it is ``tests/test_<bench>_cocotb.py``."""

__all__ = []
