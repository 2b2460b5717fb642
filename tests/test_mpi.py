"""nicoll.mpi.Comm under mpiexec (MPICH from PyPI) against a `nicoll serve` cluster on the
model: every offloaded collective agrees with MPICH's own answer bit for bit, the float
reductions with nicoll's documented order bit for bit and with MPICH's within rounding
(tests/mpi_programs/compare_with_mpich.py), at 3, 4 and 5 ranks; the examples at 8 ranks,
the AC barrier's (seed 004) among them; a rank killed mid-collective and a server stopped
mid-run end every other rank with NicollError long before its budget
(tests/mpi_programs/faults.py)."""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nicoll
from nicoll.remote import ClusterServer

from collectives_helpers import LINKED_REPACK_NODE_CLUSTER

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
        start.proc = proc                       # the last server started, to stop it
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


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator_fabric")
def test_offloaded_collectives_agree_with_mpich_on_verilator(tmp_path):
    """The same program against the gateware: three ranks under mpiexec on the Verilator
    cluster test_repack_node and test_remote build (one build, its ALU with sum on int32
    only, so the reductions it lacks are skipped and counted), served from this process."""
    with nicoll.Cluster(backend="verilator", **LINKED_REPACK_NODE_CLUSTER) as cl:
        with ClusterServer(cl, f"unix:{tmp_path / 'v.sock'}") as served:
            run = subprocess.run([MPIEXEC, "-n", "3", sys.executable,
                                  str(HERE / "mpi_programs" / "compare_with_mpich.py")],
                                 env=dict(os.environ, NICOLL_ADDRESS=served.address),
                                 capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    found = re.findall(r"rank (\d+): (\d+) collectives agree with MPICH \((\d+) ", run.stdout)
    # Checked: sum on int32 in Allreduce, Reduce, in place and Reduce_scatter (sum where the
    # model's build has bxor), Allgather, Alltoall, Alltoallv and the user op by the host
    # MPI: 8.  Skipped: the 29 other integer (op, type) pairs of the first loop, the 8 float
    # ones and the 2 float Reduce_scatters: 39.
    assert sorted(found) == [(str(r), "8", "39") for r in range(3)], run.stdout + run.stderr


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


#: The budget the fault programs give each collective, and the bound a rank's failing call
#: must stay under: the others must learn of a death at once, not by their budget.
FAULT_BUDGET_S = 30.0
PROMPT_S = 5.0


def _faults(address, mode, out, *, nodes=3):
    """``tests/mpi_programs/faults.py MODE`` under ``mpiexec -n nodes``: (the finished run,
    every rank's lines).  -disable-auto-cleanup: mpiexec would otherwise kill the other
    ranks as soon as one is killed, before they could tell what they got."""
    out.mkdir()
    run = subprocess.run([MPIEXEC, "-disable-auto-cleanup", "-n", str(nodes), sys.executable,
                          str(HERE / "mpi_programs" / "faults.py"), mode, str(FAULT_BUDGET_S),
                          str(out)],
                         env=dict(os.environ, NICOLL_ADDRESS=address), capture_output=True,
                         text=True, timeout=120)
    return run, _lines(out, nodes)


def _lines(out, nodes):
    return {r: (out / f"rank{r}.txt").read_text() if (out / f"rank{r}.txt").exists() else ""
            for r in range(nodes)}


def _wait_for_lines(out, nodes, done, budget_s=30.0):
    """Every rank's lines once ``done(lines)`` holds (at most ``budget_s``): the ranks'
    nicoll clients of the die-* modes are child processes that mpiexec does not wait for.
    Any still running then is killed."""
    deadline = time.monotonic() + budget_s
    while not done(_lines(out, nodes)) and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = _lines(out, nodes)
    for pid in re.findall(r"client pid (\d+)", "".join(lines.values())):
        try:
            os.kill(int(pid), 9)
        except ProcessLookupError:
            pass
    return lines


def _failed_call(text, report=""):
    """(seconds the failing call took, wall clock it failed at, message) of a rank's
    NicollError line."""
    found = re.search(r"NicollError after ([\d.]+) s at ([\d.]+): (.*)", text)
    assert found, report or text
    return float(found[1]), float(found[2]), found[3]


@pytest.mark.parametrize("mode", ["die-before-start", "die-after-start"])
def test_a_rank_killed_mid_collective_ends_the_others_then_a_new_run_passes(server, tmp_path,
                                                                            mode):
    """Rank 1 is SIGKILLed inside an allreduce: after posting its part, before its start
    (the others wait in the rendezvous or arrive there) or right after its start (the
    collective had started: the others' answer is right, their next allreduce fails).  The
    others exit with NicollError naming rank 1, their failing call taking well under their
    budget; the server, still up, then runs a normal program of three new ranks right."""
    address = server(3)
    run, _ = _faults(address, mode, tmp_path / "killed")
    lines = _wait_for_lines(tmp_path / "killed", 3,
                            lambda lines: all("NicollError" in lines[r] for r in (0, 2)))
    report = run.stdout + run.stderr + repr(lines)
    assert "NicollError" not in lines[1], report
    for rank in (0, 2):
        took, _, message = _failed_call(lines[rank], report)
        assert message.startswith(f"rank {rank}: the cluster server refused 'start': rank 1 "
                                  f"went away: its client's connection ended without "
                                  f"closing"), report
        assert took < PROMPT_S < FAULT_BUDGET_S, report
        if mode == "die-after-start":
            assert f"rank {rank}: allreduce 0 right after rank 1 died" in lines[rank], report
    assert server.proc.poll() is None, report          # the server is still up
    run, lines = _faults(address, "normal", tmp_path / "next")
    assert run.returncode == 0, run.stdout + run.stderr
    for rank in range(3):
        assert lines[rank] == f"rank {rank}: 3 allreduces agree with MPICH\n", lines


def test_a_server_stopped_mid_run_ends_every_rank_with_an_error(server, tmp_path):
    """Three ranks run allreduces in a loop; the server gets SIGTERM.  Every rank ends its
    call with NicollError about the cluster server within a few seconds of the stop (the
    budget is 30 s), and the program exits cleanly."""
    address = server(3)
    out = tmp_path / "stopped"
    out.mkdir()
    proc = subprocess.Popen([MPIEXEC, "-n", "3", sys.executable,
                             str(HERE / "mpi_programs" / "faults.py"), "until-stopped",
                             str(FAULT_BUDGET_S), str(out)],
                            env=dict(os.environ, NICOLL_ADDRESS=address),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while "running" not in ((out / "rank0.txt").read_text()
                                if (out / "rank0.txt").exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(10)
            time.sleep(0.05)
        stopped = time.time()
        server.proc.terminate()
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 0, stdout + stderr
    assert server.proc.wait(30) == 0
    for rank in range(3):
        text = (out / f"rank{rank}.txt").read_text()
        _, when, message = _failed_call(text)
        assert message.startswith(f"rank {rank}: ") and "cluster server" in message, text
        assert when - stopped < PROMPT_S, (when - stopped, text)


def test_bench_mpi_reports_cycles_and_host_time_per_size(server, tmp_path):
    """``mpiexec -n 3 nicoll bench allreduce --mpi`` on the model (the address from
    NICOLL_ADDRESS): rank 0 alone prints the table, one row per size with its element
    count, in-NIC cycles (the model counts none: the cost model's estimate, marked ~),
    the host time per call (mean and median over the calls, positive) and a right answer;
    the CSV has one host time per timed call."""
    nicoll_script = shutil.which("nicoll", path=str(Path(sys.executable).parent))
    address = server(3)
    table = tmp_path / "bench.csv"
    run = subprocess.run([MPIEXEC, "-n", "3", nicoll_script, "bench", "allreduce", "--mpi",
                          "--sizes", "64,4k", "--dtype", "int32", "--repeat", "3", "--csv",
                          str(table)],
                         env=dict(os.environ, NICOLL_ADDRESS=address), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("# nicoll bench allreduce --mpi: 3 ranks on model, int32 sum, "
                            "3 timed calls per size") == 1, run.stdout
    rows = re.findall(r"^ +(\S+) +(\d+) +(~?)(\d+) +([\d.]+) +([\d.]+) +(\S+)$",
                      run.stdout, re.M)
    assert [(size, int(count)) for size, count, *_ in rows] == [("64", 16), ("4k", 1024)], \
        run.stdout
    for _, _, estimated, cycles, mean, median, result in rows:
        assert estimated == "~" and int(cycles) > 0, run.stdout
        assert float(mean) > 0 and float(median) > 0 and result == "ok", run.stdout
    # More data, more beats through the engines.
    assert int(rows[1][3]) > int(rows[0][3]), run.stdout
    import csv
    with open(table) as f:
        written = list(csv.DictReader(f))
    assert [int(row["size"]) for row in written] == [64, 4096]
    for row in written:
        assert row["calls"] == "3" and row["correct"] == "True"
        assert 0 < float(row["host_min_us"]) <= float(row["host_median_us"])
