"""Collectives on a whole cluster: Cluster.allreduce, reduce, reduce_scatter, allgather,
alltoall and alltoallv through the engines, on every backend of SIZES.

Integers are checked exactly against numpy; floats bit for bit against the reduction order
of nicoll.plan.reduction_order for the algorithm, and identical on every rank that gets the
whole vector; data movement against the concatenation / transpose.  Each call's counters
(Cluster.last) are checked against the plan it ran.  Bad input is refused before anything is
posted.
"""

import contextlib
import itertools
import os

import ml_dtypes
import numpy as np
import pytest

import nicoll
from nicoll import NicollError
from nicoll.cluster import collective_run
from nicoll.plan import reduction_order as order
from nicoll import region_bytes
from nicoll import schedule as sc
from nicoll.hw.ops import DType, ReduceOp, op_supported_for
from nicoll.ops import numpy_dtype
from nicoll.schedule import Piece, Plan, Region, Schedule, Step

from nicoll.hw.alu import all_capabilities

from conftest import cluster_kwargs

#: What each backend runs.  ``nodes``: the cluster sizes; ``large``: elements of the large
#: cases; ``mem_size``: device memory per node; ``pairs_nodes``: the cluster every (op, dtype)
#: pair runs on; ``pair_step``: run every k-th pair of the build there; ``counts``: the element
#: counts of the collective × algorithm cases, by N; ``roots``: the roots every reduce
#: algorithm runs with, by N; ``alltoall``: the all-to-all cases.  A backend whose entry is None does not
#: run.  The simulators get small clusters and few counts: the model covers the breadth, the
#: simulators show the gateware agrees on a spread of it.  The simulated clusters use the
#: builds of tests/conftest.py (cluster_kwargs), so Verilator builds its 8-node cluster once.
SIZES = {
    "model": dict(nodes=[1, 2, 3, 5, 6, 7, 8, 16], large=100_000, mem_size=1 << 22,
                  pairs_nodes=5, pair_step=1,
                  counts=lambda n: sorted({0, 1, n - 1, n + 1, 2 * n + 3, 37}),
                  roots=range, alltoall=None),
    "amaranth": dict(nodes=[3], large=64, mem_size=cluster_kwargs("amaranth")["mem_size"],
                     pairs_nodes=3, pair_step=25, counts=lambda n: [n + 1],
                     roots=lambda n: [n - 1], alltoall=[("bruck", None), ("pairwise", None),
                                                        ("inplace", 1)]),
    "verilator": dict(nodes=[5], large=4000, mem_size=cluster_kwargs("verilator")["mem_size"],
                      pairs_nodes=5, pair_step=6, counts=lambda n: [0, n - 1, 301],
                      roots=lambda n: [0, 2, n - 1],
                      alltoall=[("bruck", None), ("pairwise", None), ("inplace", 1),
                                ("inplace", "N-1")]),
}
# The Verilator collectives share the xdist group "verilator" with the driver and barrier tests
# of the same build (`make test` distributes by group): all of them together take under a
# minute once it is built, and a second worker would only wait for the build.  The model's
# clusters start at once, so their tests spread over the workers.  The Amaranth cluster takes
# 7 to 10 s to open: its tests are one group of their own, so they run one after the other on
# one worker and the module's fixture opens it once (spread over both workers, it was opened
# on each).
_MARKS = {
    "model": [],
    "amaranth": [pytest.mark.xdist_group("amaranth_collectives")],
    "verilator": [pytest.mark.verilator, pytest.mark.xdist_group("verilator")],
}
BACKENDS = [b for b, size in SIZES.items() if size is not None]
COLLECTIVES = ("allreduce", "reduce", "reduce_scatter", "allgather")
#: Every (op, dtype) pair MPI defines.
PAIRS = [(op.mpi_name, numpy_dtype(dtype)) for dtype in DType for op in ReduceOp
         if op_supported_for(op, dtype)]
