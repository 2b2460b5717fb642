"""Barriers through the network (seed 004) on a cluster's nodes: :class:`ClusterBarrier`
programs the barrier tree into every node, keeps the number of the next barrier, and runs one
barrier from a common start cycle (its arguments checked before anything is started, each
node's completion armed at an exact cycle, the wait for every release, the root's stamps).
"""

import numbers

from nicoll.hw.tree import BarrierTree

from ..driver.barrier import MODES
from ..errors import NicollError
from .results import BarrierResult, CallStats
from .timing import ARM_ACCESSES, check_armed_in_time, poll_pause, start_cycle

__all__ = ["ClusterBarrier", "check_barrier_args"]

#: Barrier numbers wrap at 16 bits (every notice carries one).
_SEQ_MASK = 0xFFFF


class ClusterBarrier:
    """The barrier units of ``devices`` (one Device per rank): the tree they are programmed
    with (``tree``, None until configured) and the number of the next barrier (``seq``).
    ``timed``: the backend counts cycles (a simulator), so a barrier's release cycles are
    measured; the device model's are not."""

    def __init__(self, devices, *, timed):
        self._devices = devices
        self._timed = timed
        self.nodes = len(devices)
        self.tree = None
        self.seq = 0

    def configure(self, tree=None):
        """Program the barrier tree into every node and start a region at barrier 0 (see
        :meth:`Cluster.configure_barrier`)."""
        if tree is None:
            tree = BarrierTree.binary(self.nodes)
        elif not isinstance(tree, BarrierTree):
            tree = BarrierTree(tree)
        if len(tree) != self.nodes:
            raise NicollError(f"the barrier tree has {len(tree)} ranks, the cluster "
                              f"{self.nodes}")
        self.tree = None
        for rank, dev in enumerate(self._devices):
            dev.barrier.configure(tree.parent(rank), tree.children(rank), tree.route(rank))
        for dev in self._devices:
            dev.barrier.start_ac_region("normal", seq=0)
        self.tree = tree
        self.seq = 0

    def forget(self):
        """After a reset of the nodes: no tree is programmed, the next barrier is 0."""
        self.tree = None
        self.seq = 0

    def advance(self, barriers):
        """Count ``barriers`` barriers passed by a collective's barrier steps."""
        self.seq = (self.seq + barriers) & _SEQ_MASK

    def run(self, arrive, mode, m, c, estimate):
        """One barrier (see :meth:`Cluster.barrier`); returns its :class:`BarrierResult` and
        the call's :class:`CallStats`."""
        arrive, sub, m, c, estimate = check_barrier_args(self.nodes, arrive, mode, m, c, estimate)
        if self.tree is None:
            self.configure()
        root = self._devices[self.tree.root].barrier
        root.set_mode(mode, sub)
        root.set_ac_parameter(m, c)
        root.set_estimate(estimate)
        root.check()            # m, c or mode wrong for this tree: nothing is started yet
        seq = self.seq

        # Completions at exact cycles: each node is armed to signal done at start + arrive[r].
        start = start_cycle(self._devices[self.tree.root], ARM_ACCESSES, self.nodes)
        for rank, dev in enumerate(self._devices):
            dev.barrier.done(seq, at=start + arrive[rank])
        check_armed_in_time(root, start, "the completions")

        budget = (max(arrive) + (c if mode == "ac" and sub != "count" else 0)
                  + 2000 + 200 * self.nodes)
        next_seq = (seq + 1) & _SEQ_MASK
        status = {}
        for rank in [self.tree.root] + [r for r in range(self.nodes) if r != self.tree.root]:
            dev = self._devices[rank]
            while True:
                status[rank] = st = dev.barrier.status()
                if st.seq == next_seq:
                    break
                now = root.cycles()
                self._devices[self.tree.root].idle(poll_pause(now - start))
                if now - start > budget:
                    raise self._not_released(seq, next_seq, budget)
        self.seq = next_seq

        aborted = frozenset(r for r, st in status.items() if st.aborted and st.abort_seq == seq)
        estimates = {r: self._devices[r].barrier.abort_estimate() for r in sorted(aborted)}
        if root.stamp_seq() != seq:
            raise NicollError(f"the root's stamps belong to barrier {root.stamp_seq()}, "
                              f"not {seq}")
        stamps = [None if v is None else v - start for v in root.get_ac_value()]
        for dev in self._devices:
            dev.barrier.check()
        if not self._timed:
            stats = CallStats(cycles=None)
        else:
            released = [dev.barrier.released_at() - start for dev in self._devices]
            stats = CallStats(cycles=max(released), release_cycles=released)
        return BarrierResult(seq=seq, aborted=aborted, estimates=estimates, s=stamps[0],
                             mt=stamps[1] if m else None, e=stamps[2]), stats

    def _not_released(self, seq, next_seq, budget):
        """The error of a barrier whose budget ran out: every rank not released (each with
        the barrier it is in) and every rank's reported errors, read once, at the end."""
        behind = {}
        for rank, dev in enumerate(self._devices):
            at = dev.barrier.status().seq
            if at != next_seq:
                behind[rank] = at
        errors = {r: d.barrier.errors() for r, d in enumerate(self._devices)}
        errors = {r: e for r, e in errors.items() if e}
        where = ", ".join(f"rank {r} (in barrier {at})" for r, at in behind.items())
        return NicollError(f"barrier {seq} was not released within {budget} cycles of its "
                           f"start at {len(behind)} of {self.nodes} ranks: "
                           f"{where or 'none (all were released as the budget ran out)'}; "
                           f"errors reported: {errors or 'none'}")


