# amaranth: UnusedElaboratable=no
"""Region walker, row packer and row unpacker against pure-Python references.

The references work on numpy byte arrays and byte addresses: a region is the list of its
byte addresses in stream order, a chunk list is those addresses grouped by (run, row), a
message is the bytes at those addresses.  None of them walks a region the way the gateware
does.
"""

import itertools
import random
from collections import deque

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from nicoll.hw.engine import regions as regions_mod
from nicoll.hw.engine.packer import RowPacker
from nicoll.hw.engine.regions import (REGION_LAYOUT, beat_layout, chunk_layout, read_row_layout,
                                      region_checks, write_row_layout)
from nicoll.hw.engine.unpacker import RowUnpacker
from nicoll.hw.engine.walker import RegionWalker
from nicoll.sim.testbench import PERIOD, watchdog


# ---- References ----------------------------------------------------------------------------

def region(offset, length, run=0, stride=0):
    return {"offset": offset, "length": length, "run": run, "stride": stride}


def region_addresses(r):
    """(byte addresses in stream order, index of the run of each)."""
    length, run, stride = r["length"], r["run"], r["stride"]
    if run == 0 or run >= length:
        run, stride = max(length, 1), 0
    index = np.arange(length, dtype=np.int64)
    run_of = index // run
    return r["offset"] + run_of * stride + index % run, run_of


