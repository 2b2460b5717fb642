# amaranth: UnusedElaboratable=no
"""The engine's packet-level recovery (docs/faults.md, "Packet-level recovery"), in the
Amaranth simulator: node 0 sends to itself through the loop of ``hw_engine_helpers``, and a
testbench drops chosen packets of its ``tx`` (a whole packet, as a link would lose it).

Each case checks what a user relies on: the receive region holds the sent bytes, no error is
raised, the lost packet cost packets sent again (BYTES_SENT above the message), and, where
nothing arrives after the loss, the wait is one probe's (PROBE_CYCLES); a network that loses
everything ends with ERRORS.lost, not a hang.
"""

import random

import pytest

from nicoll.hw.engine.transmit import PROBE_CYCLES, PROBE_TRIES
from nicoll.hw.net.packet import ClearCode, PacketKind

from hw_engine_helpers import (COPY, MEM_SIZE, Model, clear, command, counters, errors, memory,
                               pulse, push, region, settle, simulate, wait_stopped)


def _kind_code(beat):
    """A packet's kind and code from its first beat (the header's low byte)."""
    return PacketKind(beat & 0xF), beat >> 4 & 0xF


def _dropper(choose, dropped):
    """A monitor dropping each packet of the engine's tx for which ``choose(kind, code, n)``
    is true, ``n`` counting the packets seen so far of that kind (of that kind and code for
    a CLEAR packet); ``dropped`` gets (kind, code, n) of each."""
    async def monitor(ctx, dut):
        tx = dut.engine.tx
        seen = {}
        in_packet = dropping = False
        while True:
            valid = ctx.get(tx.valid)
            if valid and not in_packet:
                kind, code = _kind_code(ctx.get(tx.payload.data))
                key = (kind, code if kind == PacketKind.CLEAR else None)
                n = seen.get(key, 0)
                seen[key] = n + 1
                dropping = choose(kind, code, n)
                if dropping:
                    dropped.append((kind, code, n))
                in_packet = True
            ctx.set(dut.drop, dropping and valid)
            ready, last = ctx.get(tx.ready), ctx.get(tx.payload.last)
            await ctx.tick()
            if valid and ready and last:
                in_packet = dropping = False
            elif not (valid and ready):
                # The first beat is offered again next cycle: it is still this packet.
                pass
    return monitor


def _run(choose, cmd, *, limit=30_000, stall=0.0):
    """Run ``cmd`` with the packets ``choose`` picks dropped; returns (errors, counters,
    memory == model, cycles the run took, the dropped packets)."""
    rng = random.Random(3)
    image = bytes(rng.getrandbits(8) for _ in range(MEM_SIZE))
    out, dropped = {}, []

    async def main(ctx, dut):
        await clear(ctx, dut)
        assert await push(ctx, dut, cmd) == set()
        start = ctx.get(dut.now)
        await pulse(ctx, dut.engine.go)
        await wait_stopped(ctx, dut, limit=limit)
        out["cycles"] = ctx.get(dut.now) - start
        out["errors"] = errors(ctx, dut)
        await settle(ctx, dut)
        out["counters"] = counters(ctx, dut)
        model = Model(image)
        model.run(cmd)
        out["right"] = memory(ctx, dut) == bytes(model.mem)

    simulate(image, main, cycles=limit + 5_000, stall=stall, monitor=_dropper(choose, dropped))
    return out["errors"], out["counters"], out["right"], out["cycles"], dropped


#: 128 bytes in packets of two 8-byte beats: 8 data packets.
MESSAGE = command(send=region(0, 128), recv=region(512, 128), packet_beats=2)
STRIDED = command(send=region(0, 96, run=24, stride=40), recv=region(512, 96), packet_beats=2)


def _data(index):
    return lambda kind, code, n: kind == PacketKind.DATA and n == index


def _clear(code, index=0):
    return lambda kind, code_, n: kind == PacketKind.CLEAR and code_ == code.value and n == index


