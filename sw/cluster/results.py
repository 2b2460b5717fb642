"""What a cluster's calls return and record: :class:`BarrierResult` (what a barrier returns),
:class:`CallStats` (``Cluster.last``), :class:`AggregatePlan` (``Cluster.last_plan`` after an
aggregate exchange) and :class:`ActivityTrace` with its :data:`TRACE_LANES` (``Cluster.trace``).
"""

from dataclasses import dataclass, field

__all__ = ["BarrierResult", "CallStats", "AggregatePlan", "ActivityTrace", "TRACE_LANES"]


@dataclass(frozen=True)
class BarrierResult:
    """What :meth:`Cluster.barrier` returns.  Cycle values count from the call's start (the
    cycle at which ``arrive`` is 0) and are those the root recorded: a completion is stamped
    when its notice reaches the root, so they include its way up the tree."""
    #: The barrier's sequence number.
    seq: int
    #: Ranks an early release aborted (mode "ac"); empty otherwise.
    aborted: frozenset
    #: The estimate each aborted rank received, by rank.
    estimates: dict
    #: First completion, m-th completion (None without m) and last (None if the barrier
    #: was released before everyone finished).
    s: int | None
    mt: int | None
    e: int | None


@dataclass(frozen=True)
class CallStats:
    """Figures of the last cluster call (``Cluster.last``)."""
    #: Cycles from the call's start until every rank has seen its end, from the hardware
    #: counters; None on the model backend, whose clock only orders events.
    cycles: int | None
    #: For a barrier: per rank, the cycle (from the start) it saw the release; None on the
    #: model backend.
    release_cycles: list | None = None
    #: For a collective, per rank, from the engine's counters: payload bytes sent and
    #: received, packets sent (data and clear-to-send) and received, ALU beats.
    bytes_sent: list | None = None
    bytes_received: list | None = None
    packets: list | None = None
    packets_received: list | None = None
    alu_beats: list | None = None
    #: For a collective, per rank, cycles from the start until its engine finished (from
    #: FINISHED_AT); None on the model backend.
    rank_cycles: list | None = None
    #: On a cluster opened with ``faults=``: what the network injected and dropped during
    #: the call (:class:`nicoll.faults.FaultCounts`); None otherwise.
    faults: object = None
    #: With ``retries``: the tries the call took, and each failed try's error.
    tries: int = 1
    failed_tries: tuple = ()


#: The lanes of an activity trace: what each node's network ports and ALU did, beat by beat.
TRACE_LANES = ("send", "receive", "reduce")


@dataclass
class ActivityTrace:
    """What every node did, cycle by cycle, during the calls made inside ``with cl.trace()``.

    Filled when the block ends.  ``lanes[rank][lane]`` lists the ``(first, end)`` cycle spans
    (end exclusive) in which the lane moved a beat each cycle: ``"send"`` a beat of a packet
    from the node into the switch, ``"receive"`` one from the switch into the node,
    ``"reduce"`` an operand pair into its ALU.  Cycles count from ``start``, the common start
    cycle of the last collective of the block (the cycle ``cl.last.rank_cycles`` count from).
    """
    lanes: dict = field(default_factory=dict)
    start: int | None = None

    def busy_cycles(self, rank, lane):
        """Cycles in which ``lane`` of ``rank`` moved a beat."""
        return sum(end - first for first, end in self.lanes[rank][lane])

    def overlap_cycles(self, rank, first_lane, second_lane):
        """Cycles in which both lanes of ``rank`` moved a beat (seed 000's overlap)."""
        a, b = self.lanes[rank][first_lane], self.lanes[rank][second_lane]
        total = i = j = 0
        while i < len(a) and j < len(b):
            lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
            total += max(0, hi - lo)
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return total


@dataclass(frozen=True)
class AggregatePlan:
    """What ``Cluster.last_plan`` holds after an aggregate exchange (seed 003)."""
    collective: str
    #: The subgroups and the cost model's figures (:class:`~nicoll.plan.repack.RepackPlan`).
    repack: object
    #: Each rank's :class:`~nicoll.driver.repack.RankLayout` in device memory.
    layouts: tuple
    algorithm: str = "aggregate"
