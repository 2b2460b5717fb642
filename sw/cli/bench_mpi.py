"""``nicoll bench allreduce --mpi``: allreduce through :class:`nicoll.mpi.Comm`, one process per
rank under ``mpiexec``, against a running ``nicoll serve`` (issue 21's host overhead).

    mpiexec -n 8 nicoll bench allreduce --mpi --address unix:/tmp/n.sock --sizes 8,1M

Each rank calls ``Comm.Allreduce`` on its own buffer, ``--repeat`` times per size after one
call that is not timed.  Rank 0 prints, per size, two figures kept apart:

- **cycles**: the in-NIC time, from the engines' counters: the largest over the ranks of
  FINISHED_AT − STARTED_AT of the call's collective (every engine starts in the same cycle).
  The model backend counts no cycles (transfers take none), so on it the column is the
  calibrated cost model's estimate for the plan that ran, marked ``~``, as in ``nicoll
  bench`` (:func:`nicoll.plan.schedule_cost.cluster_cost_model`).
- **host µs**: the wall time of one ``Comm.Allreduce`` call, everything the host does:
  argument checks, the schedule compile, loading the input and the schedule over the
  socket, the rendezvous, polling the engine, reading the result back, and the backend's
  own simulation time.  The ranks line up on a host MPI barrier before each call; a call's
  time is the largest over the ranks (the collective is over when the last rank has its
  answer); mean and median over the repetitions.

Inputs are small integers in the bench's dtype, so every sum is exact and each size's answer
is checked against the host MPI's ``Allreduce`` of the same data (the ``result`` column).
"""

import statistics
import sys
import time

import numpy as np

from ..errors import NicollError
from ..ops import check_op_dtype, numpy_dtype

__all__ = ["MpiBenchRow", "run_mpi_bench", "bench_mpi_command"]

#: mpi4py's op objects by nicoll's op names (those ``nicoll bench --mpi`` takes).
_MPI_OPS = {"sum": "SUM", "prod": "PROD", "min": "MIN", "max": "MAX", "band": "BAND",
            "bor": "BOR", "bxor": "BXOR"}


class MpiBenchRow:
    """One size of the sweep, as rank 0 reports it."""

    def __init__(self, size, count, cycles, estimated, host_us, correct):
        self.size = size                    # bytes of each rank's buffer
        self.count = count                  # its elements
        self.cycles = cycles                # in-NIC cycles (estimated: the cost model's)
        self.estimated = estimated
        self.host_us = tuple(host_us)       # each timed call, µs
        self.correct = correct

    @property
    def host_mean_us(self):
        return statistics.fmean(self.host_us)

    @property
    def host_median_us(self):
        return statistics.median(self.host_us)

    def as_dict(self):
        return {"size": self.size, "count": self.count, "cycles": self.cycles,
                "estimated": self.estimated, "host_mean_us": round(self.host_mean_us, 1),
                "host_median_us": round(self.host_median_us, 1),
                "host_min_us": round(min(self.host_us), 1), "calls": len(self.host_us),
                "correct": self.correct}


