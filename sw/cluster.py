"""Cluster: N nicoll nodes on one backend, opened as Devices.

``nicoll.Cluster(nodes=8, backend="verilator")`` builds (or reuses a cached build of) the
simulated cluster, starts it, and opens every node through the same driver code whatever
the backend.  Use it as a context manager or call :meth:`Cluster.close`.

Collectives (:meth:`Cluster.allreduce`, ...) compile into per-rank schedules
(:mod:`nicoll.schedule`) and run on the nodes' engines (:mod:`nicoll.engine`): each rank's
input goes into its device memory, its schedule into its engine's queue, every engine is
armed for one common start cycle, and the outputs are read back once every engine is done.
"""

import contextlib
from dataclasses import dataclass, field
import numbers

import numpy as np

from . import schedule as _schedule
from .barrier import MODES
from .config import BACKENDS, ClusterConfig, DEFAULT_MEM_SIZE, build_defaults
from .device import Device
from .engine import ERROR_NAMES, error_text
from .errors import NicollError
from nicoll.hw.tree import BarrierTree

__all__ = ["Cluster", "BarrierResult", "CallStats", "AggregatePlan", "ActivityTrace", "TRACE_LANES"]

#: Barrier numbers wrap at 16 bits (every notice carries one).
_SEQ_MASK = 0xFFFF
#: Bus accesses that arm one node (a 64-bit cycle and a CONTROL write), for the common start.
_ARM_ACCESSES = 3
#: A collective's cycle budget, from its plan: a fixed allowance, then per step of any rank (a
#: clear-to-send round trip through the switch and the ALU pipeline), per beat any rank sends
#: (as if the switch carried one beat at a time for the whole cluster), and per barrier step
#: (notices up and down the barrier tree).
_BUDGET_BASE = 2000
_BUDGET_PER_STEP = 400
_BUDGET_PER_BEAT = 4
_BUDGET_PER_BARRIER = 2000
#: Options each collective passes on to its schedule compiler (nicoll.schedule).
_OPTIONS = {
    "allreduce": ("slices", "segments", "shape"),
    "reduce": ("slices", "segments", "shape"),
    "reduce_scatter": ("slices", "segments", "shape"),
    "allgather": ("slices", "segments", "shape"),
    "alltoall": ("scratch_blocks", "segments"),
    "alltoallv": ("segments",),
}


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
    #: The subgroups and the cost model's figures (:class:`~nicoll.repack_plan.RepackPlan`).
    repack: object
    #: Each rank's :class:`~nicoll.aggregate.RankLayout` in device memory.
    layouts: tuple
    algorithm: str = "aggregate"


