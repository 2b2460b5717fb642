# amaranth: UnusedElaboratable=no
"""Repack units and control tree (seed 003) in the Amaranth simulator.

Every result is compared with the exact messages nicoll.plan.repack builds (one transpose per
sub-matrix) and with the numpy transpose of the whole block matrix.
"""

import random

import numpy as np
import pytest
from amaranth.hdl import Const, Module, Signal, signed
from amaranth.sim import Simulator

from nicoll.hw.repack import unit_arith
from nicoll.hw.repack import (HEADER_LAYOUT, RepackNoticeKind, OrderList, RepackControl, RepackArray,
                              RepackError, RepackUnit, UnitEvent, buffer_bytes_needed,
                              length_table_layout, message_beat_layout, unit_config_layout)
from nicoll.hw.sim.repack_top import (CONTROL_PORTS, TOPLEVEL, RepackArrayTop,
                                  control_tdata_width, repack_verilog)
from nicoll.hw.net.switch import Switch
from nicoll.plan.repack import (beats_to_message, cost_repack, message_beats, pack_message,
                                plan_subgroups, reference_alltoallv)
from nicoll.sim.testbench import PERIOD, watchdog


# ---- Helpers ------------------------------------------------------------------------------

def random_blocks(rng, ranks_src, ranks_dst, *, max_len=64, zero_rows=True):
    """{(i, j): bytes} with lengths 0..max_len; some whole rows and columns empty."""
    blocks = {(i, j): rng.randbytes(rng.randrange(max_len + 1))
              for i in ranks_src for j in ranks_dst}
    if zero_rows and rng.random() < 0.5:
        i = rng.choice(ranks_src)
        for j in ranks_dst:
            blocks[i, j] = b""
    if zero_rows and rng.random() < 0.5:
        j = rng.choice(ranks_dst)
        for i in ranks_src:
            blocks[i, j] = b""
    return blocks


def unit_config(G, tag, S, D, total_bytes, timeout=200):
    return {"tag": tag, "dh": len(S), "dv": len(D), "src": list(S) + [0] * (G - len(S)),
            "dst": list(D) + [0] * (G - len(D)), "total_bytes": total_bytes,
            "timeout": timeout}


def split_messages(beats, width):
    messages, current = [], []
    for beat in beats:
        current.append(beat)
        if beat["last"]:
            messages.append((current[0]["rank"], beats_to_message(current, width)))
            current = []
    assert not current, "an output stopped inside a message"
    return messages


async def send_beats(ctx, port, beats, rng, stall):
    for beat in beats:
        while stall and rng.random() < stall:
            ctx.set(port.valid, 0)
            await ctx.tick()
        ctx.set(port.payload, beat)
        ctx.set(port.valid, 1)
        await ctx.tick().until(port.ready)
    ctx.set(port.valid, 0)


def sink(port, store, rng, stall, fields=("data", "keep", "last", "rank"), gate=None):
    async def run(ctx):
        while True:
            ready = (not stall or rng.random() >= stall) and (gate is None or gate())
            ctx.set(port.ready, ready)
            *_, valid, payload = await ctx.tick().sample(port.valid, port.payload)
            if valid and ready:
                store.append({f: getattr(payload, f) for f in fields})
    return run


def simulate(dut, main, background, cycles):
    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(cycles), background=True)
    for tb in background:
        sim.add_testbench(tb, background=True)
    sim.add_testbench(main)
    sim.run()


