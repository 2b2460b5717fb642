# Ref: seed 002 (ICT/CAS): many-to-one reduction over a general logical topology.
"""Trees (seed 002): the tree shapes (:func:`tree_children`) and the compilers of the
reductions over a tree, ``"tree"`` and the pipelined tree ``"prt"``.
"""

from nicoll.hw.engine import StepAction

from ..errors import NicollError
from .arguments import _nodes, _root, split_counts
from .builder import _place
from .step_format import _integer

__all__ = ["TREE_SHAPES", "DEFAULT_PRT_SLICES", "tree_children"]

#: Tree shapes of ``"tree"`` and ``"prt"``; a parent list is accepted too.
TREE_SHAPES = ("binary", "binomial", "2-tree", "chain")
#: Slices of the pipelined tree.
DEFAULT_PRT_SLICES = 4


def _virtual_children(shape, v, nodes):
    """Children of virtual rank v (the root is 0) in the order v receives from them."""
    if shape == "binary":
        return [c for c in (2 * v + 1, 2 * v + 2) if c < nodes]
    if shape == "chain":
        # Ref: seed 002, §4.1: the 1-ring, every process receives from the next one.
        return [v + 1] if v + 1 < nodes else []
    if shape == "binomial":
        low = v & -v if v else 1 << max(nodes - 1, 1).bit_length()
        return [v + (1 << k) for k in range(low.bit_length() - 1) if v + (1 << k) < nodes]
    # Ref: seed 002, §4.2: the 2-tree.  v = 3^k * j with 3 not dividing j: at time step
    # t < k, v receives from v + 3^t and v + 2 * 3^t (the root, v = 0, at every t);
    # v's successor is v - 3^k * (j mod 3).
    children, power = [], 1
    while power < nodes and (v == 0 or v % (3 * power) == 0):
        children.extend(c for c in (v + power, v + 2 * power) if c < nodes)
        power *= 3
    return children


def tree_children(nodes, shape="binary", root=None):
    """Each rank's children in receive order, its parent, and the root.

    ``shape`` is one of :data:`TREE_SHAPES`, built on virtual ranks ``(r - root) mod
    nodes`` so any rank may be the root (default 0), or a parent list (``parents[r]``,
    ``None`` for the root; children then in ascending order), whose root must be ``root``
    when one is given.  Returns ``(children, parent, root)`` over real ranks.
    """
    nodes = _nodes(nodes)
    if isinstance(shape, str):
        if shape not in TREE_SHAPES:
            raise NicollError(f"unknown tree shape {shape!r}; shapes are {', '.join(TREE_SHAPES)} "
                              f"or a list of parents")
        root = 0 if root is None else _root(root, nodes)
        children = [[] for _ in range(nodes)]
        parent = [None] * nodes
        for v in range(nodes):
            for c in _virtual_children(shape, v, nodes):
                children[(v + root) % nodes].append((c + root) % nodes)
                parent[(c + root) % nodes] = (v + root) % nodes
        return children, parent, root
    from nicoll.hw.tree import BarrierTree   # the same checks as barrier trees: one root, no cycle
    if isinstance(shape, (bytes, dict)) or not hasattr(shape, "__len__"):
        raise NicollError(f"a tree shape is a name ({', '.join(TREE_SHAPES)}) or a list of "
                          f"parents, not {shape!r}")
    if len(shape) != nodes:
        raise NicollError(f"a parent list for {nodes} ranks needs {nodes} entries, not {len(shape)}")
    tree = BarrierTree(list(shape))
    if root is not None and tree.root != root:
        raise NicollError(f"the parent list is rooted at rank {tree.root}, not at root {root!r}")
    return [tree.children(r) for r in range(nodes)], [tree.parent(r) for r in range(nodes)], tree.root


def _shape(shape):
    if shape is None:
        return "binary"
    if isinstance(shape, str):
        return shape
    if isinstance(shape, (bytes, dict)) or not hasattr(shape, "__len__"):
        raise NicollError(f"a tree shape is a name ({', '.join(TREE_SHAPES)}) or a list of "
                          f"parents, not {shape!r}")
    return tuple(shape)


def _preorder(children, root):
    order, pending = [], [root]
    while pending:
        node = pending.pop()
        order.append(node)
        pending.extend(reversed(children[node]))
    return order


# -- the compilers ----------------------------------------------------------------------------

def _compile_tree(b, collective, nodes, count, chunks, chunk_at, root, segments, options, *,
                  shape=None):
    children, parent, tree_root = _tree(collective, nodes, root, shape, options)
    _tree_steps(b, collective, nodes, count, chunks, chunk_at, children, parent, tree_root, None,
                segments)


def _compile_prt(b, collective, nodes, count, chunks, chunk_at, root, segments, options, *,
                 shape=None, slices=None):
    children, parent, tree_root = _tree(collective, nodes, root, shape, options)
    slices = _integer("slices", DEFAULT_PRT_SLICES if slices is None else slices, 1)
    options.append(("slices", slices))
    _tree_steps(b, collective, nodes, count, chunks, chunk_at, children, parent, tree_root, slices,
                segments)


