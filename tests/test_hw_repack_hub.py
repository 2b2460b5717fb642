# amaranth: UnusedElaboratable=no
"""The repack hub on its packet port (Amaranth simulator): what it must never hold up."""

import pytest
from amaranth.sim import Simulator

from nicoll.hw.net.packet import PacketKind, header_beats, packet_header_layout
from nicoll.hw.repack import HEADER_LAYOUT, OrderList, RepackError
from nicoll.hw.repack.hub import MessagePacketizer, RepackHub
from nicoll.sim.testbench import PERIOD, run_testbenches, watchdog

WIDTH = 64


def _registration(rank):
    header = packet_header_layout().const({"kind": PacketKind.REPACK_REGISTER, "src": rank,
                                           "dst": 0})
    bits = header.as_value().value
    beats = header_beats(WIDTH)
    return [(bits >> (k * WIDTH)) & ((1 << WIDTH) - 1) for k in range(beats)]


def test_registrations_are_taken_while_notices_cannot_leave():
    """Six ranks in two subgroups of three.  The first sub-matrix starts as soon as ranks
    0..2 have registered, and its SEND notices cannot leave (tx held).  The later ranks'
    registrations must still be taken at once: on a NIC a notice for the hub's own rank comes
    back through this port, so a registration held here would deadlock the exchange."""
    hub = RepackHub(data_width=WIDTH, max_ranks=8, units=1, max_group=4, capacity_bytes=512)
    groups = [(0, 1, 2), (3, 4, 5)]
    stalls = []
    notices = []

    async def bench(ctx):
        ctx.set(hub.tx.ready, 0)
        for which in (OrderList.SRC, OrderList.DST):
            index = 0
            for group in groups:
                for k, rank in enumerate(group):
                    ctx.set(hub.order.payload, {"list": which, "index": index, "rank": rank,
                                                "end": int(k == len(group) - 1)})
                    ctx.set(hub.order.valid, 1)
                    await ctx.tick().until(hub.order.ready)
                    index += 1
        ctx.set(hub.order.valid, 0)
        ctx.set(hub.start.payload, {"n": 6, "budget": 64, "timeout": 5000})
        ctx.set(hub.start.valid, 1)
        await ctx.tick().until(hub.start.ready)
        ctx.set(hub.start.valid, 0)
        for rank in range(6):
            beats = _registration(rank)
            for k, data in enumerate(beats):
                ctx.set(hub.rx.payload, {"data": data, "keep": 0xFF,
                                         "last": k == len(beats) - 1, "dest": 0,
                                         "control": 1})
                ctx.set(hub.rx.valid, 1)
                waited = 0
                while not ctx.get(hub.rx.ready):
                    await ctx.tick()
                    waited += 1
                    if waited > 50:
                        stalls.append(rank)
                        return
                await ctx.tick()
            ctx.set(hub.rx.valid, 0)
            for _ in range(30):         # the tree scans, pairs and tries to send
                await ctx.tick()
        # Now let the notices out: the first sub-matrix's SENDs go to ranks 0..2 (the one
        # unit takes no other sub-matrix before that one's messages, which never come here).
        ctx.set(hub.tx.ready, 1)
        for _ in range(400):
            if ctx.get(hub.tx.valid) and ctx.get(hub.tx.payload.last):
                notices.append(ctx.get(hub.tx.payload.dest))
            await ctx.tick()
        assert ctx.get(hub.status) == RepackError.OK

    sim = Simulator(hub)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(20_000), background=True)
    sim.add_testbench(bench)
    sim.run()
    assert stalls == [], f"the hub held the registration of rank {stalls} in its port"
    assert notices == [0, 1, 2], notices


def _packetizer_messages(rng, count, beat_bytes):
    """Random messages as lists of (data, keep) beats: 1..40 beats, a ragged last beat, the
    tag in the first beat's header field (where the packetizer reads it)."""
    messages = []
    for _ in range(count):
        beats = []
        length = rng.randint(1, 40)
        for k in range(length):
            data_ = rng.getrandbits(beat_bytes * 8)
            keep = (1 << beat_bytes) - 1 if k < length - 1 else (1 << rng.randint(1, beat_bytes)) - 1
            beats.append((data_, keep))
        messages.append((rng.randrange(8), beats))
    return messages


