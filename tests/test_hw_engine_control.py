# amaranth: UnusedElaboratable=no
"""Engine: control and counters: ARM starting at START_AT, backpressure that never changes
results, CONTROL.clear zeroing the counters, a strided region past memory that never runs,
STEP counting finished commands, and the barrier command.

The harness (node 0 sending to itself) and the memory model: hw_engine_helpers.
"""

import random

import pytest

from nicoll.hw.engine import COUNTERS
from nicoll.hw.ops import DType, ReduceOp

from hw_engine_helpers import (MEM_SIZE, LOCAL_FIRST, RECEIVED_FIRST, simulate, region, command,
                               addresses, Model, random_image, errors, counters, memory, pulse,
                               push, clear, wait_stopped, settle, run_schedule)


def test_arm_starts_at_start_at():
    """With START_AT in the future the engine waits, armed, and starts in the cycle
    ``now == start_at``; with START_AT in the past it starts in the first cycle it is armed."""
    image = random_image(random.Random(19))
    model = Model(image)

    async def main(ctx, dut):
        engine = dut.engine
        cmd = command(send=region(0, 24), recv=region(512, 24))
        for delay in (40, 1, -5):
            await clear(ctx, dut)
            assert await push(ctx, dut, cmd) == set()
            start_at = ctx.get(dut.now) + delay
            ctx.set(engine.start_at, start_at)
            armed_in = ctx.get(dut.now)
            await pulse(ctx, engine.arm)
            # After the edge that ends cycle ``now - 1``: busy iff that cycle started it.
            while not ctx.get(engine.busy):
                now = ctx.get(dut.now)
                assert ctx.get(engine.armed) and now - 1 < max(start_at, armed_in + 1)
                await ctx.tick()
            assert ctx.get(dut.now) - 1 == max(start_at, armed_in + 1)
            assert not ctx.get(engine.armed)
            await wait_stopped(ctx, dut)
            # The start's cycle, shown from the cycle after busy rises (the host reads it
            # after a run).
            assert ctx.get(engine.started_at) == max(start_at, armed_in + 1)
            assert ctx.get(engine.done) and errors(ctx, dut) == set()
            model.run(cmd)
            assert memory(ctx, dut) == bytes(model.mem)
            assert ctx.get(engine.finished_at) > ctx.get(engine.started_at)

    simulate(image, main, seed=7)


SCHEDULE = [
    command(send=region(5, 77, 7, 10), recv=region(513, 77), tag=1, packet_beats=2),
    command(send=region(200, 48), recv=region(520, 48, 8, 12), action=LOCAL_FIRST, tag=2),
    command(send=region(520, 48, 8, 12), recv=region(900, 48), action=RECEIVED_FIRST, tag=3),
    command(send=region(900, 48), recv=region(704, 48, 4, 4), tag=4, packet_beats=1),
    command(send=region(300, 100), recv=region(620, 100), action=LOCAL_FIRST, tag=5),
]


@pytest.mark.parametrize("stall", [0.0, 0.3, 0.8])
def test_backpressure_never_changes_results(stall):
    """The same schedule of copies and reduces gives the same memory whatever the loop's
    backpressure; stall_cycles counts the cycles the engine offered a beat the loop refused."""
    image = random_image(random.Random(31))

    async def main(ctx, dut):
        model = Model(image)
        got = await run_schedule(ctx, dut, model, SCHEDULE, op=ReduceOp.MAX, dtype=DType.INT32)
        # The engine's own receiver stalls the loop too (a cycle per packet header).
        assert 0 < got["stall_cycles"] < got["busy_cycles"]
        if stall:
            assert got["stall_cycles"] > got["busy_cycles"] * stall / 4

    simulate(image, main, stall=stall, seed=10)


