"""The device model: the register map's semantics in Python, the golden and fastest backend.

:class:`~nicoll.model.node.ModelNode` is one node: its register file, its device memory and
the cycle counter the nodes of a cluster share, reached through the same transport interface
as the simulators.  Its blocks are zero-latency models of the gateware's, shared by the nodes
of one cluster: the collective engines (:mod:`~nicoll.model.engine`), the barrier units
(:mod:`~nicoll.model.barrier`) and the repack units with their control tree
(:mod:`~nicoll.model.repack`).
"""

__all__ = []
