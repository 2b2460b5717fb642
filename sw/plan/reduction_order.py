# Ref: seed 000 (CN101206588), figs. 3 and 8; seed 002 (ICT/CAS), §3 and §4.
"""The order in which each reduction algorithm combines the ranks' inputs.

Every function here computes a result with exactly the combining order the compiled
schedules (:mod:`nicoll.schedule`) produce, using :func:`nicoll.ops.combine` (``a ∘ b``,
the ALU's operation, with ``a`` the left operand).  For integers every order gives the
same numbers; for floats the order decides the bits, and these are the bits the engine
must produce.  Every rank ends with the same bits: results are computed once and copied.

x_r is rank r's input, N the number of ranks.

``recursive_halving`` (seed 000)
    Let p be the largest power of two ≤ N.  First the ranks p..N-1 fold in:
    y_q = x_q ∘ x_{q+p} for q < N - p, y_q = x_q otherwise.  Then iteration i pairs rank q
    with q XOR 2^i, and the part of the lower ranks is always the left operand, so the
    result is the pairwise tree in rank order:
    ((y_0 ∘ y_1) ∘ (y_2 ∘ y_3)) ∘ ((y_4 ∘ y_5) ∘ (y_6 ∘ y_7)) ...  With N a power of two that
    is ((x_0 ∘ x_1) ∘ (x_2 ∘ x_3)) ∘ ...  The same for every element, every collective and
    every root.

``ring``
    The vector is cut into N chunks (``reduce_scatter``'s counts, otherwise
    numpy.array_split).  Chunk c starts at rank c+1 and travels the ring, each rank adding
    its part on the right: chunk c = (((x_{c+1} ∘ x_{c+2}) ∘ ...) ∘ x_{N-1}) ∘ x_0) ∘ ... ∘ x_c
    (indices mod N).  Different chunks have different orders.

``tree`` and ``prt`` (seed 002's logical topologies; prt is the same tree, pipelined)
    A node combines its own input with its children's results in the order it receives
    them, its own data on the left: value(v) = ((x_v ∘ value(c_1)) ∘ value(c_2)) ∘ ...
    The result is value(root).  Children orders (virtual ranks, root = 0):
    ``binary`` 2v+1, 2v+2; ``binomial`` v+1, v+2, v+4, ... below v's lowest set bit;
    ``2-tree`` v+3^t, v+2·3^t for t = 0, 1, ... while 3^(t+1) divides v; ``chain``
    v+1 (so x_0 ∘ (x_1 ∘ (x_2 ∘ ...))).  The root is ``root`` for reduce and 0 for the
    other collectives.

With one rank nothing is combined: the output is the input as it is (a logical op does not
turn it into 0 or 1), as MPI implementations copy it.
"""

import numpy as np

from ..errors import NicollError
from ..ops import combine
from ..schedule import REDUCTION_ALGORITHMS, split_counts, tree_children

__all__ = ["pairwise_tree", "recursive_halving", "ring", "tree", "prt", "reduced", "reference",
           "expected"]


def _inputs(xs):
    if isinstance(xs, np.ndarray) or not hasattr(xs, "__len__") or not len(xs):
        raise NicollError("give a non-empty list of one numpy array per rank")
    xs = [np.asarray(x) for x in xs]
    for r, x in enumerate(xs):
        if x.dtype != xs[0].dtype or x.shape != xs[0].shape:
            raise NicollError(f"input {r} is {x.dtype} {x.shape} but input 0 is "
                              f"{xs[0].dtype} {xs[0].shape}")
    return xs


