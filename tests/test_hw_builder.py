"""OneHotStates: argument checks, and a small machine run in the simulator; carry-save sums."""

import random

import pytest
from amaranth.hdl import Fragment, Module, Signal
from amaranth.sim import Simulator

from nicoll.hw.lib.builder import OneHotStates, carry_save_sum


def test_names_are_checked():
    m = Module()
    with pytest.raises(ValueError, match=r"distinct"):
        OneHotStates(m, ["A", "A"], init="A", name="s")
    with pytest.raises(ValueError, match=r"distinct"):
        OneHotStates(m, [], init="A", name="s")
    with pytest.raises(ValueError, match=r"Initial state must be one of \['A', 'B'\], not 'C'"):
        OneHotStates(m, ["A", "B"], init="C", name="s")
    Fragment.get(m, None)               # used, so Amaranth does not warn about it


def test_misuse_is_refused():
    m = Module()
    states = OneHotStates(m, ["A", "B"], init="A", name="s")
    with pytest.raises(RuntimeError, match=r"outside a state must name its source"):
        states.next("B")
    with states.state("A"):
        with pytest.raises(RuntimeError, match=r"nested"):
            with states.state("B"):
                pass
    Fragment.get(m, None)


def test_walks_its_states_one_flag_at_a_time():
    # A -> B when `go`, B -> C at once, C -> A from outside C's block (naming its source).
    m = Module()
    go = Signal()
    states = OneHotStates(m, ["A", "B", "C"], init="A", name="s")
    with states.state("A"):
        with m.If(go):
            states.next("B")
    with states.state("B"):
        states.next("C")
    with m.If(states["C"]):
        states.next("A", source="C")
    sim = Simulator(m)
    sim.add_clock(1e-6)
    seen = []

    async def bench(ctx):
        for cycle in range(8):
            ctx.set(go, cycle in (2, 5))
            await ctx.tick()
            seen.append(("".join(s for s in "ABC" if ctx.get(states[s])), ctx.get(states.count())))
    sim.add_testbench(bench)
    sim.run()
    assert [s for s, _ in seen] == ["A", "A", "B", "C", "A", "B", "C", "A"]
    assert all(n == 1 for _, n in seen)


@pytest.mark.parametrize("terms", [1, 2, 3, 4, 5, 6])
def test_carry_save_sum_matches_sum(terms):
    """A sum through carry-save stages (`carry_save_sum`: the repack unit's table-beat sum,
    the engine's slot offset) is the sum of its operands modulo 2**width, for extremes (all
    ones, carries into every bit) and random operands."""
    rng = random.Random(terms)
    width = 20
    operands = [Signal(18, name=f"x{k}") for k in range(terms)]
    out = Signal(width)
    m = Module()
    m.d.comb += out.eq(carry_save_sum(operands, width))
    cases = [[0] * terms, [(1 << 18) - 1] * terms, [1] * terms]
    cases += [[rng.getrandbits(rng.choice([1, 9, 18])) for _ in range(terms)] for _ in range(200)]
    seen = []

    async def bench(ctx):
        for case in cases:
            for sig, value in zip(operands, case):
                ctx.set(sig, value)
            seen.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert [c for c, got in zip(cases, seen) if got != sum(c) % (1 << width)] == []
