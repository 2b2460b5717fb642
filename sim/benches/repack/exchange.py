# Ref: seed 003 (CN111614581): all-to-all as a transpose of the block matrix through repack
#      units; issue 5, "Verify (cocotb + Verilator)" and "Bad input".
"""One all-to-all(-v) of the repack bench (:mod:`nicoll.sim.benches.repack`) on the array:
the random block matrices and subgroups it runs on (:func:`random_matrix`,
:func:`random_plan`), the ranks as coroutines around the array (:class:`Exchange`, with its
knobs for bad input) and the checks of what came out, against the numpy transpose and the
exact messages of :mod:`nicoll.plan.repack_message`."""

import random
from collections import Counter

import cocotb
import numpy as np
from amaranth.lib import data
from cocotb.queue import Queue
from cocotb.triggers import ClockCycles, RisingEdge, Timer
from cocotbext.axi import AxiStreamFrame

from nicoll.hw.repack import (NOTICE_LAYOUT, ORDER_WRITE_LAYOUT, REGISTRATION_LAYOUT,
                              START_LAYOUT, RepackNoticeKind, RepackError)
from nicoll.plan.repack import notice_counts
from nicoll.plan.repack_message import unpack_message
from nicoll.plan.repack import plan_subgroups
from nicoll.plan.repack_reference import reference_alltoallv

from .tb import CLOCK_NS, within

__all__ = ["Exchange", "random_plan", "random_matrix"]

#: Cycles the control tree waits without progress before TIMEOUT, in the good exchanges
#: (above every random delay the ranks take).
EXCHANGE_TIMEOUT = 2000


def _word(layout, value):
    """One control-stream item: ``layout``'s bits as the single 'byte' of a frame."""
    return AxiStreamFrame([layout.const(value).as_value().value])


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
    """One all-to-all(-v) on the array, the ranks as coroutines around it.

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
        exchange has ended; then read the array's counters."""
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
        return notice_counts(self.notices, self.plan.n)[kind]

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
        counts = notice_counts(self.notices, n)
        for kind, want in plan.notices_expected().items():
            assert counts[kind] == want, f"{kind.name} notices per rank {counts[kind]}, not {want}"
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
