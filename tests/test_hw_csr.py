# amaranth: UnusedElaboratable=no
"""CSRSlave: every register of the generated map through the AXI4-Lite slave."""

import random

import pytest

from nicoll.hw.regmap.generated import REGMAP
from nicoll.hw.bus.csr import CSRSlave
from nicoll.hw.regmap import Block, BusResponse, Field, Register, RegisterMap
from amaranth.sim import Simulator

from nicoll.sim.testbench import PERIOD, run_testbenches
from nicoll.sim.axi_model import axil_read, axil_write

OKAY, DECERR = BusResponse.OKAY, BusResponse.DECERR


class Model:
    """What the access rules of nicoll.hw.regmap say a bus master sees; built from the map."""

    def __init__(self, regmap, inputs):
        self.regmap = regmap
        self.inputs = inputs            # (block, register, field) -> value of hw-driven fields
        self.storage = {}               # register address -> value of its writable bits
        self.shadow = {}
        for r in regmap.registers():
            self.storage[r.address] = sum((f.reset or 0) << f.lsb
                                          for f in r.fields if f.sw_writable)

    def _block(self, reg):
        return next(b for b in self.regmap.blocks if reg in b.registers)

    def value(self, reg):
        value = 0
        for f in reg.fields:
            if f.hw_driven:
                v = self.inputs[self._block(reg).name, reg.name, f.name]
            elif f.sw_writable:
                v = (self.storage[reg.address] >> f.lsb) if f.sw_readable else 0
            else:
                v = f.reset
            value |= (v & ((1 << f.width) - 1)) << f.lsb
        return value

    def read(self, addr):
        hit = self.regmap.decode(addr)
        if hit is None:
            return 0, DECERR
        reg, word = hit
        if word == 0:
            value = self.value(reg)
            self.shadow[reg.address] = value
        else:
            value = self.shadow.get(reg.address, 0)
        return (value >> (32 * word)) & 0xffff_ffff, OKAY

    def write(self, addr, data, strb):
        hit = self.regmap.decode(addr)
        if hit is None:
            return DECERR
        reg, word = hit
        mask = 0
        for f in reg.fields:
            if f.sw_writable:
                mask |= f.mask
        bytemask = sum(0xff << (8 * i) for i in range(4) if strb >> i & 1) << (32 * word)
        mask &= bytemask
        old = self.storage[reg.address]
        self.storage[reg.address] = (old & ~mask) | ((data << (32 * word)) & mask)
        return OKAY


def hw_driven_ports():
    return {(b.name, r.name, f.name): f.width
            for b in REGMAP.blocks for r in b.registers for f in r.fields if f.hw_driven}


def random_inputs(rng):
    return {name: rng.getrandbits(width) for name, width in hw_driven_ports().items()}








def mapped_words():
    return [r.address + 4 * w for r in REGMAP.registers() for w in range(r.words)]


def unmapped_words(addr_width=16):
    mapped = set(mapped_words())
    inside = [a for a in range(0, REGMAP.size, 4) if a not in mapped]
    beyond = [REGMAP.size, 0x800, 0x1000, (1 << addr_width) - 4]
    return inside + [a for a in beyond if a not in mapped]


SCRATCH = REGMAP.block("global").register("SCRATCH")
CYCLES = REGMAP.block("global").register("CYCLES")


# ---------------------------------------------------------------------------------------------

def test_ports():
    dut = CSRSlave()
    members = dut.signature.members
    for (block, register, field), width in hw_driven_ports().items():
        # Each block's registers are one member, the block's view flipped: on the slave a
        # field the block drives is an input.
        assert members[block].flow.name == "In"
        inner = members[block].signature.members[register.lower()].signature.members
        assert inner[field.lower()].flow.name == "In"
        assert len(dut.port(block, register, field)) == width
    # The ports NicCore relies on.
    for key, width in [(("global", "CYCLES", "count"), 64), (("global", "NODE_ID", "id"), 16),
                       (("global", "DATA_WIDTH", "bits"), 16),
                       (("global", "MAX_NODES", "count"), 16),
                       (("global", "MEM_SIZE", "bytes"), 32)]:
        assert len(dut.port(*key)) == width
    assert dut.bus.awaddr.shape().width == 16


