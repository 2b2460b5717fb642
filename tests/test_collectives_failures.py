"""Collectives that must not run, or that do not finish: bad input is refused before
anything is posted, on every backend; a collective that does not finish names its ranks,
steps and errors.  Also two checks of what the collective tests rely on: no compiled step
sends bytes of its own receive region (docs/engine.md), and SIZES names every backend.
"""

import contextlib
import itertools

import numpy as np
import pytest

import nicoll
from nicoll import NicollError
from nicoll.cluster import collective_run
from nicoll import schedule as sc
from nicoll.hw.ops import DType, ReduceOp
from nicoll.schedule import Piece, Plan, Region, Schedule, Step

from nicoll.hw.alu import all_capabilities

from conftest import cluster_kwargs

from collectives_helpers import SIZES, backend_params, summable


def test_no_step_sends_bytes_it_receives():
    # The engine runs a command's send and receive halves independently; the executor pairs
    # them piece by piece.  Both give the same bytes as long as no step's send region overlaps
    # its own receive region, which the step format does not forbid: check the compilers.
    def disjoint(step):
        if step.send is None or step.recv is None:
            return True
        a, b = step.send.intervals(), step.recv.intervals()
        return all(x1 <= y0 or y1 <= x0 for x0, x1 in a for y0, y1 in b)

    for nodes in (1, 2, 3, 4, 5, 6, 7, 8, 9, 16):
        plans = []
        for count, algorithm in itertools.product((1, nodes + 1, 37), sc.REDUCTION_ALGORITHMS):
            plans += [sc.allreduce(nodes, count, "int32", "sum", algorithm),
                      sc.reduce(nodes, count, "int32", "sum", nodes - 1, algorithm),
                      sc.reduce_scatter(nodes, count, "int32", "sum", None, algorithm),
                      sc.allgather(nodes, count, "int32", algorithm)]
        for block, m in itertools.product((1, 3), (1, 2, nodes)):
            plans += [sc.alltoall(nodes, block, "int8", "inplace", scratch_blocks=m)]
        plans += [sc.alltoall(nodes, 3, "int8", a) for a in ("pairwise", "bruck")]
        for plan in plans:
            for s in plan.schedules:
                assert all(map(disjoint, s.steps)), (plan.collective, plan.algorithm, nodes)


# -- failures ---------------------------------------------------------------------------------

def _snapshot(cl):
    return [(dev.engine.status(), dev.engine.started_at(), dev.engine.counters())
            for dev in cl.devices]


