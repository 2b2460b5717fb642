"""FabricLink: order and content, latency and gap per packet, every beat out at the first cycle
it may (so full rate at gap 0), a registered ready, and a wire at latency 0 and gap 0."""

import random

import pytest
from amaranth.hdl import ClockDomain, Elaboratable, Module

from nicoll.hw.net.packet import DEST_WIDTH
from nicoll.hw.sim.fabric import FabricLink
from nicoll.sim.testbench import run_testbenches, stream_put

WIDTH = 64
FIELDS = ("data", "keep", "last", "dest", "control")


def random_packets(rng, count, *, longest=6):
    """``count`` packets of 1..``longest`` beats, as lists of beat dicts."""
    packets = []
    for _ in range(count):
        beats = rng.randint(1, longest)
        dest = rng.getrandbits(DEST_WIDTH)
        control = rng.getrandbits(1)
        packets.append([{"data": rng.getrandbits(WIDTH), "keep": rng.getrandbits(WIDTH // 8),
                         "last": int(k == beats - 1), "dest": dest, "control": control}
                        for k in range(beats)])
    return packets


class Clocked(Elaboratable):
    """``dut`` in a design with a ``sync`` domain: a link that is a wire has none of its own."""

    def __init__(self, dut):
        self.dut = dut

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain()
        m.submodules.dut = self.dut
        return m


def as_dict(beat):
    return {name: int(getattr(beat, name)) for name in FIELDS}


def expected_out_cycles(in_cycles, lasts, sink_ready, latency, gap):
    """The cycle each beat must leave in: the first cycle, at or after its arrival plus the
    latency and after the previous beat (and the gap, if that one ended a packet), in which
    the sink is ready."""
    out = []
    for k, arrived in enumerate(in_cycles):
        earliest = arrived + latency
        if k:
            earliest = max(earliest, out[-1] + 1 + (gap if lasts[k - 1] else 0))
        cycle = earliest
        while not sink_ready[cycle]:
            cycle += 1
        out.append(cycle)
    return out


def run_link(latency, gap, *, packets, in_stall=0.0, out_stall=0.0, seed=0):
    """Send ``packets`` through a link, with source pauses and sink backpressure at the given
    rates; returns what a monitor saw in each cycle."""
    dut = FabricLink(WIDTH, latency=latency, gap=gap)
    rng = random.Random(f"source{seed}")
    srng = random.Random(f"sink{seed}")
    beats = [beat for packet in packets for beat in packet]
    seen = {"in": [], "out": [], "beats": [], "sink_ready": [], "in_ready": []}

    async def source(ctx):
        for beat in beats:
            while rng.random() < in_stall:
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
            await stream_put(ctx, dut.i, beat)

    async def sink(ctx):
        while len(seen["out"]) < len(beats):
            ctx.set(dut.o.ready, srng.random() >= out_stall)
            await ctx.tick()

    async def monitor(ctx):
        cycle = 0
        while True:
            *_, iv, ir, ov, orr, op = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.ready, dut.o.payload)
            seen["sink_ready"].append(bool(orr))
            seen["in_ready"].append(bool(ir))
            if iv and ir:
                seen["in"].append(cycle)
            if ov and orr:
                seen["out"].append(cycle)
                seen["beats"].append(as_dict(op))
            cycle += 1

    run_testbenches(Clocked(dut), source, sink, background=[monitor], watchdog_cycles=200_000)
    return beats, seen


LINKS = [(0, 0), (0, 3), (1, 0), (1, 1), (2, 0), (5, 3), (17, 0), (65, 7)]
STALLS = [(0.0, 0.0), (0.4, 0.0), (0.0, 0.5), (0.5, 0.5)]


