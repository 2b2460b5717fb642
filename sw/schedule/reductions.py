# Ref: seed 000 (CN101206588): pipelined recursive halving, figs. 3, 6, 7, 8.
"""The reduction collectives (``allreduce``, ``reduce``, ``reduce_scatter``, ``allgather``),
their registry of algorithms, and the compilers of recursive halving (seed 000) and the
ring; the tree compilers are in :mod:`nicoll.schedule.trees`.
"""

import numpy as np

from nicoll.hw.engine import StepAction

from ..errors import NicollError
from .arguments import (Compiler, _algorithm, _counts, _element_type, _nodes, _reduction_type, _root,
                        _segments, split_counts)
from .builder import _Builder, _pieces, _place
from .step_format import Plan, _integer
from .trees import _compile_prt, _compile_tree

__all__ = [
    "REDUCTION_COMPILERS", "REDUCTION_ALGORITHMS", "DEFAULT_SLICES", "DEFAULT_SEGMENTS",
    "allreduce", "reduce", "reduce_scatter", "allgather",
]

#: Segments per recursive-halving iteration (seed 000, fig. 8: slice[i] = 2).
DEFAULT_SLICES = 2
#: Segments of every other step that moves data of a reduction.
DEFAULT_SEGMENTS = 2
#: The reduction collectives, for the options an algorithm takes in every one of them.
_COLLECTIVES = ("allreduce", "reduce", "reduce_scatter", "allgather")


# -- reductions: recursive halving (seed 000) -------------------------------------------------

def _bit_reverse(value, bits):
    out = 0
    for _ in range(bits):
        out, value = (out << 1) | (value & 1), value >> 1
    return out


class _Halving:
    """Recursive halving over p = 2^levels ranks and p leaves laid out in buffer order.

    ``held[q][i]`` is the leaf range ``(lo, hi)`` rank q holds before iteration i (mask
    ``1 << i``) of the distribution; ``held[q][levels]`` is the one leaf it ends with,
    leaf ``bit_reverse(q)``.
    """

    def __init__(self, builder, leaf_sizes):
        self.b = builder
        self.p = len(leaf_sizes)
        self.levels = self.p.bit_length() - 1
        self.offsets = [0]
        for size in leaf_sizes:
            self.offsets.append(self.offsets[-1] + size)
        self.held = []
        for q in range(self.p):
            lo, hi = 0, self.p
            ranges = [(lo, hi)]
            for i in range(self.levels):
                mid = (lo + hi) // 2
                # Ref: seed 000, fig. 8 (operations 804-808, 828-832): rank & mask picks the
                # role; the lower rank keeps the first half and sends the second.
                lo, hi = (mid, hi) if q & (1 << i) else (lo, mid)
                ranges.append((lo, hi))
            self.held.append(ranges)

    def region(self, leaves):
        lo, hi = leaves
        return self.b.region(self.offsets[lo], self.offsets[hi] - self.offsets[lo])

    def distribute(self, slices):
        """Reduce-scatter: log2 p iterations, partner = rank XOR mask, mask doubling."""
        for i in range(self.levels):
            mask = 1 << i
            for low in range(self.p):
                if low & mask:
                    continue
                high = low | mask
                lo, hi = self.held[low][i]
                mid = (lo + hi) // 2
                # Both operand orders make (lower ranks' part) ∘ (higher ranks' part), so the
                # partners compute the same bits and N = 2^k gives the pairwise tree.
                to_high = self.b.transfer(low, high, self.region((mid, hi)),
                                          action=StepAction.REDUCE_RECEIVED_FIRST)
                to_low = self.b.transfer(high, low, self.region((lo, mid)),
                                         action=StepAction.REDUCE_LOCAL_FIRST)
                self.b.exchange(low, high, to_high, to_low, slices[i])

    def allgather_descending(self, segments):
        """Recursive doubling with the masks in reverse order, so every message is one range.

        Seed 000's collection pairs ranks at distance 1 first; after its distribution leaf
        bit_reverse(q) sits at rank q, so pairing at distance 1 first would join leaves that
        are not adjacent.  Undoing the distribution's iterations last-first joins adjacent
        ranges every time, with the same message count and bytes.
        """
        for i in reversed(range(self.levels)):
            mask = 1 << i
            for low in range(self.p):
                if not low & mask:
                    high = low | mask
                    self.b.exchange(low, high,
                                    self.b.transfer(low, high, self.region(self.held[low][i + 1])),
                                    self.b.transfer(high, low, self.region(self.held[high][i + 1])),
                                    segments)

    def gather(self, root, segments):
        """Binomial gather of every leaf to ``root`` (< p), masks in reverse order."""
        for i in reversed(range(self.levels)):
            mask = 1 << i
            for q in range(self.p):
                v = q ^ root
                if mask <= v < 2 * mask:
                    transfer = self.b.transfer(q, q ^ mask, self.region(self.held[q][i + 1]))
                    self.b.step(q, out=transfer, segments=segments)
                    self.b.step(q ^ mask, inc=transfer, segments=segments)


