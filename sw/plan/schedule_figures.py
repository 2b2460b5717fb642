# Ref: seed 000 (CN101206588), operations 308-318: segment j+1 is exchanged while segment j
#      is reduced; an iteration's last reduction overlaps the next iteration's first exchange.
"""The tables of ``docs/algorithms.md``: the schedules' counters and modelled cycles, run by
the numpy executor without data (:func:`nicoll.plan.schedule_exec.execute`).
``python -m nicoll.plan.schedule_exec`` prints them."""

from .. import schedule as _schedule
from .schedule_cost import CostModel
from .schedule_exec import execute

__all__ = ["figures"]


def figures(nodes=8, nbytes=1 << 20, cost=None):
    """The tables of docs/algorithms.md, from the counters and the cycle model (no data run)."""
    cost = CostModel() if cost is None else cost
    count = nbytes // 4
    lines = [f"Model: {cost}", "",
             f"allreduce and reduce, N = {nodes}, float32, L = {nbytes} bytes per rank; "
             f"bound = 2(N-1)/N * L / {cost.link_bytes_per_cycle} cycles for allreduce",
             "| collective | algorithm | max messages sent/rank | max bytes sent/rank (L) "
             "| max bytes sent+received/rank (L) | fences | cycles (model) | bound/cycles |",
             "|---|---|---|---|---|---|---|---|"]
    bound = 2 * (nodes - 1) / nodes * nbytes / cost.link_bytes_per_cycle
    for collective in ("allreduce", "reduce"):
        for algorithm in _schedule.REDUCTION_ALGORITHMS:
            compile_ = getattr(_schedule, collective)
            plan = compile_(nodes, count, "float32", "sum", algorithm=algorithm)
            stats = execute(plan, cost=cost)
            fences = sum(step.fence for s in plan.schedules for step in s.steps)
            moved = max(r.bytes_sent + r.bytes_received for r in stats.ranks)
            efficiency = f"{bound / stats.cycles:.3f}" if collective == "allreduce" else "-"
            lines.append(f"| {collective} | {algorithm} | {max(stats.messages_sent)} | "
                         f"{max(stats.bytes_sent) / nbytes:.3f} | {moved / nbytes:.3f} | {fences} | "
                         f"{stats.cycles} | {efficiency} |")
    levels = nodes.bit_length() - 1
    halving = [2 << (levels - 1 - i) for i in range(levels)]
    lines += ["", "recursive halving allreduce: segments per distribution iteration (slices) "
                  "and per collection step (segments)",
              "| slices | segments | cycles (model) | bound/cycles | fences |", "|---|---|---|---|---|"]
    for slices, segments in ((1, 1), (2, 2), (4, 2), (8, 2), (16, 2), (halving, 2)):
        if nodes & (nodes - 1) and not isinstance(slices, int):
            continue
        plan = _schedule.allreduce(nodes, count, "float32", "sum", slices=slices, segments=segments)
        cycles = execute(plan, cost=cost).cycles
        lines.append(f"| {slices} | {segments} | {cycles} | {bound / cycles:.3f} | "
                     f"{sum(step.fence for s in plan.schedules for step in s.steps)} |")
    a2a_nodes, block = 16, 2
    lines += ["", f"alltoall, N = {a2a_nodes}, 8-byte blocks (2 x float32)",
              "| algorithm | messages sent/rank | bytes sent/rank | barriers | cycles (model) |",
              "|---|---|---|---|---|"]
    for algorithm, options in (("pairwise", {}), ("bruck", {}),
                               ("inplace", {"scratch_blocks": 1}), ("inplace", {"scratch_blocks": 4}),
                               ("inplace", {"scratch_blocks": 15})):
        plan = _schedule.alltoall(a2a_nodes, block, "float32", algorithm, **options)
        stats = execute(plan, cost=cost)
        name = algorithm + (f" (m = {options['scratch_blocks']})" if options else "")
        lines.append(f"| {name} | {max(stats.messages_sent)} | {max(stats.bytes_sent)} | "
                     f"{stats.ranks[0].barriers} | {stats.cycles} |")
    return "\n".join(lines)
