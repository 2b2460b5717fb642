# Ref: seed 000 (CN101206588): pipelined recursive halving, figs. 3, 6, 7, 8.
# Ref: seed 001 (CN, 2022): buffer-limited in-place all-to-all, steps S1, S21-S23.
# Ref: seed 002 (ICT/CAS): many-to-one reduction over a general logical topology.
"""Collectives compiled into per-rank schedules: algorithms are data (seed 002).

A collective over N ranks compiles into a :class:`Plan`: one :class:`Schedule` per rank (a
list of :class:`Step` commands) plus where each rank's input goes in its device buffer and
where its output is read back.  The engine that runs a schedule knows nothing of rings,
trees or recursive halving; :mod:`nicoll.schedule_exec` runs the same schedules in numpy and
:mod:`nicoll.reduction_order` gives the order in which each algorithm combines the inputs.

The step format (the engine's command)
--------------------------------------
Each rank owns one byte buffer (``Schedule.buffer_bytes``).  A :class:`Step` is a
send-receive pair, either half optional:

- ``send_to`` / ``send`` / ``send_tag``: send the bytes of ``send`` (a :class:`Region` of the
  local buffer) to rank ``send_to`` as the message tagged ``send_tag``;
- ``recv_from`` / ``recv`` / ``recv_tag``: receive the message tagged ``recv_tag`` from rank
  ``recv_from`` into the bytes of ``recv``; ``action`` says what happens to it:
  :attr:`StepAction.COPY` stores it, :attr:`StepAction.REDUCE_LOCAL_FIRST` stores ``local ∘ received``
  and :attr:`StepAction.REDUCE_RECEIVED_FIRST` stores ``received ∘ local`` (``∘`` is the
  collective's op; the operand order is part of the format because float results, NaN
  payloads and signed zeros depend on it);
- ``segments``: both halves are cut into this many pieces at element boundaries (the sizes
  of ``numpy.array_split``: the first ``n mod segments`` pieces hold one element more).
  Segment j+1 is exchanged while segment j is reduced (seed 000, operation 314); a piece
  with no bytes is not sent; ``send_reversed`` / ``recv_reversed`` walk a half's pieces
  from the last to the first (the sender's order and the receiver's order of one message
  are always equal);
- ``fence``: without it, the step's first exchange overlaps the previous step's last
  reduction (seed 000: "the last received segment of an iteration is reduced while the
  first segment of the next iteration is already being exchanged"); with it, the step waits
  for every earlier reduction.  The compilers set it exactly where the overlap would touch
  bytes that reduction writes, and :class:`Schedule` refuses a schedule that overlaps
  unsafely;
- ``barrier``: a step that does nothing but wait until every rank has reached its matching
  barrier step (seed 001, S23); it also waits for every earlier reduction.

A send to the rank itself, received by the same step, is a local copy (seed 001, S22).
Messages are matched by (source, destination, tag); the compilers number the messages of
each (source, destination) pair 0, 1, 2, ... in the order both ranks handle them.
A transfer is a rendezvous: a segment moves when the sender is at it and the receiver is
at the matching segment of the matching step, so the engine needs no buffer beyond the
segments in flight.

Regions are contiguous, or strided for Bruck's all-to-all: ``length`` bytes taken ``run``
bytes at a time, each run ``stride`` bytes after the one before.

Algorithms
----------
Reductions (``allreduce``, ``reduce``, ``reduce_scatter``, ``allgather``):
``"recursive_halving"`` (seed 000), ``"ring"``, ``"tree"`` (the tree shapes of
:data:`TREE_SHAPES`, including seed 002's 1-ring ``"chain"`` and ``"2-tree"``) and
``"prt"`` (the pipelined tree seed 000 improves on).  All-to-all: ``"pairwise"``,
``"bruck"`` and ``"inplace"`` (seed 001); ``alltoallv`` by pairwise exchange.
``docs/algorithms.md`` describes each one's steps, reduction order and traffic.
"""

import functools
from dataclasses import dataclass

import numpy as np

from nicoll.hw.engine import StepAction

from . import regions
from .errors import NicollError
from .ops import check_op_dtype, numpy_dtype, resolve_dtype

__all__ = [
    "StepAction", "Region", "Step", "Piece", "Schedule", "Plan",
    "REDUCTION_ALGORITHMS", "ALLTOALL_ALGORITHMS", "TREE_SHAPES",
    "DEFAULT_SLICES", "DEFAULT_SEGMENTS", "DEFAULT_PRT_SLICES",
    "allreduce", "reduce", "reduce_scatter", "allgather", "alltoall", "alltoallv",
    "tree_children", "split_counts", "time_segments", "step_hazards",
]

