# amaranth: UnusedElaboratable=no
"""BarrierUnit: trees of units joined by a test router, every mode, aborts, stale notices,
errors and the release latency.  Ref: seed 004.

The harness (:class:`Harness`) builds N units, a shared cycle counter and, in Python, a
router that takes each unit's ``tx`` notices (with random backpressure) and hands them to the
unit named by ``dst`` one cycle later or more (random gaps), keeping the order of each link.
Each node's host signals ``done`` a chosen number of cycles after that node saw the previous
release.  While it runs the harness keeps its own account, from what crosses the ports, of
what every unit must have counted, dropped, released and aborted; :meth:`Harness.check`
compares that account with the units:

- a node leaves a barrier only finished or aborted; it is aborted exactly when a KILL for that
  barrier reaches it before its own completion counted;
- on every link, one RELEASE per barrier, at most one KILL and only before the RELEASE, and a
  KILL exactly when the sender was killed (or is the root releasing early) and the child's
  subtree was not complete at the sender;
- the root releases at the cycle its rule gives from the completions it had counted (normal:
  all N; count: the m-th + 1; time: first + c; both: the earlier), and stamps s, mt, e;
- the root only ever counts completions whose host said done for that very barrier, and its
  abort log holds exactly the nodes it had not counted;
- every unit's stale counter equals the notices and done strobes the harness saw carry
  another barrier's number.
"""

import random
from collections import Counter, defaultdict, deque

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Cat, Elaboratable, Fragment, Module, Signal, Value

from nicoll.errors import NicollError
from nicoll.hw.barrier import (
    AcSubMode, BarrierMode, BarrierUnit, BARRIER_ERROR_LAYOUT, NOTICE_LAYOUT, BarrierNoticeKind,
    notice_stream, tree_tables,
)
from nicoll.hw.sim.barrier_tree import BarrierTreeTop
from nicoll.hw.sim.barrier_tree_verilog import barrier_tree_verilog
from nicoll.sim.testbench import run_testbenches
from nicoll.hw.tree import BarrierTree

#: Cycles a notice spends in the test router at least: taken at one edge, offered the next
#: cycle, taken by the receiver at the edge after.  A wire would be 0.
LINK = 1
#: The unit's own forwarding latency, as documented in nicoll.hw.barrier: it registers a
#: notice at its boundary as it takes it, decodes it in the next cycle and acts on it in the
#: one after (`ACT` cycles after the take), then sends.
UNIT = 4
ACT = 2
#: The host's done strobe skips the boundary register: it is decoded in the cycle it comes
#: and acts in the next.
DONE_ACT = 1
HOP = LINK + UNIT

SEQ_MASK = 0xffff


def test_constructor_errors():
    with pytest.raises(TypeError, match=r"^max_nodes must be an integer, not '8'$"):
        BarrierUnit("8", 2)
    with pytest.raises(ValueError, match=r"^max_nodes must be between 1 and 4096, not 0$"):
        BarrierUnit(0, 2)
    with pytest.raises(ValueError, match=r"^max_nodes must be between 1 and 4096, not 5000$"):
        BarrierUnit(5000, 2)
    with pytest.raises(TypeError, match=r"^max_children must be an integer, not True$"):
        BarrierUnit(8, True)
    with pytest.raises(ValueError, match=r"^max_children must be between 1 and 64, not 0$"):
        BarrierUnit(8, 0)
    with pytest.raises(TypeError, match=r"^log_depth must be an integer, not 16.0$"):
        BarrierUnit(8, 2, log_depth=16.0)
    with pytest.raises(ValueError, match=r"^log_depth must be a power of two between 16 and "
                                         r"1024, not 24$"):
        BarrierUnit(8, 2, log_depth=24)
    with pytest.raises(ValueError, match=r"^log_depth must be a power of two between 16 and "
                                         r"1024, not 8$"):
        BarrierUnit(8, 2, log_depth=8)
    with pytest.raises(TypeError, match=r"^dst_checked must be a bool, not 1$"):
        BarrierUnit(8, 2, dst_checked=1)
    # The port for the sender's compare exists only when the sender makes it.
    for name in ("rx_to_me", "rx_from_parent", "rx_from_child"):
        assert name not in BarrierUnit(8, 2).signature.members
        assert BarrierUnit(8, 2, dst_checked=True).signature.members[name].flow.name == "In"


def test_ports():
    dut = BarrierUnit(16, 3, log_depth=32)
    members = dut.signature.members
    assert (dut.max_nodes, dut.max_children, dut.log_depth, dut.route_width) == (16, 3, 32, 2)
    assert members["tx"].flow.name == "Out" and members["rx"].flow.name == "In"
    assert members["tx"].signature == notice_stream()
    widths = {"now": 64, "node_id": 16, "parent_id": 16, "has_parent": 1, "child_valid": 3,
              "route_we": 1, "route_clear": 1, "route_addr": 16, "route_data": 2, "route_rdata": 2, "m": 16,
              "c": 64, "estimate": 64, "start": 1, "start_seq": 16, "done": 1, "done_seq": 16,
              "seq": 16, "finished": 1, "released": 1, "released_at": 64, "aborted": 1,
              "abort_seq": 16, "abort_estimate": 64, "vector": 16, "ones": 16, "total": 16,
              "s": 64, "mt": 64, "e": 64, "stamp_valid": 3, "stamp_seq": 16,
              "release_ones": 16, "stale": 32, "errors": 12, "error": 1, "log_index": 5,
              "log_seq": 16, "log_ids": 16, "log_count": 16, "log_overflow": 1}
    for name, width in widths.items():
        assert len(Value.cast(getattr(dut, name))) == width, name
    assert len(Value.cast(dut.child_id)) == 3 * 16
    assert len(Value.cast(dut.tx.payload)) == NOTICE_LAYOUT.size
    for name in ("tx", "route_rdata", "seq", "errors", "log_ids"):
        assert members[name].flow.name == "Out", name
    for name in ("rx", "node_id", "route_we", "mode", "ac_sub", "done", "log_index"):
        assert members[name].flow.name == "In", name


def test_notice_layout():
    # One flat struct that fits a packet header (<= 192 bits).
    assert NOTICE_LAYOUT.size == 2 + 16 * 4 + 64 <= 192
    assert list(dict(NOTICE_LAYOUT)) == ["kind", "seq", "src", "dst", "subject", "estimate"]
    assert [k.value for k in BarrierNoticeKind] == [0, 1, 2]
    assert [k.value for k in BarrierMode] == [0, 1, 2]
    assert [k.value for k in AcSubMode] == [1, 2, 3]
    # The host packs a notice with the same layout.
    value = NOTICE_LAYOUT.const({"kind": BarrierNoticeKind.KILL, "seq": 5, "src": 1, "dst": 3,
                                 "subject": 0, "estimate": 42}).as_value().value
    assert value & 3 == BarrierNoticeKind.KILL.value and (value >> 2) & 0xffff == 5
    assert value >> 66 == 42
    assert BARRIER_ERROR_LAYOUT.size == 12


def test_tree_tables():
    # The shapes and the tree checks are nicoll.hw.tree.BarrierTree's; tree_tables adds the
    # unit's route encoding (slot + 1) and the child-slot limit.
    t = tree_tables(BarrierTree.binary(7), 2)
    assert t[0] == {"parent": None, "children": [1, 2], "depth": 0,
                    "routes": {1: 1, 3: 1, 4: 1, 2: 2, 5: 2, 6: 2}}
    assert t[5] == {"parent": 2, "children": [], "routes": {}, "depth": 2}
    assert tree_tables([None, 0, 0, 0, 1], 3) == tree_tables(BarrierTree.kary(5, 3), 3)
    assert [x["parent"] for x in tree_tables(BarrierTree.chain(4), 1)] == [None, 0, 1, 2]
    for parents, match in (([None, None], r"exactly one root"), ([1, 0], r"exactly one root"),
                           ([None, 0, 3, 2], r"cycle"), ([None, 1], r"own parent"),
                           ([], r"at least one node")):
        with pytest.raises(NicollError, match=match):
            tree_tables(parents, 2)
    with pytest.raises(ValueError, match=r"^node 0 has 3 children, more than max_children = 2$"):
        tree_tables([None, 0, 0, 0], 2)
    with pytest.raises(TypeError, match=r"^max_children must be an integer, not '2'$"):
        tree_tables(BarrierTree.binary(3), "2")


def test_elaborates_at_64_nodes():
    # max_nodes = 64 (the minimum) elaborates to a netlist; simulation stays small.
    text = rtlil.convert(BarrierUnit(64, 2), name="barrier64")
    assert "module" in text
    Fragment.get(BarrierUnit(64, 8, log_depth=64), None)


# ---- The harness ------------------------------------------------------------------------------

