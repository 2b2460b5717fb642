"""Reduction collectives on a whole cluster: Cluster.allreduce, reduce, reduce_scatter and
allgather through the engines, on every backend of SIZES: every (op, dtype) pair, every
collective × algorithm × N × count, every root, reduce_scatter counts, tree shapes, large
vectors, and the Verilator activity trace against the counters.

Outputs are checked by collectives_helpers.check_outputs (integers exactly, floats bit for
bit against nicoll.plan.reduction_order), each call's counters by check_stats.
"""

import itertools

import ml_dtypes
import numpy as np
import pytest

import nicoll
from nicoll import NicollError
from nicoll.plan import reduction_order as order
from nicoll import schedule as sc

from collectives_helpers import (SIZES, BACKENDS, COLLECTIVES, PAIRS, backend_params, in_build,
                                 summable, counts_for, data, run, compile_plan, check_outputs,
                                 check_stats)


# -- every (op, dtype) ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", backend_params(each=lambda b, size: [()], sweep=True))
def test_allreduce_every_op_and_dtype(clusters, backend):
    nodes = SIZES[backend]["pairs_nodes"]
    cl = clusters(backend, nodes)
    rng = np.random.default_rng(nodes)
    pairs = [(op, dtype) for op, dtype in PAIRS if in_build(backend, op, dtype)]
    pairs = pairs[::SIZES[backend]["pair_step"]]
    for (op, dtype), algorithm in zip(pairs, itertools.cycle(sc.REDUCTION_ALGORITHMS)):
        xs = data(rng, dtype, 2 * nodes + 3, nodes, op)
        outputs = cl.allreduce(xs, op, algorithm)
        check_outputs("allreduce", xs, op, algorithm, outputs)
    xs = [x.reshape(-1, 1) for x in xs]             # any shape, returned as given
    assert cl.allreduce(xs, op)[0].shape == xs[0].shape


# -- every collective × algorithm × N × count ---------------------------------------------------

@pytest.mark.parametrize("backend, nodes, collective, algorithm", backend_params(
    each=lambda b, size: itertools.product(size["nodes"], COLLECTIVES, sc.REDUCTION_ALGORITHMS)))
def test_reduction_collectives(clusters, backend, nodes, collective, algorithm):
    cl = clusters(backend, nodes)
    rng = np.random.default_rng([nodes, len(collective), len(algorithm)])
    for case, count in enumerate(counts_for(backend, nodes)):
        op, dtype = PAIRS[(case + 7 * nodes + 3 * len(algorithm) + len(collective)) % len(PAIRS)]
        if not in_build(backend, op, dtype):
            op, dtype = "sum", np.dtype(np.int32)
        options = {}
        if collective == "reduce":
            options["root"] = (case * 3) % nodes
        xs = data(rng, dtype, count, nodes, op)
        outputs = run(cl, collective, xs, op, algorithm, **options)
        check_outputs(collective, xs, op, algorithm, outputs, **options)
        check_stats(cl, compile_plan(nodes, collective, xs, op, algorithm, **options))


@pytest.mark.parametrize("backend, nodes", backend_params(each=lambda b, size: [
    n for n in size["nodes"] if n in (3, 5, 8)], sweep=True))
def test_every_root(clusters, backend, nodes):
    cl = clusters(backend, nodes)
    rng = np.random.default_rng(nodes)
    xs = data(rng, summable(backend, np.float32), 3 * nodes + 1, nodes)
    for algorithm in sc.REDUCTION_ALGORITHMS:
        for root in SIZES[backend]["roots"](nodes):
            outputs = cl.reduce(xs, "sum", root=root, algorithm=algorithm)
            check_outputs("reduce", xs, "sum", algorithm, outputs, root=root)


@pytest.mark.parametrize("backend, counts", backend_params(each=lambda b, size: [
    (c,) for c in ((0, 5, 0, 7, 1), (3, 0, 0, 0, 0, 0, 0, 9), (0, 0, 2)) if len(c) in size["nodes"]],
    sweep=True))
def test_reduce_scatter_counts(clusters, backend, counts):
    nodes = len(counts)
    cl = clusters(backend, nodes)
    rng = np.random.default_rng(sum(counts))
    xs = data(rng, summable(backend, np.float64), sum(counts), nodes)
    for algorithm in sc.REDUCTION_ALGORITHMS:
        outputs = cl.reduce_scatter(xs, "sum", counts=list(counts), algorithm=algorithm)
        assert [y.size for y in outputs] == list(counts)
        check_outputs("reduce_scatter", xs, "sum", algorithm, outputs, counts=list(counts))


@pytest.mark.parametrize("backend, nodes", backend_params(each=lambda b, size: [
    n for n in size["nodes"] if n & (n - 1) == 0 and n > 1], sweep=True))
