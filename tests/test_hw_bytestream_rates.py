# amaranth: UnusedElaboratable=no
"""RowPacker and RowUnpacker rates: throughput and latency at full rate, the packer at any
alignment, the unpacker with a partial last beat, and every ``ready`` a function of the
unit's registers alone.

The pure-Python references they are checked against: hw_bytestream_helpers.
"""

import random
from collections import deque

import numpy as np
import pytest

from nicoll.hw.engine.packer import RowPacker
from nicoll.hw.engine.unpacker import RowUnpacker

from hw_bytestream_helpers import (region, region_addresses, reference_chunks, random_region,
                                   pack_beats, reference_unpack, simulate, offer, feed, collect,
                                   BEAT_FIELDS, ROW_FIELDS, packer_rows)


def test_packer_throughput():
    """An unaligned message of K beats (K + 1 rows) fed one row per clock: its beats leave one
    per clock, the last K + 7 cycles after the first row went in.  Two more messages follow;
    the first of them ends with more than a beat's bytes left, which costs one idle cycle."""
    data_width, lanes, K = 256, 32, 48
    rng = random.Random(5)
    mem = np.frombuffer(rng.randbytes(128 * lanes), dtype=np.uint8)
    # The second message's last row leaves 25 + 9 bytes (one idle cycle), the third's 1 + 3.
    regions = [region(5, K * lanes), region(lanes * 60 + 7, 3 * lanes + 2),
               region(lanes * 80 + 31, lanes + 4)]
    rows, payloads = [], []
    for r in regions:
        payloads.append(mem[region_addresses(r)[0]].tobytes())
        for c in reference_chunks(r, lanes):
            row_bytes = mem[c["row"] * lanes:(c["row"] + 1) * lanes].tobytes()
            rows.append({"data": int.from_bytes(row_bytes, "little"), "lo": c["lo"],
                         "n": c["n"], "last": c["last"]})
    dut = RowPacker(data_width)
    got, row_cycles = [], []
    expected = [b for p in payloads for b in pack_beats(p, lanes)]

    async def main(ctx):
        while len(got) < len(expected):
            await ctx.tick()

    async def rows_in(ctx):
        cycle = 0
        for row in rows:
            cycle += await offer(ctx, dut.rows, row)
            row_cycles.append(cycle)

    simulate(dut, main, rows_in, background=[collect(dut.beats, BEAT_FIELDS, None, 0, got)])
    assert [b for _, b in got] == expected
    beat_cycles = [cycle for cycle, _ in got]
    # Rows: K + 1, then 4 for the second message, one idle cycle, 3 for the third.
    assert row_cycles == list(range(1, K + 6)) + list(range(K + 7, K + 10))
    # The first beat needs the first two rows (cycles 1 and 2) and, six stages later (the
    # skid buffer, three rotator stages, the merge, the output FIFO), is taken in cycle 8;
    # the K-th and last in cycle K + 7.  Each later message starts with a partial row too,
    # so its first beat comes two cycles after the previous message's last.
    assert beat_cycles == list(range(8, K + 8)) + [K + 9, K + 10, K + 11, K + 12, K + 14, K + 15]


@pytest.mark.parametrize("dst", ["unaligned", "short_runs"])
def test_unpacker_throughput(dst):
    """K full beats of a message into an unaligned contiguous region or into runs of 3 bytes:
    one chunk per clock either way, at a fixed latency."""
    data_width, lanes, K = 256, 32, 48
    rng = random.Random(6)
    payload = rng.randbytes(K * lanes)
    if dst == "unaligned":
        r = region(7, K * lanes)
    else:
        r = region(3, K * lanes, 3, lanes + 1)
    chunks = reference_chunks(r, lanes)
    dut = RowUnpacker(data_width)
    got = []

    async def beats_in(ctx):
        for beat in pack_beats(payload, lanes):
            await offer(ctx, dut.beats, beat)

    async def chunks_in(ctx):
        for k, chunk in enumerate(chunks):
            # The chunk input is a skid buffer and a slice: the first three chunks are taken
            # at once, the rest one per clock as they are planned.
            assert await offer(ctx, dut.chunks, chunk) == 1, k

    async def main(ctx):
        while len(got) < len(chunks):
            await ctx.tick()

    simulate(dut, main, beats_in, chunks_in,
             background=[collect(dut.rows, ROW_FIELDS, None, 0, got)])
    expected, _, _ = reference_unpack([(payload, chunks)])
    assert [row for _, row in got] == expected
    cycles = [cycle for cycle, _ in got]
    # Beat 1 and chunk 1 are taken in cycle 1; the beat is in its slot in cycle 2, the chunk
    # in the head slice (after the skid buffer) in cycle 3, where it is planned; its row
    # passes the plan's register, two rotator stages and the output register (the last
    # rotator stage) and is taken in cycle 7, one per cycle on.
    assert cycles == list(range(7, 7 + len(chunks))), cycles


