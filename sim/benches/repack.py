# Ref: seed 003 (CN111614581): all-to-all as a transpose of the block matrix through repack
#      units; issue 5, "Verify (cocotb + Verilator)" and "Bad input".
"""cocotb bench of the repack engine (control tree + units) under Verilator.

The Verilog top is :class:`nicoll.hw.sim.repack_top.RepackEngineTop`: every stream has AXI4-Stream
names, so cocotbext-axi drives it.  The ranks are stream endpoints: one coroutine per rank
registers after a random delay, waits for its notices, sends its message for a destination
group to the unit a SEND notice names (``s_axis_i<k>``, ``tid`` = its rank) and finishes on
DONE; the units' outputs (``m_axis_o<k>``) are collected by ``tdest``.  Random pause
generators stall every input and backpressure every output.

Tests (select with COCOTB_TEST_FILTER):

- ``exchanges``: NICOLL_REPACK_ROUNDS exchanges over NICOLL_REPACK_N ranks, back to back on
  one engine: all-to-all with equal blocks, all-to-all-v with random lengths 0..64 (an
  all-zero row and column in each, and one matrix of empty blocks), random dh and dv
  (preferring ones that do not divide N), contiguous and arbitrary subgroup rank lists.
  Every result equals the numpy transpose of the block matrix, every message the exact bytes
  of :mod:`nicoll.repack_plan`; each rank sends one message and receives one per sub-matrix
  it belongs to, and gets SEND = TAKEN = Q, DELIVERED = P and one DONE, last.
- ``bad_input``: a message a byte short or long (LENGTH), a block outside D (OUTSIDE_D), a
  duplicate registration (DUPLICATE), registrations from outside the group (OUTSIDE_GROUP), a
  rank that never registers and one that never sends (TIMEOUT).  Each is counted with its
  code, the exchange ends within its cycle budget, and nothing is half-delivered: every
  message that leaves is whole and exact, and none of a dropped sub-matrix leaves.
- ``measure``: N = 16, 8-byte blocks, no stalls, every rank registered at once, dh = dv = 4
  and 8; messages, notices and cycles per rank and unit utilisation, written as JSON to
  NICOLL_REPACK_REPORT.

Every wait has a cycle budget (:func:`within`); a budget that runs out fails the test with a
message naming the wait, so nothing hangs.

Environment (set by tests/test_repack_cocotb.py): NICOLL_REPACK_CONFIG
("max_ranks,units,max_group,data_width,capacity_bytes" of the build), NICOLL_REPACK_N,
NICOLL_SEED, NICOLL_REPACK_ROUNDS (default 4), NICOLL_REPACK_REPORT.
"""

import itertools
import json
import logging
import os
import random
from collections import Counter

import cocotb
import numpy as np
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.queue import Queue
from cocotb.triggers import ClockCycles, RisingEdge, SimTimeoutError, Timer, with_timeout
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from nicoll.hw.repack import (NOTICE_LAYOUT, ORDER_WRITE_LAYOUT, REGISTRATION_LAYOUT,
                              START_LAYOUT, RepackNoticeKind, RepackError, table_beats)
from nicoll.hw.sim.repack_top import control_tdata_width
from nicoll.repack_plan import (pack_message, plan_subgroups, reference_alltoallv,
                                unpack_message)

__all__ = ["CLOCK_NS", "TB", "Exchange", "within", "parse_config", "random_plan",
           "random_matrix"]

#: Clock period of the bench.
CLOCK_NS = 10
#: Cycles the control tree waits without progress before TIMEOUT, in the good exchanges
#: (above every random delay the ranks take).
EXCHANGE_TIMEOUT = 2000


def parse_config(text):
    """``(max_ranks, units, max_group, data_width, capacity_bytes)`` from
    NICOLL_REPACK_CONFIG."""
    values = tuple(int(v) for v in text.split(","))
    if len(values) != 5:
        raise ValueError(f"NICOLL_REPACK_CONFIG must hold five integers, not {text!r}")
    return values


async def within(awaitable, cycles, what):
    """Await ``awaitable`` for at most ``cycles`` clock cycles; fail naming ``what``."""
    try:
        return await with_timeout(awaitable, cycles * CLOCK_NS, "ns")
    except SimTimeoutError:
        raise AssertionError(f"{what}: not within its budget of {cycles} cycles") from None