def test_clear_zeroes_counters():
    """CONTROL.clear empties the queue and clears STATUS, ERRORS and the counters."""
    image = random_image(random.Random(37))

    async def main(ctx, dut):
        cmd = command(send=region(0, 40), recv=region(512, 40), action=LOCAL_FIRST)
        got = await run_schedule(ctx, dut, Model(image), [cmd])
        assert all(got[name] for name in COUNTERS if name != "stall_cycles")
        await pulse(ctx, dut.engine.clear)
        assert ctx.get(dut.engine.queued) == 0 and not ctx.get(dut.engine.done)
        assert counters(ctx, dut) == dict.fromkeys(COUNTERS, 0)

    simulate(image, main, seed=11)


def test_strided_region_past_memory_never_runs():
    """A strided region whose runs pass the end of memory although ``offset + length`` does
    not is queued (the push checks a region's own fields, as the device model does) and
    stops the run with ``region`` when its first row outside memory comes up, writing
    nothing outside the region."""
    image = random_image(random.Random(41))

    async def main(ctx, dut):
        for cmd in (command(send=region(1000, 8, 4, 100), recv=region(512, 8)),
                    command(send=region(0, 16), recv=region(992, 16, 4, 12))):
            await clear(ctx, dut)
            assert await push(ctx, dut, cmd) == set()
            await pulse(ctx, dut.engine.go)
            await wait_stopped(ctx, dut)
            assert errors(ctx, dut) == {"region"}
            assert not ctx.get(dut.engine.busy) and not ctx.get(dut.engine.done)
            await settle(ctx, dut)
            inside = set(addresses(cmd["recv"]))
            after = memory(ctx, dut)
            assert all(after[a] == image[a] for a in range(MEM_SIZE) if a not in inside)

    simulate(image, main, seed=12)


def test_step_counts_finished_commands():
    """STEP: commands of the queue finished since the start (STATUS: the command running)."""
    image = random_image(random.Random(47))
    cmds = [command(send=region(0, 64), recv=region(512, 64), tag=1),
            command(send=region(64, 64), recv=region(600, 64), tag=2)]

    async def main(ctx, dut):
        engine = dut.engine
        for cmd in cmds:
            assert await push(ctx, dut, cmd) == set()
        await pulse(ctx, engine.go)
        seen = set()
        while not ctx.get(engine.done):
            received = ctx.get(engine.bytes_received)
            seen.add((ctx.get(engine.step), received))
            if received < 64:           # the first message has not all arrived
                assert ctx.get(engine.step) == 0, sorted(seen)
            await ctx.tick()
        assert ctx.get(engine.step) == 2

    simulate(image, main, seed=14)


def test_barrier_command():
    """A barrier command signals done for the barrier unit's current barrier once the command
    before it has finished, and holds the queue until the unit moves on to the next one."""
    image = random_image(random.Random(53))
    model = Model(image)
    cmds = [command(send=region(0, 40), recv=region(512, 40), action=LOCAL_FIRST, tag=1),
            command(barrier=1),
            command(send=region(512, 40), recv=region(800, 40), tag=2)]

    async def main(ctx, dut):
        engine = dut.engine
        ctx.set(engine.op, ReduceOp.SUM)
        ctx.set(engine.dtype, DType.INT32)
        ctx.set(engine.barrier_seq, 5)
        for cmd in cmds:
            assert await push(ctx, dut, cmd) == set()
        await pulse(ctx, engine.go)
        while not ctx.get(engine.barrier_done):
            await ctx.tick()
        assert ctx.get(engine.barrier_done_seq) == 5
        # The reduce has landed: the barrier waits for every earlier write.
        model.run(cmds[0], ReduceOp.SUM, DType.INT32)
        assert memory(ctx, dut) == bytes(model.mem)
        await ctx.tick()
        for _ in range(100):
            assert not ctx.get(engine.barrier_done) and ctx.get(engine.busy)
            assert ctx.get(engine.bytes_sent) == 40
            await ctx.tick()
        ctx.set(engine.barrier_seq, 6)
        await wait_stopped(ctx, dut)
        assert ctx.get(engine.done) and errors(ctx, dut) == set()
        model.run(cmds[2])
        assert memory(ctx, dut) == bytes(model.mem)
        assert ctx.get(engine.bytes_sent) == ctx.get(engine.bytes_received) == 80

    simulate(image, main, seed=15)
