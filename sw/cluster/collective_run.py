"""The machinery of a cluster's collectives (seeds 000-003).

:class:`CollectiveRunner` checks a call's arguments (one array per rank, the blocks of
``alltoallv``, the algorithm and its options, the op and type the build's ALU must compute)
before anything is posted; runs a compiled plan on every node (each rank's input into its
device memory, its schedule into its engine's queue, every engine armed for one common start
cycle, the wait, the outputs read back, the engines' counters recorded); and runs an
aggregate exchange through the repack units (node 0's or the repack node's; seed 003).  Both
wait for the engines in one loop, within a cycle budget made from the call's figures
(``_BUDGET_*``).
"""

import numpy as np

from .. import schedule as _schedule
from ..driver.engine import ERROR_NAMES, error_text
from ..errors import NicollError
from .results import AggregatePlan, CallStats
from .timing import ARM_ACCESSES, check_armed_in_time, poll_pause, start_cycle
from nicoll.hw.engine.transmit import PROBE_CYCLES, PROBE_TRIES

__all__ = ["CollectiveRunner", "check_subgroup", "load_input", "read_output"]

#: A collective's cycle budget, from its plan: a fixed allowance, then per step of any rank (a
#: clear-to-send round trip through the switch and the ALU pipeline), per beat any rank sends
#: (as if the switch carried one beat at a time for the whole cluster), and per barrier step
#: (notices up and down the barrier tree).  The fixed allowance holds the engines' own
#: recovery of a lost packet, its probes' waits included, so a call that loses one ends
#: right or with ERRORS.lost before its budget (docs/faults.md, "Packet-level recovery").
_BUDGET_BASE = 2000 + (PROBE_TRIES + 1) * PROBE_CYCLES
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


def load_input(dev, schedule, x):
    """Rank input ``x`` into ``dev``'s device memory where ``schedule`` (that rank's) wants
    its pieces."""
    raw = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    for piece in schedule.load:
        dev.mem_load(piece.buffer, raw[piece.data:piece.data + piece.length])


def read_output(dev, schedule, count, dtype):
    """The rank's output of ``schedule`` (``count`` elements of ``dtype``) from ``dev``'s
    device memory, 1-D; None for a rank that gets none (``count`` None)."""
    if count is None:
        return None
    raw = bytearray(count * dtype.itemsize)
    for piece in schedule.result:
        raw[piece.data:piece.data + piece.length] = dev.mem_dump(piece.buffer, piece.length)
    return np.frombuffer(raw, dtype=dtype)


def check_subgroup(algorithm, subgroup):
    """Refuse a subgroup for an algorithm other than "aggregate", or one not a positive int."""
    if subgroup is None:
        return
    if algorithm != "aggregate":
        raise NicollError(f"subgroup sets the repack sub-matrix size of algorithm 'aggregate', "
                          f"not of {algorithm!r}")
    if not isinstance(subgroup, int) or isinstance(subgroup, bool) or subgroup < 1:
        raise NicollError(f"subgroup must be a positive int, not {subgroup!r}")


def _check_plain(what, dtype):
    """Refuse elements that are not bytes to move: objects (references into this process) and
    zero-size elements.  The aggregate path views the inputs as bytes and would fail on them
    with numpy's own error; the schedule compilers refuse them with this same message."""
    if dtype.hasobject or dtype.itemsize < 1:
        raise NicollError(f"{what}: elements must be fixed-size plain data, not {dtype}")


