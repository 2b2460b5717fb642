"""nicoll simulation: the Amaranth and Verilator cluster backends, the cocotb benches and the
simulator measurements (``python -m nicoll.sim.speed``)."""

__all__ = []
