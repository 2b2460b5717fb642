"""Cluster: N nicoll nodes on one backend, opened as Devices.

``nicoll.Cluster(nodes=8, backend="verilator")`` builds (or reuses a cached build of) the
simulated cluster, starts it, and opens every node through the same driver code whatever
the backend.  Use it as a context manager or call :meth:`Cluster.close`.
"""

from dataclasses import dataclass
import numbers

from .barrier import MODES
from .config import BACKENDS, ClusterConfig, DEFAULT_MAX_NODES, DEFAULT_MEM_SIZE
from .device import Device
from .errors import NicollError
from .tree import BarrierTree

__all__ = ["Cluster", "BarrierResult", "CallStats"]

#: Barrier numbers wrap at 16 bits (every notice carries one).
_SEQ_MASK = 0xFFFF


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


class _ModelBackend:
    """The device model: one ModelNode per rank, nothing to start or stop."""

    def __init__(self, config):
        from .barrier_model import BarrierNetworkModel, ModelClock
        from .model import ModelNode
        self.clock = ModelClock()
        self.barrier = BarrierNetworkModel(self.clock, config.max_nodes)
        self._nodes = [ModelNode(node_id=rank, data_width=config.data_width,
                                 max_nodes=config.max_nodes, mem_size=config.mem_size,
                                 alu_capabilities=config.alu_capabilities,
                                 clock=self.clock, barrier=self.barrier)
                       for rank in range(config.nodes)]

    def transports(self):
        return list(self._nodes)

    def close(self):
        pass


def _start_backend(name, config, progress):
    if name == "model":
        return _ModelBackend(config)
    if name == "amaranth":
        from nicoll.sim.amaranth_backend import AmaranthCluster
        return AmaranthCluster(config)
    if name == "verilator":
        from nicoll.sim.verilator_backend import VerilatorCluster
        return VerilatorCluster(config, progress=progress)
    raise NicollError(f"unknown backend {name!r}; choose one of {', '.join(map(repr, BACKENDS))}")