def reference_chunks(r, lanes):
    addresses, run_of = region_addresses(r)
    chunks = []
    pairs = zip(run_of.tolist(), addresses.tolist())
    for (_, row), group in itertools.groupby(pairs, key=lambda p: (p[0], p[1] // lanes)):
        lane = [a % lanes for _, a in group]
        assert lane == list(range(lane[0], lane[0] + len(lane)))
        chunks.append({"row": row, "lo": lane[0], "n": len(lane), "last": 0})
    if chunks:
        chunks[-1]["last"] = 1
    return chunks


def span(r):
    addresses, _ = region_addresses(r)
    return int(addresses.max()) - r["offset"] + 1 if r["length"] else 0


def random_region(rng, lanes, limit, length=None):
    """A region inside ``0 .. limit``: contiguous, or strided with runs shorter than, equal
    to or longer than a row, tight or with gaps."""
    while True:
        if length is None:
            n = rng.randint(1, 40 * lanes) if rng.random() < 0.15 else rng.randint(1, 5 * lanes)
        else:
            n = length
        if rng.random() < 0.3:
            # The stride of a contiguous region is ignored, so make it anything.
            run = rng.choice([0, n, n + rng.randint(1, 3 * lanes)])
            stride = rng.randrange(1 << 32)
        else:
            run = rng.choice([rng.randint(1, lanes - 1), lanes, rng.randint(lanes + 1, 3 * lanes)])
            stride = run + rng.choice([0, rng.randint(1, lanes), rng.randint(lanes, 3 * lanes)])
        r = region(0, n, run, stride)
        extent = span(r)
        if extent <= limit:
            r["offset"] = rng.randrange(limit - extent + 1)
            return r


def pack_beats(payload, lanes, junk=None):
    """The beats of one message as RowPacker must give them; with ``junk`` (a
    ``random.Random``) the lanes whose keep is clear hold random bytes instead of zeros."""
    beats = []
    for start in range(0, len(payload), lanes):
        piece = payload[start:start + lanes]
        if junk is not None:
            piece += junk.randbytes(lanes - len(piece))
        beats.append({"data": int.from_bytes(piece, "little"),
                      "keep": (1 << min(lanes, len(payload) - start)) - 1,
                      "last": int(start + lanes >= len(payload))})
    return beats


def row_write(row, lo, piece, last):
    return {"row": row, "data": int.from_bytes(piece, "little") << (8 * lo),
            "mask": ((1 << len(piece)) - 1) << lo, "last": last}


def reference_unpack(messages):
    """Rows and flags RowUnpacker gives for ``[(payload, chunks), ...]``: chunks are served in
    order while the payload still holds all of the chunk's bytes; the first that does not fit
    and those after it are dropped, the one with ``last`` giving a mask-zero row."""
    rows, overrun, underrun = [], False, False
    for payload, chunks in messages:
        pos = 0
        for c in chunks:
            if pos + c["n"] > len(payload):
                underrun = True
                rows.append({"row": chunks[-1]["row"], "data": 0, "mask": 0, "last": 1})
                break
            rows.append(row_write(c["row"], c["lo"], payload[pos:pos + c["n"]], c["last"]))
            pos += c["n"]
        else:
            overrun |= pos < len(payload)
    return rows, overrun, underrun


# ---- Testbench helpers ---------------------------------------------------------------------

def simulate(dut, *testbenches, background=(), watchdog_cycles=20_000):
    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(watchdog_cycles), background=True)
    for tb in background:
        sim.add_testbench(tb, background=True)
    for tb in testbenches:
        sim.add_testbench(tb)
    sim.run()


async def offer(ctx, port, payload):
    """Offer one item on ``port`` until it is taken; return the clock cycles that took."""
    ctx.set(port.payload, payload)
    ctx.set(port.valid, 1)
    cycles = 0
    while True:
        # Plain ticks rather than ``tick().until()``: a test failing elsewhere then leaves
        # no half-run async generator behind to complain when it is collected.
        *_, ready = await ctx.tick().sample(port.ready)
        cycles += 1
        if ready:
            ctx.set(port.valid, 0)
            return cycles


def feed(port, queue, rng, stall, encode=None):
    """Offer the items appearing in ``queue`` on ``port``, with a random gap before each."""
    async def run(ctx):
        while True:
            if not queue or (stall and rng.random() < stall):
                ctx.set(port.valid, 0)
                await ctx.tick()
                continue
            item = queue.popleft()
            await offer(ctx, port, encode(item) if encode else item)
    return run


def collect(port, fields, rng, stall, *stores):
    """Take items from ``port`` with random ``ready``; append ``(cycle, item)`` to ``stores``
    (a deque gets the item alone, to be fed on).  Checks the stream rules on the way: valid
    and payload do not change when ready does, and an offered item stays until taken."""
    async def run(ctx):
        cycle, held = 0, None
        payload_bits = port.payload.as_value()
        while True:
            ready = not stall or rng.random() >= stall
            before = ctx.get(port.valid), ctx.get(payload_bits)
            ctx.set(port.ready, ready)
            assert (ctx.get(port.valid), ctx.get(payload_bits)) == before, \
                "valid or payload follows ready"
            if held is not None:
                assert before == (1, held), "an offered item changed before it was taken"
            *_, valid, payload, bits = await ctx.tick().sample(port.valid, port.payload,
                                                               payload_bits)
            cycle += 1
            held = bits if valid and not ready else None
            if valid and ready:
                item = {f: int(getattr(payload, f)) for f in fields}
                for store in stores:
                    store.append(item if isinstance(store, deque) else (cycle, item))
    return run


CHUNK_FIELDS = ("row", "lo", "n", "last")
BEAT_FIELDS = ("data", "keep", "last")
ROW_FIELDS = ("row", "data", "mask", "last")


# ---- Public names and constructors ---------------------------------------------------------

def test_layouts():
    assert REGION_LAYOUT == data.StructLayout({"offset": 32, "length": 32, "run": 32,
                                               "stride": 32})
    assert chunk_layout(64, 29) == data.StructLayout({"row": 29, "lo": 3, "n": 4, "last": 1})
    assert chunk_layout(512, 26) == data.StructLayout({"row": 26, "lo": 6, "n": 7, "last": 1})
    assert read_row_layout(128) == data.StructLayout({"data": 128, "lo": 4, "n": 5, "last": 1})
    assert beat_layout(256) == data.StructLayout({"data": 256, "keep": 32, "last": 1})
    assert write_row_layout(64, 10) == data.StructLayout({"row": 10, "data": 64, "mask": 8,
                                                          "last": 1})


def test_ports():
    walker = RegionWalker(64)
    assert list(walker.signature.members) == ["command", "chunks", "busy"]
    assert walker.signature.members["command"].flow.name == "In"
    assert walker.signature.members["chunks"].flow.name == "Out"
    assert walker.row_bits == 29 and len(walker.chunks.payload.row) == 29
    packer = RowPacker(256)
    assert list(packer.signature.members) == ["rows", "beats"]
    assert packer.signature.members["rows"].flow.name == "In"
    assert len(packer.beats.payload.keep) == 32
    unpacker = RowUnpacker(512, addr_width=20)
    assert list(unpacker.signature.members) == ["beats", "chunks", "rows", "overrun",
                                                "underrun", "clear"]
    assert [unpacker.signature.members[n].flow.name for n in unpacker.signature.members] == \
        ["In", "In", "Out", "Out", "Out", "In"]
    assert unpacker.row_bits == 14 and len(unpacker.rows.payload.mask) == 64


def test_constructor_errors():
    for make in (RegionWalker, RowPacker, RowUnpacker, read_row_layout, beat_layout):
        with pytest.raises(TypeError, match=r"^data_width must be an integer, not '64'$"):
            make("64")
        with pytest.raises(TypeError, match=r"^data_width must be an integer, not True$"):
            make(True)
        with pytest.raises(ValueError, match=r"^data_width must be one of 64, 128, 256, 512, "
                                             r"not 32$"):
            make(32)
    with pytest.raises(TypeError, match=r"^checked must be a bool, not 1$"):
        RegionWalker(64, checked=1)
    with pytest.raises(TypeError, match=r"^length_bits must be an integer, not 16.0$"):
        RegionWalker(64, length_bits=16.0)
    for bad in (0, 33):
        with pytest.raises(ValueError, match=rf"^length_bits must be from 1 to 32, not {bad}$"):
            RegionWalker(64, length_bits=bad)
    for make in (RegionWalker, RowUnpacker):
        with pytest.raises(TypeError, match=r"^Address width must be an integer, not 32.0$"):
            make(64, 32.0)
        with pytest.raises(ValueError, match=r"^Address width must be between 7 and 64 for a "
                                             r"data width of 512, not 6$"):
            make(512, addr_width=6)
        with pytest.raises(ValueError, match=r"^Address width must be between 4 and 64 for a "
                                             r"data width of 64, not 65$"):
            make(64, addr_width=65)
    for make in (chunk_layout, write_row_layout):
        with pytest.raises(TypeError, match=r"^Row address width must be an integer, "
                                             r"not None$"):
            make(64, None)
        with pytest.raises(ValueError, match=r"^Row address width must be between 1 and 64, "
                                             r"not 0$"):
            make(64, 0)
        with pytest.raises(ValueError, match=r"^data_width must be one of 64, 128, 256, 512, "
                                             r"not 100$"):
            make(100, 8)


@pytest.mark.parametrize(("count_bits", "lanes"), [(1, 8), (3, 8), (4, 8), (5, 32),
                                                   (6, 32), (7, 32), (3, 5)])
def test_lanes_below_is_a_thermometer(count_bits, lanes):
    """The lane masks of the packer and unpacker (`_lanes_below`, decoded bit by bit from the
    count rather than by a compare per lane): bit j set exactly when j < count, every count
    of the width, counts at and past the lane count included."""
    count = Signal(count_bits)
    mask = Signal(lanes)
    m = Module()
    m.d.comb += mask.eq(regions_mod._lanes_below(count, lanes))
    seen = []

    async def bench(ctx):
        for value in range(1 << count_bits):
            ctx.set(count, value)
            seen.append((ctx.get(mask), sum(1 << j for j in range(lanes) if j < value)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert len(seen) == 1 << count_bits
    assert [got for got, _ in seen] == [want for _, want in seen]


# ---- RegionWalker ----------------------------------------------------------------------------

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


# ---- RowPacker -> RowUnpacker round trip -----------------------------------------------------

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


# ---- Throughput ----------------------------------------------------------------------------

def test_packer_throughput():
    """An unaligned message of K beats (K + 1 rows) fed one row per clock: its beats leave one
    per clock, the last K + 6 cycles after the first row went in.  Two more messages follow;
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
    # The first beat needs the first two rows (cycles 1 and 2) and, five stages later (the
    # skid buffer, three rotator stages, the merge), is taken in cycle 7; the K-th and last
    # in cycle K + 6.  Each later message starts with a partial row too, so its first beat
    # comes two cycles after the previous message's last.
    assert beat_cycles == list(range(7, K + 7)) + [K + 8, K + 9, K + 10, K + 11, K + 13, K + 14]


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


# ---- Mismatches ----------------------------------------------------------------------------

def run_unpacker(data_width, messages, *, stall, seed, checks=None):
    """Feed ``[(payload, chunks), ...]`` to a RowUnpacker, with junk in the lanes whose keep is
    clear; return its rows and final flags.

    ``checks`` maps a number of messages to ``async check(ctx, dut)``: the inputs pause after
    that many messages and the check runs once all their rows are out and any dropped beats
    are gone."""
    lanes = data_width // 8
    checks = checks or {}
    dut = RowUnpacker(data_width)
    junk = random.Random(f"{seed}j")
    beats_q, chunks_q, got = deque(), deque(), []
    flags = {}

    async def main(ctx):
        done = 0
        for upto in sorted(checks) + [len(messages)]:
            for payload, chunks in messages[done:upto]:
                beats_q.extend(pack_beats(payload, lanes, junk))
                chunks_q.extend(chunks)
            want = len(reference_unpack(messages[:upto])[0])
            while len(got) < want or beats_q or chunks_q:
                await ctx.tick()
            # The item last popped may still be on offer; dropped items go at once.
            for _ in range(8):
                await ctx.tick()
            assert len(got) == want
            assert not ctx.get(dut.beats.valid) and not ctx.get(dut.chunks.valid)
            if upto in checks:
                await checks[upto](ctx, dut)
            done = upto
        flags["overrun"] = ctx.get(dut.overrun)
        flags["underrun"] = ctx.get(dut.underrun)

    async def mirrors(ctx):
        # Flags kept as flops of their own equal what they copy, every cycle.
        pairs = [x for pair in dut.mirrors for x in pair]
        while True:
            values = (await ctx.tick().sample(*pairs))[-len(pairs):]
            assert values[0::2] == values[1::2], values

    simulate(dut, main, background=[
        mirrors,
        feed(dut.beats, beats_q, random.Random(f"{seed}b"), stall),
        feed(dut.chunks, chunks_q, random.Random(f"{seed}c"), stall),
        collect(dut.rows, ROW_FIELDS, random.Random(f"{seed}r"), stall, got),
    ])
    return [row for _, row in got], flags


@pytest.mark.parametrize("stall", [0.0, 0.4])
def test_mismatch_resynchronises(stall):
    """Good, short (underrun), good, long (overrun), good, long, good, with ``clear`` pulsed
    on the way: the flags follow, and every message after a bad one comes through whole."""
    lanes = 8
    rng = random.Random(21)

    def message(n_bytes, dst):
        return rng.randbytes(n_bytes), reference_chunks(dst, lanes)

    short_dst = region(5, 27, 4, 9)
    messages = [
        message(29, region(3, 29)),
        message(20, short_dst),                   # 7 bytes short: underrun
        message(17, region(1, 17, 2, 3)),
        message(40, region(0, 24)),               # two whole beats extra: overrun
        message(13, region(6, 13)),
        message(16, region(0, 15)),               # one byte extra in the last beat: overrun
        message(9, region(2, 9)),
    ]

    def flags_are(overrun, underrun, clear=False):
        async def check(ctx, dut):
            assert (ctx.get(dut.overrun), ctx.get(dut.underrun)) == (overrun, underrun)
            if clear:
                ctx.set(dut.clear, 1)
                await ctx.tick()
                ctx.set(dut.clear, 0)
                assert (ctx.get(dut.overrun), ctx.get(dut.underrun)) == (0, 0)
        return check

    checks = {1: flags_are(0, 0), 2: flags_are(0, 1, clear=True), 3: flags_are(0, 0),
              4: flags_are(1, 0), 5: flags_are(1, 0, clear=True), 6: flags_are(1, 0)}
    rows, flags = run_unpacker(64, messages, stall=stall, seed=21, checks=checks)
    expected, _, _ = reference_unpack(messages)
    assert rows == expected
    assert flags == {"overrun": 1, "underrun": 0}
    # The short message's chunks that fit are written; its last chunk only says "last".
    short_rows = reference_unpack(messages[1:2])[0]
    assert short_rows[-1] == {"row": reference_chunks(short_dst, lanes)[-1]["row"],
                              "data": 0, "mask": 0, "last": 1}
    assert sum(bin(r["mask"]).count("1") for r in short_rows) <= 20


@pytest.mark.parametrize("data_width,seed,stall", [(64, 31, 0.3), (256, 32, 0.0),
                                                   (256, 33, 0.5)])
def test_mismatch_random(data_width, seed, stall):
    """Random messages with random length errors: rows exactly as the reference resynchronises,
    flags set exactly when some message was long or short."""
    lanes = data_width // 8
    rng = random.Random(seed)
    messages = []
    for _ in range(40):
        n_bytes = rng.randint(1, 4 * lanes)
        error = rng.choice([0, 0, -rng.randint(1, lanes + 2), rng.randint(1, 2 * lanes)])
        dst = random_region(rng, lanes, 1 << 20, length=max(1, n_bytes + error))
        messages.append((rng.randbytes(n_bytes), reference_chunks(dst, lanes)))
    expected, overrun, underrun = reference_unpack(messages)
    assert overrun and underrun       # the seeds give both kinds of error
    rows, flags = run_unpacker(data_width, messages, stall=stall, seed=seed)
    assert rows == expected
    assert flags == {"overrun": overrun, "underrun": underrun}


@pytest.mark.parametrize("case", ["after_full_last_beat", "past_last_beat"])
def test_underrun_at_the_end_of_the_bytes(case):
    """A message short of its chunks where the compares of a chunk's tail with the last
    beat's byte count cannot tell on their own: the chunk after one that used the last beat
    to its top lane starts at lane 0 again (of no beat), and a chunk that crosses out of the
    message's last beat must not wait for a beat after it (there is none here).  Either way
    the message ends in its mask-zero row and only ``underrun`` is set."""
    lanes = 8
    rng = random.Random(case)
    if case == "after_full_last_beat":
        payload, dst = rng.randbytes(2 * lanes), region(0, 2 * lanes + 3)
    else:
        payload, dst = rng.randbytes(lanes), region(2, lanes + 3)
    messages = [(payload, reference_chunks(dst, lanes))]
    rows, flags = run_unpacker(64, messages, stall=0.0, seed=71)
    expected, overrun, underrun = reference_unpack(messages)
    assert (overrun, underrun) == (False, True)
    assert rows == expected and expected[-1]["mask"] == 0
    assert flags == {"overrun": 0, "underrun": 1}


# ---- Backpressure, rate and flop ready -------------------------------------------------------

def packer_rows(messages, lanes, rng):
    """The rows a memory read gives RowPacker for ``[(memory, region), ...]``, with random
    bytes in the lanes outside each chunk."""
    rows = []
    for mem, r in messages:
        for c in reference_chunks(r, lanes):
            row_bytes = bytearray(rng.randbytes(lanes))
            base = c["row"] * lanes
            row_bytes[c["lo"]:c["lo"] + c["n"]] = mem[base + c["lo"]:base + c["lo"] + c["n"]]
            rows.append({"data": int.from_bytes(bytes(row_bytes), "little"), "lo": c["lo"],
                         "n": c["n"], "last": c["last"]})
    return rows


@pytest.mark.parametrize("data_width,seed,stall", [
    (64, 40, 0.5), (64, 41, 0.2), (256, 42, 0.5), (256, 43, 0.15),
])
def test_packer_random_backpressure(data_width, seed, stall):
    """Random regions (every alignment, runs shorter and longer than a row) with random gaps
    on ``rows`` and random ``ready`` on ``beats``: exactly the reference beats, the stream
    rules kept on both sides."""
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