def test_port():
    dut = CSRSlave()
    assert dut.port("global", "CYCLES", "count") is getattr(dut, "global").cycles.count
    assert dut.port("engine", "CONTROL", "push") is dut.engine.control.push
    with pytest.raises(TypeError, match=r"^Register name must be a string, not 3$"):
        dut.port("global", 3, "count")
    with pytest.raises(ValueError, match=r"^The register map has no port for field "
                                         r"global\.SCRATCH\.value$"):
        dut.port("global", "SCRATCH", "value")


def test_register_signature():
    from nicoll.hw.bus.csr import register_signature
    engine = REGMAP.block("engine")
    members = register_signature(engine).members
    # Read by the block: CONTROL's strobes; driven by it: STATUS.
    assert members["control"].signature.members["push"].flow.name == "In"
    assert members["status"].signature.members["busy"].flow.name == "Out"
    # Registers with no port (ID, VERSION: constants) have no member.
    assert "id" not in members and "version" not in members


def test_constructor_errors():
    with pytest.raises(TypeError, match=r"^Register map must be a RegisterMap, not 'REGMAP'$"):
        CSRSlave("REGMAP")
    with pytest.raises(TypeError, match=r"^Address width must be an integer, not '16'$"):
        CSRSlave(addr_width="16")
    with pytest.raises(ValueError, match=(
            rf"^Address width must be between {REGMAP.addr_width} \(to reach every register\) "
            rf"and 32, not 8$")):
        CSRSlave(addr_width=8)
    with pytest.raises(ValueError, match=r"and 32, not 33$"):
        CSRSlave(addr_width=33)
    bad = RegisterMap(name="bad", desc="", size=8, blocks=(
        Block(name="b", offset=0, desc="", registers=(
            Register(name="R", address=0, offset=0, width=32, desc="", fields=(
                Field(name="f", lsb=0, width=8, sw="rw", hw="w", reset=0),
            )),
        )),
    ))
    with pytest.raises(ValueError, match=r"^Field b\.R\.f has unsupported access "
                                         r"sw='rw' hw='w'$"):
        CSRSlave(bad)


def test_other_map():
    """A map with a hardware-readable storage field, a gap and a write-only field."""
    other = RegisterMap(name="other", desc="", size=0x10, blocks=(
        Block(name="blk", offset=0, desc="", registers=(
            Register(name="CTRL", address=0x4, offset=0x4, width=32, desc="", fields=(
                Field(name="go", lsb=0, width=1, sw="rw", hw="r", reset=1),
                Field(name="mode", lsb=4, width=6, sw="rw", hw="r", reset=0x15),
                Field(name="key", lsb=16, width=8, sw="w", hw="na", reset=0),
                Field(name="ver", lsb=28, width=4, sw="r", hw="na", reset=0xa),
            )),
        )),
    ))
    dut = CSRSlave(other, addr_width=4)
    model = Model(other, {})
    rng = random.Random(7)

    async def tb(ctx):
        assert ctx.get(dut.blk.ctrl.go) == 1 and ctx.get(dut.blk.ctrl.mode) == 0x15
        assert await axil_read(ctx, dut.bus, 0x4) == model.read(0x4)
        for _ in range(40):
            addr, data, strb = rng.choice([0x0, 0x4, 0x8, 0xc]), rng.getrandbits(32), rng.getrandbits(4)
            assert await axil_write(ctx, dut.bus, addr, data, strb) == model.write(addr, data, strb)
            assert await axil_read(ctx, dut.bus, 0x4) == model.read(0x4)
            storage = model.storage[0x4]
            assert ctx.get(dut.blk.ctrl.go) == storage & 1
            assert ctx.get(dut.blk.ctrl.mode) == (storage >> 4) & 0x3f

    run_testbenches(dut, tb)


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