def test_power_of_two_recursive_halving_is_the_pairwise_tree(clusters, backend, nodes):
    cl = clusters(backend, nodes)
    rng = np.random.default_rng(nodes)
    xs = data(rng, summable(backend, ml_dtypes.bfloat16), 4 * nodes + 5, nodes)
    tree = order.pairwise_tree(xs, "sum")
    for y in cl.allreduce(xs, "sum", "recursive_halving"):
        assert y.tobytes() == tree.tobytes()
    y = cl.reduce(xs, "sum", root=nodes - 1, algorithm="recursive_halving")[nodes - 1]
    assert y.tobytes() == tree.tobytes()
    parts = cl.reduce_scatter(xs, "sum", algorithm="recursive_halving")
    assert np.concatenate(parts).tobytes() == tree.tobytes()


@pytest.mark.parametrize("backend, shape", backend_params(each=lambda b, size: sc.TREE_SHAPES,
                                                           sweep=True))
def test_tree_shapes(clusters, backend, shape):
    nodes = max(n for n in SIZES[backend]["nodes"] if n <= 8)
    cl = clusters(backend, nodes)
    xs = data(np.random.default_rng(len(shape)), summable(backend, np.float32), 50, nodes)
    for algorithm in ("tree", "prt"):
        outputs = cl.allreduce(xs, "sum", algorithm, shape=shape, segments=3)
        check_outputs("allreduce", xs, "sum", algorithm, outputs, shape=shape)


@pytest.mark.parametrize("backend, algorithm", backend_params(
    each=lambda b, size: sc.REDUCTION_ALGORITHMS, sweep=True))
def test_large(clusters, backend, algorithm):
    size = SIZES[backend]
    nodes = max(size["nodes"])
    cl = clusters(backend, nodes)
    rng = np.random.default_rng(len(algorithm))
    count = size["large"]
    dtype = summable(backend, np.float32)
    xs = ([rng.standard_normal(count).astype(np.float32) for _ in range(nodes)]
          if dtype == np.float32 else data(rng, dtype, count, nodes))
    outputs = cl.allreduce(xs, "sum", algorithm)
    check_outputs("allreduce", xs, "sum", algorithm, outputs)
    check_stats(cl, sc.allreduce(nodes, count, dtype, "sum", algorithm))
    ints = [rng.integers(-1000, 1000, count // nodes, dtype=np.int32) for _ in range(nodes)]
    gathered = cl.allgather(ints, algorithm)
    check_outputs("allgather", ints, None, algorithm, gathered)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b == "verilator"],
                         ids=lambda b: b)
@pytest.mark.verilator
@pytest.mark.xdist_group("verilator")
def test_activity_trace_agrees_with_the_counters(clusters, backend):
    """Cluster.trace: every beat a node's ports and ALU moved, against the engine's counters;
    recursive halving shows seed 000's overlap of sending and reducing on every rank that
    reduces."""
    from nicoll.hw.net.packet import header_beats
    nodes = max(SIZES[backend]["nodes"])
    cl = clusters(backend, nodes)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(3000).astype(np.float32) for _ in range(nodes)]
    with cl.trace() as trace:
        outputs = cl.allreduce(xs, "sum", "recursive_halving")
    check_outputs("allreduce", xs, "sum", "recursive_halving", outputs)
    width, head = cl.data_width // 8, header_beats(cl.data_width)
    plan = cl.last_plan
    last = cl.last
    for r, schedule in enumerate(plan.schedules):
        sent = sum(-(-step.send.length // width) for step in schedule.steps if step.send)
        # The send port also carries an ACK per message received (a header alone, not
        # counted in PACKETS_SENT: docs/faults.md, "Packet-level recovery").
        acks = sum(step.recv is not None for step in schedule.steps)
        assert trace.busy_cycles(r, "send") == sent + head * (last.packets[r] + acks), f"rank {r}"
        assert trace.busy_cycles(r, "reduce") == last.alu_beats[r], f"rank {r}"
        spans = [span for lane in trace.lanes[r].values() for span in lane]
        assert all(0 <= first < end <= last.rank_cycles[r] + 1 for first, end in spans)
        # A rank that reduces sends while it does; at a node count that is not a power of
        # two the ranks folded into a partner only send theirs and receive the result.
        if last.alu_beats[r]:
            assert trace.overlap_cycles(r, "send", "reduce") > 0, f"rank {r}"
    received = sum(trace.busy_cycles(r, "receive") for r in range(nodes))
    assert received == sum(trace.busy_cycles(r, "send") for r in range(nodes))


def test_activity_trace_needs_verilator():
    with nicoll.Cluster(nodes=2, backend="model", mem_size=1 << 12) as cl:
        with pytest.raises(NicollError, match=r"Verilator simulation's signals; this cluster "
                                              r"runs on the 'model' backend"):
            with cl.trace():
                pass
