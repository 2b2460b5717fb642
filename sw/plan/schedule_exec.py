# Ref: seed 000 (CN101206588), operations 308-318: segment j+1 is exchanged while segment j
#      is reduced; an iteration's last reduction overlaps the next iteration's first exchange.
"""Run schedules in numpy: the executable definition of what a :class:`~nicoll.schedule.Step` does.

:func:`execute` runs N schedules against N byte buffers; :func:`run` loads a
:class:`~nicoll.schedule.Plan`'s inputs, executes it and reads the outputs back; the
functions named after the collectives (:func:`allreduce`, ...) take numpy arrays like
``nicoll.Cluster`` does, compile and run.

Semantics (the ones the engine implements)
------------------------------------------
- A rank runs its steps in order.  A step's exchanges happen in order (its time segments:
  piece j of the send half and piece j of the receive half, see
  :func:`nicoll.schedule.time_segments`).  An exchange is a rendezvous: a send piece moves
  when its receiver is at the matching receive piece of the step that receives
  (source, tag); the exchange is done when both of its halves are.
- A received piece is stored (``COPY``) or reduced into the local bytes, with the operand
  order the step's action gives, after its exchange is done.  Reductions happen in piece
  order, so the combining order is exactly the schedule's.
- A barrier step waits until every rank is at its matching barrier step.
- No rank can move and some have steps left: a deadlock, reported as a
  :class:`~nicoll.NicollError` naming every waiting rank, its step and what it waits for.
  A message whose two ends disagree on length, segments or piece order is reported when
  the two ends meet.

Counters per rank: bytes, pieces (segments) and messages sent and received over the
network, bytes reduced, bytes copied locally (a step sending to its own rank), barriers.

The cycle model that runs alongside is :mod:`nicoll.plan.schedule_cost` (this module gives
its :class:`~nicoll.plan.schedule_cost.CostModel` too).  ``python -m
nicoll.plan.schedule_exec`` prints the figures of ``docs/algorithms.md``
(:mod:`nicoll.plan.schedule_figures`).
"""

from dataclasses import dataclass

import numpy as np

from .. import schedule as _schedule
from ..errors import NicollError
from ..ops import combine, resolve_op
from ..schedule import StepAction, Plan, Schedule, time_segments
from .schedule_cost import CostModel

__all__ = ["CostModel", "RankStats", "Stats", "Outcome", "execute", "run", "allreduce", "reduce",
           "reduce_scatter", "allgather", "alltoall", "alltoallv"]


@dataclass(frozen=True)
class RankStats:
    rank: int
    bytes_sent: int
    bytes_received: int
    messages_sent: int
    messages_received: int
    segments_sent: int
    segments_received: int
    bytes_reduced: int
    bytes_copied_locally: int
    barriers: int
    steps: int
    cycles: int


@dataclass(frozen=True)
class Stats:
    """Per-rank counters and the modelled cycles (start .. the last rank done)."""
    ranks: tuple
    cycles: int
    cost: CostModel

    @property
    def bytes_sent(self):
        return [r.bytes_sent for r in self.ranks]

    @property
    def bytes_received(self):
        return [r.bytes_received for r in self.ranks]

    @property
    def messages_sent(self):
        return [r.messages_sent for r in self.ranks]

    @property
    def messages_received(self):
        return [r.messages_received for r in self.ranks]


@dataclass(frozen=True)
class Outcome:
    """What :func:`run` returns: each rank's output (``None`` where it gets none) and stats."""
    outputs: list
    stats: Stats


