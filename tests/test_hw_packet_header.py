# amaranth: UnusedElaboratable=no
"""The packet stream layout and the packet header: the layout the host packs with too, the
header's beats at every data width, constructor errors, and header-only packets sent and
received (HeaderSender -> HeaderReceiver) under backpressure, with extra and short packets
counted.
"""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.sim import Simulator

from nicoll.hw.net.packet import (HeaderReceiver, HeaderSender, PacketKind, header_beats,
                                  packet_beat_layout, packet_header_layout, packet_stream)
from nicoll.sim.testbench import PERIOD, run_testbenches, watchdog


@pytest.mark.parametrize("data_width", [64, 128, 256, 512])
def test_layout(data_width):
    layout = packet_beat_layout(data_width)
    assert layout == data.StructLayout({"data": data_width, "keep": data_width // 8,
                                        "last": 1, "dest": 16, "control": 1})
    sig = packet_stream(data_width)
    assert isinstance(sig, stream.Signature)
    assert sig == stream.Signature(layout)
    assert set(sig.members) == {"payload", "valid", "ready"}


def test_host_packs_with_the_same_layout():
    """A beat built on the host with the layout's const() has the fields where gateware expects."""
    layout = packet_beat_layout(64)
    bits = layout.const({"data": 0x1122334455667788, "keep": 0xff, "last": 1,
                         "dest": 7, "control": 1}).as_value().value
    assert bits & ((1 << 64) - 1) == 0x1122334455667788
    assert (bits >> 64) & 0xff == 0xff
    assert (bits >> 72) & 1 == 1
    assert (bits >> 73) & 0xffff == 7
    assert (bits >> 89) & 1 == 1


def test_header_layout_and_beats():
    layout = packet_header_layout()
    assert layout.size == 200
    assert [name for name, _ in layout] == ["kind", "code", "src", "dst", "seq", "arg",
                                           "length", "addr", "value"]
    assert {w: header_beats(w) for w in (64, 128, 256, 512)} == {64: 4, 128: 2, 256: 1, 512: 1}
    assert PacketKind.BARRIER.is_control


def test_errors():
    with pytest.raises(TypeError, match=r"^Data width must be an integer, not 64\.0$"):
        packet_beat_layout(64.0)
    with pytest.raises(ValueError, match=r"^Data width must be a positive multiple of 8, "
                                         r"not 0$"):
        packet_stream(0)
    with pytest.raises(ValueError, match=r"not 12"):
        HeaderSender(12)
    with pytest.raises(TypeError, match=r"not '64'"):
        HeaderReceiver("64")
    with pytest.raises(TypeError, match=r"^peers must be an integer, not True$"):
        HeaderReceiver(64, peers=True)
    with pytest.raises(ValueError, match=r"^peers must be between 1 and 65, not 0$"):
        HeaderReceiver(64, peers=0)


#: The receiving node's id in the round trip (``to_node``).
NODE_ID = 0x1234
PEER_ID = 0x0042


def random_header(rng):
    return {"kind": PacketKind.BARRIER, "code": rng.getrandbits(4), "src": rng.getrandbits(16),
            "dst": rng.getrandbits(16), "seq": rng.getrandbits(16), "arg": rng.getrandbits(16),
            "length": rng.getrandbits(32), "addr": rng.getrandbits(32),
            "value": rng.getrandbits(64)}


def as_int(header):
    return packet_header_layout().const(header).as_value().value