@pytest.mark.parametrize("aw_delay,w_delay", [(0, 0), (0, 3), (3, 0), (1, 2), (2, 1)])
def test_write_channel_order(aw_delay, w_delay):
    """AW and W accepted independently: AW first, W first, or together."""
    dut = CSRSlave()
    bus = dut.bus

    async def tb(ctx):
        for n, value in enumerate((0x1111_1111, 0x2222_2222)):
            pending = {"aw": True, "w": True}
            got_b = None
            for cycle in range(12):
                if pending["aw"] and cycle == aw_delay:
                    ctx.set(bus.awaddr, SCRATCH.address)
                    ctx.set(bus.awvalid, 1)
                if pending["w"] and cycle == w_delay:
                    ctx.set(bus.wdata, value)
                    ctx.set(bus.wstrb, 0xf)
                    ctx.set(bus.wvalid, 1)
                ctx.set(bus.bready, 1)
                *_, awready, wready, bvalid, bresp = await ctx.tick().sample(
                    bus.awready, bus.wready, bus.bvalid, bus.bresp)
                if ctx.get(bus.awvalid) and awready:
                    pending["aw"] = False
                    ctx.set(bus.awvalid, 0)
                if ctx.get(bus.wvalid) and wready:
                    pending["w"] = False
                    ctx.set(bus.wvalid, 0)
                if bvalid:
                    assert got_b is None
                    got_b = (cycle, bresp)
            # The write commits the cycle after the later of the two channels is taken (its
            # address decoded as it was taken), and the response shows the cycle after that.
            assert got_b == (max(aw_delay, w_delay) + 2, OKAY)
            assert await axil_read(ctx, bus, SCRATCH.address) == (value, OKAY)

    run_testbenches(dut, tb)


def test_slices_hold_two_beats_and_pair_in_order():
    """AW and W each wait in a two-entry slice: two addresses are taken before any data, a
    third waits; the data pair with them in order, each write committing the cycle after its
    pair is complete and answering the cycle after that."""
    dut = CSRSlave()
    bus = dut.bus

    async def tb(ctx):
        ctx.set(bus.bready, 1)
        ctx.set(bus.awaddr, SCRATCH.address)
        ctx.set(bus.awvalid, 1)
        *_, awready = await ctx.tick().sample(bus.awready)
        assert awready                         # first AW taken
        ctx.set(bus.awaddr, 0)                 # the second names the read-only ID register
        *_, awready = await ctx.tick().sample(bus.awready)
        assert awready                         # second AW taken: the slice is full
        ctx.set(bus.awvalid, 0)
        for _ in range(3):
            assert not ctx.get(bus.awready) and not ctx.get(bus.bvalid)
            await ctx.tick()
        ctx.set(bus.wdata, 0xabcd_ef01)
        ctx.set(bus.wstrb, 0xf)
        ctx.set(bus.wvalid, 1)
        *_, wready = await ctx.tick().sample(bus.wready)
        assert wready and not ctx.get(bus.bvalid)   # first pair complete: commits now
        ctx.set(bus.wdata, 0x7777_7777)
        *_, wready = await ctx.tick().sample(bus.wready)
        assert wready                          # second W taken as the first write commits
        assert ctx.get(bus.bvalid) and ctx.get(bus.bresp) == OKAY
        ctx.set(bus.wvalid, 0)
        await ctx.tick()                       # the second pair commits
        assert ctx.get(bus.bvalid) and ctx.get(bus.bresp) == OKAY
        await ctx.tick()
        assert not ctx.get(bus.bvalid)
        assert ctx.get(bus.awready) and ctx.get(bus.wready)
        assert await axil_read(ctx, bus, SCRATCH.address) == (0xabcd_ef01, OKAY)

    run_testbenches(dut, tb)


