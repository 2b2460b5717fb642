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
drives ``valid`` of its outputs from flops only.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out


__all__ = [
    "DATA_WIDTHS", "REGION_LAYOUT",
    "chunk_layout", "read_row_layout", "beat_layout", "write_row_layout",
    "RegionWalker", "RowPacker", "RowUnpacker",
]


#: The row widths the units support, in bits.
DATA_WIDTHS = (64, 128, 256, 512)

#: One region: ``length`` bytes, ``run`` bytes at a time, run ``k`` at ``offset + k*stride``.
REGION_LAYOUT = data.StructLayout({
    "offset": 32,
    "length": 32,
    "run": 32,
    "stride": 32,
})


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_data_width(data_width):
    if not _is_int(data_width):
        raise TypeError(f"Data width must be an integer, not {data_width!r}")
    if data_width not in DATA_WIDTHS:
        raise ValueError(f"Data width must be one of {', '.join(map(str, DATA_WIDTHS))}, "
                         f"not {data_width!r}")


def _lane_bits(data_width):
    return (data_width // 8).bit_length() - 1


def _check_addr_width(addr_width, data_width):
    if not _is_int(addr_width):
        raise TypeError(f"Address width must be an integer, not {addr_width!r}")
    lowest = _lane_bits(data_width) + 1
    if not lowest <= addr_width <= 64:
        raise ValueError(f"Address width must be between {lowest} and 64 for a data width of "
                         f"{data_width}, not {addr_width!r}")


def _check_row_bits(row_bits):
    if not _is_int(row_bits):
        raise TypeError(f"Row address width must be an integer, not {row_bits!r}")
    if not 1 <= row_bits <= 64:
        raise ValueError(f"Row address width must be between 1 and 64, not {row_bits!r}")


def chunk_layout(data_width, row_bits):
    """One chunk: lanes ``lo .. lo+n-1`` of memory row ``row`` (``1 <= n``, ``lo + n <= W``).

    ``last`` is set on the final chunk of a region.  ``lo`` has ``log2(W)`` bits, ``n`` one
    more so that it holds ``W``.
    """
    _check_data_width(data_width)
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
    _check_data_width(data_width)
    lane_bits = _lane_bits(data_width)
    return data.StructLayout({
        "data": data_width,
        "lo": lane_bits,
        "n": lane_bits + 1,
        "last": 1,
    })


def beat_layout(data_width):
    """One beat of a packed byte stream: ``keep`` has a bit per lane of ``data``."""
    _check_data_width(data_width)
    return data.StructLayout({
        "data": data_width,
        "keep": data_width // 8,
        "last": 1,
    })


def write_row_layout(data_width, row_bits):
    """A row write from :class:`RowUnpacker`: the lanes of ``data`` whose ``mask`` bit is set
    go to memory row ``row``; ``last`` is the ``last`` of the chunk it came from."""
    _check_data_width(data_width)
    _check_row_bits(row_bits)
    return data.StructLayout({
        "row": row_bits,
        "data": data_width,
        "mask": data_width // 8,
        "last": 1,
    })


def _low_mask(count, width):
    """A ``width``-bit value with its low ``count`` bits set (``count <= width``)."""
    # 1 << count needs width + 1 bits when count == width; subtracting one and dropping the
    # top bit gives all ones in that case.
    return ((Const(1, 1) << count) - 1)[:width]


def _byte_mask_bits(byte_mask):
    """Widen a mask with a bit per byte to a mask with a bit per data bit."""
    return Cat(*(bit.replicate(8) for bit in byte_mask))


def _bytes(amount):
    """A shift amount in bytes as a shift amount in bits, without a multiplier."""
    return Cat(Const(0, 3), amount)


def _popcount(bits):
    """Number of set bits, as a balanced adder tree."""
    terms = [bits[i] for i in range(len(bits))]
    while len(terms) > 1:
        pairs = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        terms = pairs + terms[len(terms) - len(terms) % 2:]
    return terms[0]


class RegionWalker(wiring.Component):
    """Cuts each region of ``command`` into chunks on ``chunks``.

    Parameters
    ----------
    data_width : int
        Bits per memory row, one of :data:`DATA_WIDTHS`.
    addr_width : int
        Bits of a byte address; chunks carry ``addr_width - log2(W)`` bits of row address.

    Members
    -------
    command : ``In(stream.Signature(REGION_LAYOUT))``
        Regions to walk.  A strided region must have ``stride >= run`` (the engine checks
        this).  An empty region (``length == 0``) is accepted and gives no chunks.
    chunks : ``Out(stream.Signature(chunk_layout(data_width, addr_width - log2(W))))``
        One chunk per (run, row) pair in ascending stream order; ``last`` on the region's
        final chunk.
    busy : ``Out(1)``
        A region was taken and not all its chunks have been taken yet.

    One chunk per clock while ``chunks.ready`` is high.  The next command is taken in the
    cycle the previous region's last chunk is taken, so regions follow each other without a
    gap (an empty region costs one cycle); ``chunks.valid`` comes from a flop.  A region's
    first chunk is offered the cycle after its command is taken.  Addresses advance by
    additions only: no multiplier, no divider.
    """

    def __init__(self, data_width, addr_width=32):
        _check_data_width(data_width)
        _check_addr_width(addr_width, data_width)
        self._data_width = data_width
        self._addr_width = addr_width
        self._row_bits = addr_width - _lane_bits(data_width)
        super().__init__({
            "command": In(stream.Signature(REGION_LAYOUT)),
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

    def elaborate(self, platform):
        m = Module()
        lanes = self._data_width // 8
        lane_bits = _lane_bits(self._data_width)
        command = self.command.payload
        chunk = self.chunks.payload

        cursor = Signal(self._addr_width)     # address of the next byte of the stream
        run_start = Signal(self._addr_width)  # where the current run began
        stride = Signal(32)
        run = Signal(32)
        run_left = Signal(32)                 # bytes of the current run not yet in a chunk
        rest = Signal(32)                     # bytes of the region after the current run

        lo = cursor[:lane_bits]
        room = Signal(range(lanes + 1))       # lanes from the cursor to the end of its row
        fits = Signal()                       # the current run ends in this row
        m.d.comb += [
            room.eq(lanes - lo),
            fits.eq(run_left <= room),
            self.chunks.valid.eq(self.busy),
            chunk.row.eq(cursor[lane_bits:]),
            chunk.lo.eq(lo),
            chunk.n.eq(Mux(fits, run_left, room)),
            chunk.last.eq(fits & (rest == 0)),
        ]

        with m.If(self.chunks.valid & self.chunks.ready):
            with m.If(~fits):
                m.d.sync += [cursor.eq(cursor + room), run_left.eq(run_left - room)]
            with m.Elif(rest != 0):
                next_start = (run_start + stride)[:self._addr_width]
                m.d.sync += [run_start.eq(next_start), cursor.eq(next_start)]
                # Compare and subtract side by side rather than min() then subtract, so the
                # two 32-bit carry chains do not follow each other.
                with m.If(rest < run):
                    m.d.sync += [run_left.eq(rest), rest.eq(0)]
                with m.Else():
                    m.d.sync += [run_left.eq(run), rest.eq(rest - run)]
            with m.Else():
                m.d.sync += self.busy.eq(0)

        # Taking the next command as the last chunk goes keeps back-to-back regions gapless;
        # these assignments come after the ones above and so win over them.
        m.d.comb += self.command.ready.eq(~self.busy | (self.chunks.ready & chunk.last))
        with m.If(self.command.valid & self.command.ready):
            m.d.sync += [
                cursor.eq(command.offset),
                run_start.eq(command.offset),
                stride.eq(command.stride),
                run.eq(command.run),
            ]
            with m.If(command.length == 0):
                m.d.sync += self.busy.eq(0)
            with m.Elif((command.run == 0) | (command.run >= command.length)):
                m.d.sync += [self.busy.eq(1), run_left.eq(command.length), rest.eq(0)]
            with m.Else():
                m.d.sync += [self.busy.eq(1), run_left.eq(command.run),
                             rest.eq(command.length - command.run)]
        return m


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

    A ``2W``-byte accumulator holds the bytes not yet sent, packed from byte 0.  Each cycle
    the beat at its bottom goes out if it is full, or if the message has ended (its final,
    possibly partial, beat goes without waiting for the next message); a row is taken when
    the bytes left after that fit with a whole row above them.  The bytes of a row are
    shifted down from lane ``lo`` to lane 0 and then up to the accumulator's fill level.

    One row in and one beat out per clock.  A beat is offered the cycle after the row that
    completes it is taken; ``beats.valid`` and the beat come from flops.  ``rows.ready``
    depends combinationally on ``beats.ready`` (a row is taken into the room a leaving beat
    frees).  When a message's last row leaves more than ``W`` bytes to send, the next
    message's first row waits one cycle, until the final beat goes.
    """

    def __init__(self, data_width):
        _check_data_width(data_width)
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
        lanes = self._data_width // 8
        lane_bits = _lane_bits(self._data_width)
        row = self.rows.payload
        beat = self.beats.payload

        acc = Signal(2 * self._data_width)    # bytes at and above ``fill`` are zero
        fill = Signal(range(2 * lanes + 1))
        ended = Signal()                      # the bytes in ``acc`` end a message

        full = fill >= lanes
        m.d.comb += [
            # The beat at the bottom of the accumulator: it only changes when it is taken,
            # since a row taken meanwhile lands above it.
            self.beats.valid.eq(full | (ended & (fill != 0))),
            beat.data.eq(acc[:self._data_width]),
            beat.keep.eq(Mux(full, (1 << lanes) - 1, _low_mask(fill[:lane_bits], lanes))),
            beat.last.eq(ended & (fill <= lanes)),
        ]

        # The accumulator once this cycle's beat (if any) has gone.
        acc_left = Signal.like(acc)
        fill_left = Signal.like(fill)
        ended_left = Signal()
        with m.If(self.beats.valid & self.beats.ready):
            m.d.comb += [
                acc_left.eq(acc[self._data_width:]),
                fill_left.eq(Mux(full, fill - lanes, 0)),
                ended_left.eq(ended & (fill > lanes)),
            ]
        with m.Else():
            m.d.comb += [acc_left.eq(acc), fill_left.eq(fill), ended_left.eq(ended)]

        # A new message waits until the previous one has fully left, so that it starts at
        # lane 0 of a beat of its own.
        m.d.comb += self.rows.ready.eq(~ended_left & (fill_left <= lanes))

        picked = Signal(self._data_width)
        placed = Signal(2 * self._data_width)
        m.d.comb += [
            picked.eq((row.data >> _bytes(row.lo))
                      & _byte_mask_bits(_low_mask(row.n, lanes))),
            # fill_left <= lanes whenever a row is taken, so its low bits are the amount.
            placed.eq(picked << _bytes(fill_left[:lane_bits + 1])),
        ]
        with m.If(self.rows.valid & self.rows.ready):
            m.d.sync += [
                acc.eq(acc_left | placed),
                fill.eq(fill_left + row.n),
                ended.eq(row.last),
            ]
        with m.Else():
            m.d.sync += [acc.eq(acc_left), fill.eq(fill_left), ended.eq(ended_left)]
        return m


class RowUnpacker(wiring.Component):
    """Scatters a packed byte stream into row writes for the chunks of a region (receive
    side).

    Parameters
    ----------
    data_width : int
        Bits per memory row and per beat, one of :data:`DATA_WIDTHS`.
    addr_width : int
        Bits of a byte address, as for the :class:`RegionWalker` producing ``chunks``.

    Members
    -------
    beats : ``In(stream.Signature(beat_layout(data_width)))``
        The packed stream as :class:`RowPacker` gives it.  A beat's bytes are its lanes
        ``0 .. c-1`` where ``c`` is the number of ``keep`` bits set: ``keep`` must be a low
        mask (all ones on every beat but a message's last).
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

    At most ``2W`` bytes are buffered.  Beats of the next message wait until the current
    message's chunks are done; they are taken in the cycle its last chunk is.  One chunk per
    clock (aligned or not, whatever the chunk sizes) and one beat per clock when the chunks
    consume a full beat per clock.  A row is offered the cycle after its chunk is taken when
    its bytes are buffered, which they are one cycle after their beat is taken;
    ``rows.valid`` and the row come from flops.  ``beats.ready`` and ``chunks.ready`` depend
    combinationally on ``rows.ready`` and on the other input.
    """

    def __init__(self, data_width, addr_width=32):
        _check_data_width(data_width)
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
        lane_bits = _lane_bits(width)
        beat = self.beats.payload
        chunk = self.chunks.payload
        out = self.rows.payload

        buf = Signal(2 * width)               # bytes at and above ``fill`` are zero
        fill = Signal(range(2 * lanes + 1))
        ended = Signal()                      # the message's last beat is in ``buf``
        skip_beats = Signal()                 # dropping the rest of an overrun message
        skip_chunks = Signal()                # dropping the rest of an underrun message's chunks

        overrun_now = Signal()
        underrun_now = Signal()

        # ---- Chunks -----------------------------------------------------------------------
        out_free = ~self.rows.valid | self.rows.ready
        have = fill >= chunk.n
        normal = ~skip_beats & ~skip_chunks
        short = ended & ~have                 # the message ends before this chunk is complete
        dropping = skip_chunks | short
        # A dropped chunk needs the output only if it carries ``last`` (its mask-zero row).
        m.d.comb += self.chunks.ready.eq(
            ~skip_beats & Mux(dropping, ~chunk.last | out_free, have & out_free))
        chunk_taken = self.chunks.valid & self.chunks.ready
        serve = chunk_taken & normal & have
        marker = chunk_taken & dropping & chunk.last

        byte_mask = Signal(lanes)
        m.d.comb += byte_mask.eq(_low_mask(chunk.n, lanes) << chunk.lo)
        with m.If(out_free):
            m.d.sync += self.rows.valid.eq(serve | marker)
        with m.If(serve):
            m.d.sync += [
                out.row.eq(chunk.row),
                out.data.eq((buf[:width] << _bytes(chunk.lo)) & _byte_mask_bits(byte_mask)),
                out.mask.eq(byte_mask),
                out.last.eq(chunk.last),
            ]
        with m.Elif(marker):
            m.d.sync += [out.row.eq(chunk.row), out.data.eq(0), out.mask.eq(0), out.last.eq(1)]

        # The buffer once this cycle's chunk (if any) is resolved.
        buf_left = Signal.like(buf)
        fill_left = Signal.like(fill)
        ended_left = Signal()
        skip_beats_left = Signal()
        m.d.comb += [buf_left.eq(buf), fill_left.eq(fill), ended_left.eq(ended),
                     skip_beats_left.eq(skip_beats)]
        with m.If(serve):
            with m.If(chunk.last):
                # The message is done as far as the chunks go: whatever it still has is extra.
                m.d.comb += [buf_left.eq(0), fill_left.eq(0), ended_left.eq(0),
                             overrun_now.eq(fill != chunk.n)]
                with m.If(~ended):
                    m.d.comb += skip_beats_left.eq(1)
            with m.Else():
                m.d.comb += [buf_left.eq(buf >> _bytes(chunk.n)), fill_left.eq(fill - chunk.n)]
        with m.Elif(chunk_taken & short & normal):
            m.d.comb += [buf_left.eq(0), fill_left.eq(0), ended_left.eq(0),
                         underrun_now.eq(1)]
            m.d.sync += skip_chunks.eq(~chunk.last)
        with m.Elif(chunk_taken & skip_chunks & chunk.last):
            m.d.sync += skip_chunks.eq(0)

        # ---- Beats ------------------------------------------------------------------------
        count = Signal(range(lanes + 1))
        placed = Signal(2 * width)
        m.d.comb += [
            count.eq(_popcount(beat.keep)),
            # fill_left <= lanes whenever a beat is taken, so its low bits are the amount.
            placed.eq((beat.data & _byte_mask_bits(beat.keep))
                      << _bytes(fill_left[:lane_bits + 1])),
        ]
        beat_taken = self.beats.valid & self.beats.ready
        with m.If(skip_beats):
            m.d.comb += self.beats.ready.eq(1)
            with m.If(beat_taken):
                m.d.comb += overrun_now.eq(beat.keep != 0)
                m.d.sync += skip_beats.eq(~beat.last)
        with m.Else():
            # Only one message's bytes are ever buffered, so a chunk never mixes two.
            m.d.comb += self.beats.ready.eq(~ended_left & ~skip_beats_left
                                            & (fill_left <= lanes))
            m.d.sync += skip_beats.eq(skip_beats_left)
        with m.If(~skip_beats & beat_taken):
            m.d.sync += [buf.eq(buf_left | placed), fill.eq(fill_left + count),
                         ended.eq(beat.last)]
        with m.Else():
            m.d.sync += [buf.eq(buf_left), fill.eq(fill_left), ended.eq(ended_left)]

        # ---- Flags ------------------------------------------------------------------------
        with m.If(self.clear):
            m.d.sync += [self.overrun.eq(0), self.underrun.eq(0)]
        with m.If(overrun_now):
            m.d.sync += self.overrun.eq(1)
        with m.If(underrun_now):
            m.d.sync += self.underrun.eq(1)
        return m
