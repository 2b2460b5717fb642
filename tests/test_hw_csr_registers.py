# amaranth: UnusedElaboratable=no
"""CSRSlave: every register of the generated map through the AXI4-Lite slave: single-pulse
and software-modified fields, every register reading its value, SCRATCH round trips and
strobes, unmapped and read-only addresses, and the wide-register latch.
"""

import random

import pytest

from nicoll.hw.regmap.generated import REGMAP
from nicoll.hw.bus.csr import CSRSlave
from nicoll.hw.regmap import Block, Field, Register, RegisterMap
from amaranth.sim import Simulator

from nicoll.sim.testbench import PERIOD, run_testbenches
from nicoll.sim.axi_model import axil_read, axil_write

from hw_csr_helpers import (OKAY, DECERR, Model, random_inputs, mapped_words, unmapped_words,
                            SCRATCH, CYCLES)


def test_single_pulse_and_swmod_fields():
    """A single-pulse field pulses for one cycle and reads 0; a swmod field pulses the cycle
    after a write that touches one of its bytes, when it already holds the new value."""
    other = RegisterMap(name="other", desc="", size=0x10, blocks=(
        Block(name="blk", offset=0, desc="", registers=(
            Register(name="CTRL", address=0x0, offset=0x0, width=32, desc="", fields=(
                Field(name="go", lsb=0, width=1, sw="w", hw="r", reset=0, singlepulse=True),
                Field(name="sel", lsb=8, width=8, sw="rw", hw="r", reset=0, swmod=True),
            )),
            Register(name="DATA", address=0x8, offset=0x8, width=64, desc="", fields=(
                Field(name="value", lsb=0, width=64, sw="rw", hw="r", reset=0, swmod=True),
            )),
        )),
    ))
    dut = CSRSlave(other, addr_width=4)
    seen = []

    async def watch(ctx):
        async for _, _, go, sel_mod, sel, data_mod, data in ctx.tick().sample(
                dut.blk.ctrl.go, dut.blk.ctrl.sel_swmod, dut.blk.ctrl.sel,
                dut.blk.data.value_swmod, dut.blk.data.value):
            if go or sel_mod or data_mod:
                seen.append((go, sel_mod, sel if sel_mod else None,
                             data_mod, data if data_mod else None))

    async def tb(ctx):
        await axil_write(ctx, dut.bus, 0x0, 0x0000_2A01, 0b0011)    # go and sel = 42
        await axil_write(ctx, dut.bus, 0x0, 0x0000_0001, 0b0001)    # go only: sel untouched
        await axil_write(ctx, dut.bus, 0x0, 0x0000_0000, 0b0001)    # go = 0: no pulse
        await axil_write(ctx, dut.bus, 0xC, 0x1234_5678, 0b1111)    # upper word of DATA
        for _ in range(4):
            await ctx.tick()
        assert await axil_read(ctx, dut.bus, 0x0) == (42 << 8, OKAY)   # go reads 0

    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(watch, background=True)
    sim.add_testbench(tb)
    sim.run()
    assert seen == [(1, 1, 42, 0, None), (1, 0, None, 0, None),
                    (0, 0, None, 1, 0x1234_5678 << 32)], seen
    with pytest.raises(ValueError, match=r"Single-pulse field b\.R\.p must be readable by "
                                         r"hardware"):
        CSRSlave(RegisterMap(name="bad", desc="", size=8, blocks=(
            Block(name="b", offset=0, desc="", registers=(
                Register(name="R", address=0, offset=0, width=32, desc="", fields=(
                    Field(name="p", lsb=0, width=1, sw="w", hw="na", reset=0,
                          singlepulse=True),)),)),)))


