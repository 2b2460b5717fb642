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

import cocotb

from nicoll.hw.barrier import NOTICE_LAYOUT, TIME_WIDTH, BarrierNoticeKind

from .golden import (AC, BOTH, COLLECT, COUNT, NORMAL, TIME, Decision, Plan, TreeGolden,
                     format_tree, parse_tree)
from .tb import CLOCK_NS, SEQ_MASK, TB, _env, _pack

__all__ = ["TB", "TreeGolden", "Decision", "parse_tree", "format_tree", "CLOCK_NS"]


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
