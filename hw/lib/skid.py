# Ref: Amaranth RFC 61 / amaranth.lib.stream (transfer rules: a transfer happens in a cycle
#      where valid and ready are both high; valid must not wait for ready).
"""A two-entry register slice for streams.

:class:`SkidBuffer` cuts every combinational path between its input and its output (valid
and payload come from flops, so does the ready it gives upstream) while still moving one
transfer per cycle: the second entry catches the transfer accepted in the cycle the output
stalls.  It is built from plain flops rather than a memory-backed FIFO, which keeps it small
in hardware and cheap in simulation.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out


__all__ = ["SkidBuffer", "CheckedRing", "OneEntrySlice"]


def _check_checks(component, checks):
    if not isinstance(checks, int) or isinstance(checks, bool) or checks < 1:
        component._MustUse__silence = True      # never built: no "unused" warning
        raise ValueError(f"checks must be a positive integer, not {checks!r}")


def _ring_pointers(m, i, o, wr_ptr, rd_ptr, full):
    """The pointers and flags of a two-entry ring: a transfer in moves ``wr_ptr``, one out
    moves ``rd_ptr``; ``o.valid`` and ``full`` follow."""
    take = i.valid & ~full
    give = o.valid & o.ready
    with m.If(take):
        m.d.sync += wr_ptr.eq(~wr_ptr)
    with m.If(give):
        m.d.sync += rd_ptr.eq(~rd_ptr)
    # o.valid: an entry stays, or one arrives; full: both stay, or one stays and one
    # arrives.  Two entries held means o.valid, so `full & ~give` keeps both.
    m.d.sync += [o.valid.eq(take | (o.valid & ~give) | full),
                 full.eq((full & ~give) | (take & o.valid & ~give))]


class SkidBuffer(wiring.Component):
    """Register slice for a stream of ``shape`` payloads.

    Parameters
    ----------
    shape : shape-castable
        The payload.
    mux_output : bool
        Keep both entries in place, written in turn, and give ``o.payload`` through a 2:1
        mux at a read pointer.  The consumer's ``o.ready`` then loads only the pointers and
        the count (four flops) and never the enable of a payload flop: for a wide payload
        whose consumer decides ``ready`` late, the ready no longer fans out to hundreds of
        flops at the end of its path.  Costs one LUT level on ``o.payload``.

    Members
    -------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``
    """

    def __init__(self, shape, *, mux_output=False):
        if not isinstance(mux_output, bool):
            self._MustUse__silence = True       # never built: no "unused" warning
            raise TypeError(f"mux_output must be a bool, not {mux_output!r}")
        self._shape = shape
        self._mux_output = mux_output
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        if self._mux_output:
            return self._elaborate_ring()
        m = Module()
        # The second entry; the first is o.payload / o.valid themselves.  Payload flops carry
        # no reset (a payload means nothing without its valid, and valid is reset), so a
        # wide slice puts no load on the reset or clear net: those are the widest nets of a
        # core otherwise.
        skid_valid = Signal()
        skid_payload = Signal(self._shape, reset_less=True)
        out_payload = Signal(self._shape, reset_less=True)
        m.d.comb += self.o.payload.eq(out_payload)

        m.d.comb += self.i.ready.eq(~skid_valid)
        take = self.i.valid & self.i.ready
        out_free = ~self.o.valid | self.o.ready

        with m.If(out_free):
            with m.If(skid_valid):
                m.d.sync += [
                    out_payload.eq(skid_payload),
                    self.o.valid.eq(1),
                    skid_valid.eq(0),
                ]
                # i.ready is low while the second entry is full: nothing is taken now.
            with m.Else():
                m.d.sync += [out_payload.eq(self.i.payload), self.o.valid.eq(take)]
        with m.Elif(take):
            m.d.sync += skid_valid.eq(1)
        # The second entry copies the input whenever it is free, so its enable is a flop and
        # not the consumer's ready (which then drives only o.valid's, o.payload's and
        # skid_valid's enables); the copy counts only from the cycle skid_valid is set.
        with m.If(~skid_valid):
            m.d.sync += skid_payload.eq(self.i.payload)
        return m

    def _elaborate_ring(self):
        m = Module()
        entries = [Signal(self._shape, reset_less=True, name=f"entry{k}") for k in range(2)]
        wr_ptr = Signal()
        rd_ptr = Signal()
        full = Signal()                 # both entries hold a transfer
        m.d.comb += [self.i.ready.eq(~full),
                     self.o.payload.eq(Mux(rd_ptr, entries[1], entries[0]))]
        # The entry at the write pointer is free whenever the slice is not full: it copies
        # the input in every such cycle (its enable is flops only), and counts from the
        # cycle a transfer is taken.
        for k, entry in enumerate(entries):
            with m.If(~full & (wr_ptr == k)):
                m.d.sync += entry.eq(self.i.payload)
        _ring_pointers(m, self.i, self.o, wr_ptr, rd_ptr, full)
        return m


class CheckedRing(wiring.Component):
    """Two-entry register slice, read through a mux, whose entries carry flags computed a
    cycle ahead.

    A consumer that may only take an entry once a check passes (the engine's row reads wait
    for writes still in flight) would otherwise compute the check on the entry's payload in
    the cycle it decides; here the check is made a cycle ahead and kept beside the entry.
    The slice has :class:`SkidBuffer`'s ``mux_output`` shape: the
    entries stay in place behind a read pointer, so the consumer's ``o.ready`` — which reads
    ``o_blocked`` — loads the pointers, the valid flags and the head's flags only, never the
    enable of a payload flop; and ``i.ready`` comes from a flop, so no slice is needed
    before it.  ``o_blocked`` is a register (the flags of the head), so a flag may also
    carry a payload bit the consumer decides on, without the payload's multiplexer.  Each
    entry's flags are computed by the consumer every cycle from the entry itself
    (``entries`` and ``head`` are outputs for that): ``block_entry[k]`` must be conservative
    for entry ``k`` as it will stand next cycle — still at the head, or now at the head
    because the head was taken this cycle.  An entry being loaded takes ``block_new``
    instead, the checks for ``i.payload``.

    Parameters
    ----------
    shape : shape-castable
        The payload.
    checks : int
        How many independent checks (flag bits) each entry carries.
    head_register : bool
        ``o_blocked`` from one register holding the head's flags, loaded with those of
        next cycle's head (the consumer's take selects them: a shorter path after the
        flops, a longer one before them).  With ``False``, each entry keeps its own flags
        and ``o_blocked`` is their 2:1 mux (for a consumer whose flags take longest to
        compute, as the unpacker's, where the take also chooses what the checks compare).

    Members
    -------
    i : ``In(stream.Signature(shape))``
        ``i.ready`` comes from a flop.
    o : ``Out(stream.Signature(shape))``
        ``o.payload`` through a 2:1 mux.
    o_blocked : ``Out(checks)``
        The checks' results for ``o.payload`` (meaningful while ``o.valid``): a flop, or a
        2:1 mux of two (``head_register``).
    entries : ``Out(data.ArrayLayout(shape, 2))``
        Both entries' payloads.
    head : ``Out(1)``
        The index of the entry on ``o``.
    block_new : ``In(checks)``
        The checks for ``i.payload``.
    block_entry : ``In(data.ArrayLayout(checks, 2))``
        The checks for ``entries[k]``.
    """

    def __init__(self, shape, checks=1, *, head_register=True):
        _check_checks(self, checks)
        if not isinstance(head_register, bool):
            self._MustUse__silence = True       # never built: no "unused" warning
            raise TypeError(f"head_register must be a bool, not {head_register!r}")
        self._shape = shape
        self._head_register = head_register
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "o_blocked": Out(checks),
            "entries": Out(data.ArrayLayout(shape, 2)),
            "head": Out(1),
            "block_new": In(checks),
            "block_entry": In(data.ArrayLayout(checks, 2)),
        })

    def elaborate(self, platform):
        m = Module()
        entries = [Signal(self._shape, reset_less=True, name=f"entry{k}") for k in range(2)]
        wr_ptr = Signal()
        full = Signal()                 # both entries hold a transfer
        # A second copy of the read pointer, stored inverted (so synthesis keeps it apart),
        # selects the entries' checks: `head` fans out to every payload bit's multiplexer.
        head_n = Signal(init=1)
        give = self.o.valid & self.o.ready
        with m.If(give):
            m.d.sync += head_n.eq(~head_n)
        m.d.comb += [self.i.ready.eq(~full),
                     self.o.payload.eq(Mux(self.head, entries[1], entries[0]))]
        # As in SkidBuffer's ring: the free entry at the write pointer copies the input in
        # every cycle the slice is not full.  Which entry that is (`~full & wr_ptr == k`) is
        # a flop per entry, loaded with the pointers' next values, so each entry's enable
        # comes straight from a flop: decoded from the pointers, it was one LUT in front of
        # the 291 enables of the receive writer's ring, the 256-bit engine's latest pin at
        # seed 2 of 28c612f (wr_ptr -> entries:CE, 5.48 ns, all but 0.5 of it routing).
        take = self.i.valid & ~full
        wr_next = wr_ptr ^ take
        full_next = (full & ~give) | (take & self.o.valid & ~give)
        loads = [Signal(init=1, name="load0"), Signal(name="load1")]
        for k in range(2):
            m.d.comb += self.entries[k].eq(entries[k])
            m.d.sync += loads[k].eq(~full_next & (wr_next == k))
            with m.If(loads[k]):
                m.d.sync += entries[k].eq(self.i.payload)
        # The head's checks are one register, loaded with those of next cycle's head: the
        # other entry's (held, or loading now) if the head goes, else its own (or, from
        # empty, the loading input's).  The consumer's decision selects a few flags here
        # and o_blocked is a flop, not a multiplexer of two.
        if self._head_register:
            at_head = Mux(head_n, self.block_entry[0], self.block_entry[1])
            behind = Mux(head_n, self.block_entry[1], self.block_entry[0])
            m.d.sync += self.o_blocked.eq(Mux(give, Mux(full, behind, self.block_new),
                                              Mux(self.o.valid, at_head, self.block_new)))
        else:
            # Each entry's flags beside it: the input's as it loads, else its own anew.
            flags = [Signal(len(self.o_blocked), name=f"flags{k}") for k in range(2)]
            m.d.comb += self.o_blocked.eq(Mux(head_n, flags[0], flags[1]))
            for k in range(2):
                with m.If(loads[k]):
                    m.d.sync += flags[k].eq(self.block_new)
                with m.Else():
                    m.d.sync += flags[k].eq(self.block_entry[k])
        _ring_pointers(m, self.i, self.o, wr_ptr, self.head, full)
        return m


class OneEntrySlice(wiring.Component):
    """Register slice with a single entry, for a stream that never needs full rate.

    Valid, payload and ready all come from flops, as through :class:`SkidBuffer`, at half
    its flops: the entry takes a transfer only while empty (``i.ready`` is ``~o.valid``),
    so at most one transfer moves every two cycles.  For wide, rare payloads (a
    configuration) where a second entry would be hundreds of flops that never help.

    Parameters
    ----------
    shape : shape-castable
        The payload.

    Members
    -------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``
    """

    def __init__(self, shape):
        self._shape = shape
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()
        # No reset on the payload (see SkidBuffer); its enable is the valid flop alone.
        payload = Signal(self._shape, reset_less=True)
        m.d.comb += [self.i.ready.eq(~self.o.valid), self.o.payload.eq(payload)]
        with m.If(~self.o.valid):
            m.d.sync += [payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m