#: Algorithms of the four reduction collectives.
REDUCTION_ALGORITHMS = ("recursive_halving", "ring", "tree", "prt")
#: Algorithms of ``alltoall`` that run as schedules ("aggregate" runs on the repack units).
ALLTOALL_ALGORITHMS = ("pairwise", "bruck", "inplace")
#: Tree shapes of ``"tree"`` and ``"prt"``; a parent list is accepted too.
TREE_SHAPES = ("binary", "binomial", "2-tree", "chain")
#: Segments per recursive-halving iteration (seed 000, fig. 8: slice[i] = 2).
DEFAULT_SLICES = 2
#: Segments of every other step that moves data of a reduction.
DEFAULT_SEGMENTS = 2
#: Slices of the pipelined tree.
DEFAULT_PRT_SLICES = 4


def _integer(what, value, minimum=None):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise NicollError(f"{what} must be an integer, not {value!r}")
    if minimum is not None and value < minimum:
        raise NicollError(f"{what} must be ≥ {minimum}, not {value!r}")
    return int(value)


def _flag(what, value):
    if not isinstance(value, bool):
        raise NicollError(f"{what} must be True or False, not {value!r}")
    return value


# -- the step format ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Region:
    """Bytes of a rank's buffer, in the order a step streams them.

    ``length`` bytes taken ``run`` bytes at a time; run k starts at ``offset + k * stride``;
    the last run may be shorter.  Without ``run`` (or with ``run >= length``) the region is
    the contiguous range ``offset .. offset + length``.
    """
    offset: int
    length: int
    run: int | None = None
    stride: int | None = None

    def __post_init__(self):
        offset = _integer("region offset", self.offset, 0)
        length = _integer("region length", self.length, 1)
        run = length if self.run is None else _integer("region run", self.run, 1)
        stride = run if self.stride is None else _integer("region stride", self.stride, 1)
        if run >= length:
            run = stride = length
        elif stride < run:
            raise NicollError(f"region stride {stride!r} is shorter than its run {run!r}: "
                              f"the runs would overlap")
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "length", length)
        object.__setattr__(self, "run", run)
        object.__setattr__(self, "stride", stride)

    @property
    def contiguous(self):
        return self.run == self.length

    @property
    def end(self):
        """One past the region's last byte in the buffer."""
        return regions.end(self.offset, self.length, self.run, self.stride)

    def intervals(self, start=0, stop=None):
        """Buffer byte ranges ``[(a, b), ...]`` (ascending) of stream bytes ``start .. stop``."""
        return regions.intervals(self.offset, self.length, self.run, self.stride, start, stop)

    def segment_bounds(self, segments, itemsize):
        """Stream byte ranges of the region's ``segments`` pieces (numpy.array_split sizes)."""
        base, extra = divmod(self.length // itemsize, segments)
        bounds, at = [], 0
        for j in range(segments):
            size = (base + (j < extra)) * itemsize
            bounds.append((at, at + size))
            at += size
        return bounds


@dataclass(frozen=True)
class Step:
    """One command of a rank's schedule; the module docstring defines every field."""
    send_to: int | None = None
    send: Region | None = None
    send_tag: int = 0
    send_reversed: bool = False
    recv_from: int | None = None
    recv: Region | None = None
    recv_tag: int = 0
    recv_reversed: bool = False
    action: StepAction = StepAction.COPY
    segments: int = 1
    fence: bool = False
    barrier: bool = False

    def __post_init__(self):
        for half, peer_name, peer, region in (("send", "send_to", self.send_to, self.send),
                                              ("recv", "recv_from", self.recv_from, self.recv)):
            if (peer is None) != (region is None):
                raise NicollError(f"a step's {peer_name} is {peer!r} but its {half} region is "
                                  f"{region!r}: give both or neither")
            if peer is not None:
                object.__setattr__(self, peer_name, _integer(peer_name, peer, 0))
                if not isinstance(region, Region):
                    raise NicollError(f"a step's {half} region must be a Region, not {region!r}")
            object.__setattr__(self, f"{half}_tag",
                               _integer(f"{half}_tag", getattr(self, f"{half}_tag"), 0))
            _flag(f"{half}_reversed", getattr(self, f"{half}_reversed"))
        if isinstance(self.action, str) and self.action.upper() in StepAction.__members__:
            object.__setattr__(self, "action", StepAction[self.action.upper()])
        elif isinstance(self.action, (int, np.integer)) and self.action in set(StepAction):
            object.__setattr__(self, "action", StepAction(self.action))
        else:
            raise NicollError(f"a step's action must be one of "
                              f"{', '.join(a.name for a in StepAction)}, not {self.action!r}")
        if self.recv is None and self.action.reduces:
            raise NicollError(f"a step that receives nothing cannot {self.action.name}")
        object.__setattr__(self, "segments", _integer("segments", self.segments, 1))
        _flag("fence", self.fence)
        _flag("barrier", self.barrier)
        if self.barrier and (self.send is not None or self.recv is not None):
            raise NicollError("a barrier step neither sends nor receives")
        if not self.barrier and self.send is None and self.recv is None:
            raise NicollError("a step must send, receive or be a barrier")


@dataclass(frozen=True)
class Piece:
    """``length`` bytes at byte ``data`` of a rank's array and at byte ``buffer`` of its buffer."""
    data: int
    buffer: int
    length: int

    def __post_init__(self):
        for name in ("data", "buffer"):
            object.__setattr__(self, name, _integer(f"piece {name} offset", getattr(self, name), 0))
        object.__setattr__(self, "length", _integer("piece length", self.length, 1))


@functools.lru_cache(maxsize=4096)
def time_segments(step, itemsize):
    """The exchanges of a step in the order they happen.

    A list of ``(send, recv)``; each half is ``None`` (nothing that time) or
    ``(index, length, intervals)``: the piece's index in its region, its bytes, and its
    buffer byte ranges.  Exchanges where neither half has bytes are left out.
    """
    out = []
    halves = []
    for region, reversed_ in ((step.send, step.send_reversed), (step.recv, step.recv_reversed)):
        bounds = None if region is None else region.segment_bounds(step.segments, itemsize)
        halves.append((region, reversed_, bounds))
    for t in range(step.segments):
        pair = []
        for region, reversed_, bounds in halves:
            if region is None:
                pair.append(None)
                continue
            index = step.segments - 1 - t if reversed_ else t
            start, stop = bounds[index]
            pair.append((index, stop - start, tuple(region.intervals(start, stop)))
                        if stop > start else None)
        if pair[0] is not None or pair[1] is not None:
            out.append(tuple(pair))
    return tuple(out)


def _intersect(a, b):
    """Whether two ascending lists of byte ranges share a byte."""
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] <= b[j][0]:
            i += 1
        elif b[j][1] <= a[i][0]:
            j += 1
        else:
            return True
    return False