def test_every_register_reads_its_value():
    rng = random.Random(1)
    dut = CSRSlave()
    inputs = random_inputs(rng)
    model = Model(REGMAP, inputs)

    async def tb(ctx):
        for key, value in inputs.items():
            ctx.set(dut.port(*key), value)
        for block in REGMAP.blocks:
            data, resp = await axil_read(ctx, dut.bus, block.register("ID").address)
            assert (data, resp) == (block.id_tag, OKAY)
            data, resp = await axil_read(ctx, dut.bus, block.register("VERSION").address)
            field = block.register("VERSION").field
            assert resp == OKAY
            assert ((data >> field("major").lsb) & 0xffff,
                    (data >> field("minor").lsb) & 0xffff) == block.version
        for addr in mapped_words():
            assert await axil_read(ctx, dut.bus, addr) == model.read(addr), hex(addr)
        # The byte-select bits of an address are ignored.
        for addr in mapped_words():
            assert await axil_read(ctx, dut.bus, addr | rng.randrange(1, 4)) == model.read(addr)

    run_testbenches(dut, tb)


def test_scratch_round_trip_and_strobes():
    rng = random.Random(2)
    dut = CSRSlave()
    model = Model(REGMAP, random_inputs(rng))

    async def tb(ctx):
        assert await axil_read(ctx, dut.bus, SCRATCH.address) == (SCRATCH.field("value").reset, OKAY)
        for value in (0xdeadbeef, 0, 0xffff_ffff, 0x1234_5678):
            assert await axil_write(ctx, dut.bus, SCRATCH.address, value) == OKAY
            assert await axil_read(ctx, dut.bus, SCRATCH.address) == (value, OKAY)
        model.write(SCRATCH.address, 0x1234_5678, 0xf)
        for strb in range(16):
            data = rng.getrandbits(32)
            assert await axil_write(ctx, dut.bus, SCRATCH.address, data, strb) == OKAY
            model.write(SCRATCH.address, data, strb)
            assert await axil_read(ctx, dut.bus, SCRATCH.address) == model.read(SCRATCH.address)

    run_testbenches(dut, tb)


def test_unmapped_and_read_only():
    rng = random.Random(3)
    dut = CSRSlave()
    inputs = random_inputs(rng)
    model = Model(REGMAP, inputs)

    async def snapshot(ctx):
        return [await axil_read(ctx, dut.bus, a) for a in mapped_words()]

    async def tb(ctx):
        for key, value in inputs.items():
            ctx.set(dut.port(*key), value)
        assert await axil_write(ctx, dut.bus, SCRATCH.address, 0x5a5a_a5a5) == OKAY
        model.write(SCRATCH.address, 0x5a5a_a5a5, 0xf)
        before = await snapshot(ctx)
        assert before == [model.read(a) for a in mapped_words()]
        for addr in unmapped_words():
            assert await axil_read(ctx, dut.bus, addr) == (0, DECERR), hex(addr)
            assert await axil_write(ctx, dut.bus, addr, 0xffff_ffff) == DECERR, hex(addr)
        read_only = [a for a in mapped_words() if not REGMAP.decode(a)[0].sw_writable]
        assert read_only
        for addr in read_only:
            assert await axil_write(ctx, dut.bus, addr, rng.getrandbits(32)) == OKAY, hex(addr)
        assert await snapshot(ctx) == before

    run_testbenches(dut, tb)


def test_wide_register_latch():
    dut = CSRSlave()
    low, high = CYCLES.address, CYCLES.address + 4

    async def tb(ctx):
        ctx.set(dut.port("global", "CYCLES", "count"), 0xaaaa_0001_bbbb_0002)
        assert await axil_read(ctx, dut.bus, low) == (0xbbbb_0002, OKAY)
        ctx.set(dut.port("global", "CYCLES", "count"), 0xcccc_0003_dddd_0004)
        # The high word is the one latched by the low-word read, not the live value.
        assert await axil_read(ctx, dut.bus, high) == (0xaaaa_0001, OKAY)
        assert await axil_read(ctx, dut.bus, high) == (0xaaaa_0001, OKAY)
        assert await axil_read(ctx, dut.bus, low) == (0xdddd_0004, OKAY)
        assert await axil_read(ctx, dut.bus, high) == (0xcccc_0003, OKAY)
        # Read-only: writing either word changes nothing.
        assert await axil_write(ctx, dut.bus, low, 0) == OKAY
        assert await axil_write(ctx, dut.bus, high, 0) == OKAY
        assert await axil_read(ctx, dut.bus, low) == (0xdddd_0004, OKAY)
        assert await axil_read(ctx, dut.bus, high) == (0xcccc_0003, OKAY)

    run_testbenches(dut, tb)
