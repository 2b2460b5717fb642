# Ref: IEEE Std 802.3-2018 §3.2.9 (Frame Check Sequence: CRC-32, the bits of each byte taken
#      low bit first, initial value all ones, complemented result) — as computed by zlib.crc32.
"""A frame check sequence on a link of the simulated fabric, for the simulated cluster only.

An Ethernet MAC appends a CRC-32 to every frame it sends and drops a received frame whose CRC
is wrong; the fabric's packet streams carry none, so a fault injected on the wire
(:mod:`.faults`) would reach a NIC unseen.  :class:`FcsAppend` and :class:`FcsCheck` put the
MAC's check around a link:

- :func:`link_stream` is :func:`~nicoll.hw.net.packet.packet_stream` plus a 32-bit ``fcs``
  field, meaningful on a packet's last beat;
- :class:`FcsAppend` fills ``fcs`` with :func:`packet_fcs` of the packet, with no added
  latency;
- :class:`FcsCheck` stores each packet until its last beat, then forwards it if the FCS
  matches and drops it (counting it in ``bad``) if not; a packet longer than its buffer is
  dropped and counted in ``too_long``.

The CRC is computed over the packet's kept bytes in order (:func:`packet_fcs`).  Each byte's
step of the CRC is linear over GF(2) in (state, byte), so it is built here as 32 parities of
masked bits, the masks computed once from the Python step: short to write and, in the
simulator, no expression is evaluated more than once.
"""

import functools
import operator
import zlib

from amaranth.hdl import Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..net.packet import packet_beat_layout, packet_stream


__all__ = ["link_beat_layout", "link_stream", "packet_fcs", "FcsAppend", "FcsCheck"]


_POLY = 0xEDB88320      # the CRC-32 polynomial, bit-reflected
_INIT = 0xFFFFFFFF


def link_beat_layout(data_width):
    """A beat of :func:`link_stream`: every field of
    :func:`~nicoll.hw.net.packet.packet_beat_layout` in its order, then ``fcs`` (32 bits, the
    packet's :func:`packet_fcs`, meaningful on its last beat only)."""
    fields = {name: field.shape for name, field in packet_beat_layout(data_width)}
    return data.StructLayout({**fields, "fcs": 32})


def link_stream(data_width):
    """A :class:`amaranth.lib.stream.Signature` of :func:`link_beat_layout` beats."""
    return stream.Signature(link_beat_layout(data_width))


def packet_fcs(beats):
    """The FCS of one packet given as ``(data, keep)`` pairs of integers, one per beat:
    ``zlib.crc32`` of the kept bytes (byte ``i`` of a beat is data bits ``8*i .. 8*i+7``,
    kept where bit ``i`` of ``keep`` is set), in order."""
    kept = bytearray()
    for beat_data, keep in beats:
        kept += bytes(beat_data >> 8 * i & 0xFF for i in range(keep.bit_length())
                      if keep >> i & 1)
    return zlib.crc32(kept)


def _crc_byte(crc, byte):
    """One byte of the reflected CRC-32, without the initial value or final complement."""
    crc ^= byte
    for _ in range(8):
        crc = (crc >> 1) ^ (_POLY if crc & 1 else 0)
    return crc


@functools.cache
def _zeros_table(nbytes):
    """Entry ``256 * c + b``: the CRC state, from 0, after byte ``b`` then ``c`` zero bytes,
    for ``c`` below ``nbytes``."""
    rows = [[_crc_byte(0, b) for b in range(256)]]
    for _ in range(nbytes - 1):
        rows.append([_crc_byte(x, 0) for x in rows[-1]])
    return tuple(x for row in rows for x in row)


