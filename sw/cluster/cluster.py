"""Cluster: N nicoll nodes on one backend, opened as Devices.

``nicoll.Cluster(nodes=8, backend="verilator")`` builds (or reuses a cached build of) the
simulated cluster, starts it, and opens every node through the same driver code whatever
the backend.  Use it as a context manager or call :meth:`Cluster.close`.

The class holds the cluster's lifetime (the backend, the devices, activity traces) and its
public calls; the barrier orchestration is :mod:`nicoll.cluster.barrier_run`'s, the
collectives' machinery :mod:`nicoll.cluster.collective_run`'s.
"""

import contextlib
import dataclasses

import numpy as np

from .. import schedule as _schedule
from ..config import BACKENDS, ClusterConfig, DEFAULT_MEM_SIZE, build_defaults
from ..driver.device import Device
from ..errors import NicollError
from ..fabric import resolve_fabric
from ..faults import Faults, difference, pack_config, unpack_counters
from ..plan.schedule_cost import cluster_cost_model
from .barrier_run import ClusterBarrier
from .collective_run import CollectiveRunner, check_subgroup
from .results import TRACE_LANES, ActivityTrace
from .timing import core_clock_mhz

__all__ = ["Cluster", "STALL_CYCLES"]

#: On a cluster with fault injection, a collective whose engines show no progress (no step
#: ended, no packet received by a rank not yet done) for this many cycles ends as stalled
#: rather than waiting out its budget.  A healthy run receives a packet every few hundred
#: cycles (a packet's beats, twice stored and forwarded by the links' CRC checks).
STALL_CYCLES = 20_000

#: How far a retry moves the fault generators' seed (the golden ratio of 2**32: the seeds of
#: successive retries fall far apart).
_SEED_STEP = 0x9E37_79B9


class _ModelBackend:
    """The device model: one ModelNode per rank, nothing to start or stop."""

    #: The model has no cycle-level timing (``cl.last.cycles`` is None) and no signals to
    #: trace.
    timed = False
    traces = False

    def __init__(self, config):
        self._config = config
        #: The links' faults (:class:`~nicoll.model.faults.ModelLinks`) of a cluster opened
        #: with ``faults=``; None otherwise.
        self.links = None
        self._fault_config = None
        self._nodes = None
        self.reset()

    def transports(self):
        return list(self._nodes)

    def reset(self):
        """Every node back to its power-on state, its memory kept (as the simulators' reset):
        each node is made anew in place, so the Devices keep their transports.  The links
        restart from the configuration last written, as the injectors do after a reset."""
        from ..model.barrier import BarrierNetworkModel, ModelClock
        from ..model.engine import EngineNetworkModel
        from ..model.faults import ModelLinks
        from ..model.node import ModelNode
        config = self._config
        if config.faults:
            # Two links per switch port, as the simulators' cluster has.
            self.links = ModelLinks(2 * config.hw_nodes)
            if self._fault_config is not None:
                self.links.configure(self._fault_config)
        self.clock = clock = ModelClock()
        self.barrier = barrier = BarrierNetworkModel(clock, config.max_nodes, links=self.links)
        self.engine = engine = EngineNetworkModel(clock, config.max_nodes,
                                                  repack_units=config.repack_units,
                                                  repack_nodes=(config.hub,), links=self.links)
        make = dict(data_width=config.data_width, max_nodes=config.max_nodes,
                    mem_size=config.mem_size, alu_capabilities=config.alu_capabilities,
                    clock=clock, barrier=barrier, engine=engine)
        if self._nodes is None:
            self._nodes = [ModelNode(node_id=rank, **make) for rank in range(config.hw_nodes)]
            return
        for rank, node in enumerate(self._nodes):
            memory = bytes(node.memory)
            node.__init__(node_id=rank, **make)
            node.memory[:] = memory

    def faults_set(self, raw):
        """Write the injectors' configuration (the bytes of the simulators' port)."""
        self._fault_config = bytes(raw)
        self.links.configure(self._fault_config)

    def faults_get(self):
        """The links' counters, as the bytes of the simulators' port."""
        return self.links.counters()

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


