# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
# Ref: AMBA 4 AXI4-Stream Protocol Specification (IHI0051A), 2.1 (TDATA, TKEEP, TLAST: the
#      beat layout mirrors them).
"""Memory regions as packed byte streams.

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
:class:`RegionWalker` cuts a region into *chunks* (:func:`chunk_layout`): one per (run, row)
pair, in stream order, each naming a row and the lanes ``lo .. lo+n-1`` of it that hold the
next ``n`` bytes of the stream.

:class:`RowPacker` (transmit side) takes the rows a memory read returns for those chunks
(:func:`read_row_layout`) and packs their bytes into beats (:func:`beat_layout`): byte ``i``
of a message in beat ``i // W``, lane ``i % W``.  Every beat but the message's final one is
full; the final one has ``keep`` set for its low ``len % W`` (or ``W``) lanes and ``last``
set; lanes whose ``keep`` is clear carry zeros.  The next message starts in a new beat.

:class:`RowUnpacker` (receive side) does the reverse: for every chunk of the receiving region
it takes the next ``n`` bytes of the beat stream and gives a row write
(:func:`write_row_layout`) with the bytes at lanes ``lo .. lo+n-1`` and ``mask`` set for
exactly those lanes.  It checks that a message's bytes and its chunks agree in number (see
the class for what it does when they do not).

Each unit moves one item per clock on every stream, takes backpressure on every stream, and
drives ``valid`` of its outputs from flops only.  The packer and the unpacker also drive the
``ready`` of their inputs from flops, and realign bytes with a ``W``-byte rotator in two
registered halves whose amount is always a register: the arithmetic that picks the amount,
the lane masks and what an item does is done a stage ahead, into one control word per item.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..params import check_data_width, is_int
from ..lib.skid import CheckedRing, SkidBuffer


__all__ = [
    "REGION_LAYOUT",
    "region_checks_layout", "walker_command_layout", "region_checks",
    "chunk_layout", "read_row_layout", "beat_layout", "write_row_layout",
    "RegionWalker", "RowPacker", "RowUnpacker", "at_most",
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


class RegionWalker(wiring.Component):
    """Cuts each region of ``command`` into chunks on ``chunks``.

    Parameters
    ----------
    data_width : int
        Bits per memory row, one of :data:`nicoll.hw.params.DATA_WIDTHS`.
    addr_width : int
        Bits of a byte address; chunks carry ``addr_width - log2(W)`` bits of row address.
    checked : bool
        Take each region with its checks already made (:func:`walker_command_layout`, set
        by :func:`region_checks` from the same region), so that the walker's input slice
        loads registers and the compares and subtractions sit wherever the user has a
        cycle for them.  False: the checks are made as a region enters the input slice.
    length_bits : int
        Bits of the walker's byte counts (the current run's bytes left, the region's bytes
        after it, the run), 1 to 32: every region's ``length``, and a strided region's
        ``run``, must be below ``2**length_bits`` (a user whose regions lie in a memory of
        ``M`` bytes passes ``M.bit_length()``).  Fewer bits make shorter carry chains in
        the cycle a chunk is taken; addresses keep ``addr_width`` bits either way.

    Members
    -------
    command : ``In(stream.Signature(REGION_LAYOUT))``, or with ``checked``
              ``In(stream.Signature(walker_command_layout(data_width)))``
        Regions to walk.  A strided region must have ``stride >= run`` (the engine checks
        this).  An empty region (``length == 0``) is accepted and gives no chunks.
    chunks : ``Out(stream.Signature(chunk_layout(data_width, addr_width - log2(W))))``
        One chunk per (run, row) pair in ascending stream order; ``last`` on the region's
        final chunk.
    busy : ``Out(1)``
        A region was taken and not all its chunks have been taken yet.

    One chunk per clock while ``chunks.ready`` is high.  Commands enter an input slice
    (:class:`~nicoll.hw.lib.skid.SkidBuffer`, read through its multiplexer) that also holds the
    checks of the region's first chunk, so ``command.ready`` is a flop and no 32-bit compare
    or subtraction is in the cycle a region starts.  The walker takes the next region from
    the slice in the cycle the previous region's last chunk is taken, so regions follow each
    other without a gap (an empty region costs one cycle); that take loads only the chunk's
    own registers and the slice's pointers, the rest follow the waiting command while the
    last chunk is offered.  ``chunks.valid`` comes from a flop.  A region's first
    chunk is offered two cycles after its command is accepted into an empty slice.
    ``busy`` does not count a region still waiting in the slice.  Addresses advance by
    additions only: no multiplier, no divider.
    """

    def __init__(self, data_width, addr_width=32, *, checked=False, length_bits=32):
        check_data_width(data_width)
        _check_addr_width(addr_width, data_width)
        if not isinstance(checked, bool):
            self._MustUse__silence = True       # never built: no "unused" warning
            raise TypeError(f"checked must be a bool, not {checked!r}")
        if not is_int(length_bits):
            self._MustUse__silence = True       # never built: no "unused" warning
            raise TypeError(f"length_bits must be an integer, not {length_bits!r}")
        if not 1 <= length_bits <= 32:
            self._MustUse__silence = True
            raise ValueError(f"length_bits must be from 1 to 32, not {length_bits!r}")
        self._length_bits = length_bits
        self._data_width = data_width
        self._addr_width = addr_width
        self._checked = checked
        self._row_bits = addr_width - _lane_bits(data_width)
        command = walker_command_layout(data_width) if checked else REGION_LAYOUT
        super().__init__({
            "command": In(stream.Signature(command)),
            "chunks": Out(stream.Signature(chunk_layout(data_width, self._row_bits))),
            "busy": Out(1),
        })

    @property
    def data_width(self):
        return self._data_width

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def row_bits(self):
        return self._row_bits

    @property
    def length_bits(self):
        return self._length_bits

    def elaborate(self, platform):
        m = Module()
        lanes = self._data_width // 8
        lane_bits = _lane_bits(self._data_width)
        # The slice's entries stay in place behind a read pointer: the take's decision
        # (`taken.ready`) loads its pointers, not the enables of two entries' flops.
        m.submodules.command_in = command_in = SkidBuffer(
            walker_command_layout(self._data_width), mux_output=True)
        self._check_command(m, command_in.i)
        taken = command_in.o              # the command the walker takes next
        checked = taken.payload
        command = checked.region
        chunk = self.chunks.payload

        cursor = Signal(self._addr_width)     # address of the next byte of the stream
        run_start = Signal(self._addr_width)  # where the current run began
        stride = Signal(32)
        run = Signal(self._length_bits)
        run_left = Signal(self._length_bits)  # bytes of the current run not yet in a chunk
        rest = Signal(self._length_bits)      # bytes of the region after the current run

        # Flops computed a cycle ahead, for the values the others take at the same edge, so
        # a chunk and the decision on it read registers only (no subtraction feeding a
        # compare feeding the next values).
        room = Signal(range(lanes + 1))       # lanes from the cursor to the end of its row
        fits = Signal()                       # run_left <= room: the run ends in this row
        rest_zero = Signal()                  # rest == 0: the run is the region's last
        # rest == run, kept a run ahead (as rest_short is): the next rest_zero is a flop, not
        # a compare behind the chunk's take (the 256-bit engine's latest pin at seed 1 of
        # 5a1ddfb: fits -> the take -> the compare's chain -> rest_zero, 5.95 ns).
        rest_is_run = Signal()
        # And for the next run: the low bits of its start, its room in its first row, and
        # whether it is short (rest < run: the region ends inside it).
        ahead_low = Signal(lane_bits)
        next_room = Signal(range(lanes + 1))
        rest_short = Signal()

        def room_at(address):
            # Lanes from `address` to the end of its row: a subtraction of lane_bits bits.
            return lanes - address[:lane_bits]

        m.d.comb += [
            self.chunks.valid.eq(self.busy),
            chunk.row.eq(cursor[lane_bits:]),
            chunk.lo.eq(cursor[:lane_bits]),
            chunk.n.eq(Mux(fits, run_left, room)),
            chunk.last.eq(fits & rest_zero),
        ]

        with m.If(self.chunks.valid & self.chunks.ready):
            with m.If(~fits):
                # On to the next row, whose room is a whole row.
                m.d.sync += [cursor.eq(cursor + room), run_left.eq(run_left - room),
                             room.eq(lanes)]
            with m.Elif(~rest_zero):
                next_start = (run_start + stride)[:self._addr_width]
                # Only the low bits of a run's start set its room: they are kept a run
                # ahead, so the room and the compares below read flops.
                following = (ahead_low + stride[:lane_bits])[:lane_bits]
                m.d.sync += [run_start.eq(next_start), cursor.eq(next_start),
                             room.eq(next_room), ahead_low.eq(following),
                             next_room.eq(room_at(following))]
                with m.If(rest_short):
                    m.d.sync += [run_left.eq(rest), rest.eq(0), rest_zero.eq(1)]
                with m.Else():
                    # rest - run < run, for the run after this one, is rest < 2 * run.
                    m.d.sync += [run_left.eq(run), rest.eq(rest - run),
                                 rest_zero.eq(rest_is_run),
                                 rest_short.eq(rest < Cat(Const(0, 1), run)),
                                 rest_is_run.eq(rest == Cat(Const(0, 1), run))]
            with m.Else():
                m.d.sync += self.busy.eq(0)

        # The registers only a run step reads (where the next run starts and what is left
        # after it) are not read while the region's last chunk is offered, nor while the
        # walker is idle: they follow the command waiting in the input slice then, with an
        # enable of three flops, and hold the next region's values when it is taken.  Only
        # the chunk's own registers load on the take: as one enable of all of them, the
        # take's decision drove some 155 flops, and its routes were most of the 64-bit
        # engine's latest paths (rx_walker fits -> the decision -> fits, 6.36 ns, 5.1 of it
        # routing, at seed 1 once the walkers counted in mem_size bits).
        with m.If(~self.busy | chunk.last):
            m.d.sync += [
                run_start.eq(command.offset),
                stride.eq(command.stride),
                run.eq(command.run),
                ahead_low.eq(checked.checks.second_low),
                next_room.eq(room_at(checked.checks.second_low)),
                rest_short.eq(checked.checks.rest_short),
                rest_is_run.eq(checked.checks.rest_is_run),
                rest.eq(Mux(checked.checks.whole, 0, checked.checks.rest)),
            ]
        # Taking the next command as the last chunk goes keeps back-to-back regions gapless;
        # these assignments come after the ones above and so win over them.
        m.d.comb += taken.ready.eq(~self.busy | (self.chunks.ready & chunk.last))
        with m.If(taken.valid & taken.ready):
            m.d.sync += [cursor.eq(command.offset), room.eq(checked.checks.first_room)]
            with m.If(checked.checks.empty):
                m.d.sync += self.busy.eq(0)
            with m.Elif(checked.checks.whole):
                m.d.sync += [self.busy.eq(1), run_left.eq(command.length), rest_zero.eq(1)]
            with m.Else():
                m.d.sync += [self.busy.eq(1), run_left.eq(command.run), rest_zero.eq(0)]
        # What the tests hold equal every cycle: the flag kept a run ahead and its compare,
        # wherever a run step may read it.
        stepping = self.busy & ~rest_zero & ~rest_short
        self.mirrors = [(Mux(stepping, rest_is_run, 0), Mux(stepping, rest == run, 0))]
        self._fits_next(m, fits, taken=taken, run_left=run_left, room=room, rest=rest,
                        run=run, next_room=next_room, rest_short=rest_short,
                        rest_zero=rest_zero)
        return m

    def _check_command(self, m, entry):
        """The input slice's entry: the command with its first chunk's checks (made here,
        or with ``checked`` by the user)."""
        m.d.comb += [entry.valid.eq(self.command.valid), self.command.ready.eq(entry.ready)]
        if self._checked:
            m.d.comb += entry.payload.eq(self.command.payload)
        else:
            m.d.comb += entry.payload.region.eq(self.command.payload)
            m.d.comb += region_checks(entry.payload.checks, self.command.payload,
                                      self._data_width)

    def _fits_next(self, m, fits, *, taken, run_left, room, rest, run, next_room,
                   rest_short, rest_zero):
        """``fits`` for the next chunk: one compare per case, each of registers, and the
        case chosen by AND and OR.  Written as a multiplexer, yosys would merge compares
        that share an operand and put the choice in front of one compare, which puts the
        handshake before a carry chain."""
        cases = {}
        # room + lanes, for a room of 0 to lanes, is wiring: the room's low bits, then 1 below
        # lanes or 2 at lanes (as an adder, a carry chain ahead of the compare's).
        lane_bits = _lane_bits(self._data_width)
        room_and_row = Cat(room[:lane_bits], ~room[lane_bits], room[lane_bits])
        for name, value, small in (("row", run_left, room_and_row), ("rest", rest, next_room),
                                   ("run", run, next_room)):
            cases[name] = Signal(name=f"fits_if_{name}")
            m.d.comb += cases[name].eq(at_most(value, small))
        take = self.chunks.valid & self.chunks.ready
        on_row = take & ~fits
        on_run = take & fits & ~rest_zero
        loads = taken.valid & taken.ready & ~taken.payload.checks.empty
        m.d.sync += fits.eq(
            (loads & taken.payload.checks.first_fits)
            | (~loads & ((on_row & cases["row"]) | (on_run & rest_short & cases["rest"])
                         | (on_run & ~rest_short & cases["run"]) | (~on_row & ~on_run & fits))))


def _packer_plan_layout(data_width):
    """A row (or a flush) of :class:`RowPacker` with its plan, as its skid buffer holds it.

    ``fill`` is the number of bytes of the beat being built before this row, ``end`` that
    number after it (up to ``2W - 1``); the row's bytes go to lanes ``fill .. end-1`` of the
    beat and, past ``W``, to lanes ``0 .. end-W-1`` of the next one.  ``rot`` brings lane
    ``lo`` of the row to lane ``fill``.  ``emit``: a beat leaves with this item; ``final``:
    that beat is the message's last.  A flush (the final beat of a message whose last row
    spilled over) has ``fill == end``, so it adds no bytes and sends what is held."""
    lane_bits = _lane_bits(data_width)
    return data.StructLayout({
        "data": data_width,
        "rot": lane_bits,
        "fill": lane_bits,
        "end": lane_bits + 1,
        "emit": 1,
        "final": 1,
    })


def _packer_control_layout(data_width):
    """What travels with a row of :class:`RowPacker` through its rotator stages: the
    rotation, and the lane masks of the merge decoded from the plan's fill levels.

    ``cur``: lanes of the rotated row that join the beat being built; ``take``: lanes that
    the holding register keeps afterwards (the spill-over when a beat leaves, else ``cur``);
    ``keep``: the ``keep`` of the beat that leaves.  A bubble has ``valid``, ``emit``,
    ``cur`` and ``take`` clear, so the merge stage needs no enable of its own.

    The first rotator stage registers the thermometer decodes of the plan's fill levels
    (``below``: lanes under the fill level, all set for a bubble; ``spill``: the lanes a
    leaving beat's row leaves behind); ``cur`` and ``take`` are one LUT from those, formed
    after that register (:meth:`RowPacker._masks`)."""
    lanes = data_width // 8
    return data.StructLayout({
        "valid": 1,
        "rot": _lane_bits(data_width),
        "cur": lanes,
        "take": lanes,
        "keep": lanes,
        "below": lanes,
        "spill": lanes,
        "emit": 1,
        "final": 1,
    })


class RowPacker(wiring.Component):
    """Packs the chunk bytes of memory rows into full beats (transmit side).

    Members
    -------
    rows : ``In(stream.Signature(read_row_layout(data_width)))``
        Rows whose lanes ``lo .. lo+n-1`` are the next ``n`` bytes of the message
        (``1 <= n``, ``lo + n <= W``); ``last`` on the message's final row.
    beats : ``Out(stream.Signature(beat_layout(data_width)))``
        The message packed from lane 0: full beats, then a final beat with ``keep`` set for
        its low ``len % W`` (or ``W``) lanes and ``last`` set.  Lanes with ``keep`` clear are
        zero.  The next message begins in a new beat.

    Register stages in the shape of a realigning DMA engine: the offset is a register,
    never computed in the cycle that shifts data.

    1. *Plan*, as a row is taken: from the fill level of the beat being built and the row's
       ``lo`` and ``n``, the rotation that brings lane ``lo`` to the fill level, the new
       fill level, whether a beat leaves and whether it is the message's last.  The row and
       its plan go into a :class:`~nicoll.hw.lib.skid.SkidBuffer`, so ``rows.ready`` is a flop.
    2. *Rotate*, ``W`` bytes around, by the planned amount in registered stages: the low
       three bits first, then one bit per stage (one stage at 64 bits, two at 128, three at
       256, four at 512).  The first stage also decodes the plan's fill levels into lane
       masks, which travel along.
    3. *Merge* into a ``W``-byte holding register: a leaving beat is the holding register
       with the row's first lanes ORed in; what spills past it stays in the holding
       register.

    One row in and one beat out per clock at any alignment.  A beat is offered ``2 + s``
    cycles after the row that completes it is taken, ``s`` the number of rotator stages;
    ``beats.valid`` and the beat come from flops.  ``rows.ready`` comes from flops (it does
    not depend on ``beats.ready`` in the same cycle).  When a message's last row leaves
    more than ``W`` bytes to send, its final beat takes a cycle of its own, in which no row
    is taken.
    """

    def __init__(self, data_width):
        check_data_width(data_width)
        self._data_width = data_width
        super().__init__({
            "rows": In(stream.Signature(read_row_layout(data_width))),
            "beats": Out(stream.Signature(beat_layout(data_width))),
        })

    @property
    def data_width(self):
        return self._data_width

    def elaborate(self, platform):
        m = Module()
        lane_bits = _lane_bits(self._data_width)
        m.submodules.planned = planned = SkidBuffer(_packer_plan_layout(self._data_width))
        self._plan(m, planned.i)
        # Every stage moves when the output register is free: one stall signal, from flops
        # and beats.ready only.
        advance = ~self.beats.valid | self.beats.ready
        m.d.comb += planned.o.ready.eq(advance)
        control = Signal(_packer_control_layout(self._data_width))
        self._decode(m, planned.o, control)
        rotated, control = _rotation_pipeline(m, advance, planned.o.payload.data, control,
                                              _rotation_stages(lane_bits),
                                              refine=lambda c: self._masks(m, c))
        # The output payload has no reset (its valid has): no load on the clear net.
        beat = Signal(self.beats.payload.shape(), reset_less=True)
        m.d.comb += self.beats.payload.eq(beat)
        with m.If(advance):
            self._merge(m, rotated, control, beat)
        return m

    def _plan(self, m, planned):
        """Stage 1: the per-row arithmetic, on narrow fields only, into the skid buffer."""
        lanes = self._data_width // 8
        lane_bits = _lane_bits(self._data_width)
        row = self.rows.payload
        plan = planned.payload

        fill = Signal(lane_bits)      # bytes of the message in the beat being built
        flush = Signal()              # a last row spilled: its final beat goes next, alone
        end = Signal(lane_bits + 1)
        m.d.comb += [
            end.eq(fill + row.n),
            planned.valid.eq(self.rows.valid | flush),
            self.rows.ready.eq(planned.ready & ~flush),
            plan.data.eq(row.data),
            plan.fill.eq(fill),
        ]
        with m.If(flush):
            m.d.comb += [plan.end.eq(fill), plan.emit.eq(1), plan.final.eq(1)]
        with m.Else():
            m.d.comb += [
                plan.rot.eq(row.lo - fill),
                plan.end.eq(end),
                plan.emit.eq(end[lane_bits] | row.last),
                plan.final.eq(row.last & (end <= lanes)),
            ]
        with m.If(planned.valid & planned.ready):
            with m.If(flush):
                m.d.sync += [fill.eq(0), flush.eq(0)]
            with m.Elif(row.last):
                spills = end > lanes
                m.d.sync += [fill.eq(Mux(spills, end[:lane_bits], 0)), flush.eq(spills)]
            with m.Else():
                m.d.sync += fill.eq(end[:lane_bits])

    def _decode(self, m, planned, control):
        """The plan's fill levels as thermometer masks, into the first rotator stage with the
        row."""
        lanes = self._data_width // 8
        lane_bits = _lane_bits(self._data_width)
        plan = planned.payload
        m.d.comb += [
            control.valid.eq(planned.valid),
            control.rot.eq(plan.rot),
            control.keep.eq(_lanes_below(plan.end, lanes)),
            control.final.eq(plan.final),
            control.below.eq(~0),
        ]
        with m.If(planned.valid):
            m.d.comb += [
                control.below.eq(_lanes_below(plan.fill, lanes)),
                control.emit.eq(plan.emit),
            ]
            with m.If(plan.emit & plan.end[lane_bits]):
                m.d.comb += control.spill.eq(_lanes_below(plan.end[:lane_bits], lanes))

    def _masks(self, m, first):
        """The merge's lane masks from the first stage's thermometers: one LUT each."""
        control = Signal.like(first, name="masks_control")
        cur = first.keep & ~first.below
        m.d.comb += [
            control.eq(first),
            control.cur.eq(cur),
            control.take.eq(Mux(first.emit, first.spill, cur)),
        ]
        return control

    def _merge(self, m, rotated, control, beat):
        """Last stage: merge the rotated row into the holding register, send a beat (into
        ``beat``, the register behind ``beats.payload``)."""
        # Bytes of the beat being built, at their final lanes; lanes at and above the fill
        # level are zero, so merging is an OR and a leaving beat has zeros past its keep.
        hold = Signal(self._data_width)
        m.d.sync += [
            hold.eq(Mux(control.emit, 0, hold) | (rotated & _byte_mask_bits(control.take))),
            self.beats.valid.eq(control.valid & control.emit),
            # Loaded every cycle the stage moves: without a beat, valid is low anyway.
            beat.data.eq(hold | (rotated & _byte_mask_bits(control.cur))),
            beat.keep.eq(control.keep),
            beat.last.eq(control.final),
        ]


#: Beat slots of :class:`RowUnpacker`: a chunk may need the two oldest while the beats after
#: them arrive, and a slot is refilled the cycle after it is freed.
_UNPACKER_SLOTS = 4


def _unpacker_control_layout(data_width, row_bits):
    """What travels with a row of :class:`RowUnpacker` from its plan: ``rot`` brings the
    chunk's bytes, picked in stream order from lane ``(lo + rot) mod W``, to lanes
    ``lo .. lo+n-1``; ``mask`` is those lanes.  The plan takes a chunk on the presence of
    its beats alone; whether the message's last beat holds all of its bytes travels
    alongside as compares made from registers (``short``, ``extra``), and the stage after
    the plan turns them into the row's fate (see :meth:`RowUnpacker._judge`)."""
    return data.StructLayout({
        "valid": 1,
        "rot": _lane_bits(data_width),
        "mask": data_width // 8,
        "row": row_bits,
        "last": 1,
        # The chunk needs bytes the message does not have: it runs on past the message's
        # last beat, or ends in it beyond its byte count.
        "short": 1,
        # The chunk ends in the message's last beat short of its byte count.
        "extra": 1,
        # The chunk ends in the message's last beat at its top lane: a chunk after it (in
        # the same message) starts past the message's bytes, at lane 0 of no beat.
        "spends": 1,
    })


def _placed_chunk_layout(data_width, row_bits):
    """A chunk of :class:`RowUnpacker` with its place in the message worked out on the way
    into the chunk buffer, so that the plan compares nothing wider than a beat's byte count:

    - ``rot``: the rotation of the row, ``(position - lo) mod W``, ``position`` the
      message's byte offset of the chunk's first byte, modulo ``W``;
    - ``mask``: lanes ``lo .. lo+n-1``;
    - ``below``: lanes below ``position``, whose bytes come from the beat after the one the
      chunk starts in;
    - ``cross``: the chunk runs on into that next beat (``position + n > W``);
    - ``tail``: where the chunk ends in the beat it ends in, ``1 .. W``.
    """
    lanes = data_width // 8
    return data.StructLayout({
        "row": row_bits,
        "last": 1,
        "rot": _lane_bits(data_width),
        "mask": lanes,
        "below": lanes,
        "tail": _lane_bits(data_width) + 1,
        "cross": 1,
    })


class _UnpackerState:
    """The registers the parts of :class:`RowUnpacker` share (a namespace, no logic)."""

    def __init__(self, width, lanes):
        slots = range(_UNPACKER_SLOTS)
        self.slot_data = [Signal(width, name=f"slot{k}_data", reset_less=True) for k in slots]
        # The beats' byte counts and last flags, oldest first (a shift register, so the
        # plan reads them without a multiplexer): ``W`` for a beat that is not a message's
        # last, its ``keep`` count for one that is.
        self.lim = [Signal(range(lanes + 1), name=f"beat{k}_lim") for k in slots]
        self.last = [Signal(name=f"beat{k}_last") for k in slots]
        self.used = Signal(range(_UNPACKER_SLOTS + 1))    # slots holding a beat
        # ``used`` one-hot as well (``used_is[j]``: ``used == j``): where a beat lands is
        # then one flop ANDed with the take, not a decode of the count (the unpacker's
        # routed path at 64 bits: ``used`` -> lands -> a check's choice -> the ring's flags).
        self.used_is = [Signal(name=f"used_is{j}", init=int(j == 0))
                        for j in range(_UNPACKER_SLOTS + 1)]
        self.have = [Signal(name=f"have{b}") for b in range(2)]   # used > b
        self.head = Signal(range(_UNPACKER_SLOTS))        # the oldest beat, B0
        self.free_slot = Signal(_UNPACKER_SLOTS, init=(1 << _UNPACKER_SLOTS) - 1)
        self.tail = Signal(range(_UNPACKER_SLOTS))        # where the next beat goes
        self.pops = Signal(range(3))                      # beats done with this cycle
        self.taken = Signal()                             # a beat goes into a slot
        self.held_valid = Signal()                        # the input register holds a beat
        self.lim_in = Signal(range(lanes + 1))            # its byte count (a register)
        # ``pops`` in its parts: a chunk is served (``serving``) and finishes ``serve_pops``
        # beats, worked out from the chunk's own flags beside the decision to serve; or a
        # dropped beat goes (``drop_pop``).  What ``pops`` chooses is chosen by these with
        # ``serving`` last (``by_pops``), so the served outcome is picked while the decision
        # to serve is still being made.
        self.serving = Signal()
        self.serve_pops = Signal(range(3))
        self.drop_pop = Signal()

    def by_pops(self, choices):
        """``choices[pops]``, with ``serving`` the last select."""
        return Mux(self.serving, Array(choices)[self.serve_pops],
                   Mux(self.drop_pop, choices[1], choices[0]))


class RowUnpacker(wiring.Component):
    """Scatters a packed byte stream into row writes for the chunks of a region (receive
    side).

    Parameters
    ----------
    data_width : int
        Bits per memory row and per beat, one of :data:`nicoll.hw.params.DATA_WIDTHS`.
    addr_width : int
        Bits of a byte address, as for the :class:`RegionWalker` producing ``chunks``.

    Members
    -------
    beats : ``In(stream.Signature(beat_layout(data_width)))``
        The packed stream as :class:`RowPacker` gives it.  A beat's bytes are its lanes
        ``0 .. c-1`` where ``c`` is the number of ``keep`` bits set: ``keep`` must be a low
        mask, and all ones on every beat but a message's last (lanes with ``keep`` clear may
        hold anything).  The unit relies on both: it reads ``c`` from where the ones of a
        last beat's ``keep`` end, and takes every other beat as full.
    chunks : ``In(stream.Signature(chunk_layout(data_width, addr_width - log2(W))))``
        Where the bytes go, as a :class:`RegionWalker` gives them.
    rows : ``Out(stream.Signature(write_row_layout(data_width, addr_width - log2(W))))``
        Per chunk, the next ``n`` bytes of the stream at lanes ``lo .. lo+n-1`` of ``data``
        (other lanes zero), ``mask`` set for exactly those lanes, ``row`` and ``last`` from
        the chunk.
    overrun, underrun : ``Out(1)``
        Sticky mismatch flags, see below.
    clear : ``In(1)``
        Clears both flags in the next cycle; a mismatch found in the same cycle still sets
        its flag.

    A message is the beats up to the one with ``last``; its bytes are the ``keep`` bytes of
    those beats.  Its chunks are the chunks up to the one with ``last``.  The two must hold
    the same number of bytes; when they do not, the unit resynchronises so that the next
    message and its chunks start clean:

    - *More bytes than chunks* (``overrun``): when the message's last chunk has been served,
      the message's remaining bytes are dropped, including beats still to come up to and
      including the one with ``last``.  The flag is set as soon as a dropped byte is seen.
      All chunks were served normally.
    - *Fewer bytes than chunks* (``underrun``): chunks are served while the message has
      enough bytes left for the whole chunk.  The first chunk that does not fit, once the
      message's last beat has arrived, sets the flag; the bytes left of the message are
      dropped, and so are that chunk and the chunks after it, none of them written (a chunk
      is written whole or not at all).  The chunk with ``last`` among them still gives a row
      with ``mask`` zero and ``last`` set, so that a consumer counting messages by ``last``
      stays in step.

    Beats pass an input register, which counts a last beat's bytes, into four slots,
    which may hold the start of the next message; a chunk's bytes lie in the two oldest,
    B0 and B1.  Chunks are *placed* on the way into a :class:`~nicoll.hw.lib.skid.SkidBuffer`:
    the message's byte offset modulo ``W`` is a register every chunk moves on by its ``n``
    (every beat but a message's last is full), so each chunk carries where it starts in B0,
    whether it runs on into B1 and where it ends.  From the buffer's registers the lane
    masks and the rotation are decoded into a :class:`~nicoll.hw.lib.skid.CheckedRing` whose
    head register holds the bits the plan decides on.  Register stages follow:

    1. *Plan*: the chunk is taken once the beats it touches are in their slots, from flags
       alone (its crossing and ``last`` flags, whether its end is B0's or B1's top lane, and
       B0's and B1's presence and ``last`` flags); no count or compare is part of the
       decision.  A message's last beat stays in B0 until the message's last chunk has
       been taken, so the chunks after one that does not fit are taken against the same
       beats as if it had.  The control word of the row (rotation, lane mask, row, last,
       and the compares of the chunk's end with the byte count of the beat it ends in) is
       registered, and so are the chunk's bytes in stream order, picked lane by lane from
       B0 (at and above the chunk's start) or B1 (below it) by a lane mask the chunk
       carries.
    2. *Judge*, on the control word alone: a chunk that does not fit, and every chunk of
       its message after it, writes nothing (the message's last chunk gives its mask-zero
       row); it sets ``underrun``, and a last chunk that leaves bytes of its beat sets
       ``overrun``.  No register of its own: it sits between the plan's register and the
       rotator's first.
    3. *Rotate*, ``W`` bytes around, by the registered amount: the low three bits first,
       then one bit per stage, the last two bits in one stage from 256 bits on; the last
       stage loads the output register with the lane mask (at 64 and 128 bits that stage
       also takes the rotation's last bits; one stage at 64 bits, two at 128, three at
       256, four at 512).

    One chunk per clock at any alignment and chunk size, and one beat per clock when the
    chunks consume a full beat per clock; a beat joins the plan's view as it lands in its
    slot.  A row is offered ``1 + s`` cycles after its chunk is planned, ``s`` the number
    of rotator stages (``3 + s`` cycles after its chunk and its first beat are taken
    together, on an idle unit).  ``rows.valid`` and the row come from flops;
    ``chunks.ready`` and ``beats.ready`` come from flops too (a free skid entry; a free
    input register or slot).  Bytes of a message being dropped go at one beat per clock.
    """

    def __init__(self, data_width, addr_width=32):
        check_data_width(data_width)
        _check_addr_width(addr_width, data_width)
        self._data_width = data_width
        self._addr_width = addr_width
        self._row_bits = addr_width - _lane_bits(data_width)
        super().__init__({
            "beats": In(stream.Signature(beat_layout(data_width))),
            "chunks": In(stream.Signature(chunk_layout(data_width, self._row_bits))),
            "rows": Out(stream.Signature(write_row_layout(data_width, self._row_bits))),
            "overrun": Out(1),
            "underrun": Out(1),
            "clear": In(1),
        })

    @property
    def data_width(self):
        return self._data_width

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def row_bits(self):
        return self._row_bits

    def elaborate(self, platform):
        m = Module()
        width = self._data_width
        lanes = width // 8
        state = _UnpackerState(width, lanes)
        placed = _placed_chunk_layout(width, self._row_bits)
        # Chunks: placed on the way into a skid buffer, then a slice whose head register
        # holds the bits the plan decides on.
        m.submodules.chunk_in = chunk_in = SkidBuffer(data.StructLayout({
            "chunk": self.chunks.payload.shape(),
            "position": _lane_bits(width),
            "rot": _lane_bits(width),
            "hi": _lane_bits(width) + 1,
            "tail": _lane_bits(width) + 1,
            "cross": 1,
        }))
        # The head is a ring read through a mux: the plan's decision (``ready``) loads its
        # pointers only, and its ``i.ready`` is a flop, so the decision stops at the head
        # (as a one-entry slice, it went on into the chunk buffer's enables: the 256-bit
        # engine's routed critical path, `used` -> have -> fits -> ready -> `skid_valid`).
        # The bits the plan decides on (crossing, last, tail) are the ring's head register,
        # so the decision starts at flops, not at the entries' multiplexer.
        lane_bits = _lane_bits(width)
        m.submodules.chunk_head = chunk_head = CheckedRing(placed, checks=lane_bits + 3)
        self._place(m, chunk_in, chunk_head.i)

        def head_flags(entry):
            return Cat(entry.cross, entry.last, entry.tail)
        m.d.comb += chunk_head.block_new.eq(head_flags(chunk_head.i.payload))
        m.d.comb += [chunk_head.block_entry[k].eq(head_flags(chunk_head.entries[k]))
                     for k in range(2)]

        # The output is a register slice (SkidBuffer) whose first entry is the output
        # register: every stage but the beat slots moves while its second entry is free, a
        # flop of this unit, so the consumer's ready is in no decision here (the route from
        # the engine's received-row ring through the plan's decision into the beat slots'
        # state was the 64-bit core's routed path at seeds 1 and 2 of 25aa822, 7.0-7.1 ns).
        # A row is offered no later than from a single output register, and from a register:
        # read through a ring's 2:1 multiplexer, the row went on into the engine's checks
        # of the received rows (the 64-bit core's path at seed 2 of ba1e4fc, the ring's read
        # pointer -> rx_checked.flags0, 7.18 ns).
        m.submodules.out_ring = out_ring = SkidBuffer(self.rows.payload.shape())
        m.d.comb += [self.rows.valid.eq(out_ring.o.valid),
                     self.rows.payload.eq(out_ring.o.payload),
                     out_ring.o.ready.eq(self.rows.ready)]
        advance = out_ring.i.ready
        # The plan's decision has its own copy of the slice's room, stored inverted (so no
        # netlist pass merges the two flops): `advance` enables every pipeline flop, and
        # with that load on the flop the decision reads, the route to it was the 64-bit
        # core's routed path at seed 3 of 25aa822 (the then output register's emptiness ->
        # the decision and the plan's enables -> a beat's count, 7.37 ns, 3.3 of it the
        # first two wires).  Tests check it against the slice's room every cycle
        # (``mirrors``).
        plan_advance = Signal(init=1)
        # The slice's second entry is free next cycle if its output register is free now
        # (it then takes the second entry's row, or the input's), or if it is free now and
        # takes no row.
        out_free = ~out_ring.o.valid | out_ring.o.ready
        ring_take = out_ring.i.valid & out_ring.i.ready
        m.d.sync += plan_advance.eq(out_free | (out_ring.i.ready & ~ring_take))
        self.mirrors = [(plan_advance, out_ring.i.ready)]
        picked = Signal(width, reset_less=True)
        control = Signal(_unpacker_control_layout(width, self._row_bits))
        overrun_now = Signal()
        underrun_now = Signal()

        self._slots(m, state)
        self.mirrors += [(state.free_slot[k],
                          (Const(k, len(state.head)) - state.head)[:len(state.head)] >= state.used)
                         for k in range(_UNPACKER_SLOTS)]
        self.mirrors += [(state.used_is[j], state.used == j)
                         for j in range(_UNPACKER_SLOTS + 1)]
        self._plan(m, state, chunk_head, control, overrun_now, go=plan_advance, load=advance)
        with m.If(advance):
            m.d.sync += picked.eq(self._pick(state, chunk_head.o.payload.below))
        extra_now = Signal()
        control = self._judge(m, advance, control, extra_now, underrun_now)
        stages = _rotation_stages(lane_bits)
        if len(stages) > 2:
            # The last two one-bit stages as one of two bits, so the output slice's input
            # is the mask alone (one LUT with the slice's choice): with the last bit's 2:1
            # choice there too, the slice's output register was among the 256-bit engine's
            # latest pins at every seed of 5a1ddfb (the control word's mask -> 3 LUTs ->
            # `unpacker.out_ring`, 5.0-5.4 ns).  The stage count stays the same.
            piped, last = stages[:-2] + [(stages[-2][0], stages[-1][1])], None
        else:
            piped, last = stages[:-1], stages[-1]
        rotated, control = _rotation_pipeline(m, advance, picked, control, piped)
        self._output(m, rotated, control, last, out_ring.i)

        with m.If(self.clear):
            m.d.sync += [self.overrun.eq(0), self.underrun.eq(0)]
        with m.If(overrun_now | extra_now):
            m.d.sync += self.overrun.eq(1)
        with m.If(underrun_now):
            m.d.sync += self.underrun.eq(1)
        return m

    def _place(self, m, chunk_in, placed):
        """Chunks through the chunk buffer with their place in the message: the message's
        byte offset modulo ``W`` is a register that every chunk moves on by its ``n`` (back
        to zero after a message's last chunk), which holds because every beat but a
        message's last is full.  Nothing here waits on the beats.  The buffer keeps the
        chunk's offset, tail and crossing; the lane masks and the rotation are decoded from
        its registers on the way into the head slice."""
        lanes = self._data_width // 8
        lane_bits = _lane_bits(self._data_width)
        chunk = self.chunks.payload
        position = Signal(lane_bits)          # the offset of the next chunk
        end = Signal(lane_bits + 1)
        m.d.comb += end.eq(position + chunk.n)
        cross = end[lane_bits] & (end[:lane_bits] != 0)
        entry = chunk_in.i.payload
        m.d.comb += [
            chunk_in.i.valid.eq(self.chunks.valid),
            self.chunks.ready.eq(chunk_in.i.ready),
            entry.chunk.eq(chunk),
            entry.position.eq(position),
            # The rotation and the chunk's end lane, summed on the way in, so that what
            # leaves the buffer is decoded from registers with no adder in front (the
            # 256-bit unit's path: the buffered chunk -> lo + n -> its lane mask, 9 levels).
            entry.rot.eq(position - chunk.lo),
            entry.hi.eq(chunk.lo + chunk.n),
            entry.tail.eq(Mux(cross, end[:lane_bits], end)),
            entry.cross.eq(cross),
        ]
        with m.If(self.chunks.valid & chunk_in.i.ready):
            m.d.sync += position.eq(Mux(chunk.last, 0, end[:lane_bits]))

        held = chunk_in.o.payload
        m.d.comb += [
            placed.valid.eq(chunk_in.o.valid),
            chunk_in.o.ready.eq(placed.ready),
            placed.payload.row.eq(held.chunk.row),
            placed.payload.last.eq(held.chunk.last),
            placed.payload.rot.eq(held.rot),
            placed.payload.mask.eq(_lanes_below(held.hi, lanes)
                                   & ~_lanes_below(held.chunk.lo, lanes)),
            placed.payload.below.eq(_lanes_below(held.position, lanes)),
            placed.payload.tail.eq(held.tail),
            placed.payload.cross.eq(held.cross),
        ]

    def _slots(self, m, s):
        """Beats into the slots through an input register (which counts the beat's bytes),
        whenever a slot is free; ``s.pops`` frees the oldest."""
        lanes = self._data_width // 8
        beat = self.beats.payload
        held_data = Signal(self._data_width, reset_less=True)
        held_last = Signal()
        held_valid = s.held_valid
        free = ~s.used_is[_UNPACKER_SLOTS]
        taken = held_valid & free
        # beats.ready is a flop, `ready` (~held_valid | free, made from the two flags' next
        # values; `mirrors` holds it to them): a slot freed in a cycle takes a beat from the
        # next one on.  As the OR of the two flags, the LUT between them and the receive
        # slice sat far from both, and the take came back through it to held_valid: the
        # 256-bit engine's critical path at seed 1 of 72197bf (used_is4 -> the ready ->
        # the slice's valid -> held_valid's enable, 5.92 ns, 4.6 of it two wires).
        ready = Signal(init=1)
        m.d.comb += [self.beats.ready.eq(ready), s.taken.eq(taken)]
        self.mirrors.append((ready, ~held_valid | free))
        # The held beat's data, last and count load whenever the register may take a beat,
        # valid or not (they count only while held_valid), so their enable is the ready
        # alone: with the valid in it too, it was a LUT deeper in front of 256 + 8 flops.
        with m.If(self.beats.ready):
            m.d.sync += [held_data.eq(beat.data), held_last.eq(beat.last),
                         s.lim_in.eq(Mux(beat.last, low_mask_count(beat.keep), lanes))]
        with m.If(self.beats.valid & self.beats.ready):
            m.d.sync += held_valid.eq(1)
        with m.Elif(taken):
            m.d.sync += held_valid.eq(0)
        # Every slot that holds no beat loads the input register's beat in every cycle, so
        # each slot's load enable is a flop (`free_slot`), not the take decoded by `tail`:
        # that decode, behind the count, fanned out to every slot's flops and was the 64-bit
        # core's routed path at seed 2 of 59f4419 (used -> taken -> the decode -> slot data,
        # three LUTs and 6.2 ns of wire).  A free slot's bytes are never read: the beat that
        # lands in one is the one the register holds as the take happens.  Tests check the
        # flags against the count and head every cycle (``mirrors``).
        for k in range(_UNPACKER_SLOTS):
            with m.If(s.free_slot[k]):
                m.d.sync += s.slot_data[k].eq(held_data)
        with m.If(taken):
            m.d.sync += s.tail.eq(s.tail + 1)
        occupied = []                   # after each number of beats that may go
        for p in range(3):
            bits = []
            for k in range(_UNPACKER_SLOTS):
                popped = _or_all([(s.head + q)[:len(s.head)] == k for q in range(p)]) if p \
                    else Const(0, 1)
                # A beat lands in slot `tail` as one is taken (held, and a slot free: the
                # flags' OR, the same as `used` below 4, which kept the take's own LUT
                # shared with the chunk ring's flags, a level deeper on the unpacker's
                # estimated worst path).
                lands = held_valid & s.free_slot.any() & (s.tail == k)
                bits.append((~s.free_slot[k] & ~popped) | lands)
            occupied.append(Cat(bits))
        m.d.sync += s.free_slot.eq(~s.by_pops(occupied))
        # The count after each number of beats that may go, chosen by ``pops`` last.
        m.d.comb += s.pops.eq(Mux(s.serving, s.serve_pops, s.drop_pop))
        m.d.sync += [s.used.eq(s.by_pops([s.used + taken - p for p in range(3)])),
                     s.head.eq(s.head + s.pops)]

        def used_is(j):                 # ``used == j``, zero out of range
            return s.used_is[j] if 0 <= j <= _UNPACKER_SLOTS else Const(0, 1)
        used_is_next = [s.by_pops([Mux(taken, used_is(j + p - 1), used_is(j + p))
                                   for p in range(3)])
                        for j in range(_UNPACKER_SLOTS + 1)]
        m.d.sync += [s.used_is[j].eq(used_is_next[j]) for j in range(_UNPACKER_SLOTS + 1)]
        held_next = (self.beats.valid & ready) | (held_valid & ~free)
        m.d.sync += ready.eq(~held_next | ~used_is_next[_UNPACKER_SLOTS])
        # B0 and B1 in a slot (used >= 1, used >= 2) as flops of their own, chosen by `pops`
        # like `used`, so the plan's decision does not decode the count first.
        m.d.sync += [
            s.have[b].eq(s.by_pops([_or_all(s.used_is[b + p + 1:])
                                    | (held_valid & used_is(b + p))
                                    for p in range(3)]))
            for b in range(2)]
        # The byte counts move down by the beats that go; a new beat's lands behind the rest.
        lim_in = s.lim_in
        fields = (s.lim, s.last)
        arriving = (lim_in, held_last)
        for k in range(_UNPACKER_SLOTS):
            # For each number of beats that may go, the entry's next value; ``pops`` (from
            # the plan's decision) chooses last.  A new beat lands at ``used - pops``.
            after = []
            for p in range(3):
                kept = [f[k + p] if k + p < _UNPACKER_SLOTS else 0 for f in fields]
                # No beat lands while every slot is used (nothing is taken then; the slot
                # past the pops is free and its entry never read): with that case in it,
                # the AND was the input's ready itself, one LUT shared with the receive
                # slice's pointers, and the 256-bit engine's critical path at seeds 1 and
                # 2 of 95ebed1 (used_is4 -> that LUT -> the byte counts, 2.0 and 2.2 ns
                # wires on each side of it).
                lands = held_valid & used_is(k + p) if k + p < _UNPACKER_SLOTS else Const(0)
                after.append([Mux(lands, new, old) for new, old in zip(arriving, kept)])
            m.d.sync += [f[k].eq(s.by_pops([a[i] for a in after]))
                         for i, f in enumerate(fields)]

    def _pick(self, s, below):
        """The chunk's bytes in stream order: lanes at and above its position from the
        oldest beat, lanes below it from the next one.  A 4:1 choice per lane, by registers
        only."""
        lanes = self._data_width // 8
        after = (s.head + 1)[:len(s.head)]
        picked = []
        for lane in range(lanes):
            slot = Mux(below[lane], after, s.head)
            choices = [d[8 * lane:8 * (lane + 1)] for d in s.slot_data]
            picked.append(Mux(slot[1], Mux(slot[0], choices[3], choices[2]),
                              Mux(slot[0], choices[1], choices[0])))
        return Cat(*picked)

    def _plan(self, m, s, chunk_head, control, overrun_now, *, go, load):
        """Stage 1: what the chunk at the head of the chunk buffer does, and its control word.
        A chunk is taken only in cycles the pipeline advances: ``go`` for the decision and
        ``load`` for the control word's enables, two flops of the same value.

        The decision reads flags only: the chunk is taken once the beats it touches are in
        their slots (B0; B1 too when it crosses into it, unless B0 is the message's last
        beat).  Whether those beats hold all of its bytes is not part of it: a message's
        last beat stays in B0 until the message's last chunk, so a chunk that does not fit
        still finds that beat there and leaves the beats as a fitting one would, and the
        compares of its tail with the byte counts go into the control word for the stage
        after (:meth:`_judge`), which decides what is written."""
        chunk_in = chunk_head.o
        chunk = chunk_in.payload
        lim0, lim1, last0, last1 = s.lim[0], s.lim[1], s.last[0], s.last[1]
        have0, have1 = s.have
        flags = chunk_head.o_blocked
        c_cross, c_last, c_tail = flags[0], flags[1], flags[2:]
        c_tail_top = c_tail[-1]       # the chunk uses its last beat to the top lane

        # The rest of a message's beats are dropped: its last chunk ended before its last
        # beat (more bytes than chunks).
        dropping = Signal()

        # The chunk runs on past the message's last beat, so it cannot fit.
        beyond = c_cross & last0
        steps = c_cross & ~last0      # it finishes B0 and ends in B1
        present = have0 & (~c_cross | last0 | have1)
        serve = go & chunk_in.valid & ~dropping & present
        m.d.comb += chunk_in.ready.eq(serve)
        # The beat the chunk ends in (B0 for one past the message's end), and whether it
        # goes: a message's last beat with the message's last chunk, another when the chunk
        # uses it to the top lane.
        end_last = Mux(steps, last1, last0)
        goes = Mux(end_last, c_last, c_tail_top)
        m.d.comb += s.serve_pops.eq(steps + goes)
        drop_beat = dropping & have0

        with m.If(serve):
            m.d.comb += s.serving.eq(1)
            with m.If(c_last & ~end_last):
                m.d.sync += dropping.eq(1)
        with m.Elif(drop_beat):
            m.d.comb += [s.drop_pop.eq(1), overrun_now.eq(lim0 != 0)]
            with m.If(last0):
                m.d.sync += dropping.eq(0)

        # The tail against the byte count of the beat it ends in, from registers.
        over = Mux(steps, c_tail > lim1, c_tail > lim0)
        under = Mux(steps, c_tail < lim1, c_tail < lim0)
        with m.If(load):
            m.d.sync += [
                control.valid.eq(serve),
                control.rot.eq(chunk.rot),
                control.mask.eq(chunk.mask),
                control.row.eq(chunk.row),
                control.last.eq(c_last),
                control.short.eq(beyond | (end_last & over)),
                control.extra.eq(end_last & under),
                control.spends.eq(end_last & c_tail_top),
            ]

    def _judge(self, m, advance, control, extra_now, underrun_now):
        """The stage after the plan: which planned chunks are written.  A message whose chunk
        did not fit (``short``) writes none from that chunk on; its last chunk still gives a
        row, with ``mask`` zero, so a consumer counting messages by ``last`` stays in step.
        A chunk after one that used the message's last byte at the top lane of its beat
        (``spends``) does not fit either: its compares, made against that same beat, cannot
        tell (its tail counts from lane 0 of the beat after).
        A message's last chunk that fits but leaves bytes of the last beat flags an overrun.
        Returns the control word that goes on, a function of registers."""
        # A chunk of this message did not fit: the rest of its chunks write nothing.
        failed = Signal()
        bad = control.short | failed
        judged = Signal(control.shape())
        m.d.comb += [
            judged.eq(control),
            judged.valid.eq(control.valid & (~bad | control.last)),
            judged.mask.eq(Mux(bad, 0, control.mask)),
        ]
        with m.If(advance & control.valid):
            m.d.sync += failed.eq((bad | control.spends) & ~control.last)
            m.d.comb += [underrun_now.eq(bad),
                         extra_now.eq(control.last & ~bad & control.extra)]
        return judged

    def _output(self, m, rotated, control, stage, out):
        """Last stage: the rotation's last bits (``stage``, ``(lo, hi)``, or None when the
        registered stages did them all) and the lane mask, into the output slice's input
        ``out``."""
        if stage is not None:
            lo, hi = stage
            rotated = _rotate_lanes(rotated, control.rot[lo:hi], 1 << lo)
        m.d.comb += [
            out.valid.eq(control.valid),
            out.payload.data.eq(rotated & _byte_mask_bits(control.mask)),
            out.payload.mask.eq(control.mask),
            out.payload.row.eq(control.row),
            out.payload.last.eq(control.last),
        ]