def _bus(dut, prefix):
    # cocotbext-axi logs its banner and every frame at INFO: quiet it before it starts.
    logging.getLogger(f"cocotb.{dut._name}.{prefix}").setLevel(logging.WARNING)
    return AxiStreamBus.from_prefix(dut, prefix)


def _word(layout, value):
    """One control-stream item: ``layout``'s bits as the single 'byte' of a frame."""
    return AxiStreamFrame([layout.const(value).as_value().value])


class TB:
    """Clock, reset and the cocotbext-axi ports of a ``nicoll_repack`` top."""

    def __init__(self, dut):
        self.dut = dut
        (self.max_ranks, self.units, self.max_group, self.width,
         self.capacity) = parse_config(os.environ["NICOLL_REPACK_CONFIG"])
        self.beat_bytes = self.width // 8
        self.rng = random.Random(int(os.environ.get("NICOLL_SEED", "1")))
        Clock(dut.clk, CLOCK_NS, unit="ns").start()

        def control(cls, prefix, layout):
            return cls(_bus(dut, prefix), dut.clk, dut.rst,
                       byte_size=control_tdata_width(layout))
        self.order = control(AxiStreamSource, "s_axis_order", ORDER_WRITE_LAYOUT)
        self.start = control(AxiStreamSource, "s_axis_start", START_LAYOUT)
        self.reg = control(AxiStreamSource, "s_axis_reg", REGISTRATION_LAYOUT)
        self.notice = control(AxiStreamSink, "m_axis_notice", NOTICE_LAYOUT)
        self.i = [AxiStreamSource(_bus(dut, f"s_axis_i{k}"), dut.clk, dut.rst)
                  for k in range(self.units)]
        self.o = [AxiStreamSink(_bus(dut, f"m_axis_o{k}"), dut.clk, dut.rst)
                  for k in range(self.units)]

    @property
    def sources(self):
        return [self.order, self.start, self.reg, *self.i]

    @property
    def sinks(self):
        return [self.notice, *self.o]

    def cycle(self):
        return int(get_sim_time("ns")) // CLOCK_NS

    async def reset(self):
        """Reset the engine and empty every port queue (a clean slate between cases)."""
        for port in self.sources + self.sinks:
            port.clear()
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 1)

    def set_pauses(self, stall):
        """Random pauses on every input and backpressure on every output, each port idle
        with probability ``stall`` in a cycle (0: none)."""
        for port in self.sources + self.sinks:
            if stall:
                rng = random.Random(self.rng.getrandbits(32))
                port.set_pause_generator(itertools.cycle(
                    [rng.random() < stall for _ in range(rng.randrange(97, 251))]))
            else:
                # Stopping the generator leaves the last value; a paused port would stay so.
                port.clear_pause_generator()
                port.pause = False

    def counter(self, name):
        return int(getattr(self.dut, name).value)

    def unit_busy_cycles(self):
        return [self.counter(f"unit{k}_busy_cycles") for k in range(self.units)]


def random_matrix(rng, n, *, max_len=64, equal=None):
    """An n×n matrix of uint8 blocks: all ``equal`` bytes long, or random lengths
    0..max_len with an all-zero row and an all-zero column (n > 1)."""
    if equal is not None:
        return [[np.frombuffer(rng.randbytes(equal), np.uint8) for _ in range(n)]
                for _ in range(n)]
    blocks = [[np.frombuffer(rng.randbytes(rng.randrange(max_len + 1)), np.uint8)
               for _ in range(n)] for _ in range(n)]
    if n > 1:
        blocks[rng.randrange(n)] = [np.zeros(0, np.uint8) for _ in range(n)]
        j = rng.randrange(n)
        for row in blocks:
            row[j] = np.zeros(0, np.uint8)
    return blocks


def _random_size(rng, n, max_group):
    sizes = range(1, min(n, max_group) + 1)
    uneven = [d for d in sizes if n % d]
    return rng.choice(uneven if uneven and rng.random() < 0.7 else sizes)