class UnitRun:
    """Drives one RepackUnit through a list of steps; collects its output beats and events.

    A step is ``("config", dict)``, ``("message", beats)``, ``("config_with", dict, beats,
    lead)`` (the message's first beat offered ``lead`` cycles before the configuration),
    ``("wait_done",)`` (until the
    unit has reported one more DONE), ``("idle", cycles)``, ``("events_closed", cycles)`` (the
    event sink takes no event for that many cycles from now) or ``("wait_idle",)`` (until
    ``busy`` is low)."""

    def __init__(self, unit, *, seed=0, in_stall=0.0, out_stall=0.0, ev_stall=0.0):
        self.unit = unit
        self.events_closed = 0
        self.rng = random.Random(seed)
        self.in_stall, self.out_stall, self.ev_stall = in_stall, out_stall, ev_stall
        self.out = []
        self.events = []
        self.cycles = 0

    def run(self, steps, cycles=60_000):
        unit = self.unit
        dones = 0

        async def main(ctx):
            nonlocal dones
            for step in steps:
                if step[0] == "config":
                    ctx.set(unit.cfg.payload, step[1])
                    ctx.set(unit.cfg.valid, 1)
                    await ctx.tick().until(unit.cfg.ready)
                    ctx.set(unit.cfg.valid, 0)
                elif step[0] == "message":
                    await send_beats(ctx, unit.i, step[1], self.rng, self.in_stall)
                elif step[0] == "config_with":
                    await self._config_with_message(ctx, *step[1:])
                elif step[0] == "wait_done":
                    dones += 1
                    while sum(e["kind"] == UnitEvent.DONE for e in self.events) < dones:
                        await ctx.tick()
                elif step[0] == "idle":
                    await ctx.tick().repeat(step[1])
                elif step[0] == "events_closed":
                    self.events_closed = step[1]
                elif step[0] == "wait_idle":
                    await ctx.tick().until(~unit.busy)
            for _ in range(10):
                await ctx.tick()
            self.errors = ctx.get(unit.errors)
            self.last_error = ctx.get(unit.last_error)
            self.busy_cycles = ctx.get(unit.busy_cycles)

        simulate(unit, main, [
            sink(unit.o, self.out, random.Random(self.rng.random()), self.out_stall),
            sink(unit.event, self.events, random.Random(self.rng.random()), self.ev_stall,
                 fields=("kind", "rank", "tag", "code"), gate=self._events_open),
        ], cycles)
        return self

    async def _config_with_message(self, ctx, cfg, beats, lead):
        unit = self.unit
        ctx.set(unit.i.payload, beats[0])
        ctx.set(unit.i.valid, 1)
        cfg_pending, sent, cycle = True, 0, 0
        while cfg_pending or sent < len(beats):
            if cycle == lead:
                ctx.set(unit.cfg.payload, cfg)
                ctx.set(unit.cfg.valid, 1)
            *_, cfg_ready, i_ready = await ctx.tick().sample(unit.cfg.ready, unit.i.ready)
            cycle += 1
            if cfg_pending and cycle > lead and cfg_ready:
                cfg_pending = False
                ctx.set(unit.cfg.valid, 0)
            if sent < len(beats) and i_ready:
                sent += 1
                if sent < len(beats):
                    ctx.set(unit.i.payload, beats[sent])
                else:
                    ctx.set(unit.i.valid, 0)

    def _events_open(self):
        """Called by the event sink once per cycle."""
        self.events_closed = max(0, self.events_closed - 1)
        return self.events_closed == 0

    def messages(self):
        return split_messages(self.out, self.unit.data_width)


def submatrix_steps(rng, G, width, tag, S, D, blocks, *, budget=None, shuffle=True):
    """Config + the sources' messages in random order + wait; and the expected outputs."""
    total = sum(len(b) for b in blocks.values())
    msgs = [message_beats(pack_message(i, tag, [blocks[i, j] for j in D], width), width)
            for i in S]
    if shuffle:
        rng.shuffle(msgs)
    steps = [("config", unit_config(G, tag, S, D, total if budget is None else budget))]
    steps += [("message", m) for m in msgs]
    steps.append(("wait_done",))
    expected = [(j, pack_message(j, tag, [blocks[i, j] for i in S], width)) for j in D]
    return steps, expected


# ---- Interface ----------------------------------------------------------------------------


def test_sum_exceeds_every_value():
    """The budget check's carry-save form of ``a + b > limit``, for every value at small
    widths (unsigned a and b, a signed limit wider than either)."""
    a, b, limit, out = Signal(4), Signal(3), Signal(signed(6)), Signal()
    m = Module()
    m.d.comb += out.eq(unit_arith._sum_exceeds(a, b, limit))
    wrong = []

    async def bench(ctx):
        for av in range(16):
            for bv in range(8):
                for lv in range(-32, 32):
                    ctx.set(a, av)
                    ctx.set(b, bv)
                    ctx.set(limit, lv)
                    if ctx.get(out) != (av + bv > lv):
                        wrong.append((av, bv, lv))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not wrong, wrong[:5]


def test_unit_constructor_errors():
    with pytest.raises(TypeError, match=r"^data_width must be an integer, not '64'$"):
        RepackUnit("64", 1024, 4)
    with pytest.raises(ValueError, match=r"^data_width must be one of 64, 128, 256, 512, "
                                         r"not 32$"):
        RepackUnit(32, 1024, 4)
    with pytest.raises(TypeError, match=r"^Buffer capacity must be an integer, not 1024.0$"):
        RepackUnit(64, 1024.0, 4)
    with pytest.raises(ValueError, match=r"^Buffer capacity must be a positive multiple of 8 "
                                         r"bytes up to 2\*\*30, not 1020$"):
        RepackUnit(64, 1020, 4)
    with pytest.raises(ValueError, match=r"^Buffer capacity must be a positive multiple of 16 "
                                         r"bytes up to 2\*\*30, not 0$"):
        RepackUnit(128, 0, 4)
    with pytest.raises(TypeError, match=r"^Largest group must be an integer, not True$"):
        RepackUnit(64, 1024, True)
    with pytest.raises(ValueError, match=r"^Largest group must be between 1 and 256, not 0$"):
        RepackUnit(64, 1024, 0)


