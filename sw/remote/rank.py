"""One rank's collectives, posted by the rank alone on its own node (issue 21).

Each rank compiles the collective from what every rank knows alike (N, the element count and
type, the op, the algorithm: :mod:`nicoll.schedule`), takes its own schedule, loads only its
own input and posts that schedule on its own engine.  It then asks the server to start
(:meth:`nicoll.remote.SocketTransport.start`): when the last rank has posted, the server arms
every engine for one start cycle, so the collective runs in whatever order the ranks came,
with the cycle counts of a :class:`nicoll.Cluster`; each rank then reads only its own result.

Barriers (seed 004) go through the NICs' barrier units: each rank signals done on its own
node when it calls :meth:`Rank.barrier` or :meth:`Rank.ac_barrier` and waits for its unit to
be released.  The root's unit decides by the mode the server programmed into it for that
barrier (:class:`~nicoll.remote.server.ClusterServer`): normal (when every rank has
arrived) or AC (early, by a count threshold m and/or a time threshold c, aborting the ranks
that have not arrived).

A rank whose client dies (:class:`~nicoll.remote.server.ClusterServer`, faults) ends the
others' next collective at its start, and a normal barrier they wait in, at once, with
NicollError naming it; a collective already started runs to its end.
"""

import time
from dataclasses import dataclass

import numpy as np

from .. import schedule as _schedule
from ..cluster.barrier_run import check_barrier_args
from ..cluster.collective_run import load_input, read_output
from ..driver.barrier import MODES, SUB_MODES
from ..errors import NicollError

__all__ = ["Rank", "RankBarrierResult", "DEFAULT_BUDGET_S"]

#: Seconds a rank waits for its engine to finish a collective, by default.
DEFAULT_BUDGET_S = 60.0
#: Cycles a rank lets the backend run between two looks at its engine.
_POLL_CYCLES = 64
#: Barrier numbers wrap at 16 bits (every notice carries one).
_SEQ_MASK = 0xFFFF


