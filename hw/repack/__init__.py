"""The repack units and their control tree (seed 003, :mod:`.units`) and the hub that
connects them to the node's packet network (:mod:`.hub`).
"""

from .units import (RANK_WIDTH, TAG_WIDTH, LENGTH_WIDTH, MAX_BLOCK_BYTES, MAX_RANKS, MAX_GROUP,
                    REPORT_SLACK, RepackError, UnitEvent, RepackNoticeKind, OrderList,
                    HEADER_LAYOUT, length_table_layout, message_beat_layout, message_stream,
                    unit_config_layout, UNIT_EVENT_LAYOUT, ORDER_WRITE_LAYOUT, START_LAYOUT,
                    REGISTRATION_LAYOUT, NOTICE_LAYOUT, buffer_bytes_needed, table_beats,
                    RepackUnit, RepackControl, RepackEngine)

__all__ = ["RANK_WIDTH", "TAG_WIDTH", "LENGTH_WIDTH", "MAX_BLOCK_BYTES", "MAX_RANKS", "MAX_GROUP",
    "REPORT_SLACK", "RepackError", "UnitEvent", "RepackNoticeKind", "OrderList", "HEADER_LAYOUT",
    "length_table_layout", "message_beat_layout", "message_stream", "unit_config_layout",
    "UNIT_EVENT_LAYOUT", "ORDER_WRITE_LAYOUT", "START_LAYOUT", "REGISTRATION_LAYOUT",
    "NOTICE_LAYOUT", "buffer_bytes_needed", "table_beats", "RepackUnit", "RepackControl",
    "RepackEngine"]
