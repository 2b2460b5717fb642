"""Formal checks (SymbiYosys, smtbmc with Yices; see formal_helpers.py and docs/formal.md).

- Register slices (hw/lib/skid.py), proven by k-induction for every run from reset: fed by a
  producer that keeps the stream rules and drained by any consumer, each slice keeps the rules
  on its output (valid stays, payload stable, until taken), gives ``i.ready`` exactly while it
  has room, and neither loses, duplicates nor reorders: a scoreboard counts the items inside,
  and an arbitrarily chosen item must come out with its payload after exactly the items that
  went in before it.
- BarrierUnit (hw/barrier/unit.py) as a root in mode 0 (NORMAL), max_nodes = 4, bounded to
  :data:`BARRIER_DEPTH` steps: it never releases before every node of its tree has completed,
  ``ones`` always equals the popcount of ``vector``, and ``tx`` keeps the stream rules; a cover
  run shows that a release of a tree of two nodes happens within that bound.
- Mutants built here (a slice that drops an item, one whose output changes while it waits)
  must fail, so the checks are shown able to fail.
"""

import os

import pytest
from amaranth.hdl import Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from nicoll.hw.barrier import BarrierMode, BarrierUnit
from nicoll.hw.lib.skid import CheckedRing, OneEntrySlice, SkidBuffer

from formal_helpers import (Past, elaborate_with_locals, implies, no_reset, run_sby,
                            stream_sink_rules, stream_source_rules)


#: Payload bits of the slices under proof.  The slices only move payloads (they compute
#: nothing from them), so a narrow payload shows what a wide one would, and keeps the proof
#: quick; 4 bits still give the solver 16 values to tell items apart.
PAYLOAD = 4


# ---- Register slices -------------------------------------------------------------------------

class SliceSpec(Elaboratable):
    """Properties of a register slice with ``capacity`` entries around ``dut``.

    ``hidden`` (optional; for a slice of two entries) tells the induction about state no
    port shows (see :func:`elaborate_with_locals`): called with the locals of the slice's
    methods and the scoreboard's count of items inside, it returns the payload of the entry
    behind the head and a list of facts (1-bit values) that hold in every reachable state.
    Each is asserted, so a wrong one fails the proof rather than weakening it.

    Free inputs: ``dut.i.valid``, ``dut.i.payload`` (under the stream rules), ``dut.o.ready``
    and ``choose`` (which input transfer is tracked)."""

    def __init__(self, dut, capacity, hidden=None):
        self.dut = dut
        self.capacity = capacity
        self.hidden = hidden
        self.choose = Signal()

    @property
    def ports(self):
        return [self.dut.i.valid, self.dut.i.payload, self.dut.o.ready, self.choose]

    def elaborate(self, platform):
        m = Module()
        dut, cap = self.dut, self.capacity
        if self.hidden is None:
            m.submodules.dut = dut
        else:
            m.submodules.dut, frames = elaborate_with_locals(dut, platform)
        i, o = dut.i, dut.o
        past_valid = no_reset(m)
        stream_source_rules(m, i, past_valid)
        stream_sink_rules(m, o, past_valid)

        put = i.valid & i.ready
        got = o.valid & o.ready
        # Scoreboard: items inside = transfers in - transfers out.  One wider than the
        # capacity, so a slice that takes an item it has no room for shows as an overflow.
        inside = Signal(range(cap + 2))
        m.d.sync += inside.eq(inside + put - got)
        m.d.comb += [
            # Nothing comes out of an empty slice (no duplicate, nothing invented), and every
            # item inside is on offer at the output (the oldest one: see `ahead` below).
            Assert(o.valid == (inside != 0)),
            # It takes exactly while it has room: never more than it holds, never a stall
            # with an entry free.
            Assert(inside <= cap),
            Assert(i.ready == (inside < cap)),
        ]

        # One item, chosen freely among the transfers in, is followed: it must come out with
        # its payload, after exactly the items that were inside when it went in.  As the
        # solver may choose any transfer, this holds for every item: no loss, no duplicate,
        # no reordering, no corruption.
        tracked = Signal()
        chosen = Signal(PAYLOAD)
        ahead = Signal(range(cap + 1))        # items in front of the chosen one
        with m.If(tracked & got):
            m.d.comb += Assert(implies(ahead == 0, o.payload == chosen))
            with m.If(ahead == 0):
                m.d.sync += tracked.eq(0)
            with m.Else():
                m.d.sync += ahead.eq(ahead - 1)
        with m.If(~tracked & put & self.choose):
            m.d.sync += [tracked.eq(1), chosen.eq(i.payload), ahead.eq(inside - got)]
        m.d.comb += [
            # The chosen item is still inside, and where the slice must hold it: at the
            # output when nothing is ahead of it, else in the entry behind.
            Assert(implies(tracked, ahead < inside)),
            Assert(implies(tracked & (ahead == 0), o.payload == chosen)),
        ]
        if self.hidden is not None:
            second, facts = self.hidden(frames, inside)
            m.d.comb += Assert(implies(tracked & (ahead == 1), second == chosen))
            m.d.comb += [Assert(fact) for fact in facts]
        return m


