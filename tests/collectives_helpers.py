"""What the whole-cluster collective tests share: the backends and sizes each runs (SIZES),
their pytest params and xdist groups, the module-scoped ``clusters`` fixture, the input
data, and the checks of outputs and counters against the plan.

Integers are checked exactly against numpy; floats bit for bit against the reduction order
of nicoll.plan.reduction_order for the algorithm, and identical on every rank that gets the
whole vector; data movement against the concatenation / transpose.  Each call's counters
(Cluster.last) are checked against the plan it ran.
"""

import itertools
import os

import ml_dtypes
import numpy as np
import pytest

import nicoll
from nicoll.plan import reduction_order as order
from nicoll import region_bytes
from nicoll import schedule as sc
from nicoll.hw.ops import DType, ReduceOp, op_supported_for
from nicoll.ops import numpy_dtype

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
# one worker and each test module's ``clusters`` fixture opens it once (spread over both
# workers, it was opened on each).
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


def one_case(backend):
    """Whether ``backend`` runs one case of each data loop (see data_cases)."""
    return backend == "amaranth" and not SWEEP_AMARANTH


def data_cases(backend, cases, amaranth):
    """The data cases a test loops over (block sizes and types, shares of empty blocks, a
    second call): all of ``cases`` on the model and on Verilator, the one case ``amaranth`` on
    the Amaranth cluster (all of them with NICOLL_SIM_FULL=1).  There every case takes the
    same path through its transport (memory loads, register writes, status polls); what
    differs between them, the packets and beats the gateware makes of other sizes and what
    the driver makes of other shapes, is checked on Verilator, which runs the same NicCore
    and switch, and on the model."""
    cases = list(cases)
    assert amaranth in cases
    return [amaranth] if one_case(backend) else cases


def backend_params(*names, each=None, sweep=False):
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


#: The element types the all-to-all tests exchange (plain, half-width float, a structure).
ALLTOALL_TYPES = [np.int8, np.float64, ml_dtypes.bfloat16, np.dtype([("a", "<u2"), ("b", "<f4")])]


def check_aggregate_stats(cl):
    """Cluster.last against the exchange's layout: each rank sends its registration and one
    packet per destination subgroup, and hears SEND and TAKEN per destination subgroup,
    DELIVERED per source subgroup, DONE, and each received message in packets of the hub's
    size."""
    plan = cl.last_plan
    assert plan.algorithm == "aggregate"
    width = cl.data_width // 8
    per_packet = cl.repack_device.repack.packet_beats
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


def check_aggregate(cl, backend, nodes):
    rng = np.random.default_rng(nodes)
    # All-to-all with equal blocks (empty ones too), then all-to-all-v with empty blocks.  On
    # the Amaranth cluster the 3-element blocks, the all-to-all-v and no subgroups (see data_cases;
    # the subgroups' order through the hub is the gateware's, on Verilator).
    cases = list(zip((0, 1, 3), ALLTOALL_TYPES))
    for block, dtype in data_cases(backend, cases, cases[-1]):
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
    if one_case(backend):
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


#: The simulated cluster that test_repack_node checks on both simulators and test_remote
#: serves on Verilator: three ranks, the repack node with two units in the switch, and links
#: with a 40-cycle hop each way at 100 MHz (a 400 ns switch).  One configuration, so the two
#: share one Verilator build (a minute or more of a worker).
LINKED_REPACK_NODE_CLUSTER = dict(nodes=3, data_width=64, max_nodes=4, mem_size=4096,
                                  alu_capabilities=[("sum", "int32")],
                                  fabric=nicoll.Fabric(switch_ns=400.0), clock_mhz=100,
                                  repack_node=True, repack_units=2)