def _fold_in(builder, p, nodes, send_region, segments, action=StepAction.REDUCE_LOCAL_FIRST,
             recv_region=None):
    # Ranks p .. N-1 hand their data to rank - p before the power-of-two part starts
    # (seed 000: "unpaired ranks ... fold in first").
    for extra in range(p, nodes):
        region = send_region(extra)
        transfer = builder.transfer(extra, extra - p, region,
                                    recv_region(extra) if recv_region else None, action)
        builder.step(extra, out=transfer, segments=segments)
        builder.step(extra - p, inc=transfer, segments=segments)


def _fold_out(builder, p, nodes, region, segments):
    for extra in range(p, nodes):
        transfer = builder.transfer(extra - p, extra, region(extra))
        builder.step(extra - p, out=transfer, segments=segments)
        builder.step(extra, inc=transfer, segments=segments)


def _power_of_two_below(nodes):
    return 1 << (nodes.bit_length() - 1)


def _slices(slices, levels, default):
    """Per-iteration segment counts of recursive halving (seed 000, fig. 8: slice[i])."""
    if slices is None:
        slices = default
    if isinstance(slices, (int, np.integer)) and not isinstance(slices, (bool, np.bool_)):
        return [_integer("slices", slices, 1)] * levels
    if isinstance(slices, (str, bytes)) or not hasattr(slices, "__len__"):
        raise NicollError(f"slices must be an integer or one integer per iteration, not {slices!r}")
    if len(slices) != levels:
        raise NicollError(f"slices must give one segment count per recursive-halving iteration "
                          f"({levels}), not {len(slices)}: {list(slices)!r}")
    return [_integer(f"slices[{i}]", s, 1) for i, s in enumerate(slices)]


def _compile_halving(b, collective, nodes, count, chunks, chunk_at, root, segments, options, *,
                     slices=None):
    p = _power_of_two_below(nodes)
    levels = p.bit_length() - 1
    whole = b.region(0, count)
    if collective == "allgather":
        # Leaf q holds the chunks of ranks q and q + p, side by side.
        order = [c for q in range(p) for c in ((q, q + p) if q + p < nodes else (q,))]
        _place(chunk_at, chunks, order)
        _fold_in(b, p, nodes, lambda extra: b.region(chunk_at[extra], chunks[extra]), segments,
                 action=StepAction.COPY)
        # Recursive doubling, seed 000's collection order: distance 1, 2, 4, ...
        leaf_at = [chunk_at[q] for q in range(p)] + [count]
        for i in range(levels):
            mask = 1 << i
            for low in range(p):
                if low & mask:
                    continue
                high = low | mask
                lo, hi = low & ~(mask - 1), (low & ~(mask - 1)) + mask
                a = b.region(leaf_at[lo], leaf_at[hi] - leaf_at[lo])
                c = b.region(leaf_at[hi], leaf_at[hi + mask] - leaf_at[hi])
                b.exchange(low, high, b.transfer(low, high, a), b.transfer(high, low, c), segments)
        _fold_out(b, p, nodes, lambda extra: whole, segments)
        return
    slices = _slices(slices, levels, DEFAULT_SLICES)
    options.append(("slices", tuple(slices)))
    if collective == "reduce_scatter":
        # Rank q ends the distribution with leaf bit_reverse(q); put there the chunks it
        # and its folded partner q + p must get, so every message is one range.
        order = []
        for t in range(p):
            q = _bit_reverse(t, levels)
            order.extend((q, q + p) if q + p < nodes else (q,))
        _place(chunk_at, chunks, order)
        leaf_sizes = [chunks[q] + (chunks[q + p] if q + p < nodes else 0)
                      for q in (_bit_reverse(t, levels) for t in range(p))]
    else:
        leaf_sizes = split_counts(count, p)
    halving = _Halving(b, leaf_sizes)
    _fold_in(b, p, nodes, lambda extra: whole, segments)
    halving.distribute(slices)
    if collective == "allreduce":
        halving.allgather_descending(segments)
        _fold_out(b, p, nodes, lambda extra: whole, segments)
    elif collective == "reduce":
        home = root if root < p else root - p
        halving.gather(home, segments)
        if root >= p:
            transfer = b.transfer(home, root, whole)
            b.step(home, out=transfer, segments=segments)
            b.step(root, inc=transfer, segments=segments)
    else:
        _fold_out(b, p, nodes, lambda extra: b.region(chunk_at[extra], chunks[extra]), segments)


