"""The repack units and their control tree (seed 003: the messages, layouts and codes in
:mod:`.formats`, the unit in :mod:`.unit` with its parts in the ``unit_*`` modules
(:mod:`.unit_slices`, :mod:`.unit_input`, :mod:`.unit_sequencer`, :mod:`.unit_columns`,
:mod:`.unit_output`, :mod:`.unit_events`, :mod:`.unit_arith`), the control tree in
:mod:`.control` with its parts in the ``control_*`` modules, both joined in :mod:`.array`)
and the hub that connects them to the node's packet network (:mod:`.hub`; :mod:`.block` the
hub with its registers).
"""

from .formats import (RANK_WIDTH, TAG_WIDTH, LENGTH_WIDTH, MAX_BLOCK_BYTES, MAX_RANKS, MAX_GROUP,
                      REPORT_SLACK, RepackError, UnitEvent, RepackNoticeKind, OrderList,
                      HEADER_LAYOUT, length_table_layout, message_beat_layout, message_stream,
                      unit_config_layout, UNIT_EVENT_LAYOUT, ORDER_WRITE_LAYOUT, START_LAYOUT,
                      REGISTRATION_LAYOUT, NOTICE_LAYOUT, buffer_bytes_needed, table_beats)
from .unit import RepackUnit
from .control import RepackControl
from .array import RepackArray

__all__ = ["RANK_WIDTH", "TAG_WIDTH", "LENGTH_WIDTH", "MAX_BLOCK_BYTES", "MAX_RANKS", "MAX_GROUP",
    "REPORT_SLACK", "RepackError", "UnitEvent", "RepackNoticeKind", "OrderList", "HEADER_LAYOUT",
    "length_table_layout", "message_beat_layout", "message_stream", "unit_config_layout",
    "UNIT_EVENT_LAYOUT", "ORDER_WRITE_LAYOUT", "START_LAYOUT", "REGISTRATION_LAYOUT",
    "NOTICE_LAYOUT", "buffer_bytes_needed", "table_beats", "RepackUnit", "RepackControl",
    "RepackArray"]