class _Rank:
    """One rank's place in its schedule, its buffer and its counters."""

    def __init__(self, schedule, buffer):
        self.schedule, self.rank, self.buffer = schedule, schedule.rank, buffer
        self.k = 0
        self.counts = dict(bytes_sent=0, bytes_received=0, messages_sent=0, messages_received=0,
                           segments_sent=0, segments_received=0, bytes_reduced=0,
                           bytes_copied_locally=0, barriers=0)
        # Cycle model: when the current exchange may start, when its halves end, when the
        # previous exchange's reduction ends, when the ALU is free.
        self.ready = self.send_end = self.recv_end = 0
        self.reduction_behind = self.alu_free = self.finish = 0
        self._enter()

    @property
    def done(self):
        return self.k >= len(self.schedule.steps)

    @property
    def step(self):
        return self.schedule.steps[self.k]

    @property
    def exchange(self):
        return self.exchanges[self.t]

    def _enter(self):
        self.t = 0
        self.sent = self.received = False
        self.staged = None
        if not self.done:
            step = self.step
            self.exchanges = () if step.barrier else time_segments(step, self.schedule.itemsize)
            if step.fence or step.barrier:
                self.ready = max(self.ready, self.alu_free)

    def read(self, intervals):
        if len(intervals) == 1:
            a, b = intervals[0]
            return self.buffer[a:b].copy()
        return np.concatenate([self.buffer[a:b] for a, b in intervals])

    def write(self, intervals, data):
        at = 0
        for a, b in intervals:
            self.buffer[a:b] = data[at:at + b - a]
            at += b - a

    def where(self):
        return f"rank {self.rank} step {self.k}"


def _check_schedules(schedules, buffers, op, dtype):
    nodes = len(schedules)
    if nodes < 1:
        raise NicollError("nothing to run: no schedules")
    itemsize = None
    for r, schedule in enumerate(schedules):
        if not isinstance(schedule, Schedule):
            raise NicollError(f"schedule {r} must be a Schedule, not {schedule!r}")
        if schedule.rank != r or schedule.nodes != nodes:
            raise NicollError(f"schedule {r} is for rank {schedule.rank} of {schedule.nodes}; "
                              f"expected rank {r} of {nodes}")
        if itemsize not in (None, schedule.itemsize):
            raise NicollError(f"schedule {r} has {schedule.itemsize}-byte elements, schedule 0 "
                              f"has {itemsize}-byte ones")
        itemsize = schedule.itemsize
        for half, key in (("sends", lambda s: (s.send_to, s.send_tag) if s.send else None),
                          ("receives", lambda s: (s.recv_from, s.recv_tag) if s.recv else None)):
            seen = {}
            for k, step in enumerate(schedule.steps):
                peer_tag = key(step)
                if peer_tag is None:
                    continue
                if peer_tag in seen:
                    peer, tag = peer_tag
                    raise NicollError(f"rank {r} steps {seen[peer_tag]} and {k} both {half} "
                                      f"tag {tag} {'to' if half == 'sends' else 'from'} rank {peer}")
                seen[peer_tag] = k
    if buffers is not None:
        if len(buffers) != nodes:
            raise NicollError(f"{nodes} schedules need {nodes} buffers, not {len(buffers)}")
        for r, buffer in enumerate(buffers):
            if not isinstance(buffer, np.ndarray) or buffer.dtype != np.uint8 or buffer.ndim != 1:
                raise NicollError(f"buffer {r} must be a 1-D numpy uint8 array")
            if buffer.size < schedules[r].buffer_bytes:
                raise NicollError(f"buffer {r} holds {buffer.size} bytes; its schedule needs "
                                  f"{schedules[r].buffer_bytes}")
    reduces = any(step.action.reduces for s in schedules for step in s.steps)
    if reduces and buffers is not None:
        if op is None or dtype is None:
            raise NicollError("the schedules reduce: give op and dtype")
        dtype = np.dtype(dtype)
        if dtype.itemsize != itemsize:
            raise NicollError(f"dtype {dtype} has {dtype.itemsize}-byte elements, the schedules "
                              f"{itemsize}-byte ones")
        return resolve_op(op), dtype
    return None, None