def test_control_constructor_errors():
    with pytest.raises(TypeError, match=r"^Largest number of ranks must be an integer, "
                                        r"not None$"):
        RepackControl(None, 2, 4, 64, 1024)
    with pytest.raises(ValueError, match=r"^Largest number of ranks must be between 2 and 256, "
                                         r"not 257$"):
        RepackControl(257, 2, 4, 64, 1024)
    with pytest.raises(TypeError, match=r"^Number of units must be an integer, not 2.5$"):
        RepackControl(8, 2.5, 4, 64, 1024)
    with pytest.raises(ValueError, match=r"^Number of units must be between 1 and 64, not 0$"):
        RepackControl(8, 0, 4, 64, 1024)
    with pytest.raises(ValueError, match=r"^Largest group must be between 1 and 256, not 300$"):
        RepackArray(8, 2, 300, 64, 1024)


def test_layouts():
    assert HEADER_LAYOUT.size == 48
    assert list(HEADER_LAYOUT) == [("rank", HEADER_LAYOUT["rank"]),
                                   ("tag", HEADER_LAYOUT["tag"]),
                                   ("count", HEADER_LAYOUT["count"])]
    assert length_table_layout(64).length == 4 and length_table_layout(512).length == 32
    assert message_beat_layout(128).size == 128 + 16 + 1 + 16
    assert unit_config_layout(4).size == 16 + 16 + 16 + 2 * 4 * 16 + 32 + 32
    assert buffer_bytes_needed(100, 3, 64) == 100 + 3 * 7


def test_ports():
    unit = RepackUnit(64, 1024, 4)
    assert list(unit.signature.members) == ["cfg", "i", "o", "event", "busy", "active",
                                            "errors", "last_error", "busy_cycles"]
    assert unit.signature.members["i"].flow.name == "In"
    assert unit.signature.members["o"].flow.name == "Out"
    assert len(unit.o.payload.data) == 64 and len(unit.o.payload.keep) == 8
    ctl = RepackControl(8, 2, 4, 64, 1024)
    assert list(ctl.signature.members) == [
        "order", "start", "reg", "notice", "unit_cfg_0", "unit_event_0", "unit_cfg_1",
        "unit_event_1", "unit_active", "busy", "status", "errors", "last_error", "cycles",
        "ops"]
    assert ctl.signature.members["unit_active"].shape == 2
    eng = RepackArray(8, 2, 4, 128, 1024)
    assert list(eng.signature.members) == [
        "order", "start", "reg", "notice", "i_0", "i_1", "o_0", "o_1", "busy", "status",
        "errors", "last_error", "cycles", "ops"]
    assert eng.units == 2 and eng.data_width == 128 and eng.unit(1).capacity_bytes == 1024
    for component in (unit, ctl, eng, eng.control, *(eng.unit(k) for k in range(eng.units))):
        component._MustUse__silence = True      # only their signatures are checked


def test_top_ports():
    """The Verilog top of the cocotb bench: AXI4-Stream names cocotbext-axi finds by prefix,
    control payloads zero-extended to whole bytes, the rank in tid / tdest."""
    top = RepackArrayTop(8, 2, 4, 128, 1024)
    members = top.signature.members
    for prefix, layout, flow in CONTROL_PORTS:
        width = control_tdata_width(layout)
        assert width % 8 == 0 and layout.size <= width < layout.size + 8
        assert members[f"{prefix}_tdata"].shape == width
        assert members[f"{prefix}_tvalid"].flow == flow
        assert members[f"{prefix}_tready"].flow != flow
    for k in range(2):
        assert members[f"s_axis_i{k}_tdata"].shape == 128
        assert members[f"s_axis_i{k}_tkeep"].shape == 16
        assert members[f"s_axis_i{k}_tid"].shape == 16
        assert members[f"m_axis_o{k}_tdest"].shape == 16
        assert members[f"m_axis_o{k}_tready"].flow.name == "In"
        assert members[f"unit{k}_busy_cycles"].shape == 32
    assert "s_axis_i2_tdata" not in members
    text = repack_verilog(2, 1, 1, 64, 64)
    assert f"module {TOPLEVEL}(" in text
    assert "input [15:0] s_axis_i0_tid;" in text and "output [15:0] m_axis_o0_tdest;" in text


# ---- One unit -----------------------------------------------------------------------------

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


# ---- Control tree and units ---------------------------------------------------------------

