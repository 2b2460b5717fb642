"""One rank's collectives, posted by the rank alone on its own node (issue 21).

Each rank compiles the collective from what every rank knows alike (N, the element count and
type, the op, the algorithm: :mod:`nicoll.schedule`), takes its own schedule, loads only its
own input and posts that schedule on its own engine.  It then asks the server to start
(:meth:`nicoll.remote.SocketTransport.start`): when the last rank has posted, the server arms
every engine for one start cycle, so the collective runs in whatever order the ranks came,
with the cycle counts of a :class:`nicoll.Cluster`; each rank then reads only its own result.
"""

import time

import numpy as np

from .. import schedule as _schedule
from ..cluster.collective_run import load_input, read_output
from ..errors import NicollError

__all__ = ["Rank", "DEFAULT_BUDGET_S"]

#: Seconds a rank waits for its engine to finish a collective, by default.
DEFAULT_BUDGET_S = 60.0
#: Cycles a rank lets the backend run between two looks at its engine.
_POLL_CYCLES = 64


class Rank:
    """Rank ``device.node_id`` of a cluster of ``nodes`` ranks, driving its own node.

    :param device: the rank's :class:`nicoll.Device` (:func:`nicoll.remote.connect`).
    :param nodes: the cluster's ranks.
    :param budget_s: seconds each collective may take on this rank before it ends with
        NicollError naming the step its engine waits at.
    """

    def __init__(self, device, nodes, *, budget_s=DEFAULT_BUDGET_S):
        if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes:
            raise NicollError(f"nodes must be a positive integer, not {nodes!r}")
        if not hasattr(device.transport, "start"):
            raise NicollError("Rank needs a device from nicoll.remote.connect (its transport "
                              "meets the other ranks at the server)")
        if not device.node_id < nodes:
            raise NicollError(f"the device is node {device.node_id}, outside {nodes} ranks")
        if not isinstance(budget_s, (int, float)) or isinstance(budget_s, bool) or budget_s <= 0:
            raise NicollError(f"budget_s must be a positive number of seconds, not {budget_s!r}")
        self.device = device
        self.rank = device.node_id
        self.nodes = nodes
        self.budget_s = float(budget_s)

    # -- the collectives -------------------------------------------------------------------

    def allreduce(self, x, op="sum", algorithm="recursive_halving", **options):
        """The reduction of every rank's ``x`` (each rank passes its own, of one shape)."""
        x = _array(x)
        plan = _schedule.allreduce(self.nodes, x.size, x.dtype, op, algorithm, **options)
        return self.run(plan, x).reshape(x.shape)

    def reduce(self, x, root=0, op="sum", algorithm="recursive_halving", **options):
        """The reduction at ``root``; None on the other ranks."""
        x = _array(x)
        plan = _schedule.reduce(self.nodes, x.size, x.dtype, op, root, algorithm, **options)
        out = self.run(plan, x)
        return None if out is None else out.reshape(x.shape)

    def reduce_scatter(self, x, counts=None, op="sum", algorithm="recursive_halving",
                       **options):
        """Chunk ``rank`` of the reduction of every rank's ``x`` (flat); ``counts``: the
        chunks' element counts, one per rank, the same on every rank (None: numpy's
        ``array_split`` sizes)."""
        x = _array(x)
        plan = _schedule.reduce_scatter(self.nodes, x.size, x.dtype, op, counts, algorithm,
                                        **options)
        return self.run(plan, x)

    def alltoallv(self, x, counts, **options):
        """``x`` (flat) holds this rank's blocks for ranks 0..N-1 back to back; returns the
        blocks from ranks 0..N-1 back to back.  ``counts[i][j]``: the elements rank i sends
        rank j, the whole table, the same on every rank (an MPI program gathers it from each
        rank's send counts)."""
        x = _array(x)
        plan = _schedule.alltoallv(counts, x.dtype, "pairwise", **options)
        if plan.input_counts[self.rank] != x.size:
            raise NicollError(f"alltoallv: rank {self.rank} sends {plan.input_counts[self.rank]} "
                              f"elements by the counts table, but x holds {x.size}")
        return self.run(plan, x)

    def allgather(self, x, algorithm="recursive_halving", **options):
        """Every rank's ``x`` (flat, all of one size), concatenated in rank order."""
        x = _array(x)
        plan = _schedule.allgather(self.nodes, x.size, x.dtype, algorithm, **options)
        return self.run(plan, x)

    def alltoall(self, x, algorithm="pairwise", **options):
        """``x`` (flat) cut into N equal blocks, block j to rank j; returns the blocks
        received, in rank order."""
        x = _array(x)
        if x.size % self.nodes:
            raise NicollError(f"alltoall cuts each array into {self.nodes} equal blocks; "
                              f"{x.size} elements do not divide by {self.nodes}")
        plan = _schedule.alltoall(self.nodes, x.size // self.nodes, x.dtype, algorithm,
                                  **options)
        return self.run(plan, x).reshape(x.shape)

    def barrier(self):
        """One barrier through the barrier units (seed 004, normal mode: released when every
        rank has arrived); returns once this rank's unit is released.  The server programs
        the barrier tree when it starts; every rank counts the barriers from there, so the
        ranks must take part in every one."""
        unit = self.device.barrier
        seq = unit.status().seq
        unit.done(seq)
        deadline = time.monotonic() + self.budget_s
        while True:
            status = unit.status()
            if status.seq != seq:
                return
            if status.error:
                unit.check()
            if time.monotonic() > deadline:
                raise NicollError(f"rank {self.rank}: barrier {seq} was not released within "
                                  f"{self.budget_s} s (has every rank arrived?)")
            self.device.transport.idle(_POLL_CYCLES)
            time.sleep(0.001)

    # -- posting and waiting ---------------------------------------------------------------

    def run(self, plan, x):
        """Post this rank's schedule of ``plan`` with input ``x`` on its node, start it, wait
        for it (at most :attr:`budget_s`) and return this rank's output (1-D), or None for a
        rank that gets none."""
        schedule = plan.schedules[self.rank]
        if any(step.barrier for step in schedule.steps):
            raise NicollError(f"{plan.collective} ({plan.algorithm}) has barrier steps, which "
                              f"need the cluster's barrier tree; run it on a nicoll.Cluster")
        dev = self.device
        # Everything the node would refuse is refused before anything is written.
        dev.engine.load(schedule, plan.op, plan.dtype if plan.op else None)
        load_input(dev, schedule, x)
        started = time.monotonic()
        dev.transport.start(self.budget_s)
        self._wait(plan, self.budget_s - (time.monotonic() - started))
        return read_output(dev, schedule, plan.output_counts[self.rank], plan.dtype)

    def _wait(self, plan, budget_s):
        engine = self.device.engine
        deadline = time.monotonic() + budget_s
        while True:
            status = engine.status()
            errors = engine.errors()
            if errors:
                raise NicollError(f"rank {self.rank}: {plan.collective} ({plan.algorithm}) "
                                  f"stopped at step {status.step} of {status.queued} with "
                                  f"{', '.join(sorted(errors))}")
            if status.done:
                return
            if time.monotonic() > deadline:
                raise NicollError(f"rank {self.rank}: {plan.collective} ({plan.algorithm}) did "
                                  f"not finish within {self.budget_s} s: its engine waits at "
                                  f"step {status.step} of {status.queued} (has every rank "
                                  f"posted it?)")
            self.device.transport.idle(_POLL_CYCLES)
            time.sleep(0.001)


def _array(x):
    x = np.asarray(x)
    if x.ndim == 0:
        x = x.reshape(1)
    return x
