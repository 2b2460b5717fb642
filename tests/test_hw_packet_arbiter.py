# amaranth: UnusedElaboratable=no
"""PacketArbiter: its ports and constructor errors, whole packets under random traffic with
and without a registered grant, control packets waiting at most one packet, and no added
latency.
"""

import random

import pytest
from amaranth.lib import wiring
from amaranth.sim import Simulator

from nicoll.hw.net.packet import PacketArbiter, packet_stream
from nicoll.sim.testbench import PERIOD, run_testbenches, watchdog

from hw_packet_helpers import (tagged_packet, beat_src, as_dict, packet_source, packet_sink,
                               whole_packets)


def test_arbiter_ports():
    dut = PacketArbiter(3, 64)
    assert list(dut.signature.members) == ["i_0", "i_1", "i_2", "o"]
    assert dut.signature.members["i_1"] == wiring.In(packet_stream(64))
    assert dut.signature.members["o"] == wiring.Out(packet_stream(64))


def test_arbiter_constructor_errors():
    with pytest.raises(TypeError, match=r"^Number of inputs must be an integer, not '2'$"):
        PacketArbiter("2", 64)
    with pytest.raises(TypeError, match=r"^Number of inputs must be an integer, not True$"):
        PacketArbiter(True, 64)
    with pytest.raises(ValueError, match=r"^Number of inputs must be at least 1, not 0$"):
        PacketArbiter(0, 64)
    with pytest.raises(TypeError, match=r"^Data width must be an integer, not None$"):
        PacketArbiter(2, None)
    with pytest.raises(ValueError, match=r"^Data width must be a positive multiple of 8, "
                                         r"not 20$"):
        PacketArbiter(2, 20)
    with pytest.raises(TypeError, match=r"^registered_grant must be a bool, not 1$"):
        PacketArbiter(2, 64, registered_grant=1)


@pytest.mark.parametrize("registered_grant", [False, True])
@pytest.mark.parametrize("inputs,seed,src_stall,dst_stall", [
    (1, 0, 0.3, 0.3),
    (2, 1, 0.0, 0.0),
    (3, 2, 0.5, 0.5),
    (4, 3, 0.2, 0.7),
    (4, 4, 0.7, 0.1),
])
def test_arbiter_random_traffic(inputs, seed, src_stall, dst_stall, registered_grant):
    """Every packet comes out whole, once, each input's in order; at every packet boundary the
    grant goes as the docstring says: the lowest-numbered input offering a control packet,
    else the lowest-numbered input offering a packet — offering in the cycle the first beat
    is first offered, or with a registered grant in the cycle before it (if any input offered
    then)."""
    rng = random.Random(seed)
    dut = PacketArbiter(inputs, 64, registered_grant=registered_grant)
    ports = [getattr(dut, f"i_{k}") for k in range(inputs)]
    packets = [[tagged_packet(rng, src, seq, rng.randrange(1, 6), control=rng.random() < 0.3)
                for seq in range(rng.randrange(10, 20))] for src in range(inputs)]
    received = []
    grants = []         # (src of the packet granted, valid and control of every input)

    async def monitor(ctx):
        first = True
        decided = None      # the offers the grant of the packet on offer was chosen from
        before = [0] * (2 * inputs)     # the offers of the cycle before
        async for _, _, o_valid, o_ready, beat, *offers in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload,
                *(v for p in ports for v in (p.valid, p.payload.control))):
            # The grant is chosen when a packet's first beat is first offered (the offer is
            # then held until taken), from that cycle's offers or the cycle before's.
            if o_valid and first and decided is None:
                decided = before if registered_grant else offers
            if o_valid and o_ready:
                if first:
                    grants.append((beat_src(as_dict(beat)), decided))
                    decided = None
                first = bool(beat.last)
            before = offers

    async def main(ctx):
        total = sum(len(p) for mine in packets for p in mine)
        while len(received) < total:
            await ctx.tick()
        for _ in range(10):         # nothing more comes out
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(20_000), background=True)
    sim.add_testbench(monitor, background=True)
    sim.add_testbench(packet_sink(dut.o, received, random.Random(f"sink{seed}"), dst_stall),
                      background=True)
    for k, port in enumerate(ports):
        sim.add_testbench(packet_source(port, packets[k], random.Random(f"src{seed}/{k}"),
                                        src_stall))
    sim.add_testbench(main)
    sim.run()

    got = whole_packets(received)
    for src in range(inputs):
        assert [p for p in got if beat_src(p[0]) == src] == packets[src]
    assert len(got) == sum(map(len, packets))
    assert len(grants) == len(got)
    for src, offers in grants:
        valid, control = offers[0::2], offers[1::2]
        controls = [k for k in range(inputs) if valid[k] and control[k]]
        offering = [k for k in range(inputs) if valid[k]]
        if registered_grant and not offering:
            continue        # nothing offered the cycle before: the grant stayed where it was
        assert src == (controls or offering)[0], (src, offers)


