# amaranth: UnusedElaboratable=no
"""Engine: copies and reductions of contiguous and strided regions, sent to itself, under
backpressure and at every alignment; packet headers, the wait for rows still in the ALU, the
clear-to-send around the start, and a queue of several commands.

The harness (node 0 sending to itself) and the memory model: hw_engine_helpers.
"""

import random

import pytest
from amaranth.lib import data

from nicoll.hw.ops import DType, ReduceOp
from nicoll.hw.net.packet import PacketKind, header_beats, packet_header_layout

from hw_engine_helpers import (MEM_SIZE, BEAT, PACKET_BEATS, LOCAL_FIRST, RECEIVED_FIRST, simulate,
                               region, command, addresses, ceil, Model, random_image, errors,
                               counters, memory, pulse, push, clear, wait_stopped, settle,
                               clear_to_send, inject, run_schedule)


@pytest.mark.parametrize("stall", [0.0, 0.5])
def test_copy_contiguous(stall):
    """Self-sends of 1 .. 100 bytes between aligned and unaligned offsets, in packets of
    1 .. 4 beats: the receive region gets the send region's bytes, no other byte changes."""
    rng = random.Random(f"copy{stall}")
    image = random_image(rng)
    model = Model(image)
    cases = [(1, 0, 512, 0), (100, 3, 517, 0), (8, 8, 520, 1), (9, 7, 1015, 4), (64, 0, 960, 2)]
    for _ in range(14):
        length = rng.randrange(1, 101)
        aligned = rng.random() < 0.4
        send = rng.randrange(0, 512 - length)
        recv = rng.randrange(512, MEM_SIZE - length + 1)
        if aligned:
            send, recv = send & ~7, recv & ~7
        cases.append((length, send, recv, rng.randrange(PACKET_BEATS + 1)))

    async def main(ctx, dut):
        for length, send, recv, beats in cases:
            cmd = command(send=region(send, length), recv=region(recv, length),
                          tag=rng.getrandbits(16), packet_beats=beats)
            got = await run_schedule(ctx, dut, model, [cmd])
            assert got["packets_sent"] == ceil(ceil(length, BEAT), beats or PACKET_BEATS) + 1
        assert memory(ctx, dut) != image            # the copies did something

    simulate(image, main, stall=stall, seed=1)