class TreeTop(Elaboratable):
    """N units, a shared cycle counter, and a few concatenated status signals so the Python
    side reads the whole tree with one ``ctx.get`` each."""

    def __init__(self, n, max_nodes, max_children):
        self.units = [BarrierUnit(max_nodes, max_children) for _ in range(n)]
        self.now = Signal(64)
        self.tx_valid = Signal(n)
        self.aborted = Signal(n)
        self.seqs = Signal(16 * n)
        self.abort_seqs = Signal(16 * n)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.now.eq(self.now + 1)
        for i, u in enumerate(self.units):
            m.submodules[f"unit{i}"] = u
            m.d.comb += u.now.eq(self.now)
        m.d.comb += [
            self.tx_valid.eq(Cat(u.tx.valid for u in self.units)),
            self.aborted.eq(Cat(u.aborted for u in self.units)),
            self.seqs.eq(Cat(u.seq for u in self.units)),
            self.abort_seqs.eq(Cat(u.abort_seq for u in self.units)),
        ]
        return m


def subtree(tables, node):
    return {node} | set(tables[node]["routes"])


def notice_dict(payload):
    return {"kind": BarrierNoticeKind(payload.kind), "seq": payload.seq, "src": payload.src,
            "dst": payload.dst, "subject": payload.subject, "estimate": payload.estimate}


