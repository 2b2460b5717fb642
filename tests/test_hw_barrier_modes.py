# amaranth: UnusedElaboratable=no
"""BarrierUnit trees in every mode (seed 004): normal mode waits for the last node and
releases within the documented latency; AC count, time and both thresholds abort exactly the
unfinished nodes; collect stamps and aborts nothing; consecutive barriers, stale completions
in flight, random AC stress, and bad parameters falling back to normal mode.

Trees of units run in hw_barrier_harness.Harness, which checks every unit against its own
account of what crossed the ports (see that module).
"""

import random
from collections import Counter

import pytest

from nicoll.hw.barrier import AcSubMode, BarrierMode, BARRIER_ERROR_LAYOUT, BarrierNoticeKind
from nicoll.hw.tree import BarrierTree

from hw_barrier_helpers import LINK, UNIT, DONE_ACT, HOP, SEQ_MASK

from hw_barrier_harness import Harness, random_arrivals


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
