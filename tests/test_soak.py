"""Soak (issue 22): long runs of random collectives, each checked bit for bit against the
reference.

A case is drawn from its own seed (``NICOLL_SOAK_SEED``, the backend and its index), so a
failing one is named by its index and replays alone (:func:`soak_case`).  It picks a
collective (the reductions, allgather, alltoall, alltoallv, a barrier), an algorithm
(``"auto"`` included), an (op, dtype) pair the build computes, a size (0, 1, odd, around N,
up to thousands of elements), a shape, roots, uneven reduce_scatter counts, uneven
alltoallv blocks and the schedule options.  Every output is checked against
:mod:`nicoll.plan.reduction_order` (the combining order of the algorithm asked for; "auto"
of a reduction is recursive halving, as documented), integers also against numpy, data
movement against the concatenation or transpose, and each call's counters against the plan
it ran.

Counts: ``NICOLL_SOAK_MODEL`` cases on the model (default :data:`DEFAULT_MODEL`, split over
:data:`MODEL_PARTS` tests so that xdist spreads them), ``NICOLL_SOAK_VERILATOR`` on the
suite's 5-node Verilator cluster (default :data:`DEFAULT_VERILATOR`, in its xdist group).
``make soak`` runs the issue's counts, 10 000 and 500.

The Verilator cluster has no random backpressure to turn on: its simulated links
(:class:`nicoll.hw.sim.fabric.FabricLink`) give a fixed latency and gap per packet, fixed at
build time, and the harness's host ports never stall.  The Verilator part runs the suite's
build as it is.
"""

import os
import itertools
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import pytest

from nicoll import NicollError
from nicoll import schedule as sc
from nicoll.plan import reduction_order as order

from collectives_helpers import SIZES, PAIRS, in_build, data, check_outputs, check_stats


def _count(name, default):
    value = os.environ.get(name, str(default))
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise pytest.UsageError(f"{name} must be a non-negative number of cases, not {value!r}")
    return count


#: Cases per run by default: small enough that the model's part takes seconds in `make test`.
DEFAULT_MODEL = 200
DEFAULT_VERILATOR = 6
SOAK_MODEL = _count("NICOLL_SOAK_MODEL", DEFAULT_MODEL)
SOAK_VERILATOR = _count("NICOLL_SOAK_VERILATOR", DEFAULT_VERILATOR)
SEED = _count("NICOLL_SOAK_SEED", 22)
#: The model's cases run as this many tests, each its share of the indices.
MODEL_PARTS = 4

COLLECTIVES = ("allreduce", "reduce", "reduce_scatter", "allgather", "alltoall", "alltoallv",
               "barrier")
#: How often each collective is drawn (reductions most: they have the most to get wrong).
WEIGHTS = (5, 3, 3, 2, 3, 2, 1)
#: The element types the data-movement collectives draw from, besides the reductions' types.
MOVEMENT_TYPES = (np.dtype([("a", "<u2"), ("b", "<f4")]), np.dtype("V3"), np.dtype(np.complex64),
                  np.dtype(ml_dtypes.bfloat16))
#: What each backend draws from: cluster sizes and the largest element count (the Verilator
#: build has 64 KiB of device memory a node, and a collective there takes a second or more).
BACKEND = {
    "model": dict(nodes=list(range(1, 10)) + [12, 16], most=20_000),
    "verilator": dict(nodes=SIZES["verilator"]["nodes"], most=400),
}


@dataclass
class Case:
    """One random call: what :func:`run_case` posts and checks."""
    index: int
    nodes: int
    collective: str
    algorithm: str = "auto"
    op: str | None = None
    dtype: object = None
    shape: tuple = ()
    options: dict = field(default_factory=dict)
    xs: list = field(default_factory=list, repr=False)

    def describe(self):
        dtype = None if self.dtype is None else np.dtype(self.dtype).name
        return (f"case {self.index}: {self.collective} ({self.algorithm}) on {self.nodes} "
                f"nodes, op {self.op}, {dtype} {self.shape}, options {self.options}")


