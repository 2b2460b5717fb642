"""SkidBuffer: order, no loss under any valid/ready pattern, full rate, registered ready."""

import random

import pytest
from amaranth.lib import data
from amaranth.sim import Simulator

from nicoll.hw import skid as skid_mod
from nicoll.hw.skid import SkidBuffer

PERIOD = 1e-8


def test_all():
    assert skid_mod.__all__ == ["SkidBuffer"]


def simulate(dut, *testbenches, background=()):
    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    for tb in background:
        sim.add_testbench(tb, background=True)
    for tb in testbenches:
        sim.add_testbench(tb)
    sim.run()


@pytest.mark.parametrize("in_stall,out_stall", [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.6, 0.6)])
def test_order_and_loss(in_stall, out_stall):
    layout = data.StructLayout({"a": 12, "b": 1})
    dut = SkidBuffer(layout)
    rng = random.Random(f"{in_stall}{out_stall}")
    items = [{"a": rng.getrandbits(12), "b": rng.getrandbits(1)} for _ in range(300)]
    got = []
    cycles = {}

    async def source(ctx):
        for item in items:
            while rng.random() < in_stall:
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
            ctx.set(dut.i.payload, item)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

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
        assert cycles["n"] == len(items) + 1


def test_ready_is_registered():
    dut = SkidBuffer(8)

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
