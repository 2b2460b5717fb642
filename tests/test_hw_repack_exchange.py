# amaranth: UnusedElaboratable=no
"""The repack control tree with its units (seed 003): ranks exchanging through a
RepackArray, sequences and edges, registrations and starts refused or waiting, ranks and
messages that never come (time-outs), a bad message dropping its sub-matrix, and the
N = 16 measurement against a direct exchange over the Switch (docs/repack.md).

Every result is compared with the exact messages nicoll.plan.repack builds (one transpose per
sub-matrix) and with the numpy transpose of the whole block matrix.
"""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from nicoll.hw.repack import (RepackNoticeKind, OrderList, RepackArray, RepackError,
                              buffer_bytes_needed)
from nicoll.hw.net.switch import Switch
from nicoll.plan.repack import cost_repack, plan_subgroups
from nicoll.sim.testbench import PERIOD, watchdog

from hw_repack_helpers import simulate, Exchange, random_matrix, check_exchange, _array


@pytest.mark.parametrize("n,dh,dv,seed", [
    (1, 1, 1, 0), (2, 1, 2, 1), (3, 2, 3, 2), (4, 2, 2, 3), (6, 4, 3, 4), (8, 3, 4, 5),
    (11, 3, 3, 6), (11, 4, 2, 7),
])
def test_exchange(n, dh, dv, seed):
    """dh, dv that mostly do not divide N (partial subgroups at the edges), random rank
    lists on odd seeds, random registration order and timing, lengths 0..64 with an empty row
    and column, random backpressure on every stream, 1-3 units: every result equals the
    numpy transpose and each rank sends and receives one message per sub-matrix."""
    rng = random.Random(seed)
    G = 4
    if seed % 2:
        perm = rng.sample(range(n), n)
        src_groups = [perm[k:k + dh] for k in range(0, n, dh)]
        perm = rng.sample(range(n), n)
        dst_groups = [perm[k:k + dv] for k in range(0, n, dv)]
        plan = plan_subgroups(n, 8, src_groups=src_groups, dst_groups=dst_groups, max_group=G)
    else:
        plan = plan_subgroups(n, 8, dh, dv, max_group=G)
    assert (plan.dh, plan.dv) == (dh, dv)
    blocks = random_matrix(rng, n)
    ex = Exchange(_array(units=1 + seed % 3), plan, blocks, seed=seed,
                  stall=(0.0, 0.3, 0.5)[seed % 3]).run()
    check_exchange(ex)


def test_exchange_sequence_and_edges():
    """Two exchanges back to back on one engine, the second with groups {1,2},{0,3},{4,5}
    (seed 003, fig. 8) and uneven sizes."""
    rng = random.Random(21)
    eng = _array(max_ranks=8, units=2)
    plan = plan_subgroups(6, 8, src_groups=[[1, 2], [0, 3], [4, 5]],
                          dst_groups=[[5], [0, 3, 1], [4, 2]], max_group=4)
    blocks = random_matrix(rng, 6)
    ex = Exchange(eng, plan, blocks, seed=22, stall=0.2)
    ex.run()
    check_exchange(ex)


class _PlanWithWrites:
    """``plan`` with ``extra`` order writes after its own (every other attribute is the
    plan's)."""

    def __init__(self, plan, extra):
        self._plan, self._extra = plan, list(extra)

    def order_writes(self):
        return self._plan.order_writes() + self._extra

    def __getattr__(self, name):
        return getattr(self._plan, name)


def test_order_index_past_the_lists_writes_nothing():
    """A list write whose index is past the lists (8 and 9 with max_ranks 8: 0 and 1 if the
    index were cut to the address's bits) counts BAD_CONFIG and leaves the lists alone: the
    exchange after it, whose lists those writes would have broken (a rank twice, a list ended
    early), runs to a correct result."""
    rng = random.Random(51)
    plan = plan_subgroups(6, 8, 2, 3, max_group=4)
    blocks = random_matrix(rng, 6)
    src, dst = plan.order_writes()[0], plan.order_writes()[-1]
    extra = [{"list": OrderList.SRC, "index": 8, "rank": src["rank"] ^ 1, "end": 1},
             {"list": OrderList.DST, "index": 9 + 8 * 16, "rank": dst["rank"], "end": 1}]
    ex = Exchange(_array(max_ranks=8, units=2), _PlanWithWrites(plan, extra), blocks,
                  seed=52, stall=0.2).run()
    assert (ex.errors, ex.last_error) == (2, RepackError.BAD_CONFIG)
    ex.errors = 0                       # the two refusals, counted; the rest as any exchange
    check_exchange(ex)


