# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
"""The repack control tree's unit events: :class:`EventIntake` takes the units' events into a
one-entry register (``eq``) with what the state machine needs decoded.
"""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib.skid import SkidBuffer
from .control_states import check_tree, in_group
from .formats import UNIT_EVENT_LAYOUT, UnitEvent, _priority


__all__ = ["EventIntake", "HINTED_EVENT_LAYOUT"]


#: A unit event in the control tree's input slice, with what its `eq` load needs decoded.
HINTED_EVENT_LAYOUT = data.StructLayout({
    "event": UNIT_EVENT_LAYOUT,
    "quiet_rank": 1,                    # a DONE, or a rank outside the group: no notice
})


class EventIntake(wiring.Component):
    """Unit events enter a one-entry register (`eq`) with what the FSM needs decoded:
    whether it is a DONE, whether its unit is stale, whether its rank is in the group.
    The FSM acts on `eq` only, one event a cycle; the slot refills in the cycle it is
    emptied, and an empty slot fills in any state (the FSM takes events in IDLE and RUN
    only, and what is decoded on the way in does not change in the states between: the
    stale bits move in IDLE and RUN, the group size at a start in IDLE), so the load
    does not decode the state.

    The units' ready is a flop: an event is taken into `eq` when it refills, else into a
    second entry (`spare`, undecoded) while that is empty, and `eq` refills from `spare`
    first.  As `eq`'s refill (the FSM's take, at the end of RUN's priorities) the ready
    was the 64-bit core's routed path at seed 1 of b861e0b (RUN's flag -> the take ->
    the unit event slice's read pointer, 7.60 ns).

    Parameters
    ----------
    max_ranks : int
        Largest N, 2 .. 256.
    units : int
        Number of repack units, 1 .. 64.

    Members
    -------
    unit_event_<k> : ``In(stream.Signature(UNIT_EVENT_LAYOUT))``
        Unit k's events.
    n : ``In(16)``
        The exchange's number of ranks.
    ustale : ``In(units)``
        Units left busy by an aborted exchange.
    P, Q, p_last, q_last : ``In``
        Source and destination subgroups, and each less one.
    eq_take : ``In(1)``
        The FSM uses `eq` in this cycle.
    eq, eq_valid, eq_unit, eq_done, eq_stale, eq_quiet : ``Out``
        The event register, its unit and its decoded flags (a DONE; from a stale unit; needs
        no notice: DONE, stale or rank >= n).
    sent_target, recv_target : ``Out``
        What the event's rank's counts must equal for the rank to be complete after it.
    event_moved : ``Out(1)``
        An event left a unit's slice in this cycle (progress, for the watchdog).
    """

    def __init__(self, max_ranks, units):
        check_tree(max_ranks, units)
        R = max_ranks
        self._max_ranks, self._units = R, units
        members = {f"unit_event_{k}": In(stream.Signature(UNIT_EVENT_LAYOUT))
                   for k in range(units)}
        members.update({
            "n": In(16), "ustale": In(units),
            "P": In(range(R + 1)), "Q": In(range(R + 1)),
            "p_last": In(range(R)), "q_last": In(range(R)), "eq_take": In(1),
            "eq": Out(UNIT_EVENT_LAYOUT), "eq_valid": Out(1),
            "eq_unit": Out(range(max(2, units))), "eq_done": Out(1), "eq_stale": Out(1),
            "eq_quiet": Out(1),
            "sent_target": Out(range(R + 1)), "recv_target": Out(range(R + 1)),
            "event_moved": Out(1),
        })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        K = self._units
        # A register slice on each unit's event stream, owned here: the FSM's take (the
        # `eq` load) reaches the unit's event FIFO and count from a flop and not across the
        # hub (the 256-bit core's critical path, 118.7 MHz).  Its entries sit behind a read
        # pointer, so the take loads the pointers only and not the payload (the 256-bit
        # core's path at seed 2 of c559aea: `eq_take` -> the slice's payload enables, 8.30
        # ns).  Each entry carries `quiet_rank` (a DONE, or a rank outside the group),
        # decoded as the event enters: decoded at the load, after the slice's read mux and
        # `spare`'s, it was the 256-bit core's latest pin at seed 1 of d84feb2 (the slice's
        # read pointer -> `eq_quiet`, 7 levels, 8.31 ns).  The group size moves only at a
        # start, taken while idle, when any event still on its way is from a stale unit
        # (quiet by that alone).
        events = []
        for k in range(K):
            unit_event = getattr(self, f"unit_event_{k}")
            ev_slice = SkidBuffer(HINTED_EVENT_LAYOUT, mux_output=True)
            m.submodules[f"event_slice{k}"] = ev_slice
            m.d.comb += [
                ev_slice.i.valid.eq(unit_event.valid),
                ev_slice.i.payload.event.eq(unit_event.payload),
                ev_slice.i.payload.quiet_rank.eq(
                    (unit_event.payload.kind == UnitEvent.DONE)
                    | ~in_group(unit_event.payload.rank, self.n, self._max_ranks)),
                unit_event.ready.eq(ev_slice.i.ready),
            ]
            events.append(ev_slice.o)
        ev_valid = Signal(K)
        m.d.comb += ev_valid.eq(Cat(e.valid for e in events))
        ek = _priority(m, ev_valid, "event_unit")
        ev = HINTED_EVENT_LAYOUT(Array(e.payload.as_value() for e in events)[ek])
        eq_valid = self.eq_valid
        spare = Signal(HINTED_EVENT_LAYOUT)
        spare_unit = Signal(range(max(2, K)))
        spare_valid = Signal()
        for k in range(K):
            m.d.comb += events[k].ready.eq(~spare_valid & (ek == k))
        load = Signal()
        m.d.comb += load.eq(~eq_valid | self.eq_take)
        src = HINTED_EVENT_LAYOUT(Mux(spare_valid, spare, ev))
        src_unit = Mux(spare_valid, spare_unit, ek)
        # What the event's rank's counts must equal for the rank to be complete after it (see
        # RunActions), chosen as the event loads: a TAKEN counts a send, a DELIVERED a receive.
        # P and Q are final before any event that is not quiet can arrive (units run only
        # from RUN on; an aborted exchange's units are stale until their DONE).
        with m.If(load):
            is_done = src.event.kind == UnitEvent.DONE
            is_taken = src.event.kind == UnitEvent.TAKEN
            stale = self.ustale.bit_select(src_unit, 1)
            m.d.sync += [
                self.sent_target.eq(Mux(is_taken, self.q_last, self.Q)),
                self.recv_target.eq(Mux(is_taken, self.P, self.p_last)),
                eq_valid.eq(spare_valid | ev_valid.any()), self.eq.eq(src.event),
                self.eq_unit.eq(src_unit), self.eq_done.eq(is_done), self.eq_stale.eq(stale),
                self.eq_quiet.eq(src.quiet_rank | stale),
                spare_valid.eq(0),
            ]
        with m.Elif(~spare_valid):
            m.d.sync += spare_valid.eq(ev_valid.any())
        # `spare` copies the offered event whenever it is empty (its enable a flop, as a
        # SkidBuffer's second entry), counting from the cycle spare_valid is set: under
        # `load` too, its ~30 flops were on the end of the FSM's take (the 64-bit core's
        # latest pins at seeds 1 and 3 of 37105db: the RUN decision -> eq_take -> the
        # event registers' enables, 7.53 and 7.18 ns).
        with m.If(~spare_valid):
            m.d.sync += [spare.eq(ev), spare_unit.eq(ek)]
        # An event taken from a slice is progress for the watchdog (a cycle later).
        m.d.comb += self.event_moved.eq(Cat(e.valid & e.ready for e in events).any())
        return m
