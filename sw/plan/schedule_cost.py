# Ref: seed 000 (CN101206588), operations 308-318: segment j+1 is exchanged while segment j
#      is reduced; an iteration's last reduction overlaps the next iteration's first exchange.
"""The cycle model of the numpy executor of schedules (:mod:`nicoll.plan.schedule_exec`), which
runs it alongside the schedules.

Cycle model
-----------
:class:`CostModel` is a first-order estimate for comparing schedules, not a measurement
(measured cycles come from the hardware counters of a simulated cluster).  It assumes a
non-blocking switch and full-duplex links; each piece costs ``message_cycles`` plus its
bytes at ``link_bytes_per_cycle`` and starts when both ends are ready; a reduction costs its
bytes at ``alu_bytes_per_cycle`` and runs on one ALU per rank; the exchange of piece j+1
starts when piece j's exchange and piece j-1's reduction are done (so piece j's reduction
overlaps it); a step with ``fence`` and a barrier wait for every reduction; a barrier costs
``barrier_cycles`` after the last arrival.  ``python -m nicoll.plan.schedule_exec`` prints the
figures of ``docs/algorithms.md``.
"""

import math
from dataclasses import dataclass

__all__ = ["CostModel"]


@dataclass(frozen=True)
class CostModel:
    """Assumed costs, in cycles of the engine clock (data_width 256: 32 bytes a cycle)."""
    message_cycles: int = 64
    link_bytes_per_cycle: int = 32
    alu_bytes_per_cycle: int = 32
    barrier_cycles: int = 100

    def message(self, nbytes):
        return self.message_cycles + math.ceil(nbytes / self.link_bytes_per_cycle)

    def reduction(self, nbytes):
        return math.ceil(nbytes / self.alu_bytes_per_cycle)