NUMPY = {
    "sum": lambda s: np.sum(s, axis=0, dtype=s.dtype),
    "prod": lambda s: np.prod(s, axis=0, dtype=s.dtype),
    "min": lambda s: np.min(s, axis=0),
    "max": lambda s: np.max(s, axis=0),
    "band": lambda s: np.bitwise_and.reduce(s, axis=0),
    "bor": lambda s: np.bitwise_or.reduce(s, axis=0),
    "bxor": lambda s: np.bitwise_xor.reduce(s, axis=0),
    "land": lambda s: np.logical_and.reduce(s != 0, axis=0).astype(s.dtype),
    "lor": lambda s: np.logical_or.reduce(s != 0, axis=0).astype(s.dtype),
    "lxor": lambda s: np.logical_xor.reduce(s != 0, axis=0).astype(s.dtype),
}


#: The simulators take seconds (Verilator) to tens of seconds (Amaranth) per collective, so by
#: default they run every STRIDE[backend]-th case of each test: a spread over collectives and
#: algorithms (each stride is prime to their counts).  NICOLL_SIM_FULL=1 runs every case.
STRIDE = {"model": 1, "amaranth": 5, "verilator": 3}
if os.environ.get("NICOLL_SIM_FULL"):
    STRIDE = dict.fromkeys(STRIDE, 1)


#: The Amaranth cluster simulates the same gateware as Verilator through its own transport,
#: at tens of seconds per collective: it runs one test of each kind of traffic (the reduction
#: collectives, an all-to-all, an all-to-all-v, the aggregate, a collective that does not
#: finish, a refused call); the sweeps over pairs, roots, counts, tree shapes, sizes and the
#: in-place barrier path (``sweep=True``) run on the model and Verilator only, or on every
#: backend with NICOLL_SIM_FULL=1.
SWEEP_AMARANTH = bool(os.environ.get("NICOLL_SIM_FULL"))


def _one_case(backend):
    """Whether ``backend`` runs one case of each data loop (see _cases)."""
    return backend == "amaranth" and not SWEEP_AMARANTH


def _cases(backend, cases, amaranth):
    """The data cases a test loops over (block sizes and types, shares of empty blocks, a
    second call): all of ``cases`` on the model and on Verilator, the one case ``amaranth`` on
    the Amaranth cluster (all of them with NICOLL_SIM_FULL=1).  There every case takes the
    same path through its transport (memory loads, register writes, status polls); what
    differs between them, the packets and beats the gateware makes of other sizes and what
    the driver makes of other shapes, is checked on Verilator, which runs the same NicCore
    and switch, and on the model."""
    cases = list(cases)
    assert amaranth in cases
    return [amaranth] if _one_case(backend) else cases


def _params(*names, each=None, sweep=False):
    """pytest params over the active backends × their sizes: ``each(backend, size)`` yields
    tuples of the remaining arguments.  ``sweep``: a sweep, left out on Amaranth (see
    SWEEP_AMARANTH)."""
    out = []
    for backend in BACKENDS:
        if sweep and backend == "amaranth" and not SWEEP_AMARANTH:
            continue
        cases = list(each(backend, SIZES[backend]))
        cases = cases[::STRIDE[backend]]
        for rest in cases:
            rest = rest if isinstance(rest, tuple) else (rest,)
            out.append(pytest.param(backend, *rest, marks=_MARKS[backend],
                                    id="-".join(map(str, (backend,) + rest))))
    return out


@pytest.fixture(scope="module")
def clusters():
    """One cluster per (backend, nodes), opened when first asked for."""
    opened = {}

    def get(backend, nodes):
        if (backend, nodes) not in opened:
            kwargs = dict(cluster_kwargs(backend), mem_size=SIZES[backend]["mem_size"],
                          alu_capabilities=capabilities(backend))
            opened[backend, nodes] = nicoll.Cluster(nodes=nodes, backend=backend, **kwargs)
        return opened[backend, nodes]

    yield get
    for cl in opened.values():
        cl.close()


def capabilities(backend):
    """The (ReduceOp, DType) pairs of ``backend``'s clusters: every pair on the model, the
    shared test builds on the simulators."""
    if backend == "model":
        return all_capabilities()
    return cluster_kwargs(backend)["alu_capabilities"]


def in_build(backend, op, dtype):
    return (ReduceOp[op.upper()], DType[np.dtype(dtype).name.upper()]) in capabilities(backend)


