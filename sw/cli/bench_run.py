"""OSU-style benchmarks of the collectives: cycles from the hardware counters.

``nicoll bench allreduce --nodes 8 --sizes 1:1M --backend verilator`` runs one collective over
a doubling sweep of message sizes on one simulated cluster and reports, per size and
algorithm: the cycles every rank's engine took from the common start (average, minimum and
maximum over the ranks), the time at a given clock, the algorithm and bus bandwidths, and the
efficiency against the bound of DESIGN.md ("Measures"):

- allreduce: ``2 (N-1)/N · L / W`` cycles (Rabenseifner / Chan bound);
- reduce_scatter, allgather, alltoall: ``(N-1)/N · L / W``;
- reduce: ``(N-1)/N · L / W`` (the reduce-scatter half every reduce must do, a lower bound);

with ``L`` the bytes of the whole vector per rank (for allgather: of the gathered result) and
``W`` the bytes per beat.  Cycle counts are deterministic for a configuration and input, so
one run per size is enough: nothing here is timed on the host.

The cluster is built with just the (op, dtype) pair the sweep uses and device memory for the
largest size, so each configuration builds once (cached) and quickly.
"""

from dataclasses import dataclass
import math
import time

import numpy as np

from .. import schedule as _schedule
from ..errors import NicollError
from ..ops import check_op_dtype, numpy_dtype

__all__ = ["BenchRow", "COLLECTIVES", "parse_sizes", "bound_cycles", "bus_factor", "run_bench",
           "format_size", "same_outputs", "write_csv"]

#: Collectives ``nicoll bench`` runs.
COLLECTIVES = ("allreduce", "reduce", "reduce_scatter", "allgather", "alltoall")

_UNITS = {"k": 1 << 10, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def write_csv(path, rows):
    """``rows`` (each with ``as_dict()``, all of one set of fields) as a CSV file at ``path``,
    a header line first: the ``--csv`` of ``nicoll bench`` and of ``nicoll bench --mpi``."""
    import csv
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].as_dict()))
        writer.writeheader()
        for row in rows:
            writer.writerow(row.as_dict())


def _size(text):
    text = text.strip()
    try:
        if text and text[-1] in _UNITS:
            return int(text[:-1]) * _UNITS[text[-1]]
        return int(text, 0)
    except ValueError:
        raise NicollError(f"a size is a byte count such as 64, 4k or 1M, not {text!r}") from None


def parse_sizes(text):
    """``"1:1M"`` (doubling from 1 byte to 1 MiB), ``"1k"`` or ``"64,4k,1M"``: byte counts."""
    if ":" in text:
        low, _, high = text.partition(":")
        low, high = _size(low), _size(high)
        if not 1 <= low <= high:
            raise NicollError(f"a size range needs 1 <= low <= high, not {text!r}")
        out, size = [], low
        while size <= high:
            out.append(size)
            size *= 2
        return out
    sizes = [_size(part) for part in text.split(",")]
    if any(size < 1 for size in sizes):
        raise NicollError(f"sizes must be at least one byte, not {text!r}")
    return sizes


