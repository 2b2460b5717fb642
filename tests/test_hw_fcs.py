"""FcsAppend and FcsCheck: the FCS is zlib.crc32 of the kept bytes, appended with no added
latency; the check forwards good packets whole and in order, drops corrupted and over-long
ones and counts them, keeps full rate, and never loses a beat under backpressure."""

import gc
import random
import warnings
import zlib

import pytest
from amaranth.hdl import Elaboratable, Fragment, Module, Signal

from nicoll.hw.net.packet import DEST_WIDTH
from nicoll.hw.sim.fcs import FcsAppend, FcsCheck, link_beat_layout, packet_fcs
from nicoll.sim.testbench import run_testbenches, stream_put

from link_helpers import random_packets

FIELDS = ("data", "keep", "last", "dest", "control")
STALLS = [(0.0, 0.0), (0.4, 0.5)]




def fcs_of(packet):
    return packet_fcs([(beat["data"], beat["keep"]) for beat in packet])


def kept_bit(rng, packet, width):
    """A random (beat, bit) of ``packet`` inside a kept byte."""
    places = [(k, 8 * i) for k, beat in enumerate(packet) for i in range(width // 8)
              if beat["keep"] >> i & 1]
    k, base = rng.choice(places)
    return k, base + rng.randrange(8)


def as_dict(beat, fields=FIELDS):
    return {name: int(getattr(beat, name)) for name in fields}


def run_stream(dut, beats, *, expect, in_stall=0.0, out_stall=0.0, seed=0, side=None,
               hold_sink=0, tail=30, check_cycle=None, final=None):
    """Send ``beats`` (dicts) into ``dut.i`` with random pauses, take ``dut.o`` with random
    backpressure until every beat is sent and ``expect`` beats came out, then ``tail`` more
    cycles with the sink ready (so an extra beat would be seen).  ``side(ctx, k)`` sets other
    inputs along with beat ``k``; ``hold_sink`` cycles of o.ready low come first;
    ``check_cycle(ctx)`` runs in every cycle before the clock edge, ``final(ctx)`` at the end.
    Returns what the monitor saw."""
    rng = random.Random(f"source{seed}")
    srng = random.Random(f"sink{seed}")
    seen = {"in": [], "out": [], "beats": [], "in_ready": [], "taken_while_held": 0}

    async def source(ctx):
        for k, beat in enumerate(beats):
            while rng.random() < in_stall:
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
            if side is not None:
                side(ctx, k)
            await stream_put(ctx, dut.i, beat)
        seen["sent"] = True

    async def sink(ctx):
        cycle = 0
        while len(seen["beats"]) < expect or "sent" not in seen:
            ready = cycle >= hold_sink and srng.random() >= out_stall
            ctx.set(dut.o.ready, ready)
            if check_cycle is not None:
                check_cycle(ctx)
            await ctx.tick()
            cycle += 1
            if cycle == hold_sink:
                seen["taken_while_held"] = len(seen["in"])
        ctx.set(dut.o.ready, 1)
        await ctx.tick().repeat(tail)
        if final is not None:
            final(ctx)

    async def monitor(ctx):
        cycle = 0
        while True:
            *_, iv, ir, ov, orr, op = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.ready, dut.o.payload)
            seen["in_ready"].append(bool(ir))
            if iv and ir:
                seen["in"].append(cycle)
            if ov and orr:
                seen["out"].append(cycle)
                seen["beats"].append(op)
            cycle += 1

    run_testbenches(dut, source, sink, background=[monitor], watchdog_cycles=50_000)
    return seen


def test_packet_fcs_is_crc32_of_the_kept_bytes():
    # The CRC-32 check value, over two beats (the second keeps one byte).
    assert packet_fcs([(int.from_bytes(b"12345678", "little"), 0xFF), (ord("9"), 0x01)]) \
        == zlib.crc32(b"123456789") == 0xCBF43926
    # Bytes whose keep bit is clear are left out, wherever they are.
    beat = int.from_bytes(b"aXbYcZdW", "little")
    assert packet_fcs([(beat, 0b01010101), (beat, 0)]) == zlib.crc32(b"abcd")
    assert packet_fcs([(beat, 0b10101010), (0x41, 1)]) == zlib.crc32(b"XYZWA")
    assert packet_fcs([]) == zlib.crc32(b"") == 0
    assert packet_fcs([(0, 0b1)]) != packet_fcs([(0, 0b11)])


def test_link_beat_layout():
    layout = link_beat_layout(64)
    assert [name for name, _ in layout] == ["data", "keep", "last", "dest", "control", "fcs"]
    assert layout.size == 64 + 8 + 1 + DEST_WIDTH + 1 + 32


