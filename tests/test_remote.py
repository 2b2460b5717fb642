"""Ranks as processes, first layer (issue 21): a cluster served over a socket, each rank's
Device over a socket transport; one client per rank; bad clients refused with a reason; the
server survives them; a stopped server ends a client's call with an error, never a hang."""

import socket
import time

import numpy as np
import pytest

import nicoll
from nicoll.remote import ADDRESS_ENV, ClusterServer, connect, parse_address
from nicoll.remote.protocol import recv_frame

from collectives_helpers import LINKED_REPACK_NODE_CLUSTER


@pytest.fixture
def served(tmp_path):
    """A 3-rank model cluster served on a unix socket: (cluster, server)."""
    with nicoll.Cluster(3, "model", mem_size=1 << 12) as cl:
        server = ClusterServer(cl, f"unix:{tmp_path / 'nicoll.sock'}").start()
        try:
            yield cl, server
        finally:
            server.stop()


def test_each_rank_drives_its_own_node(served):
    """Through the public name, nicoll.connect (DESIGN.md)."""
    cl, server = served
    devices = [nicoll.connect(server.address, rank, timeout=10) for rank in range(3)]
    try:
        for rank, dev in enumerate(devices):
            assert dev.node_id == rank and dev.mem_size == cl.device(rank).mem_size
            assert dev.transport.nodes == 3
        # Device memory written by the remote rank is the node's own memory, read back
        # both through the server and by the cluster in this process.
        data = np.arange(64, dtype=np.uint8).tobytes()
        devices[1].transport.mem_write(128, data)
        assert devices[1].transport.mem_read(128, 64)[0] == data
        assert cl.device(1).transport.mem_read(128, 64)[0] == data
        assert devices[0].transport.mem_read(128, 64)[0] != data
    finally:
        for dev in devices:
            dev.transport.close()


def test_a_taken_rank_is_refused_and_freed_on_close(served):
    _, server = served
    first = connect(server.address, 2, timeout=10)
    with pytest.raises(nicoll.NicollError, match="rank 2 is taken by another client"):
        connect(server.address, 2, timeout=10)
    with pytest.raises(nicoll.NicollError, match="rank 3 is outside this cluster of 3 ranks"):
        connect(server.address, 3, timeout=10)
    first.transport.close()
    for _ in range(50):                 # the server frees the rank once it sees the close
        try:
            connect(server.address, 2, timeout=10).transport.close()
            break
        except nicoll.NicollError:
            time.sleep(0.05)
    else:
        pytest.fail("rank 2 was not freed after its client closed")


def test_malformed_requests_are_answered_and_the_server_survives(served):
    _, server = served
    path = parse_address(server.address)[1]
    raw = socket.socket(socket.AF_UNIX)
    raw.settimeout(10)
    raw.connect(path)
    raw.sendall(b"\x00\x00\x00\x05{nope")           # not JSON: the reply names it
    reply, _ = recv_frame(raw)
    assert not reply["ok"] and "not JSON" in reply["error"]
    raw.close()
    dev = connect(server.address, 0, timeout=10)
    try:
        # A well-framed but bad request keeps the connection.
        for bad, words in (({"op": "format_disk"}, "unknown operation 'format_disk'"),
                           ({"op": "read32", "address": -4}, "non-negative integer"),
                           ({"op": "hello", "rank": 1}, "has its rank already")):
            with pytest.raises(nicoll.NicollError, match=words):
                dev.transport._call(bad)
        assert dev.node_id == 0 and dev.transport.read32(0)[0] == dev.transport.read32(0)[0]
    finally:
        dev.transport.close()


def test_tokens_and_addresses(tmp_path):
    with nicoll.Cluster(2, "model", mem_size=1 << 12) as cl:
        with pytest.raises(nicoll.NicollError, match="off the loopback, needs a token"):
            ClusterServer(cl, "tcp:0.0.0.0:0")
        with pytest.raises(nicoll.NicollError, match="must be 'unix:PATH' or 'tcp:HOST:PORT'"):
            ClusterServer(cl, "udp:1.2.3.4:5")
        with ClusterServer(cl, "tcp:127.0.0.1:0", token="s3cret") as server:
            with pytest.raises(nicoll.NicollError, match="the token does not match"):
                connect(server.address, 0, token="guess", timeout=10)
            dev = connect(server.address, 0, token="s3cret", timeout=10)
            assert dev.node_id == 0
            dev.transport.close()


