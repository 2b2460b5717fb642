# Ref: seed 004 (US11487593 family), fig. 2: the nodes form a tree; each node keeps the
#      completion bits of itself and of every node below it, and forwards notices upward.
"""Barrier trees: which node reports to which, checked before anything is programmed.

A tree over ranks ``0 .. n-1`` is given by each rank's parent (``None`` for the root).
:class:`BarrierTree` checks it (one root, parents in range, no cycle) and derives what each
node's barrier unit is programmed with: its parent, its children (in slot order) and, for
every rank below it, the child slot whose subtree holds that rank.

Shapes: :meth:`BarrierTree.binary` (the default: rank r's parent is (r − 1) // 2),
:meth:`BarrierTree.kary`, :meth:`BarrierTree.chain`, or any parent list;
:meth:`BarrierTree.from_children` takes a children table and also refuses a rank listed
twice or never.
"""

from .errors import NicollError

__all__ = ["BarrierTree"]


class BarrierTree:
    """A rooted tree over ranks ``0 .. len(parents) - 1``.

    :param parents: ``parents[r]`` is rank r's parent, ``None`` for the root.
    :raises NicollError: not exactly one root, a parent out of range or equal to the node,
        or a cycle (some rank does not reach the root).
    """

    def __init__(self, parents):
        parents = list(parents)
        n = len(parents)
        if n < 1:
            raise NicollError("a barrier tree needs at least one node")
        for rank, parent in enumerate(parents):
            if parent is None:
                continue
            if not isinstance(parent, int) or isinstance(parent, bool):
                raise NicollError(f"parent of rank {rank} must be a rank or None, not {parent!r}")
            if not 0 <= parent < n:
                raise NicollError(f"parent of rank {rank} is {parent}, outside ranks 0..{n - 1}")
            if parent == rank:
                raise NicollError(f"rank {rank} is its own parent")
        roots = [r for r, p in enumerate(parents) if p is None]
        if len(roots) != 1:
            raise NicollError(f"a barrier tree has exactly one root (parent None); "
                              f"found {len(roots)}: {roots}")
        self._parents = parents
        self._root = roots[0]
        self._children = [[] for _ in range(n)]
        for rank, parent in enumerate(parents):
            if parent is not None:
                self._children[parent].append(rank)
        depth = [None] * n
        depth[self._root] = 0
        pending = [self._root]
        while pending:
            node = pending.pop()
            for child in self._children[node]:
                depth[child] = depth[node] + 1
                pending.append(child)
        unreached = [r for r in range(n) if depth[r] is None]
        if unreached:
            raise NicollError(f"ranks {unreached} do not reach the root {self._root}: "
                              f"their parents form a cycle")
        self._depth = depth

    # -- shapes -----------------------------------------------------------------------------

    @classmethod
    def kary(cls, n, k):
        """Rank r's parent is (r − 1) // k: a complete k-ary tree rooted at rank 0."""
        _check_count(n)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise NicollError(f"a k-ary tree needs k ≥ 1, not {k!r}")
        return cls([None] + [(r - 1) // k for r in range(1, n)])

    @classmethod
    def binary(cls, n):
        return cls.kary(n, 2)

    @classmethod
    def chain(cls, n):
        """Rank r reports to rank r − 1: the deepest tree."""
        return cls.kary(n, 1)

    @classmethod
    def from_children(cls, children, n=None):
        """A tree from ``{node: [children]}``; ranks not named anywhere are refused (orphans)
        unless the tree has a single node."""
        named = set(children)
        parents = {}
        for node, kids in children.items():
            for kid in kids:
                if kid in parents:
                    raise NicollError(f"rank {kid} is listed as a child of both "
                                      f"{parents[kid]} and {node}")
                parents[kid] = node
                named.add(kid)
        if n is None:
            n = max(named) + 1 if named else 1
        bad = [r for r in named if not isinstance(r, int) or not 0 <= r < n]
        if bad:
            raise NicollError(f"ranks {bad} are outside 0..{n - 1}")
        orphans = [r for r in range(n) if r not in named]
        if orphans and n > 1:
            raise NicollError(f"ranks {orphans} are in no parent's children and have none: "
                              f"orphans")
        return cls([parents.get(r) for r in range(n)])

    # -- what each node is programmed with ------------------------------------------------------

    def __len__(self):
        return len(self._parents)

    @property
    def root(self):
        return self._root

    def parent(self, rank):
        return self._parents[rank]

    def children(self, rank):
        """Rank's children in slot order (ascending rank)."""
        return list(self._children[rank])

    def subtree(self, rank):
        """Every rank at or below ``rank``, ascending."""
        out, pending = [], [rank]
        while pending:
            node = pending.pop()
            out.append(node)
            pending.extend(self._children[node])
        return sorted(out)

    def route(self, rank):
        """``{descendant: child slot}`` for every rank strictly below ``rank``."""
        table = {}
        for slot, child in enumerate(self._children[rank]):
            for node in self.subtree(child):
                table[node] = slot
        return table

    def depth(self, rank=None):
        """Hops from ``rank`` up to the root; without a rank, the tree's height."""
        return max(self._depth) if rank is None else self._depth[rank]

    @property
    def max_children(self):
        return max(len(c) for c in self._children)

    def __repr__(self):
        return f"BarrierTree({self._parents!r})"


def _check_count(n):
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise NicollError(f"a barrier tree needs a positive number of nodes, not {n!r}")