def _exchange_touches(step, exchange):
    """Bytes an exchange reads (the send piece) or writes (a copied receive piece)."""
    send, recv = exchange
    touched = list(send[2]) if send else []
    if recv and not step.action.reduces:
        touched.extend(recv[2])
    return sorted(touched)


def _reduction_writes(step, exchange):
    send, recv = exchange
    return recv[2] if recv and step.action.reduces else ()


def step_hazards(previous, step, itemsize):
    """Why ``step`` is unsafe after ``previous`` (``None`` for the first step), or ``[]``.

    Returns ``(fixable, message)`` pairs; fixable ones go away with ``fence=True``.
    """
    problems = []
    if step.barrier:
        return problems
    exchanges = time_segments(step, itemsize)
    for t, exchange in enumerate(exchanges):
        send, recv = exchange
        if send and recv and not step.action.reduces and _intersect(send[2], recv[2]):
            problems.append((False, f"segment {t} sends bytes it receives into at the same time"))
        touched = _exchange_touches(step, exchange)
        if t:
            behind = _reduction_writes(step, exchanges[t - 1])
            if _intersect(touched, behind):
                problems.append((False, f"the exchange of segment {t} touches bytes the "
                                        f"reduction of segment {t - 1} is writing"))
        elif previous is not None and not previous.barrier and not step.fence:
            behind = _reduction_writes(previous, time_segments(previous, itemsize)[-1])
            if _intersect(touched, behind):
                problems.append((True, "its first exchange touches bytes the previous step's last "
                                       "reduction is writing; it needs fence=True"))
    return problems


@dataclass(frozen=True)
class Schedule:
    """The steps of one rank, its buffer size, and where its input and output live.

    ``load`` places the rank's input array in the buffer before the first step; ``result``
    reads its output back after the last one (empty where the rank gets no output).
    """
    rank: int
    nodes: int
    itemsize: int
    buffer_bytes: int
    steps: tuple = ()
    load: tuple = ()
    result: tuple = ()

    def __post_init__(self):
        nodes = _integer("nodes", self.nodes, 1)
        rank = _integer("rank", self.rank, 0)
        if rank >= nodes:
            raise NicollError(f"rank {rank!r} is outside ranks 0..{nodes - 1}")
        itemsize = _integer("itemsize", self.itemsize, 1)
        size = _integer("buffer_bytes", self.buffer_bytes, 0)
        for name in ("steps", "load", "result"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for k, step in enumerate(self.steps):
            if not isinstance(step, Step):
                raise NicollError(f"rank {rank} step {k} must be a Step, not {step!r}")
            for peer, region, half in ((step.send_to, step.send, "sends"),
                                       (step.recv_from, step.recv, "receives")):
                if region is None:
                    continue
                if peer >= nodes:
                    raise NicollError(f"rank {rank} step {k} {half} {'to' if half == 'sends' else 'from'} "
                                      f"rank {peer!r}, outside ranks 0..{nodes - 1}")
                if region.end > size:
                    raise NicollError(f"rank {rank} step {k} {half} bytes up to {region.end}, "
                                      f"past its {size}-byte buffer")
                if any(v % itemsize for v in (region.offset, region.length, region.run, region.stride)):
                    raise NicollError(f"rank {rank} step {k}: {region!r} does not fall on "
                                      f"{itemsize}-byte element boundaries")
            problems = step_hazards(self.steps[k - 1] if k else None, step, itemsize)
            if problems:
                raise NicollError(f"rank {rank} step {k}: {problems[0][1]}")
        for name in ("load", "result"):
            for piece in getattr(self, name):
                if not isinstance(piece, Piece):
                    raise NicollError(f"rank {rank} {name} pieces must be Pieces, not {piece!r}")
                if piece.buffer + piece.length > size:
                    raise NicollError(f"rank {rank} {name} piece {piece!r} is past its "
                                      f"{size}-byte buffer")
        object.__setattr__(self, "rank", rank)
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "itemsize", itemsize)
        object.__setattr__(self, "buffer_bytes", size)


