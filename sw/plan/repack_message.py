# Ref: seed 003 (CN111614581): the messages between the ranks and the repack units.
"""The bytes of a repack message (seed 003).

:func:`pack_message` / :func:`unpack_message` build and parse the exact bytes of a repack
message (``nicoll.hw.repack``, "Message format"); headers and length tables are packed with
the gateware's own layouts (:data:`~nicoll.hw.repack.HEADER_LAYOUT`,
:func:`~nicoll.hw.repack.length_table_layout`).  :func:`message_beats` and
:func:`beats_to_message` convert to and from stream beats.
"""

from dataclasses import dataclass

import numpy as np
from amaranth.lib import data

from nicoll.hw.repack import HEADER_LAYOUT, MAX_BLOCK_BYTES, length_table_layout, table_beats

from ..errors import NicollError
from .repack_checks import _check_data_width, _is_int

__all__ = ["Message", "pack_message", "unpack_message", "message_beats", "beats_to_message"]


@dataclass(frozen=True)
class Message:
    """A parsed repack message."""
    rank: int
    tag: int
    blocks: tuple


def _as_bytes(block):
    if isinstance(block, (bytes, bytearray, memoryview)):
        return bytes(block)
    if isinstance(block, np.ndarray):
        if block.ndim != 1:
            raise NicollError(f"a block must be a 1-D array, not one of shape {block.shape}")
        return np.ascontiguousarray(block).tobytes()
    raise NicollError(f"a block must be bytes or a 1-D numpy array, not {type(block).__name__}")


def pack_message(rank, tag, blocks, data_width):
    """The bytes of one repack message: header beat, length table, packed block bytes.

    Header and table beats are whole beats; the data is not padded (its final beat is
    partial), so ``len(result)`` is the message length the stream's ``keep`` bits describe.
    """
    width = _check_data_width(data_width)
    beat_bytes = width // 8
    if not _is_int(rank) or not 0 <= rank < 1 << 16:
        raise NicollError(f"rank must be an integer between 0 and 65535, not {rank!r}")
    if not _is_int(tag) or not 0 <= tag < 1 << 16:
        raise NicollError(f"tag must be an integer between 0 and 65535, not {tag!r}")
    payload = [_as_bytes(b) for b in blocks]
    if not 1 <= len(payload) <= 0xffff:
        raise NicollError(f"a message holds 1 to 65535 blocks, not {len(payload)}")
    for k, block in enumerate(payload):
        if len(block) > MAX_BLOCK_BYTES:
            raise NicollError(f"block {k} holds {len(block)} bytes, more than the "
                              f"{MAX_BLOCK_BYTES} a length-table entry can say")
    header = HEADER_LAYOUT.const({"rank": rank, "tag": tag, "count": len(payload)})
    out = bytearray(header.as_value().value.to_bytes(beat_bytes, "little"))
    table = length_table_layout(width)
    per_beat = table.length
    lengths = [len(b) for b in payload]
    for start in range(0, len(lengths), per_beat):
        chunk = lengths[start:start + per_beat]
        chunk += [0] * (per_beat - len(chunk))
        out += table.const(chunk).as_value().value.to_bytes(beat_bytes, "little")
    for block in payload:
        out += block
    return bytes(out)


def unpack_message(message, data_width):
    """Parse the bytes of a repack message into a :class:`Message`; NicollError when they do
    not follow the format (short header or table, non-zero padding, a length that disagrees
    with the data)."""
    width = _check_data_width(data_width)
    beat_bytes = width // 8
    message = bytes(message)
    if len(message) < beat_bytes:
        raise NicollError(f"a repack message starts with a {beat_bytes}-byte header beat; "
                          f"got {len(message)} bytes")
    head = int.from_bytes(message[:beat_bytes], "little")
    if head >> HEADER_LAYOUT.size:
        raise NicollError("the header beat has non-zero bytes past the header")
    header = data.Const(HEADER_LAYOUT, head)
    count = header.count
    if count == 0:
        raise NicollError("the header says the message holds no blocks")
    table = length_table_layout(width)
    n_table = table_beats(count, width)
    start = beat_bytes * (1 + n_table)
    if len(message) < start:
        raise NicollError(f"the message ends inside its length table ({count} blocks need "
                          f"{n_table} table beats)")
    lengths = []
    for t in range(n_table):
        raw = int.from_bytes(message[beat_bytes * (1 + t):beat_bytes * (2 + t)], "little")
        view = data.Const(table, raw)
        lengths += [int(view[k]) for k in range(table.length)]
    if any(lengths[count:]):
        raise NicollError(f"the length table has non-zero entries past its {count} blocks")
    lengths = lengths[:count]
    if len(message) - start != sum(lengths):
        raise NicollError(f"the length table says {sum(lengths)} data bytes, the message "
                          f"holds {len(message) - start}")
    blocks, pos = [], start
    for length in lengths:
        blocks.append(message[pos:pos + length])
        pos += length
    return Message(header.rank, header.tag, tuple(blocks))


def message_beats(message, data_width, rank=None):
    """Stream beats of a message: dicts with ``data``, ``keep``, ``last`` and ``rank`` (the
    header's rank unless given), as :func:`~nicoll.hw.repack.message_beat_layout` lays them
    out."""
    beat_bytes = _check_data_width(data_width) // 8
    if rank is None:
        rank = int.from_bytes(message[:2], "little")
    beats = []
    for pos in range(0, len(message), beat_bytes):
        chunk = message[pos:pos + beat_bytes]
        beats.append({
            "data": int.from_bytes(chunk, "little"),
            "keep": (1 << len(chunk)) - 1,
            "last": int(pos + beat_bytes >= len(message)),
            "rank": rank,
        })
    return beats


def beats_to_message(beats, data_width):
    """The bytes of a message from its beats (the bytes ``keep`` selects; ``keep`` must be a
    run of low bytes, as the units send it)."""
    beat_bytes = _check_data_width(data_width) // 8
    out = bytearray()
    for beat in beats:
        keep = int(beat["keep"])
        size = keep.bit_length()
        if keep != (1 << size) - 1:
            raise NicollError(f"keep {keep:#x} is not a run of low bytes")
        out += int(beat["data"]).to_bytes(beat_bytes, "little")[:size]
    return bytes(out)