@pytest.mark.parametrize("in_stall,out_stall", STALLS)
@pytest.mark.parametrize("width,keep", [(64, "tail"), (64, "random"), (256, "tail"),
                                        (256, "random")])
def test_append_is_a_wire_with_the_fcs(width, keep, in_stall, out_stall):
    dut = FcsAppend(width)
    rng = random.Random(f"{width}{keep}")
    packets = random_packets(rng, 25 if width == 64 else 12, width, longest=5, keep=keep)
    beats = [beat for packet in packets for beat in packet]
    mismatches = []

    def wire(ctx):
        # No flop on the way: o is i in the same cycle, fcs aside.
        if (ctx.get(dut.o.valid) != ctx.get(dut.i.valid)
                or ctx.get(dut.i.ready) != ctx.get(dut.o.ready)
                or as_dict(ctx.get(dut.o.payload)) != as_dict(ctx.get(dut.i.payload))):
            mismatches.append(len(mismatches))

    seen = run_stream(dut, beats, expect=len(beats), in_stall=in_stall, out_stall=out_stall,
                      seed=f"{width}{keep}{in_stall}", check_cycle=wire)
    assert not mismatches
    assert [as_dict(b) for b in seen["beats"]] == beats
    assert seen["in"] == seen["out"]
    fcs = [int(b.fcs) for b in seen["beats"] if b.last]
    assert fcs == [fcs_of(packet) for packet in packets]


class Chain(Elaboratable):
    """FcsAppend, then FcsCheck, with a bit mask XORed onto the data and onto the fcs between
    them (set by the testbench along with each beat)."""

    def __init__(self, width, most):
        self.append = FcsAppend(width)
        self.check = FcsCheck(width, max_packet_beats=most)
        self.flip = Signal(width)
        self.flip_fcs = Signal(32)
        self.i, self.o = self.append.i, self.check.o

    def elaborate(self, platform):
        m = Module()
        m.submodules.append = append = self.append
        m.submodules.check = check = self.check
        m.d.comb += [
            check.i.valid.eq(append.o.valid), append.o.ready.eq(check.i.ready),
            check.i.payload.eq(append.o.payload),
            check.i.payload.data.eq(append.o.payload.data ^ self.flip),
            check.i.payload.fcs.eq(append.o.payload.fcs ^ self.flip_fcs),
        ]
        return m


def run_chain(width, most, packets, faults, **kwargs):
    """``packets`` through a :class:`Chain`; ``faults`` maps (packet, beat) to (data mask,
    fcs mask).  Returns what came out, what should have, and the check's counts at the end."""
    dut = Chain(width, most)
    beats = [beat for packet in packets for beat in packet]
    where = [(p, k) for p, packet in enumerate(packets) for k in range(len(packet))]
    good = [p for p, packet in enumerate(packets)
            if len(packet) <= most and not any((p, k) in faults for k in range(len(packet)))]
    expect = [beat for p in good for beat in packets[p]]
    counts = {}

    def side(ctx, k):
        mask, fcs_mask = faults.get(where[k], (0, 0))
        ctx.set(dut.flip, mask)
        ctx.set(dut.flip_fcs, fcs_mask)

    def final(ctx):
        counts.update(bad=ctx.get(dut.check.bad), too_long=ctx.get(dut.check.too_long))

    seen = run_stream(dut, beats, expect=len(expect), side=side, final=final, **kwargs)
    return seen, expect, counts


@pytest.mark.parametrize("in_stall,out_stall", STALLS)
@pytest.mark.parametrize("width,most,keep", [(64, 4, "tail"), (64, 1, "tail"), (64, 4, "random"),
                                             (256, 3, "random")])
def test_check_forwards_good_packets_and_drops_the_rest(width, most, keep, in_stall, out_stall):
    rng = random.Random(f"chain{width}{most}{keep}")
    packets = random_packets(rng, 40 if width == 64 else 16, width, longest=most + 3, keep=keep)
    # The boundaries: exactly `most` beats passes, one more is too long.
    packets[1] = random_packets(rng, 1, width, shortest=most, longest=most)[0]
    packets[2] = random_packets(rng, 1, width, shortest=most + 1, longest=most + 1)[0]
    faults = {}
    bad = 0
    for p, packet in enumerate(packets):
        if len(packet) > most or p < 3:
            continue
        choice = rng.random()
        if choice < 0.25:                       # one data bit, in a kept byte of any beat
            k, bit = kept_bit(rng, packet, width)
            faults[(p, k)] = (1 << bit, 0)
            bad += 1
        elif choice < 0.35:                     # one bit of the FCS itself
            faults[(p, len(packet) - 1)] = (0, 1 << rng.randrange(32))
            bad += 1
    long_ones = [p for p, packet in enumerate(packets) if len(packet) > most]
    # A corrupted packet past the limit counts as too long only.
    faults[(long_ones[-1], 0)] = (1, 0)
    seen, expect, counts = run_chain(width, most, packets, faults, in_stall=in_stall,
                                     out_stall=out_stall, seed=f"{width}{most}{in_stall}")
    assert bad >= 2 and len(long_ones) >= 2
    assert [as_dict(b) for b in seen["beats"]] == expect
    assert counts == {"bad": bad, "too_long": len(long_ones)}