@dataclass(frozen=True)
class Plan:
    """A compiled collective: one schedule per rank and what the ranks put in and get out.

    ``input_counts[r]`` elements of ``dtype`` go into rank r; ``output_counts[r]`` come out
    (``None``: rank r gets no output, as the non-roots of ``reduce``).  ``options`` keeps
    the compiler's resolved options (root, counts, shape, slices, ...) as ``(name, value)``.
    """
    collective: str
    algorithm: str
    op: str | None
    dtype: np.dtype
    input_counts: tuple
    output_counts: tuple
    schedules: tuple
    options: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "schedules", tuple(self.schedules))
        object.__setattr__(self, "input_counts", tuple(self.input_counts))
        object.__setattr__(self, "output_counts", tuple(self.output_counts))
        nodes = len(self.schedules)
        if nodes < 1:
            raise NicollError("a plan needs at least one schedule")
        for r, schedule in enumerate(self.schedules):
            if not isinstance(schedule, Schedule):
                raise NicollError(f"schedule {r} must be a Schedule, not {schedule!r}")
            if schedule.rank != r or schedule.nodes != nodes:
                raise NicollError(f"schedule {r} is for rank {schedule.rank} of {schedule.nodes}; "
                                  f"expected rank {r} of {nodes}")
            if schedule.itemsize != self.dtype.itemsize:
                raise NicollError(f"schedule {r} has {schedule.itemsize}-byte elements, the plan's "
                                  f"{self.dtype} has {self.dtype.itemsize}")
        if len(self.input_counts) != nodes or len(self.output_counts) != nodes:
            raise NicollError(f"a plan of {nodes} ranks needs {nodes} input and output counts")

    @property
    def nodes(self):
        return len(self.schedules)

    def option(self, name, default=None):
        return dict(self.options).get(name, default)

    def describe(self, ranks=None):
        """The schedules as text, one line per step (byte ranges half-open)."""
        lines = [f"{self.collective} {self.algorithm}, {self.nodes} ranks, {self.dtype}"
                 + (f", op {self.op}" if self.op else "")]
        for r in range(self.nodes) if ranks is None else ranks:
            schedule = self.schedules[r]
            lines.append(f"rank {r} ({schedule.buffer_bytes}-byte buffer):")
            for k, step in enumerate(schedule.steps):
                lines.append(f"  {k:3d} {_describe_step(step)}")
        return "\n".join(lines)


def _describe_region(region):
    text = f"[{region.offset}, {region.offset + region.length})"
    if not region.contiguous:
        text = f"{region.length} bytes from {region.offset}, {region.run} every {region.stride}"
    return text


def _describe_step(step):
    if step.barrier:
        return "barrier"
    parts = []
    if step.send is not None:
        parts.append(f"send {_describe_region(step.send)} to {step.send_to} tag {step.send_tag}"
                     + (" reversed" if step.send_reversed else ""))
    if step.recv is not None:
        parts.append(f"{step.action.name.lower()} {_describe_region(step.recv)} from "
                     f"{step.recv_from} tag {step.recv_tag}" + (" reversed" if step.recv_reversed else ""))
    return "; ".join(parts) + f"; {step.segments} segments" + ("; fence" if step.fence else "")


# -- building schedules ------------------------------------------------------------------------

class _Transfer:
    """One message: ``send`` bytes at ``src`` go to ``recv`` bytes at ``dst``."""
    __slots__ = ("src", "dst", "send", "recv", "action", "reversed", "tag")

    def __init__(self, src, dst, send, recv, action):
        self.src, self.dst, self.send, self.recv, self.action = src, dst, send, recv, action
        self.reversed = False
        self.tag = None