def pairwise_tree(xs, op="sum"):
    """((x_0 ∘ x_1) ∘ (x_2 ∘ x_3)) ∘ ...: neighbours first, level by level (len(xs) = 2^k)."""
    level = _inputs(xs)
    if len(level) & (len(level) - 1):
        raise NicollError(f"the pairwise tree needs a power-of-two number of inputs, not {len(level)}")
    while len(level) > 1:
        level = [combine(op, level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0].copy()


def recursive_halving(xs, op="sum"):
    """Seed 000's order: fold ranks p..N-1 into 0..N-p-1, then the pairwise tree."""
    xs = _inputs(xs)
    p = 1 << (len(xs).bit_length() - 1)
    folded = [combine(op, xs[q], xs[q + p]) if q + p < len(xs) else xs[q] for q in range(p)]
    return pairwise_tree(folded, op)


def ring(xs, op="sum", counts=None):
    """The ring order: chunk c is folded left to right from rank c+1 round to rank c."""
    xs = _inputs(xs)
    nodes = len(xs)
    flat = [x.reshape(-1) for x in xs]
    counts = split_counts(flat[0].size, nodes) if counts is None else list(counts)
    if len(counts) != nodes or sum(counts) != flat[0].size:
        raise NicollError(f"counts {counts!r} do not cut {flat[0].size} elements into {nodes} chunks")
    out = np.empty_like(flat[0])
    at = 0
    for c, size in enumerate(counts):
        part = slice(at, at + size)
        acc = flat[(c + 1) % nodes][part]
        for k in range(2, nodes + 1):
            acc = combine(op, acc, flat[(c + k) % nodes][part])
        out[part] = acc
        at += size
    return out.reshape(xs[0].shape)


def tree(xs, op="sum", shape="binary", root=None):
    """Seed 002's order over a tree: each node is (own ∘ child_1) ∘ child_2 ∘ ..."""
    xs = _inputs(xs)
    children, _, root = tree_children(len(xs), shape, root)
    value = {}
    pending = [(root, False)]
    while pending:
        node, expanded = pending.pop()
        if not expanded:
            pending.append((node, True))
            pending.extend((child, False) for child in children[node])
            continue
        acc = xs[node]
        for child in children[node]:
            acc = combine(op, acc, value.pop(child))
        value[node] = acc
    return value[root].copy()


def prt(xs, op="sum", shape="binary", root=None):
    """The pipelined tree combines in the tree's order: every slice takes the same path."""
    return tree(xs, op, shape, root)


def reduced(xs, op="sum", algorithm="recursive_halving", *, collective="allreduce", root=0,
            counts=None, shape="binary"):
    """The whole reduced vector as ``algorithm`` computes it for ``collective``."""
    if algorithm not in REDUCTION_ALGORITHMS:
        raise NicollError(f"unknown algorithm {algorithm!r}; algorithms are "
                          f"{', '.join(REDUCTION_ALGORITHMS)}")
    if algorithm == "recursive_halving":
        return recursive_halving(xs, op)
    if algorithm == "ring":
        return ring(xs, op, counts if collective == "reduce_scatter" else None)
    return tree(xs, op, shape, root if collective == "reduce" else None)


def reference(collective, xs, op="sum", algorithm="recursive_halving", *, root=0, counts=None,
              shape="binary"):
    """Each rank's output of ``collective``, combined in ``algorithm``'s order."""
    if collective in ("allgather", "alltoall", "alltoallv"):
        return _movement(collective, xs)
    xs = _inputs(xs)
    value = reduced(xs, op, algorithm, collective=collective, root=root, counts=counts,
                    shape=shape)
    nodes = len(xs)
    if collective == "allreduce":
        return [value.copy() for _ in range(nodes)]
    if collective == "reduce":
        return [value.copy() if r == root else None for r in range(nodes)]
    if collective == "reduce_scatter":
        flat = value.reshape(-1)
        counts = split_counts(flat.size, nodes) if counts is None else list(counts)
        bounds = np.cumsum([0] + counts)
        return [flat[bounds[r]:bounds[r + 1]].copy() for r in range(nodes)]
    raise NicollError(f"unknown collective {collective!r}")


def _movement(collective, xs):
    nodes = len(xs)
    if collective == "allgather":
        whole = np.concatenate([np.asarray(x).reshape(-1) for x in xs])
        return [whole.copy() for _ in range(nodes)]
    if collective == "alltoall":
        blocks = [np.split(np.asarray(x), nodes) for x in xs]
        return [np.concatenate([blocks[i][j] for i in range(nodes)]) for j in range(nodes)]
    return [[xs[i][j] for i in range(nodes)] for j in range(nodes)]


def expected(plan, xs):
    """Each rank's output of a compiled :class:`~nicoll.schedule.Plan` run on ``xs``."""
    if plan.collective in ("allgather", "alltoall", "alltoallv"):
        return _movement(plan.collective, xs)
    options = dict(plan.options)
    return reference(plan.collective, xs, plan.op, plan.algorithm, root=options.get("root", 0),
                     counts=options.get("counts"), shape=options.get("shape", "binary"))
