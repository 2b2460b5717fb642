"""mpi4py's collectives offloaded to a nicoll cluster server (issue 21): :class:`Comm`.

A program under ``mpiexec`` makes one ``Comm`` per process; each process is one rank, with its
own buffers, driving its own node of a cluster that ``nicoll serve`` runs
(:mod:`nicoll.remote`).  The methods take mpi4py's buffer arguments: a numpy array (or
anything with the buffer protocol and a numpy dtype), or mpi4py's ``[data, count, datatype]``
spec of one, and ``MPI.IN_PLACE`` where MPI allows it.  mpi4py's op objects map to nicoll's
(``MPI.SUM`` to ``"sum"`` ...); ``Barrier`` and ``ac_barrier`` (seed 004's approximate-computing
barrier) go through the NICs' barrier units.  Anything
nicoll does not offload (another op) is refused with NicollError naming it, or, with
``fallback=True``, done by the host MPI with one warning per kind.
"""

import warnings

import numpy as np

from .errors import NicollError
from .remote.client import connect
from .remote.rank import DEFAULT_BUDGET_S, Rank

__all__ = ["Comm"]

#: mpi4py's reduction ops by name, and nicoll's name for each.
_OPS = {"SUM": "sum", "PROD": "prod", "MIN": "min", "MAX": "max", "BAND": "band",
        "BOR": "bor", "BXOR": "bxor", "LAND": "land", "LOR": "lor", "LXOR": "lxor"}


