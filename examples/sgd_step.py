"""A data-parallel SGD step: every rank computes the gradient of a least-squares loss on its own
shard of the data, and the gradients are summed across ranks with an allreduce offloaded to a
nicoll cluster, then checked against the host MPI's own allreduce.

    nicoll serve --nodes 8 --listen unix:/tmp/nicoll.sock &
    NICOLL_ADDRESS=unix:/tmp/nicoll.sock mpiexec -n 8 python examples/sgd_step.py
"""

import numpy as np
from mpi4py import MPI

from nicoll.mpi import Comm

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
nic = Comm(world)

features, shard, steps, rate = 64, 256, 5, 0.1
truth = np.random.default_rng(0).standard_normal(features).astype(np.float32)
rng = np.random.default_rng(1 + rank)
x = rng.standard_normal((shard, features)).astype(np.float32)
y = x @ truth
w = np.zeros(features, np.float32)
for step in range(steps):
    gradient = (x.T @ (x @ w - y) / (shard * size)).astype(np.float32)
    summed, host = np.empty_like(gradient), np.empty_like(gradient)
    nic.Allreduce(gradient, summed, op=MPI.SUM)
    world.Allreduce(gradient, host, op=MPI.SUM)
    # Float sums depend on the order of the additions: nicoll's (recursive halving) and the
    # host MPI's may differ in the last bits.
    assert np.allclose(summed, host, rtol=1e-5, atol=1e-6), (step, summed - host)
    w -= rate * summed
    loss = world.allreduce(float(np.mean((x @ w - y) ** 2)), op=MPI.SUM) / size
    if rank == 0:
        print(f"step {step}: loss {loss:.4f}", flush=True)
nic.close()
if rank == 0:
    print("sgd_step: every gradient allreduce agreed with the host MPI's", flush=True)
