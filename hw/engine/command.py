"""The engine's command word: what a step does with what it receives, the command layout
the host packs into CMD0 .. CMD10, the error bits and the build defaults the queue and the
packetizer take.  One source for the gateware, the driver (nicoll.driver.engine packs these
layouts) and the device model."""

from amaranth.lib import data, enum

from .regions import REGION_LAYOUT

__all__ = ["StepAction", "COMMAND_LAYOUT", "COMMAND_WORDS", "DEFAULT_QUEUE_DEPTH",
           "DEFAULT_PACKET_BEATS", "ENGINE_ERROR_LAYOUT", "walker_length_bits"]


class StepAction(enum.IntEnum, shape=2):
    """What a step command does with the bytes it receives: one enum for the schedules
    (:class:`nicoll.schedule.Step`), the device model and the command word."""
    #: Store them in the receive region.
    COPY = 0
    #: Store ``local ∘ received`` (the local bytes are the left operand).
    REDUCE_LOCAL_FIRST = 1
    #: Store ``received ∘ local``.
    REDUCE_RECEIVED_FIRST = 2

    @property
    def reduces(self):
        return self is not StepAction.COPY


#: One step command, as the host packs it into CMD0 .. CMD10 (bit 32k of the layout is bit 0
#: of CMDk).  ``packet_beats`` 0 means the build's largest packet (register PACKET).
COMMAND_LAYOUT = data.StructLayout({
    "send": REGION_LAYOUT,
    "recv": REGION_LAYOUT,
    "send_to": 16,
    "recv_from": 16,
    "send_tag": 16,
    "recv_tag": 16,
    "packet_beats": 16,
    "action": StepAction,
    "has_send": 1,
    "has_recv": 1,
    "fence": 1,
    "barrier": 1,
    "aggregate": 1,
})

#: 32-bit register words a command takes.
COMMAND_WORDS = -(-COMMAND_LAYOUT.size // 32)

#: Step commands the queue holds by default (a ring over 64 ranks takes 126).
DEFAULT_QUEUE_DEPTH = 256
#: Largest payload of one data packet, in beats, by default: long enough that the header beat
#: costs under 0.5 % of the link, short enough that a control packet waits little behind it.
DEFAULT_PACKET_BEATS = 256

#: Error bits of the engine, named as the ERRORS register's fields (register map, engine
#: block), which give their meaning.
ENGINE_ERROR_LAYOUT = data.StructLayout({
    "queue_full": 1, "running": 1, "region": 1, "peer": 1, "command": 1,
    "unexpected": 1, "length": 1, "alu": 1, "protocol": 1, "lost": 1,
})


def walker_length_bits(mem_size):
    """Bits for any byte count of a region that fits a memory of ``mem_size`` bytes: the
    region walkers' counts, and the push checks' narrow sums and compares."""
    return min(mem_size.bit_length(), 32)