def summable(backend, dtype):
    """``dtype`` if the backend's build sums it, else float32 if it sums that, else int32 (which
    every test build sums).  The Amaranth cluster has no float adder (see conftest): there the
    reduction tests sum integers, which checks every byte moved and summed but not the
    combining order; the order is checked bit for bit on the model and Verilator."""
    for candidate in (dtype, np.float32):
        if in_build(backend, "sum", candidate):
            return candidate
    return np.int32


def counts_for(backend, nodes):
    return SIZES[backend]["counts"](nodes)


def data(rng, dtype, count, nodes, op="sum"):
    """One array per rank: full-range integers; floats of mixed magnitude with a few
    infinities, NaNs, signed zeros and subnormals, so the combining order shows in the bits."""
    dtype = np.dtype(dtype)
    xs = []
    for _ in range(nodes):
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            low, high = (-3, 3) if op in ("land", "lor", "lxor") else (info.min, info.max)
            x = rng.integers(max(low, info.min), high, size=count, dtype=dtype, endpoint=True)
        else:
            scale = 10.0 ** rng.integers(-3, 4, size=count)
            x = (rng.standard_normal(count) * scale).astype(dtype)
            special = rng.random(count) < 0.03
            pool = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40], np.float64).astype(dtype)
            x[special] = rng.choice(pool, size=int(special.sum()))
        xs.append(x)
    return xs


def run(cl, collective, xs, op, algorithm, **options):
    if collective == "allgather":
        return cl.allgather(xs, algorithm, **options)
    return getattr(cl, collective)(xs, op, algorithm=algorithm, **options)


def compile_plan(nodes, collective, xs, op, algorithm, **options):
    """The plan the Cluster compiles for the same call."""
    dtype = xs[0].dtype
    if collective == "allgather":
        return sc.allgather(nodes, xs[0].size, dtype, algorithm, **options)
    if collective == "reduce":
        root = options.pop("root", 0)
        return sc.reduce(nodes, xs[0].size, dtype, op, root, algorithm, **options)
    if collective == "reduce_scatter":
        counts = options.pop("counts", None)
        return sc.reduce_scatter(nodes, xs[0].size, dtype, op, counts, algorithm, **options)
    return sc.allreduce(nodes, xs[0].size, dtype, op, algorithm, **options)


def check_outputs(collective, xs, op, algorithm, outputs, **options):
    """Integers against numpy; floats against the reduction order, the same on every rank."""
    nodes = len(xs)
    if collective == "allgather":
        whole = np.concatenate(xs)
        for r, got in enumerate(outputs):
            assert got.dtype == whole.dtype and got.tobytes() == whole.tobytes(), f"rank {r}"
        return
    want = order.reference(collective, xs, op, algorithm, **options)
    for r, (got, ref) in enumerate(zip(outputs, want)):
        if ref is None:
            assert got is None, f"rank {r} got an output"
            continue
        assert got.dtype == ref.dtype and got.shape == ref.shape, f"rank {r}"
        assert got.tobytes() == ref.tobytes(), f"rank {r}: {got} != {ref}"
    if xs[0].dtype.kind in "iu":
        # One rank combines nothing: its input comes back as it is.
        whole = NUMPY[op](np.stack(xs)) if nodes > 1 else xs[0]
        if collective == "reduce_scatter":
            counts = options.get("counts") or sc.split_counts(whole.size, nodes)
            for got, part in zip(outputs, np.split(whole, np.cumsum(counts)[:-1])):
                np.testing.assert_array_equal(got, part)
        else:
            for got in outputs:
                if got is not None:
                    np.testing.assert_array_equal(got, whole)
    if collective == "allreduce":
        assert len({y.tobytes() for y in outputs}) == 1


