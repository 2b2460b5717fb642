"""The barrier unit of seed 004 (:mod:`.unit`): completion bit vector, count and time
thresholds, forced aborts, stamps and the abort log.

:class:`BarrierUnit` joins its parts, one component per module: :mod:`.route` (the route
table and subtree sizes), :mod:`.checks` (the configuration checks and the root's registered
controls), :mod:`.decode` (the boundary register and the decode), :mod:`.execute` (the execute
stage and the root's decision), :mod:`.count` (the count, its flags and the stamps),
:mod:`.queue` (completions to forward up), :mod:`.kills` (kills and the abort log),
:mod:`.fanout` (the RELEASEs and KILLs owed to each child), :mod:`.send` (the notice ``tx``
sends) and :mod:`.errors` (the error bits and the stale count).  :mod:`.layouts` holds the
notice and status layouts, :mod:`.gates` the helpers the parts share.
"""

from .layouts import (BarrierNoticeKind, BarrierMode, AcSubMode, NOTICE_LAYOUT,
                      BARRIER_ERROR_LAYOUT, STAMP_FLAGS, SEQ_WIDTH, TIME_WIDTH, MAX_NODES_LIMIT,
                      MAX_CHILDREN_LIMIT, DEFAULT_LOG_DEPTH, notice_stream)
from .unit import BarrierUnit, tree_tables

__all__ = ["BarrierNoticeKind", "BarrierMode", "AcSubMode", "NOTICE_LAYOUT",
    "BARRIER_ERROR_LAYOUT", "STAMP_FLAGS", "SEQ_WIDTH", "TIME_WIDTH", "MAX_NODES_LIMIT",
    "MAX_CHILDREN_LIMIT", "DEFAULT_LOG_DEPTH", "notice_stream", "BarrierUnit", "tree_tables"]