def _bad_calls(n, mem_size, depth):
    x = np.zeros(2 * n, np.float32)
    xs = [x] * n
    return {
        "not a list": (lambda cl: cl.allreduce(x),
                       rf"allreduce takes a list of {n} numpy arrays, one per rank, not ndarray"),
        "too few arrays": (lambda cl: cl.allreduce(xs[:-1]),
                           rf"allreduce takes one array per rank: {n} arrays, not {n - 1}"),
        "too many arrays": (lambda cl: cl.allgather(xs + [x]),
                            rf"allgather takes one array per rank: {n} arrays, not {n + 1}"),
        "not an array": (lambda cl: cl.reduce([[0.0]] * n),
                         r"reduce: input 0 must be a numpy array, not list"),
        "shapes differ": (lambda cl: cl.allreduce(xs[:-1] + [np.zeros(3, np.float32)]),
                          rf"allreduce: input {n - 1} has shape \(3,\) but input 0 has "
                          rf"\({2 * n},\); every rank must give the same shape"),
        "dtypes differ": (lambda cl: cl.alltoall(xs[:-1] + [x.astype(np.float64)]),
                          rf"alltoall: input {n - 1} is float64 but input 0 is float32; every "
                          rf"rank must give the same dtype"),
        "unknown op": (lambda cl: cl.allreduce(xs, "avg"), r"unknown reduction op 'avg'"),
        "op undefined on floats": (lambda cl: cl.allreduce(xs, "band"),
                                   r"op 'band' is not defined on float32"),
        "op not in this build": (lambda cl: cl.reduce([x.astype(np.float64)] * n, "prod"),
                                 r"op 'prod' on float64 is not in this build's ALU, which "
                                 r"computes .*; open the cluster with alu_capabilities=\[\.\.\., "
                                 r"\('prod', 'float64'\)\]"),
        "type the ALU lacks": (lambda cl: cl.allreduce([x.astype(np.complex64)] * n),
                               r"unsupported element type 'complex64'"),
        "buffer over device memory": (
            lambda cl: cl.allreduce([np.zeros(mem_size + 1, np.int8)] * n, "sum"),
            rf"allreduce \(recursive_halving\) needs a {mem_size + 1}-byte buffer on rank 0; "
            rf"its device memory holds {mem_size} bytes"),
        "schedule over the queue": (
            lambda cl: cl.allreduce([np.zeros(4 * depth, np.int32)] * n, "sum", "prt",
                                    slices=2 * depth),
            rf"allreduce \(prt\) takes \d+ steps on rank 0; the engine's queue holds {depth}"),
        "unknown algorithm": (lambda cl: cl.allreduce(xs, algorithm="fastest"),
                              r"unknown allreduce algorithm 'fastest'; algorithms are "
                              r"'recursive_halving', 'ring', 'tree', 'prt' and 'auto'"),
        "aggregate with an option": (lambda cl: cl.alltoall(xs, "aggregate", segments=2),
                                     r"alltoall 'aggregate' takes no options, not 'segments'"),
        "aggregate block too large": (
            lambda cl: cl.alltoallv([[np.zeros(17500, np.float32)] + [x] * (n - 1)]
                                    + [[x] * n] * (n - 1), "aggregate"),
            r"a block of 70000 bytes; a repack message's blocks hold at most 65535 bytes"),
        "unknown option": (lambda cl: cl.allreduce(xs, colour="red"),
                           r"allreduce has no option 'colour'; its options are slices, "
                           r"segments, shape"),
        "option of another algorithm": (lambda cl: cl.allreduce(xs, algorithm="ring", slices=2),
                                        r"slices does not apply to algorithm 'ring'"),
        "scratch without inplace": (lambda cl: cl.alltoall(xs, "pairwise", scratch_blocks=2),
                                    r"scratch_blocks does not apply to algorithm 'pairwise'"),
        "root out of range": (lambda cl: cl.reduce(xs, root=n),
                              rf"root {n} is outside ranks 0..{n - 1}"),
        "counts do not add up": (lambda cl: cl.reduce_scatter(xs, counts=[1] * n),
                                 rf"counts add up to {n}, not the {2 * n} elements"),
        "blocks do not divide": (lambda cl: cl.alltoall([np.zeros(n + 1, np.int8)] * n),
                                 rf"{n + 1} elements do not divide by {n}"),
        "alltoallv rows": (lambda cl: cl.alltoallv([[x] * n] * (n + 1)),
                           rf"alltoallv takes one row of blocks per rank: {n} rows, not {n + 1}"),
        "alltoallv block shape": (lambda cl: cl.alltoallv([[x.reshape(n, 2)] * n] * n),
                                  rf"blocks\[0\]\[0\] must be 1-D, not of shape \({n}, 2\)"),
        "alltoallv dtypes": (lambda cl: cl.alltoallv([[x] * (n - 1) + [x.astype(np.int32)]] * n),
                             rf"blocks\[0\]\[{n - 1}\] is int32 but blocks\[0\]\[0\] is float32"),
    }


_BAD = list(_bad_calls(5, 1 << 20, 256))


# The checks are the driver's, the same on every backend; the Amaranth cluster (tens of
# seconds per collective) runs the one that reads the device's own size.
@pytest.mark.parametrize("backend, case", backend_params(
    each=lambda b, size: ["buffer over device memory"] if b == "amaranth" else _BAD))
