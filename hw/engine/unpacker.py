# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
# Ref: AMBA 4 AXI4-Stream Protocol Specification (IHI0051A), 2.1 (TDATA, TKEEP, TLAST: the
#      beat layout mirrors them).
"""The row unpacker (receive side).

:class:`RowUnpacker` does the reverse of :class:`~.packer.RowPacker`: for every chunk of the
receiving region it takes the next ``n`` bytes of the beat stream and gives a row write
(:func:`~.regions.write_row_layout`) with the bytes at lanes ``lo .. lo+n-1`` and ``mask`` set
for exactly those lanes.  It checks that a message's bytes and its chunks agree in number (see
the class for what it does when they do not).  The regions and the memory's lanes are
described in :mod:`.regions`, the words and registers the unpacker's stages share in
:mod:`.unpacker_state`.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..params import check_data_width
from ..lib.skid import CheckedRing, SkidBuffer
from .regions import (_byte_mask_bits, _check_addr_width, _lane_bits, _lanes_below, _or_all,
                      _rotate_lanes, _rotation_pipeline, _rotation_stages, beat_layout,
                      chunk_layout, low_mask_count, write_row_layout)
from .unpacker_state import (_UNPACKER_SLOTS, _UnpackerState, _placed_chunk_layout,
                             _unpacker_control_layout)


__all__ = ["RowUnpacker"]


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
            # The chunk's `below` chooses the slot, as the 4:1 choice's select: choosing
            # both candidates by the beat pointers first and `below` last put the pointers
            # on twice the 256 lanes' choices, and their wires were the routed 256-bit
            # core's critical path at seed 1 of 6ca0093 (the pointer -> picked, 8.54 ns,
            # 6.2 of it its first two wires; 117.11 MHz against 125.80 at eb83340).
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
