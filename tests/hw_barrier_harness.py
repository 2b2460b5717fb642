# amaranth: UnusedElaboratable=no
"""The harness of the BarrierUnit tree tests (seed 004): N units joined by a test router.

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

from amaranth.hdl import Cat, Elaboratable, Module, Signal

from nicoll.hw.barrier import AcSubMode, BarrierMode, BarrierUnit, BarrierNoticeKind, tree_tables
from nicoll.sim.testbench import run_testbenches

from hw_barrier_helpers import ACT, DONE_ACT, SEQ_MASK, notice_dict


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
