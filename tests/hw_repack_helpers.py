# amaranth: UnusedElaboratable=no
"""The repack tests' harness (seed 003): random block matrices, a unit's configuration,
beat sources and sinks with random stalls, a single RepackUnit run (UnitRun), and ranks
exchanging through a RepackArray (Exchange) checked against nicoll.plan.repack.

Every result is compared with the exact messages nicoll.plan.repack builds (one transpose per
sub-matrix) and with the numpy transpose of the whole block matrix.
"""

import random

import numpy as np
from amaranth.hdl import Const

from nicoll.hw.repack import RepackNoticeKind, RepackArray, RepackError, UnitEvent
from nicoll.plan.repack import (beats_to_message, message_beats, notice_counts, pack_message,
                                reference_alltoallv)
from nicoll.sim.testbench import run_testbenches, stream_put


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
            await ctx.tick()
        await stream_put(ctx, port, beat)


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
    run_testbenches(dut, main, watchdog_cycles=cycles, background=background)


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
        return notice_counts(self.notices, self.plan.n)[kind]


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
    counts = notice_counts(ex.notices, n)
    for kind, want in plan.notices_expected().items():
        assert counts[kind] == want, f"{kind.name} notices per rank {counts[kind]}, not {want}"
    # A rank's DONE is its last notice.
    for r in range(n):
        mine = [x["kind"] for x in ex.notices if x["rank"] == r]
        assert mine[-1] == RepackNoticeKind.DONE and mine.count(RepackNoticeKind.DONE) == 1


def _array(max_ranks=12, units=2, max_group=4, width=64, capacity=2048):
    return RepackArray(max_ranks, units, max_group, width, capacity)