class Comm:
    """The collectives of an MPI communicator, run on a nicoll cluster server.

    :param comm: the mpi4py communicator (default ``MPI.COMM_WORLD``); its rank is the node
        this process drives, and its size must be the server's number of ranks.
    :param address: the server (``"unix:PATH"`` or ``"tcp:HOST:PORT"``); None:
        ``NICOLL_ADDRESS``.
    :param fallback: do what nicoll does not offload with the host MPI (a warning the first
        time each kind falls back) instead of raising NicollError.
    :param budget_s: seconds one collective may take before it ends with NicollError.
    """

    def __init__(self, comm=None, address=None, *, token=None, fallback=False,
                 budget_s=DEFAULT_BUDGET_S):
        from mpi4py import MPI
        self._MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.fallback = bool(fallback)
        self._warned = set()
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        self.device = connect(address, rank, token=token, timeout=budget_s)
        if self.device.transport.nodes != size:
            self.device.transport.close()
            raise NicollError(f"the communicator has {size} ranks; the cluster server at "
                              f"{self.device.transport.address} serves "
                              f"{self.device.transport.nodes}")
        self._rank = Rank(self.device, size, budget_s=budget_s)
        # Every rank has read which barrier its unit is in before any rank enters one: an AC
        # barrier may be released without a rank, which must not then count from the next.
        self.comm.Barrier()

    def Get_rank(self):
        return self.comm.Get_rank()

    def Get_size(self):
        return self.comm.Get_size()

    def close(self):
        """Free this process's rank on the server."""
        self.device.transport.close()

    # -- the collectives -------------------------------------------------------------------

    def Allreduce(self, sendbuf, recvbuf, op=None):
        name = self._op(op, "Allreduce")
        if name is None:
            return self.comm.Allreduce(sendbuf, recvbuf, op)
        recv = _array(recvbuf, "recvbuf")
        send = recv.copy() if sendbuf is self._MPI.IN_PLACE else _array(sendbuf, "sendbuf")
        _same(send, recv, "Allreduce")
        recv.reshape(-1)[:] = self._rank.allreduce(send.reshape(-1), name).view(recv.dtype)

    def Reduce(self, sendbuf, recvbuf, op=None, root=0):
        name = self._op(op, "Reduce")
        if name is None:
            return self.comm.Reduce(sendbuf, recvbuf, op, root)
        mine = self.comm.Get_rank() == root
        if sendbuf is self._MPI.IN_PLACE:
            if not mine:
                raise NicollError("Reduce takes MPI.IN_PLACE as sendbuf only at the root")
            send = _array(recvbuf, "recvbuf").copy()
        else:
            send = _array(sendbuf, "sendbuf")
        out = self._rank.reduce(send.reshape(-1), root=root, op=name)
        if mine:
            recv = _array(recvbuf, "recvbuf")
            _same(send, recv, "Reduce")
            recv.reshape(-1)[:] = out.view(recv.dtype)

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=None):
        name = self._op(op, "Reduce_scatter")
        if name is None:
            return self.comm.Reduce_scatter(sendbuf, recvbuf, recvcounts, op)
        recv = _array(recvbuf, "recvbuf")
        size = self.comm.Get_size()
        counts = [recv.size] * size if recvcounts is None else [int(c) for c in recvcounts]
        if len(counts) != size or counts[self.comm.Get_rank()] != recv.size:
            raise NicollError(f"Reduce_scatter: recvcounts must give {size} counts, this "
                              f"rank's the size of recvbuf ({recv.size}), not {recvcounts!r}")
        if sendbuf is self._MPI.IN_PLACE:
            raise NicollError("Reduce_scatter: MPI.IN_PLACE is not offloaded; pass sendbuf")
        send = _array(sendbuf, "sendbuf")
        if send.size != sum(counts) or send.dtype != recv.dtype:
            raise NicollError(f"Reduce_scatter: sendbuf must hold sum(recvcounts) = "
                              f"{sum(counts)} {recv.dtype} elements, not {send.size} {send.dtype}")
        out = self._rank.reduce_scatter(send.reshape(-1), counts, name)
        recv.reshape(-1)[:] = out.view(recv.dtype)

    def Alltoallv(self, sendbuf, recvbuf):
        """``sendbuf`` and ``recvbuf`` as mpi4py's ``[data, counts, displacements, type]``
        (or ``[data, counts]``, blocks back to back).  The counts table is gathered from every
        rank's send counts over the host MPI (a few integers), then the blocks move through
        nicoll."""
        send, scounts, sdispls = _vector_spec(sendbuf, "sendbuf", self.comm.Get_size())
        recv, rcounts, rdispls = _vector_spec(recvbuf, "recvbuf", self.comm.Get_size())
        if send.dtype != recv.dtype:
            raise NicollError(f"Alltoallv: sendbuf is {send.dtype}, recvbuf {recv.dtype}")
        table = self.comm.allgather(scounts)
        rank = self.comm.Get_rank()
        if [row[rank] for row in table] != rcounts:
            raise NicollError(f"Alltoallv: rank {rank}'s recvcounts {rcounts} differ from what "
                              f"the ranks send it ({[row[rank] for row in table]})")
        packed = np.concatenate([send.reshape(-1)[d:d + c] for c, d in zip(scounts, sdispls)])
        out = self._rank.alltoallv(packed, table)
        at = 0
        for c, d in zip(rcounts, rdispls):
            recv.reshape(-1)[d:d + c] = out[at:at + c]
            at += c

    def Allgather(self, sendbuf, recvbuf):
        recv = _array(recvbuf, "recvbuf")
        size = self.comm.Get_size()
        if sendbuf is self._MPI.IN_PLACE:
            block = recv.size // size
            rank = self.comm.Get_rank()
            send = recv.reshape(-1)[rank * block:(rank + 1) * block].copy()
        else:
            send = _array(sendbuf, "sendbuf")
        if recv.size != send.size * size or recv.dtype != send.dtype:
            raise NicollError(f"Allgather: recvbuf must hold {size} × sendbuf's "
                              f"{send.size} {send.dtype} elements, not {recv.size} {recv.dtype}")
        recv.reshape(-1)[:] = self._rank.allgather(send.reshape(-1))

    def Alltoall(self, sendbuf, recvbuf):
        recv = _array(recvbuf, "recvbuf")
        send = recv.copy() if sendbuf is self._MPI.IN_PLACE else _array(sendbuf, "sendbuf")
        _same(send, recv, "Alltoall")
        recv.reshape(-1)[:] = self._rank.alltoall(send.reshape(-1))

    def Barrier(self):
        """Released when every rank has arrived, through the NICs' barrier units (seed 004)."""
        self._rank.barrier()

    def ac_barrier(self, m=None, c=None, estimate=None):
        """One approximate-computing barrier (seed 004, mode 1) through the NICs' barrier
        units: released early once ``m`` ranks have arrived and/or ``c`` cycles have passed
        since the first did, the ranks not yet arrived aborted with ``estimate``.  Every rank
        calls it, with the same m, c and estimate; returns this rank's
        :class:`~nicoll.remote.rank.RankBarrierResult` (see :meth:`Rank.ac_barrier
        <nicoll.remote.rank.Rank.ac_barrier>`).

        The values are not gathered over the host MPI to compare them: a host collective
        would wait for the straggler the barrier is there to skip.  The server compares them
        instead, rank by rank as they arrive, and refuses a rank whose values differ from the
        first rank's, naming both."""
        return self._rank.ac_barrier(m, c, estimate)

    def ac_aborted(self):
        """Whether the next barrier has been released without this rank (an AC barrier the
        others finished early): its work for it can stop; :meth:`ac_barrier` then returns at
        once with the estimate."""
        return self._rank.ac_aborted()

    # -- checks ----------------------------------------------------------------------------

    def _op(self, op, what):
        """nicoll's name of mpi4py's ``op``, or None when the host MPI is to do it."""
        MPI = self._MPI
        op = MPI.SUM if op is None else op
        for mpi_name, name in _OPS.items():
            if op == getattr(MPI, mpi_name):
                return name
        self._refuse_or_warn(f"{what} with {op!r}", f"the op {op!r} is not one nicoll "
                                                    f"offloads ({', '.join(_OPS)})")
        return None

    def _refuse_or_warn(self, kind, why):
        """True when the host MPI is to do ``kind``; else NicollError saying ``why``."""
        if not self.fallback:
            raise NicollError(f"{kind}: {why}; pass fallback=True to let the host MPI do it")
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(f"nicoll.mpi: {kind} falls back to the host MPI: {why}",
                          stacklevel=3)
        return True