def test_a_stopped_server_ends_calls_with_an_error(tmp_path, monkeypatch):
    with nicoll.Cluster(2, "model", mem_size=1 << 12) as cl:
        server = ClusterServer(cl, f"unix:{tmp_path / 's.sock'}").start()
        monkeypatch.setenv(ADDRESS_ENV, server.address)
        dev = connect(rank=1, timeout=10)             # the address from the environment
        server.stop()
        with pytest.raises(nicoll.NicollError, match="closed the connection|failed"):
            dev.transport.read32(0)
        dev.transport.close()
        with pytest.raises(nicoll.NicollError, match="cannot reach the cluster server"):
            connect(server.address, 0, timeout=10)
    monkeypatch.delenv(ADDRESS_ENV)
    with pytest.raises(nicoll.NicollError, match=f"{ADDRESS_ENV} is not set"):
        connect(rank=0)


def test_nicoll_serve_prints_its_address_and_stops_on_sigterm(tmp_path):
    import signal
    import subprocess
    import sys
    path = tmp_path / "serve.sock"
    proc = subprocess.Popen([sys.executable, "-m", "nicoll", "serve", "--nodes", "2",
                             "--listen", f"unix:{path}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("nicoll: serving 2 ranks (model) at unix:"), line
        dev = connect(line.split(" at ")[1].strip(), 1, timeout=10)
        assert dev.node_id == 1
        dev.transport.close()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "server stopped" in out
        assert not path.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _ranks_in_threads(address, nodes, work, *, budget_s=20.0, delays=None):
    """Run ``work(rank_object, rank)`` for every rank, each in a thread with its own
    connection (as processes would), starting after ``delays[rank]`` seconds; returns the
    results in rank order, or raises the first error.  Every rank's Rank is made before any
    rank starts (as nicoll.mpi.Comm does), so they count barriers from the same one."""
    import threading
    from nicoll.remote import Rank
    results, errors = [None] * nodes, []
    made = threading.Barrier(nodes, timeout=20)

    def one(rank):
        dev = connect(address, rank, timeout=20)
        try:
            rank_ = Rank(dev, nodes, budget_s=budget_s)
            made.wait()
            time.sleep((delays or [0] * nodes)[rank])
            results[rank] = work(rank_, rank)
        except BaseException as exc:            # collected, re-raised in the test's thread
            errors.append(exc)
        finally:
            dev.transport.close()
    threads = [threading.Thread(target=one, args=(r,)) for r in range(nodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    if errors:
        raise errors[0]
    return results


def test_each_rank_posts_its_own_collective_in_any_order(served):
    """Allreduce, reduce to a root other than 0, allgather and alltoall, each rank posting
    only its own schedule and data, the ranks arriving in a scrambled order with gaps:
    the answers are the cluster's own, bit for bit."""
    cl, server = served
    rng = np.random.default_rng(7)
    xs = [rng.integers(-1000, 1000, 12).astype(np.int32) for _ in range(3)]
    delays = [0.2, 0.0, 0.1]

    def work(rank_, rank):
        return (rank_.allreduce(xs[rank], "sum"), rank_.reduce(xs[rank], root=2, op="max"),
                rank_.allgather(xs[rank]), rank_.alltoall(xs[rank]))
    got = _ranks_in_threads(server.address, 3, work, delays=delays)
    want_sum, want_max = sum(xs), np.maximum.reduce(xs)
    for rank, (summed, maxed, gathered, exchanged) in enumerate(got):
        np.testing.assert_array_equal(summed, want_sum)
        if rank == 2:
            np.testing.assert_array_equal(maxed, want_max)
        else:
            assert maxed is None
        np.testing.assert_array_equal(gathered, np.concatenate(xs))
        np.testing.assert_array_equal(
            exchanged, np.concatenate([x[rank * 4:(rank + 1) * 4] for x in xs]))


def test_a_missing_rank_ends_the_others_within_their_budget(served):
    """Two of three ranks post an allreduce; the third never does.  Each of the two gets
    NicollError naming the rank missing once its budget is spent (no engine starts), and the
    server serves the next collective of all three."""
    cl, server = served

    def work(rank_, rank):
        if rank == 1:
            return None
        # Rank 1 is always named; the other waiting rank too when its own budget ran out
        # first (it then left the rendezvous).
        with pytest.raises(nicoll.NicollError, match=r"refused 'start': ranks \[(0, )?1(, 2)?\] "
                                                     r"did not post within 500 ms"):
            rank_.allreduce(np.ones(6, np.int32))
        return "timed out"
    assert _ranks_in_threads(server.address, 3, work, budget_s=0.5) == ["timed out", None,
                                                                          "timed out"]
    got = _ranks_in_threads(server.address, 3,
                            lambda rank_, rank: rank_.allreduce(np.full(6, rank, np.int32)))
    for summed in got:
        np.testing.assert_array_equal(summed, np.full(6, 3, np.int32))


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator_fabric")
def test_per_rank_collectives_on_verilator(tmp_path):
    """The rendezvous on the gateware: on the model an engine started alone keeps a peer's
    early clear-to-send across its own queue's clear, on the gateware it does not, so the
    server arms every engine for one cycle.  Three ranks arriving out of order, on the
    build test_repack_node uses: allreduce and alltoall right, every engine started in the
    same cycle (each rank's engine counts from that start), and a barrier between them."""
    with nicoll.Cluster(backend="verilator", **LINKED_REPACK_NODE_CLUSTER) as cl:
        with ClusterServer(cl, f"unix:{tmp_path / 'v.sock'}") as server:
            xs = [np.arange(12, dtype=np.int32) * (r + 1) for r in range(3)]

            def work(rank_, rank):
                summed = rank_.allreduce(xs[rank])
                started = rank_.device.engine.started_at()
                rank_.barrier()
                return summed, started, rank_.alltoall(xs[rank])
            got = _ranks_in_threads(server.address, 3, work, delays=[0.2, 0.0, 0.1])
    for rank, (summed, _, exchanged) in enumerate(got):
        np.testing.assert_array_equal(summed, sum(xs))
        np.testing.assert_array_equal(
            exchanged, np.concatenate([x[rank * 4:(rank + 1) * 4] for x in xs]))
    assert len({started for _, started, _ in got}) == 1


def test_per_rank_barriers_release_after_the_last_arrival(served):
    """Rank.barrier through the barrier units (the server programmed the tree): three
    barriers in a row, the ranks arriving 0.3 s apart in turn; no rank leaves a barrier
    before the last one has arrived at it."""
    _, server = served
    log = []

    def work(rank_, rank):
        times = []
        for k in range(3):
            time.sleep(0.3 if (rank + k) % 3 == 0 else 0.0)
            arrived = time.monotonic()
            log.append((k, arrived))
            rank_.barrier()
            times.append((k, time.monotonic()))
        return times
    got = _ranks_in_threads(server.address, 3, work)
    for k in range(3):
        last_arrival = max(t for j, t in log if j == k)
        assert all(left >= last_arrival for times in got for j, left in times if j == k), k


def _wait_until_aborted(rank_, budget_s=20.0):
    """A straggler's work: it goes on until the others have released the barrier without
    it (its unit aborted, seed 004), as a process stopped by the forced abort would."""
    deadline = time.monotonic() + budget_s
    while not rank_.ac_aborted():
        assert time.monotonic() < deadline, f"rank {rank_.rank} was never aborted"
        time.sleep(0.005)


@pytest.mark.parametrize("straggler", [2, 0])
def test_an_ac_barrier_releases_the_others_early_then_a_normal_barrier_waits(served,
                                                                            straggler):
    """Rank.ac_barrier with m = 2 of 3 (seed 004, count sub-mode): the two others are
    released without the straggler (the root's rank 0 among the stragglers: the server
    programs the root before the first completion, whoever's), the root's abort log names it
    and it goes on with the estimate.  A normal barrier after it, the straggler arriving 0.3 s
    late, releases nobody before it arrives: the root is back in normal mode."""
    _, server = served
    log = {}

    def work(rank_, rank):
        if rank == straggler:
            _wait_until_aborted(rank_)
        ac = rank_.ac_barrier(m=2, estimate=77)
        if rank == straggler:
            time.sleep(0.3)
            log["arrived"] = time.monotonic()
        rank_.barrier()
        return ac, time.monotonic()
    got = _ranks_in_threads(server.address, 3, work)
    results = [ac for ac, _ in got]
    assert len({r.seq for r in results}) == 1
    for rank, r in enumerate(results):
        assert (r.rank, r.m, r.c) == (rank, 2, None)
        assert r.root == (rank == 0)                    # the server's binary tree
        assert r.was_aborted == (rank == straggler)
        if rank == straggler:
            assert r.early is True and r.estimate == 77 and r.arrived_at is None
        else:
            assert r.estimate is None and r.arrived_at <= r.released_at
    root = results[0]
    assert root.early is True and root.aborted == {straggler}
    # Released at the second completion: the m-th stamp, and no last one.
    assert root.s <= root.mt <= root.released_at and root.e is None
    assert all(left >= log["arrived"] for _, left in got)


def test_an_ac_barrier_by_time_releases_c_cycles_after_the_first_arrival(served):
    """The time sub-mode: with c = 3000 cycles and rank 1 never arriving on its own, ranks 0
    and 2 are released at least c cycles after the first completion, and rank 1 is aborted;
    a second barrier, everybody on time, is not early."""
    _, server = served
    c = 3000

    def work(rank_, rank):
        if rank == 1:
            _wait_until_aborted(rank_)
        first = rank_.ac_barrier(c=c)
        return first, rank_.ac_barrier(m=3, c=10 * c)
    got = _ranks_in_threads(server.address, 3, work)
    root, late = got[0][0], got[1][0]
    assert root.aborted == {1} and late.was_aborted and late.estimate == 0
    assert root.mt is None and root.released_at - root.s >= c
    again = got[0][1]
    assert again.early is False and again.aborted == frozenset() and again.e is not None
    assert not any(second.was_aborted for _, second in got)


def test_ac_barrier_arguments_refused_before_anything_is_written(served):
    """What the root's unit would refuse (ERRORS m_range, c_zero, mode) is refused by the
    rank, naming the value, before it asks the server or signals done: the root's MODE and M
    registers and the rank's barrier are unchanged."""
    cl, server = served
    from nicoll.remote import Rank
    dev = connect(server.address, 1, timeout=10)
    try:
        rank_ = Rank(dev, 3, budget_s=1)
        regs = cl.device(0).regs.barrier
        before = (regs.MODE.read(), regs.M.read(), dev.barrier.status())
        for kwargs, words in (({"m": 0}, "m must be between 1 and the 3 ranks of the barrier "
                                         "tree, not 0"),
                              ({"m": 4}, "m must be between 1 and the 3 ranks"),
                              ({"c": 0}, "c must be at least 1 cycle, not 0"),
                              ({}, "mode 'ac' needs a count threshold m, a time threshold c"),
                              ({"m": 2, "estimate": -1}, "estimate must be an int between 0 "
                                                         "and 2\\*\\*64 - 1, not -1"),
                              ({"m": "2"}, "m must be an int between 0 and 2\\*\\*16 - 1, "
                                           "not '2'")):
            with pytest.raises(nicoll.NicollError, match=words):
                rank_.ac_barrier(**kwargs)
        assert (regs.MODE.read(), regs.M.read(), dev.barrier.status()) == before
    finally:
        dev.transport.close()


def test_a_rank_asking_for_other_thresholds_is_refused_naming_both(served):
    """Only the root decides, by the values the first rank to ask had the server write:
    a rank that asks for the same barrier with another m is refused, naming both ranks and
    values; the others, one rank short, end within their budget."""
    _, server = served

    def work(rank_, rank):
        if rank == 2:
            time.sleep(0.2)
            with pytest.raises(nicoll.NicollError,
                               match=r"rank 2 asks for barrier \d+ in AC mode with m=2, c=None, "
                                     r"estimate=0, but rank [01] asked for it in AC mode with "
                                     r"m=3, c=None, estimate=0; every rank must pass the same"):
                rank_.ac_barrier(m=2)
        else:
            with pytest.raises(nicoll.NicollError, match=r"was not released within 1.0 s"):
                rank_.ac_barrier(m=3)
        return "refused"
    assert _ranks_in_threads(server.address, 3, work, budget_s=1) == ["refused"] * 3


def test_a_normal_barrier_call_where_the_others_ran_an_ac_barrier_is_refused(served):
    """The ranks count their barriers: rank 2, released without by the others' AC barrier,
    calling barrier() for it is told so rather than counting it as the next one."""
    _, server = served

    def work(rank_, rank):
        if rank != 2:
            return rank_.ac_barrier(m=2).was_aborted
        _wait_until_aborted(rank_)
        with pytest.raises(nicoll.NicollError, match=r"rank 2: barrier \d+ was released "
                                                     r"without this rank, as an AC barrier is"):
            rank_.barrier()
        return "refused"
    assert _ranks_in_threads(server.address, 3, work) == [False, False, "refused"]


class _Died(Exception):
    """A rank's thread playing a client that died."""


def _die(dev):
    """End ``dev``'s connection as a dying process does: closed, without a ``bye``."""
    dev.transport._goodbye.detach()
    dev.transport._sock.close()
    raise _Died


def test_a_client_that_dies_before_starting_ends_the_others_start_at_once(served):
    """Rank 1 posts its part of an allreduce, then its client dies instead of starting:
    ranks 0 and 2, waiting in the rendezvous or arriving after, end with NicollError naming
    rank 1 at once, not at their 20 s budget.  Once they have gone the server settles, and a
    new run of three clients gets the right sum."""
    _, server = served

    def work(rank_, rank):
        if rank == 1:
            rank_.device.transport.start = lambda budget_s: _die(rank_.device)
            with pytest.raises(_Died):
                rank_.allreduce(np.ones(6, np.int32))
            return "died"
        time.sleep(0.3 * rank)                  # rank 2 arrives after the death
        began = time.monotonic()
        with pytest.raises(nicoll.NicollError, match=r"refused 'start': rank 1 went away: its "
                                                     r"client's connection ended without"):
            rank_.allreduce(np.ones(6, np.int32))
        return time.monotonic() - began
    waited = _ranks_in_threads(server.address, 3, work, budget_s=20)
    assert waited[1] == "died" and max(waited[0], waited[2]) < 5, waited
    got = _ranks_in_threads(server.address, 3,
                            lambda rank_, rank: rank_.allreduce(np.full(6, rank + 1, np.int32)))
    for summed in got:
        np.testing.assert_array_equal(summed, np.full(6, 6, np.int32))


def test_a_client_that_dies_after_the_start_lets_the_collective_finish(served):
    """Rank 1's client dies right after the start: every engine holds its part, so ranks 0
    and 2 get the right sum; their next allreduce ends at its start, at once, naming rank
    1."""
    _, server = served
    xs = [np.arange(6, dtype=np.int32) * (r + 1) for r in range(3)]

    def work(rank_, rank):
        if rank == 1:
            start = rank_.device.transport.start

            def start_then_die(budget_s):
                start(budget_s)
                _die(rank_.device)
            rank_.device.transport.start = start_then_die
            with pytest.raises(_Died):
                rank_.allreduce(xs[rank])
            return "died"
        summed = rank_.allreduce(xs[rank])
        began = time.monotonic()
        with pytest.raises(nicoll.NicollError, match=r"rank 1 went away"):
            rank_.allreduce(xs[rank])
        return summed, time.monotonic() - began
    got = _ranks_in_threads(server.address, 3, work, budget_s=20)
    for rank in (0, 2):
        summed, waited = got[rank]
        np.testing.assert_array_equal(summed, sum(xs))
        assert waited < 5, waited


def test_a_client_that_dies_before_a_barrier_ends_the_others_wait(served):
    """Ranks 0 and 2 wait in a barrier rank 1's client dies before: they end at once naming
    it.  The server settles (the barrier units start again from barrier 0), so in a new run
    no rank leaves a barrier before the last one, rank 2, has arrived: the completions of
    the broken barrier do not count toward it."""
    _, server = served

    def broken(rank_, rank):
        if rank == 1:
            time.sleep(0.3)
            with pytest.raises(_Died):
                _die(rank_.device)
            return "died"
        began = time.monotonic()
        with pytest.raises(nicoll.NicollError, match=r"rank \d: barrier \d+ cannot be "
                                                     r"released: rank 1 went away"):
            rank_.barrier()
        return time.monotonic() - began
    waited = _ranks_in_threads(server.address, 3, broken, budget_s=20)
    assert waited[1] == "died" and max(waited[0], waited[2]) < 5, waited
    arrived = {}

    def again(rank_, rank):
        if rank == 2:
            time.sleep(0.5)
            arrived["last"] = time.monotonic()
        rank_.barrier()
        return time.monotonic()
    left = _ranks_in_threads(server.address, 3, again)
    assert min(left) >= arrived["last"], (left, arrived)


def test_a_server_stopped_while_ranks_wait_ends_each_wait_at_once(served):
    """Ranks 0 and 1 wait in the rendezvous, rank 2 in a barrier nobody else joins: the
    server stops 0.5 s later, and every rank's call ends with NicollError well within its
    20 s budget."""
    import threading
    _, server = served
    stopped = []

    def stop():
        time.sleep(0.5)
        stopped.append(time.monotonic())
        server.stop()
    stopper = threading.Thread(target=stop)

    def work(rank_, rank):
        with pytest.raises(nicoll.NicollError, match=r"server is stopping|closed the "
                                                     r"connection|failed"):
            if rank == 2:
                rank_.barrier()
            else:
                rank_.allreduce(np.ones(4, np.int32))
        return time.monotonic()
    stopper.start()
    try:
        ended = _ranks_in_threads(server.address, 3, work, budget_s=20)
    finally:
        stopper.join(30)
    assert max(ended) - stopped[0] < 5, (ended, stopped)
