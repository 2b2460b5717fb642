# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
"""The region walker.

:class:`RegionWalker` cuts a region (:data:`~.regions.REGION_LAYOUT`) into *chunks*
(:func:`~.regions.chunk_layout`): one per (run, row) pair, in stream order, each naming a row
and the lanes ``lo .. lo+n-1`` of it that hold the next ``n`` bytes of the stream.  The
regions and the memory's lanes are described in :mod:`.regions`.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..params import check_data_width, is_int
from ..lib.skid import SkidBuffer
from .regions import (REGION_LAYOUT, _check_addr_width, _lane_bits, at_most, chunk_layout,
                      region_checks, walker_command_layout)


__all__ = ["RegionWalker"]


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
