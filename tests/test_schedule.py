"""Collective schedules (nicoll.schedule), their numpy executor (nicoll.plan.schedule_exec) and the
reduction orders (nicoll.plan.reduction_order).

Every algorithm × N ∈ {1, 2, 3, 5, 6, 7, 8, 16} × counts {0, 1, N−1, N+1, odd, large-ish},
ops and dtypes taken in turn: integers exactly against numpy, floats bit for bit against the
documented reduction order and identical on every rank; all-to-all against the transpose;
message counts; the step format's checks; bad input.
"""

import dataclasses
import itertools
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nicoll import NicollError
from nicoll.plan import reduction_order as order
from nicoll import schedule as sc
from nicoll.plan import schedule_exec as ex
from nicoll.plan.schedule_figures import figures
from nicoll.schedule import StepAction, Piece, Region, Schedule, Step

# The cluster tests' collectives, (op, dtype) pairs (every pair MPI defines, taken in turn by
# the cases below) and operands.
from collectives_helpers import COLLECTIVES, PAIRS, data

NODES = (1, 2, 3, 5, 6, 7, 8, 16)
NUMPY = {
    "sum": lambda s: np.sum(s, axis=0, dtype=s.dtype),
    "prod": lambda s: np.prod(s, axis=0, dtype=s.dtype),
    "min": lambda s: np.min(s, axis=0, initial=np.iinfo(s.dtype).max),
    "max": lambda s: np.max(s, axis=0, initial=np.iinfo(s.dtype).min),
    "band": lambda s: np.bitwise_and.reduce(s, axis=0),
    "bor": lambda s: np.bitwise_or.reduce(s, axis=0),
    "bxor": lambda s: np.bitwise_xor.reduce(s, axis=0),
    "land": lambda s: np.logical_and.reduce(s != 0, axis=0).astype(s.dtype),
    "lor": lambda s: np.logical_or.reduce(s != 0, axis=0).astype(s.dtype),
    "lxor": lambda s: np.logical_xor.reduce(s != 0, axis=0).astype(s.dtype),
}


def counts_for(nodes):
    return sorted({0, 1, nodes - 1, nodes + 1, 2 * nodes + 3, 301})


def run_collective(collective, xs, op, algorithm, **options):
    if collective == "allgather":
        return ex.allgather(xs, algorithm, **options)
    return getattr(ex, collective)(xs, op, algorithm=algorithm, **options)


def check_reduction(collective, xs, op, algorithm, outcome, **options):
    """Integers against numpy; floats against the reduction order, identical on every rank."""
    nodes = len(xs)
    want = order.reference(collective, xs, op, algorithm, **options)
    for r, (got, ref) in enumerate(zip(outcome.outputs, want)):
        if ref is None:
            assert got is None, f"rank {r} got an output"
            continue
        assert got.dtype == ref.dtype and got.shape == ref.shape
        assert got.tobytes() == ref.tobytes(), f"rank {r}: {got} != {ref}"
    dtype = xs[0].dtype
    if collective != "allgather" and dtype.kind in "iu":
        # One rank combines nothing: its input comes back as it is (a logical op does not
        # turn it into 0 or 1).
        whole = NUMPY[op](np.stack(xs)) if nodes > 1 else xs[0]
        if collective == "reduce_scatter":
            counts = options.get("counts") or sc.split_counts(whole.size, nodes)
            expected = np.split(whole, np.cumsum(counts)[:-1])
            for got, ref in zip(outcome.outputs, expected):
                np.testing.assert_array_equal(got, ref)
        else:
            for got in outcome.outputs:
                if got is not None:
                    np.testing.assert_array_equal(got, whole)
    if collective in ("allreduce", "allgather"):
        assert len({y.tobytes() for y in outcome.outputs}) == 1


# -- every algorithm × N × count ---------------------------------------------------------------