def execute(schedules, buffers=None, *, op=None, dtype=None, cost=None):
    """Run ``schedules`` (one per rank, or a Plan, which also gives op and dtype) against
    ``buffers`` (1-D uint8 arrays, changed in place); without buffers only the counters and
    the cycle model run.

    :returns: :class:`Stats`.
    :raises NicollError: inconsistent schedules, a deadlock, a message whose ends disagree.
    """
    if isinstance(schedules, Plan):
        op = schedules.op if op is None else op
        dtype = schedules.dtype if dtype is None else dtype
        schedules = schedules.schedules
    schedules = tuple(schedules)
    op, dtype = _check_schedules(schedules, buffers, op, dtype)
    cost = CostModel() if cost is None else cost
    ranks = [_Rank(s, None if buffers is None else buffers[r]) for r, s in enumerate(schedules)]
    while True:
        moved = False
        for rank in ranks:
            if rank.done or rank.step.barrier:
                continue
            moved |= _try_send(rank, ranks, cost)
            moved |= _try_finish(rank, op, dtype, cost)
        waiting = [rank for rank in ranks if not rank.done and rank.step.barrier]
        if waiting and len(waiting) == len(ranks):
            # Ref: seed 001, S23: every rank has reached the synchronization.
            release = max(rank.ready for rank in ranks) + cost.barrier(len(ranks))
            for rank in ranks:
                rank.ready = rank.finish = release
                rank.reduction_behind = 0
                rank.counts["barriers"] += 1
                rank.k += 1
                rank._enter()
            moved = True
        if all(rank.done for rank in ranks):
            break
        if not moved:
            raise NicollError(_deadlock(ranks))
    stats = tuple(RankStats(rank=r.rank, steps=len(r.schedule.steps), cycles=r.finish, **r.counts)
                  for r in ranks)
    return Stats(ranks=stats, cycles=max(r.finish for r in ranks), cost=cost)


def _try_send(rank, ranks, cost):
    send = rank.exchange[0]
    if send is None or rank.sent:
        return False
    step = rank.step
    peer = ranks[step.send_to]
    if peer.done or peer.step.barrier:
        return False
    other = peer.step
    if other.recv is None or other.recv_from != rank.rank or other.recv_tag != step.send_tag:
        return False
    where = (f"{rank.where()} sends tag {step.send_tag} to rank {peer.rank}, whose step "
             f"{peer.k} receives it")
    if other.recv.length != step.send.length:
        raise NicollError(f"{where}: {step.send.length} bytes sent, {other.recv.length} expected")
    if other.segments != step.segments:
        raise NicollError(f"{where}: in {step.segments} segments, received in {other.segments}")
    if other.recv_reversed != step.send_reversed:
        raise NicollError(f"{where}: the two ends walk the segments in opposite orders")
    recv = peer.exchange[1]
    if recv is None or peer.received:
        return False
    if recv[0] != send[0]:
        raise NicollError(f"{where}: segment {send[0]} arrives while segment {recv[0]} is expected")
    if rank.buffer is not None:
        peer.staged = rank.read(send[2])
    if rank.t == 0:
        # The step's command and its rendezvous: the receiver's clear-to-send leaves as the
        # receiver becomes ready and reaches the sender a hop later, and the data takes the
        # other hop.  A sender later than the receiver by up to a hop waits that much less.
        start = max(rank.ready - cost.hop, peer.ready)
        end = start + cost.message(send[1])
    else:
        # A later segment is a packet of the same command (docs/engine.md, "Segments become
        # packets"): no second rendezvous.
        end = max(rank.ready, peer.ready) + cost.segment(send[1])
    rank.send_end = peer.recv_end = end
    rank.sent = peer.received = True
    if peer is rank:
        rank.counts["bytes_copied_locally"] += send[1]
    else:
        rank.counts["bytes_sent"] += send[1]
        rank.counts["segments_sent"] += 1
        peer.counts["bytes_received"] += send[1]
        peer.counts["segments_received"] += 1
    return True


