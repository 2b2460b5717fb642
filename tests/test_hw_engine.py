# amaranth: UnusedElaboratable=no
"""Engine: step commands of node 0 sending to itself, checked against a byte-level model of
device memory.

The engine's ``tx`` comes back on its ``rx`` through a two-entry register slice that can
refuse beats at random; its three memory ports reach one memory with a byte-masked write port
and two non-transparent read ports, as DeviceMemory gives them.  Every test builds one
simulator and runs several short schedules on it, clearing the engine in between.
"""

import random

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import data
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

import nicoll.driver.engine as eng
from nicoll import region_bytes
from nicoll.model.engine import push_refusals
from nicoll.hw.engine import (COMMAND_LAYOUT, COMMAND_WORDS, COUNTERS, ENGINE_ERROR_LAYOUT, Engine,
                              StepAction)
from nicoll.hw.ops import DType, ReduceOp
from nicoll.hw.net.packet import PacketKind, header_beats, packet_beat_layout, packet_header_layout
from nicoll.hw.repack import RepackNoticeKind
from nicoll.hw.lib.skid import SkidBuffer
from nicoll.sim.testbench import PERIOD, watchdog

MEM_SIZE = 1024
BEAT = 8                                # bytes per row and per beat
ROWS = MEM_SIZE // BEAT
MAX_NODES = 4
QUEUE_DEPTH = 8
PACKET_BEATS = 4
CAPABILITIES = {(ReduceOp.SUM, DType.INT32), (ReduceOp.MAX, DType.INT32),
                (ReduceOp.SUM, DType.FLOAT32)}

COPY = StepAction.COPY
LOCAL_FIRST = StepAction.REDUCE_LOCAL_FIRST
RECEIVED_FIRST = StepAction.REDUCE_RECEIVED_FIRST


class Loopback(Elaboratable):
    """One engine (node 0) whose packets come back to it, its device memory, and ``now``
    counting clock cycles from 0.  ``hold`` refuses the engine's ``tx`` beats this cycle.
    ``inject`` puts a one-beat packet of the testbench's on the engine's ``rx`` between the
    loop's packets (``inject_valid`` until ``inject_ready``), as another node's would arrive."""

    def __init__(self, image, data_width=64):
        assert len(image) == MEM_SIZE
        beat = self.beat = data_width // 8
        self.engine = Engine(data_width=data_width, max_nodes=MAX_NODES, mem_size=MEM_SIZE,
                             alu_capabilities=CAPABILITIES, queue_depth=QUEUE_DEPTH,
                             packet_beats=PACKET_BEATS)
        self.memory = Memory(shape=data_width, depth=MEM_SIZE // beat,
                             init=[int.from_bytes(image[k:k + beat], "little")
                                   for k in range(0, MEM_SIZE, beat)])
        self.loop = SkidBuffer(packet_beat_layout(data_width))
        self.hold = Signal()
        self.drop = Signal()            # the engine's tx beats are taken and not looped
        self.now = Signal(64)
        self.inject = Signal(packet_beat_layout(data_width))
        self.inject_valid = Signal()
        self.inject_ready = Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = self.engine
        m.submodules.memory = memory = self.memory
        m.submodules.loop = loop = self.loop

        wr = memory.write_port(granularity=8)
        m.d.comb += [wr.addr.eq(engine.wr.addr), wr.data.eq(engine.wr.data),
                     wr.en.eq(engine.wr.en)]
        for port in (engine.send_rd, engine.local_rd):
            rd = memory.read_port(domain="sync", transparent_for=())
            m.d.comb += [rd.addr.eq(port.addr), rd.en.eq(port.en), port.data.eq(rd.data)]

        m.d.comb += [loop.i.payload.eq(engine.tx.payload),
                     loop.i.valid.eq(engine.tx.valid & ~self.hold & ~self.drop),
                     engine.tx.ready.eq((loop.i.ready | self.drop) & ~self.hold)]
        # The loop's packets and the injected beats share the engine's rx at packet bounds.
        in_packet = Signal()
        injecting = self.inject_valid & ~in_packet
        with m.If(injecting):
            m.d.comb += [engine.rx.valid.eq(1), engine.rx.payload.eq(self.inject),
                         self.inject_ready.eq(engine.rx.ready)]
        with m.Else():
            m.d.comb += [engine.rx.valid.eq(loop.o.valid), engine.rx.payload.eq(loop.o.payload),
                         loop.o.ready.eq(engine.rx.ready)]
            with m.If(loop.o.valid & engine.rx.ready):
                m.d.sync += in_packet.eq(~loop.o.payload.last)

        m.d.sync += self.now.eq(self.now + 1)
        m.d.comb += engine.now.eq(self.now)
        return m


def simulate(image, main, *, stall=0.0, seed=0, cycles=60_000, data_width=64, monitor=None):
    """Run ``main(ctx, dut)`` on a fresh Loopback holding ``image``; the loop refuses a beat
    with probability ``stall`` each cycle.  ``monitor(ctx, dut)``, if given, runs beside."""
    dut = Loopback(image, data_width)

    async def backpressure(ctx):
        rng = random.Random(seed)
        while True:
            ctx.set(dut.hold, rng.random() < stall)
            await ctx.tick()

    async def testbench(ctx):
        await main(ctx, dut)

    async def mirrors(ctx):
        # The engine's flags kept as flops equal the compares they stand for, in every
        # cycle they are read.
        signals = [x for pair in dut.engine.mirrors for x in pair]
        while True:
            values = (await ctx.tick().sample(*signals))[-len(signals):]
            assert values[0::2] == values[1::2], values

    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(cycles), background=True)
    sim.add_testbench(mirrors, background=True)
    if stall:
        sim.add_testbench(backpressure, background=True)
    if monitor is not None:
        async def watch(ctx):
            await monitor(ctx, dut)
        sim.add_testbench(watch, background=True)
    sim.add_testbench(testbench)
    sim.run()


# ---- Commands and the reference model ---------------------------------------------------------

def region(offset, length, run=0, stride=0):
    return {"offset": offset, "length": length, "run": run, "stride": stride}