class Harness:
    """A tree of units with a router and hosts; see the module docstring."""

    def __init__(self, tree, *, max_nodes=None, max_children=None, mode=BarrierMode.NORMAL,
                 sub=AcSubMode.COUNT, m=0, c=0, estimate=0, stall=0.0, gap=0.0, seed=0,
                 start_seq=0):
        self.n = len(tree)
        self.max_children = max_children or max(1, tree.max_children)
        self.max_nodes = max_nodes or self.n
        self.tables = tree_tables(tree, self.max_children)
        self.root = tree.root
        self.top = TreeTop(self.n, self.max_nodes, self.max_children)
        self.units = self.top.units
        self.mode, self.sub, self.m, self.c, self.estimate = mode, sub, m, c, estimate
        self.stall, self.gap = stall, gap
        self.rng = random.Random(seed)
        self.start_seq = start_seq
        self.cycle = 0
        # The harness's account.
        self.sent = []                                  # (cycle, notice dict)
        self.link = defaultdict(list)                   # (src, dst, seq) -> [kind, ...]
        self.counted = defaultdict(dict)                # (node, seq) -> {subject: edge}
        self.done_ok = {}                               # (node, seq) -> edge
        self.killed_at = {}                             # (node, seq) -> edge of the KILL
        self.released = {}                              # (node, seq) -> edge
        self.aborted = {}                               # (node, seq) -> (edge, estimate)
        self.stale = Counter()                          # node -> expected stale count
        self.root_status = {}                           # seq -> root's outputs after release
        self.done_strobes = []                          # (edge, node, seq)

    # -- configuration ---------------------------------------------------------------------
    async def configure(self, ctx):
        tables = self.tables
        for r, u in enumerate(self.units):
            t = tables[r]
            ctx.set(u.node_id, r)
            ctx.set(u.has_parent, t["parent"] is not None)
            ctx.set(u.parent_id, t["parent"] or 0)
            ids = [0] * self.max_children
            for slot, ch in enumerate(t["children"]):
                ids[slot] = ch
            ctx.set(u.child_id, ids)
            ctx.set(u.child_valid, (1 << len(t["children"])) - 1)
            ctx.set(u.mode, self.mode)
            ctx.set(u.ac_sub, self.sub)
            ctx.set(u.m, self.m)
            ctx.set(u.c, self.c)
            ctx.set(u.estimate, self.estimate)
        entries = [sorted(t["routes"].items()) for t in tables]
        for step in range(max(map(len, entries))):
            for r, u in enumerate(self.units):
                if step < len(entries[r]):
                    ctx.set(u.route_we, 1)
                    ctx.set(u.route_addr, entries[r][step][0])
                    ctx.set(u.route_data, entries[r][step][1])
                else:
                    ctx.set(u.route_we, 0)
            await self.tick(ctx)
        for u in self.units:
            ctx.set(u.route_we, 0)
        await self.tick(ctx)
        await self.start(ctx)

    async def start(self, ctx):
        for u in self.units:
            ctx.set(u.start, 1)
            ctx.set(u.start_seq, self.start_seq)
        await self.tick(ctx)
        for u in self.units:
            ctx.set(u.start, 0)
        await self.tick(ctx)            # the registered tree checks settle: the routed-id
        await self.tick(ctx)            # vectors, the lookups, the checks, then cfg_ok

    async def tick(self, ctx):
        await ctx.tick()
        self.cycle += 1
        # Values kept ahead of their use equal what they stand for, every cycle, in every
        # unit: the release decision (made a cycle ahead; only the root decides, elsewhere
        # both are 0 because the decision's terms hold is_root) and whether a notice counts
        # (chosen among flags made in the decode cycle).
        for unit in self.units:
            for value, reference in unit.mirrors:
                assert ctx.get(value) == ctx.get(reference), (self.cycle, value.name)

    # -- running barriers --------------------------------------------------------------------
    async def run(self, ctx, arrivals, *, late_done=True, max_cycles=20_000):
        """Run ``len(arrivals)`` barriers: ``arrivals[b][r]`` is the number of cycles after node
        r saw barrier b begin (start, or its release of b − 1) at which its host says done;
        None: never.  With ``late_done`` an aborted node's host still says done at its time
        (with the old seq: a late finisher)."""
        n = self.n
        nb = len(arrivals)
        top = self.top
        strobes = [deque() for _ in range(n)]          # per node: (cycle, barrier), sorted
        in_barrier = [0] * n
        offering = [None] * n                          # notice on rx[r]
        acting = deque()                                # (edge it acts at, node, notice)
        done_acting = deque()                           # (edge it acts at, node, seq)
        # A KILL (or the root's early release) acting at an edge sets the unit's abort flag
        # there, and its status (aborted, abort_seq, abort_estimate) at the next edge.
        kill_last = [False] * n                         # a KILL acted at the previous edge
        seq_last = None                                 # seq_before of the previous edge
        queues = [deque() for _ in range(n)]           # (available cycle, notice)
        tx_ready = [None] * n
        done_high = [False] * n

        def schedule(r, b, begin):
            if b < nb and arrivals[b][r] is not None:
                strobes[r].append((begin + arrivals[b][r], b))
                # Keep each node's strobes in time order (a late done may come after a newer
                # barrier's done is already scheduled).
                strobes[r] = deque(sorted(strobes[r]))

        for r in range(n):
            schedule(r, 0, self.cycle)
        seqs = ctx.get(top.seqs)
        ab = ctx.get(top.aborted)
        ab_seqs = ctx.get(top.abort_seqs)
        quiet = 0
        limit = self.cycle + max_cycles
        while True:
            c = self.cycle
            if c > limit:
                raise TimeoutError(f"barriers not finished after {max_cycles} cycles: "
                                   f"nodes at barriers {in_barrier}")
            # Host done strobes, at most one per node and cycle.
            strobe_now = [None] * n
            for r in range(n):
                while not late_done and strobes[r] and strobes[r][0][0] <= c \
                        and strobes[r][0][1] < in_barrier[r]:
                    strobes[r].popleft()            # released already: this host gives up
                if strobes[r] and strobes[r][0][0] <= c:
                    _, b = strobes[r].popleft()
                    q = (self.start_seq + b) & SEQ_MASK
                    strobe_now[r] = q
                    ctx.set(self.units[r].done, 1)
                    ctx.set(self.units[r].done_seq, q)
                    done_high[r] = True
                elif done_high[r]:
                    ctx.set(self.units[r].done, 0)
                    done_high[r] = False
            # Senders, with random backpressure.
            tv = ctx.get(top.tx_valid)
            taken = []
            for r in range(n):
                if tv >> r & 1:
                    ready = self.rng.random() >= self.stall
                    if ready != tx_ready[r]:
                        ctx.set(self.units[r].tx.ready, ready)
                        tx_ready[r] = ready
                    if ready:
                        taken.append(notice_dict(ctx.get(self.units[r].tx.payload)))
            # Receivers, with random gaps; an offer stays until it is taken.
            delivered = []
            for r in range(n):
                if offering[r] is None and queues[r] and queues[r][0][0] <= c \
                        and self.rng.random() >= self.gap:
                    offering[r] = queues[r].popleft()[1]
                    ctx.set(self.units[r].rx.payload, {**offering[r],
                                                       "kind": offering[r]["kind"]})
                    ctx.set(self.units[r].rx.valid, 1)
                if offering[r] is not None and ctx.get(self.units[r].rx.ready):
                    delivered.append((r, offering[r]))
            seq_before = [(seqs >> (16 * r)) & SEQ_MASK for r in range(n)]
            ab_cur_before = [bool(ab >> r & 1) and ((ab_seqs >> (16 * r)) & SEQ_MASK)
                             == seq_before[r] for r in range(n)]
            await self.tick(ctx)
            edge = c
            for r, _ in delivered:
                offering[r] = None
                ctx.set(self.units[r].rx.valid, 0)
            for notice in taken:
                self.sent.append((edge, notice))
                self.link[notice["src"], notice["dst"], notice["seq"]].append(notice["kind"])
                queues[notice["dst"]].append((edge + 1, notice))
            seqs = ctx.get(top.seqs)
            ab_new = ctx.get(top.aborted)
            ab_seqs_new = ctx.get(top.abort_seqs)
            released_now = [((seqs >> (16 * r)) & SEQ_MASK) != seq_before[r] for r in range(n)]
            # Deliveries: what each receiver must count, drop, or act on.
            kill_now = [False] * n
            # A notice taken at edge e acts at edge e + ACT (boundary and decode stages).
            for r, x in delivered:
                acting.append((edge + ACT, r, x))
            now_acting = []
            while acting and acting[0][0] == edge:
                now_acting.append(acting.popleft()[1:])
            for r, x in now_acting:
                if x["seq"] != seq_before[r] or (x["kind"] == BarrierNoticeKind.COMPLETE
                                                 and released_now[r]):
                    self.stale[r] += 1
                elif x["kind"] == BarrierNoticeKind.COMPLETE:
                    got = self.counted[r, x["seq"]]
                    assert x["subject"] not in got, ("a completion forwarded twice", r, x)
                    got[x["subject"]] = edge
                elif x["kind"] == BarrierNoticeKind.KILL:
                    self.killed_at[r, x["seq"]] = edge
                    kill_now[r] = True
            # Done strobes: they act at edge + DONE_ACT (the decode stage, no boundary).
            for r in range(n):
                if strobe_now[r] is not None:
                    self.done_strobes.append((edge, r, strobe_now[r]))
                    done_acting.append((edge + DONE_ACT, r, strobe_now[r]))
            now_done = []
            while done_acting and done_acting[0][0] == edge:
                now_done.append(done_acting.popleft()[1:])
            for r, q in now_done:
                if (q != seq_before[r] or ab_cur_before[r] or released_now[r] or kill_now[r]
                        or kill_last[r]):
                    self.stale[r] += 1
                else:
                    assert (r, q) not in self.done_ok
                    self.done_ok[r, q] = edge
                    if r == self.root:
                        self.counted[r, q][r] = edge
            self._note_aborts(ctx, (ab, ab_seqs), (ab_new, ab_seqs_new), seq_last, edge)
            kill_last, seq_last = kill_now, seq_before
            ab, ab_seqs = ab_new, ab_seqs_new
            # Releases.
            for r in range(n):
                if released_now[r]:
                    self._note_release(ctx, r, seq_before[r], edge)
                    in_barrier[r] += 1
                    schedule(r, in_barrier[r], edge + 1)
            # Done when every node left the last barrier and nothing moves any more.
            busy = (any(offering) or any(queues) or acting or done_acting or tv
                    or any(strobes))
            if all(b >= nb for b in in_barrier) and not busy:
                quiet += 1
                if quiet > 8:
                    break
            else:
                quiet = 0
        for u in self.units:
            ctx.set(u.done, 0)

    def _note_aborts(self, ctx, before, after, seq_kill, edge):
        """Aborts: the flag rose, or it was set and the barrier number changed.  The status
        shows an edge after the kill, so the abort is noted at ``edge - 1``, in the barrier
        number of that edge (``seq_kill``), with the estimate shown now."""
        (ab, ab_seqs), (ab_new, ab_seqs_new) = before, after
        for r in range(self.n):
            a_seq = (ab_seqs_new >> (16 * r)) & SEQ_MASK
            if ab_new >> r & 1 and (not ab >> r & 1
                                    or a_seq != (ab_seqs >> (16 * r)) & SEQ_MASK):
                assert seq_kill is not None and a_seq == seq_kill[r]
                self.aborted[r, a_seq] = (edge - 1, ctx.get(self.units[r].abort_estimate))

    def _note_release(self, ctx, r, q, edge):
        """Node ``r`` left barrier ``q`` at ``edge``: its flags, and the root's stamps."""
        self.released[r, q] = edge
        assert ctx.get(self.units[r].released) == 1
        assert ctx.get(self.units[r].released_at) == edge
        if r == self.root:
            u = self.units[r]
            self.root_status[q] = {
                "s": ctx.get(u.s), "mt": ctx.get(u.mt), "e": ctx.get(u.e),
                "valid": ctx.get(u.stamp_valid.as_value()),
                "stamp_seq": ctx.get(u.stamp_seq),
                "ones": ctx.get(u.release_ones),
            }

    # -- checking ---------------------------------------------------------------------------
    def early_release(self, q):
        return len(self.counted[self.root, q]) < self.n

    def check(self, ctx, *, expect_log=True):
        n, root, tables = self.n, self.root, self.tables
        # Barrier numbers in release order (they wrap at 2**16).
        seqs = sorted({q for (_, q) in self.released},
                      key=lambda q: self.released.get((root, q), -1))
        for q in seqs:
            assert (root, q) in self.released, ("a node left a barrier the root never released",
                                                q)
            early = self.early_release(q)
            # Nodes leave a barrier only finished or aborted; aborted exactly when a KILL
            # reached them before their completion counted.
            for r in range(n):
                if (r, q) not in self.released:
                    continue
                done = self.done_ok.get((r, q))
                if r == root:
                    kill_edge = self.released[r, q] if early else None
                else:
                    kill_edge = self.killed_at.get((r, q))
                should_abort = kill_edge is not None and (done is None or done >= kill_edge)
                assert ((r, q) in self.aborted) == should_abort, (r, q, done, kill_edge)
                assert done is not None or (r, q) in self.aborted, ("released unfinished", r, q)
                if should_abort:
                    assert self.aborted[r, q][1] == self.estimate
                    assert self.aborted[r, q][0] == kill_edge
            # Links: RELEASE once, KILL at most once and first, only toward incomplete subtrees.
            for p in range(n):
                if (p, q) not in self.released:
                    continue
                p_killed = early if p == root else (p, q) in self.killed_at
                got = self.counted[p, q]
                for ch in tables[p]["children"]:
                    kinds = self.link.get((p, ch, q), [])
                    incomplete = not (subtree(tables, ch) <= set(got))
                    want = ([BarrierNoticeKind.KILL] if p_killed and incomplete else []) \
                        + [BarrierNoticeKind.RELEASE]
                    assert kinds == want, (p, ch, q, kinds, want, sorted(got))
                # The subjects this node counted really finished that barrier: no stale
                # notice ever counted.
                for subject in got:
                    assert (subject, q) in self.done_ok, ("counted without done", p, subject, q)
            # The root's rule, at the right cycle, from what it had counted.
            self.check_root(q)
        for (src, dst, q), kinds in self.link.items():
            if dst == tables[src]["parent"]:
                assert set(kinds) == {BarrierNoticeKind.COMPLETE}, (src, dst, q, kinds)
            else:
                assert dst in tables[src]["children"], ("a notice on no tree link", src, dst)
        for r, u in enumerate(self.units):
            assert ctx.get(u.stale) == self.stale[r], (r, ctx.get(u.stale), self.stale[r])
            assert ctx.get(u.error) == 0, (r, ctx.get(u.errors.as_value()))
        if expect_log:
            self.check_log(ctx, seqs)

    def check_root(self, q):
        times = sorted(self.counted[self.root, q].values())
        rel = self.released[self.root, q]
        n, m, c = self.n, self.m, self.c
        assert times and times[-1] < rel
        candidates = []
        if len(times) == n:
            candidates.append(times[n - 1] + 1)
        if self.mode == BarrierMode.AC:
            if self.sub.value & 1 and len(times) >= m:
                candidates.append(times[m - 1] + 1)
            if self.sub.value & 2:
                candidates.append(times[0] + c)
        assert candidates and rel == min(candidates), (q, rel, candidates, times)
        st = self.root_status[q]
        assert st["stamp_seq"] == q and st["ones"] == len(times)
        assert st["valid"] & 1 and st["s"] == times[0]
        has_mt = 1 <= m <= len(times)
        assert bool(st["valid"] & 2) == has_mt and (not has_mt or st["mt"] == times[m - 1])
        has_e = len(times) == n
        assert bool(st["valid"] & 4) == has_e and (not has_e or st["e"] == times[n - 1])

    def check_log(self, ctx, seqs):
        root = self.units[self.root]
        early = [q for q in seqs if self.early_release(q)]
        depth = root.log_depth
        assert ctx.get(root.log_count) == len(early)
        assert ctx.get(root.log_overflow) == (len(early) > depth)
        # The newest min(depth, count) entries, oldest first, sit at (count - i) mod depth.
        keep = early[-depth:]
        first = len(early) - len(keep)
        for i, q in enumerate(keep):
            ctx.set(root.log_index, (first + i) % depth)
            assert ctx.get(root.log_seq) == q
            ids = ctx.get(root.log_ids)
            want = set(range(self.n)) - set(self.counted[self.root, q])
            assert {x for x in range(self.max_nodes) if ids >> x & 1} == want, (q, ids, want)

    def kill_links(self, q):
        return {(p, ch) for (p, ch, s), kinds in self.link.items()
                if s == q and BarrierNoticeKind.KILL in kinds}

    def path_links(self, nodes):
        """Tree links on the way from the root to each of ``nodes``."""
        parents = [t["parent"] for t in self.tables]
        links = set()
        for x in nodes:
            while parents[x] is not None:
                links.add((parents[x], x))
                x = parents[x]
        return links

    def simulate(self, body, *, watchdog_cycles=200_000):
        async def tb(ctx):
            await self.configure(ctx)
            await body(ctx)
        run_testbenches(self.top, tb, watchdog_cycles=watchdog_cycles)