@pytest.mark.parametrize("nodes", NODES)
@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("algorithm", sc.REDUCTION_ALGORITHMS)
def test_reduction_collectives(algorithm, collective, nodes):
    rng = np.random.default_rng([nodes, len(collective), len(algorithm)])
    for case, count in enumerate(counts_for(nodes)):
        op, dtype = PAIRS[(case + 7 * nodes + 3 * len(algorithm) + len(collective)) % len(PAIRS)]
        options = {}
        if collective == "reduce":
            options["root"] = (case * 3) % nodes
        if collective == "allgather":
            xs = [x[:max(0, count - r % 3)] for r, x in enumerate(data(rng, dtype, count, nodes))]
            outcome = ex.allgather(xs, algorithm)
            check_reduction(collective, xs, None, algorithm, outcome)
            continue
        xs = data(rng, dtype, count, nodes, op)
        outcome = run_collective(collective, xs, op, algorithm, **options)
        check_reduction(collective, xs, op, algorithm, outcome, **options)


@pytest.mark.parametrize("nodes", (5, 8))
def test_every_op_and_dtype(nodes):
    rng = np.random.default_rng(nodes)
    for (op, dtype), algorithm in zip(PAIRS, itertools.cycle(sc.REDUCTION_ALGORITHMS)):
        xs = data(rng, dtype, 2 * nodes + 3, nodes, op)
        check_reduction("allreduce", xs, op, algorithm, ex.allreduce(xs, op, algorithm))
        xs = [x.reshape(-1, 1) for x in xs]             # any shape, returned as given
        outcome = ex.allreduce(xs, op, "recursive_halving")
        assert outcome.outputs[0].shape == xs[0].shape


@pytest.mark.parametrize("algorithm", sc.REDUCTION_ALGORITHMS)
@pytest.mark.parametrize("counts", ([0, 5, 0, 7, 1], [3, 0, 0, 0, 0, 0, 0, 9], [0, 0, 2]))
def test_reduce_scatter_explicit_counts(algorithm, counts):
    rng = np.random.default_rng(len(counts))
    xs = data(rng, np.float64, sum(counts), len(counts))
    outcome = ex.reduce_scatter(xs, "sum", counts, algorithm)
    check_reduction("reduce_scatter", xs, "sum", algorithm, outcome, counts=counts)
    assert [y.size for y in outcome.outputs] == counts


@pytest.mark.parametrize("shape", sc.TREE_SHAPES + ((None, 0, 0, 1, 1, 4, 4),))
@pytest.mark.parametrize("algorithm", ("tree", "prt"))
def test_tree_shapes(algorithm, shape):
    rng = np.random.default_rng(7)
    xs = data(rng, np.float32, 29, 7)
    for collective in ("allreduce", "reduce_scatter", "allgather"):
        outcome = run_collective(collective, xs, "sum", algorithm, shape=shape)
        check_reduction(collective, xs, "sum", algorithm, outcome, shape=shape)
    root = 0 if not isinstance(shape, str) else 4
    outcome = ex.reduce(xs, "sum", root, algorithm, shape=shape)
    check_reduction("reduce", xs, "sum", algorithm, outcome, root=root, shape=shape)


def test_tree_children_of_each_shape():
    children, parent, root = sc.tree_children(10, "2-tree")
    # Ref: seed 002, §4.2: v = 3^k * j receives from v + 3^t and v + 2 * 3^t for t < k.
    assert root == 0 and children[0] == [1, 2, 3, 6, 9] and children[3] == [4, 5]
    assert children[6] == [7, 8] and parent[9] == 0 and parent[8] == 6
    children, parent, _ = sc.tree_children(10, "binomial")
    assert children[0] == [1, 2, 4, 8] and children[4] == [5, 6] and parent[7] == 6
    children, parent, _ = sc.tree_children(5, "chain", root=3)
    assert parent == [4, 0, 1, None, 3] and children[3] == [4]
    children, parent, _ = sc.tree_children(6, "binary", root=2)
    assert children[2] == [3, 4] and children[3] == [5, 0]


# -- seed 000: recursive halving ----------------------------------------------------------------