class _Builder:
    """Collects each rank's steps as transfers, then numbers, orders and fences them."""

    _BARRIER = "barrier"

    def __init__(self, nodes, itemsize):
        self.nodes, self.itemsize = nodes, itemsize
        self.programs = [[] for _ in range(nodes)]   # entries: (out, inc, segments) or _BARRIER
        self.transfers = []

    def region(self, first, count):
        """Elements ``first .. first + count`` as a contiguous Region (None when empty)."""
        if count <= 0:
            return None
        return Region(first * self.itemsize, count * self.itemsize)

    def transfer(self, src, dst, send, recv=None, action=StepAction.COPY):
        """A message (None when it would carry no bytes); ``recv`` defaults to ``send``."""
        if send is None:
            return None
        transfer = _Transfer(src, dst, send, send if recv is None else recv, action)
        self.transfers.append(transfer)
        return transfer

    def step(self, rank, out=None, inc=None, segments=1):
        """A step of ``rank`` sending ``out`` and receiving ``inc`` (either may be None)."""
        if out is None and inc is None:
            return
        assert out is None or out.src == rank, (rank, out.src)
        assert inc is None or inc.dst == rank, (rank, inc.dst)
        self.programs[rank].append((out, inc, segments))

    def exchange(self, a, b, a_to_b, b_to_a, segments):
        """Ranks a and b send each other one transfer each, in one step each."""
        self.step(a, out=a_to_b, inc=b_to_a, segments=segments)
        self.step(b, out=b_to_a, inc=a_to_b, segments=segments)

    def barrier(self):
        for program in self.programs:
            program.append(self._BARRIER)

    def _make_step(self, entry, fence=False):
        if entry == self._BARRIER:
            return Step(barrier=True)
        out, inc, segments = entry
        fields = dict(segments=segments, fence=fence)
        if out is not None:
            fields.update(send_to=out.dst, send=out.send, send_tag=out.tag or 0,
                          send_reversed=out.reversed)
        if inc is not None:
            fields.update(recv_from=inc.src, recv=inc.recv, recv_tag=inc.tag or 0,
                          recv_reversed=inc.reversed, action=inc.action)
        return Step(**fields)

    def _order_ok(self, rank, k, receiver):
        """Whether rank's step k is sound with the piece orders as they stand, and, on the
        receiving end, whether step k+1 may overlap step k's last reduction.

        A message's order changes the sender's first read and the receiver's last
        reduction; the sender's previous step is decided later and adapts to it.
        """
        program = self.programs[rank]
        here = self._make_step(program[k])
        if any(not fixable for fixable, _ in step_hazards(None, here, self.itemsize)):
            return False
        if receiver and k + 1 < len(program):
            return not step_hazards(here, self._make_step(program[k + 1]), self.itemsize)
        return True

    def _choose_orders(self):
        # Seed 000 overlaps an iteration's last reduction with the next iteration's first
        # exchange.  Whether that is safe depends on which piece is reduced last, so each
        # reduced message may run its pieces backwards.  Later messages are decided first:
        # a step's order depends on the order of the step after it.
        where = {}
        for rank, program in enumerate(self.programs):
            for k, entry in enumerate(program):
                if entry != self._BARRIER:
                    out, inc, _ = entry
                    if out is not None:
                        where[id(out), "out"] = (rank, k)
                    if inc is not None:
                        where[id(inc), "inc"] = (rank, k)
        for transfer in reversed(self.transfers):
            if not transfer.action.reduces:
                continue
            receiver = where[id(transfer), "inc"]
            sender = where[id(transfer), "out"]
            for reversed_ in (False, True):
                transfer.reversed = reversed_
                if self._order_ok(*receiver, True) and self._order_ok(*sender, False):
                    break
            else:
                transfer.reversed = False

    def schedules(self, buffer_bytes, loads, results):
        """The finished schedules: tags numbered, piece orders chosen, fences set."""
        counters = {}
        for transfer in self.transfers:
            pair = transfer.src, transfer.dst
            transfer.tag = counters.get(pair, 0)
            counters[pair] = transfer.tag + 1
        self._choose_orders()
        out = []
        for rank, program in enumerate(self.programs):
            steps = []
            for entry in program:
                step = self._make_step(entry)
                previous = steps[-1] if steps else None
                problems = step_hazards(previous, step, self.itemsize)
                if problems and all(fixable for fixable, _ in problems):
                    step = self._make_step(entry, fence=True)
                steps.append(step)
            size = buffer_bytes[rank] if isinstance(buffer_bytes, (list, tuple)) else buffer_bytes
            out.append(Schedule(rank=rank, nodes=self.nodes, itemsize=self.itemsize,
                                buffer_bytes=size, steps=steps, load=loads[rank],
                                result=results[rank]))
        return out


def _pieces(itemsize, spans):
    """Pieces from ``(data_element, buffer_element, count)`` spans, skipping empty ones."""
    return tuple(Piece(d * itemsize, b * itemsize, n * itemsize) for d, b, n in spans if n > 0)


# -- argument checks ---------------------------------------------------------------------------

def _nodes(nodes):
    if isinstance(nodes, (bool, np.bool_)) or not isinstance(nodes, (int, np.integer)):
        raise NicollError(f"nodes must be an integer, not {nodes!r}")
    if nodes < 1:
        raise NicollError(f"a collective needs at least one node, not {nodes!r}")
    return int(nodes)