def random_arrivals(rng, n, barriers, spread):
    return [[rng.randrange(spread) for _ in range(n)] for _ in range(barriers)]


# ---- Mode 0 ----------------------------------------------------------------------------------

TREES = [
    ("binary1", BarrierTree.binary(1)),
    ("binary2", BarrierTree.binary(2)),
    ("binary7", BarrierTree.binary(7)),
    ("binary8", BarrierTree.binary(8)),
    ("3ary10", BarrierTree.kary(10, 3)),
    ("chain5", BarrierTree.chain(5)),
]


@pytest.mark.parametrize("name,tree", TREES, ids=[t[0] for t in TREES])
def test_normal_mode_waits_for_the_last(name, tree):
    n = len(tree)
    rng = random.Random(name)
    arrivals = random_arrivals(rng, n, 3, 40)
    h = Harness(tree, stall=0.3, gap=0.3, seed=len(name), start_seq=7)

    async def body(ctx):
        await h.run(ctx, arrivals)
        h.check(ctx)

    h.simulate(body)
    for b in range(3):
        q = 7 + b
        assert all((r, q) in h.released for r in range(n))
        # Nobody is released before the last done strobe of that barrier.
        last_done = max(h.done_ok[r, q] for r in range(n))
        assert min(h.released[r, q] for r in range(n)) > last_done
    assert not h.aborted and not any(BarrierNoticeKind.KILL in k for k in h.link.values())


@pytest.mark.parametrize("n", [8, 64])
def test_normal_mode_release_latency(n):
    """Release latency after the last completion (binary tree, no backpressure), against the
    documented formula and against 2 · depth · hop.  The last node to finish is the deepest
    one, late enough that every other completion has reached the root."""
    tree = BarrierTree.binary(n)
    h = Harness(tree)
    last = n - 1                                # a deepest node
    arrivals = [[0] * n]
    arrivals[0][last] = 30 + 2 * n

    async def body(ctx):
        await h.run(ctx, arrivals)
        h.check(ctx)

    h.simulate(body)
    tables = h.tables
    t = h.done_ok[last, 0] - DONE_ACT           # the strobe; the unit counts it DONE_ACT later
    d_last = tables[last]["depth"]
    height = max(tt["depth"] for tt in tables)
    assert d_last == height
    worst = 0
    for r in range(n):
        # Sibling offsets along the path: notices the parent sent to earlier children first.
        offsets, x = 0, r
        while tables[x]["parent"] is not None:
            offsets += tables[tables[x]["parent"]]["children"].index(x)
            x = tables[x]["parent"]
        seen = h.released[r, 0] + 1                # `released` reads 1 the cycle after
        want = (d_last + tables[r]["depth"]) * HOP + 2 + DONE_ACT + offsets
        assert seen - t == want, (r, seen - t, want)
        worst = max(worst, seen - t)
    bound = 2 * height * HOP
    print(f"\nN={n} binary, depth {height}: release latency after the last completion "
          f"{worst} cycles; 2*depth*hop = 2*{height}*{HOP} = {bound} (hop = link {LINK} + unit "
          f"{UNIT}); the excess {worst - bound} = 2 + {DONE_ACT} + sibling offsets")
    assert bound < worst <= bound + 2 + height


# ---- Mode 1 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("tree,stragglers,m", [
    (BarrierTree.binary(7), {4, 6}, 5),
    (BarrierTree.kary(13, 3), {5, 12}, 10),
    (BarrierTree.chain(6), {3}, 3),
])
def test_count_only_aborts_exactly_the_unfinished(tree, stragglers, m):
    n = len(tree)
    assert len(stragglers) + m <= n
    h = Harness(tree, mode=BarrierMode.AC, sub=AcSubMode.COUNT, m=m, estimate=0xE57,
                stall=0.3, gap=0.2, seed=n)
    # Finishers within 20 cycles; stragglers far later (they finish late, as stale).
    rng = random.Random(n)
    arrivals = [[400 + r if r in stragglers else rng.randrange(20) for r in range(n)]]

    async def body(ctx):
        await h.run(ctx, arrivals)
        h.check(ctx)

    h.simulate(body)
    assert {r for (r, q) in h.aborted} == stragglers
    assert h.kill_links(0) == h.path_links(stragglers)
    kills = Counter((p, ch) for (p, ch, q), kinds in h.link.items() for k in kinds
                    if k == BarrierNoticeKind.KILL)
    assert set(kills.values()) == {1}
    # Each late finisher's done was stale at its own unit (finishers counted after the
    # release are stale at the root as well; check() matched every unit's counter).
    assert all(h.stale[r] == 1 for r in stragglers)
    assert sum(h.stale.values()) == len(stragglers) + (n - len(stragglers) - m)
    assert h.root_status[0]["ones"] >= m


# c = 1 and 2: the release falls one and two cycles after the first count, which the unit
# decides from flags loaded at that count (c <= 1, c <= 2), not from its time counter.
@pytest.mark.parametrize("sub, c", [(AcSubMode.TIME, 60), (AcSubMode.BOTH, 60),
                                    (AcSubMode.TIME, 1), (AcSubMode.TIME, 2)])
def test_time_threshold(sub, c):
    tree = BarrierTree.binary(8)
    n = len(tree)
    # m is large enough that the count never fires before the time in BOTH.
    h = Harness(tree, mode=BarrierMode.AC, sub=sub, m=n, c=c, estimate=3, stall=0.2,
                gap=0.2, seed=11)
    stragglers = {3, 7}
    arrivals = [[500 if r in stragglers else 5 * r for r in range(n)]]

    async def body(ctx):
        await h.run(ctx, arrivals)
        h.check(ctx)

    h.simulate(body)
    times = sorted(h.counted[h.root, 0].values())
    assert h.released[h.root, 0] == times[0] + c
    if c > 2:
        # With a small c most nodes are aborted; check() has matched each abort with the
        # harness's account.
        assert {r for (r, _) in h.aborted} == stragglers
        assert h.kill_links(0) == h.path_links(stragglers)


def test_both_takes_whichever_comes_first():
    tree = BarrierTree.binary(7)
    h = Harness(tree, mode=BarrierMode.AC, sub=AcSubMode.BOTH, m=4, c=80, stall=0.1,
                seed=5)
    arrivals = [
        # Barrier 0: four nodes at once, the rest much later: the count fires.
        [0, 0, 300, 0, 300, 0, 300],
        # Barrier 1: one early node, the rest after c: the time fires.
        [0, 300, 300, 300, 300, 300, 300],
    ]

    async def body(ctx):
        await h.run(ctx, arrivals, late_done=False)     # aborted hosts give up
        h.check(ctx)

    h.simulate(body)
    assert not +h.stale                     # the aborted never said done: nothing stale
    t0 = sorted(h.counted[h.root, 0].values())
    assert h.released[h.root, 0] == t0[3] + 1                 # count: 4th completion + 1
    t1 = sorted(h.counted[h.root, 1].values())
    assert len(t1) == 1 and h.released[h.root, 1] == t1[0] + 80
    assert {r for (r, q) in h.aborted if q == 0} == {2, 4, 6}
    assert {r for (r, q) in h.aborted if q == 1} == set(range(1, 7))


# ---- Mode 2 ----------------------------------------------------------------------------------

def test_collect_stamps_and_aborts_nothing():
    tree = BarrierTree.kary(9, 3)
    n = len(tree)
    h = Harness(tree, mode=BarrierMode.COLLECT, m=5, stall=0.3, gap=0.3, seed=3)
    rng = random.Random(3)
    arrivals = random_arrivals(rng, n, 3, 120)

    async def body(ctx):
        await h.run(ctx, arrivals)
        h.check(ctx)          # checks s = first, mt = 5th, e = last counted at the root

    h.simulate(body)
    assert not h.aborted and not h.kill_links(0)
    for q in range(3):
        st = h.root_status[q]
        assert st["valid"] == 0b111 and st["s"] <= st["mt"] <= st["e"]
        assert h.released[h.root, q] == st["e"] + 1


