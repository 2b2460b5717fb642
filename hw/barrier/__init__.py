"""The barrier unit of seed 004 (:mod:`.unit`): completion bit vector, count and time
thresholds, forced aborts, stamps and the abort log.
"""

from .unit import (BarrierNoticeKind, BarrierMode, AcSubMode, NOTICE_LAYOUT, BARRIER_ERROR_LAYOUT,
                   STAMP_FLAGS, SEQ_WIDTH, TIME_WIDTH, MAX_NODES_LIMIT, MAX_CHILDREN_LIMIT,
                   DEFAULT_LOG_DEPTH, notice_stream, BarrierUnit, tree_tables)

__all__ = ["BarrierNoticeKind", "BarrierMode", "AcSubMode", "NOTICE_LAYOUT",
    "BARRIER_ERROR_LAYOUT", "STAMP_FLAGS", "SEQ_WIDTH", "TIME_WIDTH", "MAX_NODES_LIMIT",
    "MAX_CHILDREN_LIMIT", "DEFAULT_LOG_DEPTH", "notice_stream", "BarrierUnit", "tree_tables"]
