"""Goodput under packet loss, and the cost of one lost packet: ``python -m nicoll.sim.fault_bench``.

Issue 22's figures, on a Verilator cluster built with fault injection (``nicoll.Faults``):

- **goodput**: a ``--size`` allreduce (float32 sum, recursive halving) run ``--runs`` times at
  each drop rate of ``--rates`` (per packet and link), each with ``--retries`` retries.  A
  run's cost is every simulated cycle from the call until its answer is back (or its last
  try has failed): loading, every try (a failed one until its error is seen), each reset,
  reading back.  Goodput is the answers per cycle against the fault-free run's: the
  fault-free cost times the runs that got an answer, over the cycles all runs took (1.0: no
  loss; 0: no run got its answer within its tries).
- **one lost packet**: the same allreduce with one chosen data packet dropped (rank 1's
  ``--lost-index``-th into the switch): the engines send it again (the receiver's RESEND at
  the gap, the sender's next pass from it), in the same try; the extra cycles and data
  packets are what recovering that packet costs, end to end.

Counts come from the harness's own cycle count (it is never reset), so they are deterministic
for a given build, seed and sequence of calls; wall time is printed beside them only as a
guide.  Every answer is checked against numpy (a sum of small integers in float32 is exact).
"""

import argparse
import time

import numpy as np

import nicoll
from nicoll import Faults, FaultTarget, NicollError

__all__ = ["inputs", "clean_run", "goodput", "lost_packet", "main"]


def inputs(nodes, size, dtype=np.float32):
    """Each rank's ``size`` bytes of small integers as ``dtype``: every order of summing
    them is exact, in float32 too."""
    count = max(1, size // np.dtype(dtype).itemsize)
    return [np.random.default_rng(rank).integers(-64, 64, count).astype(dtype)
            for rank in range(nodes)]


def _run(cl, xs, faults):
    """One checked allreduce under ``faults``; returns (simulated cycles, wall seconds,
    tries, error text or None)."""
    clock = cl._backend.cycles
    cl.reset()
    cl.faults = faults
    c0, t0 = clock(), time.perf_counter()
    try:
        ys = cl.allreduce(xs, "sum", algorithm="recursive_halving")
    except NicollError as exc:
        return clock() - c0, time.perf_counter() - t0, cl.retries + 1, str(exc)
    want = np.sum(xs, axis=0, dtype=xs[0].dtype)
    for rank, y in enumerate(ys):
        if not np.array_equal(y, want):
            raise AssertionError(f"rank {rank}: a wrong answer under {faults}")
    return clock() - c0, time.perf_counter() - t0, cl.last.tries, None


def clean_run(cl, xs):
    """The fault-free run's (cycles call to answer, in-NIC cycles)."""
    clean, _, _, error = _run(cl, xs, Faults())
    if error:
        raise NicollError(f"the fault-free run failed: {error}")
    return clean, cl.last.cycles


def goodput(cl, xs, rate, clean, *, runs=3, seed=1):
    """(runs, failed runs, mean tries, mean cycles, goodput, wall s) at drop ``rate``."""
    results = [_run(cl, xs, Faults(drop=rate, seed=seed + k)) for k in range(runs)]
    cycles = [r[0] for r in results]
    failed = sum(r[3] is not None for r in results)
    return (runs, failed, np.mean([r[2] for r in results]), np.mean(cycles),
            clean * (runs - failed) / sum(cycles), np.mean([r[1] for r in results]))


def lost_packet(cl, xs, index):
    """(fault-free cycles, cycles with rank 1's ``index``-th data packet into the switch
    dropped, data packets sent again); the engines must recover it within the one try."""
    clean, _, _, _ = _run(cl, xs, Faults())
    clean_packets = sum(cl.last.packets)
    lost, _, tries, error = _run(cl, xs, Faults(target=FaultTarget(rank=1, kind="data",
                                                                    index=index)))
    if error or tries != 1:
        raise NicollError(f"one lost packet was not recovered by the engines ({tries} tries): "
                          f"{error}")
    return clean, lost, sum(cl.last.packets) - clean_packets


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m nicoll.sim.fault_bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--data-width", type=int, default=256)
    parser.add_argument("--mem-size", type=int, default=4 << 20)
    parser.add_argument("--size", type=int, default=1 << 20, help="bytes per rank")
    parser.add_argument("--rates", default="1e-4,1e-3,1e-2",
                        help="drop rates per packet and link, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="runs per rate")
    parser.add_argument("--retries", type=int, default=8)
    parser.add_argument("--lost-index", type=int, default=10,
                        help="which of rank 1's data packets the lost-packet run drops")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",") if r]
    with nicoll.Cluster(args.nodes, "verilator", data_width=args.data_width,
                        mem_size=args.mem_size, faults=Faults(), retries=args.retries,
                        progress=lambda text: print(f"  {text}", flush=True)) as cl:
        xs = inputs(args.nodes, args.size)
        clean, in_nic = clean_run(cl, xs)
        print(f"allreduce of {args.size} bytes a rank, {args.nodes} nodes, data_width "
              f"{args.data_width}, retries {args.retries}: fault-free {clean} cycles call to "
              f"answer ({in_nic} in the NICs)", flush=True)
        print(f"{'drop rate':>10} {'runs':>5} {'failed':>7} {'tries':>6} {'cycles':>12} "
              f"{'goodput':>8} {'wall s':>7}", flush=True)
        for rate in rates:
            runs, failed, tries, cycles, ratio, wall = goodput(cl, xs, rate, clean,
                                                               runs=args.runs)
            print(f"{rate:>10.0e} {runs:>5} {failed:>7} {tries:>6.2f} {cycles:>12,.0f} "
                  f"{ratio:>8.3f} {wall:>7.1f}", flush=True)
        clean, lost, again = lost_packet(cl, xs, args.lost_index)
        print(f"one lost data packet (rank 1's #{args.lost_index} into the switch): {lost} "
              f"cycles against {clean}: {lost - clean} cycles and {again} data packets sent "
              f"again to recover it")


if __name__ == "__main__":
    main()
