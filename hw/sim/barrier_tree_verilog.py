"""Verilog of a :class:`~.barrier_tree.BarrierTreeTop` for the cocotb bench
``nicoll.sim.benches.barrier``: :func:`barrier_tree_verilog` writes the unit once as module
:data:`UNIT_MODULE` and the top as module :data:`TOPLEVEL`, whose units are instances of it,
so Verilator compiles one unit however many the tree holds.
"""

from .barrier_tree import BarrierTreeTop


__all__ = ["TOPLEVEL", "UNIT_MODULE", "barrier_tree_verilog"]

#: Verilog module name of :func:`barrier_tree_verilog`.
TOPLEVEL = "nicoll_barrier_tree"
#: Verilog module name of the one unit module every unit instantiates there.
UNIT_MODULE = "nicoll_barrier_unit"


def barrier_tree_verilog(units, **kwargs):
    """Verilog of a :class:`BarrierTreeTop` (same arguments) as module ``nicoll_barrier_tree``,
    preceded by the one unit module (``nicoll_barrier_unit``) all its units instantiate."""
    from .verilog import simulation_verilog
    top = BarrierTreeTop(units, unit_module=UNIT_MODULE, **kwargs)
    unit = simulation_verilog(top.unit_prototype, UNIT_MODULE, wait=False)
    tree = simulation_verilog(top, TOPLEVEL, wait=False)
    return unit.result() + "\n" + tree.result()