def _stream_test(seed, stall, n_writes=60, n_reads=60):
    """Independent random AW, W, B, AR, R timing; returns cycles taken."""
    rng = random.Random(seed)
    dut = CSRSlave()
    bus = dut.bus
    inputs = random_inputs(rng)
    model = Model(REGMAP, inputs)
    read_only = [a for a in mapped_words() if not REGMAP.decode(a)[0].sw_writable]
    unmapped = unmapped_words()
    writes = [(rng.choice([SCRATCH.address] * 4 + read_only + unmapped),
               rng.getrandbits(32), rng.getrandbits(4)) for _ in range(n_writes)]
    reads = [rng.choice(read_only + unmapped + [CYCLES.address] * 4 + [CYCLES.address + 4] * 4)
             for _ in range(n_reads)]
    expect_b = [model.write(*w) for w in writes]
    expect_r = [model.read(a) for a in reads]
    got_b, got_r = [], []
    cycles = {}
    rngs = {k: random.Random(f"{seed}{k}") for k in ("aw", "w", "b", "ar", "r")}

    def stalled(k):
        return rngs[k].random() < stall

    async def aw(ctx):
        for addr, _, _ in writes:
            while stalled("aw"):
                await ctx.tick()
            ctx.set(bus.awaddr, addr)
            ctx.set(bus.awvalid, 1)
            await ctx.tick().until(bus.awready)
            ctx.set(bus.awvalid, 0)

    async def w(ctx):
        for _, data, strb in writes:
            while stalled("w"):
                await ctx.tick()
            ctx.set(bus.wdata, data)
            ctx.set(bus.wstrb, strb)
            ctx.set(bus.wvalid, 1)
            await ctx.tick().until(bus.wready)
            ctx.set(bus.wvalid, 0)

    async def ar(ctx):
        for addr in reads:
            while stalled("ar"):
                await ctx.tick()
            ctx.set(bus.araddr, addr)
            ctx.set(bus.arvalid, 1)
            await ctx.tick().until(bus.arready)
            ctx.set(bus.arvalid, 0)

    async def b(ctx):
        n = 0
        while len(got_b) < len(writes):
            ready = not stalled("b")
            ctx.set(bus.bready, ready)
            *_, bvalid, bresp = await ctx.tick().sample(bus.bvalid, bus.bresp)
            n += 1
            if bvalid and ready:
                got_b.append(bresp)
        cycles["b"] = n

    async def r(ctx):
        n = 0
        while len(got_r) < len(reads):
            ready = not stalled("r")
            ctx.set(bus.rready, ready)
            *_, rvalid, rdata, rresp = await ctx.tick().sample(bus.rvalid, bus.rdata, bus.rresp)
            n += 1
            if rvalid and ready:
                got_r.append((rdata, rresp))
        cycles["r"] = n

    async def final(ctx):
        for key, value in inputs.items():
            ctx.set(dut.port(*key), value)
        # Wait for the streams, then check what the writes left behind.
        while len(got_b) < len(writes) or len(got_r) < len(reads):
            await ctx.tick()
        assert await axil_read(ctx, bus, SCRATCH.address) == model.read(SCRATCH.address)

    run_testbenches(dut, aw, w, b, ar, r, final)
    assert got_b == expect_b
    assert got_r == expect_r
    return cycles


@pytest.mark.parametrize("seed", range(3))
def test_random_backpressure(seed):
    _stream_test(seed, stall=0.5)


def test_back_to_back_throughput():
    cycles = _stream_test(10, stall=0.0, n_writes=100, n_reads=100)
    # One write and one read complete every cycle once the pipeline is full (a write fills
    # two stages; a read five: the AR slice, decode, gather, and the output queue's write
    # and output register).
    assert cycles["b"] <= 100 + 2
    assert cycles["r"] <= 100 + 5