def _element_type(dtype):
    """The numpy dtype of any fixed-size element type (all-to-all moves opaque bytes)."""
    try:
        return numpy_dtype(resolve_dtype(dtype))
    except NicollError:
        pass
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise NicollError(f"not a numpy dtype: {dtype!r}") from None
    if dtype.itemsize < 1 or dtype.hasobject:
        raise NicollError(f"elements must be fixed-size plain data, not {dtype}")
    return dtype


def _reduction_type(op, dtype):
    op, dtype = check_op_dtype(op, dtype)
    return op.mpi_name, numpy_dtype(dtype)


def _algorithm(algorithm, allowed, default):
    if algorithm == "auto":
        return default
    if algorithm == "aggregate":
        raise NicollError("algorithm 'aggregate' runs on the repack units (seed 003), not as a "
                          f"schedule; schedule algorithms are {', '.join(allowed)}")
    if not isinstance(algorithm, str) or algorithm not in allowed:
        raise NicollError(f"unknown algorithm {algorithm!r}; algorithms are "
                          f"{', '.join(allowed)} (or 'auto')")
    return algorithm


def _root(root, nodes):
    root = _integer("root", root, 0)
    if root >= nodes:
        raise NicollError(f"root {root!r} is outside ranks 0..{nodes - 1}")
    return root


def split_counts(count, nodes):
    """The element counts of ``numpy.array_split`` of ``count`` elements into ``nodes`` parts."""
    base, extra = divmod(count, nodes)
    return [base + (r < extra) for r in range(nodes)]


def _counts(counts, nodes, total=None, what="counts"):
    if isinstance(counts, (str, bytes)) or not hasattr(counts, "__len__"):
        raise NicollError(f"{what} must be a sequence of {nodes} element counts, not {counts!r}")
    counts = [_integer(f"{what}[{r}]", c, 0) for r, c in enumerate(counts)]
    if len(counts) != nodes:
        raise NicollError(f"{what} must have one entry per rank ({nodes}), not {len(counts)}")
    if total is not None and sum(counts) != total:
        raise NicollError(f"{what} add up to {sum(counts)}, not the {total} elements of the input")
    return counts


def _segments(segments):
    return _integer("segments", segments, 1)


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


def _refuse(algorithm, **given):
    for name, value in given.items():
        if value is not None:
            raise NicollError(f"{name} does not apply to algorithm {algorithm!r}")


# -- trees (seed 002) --------------------------------------------------------------------------

def _virtual_children(shape, v, nodes):
    """Children of virtual rank v (the root is 0) in the order v receives from them."""
    if shape == "binary":
        return [c for c in (2 * v + 1, 2 * v + 2) if c < nodes]
    if shape == "chain":
        # Ref: seed 002, §4.1: the 1-ring, every process receives from the next one.
        return [v + 1] if v + 1 < nodes else []
    if shape == "binomial":
        low = v & -v if v else 1 << max(nodes - 1, 1).bit_length()
        return [v + (1 << k) for k in range(low.bit_length() - 1) if v + (1 << k) < nodes]
    # Ref: seed 002, §4.2: the 2-tree.  v = 3^k * j with 3 not dividing j: at time step
    # t < k, v receives from v + 3^t and v + 2 * 3^t (the root, v = 0, at every t);
    # v's successor is v - 3^k * (j mod 3).
    children, power = [], 1
    while power < nodes and (v == 0 or v % (3 * power) == 0):
        children.extend(c for c in (v + power, v + 2 * power) if c < nodes)
        power *= 3
    return children


def tree_children(nodes, shape="binary", root=None):
    """Each rank's children in receive order, its parent, and the root.

    ``shape`` is one of :data:`TREE_SHAPES`, built on virtual ranks ``(r - root) mod
    nodes`` so any rank may be the root (default 0), or a parent list (``parents[r]``,
    ``None`` for the root; children then in ascending order), whose root must be ``root``
    when one is given.  Returns ``(children, parent, root)`` over real ranks.
    """
    nodes = _nodes(nodes)
    if isinstance(shape, str):
        if shape not in TREE_SHAPES:
            raise NicollError(f"unknown tree shape {shape!r}; shapes are {', '.join(TREE_SHAPES)} "
                              f"or a list of parents")
        root = 0 if root is None else _root(root, nodes)
        children = [[] for _ in range(nodes)]
        parent = [None] * nodes
        for v in range(nodes):
            for c in _virtual_children(shape, v, nodes):
                children[(v + root) % nodes].append((c + root) % nodes)
                parent[(c + root) % nodes] = (v + root) % nodes
        return children, parent, root
    from nicoll.hw.tree import BarrierTree   # the same checks as barrier trees: one root, no cycle
    if isinstance(shape, (bytes, dict)) or not hasattr(shape, "__len__"):
        raise NicollError(f"a tree shape is a name ({', '.join(TREE_SHAPES)}) or a list of "
                          f"parents, not {shape!r}")
    if len(shape) != nodes:
        raise NicollError(f"a parent list for {nodes} ranks needs {nodes} entries, not {len(shape)}")
    tree = BarrierTree(list(shape))
    if root is not None and tree.root != root:
        raise NicollError(f"the parent list is rooted at rank {tree.root}, not at root {root!r}")
    return [tree.children(r) for r in range(nodes)], [tree.parent(r) for r in range(nodes)], tree.root


