"""Run under mpiexec against a nicoll cluster server (its address in NICOLL_ADDRESS) to see
what the ranks get when something fails (tests/test_mpi.py).  Every rank writes what it
saw to OUT/rank<r>.txt, and nothing to its stdout: once a rank has died, mpiexec stops
forwarding some ranks' output, and their next print fails (a broken pipe).

    faults.py normal BUDGET_S OUT            three allreduces, checked against MPICH's own
    faults.py die-before-start BUDGET_S OUT  rank 1 posts its part of an allreduce, then is
                                             killed (SIGKILL) instead of starting it
    faults.py die-after-start BUDGET_S OUT   rank 1 is killed right after the start: the
                                             others' allreduce finishes, their next one fails
    faults.py until-stopped BUDGET_S OUT     allreduces until the server stops (rank 0 says
                                             "running" after the first)

A rank that gets NicollError writes it with the seconds its call took and the wall clock,
and closes its connection."""

import os
import signal
import sys
import time

import numpy as np
from mpi4py import MPI

import nicoll
from nicoll.mpi import Comm

# mpiexec -disable-auto-cleanup tells the other ranks of a rank's death by SIGUSR1, which
# would end them (Python's default action) before they could tell what nicoll said.
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
mode, budget_s, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
nic = Comm(world, budget_s=budget_s)
VICTIM = 1


def say(text):
    with open(os.path.join(out, f"rank{rank}.txt"), "a") as f:
        f.write(text + "\n")


def data(r, k):
    return np.arange(8, dtype=np.int64) * (r + 1) + k


def want(k):
    return sum(data(r, k) for r in range(size))


def kill_self():
    os.kill(os.getpid(), signal.SIGKILL)


if mode.startswith("die-"):
    # mpiexec (hydra) may kill every rank soon after one is killed, even with
    # -disable-auto-cleanup (a race in it, seen here one run in five): so in these modes the
    # rank's nicoll client runs in a child process of its own, which mpiexec does not kill,
    # and the MPI process only waits for it.  Its connection is the child's alone.
    child = os.fork()
    if child:
        os.close(nic.device.transport._sock.detach())
        deadline = time.monotonic() + 2 * budget_s
        while time.monotonic() < deadline and os.waitpid(child, os.WNOHANG) == (0, 0):
            time.sleep(0.05)
        if rank == VICTIM:
            kill_self()
        os._exit(0)                     # no MPI_Finalize: it would wait for the dead rank
    os.setsid()                         # out of the process group mpiexec may kill
    say(f"rank {rank}: client pid {os.getpid()}")

if rank == VICTIM and mode == "die-before-start":
    nic.device.transport.start = lambda budget: kill_self()
elif rank == VICTIM and mode == "die-after-start":
    start = nic.device.transport.start

    def start_then_die(budget):
        start(budget)
        kill_self()
    nic.device.transport.start = start_then_die

k = 0
while True:
    got = np.empty(8, np.int64)
    began = time.monotonic()
    try:
        nic.Allreduce(data(rank, k), got, op=MPI.SUM)
    except BaseException as exc:
        if not isinstance(exc, nicoll.NicollError):
            import traceback
            say(f"rank {rank}: unexpected {traceback.format_exc()}")
            raise
        say(f"rank {rank}: NicollError after {time.monotonic() - began:.3f} s at "
              f"{time.time():.3f}: {exc}")
        if mode == "until-stopped":
            sys.exit(0)
        nic.close()                     # this rank leaves in order: it did not die
        os._exit(0)
    if got.tobytes() != want(k).tobytes():
        say(f"rank {rank}: allreduce {k}: {got!r} != {want(k)!r}")
        os._exit(1)
    if mode == "normal":
        check = np.empty(8, np.int64)
        world.Allreduce(data(rank, k), check, op=MPI.SUM)
        if check.tobytes() != got.tobytes():
            say(f"rank {rank}: allreduce {k}: nicoll {got!r} != MPICH {check!r}")
            sys.exit(1)
        if k == 2:
            say(f"rank {rank}: 3 allreduces agree with MPICH")
            break
    if mode == "until-stopped" and rank == 0 and k == 0:
        say("rank 0: running")
    if mode == "die-after-start" and k == 0:
        say(f"rank {rank}: allreduce 0 right after rank {VICTIM} died")
    if k > 10000:
        say(f"rank {rank}: no failure in {k} allreduces")
        sys.exit(1)
    k += 1