def _tree(collective, nodes, root, shape, options):
    """The tree a collective runs on, ``(children, parent, root)``; notes its shape in ``options``.

    Only ``reduce`` roots it at its root; the others at rank 0 or the parent list's root.
    """
    shape = _shape(shape)
    tree = tree_children(nodes, shape, root if collective == "reduce" else None)
    options.append(("shape", shape))
    return tree


def _subtree_spans(children, chunk_at, chunks, order):
    """Element range of every rank's subtree in a preorder layout."""
    span = {}
    for node in reversed(order):
        lo = chunk_at[node]
        hi = lo + chunks[node]
        for child in children[node]:
            hi = max(hi, span[child][1])
        span[node] = (lo, hi)
    return span


def _tree_steps(b, collective, nodes, count, chunks, chunk_at, children, parent, root, slices,
                segments):
    """The steps of a collective on a tree; ``slices`` pipelines them (prt), ``None`` does not."""
    whole = b.region(0, count)
    if collective in ("reduce_scatter", "allgather"):
        # Chunks in preorder of the tree, so every subtree's chunks are one range.
        order = _preorder(children, root)
        _place(chunk_at, chunks, order)
        spans = _subtree_spans(children, chunk_at, chunks, order)

        def subtree(node):
            lo, hi = spans[node]
            return b.region(lo, hi - lo)
    if collective == "allgather":
        _tree_gather(b, nodes, children, parent, subtree, segments)
    elif slices is None:
        _tree_reduce(b, nodes, children, parent, whole, segments)
    else:
        _prt_reduce(b, nodes, children, parent, count, slices)
    if collective == "reduce_scatter":
        _tree_scatter(b, nodes, children, parent, subtree, segments)
    elif collective in ("allreduce", "allgather"):
        if slices is None:
            _tree_broadcast(b, nodes, children, parent, whole, segments)
        else:
            _prt_broadcast(b, nodes, children, parent, count, slices)


def _tree_reduce(b, nodes, children, parent, whole, segments):
    # Ref: seed 002, §3: receive from every predecessor in time-step order, combine, then
    # send to the successor.
    up = {v: b.transfer(v, parent[v], whole, action=StepAction.REDUCE_LOCAL_FIRST)
          for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        for child in children[v]:
            b.step(v, inc=up[child], segments=segments)
        if parent[v] is not None:
            b.step(v, out=up[v], segments=segments)


def _tree_broadcast(b, nodes, children, parent, whole, segments):
    down = {v: b.transfer(parent[v], v, whole) for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        if parent[v] is not None:
            b.step(v, inc=down[v], segments=segments)
        for child in children[v]:
            b.step(v, out=down[child], segments=segments)


def _tree_gather(b, nodes, children, parent, subtree, segments):
    up = {v: b.transfer(v, parent[v], subtree(v)) for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        for child in children[v]:
            b.step(v, inc=up[child], segments=segments)
        if parent[v] is not None:
            b.step(v, out=up[v], segments=segments)


def _tree_scatter(b, nodes, children, parent, subtree, segments):
    down = {v: b.transfer(parent[v], v, subtree(v)) for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        if parent[v] is not None:
            b.step(v, inc=down[v], segments=segments)
        for child in children[v]:
            b.step(v, out=down[child], segments=segments)


def _slice_regions(b, count, slices):
    regions, at = [], 0
    for size in split_counts(count, slices):
        if size:
            regions.append(b.region(at, size))
        at += size
    return regions


def _prt_reduce(b, nodes, children, parent, count, slices):
    # Ref: seed 000, background: the pipelined RDMA tree.  A node reduces slice i from its
    # children while receiving slice i+1, and sends slice i to its parent while reducing
    # slice i+1.  Here the send of slice i-1 rides on the step that receives slice i from
    # the last child.
    parts = _slice_regions(b, count, slices)
    up = {v: [b.transfer(v, parent[v], part, action=StepAction.REDUCE_LOCAL_FIRST) for part in parts]
          for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        kids, has_parent = children[v], parent[v] is not None
        if not kids:
            if has_parent:
                for i in range(len(parts)):
                    b.step(v, out=up[v][i])
            continue
        for i in range(len(parts)):
            for slot, child in enumerate(kids):
                forward = (up[v][i - 1] if has_parent and i and slot == len(kids) - 1 else None)
                b.step(v, out=forward, inc=up[child][i])
        if has_parent and parts:
            b.step(v, out=up[v][-1])


def _prt_broadcast(b, nodes, children, parent, count, slices):
    parts = _slice_regions(b, count, slices)
    down = {v: [b.transfer(parent[v], v, part) for part in parts]
            for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        kids = children[v]
        if parent[v] is None:
            for i in range(len(parts)):
                for child in kids:
                    b.step(v, out=down[child][i])
            continue
        for i in range(len(parts)):
            # Receive slice i while passing slice i-1 on to the first child.
            b.step(v, inc=down[v][i], out=down[kids[0]][i - 1] if kids and i else None)
            if i:
                for child in kids[1:]:
                    b.step(v, out=down[child][i - 1])
        if parts:
            for child in kids:
                b.step(v, out=down[child][-1])

