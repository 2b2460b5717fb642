"""nicoll.mpi.Comm under mpiexec (MPICH from PyPI) against a `nicoll serve` cluster on the
model: every offloaded collective agrees with MPICH's own answer bit for bit, the float
reductions with nicoll's documented order bit for bit and with MPICH's within rounding
(tests/mpi_programs/compare_with_mpich.py), at 3, 4 and 5 ranks; the examples at 8 ranks,
the AC barrier's (seed 004) among them."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent))
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec (the mpich wheel, in the "
                                                        "[mpi] extra) is not installed")


@pytest.fixture
def server(tmp_path):
    """``nicoll serve`` on the model, factory of (nodes) -> address; stopped after the test."""
    procs = []

    def start(nodes):
        path = tmp_path / f"mpi{nodes}.sock"
        proc = subprocess.Popen([sys.executable, "-m", "nicoll", "serve", "--nodes", str(nodes),
                                 "--listen", f"unix:{path}"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        line = proc.stdout.readline()
        assert " at unix:" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        return line.split(" at ")[1].strip()
    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


@pytest.mark.parametrize("nodes", [3, 4, 5])
def test_offloaded_collectives_agree_with_mpich(server, nodes):
    address = server(nodes)
    env = dict(os.environ, NICOLL_ADDRESS=address)
    run = subprocess.run([MPIEXEC, "-n", str(nodes), sys.executable,
                          str(HERE / "mpi_programs" / "compare_with_mpich.py")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    # mpiexec forwards the ranks' output in chunks that may run into each other.
    found = re.findall(r"rank (\d+): (\d+) collectives agree with MPICH \((\d+) ", run.stdout)
    assert sorted(found) == [(str(r), "84", "0") for r in range(nodes)], run.stdout + run.stderr


def test_a_communicator_of_another_size_is_refused(server):
    """A program of 2 ranks against a server of 3: each rank's Comm refuses, naming both."""
    address = server(3)
    code = ("from nicoll.mpi import Comm\n"
            "import nicoll\n"
            "try:\n"
            "    Comm()\n"
            "except nicoll.NicollError as exc:\n"
            "    print('refused:', exc)\n")
    run = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", code],
                         env=dict(os.environ, NICOLL_ADDRESS=address), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("refused: the communicator has 2 ranks; the cluster server at "
                            f"{address} serves 3") == 2, run.stdout + run.stderr


@pytest.mark.parametrize("example, says", [
    ("sgd_step.py", "sgd_step: every gradient allreduce agreed with the host MPI's"),
    ("transpose.py", "transpose: 32×32 matrix transposed across 8 ranks"),
    ("straggler.py", "straggler: 6 AC barriers, each released without its straggler")])
def test_examples_run_with_mpiexec_8(server, example, says):
    """The examples, as their docstrings run them: eight ranks against `nicoll serve`.  Each
    checks its own answers (straggler.py: every AC barrier's aborted set is its straggler,
    and the waiting saved is positive) and prints its last line only if they hold."""
    address = server(8)
    run = subprocess.run([MPIEXEC, "-n", "8", sys.executable,
                          str(HERE.parent / "examples" / example)],
                         env=dict(os.environ, NICOLL_ADDRESS=address), capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and says in run.stdout, run.stdout + run.stderr