# -- reductions: the ring ----------------------------------------------------------------------

def _compile_ring(b, collective, nodes, count, chunks, chunk_at, root, segments, options):
    def chunk(c):
        return b.region(chunk_at[c % nodes], chunks[c % nodes])

    if collective != "allgather":
        # Reduce-scatter: at step k rank r passes chunk r-k-1 on to r+1, which folds its own
        # data in; chunk c starts at rank c+1 and is complete at rank c.
        for k in range(nodes - 1):
            moves = [b.transfer(r, (r + 1) % nodes, chunk(r - k - 1),
                                action=StepAction.REDUCE_RECEIVED_FIRST) for r in range(nodes)]
            for r in range(nodes):
                b.step(r, out=moves[r], inc=moves[r - 1], segments=segments)
    if collective in ("allreduce", "allgather"):
        # Allgather: at step k rank r passes chunk r-k on to r+1.
        for k in range(nodes - 1):
            moves = [b.transfer(r, (r + 1) % nodes, chunk(r - k)) for r in range(nodes)]
            for r in range(nodes):
                b.step(r, out=moves[r], inc=moves[r - 1], segments=segments)
    elif collective == "reduce":
        for k in range(1, nodes):
            source = (root + k) % nodes
            transfer = b.transfer(source, root, chunk(source))
            b.step(source, out=transfer, segments=segments)
            b.step(root, inc=transfer, segments=segments)


# -- reductions: the four collectives over four algorithms ------------------------------------

#: The algorithms of the reduction collectives by name, in the order of
#: :data:`REDUCTION_ALGORITHMS`.  ``_reduction`` calls each one's ``compile(b, collective,
#: nodes, count, chunks, chunk_at, root, segments, options, **taken)``: it emits the steps into
#: the builder ``b``, may lay the chunks out anew in ``chunk_at`` (elements), and appends the
#: options it resolves to ``options``.
REDUCTION_COMPILERS = {
    # Allgather by recursive halving is recursive doubling: no distribution to slice.
    "recursive_halving": Compiler(_compile_halving, {"slices": ("allreduce", "reduce", "reduce_scatter")}),
    "ring": Compiler(_compile_ring),
    "tree": Compiler(_compile_tree, {"shape": _COLLECTIVES}),
    "prt": Compiler(_compile_prt, {"shape": _COLLECTIVES, "slices": _COLLECTIVES}),
}
#: Algorithms of the four reduction collectives.
REDUCTION_ALGORITHMS = tuple(REDUCTION_COMPILERS)


