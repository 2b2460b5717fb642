"""The checks of the compilers' arguments every collective shares (nodes, element types,
roots, counts, segments, the algorithm's name) and :class:`Compiler`, an entry of the
algorithm registries, which says which options each algorithm takes.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import NicollError
from ..ops import check_op_dtype, numpy_dtype, resolve_dtype
from .step_format import _integer

__all__ = ["Compiler", "split_counts"]


@dataclass(frozen=True)
class Compiler:
    """An algorithm of a registry: the function that emits its steps, and its options.

    ``options`` maps each option the algorithm takes, besides the ``segments`` every one
    takes, to the collectives it applies to; ``compile`` gets those as keywords.
    """
    compile: Callable
    options: dict = field(default_factory=dict)

    def taken_options(self, algorithm, collective, **given):
        """The options of ``given`` (``None``: not given) that ``compile`` takes in
        ``collective``; one given that it does not take is refused."""
        taken = {}
        for name, value in given.items():
            if collective in self.options.get(name, ()):
                taken[name] = value
            elif value is not None:
                raise NicollError(f"{name} does not apply to algorithm {algorithm!r}")
        return taken


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
