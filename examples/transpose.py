"""A distributed matrix transpose: the N×N matrix is split by rows, one block of rows per
rank; an alltoall offloaded to a nicoll cluster moves block (i, j) to rank j, and each rank
transposes its blocks locally.  Checked against numpy's transpose of the whole matrix.

    nicoll serve --nodes 8 --listen unix:/tmp/nicoll.sock &
    NICOLL_ADDRESS=unix:/tmp/nicoll.sock mpiexec -n 8 python examples/transpose.py
"""

import numpy as np
from mpi4py import MPI

from nicoll.mpi import Comm

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
nic = Comm(world)

b = 4                                               # rows (and columns) per rank
n = b * size
matrix = np.arange(n * n, dtype=np.int32).reshape(n, n)    # every rank can build it
mine = matrix[rank * b:(rank + 1) * b]                     # my rows
# Block j of what I send: my rows, columns of rank j.
send = np.ascontiguousarray(mine.reshape(b, size, b).transpose(1, 0, 2))
recv = np.empty_like(send)
nic.Alltoall(send, recv)
# recv[i] is rank i's rows, my columns: the transpose's rows of mine, block by block.
result = recv.transpose(2, 0, 1).reshape(b, n)
assert (result == matrix.T[rank * b:(rank + 1) * b]).all()
nic.close()
if rank == 0:
    print(f"transpose: {n}×{n} matrix transposed across {size} ranks", flush=True)