class _CrcBeat(Elaboratable):
    """The CRC state ``next`` after the kept bytes of one beat, from ``state``.

    The step of a byte is linear over GF(2) in (state, byte), and a byte not kept is no step,
    so the beat's result is a sum of independent parts, each one lookup in a table of
    :func:`_zeros_table` (a memory read combinationally: simulation-only gateware):

    - byte ``i``, if kept, contributes as if it came first from state 0 and the kept bytes
      after it (``c`` of them) were zeros: entry ``(c, byte)``;
    - with ``n`` bytes kept, the state's bytes from ``n`` on are shifted down ``n`` bytes,
      and its byte ``k`` below ``n`` contributes as a data byte with ``n - k - 1`` after it.

    Built this way rather than as a chain of byte steps, because the Amaranth simulator runs
    a module's combinational logic once per delta cycle a change ripples through: at 32
    bytes a beat, a chain made this block's simulations about seven times slower."""

    def __init__(self, state, data, keep):
        self.state, self.data, self.keep = state, data, keep
        self.next = Signal(32)

    def elaborate(self, platform):
        m = Module()
        nbytes = len(self.keep)
        m.submodules.table = table = Memory(shape=32, depth=256 * nbytes,
                                            init=_zeros_table(nbytes))

        def lookup(byte, zeros, enable):
            port = table.read_port(domain="comb")
            m.d.comb += port.addr.eq(Mux(enable, Cat(byte, zeros), 0))
            return Mux(enable, port.data, 0)

        # after[i]: kept bytes after byte i; kept: all of them.  Signals, each a balanced sum
        # of keep bits, so the simulator compiles and evaluates each once.
        after = [Signal(range(nbytes + 1), name=f"after{i}") for i in range(nbytes)]
        kept = Signal(range(nbytes + 1))
        for count, bits in zip([*after, kept], [*(self.keep[i + 1:] for i in range(nbytes)),
                                                self.keep]):
            m.d.comb += count.eq(_bit_count(bits))
        parts = [self.state >> (kept * 8)]
        for k in range(4):
            parts.append(lookup(self.state[8 * k:8 * k + 8], kept - k - 1, kept > k))
        for i in range(nbytes):
            parts.append(lookup(self.data[8 * i:8 * i + 8], after[i], self.keep[i]))
        m.d.comb += self.next.eq(functools.reduce(operator.xor, parts))
        return m


def _bit_count(bits):
    """The number of set bits of ``bits``, as a balanced tree of additions."""
    if len(bits) <= 1:
        return bits if len(bits) else Const(0, 1)
    half = len(bits) // 2
    return _bit_count(bits[:half]) + _bit_count(bits[half:])


def _crc_beat(m, crc, beat_data, keep, name):
    """The CRC state after folding the kept bytes of one beat into ``crc``."""
    m.submodules[f"{name}_crc"] = step = _CrcBeat(crc, beat_data, keep)
    return step.next


def _layouts(component, data_width):
    """``packet_beat_layout`` and ``link_beat_layout`` at ``data_width``, which they check."""
    try:
        return packet_beat_layout(data_width), link_beat_layout(data_width)
    except (TypeError, ValueError):
        component._MustUse__silence = True      # never built: no "unused" warning
        raise


def _check_beats(component, what, value):
    if not isinstance(value, int) or isinstance(value, bool):
        component._MustUse__silence = True
        raise TypeError(f"{what} must be an integer number of beats, not {value!r}")
    if value < 1:
        component._MustUse__silence = True
        raise ValueError(f"{what} must be a positive number of beats, not {value!r}")


class FcsAppend(wiring.Component):
    """Appends each packet's FCS on its last beat: a wire with a CRC beside it.

    ``o`` is ``i`` in the same cycle (valid, ready and every field), and ``o.payload.fcs`` is
    the CRC of the packet's kept bytes up to and including this beat, complemented: on the
    last beat, :func:`packet_fcs` of the packet.  A register holds the CRC of the beats taken
    so far; the current beat is folded in combinationally (simulation-only gateware: depth
    does not matter).

    Members
    -------
    i : ``In(packet_stream(data_width))``
    o : ``Out(link_stream(data_width))``
    """

    def __init__(self, data_width):
        self._packet_layout, _ = _layouts(self, data_width)
        super().__init__({
            "i": In(packet_stream(data_width)),
            "o": Out(link_stream(data_width)),
        })

    def elaborate(self, platform):
        m = Module()
        crc = Signal(32, init=_INIT)            # after the packet's beats taken so far
        after = _crc_beat(m, crc, self.i.payload.data, self.i.payload.keep, "append")
        m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready),
                     self.o.payload.fcs.eq(~after)]
        for name, _ in self._packet_layout:
            m.d.comb += self.o.payload[name].eq(self.i.payload[name])
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += crc.eq(Mux(self.i.payload.last, _INIT, after))
        return m