# ---- Consecutive barriers, stale notices ------------------------------------------------------

def test_consecutive_barriers_with_late_finishers():
    """Mode 1 count-only, several barriers, a different straggler each time; each late done
    carries its old seq and is dropped and counted where it lands, never counted later."""
    tree = BarrierTree.binary(7)
    n = len(tree)
    h = Harness(tree, mode=BarrierMode.AC, sub=AcSubMode.COUNT, m=6, estimate=99,
                stall=0.3, gap=0.3, seed=21, start_seq=0xfffd)   # the seq wraps to 0
    rng = random.Random(21)
    arrivals = []
    for b in range(6):
        row = [rng.randrange(15) for _ in range(n)]
        row[(2 * b + 1) % n] = 150       # finishes well after the release: a late finisher
        arrivals.append(row)

    async def body(ctx):
        await h.run(ctx, arrivals)
        h.check(ctx)

    h.simulate(body)
    qs = [(0xfffd + b) & SEQ_MASK for b in range(6)]
    assert sorted({q for (_, q) in h.released}) == sorted(qs)
    for b, q in enumerate(qs):
        assert {r for (r, s) in h.aborted if s == q} == {(2 * b + 1) % n}
    assert sum(h.stale.values()) >= 6


def test_stale_completion_in_flight_is_dropped():
    """A completion that crosses the release on its way up reaches a node already in the next
    barrier: it is dropped and counted there, and its sender is not aborted."""
    tree = BarrierTree.chain(4)             # 0 <- 1 <- 2 <- 3
    c = 40
    found = False
    for offset in range(-2, 8):
        h = Harness(tree, mode=BarrierMode.AC, sub=AcSubMode.TIME, m=4, c=c)
        # The root finishes at once (s), nodes 1 and 2 never, node 3 around s + c, when the
        # time rule fires: its completion may meet the release on the way up.
        arrivals = [[0, None, None, c + offset], [0, 0, 0, 0]]

        async def body(ctx):
            await h.run(ctx, arrivals)
            h.check(ctx)

        h.simulate(body)
        in_flight = [r for r in (1, 2) if h.stale[r]]
        if in_flight and (3, 0) in h.done_ok:
            found = True
            assert (3, 0) not in h.aborted          # it finished before any KILL reached it
            assert 3 not in h.counted[0, 0]         # and never counted at the root
            break
    assert found, "no offset produced a completion crossing the release"


# ---- Random stress -----------------------------------------------------------------------------

@pytest.mark.parametrize("tree,sub,barriers,seed", [
    (BarrierTree.binary(7), AcSubMode.BOTH, 100, 1),       # > 16 early releases: the log wraps
    (BarrierTree.kary(13, 3), AcSubMode.COUNT, 15, 2),
    (BarrierTree.binary(15), AcSubMode.TIME, 10, 3),
    (BarrierTree.chain(6), AcSubMode.BOTH, 15, 4),
])
def test_random_ac_barriers(tree, sub, barriers, seed):
    """Consecutive AC barriers with random arrivals, stragglers that finish late or never,
    and random backpressure and gaps: every invariant of Harness.check, every barrier."""
    n = len(tree)
    rng = random.Random(seed)
    h = Harness(tree, mode=BarrierMode.AC, sub=sub, m=n - 2, c=70, estimate=seed,
                stall=0.3, gap=0.3, seed=seed)
    arrivals = []
    for _ in range(barriers):
        row = [rng.randrange(30) for _ in range(n)]
        # At most two stragglers: m = n - 2 stays reachable in count-only mode.
        for r in rng.sample(range(n), rng.randrange(3)):
            row[r] = rng.choice([rng.randrange(30, 120), None])
        arrivals.append(row)

    async def body(ctx):
        await h.run(ctx, arrivals)
        h.check(ctx)

    h.simulate(body, watchdog_cycles=400_000)
    assert len({q for (_, q) in h.released}) == barriers
    assert h.aborted and sum(h.stale.values())


# ---- Bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,sub,m,c,bit", [
    (BarrierMode.AC, AcSubMode.COUNT, 0, 10, "m_range"),
    (BarrierMode.AC, AcSubMode.BOTH, 8, 10, "m_range"),            # N = 7
    (BarrierMode.AC, AcSubMode.TIME, 3, 0, "c_zero"),
    (BarrierMode.AC, 0, 3, 10, "mode"),
    (3, AcSubMode.COUNT, 3, 10, "mode"),
])
def test_bad_parameters_flag_and_fall_back_to_normal(mode, sub, m, c, bit):
    """A bad m, c or mode raises its error bit at the root, and the root then releases only
    when every node is done: never early, never a hang."""
    tree = BarrierTree.binary(7)
    n = len(tree)
    h = Harness(tree, mode=BarrierMode.NORMAL, m=m, c=c, stall=0.2, seed=1)
    arrivals = [[0] * (n - 1) + [200]]
    flags = {}

    async def body(ctx):
        root = h.units[h.root]
        ctx.set(root.mode.as_value(), mode)      # may be a code no member has
        ctx.set(root.ac_sub.as_value(), sub)
        await h.tick(ctx)
        await h.tick(ctx)
        flags["bits"] = {name for name in dict(BARRIER_ERROR_LAYOUT)
                         if getattr(ctx.get(root.errors), name)}
        h.mode = BarrierMode.NORMAL            # what the harness must then see
        await h.run(ctx, arrivals)
        for r, u in enumerate(h.units):
            assert ctx.get(u.error) == (r == h.root)
            ctx.set(u.mode, BarrierMode.NORMAL)  # clear the error so check() sees none
        await h.tick(ctx)
        await h.tick(ctx)
        h.check(ctx)

    h.simulate(body)
    assert flags["bits"] == {bit}
    assert not h.aborted
    assert h.released[h.root, 0] > h.done_ok[n - 1, 0]


class Single(Elaboratable):
    def __init__(self, max_nodes=8, max_children=2):
        self.unit = BarrierUnit(max_nodes, max_children)
        self.now = Signal(64)

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = self.unit
        m.d.sync += self.now.eq(self.now + 1)
        m.d.comb += self.unit.now.eq(self.now)
        return m


async def setup_node(ctx, u, *, node, parent, children, routes):
    ctx.set(u.node_id, node)
    ctx.set(u.has_parent, parent is not None)
    ctx.set(u.parent_id, parent or 0)
    ids = [0] * u.max_children
    for slot, ch in enumerate(children):
        ids[slot] = ch
    ctx.set(u.child_id, ids)
    ctx.set(u.child_valid, (1 << len(children)) - 1)
    for addr, value in routes.items():
        ctx.set(u.route_we, 1)
        ctx.set(u.route_addr, addr)
        ctx.set(u.route_data, value)
        await ctx.tick()
    ctx.set(u.route_we, 0)
    await ctx.tick()                # the last write lands in the table,
    await ctx.tick()                # then in the routed-id vectors
    ctx.set(u.start, 1)
    await ctx.tick()
    ctx.set(u.start, 0)
    await ctx.tick()


def error_bits(ctx, u):
    errors = ctx.get(u.errors)
    return {name for name in dict(BARRIER_ERROR_LAYOUT) if getattr(errors, name)}


# Node 1 of BarrierTree.binary(7): parent 0, children 3 (slot 0) and 4 (slot 1).
GOOD = {"node": 1, "parent": 0, "children": [3, 4], "routes": {3: 1, 4: 2}}


async def start_good_node(ctx, u):
    """Configure ``u`` as GOOD with barrier 0 started, tx always ready, and wait out the tree
    checks' two register stages."""
    await setup_node(ctx, u, **GOOD)
    ctx.set(u.tx.ready, 1)
    await ctx.tick().repeat(2)


