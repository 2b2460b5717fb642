# amaranth: UnusedElaboratable=no
"""Engine: aggregate commands (seed 003): the hub's SEND notices and the REPACK_IN messages
they start, REPACK_OUT packets the engine must refuse, and the registered sum tree that
computes a slot's offset.

The harness (node 0 sending to itself) and the memory model: hw_engine_helpers.
"""

import random

import pytest
from amaranth.hdl import Module, Signal

from nicoll.hw.net.packet import PacketKind, header_beats, packet_beat_layout, packet_header_layout
from nicoll.hw.repack import RepackNoticeKind

from hw_engine_helpers import (MEM_SIZE, MAX_NODES, simulate, region, command, random_image, errors,
                               memory, pulse, push, wait_stopped, data_beat, inject)


def refused_aggregate_packet(name, *, slot, length, recv_tag, expected):
    """An aggregate command waits (its registration held in the engine) and a REPACK_OUT
    packet from the hub (send_to) for ``slot``, ``length`` bytes with its whole payload, is
    injected; it must set exactly ``expected`` and write nothing.  The receive stride is far
    past the memory, so the slot's bound never refuses the packet."""
    width = 256
    beat = width // 8
    assert header_beats(width) == 1             # the injected header is one beat
    image = random_image(random.Random(name))

    async def main(ctx, dut):
        engine = dut.engine
        ctx.set(dut.hold, 1)
        cmd = command(send=region(0, 4 * beat, 0, 2 * beat),
                      recv=region(512, 4 * beat, 0, 1 << 20), aggregate=1, send_tag=MAX_NODES,
                      recv_tag=recv_tag)
        assert await push(ctx, dut, cmd) == set()
        await pulse(ctx, engine.go)
        await ctx.tick().repeat(20)             # in the AGGREGATE state, waiting
        assert ctx.get(engine.busy) and errors(ctx, dut) == set()
        header = packet_header_layout().const({
            "kind": PacketKind.REPACK_OUT, "src": 0, "dst": 0, "seq": slot << 8,
            "length": length, "addr": 0})
        await inject(ctx, dut, data_beat(width, header.as_value().value, 0))
        beats = length // beat
        for k in range(beats):
            await inject(ctx, dut, data_beat(width, int.from_bytes(bytes(range(k, k + beat)),
                                                                   "little"), k == beats - 1))
        await wait_stopped(ctx, dut)
        assert errors(ctx, dut) == expected
        assert memory(ctx, dut) == image

    simulate(image, main, seed=21, data_width=width)


def test_send_notices_in_a_row_send_each_slots_message():
    """Three SEND notices from the hub, back to back, so the notice queue holds several:
    each is popped after the one before has started its message, whose bytes (the slot
    after its length word, the length the word says) go to the hub as REPACK_IN packets
    naming the notice's tag and unit.  The per-cycle mirrors (the steps' in-flight flag
    among them) run throughout."""
    width = 256
    beat = width // 8
    assert header_beats(width) == 1
    rng = random.Random(51)
    image = bytearray(random_image(rng))
    stride, groups = 4 * beat, 3
    lengths = [40, 3 * beat - 8, 1]
    for g, length in enumerate(lengths):
        image[g * stride:g * stride + 4] = length.to_bytes(4, "little")
    image = bytes(image)
    sent = []

    def notice(tag, unit, group):
        header = packet_header_layout().const({
            "kind": PacketKind.REPACK_NOTICE, "code": RepackNoticeKind.SEND.value, "src": 0,
            "dst": 0, "seq": tag, "arg": unit, "addr": group})
        return packet_beat_layout(width).const({
            "data": header.as_value().value, "keep": (1 << beat) - 1, "last": 1, "dest": 0,
            "control": 1})

    async def capture(ctx, dut):
        packet = []
        async for _, _, valid, ready, payload in ctx.tick().sample(
                dut.engine.tx.valid, dut.engine.tx.ready, dut.engine.tx.payload):
            if valid and ready:
                packet.append((payload.data, payload.keep, payload.last))
                if payload.last:
                    sent.append(packet)
                    packet = []

    async def main(ctx, dut):
        engine = dut.engine
        ctx.set(dut.drop, 1)
        cmd = command(send=region(0, groups * stride, 0, stride),
                      recv=region(512, groups * stride, 0, stride), aggregate=1,
                      send_tag=groups, recv_tag=groups)
        assert await push(ctx, dut, cmd) == set()
        await pulse(ctx, engine.go)
        await ctx.tick().repeat(20)             # registered with the hub, waiting
        assert ctx.get(engine.busy) and errors(ctx, dut) == set()
        for g in (2, 0, 1):
            await inject(ctx, dut, notice(0x40 + g, 5 + g, g))
        await ctx.tick().repeat(300)
        assert ctx.get(engine.busy) and errors(ctx, dut) == set()

    simulate(image, main, seed=23, data_width=width, monitor=capture)
    kinds = [packet_header_layout().from_bits(p[0][0] & ((1 << packet_header_layout().size) - 1))
             for p in sent]
    assert [h.kind for h in kinds] == [PacketKind.REPACK_REGISTER] + [PacketKind.REPACK_IN] * 3
    for packet, header, g in zip(sent[1:], kinds[1:], (2, 0, 1)):
        assert (header.seq, header.arg, header.length) == (0x40 + g, 5 + g, lengths[g])
        payload = b"".join(data_.to_bytes(beat, "little")[:bin(keep).count("1")]
                           for data_, keep, _ in packet[1:])
        start = g * stride + beat
        assert payload == image[start:start + lengths[g]]