@dataclass(frozen=True)
class RankBarrierResult:
    """What :meth:`Rank.ac_barrier` returns to one rank: what that rank can know from its
    own node.  The names are those of :class:`nicoll.cluster.results.BarrierResult` (what
    :meth:`nicoll.Cluster.barrier` returns) where the meaning is the same, but cycle values
    are cycles of the cluster's shared clock (every node's CYCLES counter), not counted from
    a call's start: ranks in processes of their own have no common start.  Only the root
    (rank :attr:`root` is True) keeps the abort log and the stamps; another rank's unit
    records only whether it was itself aborted."""
    #: The barrier's sequence number.
    seq: int
    #: This rank, and whether it is the barrier tree's root.
    rank: int
    root: bool
    #: The thresholds the barrier ran with (None: not given).
    m: int | None
    c: int | None
    #: The release came before every rank had finished (seed 004's early release): known at
    #: the root (its abort log) and at an aborted rank (True); None at the others.
    early: bool | None
    #: Ranks the early release aborted (empty if none): at the root, from its abort log,
    #: read right after the release (the log keeps the last ``log_depth`` early releases);
    #: None at the other ranks.
    aborted: frozenset | None
    #: This rank was aborted: the barrier was released before its completion counted, so it
    #: goes on with :attr:`estimate` in place of its own result.
    was_aborted: bool
    #: The estimate this rank's abort carried; None if it was not aborted (or, after several
    #: barriers in a row released without it, for all but the last of them).
    estimate: int | None
    #: At the root: the cycles of the first completion, the m-th (None without m) and the
    #: last (None after an early release), as stamped when the notices reached it; None at
    #: the other ranks, or when a later barrier has replaced the root's stamps.
    s: int | None
    mt: int | None
    e: int | None
    #: The cycle this rank signaled done; None if the barrier had been released without it
    #: before it called.
    arrived_at: int | None
    #: The cycle this rank's unit left the barrier; None if it has left a later one since.
    released_at: int | None


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
        # The barrier this rank takes part in next, counted by the rank itself: an AC barrier
        # released early moves an aborted rank's unit on before the rank calls it, so the
        # unit alone cannot say which barrier a call is for.  Read here, so every rank's
        # Rank must exist before any rank enters a barrier (Comm makes sure).
        self._seq = device.barrier.status().seq

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
        the barrier tree when it starts; every rank counts the barriers (normal and AC) from
        its Rank's creation, so the ranks must take part in every one, in the same order and
        of the same kind."""
        seq = self._seq
        if self._left(seq):
            raise NicollError(f"rank {self.rank}: barrier {seq} was released without this "
                              f"rank, as an AC barrier is; every rank must make the same "
                              f"barrier calls (ac_barrier here, as the others did?)")
        self.device.transport.barrier(seq, MODES["normal"], SUB_MODES["count"], 0, 0, 0)
        self.device.barrier.done(seq)
        self._wait_release(seq, normal=True)
        self._seq = (seq + 1) & _SEQ_MASK

    def ac_barrier(self, m=None, c=None, estimate=None):
        """One barrier through the barrier units in AC mode (seed 004, mode 1): this rank
        arrives when it calls; the root releases every rank early once ``m`` ranks have
        arrived and/or ``c`` cycles have passed since the first arrived (give m, c or both:
        the count-only, time-only or both sub-modes), and aborts the ranks that have not
        arrived, sending each ``estimate`` (default 0) to go on with.

        Every rank must call it for the same barrier with the same ``m``, ``c`` and
        ``estimate``: only the root's unit decides, by the values the server programs into
        it when the first rank asks (a rank's own transport reaches only its own node, and
        the root's rank may be the straggler), and a rank that asks for other values is
        refused, naming both.  A rank aborted before it calls returns at once (its unit has
        already left the barrier; its values are then not checked).  The barriers count as
        in :meth:`barrier`: every rank takes part in every one.

        :param m: count threshold, 1 .. N ranks.
        :param c: time threshold, cycles from the first completion, at least 1.
        :param estimate: the value the root sends to every aborted rank, 0 .. 2**64 - 1.
        :returns: :class:`RankBarrierResult`, what this rank's node can tell.
        :raises NicollError: an argument the unit would refuse (before anything is
            written), other values than another rank's, or no release within
            :attr:`budget_s`.
        """
        _, sub, m_value, c_value, estimate = check_barrier_args(self.nodes, None, "ac", m, c,
                                                                estimate)
        # The unit's own checks (ERRORS m_range, c_zero), made here so nothing is written.
        if m is not None and not 1 <= m_value <= self.nodes:
            raise NicollError(f"m must be between 1 and the {self.nodes} ranks of the barrier "
                              f"tree, not {m!r}")
        if c is not None and c_value == 0:
            raise NicollError(f"c must be at least 1 cycle, not {c!r}")
        unit = self.device.barrier
        seq = self._seq
        arrived = None
        if not self._left(seq):
            self.device.transport.barrier(seq, MODES["ac"], SUB_MODES[sub], m_value, c_value,
                                          estimate)
            arrived = unit.cycles()
            # A done in the cycle of the abort, or after it, is dropped by the unit (counted
            # in STALE): the status read below then shows this rank aborted.
            unit.done(seq)
        self._wait_release(seq)
        self._seq = (seq + 1) & _SEQ_MASK
        return self._ac_result(seq, m, c, arrived)

    def ac_aborted(self):
        """Whether the barrier this rank is to take part in next has been released without
        it (seed 004's forced abort: the others reached an AC barrier's threshold first).
        A rank can look while it works and stop early; its :meth:`ac_barrier` then returns
        at once with the estimate."""
        return self._left(self._seq)

    def _left(self, seq):
        """Whether this rank's unit has left barrier ``seq`` although this rank has not
        signaled done for it: a unit leaves a barrier only finished or aborted."""
        status = self.device.barrier.status()
        ahead = (status.seq - seq) & _SEQ_MASK
        if ahead == 0:
            return False
        if ahead >= 0x8000 or not status.aborted:
            raise NicollError(f"rank {self.rank}: its barrier unit is in barrier "
                              f"{status.seq}, but this rank has taken part in barriers only "
                              f"up to {(seq - 1) & _SEQ_MASK}; every rank must take part in "
                              f"every barrier from its Rank's creation")
        return True

    def _wait_release(self, seq, normal=False):
        """Wait (at most :attr:`budget_s`) until this rank's unit has left barrier ``seq``.
        A ``normal`` barrier's wait ends at once when the server reports a rank of this run
        whose client died (it cannot be released without it; an AC barrier can)."""
        unit = self.device.barrier
        transport = self.device.transport
        deadline = time.monotonic() + self.budget_s
        while True:
            status = unit.status()
            if status.seq != seq:
                return
            if status.error:
                unit.check()
            if normal and transport.gone:
                gone = list(transport.gone)
                who = (f"rank {gone[0]} went away (its client's connection" if len(gone) == 1
                       else f"ranks {gone} went away (their clients' connections")
                raise NicollError(f"rank {self.rank}: barrier {seq} cannot be released: {who} "
                                  f"ended without closing) during this run")
            if time.monotonic() > deadline:
                raise NicollError(f"rank {self.rank}: barrier {seq} was not released within "
                                  f"{self.budget_s} s (has every rank arrived?)")
            transport.idle(_POLL_CYCLES)
            time.sleep(0.001)

    def _ac_result(self, seq, m, c, arrived):
        """What this rank's node tells of AC barrier ``seq``, which it has left."""
        unit = self.device.barrier
        status = unit.status()
        released_at = unit.released_at()
        if unit.status().seq != status.seq or status.seq != (seq + 1) & _SEQ_MASK:
            released_at = None              # a later barrier has been released since
        # Not arrived: its unit left the barrier without its done, so it was aborted (in seq,
        # and maybe in later ones: the unit keeps the last abort's number only).
        was_aborted = arrived is None or (status.aborted and status.abort_seq == seq)
        estimate = (unit.abort_estimate() if was_aborted and status.abort_seq == seq
                    else None)
        root = unit.is_root()
        early, aborted, stamps = (True if was_aborted else None), None, (None, None, None)
        if root:
            logged = unit.abort_log_entry(seq)
            aborted = frozenset(logged or ())
            early = logged is not None
            if unit.stamp_seq() == seq:
                values = unit.get_ac_value()
                if unit.stamp_seq() == seq:
                    stamps = (values[0], values[1] if m is not None else None, values[2])
        return RankBarrierResult(seq=seq, rank=self.rank, root=root, m=m, c=c, early=early,
                                 aborted=aborted, was_aborted=was_aborted, estimate=estimate,
                                 s=stamps[0], mt=stamps[1], e=stamps[2], arrived_at=arrived,
                                 released_at=released_at)

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