def format_size(size):
    for unit, factor in (("M", 1 << 20), ("k", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def bus_factor(collective, nodes):
    """Bus bandwidth = algorithm bandwidth × this factor (the bytes each rank must move per
    byte of its message, as OSU and nccl-tests count them)."""
    if nodes == 1:
        return 0.0
    if collective == "allreduce":
        return 2 * (nodes - 1) / nodes
    return (nodes - 1) / nodes


def bound_cycles(collective, nodes, size, data_width):
    """The DESIGN.md bound, in cycles, for ``size`` bytes per rank (module docstring)."""
    beat = data_width // 8
    whole = size * nodes if collective == "allgather" else size
    return bus_factor(collective, nodes) * whole / beat


@dataclass(frozen=True)
class BenchRow:
    """One line of a sweep."""
    collective: str
    algorithm: str
    nodes: int
    size: int               # bytes of each rank's message (its input; allgather: its part)
    cycles_avg: float
    cycles_min: int
    cycles_max: int
    bound: float            # cycles, see bound_cycles
    correct: bool
    clock_mhz: float
    #: The cycles are the calibrated cost model's estimate, not hardware counters (the
    #: model backend counts none): :func:`nicoll.plan.schedule_cost.cluster_cost_model`.
    estimated: bool = False

    @property
    def microseconds(self):
        return self.cycles_max / self.clock_mhz

    @property
    def algbw_gbs(self):
        """Bytes of the message per second of the slowest rank, in GB/s."""
        return self.size / (self.microseconds * 1e3) if self.cycles_max else 0.0

    @property
    def busbw_gbs(self):
        return self.algbw_gbs * bus_factor(self.collective, self.nodes)

    @property
    def efficiency(self):
        return self.bound / self.cycles_max if self.cycles_max and self.bound else None

    def as_dict(self):
        eff = self.efficiency
        return {"collective": self.collective, "algorithm": self.algorithm, "nodes": self.nodes,
                "size": self.size, "cycles_avg": round(self.cycles_avg, 1),
                "cycles_min": self.cycles_min, "cycles_max": self.cycles_max,
                "clock_MHz": self.clock_mhz,
                "us": round(self.microseconds, 3), "algbw_GBps": round(self.algbw_gbs, 3),
                "busbw_GBps": round(self.busbw_gbs, 3), "bound": round(self.bound, 1),
                "efficiency": None if eff is None else round(eff, 4), "correct": self.correct,
                "estimated": self.estimated}


def same_outputs(outputs, expected):
    """Every rank's output is bit for bit the expected one (None where none is expected)."""
    return all((o is None and w is None)
               or (o is not None and w is not None and o.tobytes() == w.tobytes())
               for o, w in zip(outputs, expected))


def _inputs(rng, collective, nodes, count, dtype):
    if collective == "alltoall":
        count = max(nodes, count - count % nodes)
    if dtype.kind in "iu":
        return [rng.integers(0, 100, count).astype(dtype) for _ in range(nodes)]
    return [rng.standard_normal(count).astype(dtype) for _ in range(nodes)]


def _expected(collective, xs, op, algorithm):
    from ..plan import reduction_order
    if collective == "allgather":
        whole = np.concatenate(xs)
        return [whole] * len(xs)
    if collective == "alltoall":
        nodes = len(xs)
        parts = [np.split(x, nodes) for x in xs]
        return [np.concatenate([parts[i][j] for i in range(nodes)]) for j in range(nodes)]
    return reduction_order.reference(collective, xs, op, algorithm)


def _call(cluster, collective, xs, op, algorithm):
    if collective == "allgather":
        return cluster.allgather(xs, algorithm)
    if collective == "alltoall":
        return cluster.alltoall(xs, algorithm)
    return getattr(cluster, collective)(xs, op, algorithm=algorithm)


def _plan(collective, nodes, count, dtype, op, algorithm):
    if collective == "allgather":
        return _schedule.allgather(nodes, count, dtype, algorithm)
    if collective == "alltoall":
        # An aggregate exchange's slots take about what pairwise exchange's buffers do.
        return _schedule.alltoall(nodes, max(nodes, count - count % nodes), dtype,
                                  "pairwise" if algorithm == "aggregate" else algorithm)
    if collective == "reduce":
        return _schedule.reduce(nodes, count, dtype, op, 0, algorithm)
    if collective == "reduce_scatter":
        return _schedule.reduce_scatter(nodes, count, dtype, op, None, algorithm)
    return _schedule.allreduce(nodes, count, dtype, op, algorithm)


def _estimator(cluster):
    """On a backend that counts no cycles (the model): a function giving the calibrated cost
    models' cycles for the plan that ran, a schedule's
    (:func:`nicoll.plan.schedule_cost.cluster_cost_model`) or an aggregate exchange's
    (:func:`nicoll.plan.repack_cost.repack_plan_cycles`, at its subgroups, on every unit of
    a repack node)."""
    if cluster.backend != "model":
        return None
    from ..plan.repack_cost import repack_plan_cycles
    from ..plan.schedule_exec import execute
    cost = cluster.cost_model

    def estimate(plan):
        if hasattr(plan, "schedules"):
            return execute(plan, cost=cost).cycles
        return repack_plan_cycles(plan.repack, fabric=cost.fabric, clock_mhz=cost.clock_mhz,
                                  in_switch=cluster.config.repack_node)
    return estimate


def run_bench(collective, *, nodes=8, sizes=(1, 1 << 20), algorithms=("auto",),
              backend="verilator", dtype="float32", op="sum", data_width=256, max_nodes=None,
              mem_size=None, clock_mhz=125.0, repack_units=1, repack_node=False, fabric="ideal",
              progress=None,
              on_row=None):
    """Run the sweep; return ``(rows, figures)``.

    ``fabric``: the network between the NICs and the switch (a profile name of
    :data:`nicoll.FABRICS` or a :class:`nicoll.Fabric`), converted to cycles at ``clock_mhz``.

    ``repack_units``: the repack units serving algorithm "aggregate": node 0's, or with
    ``repack_node`` those of a node of their own on the switch.
    ``mem_size`` (bytes of device memory per node) defaults to the smallest power of two the
    largest size needs; giving it lets sweeps of different sizes share one build.
    ``figures`` holds ``simulated_cycles``, ``wall_seconds`` and ``cycles_per_second`` (the
    cluster's simulated cycles per wall second over the whole sweep, loading included).
    ``progress(message)`` hears what is happening; ``on_row(row)`` gets each row as it comes.
    On the model backend, which counts no cycles, a row's cycles are the calibrated cost
    models' estimate for the plan that ran (``BenchRow.estimated``).
    """
    from ..cluster import Cluster
    if collective not in COLLECTIVES:
        raise NicollError(f"nicoll bench runs one of {', '.join(COLLECTIVES)}, "
                          f"not {collective!r}")
    if collective == "alltoall":
        known = _schedule.ALLTOALL_ALGORITHMS + ("aggregate",)
    else:
        known = _schedule.REDUCTION_ALGORITHMS
    for algorithm in algorithms:
        if algorithm != "auto" and algorithm not in known:
            raise NicollError(f"{collective} has no algorithm {algorithm!r}; choose from "
                              f"{', '.join(('auto',) + tuple(known))}")
    np_dtype = np.dtype(numpy_dtype(check_op_dtype("sum", dtype)[1]))
    pair = check_op_dtype(op, np_dtype)
    # Sizes below one element all run as one element: one row for them, not several alike.
    counts = sorted({max(1, size // np_dtype.itemsize) for size in sizes})
    sizes = [count * np_dtype.itemsize for count in counts]
    need = max(max(s.buffer_bytes for s in _plan(collective, nodes, counts[-1], np_dtype,
                                                  op, "recursive_halving" if a == "auto"
                                                  and collective != "alltoall" else
                                                  ("pairwise" if a == "auto" else a)).schedules)
               for a in algorithms)
    if mem_size is None:
        mem_size = max(1 << 12, 1 << math.ceil(math.log2(max(need, 1))))
    elif mem_size < need:
        raise NicollError(f"the sweep needs {need} bytes of device memory per node; "
                          f"--mem-size gives {mem_size}")
    say = progress or (lambda message: None)
    say(f"opening {nodes} nodes on {backend} (data_width {data_width}, "
        f"{format_size(mem_size)} B of device memory per node)")
    rows = []
    rng = np.random.default_rng(1)
    with Cluster(nodes=nodes, backend=backend, data_width=data_width,
                 max_nodes=max_nodes or max(8, nodes + repack_node), mem_size=mem_size,
                 alu_capabilities=[pair], repack_units=repack_units, repack_node=repack_node,
                 fabric=fabric,
                 clock_mhz=clock_mhz, progress=progress) as cluster:
        clock = cluster.device(0)
        first = clock.cycles()
        estimator = _estimator(cluster)
        t0 = time.monotonic()
        for size, count in zip(sizes, counts):
            xs = _inputs(rng, collective, nodes, count, np_dtype)
            for algorithm in algorithms:
                say(f"{collective} {algorithm}, {format_size(size)} B per rank")
                outputs = _call(cluster, collective, xs, op, algorithm)
                want = _expected(collective, xs, op,
                                 algorithm if algorithm != "auto" else
                                 cluster.last_plan.algorithm)
                correct = same_outputs(outputs, want)
                last = cluster.last
                per_rank = last.rank_cycles or None
                estimate = (estimator(cluster.last_plan)
                            if per_rank is None and estimator is not None else None)
                estimated = estimate is not None
                if per_rank is None:
                    per_rank = [estimate if estimated else 0] * nodes
                row = BenchRow(collective=collective, algorithm=cluster.last_plan.algorithm,
                               nodes=nodes, size=xs[0].nbytes, cycles_avg=float(np.mean(per_rank)),
                               cycles_min=int(min(per_rank)), cycles_max=int(max(per_rank)),
                               bound=bound_cycles(collective, nodes, xs[0].nbytes, data_width),
                               correct=correct, clock_mhz=clock_mhz, estimated=estimated)
                rows.append(row)
                if on_row:
                    on_row(row)
        wall = time.monotonic() - t0
        simulated = clock.cycles() - first
    figures = {"simulated_cycles": simulated, "wall_seconds": wall,
               "cycles_per_second": simulated / wall if wall else None}
    return rows, figures