def test_aggregate_packet_longer_than_the_walkers_count_is_a_length_error():
    """The walkers count bytes in ``mem_size.bit_length()`` bits; an aggregate packet whose
    length needs more (it could only write past the memory) sets ``length`` and writes
    nothing: the parser drops it (``agg_long``).  Without that check the walker takes the
    length modulo its count's range, and the unpacker's mismatch check is what stops the
    packet, after the walk has started; with 32-bit counts the walk ran past the memory."""
    refused_aggregate_packet("agg-long", slot=0, length=(1 << MEM_SIZE.bit_length()) + 32,
                             recv_tag=1, expected={"length"})


def test_aggregate_packet_for_a_group_past_max_nodes_is_unexpected():
    """The slot offset's product takes a group's ceil(log2(max_nodes)) bits; a packet for a
    group past them (below the command's count of groups, which is not bounded) is not an
    aggregate packet the engine takes: ``unexpected``, nothing written (taken, it would
    land in the slot of its low bits)."""
    refused_aggregate_packet("agg-group", slot=MAX_NODES, length=32, recv_tag=2 * MAX_NODES,
                             expected={"unexpected"})


@pytest.mark.parametrize("count", range(2, 10))
def test_registered_sum_tree(count):
    """The aggregate slot's sum (Engine._aggregate): ``count`` 32-bit terms, two at a time, a
    register per sum; the total modulo 2**32 after ceil(log2(count)) cycles, and it holds
    while the terms do."""
    from amaranth.utils import ceil_log2
    from nicoll.hw.engine.aggregate import _registered_sum_tree
    from nicoll.sim.testbench import run_testbenches
    rng = random.Random(count)
    m = Module()
    terms = [Signal(32, name=f"term{i}") for i in range(count)]
    out = Signal(32)
    levels = _registered_sum_tree(m, terms, out, name="t")
    assert levels == ceil_log2(count)

    async def tb(ctx):
        for _ in range(4):
            values = [rng.choice([0, 1, 0xFFFF_FFFF, rng.getrandbits(32)]) for _ in terms]
            for term, value in zip(terms, values):
                ctx.set(term, value)
            await ctx.tick().repeat(levels)
            assert ctx.get(out) == sum(values) % (1 << 32), values
            await ctx.tick()
            assert ctx.get(out) == sum(values) % (1 << 32), values

    run_testbenches(m, tb)
    with pytest.raises(ValueError, match=r"^Need at least two terms to sum, not 1$"):
        _registered_sum_tree(Module(), terms[:1], out, name="t")
