"""Planners and references: what the host works out off the device, before and after a run.

The repack units' subgroup planner (:mod:`~nicoll.plan.repack`) with its cost model
(:mod:`~nicoll.plan.repack_cost`), the bytes of its messages
(:mod:`~nicoll.plan.repack_message`), its numpy reference
(:mod:`~nicoll.plan.repack_reference`) and the argument checks they share
(:mod:`~nicoll.plan.repack_checks`); the numpy executor of the engine's schedules
(:mod:`~nicoll.plan.schedule_exec`) with its cycle model (:mod:`~nicoll.plan.schedule_cost`)
and the figures of ``docs/algorithms.md`` (:mod:`~nicoll.plan.schedule_figures`); the order
in which each reduction algorithm combines the inputs (:mod:`~nicoll.plan.reduction_order`);
the tuning of the approximate-computing barrier's thresholds (:mod:`~nicoll.plan.actune`).
The compilers of the schedules themselves are :mod:`nicoll.schedule`.
"""

__all__ = []
