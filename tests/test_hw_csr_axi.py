# amaranth: UnusedElaboratable=no
"""CSRSlave's AXI4-Lite channels: write address and data in either order, the slices
holding two beats and pairing them in order, random backpressure on every channel against
the model, and back-to-back throughput.
"""

import random

import pytest

from nicoll.hw.regmap.generated import REGMAP
from nicoll.hw.bus.csr import CSRSlave

from nicoll.sim.testbench import run_testbenches
from nicoll.sim.axi_model import axil_read

from hw_csr_helpers import OKAY, Model, random_inputs, mapped_words, unmapped_words, SCRATCH, CYCLES


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
