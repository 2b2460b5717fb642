# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
# Ref: AMBA 4 AXI4-Stream Protocol Specification (IHI0051A), 2.1 (TDATA, TKEEP, TLAST: the
#      beat layout mirrors them).
"""Memory regions as packed byte streams: the layouts, the region checks and the helpers the
region units share.

A collective engine sends a *region* of a node's device memory over the network as one packed
byte stream and writes a received stream into a region of the same length, which may lie
quite differently in the receiver's memory.

Memory and lanes
----------------
Device memory rows are ``data_width`` bits, ``W = data_width // 8`` bytes.  Byte address
``a`` lives in row ``a // W``, byte lane ``a % W``; lane ``k`` is bits ``8*k .. 8*k+7`` of
the row.

Regions
-------
A region (:data:`REGION_LAYOUT`, all fields in bytes) is ``length`` bytes taken ``run``
bytes at a time: run ``k`` starts at ``offset + k*stride`` and the last run may be shorter.
``run == 0`` or ``run >= length`` means one contiguous run ``offset .. offset+length``.
Strided regions need ``stride >= run`` (runs in ascending, non-overlapping order); the
engine checks this before it issues a command, the units here do not.  Addresses wrap at
``2**addr_width``.  A region with ``length == 0`` is empty: its command is accepted and
produces nothing.

Three units
-----------
:class:`~.walker.RegionWalker` (:mod:`.walker`) cuts a region into *chunks*
(:func:`chunk_layout`).  :class:`~.packer.RowPacker` (:mod:`.packer`, transmit side) packs the
rows a memory read returns for those chunks (:func:`read_row_layout`) into beats
(:func:`beat_layout`).  :class:`~.unpacker.RowUnpacker` (:mod:`.unpacker`, receive side) turns
the beats back into row writes (:func:`write_row_layout`) for the chunks of the receiving
region.

Each unit moves one item per clock on every stream, takes backpressure on every stream, and
drives ``valid`` of its outputs from flops only.  The packer and the unpacker also drive the
``ready`` of their inputs from flops, and realign bytes with a ``W``-byte rotator in two
registered halves whose amount is always a register: the arithmetic that picks the amount,
the lane masks and what an item does is done a stage ahead, into one control word per item.
"""

from amaranth.hdl import Cat, Const, Mux, Signal, Value
from amaranth.lib import data

from ..params import check_data_width, is_int


__all__ = [
    "REGION_LAYOUT",
    "region_checks_layout", "walker_command_layout", "region_checks",
    "chunk_layout", "read_row_layout", "beat_layout", "write_row_layout",
    "at_most", "low_mask_count",
]


#: The row widths the units support, in bits.

#: One region: ``length`` bytes, ``run`` bytes at a time, run ``k`` at ``offset + k*stride``.
REGION_LAYOUT = data.StructLayout({
    "offset": 32,
    "length": 32,
    "run": 32,
    "stride": 32,
})


def region_checks_layout(data_width):
    """What a region's first chunk needs, worked out before :class:`RegionWalker` takes the
    region (no 32-bit compare or subtraction in the cycle it does): see
    :func:`region_checks`."""
    lane_bits = _lane_bits(data_width)
    return data.StructLayout({
        "empty": 1,                     # length == 0
        "whole": 1,                     # one run (run == 0 or run >= length)
        "rest": 32,                     # length - run: bytes after the first run
        "rest_short": 1,                # length - run < run: the second run is the last
        "rest_is_run": 1,               # length - run == run: the second run ends the region
        "first_room": lane_bits + 1,    # lanes from offset to the end of its row
        "first_fits": 1,                # the first run ends in its first row
        "second_low": lane_bits,        # low bits of the second run's start
    })


def walker_command_layout(data_width):
    """A region with its checks (:func:`region_checks`), as a :class:`RegionWalker` built
    with ``checked=True`` takes it and as its input slice holds it in any case."""
    return data.StructLayout({
        "region": REGION_LAYOUT,
        "checks": region_checks_layout(data_width),
    })


