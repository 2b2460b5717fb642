# amaranth: UnusedElaboratable=no
"""Packet stream layout, the packet header, header-only packets sent and received, and the
packet arbiter and demultiplexer."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.sim import Simulator

from nicoll.hw.net.packet import (HeaderReceiver, HeaderSender, PacketArbiter, PacketDemux,
                              PacketKind, header_beats, packet_beat_layout,
                              packet_header_layout, packet_stream)
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


# ---- PacketArbiter and PacketDemux ----------------------------------------------------------

def tagged_packet(rng, src, seq, beats, *, control=0, kind=None):
    """Beats whose data names (src, seq, beat) in bits 8..31, so a receiver can tell which
    packet and which beat it holds; ``kind`` (if given) fills the low 4 bits of the first
    beat, where a header carries its kind."""
    out = []
    for b in range(beats):
        data = rng.getrandbits(64) & ~0xffffff00 | (src << 24) | (seq << 12) | (b << 8)
        if kind is not None and b == 0:
            data = data & ~0xf | kind
        out.append({"data": data, "keep": rng.getrandbits(8), "last": int(b == beats - 1),
                    "dest": rng.getrandbits(16), "control": control})
    return out


def beat_src(beat):
    return beat["data"] >> 24 & 0xff


def as_dict(payload):
    return {"data": payload.data, "keep": payload.keep, "last": payload.last,
            "dest": payload.dest, "control": payload.control}


def packet_source(port, packets, rng, stall):
    """A testbench sending ``packets`` on ``port`` with random gaps between beats."""
    async def tb(ctx):
        for packet in packets:
            for beat in packet:
                while rng.random() < stall:
                    ctx.set(port.valid, 0)
                    await ctx.tick()
                ctx.set(port.payload, beat)
                ctx.set(port.valid, 1)
                await ctx.tick().until(port.ready)
        ctx.set(port.valid, 0)
    return tb


def packet_sink(port, received, rng, stall):
    """A background testbench taking beats from ``port`` into ``received`` with random
    ready."""
    async def tb(ctx):
        while True:
            ready = rng.random() >= stall
            ctx.set(port.ready, ready)
            *_, valid, payload = await ctx.tick().sample(port.valid, port.payload)
            if valid and ready:
                received.append(as_dict(payload))
    return tb


def whole_packets(beats):
    """Split a beat sequence into packets; every packet must be one packet's beats in order."""
    packets, current = [], []
    for beat in beats:
        if current:
            assert beat["data"] >> 8 & 0xffff0 == current[0]["data"] >> 8 & 0xffff0 \
                and beat_src(beat) == beat_src(current[0]), "beats of two packets interleave"
        assert beat["data"] >> 8 & 0xf == len(current), "a beat out of order"
        current.append(beat)
        if beat["last"]:
            packets.append(current)
            current = []
    assert not current, "the stream stopped inside a packet"
    return packets


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
    else the lowest-numbered input offering a packet — offering in the cycle of the first
    beat, or with a registered grant in the cycle before it (if any input offered then)."""
    rng = random.Random(seed)
    dut = PacketArbiter(inputs, 64, registered_grant=registered_grant)
    ports = [getattr(dut, f"i_{k}") for k in range(inputs)]
    packets = [[tagged_packet(rng, src, seq, rng.randrange(1, 6), control=rng.random() < 0.3)
                for seq in range(rng.randrange(10, 20))] for src in range(inputs)]
    received = []
    grants = []         # (src of the packet granted, valid and control of every input)

    async def monitor(ctx):
        first = True
        before = [0] * (2 * inputs)     # the offers of the cycle before
        async for _, _, o_valid, o_ready, beat, *offers in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload,
                *(v for p in ports for v in (p.valid, p.payload.control))):
            if o_valid and o_ready:
                if first:
                    grants.append((beat_src(as_dict(beat)),
                                   before if registered_grant else offers))
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
