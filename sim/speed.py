"""Simulated cycles per wall second of a simulated cluster: ``python -m nicoll.sim.speed``.

Three figures, each from the harness's own cycle count over wall time:

- **bare**: the harness runs idle cycles in one request, in C++ alone (its own clock loop,
  no Python, no VPI, no bus traffic): the model's own speed, the ceiling of every use.
- **allreduce**: a whole ``Cluster.allreduce`` of ``--size`` bytes per rank through the
  driver: loading, register accesses, polling with idle pauses, reading back.  Its ratio to
  *bare* is what the driver and the request protocol cost.
- **registers**: back-to-back 32-bit register reads from Python: the cost of one request
  round trip, in simulated cycles per second (each read takes a few cycles).

The default configuration is the demo's (8 nodes, data_width 256) on Verilator; the build is
the cached one the demo and ``nicoll bench`` use.  ``--backend amaranth`` measures the same in
the Amaranth simulator (use a small ``--size`` and ``--cycles`` there: it runs a few hundred
cycles per second), ``--alu-pairs`` another ALU.  Wall-clock figures depend on the machine and on what
else runs on it; the command prints both so the ratio can be compared across machines.
"""

import argparse
import time

import numpy as np

__all__ = ["measure", "main"]


def measure(cluster, *, idle_cycles=100_000, size=1 << 20, reads=2000):
    """The three figures for an open simulated ``cluster`` (a :class:`nicoll.Cluster`), as a
    dict of {name: (simulated cycles, wall seconds)}."""
    # The Verilator harness counts its own cycles; elsewhere node 0's cycle counter is read
    # (one register access, a few cycles, against the thousands measured).
    clock = getattr(cluster._backend, "cycles", None) or cluster.device(0).cycles
    out = {}

    t0, c0 = time.perf_counter(), clock()
    cluster.device(0).idle(idle_cycles)
    out["bare"] = (clock() - c0, time.perf_counter() - t0)

    # A float32 sum where the ALU has one (the demo's pair), else an int32 sum.
    from nicoll.hw.ops import DType, ReduceOp
    dtype = (np.float32 if (ReduceOp.SUM, DType.FLOAT32) in cluster.device(0).alu_capabilities()
             else np.int32)
    count = max(1, size // 4)
    xs = [(np.random.default_rng(rank).standard_normal(count) * 100).astype(dtype)
          for rank in range(cluster.nodes)]
    t0, c0 = time.perf_counter(), clock()
    cluster.allreduce(xs, "sum", algorithm="recursive_halving")
    out["allreduce"] = (clock() - c0, time.perf_counter() - t0)
    out["allreduce_collective_cycles"] = cluster.last.cycles

    scratch = cluster.device(0).regs.global_.SCRATCH
    t0, c0 = time.perf_counter(), clock()
    for _ in range(reads):
        scratch.read()
    out["registers"] = (clock() - c0, time.perf_counter() - t0)
    return out


def main(argv=None):
    from nicoll import Cluster
    from nicoll.cli.demo_run import DEMO_CLUSTER
    from nicoll.cli.bench_run import parse_sizes
    parser = argparse.ArgumentParser(
        prog="python -m nicoll.sim.speed",
        description="Simulated cycles per second of a simulated cluster: the bare model, "
                    "an allreduce through the driver, register round trips.")
    parser.add_argument("--backend", choices=("verilator", "amaranth"), default="verilator")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--data-width", type=int, default=DEMO_CLUSTER["data_width"])
    parser.add_argument("--max-nodes", type=int, default=None,
                        help="default: the larger of 8 and --nodes")
    parser.add_argument("--mem-size", default="1M", help="device memory per node (default 1M)")
    parser.add_argument("--size", default="1M", help="allreduce bytes per rank (default 1M)")
    parser.add_argument("--cycles", type=int, default=100_000, help="idle cycles (default 100000)")
    parser.add_argument("--reads", type=int, default=2000, help="register reads (default 2000)")
    parser.add_argument("--alu-pairs", metavar="OP:DTYPE,...",
                        help="the ALU's pairs (default the demo's, sum:float32); 'all' for "
                             "every pair")
    args = parser.parse_args(argv)
    pairs = DEMO_CLUSTER["alu_capabilities"]
    if args.alu_pairs == "all":
        pairs = "all"
    elif args.alu_pairs:
        pairs = [tuple(item.strip().partition(":")[::2]) for item in args.alu_pairs.split(",")]
    mem_size = parse_sizes(args.mem_size)[0]
    size = parse_sizes(args.size)[0]
    t0 = time.perf_counter()
    with Cluster(nodes=args.nodes, backend=args.backend, data_width=args.data_width,
                 max_nodes=args.max_nodes or max(8, args.nodes), mem_size=mem_size,
                 alu_capabilities=pairs,
                 repack_units=DEMO_CLUSTER["repack_units"],
                 progress=lambda message: print(f"[{time.perf_counter() - t0:6.1f} s] {message}",
                                                flush=True)) as cluster:
        opened = time.perf_counter() - t0
        figures = measure(cluster, idle_cycles=args.cycles, size=size, reads=args.reads)
    print(f"cluster: {args.backend}, {args.nodes} nodes, data_width {args.data_width}, opened "
          f"in {opened:.1f} s (build included when it was not cached)")
    bare = figures["bare"][0] / figures["bare"][1]
    model = "C++ model" if args.backend == "verilator" else "Amaranth simulator"
    for name, label in (("bare", f"bare {model}, {args.cycles} idle cycles"),
                        ("allreduce", f"allreduce of {size} B per rank through the driver "
                                      f"({figures['allreduce_collective_cycles']} cycles "
                                      f"by the counters)"),
                        ("registers", "register reads from Python, one request each")):
        cycles, seconds = figures[name]
        rate = cycles / seconds
        print(f"{label}: {cycles} cycles in {seconds:.2f} s = {rate:,.0f} cycles/s "
              f"({rate / bare:.2f} x bare)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
