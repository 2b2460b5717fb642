"""nicoll: an open collective-offload engine for FPGA SmartNICs — the host side.

Layers, bottom up, one folder each: the driver of one node (:mod:`nicoll.driver`: a transport
per node, one per backend; the register access layer generated from the SystemRDL map; a
:class:`Device` with its block drivers), the device model that is the fastest backend
(:mod:`nicoll.model`), the collective compilers (:mod:`nicoll.schedule`), the planners and
references the host works out off the device (:mod:`nicoll.plan`), a :class:`Cluster` of N
nodes that runs collectives and barriers (:mod:`nicoll.cluster`) and the command line
(:mod:`nicoll.cli`).  Beside them: the error type (:mod:`nicoll.errors`), the numpy reference
of the reduction ops (:mod:`nicoll.ops`), a cluster's build parameters (:mod:`nicoll.config`),
the arithmetic of a region's bytes (:mod:`nicoll.region_bytes`) and the network's parameters
and their costs in cycles (:mod:`nicoll.fabric`), and the faults the simulated network can
inject (:mod:`nicoll.faults`).  A rank of an MPI program drives its own
node of a cluster served by ``nicoll serve`` through :func:`connect` (:mod:`nicoll.remote`;
:mod:`nicoll.mpi` puts mpi4py's signatures over it).
"""

from .cluster import Cluster
from .config import BACKENDS, DATA_WIDTHS
from .driver.device import Device
from .errors import NicollError
from .fabric import FABRICS, Fabric
from .faults import Faults, FaultTarget
from .remote import connect

__all__ = ["Cluster", "Device", "NicollError", "BACKENDS", "DATA_WIDTHS", "Fabric", "FABRICS",
           "Faults", "FaultTarget", "connect"]
__version__ = "0.1.0"