def test_packer_rate_any_alignment():
    """Back-to-back messages of random alignment and run length: one row taken per clock,
    except one cycle after each message whose last row leaves more than a beat to send."""
    data_width, lanes = 256, 32
    rng = random.Random(60)
    limit = 1 << 14
    mem = rng.randbytes(limit)
    regions = [random_region(rng, lanes, limit) for _ in range(30)]
    rows = packer_rows([(mem, r) for r in regions], lanes, rng)
    # A message's final beat takes a cycle of its own when its bytes reach past a beat
    # boundary with its last row: when the last row ends past a multiple of W bytes.
    flushes = []
    for r in regions:
        chunks = reference_chunks(r, lanes)
        before_last = (r["length"] - chunks[-1]["n"]) % lanes
        flushes.append(before_last + chunks[-1]["n"] > lanes)
    expected_cycles, cycle = [], 0
    for r, flush in zip(regions, flushes):
        for _ in reference_chunks(r, lanes):
            cycle += 1
            expected_cycles.append(cycle)
        cycle += flush
    dut = RowPacker(data_width)
    row_cycles, got = [], []

    async def rows_in(ctx):
        cycle = 0
        for row in rows:
            cycle += await offer(ctx, dut.rows, row)
            row_cycles.append(cycle)

    simulate(dut, rows_in, background=[collect(dut.beats, BEAT_FIELDS, None, 0, got)])
    assert row_cycles == expected_cycles


def random_payload(port, rng):
    bits = port.payload.as_value()
    return rng.getrandbits(len(bits))


@pytest.mark.parametrize("unit", ["packer", "unpacker"])
def test_ready_from_flops(unit):
    """Each ``ready`` a unit gives is a function of its registers alone: flipping the
    downstream ``ready`` and every input's ``valid`` and payload within a cycle leaves it
    unchanged.  Random traffic, so the registers go through many states."""
    rng = random.Random(63)
    if unit == "packer":
        dut = RowPacker(64)
        inputs, output = [dut.rows], dut.beats
    else:
        dut = RowUnpacker(64)
        inputs, output = [dut.beats, dut.chunks], dut.rows

    async def main(ctx):
        for _ in range(2000):
            for port in inputs:
                ctx.set(port.valid, rng.random() < 0.7)
                ctx.set(port.payload.as_value(), random_payload(port, rng))
            ctx.set(output.ready, rng.random() < 0.7)
            readies = [ctx.get(port.ready) for port in inputs]
            state = ([ctx.get(port.valid) for port in inputs],
                     [ctx.get(port.payload.as_value()) for port in inputs],
                     ctx.get(output.ready))
            for _ in range(3):
                for port in inputs:
                    ctx.set(port.valid, rng.random() < 0.5)
                    ctx.set(port.payload.as_value(), random_payload(port, rng))
                ctx.set(output.ready, rng.random() < 0.5)
                assert [ctx.get(port.ready) for port in inputs] == readies
            for port, valid, payload in zip(inputs, *state[:2]):
                ctx.set(port.valid, valid)
                ctx.set(port.payload.as_value(), payload)
            ctx.set(output.ready, state[2])
            await ctx.tick()

    simulate(dut, main)


@pytest.mark.parametrize("data_width", [64, 256])
def test_unpacker_rate_partial_last_beat(data_width):
    """Messages ending in a partial beat, into short runs, fed at full rate: the rows of
    each message leave one per clock but for at most one idle cycle (the partial last beat
    joining the plan's view)."""
    lanes = data_width // 8
    rng = random.Random(64)
    messages = []
    for _ in range(6):
        n_bytes = rng.randint(2, 4) * lanes + rng.randint(1, lanes - 1)
        dst = region(rng.randrange(lanes), n_bytes, 3, 5)
        messages.append((rng.randbytes(n_bytes), reference_chunks(dst, lanes)))
    dut = RowUnpacker(data_width)
    got = []
    beats = [b for payload, _ in messages for b in pack_beats(payload, lanes)]
    chunks = [c for _, cs in messages for c in cs]

    async def main(ctx):
        while len(got) < len(chunks):
            await ctx.tick()

    simulate(dut, main, background=[
        feed(dut.beats, deque(beats), None, 0),
        feed(dut.chunks, deque(chunks), None, 0),
        collect(dut.rows, ROW_FIELDS, None, 0, got)])
    assert [row for _, row in got] == reference_unpack(messages)[0]
    cycles = [cycle for cycle, _ in got]
    start = 0
    for _, cs in messages:
        mine = cycles[start:start + len(cs)]
        assert mine[-1] - mine[0] <= len(cs), mine
        start += len(cs)
    # Three-byte chunks use a beat in fewer than W/3 + 1 cycles: the beats keep up, so the
    # whole run is one row per clock but for those idle cycles.
    assert cycles[-1] - cycles[0] <= len(chunks) - 1 + len(messages)