def test_start_while_busy_waits():
    """A start offered while an exchange runs is not taken (the start's ready is low) and
    changes nothing: its payload (fewer ranks, a budget and a timeout far too small) would
    fail the exchange if any of it were latched."""
    rng = random.Random(41)
    plan = plan_subgroups(6, 8, 2, 3, max_group=4)
    blocks = random_matrix(rng, 6)
    ex = Exchange(_array(), plan, blocks, seed=41, stall=0.2,
                  busy_start=({"n": 2, "budget": 8, "timeout": 1}, 300)).run()
    check_exchange(ex)


def test_bad_registrations_counted():
    """A duplicate registration and one from outside the group are counted and ignored."""
    rng = random.Random(31)
    plan = plan_subgroups(5, 8, 2, 3, max_group=4)
    blocks = random_matrix(rng, 5)
    ex = Exchange(_array(), plan, blocks, seed=31, extra_regs=[2, 7, 4]).run()
    assert ex.errors == 3 and ex.last_error == RepackError.DUPLICATE      # rank 4, the last
    ex.errors = 0
    check_exchange(ex)


def test_missing_rank_times_out():
    """A rank that never registers becomes TIMEOUT, not a hang; sub-matrices without it
    complete, those with it deliver nothing."""
    rng = random.Random(41)
    plan = plan_subgroups(6, 8, 2, 2, max_group=4)
    blocks = random_matrix(rng, 6)
    ex = Exchange(_array(), plan, blocks, seed=41, skip=[3], timeout=300).run()
    assert ex.status == RepackError.TIMEOUT and ex.errors == 1
    a3, b3 = plan.src_group_of(3), plan.dst_group_of(3)
    expected = plan.destination_messages(blocks)
    for j, msgs in enumerate(ex.received()):
        for msg in msgs:
            assert msg in expected.values()
        # Nothing from the missing rank's source subgroup, nothing into its destination one.
        assert expected.get((j, a3)) not in msgs
        if plan.dst_group_of(j) == b3:
            assert msgs == []
    assert ex.count(RepackNoticeKind.DONE)[3] == 0


@pytest.mark.parametrize("units", [1, 2])
def test_missing_message_times_out(units):
    """A source that registers but never sends: its unit drops the sub-matrix with TIMEOUT;
    the other sub-matrices finish and the exchange reports TIMEOUT.  With one unit nothing
    else moves while it waits, so its TIMEOUT must reach the control tree before the tree's
    own budget (REPORT_SLACK cycles longer) runs out."""
    rng = random.Random(51)
    plan = plan_subgroups(4, 8, 2, 2, max_group=4)
    blocks = random_matrix(rng, 4)
    ex = Exchange(_array(units=units), plan, blocks, seed=51, senders_skip=[1],
                  timeout=200).run()
    assert ex.status == RepackError.TIMEOUT and ex.last_error == RepackError.TIMEOUT
    a1 = plan.src_group_of(1)
    expected = plan.destination_messages(blocks)
    for j, msgs in enumerate(ex.received()):
        assert sorted(msgs) == sorted(expected[(j, a)] for a in range(2) if a != a1)


def test_bad_message_drops_submatrix():
    """A source message whose table disagrees with its length: the unit drops that
    sub-matrix whole; the exchange reports LENGTH; everything else is delivered."""
    plan = plan_subgroups(6, 8, 3, 2, max_group=4)
    blocks = [[np.full(5, i * 16 + j, np.uint8) for j in range(6)] for i in range(6)]

    def corrupt(rank, group, msg):
        return msg[:-1] if (rank, group) == (4, 1) else msg      # one byte short
    ex = Exchange(_array(), plan, blocks, seed=61, corrupt=corrupt).run()
    # Counted by the unit, named by the engine's last_error too.
    assert ex.status == RepackError.LENGTH and ex.errors == 1
    assert ex.last_error == RepackError.LENGTH
    expected = plan.destination_messages(blocks)
    a4 = plan.src_group_of(4)
    for j, msgs in enumerate(ex.received()):
        want = [expected[(j, a)] for a in range(2) if not (a == a4 and
                                                           plan.dst_group_of(j) == 1)]
        assert sorted(msgs) == sorted(want)