@pytest.mark.parametrize("nodes", (2, 4, 8, 16))
def test_power_of_two_recursive_halving_is_the_pairwise_tree(nodes):
    rng = np.random.default_rng(nodes)
    xs = [(rng.standard_normal(64) * 10.0 ** rng.integers(-4, 5, size=64)).astype(np.float32)
          for _ in range(nodes)]
    tree = order.pairwise_tree(xs)
    assert order.recursive_halving(xs).tobytes() == tree.tobytes()
    for y in ex.allreduce(xs, "sum").outputs:
        assert y.tobytes() == tree.tobytes()
    left_fold = xs[0]
    for x in xs[1:]:
        left_fold = left_fold + x
    if nodes > 2:   # the data tells the orders apart, so the check above means something
        assert left_fold.tobytes() != tree.tobytes()


def test_recursive_halving_steps_follow_seed_000():
    nodes, count = 8, 64
    plan = sc.allreduce(nodes, count, "float32", slices=[3, 1, 2])
    for q, schedule in enumerate(plan.schedules):
        lo, hi = 0, count * 4
        for i, step in enumerate(schedule.steps[:3]):
            mask = 1 << i
            mid = (lo + hi) // 2
            assert step.send_to == step.recv_from == q ^ mask          # partner = rank XOR mask
            assert step.segments == [3, 1, 2][i]                        # slices[i]
            lower = not q & mask                                        # role by rank & mask
            kept, sent = ((lo, mid), (mid, hi)) if lower else ((mid, hi), (lo, mid))
            assert (step.send.offset, step.send.end) == sent
            assert (step.recv.offset, step.recv.end) == kept
            assert step.action is (StepAction.REDUCE_LOCAL_FIRST if lower
                                   else StepAction.REDUCE_RECEIVED_FIRST)
            lo, hi = kept
        for step in schedule.steps[3:]:                                 # recursive doubling
            assert step.action is StepAction.COPY
        assert len(schedule.steps) == 6
    assert plan.option("slices") == (3, 1, 2)


def test_recursive_halving_folds_extra_ranks_in_and_out():
    plan = sc.allreduce(6, 24, "int32")
    extra = plan.schedules[5].steps
    assert [(s.send_to, s.recv_from) for s in extra] == [(1, None), (None, 1)]
    assert extra[0].send.length == extra[1].recv.length == 96
    partner = plan.schedules[1].steps
    assert partner[0].recv_from == 5 and partner[0].action is StepAction.REDUCE_LOCAL_FIRST
    assert partner[-1].send_to == 5
    reduce = sc.reduce(6, 24, "int32", root=4)
    assert reduce.schedules[4].steps[-1].recv_from == 0 and reduce.output_counts[4] == 24
    assert reduce.output_counts.count(None) == 5


def test_recursive_halving_overlaps_without_fences():
    # Ref: seed 000: the last reduction of an iteration overlaps the next iteration's first
    # exchange.  The compiler orders pieces so that no fence is needed at N = 2^k.
    plan = sc.allreduce(8, 1 << 12, "float32")
    steps = [step for s in plan.schedules for step in s.steps]
    assert not any(step.fence for step in steps)
    assert any(step.recv_reversed for step in steps)
    overlapped = ex.execute(plan).cycles
    fenced = [dataclasses.replace(s, steps=[dataclasses.replace(t, fence=True) for t in s.steps])
              for s in plan.schedules]
    assert ex.execute(fenced).cycles > overlapped
    single = sc.allreduce(8, 1 << 12, "float32", slices=1, segments=1)
    assert all(step.fence for s in single.schedules for step in s.steps[1:3])


# -- traffic -----------------------------------------------------------------------------------

