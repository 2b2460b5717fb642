"""Host side of the repack units (seed 003): subgroup planning, message packing, references.

- :func:`plan_subgroups` chooses dh, dv and the subgroups of an all-to-all(-v) over N ranks
  (defaults from N and the block size through the cost model below, every choice
  overridable, arbitrary rank lists allowed) and says whether repacking or direct pairwise
  exchange is the better method (:func:`direct_threshold`).
- :func:`pack_message` / :func:`unpack_message` build and parse the exact bytes of a repack
  message (``nicoll.hw.repack``, "Message format"); headers and length tables are packed with
  the gateware's own layouts (:data:`~nicoll.hw.repack.HEADER_LAYOUT`,
  :func:`~nicoll.hw.repack.length_table_layout`).  :func:`message_beats` and
  :func:`beats_to_message` convert to and from stream beats.
- :func:`reference_alltoallv` is the numpy reference of the whole exchange
  (``out[j][i] = blocks[i][j]``); :meth:`RepackPlan.source_messages` and
  :meth:`RepackPlan.destination_messages` are the exact messages into and out of the units;
  :meth:`RepackPlan.gather_results` turns received messages back into per-rank block lists.

Cost model (cycles per rank; ``docs/repack.md`` derives it)
-----------------------------------------------------------
With ``α`` the cost of one message at a rank (posting it and handling its completion, in
cycles), beats of ``B = data_width // 8`` bytes moving one per cycle, ``E = data_width // 16``
length entries per table beat, blocks of ``a`` bytes, P source and Q destination subgroups,
``M = max(P, Q)``, ``d = max(dh, dv)`` and U units:

- direct pairwise exchange: ``T_direct = (N-1)·α + (N-1)·max(1, ⌈a/B⌉)`` (N-1 messages each
  way, sends and receives overlapping);
- repack, rank side: ``T_rank = M·α + 2·(M·(1 + ⌈d/E⌉) + ⌈N·a/B⌉)`` (M messages each way, each
  with a header and a length table; the bytes cross the network twice, to the unit and
  from it, and the unit stores and forwards);
- repack, unit side: ``T_unit = min(U, P·Q)·(3 + d + dh) + ⌈P·Q/U⌉·((dh+dv)·(1 + ⌈d/E⌉) +
  2·dh·dv·⌈a/B⌉)`` (the units are started one after the other, each start costing a scan
  step, the rank lists read, the configuration and dh SEND notices; then the busiest unit's
  beats in and out);
- repack, control tree: ``T_ctrl = P·Q·(3 + d + 2·dh + dv) + N`` (it assigns one sub-matrix
  at a time and sends one notice per cycle: per sub-matrix the start above plus dh TAKEN and
  dv DELIVERED notices; then N DONE notices);
- before all of it a setup of ``4·N + P·Q`` cycles (three passes over the rank lists, the
  pair table cleared, N registrations);
- ``T_repack = 4·N + P·Q + max(T_rank, T_unit, T_ctrl)``.

Direct exchange wins once ``T_direct <= T_repack``; :func:`direct_threshold` returns the block
size up to which repacking is strictly cheaper.
"""

import math
from dataclasses import dataclass

import numpy as np
from amaranth.lib import data

from nicoll.hw.params import DATA_WIDTHS
from nicoll.hw.repack import (HEADER_LAYOUT, MAX_BLOCK_BYTES, MAX_RANKS, OrderList,
                              buffer_bytes_needed, length_table_layout, table_beats)

from .errors import NicollError

__all__ = [
    "DEFAULT_ALPHA", "DEFAULT_MAX_GROUP", "RepackPlan", "Message", "plan_subgroups",
    "cost_direct", "cost_repack", "direct_threshold", "pack_message", "unpack_message",
    "message_beats", "beats_to_message", "reference_alltoallv", "submatrix_tag",
]

