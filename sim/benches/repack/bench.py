# Ref: seed 003 (CN111614581): all-to-all as a transpose of the block matrix through repack
#      units; issue 5, "Verify (cocotb + Verilator)" and "Bad input".
"""cocotb bench of the repack array (control tree + units) under Verilator.

The Verilog top is :class:`nicoll.hw.sim.repack_top.RepackArrayTop`: every stream has AXI4-Stream
names, so cocotbext-axi drives it.  The ranks are stream endpoints: one coroutine per rank
registers after a random delay, waits for its notices, sends its message for a destination
group to the unit a SEND notice names (``s_axis_i<k>``, ``tid`` = its rank) and finishes on
DONE; the units' outputs (``m_axis_o<k>``) are collected by ``tdest``.  Random pause
generators stall every input and backpressure every output.

Tests (select with COCOTB_TEST_FILTER):

- ``exchanges``: NICOLL_REPACK_ROUNDS exchanges over NICOLL_REPACK_N ranks, back to back on
  one array: all-to-all with equal blocks, all-to-all-v with random lengths 0..64 (an
  all-zero row and column in each, and one matrix of empty blocks), random dh and dv
  (preferring ones that do not divide N), contiguous and arbitrary subgroup rank lists.
  Every result equals the numpy transpose of the block matrix, every message the exact bytes
  of :mod:`nicoll.plan.repack_message`; each rank sends one message and receives one per
  sub-matrix it belongs to, and gets SEND = TAKEN = Q, DELIVERED = P and one DONE, last.
- ``bad_input``: a message a byte short or long (LENGTH), a block outside D (OUTSIDE_D), a
  duplicate registration (DUPLICATE), registrations from outside the group (OUTSIDE_GROUP), a
  rank that never registers and one that never sends (TIMEOUT).  Each is counted with its
  code, the exchange ends within its cycle budget, and nothing is half-delivered: every
  message that leaves is whole and exact, and none of a dropped sub-matrix leaves.
- ``measure``: N = 16, 8-byte blocks, no stalls, every rank registered at once, dh = dv = 4
  and 8; messages, notices and cycles per rank and unit utilisation, written as JSON to
  NICOLL_REPACK_REPORT.

Every wait has a cycle budget (:func:`within`); a budget that runs out fails the test with a
message naming the wait, so nothing hangs.

Environment (set by tests/test_repack_cocotb.py): NICOLL_REPACK_CONFIG
("max_ranks,units,max_group,data_width,capacity_bytes" of the build), NICOLL_REPACK_N,
NICOLL_SEED, NICOLL_REPACK_ROUNDS (default 4), NICOLL_REPACK_REPORT.
"""

import json
import os
import random
from collections import Counter

import cocotb
import numpy as np

from nicoll.hw.repack import RepackError, table_beats
from nicoll.plan.repack_message import pack_message, unpack_message
from nicoll.plan.repack import plan_subgroups

from .exchange import Exchange, random_matrix, random_plan
from .tb import CLOCK_NS, TB, parse_config, within

__all__ = ["CLOCK_NS", "TB", "Exchange", "within", "parse_config", "random_plan",
           "random_matrix"]


def _ranks():
    return int(os.environ["NICOLL_REPACK_N"])


@cocotb.test()
async def exchanges(dut):
    """Random exchanges over N ranks, back to back on one array, all equal to the numpy
    transpose."""
    tb = TB(dut)
    n = _ranks()
    rounds = int(os.environ.get("NICOLL_REPACK_ROUNDS", "4"))
    await tb.reset()
    rng = tb.rng
    for round_ in range(rounds):
        kind = round_ % 4
        if kind == 0:           # all-to-all, equal blocks, random dh and dv
            blocks = random_matrix(rng, n, equal=rng.choice([1, 8, 13, 32, 64]))
        elif kind == 3:         # all-to-all-v of empty blocks only
            blocks = [[np.zeros(0, np.uint8) for _ in range(n)] for _ in range(n)]
        else:                   # all-to-all-v, 0..64 bytes, a zero row and column
            blocks = random_matrix(rng, n)
        plan = random_plan(rng, n, blocks, tb.max_group, tb.width, tb.units,
                           lists=kind in (2, 3) or (kind == 0 and round_ >= 4))
        tb.set_pauses(rng.choice([0.0, 0.2, 0.4]))
        ex = await Exchange(tb, plan, blocks, seed=rng.getrandbits(32)).run()
        ex.check_complete()
        dut._log.info("round %d: %s", round_, ex.summary())
    tb.set_pauses(0)