def region_checks(target, region, data_width):
    """Statements that set ``target`` (a :func:`region_checks_layout` value) to the checks of
    ``region`` (a :data:`REGION_LAYOUT` value): the one place they are worked out, by the
    walker's input or, for a walker built with ``checked=True``, by its user a cycle or more
    ahead."""
    check_data_width(data_width)
    lanes = data_width // 8
    lane_bits = _lane_bits(data_width)
    first_room = (lanes - region.offset[:lane_bits])[:lane_bits + 1]
    return [
        target.empty.eq(region.length == 0),
        target.whole.eq((region.run == 0) | (region.run >= region.length)),
        target.rest.eq(region.length - region.run),
        # The second run is short when length - run < run.
        target.rest_short.eq(region.length < Cat(Const(0, 1), region.run)),
        target.rest_is_run.eq(region.length == Cat(Const(0, 1), region.run)),
        target.first_room.eq(first_room),
        # The first run is min(length, run) bytes (length when run is 0), so it fits when
        # either length or a non-zero run is at most the room: if length fits, so does any
        # shorter run.  No 32-bit compare (`whole`, run >= length) is in this path; it was
        # the 256-bit core's critical path at seed 1 of 9e320c7 (8.04 ns).
        target.first_fits.eq(at_most(region.length, first_room)
                             | (region.run.any() & at_most(region.run, first_room))),
        target.second_low.eq(region.offset[:lane_bits] + region.stride[:lane_bits]),
    ]


