# amaranth: UnusedElaboratable=no
"""The repack unit's arithmetic (nicoll.hw.repack.unit_arith, seed 003), checked in the
Amaranth simulator against Python's own: the budget check's carry-save ``a + b > limit``,
the configuration check's split compare, the budget flag's compare and the last table beat's
mask of valid entries.
"""

import random

import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from nicoll.hw.repack import unit_arith


def test_sum_exceeds_every_value():
    """The budget check's carry-save form of ``a + b > limit``, for every value at small
    widths (unsigned a and b, a signed limit wider than either)."""
    a, b, limit, out = Signal(4), Signal(3), Signal(signed(6)), Signal()
    m = Module()
    m.d.comb += out.eq(unit_arith._sum_exceeds(a, b, limit))
    wrong = []

    async def bench(ctx):
        for av in range(16):
            for bv in range(8):
                for lv in range(-32, 32):
                    ctx.set(a, av)
                    ctx.set(b, bv)
                    ctx.set(limit, lv)
                    if ctx.get(out) != (av + bv > lv):
                        wrong.append((av, bv, lv))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not wrong, wrong[:5]


def test_split_compare_matches_greater_than():
    """The configuration check's compare in two halves (`_greater`) is ``a > b`` for values
    around every boundary of the split: equal high halves, a carry across it, the extremes."""
    rng = random.Random(11)
    values = [0, 1, 0xFFFF, 0x10000, 0x10001, 0xFFFFFFFF, 0x1_0000_0000]
    values += [rng.getrandbits(32) for _ in range(40)]
    pairs = [(a, b) for a in values[:7] for b in values]
    pairs += [(a, a + d) for a in values for d in (-1, 0, 1, 0x10000, -0x10000) if a + d >= 0]
    m = Module()
    a_sig, b_sig, out = Signal(32), Signal(33), Signal()
    m.d.comb += out.eq(unit_arith._greater(a_sig, b_sig, 16))
    seen = []

    async def bench(ctx):
        for a, b in pairs:
            a &= 0xFFFFFFFF
            ctx.set(a_sig, a)
            ctx.set(b_sig, b)
            seen.append((a, b, ctx.get(out)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert len(seen) == len(pairs)
    assert [(a, b) for a, b, got in seen if got != int(a > b)] == []


@pytest.mark.parametrize("limit_signed", [False, True])
@pytest.mark.parametrize("two_terms", [False, True])
def test_budget_compare_matches_sum(limit_signed, two_terms):
    """The budget flag's compare (`_exceeds`: a carry chain as wide as the sum, the limit's
    high bits tested beside it) is ``a + b > limit`` for sums and limits around every
    boundary: a limit just above and below the sum, beyond the sum's width, negative."""
    rng = random.Random(f"{limit_signed}{two_terms}")
    a_sig, b_sig = Signal(18), Signal(18)
    limit = Signal(signed(34)) if limit_signed else Signal(32)
    out = Signal()
    m = Module()
    m.d.comb += out.eq(unit_arith._exceeds(a_sig, b_sig if two_terms else None, limit))
    cases = []
    for _ in range(300):
        a, b = rng.getrandbits(rng.choice([2, 10, 18])), rng.getrandbits(18) if two_terms else 0
        total = a + b
        lim = rng.choice([total, total - 1, total + 1, total + (1 << 19), 1 << 20, 0,
                          rng.getrandbits(31)])
        if limit_signed:
            lim = rng.choice([lim, -lim - 1, -(1 << 33)])
        cases.append((a, b, lim if limit_signed else max(lim, 0)))
    seen = []

    async def bench(ctx):
        for a, b, lim in cases:
            ctx.set(a_sig, a)
            ctx.set(b_sig, b)
            ctx.set(limit, lim)
            seen.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert [c for c, got in zip(cases, seen) if got != int(c[0] + c[1] > c[2])] == []


@pytest.mark.parametrize("count", [1, 4, 5, 8, 16])
def test_low_thermometer_matches_shifted_mask(count):
    """The last table beat's mask of valid entries (`_low_thermometer`) is
    ``(2 << (index - 1) % count) - 1`` for every index the configuration can give."""
    index = Signal(8)
    out = Signal(count)
    m = Module()
    m.d.comb += out.eq(unit_arith._low_thermometer(index, count))
    # A count that is not a power of two is used only with index <= count (NB = G).
    indices = range(1, 256) if count & (count - 1) == 0 else range(1, count + 1)
    seen = []

    async def bench(ctx):
        for value in indices:
            ctx.set(index, value)
            seen.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    expect = [((2 << ((value - 1) % count)) - 1) & ((1 << count) - 1) for value in indices]
    assert len(seen) == len(expect)
    assert [(i, got, want) for i, got, want in zip(indices, seen, expect) if got != want] == []