def _shape(shape):
    if shape is None:
        return "binary"
    if isinstance(shape, str):
        return shape
    return tuple(shape)


def _preorder(children, root):
    order, pending = [], [root]
    while pending:
        node = pending.pop()
        order.append(node)
        pending.extend(reversed(children[node]))
    return order


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


# -- reductions: the four collectives over four algorithms ------------------------------------

def _reduction(collective, nodes, count, dtype, op, algorithm, root=0, counts=None,
               slices=None, segments=None, shape=None):
    """Every reduction collective: checks, layouts and the algorithm's steps."""
    nodes = _nodes(nodes)
    algorithm = _algorithm(algorithm, REDUCTION_ALGORITHMS, "recursive_halving")
    if collective == "allgather":
        op_name, dtype = None, _element_type(dtype)
    else:
        op_name, dtype = _reduction_type(op, dtype)
    itemsize = dtype.itemsize
    if algorithm in ("ring", "tree"):
        _refuse(algorithm, slices=slices)
    if algorithm in ("recursive_halving", "ring"):
        _refuse(algorithm, shape=shape)
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

    if algorithm == "recursive_halving":
        _compile_halving(b, collective, nodes, count, chunks, chunk_at, root, slices, segments, options)
    elif algorithm == "ring":
        _compile_ring(b, collective, nodes, chunks, chunk_at, root, segments)
    else:
        shape = _shape(shape)
        children, parent, tree_root = tree_children(
            nodes, shape, root if collective == "reduce" else None)
        options.append(("shape", shape))
        if algorithm == "prt":
            q = _integer("slices", DEFAULT_PRT_SLICES if slices is None else slices, 1)
            options.append(("slices", q))
        else:
            q = None
        _compile_tree(b, collective, nodes, count, chunks, chunk_at, children, parent, tree_root,
                      q, segments)

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


def _compile_halving(b, collective, nodes, count, chunks, chunk_at, root, slices, segments, options):
    p = _power_of_two_below(nodes)
    levels = p.bit_length() - 1
    whole = b.region(0, count)
    if collective == "allgather":
        _refuse("recursive_halving", slices=slices)
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


def _place(chunk_at, chunks, order):
    """Lay the chunks out in the buffer in ``order``."""
    at = 0
    for c in order:
        chunk_at[c] = at
        at += chunks[c]


def _compile_ring(b, collective, nodes, chunks, chunk_at, root, segments):
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


def _subtree_spans(children, chunk_at, chunks, order):
    """Element range of every rank's subtree in a preorder layout."""
    span = {}
    for node in reversed(order):
        lo = chunk_at[node]
        hi = lo + chunks[node]
        for child in children[node]:
            hi = max(hi, span[child][1])
        span[node] = (lo, hi)
    return span


def _compile_tree(b, collective, nodes, count, chunks, chunk_at, children, parent, root, slices,
                  segments):
    whole = b.region(0, count)
    if collective in ("reduce_scatter", "allgather"):
        # Chunks in preorder of the tree, so every subtree's chunks are one range.
        order = _preorder(children, root)
        _place(chunk_at, chunks, order)
        spans = _subtree_spans(children, chunk_at, chunks, order)

        def subtree(node):
            lo, hi = spans[node]
            return b.region(lo, hi - lo)
    if collective == "allgather":
        _tree_gather(b, nodes, children, parent, subtree, segments)
    elif slices is None:
        _tree_reduce(b, nodes, children, parent, whole, segments)
    else:
        _prt_reduce(b, nodes, children, parent, count, slices)
    if collective == "reduce_scatter":
        _tree_scatter(b, nodes, children, parent, subtree, segments)
    elif collective in ("allreduce", "allgather"):
        if slices is None:
            _tree_broadcast(b, nodes, children, parent, whole, segments)
        else:
            _prt_broadcast(b, nodes, children, parent, count, slices)