class Exchange:
    """Ranks around a RepackArray: they register, send on SEND notices, collect outputs."""

    def __init__(self, engine, plan, blocks, *, seed, stall=0.3, reg_order=None,
                 extra_regs=(), skip=(), senders_skip=(), corrupt=None, budget=None,
                 timeout=400, reg_gap=12, busy_start=None):
        self.eng = engine
        # A second start offered for this many cycles after the first is taken (with this
        # payload): it must not be taken, nor change the exchange (`busy_start`: (payload,
        # cycles)).
        self.busy_start = busy_start
        self.plan = plan
        self.blocks = blocks
        self.rng = random.Random(seed)
        self.stall = stall
        n = plan.n
        self.reg_order = list(reg_order) if reg_order is not None else \
            self.rng.sample(range(n), n)
        self.reg_order = [r for r in self.reg_order if r not in skip] + list(extra_regs)
        self.senders_skip = set(senders_skip)
        self.corrupt = corrupt
        self.budget = plan.budget(blocks) if budget is None else budget
        self.timeout = timeout
        self.reg_gap = reg_gap
        self.source_msgs = plan.source_messages(blocks)
        self.queues = [[] for _ in range(engine.units)]
        self.out = [[] for _ in range(engine.units)]
        self.notices = []
        self.cycle = 0
        self.done_cycle = {}
        self.sent = {r: 0 for r in range(n)}
        self.beats_in = [0] * engine.units

    def registrar(self):
        async def run(ctx):
            for r in self.reg_order:
                if self.reg_gap > 1:
                    await ctx.tick().repeat(self.rng.randrange(1, self.reg_gap))
                ctx.set(self.eng.reg.payload.rank, r)
                ctx.set(self.eng.reg.valid, 1)
                await ctx.tick().until(self.eng.reg.ready)
                ctx.set(self.eng.reg.valid, 0)
        return run

    def notice_sink(self):
        rng = random.Random(self.rng.random())

        async def run(ctx):
            while True:
                ready = rng.random() >= self.stall
                ctx.set(self.eng.notice.ready, ready)
                *_, valid, p = await ctx.tick().sample(self.eng.notice.valid,
                                                       self.eng.notice.payload)
                if valid and ready:
                    notice = {"kind": p.kind, "rank": p.rank, "unit": p.unit, "tag": p.tag,
                              "group": p.group, "cycle": self.cycle}
                    self.notices.append(notice)
                    if p.kind == RepackNoticeKind.SEND and p.rank not in self.senders_skip:
                        msg = self.source_msgs[(p.rank, p.group)]
                        if self.corrupt is not None:
                            msg = self.corrupt(p.rank, p.group, msg)
                        self.queues[p.unit].append(message_beats(msg, self.eng.data_width))
                    if p.kind == RepackNoticeKind.DONE:
                        self.done_cycle[p.rank] = self.cycle
        return run

    def sender(self, k):
        rng = random.Random(self.rng.random())
        port = self.eng.i(k)

        async def run(ctx):
            while True:
                if self.queues[k]:
                    # Messages to one unit in random order, one at a time.
                    beats = self.queues[k].pop(rng.randrange(len(self.queues[k])))
                    self.sent[beats[0]["rank"]] += 1
                    self.beats_in[k] += len(beats)
                    await send_beats(ctx, port, beats, rng, self.stall)
                else:
                    await ctx.tick()
        return run

    def run(self, cycles=40_000):
        eng = self.eng

        async def main(ctx):
            await ctx.tick().repeat(1 + self.rng.randrange(3))
            for w in self.plan.order_writes():
                ctx.set(eng.order.payload, w)
                ctx.set(eng.order.valid, 1)
                await ctx.tick().until(eng.order.ready)
            ctx.set(eng.order.valid, 0)
            ops = ctx.get(eng.ops)
            ctx.set(eng.start.payload, {"n": self.plan.n, "budget": self.budget,
                                        "timeout": self.timeout})
            ctx.set(eng.start.valid, 1)
            await ctx.tick().until(eng.start.ready)
            ctx.set(eng.start.valid, 0)
            if self.busy_start is not None:
                payload, cycles = self.busy_start
                ctx.set(eng.start.payload, payload)
                ctx.set(eng.start.valid, 1)
                for _ in range(cycles):
                    assert not ctx.get(eng.start.ready), "a start was taken during an exchange"
                    await ctx.tick()
                    self.cycle += 1
                ctx.set(eng.start.valid, 0)
                assert ctx.get(eng.ops) == ops, "the exchange ended before the second start went"
            while ctx.get(eng.ops) == ops:
                await ctx.tick()
                self.cycle += 1
            await ctx.tick().repeat(30)
            self.status = ctx.get(eng.status)
            self.errors = ctx.get(eng.errors)
            self.last_error = ctx.get(eng.last_error)
            self.hw_cycles = ctx.get(eng.cycles)
            self.unit_busy = [ctx.get(eng.unit(k).busy_cycles) for k in range(eng.units)]

        async def mirrors(ctx):
            # The control tree's state flags kept as flops equal their decodes every cycle,
            # and so do the units' flags about the block being sent; one state is current.
            pairs = [*eng.control.state_mirrors,
                     (eng.control.state_count, Const(1, eng.control.state_count.shape())),
                     *(pair for k in range(eng.units) for pair in eng.unit(k).data_mirrors)]
            signals = [x for pair in pairs for x in pair]
            while True:
                values = (await ctx.tick().sample(*signals))[-len(signals):]
                assert values[0::2] == values[1::2], values

        background = [self.registrar(), self.notice_sink(), mirrors]
        for k in range(eng.units):
            background.append(self.sender(k))
            background.append(sink(eng.o(k), self.out[k], random.Random(self.rng.random()),
                                   self.stall))
        simulate(eng, main, background, cycles)
        return self

    def received(self):
        """Messages each rank received, in arrival order per unit."""
        got = [[] for _ in range(self.plan.n)]
        for k in range(self.eng.units):
            for rank, msg in split_messages(self.out[k], self.eng.data_width):
                got[rank].append(msg)
        return got

    def count(self, kind):
        counts = [0] * self.plan.n
        for notice in self.notices:
            if notice["kind"] == kind:
                counts[notice["rank"]] += 1
        return counts