def _try_finish(rank, op, dtype, cost):
    send, recv = rank.exchange
    if (send is not None and not rank.sent) or (recv is not None and not rank.received):
        return False
    step = rank.step
    done = max(rank.ready, rank.send_end if send else 0, rank.recv_end if recv else 0)
    reduction_end = 0
    if recv is not None:
        if step.action.reduces:
            if rank.buffer is not None:
                local = rank.read(recv[2]).view(dtype)
                received = rank.staged.view(dtype)
                if step.action is StepAction.REDUCE_LOCAL_FIRST:
                    result = combine(op, local, received)
                else:
                    result = combine(op, received, local)
                rank.write(recv[2], np.ascontiguousarray(result).view(np.uint8))
            reduction_end = max(done, rank.alu_free) + cost.reduction(recv[1])
            rank.alu_free = reduction_end
            rank.counts["bytes_reduced"] += recv[1]
        elif rank.buffer is not None:
            rank.write(recv[2], rank.staged)
    rank.ready = max(done, rank.reduction_behind)
    rank.reduction_behind = reduction_end
    rank.finish = max(rank.finish, done, rank.alu_free)
    rank.t += 1
    rank.sent = rank.received = False
    rank.staged = None
    if rank.t == len(rank.exchanges):
        if step.send is not None and step.send_to != rank.rank:
            rank.counts["messages_sent"] += 1
        if step.recv is not None and step.recv_from != rank.rank:
            rank.counts["messages_received"] += 1
        rank.k += 1
        rank._enter()
    return True


def _deadlock(ranks):
    finished = [r.rank for r in ranks if r.done]
    waits = []
    for rank in ranks:
        if rank.done:
            continue
        step = rank.step
        if step.barrier:
            waits.append(f"{rank.where()} waits at a barrier")
            continue
        send, recv = rank.exchange
        parts = []
        if send is not None and not rank.sent:
            parts.append(f"to send segment {send[0]} to rank {step.send_to} (tag {step.send_tag})")
        if recv is not None and not rank.received:
            parts.append(f"to receive segment {recv[0]} from rank {step.recv_from} "
                         f"(tag {step.recv_tag})")
        waits.append(f"{rank.where()} waits " + " and ".join(parts))
    text = "deadlock: no rank can move; " + "; ".join(waits)
    if finished:
        text += f"; ranks {finished} have finished"
    return text


# -- plans and numpy arrays --------------------------------------------------------------------

def run(plan, inputs, *, cost=None):
    """Load each rank's input array into a fresh buffer, execute the plan, read the outputs.

    Buffer bytes no input covers start as 0xA5, so a schedule that reads scratch before
    writing it shows up in the results.
    """
    if not isinstance(plan, Plan):
        raise NicollError(f"run needs a Plan, not {plan!r}")
    inputs = list(inputs)
    if len(inputs) != plan.nodes:
        raise NicollError(f"the plan is for {plan.nodes} ranks; {len(inputs)} inputs given")
    buffers = []
    for r, (x, schedule) in enumerate(zip(inputs, plan.schedules)):
        x = np.asarray(x)
        if x.dtype != plan.dtype:
            raise NicollError(f"input {r} is {x.dtype}; the plan is for {plan.dtype}")
        if x.size != plan.input_counts[r]:
            raise NicollError(f"input {r} has {x.size} elements; the plan expects "
                              f"{plan.input_counts[r]}")
        raw = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
        buffer = np.full(schedule.buffer_bytes, 0xA5, np.uint8)
        for piece in schedule.load:
            buffer[piece.buffer:piece.buffer + piece.length] = raw[piece.data:piece.data + piece.length]
        buffers.append(buffer)
    stats = execute(plan.schedules, buffers, op=plan.op, dtype=plan.dtype, cost=cost)
    outputs = []
    for r, schedule in enumerate(plan.schedules):
        count = plan.output_counts[r]
        if count is None:
            outputs.append(None)
            continue
        raw = np.empty(count * plan.dtype.itemsize, np.uint8)
        for piece in schedule.result:
            raw[piece.data:piece.data + piece.length] = buffers[r][piece.buffer:piece.buffer + piece.length]
        outputs.append(raw.view(plan.dtype))
    return Outcome(outputs, stats)


