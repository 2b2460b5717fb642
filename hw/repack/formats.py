# Ref: seed 003 (CN111614581, Mellanox): in-network data repack circuits for small all-to-all
#      and all-to-all-v.  The N×N block matrix is cut into dh×dv sub-matrices (fig. 8); a repack
#      unit takes one message from each source of a sub-matrix, regroups the blocks by
#      destination and sends one message to each destination (fig. 9); a control tree registers
#      the ranks, marks subgroups ready, pairs them, hands the pair to a free unit and reports
#      completion (steps 7.1-7.6).
# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
"""Repack messages, and the limits, layouts and codes the repack units and their control tree
share.

Message format
--------------
A *repack message* is a run of ``data_width``-bit beats on a :func:`message_stream`; the beat
with ``last`` set ends it.  Byte ``i`` of a beat is ``data`` bits ``8*i .. 8*i+7``.

1. **Header beat.**  :data:`HEADER_LAYOUT` in the low 48 bits (``rank``, ``tag``, ``count``),
   the rest of the beat zero.  ``rank`` is the sender's rank (a message into a unit) or the
   receiver's (a message out of a unit); ``tag`` names the sub-matrix; ``count`` is the number
   of blocks (dv into a unit, dh out of it).
2. **Length table.**  ``ceil(count / E)`` beats of :func:`length_table_layout` (``E =
   data_width // 16`` little-endian 16-bit byte lengths per beat): block ``k``'s length is entry
   ``k % E`` of table beat ``k // E``.  Entries past ``count`` are zero.  Lengths may be zero.
3. **Data.**  The blocks' bytes back to back, in table order, with no padding between blocks,
   starting on the beat after the table: ``ceil(sum(lengths) / (data_width // 8))`` beats.
   The final beat is partial; its unused bytes are zero.  A message whose blocks are all empty
   ends on its last table beat.

``keep`` marks the bytes that belong to the message, as on an AXI4-Stream port: all ones on
every beat except a partial final beat, where it marks that beat's low ``sum(lengths) % B``
bytes.  The unit checks it on its input (so a message one byte short of its table is caught)
and sets it on its output.  The ``rank`` field of every beat is the source rank into a unit (the
transport's sender; it must equal the header's) and the destination rank out of it (the
routing field).

:class:`~.unit.RepackUnit` (:mod:`.unit`) transposes one sub-matrix at a time;
:class:`~.control.RepackControl` (:mod:`.control`) is the control tree;
:class:`~.engine.RepackArray` (:mod:`.array`) joins a control tree and several units.
``docs/repack.md`` describes the protocol.
"""

from amaranth.hdl import Signal
from amaranth.lib import data, enum, stream

from ..net.packet import DEST_WIDTH
from ..params import check_data_width, is_int


__all__ = [
    "RANK_WIDTH", "TAG_WIDTH", "LENGTH_WIDTH", "MAX_BLOCK_BYTES", "MAX_RANKS", "MAX_GROUP",
    "REPORT_SLACK",
    "RepackError", "UnitEvent", "RepackNoticeKind", "OrderList",
    "HEADER_LAYOUT", "length_table_layout", "message_beat_layout", "message_stream",
    "unit_config_layout", "UNIT_EVENT_LAYOUT",
    "ORDER_WRITE_LAYOUT", "START_LAYOUT", "REGISTRATION_LAYOUT", "NOTICE_LAYOUT",
    "buffer_bytes_needed", "table_beats",
]


#: Width of every rank field: node ids are 16 bits throughout (the packet ``dest`` field).
RANK_WIDTH = DEST_WIDTH
#: Width of a sub-matrix tag.  The control tree tags sub-matrix (a, b) as ``a << 8 | b``.
TAG_WIDTH = 16
#: Width of one length-table entry: a block holds at most 65535 bytes.  Blocks that large are
#: far above the size where direct exchange wins (``docs/repack.md``).
LENGTH_WIDTH = 16
MAX_BLOCK_BYTES = (1 << LENGTH_WIDTH) - 1
#: Largest group the control tree handles: subgroup indices fit the 8-bit halves of a tag.
MAX_RANKS = 256
#: Largest subgroup a unit handles (the ``count`` field is 16 bits, comparators grow with it).
MAX_GROUP = 256
#: Cycles the control tree's watchdog waits beyond ``timeout``: more than a unit needs to
#: report its own TIMEOUT (fire, DONE into the event FIFO, out of it), so a unit's drop of
#: one sub-matrix reaches the tree before the tree gives up on the whole exchange.
REPORT_SLACK = 8


