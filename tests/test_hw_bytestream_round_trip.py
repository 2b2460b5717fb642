# amaranth: UnusedElaboratable=no
"""walker -> memory read -> RowPacker => RowUnpacker <- walker with random gaps and ready on
every stream; packer and unpacker each alone under random backpressure against the
reference beats and rows; the unpacker buffering the next message and taking an empty last
beat.

The pure-Python references they are checked against: hw_bytestream_helpers.
"""

import random
from collections import deque

import numpy as np
import pytest
from amaranth.hdl import Module

from nicoll.hw.engine.packer import RowPacker
from nicoll.hw.engine.unpacker import RowUnpacker
from nicoll.hw.engine.walker import RegionWalker

from hw_bytestream_helpers import (check_mirrors, region, region_addresses, reference_chunks, random_region,
                                   pack_beats, reference_unpack, simulate, offer, feed, collect,
                                   CHUNK_FIELDS, BEAT_FIELDS, ROW_FIELDS, run_unpacker, packer_rows)


@pytest.mark.parametrize("data_width,seed,stall", [
    (64, 10, 0.0), (64, 11, 0.4), (256, 12, 0.3), (256, 13, 0.0),
])
def test_round_trip(data_width, seed, stall):
    """walker -> memory read -> packer => unpacker <- walker, with random gaps and ready on
    every stream; destination memory changes exactly at the destination regions."""
    lanes = data_width // 8
    rng = random.Random(seed)
    limit = 1 << 16
    src_mem = np.frombuffer(rng.randbytes(limit), dtype=np.uint8)
    dst_mem = np.frombuffer(rng.randbytes(limit), dtype=np.uint8).copy()
    expected_mem = dst_mem.copy()
    pairs = []
    for _ in range(40):
        src = random_region(rng, lanes, limit)
        dst = random_region(rng, lanes, limit, length=src["length"])
        pairs.append((src, dst))
    payloads, dst_chunks = [], []
    for src, dst in pairs:
        payload = src_mem[region_addresses(src)[0]]
        payloads.append(payload.tobytes())
        expected_mem[region_addresses(dst)[0]] = payload
        dst_chunks += reference_chunks(dst, lanes)

    src_walker, dst_walker = RegionWalker(data_width), RegionWalker(data_width)
    packer, unpacker = RowPacker(data_width), RowUnpacker(data_width)
    top = Module()
    top.submodules += [src_walker, dst_walker, packer, unpacker]

    def read_row(chunk):
        row = chunk["row"]
        return {"data": int.from_bytes(src_mem[row * lanes:(row + 1) * lanes].tobytes(),
                                       "little"),
                "lo": chunk["lo"], "n": chunk["n"], "last": chunk["last"]}

    def stream_rng(name):
        return random.Random(f"{seed}/{name}")

    src_chunks, beats_link, dst_link = deque(), deque(), deque()
    beats, rows = [], []

    async def main(ctx):
        while sum(r["last"] for _, r in rows) < len(pairs):
            await ctx.tick()
        for _ in range(20):
            await ctx.tick()
        assert not ctx.get(unpacker.overrun) and not ctx.get(unpacker.underrun)
        assert not ctx.get(src_walker.busy) and not ctx.get(dst_walker.busy)

    simulate(top, main, background=[
        feed(src_walker.command, deque(src for src, _ in pairs), stream_rng("src"), stall),
        feed(dst_walker.command, deque(dst for _, dst in pairs), stream_rng("dst"), stall),
        collect(src_walker.chunks, CHUNK_FIELDS, stream_rng("c1"), stall, src_chunks),
        feed(packer.rows, src_chunks, stream_rng("r1"), stall, read_row),
        collect(packer.beats, BEAT_FIELDS, stream_rng("b1"), stall, beats_link, beats),
        feed(unpacker.beats, beats_link, stream_rng("b2"), stall),
        collect(dst_walker.chunks, CHUNK_FIELDS, stream_rng("c2"), stall, dst_link),
        feed(unpacker.chunks, dst_link, stream_rng("c3"), stall),
        collect(unpacker.rows, ROW_FIELDS, stream_rng("rows"), stall, rows),
    ])

    # The packed stream: full beats but each message's last, keep a low mask, unkept lanes
    # zero, every message starting in a beat of its own.
    assert [b for _, b in beats] == [b for p in payloads for b in pack_beats(p, lanes)]

    # The row writes: one per destination chunk, exactly its lanes.
    rows = [r for _, r in rows]
    assert [(r["row"], r["mask"], r["last"]) for r in rows] == \
        [(c["row"], ((1 << c["n"]) - 1) << c["lo"], c["last"]) for c in dst_chunks]
    for r in rows:
        lane_bytes = np.frombuffer(r["data"].to_bytes(lanes, "little"), dtype=np.uint8)
        written = np.array([(r["mask"] >> k) & 1 for k in range(lanes)], dtype=bool)
        assert not lane_bytes[~written].any(), "a lane outside the mask is not zero"
        base = r["row"] * lanes
        dst_mem[base:base + lanes][written] = lane_bytes[written]
    assert np.array_equal(dst_mem, expected_mem)


