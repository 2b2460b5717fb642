# Ref: seed 000 (CN101206588): pipelined recursive halving, figs. 3, 6, 7, 8.
# Ref: seed 001 (CN, 2022): buffer-limited in-place all-to-all, steps S1, S21-S23.
# Ref: seed 002 (ICT/CAS): many-to-one reduction over a general logical topology.
"""Collectives compiled into per-rank schedules: algorithms are data (seed 002).

A collective over N ranks compiles into a :class:`Plan`: one :class:`Schedule` per rank (a
list of :class:`Step` commands) plus where each rank's input goes in its device buffer and
where its output is read back.  The engine that runs a schedule knows nothing of rings,
trees or recursive halving; :mod:`nicoll.plan.schedule_exec` runs the same schedules in numpy and
:mod:`nicoll.plan.reduction_order` gives the order in which each algorithm combines the inputs.

Modules
-------
- :mod:`~nicoll.schedule.step_format`: the step format (the engine's command), schedules and
  plans, and the overlaps a step may not have;
- :mod:`~nicoll.schedule.builder`: the builder the compilers write schedules with;
- :mod:`~nicoll.schedule.arguments`: the argument checks every collective shares, and
  :class:`~nicoll.schedule.arguments.Compiler`, an entry of an algorithm registry;
- :mod:`~nicoll.schedule.reductions`: the reduction collectives, their registry
  ``REDUCTION_COMPILERS``, recursive halving and the ring;
- :mod:`~nicoll.schedule.trees`: the tree shapes and the tree and pipelined-tree compilers;
- :mod:`~nicoll.schedule.all_to_all`: ``alltoall`` with its registry ``ALLTOALL_COMPILERS``,
  and ``alltoallv``.

Algorithms
----------
Reductions (``allreduce``, ``reduce``, ``reduce_scatter``, ``allgather``):
``"recursive_halving"`` (seed 000), ``"ring"``, ``"tree"`` (the tree shapes of
:data:`TREE_SHAPES`, including seed 002's 1-ring ``"chain"`` and ``"2-tree"``) and
``"prt"`` (the pipelined tree seed 000 improves on).  All-to-all: ``"pairwise"``,
``"bruck"`` and ``"inplace"`` (seed 001); ``alltoallv`` by pairwise exchange.
``docs/algorithms.md`` describes each one's steps, reduction order and traffic.
"""

from .all_to_all import ALLTOALL_ALGORITHMS, alltoall, alltoallv
from .arguments import split_counts
from .reductions import (DEFAULT_SEGMENTS, DEFAULT_SLICES, REDUCTION_ALGORITHMS, allgather, allreduce,
                         reduce, reduce_scatter)
from .step_format import Piece, Plan, Region, Schedule, Step, StepAction, step_hazards, time_segments
from .trees import DEFAULT_PRT_SLICES, TREE_SHAPES, tree_children

__all__ = [
    "StepAction", "Region", "Step", "Piece", "Schedule", "Plan",
    "REDUCTION_ALGORITHMS", "ALLTOALL_ALGORITHMS", "TREE_SHAPES",
    "DEFAULT_SLICES", "DEFAULT_SEGMENTS", "DEFAULT_PRT_SLICES",
    "allreduce", "reduce", "reduce_scatter", "allgather", "alltoall", "alltoallv",
    "tree_children", "split_counts", "time_segments", "step_hazards",
]