def _reduction(collective, nodes, count, dtype, op, algorithm, root=0, counts=None,
               slices=None, segments=None, shape=None):
    """Every reduction collective: checks, layouts and the algorithm's steps."""
    nodes = _nodes(nodes)
    algorithm = _algorithm(algorithm, REDUCTION_COMPILERS, "recursive_halving")
    compiler = REDUCTION_COMPILERS[algorithm]
    if collective == "allgather":
        op_name, dtype = None, _element_type(dtype)
    else:
        op_name, dtype = _reduction_type(op, dtype)
    itemsize = dtype.itemsize
    taken = compiler.taken_options(algorithm, collective, slices=slices, shape=shape)
    segments = _segments(DEFAULT_SEGMENTS if segments is None else segments)
    root = _root(root, nodes)
    if collective == "allgather":
        chunks = counts
        count = sum(chunks)
    elif collective == "reduce_scatter":
        count = _integer("count", count, 0)
        chunks = split_counts(count, nodes) if counts is None else _counts(counts, nodes, count)
    else:
        count = _integer("count", count, 0)
        chunks = split_counts(count, nodes)
    b = _Builder(nodes, itemsize)
    options = [("segments", segments)]
    if collective == "reduce":
        options.append(("root", root))
    if collective in ("reduce_scatter", "allgather"):
        options.append(("counts", tuple(chunks)))

    # Chunk c's place in the buffer (elements); by default chunks sit in rank order.
    chunk_at = [sum(chunks[:c]) for c in range(nodes)]
    data_at = list(chunk_at)

    compiler.compile(b, collective, nodes, count, chunks, chunk_at, root, segments, options, **taken)

    loads, results, outputs = [], [], []
    for r in range(nodes):
        if collective == "allgather":
            loads.append(_pieces(itemsize, [(0, chunk_at[r], chunks[r])]))
            results.append(_pieces(itemsize, [(data_at[c], chunk_at[c], chunks[c]) for c in range(nodes)]))
            outputs.append(count)
        elif collective == "reduce_scatter":
            loads.append(_pieces(itemsize, [(data_at[c], chunk_at[c], chunks[c]) for c in range(nodes)]))
            results.append(_pieces(itemsize, [(0, chunk_at[r], chunks[r])]))
            outputs.append(chunks[r])
        else:
            loads.append(_pieces(itemsize, [(0, 0, count)]))
            gets = collective == "allreduce" or r == root
            results.append(_pieces(itemsize, [(0, 0, count)]) if gets else ())
            outputs.append(count if gets else None)
    inputs = [chunks[r] if collective == "allgather" else count for r in range(nodes)]
    schedules = b.schedules(count * itemsize, loads, results)
    return Plan(collective, algorithm, op_name, dtype, inputs, outputs, schedules, tuple(options))


def allreduce(nodes, count, dtype, op="sum", algorithm="recursive_halving", *, slices=None,
              segments=None, shape=None):
    """Every rank gets the reduction of every rank's ``count`` elements.

    :param slices: recursive halving: segments per distribution iteration (an integer or
        one per iteration; default 2); prt: the number of pipeline slices (default 4).
    :param segments: segments of every other step (default 2).
    :param shape: tree and prt: a shape of :data:`TREE_SHAPES` or a parent list (rooted
        at rank 0).
    """
    return _reduction("allreduce", nodes, count, dtype, op, algorithm, slices=slices,
                      segments=segments, shape=shape)


def reduce(nodes, count, dtype, op="sum", root=0, algorithm="recursive_halving", *, slices=None,
           segments=None, shape=None):
    """Rank ``root`` gets the reduction; the others get nothing.  Options as :func:`allreduce`."""
    return _reduction("reduce", nodes, count, dtype, op, algorithm, root=root, slices=slices,
                      segments=segments, shape=shape)


def reduce_scatter(nodes, count, dtype, op="sum", counts=None, algorithm="recursive_halving", *,
                   slices=None, segments=None, shape=None):
    """Rank r gets chunk r of the reduction of every rank's ``count`` elements.

    :param counts: chunk sizes in elements, one per rank (zeros allowed), adding up to
        ``count``; ``None``: the sizes of ``numpy.array_split``.
    """
    return _reduction("reduce_scatter", nodes, count, dtype, op, algorithm, counts=counts,
                      slices=slices, segments=segments, shape=shape)


def allgather(nodes, counts, dtype, algorithm="recursive_halving", *, segments=None, shape=None,
              slices=None):
    """Every rank gets every rank's elements, concatenated in rank order.

    :param counts: the elements each rank contributes: one integer for all, or one per rank.
    """
    nodes = _nodes(nodes)
    if isinstance(counts, (int, np.integer)) and not isinstance(counts, (bool, np.bool_)):
        counts = [_integer("counts", counts, 0)] * nodes
    counts = _counts(counts, nodes)
    return _reduction("allgather", nodes, None, dtype, None, algorithm, counts=counts,
                      slices=slices, segments=segments, shape=shape)