class RepackError(enum.Enum, shape=4):
    """Error codes of units and control tree (``status``, ``last_error``, DONE events)."""
    OK = 0
    #: A configuration out of range: dh or dv of 0 or above the unit's max_group, a timeout of
    #: 0, N of 0 or above max_ranks, rank lists that are not permutations of 0..N-1, a group
    #: larger than max_group, an order write past max_ranks.
    BAD_CONFIG = 1
    #: The sub-matrix's byte budget does not fit the unit's buffer: refused at configuration.
    CAPACITY = 2
    #: A wait ran out of its cycle budget (a missing rank or message).
    TIMEOUT = 3
    #: A message arrived while the unit collected no sub-matrix (dropped).
    STRAY = 4
    #: A message for another sub-matrix (dropped; the current one goes on).
    WRONG_TAG = 5
    #: A message from a rank not in S, or whose header and transport ranks differ (dropped).
    UNKNOWN_SOURCE = 6
    #: A second message from one source, or a second registration of one rank.
    DUPLICATE = 7
    #: A block addressed outside D: a block count other than dv, or a length past the count.
    OUTSIDE_D = 8
    #: A length table that disagrees with the message length (its beats or its ``keep``).
    LENGTH = 9
    #: The sub-matrix's messages hold more bytes than its configured budget.
    OVER_BUDGET = 10
    #: A registration from a rank outside the group (rank >= N).
    OUTSIDE_GROUP = 11


class UnitEvent(enum.Enum, shape=2):
    """What a unit reports to the control tree."""
    #: A source's message was taken whole and checked (``rank`` = the source).
    TAKEN = 0
    #: A destination took the last beat of its message (``rank`` = the destination).
    DELIVERED = 1
    #: The sub-matrix is finished (``code`` OK) or dropped, or a configuration was refused.
    DONE = 2


class RepackNoticeKind(enum.Enum, shape=2):
    """What the control tree tells a rank."""
    #: Send your blocks for destination group ``group`` to unit ``unit`` with tag ``tag``.
    SEND = 0
    #: Your message for destination group ``group`` was taken by the unit.
    TAKEN = 1
    #: Your blocks from source group ``group`` were delivered to you.
    DELIVERED = 2
    #: All your sends and receives are complete.
    DONE = 3


class OrderList(enum.Enum, shape=1):
    """Which rank list an order write goes to."""
    SRC = 0
    DST = 1


#: The header beat of a repack message (low bits of ``data``; the rest of the beat is zero).
HEADER_LAYOUT = data.StructLayout({
    "rank": RANK_WIDTH,
    "tag": TAG_WIDTH,
    "count": 16,
})


def _check_max_group(max_group):
    if not is_int(max_group):
        raise TypeError(f"Largest group must be an integer, not {max_group!r}")
    if not 1 <= max_group <= MAX_GROUP:
        raise ValueError(f"Largest group must be between 1 and {MAX_GROUP}, not {max_group!r}")


def _check_capacity(capacity_bytes, data_width):
    beat_bytes = data_width // 8
    if not is_int(capacity_bytes):
        raise TypeError(f"Buffer capacity must be an integer, not {capacity_bytes!r}")
    if capacity_bytes <= 0 or capacity_bytes % beat_bytes or capacity_bytes > 1 << 30:
        raise ValueError(f"Buffer capacity must be a positive multiple of {beat_bytes} bytes "
                         f"up to 2**30, not {capacity_bytes!r}")