def random_matrix(rng, n, max_len=64):
    blocks = [[np.frombuffer(rng.randbytes(rng.randrange(max_len + 1)), dtype=np.uint8)
               for _ in range(n)] for _ in range(n)]
    if n > 1:
        i = rng.randrange(n)
        blocks[i] = [np.zeros(0, np.uint8) for _ in range(n)]       # an empty row
        j = rng.randrange(n)
        for row in blocks:
            row[j] = np.zeros(0, np.uint8)                         # an empty column
    return blocks


def check_exchange(ex):
    plan = ex.plan
    n = plan.n
    p_groups, q_groups = len(plan.src_groups), len(plan.dst_groups)
    assert ex.status == RepackError.OK and ex.errors == 0
    # The numpy transpose, block by block.
    got = plan.gather_results(ex.received())
    ref = reference_alltoallv(ex.blocks)
    for j in range(n):
        for i in range(n):
            assert np.array_equal(got[j][i], ref[j][i]), (i, j)
    # The exact messages: one in and one out per rank and sub-matrix.
    expected = plan.destination_messages(ex.blocks)
    received = ex.received()
    for j in range(n):
        assert sorted(received[j]) == sorted(expected[(j, a)] for a in range(p_groups))
    assert ex.sent == {r: q_groups for r in range(n)}
    assert ex.count(RepackNoticeKind.SEND) == [q_groups] * n
    assert ex.count(RepackNoticeKind.TAKEN) == [q_groups] * n
    assert ex.count(RepackNoticeKind.DELIVERED) == [p_groups] * n
    assert ex.count(RepackNoticeKind.DONE) == [1] * n
    # A rank's DONE is its last notice.
    for r in range(n):
        mine = [x["kind"] for x in ex.notices if x["rank"] == r]
        assert mine[-1] == RepackNoticeKind.DONE and mine.count(RepackNoticeKind.DONE) == 1


def _array(max_ranks=12, units=2, max_group=4, width=64, capacity=2048):
    return RepackArray(max_ranks, units, max_group, width, capacity)


@pytest.mark.parametrize("n,dh,dv,seed", [
    (1, 1, 1, 0), (2, 1, 2, 1), (3, 2, 3, 2), (4, 2, 2, 3), (6, 4, 3, 4), (8, 3, 4, 5),
    (11, 3, 3, 6), (11, 4, 2, 7),
])
def test_exchange(n, dh, dv, seed):
    """dh, dv that mostly do not divide N (partial subgroups at the edges), random rank
    lists on odd seeds, random registration order and timing, lengths 0..64 with an empty row
    and column, random backpressure on every stream, 1-3 units: every result equals the
    numpy transpose and each rank sends and receives one message per sub-matrix."""
    rng = random.Random(seed)
    G = 4
    if seed % 2:
        perm = rng.sample(range(n), n)
        src_groups = [perm[k:k + dh] for k in range(0, n, dh)]
        perm = rng.sample(range(n), n)
        dst_groups = [perm[k:k + dv] for k in range(0, n, dv)]
        plan = plan_subgroups(n, 8, src_groups=src_groups, dst_groups=dst_groups, max_group=G)
    else:
        plan = plan_subgroups(n, 8, dh, dv, max_group=G)
    assert (plan.dh, plan.dv) == (dh, dv)
    blocks = random_matrix(rng, n)
    ex = Exchange(_array(units=1 + seed % 3), plan, blocks, seed=seed,
                  stall=(0.0, 0.3, 0.5)[seed % 3]).run()
    check_exchange(ex)


def test_exchange_sequence_and_edges():
    """Two exchanges back to back on one engine, the second with groups {1,2},{0,3},{4,5}
    (seed 003, fig. 8) and uneven sizes."""
    rng = random.Random(21)
    eng = _array(max_ranks=8, units=2)
    plan = plan_subgroups(6, 8, src_groups=[[1, 2], [0, 3], [4, 5]],
                          dst_groups=[[5], [0, 3, 1], [4, 2]], max_group=4)
    blocks = random_matrix(rng, 6)
    ex = Exchange(eng, plan, blocks, seed=22, stall=0.2)
    ex.run()
    check_exchange(ex)


class _PlanWithWrites:
    """``plan`` with ``extra`` order writes after its own (every other attribute is the
    plan's)."""

    def __init__(self, plan, extra):
        self._plan, self._extra = plan, list(extra)

    def order_writes(self):
        return self._plan.order_writes() + self._extra

    def __getattr__(self, name):
        return getattr(self._plan, name)