@pytest.mark.parametrize("change,bit", [
    ({}, None),
    ({"routes": {3: 1, 4: 2, 6: 3}}, "cfg_write"),       # entry > max_children
    ({"routes": {3: 1, 4: 2, 9: 1}}, "cfg_write"),       # address >= max_nodes
    ({"children": [3]}, "cfg_slot"),                      # 4 routed to slot 1, not valid
    ({"routes": {3: 1, 4: 2, 1: 1}}, "cfg_self"),        # own id routed to a child
    ({"children": [3, 1], "routes": {3: 1, 1: 2}}, "cfg_self"),
    ({"routes": {3: 1, 4: 2, 0: 2}}, "cfg_parent"),      # parent inside own subtree
    ({"parent": 1}, "cfg_parent"),
    ({"children": [3, 3], "routes": {3: 1}}, "cfg_dup"),
    ({"routes": {3: 1, 4: 1}}, "cfg_child"),             # child 4 not in its own slot
    ({"node": 9}, "cfg_id"),
    ({"children": [3, 12], "routes": {3: 1}}, "cfg_id"),
])
def test_config_errors(change, bit):
    dut = Single()
    u = dut.unit
    cfg = {**GOOD, **change}
    seen = {}

    async def tb(ctx):
        await setup_node(ctx, u, **cfg)
        await ctx.tick()
        seen["bits"] = error_bits(ctx, u)
        seen["total"] = ctx.get(u.total)
        await ctx.tick()                # the gate the checks make follows them a cycle later
        # A done with a bad tree sends nothing and sets nothing.
        ctx.set(u.done, 1)
        await ctx.tick()
        ctx.set(u.done, 0)
        sent = 0
        ctx.set(u.tx.ready, 1)
        for _ in range(6):
            sent += ctx.get(u.tx.valid)
            await ctx.tick()
        seen["sent"] = sent
        seen["finished"] = ctx.get(u.finished)

    run_testbenches(dut, tb)
    if bit is None:
        assert seen == {"bits": set(), "total": 3, "sent": 1, "finished": 1}
    else:
        assert bit in seen["bits"], seen
        assert seen["sent"] == 0 and seen["finished"] == 0
        if bit == "cfg_write":
            assert seen["bits"] == {"cfg_write"}


def test_route_readback_and_sizes():
    dut = Single(16, 3)
    u = dut.unit

    async def tb(ctx):
        await setup_node(ctx, u, node=0, parent=None, children=[1, 2, 3],
                         routes={1: 1, 2: 2, 3: 3, 4: 1, 5: 1, 6: 3})
        await ctx.tick()                # `total`'s second register stage
        assert ctx.get(u.total) == 7
        ctx.set(u.route_addr, 5)
        assert ctx.get(u.route_rdata) == 1
        # Moving an id between subtrees moves it between the counts; clearing removes it.
        ctx.set(u.route_we, 1)
        ctx.set(u.route_data, 2)
        await ctx.tick()
        ctx.set(u.route_addr, 6)
        ctx.set(u.route_data, 0)
        await ctx.tick()
        ctx.set(u.route_we, 0)
        await ctx.tick()
        await ctx.tick()
        await ctx.tick()                # a write lands two cycles later; `total` two more
        await ctx.tick()
        assert ctx.get(u.total) == 6
        ctx.set(u.route_addr, 5)
        assert ctx.get(u.route_rdata) == 2
        assert error_bits(ctx, u) == set()

    run_testbenches(dut, tb)


@pytest.mark.parametrize("seed", [1, 2])
def test_back_to_back_route_writes_keep_the_sizes(seed):
    """Route writes in consecutive cycles, to the same id and to ids that share a part of
    the table (the replaced entry is read in two register stages, the writes in flight
    forwarded): every slot's size and every entry read back equal a plain model's."""
    rng = random.Random(seed)
    dut = Single(16, 3)
    u = dut.unit
    table = [0] * 16
    seen = {}

    async def tb(ctx):
        await setup_node(ctx, u, node=0, parent=None, children=[1, 2, 3], routes={})
        for _ in range(12):
            burst = [(rng.choice([1, 2, 3, 5, 6, 7, 9]), rng.randrange(4))
                     for _ in range(rng.randrange(1, 7))]
            for addr, value in burst:
                ctx.set(u.route_we, 1)
                ctx.set(u.route_addr, addr)
                ctx.set(u.route_data, value)
                table[addr] = value
                await ctx.tick()
            ctx.set(u.route_we, 0)
            await ctx.tick().repeat(3)
        for slot in range(3):           # total = size of the valid slots + 1
            ctx.set(u.child_valid, 1 << slot)
            await ctx.tick().repeat(4)
            seen[slot] = ctx.get(u.total) - 1
        seen["table"] = []
        for addr in range(16):
            ctx.set(u.route_addr, addr)
            seen["table"].append(ctx.get(u.route_rdata))

    run_testbenches(dut, tb)
    assert seen["table"] == table
    assert [seen[slot] for slot in range(3)] == [table.count(slot + 1) for slot in range(3)]


def test_route_clear():
    dut = Single()
    u = dut.unit
    out = []

    async def tb(ctx):
        await setup_node(ctx, u, **{**GOOD, "routes": {3: 1, 4: 2, 5: 3}})
        out.append((error_bits(ctx, u), ctx.get(u.total)))
        ctx.set(u.route_clear, 1)
        await ctx.tick()
        ctx.set(u.route_clear, 0)
        ctx.set(u.child_valid, 0)
        for _ in range(5):              # the clear lands two cycles later; the routed-id
            await ctx.tick()            # vectors one more, the checks one more, `total` two
        out.append((error_bits(ctx, u), ctx.get(u.total)))

    run_testbenches(dut, tb)
    assert out == [({"cfg_write"}, 3), (set(), 1)]


def notice(kind, seq, src, dst, subject=0, estimate=0):
    return {"kind": kind, "seq": seq, "src": src, "dst": dst, "subject": subject,
            "estimate": estimate}


def test_bad_notices_are_dropped_and_flagged():
    dut = Single()
    u = dut.unit
    log = {}

    async def send(ctx, x):
        if isinstance(x["kind"], int):          # a code no member has: pack it by hand
            value = NOTICE_LAYOUT.const({**x, "kind": BarrierNoticeKind.COMPLETE}).as_value().value
            ctx.set(u.rx.payload.as_value(), value | x["kind"])
        else:
            ctx.set(u.rx.payload, x)
        ctx.set(u.rx.valid, 1)
        assert ctx.get(u.rx.ready) == 1
        await ctx.tick()
        ctx.set(u.rx.valid, 0)
        await ctx.tick().repeat(2)      # registered at the boundary, decoded, acted on

    async def tb(ctx):
        await setup_node(ctx, u, **GOOD)
        ctx.set(u.tx.ready, 1)
        # A completion about node 4 coming from child 3: outside 3's subtree.  Flagged and
        # not counted, in a barrier under way.
        ctx.set(u.start, 1)
        await ctx.tick()
        ctx.set(u.start, 0)
        await send(ctx, notice(BarrierNoticeKind.COMPLETE, 0, 3, 1, subject=4))
        await ctx.tick().repeat(2)      # long enough for a count to show, were it made
        log["outside"] = (error_bits(ctx, u), ctx.get(u.ones), ctx.get(u.vector))
        ctx.set(u.start, 1)
        await ctx.tick()
        ctx.set(u.start, 0)
        await ctx.tick()
        log["cleared"] = error_bits(ctx, u)
        # Not for this node; from a stranger; a RELEASE from a child; kind 3.
        bad = [notice(BarrierNoticeKind.COMPLETE, 0, 3, 2, subject=3),
               notice(BarrierNoticeKind.COMPLETE, 0, 5, 1, subject=5),
               notice(BarrierNoticeKind.RELEASE, 0, 3, 1),
               {**notice(BarrierNoticeKind.KILL, 0, 0, 1), "kind": 3}]
        log["notice"] = []
        for x in bad:
            ctx.set(u.start, 1)
            await ctx.tick()
            ctx.set(u.start, 0)
            await send(ctx, x)
            log["notice"].append((error_bits(ctx, u), ctx.get(u.seq), ctx.get(u.ones),
                                  ctx.get(u.tx.valid)))
        # A stale notice is no error: dropped and counted.
        ctx.set(u.start, 1)
        await ctx.tick()
        ctx.set(u.start, 0)
        await send(ctx, notice(BarrierNoticeKind.COMPLETE, 5, 3, 1, subject=3))
        await send(ctx, notice(BarrierNoticeKind.RELEASE, 5, 0, 1))
        await ctx.tick()                # the stale count runs a cycle behind the drops
        log["stale"] = (error_bits(ctx, u), ctx.get(u.stale), ctx.get(u.ones), ctx.get(u.seq))
        # A good completion is forwarded to the parent.
        await send(ctx, notice(BarrierNoticeKind.COMPLETE, 0, 4, 1, subject=4))
        await ctx.tick()                # forwarded UNIT cycles after it was taken
        log["good"] = (ctx.get(u.ones), ctx.get(u.vector), ctx.get(u.tx.valid),
                       notice_dict(ctx.get(u.tx.payload)))

    run_testbenches(dut, tb)
    assert log["outside"] == ({"outside"}, 0, 0)
    assert log["cleared"] == set()
    assert log["notice"] == [({"notice"}, 0, 0, 0)] * 4
    assert log["stale"] == (set(), 2, 0, 0)
    assert log["good"][:3] == (1, 1 << 4, 1)
    assert log["good"][3] == notice(BarrierNoticeKind.COMPLETE, 0, 1, 0, subject=4)