@pytest.mark.parametrize("data_width,stall", [(64, 0.5), (256, 0.0), (256, 0.5)])
def test_packet_headers(data_width, stall):
    """A message cut into packets of 1 and then 3 beats: each DATA header names the packet's
    offset in the message, its byte count and, on the message's last packet only, code bit 0
    (at 256 bits the whole header is the packet's first beat, sent in the cycle after the
    previous packet's last); the copy lands and the byte counter agrees."""
    beat = data_width // 8
    hbeats = header_beats(data_width)
    rng = random.Random(f"headers{data_width}{stall}")
    image = random_image(rng)
    length = 5 * beat + 3
    cases = [(1, 0, 512), (3, 5, 700)]          # (packet beats, send offset, recv offset)
    taken = []

    async def monitor(ctx, dut):
        tx = dut.engine.tx
        async for _, _, valid, ready, beat_ in ctx.tick().sample(tx.valid, tx.ready, tx.payload):
            if valid and ready:
                taken.append((beat_.data, beat_.last))

    async def main(ctx, dut):
        for packet_beats, send, recv in cases:
            taken.clear()
            await clear(ctx, dut)
            cmd = command(send=region(send, length), recv=region(recv, length), tag=7,
                          packet_beats=packet_beats)
            assert await push(ctx, dut, cmd) == set()
            await pulse(ctx, dut.engine.go)
            await wait_stopped(ctx, dut)
            assert errors(ctx, dut) == set() and ctx.get(dut.engine.done)
            await settle(ctx, dut)
            headers, first = [], True
            for k, (word, last) in enumerate(taken):
                if first:
                    bits = sum(taken[k + i][0] << (i * data_width) for i in range(hbeats))
                    headers.append(data.Const(packet_header_layout(), bits))
                first = last
            sent = [(h.addr, h.length, h.code & 1) for h in headers if h.kind == PacketKind.DATA]
            limit = packet_beats * beat
            want = [(off, min(limit, length - off), int(off + limit >= length))
                    for off in range(0, length, limit)]
            assert sent == want
            await ctx.tick()            # the counters run a cycle behind
            assert counters(ctx, dut)["bytes_sent"] == length
            mem = b"".join(ctx.get(dut.memory.data[k]).to_bytes(beat, "little")
                           for k in range(MEM_SIZE // beat))
            assert mem[recv:recv + length] == image[send:send + length]

    simulate(image, main, stall=stall, seed=3, data_width=data_width, monitor=monitor)


def random_strided(rng, length, base, limit):
    run = rng.randrange(1, length) if length > 1 else 1
    stride = run + rng.randrange(0, 12)
    r = region(0, length, run, stride)
    span = max(addresses(r)) + 1
    r["offset"] = rng.randrange(base, limit - span + 1)
    return r


def test_strided():
    """Strided send into a contiguous receive, the reverse, and strided into strided, with
    runs shorter than a row, a row long and longer."""
    rng = random.Random(7)
    image = random_image(rng)
    model = Model(image)
    schedules = [
        [command(send=region(5, 40, 3, 7), recv=region(600, 40))],
        [command(send=region(64, 37), recv=region(601, 37, 5, 9), packet_beats=1)],
        [command(send=region(16, 40, 4, 12), recv=region(512, 40, 8, 8))],
        [command(send=region(0, 30, 30, 40), recv=region(700, 30, 1, 3))],
    ]
    for _ in range(6):
        length = rng.randrange(1, 90)
        send = random_strided(rng, length, 0, 512) if rng.random() < 0.7 \
            else region(rng.randrange(0, 400), length)
        recv = random_strided(rng, length, 512, MEM_SIZE)
        halves = [send, recv] if rng.random() < 0.5 else [recv, send]
        # Either half may be the strided one, in either half of memory; they never overlap.
        schedules.append([command(send=halves[0], recv=halves[1], tag=rng.getrandbits(16),
                                  packet_beats=rng.randrange(PACKET_BEATS + 1))])

    async def main(ctx, dut):
        for cmds in schedules:
            await run_schedule(ctx, dut, model, cmds)

    simulate(image, main, seed=2)


def reduce_cases(rng, aligned_send):
    cases = []
    for _ in range(5):
        elements = rng.randrange(1, 25)
        length = 4 * elements
        send = rng.randrange(0, 512 - length)
        if aligned_send:
            send &= ~3
        if rng.random() < 0.5:
            recv = region(rng.randrange(512, MEM_SIZE - length) & ~3, length)
        else:
            # Runs of whole elements; with a stride of 4 every run is its own chunk, so two
            # chunks of one row follow each other through the ALU.
            run = 4 * rng.randrange(1, 4)
            stride = run + 4 * rng.randrange(0, 3)
            span = (elements * 4 // run) * stride + run
            recv = region(rng.randrange(512, MEM_SIZE - span) & ~3, length, run, stride)
        cases.append((region(send, length), recv))
    return cases


@pytest.mark.parametrize("op,dtype", [(ReduceOp.SUM, DType.INT32), (ReduceOp.MAX, DType.INT32),
                                      (ReduceOp.SUM, DType.FLOAT32)])
def test_reduce(op, dtype):
    """REDUCE_LOCAL_FIRST and REDUCE_RECEIVED_FIRST: the receive region becomes op(local,
    received) element-wise; the ALU takes one beat per (run, row) of the receive region."""
    rng = random.Random(f"reduce{op}{dtype}")
    floats = dtype == DType.FLOAT32
    image = random_image(rng, "float32" if floats else "bytes")
    model = Model(image)
    cases = reduce_cases(rng, aligned_send=floats)
    cases.append((region(0, 8), region(512, 8, 4, 4)))          # both halves of one row

    async def main(ctx, dut):
        for k, (send, recv) in enumerate(cases):
            action = (LOCAL_FIRST, RECEIVED_FIRST)[k % 2]
            cmd = command(send=send, recv=recv, action=action, tag=k,
                          packet_beats=rng.randrange(PACKET_BEATS + 1))
            await run_schedule(ctx, dut, model, [cmd], op=op, dtype=dtype)

    simulate(image, main, stall=0.3, seed=3)


@pytest.mark.parametrize("op,dtype", [(ReduceOp.SUM, DType.INT32), (ReduceOp.SUM, DType.FLOAT32)])
def test_reduce_chunks_of_one_row(op, dtype):
    """At 256 bits a strided receive puts several chunks of one row through the ALU one
    after the other (runs of 4 bytes at a stride of 8: four chunks a row), and the rows
    reduced are then sent on by the next command of the queue: each chunk's read of the
    local row waits for the write of the chunk before it (the scoreboard's entry for the
    row the receive slice offers), each send's read for the reduce's last write."""
    rng = random.Random(f"rows{op}{dtype}")
    image = random_image(rng, "float32" if dtype == DType.FLOAT32 else "bytes")
    model = Model(image)
    schedules = []
    for k, (run, stride) in enumerate([(4, 8), (4, 12), (8, 16), (4, 8)]):
        length = 4 * 12
        recv = region(512 + 4 * k, length, run, stride)
        action = (LOCAL_FIRST, RECEIVED_FIRST)[k % 2]
        schedules.append([
            command(send=region(32 * k, length), recv=recv, action=action, tag=2 * k),
            command(send=recv, recv=region(256 + 32 * k + 4, length), tag=2 * k + 1)])

    async def main(ctx, dut):
        for cmds in schedules:
            await run_schedule(ctx, dut, model, cmds, op=op, dtype=dtype)

    simulate(image, main, seed=5, data_width=256)


def test_send_waits_for_rows_in_the_alu():
    """A command's send reads rows the command before it reduced, while their results are
    still in the ALU: the read waits for the write (the scoreboard's rows of an earlier
    receive).  The second command's clear-to-send arrives early, as from a peer that reached
    its receive first (injected; from the engine's own receive it would come back too late),
    so the send starts as the reduce's last row enters the pipeline; the sent bytes, reduced
    into a third region (a copy would wait for every earlier write), must be the reduced
    ones.  Without the scoreboard they are the bytes from before the reduce."""
    width = 256
    beat = width // 8
    assert header_beats(width) == 1             # the injected clear-to-send is one beat
    rng = random.Random("alu-rows")
    image = random_image(rng, "float32")
    model = Model(image)
    cases = []
    for k, rows in enumerate((1, 2, 3)):
        length = rows * beat
        reduced = region(512 + 128 * k, length)
        # The reduced region's last row first: the row whose result comes out last.
        last_row = region(512 + 128 * k + length - beat, beat)
        cases.append([command(send=region(64 * k, length), recv=reduced,
                              action=LOCAL_FIRST, tag=10 + 2 * k),
                      command(send=last_row, recv=region(256 + 64 * k, beat),
                              action=RECEIVED_FIRST, tag=11 + 2 * k)])

    pending = []        # the tag of the clear-to-send to inject once a data packet leaves

    async def main(ctx, dut):
        for cmds in cases:
            pending.append(cmds[1]["send_tag"])
            await run_schedule(ctx, dut, model, cmds, op=ReduceOp.SUM, dtype=DType.FLOAT32,
                               extra_packets=1)
            assert not pending

    async def monitor(ctx, dut):
        # After the first command's first data beat leaves (its own clear-to-send taken),
        # the second command's arrives.
        tx = dut.engine.tx
        while True:
            await ctx.tick()
            if pending and ctx.get(tx.valid) and ctx.get(tx.ready) and not ctx.get(
                    tx.payload.control):
                await inject(ctx, dut, clear_to_send(pending.pop(), width))

    simulate(image, main, seed=6, data_width=width, monitor=monitor)


def test_clear_to_send_at_every_cycle_around_the_start():
    """A clear-to-send that arrives in any cycle around a send's start (injected, as from a
    peer that reached its receive first) is matched with the tag it writes, never with the
    entry it replaces: the tag check a start loads is computed over two cycles from `cur`,
    and a write in either of them, or in the start's own, must count.  The second command's
    clear-to-send arrives at every cycle of a window around its start (which waits for the
    first command to finish); each run's tags differ from the last run's, so a stale entry
    is a mismatch (a protocol error)."""
    width = 256
    beat = width // 8
    assert header_beats(width) == 1             # the injected clear-to-send is one beat
    image = random_image(random.Random("cts-window"))
    model = Model(image)
    # Delays 20-23 put the write two cycles before the start, one before, in it and after.
    delays = range(17, 25)
    state = {"tag": None, "delay": None}

    async def main(ctx, dut):
        for delay in delays:
            tags = (40 + 2 * delay, 41 + 2 * delay)
            state.update(tag=tags[1], delay=delay)
            cmds = [command(send=region(0, 2 * beat), recv=region(512, 2 * beat), tag=tags[0]),
                    command(send=region(64, beat), recv=region(768, beat), tag=tags[1])]
            await run_schedule(ctx, dut, model, cmds, extra_packets=1)
            assert state["tag"] is None, f"the clear-to-send at delay {delay} was not taken"

    async def monitor(ctx, dut):
        # `delay` cycles after the first command's first data beat leaves (its own
        # clear-to-send taken), the second command's clear-to-send.
        tx = dut.engine.tx
        while True:
            await ctx.tick()
            if state["tag"] is None or not (ctx.get(tx.valid) and ctx.get(tx.ready)
                                            and not ctx.get(tx.payload.control)):
                continue
            if state["delay"]:
                await ctx.tick().repeat(state["delay"])
            await inject(ctx, dut, clear_to_send(state["tag"], width))
            state["tag"] = None

    simulate(image, main, seed=8, data_width=width, monitor=monitor)


def test_queue_of_commands():
    """Several commands in one queue, each reading what the one before wrote: a copy then a
    reduce into the copied bytes; a reduce then a send of the bytes just reduced into another
    reduce (the send's reads wait on the scoreboard for rows still in the ALU); two reduces
    into the same bytes; a reduce then a send of its bytes into a copy (the copy waits for
    the whole write pipeline); four commands back to back."""
    rng = random.Random(11)
    image = random_image(rng)
    model = Model(image)
    schedules = [
        [command(send=region(3, 40), recv=region(512, 40), tag=1),
         command(send=region(100, 40), recv=region(512, 40), action=LOCAL_FIRST, tag=2)],
        [command(send=region(200, 24), recv=region(600, 24), action=RECEIVED_FIRST, tag=3),
         command(send=region(600, 24), recv=region(704, 24), action=LOCAL_FIRST, tag=4)],
        [command(send=region(40, 16), recv=region(640, 16), action=LOCAL_FIRST, tag=11),
         command(send=region(60, 16), recv=region(640, 16), action=RECEIVED_FIRST, tag=12)],
        [command(send=region(200, 16), recv=region(608, 16), action=LOCAL_FIRST, tag=5),
         command(send=region(612, 8), recv=region(800, 8), tag=6)],
        [command(send=region(8, 12), recv=region(516, 12, 4, 8), action=LOCAL_FIRST, tag=7),
         command(send=region(516, 12, 4, 8), recv=region(900, 12, 4, 4),
                 action=RECEIVED_FIRST, tag=8, packet_beats=1),
         command(send=region(900, 12, 4, 4), recv=region(520, 12), action=LOCAL_FIRST,
                 tag=9, fence=1),
         command(send=region(512, 32), recv=region(960, 32), tag=10)],
    ]

    async def main(ctx, dut):
        for cmds in schedules:
            await run_schedule(ctx, dut, model, cmds, op=ReduceOp.SUM, dtype=DType.INT32)

    simulate(image, main, seed=4)
