"""Barrier figures of a simulated cluster, from its hardware cycle counters (seed 004).

    .venv/bin/python -m nicoll.sim.measure_barrier [--nodes 8] [--backend verilator]
                                                   [--data-width 256] [--straggler 10000]

Prints, for the binary tree over ``--nodes`` ranks:

- release latency: cycles from the last completion to the moment every rank has seen the
  release, for the last completion at each rank in turn (worst and mean), against
  2 · depth · hop with the hop latency measured on the same run (one completion travelling
  one hop up, from a leaf's done to the count at its parent, is what the tree adds per level);
- waiting saved by mode "ac" with one straggler: everyone arrives at cycle 0 but the
  straggler at ``--straggler``; mode "normal" waits for it, mode "ac" with m = N − 1 releases
  after the others and aborts it.

The cycle counts are deterministic for a given configuration.
"""

import argparse

import nicoll

__all__ = ["measure", "main"]


def measure(nodes=8, backend="verilator", data_width=256, straggler=10_000, progress=None):
    """The figures as a dict (see the module docstring)."""
    # The barrier needs no reduction: the smallest ALU keeps the build quick.
    with nicoll.Cluster(nodes=nodes, backend=backend, data_width=data_width,
                        max_nodes=max(16, nodes), mem_size=4096,
                        alu_capabilities=[("sum", "int32")], progress=progress) as cl:
        cl.configure_barrier()
        tree = cl.barrier_tree
        depth = tree.depth()
        spacing = 1000
        latencies = []
        for rank in range(nodes):
            arrive = [0] * nodes
            arrive[rank] = spacing
            cl.barrier(arrive=arrive)
            latencies.append(cl.last.cycles - spacing)
        # One hop: rank 1's completion alone, last, as seen in the root's stamp e.
        arrive = [0] * nodes
        if nodes > 1:
            arrive[1] = spacing
            result = cl.barrier(arrive=arrive, mode="collect")
            hop = (result.e - spacing) / tree.depth(1)
        else:
            hop = None
        arrive = [0] * nodes
        arrive[-1] = straggler
        cl.barrier(arrive=arrive)
        normal = cl.last.cycles
        result = cl.barrier(arrive=arrive, mode="ac", m=max(1, nodes - 1))
        ac = cl.last.cycles
        return {
            "nodes": nodes, "backend": backend, "data_width": data_width, "depth": depth,
            "latency_worst": max(latencies), "latency_mean": sum(latencies) / len(latencies),
            "hop": hop, "bound": None if hop is None else 2 * depth * hop,
            "straggler": straggler, "normal_cycles": normal, "ac_cycles": ac,
            "saved": normal - ac, "aborted": sorted(result.aborted),
        }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--backend", default="verilator", choices=("amaranth", "verilator"))
    parser.add_argument("--data-width", type=int, default=256)
    parser.add_argument("--straggler", type=int, default=10_000)
    args = parser.parse_args(argv)
    r = measure(args.nodes, args.backend, args.data_width, args.straggler,
                progress=lambda message: print(message, flush=True))
    print(f"binary tree, N = {r['nodes']}, depth {r['depth']}, {r['backend']}, "
          f"data_width {r['data_width']}")
    if r["hop"] is not None:
        print(f"  hop latency (leaf done -> counted at parent): {r['hop']:.1f} cycles")
        print(f"  release latency after the last completion: worst {r['latency_worst']}, "
              f"mean {r['latency_mean']:.1f} cycles; 2 * depth * hop = {r['bound']:.0f}")
    print(f"  one straggler at cycle {r['straggler']}: normal {r['normal_cycles']} cycles, "
          f"ac (m = N - 1) {r['ac_cycles']} cycles, saved {r['saved']} "
          f"(aborted {r['aborted']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
