"""Helpers for components whose ``elaborate`` is split into builder methods that share their
signals through a ``types.SimpleNamespace`` (the engine, the repack unit and control tree),
a state machine kept one-hot, and carry-save addition."""

from contextlib import contextmanager

from amaranth.hdl import Cat, Const, Signal, Value

__all__ = ["OneHotStates", "carry_save", "carry_save_sum", "share"]


def share(namespace, names):
    """Add a builder method's local ``names`` to ``namespace``, where the next builder method
    of the same ``elaborate`` finds them."""
    namespace.__dict__.update({k: x for k, x in names.items() if k not in ("self", "m", "v")})


class OneHotStates:
    """A state machine kept as one flop per state, set on entry and cleared on exit.

    Amaranth's ``m.FSM`` stores a binary state that yosys does not re-encode (the register
    has an initial value, which yosys's FSM extraction refuses), so every state's decode is
    a LUT level in front of each decision, and the transitions meet in the code's few bits
    (the 64-bit core's routed paths at every seed of 8e689a2 ran through the repack control
    tree's state decode and next-state logic, 7.8-8.3 ns).  Here a state's flag is a flop
    that the logic reads directly, and a transition writes two flags.

    Use ``with states.state(name):`` where ``m.FSM`` has ``with m.State(name):``, and
    :meth:`next` where it assigns ``m.next``.  A transition outside a state's block names
    its source state (``states.next("IDLE", source="RUN")``); it must be made only while
    that state is current.
    """

    def __init__(self, m, names, *, init, name):
        names = list(names)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"State names must be distinct and at least one, not {names!r}")
        if init not in names:
            raise ValueError(f"Initial state must be one of {names!r}, not {init!r}")
        self._m = m
        self._current = None
        self.flags = {state: Signal(name=f"{name}_{state.lower()}", init=int(state == init))
                      for state in names}

    def __getitem__(self, state):
        return self.flags[state]

    def any(self, *states):
        """Whether the machine is in one of ``states`` (an OR of their flags)."""
        return Cat(self.flags[state] for state in states).any()

    def count(self):
        """How many flags are set: 1 in every cycle (tests check it)."""
        return sum(self.flags.values())

    @contextmanager
    def state(self, state):
        """The statements of the block act while ``state`` is current."""
        if self._current is not None:
            raise RuntimeError(f"State {state!r} is nested in state {self._current!r}")
        self._current = state
        try:
            with self._m.If(self.flags[state]):
                yield
        finally:
            self._current = None

    def next(self, target, *, source=None):
        """Go from ``source`` (by default the state whose block this is) to ``target`` at
        the next clock edge; staying is no transition."""
        source = self._current if source is None else source
        if source is None:
            raise RuntimeError(f"A transition to {target!r} outside a state must name its "
                               f"source")
        if target != source:
            self._m.d.sync += [self.flags[source].eq(0), self.flags[target].eq(1)]


def carry_save(values, width):
    """``values`` (unsigned) as two ``width``-bit values whose sum is theirs modulo
    ``2**width``: carry-save stages, three operands to two per stage, one LUT level each and
    no carry from bit to bit.  A sum of several operands then takes one carry chain where
    an adder tree puts a chain per level in series."""
    values = [Cat(Value.cast(x), Const(0, width))[:width] for x in values]
    values += [Const(0, width)] * max(0, 2 - len(values))
    while len(values) > 2:
        x, y, z = values[:3]
        sums = x ^ y ^ z
        carries = Cat(Const(0, 1), (x & y) | (x & z) | (y & z))[:width]
        values = values[3:] + [sums, carries]
    return values


def carry_save_sum(values, width):
    """Sum of ``values`` (unsigned, modulo ``2**width``) as carry-save stages and one carry
    chain.  For the four partial sums of the repack unit's 256-bit table beat that is two
    LUT levels and one chain, where the adder tree put two chains in series (its latest pin
    alone at seeds 1 and 3 of abe24a0: the partial sums -> the tree -> the input slice's
    ``tsum``, 17 levels, 5.13 ns)."""
    x, y = carry_save(values, width)
    return (x + y)[:width]