@pytest.mark.parametrize("data_width,seed,stall", [
    (64, 40, 0.5), (64, 41, 0.2), (256, 42, 0.5), (256, 43, 0.15),
])
def test_packer_random_backpressure(data_width, seed, stall):
    """Random regions (every alignment, runs shorter and longer than a row) with random gaps
    on ``rows`` and random ``ready`` on ``beats``: exactly the reference beats, the stream
    rules kept on both sides, and the credit and the output FIFO's room held every cycle."""
    lanes = data_width // 8
    rng = random.Random(seed)
    limit = 1 << 14
    mem = rng.randbytes(limit)
    regions = [random_region(rng, lanes, limit) for _ in range(50)]
    payloads = [bytes(mem[a] for a in region_addresses(r)[0].tolist()) for r in regions]
    rows = packer_rows([(mem, r) for r in regions], lanes, rng)
    expected = [b for p in payloads for b in pack_beats(p, lanes)]
    dut = RowPacker(data_width)
    got = []

    async def main(ctx):
        while len(got) < len(expected):
            await ctx.tick()
        for _ in range(10):
            await ctx.tick()
            assert not ctx.get(dut.beats.valid)

    simulate(dut, main, background=[
        check_mirrors(dut),
        feed(dut.rows, deque(rows), random.Random(f"{seed}r"), stall),
        collect(dut.beats, BEAT_FIELDS, random.Random(f"{seed}b"), stall, got)],
        watchdog_cycles=50_000)
    assert [b for _, b in got] == expected


@pytest.mark.parametrize("data_width,seed,stall", [
    (64, 50, 0.5), (64, 51, 0.1), (256, 52, 0.5), (256, 53, 0.2),
])
def test_unpacker_random_backpressure(data_width, seed, stall):
    """Random destination regions (every alignment and chunk size) for exact messages, with
    random gaps on ``beats`` and ``chunks`` and random ``ready`` on ``rows``: exactly the
    reference rows, no flag."""
    lanes = data_width // 8
    rng = random.Random(seed)
    messages = []
    for _ in range(50):
        dst = random_region(rng, lanes, 1 << 20)
        messages.append((rng.randbytes(dst["length"]), reference_chunks(dst, lanes)))
    rows, flags = run_unpacker(data_width, messages, stall=stall, seed=seed)
    assert rows == reference_unpack(messages)[0]
    assert flags == {"overrun": 0, "underrun": 0}


def test_unpacker_buffers_next_message():
    """Beats are taken into the four slots and the input register before any chunk
    arrives, across a message boundary; the chunks then run one per clock."""
    data_width, lanes = 64, 8
    rng = random.Random(61)
    first, second = rng.randbytes(2 * lanes), rng.randbytes(2 * lanes)
    beats = pack_beats(first, lanes) + pack_beats(second, lanes)
    chunks = reference_chunks(region(3, 2 * lanes), lanes) + \
        reference_chunks(region(100, 2 * lanes, 5, 7), lanes)
    # The first beat of a third message, whose chunks never come.
    extra = pack_beats(rng.randbytes(lanes), lanes)[0]
    dut = RowUnpacker(data_width)
    got = []

    async def main(ctx):
        for k, beat in enumerate(beats + [extra]):
            assert await offer(ctx, dut.beats, beat) == 1, k
        # Four beats fill the slots and a fifth the input register; a sixth would wait.
        ctx.set(dut.beats.valid, 1)
        assert not ctx.get(dut.beats.ready)
        ctx.set(dut.beats.valid, 0)
        for chunk in chunks:
            await offer(ctx, dut.chunks, chunk)
        while len(got) < len(chunks):
            await ctx.tick()

    simulate(dut, main, background=[collect(dut.rows, ROW_FIELDS, None, 0, got)])
    assert [row for _, row in got] == reference_unpack([(first, chunks[:3]),
                                                        (second, chunks[3:])])[0]
    cycles = [cycle for cycle, _ in got]
    assert cycles == list(range(cycles[0], cycles[0] + len(chunks)))


def test_unpacker_empty_last_beat():
    """A message whose last beat has no byte (``keep`` zero) after full beats: its chunks are
    served and nothing is flagged."""
    lanes = 8
    rng = random.Random(62)
    payload = rng.randbytes(2 * lanes)
    beats = pack_beats(payload, lanes)
    beats[-1]["last"] = 0
    beats.append({"data": 0, "keep": 0, "last": 1})
    chunks = reference_chunks(region(5, 2 * lanes), lanes)
    dut = RowUnpacker(64)
    got = []

    async def main(ctx):
        for beat in beats:
            await offer(ctx, dut.beats, beat)
        for chunk in chunks + reference_chunks(region(0, 3), lanes):
            await offer(ctx, dut.chunks, chunk)
        # A following message of three bytes still lines up.
        await offer(ctx, dut.beats, pack_beats(b"abc", lanes)[0])
        for _ in range(12):
            await ctx.tick()
        assert not ctx.get(dut.overrun) and not ctx.get(dut.underrun)

    simulate(dut, main, background=[collect(dut.rows, ROW_FIELDS, None, 0, got)])
    assert [row for _, row in got] == reference_unpack(
        [(payload, chunks), (b"abc", reference_chunks(region(0, 3), lanes))])[0]