def test_order_index_past_the_lists_writes_nothing():
    """A list write whose index is past the lists (8 and 9 with max_ranks 8: 0 and 1 if the
    index were cut to the address's bits) counts BAD_CONFIG and leaves the lists alone: the
    exchange after it, whose lists those writes would have broken (a rank twice, a list ended
    early), runs to a correct result."""
    rng = random.Random(51)
    plan = plan_subgroups(6, 8, 2, 3, max_group=4)
    blocks = random_matrix(rng, 6)
    src, dst = plan.order_writes()[0], plan.order_writes()[-1]
    extra = [{"list": OrderList.SRC, "index": 8, "rank": src["rank"] ^ 1, "end": 1},
             {"list": OrderList.DST, "index": 9 + 8 * 16, "rank": dst["rank"], "end": 1}]
    ex = Exchange(_array(max_ranks=8, units=2), _PlanWithWrites(plan, extra), blocks,
                  seed=52, stall=0.2).run()
    assert (ex.errors, ex.last_error) == (2, RepackError.BAD_CONFIG)
    ex.errors = 0                       # the two refusals, counted; the rest as any exchange
    check_exchange(ex)


def test_start_while_busy_waits():
    """A start offered while an exchange runs is not taken (the start's ready is low) and
    changes nothing: its payload (fewer ranks, a budget and a timeout far too small) would
    fail the exchange if any of it were latched."""
    rng = random.Random(41)
    plan = plan_subgroups(6, 8, 2, 3, max_group=4)
    blocks = random_matrix(rng, 6)
    ex = Exchange(_array(), plan, blocks, seed=41, stall=0.2,
                  busy_start=({"n": 2, "budget": 8, "timeout": 1}, 300)).run()
    check_exchange(ex)


def test_bad_registrations_counted():
    """A duplicate registration and one from outside the group are counted and ignored."""
    rng = random.Random(31)
    plan = plan_subgroups(5, 8, 2, 3, max_group=4)
    blocks = random_matrix(rng, 5)
    ex = Exchange(_array(), plan, blocks, seed=31, extra_regs=[2, 7, 4]).run()
    assert ex.errors == 3 and ex.last_error == RepackError.DUPLICATE      # rank 4, the last
    ex.errors = 0
    check_exchange(ex)


def test_missing_rank_times_out():
    """A rank that never registers becomes TIMEOUT, not a hang; sub-matrices without it
    complete, those with it deliver nothing."""
    rng = random.Random(41)
    plan = plan_subgroups(6, 8, 2, 2, max_group=4)
    blocks = random_matrix(rng, 6)
    ex = Exchange(_array(), plan, blocks, seed=41, skip=[3], timeout=300).run()
    assert ex.status == RepackError.TIMEOUT and ex.errors == 1
    a3, b3 = plan.src_group_of(3), plan.dst_group_of(3)
    expected = plan.destination_messages(blocks)
    for j, msgs in enumerate(ex.received()):
        for msg in msgs:
            assert msg in expected.values()
        # Nothing from the missing rank's source subgroup, nothing into its destination one.
        assert expected.get((j, a3)) not in msgs
        if plan.dst_group_of(j) == b3:
            assert msgs == []
    assert ex.count(RepackNoticeKind.DONE)[3] == 0


@pytest.mark.parametrize("units", [1, 2])
def test_missing_message_times_out(units):
    """A source that registers but never sends: its unit drops the sub-matrix with TIMEOUT;
    the other sub-matrices finish and the exchange reports TIMEOUT.  With one unit nothing
    else moves while it waits, so its TIMEOUT must reach the control tree before the tree's
    own budget (REPORT_SLACK cycles longer) runs out."""
    rng = random.Random(51)
    plan = plan_subgroups(4, 8, 2, 2, max_group=4)
    blocks = random_matrix(rng, 4)
    ex = Exchange(_array(units=units), plan, blocks, seed=51, senders_skip=[1],
                  timeout=200).run()
    assert ex.status == RepackError.TIMEOUT and ex.last_error == RepackError.TIMEOUT
    a1 = plan.src_group_of(1)
    expected = plan.destination_messages(blocks)
    for j, msgs in enumerate(ex.received()):
        assert sorted(msgs) == sorted(expected[(j, a)] for a in range(2) if a != a1)