@pytest.mark.parametrize("packet_beats", [1, 3, 16])
def test_packetizer_cuts_messages_into_packets_under_backpressure(packet_beats):
    """Random messages in, random gaps at the input and random ready at the output: every
    packet carries the header the hub's receivers rely on (REPACK_OUT, the rank as dst, the
    message's tag as seq, its byte count, the offset of its first byte, code 1 on a message's
    last packet), then the beats unchanged, at most ``packet_beats`` of them; the output keeps
    its beat while not taken."""
    import random
    rng = random.Random(packet_beats)
    node_id = 5
    beat_bytes = WIDTH // 8
    hbeats = header_beats(WIDTH)
    messages = _packetizer_messages(rng, 12, beat_bytes)
    dut = MessagePacketizer(WIDTH, packet_beats)
    received = []

    async def send(ctx):
        ctx.set(dut.node_id, node_id)
        for rank, beats in messages:
            for k, (data_, keep) in enumerate(beats):
                while rng.random() < 0.3:
                    ctx.set(dut.i.valid, 0)
                    await ctx.tick()
                ctx.set(dut.i.payload, {"data": data_, "keep": keep,
                                        "last": k == len(beats) - 1, "rank": rank})
                ctx.set(dut.i.valid, 1)
                await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def take(ctx):
        total = sum(len(beats) for _, beats in messages)
        taken_beats = 0
        held = None
        packet = []
        while taken_beats < total:
            ready = rng.random() < 0.6
            ctx.set(dut.o.ready, ready)
            await ctx.delay(PERIOD / 4)
            valid = ctx.get(dut.o.valid)
            payload = (ctx.get(dut.o.payload.data), ctx.get(dut.o.payload.keep),
                       ctx.get(dut.o.payload.last), ctx.get(dut.o.payload.dest)) if valid else None
            if held is not None:
                assert payload == held, "the output changed a beat it had offered"
            held = payload if valid and not ready else None
            await ctx.tick()
            if valid and ready:
                packet.append(payload)
                if len(packet) > hbeats and payload[2]:
                    received.append(packet)
                    taken_beats += len(packet) - hbeats
                    packet = []

    run_testbenches(dut, send, take)
    expected = []
    for rank, beats in messages:
        offset = 0
        for first in range(0, len(beats), packet_beats):
            part = beats[first:first + packet_beats]
            nbytes = sum(bin(keep).count("1") for _, keep in part)
            expected.append((rank, _message_tag(beats), nbytes, offset,
                             first + packet_beats >= len(beats), part))
            offset += nbytes
    assert len(received) == len(expected)
    for packet, (rank, tag, nbytes, offset, final, part) in zip(received, expected):
        bits = sum(beat[0] << (k * WIDTH) for k, beat in enumerate(packet[:hbeats]))
        header = packet_header_layout().from_bits(bits & ((1 << packet_header_layout().size) - 1))
        assert header.kind == PacketKind.REPACK_OUT
        assert (header.src, header.dst, header.seq) == (node_id, rank, tag)
        assert (header.length, header.addr, header.code) == (nbytes, offset, int(final))
        assert [beat[3] for beat in packet] == [rank] * len(packet)
        assert [(beat[0], beat[1]) for beat in packet[hbeats:]] == part
        assert [beat[2] for beat in packet[hbeats:]] == [0] * (len(part) - 1) + [1]


def _message_tag(beats):
    """The tag the packetizer reads from a message's first beat."""
    return HEADER_LAYOUT.from_bits(beats[0][0] & ((1 << HEADER_LAYOUT.size) - 1)).tag


def _packet(kind, arg, payload_beats):
    """A packet of ``kind`` about ``arg`` with ``payload_beats`` beats after its header, as
    (data, last) beats."""
    header = packet_header_layout().const({"kind": kind, "src": 1, "dst": 0, "arg": arg,
                                           "length": 8 * payload_beats})
    bits = header.as_value().value
    beats = [(bits >> (k * WIDTH)) & ((1 << WIDTH) - 1) for k in range(header_beats(WIDTH))]
    beats += [0x5A5A] * payload_beats
    return [(data, k == len(beats) - 1) for k, data in enumerate(beats)]


def test_unit_ports_take_only_their_units_messages():
    """With a port per unit (seed 003's units in the switch) the hub's own port takes
    registrations and notices only, and unit k's port only REPACK_IN messages for unit k:
    a message on the hub's port, a registration on a unit's port and a message for the
    other unit are each dropped whole and counted, and no port is held up."""
    hub = RepackHub(data_width=WIDTH, max_ranks=8, units=2, max_group=4, capacity_bytes=512,
                    unit_ports=True)
    assert {"unit_rx_0", "unit_tx_1"} <= set(hub.signature.members)
    sent = []

    async def send(ctx, port, beats):
        for data, last in beats:
            ctx.set(port.payload, {"data": data, "keep": 0xFF, "last": last, "dest": 0,
                                   "control": 0})
            ctx.set(port.valid, 1)
            await ctx.tick().until(port.ready)
        ctx.set(port.valid, 0)
        sent.append(len(beats))

    async def bench(ctx):
        await send(ctx, hub.rx, _packet(PacketKind.REPACK_IN, 0, 2))
        await send(ctx, hub.unit_rx(0), _packet(PacketKind.REPACK_REGISTER, 0, 0))
        await send(ctx, hub.unit_rx(0), _packet(PacketKind.REPACK_IN, 1, 2))
        await send(ctx, hub.unit_rx(1), _packet(PacketKind.REPACK_OUT, 1, 1))
        for _ in range(4):
            await ctx.tick()
        assert ctx.get(hub.dropped) == 4
        assert not ctx.get(hub.tx.valid) and not ctx.get(hub.unit_tx(0).valid)

    run_testbenches(hub, bench, watchdog_cycles=2_000)
    assert len(sent) == 4


def test_unit_ports_must_be_a_bool():
    with pytest.raises(TypeError, match="unit_ports must be a bool, not 1"):
        RepackHub(data_width=WIDTH, max_ranks=8, units=1, max_group=4, capacity_bytes=512,
                  unit_ports=1)