def skid_hidden(frames, inside):
    return frames["elaborate"]["skid_payload"], []


def ring_hidden(frames, inside):
    # The write pointer is the read pointer plus the items inside (modulo 2).
    ring = frames["_elaborate_ring"]
    rd_ptr, wr_ptr = ring["rd_ptr"], ring["wr_ptr"]
    return (Mux(rd_ptr, ring["entries"][0], ring["entries"][1]),
            [wr_ptr == (rd_ptr ^ inside[0])])


def checked_hidden(dut):
    # CheckedRing shows its entries and its head on ports; its write pointer and the flags
    # that choose the entry to load are inside.
    def hidden(frames, inside):
        local = frames["elaborate"]
        wr_ptr, loads = local["wr_ptr"], local["loads"]
        free = inside != 2
        return (Mux(dut.head, dut.entries[0], dut.entries[1]),
                [wr_ptr == (dut.head ^ inside[0]),
                 loads[0] == (free & (wr_ptr == 0)), loads[1] == (free & (wr_ptr == 1))])
    return hidden


def _slice(kind):
    if kind == "skid":
        return SliceSpec(SkidBuffer(PAYLOAD), 2, skid_hidden)
    if kind == "skid, mux_output":
        return SliceSpec(SkidBuffer(PAYLOAD, mux_output=True), 2, ring_hidden)
    if kind == "one entry":
        return SliceSpec(OneEntrySlice(PAYLOAD), 1)
    assert kind.startswith("checked ring")
    dut = CheckedRing(PAYLOAD, 2, head_register=kind.endswith("head register"))
    return SliceSpec(dut, 2, checked_hidden(dut))


#: k-induction length: every slice's properties are inductive at this length (each proof
#: takes a few seconds); the base case checks every run of the same length from reset.
SLICE_DEPTH = 6


@pytest.mark.parametrize("kind", ["skid", "skid, mux_output", "one entry",
                                  "checked ring, head register", "checked ring, flags"])
def test_slice_proof(kind, tmp_path):
    spec = _slice(kind)
    ports = spec.ports
    if isinstance(spec.dut, CheckedRing):
        # The consumer's checks are free too: they never touch the stream.
        ports += [spec.dut.block_new, spec.dut.block_entry]
    result = run_sby(spec, ports, tmp_path, mode="prove", depth=SLICE_DEPTH)
    assert result.passed, str(result)


# ---- Mutants: the checks can fail --------------------------------------------------------------

class DroppingSlice(wiring.Component):
    """A SkidBuffer behind a gate that loses one kind of item: one whose payload is 0b1010,
    offered while the output stalls, is acknowledged and never stored."""

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = SkidBuffer(len(self.i.payload))
        drop = (self.i.payload == 0b1010) & self.o.valid & ~self.o.ready
        m.d.comb += [
            inner.i.payload.eq(self.i.payload),
            inner.i.valid.eq(self.i.valid & ~drop),
            self.i.ready.eq(inner.i.ready | drop),
        ]
        wiring.connect(m, inner.o, wiring.flipped(self.o))
        return m