@pytest.mark.parametrize("index", [0, 3, 6])
def test_a_lost_data_packet_is_sent_again_from_the_gap(index):
    """A packet lost before the message's last: the next one shows the gap, the receiver
    asks for a RESEND from it, and the pass after this one starts there (a region of one
    run): the packets before the gap are sent once."""
    errs, got, right, cycles, dropped = _run(_data(index), MESSAGE)
    assert [(kind, n) for kind, _, n in dropped] == [(PacketKind.DATA, index)]
    assert errs == set() and right
    assert got["bytes_received"] == 128
    # This pass to its end, then the next from the gap: 8 + (8 - index) packets.
    assert got["bytes_sent"] == 128 + (8 - index) * 16, got
    assert cycles < PROBE_CYCLES                # no probe was needed


def test_a_lost_last_packet_is_found_by_a_probe():
    """Nothing follows the lost last packet: the sender waits for the ACK, probes after
    PROBE_CYCLES, and the receiver's answer (RESEND from its bytes) brings it again."""
    errs, got, right, cycles, dropped = _run(_data(7), MESSAGE)
    assert dropped == [(PacketKind.DATA, 1, 7)]         # code bit 0: the message's last
    assert errs == set() and right
    assert got["bytes_sent"] == 128 + 16
    assert PROBE_CYCLES < cycles < 2 * PROBE_CYCLES


@pytest.mark.parametrize("code", [ClearCode.CTS, ClearCode.ACK, ClearCode.RESEND,
                                  ClearCode.PROBE])
def test_a_lost_protocol_packet_costs_a_probe(code):
    """A lost clear-to-send (the sender probes; the answer RESEND from 0 starts the send), a
    lost ACK (the probe's answer is the ACK), a lost RESEND (the probe's answer repeats it)
    or a lost probe (the next probe): each costs waits of PROBE_CYCLES, not the answer."""
    choose = _clear(code)
    if code == ClearCode.RESEND:
        data = _data(2)
        choose = lambda kind, code_, n: data(kind, code_, n) or _clear(code)(kind, code_, n)
    if code == ClearCode.PROBE:
        # The probe that follows a lost clear-to-send, lost too.
        choose = lambda kind, code_, n: (_clear(ClearCode.CTS)(kind, code_, n)
                                         or _clear(ClearCode.PROBE)(kind, code_, n))
    errs, got, right, cycles, dropped = _run(choose, MESSAGE)
    assert (PacketKind.CLEAR, code.value, 0) in dropped
    assert errs == set() and right
    assert got["bytes_received"] == 128
    probes = 2 if code == ClearCode.PROBE else 1
    assert probes * PROBE_CYCLES < cycles < (probes + 1) * PROBE_CYCLES


def test_a_strided_region_is_sent_again_from_its_start():
    """A region in runs cannot start a pass at an offset: the next pass starts from byte 0,
    and the receiver drops the packets behind the bytes it took."""
    errs, got, right, cycles, dropped = _run(_data(3), STRIDED)
    assert errs == set() and right
    assert got["bytes_received"] == 96
    assert got["bytes_sent"] == 2 * 96


def test_lost_packets_under_backpressure():
    """Two losses in one message, with the loop refusing beats at random: still right."""
    choose = lambda kind, code, n: kind == PacketKind.DATA and n in (1, 9)
    errs, got, right, cycles, dropped = _run(choose, MESSAGE, stall=0.3)
    assert len(dropped) == 2 and errs == set() and right


def test_a_network_that_loses_everything_ends_with_lost():
    """Every packet after the clear-to-send lost: the sender's PROBE_TRIES probes go
    unanswered and the engine stops with ERRORS.lost, within their waits."""
    choose = lambda kind, code, n: not (kind == PacketKind.CLEAR and code == ClearCode.CTS.value)
    limit = (PROBE_TRIES + 2) * PROBE_CYCLES
    errs, got, right, cycles, dropped = _run(choose, MESSAGE, limit=limit)
    assert errs == {"lost"}
    assert PROBE_TRIES * PROBE_CYCLES < cycles < limit
