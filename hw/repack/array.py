# Ref: seed 003 (CN111614581, Mellanox): in-network data repack circuits for small all-to-all
#      and all-to-all-v.  The N×N block matrix is cut into dh×dv sub-matrices (fig. 8); a repack
#      unit takes one message from each source of a sub-matrix, regroups the blocks by
#      destination and sends one message to each destination (fig. 9); a control tree registers
#      the ranks, marks subgroups ready, pairs them, hands the pair to a free unit and reports
#      completion (steps 7.1-7.6).
# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
"""A control tree and several repack units, joined: :class:`RepackArray`."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .formats import (NOTICE_LAYOUT, ORDER_WRITE_LAYOUT, REGISTRATION_LAYOUT, START_LAYOUT,
                      RepackError, message_stream)
from .control import RepackControl
from .unit import RepackUnit


__all__ = ["RepackArray"]


class RepackArray(wiring.Component):
    """A control tree and ``units`` repack units, joined.

    Ref: seed 003, claims on "several data repack circuit instances": each unit transposes its
    sub-matrices in turn, the units work at once.

    Parameters are those of :class:`RepackControl` and :class:`RepackUnit`.

    Members
    -------
    order, start, reg, notice, busy, status, cycles, ops
        As on :class:`RepackControl`.
    errors : ``Out(32)``
        The control tree's errors plus every unit's; wraps.
    last_error : ``Out(RepackError)``
        Code of the latest of those, whether the tree or a unit counted it (a unit's bad
        message or stray as much as a refused registration).
    i_<k> : ``In(message_stream(data_width))``
        Source messages for unit ``k`` (a SEND notice names the unit).
    o_<k> : ``Out(message_stream(data_width))``
        Destination messages from unit ``k``; ``rank`` is the destination.

    The units are built with the array and reachable as :meth:`unit` (for their
    ``busy_cycles`` and own error counters).
    """

    def __init__(self, max_ranks, units, max_group, data_width, capacity_bytes):
        self._control = RepackControl(max_ranks, units, max_group, data_width, capacity_bytes)
        self._units = [RepackUnit(data_width, capacity_bytes, max_group) for _ in range(units)]
        # They are elaborated exactly when the array is; an array that never is warns
        # for itself, once.
        for part in (self._control, *self._units):
            part._MustUse__silence = True
        self._data_width = data_width
        members = {
            "order": In(stream.Signature(ORDER_WRITE_LAYOUT)),
            "start": In(stream.Signature(START_LAYOUT)),
            "reg": In(stream.Signature(REGISTRATION_LAYOUT)),
            "notice": Out(stream.Signature(NOTICE_LAYOUT)),
        }
        for k in range(units):
            members[f"i_{k}"] = In(message_stream(data_width))
        for k in range(units):
            members[f"o_{k}"] = Out(message_stream(data_width))
        members.update({
            "busy": Out(1),
            "status": Out(RepackError),
            "errors": Out(32),
            "last_error": Out(RepackError),
            "cycles": Out(32),
            "ops": Out(32),
        })
        super().__init__(members)

    @property
    def units(self):
        return len(self._units)

    @property
    def data_width(self):
        return self._data_width

    @property
    def control(self):
        return self._control

    def unit(self, k):
        return self._units[k]

    def i(self, k):
        return getattr(self, f"i_{k}")

    def o(self, k):
        return getattr(self, f"o_{k}")

    def elaborate(self, platform):
        m = Module()
        ctl = self._control
        m.submodules.control = ctl
        for name in ("order", "start", "reg"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(ctl, name))
        wiring.connect(m, ctl.notice, wiring.flipped(self.notice))
        unit_errors = 0
        parts = [ctl, *self._units]
        for k, unit in enumerate(self._units):
            m.submodules[f"unit{k}"] = unit
            wiring.connect(m, ctl.unit_cfg(k), unit.cfg)
            # The event stream's register slice is the control tree's (`_events`).
            wiring.connect(m, unit.event, ctl.unit_event(k))
            wiring.connect(m, wiring.flipped(self.i(k)), unit.i)
            wiring.connect(m, unit.o, wiring.flipped(self.o(k)))
            m.d.comb += ctl.unit_active[k].eq(unit.active)
            unit_errors = unit_errors + unit.errors
        m.d.comb += [
            self.busy.eq(ctl.busy),
            self.status.eq(ctl.status),
            self.errors.eq(ctl.errors + unit_errors),
            self.cycles.eq(ctl.cycles),
            self.ops.eq(ctl.ops),
        ]
        # The latest error of any part: a part's counter moves by one or two per cycle (the
        # control tree counts an FSM error and a registration's in the same cycle), together
        # with its last_error, so a change of the counter's two low bits marks the cycle its
        # last_error was written.  Of errors in one cycle, the highest unit's is kept.
        low = [part.errors[:2] for part in parts]
        seen = [Signal(2, name=f"seen_errors{k}") for k in range(len(parts))]
        held = Signal(RepackError)
        m.d.comb += self.last_error.eq(held)
        m.d.sync += [s.eq(v) for s, v in zip(seen, low)]
        for k, part in enumerate(parts):
            with m.If(low[k] != seen[k]):
                m.d.comb += self.last_error.eq(part.last_error)
                m.d.sync += held.eq(part.last_error)
        return m
