"""Where a region's bytes are: the one arithmetic of the schedules, the device model and the
tests, the walk the gateware's RegionWalker makes (:mod:`nicoll.hw.engine.walker`).

A region is ``length`` bytes of a buffer taken ``run`` bytes at a time, run k starting at
``offset + k * stride``; the last run may be shorter.  With ``run`` 0 or at least ``length``
it is the contiguous range ``offset .. offset + length`` (a command's fields, COMMAND_LAYOUT,
say "contiguous" with run 0; :class:`nicoll.schedule.Region` with run = length).  Every
function takes the four fields as integers, so a command's field dict passes as ``**region``.
"""

import numpy as np

__all__ = ["strided", "intervals", "end", "byte_addresses", "rows"]


def strided(offset, length, run, stride):
    """Whether the region is taken in runs (0 < run < length)."""
    return 0 < run < length


def intervals(offset, length, run, stride, start=0, stop=None):
    """Buffer byte ranges ``[(a, b), ...]`` of the region's stream bytes ``start .. stop``, in
    stream order (ascending: a stride is at least its run)."""
    stop = length if stop is None else stop
    if start >= stop:
        return []
    if not strided(offset, length, run, stride):
        return [(offset + start, offset + stop)]
    out = []
    for k in range(start // run, (stop - 1) // run + 1):
        shift = offset + k * (stride - run)
        out.append((shift + max(start, k * run), shift + min(stop, (k + 1) * run)))
    return out


def end(offset, length, run, stride):
    """One past the region's last byte (``offset`` for an empty region)."""
    if not strided(offset, length, run, stride):
        return offset + length
    runs = -(-length // run)
    return offset + (runs - 1) * stride + length - (runs - 1) * run


def byte_addresses(offset, length, run, stride):
    """The buffer address of each stream byte: a slice for a contiguous region, else an
    int64 array."""
    if not strided(offset, length, run, stride):
        return slice(offset, offset + length)
    at = np.arange(length, dtype=np.int64)
    return offset + (at // run) * stride + at % run


def rows(offset, length, run, stride, width):
    """Rows of ``width`` bytes the region's runs touch, counted once per run that touches
    them (the beats a reducing receive puts through the ALU)."""
    if length == 0:
        return 0
    if not strided(offset, length, run, stride):
        return (offset + length - 1) // width - offset // width + 1
    runs = -(-length // run)
    starts = offset + np.arange(runs, dtype=np.int64) * stride
    ends = starts + run
    ends[-1] = starts[-1] + length - (runs - 1) * run
    return int(((ends - 1) // width - starts // width + 1).sum())
