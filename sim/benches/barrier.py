# Ref: seed 004 (Fujitsu, US11487593 family): completion bit vector and forwarding (figs. 8,
#      9), root decision by mode (fig. 10), forced abort toward unfinished subtrees (fig. 11),
#      stamps SR / MR' / ER (fig. 12).
"""cocotb bench of a tree of BarrierUnits (:class:`nicoll.hw.sim.barrier_tree.BarrierTreeTop`)
under Verilator, against a golden model of the tree's decision.

The bench programs a tree into the top (node ids, parents, child slots, route tables), sets
each node's done cycle on the top's timers (``at_a``/``seq_a``; ``at_b``/``seq_b`` for late
finishers of an older barrier) and waits on ``Timer``s and on ``watch_all``, never on every
clock edge.  After each barrier it reads every unit and checks it against
:class:`TreeGolden`:

- the root releases in the cycle its own stamps give (all done: e + 1; count: mt + 1; time:
  s + c; the earliest that applies), and that cycle lies within the golden bounds: each
  completion is counted at the root no earlier than done + 1 + depth · hop (hop = L + 4) and,
  without random pauses, at most :meth:`TreeGolden.slack` cycles later (exactly then when the
  arrivals are sparse);
- without pauses every node leaves the barrier in exactly the cycle the golden model gives
  (the root's release, one hop per level, plus the notices its parent sent first);
- exactly the planned stragglers are aborted, with the root's estimate; the abort log holds
  them; on every tree link one RELEASE per barrier, a KILL exactly when the child's subtree
  holds a straggler, and exactly one COMPLETE per counted node below; nothing misrouted;
- every done strobe that may not count (a straggler's, a late finisher's with an older
  barrier number) is dropped and counted in that unit's ``stale``, and nothing else is.

Every wait has a cycle budget: a barrier that does not come is a test failure, never a hang.

Environment (set by tests/test_barrier_cocotb.py): NICOLL_UNITS, NICOLL_MAX_CHILDREN,
NICOLL_MAX_NODES, NICOLL_LATENCY, NICOLL_LOG_DEPTH (the build); NICOLL_TREE (the tree to
program, ``binary:8``, ``kary3:13``, ``chain:15``); NICOLL_SEED; NICOLL_BARRIERS (consecutive
barriers, default 1000); NICOLL_RESULTS (a JSON file the bench writes its measurements to).
"""

import json
import os
import random
from dataclasses import dataclass, field

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, First, RisingEdge, Timer

from nicoll.hw.barrier import (
    BARRIER_ERROR_LAYOUT, NOTICE_LAYOUT, SEQ_WIDTH, STAMP_FLAGS, TIME_WIDTH,
    AcSubMode, BarrierMode, BarrierNoticeKind,
)
from nicoll.hw.tree import BarrierTree

__all__ = ["TB", "TreeGolden", "Decision", "parse_tree", "format_tree", "CLOCK_NS"]

CLOCK_NS = 10
SEQ_MASK = (1 << SEQ_WIDTH) - 1
NORMAL, AC, COLLECT = BarrierMode.NORMAL.value, BarrierMode.AC.value, BarrierMode.COLLECT.value
COUNT, TIME, BOTH = AcSubMode.COUNT.value, AcSubMode.TIME.value, AcSubMode.BOTH.value
KINDS = 4                                   # link counters per kind code (3 is never sent)
ERROR_BITS = {name: BARRIER_ERROR_LAYOUT[name].offset for name in dict(BARRIER_ERROR_LAYOUT)}
STAMP_BITS = {name: STAMP_FLAGS[name].offset for name in dict(STAMP_FLAGS)}


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


# ---- Bench --------------------------------------------------------------------------------

def _env(name, default=None):
    value = os.environ.get(f"NICOLL_{name}")
    if value is None:
        if default is None:
            raise RuntimeError(f"NICOLL_{name} is not set (tests/test_barrier_cocotb.py sets it)")
        return default
    return value


def _pack(values, width):
    out = 0
    for i, v in enumerate(values):
        out |= (v & ((1 << width) - 1)) << (i * width)
    return out


def _unpack(value, width, count):
    mask = (1 << width) - 1
    return [(value >> (i * width)) & mask for i in range(count)]


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