@pytest.mark.parametrize("nodes", (2, 4, 8, 16))
def test_bandwidth_optimal_reductions_move_2_n_minus_1_over_n(nodes):
    count = 16 * nodes
    length = count * 4
    for algorithm in ("recursive_halving", "ring"):
        stats = ex.execute(sc.allreduce(nodes, count, "float32", algorithm=algorithm))
        assert stats.bytes_sent == [2 * (nodes - 1) * length // nodes] * nodes
        assert stats.bytes_received == stats.bytes_sent
    stats = ex.execute(sc.allreduce(nodes, count, "float32", algorithm="recursive_halving"))
    levels = nodes.bit_length() - 1
    assert stats.messages_sent == [2 * levels] * nodes


def test_pipelined_tree_inner_nodes_move_3l_and_6l():
    # Ref: seed 000, background: an inner node of the PRT moves 3L for reduce, 6L for allreduce.
    nodes, count = 7, 1000
    for collective, moved in (("reduce", 3), ("allreduce", 6)):
        plan = getattr(sc, collective)(nodes, count, "float32", algorithm="prt")
        inner = ex.execute(plan).ranks[1]
        assert inner.bytes_sent + inner.bytes_received == moved * count * 4


@pytest.mark.parametrize("nodes", NODES)
def test_alltoall_message_counts(nodes):
    for algorithm, messages in (("pairwise", nodes - 1), ("bruck", math.ceil(math.log2(nodes)))):
        stats = ex.execute(sc.alltoall(nodes, 3, "int32", algorithm))
        assert stats.messages_sent == stats.messages_received == [messages] * nodes
    for m in (1, 2, 5):
        stats = ex.execute(sc.alltoall(nodes, 3, "int32", "inplace", scratch_blocks=m))
        rounds = nodes - 1 if nodes & (nodes - 1) == 0 else nodes
        assert all(r.barriers == math.ceil(rounds / m) for r in stats.ranks)
        assert stats.messages_sent == [nodes - 1] * nodes
        assert all(r.bytes_copied_locally == r.bytes_received for r in stats.ranks)


# -- all-to-all --------------------------------------------------------------------------------

@pytest.mark.parametrize("nodes", NODES)
def test_alltoall_is_the_transpose(nodes):
    rng = np.random.default_rng(nodes)
    for block, dtype in ((0, np.int8), (1, np.float64), (3, ml_dtypes.bfloat16), (2, np.uint16)):
        xs = data(rng, dtype, nodes * block, nodes)
        want = [np.concatenate([x[j * block:(j + 1) * block] for x in xs]) for j in range(nodes)]
        for algorithm, options in (("pairwise", {}), ("bruck", {}), ("inplace", {}),
                                   ("inplace", {"scratch_blocks": 3}),
                                   ("inplace", {"scratch_blocks": nodes + 1})):
            outcome = ex.alltoall(xs, algorithm, **options)
            for got, ref in zip(outcome.outputs, want):
                assert got.tobytes() == ref.tobytes(), (algorithm, options)


def test_inplace_alltoall_uses_one_buffer_and_m_scratch_blocks():
    plan = sc.alltoall(8, 4, "int32", "inplace", scratch_blocks=3)
    schedule = plan.schedules[5]
    assert schedule.buffer_bytes == (8 + 3) * 4 * 4
    first = schedule.steps[0]
    # Ref: seed 001, S21: round i + j sends block myid ^ (i + j) into the peer's slot j.
    assert first.send_to == 5 ^ 1 and first.send.offset == (5 ^ 1) * 16
    assert first.recv.offset == 8 * 16
    assert schedule.steps[1].recv.offset == 9 * 16 and schedule.steps[1].send_to == 5 ^ 2
    assert schedule.steps[3].send_to == schedule.steps[3].recv_from == 5          # local move
    assert schedule.steps[6].barrier
    assert plan.schedules[0].load == plan.schedules[0].result == (Piece(0, 0, 128),)


@pytest.mark.parametrize("nodes", (1, 3, 8))
def test_alltoallv(nodes):
    rng = np.random.default_rng(nodes)
    blocks = [[rng.integers(0, 99, size=int(rng.integers(0, 4))).astype(np.int32)
               for _ in range(nodes)] for _ in range(nodes)]
    outcome = ex.alltoallv(blocks)
    for j in range(nodes):
        for i in range(nodes):
            np.testing.assert_array_equal(outcome.outputs[j][i], blocks[i][j])
    assert order.reference("alltoallv", blocks)[1 % nodes][0] is blocks[0][1 % nodes]


# -- randomized --------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(1, 12), count=st.integers(0, 40),
       algorithm=st.sampled_from(sc.REDUCTION_ALGORITHMS), collective=st.sampled_from(COLLECTIVES),
       segments=st.integers(1, 3), slices=st.integers(1, 3), seed=st.integers(0, 2 ** 16))
