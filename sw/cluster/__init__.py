"""Cluster: N nicoll nodes on one backend, opened as Devices.

``nicoll.Cluster(nodes=8, backend="verilator")`` builds (or reuses a cached build of) the
simulated cluster, starts it, and opens every node through the same driver code whatever
the backend.  Use it as a context manager or call :meth:`Cluster.close`.

Collectives (:meth:`Cluster.allreduce`, ...) compile into per-rank schedules
(:mod:`nicoll.schedule`) and run on the nodes' engines (:mod:`nicoll.driver.engine`): each rank's
input goes into its device memory, its schedule into its engine's queue, every engine is
armed for one common start cycle, and the outputs are read back once every engine is done.

Modules
-------
- :mod:`~nicoll.cluster.cluster`: :class:`Cluster`, its lifetime (the backend, the devices,
  activity traces, close) and its public calls;
- :mod:`~nicoll.cluster.barrier_run`: the barrier tree programmed into the nodes and one
  barrier run from a common start cycle (seed 004);
- :mod:`~nicoll.cluster.collective_run`: the collectives' argument checks, the run of a
  compiled plan, the aggregate exchange (seed 003), the wait for the engines and its budget;
- :mod:`~nicoll.cluster.timing`: the common start cycle and the pause between polls;
- :mod:`~nicoll.cluster.results`: what the calls return and record (``BarrierResult``,
  ``CallStats``, ``AggregatePlan``, ``ActivityTrace``).
"""

from .cluster import Cluster
from .results import TRACE_LANES, ActivityTrace, AggregatePlan, BarrierResult, CallStats

__all__ = ["Cluster", "BarrierResult", "CallStats", "AggregatePlan", "ActivityTrace", "TRACE_LANES"]