def test_root_with_bad_tree_never_releases():
    dut = Single()
    u = dut.unit
    out = {}

    async def tb(ctx):
        # Root 0 with child 1 (slot 0) whose subtree is routed to slot 1: cfg_slot/cfg_child.
        await setup_node(ctx, u, node=0, parent=None, children=[1], routes={1: 2})
        ctx.set(u.done, 1)
        await ctx.tick()
        ctx.set(u.done, 0)
        await ctx.tick()
        await send_rx(ctx, u, notice(BarrierNoticeKind.COMPLETE, 0, 1, 0, subject=1))
        for _ in range(10):
            await ctx.tick()
        out["seq"] = ctx.get(u.seq)
        out["released"] = ctx.get(u.released)
        out["error"] = ctx.get(u.error)

    run_testbenches(dut, tb)
    assert out == {"seq": 0, "released": 0, "error": 1}


async def send_rx(ctx, u, x):
    ctx.set(u.rx.payload, x)
    ctx.set(u.rx.valid, 1)
    await ctx.tick()
    ctx.set(u.rx.valid, 0)


def test_done_after_kill_is_stale():
    """Once a KILL reached an unfinished node (same cycle included), its host's done for that
    barrier no longer counts: nothing is sent up, the stale counter says why."""
    dut = Single()
    u = dut.unit
    out = []

    async def tb(ctx):
        await setup_node(ctx, u, **GOOD)
        ctx.set(u.tx.ready, 1)
        for same_cycle in (False, True):
            ctx.set(u.start, 1)
            await ctx.tick()
            ctx.set(u.start, 0)
            await ctx.tick()
            ctx.set(u.rx.payload, notice(BarrierNoticeKind.KILL, 0, 0, 1, estimate=5))
            ctx.set(u.rx.valid, 1)
            await ctx.tick()
            ctx.set(u.rx.valid, 0)
            # The done skips the boundary register: a cycle after the KILL arrived, it is
            # decoded in the KILL's decode cycle.
            if same_cycle:
                ctx.set(u.done, 1)
            await ctx.tick()
            ctx.set(u.done, 1)                  # (again) in the next cycle
            await ctx.tick()
            ctx.set(u.done, 0)
            sent = 0
            for _ in range(4):
                sent += ctx.get(u.tx.valid)
                await ctx.tick()
            await send_rx(ctx, u, notice(BarrierNoticeKind.RELEASE, 0, 0, 1))
            await ctx.tick().repeat(ACT)    # the release acts ACT cycles after it was taken
            out.append((ctx.get(u.aborted), ctx.get(u.finished), ctx.get(u.stale), sent,
                        ctx.get(u.seq), ctx.get(u.released)))

    run_testbenches(dut, tb)
    assert out == [(1, 0, 1, 0, 1, 1), (1, 0, 2, 0, 1, 1)]


@pytest.mark.parametrize("gap", [0, 1, 2])
def test_repeated_completion_counts_once(gap):
    """A COMPLETE repeated ``gap`` cycles after the first (0: the next cycle, when the first
    is still in execute and its bit not yet in the vector) sets no new bit: the count, the
    vector and the notices sent up are those of one completion."""
    dut = Single()
    u = dut.unit
    out = {}

    async def tb(ctx):
        await start_good_node(ctx, u)
        sent = 0
        for delay in (0, gap):
            for _ in range(delay):
                sent += ctx.get(u.tx.valid)
                await ctx.tick()
            ctx.set(u.rx.payload, notice(BarrierNoticeKind.COMPLETE, 0, 4, 1, subject=4))
            ctx.set(u.rx.valid, 1)
            sent += ctx.get(u.tx.valid)
            await ctx.tick()
            ctx.set(u.rx.valid, 0)
        for _ in range(8):
            sent += ctx.get(u.tx.valid)
            await ctx.tick()
        out.update(ones=ctx.get(u.ones), vector=ctx.get(u.vector), sent=sent,
                   error=ctx.get(u.error))

    run_testbenches(dut, tb)
    assert out == {"ones": 1, "vector": 1 << 4, "sent": 1, "error": 0}


@pytest.mark.parametrize("what", ["complete", "release", "done"])
def test_an_input_that_comes_with_start_is_wiped(what):
    """A notice or a done strobe in the cycle of ``start`` belongs to no barrier: it neither
    counts nor releases, and nothing is sent for it.  The same input a cycle after the start
    does count (so the check can fail)."""
    dut = Single()
    u = dut.unit
    out = []

    async def tb(ctx):
        await start_good_node(ctx, u)
        for with_start in (True, False):
            ctx.set(u.start, 1)
            await ctx.tick()
            ctx.set(u.start, with_start)        # again with the input, or not
            if what == "done":
                ctx.set(u.done, 1)
            else:
                kind = BarrierNoticeKind.COMPLETE if what == "complete" else BarrierNoticeKind.RELEASE
                src = 4 if what == "complete" else 0
                ctx.set(u.rx.payload, notice(kind, 0, src, 1, subject=4))
                ctx.set(u.rx.valid, 1)
            await ctx.tick()
            ctx.set(u.start, 0)
            ctx.set(u.done, 0)
            ctx.set(u.rx.valid, 0)
            sent = 0
            for _ in range(8):
                sent += ctx.get(u.tx.valid)
                await ctx.tick()
            out.append({"ones": ctx.get(u.ones), "released": ctx.get(u.released),
                        "seq": ctx.get(u.seq), "sent": sent})

    run_testbenches(dut, tb)
    wiped, counted = out
    assert wiped == {"ones": 0, "released": 0, "seq": 0, "sent": 0}
    if what == "release":
        # Released by its parent: seq moves on and the release goes down to both children.
        assert counted == {"ones": 0, "released": 1, "seq": 1, "sent": 2}
    else:
        assert counted["ones"] == 1 and counted["released"] == 0 and counted["seq"] == 0


def test_rx_never_waits_on_a_stalled_tx():
    """With tx stalled for good, the unit keeps taking every notice: completions queue up
    (the queue holds a whole subtree), releases and kills become counts owed per child."""
    dut = Single(16, 2)
    u = dut.unit
    out = {}

    async def tb(ctx):
        # Node 1 with children 2 (subtree 2..8) and 9 (subtree 9..15), parent 0.
        routes = {i: 1 for i in range(2, 9)} | {i: 2 for i in range(9, 16)}
        await setup_node(ctx, u, node=1, parent=0, children=[2, 9], routes=routes)
        ctx.set(u.tx.ready, 0)
        for s in list(range(2, 16)):
            await send_rx(ctx, u, notice(BarrierNoticeKind.COMPLETE, 0, 2 if s < 9 else 9, 1,
                                         subject=s))
        await ctx.tick().repeat(ACT)    # the last one acts ACT cycles after it was taken
        out["ones"] = ctx.get(u.ones)
        # Three barriers released from above while nothing leaves.  In barrier 0 both
        # subtrees are complete here; in 1 and 2 nobody below has even left barrier 0.
        for q, est in ((0, 7), (1, 8), (2, 9)):
            await send_rx(ctx, u, notice(BarrierNoticeKind.KILL, q, 0, 1, estimate=est))
            await send_rx(ctx, u, notice(BarrierNoticeKind.RELEASE, q, 0, 1))
        await ctx.tick().repeat(ACT)    # the last one acts ACT cycles after it was taken
        out["seq"] = ctx.get(u.seq)
        out["aborted"] = (ctx.get(u.aborted), ctx.get(u.abort_seq), ctx.get(u.abort_estimate))
        # Now let tx go and collect everything.
        got = []
        ctx.set(u.tx.ready, 1)
        for _ in range(20):
            if ctx.get(u.tx.valid):
                got.append(notice_dict(ctx.get(u.tx.payload)))
            await ctx.tick()
        out["sent"] = got

    run_testbenches(dut, tb)
    assert out["ones"] == 14 and out["seq"] == 3
    assert out["aborted"] == (1, 2, 9)
    sent = out["sent"]
    # The first completion was loaded into the tx register before the stall; the queued rest
    # was dropped when the node left barrier 0 (stale at the parent by then).
    assert sent[0] == notice(BarrierNoticeKind.COMPLETE, 0, 1, 0, subject=2)
    assert all(x["kind"] != BarrierNoticeKind.COMPLETE for x in sent[1:])
    R, K = BarrierNoticeKind.RELEASE, BarrierNoticeKind.KILL
    for child in (2, 9):
        mine = [(x["kind"], x["seq"]) for x in sent if x["dst"] == child]
        assert mine == [(R, 0), (K, 1), (R, 1), (K, 2), (R, 2)], (child, mine)
    # KILLs owed to a child that is behind carry the newest estimate, and no other notice
    # carries one (the unit masks it by the notice's kind on the way out).
    assert all(x["estimate"] == 9 for x in sent if x["kind"] == K)
    assert all(x["estimate"] == 0 for x in sent if x["kind"] != K)