def test_random_plans_match_their_reference(nodes, count, algorithm, collective, segments, slices,
                                            seed):
    rng = np.random.default_rng(seed)
    xs = data(rng, np.float32, count, nodes)
    options = {"segments": segments}
    if algorithm in ("recursive_halving", "prt") and collective != "allgather" or algorithm == "prt":
        options["slices"] = slices
    if collective == "reduce":
        options["root"] = seed % nodes
    if collective == "allgather":
        plan = sc.allgather(nodes, count, np.float32, algorithm, **options)
    else:
        plan = getattr(sc, collective)(nodes, count, np.float32, "max" if seed % 2 else "sum",
                                       algorithm=algorithm, **options)
    outcome = ex.run(plan, xs)
    for got, ref in zip(outcome.outputs, order.expected(plan, xs)):
        assert (got is None and ref is None) or got.tobytes() == ref.tobytes()


# -- the step format and the executor's checks --------------------------------------------------

def two_ranks(steps0, steps1, size=16, itemsize=4):
    return [Schedule(0, 2, itemsize, size, steps0), Schedule(1, 2, itemsize, size, steps1)]


def send(to, offset=0, length=8, tag=0, **kw):
    return Step(send_to=to, send=Region(offset, length), send_tag=tag, **kw)


def recv(frm, offset=0, length=8, tag=0, **kw):
    return Step(recv_from=frm, recv=Region(offset, length), recv_tag=tag, **kw)


def test_executor_moves_and_reduces_in_piece_order():
    buffers = [np.arange(16, dtype=np.uint8), np.zeros(16, np.uint8)]
    schedules = two_ranks([send(1, 0, 8, segments=2)],
                          [recv(0, 8, 8, segments=2, action=StepAction.COPY)])
    stats = ex.execute(schedules, buffers)
    assert list(buffers[1][8:]) == list(range(8))
    assert stats.ranks[0].segments_sent == 2 and stats.messages_sent == [1, 0]
    strided = Region(4, 8, run=4, stride=8)
    assert strided.intervals() == [(4, 8), (12, 16)] and strided.end == 16
    assert strided.intervals(2, 6) == [(6, 8), (12, 14)]


@pytest.mark.parametrize("schedules, message", [
    (lambda: two_ranks([recv(1)], [recv(0)]),
     r"deadlock: no rank can move; rank 0 step 0 waits to receive segment 0 from rank 1 \(tag 0\); "
     r"rank 1 step 0 waits to receive segment 0 from rank 0"),
    (lambda: two_ranks([send(1, tag=3)], [recv(0, tag=2)]),
     r"rank 0 step 0 waits to send segment 0 to rank 1 \(tag 3\)"),
    (lambda: two_ranks([send(1, length=8)], [recv(0, length=4)]),
     r"rank 0 step 0 sends tag 0 to rank 1, whose step 0 receives it: 8 bytes sent, 4 expected"),
    (lambda: two_ranks([send(1, segments=2)], [recv(0, segments=1)]),
     r"in 2 segments, received in 1"),
    (lambda: two_ranks([send(1, segments=2, send_reversed=True)], [recv(0, segments=2)]),
     r"opposite orders"),
    (lambda: two_ranks([send(1), send(1, 8)], [recv(0), recv(0, 8)]),
     r"rank 0 steps 0 and 1 both sends tag 0 to rank 1"),
    (lambda: two_ranks([Step(barrier=True)], []),
     r"rank 0 step 0 waits at a barrier; ranks \[1\] have finished"),
])
def test_executor_reports_bad_schedules(schedules, message):
    with pytest.raises(NicollError, match=message):
        ex.execute(schedules(), [np.zeros(16, np.uint8)] * 2, op="sum", dtype=np.int32)


