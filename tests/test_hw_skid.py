"""SkidBuffer: order, no loss under any valid/ready pattern, full rate, registered ready.
CheckedRing: the same, and a flag that follows the entry it was computed for.
OneEntrySlice: order, no loss, half rate, registered ready."""

import random

import pytest
from amaranth.lib import data
from amaranth.sim import Simulator

from nicoll.hw.lib.skid import CheckedRing, OneEntrySlice, SkidBuffer
from nicoll.sim.testbench import PERIOD, stream_put, watchdog


def simulate(dut, *testbenches, background=()):
    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(20_000), background=True)
    for tb in background:
        sim.add_testbench(tb, background=True)
    for tb in testbenches:
        sim.add_testbench(tb)
    sim.run()


@pytest.mark.parametrize("kind", ["skid", "skid, mux_output", "one entry"])
@pytest.mark.parametrize("in_stall,out_stall", [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.6, 0.6)])
def test_order_and_loss(in_stall, out_stall, kind):
    layout = data.StructLayout({"a": 12, "b": 1})
    if kind == "one entry":
        dut = OneEntrySlice(layout)
    else:
        dut = SkidBuffer(layout, mux_output=kind.endswith("mux_output"))
    rng = random.Random(f"{in_stall}{out_stall}")
    items = [{"a": rng.getrandbits(12), "b": rng.getrandbits(1)} for _ in range(300)]
    got = []
    cycles = {}

    async def source(ctx):
        for item in items:
            while rng.random() < in_stall:
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
            await stream_put(ctx, dut.i, item)

    async def sink(ctx):
        srng = random.Random(7)
        n = 0
        while len(got) < len(items):
            ready = srng.random() >= out_stall
            ctx.set(dut.o.ready, ready)
            *_, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            n += 1
            if valid and ready:
                got.append({"a": payload.a, "b": payload.b})
        cycles["n"] = n

    simulate(dut, source, sink)
    assert got == items
    if in_stall == out_stall == 0:
        # Full rate through the skid buffers; one transfer every other cycle through the
        # single entry.
        assert cycles["n"] == (2 * len(items) if kind == "one entry" else len(items) + 1)


@pytest.mark.parametrize("mux_output", [False, True])
def test_ready_is_registered(mux_output):
    dut = SkidBuffer(8, mux_output=mux_output)

    async def tb(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 1)
        ctx.set(dut.o.ready, 0)
        await ctx.tick()                  # first entry filled
        ctx.set(dut.i.payload, 2)
        await ctx.tick()                  # second entry filled
        assert not ctx.get(dut.i.ready)
        ctx.set(dut.o.ready, 1)           # no combinational path from o.ready to i.ready
        assert not ctx.get(dut.i.ready)
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == 1
        ctx.set(dut.i.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.i.ready) and ctx.get(dut.o.payload) == 2
        await ctx.tick()
        assert not ctx.get(dut.o.valid)

    simulate(dut, tb)


def test_one_entry_ready_is_registered():
    dut = OneEntrySlice(8)

    async def tb(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 1)
        ctx.set(dut.o.ready, 0)
        assert ctx.get(dut.i.ready)
        await ctx.tick()                  # the entry filled
        ctx.set(dut.i.payload, 2)
        assert not ctx.get(dut.i.ready)
        ctx.set(dut.o.ready, 1)           # no combinational path from o.ready to i.ready
        assert not ctx.get(dut.i.ready)
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == 1
        await ctx.tick()                  # taken: empty, and 2 not yet taken
        assert not ctx.get(dut.o.valid) and ctx.get(dut.i.ready)
        await ctx.tick()                  # 2 taken
        ctx.set(dut.i.valid, 0)
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == 2
        await ctx.tick()
        assert not ctx.get(dut.o.valid)

    simulate(dut, tb)


def test_mux_output_must_be_a_bool():
    with pytest.raises(TypeError, match="mux_output must be a bool, not 1"):
        SkidBuffer(8, mux_output=1)


@pytest.mark.parametrize("head_register", [True, False])
@pytest.mark.parametrize("in_stall,out_stall", [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.6, 0.6)])
def test_checked_ring(in_stall, out_stall, head_register):
    # One process plays source, sink and checker: each cycle the checks offered for the
    # input and for each entry are random, and the flag seen on the output must be the one last
    # offered for the entry now at the head — the input's, if it was loaded last cycle.
    dut = CheckedRing(8, checks=2, head_register=head_register)
    rng = random.Random(f"ring{in_stall}{out_stall}")
    items = [rng.getrandbits(8) for _ in range(300)]
    got = []
    flags_checked = [0]

    async def tb(ctx):
        sent = 0
        held = []               # [payload, flag] per entry, head first, as a reference
        cycles = 0
        while len(got) < len(items):
            assert cycles < 20 * len(items), "the ring stopped moving"
            cycles += 1
            offer = sent < len(items) and rng.random() >= in_stall
            ready = rng.random() >= out_stall
            block_new = rng.getrandbits(2)
            block_entry = [rng.getrandbits(2), rng.getrandbits(2)]
            ctx.set(dut.i.valid, offer)
            ctx.set(dut.i.payload, items[sent] if offer else 0)
            ctx.set(dut.o.ready, ready)
            ctx.set(dut.block_new, block_new)
            ctx.set(dut.block_entry, block_entry)
            assert ctx.get(dut.o.valid) == bool(held)
            assert ctx.get(dut.i.ready) == (len(held) < 2)
            head = ctx.get(dut.head)
            if held:
                assert ctx.get(dut.o.payload) == held[0][0]
                assert ctx.get(dut.entries[head]) == held[0][0]
                assert ctx.get(dut.o_blocked) == held[0][1]
                flags_checked[0] += 1
            # The entries that stay take the checks offered for them by index; the head is
            # entries[head], the one behind it the other.
            index = [head, 1 - head]
            for k, entry in enumerate(held):
                entry[1] = block_entry[index[k]]
            if held and ready:
                got.append(held.pop(0)[0])
            if offer and ctx.get(dut.i.ready):
                held.append([items[sent], block_new])
                sent += 1
            await ctx.tick()

    simulate(dut, tb)
    assert got == items
    assert flags_checked[0] >= len(items)


def test_checked_ring_checks_must_be_positive():
    with pytest.raises(ValueError, match="checks must be a positive integer, not 0"):
        CheckedRing(8, checks=0)
    with pytest.raises(TypeError, match="head_register must be a bool, not 1"):
        CheckedRing(8, head_register=1)