class TB:
    """Clock, reset, the tree's configuration, barrier runs and their checks."""

    def __init__(self, dut, tree=None):
        self.dut = dut
        self.units = int(_env("UNITS"))
        self.max_children = int(_env("MAX_CHILDREN"))
        self.max_nodes = int(_env("MAX_NODES"))
        self.latency = int(_env("LATENCY"))
        self.log_depth = int(_env("LOG_DEPTH", "16"))
        self.route_width = max(1, self.max_children.bit_length())
        self.tree = tree or parse_tree(_env("TREE"))
        self.n = len(self.tree)
        assert self.n <= self.units, f"tree of {self.n} nodes on {self.units} units"
        self.golden = TreeGolden(self.tree, self.latency)
        self.hop = self.golden.hop
        self.rng = random.Random(int(_env("SEED", "1")))
        self.seq = 0
        self._counters = None
        self.early_releases = 0
        Clock(dut.clk, CLOCK_NS, unit="ns").start()

    # -- time ---------------------------------------------------------------------------------
    async def sync(self):
        """Wait for the next falling edge; return the cycle number (``now``) it is in.  Inputs
        written now are sampled at the end of that cycle."""
        await FallingEdge(self.dut.clk)
        return int(self.dut.now.value)

    async def wait_cycles(self, k):
        """Let ``k`` cycles pass without waking every edge; return the new cycle number."""
        if k > 1:
            await Timer((k - 1) * CLOCK_NS + CLOCK_NS // 4, unit="ns")
        return await self.sync()

    async def wait_until(self, cycle):
        now = await self.sync()
        if cycle > now:
            now = await self.wait_cycles(cycle - now)
        return now

    async def wait_watch(self, seq, budget):
        """Wait (at most ``budget`` cycles) until every tree node is in barrier ``seq``."""
        d = self.dut
        d.watch_mask.value = (1 << self.n) - 1
        d.watch_seq.value = seq & SEQ_MASK
        await self.sync()
        if int(d.watch_all.value):
            return True
        timeout = Timer(budget * CLOCK_NS, unit="ns")
        fired = await First(RisingEdge(d.watch_all), timeout)
        await self.sync()
        if fired is timeout:
            return False
        return True

    async def wait_quiet(self, budget=10_000):
        """Wait until no notice is on any tx or link (every wait is bounded)."""
        for _ in range(budget // 16 + 1):
            await self.sync()
            if not int(self.dut.busy.value):
                return
            await self.wait_cycles(16)
        raise TimeoutError(f"notices still moving after {budget} cycles")

    # -- reading ---------------------------------------------------------------------------------
    def read(self, name, width=1):
        return _unpack(int(getattr(self.dut, name).value), width, self.units)

    def read1(self, name):
        return int(getattr(self.dut, name).value)

    def errors(self):
        """Error bit names set at each tree node."""
        words = self.read("errors", BARRIER_ERROR_LAYOUT.size)
        return [{name for name, bit in ERROR_BITS.items() if words[r] >> bit & 1}
                for r in range(self.n)]

    def _snapshot(self):
        return {
            "stale": self.read("stale", 32),
            "down": [_unpack(v, 32, KINDS) for v in self.read("down_count", 32 * KINDS)],
            "up": [_unpack(v, 32, KINDS) for v in self.read("up_count", 32 * KINDS)],
            "misrouted": self.read1("misrouted"),
            "off_tree": self.read1("off_tree"),
            "clash": self.read1("clash"),
        }

    # -- configuration ---------------------------------------------------------------------------
    async def reset(self):
        d = self.dut
        d.rst.value = 1
        for name in ("node_id", "parent_id", "has_parent", "child_id", "child_valid", "route_we",
                     "route_addr", "route_data", "route_clear", "mode", "m", "c", "estimate",
                     "start", "start_seq", "log_index", "done", "done_seq", "at_a", "seq_a",
                     "at_b", "seq_b", "pause_rate", "gap_rate", "inject_valid", "inject_to",
                     "inject", "watch_mask", "watch_seq"):
            getattr(d, name).value = 0
        d.ac_sub.value = COUNT
        await self.wait_cycles(3)
        d.rst.value = 0
        await self.sync()

    def tables(self, tree=None):
        """Per unit: (node_id, parent or None, child ids, {id: route entry}); units past the
        tree are lone roots that never take part."""
        tree = tree or self.tree
        rows = []
        for r in range(self.units):
            if r < len(tree):
                route = {x: slot + 1 for x, slot in tree.route(r).items()}
                rows.append((r, tree.parent(r), tree.children(r), route))
            else:
                rows.append((r, None, [], {}))
        return rows

    def write_config(self, rows):
        d, k = self.dut, self.max_children
        d.node_id.value = _pack([row[0] for row in rows], 16)
        d.parent_id.value = _pack([row[1] or 0 for row in rows], 16)
        d.has_parent.value = _pack([row[1] is not None for row in rows], 1)
        d.child_id.value = _pack([_pack(row[2] + [0] * (k - len(row[2])), 16) for row in rows],
                                 16 * k)
        d.child_valid.value = _pack([(1 << len(row[2])) - 1 for row in rows], k)

    async def write_routes(self, rows, extra=()):
        """Clear every route table, then write each unit's entries, all units in parallel;
        ``extra``: (unit, address, entry) writes after them."""
        d = self.dut
        d.route_clear.value = 1
        await self.sync()
        d.route_clear.value = 0
        entries = [sorted(row[3].items()) for row in rows]
        for unit, addr, entry in extra:
            entries[unit].append((addr, entry))
        for step in range(max(map(len, entries), default=0)):
            live = [step < len(e) for e in entries]
            d.route_we.value = _pack(live, 1)
            d.route_addr.value = _pack([e[step][0] if ok else 0 for e, ok in zip(entries, live)], 16)
            d.route_data.value = _pack([e[step][1] if ok else 0 for e, ok in zip(entries, live)],
                                       self.route_width)
            await self.sync()
        d.route_we.value = 0

    async def start(self, seq=0):
        """start_ac_region at every unit (nothing may be in flight)."""
        d = self.dut
        d.at_a.value = 0
        d.at_b.value = 0
        d.start_seq.value = seq
        d.start.value = 1
        await self.sync()
        d.start.value = 0
        # The registered tree checks settle: a route write lands a cycle after the unit sees
        # it, the routed-id vectors follow it a cycle later, the checks take two register
        # stages (and the top registers its inputs).
        await self.wait_cycles(5)
        self.seq = seq & SEQ_MASK
        self._counters = self._snapshot()
        self.early_releases = 0

    async def reconfigure(self, rows, extra=()):
        """Change the configuration between barriers: let every notice land, clear the
        barrier state (a half-counted barrier must not meet a shrinking subtree size while
        the route tables are rewritten), write, and start again."""
        await self.wait_quiet()
        await self.start(0)
        self.write_config(rows)
        await self.write_routes(rows, extra)
        await self.start(0)

    async def configure(self, *, start_seq=0):
        rows = self.tables()
        self.write_config(rows)
        await self.write_routes(rows)
        await self.start(start_seq)
        totals = self.read("total", 16)
        errors = self.errors()
        assert totals[self.golden.root] == self.n, f"root counts {totals[self.golden.root]} nodes"
        for r in range(self.n):
            assert totals[r] == len(self.golden.subtree[r]), (r, totals[r])
        assert not any(errors), f"error bits after a good configuration: {errors}"

    def set_mode(self, mode, sub=COUNT, m=0, c=0, estimate=0):
        d = self.dut
        d.mode.value = mode
        d.ac_sub.value = sub
        d.m.value = m
        d.c.value = c
        d.estimate.value = estimate

    # -- one barrier -------------------------------------------------------------------------------
    async def run(self, plan, *, budget=None):
        """Run barrier ``self.seq`` by ``plan``; return (Outcome, base cycle)."""
        d, q = self.dut, self.seq
        self.set_mode(plan.mode, plan.sub, plan.m, plan.c, plan.estimate)
        d.pause_rate.value = plan.pause
        d.gap_rate.value = plan.pause
        now = await self.sync()
        base = now + 2
        at_a, seq_a, at_b, seq_b = [0] * self.units, [0] * self.units, [0] * self.units, [0] * self.units
        times = []
        for r, off in plan.finish.items():
            at_a[r], seq_a[r] = base + off, q
            times.append(base + off)
        for r, (off, seq) in plan.late.items():
            at_b[r], seq_b[r] = base + off, seq & SEQ_MASK
            assert at_b[r] != at_a[r], "a late done in the cycle of the node's own done"
            times.append(base + off)
        d.at_a.value = _pack(at_a, TIME_WIDTH)
        d.seq_a.value = _pack(seq_a, SEQ_WIDTH)
        d.at_b.value = _pack(at_b, TIME_WIDTH)
        d.seq_b.value = _pack(seq_b, SEQ_WIDTH)
        if budget is None:
            wait_c = plan.c if plan.mode == AC and plan.sub & TIME and plan.c < 1 << 20 else 0
            budget = max(times, default=now) - now + wait_c + 8 * self.golden.slack() + 2000
        if not await self.wait_watch(q + 1, budget):
            seqs = self.read("seq", 16)[:self.n]
            raise TimeoutError(f"barrier {q} not released everywhere within {budget} cycles: "
                               f"node seqs {seqs}, errors {self.errors()}")
        late = {r: off for r, off in plan.straggle.items() if off is not None}
        if late:
            # Stragglers finish after every node left the barrier: stale everywhere.
            now = await self.sync()
            for r, off in late.items():
                at_a[r], seq_a[r] = now + 1 + off, q
                if at_a[r] == at_b[r]:
                    at_a[r] += 1
                times.append(at_a[r])
            d.at_a.value = _pack(at_a, TIME_WIDTH)
            d.seq_a.value = _pack(seq_a, SEQ_WIDTH)
        await self.wait_until(max(times, default=0) + 2)
        await self.wait_quiet()
        log_before = self._counters.get("log_count", 0)
        out = self.outcome(q)
        if out.root["log_count"] != log_before:
            await self.read_log(out)
        self.seq = (q + 1) & SEQ_MASK
        return out, base

    def outcome(self, q):
        root = self.golden.root
        snap = self._snapshot()
        prev = self._counters
        aborted_bits = self.read1("aborted")
        abort_seq = self.read("abort_seq", 16)
        estimates = self.read("abort_estimate", TIME_WIDTH)
        aborted = {r: estimates[r] for r in range(self.n)
                   if aborted_bits >> r & 1 and abort_seq[r] == q}
        pick = lambda name, width: self.read(name, width)[root]     # noqa: E731
        out = Outcome(
            seq=q,
            released_at=self.read("released_at", TIME_WIDTH)[:self.n],
            aborted=aborted,
            stale=[a - b for a, b in zip(snap["stale"], prev["stale"])][:self.n],
            down=[[a - b for a, b in zip(x, y)] for x, y in zip(snap["down"], prev["down"])][:self.n],
            up=[[a - b for a, b in zip(x, y)] for x, y in zip(snap["up"], prev["up"])][:self.n],
            root={"s": pick("s", TIME_WIDTH), "mt": pick("mt", TIME_WIDTH),
                  "e": pick("e", TIME_WIDTH), "valid": pick("stamp_valid", STAMP_FLAGS.size),
                  "stamp_seq": pick("stamp_seq", 16), "ones": pick("release_ones", 16),
                  "log_count": pick("log_count", 16),
                  "log_overflow": self.read1("log_overflow") >> root & 1},
            errors=self.errors(),
            misrouted=snap["misrouted"] - prev["misrouted"],
            off_tree=snap["off_tree"] - prev["off_tree"],
            clash=snap["clash"] - prev["clash"])
        snap["log_count"] = out.root["log_count"]
        self._counters = snap
        return out

    async def read_log(self, out):
        """The abort-log entry of the newest early release."""
        entry = (out.root["log_count"] - 1) % self.log_depth
        self.dut.log_index.value = entry
        await self.sync()                   # the top registers log_index
        await self.sync()
        out.log_seq = self.read("log_seq", 16)[self.golden.root]
        out.log_ids = self.read("log_ids", self.max_nodes)[self.golden.root]

    # -- checking ------------------------------------------------------------------------------------
    def check(self, plan, out, base, *, exact_slack=None):
        """Check one barrier against the golden model.  ``exact_slack``: the slack of the
        count bounds when the links do not pause (0 for sparse arrivals); None: pauses were on,
        only lower bounds hold for the cycles."""
        g, n, q, root = self.golden, self.n, out.seq, self.golden.root
        finish = {r: base + off for r, off in plan.finish.items()}
        stragglers = set(plan.straggle)
        assert not set(finish) & stragglers and set(finish) | stragglers == set(range(n)) \
            or plan.mode != AC, "a plan names every node once"
        slack = exact_slack if exact_slack is not None else 10 ** 9
        dec = g.decide(finish, mode=plan.mode, sub=plan.sub, m=plan.m, c=plan.c, slack=slack)
        st = out.root
        rel = out.released_at[root]
        where = f"barrier {q} ({plan})"

        # The root released by its rule, in the cycle its own stamps give.
        assert st["stamp_seq"] == q, (where, st)
        assert st["ones"] == len(finish), (where, "counted", st["ones"], "of", len(finish),
                                           "(for a time release: is burst_margin too small?)")
        valid = {name: bool(st["valid"] >> bit & 1) for name, bit in STAMP_BITS.items()}
        candidates = []
        if valid["e"]:
            candidates.append(st["e"] + 1)
        if dec.params_ok and plan.mode == AC:
            if plan.sub & COUNT and valid["mt"]:
                candidates.append(st["mt"] + 1)
            if plan.sub & TIME:
                candidates.append(st["s"] + plan.c)
        assert candidates and rel == min(candidates), (where, rel, candidates, st)
        # ... and within the golden bounds (never before the last completion in mode 0).
        assert dec.release[0] <= rel <= dec.release[1], (where, "release", rel, dec)
        assert valid["s"] and dec.s[0] <= st["s"] <= dec.s[1], (where, "s", st, dec)
        assert valid["mt"] == (dec.mt is not None), (where, "mt flag", st, dec)
        if dec.mt:
            assert dec.mt[0] <= st["mt"] <= dec.mt[1], (where, "mt", st, dec)
        assert valid["e"] == (dec.e is not None), (where, "e flag", st, dec)
        if dec.e:
            assert dec.e[0] <= st["e"] <= dec.e[1], (where, "e", st, dec)
        early = rel < (st["e"] + 1 if valid["e"] else 1 << 64)
        assert early == bool(stragglers and plan.mode == AC and dec.params_ok), (where, early)

        # Exactly the stragglers are aborted, with the root's estimate.
        want_aborted = stragglers if early else set()
        assert set(out.aborted) == want_aborted, (where, "aborted", sorted(out.aborted))
        assert all(v == plan.estimate for v in out.aborted.values()), (where, out.aborted)
        for r in range(n):
            if r in finish:
                assert finish[r] < out.released_at[r], (where, "left unfinished", r)
        # The abort log.
        assert st["log_count"] == min(0xffff, self.early_releases + early), (where, st)
        self.early_releases += early
        assert st["log_overflow"] == (self.early_releases > self.log_depth), (where, st)
        if early:
            assert out.log_seq == q, (where, "log seq", out.log_seq)
            ids = {x for x in range(self.max_nodes) if out.log_ids >> x & 1}
            assert ids == stragglers, (where, "log ids", sorted(ids))

        # Links: one RELEASE each; KILL only toward subtrees holding a straggler; one COMPLETE
        # per counted node below; nothing else.
        kills = g.path_links(want_aborted)
        for r in range(n):
            p = g.parent[r]
            if p is None:
                assert out.down[r] == [0] * KINDS and out.up[r] == [0] * KINDS, (where, r, out)
                continue
            want_down = [0] * KINDS
            want_down[BarrierNoticeKind.RELEASE.value] = 1
            want_down[BarrierNoticeKind.KILL.value] = int((p, r) in kills)
            assert out.down[r] == want_down, (where, "down link", p, r, out.down[r], want_down)
            want_up = [0] * KINDS
            want_up[BarrierNoticeKind.COMPLETE.value] = len(g.subtree[r] & set(finish))
            assert out.up[r] == want_up, (where, "up link", r, p, out.up[r], want_up)
        assert (out.misrouted, out.off_tree, out.clash) == (0, 0, 0), (where, out)

        # Every done strobe that must not count was dropped and counted as stale, no more.
        want_stale = [0] * n
        for r, off in plan.straggle.items():
            want_stale[r] += off is not None
        for r in plan.late:
            want_stale[r] += 1
        assert out.stale == want_stale, (where, "stale", out.stale, want_stale)
        assert not any(out.errors), (where, "errors", out.errors)

        # The release reaches every node: one hop per level plus the notices sent first.
        for r in range(n):
            assert out.released_at[r] >= rel + g.depth[r] * self.hop, (where, "too soon", r)
        if exact_slack is not None:
            want = g.release_cycles(rel, kills)
            got = dict(enumerate(out.released_at))
            assert got == want, (where, "release cycles", got, want)
        return dec

    # -- plans -----------------------------------------------------------------------------------
    def sparse_offsets(self, nodes, rng, start=0):
        """Offsets far enough apart that no two completions meet: exact golden cycles."""
        gap = self.golden.height * self.hop + 3
        order = list(nodes)
        rng.shuffle(order)
        return {r: start + i * gap for i, r in enumerate(order)}

    def burst_margin(self, pause):
        """Cycles by which a burst of completions has been counted at the root, in practice
        (the rigorous :meth:`TreeGolden.slack` is far larger): used to set c so that every
        finisher is counted before a time release.  A miss shows as a wrong count."""
        g = self.golden
        return (2 * self.n + 2 * g.height * self.hop + 16) * (3 if pause else 1)

    def ac_plan(self, rng, sub, *, spread, pause=0, sparse=False, estimate=None,
                stragglers=None, never=0.3, time_wins=None):
        """An AC barrier whose outcome is certain: the finishers done early, m and c set so
        that every finisher is counted at the root before the release, the stragglers done
        only after the release reached every node (so a KILL found them unfinished), or
        never."""
        g, n = self.golden, self.n
        if stragglers is None:
            count = rng.randint(1, max(1, n // 3))
            stragglers = set(rng.sample(range(n), count))
        finishers = [r for r in range(n) if r not in stragglers]
        if sparse:
            finish = self.sparse_offsets(finishers, rng)
        else:
            finish = {r: rng.randrange(spread) for r in finishers}
        counts = [g.earliest_count(r, t) for r, t in finish.items()] or [0]
        plan = Plan(mode=AC, sub=sub, finish=finish, pause=pause,
                    estimate=rng.getrandbits(64) if estimate is None else estimate)
        if time_wins is None:
            time_wins = sub == TIME or (sub == BOTH and rng.random() < 0.5)
        if time_wins:
            margin = 1 if sparse else self.burst_margin(pause)
            plan.c = max(counts) - min(counts) + margin + rng.randrange(16)
            plan.m = len(finishers) + 1 if sub & COUNT else rng.randrange(n + 1)
        else:
            plan.m = len(finishers)
            plan.c = (1 << 40) if sub & TIME else rng.randrange(1 << 16)
        plan.straggle = {r: None if rng.random() < never else 1 + rng.randrange(16)
                         for r in stragglers}
        return plan

    def normal_plan(self, rng, *, mode=NORMAL, spread, pause=0, sparse=False, slow=()):
        n = self.n
        finish = self.sparse_offsets(range(n), rng) if sparse else \
            {r: rng.randrange(spread) for r in range(n)}
        for r in slow:
            finish[r] += 200 + rng.randrange(200)
        return Plan(mode=mode, finish=finish, pause=pause, m=rng.randint(0, n),
                    c=rng.randrange(1 << 16))


def _record(key, value):
    """Add a measurement to the NICOLL_RESULTS file (JSON object)."""
    path = os.environ.get("NICOLL_RESULTS")
    if not path:
        return
    data = json.load(open(path)) if os.path.exists(path) else {}
    data[key] = value
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)


async def _ready(dut):
    tb = TB(dut)
    await tb.reset()
    await tb.configure()
    return tb


# ---- Tests ---------------------------------------------------------------------------------

@cocotb.test()
async def normal_mode_never_releases_before_the_last(dut):
    """Mode 0: sparse arrivals (exact cycles), bursts, slow nodes, random link pauses."""
    tb = await _ready(dut)
    rng = tb.rng
    spread = 4 * tb.n + 8
    cases = [(dict(sparse=True), 0), (dict(spread=spread), tb.golden.slack()),
             (dict(spread=spread, slow=[tb.n - 1]), tb.golden.slack()),
             (dict(spread=spread, pause=64), None), (dict(spread=spread, pause=96), None)]
    for kwargs, slack in cases:
        plan = tb.normal_plan(rng, **{"spread": spread, **kwargs})
        out, base = await tb.run(plan)
        dec = tb.check(plan, out, base, exact_slack=slack)
        last = max(base + off for off in plan.finish.values())
        assert out.released_at[tb.golden.root] > last, "released before the last completion"
        assert dec.e is not None


@cocotb.test()
async def release_latency(dut):
    """Mode 0, the deepest node finishes last: the cycle every node sees the release, exactly
    as the golden model gives, against 2 · depth · hop."""
    tb = await _ready(dut)
    g, n = tb.golden, tb.n
    last = max(range(n), key=lambda r: (g.depth[r], r))
    finish = {r: 0 for r in range(n)}
    finish[last] = g.slack() + 10                  # every other completion counted by then
    plan = Plan(mode=NORMAL, finish=finish)
    out, base = await tb.run(plan)
    tb.check(plan, out, base, exact_slack=g.slack())
    t = base + finish[last]
    root_release = t + g.act + g.depth[last] * tb.hop + 1
    assert out.released_at[g.root] == root_release
    # `released` reads 1 in the cycle after the node left the barrier.
    seen = {r: out.released_at[r] + 1 - t for r in range(n)}
    for r in range(n):
        want = (g.depth[last] + g.depth[r]) * tb.hop + 2 + g.act + g.sibling_offsets(r)
        assert seen[r] == want, (r, seen[r], want)
    worst = max(seen.values())
    bound = 2 * g.height * tb.hop
    dut._log.info("N=%d height %d: release seen %d cycles after the last done (root %d); "
                  "2*depth*hop = %d", n, g.height, worst, seen[g.root], bound)
    _record("latency", {"n": n, "height": g.height, "hop": tb.hop, "latency": tb.latency,
                        "worst": worst, "root": seen[g.root], "bound": bound})


@cocotb.test()
async def one_straggler_waiting_saved(dut):
    """One straggler 10 000 cycles late: mode 0 waits for it, mode 1 with m = N − 1 does not."""
    tb = await _ready(dut)
    g, n = tb.golden, tb.n
    if n < 2:
        return
    late = 10_000
    straggler = max(range(n), key=lambda r: (g.depth[r], r))
    rng = random.Random(7)
    early = {r: rng.randrange(16) for r in range(n) if r != straggler}
    results = {}
    for mode in (NORMAL, AC):
        if mode == NORMAL:
            plan = Plan(mode=NORMAL, finish={**early, straggler: late})
        else:
            plan = tb.ac_plan(rng, COUNT, spread=16, stragglers={straggler}, never=1)
            plan.finish = dict(early)
            plan.m = n - 1
        out, base = await tb.run(plan)
        tb.check(plan, out, base, exact_slack=g.slack())
        waits = [out.released_at[r] - (base + early[r]) for r in early]
        results[mode] = {"release": out.released_at[g.root] - base,
                         "last_seen": max(out.released_at) - base,
                         "mean_wait": sum(waits) / len(waits), "total_wait": sum(waits)}
    saved = results[NORMAL]["release"] - results[AC]["release"]
    dut._log.info("N=%d, one node %d cycles late: root releases at +%d (mode 0) and +%d "
                  "(mode 1, m=N-1): %d cycles saved; mean wait of the others %.1f -> %.1f",
                  n, late, results[NORMAL]["release"], results[AC]["release"], saved,
                  results[NORMAL]["mean_wait"], results[AC]["mean_wait"])
    assert saved > late - 4 * g.slack()
    _record("straggler", {"n": n, "late": late, "normal": results[NORMAL], "ac": results[AC],
                          "saved": saved})


async def _ac_cases(tb, sub):
    rng, g = tb.rng, tb.golden
    if tb.n < 2:
        # One node: ones = N at its first completion, so AC never releases early.
        plan = Plan(mode=AC, sub=sub, m=1, c=5, finish={0: 3})
        out, base = await tb.run(plan)
        tb.check(plan, out, base, exact_slack=0)
        return
    spread = 4 * tb.n + 8
    for sparse, pause in ((True, 0), (False, 0), (False, 64), (True, 0), (False, 0)):
        plan = tb.ac_plan(rng, sub, spread=spread, sparse=sparse, pause=pause)
        out, base = await tb.run(plan)
        tb.check(plan, out, base, exact_slack=None if pause else (0 if sparse else g.slack()))


@cocotb.test()
async def ac_count_only(dut):
    """Mode 1, count only: release at the count of the m-th, abort exactly the rest."""
    tb = await _ready(dut)
    await _ac_cases(tb, COUNT)


@cocotb.test()
async def ac_time_only(dut):
    """Mode 1, time only: release in the cycle s + c, abort exactly the unfinished."""
    tb = await _ready(dut)
    await _ac_cases(tb, TIME)


@cocotb.test()
async def ac_both(dut):
    """Mode 1, both thresholds: whichever comes first (each wins in some barriers)."""
    tb = await _ready(dut)
    await _ac_cases(tb, BOTH)
    if tb.n >= 2:
        for time_wins in (True, False):
            plan = tb.ac_plan(tb.rng, BOTH, spread=8, sparse=True, time_wins=time_wins)
            out, base = await tb.run(plan)
            tb.check(plan, out, base, exact_slack=0)
            st = out.root
            rel = out.released_at[tb.golden.root]
            assert rel == (st["s"] + plan.c if time_wins else st["mt"] + 1)


@cocotb.test()
async def collect_stamps_and_aborts_nothing(dut):
    """Mode 2: s, mt, e are the exact cycles of the first, m-th and last count; no aborts."""
    tb = await _ready(dut)
    g, n, rng = tb.golden, tb.n, tb.rng
    for m in sorted({1, n, max(1, n // 2), 0}):
        plan = tb.normal_plan(rng, mode=COLLECT, spread=0, sparse=True)
        plan.m = m
        out, base = await tb.run(plan)
        dec = tb.check(plan, out, base, exact_slack=0)
        counts = sorted(g.earliest_count(r, base + off) for r, off in plan.finish.items())
        st = out.root
        assert st["s"] == counts[0] and st["e"] == counts[-1]
        assert (st["mt"] == counts[m - 1]) if m else dec.mt is None
        assert not out.aborted
    # Stragglers are waited for, not aborted.
    plan = tb.normal_plan(rng, mode=COLLECT, spread=4 * n, slow=[n - 1, 0])
    out, base = await tb.run(plan)
    tb.check(plan, out, base, exact_slack=g.slack())
    assert not out.aborted


@cocotb.test()
async def consecutive_barriers_with_late_finishers(dut):
    """NICOLL_BARRIERS barriers in a row (default 1000), every mode, random stragglers that
    finish after the release or never, late done strobes of older barriers, random link
    pauses, barrier numbers wrapping: no stale strobe or notice ever counts."""
    tb = TB(dut)
    await tb.reset()
    count = int(_env("BARRIERS", "1000"))
    await tb.configure(start_seq=(-count // 2) & SEQ_MASK)     # wraps half-way
    rng, g, n = tb.rng, tb.golden, tb.n
    spread = 2 * n + 8
    aborted_before = {}
    stats = {"early": 0, "aborted": 0, "late": 0, "stale": 0, "cycles": 0}
    first_cycle = await tb.sync()
    for b in range(count):
        pause = rng.choice((0, 0, 32, 64))
        kind = rng.choice(("normal", "collect", "count", "time", "both", "both"))
        if kind in ("normal", "collect") or n < 2:
            plan = tb.normal_plan(rng, mode=COLLECT if kind == "collect" else NORMAL,
                                  spread=spread, pause=pause,
                                  slow=[rng.randrange(n)] if rng.random() < 0.2 else ())
        else:
            plan = tb.ac_plan(rng, {"count": COUNT, "time": TIME, "both": BOTH}[kind],
                              spread=spread, pause=pause)
        # Late finishers: nodes aborted in an earlier barrier say done for it now.
        timed = plan.mode == AC and plan.sub & TIME and plan.c < 1 << 20
        horizon = max(plan.finish.values(), default=0) + (plan.c if timed else 0) + 16
        for r, q_old in aborted_before.items():
            if rng.random() < 0.6:
                off = rng.randrange(horizon)
                own = plan.finish.get(r)
                if off == own:
                    off += 1
                plan.late[r] = (off, q_old)
        out, base = await tb.run(plan)
        tb.check(plan, out, base, exact_slack=None if pause else g.slack())
        for r in out.aborted:
            aborted_before[r] = out.seq
        stats["early"] += bool(out.aborted)
        stats["aborted"] += len(out.aborted)
        stats["late"] += len(plan.late)
        stats["stale"] += sum(out.stale)
    stats["cycles"] = await tb.sync() - first_cycle
    dut._log.info("%d barriers: %s", count, stats)
    _record("consecutive", {"barriers": count, **stats})


@cocotb.test()
async def bad_parameters_fall_back_to_normal(dut):
    """m = 0, m > N, c = 0 with a time sub-mode, mode 3, sub-mode 0: the root flags it and
    waits for every node (no early release, no abort)."""
    tb = await _ready(dut)
    g, n, rng = tb.golden, tb.n, tb.rng
    root = g.root
    cases = [(AC, COUNT, 0, 100, "m_range"), (AC, COUNT, n + 1, 100, "m_range"),
             (AC, BOTH, n + 5, 100, "m_range"), (AC, TIME, 1, 0, "c_zero"),
             (AC, BOTH, 1, 0, "c_zero"), (3, COUNT, 1, 100, "mode"), (AC, 0, 1, 100, "mode")]
    for mode, sub, m, c, bit in cases:
        tb.set_mode(mode, sub, m, c, 0x77)
        await tb.wait_cycles(3)                 # the top's input register + 2 (see ERRORS)
        errors = tb.errors()
        assert bit in errors[root], (mode, sub, m, c, errors[root])
        plan = Plan(mode=mode, sub=sub, m=m, c=c, estimate=0x77,
                    finish={r: rng.randrange(8) for r in range(n)})
        plan.finish[n - 1] = 300                                   # a straggler: waited for
        tb.dut.pause_rate.value = 0
        out, base = await tb.run(plan)
        assert bit in out.errors[root]
        out.errors = [set() for _ in range(n)]                     # checked above
        dec = tb.check(plan, out, base, exact_slack=g.slack())
        assert not dec.params_ok and not out.aborted
        assert out.released_at[root] == out.root["e"] + 1
    tb.set_mode(NORMAL)
    await tb.wait_cycles(3)
    assert not any(tb.errors()), "errors stay after the parameters were fixed"


@cocotb.test()
async def not_a_tree_is_flagged_and_never_released(dut):
    """Configurations that are not a tree at some unit: error bits and no release (within a
    budget), never a hang; a good configuration afterwards works again."""
    tb = await _ready(dut)
    g, n, k = tb.golden, tb.n, tb.max_children
    rows0 = tb.tables()
    inner = [r for r in range(n) if g.children[r]]
    cases = []
    if inner and k >= 2:
        p = inner[-1]
        def dup(rows, p=p):
            node, parent, kids, route = rows[p]
            rows[p] = (node, parent, [kids[0], kids[0]] + kids[2:], route)
        cases.append(("duplicate child id", dup, [], p, "cfg_dup"))
    if inner:
        p = inner[0]
        def cycle(rows, p=p):
            node, parent, kids, route = rows[p]
            rows[p] = (node, kids[0], kids, route)     # its parent is its own child
        cases.append(("parent inside own subtree (a cycle)", cycle, [], p, "cfg_parent"))
    if n >= 2:
        x = n - 1
        def dup_id(rows, x=x):
            node, parent, kids, route = rows[x]
            rows[x] = (parent, parent, kids, route)    # the same id as its parent
        cases.append(("duplicate node id", dup_id, [], x, "cfg_parent"))
    cases.append(("own id routed to a child", lambda rows: None, [(0, 0, 1)], 0, "cfg_self"))
    cases.append(("id out of range",
                  lambda rows: rows.__setitem__(0, (tb.max_nodes,) + rows[0][1:]), [], 0,
                  "cfg_id"))
    cases.append(("route write out of range", lambda rows: None,
                  [(0, tb.max_nodes, 1)], 0, "cfg_write"))
    for name, change, extra, unit, bit in cases:
        rows = [tuple(r) for r in rows0]
        change(rows)
        await tb.reconfigure(rows, extra)
        errors = tb.errors()
        assert bit in errors[unit], (name, unit, errors)
        tb.set_mode(NORMAL)
        d = tb.dut
        now = await tb.sync()
        d.at_a.value = _pack([now + 2 + r if r < n else 0 for r in range(tb.units)], TIME_WIDTH)
        d.seq_a.value = 0
        # Long enough for any release to have come: every done within n cycles, then the
        # counting and the release down, however held up.
        released = await tb.wait_watch(1, 200 + n + 2 * g.slack())
        assert not released, f"{name}: the tree released a barrier"
        seqs = tb.read("seq", 16)[:n]
        assert seqs == [0] * n, (name, "a node left the barrier", seqs)
        dut._log.info("%s: %s at unit %d, no release", name, sorted(errors[unit]), unit)
        await tb.wait_quiet()
    # A good configuration works again.
    await tb.reconfigure(rows0)
    assert not any(tb.errors())
    plan = tb.normal_plan(tb.rng, spread=2 * n)
    out, base = await tb.run(plan)
    tb.check(plan, out, base, exact_slack=g.slack())


def _notice(kind, seq, src, dst, subject=0, estimate=0):
    return NOTICE_LAYOUT.const({"kind": kind, "seq": seq & SEQ_MASK, "src": src, "dst": dst,
                                "subject": subject, "estimate": estimate}).as_value().value


@cocotb.test()
async def bad_notices_are_dropped_and_flagged(dut):
    """A completion from outside the sender's subtree, a stale completion and a RELEASE from a
    non-parent are dropped (flagged or counted stale); none of them counts or releases."""
    tb = await _ready(dut)
    g, n = tb.golden, tb.n
    d, root = tb.dut, g.root
    tb.set_mode(NORMAL)
    missing = n - 1
    now = await tb.sync()
    at = [now + 2 + r if r < n and r != missing else 0 for r in range(tb.units)]
    d.at_a.value = _pack(at, TIME_WIDTH)
    d.seq_a.value = 0
    await tb.wait_cycles(n + 4 * g.slack() + 10)
    ones = tb.read("ones", 16)
    assert ones[root] == n - 1, ones

    async def inject(to, value):
        d.inject_to.value = to
        d.inject.value = value
        d.inject_valid.value = 1
        await tb.sync()
        d.inject_valid.value = 0
        # Registered at the unit's boundary, decoded, acted on; the stale count a cycle later.
        await tb.wait_cycles(4)

    stale_before = tb.read("stale", 32)
    want_stale = [0] * n
    if n >= 2:
        c0 = g.children[root][0]
        # From child c0, a subject not in its subtree (the root itself, or the missing node
        # when it sits under another child).
        subject = missing if missing not in g.subtree[c0] else root
        await inject(root, _notice(BarrierNoticeKind.COMPLETE, tb.seq, c0, root, subject))
        assert "outside" in tb.errors()[root]
        # The missing node's completion, but for an older barrier.
        via = next(ch for ch in g.children[root] if missing in g.subtree[ch])
        await inject(root, _notice(BarrierNoticeKind.COMPLETE, tb.seq - 1, via, root, missing))
        want_stale[root] += 1
        # A RELEASE to the missing node from a node that is not its parent.
        fake = next((r for r in range(n) if r not in (missing, g.parent[missing])), None)
        if fake is not None:
            await inject(missing, _notice(BarrierNoticeKind.RELEASE, tb.seq, fake, missing))
            assert "notice" in tb.errors()[missing]
    else:
        await inject(root, _notice(BarrierNoticeKind.COMPLETE, tb.seq, 5, root, 0))
        assert "notice" in tb.errors()[root]
    ones = tb.read("ones", 16)
    seqs = tb.read("seq", 16)
    assert ones[root] == n - 1 and not any(s != tb.seq for s in seqs[:n]), (ones, seqs)
    stale = [a - b for a, b in zip(tb.read("stale", 32), stale_before)][:n]
    assert stale == want_stale, (stale, want_stale)
    # The missing node finishes: the barrier is released normally.
    now = await tb.sync()
    at[missing] = now + 5
    d.at_a.value = _pack(at, TIME_WIDTH)
    assert await tb.wait_watch(tb.seq + 1, 1000 + 4 * g.slack())
    released = tb.read("released_at", TIME_WIDTH)
    assert released[root] == at[missing] + g.act + g.depth[missing] * tb.hop + 1, (released,
                                                                                  at)
    # start clears the sticky notice errors.
    await tb.wait_quiet()
    await tb.start(0)
    assert not any(tb.errors())
