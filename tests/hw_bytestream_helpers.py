# amaranth: UnusedElaboratable=no
"""The byte-stream tests' references and testbench helpers: the region walker's, row
packer's and row unpacker's behaviour in pure Python, stream sources and sinks with random
stalls that check the stream rules, and an unpacker run over a list of messages.

The references (hw_bytestream_helpers) work on numpy byte arrays and byte addresses: a region
is the list of its byte addresses in stream order, a chunk list is those addresses grouped by
(run, row), a message is the bytes at those addresses.  None of them walks a region the way
the gateware does.
"""

import itertools
import random
from collections import deque

import numpy as np

from nicoll.hw.engine.unpacker import RowUnpacker
from nicoll.sim.testbench import run_testbenches


# ---- References ----------------------------------------------------------------------------

def region(offset, length, run=0, stride=0):
    return {"offset": offset, "length": length, "run": run, "stride": stride}


def region_addresses(r):
    """(byte addresses in stream order, index of the run of each)."""
    length, run, stride = r["length"], r["run"], r["stride"]
    if run == 0 or run >= length:
        run, stride = max(length, 1), 0
    index = np.arange(length, dtype=np.int64)
    run_of = index // run
    return r["offset"] + run_of * stride + index % run, run_of


def reference_chunks(r, lanes):
    addresses, run_of = region_addresses(r)
    chunks = []
    pairs = zip(run_of.tolist(), addresses.tolist())
    for (_, row), group in itertools.groupby(pairs, key=lambda p: (p[0], p[1] // lanes)):
        lane = [a % lanes for _, a in group]
        assert lane == list(range(lane[0], lane[0] + len(lane)))
        chunks.append({"row": row, "lo": lane[0], "n": len(lane), "last": 0})
    if chunks:
        chunks[-1]["last"] = 1
    return chunks


def span(r):
    addresses, _ = region_addresses(r)
    return int(addresses.max()) - r["offset"] + 1 if r["length"] else 0


def random_region(rng, lanes, limit, length=None):
    """A region inside ``0 .. limit``: contiguous, or strided with runs shorter than, equal
    to or longer than a row, tight or with gaps."""
    while True:
        if length is None:
            n = rng.randint(1, 40 * lanes) if rng.random() < 0.15 else rng.randint(1, 5 * lanes)
        else:
            n = length
        if rng.random() < 0.3:
            # The stride of a contiguous region is ignored, so make it anything.
            run = rng.choice([0, n, n + rng.randint(1, 3 * lanes)])
            stride = rng.randrange(1 << 32)
        else:
            run = rng.choice([rng.randint(1, lanes - 1), lanes, rng.randint(lanes + 1, 3 * lanes)])
            stride = run + rng.choice([0, rng.randint(1, lanes), rng.randint(lanes, 3 * lanes)])
        r = region(0, n, run, stride)
        extent = span(r)
        if extent <= limit:
            r["offset"] = rng.randrange(limit - extent + 1)
            return r


def pack_beats(payload, lanes, junk=None):
    """The beats of one message as RowPacker must give them; with ``junk`` (a
    ``random.Random``) the lanes whose keep is clear hold random bytes instead of zeros."""
    beats = []
    for start in range(0, len(payload), lanes):
        piece = payload[start:start + lanes]
        if junk is not None:
            piece += junk.randbytes(lanes - len(piece))
        beats.append({"data": int.from_bytes(piece, "little"),
                      "keep": (1 << min(lanes, len(payload) - start)) - 1,
                      "last": int(start + lanes >= len(payload))})
    return beats


def row_write(row, lo, piece, last):
    return {"row": row, "data": int.from_bytes(piece, "little") << (8 * lo),
            "mask": ((1 << len(piece)) - 1) << lo, "last": last}


def reference_unpack(messages):
    """Rows and flags RowUnpacker gives for ``[(payload, chunks), ...]``: chunks are served in
    order while the payload still holds all of the chunk's bytes; the first that does not fit
    and those after it are dropped, the one with ``last`` giving a mask-zero row."""
    rows, overrun, underrun = [], False, False
    for payload, chunks in messages:
        pos = 0
        for c in chunks:
            if pos + c["n"] > len(payload):
                underrun = True
                rows.append({"row": chunks[-1]["row"], "data": 0, "mask": 0, "last": 1})
                break
            rows.append(row_write(c["row"], c["lo"], payload[pos:pos + c["n"]], c["last"]))
            pos += c["n"]
        else:
            overrun |= pos < len(payload)
    return rows, overrun, underrun


# ---- Testbench helpers ---------------------------------------------------------------------

def check_mirrors(dut):
    """A background testbench: the flags ``dut`` keeps as flops of their own equal what they
    stand for, every cycle (:class:`~nicoll.hw.lib.mirrors.Mirrored`)."""
    async def mirrors(ctx):
        pairs = [x for pair in dut.mirrors for x in pair]
        while True:
            values = (await ctx.tick().sample(*pairs))[-len(pairs):]
            assert values[0::2] == values[1::2], values
    return mirrors


def simulate(dut, *testbenches, background=(), watchdog_cycles=20_000):
    """:func:`nicoll.sim.testbench.run_testbenches` with this module's watchdog budget."""
    run_testbenches(dut, *testbenches, watchdog_cycles=watchdog_cycles, background=background)


async def offer(ctx, port, payload):
    """Offer one item on ``port`` until it is taken; return the clock cycles that took."""
    ctx.set(port.payload, payload)
    ctx.set(port.valid, 1)
    cycles = 0
    while True:
        # Plain ticks rather than ``tick().until()``: a test failing elsewhere then leaves
        # no half-run async generator behind to complain when it is collected.
        *_, ready = await ctx.tick().sample(port.ready)
        cycles += 1
        if ready:
            ctx.set(port.valid, 0)
            return cycles


def feed(port, queue, rng, stall, encode=None):
    """Offer the items appearing in ``queue`` on ``port``, with a random gap before each."""
    async def run(ctx):
        while True:
            if not queue or (stall and rng.random() < stall):
                ctx.set(port.valid, 0)
                await ctx.tick()
                continue
            item = queue.popleft()
            await offer(ctx, port, encode(item) if encode else item)
    return run


def collect(port, fields, rng, stall, *stores):
    """Take items from ``port`` with random ``ready``; append ``(cycle, item)`` to ``stores``
    (a deque gets the item alone, to be fed on).  Checks the stream rules on the way: valid
    and payload do not change when ready does, and an offered item stays until taken."""
    async def run(ctx):
        cycle, held = 0, None
        payload_bits = port.payload.as_value()
        while True:
            ready = not stall or rng.random() >= stall
            before = ctx.get(port.valid), ctx.get(payload_bits)
            ctx.set(port.ready, ready)
            assert (ctx.get(port.valid), ctx.get(payload_bits)) == before, \
                "valid or payload follows ready"
            if held is not None:
                assert before == (1, held), "an offered item changed before it was taken"
            *_, valid, payload, bits = await ctx.tick().sample(port.valid, port.payload,
                                                               payload_bits)
            cycle += 1
            held = bits if valid and not ready else None
            if valid and ready:
                item = {f: int(getattr(payload, f)) for f in fields}
                for store in stores:
                    store.append(item if isinstance(store, deque) else (cycle, item))
    return run


CHUNK_FIELDS = ("row", "lo", "n", "last")
BEAT_FIELDS = ("data", "keep", "last")
ROW_FIELDS = ("row", "data", "mask", "last")


def run_unpacker(data_width, messages, *, stall, seed, checks=None):
    """Feed ``[(payload, chunks), ...]`` to a RowUnpacker, with junk in the lanes whose keep is
    clear; return its rows and final flags.

    ``checks`` maps a number of messages to ``async check(ctx, dut)``: the inputs pause after
    that many messages and the check runs once all their rows are out and any dropped beats
    are gone."""
    lanes = data_width // 8
    checks = checks or {}
    dut = RowUnpacker(data_width)
    junk = random.Random(f"{seed}j")
    beats_q, chunks_q, got = deque(), deque(), []
    flags = {}

    async def main(ctx):
        done = 0
        for upto in sorted(checks) + [len(messages)]:
            for payload, chunks in messages[done:upto]:
                beats_q.extend(pack_beats(payload, lanes, junk))
                chunks_q.extend(chunks)
            want = len(reference_unpack(messages[:upto])[0])
            while len(got) < want or beats_q or chunks_q:
                await ctx.tick()
            # The item last popped may still be on offer; dropped items go at once.
            for _ in range(8):
                await ctx.tick()
            assert len(got) == want
            assert not ctx.get(dut.beats.valid) and not ctx.get(dut.chunks.valid)
            if upto in checks:
                await checks[upto](ctx, dut)
            done = upto
        flags["overrun"] = ctx.get(dut.overrun)
        flags["underrun"] = ctx.get(dut.underrun)

    simulate(dut, main, background=[
        check_mirrors(dut),
        feed(dut.beats, beats_q, random.Random(f"{seed}b"), stall),
        feed(dut.chunks, chunks_q, random.Random(f"{seed}c"), stall),
        collect(dut.rows, ROW_FIELDS, random.Random(f"{seed}r"), stall, got),
    ])
    return [row for _, row in got], flags


def packer_rows(messages, lanes, rng):
    """The rows a memory read gives RowPacker for ``[(memory, region), ...]``, with random
    bytes in the lanes outside each chunk."""
    rows = []
    for mem, r in messages:
        for c in reference_chunks(r, lanes):
            row_bytes = bytearray(rng.randbytes(lanes))
            base = c["row"] * lanes
            row_bytes[c["lo"]:c["lo"] + c["n"]] = mem[base + c["lo"]:base + c["lo"] + c["n"]]
            rows.append({"data": int.from_bytes(bytes(row_bytes), "little"), "lo": c["lo"],
                         "n": c["n"], "last": c["last"]})
    return rows
