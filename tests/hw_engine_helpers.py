# amaranth: UnusedElaboratable=no
"""The engine tests' harness: node 0 of an Engine sending to itself, and a byte-level model
of device memory to check it against.

The engine's ``tx`` comes back on its ``rx`` through a two-entry register slice that can
refuse beats at random; its three memory ports reach one memory with a byte-masked write port
and two non-transparent read ports, as DeviceMemory gives them.  Every test builds one
simulator and runs several short schedules on it, clearing the engine in between
(:func:`run_schedule`).
"""

import random

import numpy as np
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from nicoll import region_bytes
from nicoll.hw.engine import COMMAND_LAYOUT, COUNTERS, ENGINE_ERROR_LAYOUT, Engine, StepAction
from nicoll.hw.ops import DType, ReduceOp
from nicoll.hw.net.packet import PacketKind, header_beats, packet_beat_layout, packet_header_layout
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
