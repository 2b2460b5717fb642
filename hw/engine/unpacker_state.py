"""What the stages of :class:`~.unpacker.RowUnpacker` share: the number of its beat slots,
the words that travel between its stages (a chunk placed in its message on the way into the
chunk buffer, the control word of a row from the plan on), and the registers of the beat
slots that the stages read and load (:class:`_UnpackerState`).  The logic is in
:mod:`.unpacker`.
"""

from amaranth.hdl import Array, Mux, Signal
from amaranth.lib import data

from .regions import _lane_bits


# Every name here is the unpacker's own, imported by .unpacker: none is public.
__all__ = []


#: Beat slots of :class:`~.unpacker.RowUnpacker`: a chunk may need the two oldest while the
#: beats after them arrive, and a slot is refilled the cycle after it is freed.
_UNPACKER_SLOTS = 4


def _unpacker_control_layout(data_width, row_bits):
    """What travels with a row of :class:`~.unpacker.RowUnpacker` from its plan: ``rot``
    brings the chunk's bytes, picked in stream order from lane ``(lo + rot) mod W``, to lanes
    ``lo .. lo+n-1``; ``mask`` is those lanes.  The plan takes a chunk on the presence of
    its beats alone; whether the message's last beat holds all of its bytes travels
    alongside as compares made from registers (``short``, ``extra``), and the stage after
    the plan turns them into the row's fate (see :meth:`~.unpacker.RowUnpacker._judge`)."""
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
    """A chunk of :class:`~.unpacker.RowUnpacker` with its place in the message worked out on
    the way into the chunk buffer, so that the plan compares nothing wider than a beat's byte
    count:

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
    """The registers the parts of :class:`~.unpacker.RowUnpacker` share (a namespace, no
    logic)."""

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