def _check_retries(retries, config):
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise NicollError(f"retries must be a non-negative int, not {retries!r}")
    if retries and not config.faults:
        raise NicollError("retries are for faults the network injects: open the cluster with "
                          "faults=nicoll.Faults(...)")


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
    :param repack_units: repack units (seed 003), which serve ``alltoall``/``alltoallv`` with
        algorithm ``"aggregate"``: node 0's, or the repack node's; 0 builds none.
    :param repack_node: put the repack units and their control tree in the switch, as
        seed 003 places them: the control tree on a node after the ranks (id ``nodes``;
        needs ``nodes + 1 <= max_nodes``), each unit on a switch port of its own, so that
        node 0 is an ordinary rank; the ranks register and receive their notices through
        the switch, which steers each message to its unit's port.  False (the default): on
        node 0's port.
    :param fabric: the network between the NICs and the switch: a profile name of
        :data:`nicoll.FABRICS` (``"ideal"``, the default: a beat a cycle and nothing more;
        ``"roce100"``) or a :class:`nicoll.Fabric`.  On the simulators each NIC's links to
        the switch then delay every beat by the hop's latency and idle after each packet as
        the wire needs (:meth:`nicoll.Fabric.sim_links`); the model has no cycle timing and
        only keeps it (:attr:`fabric`).
    :param clock_mhz: the core clock the fabric's ns are converted to cycles at; None for
        the recorded Fmax of the NIC core of this ``data_width`` (``docs/synthesis.json``),
        else the nominal clock (:data:`nicoll.fabric.NOMINAL_MHZ`).
    :param faults: a :class:`nicoll.Faults`: the simulated network loses, corrupts,
        duplicates or delays packets at its rates (docs/faults.md).  The simulators' cluster
        is then built with a CRC, a fault injector and a CRC check on each direction of every
        switch port; the model's messages cross links that draw the same faults
        (:mod:`nicoll.model.faults`).  :attr:`faults` changes the rates without a rebuild,
        and ``cl.last.faults`` says what each call met.  None (the default): nothing is
        built.
    :param retries: with ``faults``, how many times a call that failed while the network
        injected a fault is run again from its inputs after :meth:`reset` (:attr:`retries`;
        ``cl.last.tries``).  0 (the default): the first failure is raised.
    :param progress: callable taking a one-line status message while a backend builds and
        starts (the command line shows it); None for silence.
    """

    def __init__(self, nodes=8, backend="model", *, data_width=256, max_nodes=None,
                 mem_size=DEFAULT_MEM_SIZE, alu_capabilities=None, repack_units=1,
                 repack_node=False, fabric=None, clock_mhz=None, faults=None, retries=0,
                 progress=None):
        if backend not in BACKENDS:
            raise NicollError(f"unknown backend {backend!r}; choose one of "
                              f"{', '.join(map(repr, BACKENDS))}")
        # The default max_nodes makes room for the repack node's id too.
        cores = nodes + 1 if repack_node is True and isinstance(nodes, int) else nodes
        max_nodes, alu_capabilities = build_defaults(backend, cores, max_nodes, alu_capabilities)
        #: The :class:`nicoll.Fabric` between the NICs and the switch.
        self.fabric = resolve_fabric(fabric)
        #: The clock (MHz) its figures are converted to cycles at.
        self.clock_mhz = core_clock_mhz(data_width) if clock_mhz is None else clock_mhz
        links = self.fabric.sim_links(self.clock_mhz, data_width)
        if faults is not None:
            if not isinstance(faults, Faults):
                raise NicollError(f"faults must be a nicoll.Faults or None, not {faults!r}")
        self.config = ClusterConfig(nodes=nodes, data_width=data_width, max_nodes=max_nodes,
                                    mem_size=mem_size, alu_capabilities=alu_capabilities,
                                    repack_units=repack_units, repack_node=repack_node,
                                    links=links, faults=faults is not None)
        _check_retries(retries, self.config)
        self.backend = backend
        self._backend = _start_backend(backend, self.config, progress)
        try:
            devices = [Device(t, rank=rank) for rank, t in enumerate(self._backend.transports())]
        except BaseException:
            self._backend.close()
            raise
        # The ranks; the repack node, if any, is the device after them.
        self._devices = devices[:nodes]
        self._hub_device = devices[self.config.hub]
        self._closed = False
        timed = self._backend.timed
        self._barrier = ClusterBarrier(self._devices, timed=timed)
        #: The :class:`~nicoll.plan.schedule_cost.CostModel` calibrated for this cluster's
        #: data width, fabric and clock (:func:`~nicoll.plan.schedule_cost.cluster_cost_model`):
        #: what "auto" of :meth:`alltoall` picks by.
        self.cost_model = cluster_cost_model(data_width, fabric=self.fabric,
                                             clock_mhz=self.clock_mhz)
        self._collectives = CollectiveRunner(self._devices, self.config, self._barrier,
                                             timed=timed, cost=self.cost_model,
                                             hub=self._hub_device)
        self._last_start = None
        #: :class:`CallStats` of the last call; None before the first.
        self.last = None
        #: The :class:`~nicoll.schedule.Plan` the last collective ran (its ``algorithm`` says
        #: what "auto" chose); None before the first.
        self.last_plan = None
        self._faults = None
        self._fault_epoch = 0
        self._retries = retries
        if self.config.faults:
            self._collectives.stall_cycles = STALL_CYCLES
        if faults is not None:
            try:
                self.faults = faults
            except BaseException:
                self._backend.close()
                raise

    @property
    def nodes(self):
        return self.config.nodes

    @property
    def faults(self):
        """The :class:`nicoll.Faults` the network injects (None on a cluster opened without
        ``faults=``).  Setting it restarts every link's generator from the new seed."""
        return self._faults

    @faults.setter
    def faults(self, faults):
        self._check_open()
        if not self.config.faults:
            raise NicollError("this cluster was opened without faults=; open it with "
                              "faults=nicoll.Faults(...) to build the fault injectors")
        if not isinstance(faults, Faults):
            raise NicollError(f"faults must be a nicoll.Faults, not {faults!r}")
        self._program_faults(faults)
        self._faults = faults

    def _program_faults(self, faults, salt=0, target=True):
        """Write ``faults`` to the injectors in a new epoch, its seed moved by ``salt`` (the
        retry of a call), without its target unless ``target``."""
        if salt or not target:
            faults = dataclasses.replace(
                faults, seed=(faults.seed + salt * _SEED_STEP) & 0xFFFF_FFFF,
                target=faults.target if target else None)
        self._fault_epoch = self._fault_epoch % 255 + 1     # never 0, the injectors' reset
        self._backend.faults_set(pack_config(faults, self._fault_epoch))

    @property
    def retries(self):
        """How many times a call that failed while the network injected faults is run again
        (after a :meth:`reset`) before its error is raised; 0 on a cluster without faults."""
        return self._retries

    @retries.setter
    def retries(self, retries):
        _check_retries(retries, self.config)
        self._retries = retries

    def fault_counts(self):
        """What the links counted since :attr:`faults` was last set (or the last
        :meth:`reset`), as a :class:`nicoll.faults.FaultCounts`."""
        self._check_open()
        counters = self._fault_counters()
        if counters is None:
            raise NicollError("this cluster was opened without faults=: it counts no faults")
        return difference([dict.fromkeys(c, 0) for c in counters], counters)

    def _fault_counters(self):
        """Every link's counters now (None without fault injection)."""
        if not self.config.faults:
            return None
        return unpack_counters(self._backend.faults_get())

    def _attempt(self, run):
        """``run()`` (a call that sets :attr:`last`), observed: on a cluster with fault
        injection what the links counted goes to ``last.faults``, a failure's message says
        what the network did, and a call that failed while the network injected a fault is
        run again after a :meth:`reset`, at most :attr:`retries` times (docs/faults.md)."""
        failures = []
        while True:
            before = self._fault_counters()
            try:
                result = run()
            except NicollError as exc:
                if before is None:
                    raise
                counts = difference(before, self._fault_counters())
                failures.append(f"{exc}; {counts.summary()}")
                if len(failures) > self.retries or not (counts.injected or counts.lost):
                    tries = ("" if len(failures) == 1 else
                             f"{len(failures)} tries failed: " + "; ".join(
                                 f"try {k}: {text}" for k, text in enumerate(failures[:-1], 1))
                             + f"; try {len(failures)}: ")
                    raise NicollError(f"{tries}{failures[-1]}; cl.reset() makes the cluster "
                                      f"usable again") from exc
                # The retry meets other faults: its generators start from another seed, and
                # a target, which hits its packet once, is not set again.
                self._reset(salt=len(failures), target=False)
                continue
            if before is not None and self.last is not None:
                self.last = dataclasses.replace(
                    self.last, faults=difference(before, self._fault_counters()),
                    tries=len(failures) + 1, failed_tries=tuple(failures))
            return result

    def reset(self):
        """Bring every node, the switch and the links back to their power-on state, as after
        a failed call (docs/faults.md): queues, barrier units, repack units and packets in
        flight are cleared; device memory keeps its contents.  The barrier tree is programmed
        again at the next barrier, and the fault generators restart from their seed."""
        self._check_open()
        self._reset()

    def _reset(self, salt=0, target=True):
        self._backend.reset()
        self._barrier.forget()
        self._last_start = None
        if self._faults is not None:
            self._program_faults(self._faults, salt, target)

    @property
    def data_width(self):
        return self.config.data_width

    @property
    def devices(self):
        self._check_open()
        return list(self._devices)

    @property
    def repack_device(self):
        """The :class:`~nicoll.Device` whose repack units serve ``"aggregate"`` exchanges:
        node 0's, or with ``repack_node=True`` the repack node's (node id ``nodes``)."""
        self._check_open()
        return self._hub_device

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
        if not self._backend.traces:
            raise NicollError(f"an activity trace is taken from the Verilator simulation's "
                              f"signals; this cluster runs on the {self.backend!r} backend")
        trace = ActivityTrace()
        self._last_start = None
        self._backend.trace_start()
        try:
            yield trace
        finally:
            raw = self._backend.trace_stop()
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
        self._barrier.configure(tree)

    @property
    def barrier_tree(self):
        """The :class:`~nicoll.hw.tree.BarrierTree` in use (None until the first barrier)."""
        return self._barrier.tree

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
        def run():
            result, self.last = self._barrier.run(arrive, mode, m, c, estimate)
            return result
        return self._attempt(run)

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
        self._collectives.check_call("allreduce", algorithm, options, op, xs[0].dtype)
        plan = _schedule.allreduce(self.nodes, xs[0].size, xs[0].dtype, op, algorithm, **options)
        return [y.reshape(xs[0].shape) for y in self._run(plan, xs)]

    def reduce(self, xs, op="sum", root=0, algorithm="auto", **options):
        """Rank ``root`` gets the reduction of every rank's array; the others get None.
        Arguments as :meth:`allreduce`."""
        xs = self._arrays("reduce", xs)
        self._collectives.check_call("reduce", algorithm, options, op, xs[0].dtype)
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
        self._collectives.check_call("reduce_scatter", algorithm, options, op, xs[0].dtype)
        plan = _schedule.reduce_scatter(self.nodes, xs[0].size, xs[0].dtype, op, counts,
                                        algorithm, **options)
        return self._run(plan, xs)

    def allgather(self, xs, algorithm="auto", **options):
        """Every rank gets the ranks' arrays concatenated in rank order (``numpy.concatenate``).

        :param xs: one numpy array per rank, all of one shape and dtype (any fixed-size type).
        :param algorithm: as :meth:`allreduce`.
        """
        xs = self._arrays("allgather", xs)
        self._collectives.check_call("allgather", algorithm, options)
        plan = _schedule.allgather(self.nodes, xs[0].size, xs[0].dtype, algorithm, **options)
        shape = xs[0].shape
        shape = (self.nodes * shape[0],) + shape[1:] if shape else (self.nodes,)
        return [y.reshape(shape) for y in self._run(plan, xs)]

    def alltoall(self, xs, algorithm="auto", *, scratch_blocks=None, subgroup=None, **options):
        """Rank i's array (taken flat) is cut into N equal blocks; block j goes to rank j,
        where it is block i.

        :param algorithm: ``"pairwise"``, ``"bruck"``, ``"inplace"`` (seed 001, in the
            input's place with ``scratch_blocks`` blocks of scratch, default 1),
            ``"aggregate"`` (seed 003: through the repack units of node 0 or of the repack
            node) or ``"auto"``: pairwise, bruck or (with repack units in the build and no ``options``)
            aggregate, whichever the cost models calibrated for this cluster's data width,
            fabric and clock give fewer cycles
            (:func:`nicoll.plan.schedule_cost.cluster_cost_model`,
            :func:`nicoll.plan.repack_cost.cluster_repack_cycles`; ``last_plan.algorithm``
            says which).
        :param subgroup: with ``"aggregate"``, the sub-matrix size dh = dv (seed 003); None:
            the repack planner's choice.
        :param options: ``segments`` of :func:`nicoll.schedule.alltoall`.
        :returns: one array per rank, of the inputs' shape.
        """
        xs = self._arrays("alltoall", xs)
        self._collectives.check_call("alltoall", algorithm, options)
        size = xs[0].size
        if size % self.nodes:
            raise NicollError(f"alltoall cuts each array into {self.nodes} equal blocks; "
                              f"{size} elements do not divide by {self.nodes}")
        if scratch_blocks is not None:
            options["scratch_blocks"] = scratch_blocks
        check_subgroup(algorithm, subgroup)
        if algorithm == "aggregate":
            if options:
                raise NicollError(f"alltoall 'aggregate' takes no options, not "
                                  f"{', '.join(map(repr, options))}")
            raw = [np.ascontiguousarray(x).reshape(-1).view(np.uint8) for x in xs]
            step = size // self.nodes * xs[0].dtype.itemsize
            blocks = [[r[j * step:(j + 1) * step] for j in range(self.nodes)] for r in raw]
            out = self._run_aggregate("alltoall", blocks, subgroup)
            return [np.concatenate(row).view(xs[0].dtype).reshape(xs[0].shape) for row in out]
        block = size // self.nodes
        plan = None
        if algorithm == "auto" and "scratch_blocks" not in options:
            step = block * xs[0].dtype.itemsize
            plan = self._auto_exchange(
                lambda candidate: _schedule.alltoall(self.nodes, block, xs[0].dtype, candidate,
                                                     **options),
                ("pairwise", "bruck"), [[step] * self.nodes] * self.nodes, options)
            if plan == "aggregate":
                return self.alltoall(xs, "aggregate")
        if plan is None:
            plan = _schedule.alltoall(self.nodes, block, xs[0].dtype, algorithm, **options)
        return [y.reshape(xs[0].shape) for y in self._run(plan, xs)]

    def alltoallv(self, blocks, algorithm="auto", *, subgroup=None, **options):
        """``blocks[i][j]`` (a 1-D array, possibly empty) goes from rank i to rank j.

        :param algorithm: ``"pairwise"``, ``"aggregate"`` (seed 003: through the repack units
            of node 0, or of the repack node) or ``"auto"``: aggregate when the build has
            repack units that can take these blocks, the call no ``options``, and the
            calibrated estimate of the exchange through them
            (:func:`nicoll.plan.repack_cost.cluster_repack_cycles`, at the mean block
            length) is below pairwise's (:func:`nicoll.plan.schedule_cost.cluster_cost_model`),
            else pairwise.
        :param subgroup: with ``"aggregate"``, the sub-matrix size dh = dv (seed 003); None:
            the repack planner's choice.
        :param options: ``segments`` of :func:`nicoll.schedule.alltoallv`.
        :returns: ``out`` with ``out[j][i]`` the block rank i sent to rank j.
        """
        self._check_open()
        n = self.nodes
        self._collectives.check_blocks(blocks)
        self._collectives.check_call("alltoallv", algorithm, options)
        check_subgroup(algorithm, subgroup)
        dtype = blocks[0][0].dtype
        sizes = [[blocks[i][j].size for j in range(n)] for i in range(n)]
        plan = None
        if algorithm == "auto":
            plan = self._auto_exchange(
                lambda candidate: _schedule.alltoallv(sizes, dtype, candidate, **options),
                ("pairwise",), [[s * dtype.itemsize for s in row] for row in sizes], options)
            if plan == "aggregate":
                algorithm = "aggregate"
        if algorithm == "aggregate":
            if options:
                raise NicollError(f"alltoallv 'aggregate' takes no options, not "
                                  f"{', '.join(map(repr, options))}")
            raw = [[np.ascontiguousarray(b).view(np.uint8) for b in row] for row in blocks]
            out = self._run_aggregate("alltoallv", raw, subgroup)
            return [[block.view(dtype) for block in row] for row in out]
        if plan is None:
            plan = _schedule.alltoallv(sizes, dtype, algorithm, **options)
        inputs = [np.concatenate([np.ascontiguousarray(b) for b in row]) for row in blocks]
        outputs = self._run(plan, inputs)
        out = []
        for j, y in enumerate(outputs):
            bounds = np.cumsum([0] + [sizes[i][j] for i in range(n)])
            out.append([y[bounds[i]:bounds[i + 1]] for i in range(n)])
        return out

    def _auto_exchange(self, compile_plan, candidates, lengths, options):
        """``auto`` of an all-to-all(-v): "aggregate" when the build has repack units, the
        call no ``options``, and the calibrated estimate of the exchange through the units
        (:meth:`CollectiveRunner.aggregate_estimate`, at the byte ``lengths`` of its blocks)
        is below every direct schedule's; else the cheapest of the direct ``candidates``
        (``compile_plan(algorithm)``) the nodes can run, or None when none can."""
        cheapest = self._collectives.cheapest(_compiled(compile_plan, candidates))
        aggregate = (None if options or not self._hub_device.repack.units else
                     self._collectives.aggregate_estimate(lengths))
        if aggregate is not None and (cheapest is None or aggregate[0] < cheapest[0]):
            return "aggregate"
        return None if cheapest is None else cheapest[1]

    # -- posting a collective -------------------------------------------------------------

    def _arrays(self, what, xs):
        """Check one numpy array per rank, all of one shape and dtype."""
        self._check_open()
        return self._collectives.check_arrays(what, xs)

    def _run(self, plan, inputs):
        """Post a compiled plan on every node, run it and return each rank's output (1-D)."""
        self.last_plan = plan
        def run():
            outputs, self.last, self._last_start = self._collectives.run(plan, inputs)
            return outputs
        return self._attempt(run)

    def _run_aggregate(self, what, blocks, subgroup=None):
        """Exchange ``blocks[i][j]`` (uint8 arrays) through the repack units (node 0's or the
        repack node's); returns ``out[j][i]`` (uint8 arrays)."""
        lengths = [[len(b) for b in row] for row in blocks]
        self.last_plan = self._collectives.lay_out_aggregate(what, blocks, lengths, subgroup)
        def run():
            out, self.last, self._last_start = self._collectives.run_aggregate(self.last_plan,
                                                                               lengths)
            return out
        return self._attempt(run)

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


def _compiled(compile_plan, candidates):
    """``compile_plan(algorithm)`` of each of ``candidates`` that takes the call's options."""
    plans = []
    for algorithm in candidates:
        try:
            plans.append(compile_plan(algorithm))
        except NicollError:
            pass
    return plans