# ---- Bad input ------------------------------------------------------------------------

BAD_CASES = ("length_short", "length_long", "outside_d", "duplicate_registration",
             "outside_group_registration", "missing_rank", "silent_rank")


def _tag(plan, rank, group):
    return (plan.src_group_of(rank) << 8) | group


async def bad_case(tb, case, n, rng):
    """Run one bad-input case; check it is counted and nothing is half-delivered."""
    await tb.reset()
    tb.set_pauses(0.2)
    blocks = random_matrix(rng, n)
    plan = random_plan(rng, n, blocks, tb.max_group, tb.width, tb.units,
                       lists=rng.random() < 0.5)
    victim = rng.randrange(n)
    group = rng.randrange(len(plan.dst_groups))
    timeout = 300
    kwargs = {"timeout": timeout}
    if case in ("length_short", "length_long", "outside_d"):
        def corrupt(rank, b, msg):
            if (rank, b) != (victim, group):
                return msg
            if case == "length_short":
                return msg[:-1]
            if case == "length_long":
                return msg + b"\x5a"
            d = plan.dst_groups[b]          # one block more than D holds
            return pack_message(rank, _tag(plan, rank, b),
                                [blocks[rank][j] for j in d] + [b"\x01"], tb.width)
        kwargs["corrupt"] = corrupt
        code = RepackError.OUTSIDE_D if case == "outside_d" else RepackError.LENGTH
        dropped = {_tag(plan, victim, group)}
    elif case == "duplicate_registration":
        kwargs["register_twice"] = [victim]
        code, dropped = RepackError.DUPLICATE, set()
    elif case == "outside_group_registration":
        kwargs["extra_regs"] = [n, 0xffff]
        code, dropped = RepackError.OUTSIDE_GROUP, set()
    elif case == "missing_rank":
        kwargs["skip_register"] = [victim]
        code = RepackError.TIMEOUT
        a_v, b_v = plan.src_group_of(victim), plan.dst_group_of(victim)
        dropped = {tag for a, b, s, d, tag in plan.submatrices() if a == a_v or b == b_v}
    elif case == "silent_rank":
        kwargs["skip_send"] = [victim]
        code = RepackError.TIMEOUT
        a_v = plan.src_group_of(victim)
        dropped = {tag for a, b, s, d, tag in plan.submatrices() if a == a_v}
    else:
        raise ValueError(f"unknown bad-input case {case!r}")
    ex = await Exchange(tb, plan, blocks, seed=rng.getrandbits(32), **kwargs).run(
        budget=40 * timeout + 20_000)
    where = f"{case} (N={n}, rank {victim}, {ex.summary()})"
    if case in ("duplicate_registration", "outside_group_registration"):
        # Counted and ignored: the exchange itself is whole.
        want = len(kwargs.get("extra_regs", [victim]))
        assert ex.errors == want and ex.last_error == code, \
            f"{where}: {ex.errors} errors, last {ex.last_error!r}; want {want} × {code!r}"
        ex.errors = 0
        ex.check_complete()
        return
    assert ex.status == code, f"{where}: status {ex.status!r}, want {code!r}"
    assert ex.errors >= 1 and ex.last_error == code, \
        f"{where}: {ex.errors} errors, last {ex.last_error!r}"
    if case != "silent_rank":
        # One error: the bad message or the control tree's one timeout.
        assert ex.errors == 1, f"{where}: {ex.errors} errors, want 1"
    ex.check_delivered_subset(dropped)
    # Every sub-matrix not dropped was delivered whole.
    delivered = {(dest, unpack_message(msg, tb.width).tag) for _, dest, msg, _, _ in ex.received}
    for a, b, s, d, tag in plan.submatrices():
        if tag not in dropped:
            assert all((j, tag) in delivered for j in d), \
                f"{where}: sub-matrix {tag:#06x} was not delivered; {ex.progress()}; " \
                f"notices {[(x['kind'].name, x['rank'], x['tag'], x['cycle']) for x in ex.notices]}"
    # A destination of a dropped sub-matrix never hears DONE.
    for a, b, s, d, tag in plan.submatrices():
        if tag in dropped:
            for j in d:
                assert j not in ex.done_cycle, f"{where}: rank {j} got DONE"
    if case == "missing_rank":
        assert victim not in ex.done_cycle
        assert not any(x["rank"] == victim for x in ex.notices), \
            f"{where}: the missing rank was sent a notice"