@pytest.mark.parametrize("data_width", [64, 256])
def test_headers_round_trip_under_backpressure(data_width):
    """Sender → receiver with random stalls on both ends: every header arrives, in order;
    the beats carry dest, control, keep and last as documented."""
    rng = random.Random(data_width)
    headers = [random_header(rng) for _ in range(40)]
    for header in headers[::3]:
        header["dst"] = NODE_ID                 # a third of them for this node
    for header in headers[::4]:
        header["src"] = PEER_ID                 # a quarter of them from peer 0 ...
    for header in headers[1::5]:
        header["src"] = PEER_ID + 1             # ... a fifth from peer 1
    sender, receiver = HeaderSender(data_width), HeaderReceiver(data_width, peers=2)
    top = Module()
    top.submodules.sender = sender
    top.submodules.receiver = receiver
    wiring.connect(top, sender.packets, receiver.packets)
    beats_seen = []
    got = []
    to_nodes = []
    from_peers = []

    async def source(ctx):
        for header in headers:
            while rng.random() < 0.3:
                await ctx.tick()
            ctx.set(sender.header.payload, header)
            ctx.set(sender.header.valid, 1)
            await ctx.tick().until(sender.header.ready)
            ctx.set(sender.header.valid, 0)

    async def monitor(ctx):
        link = sender.packets
        async for _, _, valid, ready, beat in ctx.tick().sample(link.valid, link.ready,
                                                                link.payload):
            if valid and ready:
                beats_seen.append({"dest": beat.dest, "control": beat.control,
                                   "last": beat.last, "keep": beat.keep})

    async def sink(ctx):
        ctx.set(receiver.node_id, NODE_ID)
        ctx.set(receiver.peer_id, [PEER_ID, PEER_ID + 1])
        while len(got) < len(headers):
            ctx.set(receiver.header.ready, rng.random() < 0.6)
            _, _, valid, ready, value, to_node, from_peer = await ctx.tick().sample(
                receiver.header.valid, receiver.header.ready, receiver.header.payload,
                receiver.to_node, receiver.from_peer)
            if valid and ready:
                got.append(value.as_value().value)
                to_nodes.append(to_node)
                from_peers.append(from_peer)

    sim = Simulator(top)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(20_000), background=True)
    sim.add_testbench(monitor, background=True)
    sim.add_testbench(source)
    sim.add_testbench(sink)
    sim.run()
    assert got == [as_int(h) for h in headers]
    # `to_node` is the header's dst compared with node_id, for every header.
    assert to_nodes == [h["dst"] == NODE_ID for h in headers]
    assert 0 < sum(to_nodes) < len(headers)
    # `from_peer` likewise: src compared with each peer_id.
    assert from_peers == [(h["src"] == PEER_ID) | (h["src"] == PEER_ID + 1) << 1
                          for h in headers]
    assert {1, 2} <= set(from_peers) and 0 in from_peers
    per_packet = header_beats(data_width)
    assert len(beats_seen) == per_packet * len(headers)
    for k, beat in enumerate(beats_seen):
        header = headers[k // per_packet]
        assert beat["dest"] == header["dst"] and beat["control"] == 1
        assert beat["last"] == (k % per_packet == per_packet - 1)
        # keep marks the header's bytes in the beat: all of them but in its last beat.
        used = min(data_width, packet_header_layout().size - (k % per_packet) * data_width)
        assert beat["keep"] == (1 << -(-used // 8)) - 1


def test_receiver_counts_extra_and_short_packets():
    width = 64
    receiver = HeaderReceiver(width)
    rng = random.Random(5)
    header = random_header(rng)
    bits = as_int(header)
    chunks = [(bits >> (64 * k)) & ((1 << 64) - 1) for k in range(header_beats(width))]
    packets = [chunks + [0xAA, 0xBB],            # two payload beats: dropped, counted
               chunks[:2],                         # ends after two of four header beats
               chunks]                             # a good one after both
    got = []

    async def source(ctx):
        for packet in packets:
            for k, word in enumerate(packet):
                ctx.set(receiver.packets.payload, {"data": word, "keep": 0xff,
                                                   "last": k == len(packet) - 1, "dest": 0,
                                                   "control": 1})
                ctx.set(receiver.packets.valid, 1)
                await ctx.tick().until(receiver.packets.ready)
        ctx.set(receiver.packets.valid, 0)

    async def sink(ctx):
        ctx.set(receiver.header.ready, 1)
        for _ in range(60):
            _, _, valid, value = await ctx.tick().sample(receiver.header.valid,
                                                         receiver.header.payload)
            if valid:
                got.append(value.as_value().value)
        assert ctx.get(receiver.extra_beats) == 2
        assert ctx.get(receiver.short_packets) == 1

    run_testbenches(receiver, source, sink)
    assert got == [bits, bits]
