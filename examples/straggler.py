"""An iteration loop with an approximate-computing barrier and a straggler (seed 004): every
rank estimates π by sampling points in the unit square, and each iteration one rank is slow.
The ranks meet at an AC barrier with a count threshold of N − 1: the root releases them as
soon as all but one have arrived and aborts the straggler, which stops its work and goes on
with the estimate the barrier carries (the mean of the past iterations' results, which every
rank knows).  The ranks' results are then summed with an allreduce offloaded to nicoll.

Work is measured on the cluster's shared clock (the nodes' CYCLES counters), the clock the
barrier units stamp, so the waiting saved is in the same cycles: a normal barrier could not
have released before the straggler finished its work, the AC barrier released at the N − 1th
arrival.  On the model backend the clock runs as the ranks drive it (each poll lets it run
a few cycles), so the figures are the model's, not a board's.

    nicoll serve --nodes 8 --listen unix:/tmp/nicoll.sock &
    NICOLL_ADDRESS=unix:/tmp/nicoll.sock mpiexec -n 8 python examples/straggler.py
"""

import numpy as np
from mpi4py import MPI

from nicoll.mpi import Comm

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
nic = Comm(world)
clock = nic.device.barrier                  # CYCLES of this rank's node: the shared clock

iterations, samples = 6, 4096
work_cycles = 5_000                         # every rank's work in an iteration ...
straggler_cycles = 200_000                  # ... and the straggler's


def work(cycles):
    """Work for ``cycles`` of the shared clock, or until the barrier the work is for has been
    released without this rank (seed 004's forced abort); whether it finished."""
    until = clock.cycles() + cycles
    while clock.cycles() < until:
        if nic.ac_aborted():
            return False
        nic.device.transport.idle(256)
    return True


estimate = samples // 2                     # no past results yet: half the points inside
history, saved_in_all = [], 0
for it in range(iterations):
    straggler = (5 + 3 * it) % size         # a different rank each time, the root's too
    begin = clock.cycles()
    planned = begin + (straggler_cycles if rank == straggler else work_cycles)
    points = np.random.default_rng([it, rank]).random((samples, 2))
    finished = work(planned - begin)
    result = nic.ac_barrier(m=size - 1, estimate=estimate)
    hits = (int(np.count_nonzero((points ** 2).sum(axis=1) <= 1)) if finished
            else result.estimate)
    assert finished != result.was_aborted, (rank, finished, result)
    total = np.empty(1, np.int64)
    nic.Allreduce(np.array([hits], np.int64), total, op=MPI.SUM)
    history.append(int(total[0]) / size)
    estimate = round(sum(history) / len(history))
    # After the allreduce every rank is here: gathering the figures waits for nobody.
    reports = world.gather((rank, planned, result), root=0)
    if rank == 0:
        root = next(r for _, _, r in reports if r.root)
        assert root.early and root.aborted == {straggler}, root
        waited = [r for r, _, res in reports if not res.was_aborted]
        carried = next(res.estimate for _, _, res in reports if res.was_aborted)
        # A normal barrier releases after the last arrival: not before the straggler's work
        # would have ended.  The AC barrier released at root.released_at.
        saved = max(p for _, p, _ in reports) - root.released_at
        assert saved > 0, (saved, root)
        saved_in_all += saved
        print(f"iteration {it}: waited for ranks {' '.join(map(str, waited))}; rank "
              f"{straggler} aborted, went on with the estimate {carried} hits; "
              f"{saved} cycles of waiting saved against a normal barrier; "
              f"π ≈ {4 * total[0] / (size * samples):.4f}", flush=True)
nic.Barrier()                               # a normal barrier still waits for everyone
nic.close()
if rank == 0:
    print(f"straggler: {iterations} AC barriers, each released without its straggler, "
          f"{saved_in_all} cycles of waiting saved in all", flush=True)
