# Ref: seed 000 (CN101206588), operations 308-318: segment j+1 is exchanged while segment j
#      is reduced; an iteration's last reduction overlaps the next iteration's first exchange.
"""The cycle model of the numpy executor of schedules (:mod:`nicoll.plan.schedule_exec`), which
runs it alongside the schedules.

Cycle model
-----------
:class:`CostModel` is a first-order estimate for comparing schedules, not a measurement
(measured cycles come from the hardware counters of a simulated cluster).  It assumes a
non-blocking switch and full-duplex links; a message costs ``message_cycles`` plus its
bytes at ``link_bytes_per_cycle`` and starts when both ends are ready, and a message in
segments pays ``message_cycles`` with its first segment only (the engine sends a step's
segments as packets of one command: :meth:`CostModel.segment`); a reduction costs its
bytes at ``alu_bytes_per_cycle`` and runs on one ALU per rank; the exchange of piece j+1
starts when piece j's exchange and piece j-1's reduction are done (so piece j's reduction
overlaps it); a step with ``fence`` and a barrier wait for every reduction; a barrier costs
``barrier_cycles``, and ``barrier_level_cycles`` per level of its tree, after the last
arrival.  ``python -m nicoll.plan.schedule_exec`` prints the
figures of ``docs/algorithms.md``.

The network (``fabric``, a :class:`nicoll.Fabric`, converted at ``clock_mhz``) adds to each
segment what its packets cost beyond their beats (per-packet bytes, minimum frame, the link
rate), and to each message two hops: the clear-to-send's way to the sender (with its own
packet), which leaves as soon as the receiver is ready (a sender up to a hop later waits that
much less), and the data's way back; to a barrier 2 · depth · hop for a binary tree over
the ranks.  On the default ``"ideal"`` fabric all of that is 0.
"""

import math
from dataclasses import dataclass, field

from ..fabric import FABRICS, NOMINAL_MHZ, Fabric, resolve_fabric

__all__ = ["CostModel", "MEASURED_MESSAGE_CYCLES", "MEASURED_BARRIER_CYCLES",
           "cluster_cost_model"]

#: The fixed cycles of one piece (``CostModel.message_cycles``) fitted to the simulated cluster
#: per data width: its engines' command handling, the clear-to-send round on the cluster's own
#: wire, the header beats (four at 64 bits, one at 256).  Fitted to all-to-all sweeps on
#: Verilator, pairwise and bruck, blocks of 8, 64 and 512 bytes, on "ideal" and "roce100"
#: (docs/fabric.md, "Calibration", gives the commands and the figures).
MEASURED_MESSAGE_CYCLES = {64: 40, 256: 40}
#: A barrier's release on the simulated cluster, after the last done, for a binary tree of
#: depth d: 2 + 18·d cycles on its own wire (56 at N = 8, 74 at N = 16, 256 bits, Verilator)
#: and 2·d hops more on a fabric (exactly so, on "roce100").  Two points, two parameters.
MEASURED_BARRIER_CYCLES = (2, 18)


@dataclass(frozen=True)
class CostModel:
    """Assumed costs, in cycles of the engine clock (data_width 256: 32 bytes a cycle)."""
    message_cycles: int = 64
    link_bytes_per_cycle: int = 32
    alu_bytes_per_cycle: int = 32
    barrier_cycles: int = 100
    #: Cycles a barrier adds per level of its tree besides the hops (the units' own work on
    #: the way up and down).
    barrier_level_cycles: int = 0
    #: The network between the ranks (module docstring); its figures at ``clock_mhz``.
    fabric: Fabric = field(default=FABRICS["ideal"], repr=False)
    clock_mhz: float = field(default=NOMINAL_MHZ, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "fabric", resolve_fabric(self.fabric))
        self.fabric.cycles(0, self.clock_mhz)          # checks the clock

    def message(self, nbytes):
        width = 8 * self.link_bytes_per_cycle
        network = (self.fabric.message_extra_cycles(nbytes, self.clock_mhz, width)
                   + self.fabric.packet_cycles(0, self.clock_mhz, width)
                   + 2 * self.fabric.hop_cycles(self.clock_mhz))
        return self.message_cycles + math.ceil(nbytes / self.link_bytes_per_cycle) + network

    @property
    def hop(self):
        """One hop of the fabric, NIC to NIC, in cycles (0 on ``"ideal"``)."""
        return self.fabric.hop_cycles(self.clock_mhz)

    def segment(self, nbytes):
        """A message's later segment: a packet of the same command, so its beats and what
        the wire adds to them, without the message's fixed cost and hops."""
        width = 8 * self.link_bytes_per_cycle
        return (math.ceil(nbytes / self.link_bytes_per_cycle)
                + self.fabric.message_extra_cycles(nbytes, self.clock_mhz, width))

    def barrier(self, nodes):
        """Cycles from the last arrival at a barrier of ``nodes`` ranks to its release."""
        depth = max(nodes - 1, 0).bit_length()
        return (self.barrier_cycles
                + depth * (self.barrier_level_cycles + 2 * self.fabric.hop_cycles(self.clock_mhz)))

    def reduction(self, nbytes):
        return math.ceil(nbytes / self.alu_bytes_per_cycle)


def cluster_cost_model(data_width, *, fabric=None, clock_mhz=NOMINAL_MHZ):
    """The :class:`CostModel` of a simulated cluster of ``data_width``: a beat a cycle on the
    links and into the ALU, the per-piece cycles measured at that width
    (:data:`MEASURED_MESSAGE_CYCLES`; at a width not measured, those of the nearest one),
    and ``fabric`` at ``clock_mhz``."""
    nearest = min(MEASURED_MESSAGE_CYCLES, key=lambda w: (abs(w - data_width), w))
    base, per_level = MEASURED_BARRIER_CYCLES
    return CostModel(message_cycles=MEASURED_MESSAGE_CYCLES[nearest],
                     link_bytes_per_cycle=data_width // 8, alu_bytes_per_cycle=data_width // 8,
                     barrier_cycles=base, barrier_level_cycles=per_level,
                     fabric=fabric, clock_mhz=clock_mhz)
