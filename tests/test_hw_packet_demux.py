# amaranth: UnusedElaboratable=no
"""PacketDemux: its ports and constructor errors, its latency and throughput with and
without the input slice, and whole packets routed by kind under random traffic.
"""

import random

import pytest
from amaranth.lib import wiring
from amaranth.sim import Simulator

from nicoll.hw.net.packet import PacketDemux, PacketKind, packet_stream
from nicoll.sim.testbench import PERIOD, run_testbenches, watchdog

from hw_packet_helpers import tagged_packet, packet_source, packet_sink, whole_packets


ROUTE = {PacketKind.BARRIER: 0, PacketKind.CLEAR: 2, PacketKind.DATA: 1}


def test_demux_ports():
    dut = PacketDemux(64, ROUTE, outputs=3, default=2)
    assert list(dut.signature.members) == ["i", "o_0", "o_1", "o_2"]
    assert dut.signature.members["i"] == wiring.In(packet_stream(64))
    assert dut.signature.members["o_2"] == wiring.Out(packet_stream(64))


def test_demux_constructor_errors():
    with pytest.raises(TypeError, match=r"^route keys must be PacketKind members, not 1$"):
        PacketDemux(64, {1: 0}, outputs=2, default=0)
    with pytest.raises(ValueError, match=r"^route target must be an output number below 2, "
                                         r"not 2$"):
        PacketDemux(64, {PacketKind.DATA: 2}, outputs=2, default=0)
    with pytest.raises(ValueError, match=r"^route target must be an output number below 2, "
                                         r"not '1'$"):
        PacketDemux(64, {PacketKind.DATA: "1"}, outputs=2, default=0)
    with pytest.raises(ValueError, match=r"^default must be an output number below 2, "
                                         r"not -1$"):
        PacketDemux(64, {}, outputs=2, default=-1)
    with pytest.raises(ValueError, match=r"^default must be an output number below 2, "
                                         r"not None$"):
        PacketDemux(64, {}, outputs=2, default=None)
    with pytest.raises(ValueError, match=r"^Number of outputs must be at least 1, not 0$"):
        PacketDemux(64, {}, outputs=0, default=0)
    with pytest.raises(TypeError, match=r"^Number of outputs must be an integer, not 2\.0$"):
        PacketDemux(64, {}, outputs=2.0, default=0)
    with pytest.raises(ValueError, match=r"^Data width must be a positive multiple of 8, "
                                         r"not 0$"):
        PacketDemux(0, {}, outputs=1, default=0)
    with pytest.raises(TypeError, match=r"^input_slice must be a bool, not 1$"):
        PacketDemux(64, {}, outputs=1, default=0, input_slice=1)


@pytest.mark.parametrize("input_slice", [False, True])
def test_demux_latency_and_throughput(input_slice):
    """Without the slice a beat is offered in the cycle it arrives; with it, one cycle later,
    and in both cases a beat a cycle passes when the output is ready (full throughput)."""
    dut = PacketDemux(64, ROUTE, outputs=3, default=2, input_slice=input_slice)
    kinds = [PacketKind.DATA, PacketKind.BARRIER, PacketKind.CLEAR, PacketKind.DATA]
    offered = []

    async def tb(ctx):
        for k in range(3):
            ctx.set(getattr(dut, f"o_{k}").ready, 1)
        for cycle in range(len(kinds) + 2):
            if cycle < len(kinds):
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload.data, kinds[cycle].value)
                ctx.set(dut.i.payload.last, 1)
            else:
                ctx.set(dut.i.valid, 0)
            assert ctx.get(dut.i.ready) == 1
            for k in range(3):
                port = getattr(dut, f"o_{k}")
                if ctx.get(port.valid):
                    offered.append((cycle, k, ctx.get(port.payload.data) & 0xf))
            await ctx.tick()

    run_testbenches(dut, tb)
    delay = 1 if input_slice else 0
    assert offered == [(cycle + delay, ROUTE[kind], kind.value)
                       for cycle, kind in enumerate(kinds)]


@pytest.mark.parametrize("input_slice", [False, True])
@pytest.mark.parametrize("route,outputs,default,seed,src_stall,dst_stall", [
    (ROUTE, 3, 2, 0, 0.0, 0.0),
    (ROUTE, 3, 0, 1, 0.3, 0.5),
    ({PacketKind.BARRIER: 0, PacketKind.CLEAR: 1, PacketKind.DATA: 1}, 2, 0, 2, 0.5, 0.3),
    ({PacketKind.DATA: 3}, 4, 1, 3, 0.1, 0.7),
    ({}, 1, 0, 4, 0.2, 0.2),
])
def test_demux_routes_whole_packets(route, outputs, default, seed, src_stall, dst_stall,
                                    input_slice):
    """Packets of every kind (0 .. 15 in the first beat's low bits; later beats' low bits are
    random) reach the routed output, others the default one, whole and in order, with each
    output stalling at random."""
    rng = random.Random(seed)
    dut = PacketDemux(64, route, outputs=outputs, default=default, input_slice=input_slice)
    packets = [tagged_packet(rng, 0, seq, rng.randrange(1, 6), control=rng.getrandbits(1),
                             kind=rng.randrange(16))
               for seq in range(80)]
    received = [[] for _ in range(outputs)]
    by_value = {kind.value: k for kind, k in route.items()}

    async def main(ctx):
        total = sum(map(len, packets))
        while sum(map(len, received)) < total:
            await ctx.tick()
        for _ in range(10):
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(20_000), background=True)
    for k in range(outputs):
        sim.add_testbench(packet_sink(getattr(dut, f"o_{k}"), received[k],
                                      random.Random(f"sink{seed}/{k}"), dst_stall),
                          background=True)
    sim.add_testbench(packet_source(dut.i, packets, rng, src_stall))
    sim.add_testbench(main)
    sim.run()
    for k in range(outputs):
        expected = [p for p in packets if by_value.get(p[0]["data"] & 0xf, default) == k]
        assert whole_packets(received[k]) == expected