@pytest.mark.parametrize("in_stall,out_stall", STALLS)
@pytest.mark.parametrize("latency,gap", LINKS)
def test_random_packets(latency, gap, in_stall, out_stall):
    rng = random.Random(f"packets{latency},{gap}")
    packets = random_packets(rng, 60)
    beats, seen = run_link(latency, gap, packets=packets, in_stall=in_stall,
                           out_stall=out_stall, seed=f"{latency},{gap},{in_stall},{out_stall}")
    # Order and content: every beat once, as sent.
    assert seen["beats"] == beats
    lasts = [beat["last"] for beat in beats]
    starts = [0] + [k + 1 for k, last in enumerate(lasts[:-1]) if last]
    ends = [k for k, last in enumerate(lasts) if last]
    # Latency: no beat (so no packet's first beat) leaves earlier than `latency` after it came.
    for k in starts:
        assert seen["out"][k] - seen["in"][k] >= latency, k
    assert all(o - i >= latency for i, o in zip(seen["in"], seen["out"]))
    # Gap: at least `gap` idle cycles on the output between a packet's last beat and the next.
    for end in ends[:-1]:
        assert seen["out"][end + 1] - seen["out"][end] - 1 >= gap, end
    # Every beat leaves at the first cycle it may: the link never holds a beat back.
    assert seen["out"] == expected_out_cycles(seen["in"], lasts, seen["sink_ready"],
                                              latency, gap)


@pytest.mark.parametrize("latency", [0, 1, 2, 17, 65])
def test_full_rate_at_gap_zero(latency):
    # Back to back, sink always ready: one beat a cycle, every beat `latency` cycles later,
    # and the input is never refused.
    rng = random.Random(latency)
    packets = random_packets(rng, 40)
    beats, seen = run_link(latency, 0, packets=packets)
    n = len(beats)
    assert seen["in"] == list(range(n))
    assert seen["out"] == [c + latency for c in range(n)]
    assert all(seen["in_ready"][:n])


@pytest.mark.parametrize("latency,gap", [(0, 4), (3, 1), (20, 5)])
def test_gap_costs_gap_cycles_a_packet(latency, gap):
    rng = random.Random(gap)
    packets = random_packets(rng, 30)
    beats, seen = run_link(latency, gap, packets=packets)
    # The output is busy for each packet's beats plus `gap`, except after the final one.
    assert seen["out"][-1] - seen["out"][0] + 1 == len(beats) + gap * (len(packets) - 1)
    assert seen["out"][0] == latency


def test_zero_latency_zero_gap_is_a_wire():
    dut = FabricLink(WIDTH)
    assert dut.depth == 0
    beat = {"data": 0x1234_5678_9abc_def0, "keep": 0x5a, "last": 1, "dest": 7, "control": 1}

    async def tb(ctx):
        # No clock edge passes: valid, payload and ready go straight through.
        for valid in (1, 0, 1):
            ctx.set(dut.i.valid, valid)
            ctx.set(dut.i.payload, beat)
            assert ctx.get(dut.o.valid) == valid
            assert as_dict(ctx.get(dut.o.payload)) == beat
            for ready in (0, 1, 0):
                ctx.set(dut.o.ready, ready)
                assert ctx.get(dut.i.ready) == ready

    run_testbenches(Clocked(dut), tb)


@pytest.mark.parametrize("latency", [1, 4])
def test_ready_is_registered(latency):
    dut = FabricLink(WIDTH, latency=latency)
    assert dut.depth == latency + 1

    async def tb(ctx):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, {"data": 1, "last": 1})
        taken = 0
        while ctx.get(dut.i.ready):
            await ctx.tick()
            taken += 1
        assert taken == dut.depth         # the ring fills, then refuses
        for _ in range(latency):
            await ctx.tick()
        assert ctx.get(dut.o.valid)
        ctx.set(dut.o.ready, 1)           # no combinational path from o.ready to i.ready
        assert not ctx.get(dut.i.ready)
        await ctx.tick()
        assert ctx.get(dut.i.ready)

    run_testbenches(dut, tb)


@pytest.mark.parametrize("name", ["latency", "gap"])
def test_bad_parameters(name):
    with pytest.raises(TypeError, match=f"^{name} must be an integer number of cycles, not 1.5$"):
        FabricLink(WIDTH, **{name: 1.5})
    with pytest.raises(TypeError, match=f"^{name} must be an integer number of cycles, not True$"):
        FabricLink(WIDTH, **{name: True})
    with pytest.raises(ValueError,
                       match=f"^{name} must be a non-negative number of cycles, not -1$"):
        FabricLink(WIDTH, **{name: -1})
