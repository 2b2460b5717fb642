# amaranth: UnusedElaboratable=no
"""Switch: routing, losslessness, ordering, fairness and the dropped counter."""

import random

import pytest
from amaranth.sim import Simulator

from nicoll.hw.net.switch import Switch
from nicoll.sim.testbench import PERIOD, watchdog



def make_packet(rng, src, seq, dest, beats, data_width):
    """Beats whose data names (src, seq, beat) so the receiver can check order and integrity."""
    tag_bits = 24
    out = []
    for b in range(beats):
        tag = (src << 16) | (seq << 4) | b if data_width >= 32 else 0
        data = (rng.getrandbits(data_width - tag_bits) << tag_bits | tag) if data_width > tag_bits \
            else rng.getrandbits(data_width)
        out.append({"data": data, "keep": rng.getrandbits(data_width // 8),
                    "last": int(b == beats - 1), "dest": dest, "control": 0})
    return out


class Harness:
    """Sources with random gaps, sinks with random ready, beats collected per output."""

    def __init__(self, dut, packets, *, src_stall, dst_stall, seed):
        self.dut = dut
        self.packets = packets                 # packets[src] = [list of beat dicts]
        self.src_stall = src_stall
        self.dst_stall = dst_stall
        self.seed = seed
        self.received = [[] for _ in range(dut.ports)]
        self.done = False
        self.cycles = 0

    def source(self, i):
        rng = random.Random(f"src{self.seed}/{i}")
        rx = self.dut.rx(i)

        async def tb(ctx):
            for packet in self.packets[i]:
                for beat in packet:
                    while rng.random() < self.src_stall:
                        ctx.set(rx.valid, 0)
                        await ctx.tick()
                    ctx.set(rx.payload, beat)
                    ctx.set(rx.valid, 1)
                    await ctx.tick().until(rx.ready)
            ctx.set(rx.valid, 0)
        return tb

    def sink(self, o):
        rng = random.Random(f"dst{self.seed}/{o}")
        tx = self.dut.tx(o)

        async def tb(ctx):
            while True:
                ready = rng.random() >= self.dst_stall
                ctx.set(tx.ready, ready)
                *_, valid, payload = await ctx.tick().sample(tx.valid, tx.payload)
                if valid and ready:
                    self.received[o].append({"data": payload.data, "keep": payload.keep,
                                             "last": payload.last, "dest": payload.dest,
                                             "control": payload.control})
        return tb

    def run(self, expected_beats):
        async def main(ctx):
            while sum(map(len, self.received)) < expected_beats:
                await ctx.tick()
                self.cycles += 1
            # Nothing more may come out.
            for _ in range(20):
                await ctx.tick()
            self.dropped = ctx.get(self.dut.dropped)

        sim = Simulator(self.dut)
        sim.add_clock(PERIOD)
        sim.add_testbench(watchdog(50_000), background=True)
        for o in range(self.dut.ports):
            sim.add_testbench(self.sink(o), background=True)
        for i in range(self.dut.ports):
            sim.add_testbench(self.source(i))
        sim.add_testbench(main)
        sim.run()


def split_packets(beats):
    packets, current = [], []
    for beat in beats:
        current.append(beat)
        if beat["last"]:
            packets.append(current)
            current = []
    assert not current, "an output stopped inside a packet"
    return packets


# ---------------------------------------------------------------------------------------------

def test_constructor_errors():
    with pytest.raises(TypeError, match=r"^Number of ports must be an integer, not '4'$"):
        Switch("4", 64)
    with pytest.raises(ValueError, match=r"^Number of ports must be between 1 and 65536, "
                                         r"not 0$"):
        Switch(0, 64)
    with pytest.raises(TypeError, match=r"^Data width must be an integer, not None$"):
        Switch(2, None)
    with pytest.raises(ValueError, match=r"^Data width must be a positive multiple of 8, "
                                         r"not 12$"):
        Switch(2, 12)


def test_ports():
    dut = Switch(3, 64)
    names = list(dut.signature.members)
    assert names == ["rx_0", "rx_1", "rx_2", "tx_0", "tx_1", "tx_2", "dropped"]
    assert len(dut.rx_2.payload.data) == 64 and len(dut.dropped) == 32
    assert dut.signature.members["rx_0"].flow.name == "In"
    assert dut.signature.members["tx_0"].flow.name == "Out"


@pytest.mark.parametrize("ports,data_width,seed,src_stall,dst_stall", [
    (1, 32, 0, 0.3, 0.3),
    (3, 64, 1, 0.0, 0.0),
    (4, 64, 2, 0.5, 0.5),
    (4, 32, 3, 0.2, 0.7),
    (5, 64, 4, 0.7, 0.2),
])
def test_random_traffic(ports, data_width, seed, src_stall, dst_stall):
    rng = random.Random(seed)
    dut = Switch(ports, data_width)
    packets = []
    bad = 0
    for src in range(ports):
        mine = []
        for seq in range(rng.randrange(8, 16)):
            if rng.random() < 0.1:
                dest = rng.choice([ports, ports + 1, 0xffff])
                bad += 1
            else:
                dest = rng.randrange(ports)
            mine.append(make_packet(rng, src, seq, dest, rng.randrange(1, 7), data_width))
        packets.append(mine)
    expected = {}        # (src, dst) -> packets in send order
    for src, mine in enumerate(packets):
        for p in mine:
            if p[0]["dest"] < ports:
                expected.setdefault((src, p[0]["dest"]), []).append(p)
    h = Harness(dut, packets, src_stall=src_stall, dst_stall=dst_stall, seed=seed)
    h.run(sum(len(p) for v in expected.values() for p in v))

    assert h.dropped == bad
    got = {}
    for o in range(ports):
        for p in split_packets(h.received[o]):
            src = (p[0]["data"] >> 16) & 0xff
            assert all(beat["dest"] == o for beat in p)
            got.setdefault((src, o), []).append(p)
    assert got == expected


def test_dest_of_first_beat_routes_the_packet():
    dut = Switch(3, 32)
    rng = random.Random(9)
    packet = make_packet(rng, 0, 0, 1, 4, 32)
    for beat, dest in zip(packet[1:], (2, 0, 7)):
        beat["dest"] = dest
    # A bad dest on the first beat drops the whole packet whatever later beats say.
    dropped = make_packet(rng, 0, 1, 9, 3, 32)
    dropped[1]["dest"] = 1
    h = Harness(dut, [[packet, dropped, packet], [], []], src_stall=0.3, dst_stall=0.3, seed=9)
    h.run(8)
    assert h.received[1] == packet + packet
    assert h.received[0] == h.received[2] == []
    assert h.dropped == 1


@pytest.mark.parametrize("dst_stall", [0.0, 0.5])
def test_fairness(dst_stall):
    """Two saturating sources into one output are served alternately, packet by packet."""
    dut = Switch(3, 32)
    rng = random.Random(11)
    packets = [[make_packet(rng, src, seq, 2, 3, 32) for seq in range(12)] if src < 2 else []
               for src in range(3)]
    h = Harness(dut, packets, src_stall=0.0, dst_stall=dst_stall, seed=11)
    h.run(2 * 12 * 3)
    order = [(p[0]["data"] >> 16) & 0xff for p in split_packets(h.received[2])]
    assert sorted(order) == [0] * 12 + [1] * 12
    assert all(a != b for a, b in zip(order, order[1:])), order


def test_control_packets_overtake_waiting_bulk_packets():
    """Two saturating bulk sources and one with four control packets, all into one output:
    each control packet waits at most for the bulk packet already moving, so the four come
    out among the first five packets (round robin alone would spread them over twelve)."""
    dut = Switch(3, 32)
    rng = random.Random(13)
    bulk = [[make_packet(rng, src, seq, 2, 6, 32) for seq in range(8)] for src in (0, 1)]
    control = [make_packet(rng, 2, seq, 2, 1, 32) for seq in range(4)]
    for packet in control:
        for beat in packet:
            beat["control"] = 1
    h = Harness(dut, [bulk[0], control, bulk[1]], src_stall=0.0, dst_stall=0.3, seed=13)
    h.run(2 * 8 * 6 + 4)
    packets = split_packets(h.received[2])
    positions = [k for k, p in enumerate(packets) if p[0]["control"]]
    assert len(positions) == 4 and positions[-1] <= 4, positions
    assert [p for p in packets if p[0]["control"]] == control
    assert sorted(len(p) for p in packets if not p[0]["control"]) == [6] * 16


def test_full_rate():
    """A permutation (i -> i+1) moves one beat per cycle on every port at once."""
    ports, beats = 4, 8
    dut = Switch(ports, 64)
    rng = random.Random(12)
    packets = [[make_packet(rng, src, seq, (src + 1) % ports, beats, 64) for seq in range(8)]
               for src in range(ports)]
    h = Harness(dut, packets, src_stall=0.0, dst_stall=0.0, seed=12)
    h.run(ports * 8 * beats)
    for o in range(ports):
        assert split_packets(h.received[o]) == packets[(o - 1) % ports]
    # 64 beats per port; the buffer adds a cycle or two of latency.
    assert h.cycles <= 8 * beats + 3, h.cycles


def _repack_packet(rng, *, kind, dst, arg, beats, data_width):
    """A packet whose first beat starts with a header of ``kind`` (a PacketKind) for ``dst``
    about ``arg``, the rest random."""
    from nicoll.hw.net.packet import packet_header_layout
    header = packet_header_layout()
    packet = make_packet(rng, 0, 0, dst, beats, data_width)
    fields = {"kind": kind.value, "dst": dst, "arg": arg}
    word = packet[0]["data"]
    for name, value in fields.items():
        offset, width = header[name].offset, header[name].width
        for bit in range(width):
            if offset + bit < data_width:
                word = (word & ~(1 << (offset + bit))) | (((value >> bit) & 1) << (offset + bit))
    packet[0]["data"] = word
    return packet


@pytest.mark.parametrize("data_width", [64, 128])
def test_repack_steering(data_width):
    """Seed 003's units in the switch: a REPACK_IN packet for the hub (port 1) goes to the port
    of the unit its header's arg names (ports 3 and 4); the hub's other packets, and
    REPACK_IN packets for another node, go by dest; a REPACK_IN for a unit the switch does
    not have goes to the hub (whose receiver drops it).  At 64 bits the arg runs into the
    second beat: the low bits in the first steer."""
    from nicoll.hw.net.packet import PacketKind
    from nicoll.hw.net.switch import RepackSteering
    dut = Switch(5, data_width, steering=RepackSteering(hub=1, first_port=3, units=2))
    rng = random.Random(21)

    def packet(kind, dst, arg):
        return _repack_packet(rng, kind=kind, dst=dst, arg=arg, beats=3, data_width=data_width)
    to_unit1 = packet(PacketKind.REPACK_IN, 1, 1)
    to_unit0 = packet(PacketKind.REPACK_IN, 1, 0)
    registration = packet(PacketKind.REPACK_REGISTER, 1, 1)
    no_unit = packet(PacketKind.REPACK_IN, 1, 2)
    elsewhere = packet(PacketKind.REPACK_IN, 2, 0)
    answer = packet(PacketKind.REPACK_OUT, 0, 0)
    h = Harness(dut, [[to_unit1, registration, no_unit], [], [to_unit0, elsewhere], [answer],
                      []], src_stall=0.3, dst_stall=0.3, seed=21)
    h.run(6 * 3)
    assert h.received[4] == to_unit1 and h.received[3] == to_unit0
    assert h.received[1] == registration + no_unit
    assert h.received[2] == elsewhere and h.received[0] == answer
    assert h.dropped == 0


def test_repack_steering_errors():
    from nicoll.hw.net.switch import RepackSteering
    with pytest.raises(ValueError, match=r"names a port past the switch's 4"):
        Switch(4, 64, steering=RepackSteering(hub=1, first_port=3, units=2))
    with pytest.raises(TypeError, match=r"steering must be a RepackSteering or None, not 3"):
        Switch(4, 64, steering=3)
    with pytest.raises(TypeError, match=r"RepackSteering.units must be a non-negative int, "
                                        r"not '2'"):
        RepackSteering(hub=1, first_port=3, units="2")
    with pytest.raises(ValueError, match=r"needs at least one unit"):
        RepackSteering(hub=1, first_port=3, units=0)
