# Ref: seed 004 (Fujitsu, US11487593 family): completion bit vector and forwarding (figs. 8,
#      9), root decision by mode (fig. 10), forced abort toward unfinished subtrees (fig. 11),
#      stamps SR / MR' / ER (fig. 12).
"""The driver of the barrier bench (:mod:`nicoll.sim.benches.barrier`): :class:`TB` programs a
tree into :class:`nicoll.hw.sim.barrier_tree.BarrierTreeTop`, runs barriers by a
:class:`~nicoll.sim.benches.barrier.golden.Plan` on the top's timers and checks each one's
:class:`~nicoll.sim.benches.barrier.golden.Outcome` against the golden model."""

import os
import random

from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, First, RisingEdge, Timer

from nicoll.hw.barrier import BARRIER_ERROR_LAYOUT, SEQ_WIDTH, STAMP_FLAGS, TIME_WIDTH, BarrierNoticeKind

from .golden import AC, BOTH, COUNT, NORMAL, TIME, Outcome, Plan, TreeGolden, parse_tree

__all__ = ["CLOCK_NS", "SEQ_MASK", "TB"]

CLOCK_NS = 10
SEQ_MASK = (1 << SEQ_WIDTH) - 1
KINDS = 4                                   # link counters per kind code (3 is never sent)
ERROR_BITS = {name: BARRIER_ERROR_LAYOUT[name].offset for name in dict(BARRIER_ERROR_LAYOUT)}
STAMP_BITS = {name: STAMP_FLAGS[name].offset for name in dict(STAMP_FLAGS)}


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
