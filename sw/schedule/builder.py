"""The builder the compilers write schedules with (``_Builder``): it collects each rank's
steps as transfers, then numbers the messages, chooses the piece orders and sets the fences;
and the buffer layout helpers the compilers share (``_place`` lays chunks out in a buffer,
``_pieces`` says what a rank loads and reads back).
"""

from nicoll.hw.engine import StepAction

from .step_format import Piece, Region, Schedule, Step, step_hazards

__all__ = []


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


def _place(chunk_at, chunks, order):
    """Lay the chunks out in the buffer in ``order``."""
    at = 0
    for c in order:
        chunk_at[c] = at
        at += chunks[c]