@pytest.mark.parametrize("what", ["capacity", "not_a_permutation", "group_too_large", "n_zero"])
def test_start_refused(what):
    """A budget that does not fit a unit, or bad rank lists, end the exchange at start with
    no notice and no traffic."""
    eng = _array(max_ranks=8, units=2, max_group=3, capacity=256)
    plan = plan_subgroups(4, 8, 2, 2, max_group=3)
    writes = plan.order_writes()
    start = {"n": 4, "budget": 32, "timeout": 100}
    code = RepackError.BAD_CONFIG
    if what == "capacity":
        start["budget"] = 256 - buffer_bytes_needed(0, 2, 64) + 1
        code = RepackError.CAPACITY
    elif what == "not_a_permutation":
        writes[1] = {**writes[1], "rank": writes[0]["rank"]}
    elif what == "group_too_large":            # one destination group of 4 ranks
        writes = [{**w, "end": int(w["index"] == 3)} if w["list"] == OrderList.DST else w
                  for w in writes]
    elif what == "n_zero":
        start["n"] = 0
    result = {}

    async def main(ctx):
        for w in writes:
            ctx.set(eng.order.payload, w)
            ctx.set(eng.order.valid, 1)
            await ctx.tick().until(eng.order.ready)
        ctx.set(eng.order.valid, 0)
        ctx.set(eng.start.payload, start)
        ctx.set(eng.start.valid, 1)
        await ctx.tick()
        ctx.set(eng.start.valid, 0)
        for _ in range(40):
            ctx.set(eng.reg.payload.rank, 0)
            ctx.set(eng.reg.valid, 1)                 # a registration waits, never taken
            assert not ctx.get(eng.notice.valid)
            assert not ctx.get(eng.reg.ready)
            await ctx.tick()
        result.update(status=ctx.get(eng.status), busy=ctx.get(eng.busy),
                      ops=ctx.get(eng.ops), errors=ctx.get(eng.errors))

    simulate(eng, main, [], 2000)
    assert result == {"status": code, "busy": 0, "ops": 1, "errors": 1}


def direct_exchange_cycles(n, width):
    """Direct pairwise exchange of one-beat blocks over the project's Switch: in round r rank
    i sends to (i + r) % n.  Cycles until every packet has left the switch."""
    sw = Switch(n, width)
    state = {"got": 0, "cycles": 0}

    def source(i):
        async def run(ctx):
            port = sw.rx(i)
            for r in range(1, n):
                ctx.set(port.payload, {"data": i, "keep": 0xff, "last": 1, "dest": (i + r) % n})
                ctx.set(port.valid, 1)
                await ctx.tick().until(port.ready)
            ctx.set(port.valid, 0)
        return run

    async def main(ctx):
        for o in range(n):
            ctx.set(sw.tx(o).ready, 1)
        while state["got"] < n * (n - 1):
            _, _, *valid = await ctx.tick().sample(*(sw.tx(o).valid for o in range(n)))
            state["got"] += sum(valid)
            state["cycles"] += 1

    sim = Simulator(sw)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(2000), background=True)
    for i in range(n):
        sim.add_testbench(source(i))
    sim.add_testbench(main)
    sim.run()
    return state["cycles"]


def test_exchange_16_ranks_measure(capsys):
    """N = 16, 8-byte blocks, 64-bit beats, 4 units; dh = dv = 4 and the planner's default
    (8): messages, notices and cycles per rank, unit utilisation, against direct pairwise
    exchange on the Switch.  Every rank registers at once.  Figures for docs/repack.md."""
    rng = random.Random(71)
    n = 16
    blocks = [[np.frombuffer(rng.randbytes(8), np.uint8) for _ in range(n)] for _ in range(n)]
    direct = direct_exchange_cycles(n, 64)
    lines = [f"direct pairwise on the Switch: {n - 1} + {n - 1} messages per rank, "
             f"{direct} cycles (no per-message cost simulated)"]
    bounds = {4: 470, 8: 360}
    for dh in (4, None):
        eng = RepackArray(16, 4, 8, 64, 4096)
        plan = plan_subgroups(n, 8, dh, max_group=8, units=4)
        ex = Exchange(eng, plan, blocks, seed=72, stall=0.0, reg_order=list(range(n)),
                      reg_gap=0).run()
        check_exchange(ex)
        done = [ex.done_cycle[r] for r in range(n)]
        messages = plan.sends_per_rank + plan.receives_per_rank
        notices = len(ex.notices) // n
        moved = [ex.beats_in[k] + len(ex.out[k]) for k in range(eng.units)]
        # Per-message cost at which both take equally long: messages saved pay for cycles.
        break_even = (ex.hw_cycles - direct) / (2 * (n - 1) - messages)
        lines.append(
            f"repack dh=dv={plan.dh}: {plan.sends_per_rank} + {plan.receives_per_rank} messages "
            f"and {notices} notices per rank, {len(plan.submatrices())} sub-matrices; "
            f"{ex.hw_cycles} cycles start..last DONE (ranks done at {min(done)}..{max(done)}); "
            f"units busy {ex.unit_busy} cycles moving {moved} beats; model at alpha=0: "
            f"{cost_repack(n, 8, plan.dh, plan.dv, 64, 4, 0)}; break-even alpha "
            f"{break_even:.0f} cycles")
        assert ex.hw_cycles <= bounds[plan.dh], ex.hw_cycles
        assert all(busy <= 1.5 * beats for busy, beats in zip(ex.unit_busy, moved)), \
            (ex.unit_busy, moved)
    assert direct <= n + 2
    with capsys.disabled():
        print()
        for line in lines:
            print("  " + line)
