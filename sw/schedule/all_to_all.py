# Ref: seed 001 (CN, 2022): buffer-limited in-place all-to-all, steps S1, S21-S23.
"""The all-to-all collectives: ``alltoall`` and its registry of algorithms (pairwise
exchange, Bruck's and the in-place all-to-all of seed 001), and ``alltoallv`` by pairwise
exchange.
"""

from ..errors import NicollError
from .arguments import Compiler, _algorithm, _counts, _element_type, _nodes, _segments
from .builder import _Builder, _pieces
from .step_format import Plan, Region, _integer

__all__ = ["ALLTOALL_COMPILERS", "ALLTOALL_ALGORITHMS", "alltoall", "alltoallv"]


def _pairwise_order(nodes, rank, i):
    """Round i's (send_to, recv_from): XOR partners for a power of two, shifts otherwise."""
    if nodes & (nodes - 1) == 0:
        return rank ^ i, rank ^ i
    return (rank + i) % nodes, (rank - i) % nodes


def _pairwise(b, nodes, send_at, recv_at, sizes, segments):
    """Rounds 1..N-1 of direct exchange; ``sizes[i][j]`` elements go from i to j."""
    for i in range(1, nodes):
        moves = {}
        for r in range(nodes):
            to, _ = _pairwise_order(nodes, r, i)
            moves[r, to] = b.transfer(r, to, b.region(send_at[r][to], sizes[r][to]),
                                      b.region(recv_at[to][r], sizes[r][to]))
        for r in range(nodes):
            to, frm = _pairwise_order(nodes, r, i)
            b.step(r, out=moves[r, to], inc=moves[frm, r], segments=segments)


def _compile_pairwise(b, nodes, block, itemsize, segments, options):
    # Buffer: the input blocks, then the output blocks.  A rank's own block goes
    # straight to its output place when the buffer is loaded.
    total = nodes * block
    at = [[j * block for j in range(nodes)] for _ in range(nodes)]
    out_at = [[total + j * block for j in range(nodes)] for _ in range(nodes)]
    _pairwise(b, nodes, at, out_at, [[block] * nodes for _ in range(nodes)], segments)
    loads = [_pieces(itemsize, [(0, 0, total), (r * block, total + r * block, block)])
             for r in range(nodes)]
    results = [_pieces(itemsize, [(0, total, total)]) for _ in range(nodes)]
    return 2 * total, loads, results


def _compile_bruck(b, nodes, block, itemsize, segments, options):
    # Bruck et al. (IEEE TPDS 8(11), 1997), all-to-all by index: rotate, then in round k
    # send every block whose index has bit k set to rank + 2^k, then rotate back.  Both
    # rotations are where the host loads and reads the buffer; a round's blocks are one
    # strided region.  Buffer: N work blocks, then the scratch a round receives into.
    rounds = max(nodes - 1, 0).bit_length()
    most = max((sum(1 for j in range(nodes) if j >> k & 1) for k in range(rounds)), default=0)
    scratch = nodes * block
    for k in range(rounds):
        width = 1 << k
        moved = sum(1 for j in range(nodes) if j & width) * block
        if not moved:
            continue
        spread = Region(width * block * itemsize, moved * itemsize, width * block * itemsize,
                        2 * width * block * itemsize)
        packed = Region(scratch * itemsize, moved * itemsize)
        sends = [b.transfer(r, (r + width) % nodes, spread, packed) for r in range(nodes)]
        for r in range(nodes):
            b.step(r, out=sends[r], inc=sends[(r - width) % nodes], segments=segments)
            local = b.transfer(r, r, packed, spread)
            b.step(r, out=local, inc=local, segments=segments)
    loads = [_pieces(itemsize, [(((r + j) % nodes) * block, j * block, block) for j in range(nodes)])
             for r in range(nodes)]
    results = [_pieces(itemsize, [(s * block, ((r - s) % nodes) * block, block) for s in range(nodes)])
               for r in range(nodes)]
    return scratch + most * block, loads, results


def _compile_inplace(b, nodes, block, itemsize, segments, options, *, scratch_blocks=None):
    m = _integer("scratch_blocks", 1 if scratch_blocks is None else scratch_blocks, 1)
    options.append(("scratch_blocks", m))
    size = _inplace(b, nodes, block, m, segments)
    # The blocks are exchanged in place: the buffer is loaded and read back as it is.
    identity = [_pieces(itemsize, [(0, 0, nodes * block)]) for _ in range(nodes)]
    return size, identity, identity


