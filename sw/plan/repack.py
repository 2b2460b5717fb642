# Ref: seed 003 (CN111614581): an all-to-all as a transpose of the block matrix through repack
#      units, over source and destination subgroups.
"""Host side of the repack units (seed 003): subgroup planning.

- :func:`plan_subgroups` chooses dh, dv and the subgroups of an all-to-all(-v) over N ranks
  (defaults from N and the block size through the cost model of :mod:`nicoll.plan.repack_cost`,
  every choice overridable, arbitrary rank lists allowed) and says whether repacking or
  direct pairwise exchange is the better method
  (:func:`~nicoll.plan.repack_cost.direct_threshold`).
- :meth:`RepackPlan.source_messages` and :meth:`RepackPlan.destination_messages` are the
  exact messages into and out of the units; :meth:`RepackPlan.gather_results` turns received
  messages back into per-rank block lists.

The rest of the host side, whose names this module gives too:

- :mod:`nicoll.plan.repack_message`: :func:`pack_message` / :func:`unpack_message` build and
  parse the exact bytes of a repack message; :func:`message_beats` and
  :func:`beats_to_message` convert to and from stream beats.
- :mod:`nicoll.plan.repack_cost`: the cost model (:func:`cost_direct`, :func:`cost_repack`,
  :func:`direct_threshold`).
- :mod:`nicoll.plan.repack_reference`: :func:`reference_alltoallv`, the numpy reference of the
  whole exchange (``out[j][i] = blocks[i][j]``).

The argument checks they share are in :mod:`nicoll.plan.repack_checks`.
"""

import math
from dataclasses import dataclass

import numpy as np

from nicoll.hw.repack import (MAX_BLOCK_BYTES, MAX_RANKS, OrderList, RepackNoticeKind,
                              buffer_bytes_needed)

from ..errors import NicollError
from ..fabric import NOMINAL_MHZ, resolve_fabric
from .repack_checks import _check_data_width, _check_matrix, _is_int
from .repack_cost import DEFAULT_ALPHA, cost_direct, cost_repack, direct_threshold
from .repack_message import (Message, _as_bytes, beats_to_message, message_beats, pack_message,
                             unpack_message)
from .repack_reference import reference_alltoallv

__all__ = [
    "DEFAULT_ALPHA", "DEFAULT_MAX_GROUP", "RepackPlan", "Message", "plan_subgroups", "notice_counts",
    "cost_direct", "cost_repack", "direct_threshold", "pack_message", "unpack_message",
    "message_beats", "beats_to_message", "reference_alltoallv", "submatrix_tag",
]

#: Default largest subgroup (the units' ``max_group``).
DEFAULT_MAX_GROUP = 8


def _check_n(n):
    if not _is_int(n) or not 1 <= n <= MAX_RANKS:
        raise NicollError(f"n must be an integer between 1 and {MAX_RANKS}, not {n!r}")
    return int(n)


def submatrix_tag(a, b):
    """Tag of sub-matrix (source subgroup a, destination subgroup b), as the control tree
    gives it."""
    return (a << 8) | b


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

    def notices_expected(self):
        """``{kind: [notices per rank]}`` a whole exchange sends (Ref: seed 003, steps
        7.1-7.6): SEND and TAKEN once per destination subgroup, DELIVERED once per source
        subgroup, DONE once."""
        n = self.n
        return {RepackNoticeKind.SEND: [self.sends_per_rank] * n,
                RepackNoticeKind.TAKEN: [self.sends_per_rank] * n,
                RepackNoticeKind.DELIVERED: [self.receives_per_rank] * n,
                RepackNoticeKind.DONE: [1] * n}

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


def notice_counts(notices, n):
    """``{kind: [count per rank]}`` of ``notices``, decoded notices (dicts with ``"kind"`` and
    ``"rank"``) of ``n`` ranks."""
    counts = {kind: [0] * n for kind in RepackNoticeKind}
    for notice in notices:
        counts[RepackNoticeKind(notice["kind"])][notice["rank"]] += 1
    return counts


def _groups_and_size(groups, size, n, max_group, groups_name, size_name):
    """Explicit subgroups checked, and the size they imply (their largest), which must agree
    with ``size`` where both are given; ``(None, size)`` without subgroups."""
    if groups is None:
        return None, size
    groups = _check_groups(groups, n, max_group, groups_name)
    largest = max(map(len, groups))
    if size is not None and size != largest:
        raise NicollError(f"{size_name} = {size} disagrees with {groups_name}, whose largest "
                          f"subgroup has {largest} ranks")
    return groups, largest


def plan_subgroups(n, block_bytes, dh=None, dv=None, *, src_groups=None, dst_groups=None,
                   data_width=64, max_group=DEFAULT_MAX_GROUP, capacity_bytes=None, units=1,
                   alpha=DEFAULT_ALPHA, fabric=None, clock_mhz=NOMINAL_MHZ):
    """Plan an all-to-all(-v) over ``n`` ranks on repack units.

    ``block_bytes`` is the block size of an all-to-all, or the N×N matrix of block lengths of
    an all-to-all-v (numbers, or the blocks themselves).  ``dh`` / ``dv`` fix the subgroup
    sizes (the other defaults to the same); ``src_groups`` / ``dst_groups`` give arbitrary
    rank lists (each a partition of 0..n-1, subgroups of at most ``max_group`` ranks).  Left
    out, the sizes are the d in 1..min(n, max_group) with the lowest modelled cost
    (:mod:`nicoll.plan.repack_cost`) whose sub-matrices fit ``capacity_bytes`` (when given),
    and the subgroups are consecutive ranks, the last one partial when d does not divide n.

    ``method`` of the result is ``"repack"`` when the block size (the mean length, rounded
    up, for an all-to-all-v) is at most :func:`direct_threshold`, else ``"direct"``.
    ``fabric`` and ``clock_mhz`` are the network the costs are modelled on (``"ideal"`` by
    default; :mod:`nicoll.plan.repack_cost`).
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
    network = dict(fabric=resolve_fabric(fabric), clock_mhz=clock_mhz)
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
    src_groups, dh = _groups_and_size(src_groups, dh, n, max_group, "src_groups", "dh")
    dst_groups, dv = _groups_and_size(dst_groups, dv, n, max_group, "dst_groups", "dv")
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
            cost = cost_repack(n, a_model, d, d, width, units, alpha, **network)
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

    threshold = direct_threshold(n, dh, dv, width, units, alpha, **network)
    c_direct = cost_direct(n, a_model, width, alpha, **network)
    c_repack = cost_repack(n, a_model, dh, dv, width, units, alpha, **network)
    return RepackPlan(
        n=n, dh=dh, dv=dv, src_groups=src_groups, dst_groups=dst_groups, data_width=width,
        units=int(units), alpha=alpha, block_bytes=mean,
        method="repack" if a_model <= threshold else "direct",
        threshold=threshold, cost_direct=c_direct, cost_repack=c_repack,
    )
