"""The collective engine (:mod:`.engine`, seeds 000 and 002) and the region walkers, packer
and unpacker that turn regions of device memory into packed byte streams
(:mod:`.bytestream`).
"""

from .engine import (StepAction, REGION_LAYOUT, COMMAND_LAYOUT, COMMAND_WORDS,
                     DEFAULT_QUEUE_DEPTH, DEFAULT_PACKET_BEATS, ENGINE_ERROR_LAYOUT, COUNTERS,
                     Engine)

__all__ = ["StepAction", "REGION_LAYOUT", "COMMAND_LAYOUT", "COMMAND_WORDS",
    "DEFAULT_QUEUE_DEPTH", "DEFAULT_PACKET_BEATS", "ENGINE_ERROR_LAYOUT", "COUNTERS", "Engine"]