#: Default per-message cost ``α`` in cycles: about 1 µs of host and NIC work per message at
#: 100 MHz, the order of an MPI small-message overhead.  Pass the figure of your system.
DEFAULT_ALPHA = 100
#: Default largest subgroup (the units' ``max_group``).
DEFAULT_MAX_GROUP = 8


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_data_width(data_width):
    if not _is_int(data_width) or int(data_width) not in DATA_WIDTHS:
        raise NicollError(f"data_width must be one of {', '.join(map(str, DATA_WIDTHS))}, "
                          f"not {data_width!r}")
    return int(data_width)


def _check_n(n):
    if not _is_int(n) or not 1 <= n <= MAX_RANKS:
        raise NicollError(f"n must be an integer between 1 and {MAX_RANKS}, not {n!r}")
    return int(n)


def submatrix_tag(a, b):
    """Tag of sub-matrix (source subgroup a, destination subgroup b), as the control tree
    gives it."""
    return (a << 8) | b


# ---- Cost model ---------------------------------------------------------------------------

def cost_direct(n, block_bytes, data_width=64, alpha=DEFAULT_ALPHA):
    """Cycles per rank of direct pairwise exchange (module docstring)."""
    beat_bytes = _check_data_width(data_width) // 8
    return (n - 1) * alpha + (n - 1) * max(1, -(-block_bytes // beat_bytes))


def cost_repack(n, block_bytes, dh, dv, data_width=64, units=1, alpha=DEFAULT_ALPHA):
    """Cycles per rank of a repacked exchange with dh×dv sub-matrices (module docstring)."""
    width = _check_data_width(data_width)
    beat_bytes = width // 8
    p, q = -(-n // dh), -(-n // dv)
    most = max(p, q)
    head = 1 + table_beats(max(dh, dv), width)
    rank_side = most * alpha + 2 * (most * head + -(-n * block_bytes // beat_bytes))
    start = 3 + max(dh, dv) + dh
    unit_side = (min(units, p * q) * start + -(-(p * q) // units) *
                 ((dh + dv) * head + 2 * dh * dv * -(-block_bytes // beat_bytes)))
    control = p * q * (start + dh + dv) + n
    return 4 * n + p * q + max(rank_side, unit_side, control)


def direct_threshold(n, dh, dv, data_width=64, units=1, alpha=DEFAULT_ALPHA):
    """The block size (bytes) up to which repacking beats direct exchange: the largest ``a``
    such that ``cost_repack < cost_direct`` for every block size from 0 to ``a``; -1 if it
    does not even at 0.  Above it use direct pairwise exchange."""
    # Both costs step at beat boundaries, so the comparison can flip back and forth near the
    # crossing; the threshold is the end of the first run, found by walking up from 0.
    a = 0
    while a <= MAX_BLOCK_BYTES and (cost_repack(n, a, dh, dv, data_width, units, alpha)
                                    < cost_direct(n, a, data_width, alpha)):
        a += 1
    return a - 1


# ---- Messages -----------------------------------------------------------------------------

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


# ---- References ---------------------------------------------------------------------------

def _check_matrix(blocks):
    n = len(blocks)
    if n == 0:
        raise NicollError("the block matrix is empty")
    for i, row in enumerate(blocks):
        if len(row) != n:
            raise NicollError(f"the block matrix must be N×N: row {i} has {len(row)} blocks, "
                              f"N = {n}")
    return n


def reference_alltoallv(blocks):
    """The whole exchange in numpy: ``out[j][i] = blocks[i][j]`` (a transpose of the block
    matrix; blocks are 1-D arrays, possibly empty)."""
    n = _check_matrix(blocks)
    return [[np.asarray(blocks[i][j]) for i in range(n)] for j in range(n)]


# ---- Planning -----------------------------------------------------------------------------

@dataclass(frozen=True)
class RepackPlan:
    """Subgroups of one exchange, the method to use, and the figures behind the choice.

    ``src_groups[a]`` is source subgroup a (ranks in block order); ``dst_groups[b]`` likewise.
    Sub-matrix (a, b) has tag :func:`submatrix_tag`.
    """
    n: int
    dh: int
    dv: int
    src_groups: tuple
    dst_groups: tuple
    data_width: int
    units: int
    alpha: int
    block_bytes: float
    method: str
    threshold: int
    cost_direct: float
    cost_repack: float

    @property
    def sends_per_rank(self):
        """Messages each rank sends to the units: one per destination subgroup."""
        return len(self.dst_groups)

    @property
    def receives_per_rank(self):
        """Messages each rank receives from the units: one per source subgroup."""
        return len(self.src_groups)

    @property
    def src_order(self):
        return [r for g in self.src_groups for r in g]

    @property
    def dst_order(self):
        return [r for g in self.dst_groups for r in g]

    def src_group_of(self, rank):
        return next(a for a, g in enumerate(self.src_groups) if rank in g)

    def dst_group_of(self, rank):
        return next(b for b, g in enumerate(self.dst_groups) if rank in g)

    def submatrices(self):
        """``[(a, b, S, D, tag)]`` for every sub-matrix."""
        return [(a, b, s, d, submatrix_tag(a, b))
                for a, s in enumerate(self.src_groups) for b, d in enumerate(self.dst_groups)]

    def order_writes(self):
        """The control tree's ``order`` writes (:data:`~nicoll.hw.repack.ORDER_WRITE_LAYOUT`
        dicts) that configure these subgroups."""
        writes = []
        for which, groups in ((OrderList.SRC, self.src_groups), (OrderList.DST, self.dst_groups)):
            index = 0
            for g in groups:
                for k, rank in enumerate(g):
                    writes.append({"list": which, "index": index, "rank": rank,
                                   "end": int(k == len(g) - 1)})
                    index += 1
        return writes

    def _lengths(self, blocks_or_lengths):
        n = _check_matrix(blocks_or_lengths)
        if n != self.n:
            raise NicollError(f"the block matrix is {n}×{n}, the plan is for N = {self.n}")
        return [[v if _is_int(v) else len(_as_bytes(v)) for v in row]
                for row in blocks_or_lengths]

    def budget(self, blocks_or_lengths):
        """Largest sub-matrix total in bytes: the control tree's ``budget``."""
        lengths = self._lengths(blocks_or_lengths)
        return max(sum(lengths[i][j] for i in s for j in d)
                   for _, _, s, d, _ in self.submatrices())

    def buffer_bytes(self, blocks_or_lengths):
        """Unit buffer bytes this exchange needs (:func:`~nicoll.hw.repack.buffer_bytes_needed`)."""
        return buffer_bytes_needed(self.budget(blocks_or_lengths), self.dh, self.data_width)

    def source_messages(self, blocks):
        """``{(rank, b): bytes}``: what each rank sends for destination subgroup b."""
        _check_matrix(blocks)
        out = {}
        for a, b, s, d, tag in self.submatrices():
            for i in s:
                out[(i, b)] = pack_message(i, tag, [blocks[i][j] for j in d], self.data_width)
        return out

    def destination_messages(self, blocks):
        """``{(rank, a): bytes}``: what each rank receives from source subgroup a — the exact
        messages the units send."""
        _check_matrix(blocks)
        out = {}
        for a, b, s, d, tag in self.submatrices():
            for j in d:
                out[(j, a)] = pack_message(j, tag, [blocks[i][j] for i in s], self.data_width)
        return out

    def gather_results(self, received, dtype=np.uint8):
        """Per-destination block lists in source-rank order from the messages each rank
        received: ``received[j]`` is a list of message bytes (any order).  Returns
        ``out[j][i]`` as 1-D arrays of ``dtype``.  NicollError for a message that is not
        addressed to j, has an unknown tag, the wrong number of blocks, or repeats a
        sub-matrix, and for a missing one."""
        if len(received) != self.n:
            raise NicollError(f"expected the messages of {self.n} ranks, got {len(received)}")
        out = []
        for j, messages in enumerate(received):
            row = [None] * self.n
            seen = set()
            b = self.dst_group_of(j)
            for raw in messages:
                msg = unpack_message(raw, self.data_width)
                a, tag_b = msg.tag >> 8, msg.tag & 0xff
                if msg.rank != j:
                    raise NicollError(f"rank {j} received a message for rank {msg.rank}")
                if a >= len(self.src_groups) or tag_b != b:
                    raise NicollError(f"rank {j} received tag {msg.tag:#06x}, which names no "
                                      f"sub-matrix of its destination subgroup {b}")
                if a in seen:
                    raise NicollError(f"rank {j} received sub-matrix ({a}, {b}) twice")
                seen.add(a)
                group = self.src_groups[a]
                if len(msg.blocks) != len(group):
                    raise NicollError(f"rank {j} received {len(msg.blocks)} blocks from source "
                                      f"subgroup {a}, which has {len(group)} ranks")
                for i, block in zip(group, msg.blocks):
                    row[i] = np.frombuffer(block, dtype=dtype).copy()
            missing = sorted(set(range(len(self.src_groups))) - seen)
            if missing:
                raise NicollError(f"rank {j} is missing the messages of source subgroups "
                                  f"{missing}")
            out.append(row)
        return out


def _check_groups(groups, n, max_group, name):
    if not isinstance(groups, (list, tuple)) or not groups:
        raise NicollError(f"{name} must be a non-empty list of rank lists, not {groups!r}")
    flat = []
    for g in groups:
        if not isinstance(g, (list, tuple)) or not g:
            raise NicollError(f"{name} must hold non-empty rank lists, not {g!r}")
        if len(g) > max_group:
            raise NicollError(f"{name} has a subgroup of {len(g)} ranks, more than "
                              f"max_group = {max_group}")
        for r in g:
            if not _is_int(r) or not 0 <= r < n:
                raise NicollError(f"{name} names rank {r!r}, outside 0..{n - 1}")
        flat += [int(r) for r in g]
    if sorted(flat) != list(range(n)):
        dup = sorted({r for r in flat if flat.count(r) > 1})
        miss = sorted(set(range(n)) - set(flat))
        raise NicollError(f"{name} must hold every rank 0..{n - 1} once: repeated {dup}, "
                          f"missing {miss}")
    return tuple(tuple(int(r) for r in g) for g in groups)


def _chunks(n, d):
    return tuple(tuple(range(s, min(s + d, n))) for s in range(0, n, d))


def _check_size(value, name, n, max_group):
    if value is None:
        return None
    if not _is_int(value) or not 1 <= value <= min(n, max_group):
        raise NicollError(f"{name} must be an integer between 1 and {min(n, max_group)} "
                          f"(N = {n}, max_group = {max_group}), not {value!r}")
    return int(value)


def plan_subgroups(n, block_bytes, dh=None, dv=None, *, src_groups=None, dst_groups=None,
                   data_width=64, max_group=DEFAULT_MAX_GROUP, capacity_bytes=None, units=1,
                   alpha=DEFAULT_ALPHA):
    """Plan an all-to-all(-v) over ``n`` ranks on repack units.

    ``block_bytes`` is the block size of an all-to-all, or the N×N matrix of block lengths of
    an all-to-all-v (numbers, or the blocks themselves).  ``dh`` / ``dv`` fix the subgroup
    sizes (the other defaults to the same); ``src_groups`` / ``dst_groups`` give arbitrary
    rank lists (each a partition of 0..n-1, subgroups of at most ``max_group`` ranks).  Left
    out, the sizes are the d in 1..min(n, max_group) with the lowest modelled cost (module
    docstring) whose sub-matrices fit ``capacity_bytes`` (when given), and the subgroups are
    consecutive ranks, the last one partial when d does not divide n.

    ``method`` of the result is ``"repack"`` when the block size (the mean length, rounded
    up, for an all-to-all-v) is at most :func:`direct_threshold`, else ``"direct"``.
    NicollError for bad arguments and for fixed sizes whose sub-matrices do not fit.
    """
    n = _check_n(n)
    width = _check_data_width(data_width)
    if not _is_int(max_group) or not 1 <= max_group <= 256:
        raise NicollError(f"max_group must be an integer between 1 and 256, not {max_group!r}")
    if not _is_int(units) or units < 1:
        raise NicollError(f"units must be a positive integer, not {units!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha < 0:
        raise NicollError(f"alpha must be a non-negative number of cycles, not {alpha!r}")
    if capacity_bytes is not None and (not _is_int(capacity_bytes) or capacity_bytes <= 0):
        raise NicollError(f"capacity_bytes must be a positive integer, not {capacity_bytes!r}")

    if _is_int(block_bytes):
        if not 0 <= block_bytes <= MAX_BLOCK_BYTES:
            raise NicollError(f"block_bytes must be between 0 and {MAX_BLOCK_BYTES}, "
                              f"not {block_bytes!r}")
        lengths = [[int(block_bytes)] * n for _ in range(n)]
    elif isinstance(block_bytes, (list, tuple, np.ndarray)):
        if _check_matrix(block_bytes) != n:
            raise NicollError(f"the block-length matrix is {len(block_bytes)}×"
                              f"{len(block_bytes)}, N = {n}")
        lengths = []
        for row in block_bytes:
            out_row = []
            for v in row:
                size = int(v) if _is_int(v) else len(_as_bytes(v))
                if not 0 <= size <= MAX_BLOCK_BYTES:
                    raise NicollError(f"block lengths must be between 0 and "
                                      f"{MAX_BLOCK_BYTES}, not {size}")
                out_row.append(size)
            lengths.append(out_row)
    else:
        raise NicollError(f"block_bytes must be a byte count or an N×N matrix of lengths, "
                          f"not {block_bytes!r}")
    mean = sum(map(sum, lengths)) / (n * n)
    a_model = math.ceil(mean)

    dh = _check_size(dh, "dh", n, max_group)
    dv = _check_size(dv, "dv", n, max_group)
    if src_groups is not None:
        src_groups = _check_groups(src_groups, n, max_group, "src_groups")
        size = max(map(len, src_groups))
        if dh is not None and dh != size:
            raise NicollError(f"dh = {dh} disagrees with src_groups, whose largest subgroup "
                              f"has {size} ranks")
        dh = size
    if dst_groups is not None:
        dst_groups = _check_groups(dst_groups, n, max_group, "dst_groups")
        size = max(map(len, dst_groups))
        if dv is not None and dv != size:
            raise NicollError(f"dv = {dv} disagrees with dst_groups, whose largest subgroup "
                              f"has {size} ranks")
        dv = size
    if dh is None and dv is not None:
        dh = dv
    if dv is None and dh is not None:
        dv = dh

    def budget_of(sg, dg):
        return max(sum(lengths[i][j] for i in s for j in d) for s in sg for d in dg)

    def fits(sg, dg, size_h):
        if capacity_bytes is None:
            return True
        return buffer_bytes_needed(budget_of(sg, dg), size_h, width) <= capacity_bytes

    if dh is None:
        best = None
        for d in range(1, min(n, max_group) + 1):
            sg, dg = _chunks(n, d), _chunks(n, d)
            if not fits(sg, dg, d):
                continue
            cost = cost_repack(n, a_model, d, d, width, units, alpha)
            if best is None or cost < best[0]:
                best = (cost, d)
        if best is None:
            raise NicollError(f"no subgroup size fits a unit buffer of {capacity_bytes} bytes "
                              f"even at dh = dv = 1; use direct exchange")
        dh = dv = best[1]
    if src_groups is None:
        src_groups = _chunks(n, dh)
    if dst_groups is None:
        dst_groups = _chunks(n, dv)
    if not fits(src_groups, dst_groups, dh):
        need = buffer_bytes_needed(budget_of(src_groups, dst_groups), dh, width)
        raise NicollError(f"a sub-matrix of this plan needs {need} bytes of unit buffer, more "
                          f"than capacity_bytes = {capacity_bytes}; choose smaller dh / dv")

    threshold = direct_threshold(n, dh, dv, width, units, alpha)
    c_direct = cost_direct(n, a_model, width, alpha)
    c_repack = cost_repack(n, a_model, dh, dv, width, units, alpha)
    return RepackPlan(
        n=n, dh=dh, dv=dv, src_groups=src_groups, dst_groups=dst_groups, data_width=width,
        units=int(units), alpha=alpha, block_bytes=mean,
        method="repack" if a_model <= threshold else "direct",
        threshold=threshold, cost_direct=c_direct, cost_repack=c_repack,
    )
