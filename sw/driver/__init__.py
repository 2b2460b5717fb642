"""The driver: one node, through the layers of the block diagram, bottom up.

A transport per node (:mod:`~nicoll.driver.transport`: 32-bit register words and device
memory over the bus, one implementation per backend), the register access layer built from
the generated register map (:mod:`~nicoll.driver.regs`), and the
:class:`~nicoll.driver.device.Device` (given as ``nicoll.Device``), which opens a node, checks
its blocks' IDs and holds a driver per block: the collective engine
(:mod:`~nicoll.driver.engine`), the barrier unit (:mod:`~nicoll.driver.barrier`) and the
repack units with the memory layout of an aggregate exchange (:mod:`~nicoll.driver.repack`).
The same code drives the device model, the Amaranth simulation and Verilator.
"""

__all__ = []