def length_table_layout(data_width):
    """One beat of a length table: ``data_width // 16`` block lengths of 16 bits."""
    check_data_width(data_width)
    return data.ArrayLayout(LENGTH_WIDTH, data_width // LENGTH_WIDTH)


def table_beats(count, data_width):
    """Number of length-table beats of a message with ``count`` blocks."""
    per_beat = data_width // LENGTH_WIDTH
    return -(-count // per_beat)


def message_beat_layout(data_width):
    """Payload of one beat of a repack message stream."""
    check_data_width(data_width)
    return data.StructLayout({
        "data": data_width,
        "keep": data_width // 8,
        "last": 1,
        "rank": RANK_WIDTH,
    })


def message_stream(data_width):
    """Stream signature of repack messages (the sender's view)."""
    return stream.Signature(message_beat_layout(data_width))


def unit_config_layout(max_group):
    """One sub-matrix configuration of a :class:`RepackUnit` (its ``cfg`` stream payload).

    - ``tag``: the sub-matrix tag its messages carry;
    - ``dh``, ``dv``: the sizes of S and D (1 .. max_group);
    - ``src``, ``dst``: the ranks of S and D in block order; entries past dh / dv are unused;
    - ``total_bytes``: the byte budget, at least the sum of the sub-matrix's block lengths;
    - ``timeout``: cycles the unit waits for the next input beat before it drops the
      sub-matrix with TIMEOUT (at least 1).
    """
    _check_max_group(max_group)
    return data.StructLayout({
        "tag": TAG_WIDTH,
        "dh": 16,
        "dv": 16,
        "src": data.ArrayLayout(RANK_WIDTH, max_group),
        "dst": data.ArrayLayout(RANK_WIDTH, max_group),
        "total_bytes": 32,
        "timeout": 32,
    })


#: Payload of a unit's ``event`` stream.
UNIT_EVENT_LAYOUT = data.StructLayout({
    "kind": UnitEvent,
    "rank": RANK_WIDTH,
    "tag": TAG_WIDTH,
    "code": RepackError,
})


#: Payload of the control tree's ``order`` port: entry ``index`` of the SRC or DST rank list.
#: ``end`` marks the last rank of a subgroup (the entry at N-1 always ends one).
ORDER_WRITE_LAYOUT = data.StructLayout({
    "list": OrderList,
    "index": 16,
    "rank": RANK_WIDTH,
    "end": 1,
})

#: Payload of the control tree's ``start`` port: begins one all-to-all(-v) over ranks 0..n-1.
#: ``budget`` is the byte budget of every sub-matrix (the largest sub-matrix total);
#: ``timeout`` the cycle budget of every wait.
START_LAYOUT = data.StructLayout({
    "n": 16,
    "budget": 32,
    "timeout": 32,
})

#: Payload of the control tree's ``reg`` port: a rank has arrived.
REGISTRATION_LAYOUT = data.StructLayout({
    "rank": RANK_WIDTH,
})

#: Payload of the control tree's ``notice`` stream: what one rank is told.
NOTICE_LAYOUT = data.StructLayout({
    "kind": RepackNoticeKind,
    "rank": RANK_WIDTH,
    "unit": 8,
    "tag": TAG_WIDTH,
    "group": 16,
})


def buffer_bytes_needed(total_bytes, dh, data_width):
    """Buffer bytes a unit reserves for a sub-matrix of ``total_bytes`` from ``dh`` sources.

    Each source's data starts on a new buffer row, so up to ``data_width // 8 - 1`` bytes per
    source are lost to alignment; the unit learns each source's share only from its message, so
    it reserves the worst case.  A unit refuses (CAPACITY) a sub-matrix for which this exceeds
    its ``capacity_bytes``.
    """
    return total_bytes + dh * (data_width // 8 - 1)


def _priority(m, bits, name):
    """Index of the lowest set bit of ``bits`` (0 when none is set)."""
    index = Signal(range(max(2, len(bits))), name=name)
    for k in reversed(range(len(bits))):
        with m.If(bits[k]):
            m.d.comb += index.eq(k)
    return index