@pytest.mark.parametrize("make, message", [
    (lambda: Region(0, 0), r"region length must be ≥ 1, not 0"),
    (lambda: Region(-4, 4), r"region offset must be ≥ 0, not -4"),
    (lambda: Region(0, 8, run=4, stride=2), r"region stride 2 is shorter than its run 4"),
    (lambda: Region(0, 8.0), r"region length must be an integer, not 8.0"),
    (lambda: Step(send_to=1), r"send_to is 1 but its send region is None: give both or neither"),
    (lambda: Step(), r"a step must send, receive or be a barrier"),
    (lambda: Step(barrier=True, send_to=1, send=Region(0, 4)), r"a barrier step neither"),
    (lambda: Step(recv_from=1, recv=Region(0, 4), action="sum"), r"action must be one of COPY"),
    (lambda: send(1, action=StepAction.REDUCE_LOCAL_FIRST), r"receives nothing cannot REDUCE_LOCAL_FIRST"),
    (lambda: send(1, segments=0), r"segments must be ≥ 1, not 0"),
    (lambda: send(1, fence=1), r"fence must be True or False, not 1"),
    (lambda: Schedule(0, 2, 4, 16, [send(2)]), r"rank 0 step 0 sends to rank 2, outside ranks 0..1"),
    (lambda: Schedule(0, 2, 4, 16, [send(1, 12, 8)]), r"sends bytes up to 20, past its 16-byte buffer"),
    (lambda: Schedule(0, 2, 4, 16, [send(1, 2, 8)]), r"does not fall on 4-byte element boundaries"),
    (lambda: Schedule(0, 2, 4, 16, [recv(1, 0, 8, action=StepAction.REDUCE_LOCAL_FIRST), send(1, 4, 8)]),
     r"rank 0 step 1: its first exchange touches bytes the previous step's last reduction is "
     r"writing; it needs fence=True"),
    (lambda: Schedule(0, 1, 4, 16, [Step(send_to=0, send=Region(0, 8), recv_from=0, recv=Region(4, 8))]),
     r"segment 0 sends bytes it receives into at the same time"),
    (lambda: Schedule(0, 2, 4, 16, [Step(send_to=1, send=Region(0, 8), recv_from=1, recv=Region(8, 8),
                                         action=StepAction.REDUCE_LOCAL_FIRST, segments=2,
                                         send_reversed=True, recv_reversed=True)]),
     None),
    (lambda: Schedule(0, 2, 4, 16, [Step(send_to=1, send=Region(0, 8), recv_from=1, recv=Region(4, 8),
                                         action=StepAction.REDUCE_LOCAL_FIRST, segments=2)]),
     r"the exchange of segment 1 touches bytes the reduction of segment 0 is writing"),
])
def test_step_format_checks(make, message):
    if message is None:
        make()
        return
    with pytest.raises(NicollError, match=message):
        make()


def test_a_fence_makes_the_overlap_safe():
    steps = [recv(1, 0, 8, action=StepAction.REDUCE_LOCAL_FIRST), send(1, 4, 8, fence=True)]
    Schedule(0, 2, 4, 16, steps)