class CollectiveRunner:
    """Collectives on ``devices`` (one Device per rank) of a cluster of ``config``
    (:class:`~nicoll.config.ClusterConfig`); barrier steps go through ``barrier`` (its
    :class:`~nicoll.cluster.barrier_run.ClusterBarrier`).  ``timed``: the backend counts
    cycles (a simulator), so a call's cycles are measured; the device model's are not."""

    def __init__(self, devices, config, barrier, *, timed, cost, hub=None):
        self._devices = devices
        #: The device whose repack units serve aggregate exchanges (node 0's, or the repack
        #: node's: ``config.hub``).
        self._hub = devices[0] if hub is None else hub
        self._hub_id = config.hub
        #: The units are in the switch, each on a port of its own (the repack node).
        self._in_switch = config.repack_node
        self._barrier = barrier
        self._timed = timed
        self.nodes = config.nodes
        self.data_width = config.data_width
        self._alu_pairs = None
        #: The :class:`~nicoll.plan.schedule_cost.CostModel` "auto" picks by.
        self.cost = cost
        #: Cycles a wait lets pass with no progress anywhere (no step ended, no packet
        #: received by a rank not yet done) before it ends as stalled; None: only the
        #: budget ends it.  Set on a cluster with fault injection, where a lost packet
        #: would otherwise hold a call to its budget, sized for the worst contention.
        self.stall_cycles = None
        self._stalled = None

    # -- "auto" -----------------------------------------------------------------------------

    def cheapest(self, candidates):
        """``(cycles, plan)``: of ``candidates`` (compiled :class:`~nicoll.schedule.Plan`s),
        the one the cost model gives the fewest cycles among those the nodes can run (the
        buffer fits device memory, the steps the engine's queue), with its cycles; the first
        that runs on a tie; None when none can run (the caller's own choice then says why)."""
        from ..plan.schedule_exec import execute
        best = None
        for plan in candidates:
            if self._refusal(plan) is None:
                cycles = execute(plan, cost=self.cost).cycles
                if best is None or cycles < best[0]:
                    best = (cycles, plan)
        return best

    def aggregate_estimate(self, lengths):
        """``(cycles, plan)``: the calibrated estimate of an aggregate exchange of an N×N
        matrix of block byte lengths on the cluster's units, at the subgroups the repack planner
        chooses (:func:`nicoll.plan.repack_cost.cluster_repack_cycles`: on every unit of a
        repack node, where each has a switch port of its own; behind node 0's one port as
        if on one unit, an upper estimate, so that ``auto`` picks aggregate there only where
        it would win without the units' overlap); None when the units cannot take it."""
        from ..plan.repack_cost import repack_plan_cycles
        try:
            plan = self.aggregate_plan(lengths)
        except NicollError:
            return None
        return repack_plan_cycles(plan, fabric=self.cost.fabric, clock_mhz=self.cost.clock_mhz,
                                  in_switch=self._in_switch), plan

    def _refusal(self, plan):
        """Why the nodes would refuse ``plan`` (its buffer does not fit a rank's device
        memory, or its steps the engine's queue), or None."""
        for r, (schedule, dev) in enumerate(zip(plan.schedules, self._devices)):
            if schedule.buffer_bytes > dev.mem_size:
                return (f"{plan.collective} ({plan.algorithm}) needs a "
                        f"{schedule.buffer_bytes}-byte buffer on rank {r}; its device "
                        f"memory holds {dev.mem_size} bytes")
            if len(schedule.steps) > dev.engine.depth:
                return (f"{plan.collective} ({plan.algorithm}) takes "
                        f"{len(schedule.steps)} steps on rank {r}; the engine's queue "
                        f"holds {dev.engine.depth}")
        return None

    # -- argument checks -------------------------------------------------------------------

    def check_arrays(self, what, xs):
        """Check one numpy array per rank, all of one shape and dtype."""
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
        _check_plain(what, xs[0].dtype)
        return xs

    def check_blocks(self, blocks):
        """Check alltoallv's N×N blocks: 1-D numpy arrays, all of one dtype."""
        n = self.nodes
        if isinstance(blocks, (np.ndarray, str, bytes)) or not hasattr(blocks, "__len__"):
            raise NicollError(f"alltoallv takes an {n}×{n} list of lists of 1-D numpy arrays, "
                              f"not {type(blocks).__name__}")
        if len(blocks) != n:
            raise NicollError(f"alltoallv takes one row of blocks per rank: {n} rows, "
                              f"not {len(blocks)}")
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
        _check_plain("alltoallv", blocks[0][0].dtype)

    def check_call(self, what, algorithm, options, op=None, dtype=None):
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
        from ..ops import check_op_dtype
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

    # -- a compiled plan (seeds 000, 001, 002) ---------------------------------------------

    def run(self, plan, inputs):
        """Post a compiled plan on every node and run it; returns each rank's output (1-D),
        the call's :class:`CallStats` and its start cycle."""
        devices = self._devices
        # Everything the nodes would refuse is refused here, before anything is posted.
        refusal = self._refusal(plan)
        if refusal is not None:
            raise NicollError(refusal)
        barriers = sum(step.barrier for step in plan.schedules[0].steps)
        if barriers:
            # Barrier steps (seed 001, S23) run through the barrier units: they need the tree,
            # and the root must release only when every rank is done.
            if self._barrier.tree is None:
                self._barrier.configure()
            devices[self._barrier.tree.root].barrier.set_mode("normal")

        for x, schedule, dev in zip(inputs, plan.schedules, devices):
            load_input(dev, schedule, x)
            dev.engine.load(schedule, plan.op, plan.dtype if plan.op else None)
        clock = devices[0]
        start = start_cycle(clock, ARM_ACCESSES, self.nodes)
        for dev in devices:
            dev.engine.arm(start)
        check_armed_in_time(clock, start, "the engines")
        budget = self._budget(plan)
        self._wait(clock, start, budget)
        # Every rank is looked at, even when the wait saw them all done: an engine that is
        # done with an error bit set fails the call too.
        problems, failed = self._problems(at_step=True)
        if failed:
            raise NicollError(f"{plan.collective} ({plan.algorithm}) failed on the engines: "
                              + "; ".join(problems))
        if problems:
            raise NicollError(f"{plan.collective} ({plan.algorithm}) {self._ended(budget)}: "
                              + "; ".join(problems))
        self._barrier.advance(barriers)

        outputs = [read_output(dev, schedule, count, plan.dtype)
                   for schedule, dev, count in zip(plan.schedules, devices, plan.output_counts)]
        return outputs, self._stats(start), start

    def _budget(self, plan):
        """Cycles the plan may take from its start (see _BUDGET_*)."""
        width = self.data_width // 8
        steps = sum(len(s.steps) for s in plan.schedules)
        beats = sum(-(-step.send.length // width) for s in plan.schedules for step in s.steps
                    if step.send is not None)
        barriers = sum(step.barrier for step in plan.schedules[0].steps)
        return (_BUDGET_BASE + _BUDGET_PER_STEP * steps + _BUDGET_PER_BEAT * beats
                + _BUDGET_PER_BARRIER * barriers)

    # -- aggregate exchanges (seed 003) ----------------------------------------------------

    def aggregate_plan(self, lengths, subgroup=None):
        """The repack plan of the cluster's units (node 0's or the repack node's) for an N×N
        matrix of block byte lengths; NicollError when the units cannot take it."""
        from ..plan.repack import plan_subgroups
        from nicoll.hw.repack import MAX_BLOCK_BYTES
        repack = self._hub.repack
        n = self.nodes
        problem = None
        if not repack.units:
            problem = "this build has no repack units (repack block CAPS.units = 0)"
        elif n > repack.max_ranks:
            problem = f"the repack units take at most {repack.max_ranks} ranks, not {n}"
        elif max(max(row) for row in lengths) > MAX_BLOCK_BYTES:
            problem = (f"a block of {max(max(row) for row in lengths)} bytes; a repack "
                       f"message's blocks hold at most {MAX_BLOCK_BYTES} bytes")
        if problem is None:
            try:
                return plan_subgroups(n, lengths, subgroup, data_width=self.data_width,
                                      max_group=repack.max_group, capacity_bytes=repack.capacity,
                                      units=repack.units, fabric=self.cost.fabric,
                                      clock_mhz=self.cost.clock_mhz)
            except NicollError as exc:
                problem = str(exc)
        raise NicollError(f"algorithm 'aggregate' cannot run this exchange: {problem}")

    def lay_out_aggregate(self, what, blocks, lengths, subgroup=None):
        """The :class:`AggregatePlan` of exchanging ``blocks[i][j]`` (uint8 arrays, of byte
        ``lengths``) through the cluster's repack units, once every rank's memory holds its
        part."""
        from ..driver.repack import layout
        plan = self.aggregate_plan(lengths, subgroup=subgroup)
        layouts = layout(plan, blocks)
        for r, (lay, dev) in enumerate(zip(layouts, self._devices)):
            if lay.end > dev.mem_size:
                raise NicollError(f"{what} (aggregate) needs {lay.end} bytes of device memory "
                                  f"on rank {r}; it holds {dev.mem_size}")
        return AggregatePlan(collective=what, repack=plan, layouts=tuple(layouts))

    def run_aggregate(self, aggregate, lengths):
        """Run the exchange of an :class:`AggregatePlan`; returns ``out[j][i]`` (uint8 arrays),
        the call's :class:`CallStats` and its start cycle."""
        from ..driver.repack import aggregate_command, read_messages
        what, plan, layouts = aggregate.collective, aggregate.repack, aggregate.layouts
        n = self.nodes
        devices = self._devices
        hub = self._hub
        for lay, dev in zip(layouts, devices):
            dev.mem_load(0, lay.image)
            dev.mem_load(lay.recv_offset, bytes(lay.receives * lay.recv_slot))
            dev.engine.clear()
            dev.engine.push(aggregate_command(lay, self._hub_id))
            dev.engine.wait_pushes(1)
            dev.engine.check()
        hub.repack.lists(plan)
        clock = devices[0]
        start = start_cycle(clock, ARM_ACCESSES + hub.repack.START_ACCESSES, n)
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
        check_armed_in_time(clock, start, "the engines")
        if not self._wait(clock, start, budget):
            control = hub.repack.status()
            problems, _ = self._problems(at_step=False)
            code = control["code"]
            raise NicollError(f"{what} (aggregate) {self._ended(budget)}: "
                              + "; ".join(problems) + f"; the repack control tree "
                              f"{'runs' if control['busy'] else 'ended'} with status "
                              f"{getattr(code, 'name', code)}")
        received = [read_messages(dev, lay) for dev, lay in zip(devices, layouts)]
        out = plan.gather_results(received)
        return out, self._stats(start), start

    # -- the wait and the figures ----------------------------------------------------------

    def _wait(self, clock, start, budget):
        """Wait until every engine is done; True if they all are, False once one stops with
        an error or ``budget`` cycles have passed since ``start``.  Each poll looks at every
        rank not yet done, so an error anywhere ends the wait at once (a rank waiting for
        what an erring one will never send would otherwise hold it to the budget)."""
        pending = list(range(self.nodes))
        self._stalled = None
        seen, quiet_since = None, 0
        while True:
            progress = []
            for rank in list(pending):
                engine = self._devices[rank].engine
                status = engine.status()
                if status.error:
                    return False
                if status.done:
                    pending.remove(rank)
                elif self.stall_cycles is not None:
                    progress.append((rank, status.step, engine.packets_received()))
            if not pending:
                return True
            elapsed = clock.cycles() - start
            if elapsed > budget:
                return False
            if self.stall_cycles is None:
                pass
            elif progress != seen:
                seen, quiet_since = progress, elapsed
            elif elapsed - quiet_since > self.stall_cycles:
                self._stalled = elapsed - quiet_since
                return False
            clock.idle(poll_pause(elapsed))

    def _ended(self, budget):
        """How a wait that returned False without an error ended."""
        if self._stalled is not None:
            return (f"made no progress for {self._stalled} cycles (no step ended and no "
                    f"packet arrived at a rank not yet done; a lost packet?)")
        return f"did not finish on every rank within {budget} cycles of its start"

    def _problems(self, at_step):
        """What each rank whose engine is not done without errors is at (``at_step``: with the
        step it is at), and whether any reports an error."""
        problems, failed = [], False
        for rank, dev in enumerate(self._devices):
            status, errors = dev.engine.status(), dev.engine.errors()
            if status.done and not errors:
                continue
            names = [name for name in ERROR_NAMES if name in errors]
            failed |= bool(names)
            where = f" at step {status.step} of {status.queued}" if at_step else ""
            problems.append(f"rank {rank} stopped{where} with {error_text(names)}" if names
                            else f"rank {rank} waits{where}")
        return problems, failed

    def _stats(self, start):
        """The call's :class:`CallStats` from the engines' counters."""
        devices = self._devices
        counters = [dev.engine.counters() for dev in devices]
        cycles = rank_cycles = None
        if self._timed:
            rank_cycles = [dev.engine.finished_at() - start for dev in devices]
            cycles = max(rank_cycles)
        return CallStats(cycles=cycles, rank_cycles=rank_cycles,
                         bytes_sent=[c["bytes_sent"] for c in counters],
                         bytes_received=[c["bytes_received"] for c in counters],
                         packets=[c["packets_sent"] for c in counters],
                         packets_received=[c["packets_received"] for c in counters],
                         alu_beats=[c["alu_beats"] for c in counters])
