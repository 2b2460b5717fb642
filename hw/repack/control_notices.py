# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
"""The repack control tree's notice output: :class:`NoticeQueue`, a two-entry register slice
the state machine fills, and the notice a push would post.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .control_orders import list_entry_layout
from .control_states import check_tree
from .formats import (NOTICE_LAYOUT, RANK_WIDTH, UNIT_EVENT_LAYOUT, RepackNoticeKind, UnitEvent,
                      unit_config_layout)


__all__ = ["NoticeQueue"]


class NoticeQueue(wiring.Component):
    """The notice output: a two-entry register slice (like :class:`SkidBuffer`) that the
    FSM fills when its second entry is empty (`nq_room`, a flop), so the receiver's
    ``ready`` reaches no decision.  Unlike a SkidBuffer it can be emptied at once
    (`nq_flush`): a TIMEOUT withdraws the notices not yet taken.

    The notice a push would post is chosen by the state and `pend_done` alone: SEND in
    SEND; in RUN a pending rank DONE goes first (an event's notice waits for it), else
    the event's TAKEN or DELIVERED.

    Parameters
    ----------
    max_ranks : int
        Largest N, 2 .. 256.
    units : int
        Number of repack units, 1 .. 64.
    max_group : int
        The units' ``max_group``.

    Members
    -------
    notice : ``Out(stream.Signature(NOTICE_LAYOUT))``
        SEND, TAKEN, DELIVERED and DONE notices for the ranks.
    nq_push, nq_flush : ``In(1)``
        Post the chosen notice; withdraw every notice not yet taken.
    nq_room, nq_busy : ``Out(1)``
        The second entry is empty (a push is taken); a notice is held.
    st_send : ``In(1)``
        SEND's flag.
    src_r_data, unit_sel, cfg, b_sel : ``In``
        SEND's notice: the source read from the SRC list, the unit, its configuration (the
        tag) and the destination group.
    pend_done, done_rank : ``In(1)``, ``In(RANK_WIDTH)``
        A rank DONE notice waits, for that rank.
    eq, eq_unit : ``In``
        The unit event register and its unit (TAKEN or DELIVERED).
    """

    def __init__(self, max_ranks, units, max_group):
        check_tree(max_ranks, units, max_group)
        super().__init__({
            "notice": Out(stream.Signature(NOTICE_LAYOUT)),
            "nq_push": In(1), "nq_flush": In(1), "nq_room": Out(1), "nq_busy": Out(1),
            "st_send": In(1), "src_r_data": In(list_entry_layout()),
            "unit_sel": In(range(max(2, units))), "cfg": In(unit_config_layout(max_group)),
            "b_sel": In(8), "pend_done": In(1), "done_rank": In(RANK_WIDTH),
            "eq": In(UNIT_EVENT_LAYOUT), "eq_unit": In(range(max(2, units))),
        })

    def elaborate(self, platform):
        m = Module()
        notice = self.notice
        spare = Signal(NOTICE_LAYOUT)
        spare_valid = Signal()
        nq_data = Signal(NOTICE_LAYOUT)
        m.d.comb += [self.nq_room.eq(~spare_valid), self.nq_busy.eq(notice.valid | spare_valid)]
        out_free = ~notice.valid | notice.ready
        # Payloads move whether or not a notice is pushed or flushed (an entry's payload
        # matters only while it is valid), so only the two valid bits see a decision.
        with m.If(out_free):
            m.d.sync += notice.payload.eq(Mux(spare_valid, spare, nq_data))
        with m.Elif(~spare_valid):
            m.d.sync += spare.eq(nq_data)
        with m.If(self.nq_flush):
            m.d.sync += [notice.valid.eq(0), spare_valid.eq(0)]
        with m.Elif(out_free):
            m.d.sync += [notice.valid.eq(spare_valid | self.nq_push), spare_valid.eq(0)]
        with m.Elif(~spare_valid):
            m.d.sync += spare_valid.eq(self.nq_push)

        # The payload is chosen by flops only; a decision only pushes.  The push itself is
        # an AND-OR of flops made in RunActions (`nq_push`).
        d, eq = nq_data, self.eq
        taken = eq.kind == UnitEvent.TAKEN
        with m.If(self.st_send):
            m.d.comb += [d.kind.eq(RepackNoticeKind.SEND), d.rank.eq(self.src_r_data.rank),
                         d.unit.eq(self.unit_sel), d.tag.eq(self.cfg.tag),
                         d.group.eq(self.b_sel)]
        with m.Elif(self.pend_done):
            m.d.comb += [d.kind.eq(RepackNoticeKind.DONE), d.rank.eq(self.done_rank)]
        with m.Else():
            # The group of the other side: b for a source, a for a destination.
            m.d.comb += [d.kind.eq(Mux(taken, RepackNoticeKind.TAKEN, RepackNoticeKind.DELIVERED)),
                         d.rank.eq(eq.rank), d.unit.eq(self.eq_unit), d.tag.eq(eq.tag),
                         d.group.eq(Mux(taken, eq.tag[:8], eq.tag[8:]))]
        return m