def test_bad_message_drops_submatrix():
    """A source message whose table disagrees with its length: the unit drops that
    sub-matrix whole; the exchange reports LENGTH; everything else is delivered."""
    plan = plan_subgroups(6, 8, 3, 2, max_group=4)
    blocks = [[np.full(5, i * 16 + j, np.uint8) for j in range(6)] for i in range(6)]

    def corrupt(rank, group, msg):
        return msg[:-1] if (rank, group) == (4, 1) else msg      # one byte short
    ex = Exchange(_array(), plan, blocks, seed=61, corrupt=corrupt).run()
    # Counted by the unit, named by the engine's last_error too.
    assert ex.status == RepackError.LENGTH and ex.errors == 1
    assert ex.last_error == RepackError.LENGTH
    expected = plan.destination_messages(blocks)
    a4 = plan.src_group_of(4)
    for j, msgs in enumerate(ex.received()):
        want = [expected[(j, a)] for a in range(2) if not (a == a4 and
                                                           plan.dst_group_of(j) == 1)]
        assert sorted(msgs) == sorted(want)


@pytest.mark.parametrize("what", ["capacity", "not_a_permutation", "group_too_large", "n_zero"])
def test_start_refused(what):
    """A budget that does not fit a unit, or bad rank lists, end the exchange at start with
    no notice and no traffic."""
    eng = _array(max_ranks=8, units=2, max_group=3, capacity=256)
    plan = plan_subgroups(4, 8, 2, 2, max_group=3)
    writes = plan.order_writes()
    start = {"n": 4, "budget": 32, "timeout": 100}
    code = RepackError.BAD_CONFIG
    if what == "capacity":
        start["budget"] = 256 - buffer_bytes_needed(0, 2, 64) + 1
        code = RepackError.CAPACITY
    elif what == "not_a_permutation":
        writes[1] = {**writes[1], "rank": writes[0]["rank"]}
    elif what == "group_too_large":            # one destination group of 4 ranks
        writes = [{**w, "end": int(w["index"] == 3)} if w["list"] == OrderList.DST else w
                  for w in writes]
    elif what == "n_zero":
        start["n"] = 0
    result = {}

    async def main(ctx):
        for w in writes:
            ctx.set(eng.order.payload, w)
            ctx.set(eng.order.valid, 1)
            await ctx.tick().until(eng.order.ready)
        ctx.set(eng.order.valid, 0)
        ctx.set(eng.start.payload, start)
        ctx.set(eng.start.valid, 1)
        await ctx.tick()
        ctx.set(eng.start.valid, 0)
        for _ in range(40):
            ctx.set(eng.reg.payload.rank, 0)
            ctx.set(eng.reg.valid, 1)                 # a registration waits, never taken
            assert not ctx.get(eng.notice.valid)
            assert not ctx.get(eng.reg.ready)
            await ctx.tick()
        result.update(status=ctx.get(eng.status), busy=ctx.get(eng.busy),
                      ops=ctx.get(eng.ops), errors=ctx.get(eng.errors))

    simulate(eng, main, [], 2000)
    assert result == {"status": code, "busy": 0, "ops": 1, "errors": 1}


def direct_exchange_cycles(n, width):
    """Direct pairwise exchange of one-beat blocks over the project's Switch: in round r rank
    i sends to (i + r) % n.  Cycles until every packet has left the switch."""
    sw = Switch(n, width)
    state = {"got": 0, "cycles": 0}

    def source(i):
        async def run(ctx):
            port = sw.rx(i)
            for r in range(1, n):
                ctx.set(port.payload, {"data": i, "keep": 0xff, "last": 1, "dest": (i + r) % n})
                ctx.set(port.valid, 1)
                await ctx.tick().until(port.ready)
            ctx.set(port.valid, 0)
        return run

    async def main(ctx):
        for o in range(n):
            ctx.set(sw.tx(o).ready, 1)
        while state["got"] < n * (n - 1):
            _, _, *valid = await ctx.tick().sample(*(sw.tx(o).valid for o in range(n)))
            state["got"] += sum(valid)
            state["cycles"] += 1

    sim = Simulator(sw)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(2000), background=True)
    for i in range(n):
        sim.add_testbench(source(i))
    sim.add_testbench(main)
    sim.run()
    return state["cycles"]