def test_bad_input_is_refused_before_anything_is_posted(clusters, backend, case):
    nodes = 5 if 5 in SIZES[backend]["nodes"] else max(SIZES[backend]["nodes"])
    with contextlib.ExitStack() as stack:
        if backend == "model" and case == "op not in this build":
            # The model's clusters compute every pair; this one is built without prod float64.
            kwargs = dict(cluster_kwargs(backend), mem_size=SIZES[backend]["mem_size"],
                          alu_capabilities=all_capabilities() - {(ReduceOp.PROD, DType.FLOAT64)})
            cl = stack.enter_context(nicoll.Cluster(nodes=nodes, backend=backend, **kwargs))
        else:
            cl = clusters(backend, nodes)
        cl.allreduce([np.ones(7, np.int32)] * nodes)
        call, message = _bad_calls(nodes, SIZES[backend]["mem_size"],
                                   cl.device(0).engine.depth)[case]
        before = _snapshot(cl)
        with pytest.raises(NicollError, match=message):
            call(cl)
        assert _snapshot(cl) == before


def _plan(steps, nodes, buffer_bytes=64):
    """A float32 plan from the steps of the first ranks (the others have none; input and
    output: the first 16 bytes)."""
    steps = list(steps) + [[]] * (nodes - len(steps))
    schedules = [Schedule(rank=r, nodes=nodes, itemsize=4, buffer_bytes=buffer_bytes, steps=s,
                          load=[Piece(0, 0, 16)], result=[Piece(0, 0, 16)])
                 for r, s in enumerate(steps)]
    return Plan("allreduce", "recursive_halving", "sum", np.dtype(np.float32), [4] * nodes,
                [4] * nodes, schedules)


@pytest.mark.parametrize("backend", backend_params(each=lambda b, size: [()]))
def test_a_collective_that_does_not_finish_names_ranks_steps_and_errors(clusters, backend,
                                                                        monkeypatch):
    nodes = min(n for n in SIZES[backend]["nodes"] if n >= 2)
    cl = clusters(backend, nodes)
    xs = [np.ones(4, summable(backend, np.float32))] * nodes
    # Each rank waits for the other: no error, nobody finishes within the budget (its fixed
    # allowance cut, so the simulators reach it sooner: the message is the same).
    deadlock = _plan([[Step(recv_from=1, recv=Region(0, 16))],
                      [Step(recv_from=0, recv=Region(0, 16))]], nodes)
    monkeypatch.setattr(sc, "allreduce", lambda *args, **kwargs: deadlock)
    monkeypatch.setattr(collective_run, "_BUDGET_BASE", 200)
    with pytest.raises(NicollError, match=r"allreduce \(recursive_halving\) did not finish on every "
                                          r"rank within 1000 cycles of its start: rank 0 waits at "
                                          r"step 0 of 1; rank 1 waits at step 0 of 1$"):
        cl.allreduce(xs)
    monkeypatch.undo()
    # Rank 1 expects fewer bytes than rank 0 sends: it stops with ERRORS.length, and rank 0's
    # send waits for an ACK that never comes.
    short = _plan([[Step(send_to=0, send=Region(0, 16), recv_from=0, recv=Region(16, 16)),
                    Step(send_to=1, send=Region(0, 16))],
                   [Step(recv_from=0, recv=Region(0, 8))]], nodes)
    monkeypatch.setattr(sc, "allreduce", lambda *args, **kwargs: short)
    with pytest.raises(NicollError, match=r"allreduce \(recursive_halving\) failed on the engines: "
                                          r"rank 0 waits at step 1 of 2; "
                                          r"rank 1 stopped at step 0 of 1 with length \(a received "
                                          r"message holds more or fewer bytes than the receiving "
                                          r"region\)$"):
        cl.allreduce(xs)
    monkeypatch.undo()
    outputs = cl.allreduce(xs)          # the next call starts from a cleared engine
    assert all(np.array_equal(y, np.full(4, nodes, np.float32)) for y in outputs)


def test_the_table_names_every_backend():
    assert set(SIZES) == set(nicoll.BACKENDS)
