# amaranth: UnusedElaboratable=no
"""What the tests of PacketArbiter and PacketDemux share: packets whose beats name their
source, sequence number and beat, and testbenches that send and take them with random gaps
and ready, then cut the beats taken back into whole packets.
"""

from nicoll.sim.testbench import stream_put


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
                    await ctx.tick()
                await stream_put(ctx, port, beat)
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
