# Ref: seed 003 (CN111614581): small all-to-all(-v) through repack units and a control tree.
"""The repack block of a node and the aggregate exchange's memory layout.

:class:`RepackDriver` (``Device.repack``) configures the control tree of the node that hosts
the repack units (:class:`~nicoll.hw.repack.hub.RepackHub`): rank lists, start, status.
:func:`layout` places an exchange in every rank's device memory and gives each rank its
engine command (an *aggregate* command, :data:`~nicoll.hw.engine.COMMAND_LAYOUT`):

- send slots: ``Q`` slots of ``send_slot`` bytes from address 0, one per destination subgroup
  b.  Slot b's first row holds the length of the message for b (32 bits, little-endian, rest
  of the row zero); the message (:func:`~nicoll.plan.repack_message.pack_message`) follows on the
  next row.  The engine sends it, on the control tree's SEND notice, as one packet to the
  unit the notice names;
- receive slots: ``P`` slots of ``recv_slot`` bytes after them, one per source subgroup a.
  The message a unit sends from source subgroup a lands in slot a from its first byte.
"""

from dataclasses import dataclass

from nicoll.hw.engine import StepAction
from nicoll.hw.repack import OrderList, RepackError

from ..errors import NicollError

__all__ = ["RepackDriver", "RankLayout", "layout", "aggregate_command", "read_messages"]


class RepackDriver:
    """The repack block of one node.

    Build parameters read from the registers: :attr:`units` (0: none), :attr:`max_group`,
    :attr:`capacity` (bytes per unit), :attr:`max_ranks`, :attr:`packet_beats`.
    """

    def __init__(self, regs):
        self._regs = regs.repack
        caps = self._regs.CAPS.read_fields()
        self.units = caps["units"]
        self.max_group = caps["max_group"]
        self.capacity = self._regs.CAPACITY.bytes.read()
        limits = self._regs.LIMITS.read_fields()
        self.max_ranks = limits["max_ranks"]
        self.packet_beats = limits["packet_beats"]

    def status(self):
        """STATUS as a dict: busy, pending, code and last_error (as RepackError members)."""
        fields = self._regs.STATUS.read_fields()
        return {"busy": bool(fields["busy"]), "pending": bool(fields["pending"]),
                "code": _error(fields["code"]), "last_error": _error(fields["last_error"])}

    def counters(self):
        """ERRORS, CYCLES, OPS and DROPPED."""
        return {name.lower(): self._regs[name].count.read()
                for name in ("ERRORS", "CYCLES", "OPS", "DROPPED")}

    #: Bus accesses :meth:`start` takes (for a common start cycle after it).
    START_ACCESSES = 5

    def lists(self, plan, *, tries=1000):
        """Write the rank lists of ``plan`` (a :class:`~nicoll.plan.repack.RepackPlan`).  Each
        write is taken while no exchange runs: wait at most ``tries`` status reads for each."""
        if not self.units:
            raise NicollError("this build has no repack units (repack block CAPS.units = 0)")
        self._taken(tries, "a rank list write")
        for write in plan.order_writes():
            self._regs.ORDER.write_fields(index=write["index"], rank=write["rank"])
            which = "write_dst" if write["list"] == OrderList.DST else "write_src"
            self._regs.CONTROL.write_fields(**{which: 1, "end": write["end"]})
            self._taken(tries, "a rank list write")

    def start(self, n, budget, timeout):
        """Start an exchange over ranks 0 .. n-1 with a sub-matrix byte ``budget`` and a
        budget of ``timeout`` cycles for every wait (a registration, a message)."""
        self._regs.N.write_fields(n=n)
        self._regs.BUDGET.write_fields(bytes=budget)
        self._regs.TIMEOUT.write_fields(cycles=timeout)
        self._regs.CONTROL.write_fields(start=1)

    def _taken(self, tries, what):
        for _ in range(tries):
            if not self._regs.STATUS.pending.read():
                return
        raise NicollError(f"the repack control tree did not take {what} within {tries} status "
                          f"reads (an exchange still runs: {self.status()})")


def _error(code):
    try:
        return RepackError(code)
    except ValueError:
        return code


@dataclass(frozen=True)
class RankLayout:
    """One rank's part of an aggregate exchange in its device memory."""
    #: Bytes to write at address 0: the send slots.
    image: bytes
    sends: int
    send_slot: int
    recv_offset: int
    receives: int
    recv_slot: int
    #: Byte length of the message expected in each receive slot.
    recv_lengths: tuple

    @property
    def end(self):
        """One past the last byte the exchange uses."""
        return self.recv_offset + self.receives * self.recv_slot


def _round_up(value, unit):
    return -(-value // unit) * unit


def layout(plan, blocks):
    """Every rank's :class:`RankLayout` for ``plan`` (a :class:`~nicoll.plan.repack.RepackPlan`)
    and the N×N matrix of block bytes."""
    beat = plan.data_width // 8
    sources = plan.source_messages(blocks)
    destinations = plan.destination_messages(blocks)
    q, p = plan.sends_per_rank, plan.receives_per_rank
    out = []
    for r in range(plan.n):
        outgoing = [sources[(r, b)] for b in range(q)]
        incoming = [destinations[(r, a)] for a in range(p)]
        send_slot = beat + _round_up(max(map(len, outgoing)), beat)
        image = bytearray(q * send_slot)
        for b, message in enumerate(outgoing):
            image[b * send_slot:b * send_slot + 4] = len(message).to_bytes(4, "little")
            image[b * send_slot + beat:b * send_slot + beat + len(message)] = message
        recv_slot = _round_up(max(map(len, incoming)), beat)
        out.append(RankLayout(image=bytes(image), sends=q, send_slot=send_slot,
                              recv_offset=len(image), receives=p, recv_slot=recv_slot,
                              recv_lengths=tuple(map(len, incoming))))
    return out


def aggregate_command(rank_layout, hub):
    """The engine command (COMMAND_LAYOUT fields) of one rank's part, the units on node
    ``hub``."""
    lay = rank_layout
    return {
        "send": {"offset": 0, "length": lay.sends * lay.send_slot, "run": 0,
                 "stride": lay.send_slot},
        "recv": {"offset": lay.recv_offset, "length": lay.receives * lay.recv_slot, "run": 0,
                 "stride": lay.recv_slot},
        "send_to": hub, "recv_from": hub, "send_tag": lay.sends, "recv_tag": lay.receives,
        "packet_beats": 0, "action": StepAction.COPY.value, "has_send": 1, "has_recv": 1,
        "fence": 0, "barrier": 0, "aggregate": 1,
    }


def read_messages(device, rank_layout):
    """The messages a rank received, read from its receive slots."""
    lay = rank_layout
    raw = device.mem_dump(lay.recv_offset, lay.receives * lay.recv_slot)
    return [raw[a * lay.recv_slot:a * lay.recv_slot + length]
            for a, length in enumerate(lay.recv_lengths)]


