# Ref: seed 004 (Fujitsu, US11487593 family; /work/shared/seeds/004_*.txt): completion bit
#      vector per node (fig. 1), notify/forward (figs. 8, 9), root decision by mode (fig. 10),
#      forced-abort forwarding (fig. 11), registers PR/MR/CR/CNT/SR/MR'/ER (fig. 12).
"""What barrier units say to each other and what they show: the notice (:data:`NOTICE_LAYOUT`)
and its kinds, the root's modes, the error bits, the stamp flags and the unit's limits."""

from amaranth.lib import data, enum, stream

from ..net.packet import DEST_WIDTH


__all__ = [
    "BarrierNoticeKind", "BarrierMode", "AcSubMode",
    "NOTICE_LAYOUT", "BARRIER_ERROR_LAYOUT", "STAMP_FLAGS", "SEQ_WIDTH", "TIME_WIDTH",
    "MAX_NODES_LIMIT", "MAX_CHILDREN_LIMIT", "DEFAULT_LOG_DEPTH", "notice_stream",
]


#: Width of the barrier sequence number every notice carries.
SEQ_WIDTH = 16
#: Width of the cycle stamps, of ``now``, of ``c`` and of the estimate.
TIME_WIDTH = 64
#: Largest ``max_nodes``: the bit vector and the route table grow linearly with it.
MAX_NODES_LIMIT = 4096
#: Largest ``max_children``: the duplicate-child check grows with its square.
MAX_CHILDREN_LIMIT = 64
#: Abort-log entries a unit keeps unless told otherwise (16 to 1024, a power of two).
DEFAULT_LOG_DEPTH = 16


class BarrierNoticeKind(enum.Enum, shape=2):
    """What a notice says.  Ref: seed 004, fig. 1 (solid arrows: completion; dashed: kill)."""
    COMPLETE = 0    # node `subject` finished barrier `seq` (goes up)
    RELEASE = 1     # barrier `seq` is over (goes down to every child)
    KILL = 2        # abort unfinished work of barrier `seq`, use `estimate` (goes down)


class BarrierMode(enum.Enum, shape=2):
    """The root's decision rule.  Ref: seed 004, "mode 0 / 1 / 2"."""
    NORMAL = 0      # release when every bit is set
    AC = 1          # release early on a count or time threshold, kill the unfinished
    COLLECT = 2     # release like NORMAL, record s, mt, e


class AcSubMode(enum.Enum, shape=2):
    """Which thresholds mode AC uses: bit 0 = count (m), bit 1 = time (c).  0 is an error.
    Ref: seed 004 (the three sub-modes of mode 1 at the end of the description)."""
    COUNT = 1
    TIME = 2
    BOTH = 3


#: One barrier notice: a flat struct (130 bits) that fits a network packet header.
NOTICE_LAYOUT = data.StructLayout({
    "kind": BarrierNoticeKind,
    "seq": SEQ_WIDTH,
    "src": DEST_WIDTH,          # the node that sent this notice
    "dst": DEST_WIDTH,          # the node it goes to
    "subject": DEST_WIDTH,      # COMPLETE: the node that finished; 0 otherwise
    "estimate": TIME_WIDTH,     # KILL: the root's estimate of the aborted result; 0 otherwise
})

#: Error bits.  The first three and the ``cfg_*`` bits except ``cfg_write`` follow the current
#: inputs, shown two cycles late (the decision acts on m, c and the mode one cycle after their
#: checks show, together with them, so a bad value never acts); ``outside`` and ``notice``
#: stay set until ``start``; ``cfg_write`` stays set until ``route_clear``.  What they stop:
#: a root with a bad m, c or mode decides by the normal rule (all done, no kill); a unit with
#: a ``cfg_*`` error counts no completion (its own included) and, at the root, never
#: releases; an ``outside`` or ``notice`` notice is dropped.
BARRIER_ERROR_LAYOUT = data.StructLayout({
    "m_range": 1,       # root, AC with a count sub-mode: m = 0 or m > N
    "c_zero": 1,        # root, AC with a time sub-mode: c = 0
    "mode": 1,          # root: mode 3, or AC with sub-mode 0
    "cfg_id": 1,        # own, parent or a valid child id is >= max_nodes
    "cfg_slot": 1,      # a route entry names a child slot that is not valid
    "cfg_self": 1,      # own id routed to a child, or a valid child id equal to own id
    "cfg_parent": 1,    # parent id is own id or routed into own subtree
    "cfg_dup": 1,       # two valid child slots hold the same id
    "cfg_child": 1,     # a valid child's own id is not routed to its slot
    "cfg_write": 1,     # a route write with an address >= max_nodes or an entry > max_children
    "outside": 1,       # a COMPLETE whose subject is not in the sending child's subtree
    "notice": 1,        # a notice not for this node, from neither parent nor child, or of a
                        # kind that cannot come from its sender
})

#: Which of the stamps s, mt, e of the last released barrier were recorded.
STAMP_FLAGS = data.StructLayout({"s": 1, "mt": 1, "e": 1})


def notice_stream():
    """``stream.Signature`` of notices (the sender's view; a receiving port is ``In(...)``)."""
    return stream.Signature(NOTICE_LAYOUT)
