# amaranth: UnusedElaboratable=no
"""Engine: errors found while a schedule runs: a protocol error, data packets from another
sender or operation, an ALU pair the build left out, and send / receive lengths that differ.
Each stops the engine with its ERRORS bit and writes nothing it should not.

The harness (node 0 sending to itself) and the memory model: hw_engine_helpers.
"""

import random

import pytest

from nicoll.hw.ops import DType, ReduceOp
from nicoll.hw.net.packet import PacketKind, header_beats, packet_header_layout

from hw_engine_helpers import (LOCAL_FIRST, RECEIVED_FIRST, simulate, region, command, Model,
                               random_image, errors, counters, memory, pulse, push, clear,
                               wait_stopped, settle, data_beat, inject, run_schedule)


def test_protocol_error():
    """A clear-to-send whose tag is not the one the sender waits for sets ``protocol`` and
    stops the engine before any data moves."""
    image = random_image(random.Random(17))

    async def main(ctx, dut):
        cmd = command(send=region(0, 16), recv=region(512, 16), send_tag=3, recv_tag=4)
        assert await push(ctx, dut, cmd) == set()
        await pulse(ctx, dut.engine.go)
        await wait_stopped(ctx, dut)
        assert errors(ctx, dut) == {"protocol"}
        assert not ctx.get(dut.engine.done)
        await settle(ctx, dut)
        assert memory(ctx, dut) == image
        assert counters(ctx, dut)["bytes_sent"] == 0

    simulate(image, main, seed=6)


@pytest.mark.parametrize("sender, seq, expected", [
    ("right", "right", set()), ("other node", "right", {"unexpected"}),
    ("right", "another operation's", {"unexpected"})])
def test_data_packet_from_another_sender_or_operation_is_unexpected(sender, seq, expected):
    """A receive from node 0 with tag 9 (its clear-to-send dropped) and one DATA packet
    injected that fills it: from node 0 with sequence 9 it is taken and written; from node
    2, or with sequence 10, it belongs to no receive here: ``unexpected`` (the engine stops),
    nothing written.
    Each of the parser's flags (kind, source, sequence, offset) must hold for a packet to
    land."""
    width = 256
    beat = width // 8
    assert header_beats(width) == 1             # the injected header is one beat
    image = random_image(random.Random("data-match"))
    payload = bytes(range(100, 100 + beat))

    async def main(ctx, dut):
        engine = dut.engine
        ctx.set(dut.drop, 1)
        cmd = command(recv=region(512, beat), tag=9)
        assert await push(ctx, dut, cmd) == set()
        await pulse(ctx, engine.go)
        await ctx.tick().repeat(20)             # its clear-to-send sent, waiting for data
        assert ctx.get(engine.busy) and errors(ctx, dut) == set()
        header = packet_header_layout().const({
            "kind": PacketKind.DATA, "code": 1, "src": 0 if sender == "right" else 2,
            "dst": 0, "seq": 9 if seq == "right" else 10, "length": beat, "addr": 0})
        await inject(ctx, dut, data_beat(width, header.as_value().value, 0))
        await inject(ctx, dut, data_beat(width, int.from_bytes(payload, "little"), 1))
        await ctx.tick().repeat(40)
        assert errors(ctx, dut) == expected
        written = memory(ctx, dut)[512:512 + beat]
        assert written == (payload if not expected else image[512:512 + beat])
        # Taken, the receive finishes; unexpected, the engine stops before it does.
        assert not ctx.get(engine.busy) and ctx.get(engine.done) == (not expected)

    simulate(image, main, seed=22, data_width=width)


def test_alu_capability_missing():
    """A reducing receive with an op and type this build leaves out sets ``alu``, stops the
    engine, and writes nothing; a capable reduce afterwards works."""
    rng = random.Random(23)
    image = random_image(rng)
    model = Model(image)

    async def main(ctx, dut):
        engine = dut.engine
        for op, dtype in ((ReduceOp.PROD, DType.INT32), (ReduceOp.SUM, DType.INT64),
                          (ReduceOp.MAX, DType.FLOAT32)):
            await clear(ctx, dut)
            ctx.set(engine.op, op)
            ctx.set(engine.dtype, dtype)
            cmd = command(send=region(0, 40), recv=region(512, 40), action=LOCAL_FIRST)
            assert await push(ctx, dut, cmd) == set()
            await pulse(ctx, engine.go)
            await wait_stopped(ctx, dut)
            assert errors(ctx, dut) == {"alu"}, (op, dtype)
            assert not ctx.get(engine.busy) and not ctx.get(engine.done)
            await settle(ctx, dut)
            assert memory(ctx, dut) == image
        cmd = command(send=region(0, 40), recv=region(512, 40), action=LOCAL_FIRST)
        await run_schedule(ctx, dut, model, [cmd], op=ReduceOp.MAX, dtype=DType.INT32)

    simulate(image, main, seed=8)


@pytest.mark.parametrize("send_length,recv_length,packet_beats", [
    (16, 24, 0), (24, 16, 0), (16, 24, 1), (40, 24, 2),
    (24, 16, 1),
])
def test_length_mismatch(send_length, recv_length, packet_beats):
    """A message shorter or longer than its receive region sets ``length`` and stops the
    engine; clear recovers and the next schedule runs."""
    rng = random.Random(29)
    image = random_image(rng)

    async def main(ctx, dut):
        engine = dut.engine
        cmd = command(send=region(0, send_length), recv=region(512, recv_length),
                      packet_beats=packet_beats)
        assert await push(ctx, dut, cmd) == set()
        await pulse(ctx, engine.go)
        await wait_stopped(ctx, dut)
        assert errors(ctx, dut) == {"length"}
        assert not ctx.get(engine.busy) and not ctx.get(engine.done)
        await settle(ctx, dut)
        model = Model(memory(ctx, dut))
        assert model.mem[:512] == image[:512] and model.mem[512 + recv_length:] == \
            image[512 + recv_length:]
        await run_schedule(ctx, dut, model,
                           [command(send=region(100, 30), recv=region(700, 30), tag=2),
                            command(send=region(700, 28), recv=region(800, 28),
                                    action=RECEIVED_FIRST, tag=3)])

    simulate(image, main, seed=9)
