# amaranth: UnusedElaboratable=no
"""RegionWalker against the reference chunk list: random regions at every data width, with
and without random stalls and its own checks, and one chunk per cycle at full rate.

The pure-Python references they are checked against: hw_bytestream_helpers.
"""

import random
from collections import deque

import pytest
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from nicoll.hw.engine.regions import REGION_LAYOUT, chunk_layout, region_checks
from nicoll.hw.engine.walker import RegionWalker

from hw_bytestream_helpers import (region, reference_chunks, random_region, simulate, feed, collect,
                                   CHUNK_FIELDS)


def test_reference_chunks():
    """The reference itself, on regions worked out by hand (W = 8)."""
    assert reference_chunks(region(5, 12), 8) == [
        {"row": 0, "lo": 5, "n": 3, "last": 0}, {"row": 1, "lo": 0, "n": 8, "last": 0},
        {"row": 2, "lo": 0, "n": 1, "last": 1}]
    # Runs of 3 every 6 bytes, 7 bytes: 3 at 2, 3 at 8, 1 at 14.
    assert reference_chunks(region(2, 7, 3, 6), 8) == [
        {"row": 0, "lo": 2, "n": 3, "last": 0}, {"row": 1, "lo": 0, "n": 3, "last": 0},
        {"row": 1, "lo": 6, "n": 1, "last": 1}]
    # Runs of 2 every 2 bytes are contiguous bytes but separate chunks.
    assert [c["n"] for c in reference_chunks(region(0, 5, 2, 2), 8)] == [2, 2, 1]
    assert reference_chunks(region(9, 0, 3, 6), 8) == []


class CheckedWalker(wiring.Component):
    """A walker built with ``checked=True`` whose user makes the checks with
    ``region_checks`` as the region is offered (the engine makes them a cycle ahead)."""

    def __init__(self, data_width):
        self.data_width = data_width
        super().__init__({
            "command": In(stream.Signature(REGION_LAYOUT)),
            "chunks": Out(stream.Signature(chunk_layout(
                data_width, 32 - (data_width // 8).bit_length() + 1))),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.walker = walker = RegionWalker(self.data_width, checked=True)
        command = walker.command
        m.d.comb += [command.valid.eq(self.command.valid),
                     self.command.ready.eq(command.ready),
                     command.payload.region.eq(self.command.payload),
                     self.busy.eq(walker.busy)]
        m.d.comb += region_checks(command.payload.checks, self.command.payload,
                                  self.data_width)
        wiring.connect(m, walker.chunks, wiring.flipped(self.chunks))
        return m


@pytest.mark.parametrize("data_width,seed,stall,checked,length_bits", [
    (64, 0, 0.3, False, 32), (128, 1, 0.0, False, 32), (256, 2, 0.5, False, 32),
    (512, 3, 0.2, False, 32), (64, 4, 0.3, True, 32), (256, 5, 0.2, True, 32),
    # Counts as narrow as the regions allow (lengths up to 40 rows, runs up to 3 rows
    # longer than the length): 320 + 24 bytes below 2**9, 1 280 + 96 below 2**11.
    (64, 6, 0.3, False, 9), (256, 7, 0.2, False, 11),
])
def test_walker_random_regions(data_width, seed, stall, checked, length_bits):
    """Random regions, contiguous and strided, with random gaps and ready: exactly the
    reference chunks (with ``checked``, the checks made by the walker's user; with
    ``length_bits``, byte counts that narrow)."""
    lanes = data_width // 8
    rng = random.Random(seed)
    regions = [random_region(rng, lanes, 1 << 31) for _ in range(60)]
    assert all(r["length"] < 1 << length_bits for r in regions)
    # Empty regions give nothing, wherever they are (including first and last).
    for where in (0, 7, 8, 19, len(regions)):
        regions.insert(where, region(rng.randrange(1 << 31), 0, rng.randrange(9),
                                     rng.randrange(64)))
    expected = [c for r in regions for c in reference_chunks(r, lanes)]
    dut = (CheckedWalker(data_width) if checked
           else RegionWalker(data_width, length_bits=length_bits))
    got = []

    mirrored = []

    async def main(ctx):
        while len(got) < len(expected):
            await ctx.tick()
        for _ in range(5):
            await ctx.tick()
            assert not ctx.get(dut.busy) and not ctx.get(dut.chunks.valid)

    async def mirrors(ctx):
        # The flag the walker keeps a run ahead equals its compare wherever it is read
        # (with `checked`, the walker is inside the wrapper: its chunks above check it).
        pairs = [x for pair in dut.mirrors for x in pair]
        while True:
            values = (await ctx.tick().sample(*pairs))[-len(pairs):]
            assert values[0::2] == values[1::2], values
            mirrored.append(values[0])

    background = [] if checked else [mirrors]
    simulate(dut, main, background=background + [
        feed(dut.command, deque(regions), random.Random(seed + 100), stall),
        collect(dut.chunks, CHUNK_FIELDS, random.Random(seed + 200), stall, got)])
    assert [c for _, c in got] == expected
    # The mirror saw run steps both ways (a run step whose next run ends the region, and one
    # whose does not).
    assert checked or {0, 1} <= set(mirrored)


def test_walker_full_rate():
    """Back-to-back regions: one chunk per clock with no gap between regions (an empty region
    costs one cycle); ``busy`` while a region's chunks are not all taken."""
    lanes = 8
    regions = [region(3, 64 * lanes), region(100, 40, 3, 5), region(7, 1), region(0, 0),
               region(64, 16 * lanes, lanes, 2 * lanes)]
    expected = [c for r in regions for c in reference_chunks(r, lanes)]
    dut = RegionWalker(64)
    got = []
    busy = []

    async def main(ctx):
        while len(got) < len(expected):
            busy.append(ctx.get(dut.busy))
            await ctx.tick()
        busy.append(ctx.get(dut.busy))

    simulate(dut, main, background=[
        feed(dut.command, deque(regions), None, 0),
        collect(dut.chunks, CHUNK_FIELDS, None, 0, got)])
    assert [c for _, c in got] == expected
    # The first command enters the input slice in cycle 1, the walker takes it in cycle 2 and
    # offers its first chunk in cycle 3, one per cycle on: the 65 chunks of the first region
    # (64 rows' worth, unaligned) take cycles 3 .. 67.  The empty region is taken with the
    # last chunk before it and costs one idle cycle.
    before_empty = sum(len(reference_chunks(r, lanes)) for r in regions[:3])
    assert [cycle for cycle, _ in got] == \
        list(range(3, 3 + before_empty)) + list(range(4 + before_empty, 4 + len(expected)))
    assert busy == ([0, 0] + [1] * before_empty + [0] + [1] * (len(expected) - before_empty)
                    + [0])