# ---- BarrierTreeTop: the standalone tree of the Verilator bench (tests/test_barrier_cocotb.py)

def test_tree_top_constructor_errors():
    with pytest.raises(TypeError, match=r"^units must be an integer, not '8'$"):
        BarrierTreeTop("8")
    with pytest.raises(ValueError, match=r"^units must be between 1 and 256, not 0$"):
        BarrierTreeTop(0)
    with pytest.raises(ValueError, match=r"^max_children must be between 1 and 64, not 0$"):
        BarrierTreeTop(4, max_children=0)
    with pytest.raises(ValueError, match=r"^max_nodes must be between 4 and 4096, not 2$"):
        BarrierTreeTop(4, max_nodes=2)
    with pytest.raises(TypeError, match=r"^latency must be an integer, not 1\.0$"):
        BarrierTreeTop(4, latency=1.0)
    with pytest.raises(ValueError, match=r"^latency must be between 0 and 16, not 17$"):
        BarrierTreeTop(4, latency=17)
    with pytest.raises(ValueError, match=r"^a full crossbar joins at most 32 units, not 33; "
                                         r"pass links=BarrierTree\(\.\.\.\)$"):
        BarrierTreeTop(33)
    with pytest.raises(TypeError, match=r"^links must be None or a BarrierTree, not "
                                        r"\[None, 0\]$"):
        BarrierTreeTop(2, links=[None, 0])
    with pytest.raises(ValueError, match=r"^links must be a tree of 4 nodes, not "
                                         r"BarrierTree\(\[None, 0, 0\]\)$"):
        BarrierTreeTop(4, links=BarrierTree.binary(3))
    with pytest.raises(ValueError, match=r"^links has a node with 3 children, more than "
                                         r"max_children = 2$"):
        BarrierTreeTop(4, links=BarrierTree.kary(4, 3))
    with pytest.raises(TypeError, match=r"^unit_module must be None or a module name, not 1$"):
        BarrierTreeTop(4, unit_module=1)
    with pytest.raises(ValueError, match=r"^log_depth must be a power of two between 16 and "
                                         r"1024, not 20$"):
        BarrierTreeTop(4, log_depth=20)
    with pytest.raises(TypeError, match=r"^log_depth must be an integer, not '16'$"):
        BarrierTreeTop(4, log_depth="16")


def test_tree_top_ports():
    top = BarrierTreeTop(3, max_children=2, max_nodes=5, latency=2)
    assert (top.n_units, top.max_children, top.max_nodes, top.latency, top.links,
            top.log_depth) == (3, 2, 5, 2, None, 16)
    widths = {"now": 64, "node_id": 48, "parent_id": 48, "has_parent": 3, "child_id": 96,
              "child_valid": 6, "route_we": 3, "route_addr": 48, "route_data": 6,
              "route_rdata": 6, "done": 3, "at_a": 192, "seq_b": 48, "inject": NOTICE_LAYOUT.size,
              "down_count": 3 * 4 * 32, "up_count": 3 * 4 * 32, "misrouted": 32,
              "released_at": 192, "errors": 36, "stamp_valid": 9, "log_ids": 15, "stale": 96,
              "watch_mask": 3, "watch_all": 1, "busy": 1, "clash": 16}
    for name, width in widths.items():
        assert len(Value.cast(getattr(top, name))) == width, name
    assert [top.targets(s) for s in range(3)] == [[1, 2], [0, 2], [0, 1]]
    chain = BarrierTreeTop(3, max_children=1, links=BarrierTree.chain(3))
    assert [chain.targets(s) for s in range(3)] == [[1], [0, 2], [1]]
    Fragment.get(top, None)
    Fragment.get(chain, None)


def test_tree_top_verilog_has_one_unit_module():
    text = barrier_tree_verilog(3, max_children=1, links=BarrierTree.chain(3), latency=0)
    assert text.count("module nicoll_barrier_unit(") == 1
    assert text.count("module nicoll_barrier_tree(") == 1
    assert text.count("nicoll_barrier_unit unit") == 3


def test_tree_top_runs_a_barrier():
    """A chain 0 <- 1 <- 2 with L = 2 (hop 5) in the Amaranth simulator: timed dones, the
    release cycles of the documented formula, link counters, a misrouted notice."""
    top = BarrierTreeTop(3, max_children=1, latency=2, links=BarrierTree.chain(3))
    hop = 2 + UNIT
    out = {}

    async def tb(ctx):
        await ctx.tick()                # the top's registered reset
        ctx.set(top.node_id, [0, 1, 2])
        ctx.set(top.parent_id, [0, 0, 1])
        ctx.set(top.has_parent, 0b110)
        ctx.set(top.child_id, [[1], [2], [0]])
        ctx.set(top.child_valid, [1, 1, 0])
        for step, writes in enumerate(([(1, 1), (2, 1), None], [(2, 1), None, None])):
            ctx.set(top.route_we, sum(1 << i for i, w in enumerate(writes) if w))
            ctx.set(top.route_addr, [w[0] if w else 0 for w in writes])
            ctx.set(top.route_data, [w[1] if w else 0 for w in writes])
            await ctx.tick()
        ctx.set(top.route_we, 0)
        ctx.set(top.start, 1)
        await ctx.tick()
        ctx.set(top.start, 0)
        await ctx.tick().repeat(2)
        now = ctx.get(top.now)
        at = [now + 5, now + 3, now + 40]
        ctx.set(top.at_a, at)
        ctx.set(top.seq_a, [0, 0, 0])
        ctx.set(top.watch_mask, 0b111)
        ctx.set(top.watch_seq, 1)
        await ctx.tick().until(top.watch_all)
        out["at"] = at
        out["released_at"] = list(ctx.get(top.released_at))
        out["down"] = [list(x) for x in ctx.get(top.down_count)]
        out["up"] = [list(x) for x in ctx.get(top.up_count)]
        # Unit 2 told that its parent is 0, which it has no link to: its next completion is
        # dropped by the network and counted.
        ctx.set(top.parent_id, [0, 0, 0])
        ctx.set(top.at_a, [0, 0, ctx.get(top.now) + 3])
        ctx.set(top.seq_a, [0, 0, 1])
        await ctx.tick().repeat(12)
        out["misrouted"] = ctx.get(top.misrouted)
        out["busy"] = ctx.get(top.busy)

    run_testbenches(top, tb, watchdog_cycles=2000)
    root_release = out["at"][2] + DONE_ACT + 2 * hop + 1    # done acts DONE_ACT later
    assert out["released_at"] == [root_release, root_release + hop, root_release + 2 * hop]
    R, C, K = BarrierNoticeKind.RELEASE.value, BarrierNoticeKind.COMPLETE.value, BarrierNoticeKind.KILL.value
    assert out["down"][0] == [0, 0, 0, 0]
    assert out["down"][1][R] == out["down"][2][R] == 1 and out["down"][1][K] == 0
    assert out["up"][2][C] == 1 and out["up"][1][C] == 2 and out["up"][0] == [0, 0, 0, 0]
    assert out["misrouted"] == 1 and out["busy"] == 0


@pytest.mark.parametrize("killed", [True, False])
def test_a_done_with_a_kill_right_after_a_release(killed):
    """The host's done for the next barrier, in the cycle after a RELEASE moved the node on
    and in the same cycle as a KILL of that barrier: the KILL wins, the done never counts
    (the forwarded case of the done's checks, which the routine trees rarely reach).
    Without the KILL the same done counts (so the check can fail)."""
    dut = Single()
    u = dut.unit
    out = {}

    async def tb(ctx):
        await start_good_node(ctx, u)
        ctx.set(u.rx.payload, notice(BarrierNoticeKind.RELEASE, 0, 0, 1))
        ctx.set(u.rx.valid, 1)
        await ctx.tick()
        if killed:
            ctx.set(u.rx.payload, notice(BarrierNoticeKind.KILL, 1, 0, 1, estimate=5))
        else:
            ctx.set(u.rx.valid, 0)
        await ctx.tick()
        # The done skips the boundary register: a cycle after the KILL, it is decoded with it.
        ctx.set(u.rx.valid, 0)
        ctx.set(u.done, 1)
        ctx.set(u.done_seq, 1)
        await ctx.tick()
        ctx.set(u.done, 0)
        await ctx.tick().repeat(3)
        out.update(seq=ctx.get(u.seq), finished=ctx.get(u.finished), ones=ctx.get(u.ones),
                   aborted=ctx.get(u.aborted))

    run_testbenches(dut, tb)
    if killed:
        assert out == {"seq": 1, "finished": 0, "ones": 0, "aborted": 1}
    else:
        assert out == {"seq": 1, "finished": 1, "ones": 1, "aborted": 0}
