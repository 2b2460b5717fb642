# Ref: seed 000 (CN101206588): pipelined recursive halving, figs. 3, 6, 7, 8.
# Ref: seed 001 (CN, 2022): buffer-limited in-place all-to-all, steps S1, S21-S23.
"""The step format, the engine's command: :class:`Region`, :class:`Step`, :class:`Piece`,
:class:`Schedule` and :class:`Plan`, the order of a step's exchanges (:func:`time_segments`)
and the overlaps a step may not have (:func:`step_hazards`).

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
"""

import functools
from dataclasses import dataclass

import numpy as np

from nicoll.hw.engine import StepAction

from .. import region_bytes
from ..errors import NicollError

__all__ = ["StepAction", "Region", "Step", "Piece", "Schedule", "Plan", "time_segments",
           "step_hazards"]


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
        return region_bytes.end(self.offset, self.length, self.run, self.stride)

    def intervals(self, start=0, stop=None):
        """Buffer byte ranges ``[(a, b), ...]`` (ascending) of stream bytes ``start .. stop``."""
        return region_bytes.intervals(self.offset, self.length, self.run, self.stride, start, stop)

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
