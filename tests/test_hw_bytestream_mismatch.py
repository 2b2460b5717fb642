# amaranth: UnusedElaboratable=no
"""RowUnpacker when a message's bytes and its chunks disagree: short (underrun) and long
(overrun) messages are flagged and every message after a bad one comes through whole, on
hand-made and random cases; underruns the tail compares alone cannot tell.

The pure-Python references they are checked against: hw_bytestream_helpers.
"""

import random

import pytest

from hw_bytestream_helpers import (region, reference_chunks, random_region, reference_unpack,
                                   run_unpacker)


@pytest.mark.parametrize("stall", [0.0, 0.4])
def test_mismatch_resynchronises(stall):
    """Good, short (underrun), good, long (overrun), good, long, good, with ``clear`` pulsed
    on the way: the flags follow, and every message after a bad one comes through whole."""
    lanes = 8
    rng = random.Random(21)

    def message(n_bytes, dst):
        return rng.randbytes(n_bytes), reference_chunks(dst, lanes)

    short_dst = region(5, 27, 4, 9)
    messages = [
        message(29, region(3, 29)),
        message(20, short_dst),                   # 7 bytes short: underrun
        message(17, region(1, 17, 2, 3)),
        message(40, region(0, 24)),               # two whole beats extra: overrun
        message(13, region(6, 13)),
        message(16, region(0, 15)),               # one byte extra in the last beat: overrun
        message(9, region(2, 9)),
    ]

    def flags_are(overrun, underrun, clear=False):
        async def check(ctx, dut):
            assert (ctx.get(dut.overrun), ctx.get(dut.underrun)) == (overrun, underrun)
            if clear:
                ctx.set(dut.clear, 1)
                await ctx.tick()
                ctx.set(dut.clear, 0)
                assert (ctx.get(dut.overrun), ctx.get(dut.underrun)) == (0, 0)
        return check

    checks = {1: flags_are(0, 0), 2: flags_are(0, 1, clear=True), 3: flags_are(0, 0),
              4: flags_are(1, 0), 5: flags_are(1, 0, clear=True), 6: flags_are(1, 0)}
    rows, flags = run_unpacker(64, messages, stall=stall, seed=21, checks=checks)
    expected, _, _ = reference_unpack(messages)
    assert rows == expected
    assert flags == {"overrun": 1, "underrun": 0}
    # The short message's chunks that fit are written; its last chunk only says "last".
    short_rows = reference_unpack(messages[1:2])[0]
    assert short_rows[-1] == {"row": reference_chunks(short_dst, lanes)[-1]["row"],
                              "data": 0, "mask": 0, "last": 1}
    assert sum(bin(r["mask"]).count("1") for r in short_rows) <= 20


@pytest.mark.parametrize("data_width,seed,stall", [(64, 31, 0.3), (256, 32, 0.0),
                                                   (256, 33, 0.5)])
def test_mismatch_random(data_width, seed, stall):
    """Random messages with random length errors: rows exactly as the reference resynchronises,
    flags set exactly when some message was long or short."""
    lanes = data_width // 8
    rng = random.Random(seed)
    messages = []
    for _ in range(40):
        n_bytes = rng.randint(1, 4 * lanes)
        error = rng.choice([0, 0, -rng.randint(1, lanes + 2), rng.randint(1, 2 * lanes)])
        dst = random_region(rng, lanes, 1 << 20, length=max(1, n_bytes + error))
        messages.append((rng.randbytes(n_bytes), reference_chunks(dst, lanes)))
    expected, overrun, underrun = reference_unpack(messages)
    assert overrun and underrun       # the seeds give both kinds of error
    rows, flags = run_unpacker(data_width, messages, stall=stall, seed=seed)
    assert rows == expected
    assert flags == {"overrun": overrun, "underrun": underrun}


@pytest.mark.parametrize("case", ["after_full_last_beat", "past_last_beat"])
def test_underrun_at_the_end_of_the_bytes(case):
    """A message short of its chunks where the compares of a chunk's tail with the last
    beat's byte count cannot tell on their own: the chunk after one that used the last beat
    to its top lane starts at lane 0 again (of no beat), and a chunk that crosses out of the
    message's last beat must not wait for a beat after it (there is none here).  Either way
    the message ends in its mask-zero row and only ``underrun`` is set."""
    lanes = 8
    rng = random.Random(case)
    if case == "after_full_last_beat":
        payload, dst = rng.randbytes(2 * lanes), region(0, 2 * lanes + 3)
    else:
        payload, dst = rng.randbytes(lanes), region(2, lanes + 3)
    messages = [(payload, reference_chunks(dst, lanes))]
    rows, flags = run_unpacker(64, messages, stall=0.0, seed=71)
    expected, overrun, underrun = reference_unpack(messages)
    assert (overrun, underrun) == (False, True)
    assert rows == expected and expected[-1]["mask"] == 0
    assert flags == {"overrun": 0, "underrun": 1}