def _lane_bits(data_width):
    return (data_width // 8).bit_length() - 1


def _check_addr_width(addr_width, data_width):
    if not is_int(addr_width):
        raise TypeError(f"Address width must be an integer, not {addr_width!r}")
    lowest = _lane_bits(data_width) + 1
    if not lowest <= addr_width <= 64:
        raise ValueError(f"Address width must be between {lowest} and 64 for a data width of "
                         f"{data_width}, not {addr_width!r}")


def _check_row_bits(row_bits):
    if not is_int(row_bits):
        raise TypeError(f"Row address width must be an integer, not {row_bits!r}")
    if not 1 <= row_bits <= 64:
        raise ValueError(f"Row address width must be between 1 and 64, not {row_bits!r}")


def chunk_layout(data_width, row_bits):
    """One chunk: lanes ``lo .. lo+n-1`` of memory row ``row`` (``1 <= n``, ``lo + n <= W``).

    ``last`` is set on the final chunk of a region.  ``lo`` has ``log2(W)`` bits, ``n`` one
    more so that it holds ``W``.
    """
    check_data_width(data_width)
    _check_row_bits(row_bits)
    lane_bits = _lane_bits(data_width)
    return data.StructLayout({
        "row": row_bits,
        "lo": lane_bits,
        "n": lane_bits + 1,
        "last": 1,
    })


def read_row_layout(data_width):
    """A memory row going to :class:`RowPacker`: lanes ``lo .. lo+n-1`` of ``data`` are the
    bytes to send (the other lanes are ignored); ``last`` ends the message."""
    check_data_width(data_width)
    lane_bits = _lane_bits(data_width)
    return data.StructLayout({
        "data": data_width,
        "lo": lane_bits,
        "n": lane_bits + 1,
        "last": 1,
    })


def beat_layout(data_width):
    """One beat of a packed byte stream: ``keep`` has a bit per lane of ``data``."""
    check_data_width(data_width)
    return data.StructLayout({
        "data": data_width,
        "keep": data_width // 8,
        "last": 1,
    })


def write_row_layout(data_width, row_bits):
    """A row write from :class:`RowUnpacker`: the lanes of ``data`` whose ``mask`` bit is set
    go to memory row ``row``; ``last`` is the ``last`` of the chunk it came from."""
    check_data_width(data_width)
    _check_row_bits(row_bits)
    return data.StructLayout({
        "row": row_bits,
        "data": data_width,
        "mask": data_width // 8,
        "last": 1,
    })


def _byte_mask_bits(byte_mask):
    """Widen a mask with a bit per byte to a mask with a bit per data bit."""
    return Cat(*(bit.replicate(8) for bit in byte_mask))


def _lanes_below(count, lanes):
    """A ``lanes``-bit mask with bit ``j`` set for every ``j < count`` (all set when
    ``count >= lanes``): a thermometer decode, no shifter and no carry chain.

    Built a bit of ``count`` at a time from the top: ``count > j`` is ``t | below[j]`` for
    ``j`` in the lower half of the positions and ``t & below[j - half]`` in the upper half,
    ``t`` the top bit and ``below`` the decode of the bits under it, so each mask bit is a
    function of ``count``'s bits alone, for the LUT mapper to pack.  Written as one
    compare per bit (``count > j``), yosys made each a carry chain: the 256-bit engine's
    packer decode, the first rotator stage's masks, 5.03-5.57 ns at every seed of 5a1ddfb
    (the plan's fill level -> two CCU2C -> four LUTs)."""
    count = Value.cast(count)
    bits = max(1, (lanes - 1).bit_length())     # 2**bits >= lanes
    thermometer = [Const(0, 1)]                 # of no bits: the value 0 is above nothing
    for b in range(min(bits, len(count))):
        top = count[b]
        thermometer = ([top | t for t in thermometer] + [top & t for t in thermometer])
    thermometer += [Const(0, 1)] * max(0, lanes - len(thermometer))
    mask = Cat(*thermometer[:lanes])
    if len(count) > bits:                       # at least 2**bits: every lane
        mask = Mux(count[bits:].any(), (1 << lanes) - 1, mask)
    return mask


def _rotate_lanes(value, amount, step):
    """``value`` rotated down by ``amount * step`` byte lanes: lane ``j`` of the result is lane
    ``(j + amount*step) mod W`` of ``value``.

    A logarithmic rotator, one 2:1 multiplexer per bit of ``amount`` and per data bit.  A
    rotation of ``W`` bytes instead of a shift of ``2W`` bytes, and ``amount`` always comes
    from a register: the callers split a rotation in two, each half ending in a register.
    """
    for b in range(len(amount)):
        value = Mux(amount[b], value.rotate_right(8 * (step << b)), value)
    return value


def _rotation_stages(lane_bits):
    """The bits of a rotation amount each registered rotator stage takes, as ``(lo, hi)``.

    The first stage takes up to three bits (an 8:1 choice per bit, four LUT4 with the ECP5
    wide-function multiplexers), every further stage one bit (a 2:1 choice, one LUT4).  A
    stage of two bits would cost as much as one of three (abc9 maps a 4:1 choice to a LUT6),
    and one merged with a mask or a merge more again, so the narrow stages end in registers
    of their own: flip-flops are cheaper than look-up tables here.  The unpacker alone
    joins its last two (:meth:`RowUnpacker.elaborate`), where a 2:1 stage merged with the
    lane mask and its output slice's choice was the late one."""
    first = min(3, lane_bits)
    return [(0, first)] + [(b, b + 1) for b in range(first, lane_bits)]


def _rotation_pipeline(m, advance, value, control, stages, refine=None):
    """``value`` through one register stage per entry of ``stages``, stage ``(lo, hi)``
    rotating it by bits ``lo .. hi-1`` of ``control.rot``; ``control`` (a view whose layout
    has ``rot``) travels alongside.  Every stage moves when ``advance`` is high.  Returns the
    last stage's (data, control).  ``refine``, if given, maps the first stage's registered
    control to what travels on (a decode split over two register stages)."""
    for k, (lo, hi) in enumerate(stages):
        data_reg = Signal(len(value), name=f"rotate{k}_data", reset_less=True)
        control_reg = Signal(control.shape(), name=f"rotate{k}_control")
        with m.If(advance):
            m.d.sync += [data_reg.eq(_rotate_lanes(value, control.rot[lo:hi], 1 << lo)),
                         control_reg.eq(control)]
        value, control = data_reg, control_reg
        if k == 0 and refine is not None:
            control = refine(control)
    return value, control


def at_most(value, small):
    """``value <= small`` for a wide unsigned ``value`` and a narrow ``small``: the high bits
    of ``value`` tested for zero beside a compare as narrow as ``small``, so no carry chain
    runs the width of ``value``."""
    bits = len(small)
    if len(value) <= bits:
        return value <= small
    return (value[bits:] == 0) & (value[:bits] <= small)


def low_mask_count(mask):
    """The number of set bits of a low mask (bits ``0 .. c-1`` set), from where its ones
    end: bit ``b`` of the count is an OR of two-input terms, no adder tree."""
    width = len(mask)
    # at_least(k): the count is at least k.
    def at_least(k):
        return mask[k - 1] if k <= width else Const(0, 1)
    bits = []
    for b in range(width.bit_length()):
        # The count has bit b set when it lies in [k, k + 2**b) for some k with bit b set.
        terms = [at_least(k) & ~at_least(k + (1 << b))
                 for k in range(1 << b, width + 1, 1 << (b + 1))]
        bits.append(_or_all(terms))
    return Cat(*bits)


def _or_all(terms):
    result = terms[0]
    for term in terms[1:]:
        result = result | term
    return result