class Cluster:
    """N nodes of one backend, each opened as a :class:`~nicoll.Device`.

    :param nodes: number of nodes, 1 .. ``max_nodes``.
    :param backend: ``"model"`` (Python device model), ``"amaranth"`` (the gateware in the
        Amaranth simulator) or ``"verilator"`` (its Verilog under Verilator and cocotb).
    :param data_width: width of the network streams and memory beats (64, 128, 256, 512).
    :param max_nodes: the largest cluster the gateware is built for.
    :param mem_size: bytes of device memory per node (a power of two).
    :param alu_capabilities: the (op, dtype) pairs the reduction ALU is built with, e.g.
        everything but ``("prod", "float64")`` to save DSPs; None for every pair MPI defines.
    :param progress: callable taking a one-line status message while a backend builds and
        starts (the command line shows it); None for silence.
    """

    def __init__(self, nodes=8, backend="model", *, data_width=256, max_nodes=DEFAULT_MAX_NODES,
                 mem_size=DEFAULT_MEM_SIZE, alu_capabilities=None, progress=None):
        if backend not in BACKENDS:
            raise NicollError(f"unknown backend {backend!r}; choose one of "
                              f"{', '.join(map(repr, BACKENDS))}")
        self.config = ClusterConfig(nodes=nodes, data_width=data_width, max_nodes=max_nodes,
                                    mem_size=mem_size, alu_capabilities=alu_capabilities)
        self.backend = backend
        self._backend = _start_backend(backend, self.config, progress)
        try:
            self._devices = [Device(t, rank=rank)
                             for rank, t in enumerate(self._backend.transports())]
        except BaseException:
            self._backend.close()
            raise
        self._closed = False
        self._tree = None
        self._barrier_seq = 0
        #: :class:`CallStats` of the last call; None before the first.
        self.last = None

    @property
    def nodes(self):
        return self.config.nodes

    @property
    def data_width(self):
        return self.config.data_width

    @property
    def devices(self):
        self._check_open()
        return list(self._devices)

    def device(self, rank):
        """The :class:`~nicoll.Device` of node ``rank``."""
        self._check_open()
        if not isinstance(rank, int) or not 0 <= rank < self.nodes:
            raise NicollError(f"rank must be an int between 0 and {self.nodes - 1}, not {rank!r}")
        return self._devices[rank]

    # -- barrier (seed 004) ---------------------------------------------------------------

    def configure_barrier(self, tree=None):
        """Program the barrier tree into every node and start a region at barrier 0.

        :param tree: a :class:`~nicoll.tree.BarrierTree`, a parent list (``None`` for the
            root), or None for the binary tree rooted at rank 0.
        :raises NicollError: not a tree, the wrong number of ranks, more children than the
            build's slots, or a configuration a unit reports wrong.
        """
        self._check_open()
        if tree is None:
            tree = BarrierTree.binary(self.nodes)
        elif not isinstance(tree, BarrierTree):
            tree = BarrierTree(tree)
        if len(tree) != self.nodes:
            raise NicollError(f"the barrier tree has {len(tree)} ranks, the cluster "
                              f"{self.nodes}")
        self._tree = None
        for rank, dev in enumerate(self._devices):
            dev.barrier.configure(tree.parent(rank), tree.children(rank), tree.route(rank))
        for dev in self._devices:
            dev.barrier.start_ac_region("normal", seq=0)
        self._tree = tree
        self._barrier_seq = 0

    @property
    def barrier_tree(self):
        """The :class:`~nicoll.tree.BarrierTree` in use (None until the first barrier)."""
        return self._tree

    def barrier(self, arrive=None, mode="normal", m=None, c=None, estimate=None):
        """One barrier through the network (seed 004).

        :param arrive: per rank, the cycle (counted from the call's start) at which it
            finishes its work and signals done; None: all at once.
        :param mode: ``"normal"`` (release when all finished), ``"ac"`` (release early when m
            ranks finished and/or c cycles passed since the first, aborting the unfinished
            ones; give m, c or both) or ``"collect"`` (release when all finished; record s,
            mt, e, with mt for m if given).
        :param estimate: the value sent to every aborted rank (default 0).
        :returns: :class:`BarrierResult`; :attr:`last` holds the cycles.
        :raises NicollError: bad arguments, or errors the barrier units report (by their
            register names) — before anything is started where they concern the arguments.
        """
        self._check_open()
        arrive, sub, m, c, estimate = self._check_barrier_args(arrive, mode, m, c, estimate)
        if self._tree is None:
            self.configure_barrier()
        root = self._devices[self._tree.root].barrier
        root.set_mode(mode, sub)
        root.set_ac_parameter(m, c)
        root.set_estimate(estimate)
        root.check()            # m, c or mode wrong for this tree: nothing is started yet
        seq = self._barrier_seq

        # Completions at exact cycles: each node is armed to signal done at start + arrive[r].
        # The start lies far enough ahead that every node is armed before it.
        first = root.cycles()
        per_read = root.cycles() - first        # one 64-bit read: two bus accesses
        start = first + 2 * per_read + per_read * (3 * self.nodes + 2) + 64
        for rank, dev in enumerate(self._devices):
            dev.barrier.done(seq, at=start + arrive[rank])
        armed_by = root.cycles()
        if armed_by >= start:
            raise NicollError(f"arming the completions took until cycle {armed_by}, past the "
                              f"start {start}; the backend's bus is slower than measured")

        budget = (max(arrive) + (c if mode == "ac" and sub != "count" else 0)
                  + 2000 + 200 * self.nodes)
        next_seq = (seq + 1) & _SEQ_MASK
        status = {}
        for rank in [self._tree.root] + [r for r in range(self.nodes) if r != self._tree.root]:
            dev = self._devices[rank]
            while True:
                status[rank] = st = dev.barrier.status()
                if st.seq == next_seq:
                    break
                now = root.cycles()
                if now - start > budget:
                    errors = {r: d.barrier.errors() for r, d in enumerate(self._devices)}
                    errors = {r: e for r, e in errors.items() if e}
                    raise NicollError(f"barrier {seq} was not released at rank {rank} within "
                                      f"{budget} cycles of its start (rank {rank} is in "
                                      f"barrier {st.seq}); errors reported: {errors or 'none'}")
        self._barrier_seq = next_seq

        aborted = frozenset(r for r, st in status.items() if st.aborted and st.abort_seq == seq)
        estimates = {r: self._devices[r].barrier.abort_estimate() for r in sorted(aborted)}
        if root.stamp_seq() != seq:
            raise NicollError(f"the root's stamps belong to barrier {root.stamp_seq()}, "
                              f"not {seq}")
        stamps = [None if v is None else v - start for v in root.get_ac_value()]
        for dev in self._devices:
            dev.barrier.check()
        if self.backend == "model":
            self.last = CallStats(cycles=None)
        else:
            released = [dev.barrier.released_at() - start for dev in self._devices]
            self.last = CallStats(cycles=max(released), release_cycles=released)
        return BarrierResult(seq=seq, aborted=aborted, estimates=estimates, s=stamps[0],
                             mt=stamps[1] if m else None, e=stamps[2])

    def _check_barrier_args(self, arrive, mode, m, c, estimate):
        if mode not in MODES:
            raise NicollError(f"barrier mode must be one of {', '.join(map(repr, MODES))}, "
                              f"not {mode!r}")
        if arrive is None:
            arrive = [0] * self.nodes
        else:
            try:
                arrive = list(arrive)
            except TypeError:
                raise NicollError(f"arrive must be a list of {self.nodes} cycle counts, "
                                  f"not {arrive!r}") from None
            if len(arrive) != self.nodes:
                raise NicollError(f"arrive must give a cycle for each of the {self.nodes} "
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

    def _check_open(self):
        if self._closed:
            raise NicollError("this cluster is closed")

    def close(self):
        if not getattr(self, "_closed", True):
            self._closed = True
            self._backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return (f"<nicoll.Cluster {self.nodes} nodes on {self.backend}, "
                f"data_width {self.data_width}, {state}>")
