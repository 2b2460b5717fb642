"""The timing every cluster call shares: the common start cycle every node is armed for
before it comes, and the pause between two polls of a wait for the nodes.
"""

from ..errors import NicollError

__all__ = ["ARM_ACCESSES", "start_cycle", "check_armed_in_time", "poll_pause",
           "core_clock_mhz"]

#: Bus accesses that arm one node (a 64-bit cycle and a CONTROL write), for the common start.
ARM_ACCESSES = 3


def start_cycle(clock, accesses, nodes):
    """A cycle far enough ahead that every one of ``nodes`` nodes can be armed for it first:
    ``accesses`` bus accesses per node, measured on ``clock`` (a Device), with a margin of two."""
    first = clock.cycles()
    per_read = clock.cycles() - first       # one 64-bit read: two bus accesses
    return first + per_read * (accesses * nodes + 4) + 64


def check_armed_in_time(clock, start, what):
    """Raise NicollError if arming ``what`` (the engines, the completions) took until the
    common ``start`` cycle or past it, read on ``clock`` (a Device): a start already past
    would fire late on some nodes and never on others."""
    armed_by = clock.cycles()
    if armed_by >= start:
        raise NicollError(f"arming {what} took until cycle {armed_by}, past the start "
                          f"{start}; the backend's bus is slower than measured")


def poll_pause(elapsed):
    """Cycles to let pass between two polls of a wait that has run ``elapsed`` cycles: an
    eighth of the time so far, 16 to 4096.  A simulator then spends its time simulating,
    not answering status reads, and notices the end at most about 12 % late in simulated
    time, which no figure counts: cycles come from the hardware's START/FINISHED counters."""
    return max(16, min(4096, max(0, elapsed) // 8))


def core_clock_mhz(data_width):
    """The clock (MHz) a NIC core of ``data_width`` runs at: the Fmax recorded for it in
    ``docs/synthesis.json``, else the nominal clock (the figure ``nicoll demo`` and ``nicoll
    bench`` convert cycles to time at)."""
    from ..core_clock import recorded_clock
    return recorded_clock(data_width)[0]