def test_a_flip_outside_the_kept_bytes_is_not_seen():
    # The FCS covers the kept bytes only: a packet whose unkept byte changed still passes.
    width, most = 64, 4
    rng = random.Random(5)
    packets = random_packets(rng, 3, width, shortest=2, longest=2)
    packets[1][1]["keep"] = 0x0F
    seen, _, counts = run_chain(width, most, packets, {(1, 1): (1 << 40, 0)})
    out = [as_dict(b) for b in seen["beats"]]
    assert out[3]["data"] == packets[1][1]["data"] ^ (1 << 40)
    assert counts == {"bad": 0, "too_long": 0}


@pytest.mark.parametrize("width", [64, 256])
def test_check_keeps_full_rate(width):
    # An always-ready sink: the input is never refused, and packets of one length leave back
    # to back, one beat a cycle from the end of the first packet on.
    most = 4
    rng = random.Random(width)
    packets = random_packets(rng, 12, width, shortest=most, longest=most)
    seen, expect, _ = run_chain(width, most, packets, {})
    n = len(expect)
    assert [as_dict(b) for b in seen["beats"]] == expect
    assert seen["in"] == list(range(n))
    assert seen["out"] == list(range(most, most + n))
    # Mixed lengths: still never refused (a packet drains while the next arrives).
    packets = random_packets(rng, 20, width, longest=most)
    seen, expect, _ = run_chain(width, most, packets, {})
    assert [as_dict(b) for b in seen["beats"]] == expect
    assert seen["in"] == list(range(len(expect)))


@pytest.mark.parametrize("most", [1, 3])
def test_check_fills_its_ring_then_drains(most):
    # With the sink held, the ring takes exactly its 2 * most entries and then refuses;
    # released, every packet leaves whole and in order.
    width = 64
    rng = random.Random(most)
    packets = random_packets(rng, 10, width, longest=most)
    long_one = random_packets(rng, 1, width, shortest=most + 2, longest=most + 2)[0]
    packets.insert(7, long_one)
    seen, expect, counts = run_chain(width, most, packets, {}, hold_sink=60, out_stall=0.3)
    assert seen["taken_while_held"] == 2 * most
    assert [as_dict(b) for b in seen["beats"]] == expect
    assert counts == {"bad": 0, "too_long": 1}


def test_bad_parameters():
    with pytest.raises(ValueError, match=r"^Data width must be a positive multiple of 8, not 60$"):
        FcsAppend(60)
    with pytest.raises(TypeError, match=r"^Data width must be an integer, not '64'$"):
        FcsCheck("64", max_packet_beats=2)
    with pytest.raises(TypeError,
                       match=r"^max_packet_beats must be an integer number of beats, not 2\.5$"):
        FcsCheck(64, max_packet_beats=2.5)
    with pytest.raises(TypeError,
                       match=r"^max_packet_beats must be an integer number of beats, not True$"):
        FcsCheck(64, max_packet_beats=True)
    with pytest.raises(ValueError,
                       match=r"^max_packet_beats must be a positive number of beats, not 0$"):
        FcsCheck(64, max_packet_beats=0)
    check = FcsCheck(64, max_packet_beats=3)
    assert check.depth == 6
    Fragment.get(check, None)                   # used: no "unused" warning


def test_a_refused_component_leaves_no_unused_warning():
    Fragment.get(FcsAppend(8), None)            # Amaranth warns only once anything is built
    gc.collect()                                # other tests' leftovers warn outside
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for make in (lambda: FcsAppend(12), lambda: FcsCheck(64, max_packet_beats=-1),
                     lambda: FcsCheck(64, max_packet_beats="2")):
            try:
                make()
            except (TypeError, ValueError):
                pass
        FcsAppend(16)                           # the control: built, never used
        gc.collect()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "FcsAppend" in messages[0], messages