@pytest.mark.parametrize("registered_grant", [False, True])
def test_arbiter_control_waits_at_most_one_packet(registered_grant):
    """Two saturating bulk inputs and a control input numbered after them.  A control packet
    offered while a bulk packet moves goes right after that one: no packet starts while it
    waits.  Input 0 is served whenever it offers a packet, so input 1 waits until input 0
    has nothing left."""
    rng = random.Random(21)
    dut = PacketArbiter(3, 64, registered_grant=registered_grant)
    bulk = [[tagged_packet(rng, src, seq, 5) for seq in range(6)] for src in (0, 1)]
    control = [tagged_packet(rng, 2, seq, 2, control=1) for seq in range(4)]
    received = []
    starts = []         # (src of each packet started, whether a control packet was offered)

    async def control_source(ctx):
        for packet in control:
            for _ in range(rng.randrange(3, 14)):
                await ctx.tick()
            for beat in packet:
                ctx.set(dut.i_2.payload, beat)
                ctx.set(dut.i_2.valid, 1)
                await ctx.tick().until(dut.i_2.ready)
            ctx.set(dut.i_2.valid, 0)

    async def monitor(ctx):
        first = True
        before = 0                      # offered the cycle before (a registered grant's view)
        async for _, _, valid, ready, beat, offered in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload, dut.i_2.valid):
            if valid and ready:
                if first:
                    starts.append((beat_src(as_dict(beat)),
                                   before if registered_grant else offered))
                first = bool(beat.last)
            before = offered

    async def main(ctx):
        while len(received) < 2 * 6 * 5 + 4 * 2:
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(5_000), background=True)
    sim.add_testbench(monitor, background=True)
    sim.add_testbench(packet_sink(dut.o, received, random.Random(22), 0.3), background=True)
    sim.add_testbench(packet_source(dut.i_0, bulk[0], rng, 0.0))
    sim.add_testbench(packet_source(dut.i_1, bulk[1], rng, 0.0))
    sim.add_testbench(control_source)
    sim.add_testbench(main)
    sim.run()
    order = [beat_src(p[0]) for p in whole_packets(received)]
    assert [s for s in order if s != 2] == [0] * 6 + [1] * 6
    assert [p for p in whole_packets(received) if beat_src(p[0]) == 2] == control
    assert [src for src, _ in starts] == order
    # The control packets came while bulk traffic moved, not after it.
    assert order.index(2) > 0 and len(order) - 1 - order[::-1].index(2) < len(order) - 1
    assert all(src == 2 for src, offered in starts if offered), starts


def test_arbiter_adds_no_latency():
    """A beat offered on an input is on the output in the same cycle, and ``o.valid`` does not
    wait for ``o.ready``."""
    dut = PacketArbiter(2, 64)
    beat = {"data": 0x1234, "keep": 0xff, "last": 1, "dest": 3, "control": 0}

    async def tb(ctx):
        ctx.set(dut.i_1.payload, beat)
        ctx.set(dut.i_1.valid, 1)
        ctx.set(dut.o.ready, 0)
        assert ctx.get(dut.o.valid) == 1
        assert as_dict(ctx.get(dut.o.payload)) == beat
        assert ctx.get(dut.i_1.ready) == 0 and ctx.get(dut.i_0.ready) == 0
        ctx.set(dut.o.ready, 1)
        assert ctx.get(dut.i_1.ready) == 1 and ctx.get(dut.i_0.ready) == 0
        await ctx.tick()
        ctx.set(dut.i_1.valid, 0)
        assert ctx.get(dut.o.valid) == 0

    run_testbenches(dut, tb)