@cocotb.test()
async def bad_input(dut):
    """Each bad input is counted and reported; the exchange ends within its budget."""
    tb = TB(dut)
    n = _ranks()
    for case in BAD_CASES:
        await bad_case(tb, case, n, tb.rng)
        dut._log.info("bad input %s: reported", case)
    tb.set_pauses(0)
    await tb.reset()


# ---- Measurement ----------------------------------------------------------------------

@cocotb.test()
async def measure(dut):
    """N = 16, 8-byte blocks, no stalls, every rank registered at once: messages, notices
    and cycles per rank, unit utilisation (docs/repack.md)."""
    tb = TB(dut)
    n = 16
    assert tb.max_ranks >= n and tb.units == 4 and tb.max_group >= 8 and tb.width == 64, \
        "the measurement is defined on 16 ranks, 4 units, max_group 8, 64-bit beats"
    rng = random.Random(71)
    blocks = random_matrix(rng, n, equal=8)
    report = {"n": n, "block_bytes": 8, "units": tb.units, "data_width": tb.width,
              "direct": {"messages_out": n - 1, "messages_in": n - 1,
                         "wire_cycles_lower_bound": n - 1}, "repack": []}
    for dh in (4, None):
        await tb.reset()
        tb.set_pauses(0)
        plan = plan_subgroups(n, 8, dh, max_group=8, units=tb.units, data_width=tb.width)
        ex = await Exchange(tb, plan, blocks, seed=72, send_spread=0,
                            all_at_once=True).run()
        ex.check_complete()
        done = [ex.done_cycle[r] - ex.start_cycle for r in range(n)]
        beats_out = [0] * tb.units
        for k, _, msg, _, _ in ex.received:
            beats_out[k] += -(-len(msg) // tb.beat_bytes)
        sent = Counter(r for (r, _), c in ex.sent.items() for _ in range(c))
        got = Counter(dest for _, dest, _, _, _ in ex.received)
        report["repack"].append({
            "dh": plan.dh, "dv": plan.dv, "submatrices": len(plan.submatrices()),
            "messages_out": sorted(set(sent.values())),
            "messages_in": sorted(set(got.values())),
            "notices_per_rank": len(ex.notices) / n,
            "cycles": ex.hw_cycles,
            "rank_done": [min(done), max(done)],
            "unit_busy_cycles": ex.unit_busy,
            "unit_beats_moved": [a + b for a, b in zip(ex.beats_in, beats_out)],
            "header_table_beats_per_message": 1 + table_beats(max(plan.dh, plan.dv),
                                                               tb.width),
        })
        dut._log.info("measure dh=dv=%d: %s", plan.dh, report["repack"][-1])
    path = os.environ.get("NICOLL_REPACK_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