class FcsCheck(wiring.Component):
    """Forwards the packets whose FCS is right, whole; drops the others.

    Store and forward: each beat taken goes into a ring of ``2 * max_packet_beats`` entries
    (a memory read combinationally); at the packet's last beat the CRC of its kept bytes is
    compared with the beat's ``fcs``.  A good packet is committed — its beats become visible
    to ``o``, which sends every committed beat in order — and a bad one is discarded by
    moving the write pointer back to its first beat.  The ring holds one packet draining and
    the next arriving, so back-to-back packets of one length move one beat a cycle after the
    first packet's latency, and with an always-ready sink ``i.ready`` never drops.

    A packet longer than ``max_packet_beats`` is discarded at its ``max_packet_beats + 1``-th
    beat, counted in ``too_long``, and the rest of it is taken and thrown away up to its last
    beat.  ``i.ready`` depends on registers only (room in the ring, or a packet being thrown
    away); ``o.valid`` is "a committed beat is held".  Neither waits on the other, so
    backpressure on ``o`` only fills the ring.

    Members
    -------
    i : ``In(link_stream(data_width))``
    o : ``Out(packet_stream(data_width))``
    bad : ``Out(32)``
        Packets dropped for a wrong FCS (wraps).
    too_long : ``Out(32)``
        Packets dropped for being longer than ``max_packet_beats`` (wraps).
    """

    def __init__(self, data_width, *, max_packet_beats):
        _check_beats(self, "max_packet_beats", max_packet_beats)
        self._packet_layout, _ = _layouts(self, data_width)
        self._max_packet_beats = max_packet_beats
        super().__init__({
            "i": In(link_stream(data_width)),
            "o": Out(packet_stream(data_width)),
            "bad": Out(32),
            "too_long": Out(32),
        })

    @property
    def max_packet_beats(self):
        return self._max_packet_beats

    @property
    def depth(self):
        """Entries of the ring."""
        return 2 * self._max_packet_beats

    def elaborate(self, platform):
        m = Module()
        most, depth = self._max_packet_beats, self.depth
        ring = Memory(shape=self._packet_layout, depth=depth, init=[])
        m.submodules.ring = ring
        wr = ring.write_port()
        rd = ring.read_port(domain="comb")
        wr_ptr = Signal(range(depth))           # where the next beat taken goes
        start = Signal(range(depth))            # the first beat of the packet being taken
        rd_ptr = Signal(range(depth))
        held = Signal(range(depth + 1))         # committed beats not yet sent
        length = Signal(range(most + 1))        # beats of the packet being taken, so far
        overflow = Signal()                     # throwing away the rest of a long packet
        crc = Signal(32, init=_INIT)
        beat = self.i.payload
        after = _crc_beat(m, crc, beat.data, beat.keep, "check")

        swallow = overflow | (length == most)   # the beat is not stored
        m.d.comb += self.i.ready.eq(swallow | (held + length < depth))
        take = self.i.valid & self.i.ready
        write = take & ~swallow
        good = ~after == beat.fcs
        m.d.comb += [wr.addr.eq(wr_ptr), wr.en.eq(write)]
        for name, _ in self._packet_layout:
            m.d.comb += wr.data[name].eq(beat[name])

        give = self.o.valid & self.o.ready
        m.d.comb += [rd.addr.eq(rd_ptr), self.o.payload.eq(rd.data), self.o.valid.eq(held != 0)]
        with m.If(give):
            m.d.sync += rd_ptr.eq(_next(rd_ptr, depth))
        commit = write & beat.last & good
        m.d.sync += held.eq(held - give + Mux(commit, length + 1, 0))

        with m.If(write & beat.last):
            m.d.sync += length.eq(0)
            with m.If(good):
                m.d.sync += [wr_ptr.eq(_next(wr_ptr, depth)), start.eq(_next(wr_ptr, depth))]
            with m.Else():
                m.d.sync += [wr_ptr.eq(start), self.bad.eq(self.bad + 1)]
        with m.Elif(write):
            m.d.sync += [wr_ptr.eq(_next(wr_ptr, depth)), length.eq(length + 1)]
        with m.Elif(take):
            # A beat past the limit: discard what is stored, count once, swallow to the end.
            with m.If(~overflow):
                m.d.sync += [wr_ptr.eq(start), length.eq(0),
                             self.too_long.eq(self.too_long + 1)]
            m.d.sync += overflow.eq(~beat.last)
        with m.If(take & (beat.last | swallow)):
            m.d.sync += crc.eq(_INIT)
        with m.Elif(write):
            m.d.sync += crc.eq(after)
        return m


def _next(pointer, depth):
    """``pointer + 1`` around a ring of ``depth`` entries."""
    return Mux(pointer == depth - 1, 0, pointer + 1)