def check_stats(cl, plan):
    """Cluster.last against the plan: payload bytes, data packets (a segment's beats per
    packet, at most the build's largest) and one clear-to-send per receive, ALU rows."""
    width = cl.data_width // 8
    biggest = cl.device(0).engine.packet_beats

    def packets(step):
        beats = -(-step.send.length // width)
        per = max(1, min(-(-beats // step.segments), biggest))
        return -(-beats // per)

    senders = {}
    for s in plan.schedules:
        for step in s.steps:
            if step.send is not None:
                senders[s.rank, step.send_to, step.send_tag] = step
    last = cl.last
    for r, s in enumerate(plan.schedules):
        sends = [step for step in s.steps if step.send is not None]
        recvs = [step for step in s.steps if step.recv is not None]
        assert last.bytes_sent[r] == sum(step.send.length for step in sends), f"rank {r}"
        assert last.bytes_received[r] == sum(step.recv.length for step in recvs), f"rank {r}"
        assert last.packets[r] == sum(map(packets, sends)) + len(recvs), f"rank {r}"
        assert last.packets_received[r] == len(sends) + sum(
            packets(senders[step.recv_from, r, step.recv_tag]) for step in recvs), f"rank {r}"
        assert last.alu_beats[r] == sum(
            region_bytes.rows(step.recv.offset, step.recv.length, step.recv.run, step.recv.stride,
                         width) for step in recvs if step.action.reduces), f"rank {r}"
    assert (last.cycles is None) == (cl.backend == "model")
    if last.cycles is not None:
        assert last.cycles > 0


# -- every (op, dtype) ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", _params(each=lambda b, size: [()], sweep=True))
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

@pytest.mark.parametrize("backend, nodes, collective, algorithm", _params(
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


@pytest.mark.parametrize("backend, nodes", _params(each=lambda b, size: [
    n for n in size["nodes"] if n in (3, 5, 8)], sweep=True))
def test_every_root(clusters, backend, nodes):
    cl = clusters(backend, nodes)
    rng = np.random.default_rng(nodes)
    xs = data(rng, summable(backend, np.float32), 3 * nodes + 1, nodes)
    for algorithm in sc.REDUCTION_ALGORITHMS:
        for root in SIZES[backend]["roots"](nodes):
            outputs = cl.reduce(xs, "sum", root=root, algorithm=algorithm)
            check_outputs("reduce", xs, "sum", algorithm, outputs, root=root)


@pytest.mark.parametrize("backend, counts", _params(each=lambda b, size: [
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


@pytest.mark.parametrize("backend, nodes", _params(each=lambda b, size: [
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


@pytest.mark.parametrize("backend, shape", _params(each=lambda b, size: sc.TREE_SHAPES,
                                                   sweep=True))
def test_tree_shapes(clusters, backend, shape):
    nodes = max(n for n in SIZES[backend]["nodes"] if n <= 8)
    cl = clusters(backend, nodes)
    xs = data(np.random.default_rng(len(shape)), summable(backend, np.float32), 50, nodes)
    for algorithm in ("tree", "prt"):
        outputs = cl.allreduce(xs, "sum", algorithm, shape=shape, segments=3)
        check_outputs("allreduce", xs, "sum", algorithm, outputs, shape=shape)


@pytest.mark.parametrize("backend, algorithm", _params(
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
        assert trace.busy_cycles(r, "send") == sent + head * last.packets[r], f"rank {r}"
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


# -- all-to-all ---------------------------------------------------------------------------------

ALLTOALL_CASES = [("pairwise", None), ("bruck", None), ("inplace", 1), ("inplace", 2),
                  ("inplace", "N-1"), ("inplace", "N")]
ALLTOALL_TYPES = [np.int8, np.float64, ml_dtypes.bfloat16, np.dtype([("a", "<u2"), ("b", "<f4")])]


@pytest.mark.parametrize("backend, nodes, algorithm, scratch", _params(
    each=lambda b, size: ((n,) + case for n in size["nodes"]
                          for case in size["alltoall"] or ALLTOALL_CASES)))
def test_alltoall(clusters, backend, nodes, algorithm, scratch):
    cl = clusters(backend, nodes)
    options = {}
    if scratch is not None:
        options["scratch_blocks"] = max(1, {"N-1": nodes - 1, "N": nodes}.get(scratch, scratch))
    rng = np.random.default_rng(nodes)
    # On the Amaranth cluster the largest blocks, of the structured type (see _cases).
    cases = list(zip((0, 1, 3, 7), ALLTOALL_TYPES))
    for block, dtype in _cases(backend, cases, cases[-1]):
        raw = rng.integers(0, 256, (nodes, nodes * block * np.dtype(dtype).itemsize), np.uint8)
        xs = [row.view(dtype) for row in raw]
        outputs = cl.alltoall(xs, algorithm, **options)
        want = order.reference("alltoall", xs)
        for r, (got, ref) in enumerate(zip(outputs, want)):
            assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes(), f"rank {r}"
        plan = sc.alltoall(nodes, block, dtype, algorithm, **options)
        check_stats(cl, plan)
    if _one_case(backend):
        return      # the rows below: the driver's reshaping, the same on every backend
    xs = [np.arange(2 * nodes, dtype=np.int32).reshape(nodes, 2) + 100 * r for r in range(nodes)]
    outputs = cl.alltoall(xs, algorithm, **options)
    for j, got in enumerate(outputs):          # rows are blocks: out[j] row i = xs[i] row j
        assert got.shape == (nodes, 2)
        np.testing.assert_array_equal(got, np.stack([xs[i][j] for i in range(nodes)]))


@pytest.mark.parametrize("backend, nodes", _params(each=lambda b, size: size["nodes"]))
def test_alltoallv(clusters, backend, nodes):
    cl = clusters(backend, nodes)
    rng = np.random.default_rng(nodes)
    # On the Amaranth cluster about half the blocks empty (see _cases).
    for empty in _cases(backend, (0.0, 0.5, 1.0), 0.5):
        sizes = rng.integers(1, 9, (nodes, nodes)) * (rng.random((nodes, nodes)) >= empty)
        blocks = [[rng.standard_normal(sizes[i][j]).astype(np.float32) for j in range(nodes)]
                  for i in range(nodes)]
        outputs = cl.alltoallv(blocks, "pairwise")
        for i, j in itertools.product(range(nodes), repeat=2):
            assert outputs[j][i].tobytes() == blocks[i][j].tobytes()
        check_stats(cl, sc.alltoallv(sizes.tolist(), np.float32))


# -- aggregate: the repack units (seed 003) ---------------------------------------------------

def check_aggregate_stats(cl):
    """Cluster.last against the exchange's layout: each rank sends its registration and one
    packet per destination subgroup, and hears SEND and TAKEN per destination subgroup,
    DELIVERED per source subgroup, DONE, and each received message in packets of the hub's
    size."""
    plan = cl.last_plan
    assert plan.algorithm == "aggregate"
    width = cl.data_width // 8
    per_packet = cl.device(0).repack.packet_beats
    last = cl.last
    for r, lay in enumerate(plan.layouts):
        q, p = lay.sends, lay.receives
        sent = sum(int.from_bytes(lay.image[b * lay.send_slot:b * lay.send_slot + 4], "little")
                   for b in range(q))
        assert last.bytes_sent[r] == sent, f"rank {r}"
        assert last.bytes_received[r] == sum(lay.recv_lengths), f"rank {r}"
        assert last.packets[r] == 1 + q, f"rank {r}"
        data_packets = sum(-(-(-(-n // width)) // per_packet) for n in lay.recv_lengths)
        assert last.packets_received[r] == 2 * q + p + 1 + data_packets, f"rank {r}"
        assert last.alu_beats[r] == 0
    assert (last.cycles is None) == (cl.backend == "model")


@pytest.mark.parametrize("backend, nodes", _params(each=lambda b, size: size["nodes"]))
def test_aggregate(clusters, backend, nodes):
    cl = clusters(backend, nodes)
    rng = np.random.default_rng(nodes)
    # All-to-all with equal blocks (empty ones too), then all-to-all-v with empty blocks.  On
    # the Amaranth cluster the 3-element blocks, the all-to-all-v and no subgroups (see _cases;
    # the subgroups' order through the hub is the gateware's, on Verilator).
    cases = list(zip((0, 1, 3), ALLTOALL_TYPES))
    for block, dtype in _cases(backend, cases, cases[-1]):
        raw = rng.integers(0, 256, (nodes, nodes * block * np.dtype(dtype).itemsize), np.uint8)
        xs = [row.view(dtype) for row in raw]
        outputs = cl.alltoall(xs, "aggregate")
        want = order.reference("alltoall", xs)
        for r, (got, ref) in enumerate(zip(outputs, want)):
            assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes(), f"rank {r}"
        check_aggregate_stats(cl)
    sizes = rng.integers(1, 9, (nodes, nodes)) * (rng.random((nodes, nodes)) >= 0.4)
    blocks = [[rng.standard_normal(sizes[i][j]).astype(np.float32) for j in range(nodes)]
              for i in range(nodes)]
    outputs = cl.alltoallv(blocks, "aggregate")
    for i, j in itertools.product(range(nodes), repeat=2):
        assert outputs[j][i].dtype == np.float32
        assert outputs[j][i].tobytes() == blocks[i][j].tobytes(), (i, j)
    check_aggregate_stats(cl)
    if _one_case(backend):
        return
    # Several source subgroups through one unit, one sub-matrix after another: later ranks
    # register while the first sub-matrix's notices are out (the hub must not hold them).
    subgroup = max(1, (nodes + 1) // 3)
    xs = [rng.integers(0, 1 << 15, nodes, dtype=np.int16) for _ in range(nodes)]
    outputs = cl.alltoall(xs, "aggregate", subgroup=subgroup)
    assert cl.last_plan.repack.dh == subgroup
    for r, (got, ref) in enumerate(zip(outputs, order.reference("alltoall", xs))):
        assert got.tobytes() == ref.tobytes(), f"rank {r}"
    check_aggregate_stats(cl)


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


def test_alltoallv_auto_follows_the_cost_model():
    # Small blocks go through the repack units, large ones pairwise (seed 003: a size
    # threshold), as nicoll.plan.repack's cost model says for this build.
    from nicoll.plan.repack import plan_subgroups
    nodes = 8
    with nicoll.Cluster(nodes=nodes, backend="model", **cluster_kwargs("model")) as cl:
        repack = cl.device(0).repack
        chosen = set()
        for length in (1, 512):
            try:
                plan = plan_subgroups(nodes, length * 4, data_width=cl.data_width,
                                      max_group=repack.max_group,
                                      capacity_bytes=repack.capacity, units=repack.units)
                want = "aggregate" if plan.method == "repack" else "pairwise"
            except NicollError:         # no subgroup fits a unit's buffer
                want = "pairwise"
            chosen.add(want)
            blocks = [[np.full(length, 10 * i + j, np.float32) for j in range(nodes)]
                      for i in range(nodes)]
            out = cl.alltoallv(blocks)
            assert cl.last_plan.algorithm == want, length
            for i, j in itertools.product(range(nodes), repeat=2):
                np.testing.assert_array_equal(out[j][i], blocks[i][j])
        # Both choices occur, so the test shows the switch.
        assert chosen == {"aggregate", "pairwise"}


def test_aggregate_without_repack_units_is_refused():
    with nicoll.Cluster(nodes=3, backend="model", repack_units=0,
                        **cluster_kwargs("model")) as cl:
        xs = [np.zeros(3, np.int32)] * 3
        with pytest.raises(NicollError, match=r"this build has no repack units"):
            cl.alltoall(xs, "aggregate")
        cl.alltoallv([[np.zeros(1, np.int32)] * 3] * 3)           # auto: pairwise
        assert cl.last_plan.algorithm == "pairwise"


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


# -- barriers in a collective ------------------------------------------------------------------

@pytest.mark.parametrize("backend", _params(each=lambda b, size: [()], sweep=True))
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
@pytest.mark.parametrize("backend, case", _params(
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


@pytest.mark.parametrize("backend", _params(each=lambda b, size: [()]))
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
    # Rank 1 expects fewer bytes than rank 0 sends: it stops with ERRORS.length.
    short = _plan([[Step(send_to=0, send=Region(0, 16), recv_from=0, recv=Region(16, 16)),
                    Step(send_to=1, send=Region(0, 16))],
                   [Step(recv_from=0, recv=Region(0, 8))]], nodes)
    monkeypatch.setattr(sc, "allreduce", lambda *args, **kwargs: short)
    with pytest.raises(NicollError, match=r"allreduce \(recursive_halving\) failed on the engines: "
                                          r"rank 1 stopped at step 0 of 1 with length \(a received "
                                          r"message holds more or fewer bytes than the receiving "
                                          r"region\)$"):
        cl.allreduce(xs)
    monkeypatch.undo()
    outputs = cl.allreduce(xs)          # the next call starts from a cleared engine
    assert all(np.array_equal(y, np.full(4, nodes, np.float32)) for y in outputs)


def test_the_table_names_every_backend():
    assert set(SIZES) == set(nicoll.BACKENDS)
