# amaranth: UnusedElaboratable=no
"""sim.axi_model: burst splitting and the number of cycles each transaction takes."""

import random

import pytest
from amaranth.sim import Simulator

from nicoll.hw.regmap.generated import REGMAP
from nicoll.hw.bus.csr import CSRSlave
from nicoll.hw.bus.devmem import DeviceMemory
from nicoll.hw.regmap import BusResponse
from nicoll.sim.axi_model import axi_bursts, axi_read, axi_write, axil_read, axil_write
from nicoll.sim.testbench import PERIOD


@pytest.mark.parametrize("beat_bytes", [4, 8, 32, 64])
def test_bursts_are_legal_and_cover_every_byte(beat_bytes):
    rng = random.Random(beat_bytes)
    for _ in range(300):
        addr = rng.randrange(1 << 20)
        length = rng.choice([1, 2, beat_bytes - 1, beat_bytes, 4096, rng.randrange(1, 70000)])
        covered = bytearray(length)
        for start, beats in axi_bursts(addr, length, beat_bytes):
            assert 1 <= len(beats) <= 256
            row = start - start % beat_bytes
            last_byte = start + sum(count for _, _, count in beats) - 1
            assert start // 4096 == last_byte // 4096, "burst crosses 4 KiB"
            for k, (offset, lane, count) in enumerate(beats):
                # Beat k covers row + k * beat_bytes (A3.4.1, full-width INCR beats).
                assert (addr + offset) - (addr + offset) % beat_bytes == row + k * beat_bytes
                assert lane == (addr + offset) % beat_bytes and lane + count <= beat_bytes
                for i in range(offset, offset + count):
                    covered[i] += 1
        assert covered == bytes([1]) * length
    assert axi_bursts(100, 0, 8) == []
    with pytest.raises(ValueError, match=r"^Address and length must be non-negative, "
                                         r"not -1, 4$"):
        axi_bursts(-1, 4, 8)


def test_register_write_takes_three_cycles_read_six():
    dut = CSRSlave()
    scratch = REGMAP.block("global").register("SCRATCH").address
    ticks = {"n": 0}

    async def clock(ctx):
        async for _ in ctx.tick():
            ticks["n"] += 1

    async def tb(ctx):
        t0 = ticks["n"]
        assert await axil_write(ctx, dut.bus, scratch, 0xcafe_f00d) == BusResponse.OKAY
        t1 = ticks["n"]
        assert await axil_read(ctx, dut.bus, scratch) == (0xcafe_f00d, BusResponse.OKAY)
        t2 = ticks["n"]
        # A write goes through the AW and W slices (its address decoded on the way in),
        # commits from them, then the B handshake; a read goes through the AR slice, its
        # decode and gather stages and the output queue (write, output register), then the
        # R handshake.
        assert (t1 - t0, t2 - t1) == (3, 6)

    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(clock, background=True)
    sim.add_testbench(tb)
    sim.run()


def test_zero_length_and_empty():
    dut = DeviceMemory(1024, 64, addr_width=16)

    async def tb(ctx):
        assert await axi_write(ctx, dut.axi, 8, b"") == BusResponse.OKAY
        assert await axi_read(ctx, dut.axi, 8, 0) == (b"", BusResponse.OKAY)

    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(tb)
    sim.run()