def run_mpi_bench(nc, sizes, *, dtype="float32", op="sum", repeat=20):
    """Run the sweep on :class:`nicoll.mpi.Comm` ``nc`` (every rank calls this); returns the
    rows on rank 0, None on the others."""
    from mpi4py import MPI
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
        raise NicollError(f"repeat must be a positive integer, not {repeat!r}")
    if op not in _MPI_OPS:
        raise NicollError(f"nicoll bench --mpi runs the ops {', '.join(_MPI_OPS)}, not {op!r}")
    np_dtype = np.dtype(numpy_dtype(check_op_dtype(op, dtype)[1]))
    mpi_op = getattr(MPI, _MPI_OPS[op])
    comm = nc.comm
    rank, nodes = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(1 + rank)
    backend = nc.device.transport.backend
    rows = []
    for size in sizes:
        count = max(1, size // np_dtype.itemsize)
        # Small non-negative integers: sums, products, ... are exact in any dtype.
        x = rng.integers(0, 2 if op == "prod" else 4, count).astype(np_dtype)
        got, want = np.empty_like(x), np.empty_like(x)
        comm.Allreduce(x, want, op=mpi_op)
        nc.Allreduce(x, got, op=mpi_op)             # not timed: the first call of a size
        correct = got.tobytes() == want.tobytes()
        times = []
        for _ in range(repeat):
            comm.Barrier()
            began = time.perf_counter()
            nc.Allreduce(x, got, op=mpi_op)
            times.append((time.perf_counter() - began) * 1e6)
        engine = nc.device.engine
        cycles = engine.finished_at() - engine.started_at()
        cycles = comm.reduce(cycles, op=MPI.MAX, root=0)
        slowest = np.empty(repeat)
        comm.Reduce(np.array(times), slowest, op=MPI.MAX, root=0)
        correct = comm.allreduce(correct, op=MPI.LAND)
        if rank != 0:
            continue
        estimated = backend == "model"
        if estimated:
            cycles = _estimate(nodes, count, np_dtype, op, nc.device.data_width)
        rows.append(MpiBenchRow(size, count, int(cycles), estimated, slowest.tolist(), correct))
    return rows if rank == 0 else None


def _estimate(nodes, count, dtype, op, data_width):
    """The calibrated cost model's cycles for the plan :meth:`Comm.Allreduce` runs."""
    from .. import schedule as _schedule
    from ..plan.schedule_cost import cluster_cost_model
    from ..plan.schedule_exec import execute
    plan = _schedule.allreduce(nodes, count, dtype, op, "recursive_halving")
    return execute(plan, cost=cluster_cost_model(data_width)).cycles


def format_rows(rows, *, nodes, backend, dtype, op, repeat):
    """The OSU-style text table rank 0 prints."""
    from .bench_run import format_size
    lines = [f"# nicoll bench allreduce --mpi: {nodes} ranks on {backend}, {dtype} {op}, "
             f"{repeat} timed calls per size",
             "# cycles: in-NIC, from the engines' counters"
             + (" (~: the calibrated cost model's estimate; the model backend counts none)"
                if any(row.estimated for row in rows) else ""),
             "# host us: wall time of one Comm.Allreduce, the slowest rank's, over the calls",
             f"{'size':>8} {'count':>9} {'cycles':>10} {'host mean us':>13} "
             f"{'host median us':>15} {'result':>7}"]
    for row in rows:
        cycles = f"~{row.cycles}" if row.estimated else str(row.cycles)
        lines.append(f"{format_size(row.size):>8} {row.count:>9} {cycles:>10} "
                     f"{row.host_mean_us:>13.1f} {row.host_median_us:>15.1f} "
                     f"{'ok' if row.correct else 'WRONG':>7}")
    return "\n".join(lines)


def bench_mpi_command(args):
    """``nicoll bench allreduce --mpi``: every rank runs the sweep, rank 0 prints it."""
    from ..mpi import Comm
    from .bench_run import parse_sizes, write_csv
    if args.collective != "allreduce":
        raise NicollError(f"nicoll bench --mpi runs allreduce, not {args.collective!r}")
    sizes = parse_sizes(args.sizes)
    nc = Comm(address=args.address)
    try:
        rows = run_mpi_bench(nc, sizes, dtype=args.dtype, op=args.op, repeat=args.repeat)
    except Exception as exc:
        # The other ranks wait in a host MPI call for this one: end them all.
        print(f"nicoll: error: rank {nc.Get_rank()}: {exc}", file=sys.stderr, flush=True)
        nc.comm.Abort(2)
    finally:
        nc.close()
    if rows is None:
        return 0
    print(format_rows(rows, nodes=nc.Get_size(), backend=nc.device.transport.backend,
                      dtype=args.dtype, op=args.op, repeat=args.repeat), flush=True)
    if args.csv:
        write_csv(args.csv, rows)
    return 0 if all(row.correct for row in rows) else 1