def _random_partition(rng, n, max_group):
    perm = rng.sample(range(n), n)
    groups = []
    while perm:
        size = rng.randint(1, min(len(perm), max_group))
        groups.append(perm[:size])
        perm = perm[size:]
    return groups


def random_plan(rng, n, lengths, max_group, width, units, *, lists=False):
    """Random dh and dv (contiguous groups, the last partial) or arbitrary rank lists."""
    if lists:
        return plan_subgroups(n, lengths, src_groups=_random_partition(rng, n, max_group),
                              dst_groups=_random_partition(rng, n, max_group),
                              max_group=max_group, data_width=width, units=units)
    return plan_subgroups(n, lengths, _random_size(rng, n, max_group),
                          _random_size(rng, n, max_group), max_group=max_group,
                          data_width=width, units=units)


class Exchange:
    """One all-to-all(-v) on the engine, the ranks as coroutines around it.

    Knobs for bad input: ``skip_register`` ranks never register, ``register_twice`` ranks
    register a second time right after the first, ``extra_regs`` are registered before any
    rank (they wait in the port until ``start``), ``skip_send`` ranks never send,
    ``corrupt(rank, group, message)`` returns the bytes a rank sends instead of its message.
    """

    def __init__(self, tb, plan, blocks, *, seed, reg_spread=None, send_spread=16,
                 skip_register=(), register_twice=(), skip_send=(), extra_regs=(),
                 corrupt=None,
                 timeout=EXCHANGE_TIMEOUT, all_at_once=False):
        self.tb = tb
        self.plan = plan
        self.blocks = blocks
        self.rng = random.Random(seed)
        n = plan.n
        self.reg_spread = 3 * n + 40 if reg_spread is None else reg_spread
        self.send_spread = send_spread
        self.skip_register = set(skip_register)
        self.register_twice = set(register_twice)
        self.skip_send = set(skip_send)
        self.extra_regs = list(extra_regs)
        self.corrupt = corrupt
        self.timeout = timeout
        self.all_at_once = all_at_once
        self.source_msgs = plan.source_messages(blocks)
        self.budget_bytes = plan.budget(blocks)
        self.inbox = [Queue() for _ in range(n)]
        self.notices = []
        self.sent = Counter()           # (rank, tag) -> messages the rank sent
        self.received = []              # (unit, tdest, bytes, tkeep list, tdest list)
        self.beats_in = [0] * tb.units
        self.done_cycle = {}
        self.start_cycle = None

    # ---- the ranks --------------------------------------------------------------------
    async def _rank(self, r):
        tb = self.tb
        if r not in self.skip_register and not self.all_at_once:
            delay = self.rng.randrange(self.reg_spread + 1)
            if delay:
                await Timer(delay * CLOCK_NS, "ns")
            tb.reg.send_nowait(_word(REGISTRATION_LAYOUT, {"rank": r}))
            if r in self.register_twice:
                tb.reg.send_nowait(_word(REGISTRATION_LAYOUT, {"rank": r}))
        while True:
            notice = await self.inbox[r].get()
            if notice["kind"] == RepackNoticeKind.SEND:
                if r in self.skip_send:
                    continue
                delay = self.rng.randrange(self.send_spread + 1) if self.send_spread else 0
                if delay:
                    await Timer(delay * CLOCK_NS, "ns")
                msg = self.source_msgs[(r, notice["group"])]
                if self.corrupt is not None:
                    msg = self.corrupt(r, notice["group"], msg)
                self.sent[(r, notice["tag"])] += 1
                self.beats_in[notice["unit"]] += -(-len(msg) // tb.beat_bytes)
                tb.i[notice["unit"]].send_nowait(AxiStreamFrame(msg, tid=r))
            elif notice["kind"] == RepackNoticeKind.DONE:
                self.done_cycle[r] = notice["cycle"]
                return

    async def _notices(self):
        while True:
            frame = await self.tb.notice.recv()
            view = data.Const(NOTICE_LAYOUT, frame.tdata[0])
            notice = {"kind": view.kind, "rank": view.rank, "unit": view.unit,
                      "tag": view.tag, "group": view.group, "cycle": self.tb.cycle()}
            self.notices.append(notice)
            assert notice["rank"] < self.plan.n, f"a notice for rank {notice['rank']!r}"
            self.inbox[notice["rank"]].put_nowait(notice)

    async def _outputs(self, k):
        while True:
            frame = await self.tb.o[k].recv(compact=False)
            kept = bytes(b for b, keep in zip(frame.tdata, frame.tkeep) if keep)
            self.received.append((k, frame.tdest[0], kept, list(frame.tkeep),
                                  list(frame.tdest)))

    async def _busy_rise(self):
        await RisingEdge(self.tb.dut.busy)
        self.start_cycle = self.tb.cycle()

    # ---- one run ----------------------------------------------------------------------
    async def run(self, budget=200_000):
        """Configure, start, let the ranks work, wait (at most ``budget`` cycles) until the
        exchange has ended; then read the engine's counters."""
        tb = self.tb
        n = self.plan.n
        ops0 = tb.counter("ops")
        self.errors0 = tb.counter("errors")
        busy0 = tb.unit_busy_cycles()
        tasks = [cocotb.start_soon(self._notices())]
        tasks += [cocotb.start_soon(self._outputs(k)) for k in range(tb.units)]
        # These wait in the port until start; the exchange cannot end before the port has
        # passed them on, since every rank's own registration comes after them.
        for r in self.extra_regs:
            tb.reg.send_nowait(_word(REGISTRATION_LAYOUT, {"rank": r}))
        if self.all_at_once:
            # Every rank registered before start, in rank order.
            for r in range(n):
                tb.reg.send_nowait(_word(REGISTRATION_LAYOUT, {"rank": r}))
        tasks += [cocotb.start_soon(self._rank(r)) for r in range(n)]
        try:
            for w in self.plan.order_writes():
                tb.order.send_nowait(_word(ORDER_WRITE_LAYOUT, w))
            await within(tb.order.wait(), 20 * n + 100, "the rank-list writes")
            rise = cocotb.start_soon(self._busy_rise())
            tasks.append(rise)
            tb.start.send_nowait(_word(START_LAYOUT, {"n": n, "budget": self.budget_bytes,
                                                      "timeout": self.timeout}))
            t0 = tb.cycle()
            while tb.counter("ops") == ops0:
                if tb.cycle() - t0 > budget:
                    raise AssertionError(f"the exchange over {n} ranks did not end within its "
                                         f"budget of {budget} cycles")
                await Timer(8 * CLOCK_NS, "ns")
            # The last output beats and notices were taken before ops counted the exchange.
            await ClockCycles(tb.dut.clk, 4)
            self.end_cycle = tb.cycle()
        finally:
            for task in tasks:
                task.cancel()
        self.status = RepackError(tb.counter("status"))
        self.errors = tb.counter("errors") - self.errors0
        self.last_error = RepackError(tb.counter("last_error"))
        self.hw_cycles = tb.counter("cycles")
        self.unit_busy = [b - b0 for b, b0 in zip(tb.unit_busy_cycles(), busy0)]
        self.half_open = [k for k, sink in enumerate(tb.o) if sink.active]
        return self

    # ---- what came out ------------------------------------------------------------------
    def messages_to(self):
        """``[rank] -> [bytes]``: the whole messages each rank received."""
        got = [[] for _ in range(self.plan.n)]
        for _, dest, msg, _, _ in self.received:
            got[dest].append(msg)
        return got

    def count(self, kind):
        counts = [0] * self.plan.n
        for notice in self.notices:
            if notice["kind"] == kind:
                counts[notice["rank"]] += 1
        return counts

    def check_framing(self):
        """Every output message is whole: one tdest on all its beats, equal to its header's
        rank; keep all ones but for the low bytes of a partial final beat; a message the
        format parses.  No output stopped inside a message."""
        bb = self.tb.beat_bytes
        assert not self.half_open, f"units {self.half_open} stopped inside a message"
        for k, dest, msg, keep, dests in self.received:
            assert set(dests) == {dest}, f"unit {k}: tdest changed inside a message: {dests}"
            ones = sum(keep)
            assert keep == [1] * ones + [0] * (len(keep) - ones), \
                f"unit {k}: keep is not a run of low bytes ending the message: {keep}"
            assert len(keep) % bb == 0 and len(keep) - ones < bb, \
                f"unit {k}: a beat other than the last is partial ({ones} of {len(keep)})"
            parsed = unpack_message(msg, self.tb.width)
            assert parsed.rank == dest, f"unit {k}: header rank {parsed.rank} on tdest {dest}"

    def check_delivered_subset(self, dropped_tags):
        """Everything delivered is exact and whole, and nothing of ``dropped_tags`` left."""
        self.check_framing()
        expected = self.plan.destination_messages(self.blocks)
        tag_of = {(j, a): tag for a, b, s, d, tag in self.plan.submatrices() for j in d}
        seen = Counter()
        for j, msgs in enumerate(self.messages_to()):
            for msg in msgs:
                tag = unpack_message(msg, self.tb.width).tag
                a = tag >> 8
                assert tag not in dropped_tags, \
                    f"rank {j} received part of dropped sub-matrix {tag:#06x}"
                assert tag_of.get((j, a)) == tag and msg == expected[(j, a)], \
                    f"rank {j} received a message that is not its exact one (tag {tag:#06x})"
                seen[(j, tag)] += 1
        assert all(v == 1 for v in seen.values()), f"a message delivered twice: {seen}"

    def check_complete(self):
        """The whole exchange: status OK, the numpy transpose, one message in and one out
        per sub-matrix and rank, the notices."""
        plan = self.plan
        n = plan.n
        assert self.status == RepackError.OK and self.errors == 0, \
            f"{self.summary()}: status {self.status!r}, {self.errors} errors, the last " \
            f"{self.last_error!r}; {self.progress()}"
        self.check_framing()
        got = plan.gather_results(self.messages_to())
        ref = reference_alltoallv(self.blocks)
        for j in range(n):
            for i in range(n):
                assert np.array_equal(got[j][i], ref[j][i]), \
                    f"block ({i}, {j}): got {got[j][i]!r}, want {ref[j][i]!r}"
        expected = plan.destination_messages(self.blocks)
        for j, msgs in enumerate(self.messages_to()):
            want = [expected[(j, a)] for a in range(len(plan.src_groups))]
            assert sorted(msgs) == sorted(want), f"rank {j} did not get its exact messages"
        # One message out and one in per sub-matrix a rank belongs to.
        out_per_sub = Counter()
        in_per_sub = Counter()
        for (r, tag), count in self.sent.items():
            out_per_sub[(r, tag)] += count
        for _, dest, msg, _, _ in self.received:
            in_per_sub[(dest, unpack_message(msg, self.tb.width).tag)] += 1
        want_out = Counter({(i, tag): 1 for a, b, s, d, tag in plan.submatrices() for i in s})
        want_in = Counter({(j, tag): 1 for a, b, s, d, tag in plan.submatrices() for j in d})
        assert out_per_sub == want_out, "not one message out per source and sub-matrix"
        assert in_per_sub == want_in, "not one message in per destination and sub-matrix"
        p_groups, q_groups = len(plan.src_groups), len(plan.dst_groups)
        assert self.count(RepackNoticeKind.SEND) == [q_groups] * n
        assert self.count(RepackNoticeKind.TAKEN) == [q_groups] * n
        assert self.count(RepackNoticeKind.DELIVERED) == [p_groups] * n
        assert self.count(RepackNoticeKind.DONE) == [1] * n
        for r in range(n):
            mine = [x["kind"] for x in self.notices if x["rank"] == r]
            assert mine[-1] == RepackNoticeKind.DONE, f"rank {r}: DONE is not its last notice"

    def progress(self):
        """Who was told what, what was sent and received: for failure messages."""
        kinds = {k.name: self.count(k) for k in RepackNoticeKind}
        return (f"notices per rank {kinds}; sent {dict(self.sent)}; received "
                f"{[(k, dest, len(msg)) for k, dest, msg, _, _ in self.received]}")

    def summary(self):
        plan = self.plan
        return (f"N={plan.n} dh={plan.dh} dv={plan.dv} groups "
                f"{[list(g) for g in plan.src_groups]} x {[list(g) for g in plan.dst_groups]}: "
                f"{self.hw_cycles} cycles, {len(self.received)} messages out")


def _ranks():
    return int(os.environ["NICOLL_REPACK_N"])


@cocotb.test()
async def exchanges(dut):
    """Random exchanges over N ranks, back to back on one engine, all equal to the numpy
    transpose."""
    tb = TB(dut)
    n = _ranks()
    rounds = int(os.environ.get("NICOLL_REPACK_ROUNDS", "4"))
    await tb.reset()
    rng = tb.rng
    for round_ in range(rounds):
        kind = round_ % 4
        if kind == 0:           # all-to-all, equal blocks, random dh and dv
            blocks = random_matrix(rng, n, equal=rng.choice([1, 8, 13, 32, 64]))
        elif kind == 3:         # all-to-all-v of empty blocks only
            blocks = [[np.zeros(0, np.uint8) for _ in range(n)] for _ in range(n)]
        else:                   # all-to-all-v, 0..64 bytes, a zero row and column
            blocks = random_matrix(rng, n)
        plan = random_plan(rng, n, blocks, tb.max_group, tb.width, tb.units,
                           lists=kind in (2, 3) or (kind == 0 and round_ >= 4))
        tb.set_pauses(rng.choice([0.0, 0.2, 0.4]))
        ex = await Exchange(tb, plan, blocks, seed=rng.getrandbits(32)).run()
        ex.check_complete()
        dut._log.info("round %d: %s", round_, ex.summary())
    tb.set_pauses(0)


# ---- Bad input ------------------------------------------------------------------------

BAD_CASES = ("length_short", "length_long", "outside_d", "duplicate_registration",
             "outside_group_registration", "missing_rank", "silent_rank")


def _tag(plan, rank, group):
    return (plan.src_group_of(rank) << 8) | group


async def bad_case(tb, case, n, rng):
    """Run one bad-input case; check it is counted and nothing is half-delivered."""
    await tb.reset()
    tb.set_pauses(0.2)
    blocks = random_matrix(rng, n)
    plan = random_plan(rng, n, blocks, tb.max_group, tb.width, tb.units,
                       lists=rng.random() < 0.5)
    victim = rng.randrange(n)
    group = rng.randrange(len(plan.dst_groups))
    timeout = 300
    kwargs = {"timeout": timeout}
    if case in ("length_short", "length_long", "outside_d"):
        def corrupt(rank, b, msg):
            if (rank, b) != (victim, group):
                return msg
            if case == "length_short":
                return msg[:-1]
            if case == "length_long":
                return msg + b"\x5a"
            d = plan.dst_groups[b]          # one block more than D holds
            return pack_message(rank, _tag(plan, rank, b),
                                [blocks[rank][j] for j in d] + [b"\x01"], tb.width)
        kwargs["corrupt"] = corrupt
        code = RepackError.OUTSIDE_D if case == "outside_d" else RepackError.LENGTH
        dropped = {_tag(plan, victim, group)}
    elif case == "duplicate_registration":
        kwargs["register_twice"] = [victim]
        code, dropped = RepackError.DUPLICATE, set()
    elif case == "outside_group_registration":
        kwargs["extra_regs"] = [n, 0xffff]
        code, dropped = RepackError.OUTSIDE_GROUP, set()
    elif case == "missing_rank":
        kwargs["skip_register"] = [victim]
        code = RepackError.TIMEOUT
        a_v, b_v = plan.src_group_of(victim), plan.dst_group_of(victim)
        dropped = {tag for a, b, s, d, tag in plan.submatrices() if a == a_v or b == b_v}
    elif case == "silent_rank":
        kwargs["skip_send"] = [victim]
        code = RepackError.TIMEOUT
        a_v = plan.src_group_of(victim)
        dropped = {tag for a, b, s, d, tag in plan.submatrices() if a == a_v}
    else:
        raise ValueError(f"unknown bad-input case {case!r}")
    ex = await Exchange(tb, plan, blocks, seed=rng.getrandbits(32), **kwargs).run(
        budget=40 * timeout + 20_000)
    where = f"{case} (N={n}, rank {victim}, {ex.summary()})"
    if case in ("duplicate_registration", "outside_group_registration"):
        # Counted and ignored: the exchange itself is whole.
        want = len(kwargs.get("extra_regs", [victim]))
        assert ex.errors == want and ex.last_error == code, \
            f"{where}: {ex.errors} errors, last {ex.last_error!r}; want {want} × {code!r}"
        ex.errors = 0
        ex.check_complete()
        return
    assert ex.status == code, f"{where}: status {ex.status!r}, want {code!r}"
    assert ex.errors >= 1 and ex.last_error == code, \
        f"{where}: {ex.errors} errors, last {ex.last_error!r}"
    if case != "silent_rank":
        # One error: the bad message or the control tree's one timeout.
        assert ex.errors == 1, f"{where}: {ex.errors} errors, want 1"
    ex.check_delivered_subset(dropped)
    # Every sub-matrix not dropped was delivered whole.
    delivered = {(dest, unpack_message(msg, tb.width).tag) for _, dest, msg, _, _ in ex.received}
    for a, b, s, d, tag in plan.submatrices():
        if tag not in dropped:
            assert all((j, tag) in delivered for j in d), \
                f"{where}: sub-matrix {tag:#06x} was not delivered; {ex.progress()}; " \
                f"notices {[(x['kind'].name, x['rank'], x['tag'], x['cycle']) for x in ex.notices]}"
    # A destination of a dropped sub-matrix never hears DONE.
    for a, b, s, d, tag in plan.submatrices():
        if tag in dropped:
            for j in d:
                assert j not in ex.done_cycle, f"{where}: rank {j} got DONE"
    if case == "missing_rank":
        assert victim not in ex.done_cycle
        assert not any(x["rank"] == victim for x in ex.notices), \
            f"{where}: the missing rank was sent a notice"


@cocotb.test()
async def bad_input(dut):
    """Each bad input is counted and reported; the exchange ends within its budget."""
    tb = TB(dut)
    n = _ranks()
    for case in BAD_CASES:
        await bad_case(tb, case, n, tb.rng)
        dut._log.info("bad input %s: reported", case)
    tb.set_pauses(0)
    await tb.reset()


# ---- Measurement ----------------------------------------------------------------------

@cocotb.test()
async def measure(dut):
    """N = 16, 8-byte blocks, no stalls, every rank registered at once: messages, notices
    and cycles per rank, unit utilisation (docs/repack.md)."""
    tb = TB(dut)
    n = 16
    assert tb.max_ranks >= n and tb.units == 4 and tb.max_group >= 8 and tb.width == 64, \
        "the measurement is defined on 16 ranks, 4 units, max_group 8, 64-bit beats"
    rng = random.Random(71)
    blocks = random_matrix(rng, n, equal=8)
    report = {"n": n, "block_bytes": 8, "units": tb.units, "data_width": tb.width,
              "direct": {"messages_out": n - 1, "messages_in": n - 1,
                         "wire_cycles_lower_bound": n - 1}, "repack": []}
    for dh in (4, None):
        await tb.reset()
        tb.set_pauses(0)
        plan = plan_subgroups(n, 8, dh, max_group=8, units=tb.units, data_width=tb.width)
        ex = await Exchange(tb, plan, blocks, seed=72, send_spread=0,
                            all_at_once=True).run()
        ex.check_complete()
        done = [ex.done_cycle[r] - ex.start_cycle for r in range(n)]
        beats_out = [0] * tb.units
        for k, _, msg, _, _ in ex.received:
            beats_out[k] += -(-len(msg) // tb.beat_bytes)
        sent = Counter(r for (r, _), c in ex.sent.items() for _ in range(c))
        got = Counter(dest for _, dest, _, _, _ in ex.received)
        report["repack"].append({
            "dh": plan.dh, "dv": plan.dv, "submatrices": len(plan.submatrices()),
            "messages_out": sorted(set(sent.values())),
            "messages_in": sorted(set(got.values())),
            "notices_per_rank": len(ex.notices) / n,
            "cycles": ex.hw_cycles,
            "rank_done": [min(done), max(done)],
            "unit_busy_cycles": ex.unit_busy,
            "unit_beats_moved": [a + b for a, b in zip(ex.beats_in, beats_out)],
            "header_table_beats_per_message": 1 + table_beats(max(plan.dh, plan.dv),
                                                               tb.width),
        })
        dut._log.info("measure dh=dv=%d: %s", plan.dh, report["repack"][-1])
    path = os.environ.get("NICOLL_REPACK_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