class RestlessSlice(wiring.Component):
    """OneEntrySlice's logic with one change: a new item offered while the output waits
    overwrites the waiting payload (and is then lost)."""

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        payload = Signal.like(self.i.payload)
        m.d.comb += [self.i.ready.eq(~self.o.valid), self.o.payload.eq(payload)]
        with m.If(~self.o.valid):
            m.d.sync += [payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.Elif(self.i.valid):
            m.d.sync += payload.eq(self.i.payload)
        return m


@pytest.mark.parametrize("mutant,capacity", [(DroppingSlice, 2), (RestlessSlice, 1)])
def test_slice_mutant_fails(mutant, capacity, tmp_path):
    spec = SliceSpec(mutant(PAYLOAD), capacity)
    result = run_sby(spec, spec.ports, tmp_path, mode="bmc", depth=SLICE_DEPTH)
    assert result.status == "FAIL", str(result)
    # The counterexample names an assertion of the spec, not an error of the flow.
    assert "failed assertion" in result.log_tail, str(result)


# ---- BarrierUnit: mode 0 never releases early ----------------------------------------------------

class RootSpec(Elaboratable):
    """A BarrierUnit as the root of its tree in mode 0 (NORMAL), every input free within the
    contract the driver keeps (docs/barrier.md, "Configuration"):

    - it is the root (``has_parent`` = 0) and ``mode`` is NORMAL throughout;
    - the configuration (ids, child slots, route table writes and clears) changes only
      before the first ``start``, and ``start`` comes at least ``settle`` cycles after the
      last change (the unit's registered checks and sums need that long; a driver writing
      registers over a bus leaves far more);
    - no notice and no ``done`` before the first ``start``.

    Anything else is free in every cycle: notices of any kind, sender, seq and subject;
    ``done`` with any seq; more ``start``s; ``tx.ready``.  The inputs only the other modes
    and the stamps read (``now``, ``m``, ``c``, ``ac_sub``, ``estimate``, ``log_index``: see
    :attr:`HELD`) are held at their init values: free, their 64-bit counters and compares
    made each step of the check about twice as slow, for nothing mode 0 decides on.

    Asserted: when the root leaves a barrier (``seq`` moves on without a ``start``), its
    vector held every member of its tree: the ids the route table routes below it (followed
    here from the writes and clears themselves) and its own; ``ones`` equals the popcount of
    ``vector`` in every cycle; ``tx`` keeps the stream rules.  Covered (``cover``): a release
    of a tree of ``cover_members`` nodes."""

    def __init__(self, max_nodes=4, max_children=2, settle=4, cover_members=2):
        self.dut = BarrierUnit(max_nodes, max_children)
        self.settle = settle
        self.cover_members = cover_members

    #: Inputs held at their init values (0; ``ac_sub``: COUNT) rather than left free.
    HELD = frozenset({"now", "m", "c", "ac_sub", "estimate", "log_index"})

    @property
    def ports(self):
        return [value for path, member, value in self.dut.signature.flatten(self.dut)
                if member.flow == In and path[0] not in self.HELD]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        n = dut.max_nodes
        past_valid = no_reset(m)
        m.d.comb += [Assume(~dut.has_parent), Assume(dut.mode == BarrierMode.NORMAL)]

        # The contract: configure, settle, then start.
        running = Signal()              # a start has been given
        m.d.sync += running.eq(running | dut.start)
        config = [dut.node_id, dut.parent_id, dut.child_id, dut.child_valid]
        changed = dut.route_we | dut.route_clear
        for value in config:
            value = Value.cast(value)
            changed = changed | (Past(m, value, name="config_was") != value)
        quiet = Signal(range(self.settle + 1))     # cycles since the last change, saturated
        with m.If(changed):
            m.d.sync += quiet.eq(0)
        with m.Elif(quiet != self.settle):
            m.d.sync += quiet.eq(quiet + 1)
        m.d.comb += [
            Assume(implies(dut.start, ~changed & (quiet == self.settle))),
            Assume(implies(running, ~changed)),
            Assume(implies(~running, ~dut.rx.valid & ~dut.done)),
        ]

        # The tree's members, from the route table's writes as the host makes them: an
        # entry j + 1 routes the id to child slot j, 0 takes it out; a write out of range
        # is refused (the unit flags it), and a clear wins over a write in its cycle.
        routed = Signal(n)
        with m.If(dut.route_clear):
            m.d.sync += routed.eq(0)
        with m.Elif(dut.route_we & (dut.route_data <= dut.max_children)):
            for x in range(n):
                with m.If(dut.route_addr == x):
                    m.d.sync += routed[x].eq(dut.route_data != 0)
        own = Signal(n)
        m.d.comb += own.eq(Cat(dut.node_id == x for x in range(n)))
        members = routed | own

        # A release shows in the next cycle as seq moving on without a start; the vector of
        # the releasing cycle is the one it decided on (the release clears it).
        released = past_valid & ~Past(m, dut.start, name="start_was") & \
            (dut.seq != Past(m, dut.seq, name="seq_was"))
        vector_was = Past(m, dut.vector, name="vector_was")
        members_was = Past(m, members, name="members_was")
        m.d.comb += [
            Assert(implies(released, (vector_was & members_was) == members_was)),
            Assert(dut.ones == sum(dut.vector[x] for x in range(n))),
            Cover(released & (sum(members_was[x] for x in range(n)) == self.cover_members)),
        ]
        stream_sink_rules(m, dut.tx, past_valid)
        return m


#: Steps of the barrier's bounded check (steps 0 .. 12 from reset).  With the settle time of
#: 4 cycles, the earliest release is at step 10 for a tree of two nodes (the cover run finds
#: it), 12 for three and 14 for four: the bound holds every run up to the first releases of
#: trees of up to three nodes.  Each step past the first releases costs two to three times
#: the one before (14 steps: about 20 s of one core; step 14 alone over a minute).
#: NICOLL_FORMAL_BARRIER_DEPTH runs it deeper (docs/formal.md).
BARRIER_DEPTH = 13


def test_barrier_root_never_early(tmp_path):
    spec = RootSpec()
    depth = int(os.environ.get("NICOLL_FORMAL_BARRIER_DEPTH", BARRIER_DEPTH))
    result = run_sby(spec, spec.ports, tmp_path, mode="bmc", depth=depth, timeout=None)
    assert result.passed, str(result)


def test_barrier_root_release_reached(tmp_path):
    # Without this, a bound too short to reach any release would pass the check above.
    spec = RootSpec()
    result = run_sby(spec, spec.ports, tmp_path, mode="cover", depth=BARRIER_DEPTH)
    assert result.passed, str(result)