def _arrays(xs, *, same_shape=True, flat=False):
    """Check a list of one numpy array per rank: one dtype, one shape (if asked), 1-D (if asked)."""
    if isinstance(xs, np.ndarray) or not hasattr(xs, "__len__"):
        raise NicollError(f"give a list of one numpy array per rank, not {type(xs).__name__}")
    xs = list(xs)
    if not xs:
        raise NicollError("a collective needs at least one node; the list of arrays is empty")
    for r, x in enumerate(xs):
        if not isinstance(x, np.ndarray):
            raise NicollError(f"input {r} must be a numpy array, not {type(x).__name__}")
        if x.dtype != xs[0].dtype:
            raise NicollError(f"input {r} is {x.dtype} but input 0 is {xs[0].dtype}: every rank "
                              f"must give the same dtype")
        if same_shape and x.shape != xs[0].shape:
            raise NicollError(f"input {r} has shape {x.shape} but input 0 has {xs[0].shape}: every "
                              f"rank must give the same shape")
        if flat and x.ndim != 1:
            raise NicollError(f"input {r} must be 1-D, not of shape {x.shape}")
    return xs


def allreduce(xs, op="sum", algorithm="recursive_halving", *, cost=None, **options):
    """:func:`nicoll.schedule.allreduce` on one array per rank; returns an :class:`Outcome`."""
    xs = _arrays(xs)
    plan = _schedule.allreduce(len(xs), xs[0].size, xs[0].dtype, op, algorithm, **options)
    outcome = run(plan, xs, cost=cost)
    return Outcome([y.reshape(xs[0].shape) for y in outcome.outputs], outcome.stats)


def reduce(xs, op="sum", root=0, algorithm="recursive_halving", *, cost=None, **options):
    xs = _arrays(xs)
    plan = _schedule.reduce(len(xs), xs[0].size, xs[0].dtype, op, root, algorithm, **options)
    outcome = run(plan, xs, cost=cost)
    return Outcome([None if y is None else y.reshape(xs[0].shape) for y in outcome.outputs],
                   outcome.stats)


def reduce_scatter(xs, op="sum", counts=None, algorithm="recursive_halving", *, cost=None,
                   **options):
    xs = _arrays(xs, flat=True)
    plan = _schedule.reduce_scatter(len(xs), xs[0].size, xs[0].dtype, op, counts, algorithm,
                                    **options)
    return run(plan, xs, cost=cost)


def allgather(xs, algorithm="recursive_halving", *, cost=None, **options):
    xs = _arrays(xs, same_shape=False, flat=True)
    plan = _schedule.allgather(len(xs), [x.size for x in xs], xs[0].dtype, algorithm, **options)
    return run(plan, xs, cost=cost)


def alltoall(xs, algorithm="pairwise", *, cost=None, **options):
    xs = _arrays(xs, flat=True)
    nodes = len(xs)
    if xs[0].size % nodes:
        raise NicollError(f"all-to-all splits each input into {nodes} equal blocks; "
                          f"{xs[0].size} elements do not split evenly")
    plan = _schedule.alltoall(nodes, xs[0].size // nodes, xs[0].dtype, algorithm, **options)
    return run(plan, xs, cost=cost)


def alltoallv(blocks, algorithm="pairwise", *, cost=None, **options):
    """``blocks[i][j]`` (1-D, may be empty) goes from rank i to rank j; outputs[j][i] is it."""
    if not hasattr(blocks, "__len__") or not len(blocks):
        raise NicollError("alltoallv needs one list of blocks per rank, and at least one rank")
    nodes = len(blocks)
    flat = []
    for i, row in enumerate(blocks):
        if not hasattr(row, "__len__") or len(row) != nodes:
            raise NicollError(f"rank {i} must give {nodes} blocks, one per rank")
        flat.extend(row)
    flat = _arrays(flat, same_shape=False, flat=True)
    sizes = [[blocks[i][j].size for j in range(nodes)] for i in range(nodes)]
    plan = _schedule.alltoallv(sizes, flat[0].dtype, algorithm, **options)
    inputs = [np.concatenate(list(row)) if nodes else row for row in blocks]
    outcome = run(plan, inputs, cost=cost)
    outputs = []
    for j, y in enumerate(outcome.outputs):
        bounds = np.cumsum([0] + [sizes[i][j] for i in range(nodes)])
        outputs.append([y[bounds[i]:bounds[i + 1]] for i in range(nodes)])
    return Outcome(outputs, outcome.stats)


if __name__ == "__main__":
    from .schedule_figures import figures
    print(figures())