@pytest.mark.parametrize("call, message", [
    (lambda: ex.allreduce([np.zeros(3, np.float32), np.zeros(4, np.float32)]),
     r"input 1 has shape \(4,\) but input 0 has \(3,\)"),
    (lambda: ex.allreduce([np.zeros(3, np.float32), np.zeros(3, np.float64)]),
     r"input 1 is float64 but input 0 is float32"),
    (lambda: ex.reduce_scatter([np.zeros((2, 2), np.int32)] * 2), r"input 0 must be 1-D"),
    (lambda: ex.allreduce([]), r"at least one node"),
    (lambda: ex.allreduce(np.zeros((2, 3))), r"a list of one numpy array per rank"),
    (lambda: ex.allreduce([[1, 2]]), r"input 0 must be a numpy array, not list"),
    (lambda: ex.allreduce([np.zeros(3, np.float32)] * 2, algorithm="bogus"),
     r"unknown algorithm 'bogus'; algorithms are recursive_halving, ring, tree, prt"),
    (lambda: ex.alltoall([np.zeros(4, np.int32)] * 2, "aggregate"), r"runs on the repack units"),
    (lambda: ex.allreduce([np.zeros(3, np.float32)] * 2, "avg"), r"unknown reduction op 'avg'"),
    (lambda: ex.allreduce([np.zeros(3, np.float32)] * 2, "band"), r"'band' is not defined on float32"),
    (lambda: ex.allreduce([np.zeros(3, np.complex64)] * 2), r"unsupported element type 'complex64'"),
    (lambda: ex.reduce([np.zeros(3, np.int8)] * 3, root=3), r"root 3 is outside ranks 0..2"),
    (lambda: ex.alltoall([np.zeros(5, np.int8)] * 2), r"5 elements do not split evenly"),
    (lambda: ex.alltoallv([[np.zeros(1)], [np.zeros(1)]]), r"rank 0 must give 2 blocks"),
    (lambda: sc.allreduce(0, 4, "float32"), r"at least one node, not 0"),
    (lambda: sc.allreduce(True, 4, "float32"), r"nodes must be an integer, not True"),
    (lambda: sc.allreduce(4, -1, "float32"), r"count must be ≥ 0, not -1"),
    (lambda: sc.reduce_scatter(3, 6, "int32", counts=[1, 2, 2]), r"counts add up to 5, not the 6"),
    (lambda: sc.reduce_scatter(3, 6, "int32", counts=[4, -1, 3]), r"counts\[1\] must be ≥ 0, not -1"),
    (lambda: sc.reduce_scatter(3, 6, "int32", counts=[6]), r"one entry per rank \(3\), not 1"),
    (lambda: sc.allreduce(8, 6, "int32", slices=[2, 2]),
     r"one segment count per recursive-halving iteration \(3\), not 2: \[2, 2\]"),
    (lambda: sc.allreduce(8, 6, "int32", slices=0), r"slices must be ≥ 1, not 0"),
    (lambda: sc.allreduce(8, 6, "int32", algorithm="ring", slices=2),
     r"slices does not apply to algorithm 'ring'"),
    (lambda: sc.allreduce(8, 6, "int32", shape="binary"), r"shape does not apply to algorithm"),
    (lambda: sc.allreduce(8, 6, "int32", algorithm="tree", shape="ternary"), r"unknown tree shape 'ternary'"),
    (lambda: sc.allreduce(3, 6, "int32", algorithm="tree", shape=[None, 2, 1]), r"do not reach the root"),
    (lambda: sc.reduce(3, 6, "int32", root=1, algorithm="tree", shape=[None, 0, 0]),
     r"rooted at rank 0, not at root 1"),
    (lambda: sc.allreduce(4, 6, "int32", segments=0), r"segments must be ≥ 1, not 0"),
    (lambda: sc.alltoall(4, 2, "int32", "inplace", scratch_blocks=0), r"scratch_blocks must be ≥ 1, not 0"),
    (lambda: sc.alltoall(4, 2, "int32", scratch_blocks=2), r"scratch_blocks does not apply"),
    (lambda: sc.alltoall(4, 2, object), r"fixed-size plain data"),
    (lambda: sc.alltoallv([[1, 2], [3]], "int32"), r"counts\[1\] must have one entry per rank"),
    (lambda: ex.run(sc.allreduce(2, 3, "int32"), [np.zeros(3, np.int32)]), r"2 ranks; 1 inputs given"),
    (lambda: ex.run(sc.allreduce(2, 3, "int32"), [np.zeros(3, np.int64)] * 2), r"input 0 is int64"),
])
def test_bad_input(call, message):
    with pytest.raises(NicollError, match=message):
        call()


def test_names_are_exported():
    for module in (sc, ex, order):
        assert len(set(module.__all__)) == len(module.__all__)
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_figures_render():
    text = figures(nodes=4, nbytes=4096)
    assert "| allreduce | recursive_halving |" in text and "| bruck |" in text
