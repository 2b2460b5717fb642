"""All-to-all on a whole cluster: Cluster.alltoall and alltoallv through the engines on
every backend of SIZES, the aggregate algorithm through the repack units (seed 003), its
subgroup checks and the size threshold of alltoallv's automatic choice, and the in-place
all-to-all sharing the barrier units.

Outputs are checked by collectives_helpers.check_outputs (integers exactly, floats bit for
bit against nicoll.plan.reduction_order), each call's counters by check_stats.
"""

import itertools

import numpy as np
import pytest

import nicoll
from nicoll import NicollError
from nicoll.plan import reduction_order as order
from nicoll import schedule as sc

from conftest import cluster_kwargs

from collectives_helpers import (ALLTOALL_TYPES, SIZES, one_case, data_cases, backend_params,
                                 check_aggregate, check_stats)


# -- all-to-all ---------------------------------------------------------------------------------

ALLTOALL_CASES = [("pairwise", None), ("bruck", None), ("inplace", 1), ("inplace", 2),
                  ("inplace", "N-1"), ("inplace", "N")]


@pytest.mark.parametrize("backend, nodes, algorithm, scratch", backend_params(
    each=lambda b, size: ((n,) + case for n in size["nodes"]
                          for case in size["alltoall"] or ALLTOALL_CASES)))
def test_alltoall(clusters, backend, nodes, algorithm, scratch):
    cl = clusters(backend, nodes)
    options = {}
    if scratch is not None:
        options["scratch_blocks"] = max(1, {"N-1": nodes - 1, "N": nodes}.get(scratch, scratch))
    rng = np.random.default_rng(nodes)
    # On the Amaranth cluster the largest blocks, of the structured type (see data_cases).
    cases = list(zip((0, 1, 3, 7), ALLTOALL_TYPES))
    for block, dtype in data_cases(backend, cases, cases[-1]):
        raw = rng.integers(0, 256, (nodes, nodes * block * np.dtype(dtype).itemsize), np.uint8)
        xs = [row.view(dtype) for row in raw]
        outputs = cl.alltoall(xs, algorithm, **options)
        want = order.reference("alltoall", xs)
        for r, (got, ref) in enumerate(zip(outputs, want)):
            assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes(), f"rank {r}"
        plan = sc.alltoall(nodes, block, dtype, algorithm, **options)
        check_stats(cl, plan)
    if one_case(backend):
        return      # the rows below: the driver's reshaping, the same on every backend
    xs = [np.arange(2 * nodes, dtype=np.int32).reshape(nodes, 2) + 100 * r for r in range(nodes)]
    outputs = cl.alltoall(xs, algorithm, **options)
    for j, got in enumerate(outputs):          # rows are blocks: out[j] row i = xs[i] row j
        assert got.shape == (nodes, 2)
        np.testing.assert_array_equal(got, np.stack([xs[i][j] for i in range(nodes)]))


@pytest.mark.parametrize("backend, nodes", backend_params(each=lambda b, size: size["nodes"]))
def test_alltoallv(clusters, backend, nodes):
    cl = clusters(backend, nodes)
    rng = np.random.default_rng(nodes)
    # On the Amaranth cluster about half the blocks empty (see data_cases).
    for empty in data_cases(backend, (0.0, 0.5, 1.0), 0.5):
        sizes = rng.integers(1, 9, (nodes, nodes)) * (rng.random((nodes, nodes)) >= empty)
        blocks = [[rng.standard_normal(sizes[i][j]).astype(np.float32) for j in range(nodes)]
                  for i in range(nodes)]
        outputs = cl.alltoallv(blocks, "pairwise")
        for i, j in itertools.product(range(nodes), repeat=2):
            assert outputs[j][i].tobytes() == blocks[i][j].tobytes()
        check_stats(cl, sc.alltoallv(sizes.tolist(), np.float32))


# -- aggregate: the repack units (seed 003) ---------------------------------------------------

@pytest.mark.parametrize("backend, nodes", backend_params(each=lambda b, size: size["nodes"]))
def test_aggregate(clusters, backend, nodes):
    check_aggregate(clusters(backend, nodes), backend, nodes)


