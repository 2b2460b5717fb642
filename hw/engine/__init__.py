"""The collective engine (:mod:`.engine`, seeds 000 and 002), small components joined: its
command word (:mod:`.command`), its command queue with the push-time checks (:mod:`.queue`),
its state machine (:mod:`.control`), the transmit half (:mod:`.transmit`, with
:mod:`.packetizer`), the receive half (:mod:`.receive`, with :mod:`.parser` and the row writer
:mod:`.writer`; :mod:`.rows` the read stages' row checks), the aggregate command's sender
(:mod:`.aggregate`), and the region walkers, packer and unpacker that turn regions of device
memory into packed byte streams (:mod:`.regions` their layouts and checks, :mod:`.walker`,
:mod:`.packer`, :mod:`.unpacker`).
"""

from .regions import REGION_LAYOUT
from .command import (COMMAND_LAYOUT, COMMAND_WORDS, DEFAULT_PACKET_BEATS, DEFAULT_QUEUE_DEPTH,
                      ENGINE_ERROR_LAYOUT, StepAction)
from .engine import COUNTERS, Engine
from .queue import CommandQueue

__all__ = ["StepAction", "REGION_LAYOUT", "COMMAND_LAYOUT", "COMMAND_WORDS", "DEFAULT_QUEUE_DEPTH",
           "DEFAULT_PACKET_BEATS", "ENGINE_ERROR_LAYOUT", "COUNTERS", "Engine", "CommandQueue"]
