# Ref: seed 004 (Fujitsu, US11487593 family): root decision by mode (fig. 10), forced abort
#      toward unfinished subtrees (fig. 11), stamps SR / MR' / ER (fig. 12).
"""The golden model of the barrier bench (:mod:`nicoll.sim.benches.barrier`): the decision a
tree of units must take (:class:`TreeGolden`, :class:`Decision`), the trees the bench programs
(:func:`parse_tree`, :func:`format_tree`) and the records of one barrier run (:class:`Plan`:
who finishes when; :class:`Outcome`: what the units show after it)."""

from dataclasses import dataclass, field

from nicoll.hw.barrier import AcSubMode, BarrierMode
from nicoll.hw.tree import BarrierTree

__all__ = ["NORMAL", "AC", "COLLECT", "COUNT", "TIME", "BOTH", "TreeGolden", "Decision", "Plan",
           "Outcome", "parse_tree", "format_tree"]

NORMAL, AC, COLLECT = BarrierMode.NORMAL.value, BarrierMode.AC.value, BarrierMode.COLLECT.value
COUNT, TIME, BOTH = AcSubMode.COUNT.value, AcSubMode.TIME.value, AcSubMode.BOTH.value


def format_tree(shape, n, k=None):
    """``binary:8``, ``kary3:13`` or ``chain:15``."""
    return f"kary{k}:{n}" if shape == "kary" else f"{shape}:{n}"


def parse_tree(text):
    """The :class:`BarrierTree` a ``format_tree`` string names."""
    shape, _, count = text.partition(":")
    n = int(count)
    if shape == "binary":
        return BarrierTree.binary(n)
    if shape == "chain":
        return BarrierTree.chain(n)
    if shape.startswith("kary"):
        return BarrierTree.kary(n, int(shape[4:]))
    raise ValueError(f"tree must be binary:N, karyK:N or chain:N, not {text!r}")


# ---- Golden model -----------------------------------------------------------------------------

@dataclass
class Decision:
    """What the root must do in one barrier, as bounds ``(low, high)`` of cycles."""
    release: tuple                  # the root's release cycle
    s: tuple                        # stamp s (first completion counted at the root)
    mt: tuple                       # stamp mt, or None when ones never reach m
    e: tuple                        # stamp e, or None when not every node completes
    early: bool                     # an AC release before every node completed
    params_ok: bool                 # False: m, c or the mode are bad; the normal rule applies


class TreeGolden:
    """The decision a tree of units must take, from the cycles the nodes finish.

    A completion signalled in cycle t by a node at depth d is counted at the root in cycle
    t + act + d · hop at the earliest (act = 1: a unit acts on a done strobe the cycle after
    it comes; hop = L + 4: the unit registers a notice at its boundary, decodes it, acts on
    it and forwards it 4 cycles after it took it, the link adds L); other notices of the
    same barrier can hold it up by at most :meth:`slack` cycles when the links do not pause.
    The root decides in the cycle after a count, or in the cycle now = s + c.
    """

    def __init__(self, tree, latency):
        self.tree = tree
        self.n = len(tree)
        self.root = tree.root
        self.act = 1
        self.hop = latency + 4
        self.depth = [tree.depth(r) for r in range(self.n)]
        self.height = tree.depth()
        self.parent = [tree.parent(r) for r in range(self.n)]
        self.children = [tree.children(r) for r in range(self.n)]
        self.subtree = [frozenset(tree.subtree(r)) for r in range(self.n)]

    def earliest_count(self, node, t):
        return t + self.act + self.depth[node] * self.hop

    def slack(self):
        """Most cycles a completion can be held up by the other notices of its barrier
        without random pauses: each of them can delay it by at most one cycle at each of its
        three steps per hop (the unit's send register, the link, the receiver)."""
        return 3 * (sum(self.depth) + 2 * (self.n - 1))

    @staticmethod
    def params_ok(n, mode, sub, m, c):
        if mode == 3 or (mode == AC and sub == 0):
            return False
        if mode == AC and sub & COUNT and not 1 <= m <= n:
            return False
        if mode == AC and sub & TIME and c == 0:
            return False
        return True

    def _rule(self, times, mode, sub, m, c, ok):
        candidates = []
        if len(times) == self.n:
            candidates.append(times[-1] + 1)
        if ok and mode == AC:
            if sub & COUNT and len(times) >= m:
                candidates.append(times[m - 1] + 1)
            if sub & TIME and times:
                candidates.append(times[0] + c)
        return min(candidates) if candidates else None

    def decide(self, done, *, mode, sub=COUNT, m=0, c=0, slack=0):
        """``done``: {node: cycle of its counted done strobe}.  ``slack``: how much later than
        the earliest each count may come (0: exact)."""
        ok = self.params_ok(self.n, mode, sub, m, c)
        lo = sorted(self.earliest_count(r, t) for r, t in done.items())
        hi = [x + slack for x in lo]
        release = (self._rule(lo, mode, sub, m, c, ok), self._rule(hi, mode, sub, m, c, ok))
        k = len(lo)
        return Decision(
            release=release,
            s=(lo[0], hi[0]) if k else None,
            mt=(lo[m - 1], hi[m - 1]) if 1 <= m <= k else None,
            e=(lo[-1], hi[-1]) if k == self.n else None,
            early=release[0] is not None and k < self.n,
            params_ok=ok)

    def path_links(self, nodes):
        """Tree links (parent, child) on the way from the root to each of ``nodes``."""
        links = set()
        for x in nodes:
            while self.parent[x] is not None:
                links.add((self.parent[x], x))
                x = self.parent[x]
        return links

    def release_cycles(self, root_release, kill_links):
        """The cycle each node leaves the barrier, without pauses: a parent that left in
        cycle R sends one notice per cycle from R + 2 on, per child slot a KILL (if owed) then
        the RELEASE, and a notice sent x-th acts at its child in cycle R + hop + x."""
        out = {self.root: root_release}
        order = [self.root]
        for p in order:
            x = 0
            for ch in self.children[p]:
                x += (p, ch) in kill_links
                out[ch] = out[p] + self.hop + x
                x += 1
                order.append(ch)
        return out

    def sibling_offsets(self, node):
        """Notices the parents on the way down send before this node's RELEASE (no kills)."""
        total = 0
        while self.parent[node] is not None:
            total += self.children[self.parent[node]].index(node)
            node = self.parent[node]
        return total


@dataclass
class Outcome:
    """What the units show after a barrier, with counter deltas since the previous one."""
    seq: int
    released_at: list
    aborted: dict                       # node -> estimate, for nodes aborted in `seq`
    stale: list                         # per node, delta
    down: list                          # per node, per kind, delta (parent -> node)
    up: list                            # per node, per kind, delta (node -> parent)
    root: dict                          # s, mt, e, valid, stamp_seq, ones, log_count, ...
    errors: list
    misrouted: int
    off_tree: int
    clash: int
    log_ids: int = None
    log_seq: int = None


@dataclass
class Plan:
    """One barrier: who finishes when (offsets from the barrier's base cycle)."""
    mode: int
    sub: int = COUNT
    m: int = 0
    c: int = 0
    estimate: int = 0
    finish: dict = field(default_factory=dict)      # node -> offset: done that counts
    straggle: dict = field(default_factory=dict)    # node -> cycles after the release has
    #                                                 reached every node, or None: never
    late: dict = field(default_factory=dict)        # node -> (offset, seq): older barrier's done
    pause: int = 0                                  # pause_rate / gap_rate of the links
