# amaranth: UnusedElaboratable=no
"""One RepackUnit (seed 003) in the Amaranth simulator: transposes under random stalls,
empty destinations between full ones, its rate, the header with its configuration, events
without pops, capacity and configuration refusals, bad input and the budget over several
table beats.

Every result is compared with the exact messages nicoll.plan.repack builds (one transpose per
sub-matrix) and with the numpy transpose of the whole block matrix.
"""

import random

import pytest

from nicoll.hw.repack import RepackError, RepackUnit, UnitEvent, buffer_bytes_needed
from nicoll.plan.repack import message_beats, pack_message

from hw_repack_helpers import random_blocks, unit_config, UnitRun, submatrix_steps


@pytest.mark.parametrize("width,G,seed,in_stall,out_stall,ev_stall", [
    (64, 5, 0, 0.0, 0.0, 0.0),
    (64, 8, 1, 0.4, 0.4, 0.5),
    (128, 5, 2, 0.2, 0.6, 0.2),
    (256, 5, 3, 0.5, 0.1, 0.7),
    (512, 1, 4, 0.3, 0.3, 0.3),
])
def test_unit_transposes(width, G, seed, in_stall, out_stall, ev_stall):
    """Several sub-matrices in turn: arbitrary S and D, lengths 0..64 including empty rows
    and columns, sources in random order, random pauses and backpressure everywhere.  The
    length tables sit in min(data_width // 16, G) banks: 4 banks of 2 rows at (64, 8), one
    bank per source at (128, 5)."""
    rng = random.Random(seed)
    unit = RepackUnit(width, 4096, G)
    steps, expected, subs = [], [], []
    for sub in range(5):
        S = rng.sample(range(40), rng.randint(1, G))
        D = rng.sample(range(40), rng.randint(1, G))
        blocks = random_blocks(rng, S, D)
        if sub == 4:
            blocks = {key: b"" for key in blocks}          # an all-empty sub-matrix
        tag = rng.getrandbits(16)
        s, e = submatrix_steps(rng, G, width, tag, S, D, blocks)
        steps += s
        expected += e
        subs.append((tag, S, D))
    run = UnitRun(unit, seed=seed, in_stall=in_stall, out_stall=out_stall,
                  ev_stall=ev_stall).run(steps)

    assert run.messages() == expected
    # Every output beat but a message's last is full; keep marks the message's bytes.
    for beat in run.out:
        assert beat["last"] or beat["keep"] == (1 << width // 8) - 1
    # Events: per sub-matrix a TAKEN per source, a DELIVERED per destination in D order, DONE.
    events = list(run.events)
    for tag, S, D in subs:
        mine = events[:len(S) + len(D) + 1]
        events = events[len(S) + len(D) + 1:]
        assert all(e["tag"] == tag for e in mine)
        assert sorted(e["rank"] for e in mine[:len(S)]) == sorted(S)
        assert all(e["kind"] == UnitEvent.TAKEN for e in mine[:len(S)])
        assert [e["rank"] for e in mine[len(S):-1]] == D
        assert all(e["kind"] == UnitEvent.DELIVERED for e in mine[len(S):-1])
        assert mine[-1]["kind"] == UnitEvent.DONE and mine[-1]["code"] == RepackError.OK
    assert events == []
    assert run.errors == 0


@pytest.mark.parametrize("width,G", [(64, 8), (256, 8)])
def test_unit_empty_destinations_between_full_ones(width, G):
    """Destinations whose whole column is empty, between and after ones that are not: an
    empty destination's last table beat goes straight on to the next destination's header,
    whose table is read from that destination's own rows (two rows per bank at (64, 8)),
    not from where the empty one's table ended."""
    rng = random.Random(width + G)
    unit = RepackUnit(width, 4096, G)
    S = rng.sample(range(40), G)
    D = rng.sample(range(40), G)
    blocks = random_blocks(rng, S, D, zero_rows=False)
    for j in D[0::2]:                                   # D[0], D[2], ... empty
        for i in S:
            blocks[i, j] = b""
    for j in D[1::2]:                                   # the others non-empty
        blocks[S[0], j] = blocks[S[0], j] or b"x"
    tag = rng.getrandbits(16)
    steps, expected = submatrix_steps(rng, G, width, tag, S, D, blocks)
    run = UnitRun(unit, seed=width).run(steps)
    assert run.messages() == expected
    assert run.errors == 0


def test_unit_rate():
    """Without stalls, blocks a whole number of beats long: one beat per cycle in, one beat
    per cycle out (header and table beats included), a few cycles per sub-matrix besides."""
    width, G = 64, 4
    rng = random.Random(5)
    unit = RepackUnit(width, 4096, G)
    S, D = [0, 1, 2, 3], [4, 5, 6, 7]
    blocks = {(i, j): rng.randbytes(24) for i in S for j in D}
    steps, expected = submatrix_steps(rng, G, width, 9, S, D, blocks)
    run = UnitRun(unit).run(steps)
    assert run.messages() == expected
    beats_in = sum(len(s[1]) for s in steps if s[0] == "message")
    beats_out = len(run.out)
    assert beats_in == beats_out == 4 * (1 + 1 + 12)
    # A few cycles per sub-matrix: 6, plus the 5 pipeline stages added for the clock (the
    # input's boundary slice and header-compare stage, the output's row register and
    # two-stage rotator), which a sub-matrix passes once: 117 busy cycles before them, 122
    # with them.
    assert run.busy_cycles <= beats_in + beats_out + 6 + 5, run.busy_cycles


@pytest.mark.parametrize("width", [64, 256])
@pytest.mark.parametrize("lead", [0, 1])
def test_unit_header_with_its_configuration(width, lead):
    """A header offered up to one cycle before its configuration: at one, the header
    reaches the compare stage in the cycle the configuration is taken (the input has one
    more slice than the configuration, which passes two), so its compares (tag, count,
    sources) must be made against that configuration, not the previous one (which has
    another tag, other sources and another count here).  Two cycles early, the header is
    parsed while the unit is still idle: a stray, by design.  In a cluster a source's
    message follows its SEND notice, which the control tree posts only once the unit has
    accepted the configuration, and crosses the network first: dozens of cycles later."""
    G = 4
    rng = random.Random(width)
    unit = RepackUnit(width, 4096, G)
    first, expected = submatrix_steps(rng, G, width, 5, [1], [2], {(1, 2): rng.randbytes(9)})
    S, D = [3, 4], [6, 7, 8]
    blocks = {(i, j): rng.randbytes(rng.randrange(1, 20)) for i in S for j in D}
    total = sum(len(b) for b in blocks.values())
    msgs = [message_beats(pack_message(i, 6, [blocks[i, j] for j in D], width), width)
            for i in S]
    steps = first + [("config_with", unit_config(G, 6, S, D, total), msgs[0], lead),
                     ("message", msgs[1]), ("wait_done",)]
    expected += [(j, pack_message(j, 6, [blocks[i, j] for i in S], width)) for j in D]
    run = UnitRun(unit, seed=1).run(steps)
    assert run.errors == 0, RepackError(run.last_error)
    assert run.messages() == expected
    assert [e["code"] for e in run.events if e["kind"] == UnitEvent.DONE] == [RepackError.OK] * 2


def test_unit_events_without_pops():
    """The event FIFO holds a whole sub-matrix's events (dh TAKEN, dv DELIVERED, DONE) and
    more: with the control tree taking none, a full sub-matrix finishes (``busy`` falls) and
    the next is taken, whose sources wait once the FIFO is full; once events are taken again
    it finishes, and every event arrives once, in order."""
    width, G = 64, 4
    rng = random.Random(11)
    unit = RepackUnit(width, 4096, G)
    S, D = [0, 1, 2, 3], [4, 5, 6, 7]
    steps, expected = [("events_closed", 10**9)], []
    for tag in (21, 22):
        blocks = {(i, j): rng.randbytes(rng.randrange(1, 17)) for i in S for j in D}
        total = sum(len(b) for b in blocks.values())
        steps.append(("config", unit_config(G, tag, S, D, total, timeout=60_000)))
        steps += [("message", message_beats(pack_message(i, tag, [blocks[i, j] for j in D],
                                                         width), width)) for i in S]
        expected += [(j, pack_message(j, tag, [blocks[i, j] for i in S], width)) for j in D]
        if tag == 21:
            # No event taken: all 2 G + 1 fit.  The next sub-matrix's sources then wait for
            # room (2 G + 2 events at most) until events are taken, 300 cycles on.
            steps += [("wait_idle",), ("events_closed", 300)]
    steps += [("wait_done",), ("wait_done",)]
    run = UnitRun(unit, seed=3).run(steps, cycles=20_000)
    assert run.messages() == expected
    assert [(e["tag"], e["kind"]) for e in run.events] == [
        (tag, kind) for tag in (21, 22)
        for kind in [UnitEvent.TAKEN] * len(S) + [UnitEvent.DELIVERED] * len(D)
        + [UnitEvent.DONE]]
    assert [e["rank"] for e in run.events if e["kind"] == UnitEvent.DELIVERED] == D + D
    assert run.errors == 0


@pytest.mark.parametrize("width, cap, sources", [(64, 256, 2), (64, 256, 1), (64, 256, 4),
                                                 (256, 512, 3)])
def test_unit_capacity_refused_at_configuration(width, cap, sources):
    """A sub-matrix whose budget does not fit the buffer is refused before any data; one
    byte less fits (the limit depends on the number of sources)."""
    G = 4
    unit = RepackUnit(width, cap, G)
    rng = random.Random(7)
    S, D = [3, 4, 7, 8][:sources], [5, 6]
    fit = cap - buffer_bytes_needed(0, len(S), width)       # the largest budget that fits
    blocks = {(i, j): rng.randbytes(fit // (len(S) * len(D))) for i in S for j in D}
    too_big, _ = submatrix_steps(rng, G, width, 1, S, D, blocks, budget=fit + 1)
    ok, expected = submatrix_steps(rng, G, width, 2, S, D, blocks, budget=fit)
    # The refused configuration's sources send anyway: their messages are strays.
    run = UnitRun(unit, seed=7).run(too_big + ok)
    assert run.events[0] == {"kind": UnitEvent.DONE, "rank": 0, "tag": 1,
                             "code": RepackError.CAPACITY}
    assert run.messages() == expected
    assert run.errors == 1 + len(S)                          # the refusal + two strays
    assert run.last_error == RepackError.STRAY


def test_unit_refuses_sources_whose_padding_alone_overflows():
    """256-bit rows, 64-byte buffer: three sources' row padding (3 x 31 bytes) alone exceeds
    it, so even a budget of zero bytes (all blocks empty) is refused (the host's formula
    agrees, and would let two sources fit)."""
    unit = RepackUnit(256, 64, 4)
    steps = [("config", unit_config(4, 1, [0, 1, 2], [3], 0)), ("wait_done",)]
    run = UnitRun(unit, seed=3).run(steps)
    assert run.events == [{"kind": UnitEvent.DONE, "rank": 0, "tag": 1,
                           "code": RepackError.CAPACITY}]
    assert buffer_bytes_needed(0, 2, 256) <= 64 < buffer_bytes_needed(0, 3, 256)


def test_unit_bad_config():
    unit = RepackUnit(64, 1024, 4)
    steps = []
    for cfg in (unit_config(4, 1, [], [1], 10),                       # dh = 0
                {**unit_config(4, 2, [1], [1], 10), "dv": 5},        # dv > max_group
                unit_config(4, 3, [1], [1], 10, timeout=0)):
        steps += [("config", cfg), ("wait_done",)]
    run = UnitRun(unit).run(steps)
    assert [(e["tag"], e["code"]) for e in run.events] == [
        (1, RepackError.BAD_CONFIG), (2, RepackError.BAD_CONFIG), (3, RepackError.BAD_CONFIG)]
    assert run.errors == 3 and run.out == [] and run.busy_cycles == 0


def _bad_case(case, rng, width, tag, S, D, blocks):
    """Steps after the configuration of a sub-matrix with one bad input; returns (steps,
    code of the sub-matrix's DONE, errors counted)."""
    def msg(i, blist=None, *, tag_=tag, rank=None):
        blist = [blocks[i, j] for j in D] if blist is None else blist
        return message_beats(pack_message(i, tag_, blist, width), width, rank=rank)

    def steps(*messages):
        return [("message", m) for m in messages] + [("wait_done",)]
    good = [msg(i) for i in S]
    if case == "length_short":                 # the table promises more bytes than come
        bad = good[0][:-1]
        bad[-1] = {**bad[-1], "last": 1}
        return steps(bad, *good[1:]), RepackError.LENGTH, 1
    if case == "length_long":                  # more beats than the table says
        bad = good[0][:-1] + [{**good[0][-1], "last": 0}, good[0][-1]]
        return steps(bad, *good[1:]), RepackError.LENGTH, 1
    if case == "length_keep":                  # the last beat's keep says a byte less
        bad = [dict(b) for b in good[0]]
        bad[-1]["keep"] >>= 1
        return steps(bad, *good[1:]), RepackError.LENGTH, 1
    if case == "length_keep_hole":             # the last beat's keep has its first byte clear
        bad = [dict(b) for b in good[0]]
        bad[-1]["keep"] &= ~1
        return steps(bad, *good[1:]), RepackError.LENGTH, 1
    if case in ("header_keep", "table_keep"):  # a header or table beat not whole
        bad = [dict(b) for b in good[0]]
        bad[0 if case == "header_keep" else 1]["keep"] >>= 1
        return steps(bad, *good[1:]), RepackError.LENGTH, 1
    if case == "duplicate":                    # before the sub-matrix is complete
        return steps(good[0], good[0], *good[1:]), RepackError.DUPLICATE, 1
    if case == "outside_d":                    # one block more than D has
        bad = msg(S[0], [blocks[S[0], j] for j in D] + [b"x"])
        return steps(bad, *good[1:]), RepackError.OUTSIDE_D, 1
    if case == "outside_d_padding":            # a length past the count in the table
        bad = [dict(b) for b in good[0]]
        bad[1]["data"] |= 5 << (16 * len(D))
        return steps(bad, *good[1:]), RepackError.OUTSIDE_D, 1
    if case == "over_budget":
        return steps(*good), RepackError.OVER_BUDGET, 1
    if case == "unknown_source":               # a rank not in S: dropped, the rest goes on
        return steps(good[0], msg(99, [b"ab"] * len(D)), *good[1:]), RepackError.OK, 1
    if case == "forged_source":                # header and transport rank differ
        return steps(msg(S[0], rank=S[0] + 1), *good), RepackError.OK, 1
    if case == "wrong_tag":
        return steps(msg(S[0], tag_=tag ^ 1), *good), RepackError.OK, 1
    if case == "timeout":                      # the last source never comes
        return steps(*good[:-1]), RepackError.TIMEOUT, 1
    if case == "timeout_mid_message":          # ... or stops in its middle: its rest is
        return (steps(*good[:-1], good[-1][:2])  # dropped when it comes late
                + [("message", good[-1][2:])]), RepackError.TIMEOUT, 1
    raise AssertionError(case)


@pytest.mark.parametrize("case", [
    "length_short", "length_long", "length_keep", "length_keep_hole", "header_keep",
    "table_keep", "duplicate", "outside_d",
    "outside_d_padding", "over_budget", "unknown_source", "forged_source", "wrong_tag", "timeout",
    "timeout_mid_message",
])
def test_unit_bad_input(case):
    """Each bad input is counted; a sub-matrix it belongs to is dropped whole (no output
    beat), a stray message is dropped alone; the next sub-matrix is transposed."""
    width, G = 64, 4
    rng = random.Random(case)
    unit = RepackUnit(width, 2048, G)
    S, D = [7, 2, 9], [4, 1]
    blocks = {(i, j): rng.randbytes(rng.randint(9, 30)) for i in S for j in D}
    total = sum(map(len, blocks.values()))
    steps, code, errors = _bad_case(case, rng, width, 0x0101, S, D, blocks)
    budget = total - 1 if case == "over_budget" else total + 8
    steps = [("config", unit_config(G, 0x0101, S, D, budget, timeout=100))] + steps
    ok_steps, expected_ok = submatrix_steps(rng, G, width, 0x0202, S, D, blocks)
    run = UnitRun(unit, seed=3, in_stall=0.2, out_stall=0.3).run(steps + ok_steps)

    first_done = next(e for e in run.events if e["kind"] == UnitEvent.DONE)
    assert first_done["code"] == code
    if code == RepackError.OK:
        expected = [(j, pack_message(j, 0x0101, [blocks[i, j] for i in S], width)) for j in D]
    else:
        expected = []
        # Nothing of the dropped sub-matrix was delivered.
        assert not any(e["kind"] == UnitEvent.DELIVERED and e["tag"] == 0x0101
                       for e in run.events)
    assert run.messages() == expected + expected_ok
    assert run.errors == errors
    assert run.last_error != RepackError.OK


@pytest.mark.parametrize("slack", [-1, 0])
@pytest.mark.parametrize("heavy", ["first", "last"])
def test_unit_budget_over_several_table_beats(slack, heavy):
    """The budget check of a message whose length table spans two beats (6 destinations, 4
    entries per 64-bit beat) counts the bytes of both: one byte short of the total drops the
    sub-matrix, the exact total passes, whichever table beat holds most of the bytes."""
    width, G = 64, 8
    rng = random.Random(f"{slack}{heavy}")
    unit = RepackUnit(width, 2048, G)
    S, D = [3, 5, 6], [0, 1, 2, 4, 6, 7]
    heavy_d = D[:4] if heavy == "first" else D[4:]
    blocks = {(i, j): rng.randbytes(rng.randint(20, 40) if j in heavy_d else rng.randint(0, 2))
              for i in S for j in D}
    total = sum(map(len, blocks.values()))
    steps, code, _ = _bad_case("over_budget", rng, width, 0x0101, S, D, blocks)
    steps = [("config", unit_config(G, 0x0101, S, D, total + slack, timeout=100))] + steps
    run = UnitRun(unit, seed=5, in_stall=0.2, out_stall=0.3).run(steps)
    first_done = next(e for e in run.events if e["kind"] == UnitEvent.DONE)
    if slack < 0:
        assert first_done["code"] == RepackError.OVER_BUDGET
        assert run.messages() == []
        assert run.errors == 1
    else:
        assert first_done["code"] == RepackError.OK
        assert run.messages() == [
            (j, pack_message(j, 0x0101, [blocks[i, j] for i in S], width)) for j in D]
        assert run.errors == 0