def check_barrier_args(nodes, arrive, mode, m, c, estimate):
    """The arguments of :meth:`Cluster.barrier` checked (NicollError naming the first one
    wrong): ``(arrive, sub, m, c, estimate)`` with ``arrive`` a list of ints, ``sub`` the AC
    sub-mode's name the thresholds given choose, and m, c, estimate ints (0 for None).
    The unit's own checks of m and c against the tree (ERRORS m_range, c_zero) are not made
    here."""
    if mode not in MODES:
        raise NicollError(f"barrier mode must be one of {', '.join(map(repr, MODES))}, "
                          f"not {mode!r}")
    if arrive is None:
        arrive = [0] * nodes
    else:
        try:
            arrive = list(arrive)
        except TypeError:
            raise NicollError(f"arrive must be a list of {nodes} cycle counts, "
                              f"not {arrive!r}") from None
        if len(arrive) != nodes:
            raise NicollError(f"arrive must give a cycle for each of the {nodes} "
                              f"ranks, not {len(arrive)}")
        for rank, t in enumerate(arrive):
            if (not isinstance(t, numbers.Integral) or isinstance(t, bool)
                    or not 0 <= t < 1 << 48):
                raise NicollError(f"arrive[{rank}] must be a cycle count between 0 and "
                                  f"2**48, not {t!r}")
        arrive = [int(t) for t in arrive]
    for name, value, bits in (("m", m, 16), ("c", c, 64), ("estimate", estimate, 64)):
        if value is not None and (not isinstance(value, numbers.Integral)
                                  or isinstance(value, bool)
                                  or not 0 <= value < 1 << bits):
            raise NicollError(f"{name} must be an int between 0 and 2**{bits} - 1, "
                              f"not {value!r}")
    if mode == "ac":
        if m is None and c is None:
            raise NicollError("mode 'ac' needs a count threshold m, a time threshold c, "
                              "or both")
        sub = {(True, False): "count", (False, True): "time", (True, True): "both"}[
            m is not None, c is not None]
    else:
        if c is not None:
            raise NicollError(f"the time threshold c applies to mode 'ac' only, "
                              f"not {mode!r}")
        if m is not None and mode == "normal":
            raise NicollError("the count threshold m applies to modes 'ac' and "
                              "'collect' only, not 'normal'")
        sub = "count"
    return arrive, sub, int(m or 0), int(c or 0), int(estimate or 0)