def _tree_reduce(b, nodes, children, parent, whole, segments):
    # Ref: seed 002, §3: receive from every predecessor in time-step order, combine, then
    # send to the successor.
    up = {v: b.transfer(v, parent[v], whole, action=StepAction.REDUCE_LOCAL_FIRST)
          for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        for child in children[v]:
            b.step(v, inc=up[child], segments=segments)
        if parent[v] is not None:
            b.step(v, out=up[v], segments=segments)


def _tree_broadcast(b, nodes, children, parent, whole, segments):
    down = {v: b.transfer(parent[v], v, whole) for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        if parent[v] is not None:
            b.step(v, inc=down[v], segments=segments)
        for child in children[v]:
            b.step(v, out=down[child], segments=segments)


def _tree_gather(b, nodes, children, parent, subtree, segments):
    up = {v: b.transfer(v, parent[v], subtree(v)) for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        for child in children[v]:
            b.step(v, inc=up[child], segments=segments)
        if parent[v] is not None:
            b.step(v, out=up[v], segments=segments)


def _tree_scatter(b, nodes, children, parent, subtree, segments):
    down = {v: b.transfer(parent[v], v, subtree(v)) for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        if parent[v] is not None:
            b.step(v, inc=down[v], segments=segments)
        for child in children[v]:
            b.step(v, out=down[child], segments=segments)


def _slice_regions(b, count, slices):
    regions, at = [], 0
    for size in split_counts(count, slices):
        if size:
            regions.append(b.region(at, size))
        at += size
    return regions


def _prt_reduce(b, nodes, children, parent, count, slices):
    # Ref: seed 000, background: the pipelined RDMA tree.  A node reduces slice i from its
    # children while receiving slice i+1, and sends slice i to its parent while reducing
    # slice i+1.  Here the send of slice i-1 rides on the step that receives slice i from
    # the last child.
    parts = _slice_regions(b, count, slices)
    up = {v: [b.transfer(v, parent[v], part, action=StepAction.REDUCE_LOCAL_FIRST) for part in parts]
          for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        kids, has_parent = children[v], parent[v] is not None
        if not kids:
            if has_parent:
                for i in range(len(parts)):
                    b.step(v, out=up[v][i])
            continue
        for i in range(len(parts)):
            for slot, child in enumerate(kids):
                forward = (up[v][i - 1] if has_parent and i and slot == len(kids) - 1 else None)
                b.step(v, out=forward, inc=up[child][i])
        if has_parent and parts:
            b.step(v, out=up[v][-1])


def _prt_broadcast(b, nodes, children, parent, count, slices):
    parts = _slice_regions(b, count, slices)
    down = {v: [b.transfer(parent[v], v, part) for part in parts]
            for v in range(nodes) if parent[v] is not None}
    for v in range(nodes):
        kids = children[v]
        if parent[v] is None:
            for i in range(len(parts)):
                for child in kids:
                    b.step(v, out=down[child][i])
            continue
        for i in range(len(parts)):
            # Receive slice i while passing slice i-1 on to the first child.
            b.step(v, inc=down[v][i], out=down[kids[0]][i - 1] if kids and i else None)
            if i:
                for child in kids[1:]:
                    b.step(v, out=down[child][i - 1])
        if parts:
            for child in kids:
                b.step(v, out=down[child][-1])


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


# -- all-to-all --------------------------------------------------------------------------------

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


def alltoall(nodes, block_count, dtype, algorithm="pairwise", *, scratch_blocks=None,
             segments=None):
    """Rank i's block j (``block_count`` elements) goes to rank j's block i.

    :param scratch_blocks: inplace only: the m blocks of scratch (default 1).
    :param segments: segments per message (default 1).
    """
    nodes = _nodes(nodes)
    algorithm = _algorithm(algorithm, ALLTOALL_ALGORITHMS, "pairwise")
    dtype = _element_type(dtype)
    block = _integer("block_count", block_count, 0)
    segments = _segments(1 if segments is None else segments)
    if algorithm != "inplace":
        _refuse(algorithm, scratch_blocks=scratch_blocks)
    b = _Builder(nodes, dtype.itemsize)
    total = nodes * block
    options = [("segments", segments)]
    identity = [_pieces(dtype.itemsize, [(0, 0, total)]) for _ in range(nodes)]
    if algorithm == "pairwise":
        # Buffer: the input blocks, then the output blocks.  A rank's own block goes
        # straight to its output place when the buffer is loaded.
        at = [[j * block for j in range(nodes)] for _ in range(nodes)]
        out_at = [[total + j * block for j in range(nodes)] for _ in range(nodes)]
        _pairwise(b, nodes, at, out_at, [[block] * nodes for _ in range(nodes)], segments)
        size = 2 * total
        loads = [_pieces(dtype.itemsize, [(0, 0, total), (r * block, total + r * block, block)])
                 for r in range(nodes)]
        results = [_pieces(dtype.itemsize, [(0, total, total)]) for _ in range(nodes)]
    elif algorithm == "bruck":
        size, loads, results = _bruck(b, nodes, block, dtype.itemsize, segments)
    else:
        m = _integer("scratch_blocks", 1 if scratch_blocks is None else scratch_blocks, 1)
        options.append(("scratch_blocks", m))
        size = _inplace(b, nodes, block, m, segments)
        loads = results = identity
    schedules = b.schedules(size * dtype.itemsize, loads, results)
    return Plan("alltoall", algorithm, None, dtype, [total] * nodes, [total] * nodes, schedules,
                tuple(options))


def _bruck(b, nodes, block, itemsize, segments):
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
