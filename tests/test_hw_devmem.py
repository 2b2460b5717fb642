# amaranth: UnusedElaboratable=no
"""DeviceMemory: AXI4 bursts against a byte-level reference model."""

import random

import pytest
from amaranth.sim import Simulator

from nicoll.sim.testbench import PERIOD, run_testbenches, watchdog

from nicoll.hw.bus.axi import BURST_FIXED, BURST_INCR, BURST_WRAP
from nicoll.hw.bus.devmem import DeviceMemory
from nicoll.hw.regmap import BusResponse
from nicoll.sim.axi_model import axi_read, axi_write

OKAY, SLVERR, DECERR = BusResponse.OKAY, BusResponse.SLVERR, BusResponse.DECERR


class Model:
    """Byte array with the address rules of IHI0022E A3.4.1."""

    def __init__(self, size, beat_bytes):
        self.mem = bytearray(size)
        self.size = size
        self.beat_bytes = beat_bytes

    def addresses(self, addr, size, burst, beats):
        n = 1 << size
        if burst == BURST_FIXED:
            return [addr] * beats
        return [addr] + [(addr // n) * n + k * n for k in range(1, beats)]

    def lanes(self, addr, size):
        """Byte lanes a beat at ``addr`` of transfer size ``size`` may use."""
        n = 1 << size
        lo = addr % self.beat_bytes
        hi = (addr // n) * n % self.beat_bytes + n
        return range(lo, hi)

    def write(self, addr, size, burst, beats):
        if burst not in (BURST_INCR, BURST_FIXED) or (1 << size) > self.beat_bytes:
            return SLVERR
        resp = OKAY
        for a, (data, strb) in zip(self.addresses(addr, size, burst, len(beats)), beats):
            if a >= self.size:
                resp = DECERR
                continue
            base = a - a % self.beat_bytes
            for lane in range(self.beat_bytes):
                if strb >> lane & 1:
                    self.mem[base + lane] = (data >> (8 * lane)) & 0xff
        return resp

    def read(self, addr, size, burst, beats):
        out = []
        bad = burst not in (BURST_INCR, BURST_FIXED) or (1 << size) > self.beat_bytes
        for a in self.addresses(addr, size, burst, beats):
            if bad:
                out.append((0, SLVERR))
            elif a >= self.size:
                out.append((0, DECERR))
            else:
                base = a - a % self.beat_bytes
                out.append((int.from_bytes(self.mem[base:base + self.beat_bytes], "little"),
                            OKAY))
        return out


async def write_burst(ctx, bus, addr, size, burst, beats, *, awid=0, rng=None, stall=0.0):
    """Drive one write burst with optional random gaps; returns (bid, bresp)."""
    rng = rng or random.Random(0)
    ctx.set(bus.awid, awid)
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.awlen, len(beats) - 1)
    ctx.set(bus.awsize, size)
    ctx.set(bus.awburst, burst)
    ctx.set(bus.awvalid, 1)
    await ctx.tick().until(bus.awready)
    ctx.set(bus.awvalid, 0)
    for i, (data, strb) in enumerate(beats):
        while rng.random() < stall:
            ctx.set(bus.wvalid, 0)
            await ctx.tick()
        ctx.set(bus.wdata, data)
        ctx.set(bus.wstrb, strb)
        ctx.set(bus.wlast, i == len(beats) - 1)
        ctx.set(bus.wvalid, 1)
        await ctx.tick().until(bus.wready)
    ctx.set(bus.wvalid, 0)
    while True:
        ready = rng.random() >= stall
        ctx.set(bus.bready, ready)
        *_, bvalid, bid, bresp = await ctx.tick().sample(bus.bvalid, bus.bid, bus.bresp)
        if bvalid and ready:
            break
    ctx.set(bus.bready, 0)
    return bid, bresp


async def read_burst(ctx, bus, addr, size, burst, beats, *, arid=0, rng=None, stall=0.0):
    """Drive one read burst with random RREADY; returns [(data, resp)], checking rid/rlast."""
    rng = rng or random.Random(0)
    ctx.set(bus.arid, arid)
    ctx.set(bus.araddr, addr)
    ctx.set(bus.arlen, beats - 1)
    ctx.set(bus.arsize, size)
    ctx.set(bus.arburst, burst)
    ctx.set(bus.arvalid, 1)
    await ctx.tick().until(bus.arready)
    ctx.set(bus.arvalid, 0)
    out = []
    while len(out) < beats:
        ready = rng.random() >= stall
        ctx.set(bus.rready, ready)
        *_, rvalid, rdata, rresp, rlast, rid = await ctx.tick().sample(
            bus.rvalid, bus.rdata, bus.rresp, bus.rlast, bus.rid)
        if rvalid and ready:
            assert rid == arid
            assert rlast == (len(out) == beats - 1)
            out.append((rdata, rresp))
    ctx.set(bus.rready, 0)
    return out


def random_burst(rng, model, *, max_beats=16, in_range=True):
    """A legal burst (no 4 KiB crossing), with strobes only on the lanes it may use."""
    bb = model.beat_bytes
    while True:
        size = rng.randrange(bb.bit_length())
        burst = rng.choice([BURST_INCR, BURST_INCR, BURST_FIXED])
        beats = rng.randrange(1, max_beats + 1)
        addr = rng.randrange(model.size)
        if rng.random() < 0.5:
            addr -= addr % (1 << size)
        addrs = model.addresses(addr, size, burst, beats)
        if addrs[-1] // 4096 != addr // 4096:
            continue
        if in_range and addrs[-1] >= model.size:
            continue
        break
    data = []
    for a in addrs:
        lanes = model.lanes(a, size)
        strb = sum(1 << lane for lane in lanes if rng.random() < 0.8)
        data.append((rng.getrandbits(8 * bb), strb))
    return addr, size, burst, data








def mirrors_hold(dut, done):
    """A testbench that checks, every cycle until ``done`` is not empty, that each flop the
    unit keeps for a compare (``dut.mirrors``) equals that compare."""
    async def check(ctx):
        signals = [x for pair in dut.mirrors for x in pair]
        while not done:
            values = (await ctx.tick().sample(*signals))[-len(signals):]
            assert values[0::2] == values[1::2], values
    return check


def memory_image(ctx, dut):
    bb = dut.data_width // 8
    return b"".join(ctx.get(dut.data[i]).to_bytes(bb, "little") for i in range(dut.depth))


# ---------------------------------------------------------------------------------------------

def test_constructor_errors():
    with pytest.raises(TypeError, match=r"^data_width must be an integer, not '64'$"):
        DeviceMemory(4096, "64")
    with pytest.raises(ValueError, match=r"^data_width must be one of 32, 64, 128, 256, 512, "
                                         r"not 48$"):
        DeviceMemory(4096, 48)
    with pytest.raises(TypeError, match=r"^Memory size must be an integer, not 4096\.0$"):
        DeviceMemory(4096.0, 64)
    for size in (0, -8, 3000, 4):
        with pytest.raises(ValueError, match=rf"^Memory size must be a power of two and a "
                                             rf"multiple of 8 bytes, not {size}$"):
            DeviceMemory(size, 64)
    with pytest.raises(TypeError, match=r"^Address width must be an integer, not None$"):
        DeviceMemory(4096, 64, addr_width=None)
    with pytest.raises(ValueError, match=r"^Address width must be between 1 and 64 and reach "
                                         r"4096 bytes, not 11$"):
        DeviceMemory(4096, 64, addr_width=11)
    with pytest.raises(TypeError, match=r"^ID width must be an integer, not '8'$"):
        DeviceMemory(4096, 64, id_width="8")
    with pytest.raises(ValueError, match=r"^ID width must be at least 1, not 0$"):
        DeviceMemory(4096, 64, id_width=0)


def test_shape():
    dut = DeviceMemory(1024, 128, addr_width=12, id_width=4)
    assert (dut.size, dut.data_width, dut.depth) == (1024, 128, 64)
    assert len(dut.axi.awaddr) == 12 and len(dut.axi.wdata) == 128
    assert len(dut.axi.wstrb) == 16 and len(dut.axi.rid) == 4


@pytest.mark.parametrize("data_width", [32, 64, 128, 512])
def test_random_bursts(data_width):
    """Random INCR/FIXED, narrow and unaligned bursts with random gaps on every channel."""
    rng = random.Random(data_width)
    size = 2048
    dut = DeviceMemory(size, data_width, addr_width=16, id_width=4)
    model = Model(size, data_width // 8)

    async def tb(ctx):
        for row in range(dut.depth):
            value = rng.getrandbits(data_width)
            ctx.set(dut.data[row], value)
            model.mem[row * model.beat_bytes:(row + 1) * model.beat_bytes] = \
                value.to_bytes(model.beat_bytes, "little")
        for n in range(30):
            stall = rng.choice([0.0, 0.3, 0.7])
            addr, sz, burst, beats = random_burst(rng, model)
            bid, bresp = await write_burst(ctx, dut.axi, addr, sz, burst, beats,
                                           awid=n % 16, rng=rng, stall=stall)
            assert (bid, bresp) == (n % 16, model.write(addr, sz, burst, beats))
            addr, sz, burst, beats = random_burst(rng, model)
            got = await read_burst(ctx, dut.axi, addr, sz, burst, len(beats),
                                   arid=(n + 3) % 16, rng=rng, stall=stall)
            assert got == model.read(addr, sz, burst, len(beats))
        assert memory_image(ctx, dut) == bytes(model.mem)
        done.append(True)

    done = []
    run_testbenches(dut, tb, mirrors_hold(dut, done))


def test_host_writes_beside_engine_writes():
    """Host bursts through the write stage while the engine's port takes the memory on random
    cycles (the engine has priority): no beat of either is lost or misplaced, and each
    response follows its burst's writes."""
    rng = random.Random(7)
    size, width = 2048, 64
    bb = width // 8
    dut = DeviceMemory(size, width, addr_width=16, engine_ports=True)
    model = Model(size, bb)
    half = size // 2
    done = []

    async def host(ctx):
        for n in range(25):
            while True:
                addr, sz, burst, beats = random_burst(rng, model)
                if model.addresses(addr, sz, burst, len(beats))[-1] < half:
                    break
            bid, bresp = await write_burst(ctx, dut.axi, addr, sz, burst, beats, awid=n % 16,
                                           rng=rng, stall=rng.choice([0.0, 0.3]))
            assert bresp == model.write(addr, sz, burst, beats)
            # The response came after the writes: a read now returns them.
            got = await read_burst(ctx, dut.axi, addr, sz, burst, len(beats), rng=rng)
            assert got == model.read(addr, sz, burst, len(beats))
        done.append(True)

    async def engine(ctx):
        port = dut.engine_wr
        while True:
            writes = not done and rng.random() < 0.4
            row = rng.randrange(half // bb, size // bb)
            data, en = rng.getrandbits(width), rng.getrandbits(bb) if writes else 0
            ctx.set(port.addr, row)
            ctx.set(port.data, data)
            ctx.set(port.en, en)
            ctx.set(port.issue, writes)
            for lane in range(bb):
                if en >> lane & 1:
                    model.mem[row * bb + lane] = (data >> (8 * lane)) & 0xff
            await ctx.tick()
            if done and not writes:
                break
        assert memory_image(ctx, dut) == bytes(model.mem)

    run_testbenches(dut, host, engine)


def test_bulk_model_functions():
    """sim.axi_model splits transfers into legal bursts; unaligned ends use strobes."""
    rng = random.Random(5)
    size = 16384
    dut = DeviceMemory(size, 64, addr_width=16)
    ref = bytearray(size)

    async def tb(ctx):
        for _ in range(12):
            addr = rng.randrange(size - 1)
            data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, min(5000, size - addr))))
            assert await axi_write(ctx, dut.axi, addr, data) == OKAY
            ref[addr:addr + len(data)] = data
            addr = rng.randrange(size - 1)
            length = rng.randrange(1, min(5000, size - addr))
            assert await axi_read(ctx, dut.axi, addr, length) == (bytes(ref[addr:addr + length]),
                                                                  OKAY)
        assert memory_image(ctx, dut) == bytes(ref)

    run_testbenches(dut, tb)


def test_concurrent_read_and_write():
    """The read and write channels run at the same time on disjoint halves."""
    rng = random.Random(6)
    size = 2048
    dut = DeviceMemory(size, 64, addr_width=16)
    model = Model(size, 8)
    init = bytes(rng.getrandbits(8) for _ in range(size))
    model.mem[:] = init
    done = []

    async def writer(ctx):
        for row in range(dut.depth):
            ctx.set(dut.data[row], int.from_bytes(init[8 * row:8 * row + 8], "little"))
        wrng = random.Random(1)
        for _ in range(20):
            addr = wrng.randrange(size // 2 - 64)
            beats = [(wrng.getrandbits(64), 0xff) for _ in range(8)]
            addr -= addr % 8
            assert (await write_burst(ctx, dut.axi, addr, 3, BURST_INCR, beats, rng=wrng,
                                      stall=0.3))[1] == model.write(addr, 3, BURST_INCR, beats)
        done.append("w")

    async def reader(ctx):
        rrng = random.Random(2)
        await ctx.tick()
        for _ in range(20):
            addr = size // 2 + rrng.randrange(size // 2 - 64)
            got = await read_burst(ctx, dut.axi, addr, 3, BURST_INCR, 8, rng=rrng, stall=0.3)
            assert got == model.read(addr, 3, BURST_INCR, 8)
        done.append("r")

    async def check(ctx):
        while len(done) < 2:
            await ctx.tick()
        assert memory_image(ctx, dut) == bytes(model.mem)

    run_testbenches(dut, writer, reader, check)


def test_out_of_range_and_unsupported():
    size = 1024
    dut = DeviceMemory(size, 64, addr_width=16)
    model = Model(size, 8)

    async def tb(ctx):
        # Straddles the end of memory (and not a 4 KiB boundary): two beats in, two out.
        beats = [(0x1111_1111_1111_1111 * (i + 1), 0xff) for i in range(4)]
        assert await write_burst(ctx, dut.axi, size - 16, 3, BURST_INCR, beats) == (0, DECERR)
        model.write(size - 16, 3, BURST_INCR, beats)
        got = await read_burst(ctx, dut.axi, size - 16, 3, BURST_INCR, 4)
        assert got == [(0x1111_1111_1111_1111, OKAY), (0x2222_2222_2222_2222, OKAY),
                       (0, DECERR), (0, DECERR)]
        assert got == model.read(size - 16, 3, BURST_INCR, 4)
        # Entirely beyond the memory, including high address bits.
        for addr in (size, 0x8000, 0xfff8):
            assert await write_burst(ctx, dut.axi, addr, 3, BURST_INCR, beats[:1]) == (0, DECERR)
            assert await read_burst(ctx, dut.axi, addr, 3, BURST_INCR, 1) == [(0, DECERR)]
        # WRAP and an oversized transfer: SLVERR, nothing written, zeros read.
        before = memory_image(ctx, dut)
        for burst, sz in ((BURST_WRAP, 3), (0b11, 3), (BURST_INCR, 4)):
            assert await write_burst(ctx, dut.axi, 64, sz, burst, beats) == (0, SLVERR)
            assert await read_burst(ctx, dut.axi, 64, sz, burst, 4) == [(0, SLVERR)] * 4
        assert memory_image(ctx, dut) == before == bytes(model.mem)
        # The bulk functions report the worst response.
        assert await axi_write(ctx, dut.axi, size - 8, bytes(range(16))) == DECERR
        data, resp = await axi_read(ctx, dut.axi, size - 8, 16)
        assert (data, resp) == (bytes(range(8)) + bytes(8), DECERR)
        done.append(True)

    done = []
    run_testbenches(dut, tb, mirrors_hold(dut, done))


def test_read_backpressure_loses_nothing():
    """RREADY toggling every cycle and long stalls in the middle of a 64-beat burst."""
    size = 1024
    dut = DeviceMemory(size, 32, addr_width=16)
    pattern = [[0, 1] * 40, [1, 1, 0, 0, 0] * 30, [0] * 7 + [1] * 100, [1, 0, 0, 0] * 40]

    async def tb(ctx):
        for row in range(dut.depth):
            ctx.set(dut.data[row], row * 0x01010101 ^ 0xa5a5a5a5)
        for readies in pattern:
            ctx.set(dut.axi.araddr, 128)
            ctx.set(dut.axi.arlen, 63)
            ctx.set(dut.axi.arsize, 2)
            ctx.set(dut.axi.arburst, BURST_INCR)
            ctx.set(dut.axi.arvalid, 1)
            await ctx.tick().until(dut.axi.arready)
            ctx.set(dut.axi.arvalid, 0)
            got = []
            cycle = 0
            while len(got) < 64:
                ready = readies[cycle % len(readies)]
                cycle += 1
                ctx.set(dut.axi.rready, ready)
                *_, rvalid, rdata = await ctx.tick().sample(dut.axi.rvalid, dut.axi.rdata)
                if rvalid and ready:
                    got.append(rdata)
            ctx.set(dut.axi.rready, 0)
            assert got == [(32 + i) * 0x01010101 ^ 0xa5a5a5a5 for i in range(64)]

    run_testbenches(dut, tb)


def test_throughput_one_beat_per_clock():
    size = 4096
    dut = DeviceMemory(size, 64, addr_width=16)
    beats = 64
    bus = dut.axi

    async def tb(ctx):
        # Write: AW, then W held valid, B ready throughout.
        ctx.set(bus.bready, 1)
        ctx.set(bus.awaddr, 0)
        ctx.set(bus.awlen, beats - 1)
        ctx.set(bus.awsize, 3)
        ctx.set(bus.awburst, BURST_INCR)
        ctx.set(bus.awvalid, 1)
        ctx.set(bus.wvalid, 1)
        ctx.set(bus.wstrb, 0xff)
        sent = cycles = 0
        ctx.set(bus.wdata, 0)
        while True:
            *_, awready, wready, bvalid = await ctx.tick().sample(bus.awready, bus.wready,
                                                                  bus.bvalid)
            cycles += 1
            if awready:
                ctx.set(bus.awvalid, 0)
            if wready and sent < beats:
                sent += 1
                ctx.set(bus.wdata, sent)
                ctx.set(bus.wlast, sent == beats - 1)
                if sent == beats:
                    ctx.set(bus.wvalid, 0)
            if bvalid:
                break
        # AW slice + AW cycle + one cycle per beat + the last beat's write stage + the
        # response.
        assert cycles == beats + 4, cycles

        # Read: AR, R ready throughout.
        ctx.set(bus.rready, 1)
        ctx.set(bus.araddr, 0)
        ctx.set(bus.arlen, beats - 1)
        ctx.set(bus.arsize, 3)
        ctx.set(bus.arburst, BURST_INCR)
        ctx.set(bus.arvalid, 1)
        got, cycles = [], 0
        while len(got) < beats:
            *_, arready, rvalid, rdata = await ctx.tick().sample(bus.arready, bus.rvalid,
                                                                 bus.rdata)
            cycles += 1
            if arready:
                ctx.set(bus.arvalid, 0)
            if rvalid:
                got.append(rdata)
        assert got == list(range(beats))
        # AR slice + AR cycle + memory read + its register + one cycle per beat.
        assert cycles <= beats + 5, cycles

        # Bulk transfers through the model functions: several bursts back to back.
        length = 4096
        t0 = counter["n"]
        assert await axi_write(ctx, bus, 0, bytes(range(256)) * 16) == OKAY
        t1 = counter["n"]
        assert await axi_read(ctx, bus, 0, length) == (bytes(range(256)) * 16, OKAY)
        t2 = counter["n"]
        n_beats, n_bursts = length // 8, length // (8 * 256)
        assert t1 - t0 <= n_beats + 2 * n_bursts + 2, t1 - t0
        assert t2 - t1 <= n_beats + n_bursts + 3, t2 - t1

    counter = {"n": 0}

    async def clock(ctx):
        async for _ in ctx.tick():
            counter["n"] += 1

    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(clock, background=True)
    sim.add_testbench(watchdog(100_000), background=True)
    sim.add_testbench(tb)
    sim.run()