def command(*, send=None, recv=None, action=COPY, tag=1, packet_beats=0, **fields):
    """A self-send (peer 0) with the given halves, as a COMMAND_LAYOUT field dict."""
    value = {"send": send or region(0, 0), "recv": recv or region(0, 0),
             "send_to": 0, "recv_from": 0, "send_tag": tag, "recv_tag": tag,
             "packet_beats": packet_beats, "action": action,
             "has_send": send is not None, "has_recv": recv is not None,
             "fence": 0, "barrier": 0}
    value.update(fields)
    return value


def addresses(r):
    """The byte addresses of a region (a command's field dict), in stream order."""
    return [a for start, stop in region_bytes.intervals(**r) for a in range(start, stop)]


def ceil(a, b):
    return -(-a // b)


def data_packets(cmd, beat=BEAT):
    return ceil(cmd["send"]["length"], (cmd["packet_beats"] or PACKET_BEATS) * beat)


def combine(op, dtype, a, b):
    """``a op b`` element-wise on little-endian 4-byte elements."""
    if dtype == DType.FLOAT32:
        x, y = np.frombuffer(a, "<f4"), np.frombuffer(b, "<f4")
        assert not (np.isnan(x).any() or np.isnan(y).any())
        with np.errstate(all="ignore"):
            return (x + y).astype("<f4").tobytes()
    x, y = np.frombuffer(a, "<i4").astype(np.int64), np.frombuffer(b, "<i4").astype(np.int64)
    result = {ReduceOp.SUM: x + y, ReduceOp.MAX: np.maximum(x, y)}[op]
    return (result & 0xffffffff).astype("<u4").tobytes()


class Model:
    """Device memory as the commands of a schedule leave it."""

    def __init__(self, image):
        self.mem = bytearray(image)

    def run(self, cmd, op=None, dtype=None):
        src, dst = addresses(cmd["send"]), addresses(cmd["recv"])
        assert len(src) == len(dst) and not set(src) & set(dst)
        stream = bytes(self.mem[a] for a in src)
        if cmd["action"] == COPY:
            for a, byte in zip(dst, stream):
                self.mem[a] = byte
            return
        received = dict(zip(dst, stream))
        for word in sorted({a // 4 for a in dst}):
            span = range(4 * word, 4 * word + 4)
            assert all(a in received for a in span), "a reduce must cover whole elements"
            local, other = bytes(self.mem[a] for a in span), bytes(received[a] for a in span)
            a, b = (local, other) if cmd["action"] == LOCAL_FIRST else (other, local)
            self.mem[span.start:span.stop] = combine(op, dtype, a, b)


def random_image(rng, kind="bytes"):
    if kind == "float32":
        # Finite values of every magnitude, subnormals included: no NaN to compare.
        words = []
        while len(words) < MEM_SIZE // 4:
            w = rng.getrandbits(32)
            if (w >> 23) & 0xff != 0xff:
                words.append(w)
        return b"".join(w.to_bytes(4, "little") for w in words)
    return bytes(rng.getrandbits(8) for _ in range(MEM_SIZE))


# ---- Testbench steps --------------------------------------------------------------------------

def errors(ctx, dut):
    """The names of the ERRORS bits set."""
    value = ctx.get(dut.engine.errors).as_value().value
    return {name for name, field in ENGINE_ERROR_LAYOUT if value >> field.offset & 1}


def counters(ctx, dut):
    return {name: ctx.get(getattr(dut.engine, name)) for name in COUNTERS}


def memory(ctx, dut):
    return b"".join(ctx.get(dut.memory.data[k]).to_bytes(dut.beat, "little")
                    for k in range(MEM_SIZE // dut.beat))


async def pulse(ctx, strobe):
    ctx.set(strobe, 1)
    await ctx.tick()
    ctx.set(strobe, 0)


async def push(ctx, dut, cmd):
    """Push one command (a field dict or a data.Const); returns the errors after it."""
    if isinstance(cmd, dict):
        cmd = COMMAND_LAYOUT.const(cmd)
    ctx.set(dut.engine.cmd, cmd)
    await pulse(ctx, dut.engine.push)
    await ctx.tick().repeat(2)      # a push acts two cycles after its strobe
    return errors(ctx, dut)


async def clear(ctx, dut):
    await pulse(ctx, dut.engine.clear)
    assert errors(ctx, dut) == set()
    assert ctx.get(dut.engine.queued) == 0 and not ctx.get(dut.engine.busy)
    assert not ctx.get(dut.engine.done) and not ctx.get(dut.engine.armed)


async def wait_stopped(ctx, dut, limit=5_000):
    """Wait until the engine is done or stopped by an error."""
    engine = dut.engine
    for _ in range(limit):
        if ctx.get(engine.done) or (not ctx.get(engine.busy) and errors(ctx, dut)):
            return
        await ctx.tick()
    raise TimeoutError(f"engine still busy after {limit} cycles")


async def settle(ctx, dut, quiet=8):
    """Wait until no beat has been on the loop for ``quiet`` cycles, so a clear does not
    leave half a packet on the wire."""
    run = 0
    while run < quiet:
        moving = ctx.get(dut.engine.tx.valid) or ctx.get(dut.loop.o.valid)
        run = 0 if moving else run + 1
        await ctx.tick()


def clear_to_send(tag, width):
    """A one-beat clear-to-send packet from node 0 with sequence ``tag`` (a data width whose
    header is one beat)."""
    assert header_beats(width) == 1
    header = packet_header_layout().const({"kind": PacketKind.CLEAR, "src": 0, "dst": 0,
                                            "seq": tag})
    return packet_beat_layout(width).const({
        "data": header.as_value().value, "keep": (1 << width // 8) - 1, "last": 1,
        "dest": 0, "control": 1})


def data_beat(width, data_bits, last):
    """A whole beat (every byte kept) of a data-class packet to node 0."""
    return packet_beat_layout(width).const({
        "data": data_bits, "keep": (1 << width // 8) - 1, "last": last, "dest": 0,
        "control": 0})


async def inject(ctx, dut, payload):
    """Offer ``payload`` on the loop's inject port until the engine takes it."""
    ctx.set(dut.inject, payload)
    ctx.set(dut.inject_valid, 1)
    while True:
        ready = ctx.get(dut.inject_ready)
        await ctx.tick()
        if ready:
            break
    ctx.set(dut.inject_valid, 0)


async def run_schedule(ctx, dut, model, cmds, *, op=ReduceOp.SUM, dtype=DType.INT32,
                       extra_packets=0):
    """Clear, push ``cmds``, go, wait for done; checks memory against the model, STATUS and
    the counters."""
    engine = dut.engine
    await clear(ctx, dut)
    ctx.set(engine.op, op)
    ctx.set(engine.dtype, dtype)
    for k, cmd in enumerate(cmds):
        assert await push(ctx, dut, cmd) == set()
        assert ctx.get(engine.queued) == k + 1
    await pulse(ctx, engine.go)
    assert ctx.get(engine.busy)
    await wait_stopped(ctx, dut)
    assert errors(ctx, dut) == set()
    assert ctx.get(engine.done) and not ctx.get(engine.busy)
    assert ctx.get(engine.step) == len(cmds) and ctx.get(engine.queued) == len(cmds)
    for cmd in cmds:
        model.run(cmd, op, dtype)
    assert memory(ctx, dut) == bytes(model.mem)
    await ctx.tick()                # the counters run a cycle behind
    got = counters(ctx, dut)
    moved = sum(c["send"]["length"] for c in cmds)
    packets = sum(data_packets(c, dut.beat) + 1 for c in cmds)
    assert got["bytes_sent"] == got["bytes_received"] == moved
    assert got["packets_sent"] + extra_packets == got["packets_received"] == packets + extra_packets
    assert got["alu_beats"] == sum(region_bytes.rows(**c["recv"], width=dut.beat) for c in cmds
                                   if c["action"] != COPY)
    assert got["busy_cycles"] == ctx.get(engine.finished_at) - ctx.get(engine.started_at) > 0
    return got


# ---- Tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("stall", [0.0, 0.5])
def test_copy_contiguous(stall):
    """Self-sends of 1 .. 100 bytes between aligned and unaligned offsets, in packets of
    1 .. 4 beats: the receive region gets the send region's bytes, no other byte changes."""
    rng = random.Random(f"copy{stall}")
    image = random_image(rng)
    model = Model(image)
    cases = [(1, 0, 512, 0), (100, 3, 517, 0), (8, 8, 520, 1), (9, 7, 1015, 4), (64, 0, 960, 2)]
    for _ in range(14):
        length = rng.randrange(1, 101)
        aligned = rng.random() < 0.4
        send = rng.randrange(0, 512 - length)
        recv = rng.randrange(512, MEM_SIZE - length + 1)
        if aligned:
            send, recv = send & ~7, recv & ~7
        cases.append((length, send, recv, rng.randrange(PACKET_BEATS + 1)))

    async def main(ctx, dut):
        for length, send, recv, beats in cases:
            cmd = command(send=region(send, length), recv=region(recv, length),
                          tag=rng.getrandbits(16), packet_beats=beats)
            got = await run_schedule(ctx, dut, model, [cmd])
            assert got["packets_sent"] == ceil(ceil(length, BEAT), beats or PACKET_BEATS) + 1
        assert memory(ctx, dut) != image            # the copies did something

    simulate(image, main, stall=stall, seed=1)


@pytest.mark.parametrize("data_width,stall", [(64, 0.5), (256, 0.0), (256, 0.5)])
def test_packet_headers(data_width, stall):
    """A message cut into packets of 1 and then 3 beats: each DATA header names the packet's
    offset in the message, its byte count and, on the message's last packet only, code bit 0
    (at 256 bits the whole header is the packet's first beat, sent in the cycle after the
    previous packet's last); the copy lands and the byte counter agrees."""
    beat = data_width // 8
    hbeats = header_beats(data_width)
    rng = random.Random(f"headers{data_width}{stall}")
    image = random_image(rng)
    length = 5 * beat + 3
    cases = [(1, 0, 512), (3, 5, 700)]          # (packet beats, send offset, recv offset)
    taken = []

    async def monitor(ctx, dut):
        tx = dut.engine.tx
        async for _, _, valid, ready, beat_ in ctx.tick().sample(tx.valid, tx.ready, tx.payload):
            if valid and ready:
                taken.append((beat_.data, beat_.last))

    async def main(ctx, dut):
        for packet_beats, send, recv in cases:
            taken.clear()
            await clear(ctx, dut)
            cmd = command(send=region(send, length), recv=region(recv, length), tag=7,
                          packet_beats=packet_beats)
            assert await push(ctx, dut, cmd) == set()
            await pulse(ctx, dut.engine.go)
            await wait_stopped(ctx, dut)
            assert errors(ctx, dut) == set() and ctx.get(dut.engine.done)
            await settle(ctx, dut)
            headers, first = [], True
            for k, (word, last) in enumerate(taken):
                if first:
                    bits = sum(taken[k + i][0] << (i * data_width) for i in range(hbeats))
                    headers.append(data.Const(packet_header_layout(), bits))
                first = last
            sent = [(h.addr, h.length, h.code & 1) for h in headers if h.kind == PacketKind.DATA]
            limit = packet_beats * beat
            want = [(off, min(limit, length - off), int(off + limit >= length))
                    for off in range(0, length, limit)]
            assert sent == want
            await ctx.tick()            # the counters run a cycle behind
            assert counters(ctx, dut)["bytes_sent"] == length
            mem = b"".join(ctx.get(dut.memory.data[k]).to_bytes(beat, "little")
                           for k in range(MEM_SIZE // beat))
            assert mem[recv:recv + length] == image[send:send + length]

    simulate(image, main, stall=stall, seed=3, data_width=data_width, monitor=monitor)


def random_strided(rng, length, base, limit):
    run = rng.randrange(1, length) if length > 1 else 1
    stride = run + rng.randrange(0, 12)
    r = region(0, length, run, stride)
    span = max(addresses(r)) + 1
    r["offset"] = rng.randrange(base, limit - span + 1)
    return r


def test_strided():
    """Strided send into a contiguous receive, the reverse, and strided into strided, with
    runs shorter than a row, a row long and longer."""
    rng = random.Random(7)
    image = random_image(rng)
    model = Model(image)
    schedules = [
        [command(send=region(5, 40, 3, 7), recv=region(600, 40))],
        [command(send=region(64, 37), recv=region(601, 37, 5, 9), packet_beats=1)],
        [command(send=region(16, 40, 4, 12), recv=region(512, 40, 8, 8))],
        [command(send=region(0, 30, 30, 40), recv=region(700, 30, 1, 3))],
    ]
    for _ in range(6):
        length = rng.randrange(1, 90)
        send = random_strided(rng, length, 0, 512) if rng.random() < 0.7 \
            else region(rng.randrange(0, 400), length)
        recv = random_strided(rng, length, 512, MEM_SIZE)
        halves = [send, recv] if rng.random() < 0.5 else [recv, send]
        # Either half may be the strided one, in either half of memory; they never overlap.
        schedules.append([command(send=halves[0], recv=halves[1], tag=rng.getrandbits(16),
                                  packet_beats=rng.randrange(PACKET_BEATS + 1))])

    async def main(ctx, dut):
        for cmds in schedules:
            await run_schedule(ctx, dut, model, cmds)

    simulate(image, main, seed=2)


def reduce_cases(rng, aligned_send):
    cases = []
    for _ in range(5):
        elements = rng.randrange(1, 25)
        length = 4 * elements
        send = rng.randrange(0, 512 - length)
        if aligned_send:
            send &= ~3
        if rng.random() < 0.5:
            recv = region(rng.randrange(512, MEM_SIZE - length) & ~3, length)
        else:
            # Runs of whole elements; with a stride of 4 every run is its own chunk, so two
            # chunks of one row follow each other through the ALU.
            run = 4 * rng.randrange(1, 4)
            stride = run + 4 * rng.randrange(0, 3)
            span = (elements * 4 // run) * stride + run
            recv = region(rng.randrange(512, MEM_SIZE - span) & ~3, length, run, stride)
        cases.append((region(send, length), recv))
    return cases


@pytest.mark.parametrize("op,dtype", [(ReduceOp.SUM, DType.INT32), (ReduceOp.MAX, DType.INT32),
                                      (ReduceOp.SUM, DType.FLOAT32)])
def test_reduce(op, dtype):
    """REDUCE_LOCAL_FIRST and REDUCE_RECEIVED_FIRST: the receive region becomes op(local,
    received) element-wise; the ALU takes one beat per (run, row) of the receive region."""
    rng = random.Random(f"reduce{op}{dtype}")
    floats = dtype == DType.FLOAT32
    image = random_image(rng, "float32" if floats else "bytes")
    model = Model(image)
    cases = reduce_cases(rng, aligned_send=floats)
    cases.append((region(0, 8), region(512, 8, 4, 4)))          # both halves of one row

    async def main(ctx, dut):
        for k, (send, recv) in enumerate(cases):
            action = (LOCAL_FIRST, RECEIVED_FIRST)[k % 2]
            cmd = command(send=send, recv=recv, action=action, tag=k,
                          packet_beats=rng.randrange(PACKET_BEATS + 1))
            await run_schedule(ctx, dut, model, [cmd], op=op, dtype=dtype)

    simulate(image, main, stall=0.3, seed=3)


@pytest.mark.parametrize("op,dtype", [(ReduceOp.SUM, DType.INT32), (ReduceOp.SUM, DType.FLOAT32)])
def test_reduce_chunks_of_one_row(op, dtype):
    """At 256 bits a strided receive puts several chunks of one row through the ALU one
    after the other (runs of 4 bytes at a stride of 8: four chunks a row), and the rows
    reduced are then sent on by the next command of the queue: each chunk's read of the
    local row waits for the write of the chunk before it (the scoreboard's entry for the
    row the receive slice offers), each send's read for the reduce's last write."""
    rng = random.Random(f"rows{op}{dtype}")
    image = random_image(rng, "float32" if dtype == DType.FLOAT32 else "bytes")
    model = Model(image)
    schedules = []
    for k, (run, stride) in enumerate([(4, 8), (4, 12), (8, 16), (4, 8)]):
        length = 4 * 12
        recv = region(512 + 4 * k, length, run, stride)
        action = (LOCAL_FIRST, RECEIVED_FIRST)[k % 2]
        schedules.append([
            command(send=region(32 * k, length), recv=recv, action=action, tag=2 * k),
            command(send=recv, recv=region(256 + 32 * k + 4, length), tag=2 * k + 1)])

    async def main(ctx, dut):
        for cmds in schedules:
            await run_schedule(ctx, dut, model, cmds, op=op, dtype=dtype)

    simulate(image, main, seed=5, data_width=256)


def test_send_waits_for_rows_in_the_alu():
    """A command's send reads rows the command before it reduced, while their results are
    still in the ALU: the read waits for the write (the scoreboard's rows of an earlier
    receive).  The second command's clear-to-send arrives early, as from a peer that reached
    its receive first (injected; from the engine's own receive it would come back too late),
    so the send starts as the reduce's last row enters the pipeline; the sent bytes, reduced
    into a third region (a copy would wait for every earlier write), must be the reduced
    ones.  Without the scoreboard they are the bytes from before the reduce."""
    width = 256
    beat = width // 8
    assert header_beats(width) == 1             # the injected clear-to-send is one beat
    rng = random.Random("alu-rows")
    image = random_image(rng, "float32")
    model = Model(image)
    cases = []
    for k, rows in enumerate((1, 2, 3)):
        length = rows * beat
        reduced = region(512 + 128 * k, length)
        # The reduced region's last row first: the row whose result comes out last.
        last_row = region(512 + 128 * k + length - beat, beat)
        cases.append([command(send=region(64 * k, length), recv=reduced,
                              action=LOCAL_FIRST, tag=10 + 2 * k),
                      command(send=last_row, recv=region(256 + 64 * k, beat),
                              action=RECEIVED_FIRST, tag=11 + 2 * k)])

    pending = []        # the tag of the clear-to-send to inject once a data packet leaves

    async def main(ctx, dut):
        for cmds in cases:
            pending.append(cmds[1]["send_tag"])
            await run_schedule(ctx, dut, model, cmds, op=ReduceOp.SUM, dtype=DType.FLOAT32,
                               extra_packets=1)
            assert not pending

    async def monitor(ctx, dut):
        # After the first command's first data beat leaves (its own clear-to-send taken),
        # the second command's arrives.
        tx = dut.engine.tx
        while True:
            await ctx.tick()
            if pending and ctx.get(tx.valid) and ctx.get(tx.ready) and not ctx.get(
                    tx.payload.control):
                await inject(ctx, dut, clear_to_send(pending.pop(), width))

    simulate(image, main, seed=6, data_width=width, monitor=monitor)


def test_clear_to_send_at_every_cycle_around_the_start():
    """A clear-to-send that arrives in any cycle around a send's start (injected, as from a
    peer that reached its receive first) is matched with the tag it writes, never with the
    entry it replaces: the tag check a start loads is computed over two cycles from `cur`,
    and a write in either of them, or in the start's own, must count.  The second command's
    clear-to-send arrives at every cycle of a window around its start (which waits for the
    first command to finish); each run's tags differ from the last run's, so a stale entry
    is a mismatch (a protocol error)."""
    width = 256
    beat = width // 8
    assert header_beats(width) == 1             # the injected clear-to-send is one beat
    image = random_image(random.Random("cts-window"))
    model = Model(image)
    # Delays 20-23 put the write two cycles before the start, one before, in it and after.
    delays = range(17, 25)
    state = {"tag": None, "delay": None}

    async def main(ctx, dut):
        for delay in delays:
            tags = (40 + 2 * delay, 41 + 2 * delay)
            state.update(tag=tags[1], delay=delay)
            cmds = [command(send=region(0, 2 * beat), recv=region(512, 2 * beat), tag=tags[0]),
                    command(send=region(64, beat), recv=region(768, beat), tag=tags[1])]
            await run_schedule(ctx, dut, model, cmds, extra_packets=1)
            assert state["tag"] is None, f"the clear-to-send at delay {delay} was not taken"

    async def monitor(ctx, dut):
        # `delay` cycles after the first command's first data beat leaves (its own
        # clear-to-send taken), the second command's clear-to-send.
        tx = dut.engine.tx
        while True:
            await ctx.tick()
            if state["tag"] is None or not (ctx.get(tx.valid) and ctx.get(tx.ready)
                                            and not ctx.get(tx.payload.control)):
                continue
            if state["delay"]:
                await ctx.tick().repeat(state["delay"])
            await inject(ctx, dut, clear_to_send(state["tag"], width))
            state["tag"] = None

    simulate(image, main, seed=8, data_width=width, monitor=monitor)


def test_queue_of_commands():
    """Several commands in one queue, each reading what the one before wrote: a copy then a
    reduce into the copied bytes; a reduce then a send of the bytes just reduced into another
    reduce (the send's reads wait on the scoreboard for rows still in the ALU); two reduces
    into the same bytes; a reduce then a send of its bytes into a copy (the copy waits for
    the whole write pipeline); four commands back to back."""
    rng = random.Random(11)
    image = random_image(rng)
    model = Model(image)
    schedules = [
        [command(send=region(3, 40), recv=region(512, 40), tag=1),
         command(send=region(100, 40), recv=region(512, 40), action=LOCAL_FIRST, tag=2)],
        [command(send=region(200, 24), recv=region(600, 24), action=RECEIVED_FIRST, tag=3),
         command(send=region(600, 24), recv=region(704, 24), action=LOCAL_FIRST, tag=4)],
        [command(send=region(40, 16), recv=region(640, 16), action=LOCAL_FIRST, tag=11),
         command(send=region(60, 16), recv=region(640, 16), action=RECEIVED_FIRST, tag=12)],
        [command(send=region(200, 16), recv=region(608, 16), action=LOCAL_FIRST, tag=5),
         command(send=region(612, 8), recv=region(800, 8), tag=6)],
        [command(send=region(8, 12), recv=region(516, 12, 4, 8), action=LOCAL_FIRST, tag=7),
         command(send=region(516, 12, 4, 8), recv=region(900, 12, 4, 4),
                 action=RECEIVED_FIRST, tag=8, packet_beats=1),
         command(send=region(900, 12, 4, 4), recv=region(520, 12), action=LOCAL_FIRST,
                 tag=9, fence=1),
         command(send=region(512, 32), recv=region(960, 32), tag=10)],
    ]

    async def main(ctx, dut):
        for cmds in schedules:
            await run_schedule(ctx, dut, model, cmds, op=ReduceOp.SUM, dtype=DType.INT32)

    simulate(image, main, seed=4)


def raw_command(fields, **raw):
    """A command with some fields set to values the layout's enums cannot name."""
    bits = COMMAND_LAYOUT.const(fields).as_value().value
    for name, value in raw.items():
        field = COMMAND_LAYOUT[name]
        bits = bits & ~(((1 << field.width) - 1) << field.offset) | value << field.offset
    return data.Const(COMMAND_LAYOUT, bits)


GOOD = command(send=region(0, 16), recv=region(512, 16))

REFUSED = {
    "outside memory": ({"region"}, command(send=region(1020, 8), recv=region(512, 8))),
    "receive outside memory": ({"region"}, command(send=region(0, 8), recv=region(1017, 8))),
    "offset beyond memory": ({"region"}, command(send=region(0, 8), recv=region(1 << 20, 8))),
    # Fields past the walkers' count bits: the checks' narrow sums alone would see 8.
    "length beyond memory": ({"region"}, command(send=region(0, 8 + (1 << 16)),
                                                 recv=region(512, 8))),
    "end past 2**32": ({"region"}, command(send=region(0, 8),
                                           recv=region(0xFFFF_FFF8, 0x10))),
    "zero length": ({"region"}, command(send=region(0, 0), recv=region(512, 0))),
    "run longer than stride": ({"region"},
                               command(send=region(0, 16, 8, 4), recv=region(512, 16))),
    "send peer": ({"peer"}, command(send=region(0, 8), recv=region(512, 8), send_to=4)),
    "receive peer": ({"peer"}, command(send=region(0, 8), recv=region(512, 8),
                                       recv_from=0xffff)),
    "action 3": ({"command"}, raw_command(command(send=region(0, 8), recv=region(512, 8)),
                                          action=3)),
    "barrier with data": ({"command"}, command(send=region(0, 8), barrier=1)),
    "nothing to do": ({"command"}, command()),
    "reduce without receive": ({"command"}, command(send=region(0, 8), action=LOCAL_FIRST)),
    "packet too long": ({"command"}, command(send=region(0, 8), recv=region(512, 8),
                                             packet_beats=PACKET_BEATS + 1)),
    # An aggregate command (seed 003): slots of whole rows, more than one row each, no runs.
    "aggregate slot of one row": ({"command"}, command(send=region(0, 64, 0, 8),
                                                       recv=region(512, 64, 0, 16), aggregate=1)),
    "aggregate slot not whole rows": ({"command"}, command(send=region(0, 64, 0, 12),
                                                           recv=region(512, 64, 0, 16),
                                                           aggregate=1)),
    "aggregate receive stride 0": ({"command"}, command(send=region(0, 64, 0, 16),
                                                        recv=region(512, 64), aggregate=1)),
    # More destination groups than nodes: the slot offset's product covers the group's
    # ceil(log2(max_nodes)) bits only (Engine._aggregate).
    "aggregate groups past max_nodes": ({"command"}, command(
        send=region(0, 64, 0, 16), recv=region(512, 64, 0, 16), aggregate=1,
        send_tag=MAX_NODES + 1)),
    "aggregate send run": ({"command"}, command(send=region(0, 64, 64, 16),
                                                recv=region(512, 64, 0, 16), aggregate=1)),
    "aggregate receive run": ({"command"}, command(send=region(0, 64, 0, 16),
                                                   recv=region(512, 64, 64, 16), aggregate=1)),
    "aggregate reducing": ({"command"}, command(send=region(0, 64, 0, 16),
                                               recv=region(512, 64, 0, 16), aggregate=1,
                                               action=LOCAL_FIRST)),
    "several at once": ({"region", "peer", "command"},
                        command(send=region(1020, 8), send_to=9, action=RECEIVED_FIRST)),
}


def test_pushes_in_consecutive_cycles_fill_the_queue_exactly():
    """Pushes strobed in every cycle, each with its checks in flight while the one before it
    is written: the queue takes QUEUE_DEPTH of them and refuses the next with
    ``queue_full`` (the write's decision is made a stage ahead, from the fullness the write
    before it leaves); a bad command among them is refused without taking a place."""
    image = random_image(random.Random("burst"))
    bad_at = 3                                  # the fourth push is refused

    async def main(ctx, dut):
        engine = dut.engine
        await clear(ctx, dut)
        cmds = [GOOD] * (QUEUE_DEPTH + 2)
        cmds[bad_at] = REFUSED["outside memory"][1]
        for cmd in cmds:
            ctx.set(engine.cmd, COMMAND_LAYOUT.const(cmd))
            ctx.set(engine.push, 1)
            await ctx.tick()
        ctx.set(engine.push, 0)
        await ctx.tick().repeat(4)
        assert ctx.get(engine.queued) == QUEUE_DEPTH
        assert errors(ctx, dut) == {"region", "queue_full"}

    simulate(image, main, seed=22)


def test_push_time_errors():
    """Each refused push sets its ERRORS bit and queues nothing; clear clears the bit; the
    queue takes QUEUE_DEPTH commands; a push while running is refused and stops the run."""
    image = random_image(random.Random(13))
    model = Model(image)

    async def main(ctx, dut):
        engine = dut.engine
        for name, (bits, cmd) in REFUSED.items():
            await clear(ctx, dut)
            assert await push(ctx, dut, GOOD) == set()
            assert await push(ctx, dut, cmd) == bits, name
            assert ctx.get(engine.queued) == 1, name
            await pulse(ctx, engine.go)     # an error blocks the start
            assert not ctx.get(engine.busy) and not ctx.get(engine.done), name

        # A barrier alone, a send alone and a reducing receive alone are accepted.
        await clear(ctx, dut)
        assert await push(ctx, dut, command(barrier=1)) == set()
        assert await push(ctx, dut, command(send=region(0, 8))) == set()
        assert await push(ctx, dut, command(recv=region(512, 8), action=LOCAL_FIRST)) == set()
        assert await push(ctx, dut, command(send=region(0, 64, 0, 16),
                                            recv=region(512, 64, 0, 16), aggregate=1,
                                            send_tag=MAX_NODES)) == set()
        assert ctx.get(engine.queued) == 4

        await clear(ctx, dut)
        for k in range(QUEUE_DEPTH):
            assert await push(ctx, dut, command(send=region(8 * k, 8), recv=region(512 + 8 * k, 8),
                                                tag=k)) == set()
        assert ctx.get(engine.queued) == QUEUE_DEPTH
        assert await push(ctx, dut, GOOD) == {"queue_full"}
        assert ctx.get(engine.queued) == QUEUE_DEPTH
        await clear(ctx, dut)

        # A full queue runs.
        cmds = [command(send=region(8 * k, 8), recv=region(512 + 8 * k, 8), tag=k)
                for k in range(QUEUE_DEPTH)]
        await run_schedule(ctx, dut, model, cmds)

        # Push while running.
        await clear(ctx, dut)
        assert await push(ctx, dut, command(send=region(0, 96), recv=region(600, 96))) == set()
        await pulse(ctx, engine.go)
        await ctx.tick()
        assert ctx.get(engine.busy)
        assert await push(ctx, dut, GOOD) == {"running"}
        assert ctx.get(engine.queued) == 1
        await wait_stopped(ctx, dut)
        assert not ctx.get(engine.busy) and not ctx.get(engine.done)
        await settle(ctx, dut)
        await clear(ctx, dut)
        model.mem[:] = memory(ctx, dut)     # the stopped copy may have written some rows
        await run_schedule(ctx, dut, model, [GOOD])

        # GO strobed right behind two pushes, while they are still in their checks: the
        # start waits for them and runs both.
        await clear(ctx, dut)
        for cmd in (GOOD, command(send=region(16, 8), recv=region(528, 8), tag=9)):
            ctx.set(engine.cmd, COMMAND_LAYOUT.const(cmd))
            await pulse(ctx, engine.push)
        await pulse(ctx, engine.go)
        await wait_stopped(ctx, dut)
        assert errors(ctx, dut) == set() and ctx.get(engine.done)
        assert ctx.get(engine.step) == 2 and ctx.get(engine.queued) == 2

    simulate(image, main, seed=5)


def random_command_word(rng):
    """Random COMMAND_LAYOUT bits (a data.Const) and the same command as the device model
    reads it from CMD0 .. CMD10 (nicoll.driver.engine.unpack): values drawn around every bound the
    push checks have (memory's end, the walkers' count bits, MAX_NODES, the packet's beats,
    the aggregate's row multiples), any action code, any flags."""
    beat = BEAT

    def count():
        return rng.choice([0, 1, rng.randrange(1, 3 * beat), rng.randrange(MEM_SIZE + 1),
                           MEM_SIZE - rng.randrange(2 * beat), MEM_SIZE, MEM_SIZE + 1,
                           (1 << 16) + rng.randrange(64), rng.randrange(1 << 32),
                           (1 << 32) - 1 - rng.randrange(64), beat * rng.randrange(1, 9)])

    def node():
        return rng.choice([0, 1, MAX_NODES - 1, MAX_NODES, MAX_NODES + 1, rng.randrange(1 << 16)])

    def inside():
        # A region within memory: contiguous, or strided with its run at most its stride
        # (its runs may still pass memory's end).
        offset = rng.randrange(MEM_SIZE)
        length = rng.randrange(1, MEM_SIZE - offset + 1)
        if rng.random() < 0.5:
            return {"offset": offset, "length": length, "run": 0, "stride": 0}
        run = rng.randrange(1, length + 1)
        return {"offset": offset, "length": length, "run": run,
                "stride": run + rng.randrange(3 * beat)}

    # A command the checks pass but for the draw, then 0 to 3 fields drawn from the edges.
    fields = {"send_to": rng.randrange(MAX_NODES), "recv_from": rng.randrange(MAX_NODES),
              "send_tag": rng.randrange(MAX_NODES + 1), "recv_tag": rng.randrange(1 << 16),
              "packet_beats": rng.randrange(PACKET_BEATS + 1), "action": rng.randrange(3),
              "has_send": 1, "has_recv": 1, "fence": rng.randrange(2), "barrier": 0,
              "aggregate": 0, "send": inside(), "recv": inside()}
    if fields["action"] != 0 or rng.random() < 0.3:
        fields[rng.choice(["has_send", "has_recv"])] = rng.randrange(2)
    if rng.random() < 0.15:             # an aggregate: slots of whole rows
        fields.update(aggregate=1, action=0, has_send=1, has_recv=1)
        for half in ("send", "recv"):
            fields[half].update(run=0, stride=beat * rng.randrange(2, 9))
    edges = {"send_to": node, "recv_from": node, "send_tag": node,
             "packet_beats": lambda: rng.choice([PACKET_BEATS + 1, rng.randrange(1 << 16)]),
             "action": lambda: rng.randrange(4),
             "has_send": lambda: rng.randrange(2), "has_recv": lambda: rng.randrange(2),
             "barrier": lambda: rng.randrange(2), "aggregate": lambda: rng.randrange(2)}
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        name = rng.choice(list(edges) + ["send", "recv"])
        if name in edges:
            fields[name] = edges[name]()
        else:
            fields[name][rng.choice(["offset", "length", "run", "stride"])] = count()
    bits = 0
    for path, value in ((p, v) for p, v in _leaves(fields)):
        field = COMMAND_LAYOUT
        offset = 0
        for name in path:
            offset += field[name].offset
            field = field[name].shape
        bits |= value << offset
    words = [(bits >> (32 * k)) & 0xFFFF_FFFF for k in range(COMMAND_WORDS)]
    return data.Const(COMMAND_LAYOUT, bits), eng.unpack(words)


def _leaves(fields, prefix=()):
    for name, value in fields.items():
        if isinstance(value, dict):
            yield from _leaves(value, prefix + (name,))
        else:
            yield prefix + (name,), value


def test_push_checks_agree_with_the_device_model():
    """One set of rules: random command words pushed into the gateware refuse with exactly
    the ERRORS bits the device model's push check gives (nicoll.model.engine.push_refusals),
    and are queued exactly when it gives none.  Before the two were held together, the model
    refused a strided region whose runs pass memory's end (a product of fields) while the
    gateware, as the register map says, queues it and stops at its first row outside."""
    rng = random.Random("one set of rules")
    cases = [random_command_word(rng) for _ in range(600)]
    cases.append((COMMAND_LAYOUT.const(command(send=region(1000, 8, 4, 100),
                                               recv=region(512, 8))), None))
    seen = {}

    async def main(ctx, dut):
        for k, (cmd, fields) in enumerate(cases):
            if fields is None:
                fields = eng.unpack((cmd.as_value().value >> (32 * j)) & 0xFFFF_FFFF
                                    for j in range(COMMAND_WORDS))
            await clear(ctx, dut)
            got = await push(ctx, dut, cmd)
            want = push_refusals(fields, beat_bytes=BEAT, mem_size=MEM_SIZE,
                                 max_nodes=MAX_NODES, packet_beats=PACKET_BEATS)
            assert got == want, (k, fields)
            assert ctx.get(dut.engine.queued) == (0 if want else 1), (k, fields)
            key = frozenset(want)
            seen[key] = seen.get(key, 0) + 1

    simulate(bytes(MEM_SIZE), main, seed=31, cycles=20_000)
    # The draw reaches every outcome, so a rule either side dropped would show.
    assert {frozenset(), frozenset({"region"}), frozenset({"peer"}),
            frozenset({"command"})} <= set(seen), seen
    assert seen[frozenset()] >= 20, seen


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


def test_arm_starts_at_start_at():
    """With START_AT in the future the engine waits, armed, and starts in the cycle
    ``now == start_at``; with START_AT in the past it starts in the first cycle it is armed."""
    image = random_image(random.Random(19))
    model = Model(image)

    async def main(ctx, dut):
        engine = dut.engine
        cmd = command(send=region(0, 24), recv=region(512, 24))
        for delay in (40, 1, -5):
            await clear(ctx, dut)
            assert await push(ctx, dut, cmd) == set()
            start_at = ctx.get(dut.now) + delay
            ctx.set(engine.start_at, start_at)
            armed_in = ctx.get(dut.now)
            await pulse(ctx, engine.arm)
            # After the edge that ends cycle ``now - 1``: busy iff that cycle started it.
            while not ctx.get(engine.busy):
                now = ctx.get(dut.now)
                assert ctx.get(engine.armed) and now - 1 < max(start_at, armed_in + 1)
                await ctx.tick()
            assert ctx.get(dut.now) - 1 == max(start_at, armed_in + 1)
            assert not ctx.get(engine.armed)
            await wait_stopped(ctx, dut)
            # The start's cycle, shown from the cycle after busy rises (the host reads it
            # after a run).
            assert ctx.get(engine.started_at) == max(start_at, armed_in + 1)
            assert ctx.get(engine.done) and errors(ctx, dut) == set()
            model.run(cmd)
            assert memory(ctx, dut) == bytes(model.mem)
            assert ctx.get(engine.finished_at) > ctx.get(engine.started_at)

    simulate(image, main, seed=7)


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


SCHEDULE = [
    command(send=region(5, 77, 7, 10), recv=region(513, 77), tag=1, packet_beats=2),
    command(send=region(200, 48), recv=region(520, 48, 8, 12), action=LOCAL_FIRST, tag=2),
    command(send=region(520, 48, 8, 12), recv=region(900, 48), action=RECEIVED_FIRST, tag=3),
    command(send=region(900, 48), recv=region(704, 48, 4, 4), tag=4, packet_beats=1),
    command(send=region(300, 100), recv=region(620, 100), action=LOCAL_FIRST, tag=5),
]


@pytest.mark.parametrize("stall", [0.0, 0.3, 0.8])
def test_backpressure_never_changes_results(stall):
    """The same schedule of copies and reduces gives the same memory whatever the loop's
    backpressure; stall_cycles counts the cycles the engine offered a beat the loop refused."""
    image = random_image(random.Random(31))

    async def main(ctx, dut):
        model = Model(image)
        got = await run_schedule(ctx, dut, model, SCHEDULE, op=ReduceOp.MAX, dtype=DType.INT32)
        # The engine's own receiver stalls the loop too (a cycle per packet header).
        assert 0 < got["stall_cycles"] < got["busy_cycles"]
        if stall:
            assert got["stall_cycles"] > got["busy_cycles"] * stall / 4

    simulate(image, main, stall=stall, seed=10)


def test_clear_zeroes_counters():
    """CONTROL.clear empties the queue and clears STATUS, ERRORS and the counters."""
    image = random_image(random.Random(37))

    async def main(ctx, dut):
        cmd = command(send=region(0, 40), recv=region(512, 40), action=LOCAL_FIRST)
        got = await run_schedule(ctx, dut, Model(image), [cmd])
        assert all(got[name] for name in COUNTERS if name != "stall_cycles")
        await pulse(ctx, dut.engine.clear)
        assert ctx.get(dut.engine.queued) == 0 and not ctx.get(dut.engine.done)
        assert counters(ctx, dut) == dict.fromkeys(COUNTERS, 0)

    simulate(image, main, seed=11)


def test_strided_region_past_memory_never_runs():
    """A strided region whose runs pass the end of memory although ``offset + length`` does
    not is queued (the push checks a region's own fields, as the device model does) and
    stops the run with ``region`` when its first row outside memory comes up, writing
    nothing outside the region."""
    image = random_image(random.Random(41))

    async def main(ctx, dut):
        for cmd in (command(send=region(1000, 8, 4, 100), recv=region(512, 8)),
                    command(send=region(0, 16), recv=region(992, 16, 4, 12))):
            await clear(ctx, dut)
            assert await push(ctx, dut, cmd) == set()
            await pulse(ctx, dut.engine.go)
            await wait_stopped(ctx, dut)
            assert errors(ctx, dut) == {"region"}
            assert not ctx.get(dut.engine.busy) and not ctx.get(dut.engine.done)
            await settle(ctx, dut)
            inside = set(addresses(cmd["recv"]))
            after = memory(ctx, dut)
            assert all(after[a] == image[a] for a in range(MEM_SIZE) if a not in inside)

    simulate(image, main, seed=12)


def test_step_counts_finished_commands():
    """STEP: commands of the queue finished since the start (STATUS: the command running)."""
    image = random_image(random.Random(47))
    cmds = [command(send=region(0, 64), recv=region(512, 64), tag=1),
            command(send=region(64, 64), recv=region(600, 64), tag=2)]

    async def main(ctx, dut):
        engine = dut.engine
        for cmd in cmds:
            assert await push(ctx, dut, cmd) == set()
        await pulse(ctx, engine.go)
        seen = set()
        while not ctx.get(engine.done):
            received = ctx.get(engine.bytes_received)
            seen.add((ctx.get(engine.step), received))
            if received < 64:           # the first message has not all arrived
                assert ctx.get(engine.step) == 0, sorted(seen)
            await ctx.tick()
        assert ctx.get(engine.step) == 2

    simulate(image, main, seed=14)


def test_barrier_command():
    """A barrier command signals done for the barrier unit's current barrier once the command
    before it has finished, and holds the queue until the unit moves on to the next one."""
    image = random_image(random.Random(53))
    model = Model(image)
    cmds = [command(send=region(0, 40), recv=region(512, 40), action=LOCAL_FIRST, tag=1),
            command(barrier=1),
            command(send=region(512, 40), recv=region(800, 40), tag=2)]

    async def main(ctx, dut):
        engine = dut.engine
        ctx.set(engine.op, ReduceOp.SUM)
        ctx.set(engine.dtype, DType.INT32)
        ctx.set(engine.barrier_seq, 5)
        for cmd in cmds:
            assert await push(ctx, dut, cmd) == set()
        await pulse(ctx, engine.go)
        while not ctx.get(engine.barrier_done):
            await ctx.tick()
        assert ctx.get(engine.barrier_done_seq) == 5
        # The reduce has landed: the barrier waits for every earlier write.
        model.run(cmds[0], ReduceOp.SUM, DType.INT32)
        assert memory(ctx, dut) == bytes(model.mem)
        await ctx.tick()
        for _ in range(100):
            assert not ctx.get(engine.barrier_done) and ctx.get(engine.busy)
            assert ctx.get(engine.bytes_sent) == 40
            await ctx.tick()
        ctx.set(engine.barrier_seq, 6)
        await wait_stopped(ctx, dut)
        assert ctx.get(engine.done) and errors(ctx, dut) == set()
        model.run(cmds[2])
        assert memory(ctx, dut) == bytes(model.mem)
        assert ctx.get(engine.bytes_sent) == ctx.get(engine.bytes_received) == 80

    simulate(image, main, seed=15)


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