def _poll_pause(elapsed):
    """Cycles to let pass between two polls of a wait that has run ``elapsed`` cycles: an
    eighth of the time so far, 16 to 4096.  A simulator then spends its time simulating,
    not answering status reads, and notices the end at most about 12 % late in simulated
    time, which no figure counts: cycles come from the hardware's START/FINISHED counters."""
    return max(16, min(4096, max(0, elapsed) // 8))


def _check_subgroup(algorithm, subgroup):
    if subgroup is None:
        return
    if algorithm != "aggregate":
        raise NicollError(f"subgroup sets the repack sub-matrix size of algorithm 'aggregate', "
                          f"not of {algorithm!r}")
    if not isinstance(subgroup, int) or isinstance(subgroup, bool) or subgroup < 1:
        raise NicollError(f"subgroup must be a positive int, not {subgroup!r}")


class _ModelBackend:
    """The device model: one ModelNode per rank, nothing to start or stop."""

    def __init__(self, config):
        from .barrier_model import BarrierNetworkModel, ModelClock
        from .engine_model import EngineNetworkModel
        from .model import ModelNode
        self.clock = ModelClock()
        self.barrier = BarrierNetworkModel(self.clock, config.max_nodes)
        self.engine = EngineNetworkModel(self.clock, config.max_nodes,
                                         repack_units=config.repack_units, repack_nodes=(0,))
        self._nodes = [ModelNode(node_id=rank, data_width=config.data_width,
                                 max_nodes=config.max_nodes, mem_size=config.mem_size,
                                 alu_capabilities=config.alu_capabilities,
                                 clock=self.clock, barrier=self.barrier, engine=self.engine)
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
    :param max_nodes: the largest cluster the gateware is built for; None (the default) for
        the larger of 8 and ``nodes``.
    :param mem_size: bytes of device memory per node (a power of two).
    :param alu_capabilities: the (op, dtype) pairs the reduction ALU is built with, e.g.
        ``[("sum", "float32"), ("max", "int32")]``; ``"all"`` for every pair MPI defines;
        None (the default) for the backend's default: every pair on the model,
        :data:`~nicoll.config.DEFAULT_SIM_ALU_CAPABILITIES` (sum on float32) on the
        simulators, whose build time and speed grow with every float unit.  A reduction on a
        pair the build lacks is refused with a message naming this option.
    :param repack_units: repack units of node 0 (seed 003), which serve
        ``alltoall``/``alltoallv`` with algorithm ``"aggregate"``; 0 builds none.
    :param progress: callable taking a one-line status message while a backend builds and
        starts (the command line shows it); None for silence.
    """

    def __init__(self, nodes=8, backend="model", *, data_width=256, max_nodes=None,
                 mem_size=DEFAULT_MEM_SIZE, alu_capabilities=None, repack_units=1,
                 progress=None):
        if backend not in BACKENDS:
            raise NicollError(f"unknown backend {backend!r}; choose one of "
                              f"{', '.join(map(repr, BACKENDS))}")
        max_nodes, alu_capabilities = build_defaults(backend, nodes, max_nodes, alu_capabilities)
        self.config = ClusterConfig(nodes=nodes, data_width=data_width, max_nodes=max_nodes,
                                    mem_size=mem_size, alu_capabilities=alu_capabilities,
                                    repack_units=repack_units)
        self.backend = backend
        self._backend = _start_backend(backend, self.config, progress)
        try:
            self._devices = [Device(t, rank=rank)
                             for rank, t in enumerate(self._backend.transports())]
        except BaseException:
            self._backend.close()
            raise
        self._closed = False
        self._alu_pairs = None
        self._tree = None
        self._barrier_seq = 0
        self._last_start = None
        #: :class:`CallStats` of the last call; None before the first.
        self.last = None
        #: The :class:`~nicoll.schedule.Plan` the last collective ran (its ``algorithm`` says
        #: what "auto" chose); None before the first.
        self.last_plan = None

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

    @contextlib.contextmanager
    def trace(self):
        """Record what every node's ports and ALU do during the block's calls (Verilator only)::

            with cl.trace() as trace:
                cl.allreduce(xs)
            trace.lanes[3]["reduce"]    # [(first, end), ...] cycles from the collective's start

        See :class:`ActivityTrace`.  The lanes are ports of the simulation's top, outside the
        NIC cores, sampled by the simulator's harness: a trace changes no cycle count.
        """
        self._check_open()
        if self.backend != "verilator":
            raise NicollError(f"an activity trace is taken from the Verilator simulation's "
                              f"signals; this cluster runs on the {self.backend!r} backend")
        trace = ActivityTrace()
        self._last_start = None
        self._backend.request("trace_start", 0)
        try:
            yield trace
        finally:
            raw = self._backend.request("trace_stop", 0)
            start = self._last_start or 0
            trace.start = self._last_start
            trace.lanes = {rank: {lane: [(a - start, b - start) for a, b in raw[rank][lane]]
                                  for lane in TRACE_LANES}
                           for rank in range(self.nodes)}

    # -- barrier (seed 004) ---------------------------------------------------------------

    def configure_barrier(self, tree=None):
        """Program the barrier tree into every node and start a region at barrier 0.

        :param tree: a :class:`~nicoll.hw.tree.BarrierTree`, a parent list (``None`` for the
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
        """The :class:`~nicoll.hw.tree.BarrierTree` in use (None until the first barrier)."""
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
        start = self._start_cycle(self._devices[self._tree.root], _ARM_ACCESSES)
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
                self._devices[self._tree.root].idle(_poll_pause(now - start))
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

    def _start_cycle(self, clock, accesses):
        """A cycle far enough ahead that every node can be armed for it first: ``accesses``
        bus accesses per node, measured on ``clock`` (a Device), with a margin of two."""
        first = clock.cycles()
        per_read = clock.cycles() - first       # one 64-bit read: two bus accesses
        return first + per_read * (accesses * self.nodes + 4) + 64

    # -- collectives (seeds 000, 001, 002) ------------------------------------------------

    def allreduce(self, xs, op="sum", algorithm="auto", **options):
        """Every rank gets the reduction of every rank's array.

        :param xs: one numpy array per rank, all of one shape and dtype.
        :param op: ``"sum"``, ``"prod"``, ``"min"``, ``"max"``, ``"band"``, ``"bor"``,
            ``"bxor"``, ``"land"``, ``"lor"`` or ``"lxor"``.
        :param algorithm: ``"recursive_halving"`` (seed 000), ``"ring"``, ``"tree"``
            (seed 002), ``"prt"``, or ``"auto"`` (recursive halving).
        :param options: ``slices``, ``segments``, ``shape`` of
            :func:`nicoll.schedule.allreduce`.
        :returns: one array per rank, of the inputs' shape.
        :raises NicollError: bad input (before anything is posted), or device errors by
            their register names.
        """
        xs = self._arrays("allreduce", xs)
        self._check_call("allreduce", algorithm, options, op, xs[0].dtype)
        plan = _schedule.allreduce(self.nodes, xs[0].size, xs[0].dtype, op, algorithm, **options)
        return [y.reshape(xs[0].shape) for y in self._run(plan, xs)]

    def reduce(self, xs, op="sum", root=0, algorithm="auto", **options):
        """Rank ``root`` gets the reduction of every rank's array; the others get None.
        Arguments as :meth:`allreduce`."""
        xs = self._arrays("reduce", xs)
        self._check_call("reduce", algorithm, options, op, xs[0].dtype)
        plan = _schedule.reduce(self.nodes, xs[0].size, xs[0].dtype, op, root, algorithm,
                                **options)
        return [None if y is None else y.reshape(xs[0].shape) for y in self._run(plan, xs)]

    def reduce_scatter(self, xs, op="sum", counts=None, algorithm="auto", **options):
        """Rank r gets chunk r of the reduction of the ranks' arrays (taken flat).

        :param counts: elements of each rank's chunk (zeros allowed), adding up to the
            arrays' size; None: the sizes of ``numpy.array_split``.
        :returns: one 1-D array per rank.  Other arguments as :meth:`allreduce`.
        """
        xs = self._arrays("reduce_scatter", xs)
        self._check_call("reduce_scatter", algorithm, options, op, xs[0].dtype)
        plan = _schedule.reduce_scatter(self.nodes, xs[0].size, xs[0].dtype, op, counts,
                                        algorithm, **options)
        return self._run(plan, xs)

    def allgather(self, xs, algorithm="auto", **options):
        """Every rank gets the ranks' arrays concatenated in rank order (``numpy.concatenate``).

        :param xs: one numpy array per rank, all of one shape and dtype (any fixed-size type).
        :param algorithm: as :meth:`allreduce`.
        """
        xs = self._arrays("allgather", xs)
        self._check_call("allgather", algorithm, options)
        plan = _schedule.allgather(self.nodes, xs[0].size, xs[0].dtype, algorithm, **options)
        shape = xs[0].shape
        shape = (self.nodes * shape[0],) + shape[1:] if shape else (self.nodes,)
        return [y.reshape(shape) for y in self._run(plan, xs)]

    def alltoall(self, xs, algorithm="auto", *, scratch_blocks=None, subgroup=None, **options):
        """Rank i's array (taken flat) is cut into N equal blocks; block j goes to rank j,
        where it is block i.

        :param algorithm: ``"pairwise"``, ``"bruck"``, ``"inplace"`` (seed 001, in the
            input's place with ``scratch_blocks`` blocks of scratch, default 1),
            ``"aggregate"`` (seed 003: through the repack units of node 0) or ``"auto"``
            (pairwise).
        :param subgroup: with ``"aggregate"``, the sub-matrix size dh = dv (seed 003); None:
            the repack planner's choice.
        :param options: ``segments`` of :func:`nicoll.schedule.alltoall`.
        :returns: one array per rank, of the inputs' shape.
        """
        xs = self._arrays("alltoall", xs)
        self._check_call("alltoall", algorithm, options)
        size = xs[0].size
        if size % self.nodes:
            raise NicollError(f"alltoall cuts each array into {self.nodes} equal blocks; "
                              f"{size} elements do not divide by {self.nodes}")
        if scratch_blocks is not None:
            options["scratch_blocks"] = scratch_blocks
        _check_subgroup(algorithm, subgroup)
        if algorithm == "aggregate":
            if options:
                raise NicollError(f"alltoall 'aggregate' takes no options, not "
                                  f"{', '.join(map(repr, options))}")
            raw = [np.ascontiguousarray(x).reshape(-1).view(np.uint8) for x in xs]
            step = size // self.nodes * xs[0].dtype.itemsize
            blocks = [[r[j * step:(j + 1) * step] for j in range(self.nodes)] for r in raw]
            out = self._run_aggregate("alltoall", blocks, subgroup)
            return [np.concatenate(row).view(xs[0].dtype).reshape(xs[0].shape) for row in out]
        plan = _schedule.alltoall(self.nodes, size // self.nodes, xs[0].dtype, algorithm,
                                  **options)
        return [y.reshape(xs[0].shape) for y in self._run(plan, xs)]

    def alltoallv(self, blocks, algorithm="auto", *, subgroup=None, **options):
        """``blocks[i][j]`` (a 1-D array, possibly empty) goes from rank i to rank j.

        :param algorithm: ``"pairwise"``, ``"aggregate"`` (seed 003: through the repack units
            of node 0) or ``"auto"``: aggregate when the repack plan's cost model favours it
            for these block sizes (:func:`nicoll.repack_plan.plan_subgroups`, ``method``
            "repack") and the build has units whose buffers hold it, else pairwise.
        :param subgroup: with ``"aggregate"``, the sub-matrix size dh = dv (seed 003); None:
            the repack planner's choice.
        :param options: ``segments`` of :func:`nicoll.schedule.alltoallv`.
        :returns: ``out`` with ``out[j][i]`` the block rank i sent to rank j.
        """
        self._check_open()
        n = self.nodes
        if isinstance(blocks, (np.ndarray, str, bytes)) or not hasattr(blocks, "__len__"):
            raise NicollError(f"alltoallv takes an {n}×{n} list of lists of 1-D numpy arrays, "
                              f"not {type(blocks).__name__}")
        if len(blocks) != n:
            raise NicollError(f"alltoallv takes one row of blocks per rank: {n} rows, "
                              f"not {len(blocks)}")
        flat = []
        for i, row in enumerate(blocks):
            if isinstance(row, (np.ndarray, str, bytes)) or not hasattr(row, "__len__"):
                raise NicollError(f"blocks[{i}] must be a list of {n} 1-D numpy arrays, "
                                  f"not {type(row).__name__}")
            if len(row) != n:
                raise NicollError(f"blocks[{i}] must hold one block per rank ({n}), "
                                  f"not {len(row)}")
            for j, block in enumerate(row):
                if not isinstance(block, np.ndarray):
                    raise NicollError(f"blocks[{i}][{j}] must be a numpy array, "
                                      f"not {type(block).__name__}")
                if block.ndim != 1:
                    raise NicollError(f"blocks[{i}][{j}] must be 1-D, not of shape {block.shape}")
                if block.dtype != blocks[0][0].dtype:
                    raise NicollError(f"blocks[{i}][{j}] is {block.dtype} but blocks[0][0] is "
                                      f"{blocks[0][0].dtype}: every block must have one dtype")
                flat.append(block)
        self._check_call("alltoallv", algorithm, options)
        _check_subgroup(algorithm, subgroup)
        dtype = blocks[0][0].dtype
        sizes = [[blocks[i][j].size for j in range(n)] for i in range(n)]
        if algorithm == "auto" and not options and self._aggregate_plan(
                [[s * dtype.itemsize for s in row] for row in sizes], quiet=True):
            algorithm = "aggregate"
        if algorithm == "aggregate":
            if options:
                raise NicollError(f"alltoallv 'aggregate' takes no options, not "
                                  f"{', '.join(map(repr, options))}")
            raw = [[np.ascontiguousarray(b).view(np.uint8) for b in row] for row in blocks]
            out = self._run_aggregate("alltoallv", raw, subgroup)
            return [[block.view(dtype) for block in row] for row in out]
        plan = _schedule.alltoallv(sizes, dtype, algorithm, **options)
        inputs = [np.concatenate([np.ascontiguousarray(b) for b in row]) for row in blocks]
        outputs = self._run(plan, inputs)
        out = []
        for j, y in enumerate(outputs):
            bounds = np.cumsum([0] + [sizes[i][j] for i in range(n)])
            out.append([y[bounds[i]:bounds[i + 1]] for i in range(n)])
        return out

    # -- posting a collective -------------------------------------------------------------

    def _arrays(self, what, xs):
        """Check one numpy array per rank, all of one shape and dtype."""
        self._check_open()
        n = self.nodes
        if isinstance(xs, (np.ndarray, str, bytes)) or not hasattr(xs, "__len__"):
            raise NicollError(f"{what} takes a list of {n} numpy arrays, one per rank, "
                              f"not {type(xs).__name__}")
        xs = list(xs)
        if len(xs) != n:
            raise NicollError(f"{what} takes one array per rank: {n} arrays, not {len(xs)}")
        for r, x in enumerate(xs):
            if not isinstance(x, np.ndarray):
                raise NicollError(f"{what}: input {r} must be a numpy array, "
                                  f"not {type(x).__name__}")
            if x.dtype != xs[0].dtype:
                raise NicollError(f"{what}: input {r} is {x.dtype} but input 0 is "
                                  f"{xs[0].dtype}; every rank must give the same dtype")
            if x.shape != xs[0].shape:
                raise NicollError(f"{what}: input {r} has shape {x.shape} but input 0 has "
                                  f"{xs[0].shape}; every rank must give the same shape")
        return xs

    def _check_call(self, what, algorithm, options, op=None, dtype=None):
        """The algorithm, the options and (for reductions) the op and type of a call."""
        if what in ("alltoall", "alltoallv"):
            known = (_schedule.ALLTOALL_ALGORITHMS if what == "alltoall"
                     else ("pairwise",)) + ("aggregate",)
        else:
            known = _schedule.REDUCTION_ALGORITHMS
        if not isinstance(algorithm, str) or algorithm not in known + ("auto",):
            raise NicollError(f"unknown {what} algorithm {algorithm!r}; algorithms are "
                              f"{', '.join(map(repr, known))} and 'auto'")
        for name in options:
            if name not in _OPTIONS[what]:
                raise NicollError(f"{what} has no option {name!r}; its options are "
                                  f"{', '.join(_OPTIONS[what])}")
        if op is not None:
            self._check_pair(op, dtype)

    def _check_pair(self, op, dtype):
        """Refuse a reduction the build's ALU lacks, naming the option that adds it."""
        from .ops import check_op_dtype
        op, dtype = check_op_dtype(op, dtype)
        if self._alu_pairs is None:
            self._alu_pairs = self._devices[0].alu_capabilities()
        if (op, dtype) not in self._alu_pairs:
            built = sorted((d.numpy_name, o.mpi_name) for o, d in self._alu_pairs)
            listed = ", ".join(f"({o!r}, {d!r})" for d, o in built) or "none"
            raise NicollError(
                f"op {op.mpi_name!r} on {dtype.numpy_name} is not in this build's ALU, which "
                f"computes {listed}; open the cluster with alu_capabilities=[..., "
                f"({op.mpi_name!r}, {dtype.numpy_name!r})] (or alu_capabilities='all') to add it")

    def _run(self, plan, inputs):
        """Post a compiled plan on every node, run it and return each rank's output (1-D)."""
        self.last_plan = plan
        devices = self._devices
        # Everything the nodes would refuse is refused here, before anything is posted.
        for r, (schedule, dev) in enumerate(zip(plan.schedules, devices)):
            if schedule.buffer_bytes > dev.mem_size:
                raise NicollError(f"{plan.collective} ({plan.algorithm}) needs a "
                                  f"{schedule.buffer_bytes}-byte buffer on rank {r}; its device "
                                  f"memory holds {dev.mem_size} bytes")
            if len(schedule.steps) > dev.engine.depth:
                raise NicollError(f"{plan.collective} ({plan.algorithm}) takes "
                                  f"{len(schedule.steps)} steps on rank {r}; the engine's queue "
                                  f"holds {dev.engine.depth}")
        barriers = sum(step.barrier for step in plan.schedules[0].steps)
        if barriers:
            # Barrier steps (seed 001, S23) run through the barrier units: they need the tree,
            # and the root must release only when every rank is done.
            if self._tree is None:
                self.configure_barrier()
            devices[self._tree.root].barrier.set_mode("normal")

        for x, schedule, dev in zip(inputs, plan.schedules, devices):
            raw = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
            for piece in schedule.load:
                dev.mem_load(piece.buffer, raw[piece.data:piece.data + piece.length])
            dev.engine.load(schedule, plan.op, plan.dtype if plan.op else None)
        clock = devices[0]
        start = self._start_cycle(clock, _ARM_ACCESSES)
        for dev in devices:
            dev.engine.arm(start)
        armed_by = clock.cycles()
        if armed_by >= start:
            raise NicollError(f"arming the engines took until cycle {armed_by}, past the "
                              f"start {start}; the backend's bus is slower than measured")
        self._wait(plan, clock, start)
        self._barrier_seq = (self._barrier_seq + barriers) & _SEQ_MASK

        outputs = []
        for r, (schedule, dev) in enumerate(zip(plan.schedules, devices)):
            count = plan.output_counts[r]
            if count is None:
                outputs.append(None)
                continue
            raw = bytearray(count * plan.dtype.itemsize)
            for piece in schedule.result:
                raw[piece.data:piece.data + piece.length] = dev.mem_dump(piece.buffer, piece.length)
            outputs.append(np.frombuffer(raw, dtype=plan.dtype))
        self._record(devices, start)
        return outputs

    # -- aggregate exchanges (seed 003) ------------------------------------------------------

    def _aggregate_plan(self, lengths, quiet=False, subgroup=None):
        """The repack plan of node 0's units for an N×N matrix of block byte lengths; with
        ``quiet``, None instead of an error when the units cannot take it or the cost model
        prefers direct exchange."""
        from .repack_plan import plan_subgroups
        from nicoll.hw.repack import MAX_BLOCK_BYTES
        repack = self._devices[0].repack
        n = self.nodes
        problem = None
        if not repack.units:
            problem = "this build has no repack units (repack block CAPS.units = 0)"
        elif n > repack.max_ranks:
            problem = f"the repack units take at most {repack.max_ranks} ranks, not {n}"
        elif max(max(row) for row in lengths) > MAX_BLOCK_BYTES:
            problem = (f"a block of {max(max(row) for row in lengths)} bytes; a repack "
                       f"message's blocks hold at most {MAX_BLOCK_BYTES} bytes")
        plan = None
        if problem is None:
            try:
                plan = plan_subgroups(n, lengths, subgroup, data_width=self.data_width,
                                      max_group=repack.max_group, capacity_bytes=repack.capacity,
                                      units=repack.units)
            except NicollError as exc:
                problem = str(exc)
        if problem is None and not quiet:
            return plan
        if quiet:
            return plan if problem is None and plan.method == "repack" else None
        raise NicollError(f"algorithm 'aggregate' cannot run this exchange: {problem}")

    def _run_aggregate(self, what, blocks, subgroup=None):
        """Exchange ``blocks[i][j]`` (uint8 arrays) through node 0's repack units; returns
        ``out[j][i]`` (uint8 arrays)."""
        from .aggregate import aggregate_command, layout, read_messages
        n = self.nodes
        lengths = [[len(b) for b in row] for row in blocks]
        plan = self._aggregate_plan(lengths, subgroup=subgroup)
        layouts = layout(plan, blocks)
        devices = self._devices
        for r, (lay, dev) in enumerate(zip(layouts, devices)):
            if lay.end > dev.mem_size:
                raise NicollError(f"{what} (aggregate) needs {lay.end} bytes of device memory "
                                  f"on rank {r}; it holds {dev.mem_size}")
        self.last_plan = AggregatePlan(collective=what, repack=plan, layouts=tuple(layouts))
        hub = devices[0]
        for lay, dev in zip(layouts, devices):
            dev.mem_load(0, lay.image)
            dev.mem_load(lay.recv_offset, bytes(lay.receives * lay.recv_slot))
            dev.engine.clear()
            dev.engine.push(aggregate_command(lay, 0))
            dev.engine.check()
        hub.repack.lists(plan)
        clock = devices[0]
        start = self._start_cycle(clock, _ARM_ACCESSES + hub.repack.START_ACCESSES)
        width = self.data_width // 8
        beats = sum(-(-len(lay.image) // width) + -(-lay.receives * lay.recv_slot // width)
                    for lay in layouts)
        budget = (_BUDGET_BASE + _BUDGET_PER_STEP * n * (plan.sends_per_rank
                                                         + plan.receives_per_rank)
                  + _BUDGET_PER_BEAT * beats)
        # The control tree's waits start now: the first registration comes at the start.
        hub.repack.start(n, plan.budget(lengths), start - clock.cycles() + budget)
        for dev in devices:
            dev.engine.arm(start)
        if clock.cycles() >= start:
            raise NicollError(f"arming the engines took until cycle {clock.cycles()}, past "
                              f"the start {start}; the backend's bus is slower than measured")
        self._wait_aggregate(what, clock, start, budget)
        received = [read_messages(dev, lay) for dev, lay in zip(devices, layouts)]
        out = plan.gather_results(received)
        self._record(devices, start)
        return out

    def _wait_aggregate(self, what, clock, start, budget):
        pending = list(range(self.nodes))
        while pending:
            status = self._devices[pending[0]].engine.status()
            if status.done:
                pending.pop(0)
                continue
            elapsed = clock.cycles() - start
            if status.error or elapsed > budget:
                break
            clock.idle(_poll_pause(elapsed))
        if not pending:
            return
        hub = self._devices[0].repack.status()
        problems = []
        for rank, dev in enumerate(self._devices):
            status, errors = dev.engine.status(), dev.engine.errors()
            if status.done and not errors:
                continue
            names = [name for name in ERROR_NAMES if name in errors]
            problems.append(f"rank {rank} stopped with {error_text(names)}" if names
                            else f"rank {rank} waits")
        code = hub["code"]
        raise NicollError(f"{what} (aggregate) did not finish within {budget} cycles of its "
                          f"start: " + "; ".join(problems) + f"; the repack control tree "
                          f"{'runs' if hub['busy'] else 'ended'} with status "
                          f"{getattr(code, 'name', code)}")

    def _record(self, devices, start):
        """Cluster.last from the engines' counters."""
        self._last_start = start
        counters = [dev.engine.counters() for dev in devices]
        cycles = rank_cycles = None
        if self.backend != "model":
            rank_cycles = [dev.engine.finished_at() - start for dev in devices]
            cycles = max(rank_cycles)
        self.last = CallStats(cycles=cycles, rank_cycles=rank_cycles,
                              bytes_sent=[c["bytes_sent"] for c in counters],
                              bytes_received=[c["bytes_received"] for c in counters],
                              packets=[c["packets_sent"] for c in counters],
                              packets_received=[c["packets_received"] for c in counters],
                              alu_beats=[c["alu_beats"] for c in counters])

    def _budget(self, plan):
        """Cycles the plan may take from its start (see _BUDGET_*)."""
        width = self.data_width // 8
        steps = sum(len(s.steps) for s in plan.schedules)
        beats = sum(-(-step.send.length // width) for s in plan.schedules for step in s.steps
                    if step.send is not None)
        barriers = sum(step.barrier for step in plan.schedules[0].steps)
        return (_BUDGET_BASE + _BUDGET_PER_STEP * steps + _BUDGET_PER_BEAT * beats
                + _BUDGET_PER_BARRIER * barriers)

    def _wait(self, plan, clock, start):
        """Wait until every engine is done, within the plan's budget; raise naming the ranks
        that are not, where they are and their errors."""
        budget = self._budget(plan)
        pending = list(range(self.nodes))
        while pending:
            status = self._devices[pending[0]].engine.status()
            if status.done:
                pending.pop(0)
                continue
            elapsed = clock.cycles() - start
            if status.error or elapsed > budget:
                break
            clock.idle(_poll_pause(elapsed))
        problems, failed = [], False
        for rank, dev in enumerate(self._devices):
            status, errors = dev.engine.status(), dev.engine.errors()
            if status.done and not errors:
                continue
            names = [n for n in ERROR_NAMES if n in errors]
            failed |= bool(names)
            where = f"step {status.step} of {status.queued}"
            problems.append(f"rank {rank} stopped at {where} with {error_text(names)}" if names
                            else f"rank {rank} waits at {where}")
        if failed:
            raise NicollError(f"{plan.collective} ({plan.algorithm}) failed on the engines: "
                              + "; ".join(problems))
        if problems:
            raise NicollError(f"{plan.collective} ({plan.algorithm}) did not finish on every "
                              f"rank within {budget} cycles of its start: " + "; ".join(problems))

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