def _array(buf, what):
    """The numpy array of an mpi4py buffer argument: an array, or ``[data, ...]``."""
    if isinstance(buf, (list, tuple)):
        if not buf:
            raise NicollError(f"{what} is an empty buffer spec")
        buf = buf[0]
    if not isinstance(buf, np.ndarray):
        raise NicollError(f"{what} must be a numpy array or an mpi4py buffer spec of one, "
                          f"not {type(buf).__name__}")
    if not buf.flags.c_contiguous:
        raise NicollError(f"{what} must be contiguous")
    return buf


def _same(send, recv, what):
    if send.size != recv.size or send.dtype != recv.dtype:
        raise NicollError(f"{what}: sendbuf ({send.size} {send.dtype}) and recvbuf "
                          f"({recv.size} {recv.dtype}) must have the same count and type")


def _vector_spec(spec, what, size):
    """``(array, counts, displacements)`` of an mpi4py vector buffer spec."""
    if not isinstance(spec, (list, tuple)) or len(spec) < 2:
        raise NicollError(f"{what} must be [data, counts] or [data, counts, displacements, "
                          f"type], not {type(spec).__name__}")
    data = _array(spec[0], what)
    counts = [int(c) for c in spec[1]]
    displs = spec[2] if len(spec) > 2 and isinstance(spec[2], (list, tuple, np.ndarray)) \
        else None
    displs = (list(np.cumsum([0] + counts[:-1])) if displs is None
              else [int(d) for d in displs])
    if len(counts) != size or len(displs) != size or min(counts + displs, default=0) < 0:
        raise NicollError(f"{what}: {size} non-negative counts and displacements, not "
                          f"{counts!r} and {displs!r}")
    if any(d + c > data.size for c, d in zip(counts, displs)):
        raise NicollError(f"{what}: a block runs past the buffer's {data.size} elements")
    return data, counts, [int(d) for d in displs]