def test_exchange_16_ranks_measure(capsys):
    """N = 16, 8-byte blocks, 64-bit beats, 4 units; dh = dv = 4 and the planner's default
    (8): messages, notices and cycles per rank, unit utilisation, against direct pairwise
    exchange on the Switch.  Every rank registers at once.  Figures for docs/repack.md."""
    rng = random.Random(71)
    n = 16
    blocks = [[np.frombuffer(rng.randbytes(8), np.uint8) for _ in range(n)] for _ in range(n)]
    direct = direct_exchange_cycles(n, 64)
    lines = [f"direct pairwise on the Switch: {n - 1} + {n - 1} messages per rank, "
             f"{direct} cycles (no per-message cost simulated)"]
    bounds = {4: 470, 8: 360}
    for dh in (4, None):
        eng = RepackArray(16, 4, 8, 64, 4096)
        plan = plan_subgroups(n, 8, dh, max_group=8, units=4)
        ex = Exchange(eng, plan, blocks, seed=72, stall=0.0, reg_order=list(range(n)),
                      reg_gap=0).run()
        check_exchange(ex)
        done = [ex.done_cycle[r] for r in range(n)]
        messages = plan.sends_per_rank + plan.receives_per_rank
        notices = len(ex.notices) // n
        moved = [ex.beats_in[k] + len(ex.out[k]) for k in range(eng.units)]
        # Per-message cost at which both take equally long: messages saved pay for cycles.
        break_even = (ex.hw_cycles - direct) / (2 * (n - 1) - messages)
        lines.append(
            f"repack dh=dv={plan.dh}: {plan.sends_per_rank} + {plan.receives_per_rank} messages "
            f"and {notices} notices per rank, {len(plan.submatrices())} sub-matrices; "
            f"{ex.hw_cycles} cycles start..last DONE (ranks done at {min(done)}..{max(done)}); "
            f"units busy {ex.unit_busy} cycles moving {moved} beats; model at alpha=0: "
            f"{cost_repack(n, 8, plan.dh, plan.dv, 64, 4, 0)}; break-even alpha "
            f"{break_even:.0f} cycles")
        assert ex.hw_cycles <= bounds[plan.dh], ex.hw_cycles
        assert all(busy <= 1.5 * beats for busy, beats in zip(ex.unit_busy, moved)), \
            (ex.unit_busy, moved)
    assert direct <= n + 2
    with capsys.disabled():
        print()
        for line in lines:
            print("  " + line)


def test_split_compare_matches_greater_than():
    """The configuration check's compare in two halves (`_greater`) is ``a > b`` for values
    around every boundary of the split: equal high halves, a carry across it, the extremes."""
    rng = random.Random(11)
    values = [0, 1, 0xFFFF, 0x10000, 0x10001, 0xFFFFFFFF, 0x1_0000_0000]
    values += [rng.getrandbits(32) for _ in range(40)]
    pairs = [(a, b) for a in values[:7] for b in values]
    pairs += [(a, a + d) for a in values for d in (-1, 0, 1, 0x10000, -0x10000) if a + d >= 0]
    m = Module()
    a_sig, b_sig, out = Signal(32), Signal(33), Signal()
    m.d.comb += out.eq(unit_arith._greater(a_sig, b_sig, 16))
    seen = []

    async def bench(ctx):
        for a, b in pairs:
            a &= 0xFFFFFFFF
            ctx.set(a_sig, a)
            ctx.set(b_sig, b)
            seen.append((a, b, ctx.get(out)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert len(seen) == len(pairs)
    assert [(a, b) for a, b, got in seen if got != int(a > b)] == []


@pytest.mark.parametrize("limit_signed", [False, True])
@pytest.mark.parametrize("two_terms", [False, True])
def test_budget_compare_matches_sum(limit_signed, two_terms):
    """The budget flag's compare (`_exceeds`: a carry chain as wide as the sum, the limit's
    high bits tested beside it) is ``a + b > limit`` for sums and limits around every
    boundary: a limit just above and below the sum, beyond the sum's width, negative."""
    rng = random.Random(f"{limit_signed}{two_terms}")
    a_sig, b_sig = Signal(18), Signal(18)
    limit = Signal(signed(34)) if limit_signed else Signal(32)
    out = Signal()
    m = Module()
    m.d.comb += out.eq(unit_arith._exceeds(a_sig, b_sig if two_terms else None, limit))
    cases = []
    for _ in range(300):
        a, b = rng.getrandbits(rng.choice([2, 10, 18])), rng.getrandbits(18) if two_terms else 0
        total = a + b
        lim = rng.choice([total, total - 1, total + 1, total + (1 << 19), 1 << 20, 0,
                          rng.getrandbits(31)])
        if limit_signed:
            lim = rng.choice([lim, -lim - 1, -(1 << 33)])
        cases.append((a, b, lim if limit_signed else max(lim, 0)))
    seen = []

    async def bench(ctx):
        for a, b, lim in cases:
            ctx.set(a_sig, a)
            ctx.set(b_sig, b)
            ctx.set(limit, lim)
            seen.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert [c for c, got in zip(cases, seen) if got != int(c[0] + c[1] > c[2])] == []


@pytest.mark.parametrize("count", [1, 4, 5, 8, 16])
def test_low_thermometer_matches_shifted_mask(count):
    """The last table beat's mask of valid entries (`_low_thermometer`) is
    ``(2 << (index - 1) % count) - 1`` for every index the configuration can give."""
    index = Signal(8)
    out = Signal(count)
    m = Module()
    m.d.comb += out.eq(unit_arith._low_thermometer(index, count))
    # A count that is not a power of two is used only with index <= count (NB = G).
    indices = range(1, 256) if count & (count - 1) == 0 else range(1, count + 1)
    seen = []

    async def bench(ctx):
        for value in indices:
            ctx.set(index, value)
            seen.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    expect = [((2 << ((value - 1) % count)) - 1) & ((1 << count) - 1) for value in indices]
    assert len(seen) == len(expect)
    assert [(i, got, want) for i, got, want in zip(indices, seen, expect) if got != want] == []