def test_aggregate_on_the_repack_node():
    """The same exchanges with the units on a node of their own (repack_node=True), on the
    model; tests/test_repack_node.py runs them on the simulators."""
    nodes = SIZES["model"]["nodes"][-1]
    kwargs = dict(cluster_kwargs("model"), mem_size=SIZES["model"]["mem_size"])
    with nicoll.Cluster(nodes=nodes, repack_node=True, **kwargs) as cl:
        assert cl.device(0).repack.units == 0
        check_aggregate(cl, "model", nodes)


def test_subgroup_is_checked_before_anything_is_posted():
    with nicoll.Cluster(nodes=4, backend="model", mem_size=1 << 12) as cl:
        xs = [np.arange(4, dtype=np.int32) for _ in range(4)]
        with pytest.raises(NicollError, match=r"subgroup sets the repack sub-matrix size of "
                                              r"algorithm 'aggregate', not of 'bruck'"):
            cl.alltoall(xs, "bruck", subgroup=2)
        with pytest.raises(NicollError, match=r"subgroup must be a positive int, not 0"):
            cl.alltoall(xs, "aggregate", subgroup=0)
        with pytest.raises(NicollError, match=r"dh must be an integer between 1 and 4"):
            cl.alltoallv([[x[:1] for x in xs] for _ in range(4)], "aggregate", subgroup=5)
        assert cl.last is None


def test_alltoallv_auto_switches_at_a_block_size():
    # Small blocks go through the repack units, large ones pairwise (seed 003: a size
    # threshold), as the calibrated estimates say for this build (N = 8, 256 bits, "ideal"):
    # measured on Verilator, 8-byte blocks took 251 cycles through one unit against 291
    # pairwise, 512-byte blocks 6 475 against 396 (tests/data/alltoall_crossover.json).
    nodes = 8
    with nicoll.Cluster(nodes=nodes, backend="model", **cluster_kwargs("model")) as cl:
        for length, want in ((2, "aggregate"), (128, "pairwise")):
            blocks = [[np.full(length, 10 * i + j, np.float32) for j in range(nodes)]
                      for i in range(nodes)]
            out = cl.alltoallv(blocks)
            assert cl.last_plan.algorithm == want, length
            for i, j in itertools.product(range(nodes), repeat=2):
                np.testing.assert_array_equal(out[j][i], blocks[i][j])


def test_aggregate_without_repack_units_is_refused():
    with nicoll.Cluster(nodes=3, backend="model", repack_units=0,
                        **cluster_kwargs("model")) as cl:
        xs = [np.zeros(3, np.int32)] * 3
        with pytest.raises(NicollError, match=r"this build has no repack units"):
            cl.alltoall(xs, "aggregate")
        cl.alltoallv([[np.zeros(1, np.int32)] * 3] * 3)           # auto: pairwise
        assert cl.last_plan.algorithm == "pairwise"


# -- barriers in a collective ------------------------------------------------------------------

@pytest.mark.parametrize("backend", backend_params(each=lambda b, size: [()], sweep=True))
def test_inplace_alltoall_shares_the_barrier_units(clusters, backend):
    nodes = max(n for n in SIZES[backend]["nodes"] if n <= 8)
    cl = clusters(backend, nodes)
    xs = [np.arange(nodes * 2, dtype=np.int16) + 100 * r for r in range(nodes)]
    want = order.reference("alltoall", xs)
    result = cl.barrier(mode="ac", m=1)             # leaves the root in mode "ac"
    before = result.seq + 1
    barriers = sum(step.barrier for step in
                   sc.alltoall(nodes, 2, np.int16, "inplace").schedules[0].steps)
    assert barriers > 0
    outputs = cl.alltoall(xs, "inplace")
    assert all(a.tobytes() == b.tobytes() for a, b in zip(outputs, want))
    assert [dev.barrier.status().seq for dev in cl.devices] == [before + barriers] * nodes
    assert cl.barrier().seq == before + barriers