def _inplace(b, nodes, block, scratch_blocks, segments):
    # Ref: seed 001, S2: rounds in batches of m; in each batch a rank sends block `to`
    # from src + to*block into the peer's scratch slot j, then moves the received blocks
    # from scratch into place, then all ranks synchronize (S23).
    if block == 0:
        return 0
    if nodes & (nodes - 1) == 0:
        # XOR partners: every round a perfect pairing, rounds 1 .. N-1.
        partners = [[r ^ i for r in range(nodes)] for i in range(1, nodes)]
    else:
        # Round i pairs r with (i - r) mod N: still symmetric (send to and receive from
        # the same peer, so a block is sent before its place is overwritten); N rounds,
        # a rank idles in the round where it would pair with itself.
        partners = [[(i - r) % nodes for r in range(nodes)] for i in range(nodes)]
    scratch = nodes * block
    for first in range(0, len(partners), scratch_blocks):
        batch = partners[first:first + scratch_blocks]
        # Round j of the batch lands in scratch slot j.  Each round's pairing is its own
        # inverse, so what rank r receives in round j is its peer's send of round j.
        sends = [[None if peers[r] == r else
                  b.transfer(r, peers[r], b.region(peers[r] * block, block),
                             b.region(scratch + j * block, block))
                  for j, peers in enumerate(batch)] for r in range(nodes)]
        for r in range(nodes):
            for j, peers in enumerate(batch):
                if peers[r] != r:
                    b.step(r, out=sends[r][j], inc=sends[peers[r]][j], segments=segments)
            for j, peers in enumerate(batch):
                if peers[r] != r:
                    local = b.transfer(r, r, b.region(scratch + j * block, block),
                                       b.region(peers[r] * block, block))
                    b.step(r, out=local, inc=local, segments=segments)
        b.barrier()
    return scratch + scratch_blocks * block


#: The algorithms of ``alltoall`` by name, in the order of :data:`ALLTOALL_ALGORITHMS`.
#: ``alltoall`` calls each one's ``compile(b, nodes, block, itemsize, segments, options,
#: **taken)``: it emits the steps into the builder ``b``, appends the options it resolves to
#: ``options``, and returns the buffer's size in elements and the pieces each rank loads and
#: reads back.
ALLTOALL_COMPILERS = {
    "pairwise": Compiler(_compile_pairwise),
    "bruck": Compiler(_compile_bruck),
    "inplace": Compiler(_compile_inplace, {"scratch_blocks": ("alltoall",)}),
}
#: Algorithms of ``alltoall`` that run as schedules ("aggregate" runs on the repack units).
ALLTOALL_ALGORITHMS = tuple(ALLTOALL_COMPILERS)


def alltoall(nodes, block_count, dtype, algorithm="pairwise", *, scratch_blocks=None,
             segments=None):
    """Rank i's block j (``block_count`` elements) goes to rank j's block i.

    :param scratch_blocks: inplace only: the m blocks of scratch (default 1).
    :param segments: segments per message (default 1).
    """
    nodes = _nodes(nodes)
    algorithm = _algorithm(algorithm, ALLTOALL_COMPILERS, "pairwise")
    compiler = ALLTOALL_COMPILERS[algorithm]
    dtype = _element_type(dtype)
    block = _integer("block_count", block_count, 0)
    segments = _segments(1 if segments is None else segments)
    taken = compiler.taken_options(algorithm, "alltoall", scratch_blocks=scratch_blocks)
    b = _Builder(nodes, dtype.itemsize)
    total = nodes * block
    options = [("segments", segments)]
    size, loads, results = compiler.compile(b, nodes, block, dtype.itemsize, segments, options, **taken)
    schedules = b.schedules(size * dtype.itemsize, loads, results)
    return Plan("alltoall", algorithm, None, dtype, [total] * nodes, [total] * nodes, schedules,
                tuple(options))


def alltoallv(counts, dtype, algorithm="pairwise", *, segments=None):
    """Block (i, j) of ``counts[i][j]`` elements (zero allowed) goes from rank i to rank j.

    Rank i's input is its blocks for ranks 0..N-1 back to back; its output the blocks from
    ranks 0..N-1 back to back.
    """
    if isinstance(counts, (str, bytes)) or not hasattr(counts, "__len__"):
        raise NicollError(f"counts must be an N×N table of element counts, not {counts!r}")
    nodes = _nodes(len(counts))
    sizes = [_counts(row, nodes, what=f"counts[{i}]") for i, row in enumerate(counts)]
    algorithm = _algorithm(algorithm, ("pairwise",), "pairwise")
    dtype = _element_type(dtype)
    segments = _segments(1 if segments is None else segments)
    b = _Builder(nodes, dtype.itemsize)
    sent = [sum(row) for row in sizes]
    received = [sum(sizes[i][j] for i in range(nodes)) for j in range(nodes)]
    send_at = [[sum(row[:j]) for j in range(nodes)] for row in sizes]
    recv_at = [[sent[j] + sum(sizes[i][j] for i in range(s)) for s in range(nodes)]
               for j in range(nodes)]
    _pairwise(b, nodes, send_at, recv_at, sizes, segments)
    loads = [_pieces(dtype.itemsize, [(0, 0, sent[r]), (send_at[r][r], recv_at[r][r], sizes[r][r])])
             for r in range(nodes)]
    results = [_pieces(dtype.itemsize, [(0, sent[r], received[r])]) for r in range(nodes)]
    schedules = b.schedules([(sent[r] + received[r]) * dtype.itemsize for r in range(nodes)],
                            loads, results)
    return Plan("alltoallv", algorithm, None, dtype, sent, received, schedules,
                (("segments", segments), ("counts", tuple(tuple(row) for row in sizes))))