def _size(rng, nodes, most):
    """An element count: the edges (0, 1, N-1, N+1), small odd ones, and now and then large."""
    kind = rng.integers(0, 10)
    if kind == 0:
        return int(rng.choice([0, 1, 2, 3]))
    if kind == 1:
        return int(max(0, nodes + rng.integers(-1, 2)))
    if kind <= 6:
        return int(rng.integers(0, 64)) | 1
    if kind <= 8:
        return int(rng.integers(0, min(most, 1000) + 1))
    return int(rng.integers(0, most + 1))


def _shape(rng, count):
    """``count`` elements as 1-D mostly, else (rows, count // rows) when it divides."""
    if count and rng.random() < 0.25:
        rows = [r for r in (2, 3, 4, 5, 7) if count % r == 0]
        if rows:
            r = int(rng.choice(rows))
            return (r, count // r)
    return (count,)


def _reduction_options(rng, algorithm, collective):
    options = {}
    if rng.random() < 0.4:
        options["segments"] = int(rng.integers(1, 5))
    if algorithm in ("tree", "prt") and rng.random() < 0.6:
        options["shape"] = str(rng.choice(sc.TREE_SHAPES))
    slices_apply = (algorithm == "prt"
                    or (algorithm == "recursive_halving" and collective != "allgather"))
    if slices_apply and rng.random() < 0.3:
        options["slices"] = int(rng.integers(1, 4))
    return options


def soak_case(backend, index, pairs, table=None):
    """Case ``index`` of ``backend``'s soak; ``pairs``: the (op, dtype) pairs of its build;
    ``table``: what to draw from (cluster sizes, largest count), else ``BACKEND[backend]``."""
    rng = np.random.default_rng([SEED, len(backend), index])
    table = BACKEND[backend] if table is None else table
    nodes = int(rng.choice(table["nodes"]))
    collective = str(rng.choice(COLLECTIVES, p=np.array(WEIGHTS) / sum(WEIGHTS)))
    case = Case(index=index, nodes=nodes, collective=collective)
    most = table["most"]
    if collective == "barrier":
        case.options["arrive"] = (None if rng.random() < 0.3 else
                                  [int(t) for t in rng.integers(0, 300, nodes)])
        return case
    if collective in ("allreduce", "reduce", "reduce_scatter"):
        case.algorithm = str(rng.choice(sc.REDUCTION_ALGORITHMS + ("auto",)))
        case.op, case.dtype = pairs[rng.integers(len(pairs))]
        count = _size(rng, nodes, most)
        case.shape = _shape(rng, count)
        resolved = "recursive_halving" if case.algorithm == "auto" else case.algorithm
        case.options = _reduction_options(rng, resolved, collective)
        if collective == "reduce":
            case.options["root"] = int(rng.integers(nodes))
        if collective == "reduce_scatter" and rng.random() < 0.6:
            # Uneven counts with zeros, adding up to the size.
            cuts = np.sort(rng.integers(0, count + 1, nodes - 1))
            case.options["counts"] = [int(c) for c in np.diff(np.concatenate([[0], cuts, [count]]))]
        case.xs = data(rng, case.dtype, count, nodes, case.op)
        case.xs = [x.reshape(case.shape) for x in case.xs]
        return case
    types = sorted({d for _, d in pairs}, key=str) + list(MOVEMENT_TYPES)
    case.dtype = types[rng.integers(len(types))]
    if collective == "allgather":
        case.algorithm = str(rng.choice(sc.REDUCTION_ALGORITHMS + ("auto",)))
        resolved = "recursive_halving" if case.algorithm == "auto" else case.algorithm
        case.options = _reduction_options(rng, resolved, collective)
        count = _size(rng, nodes, most // nodes)
        case.shape = _shape(rng, count)
        case.xs = [_raw(rng, case.dtype, count).reshape(case.shape) for _ in range(nodes)]
    elif collective == "alltoall":
        case.algorithm = str(rng.choice(sc.ALLTOALL_ALGORITHMS + ("aggregate", "auto")))
        block = _size(rng, nodes, most // nodes // nodes) if rng.random() < 0.9 else 0
        if case.algorithm == "aggregate":
            # A repack unit holds 2 KiB (the fuzz build's and the suite's): a larger block is
            # refused by design ("no subgroup size fits a unit buffer").
            block = min(block, 1024 // np.dtype(case.dtype).itemsize)
        if case.algorithm == "inplace":
            case.options["scratch_blocks"] = int(rng.integers(1, nodes + 1))
        if case.algorithm not in ("aggregate",) and rng.random() < 0.3:
            case.options["segments"] = int(rng.integers(1, 4))
        case.shape = _shape(rng, nodes * block)
        case.xs = [_raw(rng, case.dtype, nodes * block).reshape(case.shape) for _ in range(nodes)]
    else:
        case.algorithm = str(rng.choice(["pairwise", "aggregate", "auto"]))
        if case.algorithm == "pairwise" and rng.random() < 0.3:
            case.options["segments"] = int(rng.integers(1, 4))
        empty = rng.random()
        longest = max(1, min(64, most // nodes // nodes))
        sizes = rng.integers(0, longest + 1, (nodes, nodes)) * (rng.random((nodes, nodes)) >= empty)
        case.shape = tuple(map(tuple, sizes.tolist()))
        case.xs = [[_raw(rng, case.dtype, int(n)) for n in row] for row in sizes]
    return case


def _raw(rng, dtype, count):
    """``count`` elements of ``dtype`` made of random bytes (any bit pattern: the collectives
    that move data must not look at it)."""
    dtype = np.dtype(dtype)
    return rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8).view(dtype)


def run_case(cl, case, backend):
    """Post ``case`` on ``cl`` and check what comes back; a failure names the case."""
    try:
        _run_and_check(cl, case, backend)
    except (AssertionError, NicollError) as exc:
        raise AssertionError(f"{backend} {case.describe()} (NICOLL_SOAK_SEED={SEED}): "
                             f"{type(exc).__name__}: {exc}") from exc


def _run_and_check(cl, case, backend, counters=True):
    """Post ``case`` and check its outputs, and its counters against the plan when
    ``counters`` is True or, called with the cluster after the call, returns True."""
    collective, algorithm, xs = case.collective, case.algorithm, case.xs
    options = dict(case.options)
    if collective == "barrier":
        # The barrier the nodes are in (collectives with barrier steps move it on too).
        before = None if cl.barrier_tree is None else cl.device(0).barrier.status().seq
        result = cl.barrier(**options)
        assert result.aborted == frozenset(), "a normal barrier aborted ranks"
        if before is not None:
            assert result.seq == before, f"barrier number {result.seq}, expected {before}"
        after = [dev.barrier.status().seq for dev in cl.devices]
        assert after == [(result.seq + 1) & 0xFFFF] * case.nodes, after
        return
    if collective in ("allreduce", "reduce", "reduce_scatter", "allgather"):
        resolved = "recursive_halving" if algorithm == "auto" else algorithm
        if collective == "allgather":
            outputs = cl.allgather(xs, algorithm, **options)
        else:
            outputs = getattr(cl, collective)(xs, case.op, algorithm=algorithm, **options)
        assert cl.last_plan.algorithm == resolved
        if collective == "allgather":
            shape = case.shape
            want_shape = (case.nodes * shape[0],) + shape[1:]
            for r, got in enumerate(outputs):
                assert got.shape == want_shape, f"rank {r}: shape {got.shape}"
            check_outputs(collective, [x.reshape(-1) for x in xs], None, resolved,
                          [y.reshape(-1) for y in outputs])
        else:
            checked = {k: v for k, v in options.items() if k in ("root", "counts", "shape")}
            if collective == "reduce_scatter":
                xs = [x.reshape(-1) for x in xs]        # it takes the arrays flat
            check_outputs(collective, xs, case.op, resolved, outputs, **checked)
        if counters is True or (callable(counters) and counters(cl)):
            check_stats(cl, cl.last_plan)
        return
    if collective == "alltoall":
        outputs = cl.alltoall(xs, algorithm, **options)
        if algorithm not in ("auto", "aggregate"):
            assert cl.last_plan.algorithm == algorithm
        want = order.reference("alltoall", [x.reshape(-1) for x in xs])
        for r, (got, ref) in enumerate(zip(outputs, want)):
            assert got.dtype == ref.dtype and got.shape == case.shape, f"rank {r}"
            assert got.tobytes() == ref.tobytes(), f"rank {r}: bytes differ"
    else:
        outputs = cl.alltoallv(xs, algorithm, **options)
        if algorithm != "auto":
            assert cl.last_plan.algorithm == algorithm
        want = order.reference("alltoallv", xs)
        for j, i in itertools.product(range(case.nodes), repeat=2):
            got, ref = outputs[j][i], want[j][i]
            assert got.dtype == ref.dtype and got.shape == ref.shape, (i, j)
            assert got.tobytes() == ref.tobytes(), f"block {i} -> {j}: bytes differ"
    if cl.last_plan.algorithm != "aggregate" and (
            counters is True or (callable(counters) and counters(cl))):
        check_stats(cl, cl.last_plan)


def _pairs(backend):
    return [(op, dtype) for op, dtype in PAIRS if in_build(backend, op, dtype)]


def test_the_generator_covers_the_space():
    """The draws reach every collective, algorithm, type and edge size within the default
    count, so the soak at its smallest still exercises them."""
    pairs = _pairs("model")
    cases = [soak_case("model", i, pairs) for i in range(DEFAULT_MODEL)]
    seen = {(c.collective, c.algorithm) for c in cases}
    for collective in ("allreduce", "reduce", "reduce_scatter", "allgather"):
        for algorithm in sc.REDUCTION_ALGORITHMS + ("auto",):
            assert (collective, algorithm) in seen, (collective, algorithm)
    for algorithm in sc.ALLTOALL_ALGORITHMS + ("aggregate", "auto"):
        assert ("alltoall", algorithm) in seen, algorithm
    for algorithm in ("pairwise", "aggregate", "auto"):
        assert ("alltoallv", algorithm) in seen, algorithm
    assert {c.nodes for c in cases} == set(BACKEND["model"]["nodes"])
    sizes = {int(np.prod(c.shape)) for c in cases if c.collective in ("allreduce", "reduce")}
    assert {0, 1} <= sizes and any(s % 2 for s in sizes) and max(sizes) > 1000
    assert any(len(c.shape) == 2 for c in cases)
    assert any("counts" in c.options and 0 in c.options["counts"] for c in cases)
    assert {c.op for c in cases if c.op} == {op for op, _ in pairs}
    # The same index gives the same case: a failing one replays alone.
    again = soak_case("model", 17, pairs)
    assert again.describe() == cases[17].describe()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(again.xs, cases[17].xs))


@pytest.mark.parametrize("part", range(MODEL_PARTS))
def test_soak_model(clusters, part):
    pairs = _pairs("model")
    for index in range(part, SOAK_MODEL, MODEL_PARTS):
        case = soak_case("model", index, pairs)
        run_case(clusters("model", case.nodes), case, "model")


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator")
def test_soak_verilator(clusters):
    pairs = _pairs("verilator")
    for index in range(SOAK_VERILATOR):
        case = soak_case("verilator", index, pairs)
        run_case(clusters("verilator", case.nodes), case, "verilator")
